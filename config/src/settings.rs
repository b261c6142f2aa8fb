//! Broker settings in rabbitmq.conf's sysctl format (`listeners.tcp.default = 5672`).
//!
//! [`Settings::default`] holds Warren's embedded defaults; a configuration file and then
//! `--set KEY=VALUE` arguments are applied on top, one key at a time, through
//! [`Settings::set`]. An unknown key or a bad value stops start-up with a message naming it:
//! a typo must never silently fall back to a default.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cluster::ClusterSettings;
use crate::error::ConfigError;
use crate::listen_addr::ListenAddr;
use crate::mqtt::MqttSettings;
use crate::stomp::StompSettings;
use crate::stream::StreamProtocolSettings;

/// RabbitMQ's (and so Warren's) smallest negotiable frame size.
pub const FRAME_MIN_SIZE: u32 = 4096;

/// RabbitMQ's hard ceiling for `max_message_size`: 512 MiB.
pub const MAX_MESSAGE_SIZE_LIMIT: usize = 512 * 1024 * 1024;

/// How much a broker logs, from most to least verbose (`log.console.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum LogLevel {
    /// `debug`
    Debug,
    /// `info`, the default.
    #[default]
    Info,
    /// `warning`
    Warning,
    /// `error`
    Error,
    /// `critical`
    Critical,
    /// `none`: log nothing.
    None,
}

impl LogLevel {
    /// The level named as in rabbitmq.conf (`debug`, `info`, `warning`, `error`, `critical`,
    /// `none`).
    pub fn from_name(name: &str) -> Option<LogLevel> {
        Some(match name {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            "critical" => LogLevel::Critical,
            "none" => LogLevel::None,
            _ => return None,
        })
    }

    /// The rabbitmq.conf name of the level.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::None => "none",
        }
    }

    /// The nearest `tracing` filter directive (`tracing` has no "critical", so it maps to
    /// `error`; `none` maps to `off`).
    pub fn tracing_directive(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warning => "warn",
            LogLevel::Error | LogLevel::Critical => "error",
            LogLevel::None => "off",
        }
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `ssl_options.*`: TLS settings of the AMQPS listener, as RabbitMQ names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SslOptions {
    /// `ssl_options.certfile`: PEM certificate chain.
    pub certfile: Option<PathBuf>,
    /// `ssl_options.keyfile`: PEM private key.
    pub keyfile: Option<PathBuf>,
    /// `ssl_options.cacertfile`: PEM CA certificates for client certificates.
    pub cacertfile: Option<PathBuf>,
    /// `ssl_options.verify = verify_peer`: ask clients for a certificate and check it.
    pub verify_peer: bool,
    /// `ssl_options.fail_if_no_peer_cert = true`: refuse clients without a certificate.
    pub fail_if_no_peer_cert: bool,
}

/// Client-certificate checks of an HTTPS endpoint (`management.ssl.*`, `prometheus.ssl.*`),
/// with the meaning of the `ssl_options.*` keys of the same names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerVerification {
    /// `*.ssl.cacertfile`: PEM CA certificates for client certificates.
    pub cacertfile: Option<PathBuf>,
    /// `*.ssl.verify = verify_peer`: ask clients for a certificate and check it.
    pub verify_peer: bool,
    /// `*.ssl.fail_if_no_peer_cert = true`: refuse clients without a certificate.
    pub fail_if_no_peer_cert: bool,
}

/// The limits of one HTTP listener (the management API over HTTP or HTTPS, Prometheus):
/// `management.http.max_body_size`, `management.tcp.max_connections` /
/// `management.ssl.max_connections`, `management.tcp.idle_timeout` /
/// `management.ssl.idle_timeout`, with RabbitMQ's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// The largest request body in bytes; a larger one is answered 413 (RabbitMQ's default:
    /// 10,000,000 bytes, about 100k queues of definitions).
    pub max_body_size: usize,
    /// The most connections at once; more are closed as soon as they are accepted. `None`
    /// (`infinity`) for no limit. Default 1024 (Ranch's, which RabbitMQ's listener inherits).
    pub max_connections: Option<usize>,
    /// How long a connection may stay idle (no request in progress, nothing sent or
    /// received) before it is closed; also the longest a client may take to send a request's
    /// headers. Default 60 s (Cowboy's `idle_timeout`).
    pub idle_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            max_body_size: 10_000_000,
            max_connections: Some(1024),
            idle_timeout: Duration::from_millis(60_000),
        }
    }
}

/// Which part of a client certificate names the user it logs in as
/// (`ssl_cert_login_from`), for SASL EXTERNAL and `mqtt.ssl_cert_login`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CertLoginFrom {
    /// `distinguished_name`, RabbitMQ's default: the whole subject, as
    /// `CN=name,O=organisation,...` (RFC 4514 order).
    #[default]
    DistinguishedName,
    /// `common_name`: the subject's common name (CN).
    CommonName,
}

/// The SASL mechanisms AMQP 0-9-1 may offer (`auth_mechanisms.N`).
pub const AUTH_MECHANISMS: &[&str] = &["PLAIN", "AMQPLAIN", "EXTERNAL"];

/// Everything the broker reads at start-up. Field docs name the rabbitmq.conf key.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// `listeners.tcp.default`: the AMQP listener. Default `0.0.0.0:5672`.
    pub amqp_listener: ListenAddr,
    /// `listeners.tcp.<name>` for any other name: further AMQP listeners, in the order first
    /// given; setting a name again replaces its address.
    pub additional_amqp_listeners: Vec<(String, ListenAddr)>,
    /// `default_vhost`: the virtual host created on first boot. Default `/`.
    pub default_vhost: String,
    /// `default_user`: the user created on first boot. Default `guest`.
    pub default_user: String,
    /// `default_pass`: that user's password. Default `guest`.
    pub default_pass: String,
    /// `loopback_users`: users that may only connect from the loopback interface. Default
    /// `["guest"]`. Set with `loopback_users = none`, `loopback_users = a,b` or, RabbitMQ's
    /// form, `loopback_users.<name> = true|false`.
    pub loopback_users: Vec<String>,
    /// `heartbeat`: the heartbeat interval offered to clients, in seconds; 0 disables.
    /// Default 60.
    pub heartbeat: u16,
    /// `frame_max`: the largest frame offered to clients, in bytes, at least 4096.
    /// Default 131072.
    pub frame_max: u32,
    /// `channel_max`: the most channels per connection offered to clients (0 means the
    /// protocol maximum, 65535). Default 2047.
    pub channel_max: u16,
    /// `max_message_size`: the largest message body accepted, in bytes, at most 512 MiB.
    /// Default 16 MiB.
    pub max_message_size: usize,
    /// `data_dir` (Warren-specific): where messages and metadata are stored. Default
    /// `warren-data`, relative to the working directory.
    pub data_dir: PathBuf,
    /// `load_definitions`: a RabbitMQ definitions.json file applied at boot. Default none.
    pub load_definitions: Option<PathBuf>,
    /// `log.console.level`. Default `info`.
    pub log_level: LogLevel,
    /// `handshake_timeout` (milliseconds in the file): how long a client may take to complete
    /// the protocol handshake. Default 10 s.
    pub handshake_timeout: Duration,
    /// `connection_max`: the most client connections at once; `None` (`infinity`) for no
    /// limit. Default `infinity`.
    pub connection_max: Option<usize>,
    /// `plugins.consistent_hash_exchange`: enables the `x-consistent-hash` exchange type
    /// (off by default, as RabbitMQ's plugin is).
    pub consistent_hash_exchange: bool,
    /// `management.tcp.ip` / `management.tcp.port`: the management HTTP API. Default
    /// `0.0.0.0:15672`.
    pub management_listener: ListenAddr,
    /// `plugins.management` (Warren-specific): serve the management HTTP API. Default true.
    pub management_enabled: bool,
    /// `listeners.ssl.default`: the AMQPS (AMQP 0-9-1 over TLS) listener, usually 5671.
    /// Default none; needs `ssl_options.certfile` and `ssl_options.keyfile`.
    pub amqps_listener: Option<ListenAddr>,
    /// `ssl_options.*`: certificates and client verification for AMQPS, MQTTS and STOMP
    /// over TLS.
    pub ssl_options: SslOptions,
    /// `ssl_cert_login_from`: which part of a client certificate names its user.
    /// Default `distinguished_name`, as RabbitMQ.
    pub ssl_cert_login_from: CertLoginFrom,
    /// `auth_mechanisms.N`: the SASL mechanisms AMQP 0-9-1 offers, in order, as
    /// `(N, mechanism)`; `None` until the first such key is given, meaning RabbitMQ's
    /// default `PLAIN AMQPLAIN`. See [`Settings::auth_mechanisms`].
    pub auth_mechanism_keys: Option<Vec<(String, String)>>,
    /// `server_properties.<name>`: AMQP 0-9-1 server properties (connection.start) added or
    /// overriding Warren's, as RabbitMQ's `server_properties` setting, in the order first
    /// given; values are strings. `capabilities` cannot be set: they are always RabbitMQ's.
    pub server_properties: Vec<(String, String)>,
    /// `management.ssl.port` / `management.ssl.ip`: the management API over HTTPS, in addition
    /// to HTTP. Default none; needs `management.ssl.certfile` and `management.ssl.keyfile`.
    pub management_tls_listener: Option<ListenAddr>,
    /// `management.ssl.certfile`: PEM certificate chain for HTTPS.
    pub management_tls_certfile: Option<PathBuf>,
    /// `management.ssl.keyfile`: PEM private key for HTTPS.
    pub management_tls_keyfile: Option<PathBuf>,
    /// `management.ssl.cacertfile`, `management.ssl.verify`,
    /// `management.ssl.fail_if_no_peer_cert`: client certificates on the HTTPS API.
    pub management_tls_verification: PeerVerification,
    /// `management.http.max_body_size`, `management.tcp.max_connections`,
    /// `management.tcp.idle_timeout`: the limits of the management API over HTTP.
    pub management_http: HttpLimits,
    /// `management.http.max_body_size`, `management.ssl.max_connections`,
    /// `management.ssl.idle_timeout`: the limits of the management API over HTTPS.
    pub management_https: HttpLimits,
    /// `prometheus.tcp.ip` / `prometheus.tcp.port`: Prometheus metrics. Default
    /// `0.0.0.0:15692`.
    pub prometheus_listener: ListenAddr,
    /// `prometheus.ssl.port` / `prometheus.ssl.ip`: Prometheus metrics over HTTPS (usually
    /// 15691), in addition to HTTP. Default none; needs `prometheus.ssl.certfile` and
    /// `prometheus.ssl.keyfile`.
    pub prometheus_tls_listener: Option<ListenAddr>,
    /// `prometheus.ssl.certfile`: PEM certificate chain for the metrics endpoint over HTTPS.
    pub prometheus_tls_certfile: Option<PathBuf>,
    /// `prometheus.ssl.keyfile`: PEM private key for the metrics endpoint over HTTPS.
    pub prometheus_tls_keyfile: Option<PathBuf>,
    /// `prometheus.ssl.cacertfile`, `prometheus.ssl.verify`,
    /// `prometheus.ssl.fail_if_no_peer_cert`: client certificates on metrics over HTTPS.
    pub prometheus_tls_verification: PeerVerification,
    /// `plugins.prometheus` (Warren-specific): serve Prometheus metrics. Default true.
    pub prometheus_enabled: bool,
    /// `consumer_timeout`: milliseconds a delivery may stay unacknowledged before its channel
    /// is closed with 406 (RabbitMQ's default: 30 minutes); `None` (`false`) disables it.
    pub consumer_timeout: Option<Duration>,
    /// `collect_statistics_interval`: milliseconds between the management plugin's samples
    /// of the message counters, over which message rates are computed (RabbitMQ's default:
    /// 5000).
    pub collect_statistics_interval: Duration,
    /// `management.sample_retention_seconds` (Warren-specific): how long the management
    /// plugin keeps each active object's rate and length history for `msg_rates_age` /
    /// `lengths_age` queries (600 s, RabbitMQ's first `basic` retention tier); 0 keeps none.
    pub management_sample_retention: Duration,
    /// `vm_memory_high_watermark.relative` / `.absolute`: the memory use above which the
    /// memory alarm blocks publishers. Default 0.6 of the memory available.
    pub memory_high_watermark: MemoryHighWatermark,
    /// `total_memory_available_override_value`: the memory the relative watermark is taken
    /// of, instead of what the machine (or its cgroup) reports. Default none.
    pub total_memory_override: Option<u64>,
    /// `disk_free_limit.absolute` / `.relative`: the free space on the data directory's disk
    /// below which the disk alarm blocks publishers. Default 50MB.
    pub disk_free_limit: DiskFreeLimit,
    /// The `stomp.` keys: the STOMP listener.
    pub stomp: StompSettings,
    /// `node_name`, `cluster_name`, the `cluster.` keys and the seed list.
    pub cluster: ClusterSettings,
    /// The `stream.` keys: the stream protocol listener (port 5552).
    pub stream: StreamProtocolSettings,
    /// The `mqtt.*` keys: the MQTT listener.
    pub mqtt: MqttSettings,
    /// The `web_mqtt.*` keys: MQTT over WebSocket.
    pub web_mqtt: crate::web::WebSettings,
    /// The `web_stomp.*` keys: STOMP over WebSocket.
    pub web_stomp: crate::web::WebSettings,
    /// The `web_amqp.*` keys: AMQP 1.0 over WebSocket.
    pub web_amqp: crate::web::WebSettings,
    /// `msg_store_file_size_limit`: size at which the message store closes a segment file
    /// and starts a new one (RabbitMQ's key). Default 16 MiB.
    pub msg_store_file_size_limit: usize,
    /// `msg_store_max_unwritten_bytes` (Warren-specific): bytes of persistent messages
    /// waiting for the disk beyond which publishing connections are no longer read, until the
    /// writer catches up. Default 64 MiB.
    pub msg_store_max_unwritten_bytes: usize,
    /// `queue_max_in_memory_messages` (Warren-specific): ready messages a durable queue keeps
    /// in memory; persistent messages beyond it keep only an index entry and are read back
    /// from the message store when delivered. Default 100000.
    pub queue_max_in_memory_messages: usize,
    /// `queue_max_in_memory_bytes` (Warren-specific): body bytes of ready messages a queue
    /// keeps in memory. Persistent messages of durable queues beyond it (or beyond
    /// `queue_max_in_memory_messages`) are paged out; a queue over either limit with
    /// messages that cannot be paged (transient ones, non-durable queues) holds its
    /// publishers back until it drains to half of both. Default 64 MiB.
    pub queue_max_in_memory_bytes: usize,
    /// `anonymous_login_user`: the user AMQP 1.0 SASL ANONYMOUS logins act as. ANONYMOUS is
    /// offered only when set (default none; RabbitMQ 4.x's key).
    pub anonymous_login_user: Option<String>,
    /// `anonymous_login_pass`: that user's password (default `guest`).
    pub anonymous_login_pass: String,
}

/// When the memory alarm is raised (`vm_memory_high_watermark.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryHighWatermark {
    /// A fraction of the memory available (`.relative`); 0 blocks every publisher.
    Relative(f64),
    /// A number of bytes (`.absolute`).
    Absolute(u64),
}

/// When the disk alarm is raised (`disk_free_limit.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DiskFreeLimit {
    /// A number of bytes of free space (`.absolute`).
    Absolute(u64),
    /// A multiple of the memory available (`.relative`), as RabbitMQ defines it.
    Relative(f64),
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            amqp_listener: ListenAddr::default(),
            additional_amqp_listeners: Vec::new(),
            default_vhost: "/".to_owned(),
            default_user: "guest".to_owned(),
            default_pass: "guest".to_owned(),
            loopback_users: vec!["guest".to_owned()],
            heartbeat: 60,
            frame_max: 131_072,
            channel_max: 2047,
            max_message_size: 16 * 1024 * 1024,
            data_dir: PathBuf::from("warren-data"),
            load_definitions: None,
            log_level: LogLevel::Info,
            handshake_timeout: Duration::from_millis(10_000),
            connection_max: None,
            consistent_hash_exchange: false,
            management_listener: ListenAddr::new("0.0.0.0", 15672),
            management_enabled: true,
            amqps_listener: None,
            ssl_options: SslOptions::default(),
            ssl_cert_login_from: CertLoginFrom::DistinguishedName,
            auth_mechanism_keys: None,
            server_properties: Vec::new(),
            management_tls_listener: None,
            management_tls_certfile: None,
            management_tls_keyfile: None,
            management_tls_verification: PeerVerification::default(),
            management_http: HttpLimits::default(),
            management_https: HttpLimits::default(),
            prometheus_listener: ListenAddr::new("0.0.0.0", 15692),
            prometheus_tls_listener: None,
            prometheus_tls_certfile: None,
            prometheus_tls_keyfile: None,
            prometheus_tls_verification: PeerVerification::default(),
            prometheus_enabled: true,
            consumer_timeout: Some(Duration::from_millis(1_800_000)),
            collect_statistics_interval: Duration::from_millis(5000),
            management_sample_retention: Duration::from_secs(600),
            memory_high_watermark: MemoryHighWatermark::Relative(0.6),
            total_memory_override: None,
            disk_free_limit: DiskFreeLimit::Absolute(50_000_000),
            stomp: StompSettings::default(),
            cluster: ClusterSettings::default(),
            stream: StreamProtocolSettings::default(),
            mqtt: MqttSettings::default(),
            web_mqtt: crate::web::WebSettings::new(crate::web::WEB_MQTT_PORT),
            web_stomp: crate::web::WebSettings::new(crate::web::WEB_STOMP_PORT),
            web_amqp: crate::web::WebSettings::new(crate::web::WEB_AMQP_PORT),
            msg_store_file_size_limit: 16 * 1024 * 1024,
            msg_store_max_unwritten_bytes: 64 * 1024 * 1024,
            queue_max_in_memory_messages: 100_000,
            queue_max_in_memory_bytes: 64 * 1024 * 1024,
            anonymous_login_user: None,
            anonymous_login_pass: "guest".to_owned(),
        }
    }
}

/// Every key [`Settings::set`] accepts, with what it sets; shown by `--help`.
pub const KEYS: &[(&str, &str)] = &[
    (
        "listeners.tcp.default",
        "AMQP listener: PORT or HOST:PORT (0.0.0.0:5672)",
    ),
    ("listeners.tcp.<name>", "an additional AMQP listener"),
    ("default_vhost", "virtual host created on first boot (/)"),
    ("default_user", "user created on first boot (guest)"),
    ("default_pass", "password of that user (guest)"),
    (
        "loopback_users",
        "none, or comma-separated users limited to localhost (guest)",
    ),
    (
        "loopback_users.<name>",
        "true|false: limit that user to localhost",
    ),
    (
        "heartbeat",
        "heartbeat offered to clients, seconds, 0 = off (60)",
    ),
    ("frame_max", "largest frame, bytes, >= 4096 (131072)"),
    ("channel_max", "channels per connection, 0 = 65535 (2047)"),
    (
        "max_message_size",
        "largest message, bytes or with KB/MB/GB/KiB/MiB/GiB, <= 512MiB (16MiB)",
    ),
    ("data_dir", "storage directory (warren-data)"),
    (
        "msg_store_file_size_limit",
        "message store segment size, bytes or with a suffix, >= 4096 (16MiB)",
    ),
    (
        "msg_store_max_unwritten_bytes",
        "persistent bytes waiting for the disk before publishers are paused (64MiB)",
    ),
    (
        "queue_max_in_memory_messages",
        "ready messages a durable queue keeps in memory; persistent ones beyond are paged out (100000)",
    ),
    (
        "queue_max_in_memory_bytes",
        "ready body bytes a queue keeps in memory before paging or pausing its publishers (64MiB)",
    ),
    (
        "consumer_timeout",
        "ms a delivery may stay unacknowledged before its channel closes, or false (1800000)",
    ),
    (
        "collect_statistics_interval",
        "ms between samples of the message counters for management API rates, >= 100 (5000)",
    ),
    (
        "management.sample_retention_seconds",
        "seconds of rate and length history kept per active object for ?msg_rates_age= (600)",
    ),
    (
        "plugins.consistent_hash_exchange",
        "true|false: enable the x-consistent-hash exchange type (false)",
    ),
    (
        "anonymous_login_user",
        "user AMQP 1.0 SASL ANONYMOUS logs in as; none = ANONYMOUS not offered (none)",
    ),
    ("anonymous_login_pass", "password of that user (guest)"),
    (
        "load_definitions",
        "RabbitMQ definitions.json applied at boot (none)",
    ),
    (
        "management.tcp.port",
        "management HTTP API port, 0 = any free port (15672)",
    ),
    (
        "management.tcp.ip",
        "management HTTP API interface (0.0.0.0)",
    ),
    (
        "listeners.ssl.default",
        "AMQPS listener: PORT or HOST:PORT (none)",
    ),
    ("ssl_options.certfile", "PEM certificate chain for AMQPS"),
    ("ssl_options.keyfile", "PEM private key for AMQPS"),
    (
        "ssl_options.cacertfile",
        "PEM CA certificates client certificates are checked against",
    ),
    (
        "ssl_options.verify",
        "verify_peer (ask for a client certificate) or verify_none (verify_none)",
    ),
    (
        "ssl_options.fail_if_no_peer_cert",
        "true|false: refuse clients without a certificate (false)",
    ),
    (
        "ssl_cert_login_from",
        "distinguished_name|common_name: the user a client certificate names (distinguished_name)",
    ),
    (
        "auth_mechanisms.<N>",
        "an AMQP 0-9-1 SASL mechanism: PLAIN, AMQPLAIN or EXTERNAL (PLAIN, AMQPLAIN)",
    ),
    (
        "server_properties.<name>",
        "an AMQP 0-9-1 server property (text) to add or override, e.g. product (product = Warren)",
    ),
    (
        "management.ssl.port",
        "management API over HTTPS on this port (none); needs certfile and keyfile",
    ),
    ("management.ssl.ip", "HTTPS interface (0.0.0.0)"),
    (
        "management.ssl.certfile",
        "PEM certificate chain for the HTTPS API",
    ),
    (
        "management.ssl.keyfile",
        "PEM private key for the HTTPS API",
    ),
    (
        "management.ssl.cacertfile",
        "PEM CA certificates for HTTPS API client certificates",
    ),
    (
        "management.ssl.verify",
        "verify_peer|verify_none: ask HTTPS API clients for a certificate (verify_none)",
    ),
    (
        "management.ssl.fail_if_no_peer_cert",
        "true|false: refuse HTTPS API clients without a certificate (false)",
    ),
    (
        "management.http.max_body_size",
        "largest management API request body in bytes; larger ones get 413 (10000000)",
    ),
    (
        "management.tcp.max_connections",
        "most management API connections at once over HTTP, or infinity (1024)",
    ),
    (
        "management.ssl.max_connections",
        "most management API connections at once over HTTPS, or infinity (1024)",
    ),
    (
        "management.tcp.idle_timeout",
        "ms an idle management API connection over HTTP is kept open (60000)",
    ),
    (
        "management.ssl.idle_timeout",
        "ms an idle management API connection over HTTPS is kept open (60000)",
    ),
    (
        "plugins.management",
        "true|false: serve the management HTTP API (true)",
    ),
    (
        "prometheus.tcp.port",
        "Prometheus metrics port, 0 = any free port (15692)",
    ),
    (
        "prometheus.tcp.ip",
        "Prometheus metrics interface (0.0.0.0)",
    ),
    (
        "prometheus.ssl.port",
        "Prometheus metrics over HTTPS on this port (none); needs certfile and keyfile",
    ),
    ("prometheus.ssl.ip", "Prometheus HTTPS interface (0.0.0.0)"),
    (
        "prometheus.ssl.certfile",
        "PEM certificate chain for Prometheus over HTTPS",
    ),
    (
        "prometheus.ssl.keyfile",
        "PEM private key for Prometheus over HTTPS",
    ),
    (
        "prometheus.ssl.cacertfile",
        "PEM CA certificates for Prometheus HTTPS client certificates",
    ),
    (
        "prometheus.ssl.verify",
        "verify_peer|verify_none: ask Prometheus HTTPS clients for a certificate (verify_none)",
    ),
    (
        "prometheus.ssl.fail_if_no_peer_cert",
        "true|false: refuse Prometheus HTTPS clients without a certificate (false)",
    ),
    (
        "plugins.prometheus",
        "true|false: serve Prometheus metrics (true)",
    ),
    (
        "log.console.level",
        "debug|info|warning|error|critical|none (info)",
    ),
    (
        "handshake_timeout",
        "protocol handshake timeout, milliseconds (10000)",
    ),
    (
        "connection_max",
        "most client connections, or infinity (infinity)",
    ),
    (
        "vm_memory_high_watermark.relative",
        "memory alarm above this fraction of available memory (0.6)",
    ),
    (
        "vm_memory_high_watermark.absolute",
        "memory alarm above this many bytes, or with KB/MB/GB/KiB/MiB/GiB",
    ),
    (
        "total_memory_available_override_value",
        "memory the relative watermark is taken of, bytes or with units (detected)",
    ),
    (
        "disk_free_limit.absolute",
        "disk alarm below this much free space, bytes or with units (50MB)",
    ),
    (
        "disk_free_limit.relative",
        "disk alarm below this multiple of available memory free",
    ),
];

impl Settings {
    /// Applies one `key = value` setting. Surrounding whitespace on either is ignored.
    ///
    /// Fails with [`ConfigError::UnknownKey`] for a key Warren does not know and
    /// [`ConfigError::InvalidValue`] (naming key, value and what is expected) for a bad value;
    /// on failure the settings are unchanged.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let key = key.trim();
        let value = value.trim();
        let invalid = |expected: &str| ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            expected: expected.to_owned(),
        };
        match key {
            "listeners.tcp.default" => {
                self.amqp_listener = parse_listener(value).map_err(|e| invalid(&e))?;
            }
            "default_vhost" => {
                self.default_vhost =
                    non_empty(value).ok_or_else(|| invalid("a virtual host name"))?
            }
            "default_user" => {
                self.default_user = non_empty(value).ok_or_else(|| invalid("a user name"))?
            }
            // An empty password is allowed here; whether it may log in is the auth layer's call.
            "default_pass" => self.default_pass = value.to_owned(),
            "loopback_users" => {
                self.loopback_users = parse_user_list(value)
                    .ok_or_else(|| invalid("'none' or a comma-separated list of user names"))?;
            }
            "heartbeat" => {
                self.heartbeat = value
                    .parse()
                    .map_err(|_| invalid("an integer between 0 and 65535 (seconds)"))?;
            }
            "frame_max" => {
                self.frame_max = value
                    .parse()
                    .ok()
                    .filter(|size| *size >= FRAME_MIN_SIZE)
                    .ok_or_else(|| invalid("an integer between 4096 and 4294967295 (bytes)"))?;
            }
            "channel_max" => {
                self.channel_max = value
                    .parse()
                    .map_err(|_| invalid("an integer between 0 and 65535"))?;
            }
            "max_message_size" => {
                self.max_message_size = parse_size(value)
                    .filter(|size| (1..=MAX_MESSAGE_SIZE_LIMIT).contains(size))
                    .ok_or_else(|| {
                        invalid(
                            "a size between 1 and 536870912 bytes (512MiB), as an integer or \
                             with a KB, MB, GB, KiB, MiB or GiB suffix",
                        )
                    })?;
            }
            "data_dir" => {
                self.data_dir = non_empty(value)
                    .map(PathBuf::from)
                    .ok_or_else(|| invalid("a directory path"))?;
            }
            "load_definitions" => {
                self.load_definitions = Some(
                    non_empty(value)
                        .map(PathBuf::from)
                        .ok_or_else(|| invalid("the path of a definitions.json file"))?,
                );
            }
            "log.console.level" => {
                self.log_level = LogLevel::from_name(value)
                    .ok_or_else(|| invalid("one of debug, info, warning, error, critical, none"))?;
            }
            "handshake_timeout" => {
                self.handshake_timeout = value
                    .parse::<u64>()
                    .ok()
                    .filter(|millis| *millis > 0)
                    .map(Duration::from_millis)
                    .ok_or_else(|| invalid("a positive integer (milliseconds)"))?;
            }
            "anonymous_login_user" => {
                self.anonymous_login_user = match value {
                    "" | "none" => None,
                    user => Some(user.to_owned()),
                };
            }
            "anonymous_login_pass" => {
                self.anonymous_login_pass = value.to_owned();
            }
            "management.sample_retention_seconds" => {
                let seconds: u64 = value
                    .parse()
                    .ok()
                    .filter(|s| *s <= 86_400)
                    .ok_or_else(|| invalid("an integer of seconds, at most 86400"))?;
                self.management_sample_retention = Duration::from_secs(seconds);
            }
            "collect_statistics_interval" => {
                let ms: u64 = value
                    .parse()
                    .ok()
                    .filter(|ms| *ms >= 100)
                    .ok_or_else(|| invalid("an integer of milliseconds, at least 100"))?;
                self.collect_statistics_interval = Duration::from_millis(ms);
            }
            "consumer_timeout" => {
                self.consumer_timeout = if value == "false" {
                    None
                } else {
                    let ms: u64 =
                        value.parse().ok().filter(|ms| *ms > 0).ok_or_else(|| {
                            invalid("a positive integer (milliseconds) or 'false'")
                        })?;
                    Some(Duration::from_millis(ms))
                };
            }
            "management.tcp.port" | "prometheus.tcp.port" => {
                let port = value
                    .parse()
                    .map_err(|_| invalid("a port between 0 and 65535"))?;
                if key.starts_with("management") {
                    self.management_listener.port = port;
                } else {
                    self.prometheus_listener.port = port;
                }
            }
            "listeners.ssl.default" => {
                self.amqps_listener = Some(parse_listener(value).map_err(|e| invalid(&e))?);
            }
            "ssl_options.certfile" => {
                self.ssl_options.certfile = Some(
                    non_empty(value)
                        .ok_or_else(|| invalid("a file path"))?
                        .into(),
                )
            }
            "ssl_options.keyfile" => {
                self.ssl_options.keyfile = Some(
                    non_empty(value)
                        .ok_or_else(|| invalid("a file path"))?
                        .into(),
                )
            }
            "ssl_options.cacertfile" => {
                self.ssl_options.cacertfile = Some(
                    non_empty(value)
                        .ok_or_else(|| invalid("a file path"))?
                        .into(),
                )
            }
            "ssl_options.verify" => {
                self.ssl_options.verify_peer = match value {
                    "verify_peer" => true,
                    "verify_none" => false,
                    _ => return Err(invalid("verify_peer or verify_none")),
                };
            }
            "ssl_options.fail_if_no_peer_cert" => {
                self.ssl_options.fail_if_no_peer_cert = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(invalid("true or false")),
                };
            }
            "ssl_cert_login_from" => {
                self.ssl_cert_login_from = match value {
                    "distinguished_name" => CertLoginFrom::DistinguishedName,
                    "common_name" => CertLoginFrom::CommonName,
                    _ => return Err(invalid("distinguished_name or common_name")),
                };
            }
            "management.ssl.port" | "prometheus.ssl.port" => {
                let port = value
                    .parse()
                    .map_err(|_| invalid("a port between 0 and 65535"))?;
                let listener = if key.starts_with("management") {
                    &mut self.management_tls_listener
                } else {
                    &mut self.prometheus_tls_listener
                };
                listener
                    .get_or_insert_with(|| ListenAddr::new("0.0.0.0", 0))
                    .port = port;
            }
            "management.ssl.ip" | "prometheus.ssl.ip" => {
                let host = ListenAddr::parse(&format!("[{}]:0", value.trim_matches(['[', ']'])))
                    .or_else(|_| ListenAddr::parse(&format!("{value}:0")))
                    .map_err(|_| invalid("an IP address or host name"))?
                    .host;
                let (listener, default_port) = if key.starts_with("management") {
                    (&mut self.management_tls_listener, 15671)
                } else {
                    (&mut self.prometheus_tls_listener, 15691)
                };
                listener
                    .get_or_insert_with(|| ListenAddr::new("0.0.0.0", default_port))
                    .host = host;
            }
            "prometheus.ssl.certfile" => {
                self.prometheus_tls_certfile = Some(
                    non_empty(value)
                        .ok_or_else(|| invalid("a file path"))?
                        .into(),
                )
            }
            "prometheus.ssl.keyfile" => {
                self.prometheus_tls_keyfile = Some(
                    non_empty(value)
                        .ok_or_else(|| invalid("a file path"))?
                        .into(),
                )
            }
            "management.ssl.certfile" => {
                self.management_tls_certfile = Some(
                    non_empty(value)
                        .ok_or_else(|| invalid("a file path"))?
                        .into(),
                )
            }
            "management.ssl.keyfile" => {
                self.management_tls_keyfile = Some(
                    non_empty(value)
                        .ok_or_else(|| invalid("a file path"))?
                        .into(),
                )
            }
            "management.ssl.cacertfile"
            | "management.ssl.verify"
            | "management.ssl.fail_if_no_peer_cert"
            | "prometheus.ssl.cacertfile"
            | "prometheus.ssl.verify"
            | "prometheus.ssl.fail_if_no_peer_cert" => {
                let verification = if key.starts_with("management") {
                    &mut self.management_tls_verification
                } else {
                    &mut self.prometheus_tls_verification
                };
                match key.rsplit('.').next() {
                    Some("cacertfile") => {
                        verification.cacertfile = Some(
                            non_empty(value)
                                .ok_or_else(|| invalid("a file path"))?
                                .into(),
                        )
                    }
                    Some("verify") => {
                        verification.verify_peer = match value {
                            "verify_peer" => true,
                            "verify_none" => false,
                            _ => return Err(invalid("verify_peer or verify_none")),
                        }
                    }
                    _ => {
                        verification.fail_if_no_peer_cert = match value {
                            "true" => true,
                            "false" => false,
                            _ => return Err(invalid("true or false")),
                        }
                    }
                }
            }
            "management.tcp.ip" | "prometheus.tcp.ip" => {
                let host = ListenAddr::parse(&format!("[{}]:0", value.trim_matches(['[', ']'])))
                    .or_else(|_| ListenAddr::parse(&format!("{value}:0")))
                    .map_err(|_| invalid("an IP address or host name"))?
                    .host;
                if key.starts_with("management") {
                    self.management_listener.host = host;
                } else {
                    self.prometheus_listener.host = host;
                }
            }
            "plugins.management" | "plugins.prometheus" => {
                let enabled = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(invalid("true or false")),
                };
                if key == "plugins.management" {
                    self.management_enabled = enabled;
                } else {
                    self.prometheus_enabled = enabled;
                }
            }
            "plugins.web_mqtt" | "plugins.web_stomp" | "plugins.web_amqp" => {
                let enabled = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(invalid("true or false")),
                };
                match key {
                    "plugins.web_mqtt" => self.web_mqtt.enabled = enabled,
                    "plugins.web_stomp" => self.web_stomp.enabled = enabled,
                    _ => self.web_amqp.enabled = enabled,
                }
            }
            "plugins.consistent_hash_exchange" => {
                self.consistent_hash_exchange = match value {
                    "true" => true,
                    "false" => false,
                    _ => return Err(invalid("true or false")),
                };
            }
            "msg_store_file_size_limit" => {
                self.msg_store_file_size_limit = parse_size(value)
                    .filter(|size| *size >= 4096)
                    .ok_or_else(|| {
                        invalid("a size of at least 4096 bytes, as an integer or with a suffix")
                    })?;
            }
            "msg_store_max_unwritten_bytes" => {
                self.msg_store_max_unwritten_bytes = parse_size(value)
                    .filter(|size| *size >= 1)
                    .ok_or_else(|| invalid("a positive size, as an integer or with a suffix"))?;
            }
            "queue_max_in_memory_messages" => {
                self.queue_max_in_memory_messages = value
                    .parse()
                    .map_err(|_| invalid("a non-negative integer"))?;
            }
            "queue_max_in_memory_bytes" => {
                self.queue_max_in_memory_bytes = parse_size(value)
                    .filter(|size| *size >= 1)
                    .ok_or_else(|| invalid("a positive size, as an integer or with a suffix"))?;
            }
            "management.http.max_body_size" => {
                let bytes: usize = value
                    .parse()
                    .ok()
                    .filter(|bytes| *bytes > 0)
                    .ok_or_else(|| invalid("a positive integer (bytes)"))?;
                self.management_http.max_body_size = bytes;
                self.management_https.max_body_size = bytes;
            }
            "management.tcp.max_connections" | "management.ssl.max_connections" => {
                let max = if value == "infinity" {
                    None
                } else {
                    Some(
                        value
                            .parse()
                            .map_err(|_| invalid("a non-negative integer or 'infinity'"))?,
                    )
                };
                if key.starts_with("management.tcp") {
                    self.management_http.max_connections = max;
                } else {
                    self.management_https.max_connections = max;
                }
            }
            "management.tcp.idle_timeout" | "management.ssl.idle_timeout" => {
                let ms: u64 = value
                    .parse()
                    .ok()
                    .filter(|ms| *ms > 0)
                    .ok_or_else(|| invalid("a positive integer (milliseconds)"))?;
                if key.starts_with("management.tcp") {
                    self.management_http.idle_timeout = Duration::from_millis(ms);
                } else {
                    self.management_https.idle_timeout = Duration::from_millis(ms);
                }
            }
            "connection_max" => {
                self.connection_max = if value == "infinity" {
                    None
                } else {
                    Some(
                        value
                            .parse()
                            .map_err(|_| invalid("a non-negative integer or 'infinity'"))?,
                    )
                };
            }
            "vm_memory_high_watermark.relative" => {
                self.memory_high_watermark = MemoryHighWatermark::Relative(
                    parse_ratio(value).ok_or_else(|| invalid("a non-negative number, e.g. 0.6"))?,
                );
            }
            "vm_memory_high_watermark.absolute" => {
                self.memory_high_watermark = MemoryHighWatermark::Absolute(
                    parse_size(value)
                        .ok_or_else(|| invalid(SIZE_EXPECTED))?
                        .try_into()
                        .map_err(|_| invalid(SIZE_EXPECTED))?,
                );
            }
            "total_memory_available_override_value" => {
                self.total_memory_override = Some(
                    parse_size(value)
                        .filter(|size| *size > 0)
                        .ok_or_else(|| invalid(SIZE_EXPECTED))?
                        .try_into()
                        .map_err(|_| invalid(SIZE_EXPECTED))?,
                );
            }
            "disk_free_limit.absolute" => {
                self.disk_free_limit = DiskFreeLimit::Absolute(
                    parse_size(value)
                        .ok_or_else(|| invalid(SIZE_EXPECTED))?
                        .try_into()
                        .map_err(|_| invalid(SIZE_EXPECTED))?,
                );
            }
            "disk_free_limit.relative" => {
                self.disk_free_limit = DiskFreeLimit::Relative(
                    parse_ratio(value).ok_or_else(|| invalid("a non-negative number, e.g. 1.0"))?,
                );
            }
            _ if key.starts_with("stomp.") => return self.stomp.set(key, value),
            _ if ClusterSettings::owns(key) => return self.cluster.set(key, value),
            _ if key.starts_with("web_mqtt.") => return self.web_mqtt.set("web_mqtt", key, value),
            _ if key.starts_with("web_stomp.") => {
                return self.web_stomp.set("web_stomp", key, value)
            }
            _ if key.starts_with("web_amqp.") => return self.web_amqp.set("web_amqp", key, value),
            _ if key.starts_with("stream.") => return self.stream.set(key, value),
            _ if key.starts_with("mqtt.") => {
                return self.mqtt.set(key, value, parse_listener);
            }
            _ => return self.set_named(key, value),
        }
        Ok(())
    }

    /// The keys with a name as their last part: `listeners.tcp.<name>`, `loopback_users.<name>`.
    fn set_named(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |expected: &str| ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            expected: expected.to_owned(),
        };
        if let Some(name) = key.strip_prefix("listeners.tcp.").filter(|n| is_name(n)) {
            let addr = parse_listener(value).map_err(|e| invalid(&e))?;
            match self
                .additional_amqp_listeners
                .iter_mut()
                .find(|(existing, _)| existing == name)
            {
                Some(entry) => entry.1 = addr,
                None => self.additional_amqp_listeners.push((name.to_owned(), addr)),
            }
            return Ok(());
        }
        if let Some(index) = key.strip_prefix("auth_mechanisms.").filter(|n| is_name(n)) {
            let mechanism = AUTH_MECHANISMS
                .iter()
                .find(|known| **known == value)
                .ok_or_else(|| invalid("PLAIN, AMQPLAIN or EXTERNAL"))?;
            // The first key replaces the default list, as in RabbitMQ.
            let keys = self.auth_mechanism_keys.get_or_insert_with(Vec::new);
            match keys.iter_mut().find(|(existing, _)| existing == index) {
                Some(entry) => entry.1 = (*mechanism).to_owned(),
                None => keys.push((index.to_owned(), (*mechanism).to_owned())),
            }
            return Ok(());
        }
        if let Some(name) = key
            .strip_prefix("server_properties.")
            .filter(|n| is_name(n))
        {
            if name == "capabilities" {
                return Err(invalid(
                    "a property other than capabilities, which are always RabbitMQ's",
                ));
            }
            match self
                .server_properties
                .iter_mut()
                .find(|(existing, _)| existing == name)
            {
                Some(entry) => entry.1 = value.to_owned(),
                None => self
                    .server_properties
                    .push((name.to_owned(), value.to_owned())),
            }
            return Ok(());
        }
        if let Some(user) = key.strip_prefix("loopback_users.").filter(|n| is_name(n)) {
            let limited = match value {
                "true" => true,
                "false" => false,
                _ => return Err(invalid("true or false")),
            };
            self.loopback_users.retain(|existing| existing != user);
            if limited {
                self.loopback_users.push(user.to_owned());
            }
            return Ok(());
        }
        Err(ConfigError::UnknownKey {
            key: key.to_owned(),
        })
    }

    /// Every AMQP listener: `listeners.tcp.default` first, then the named ones.
    pub fn amqp_listeners(&self) -> impl Iterator<Item = &ListenAddr> {
        std::iter::once(&self.amqp_listener)
            .chain(self.additional_amqp_listeners.iter().map(|(_, addr)| addr))
    }

    /// The SASL mechanisms AMQP 0-9-1 offers, in order: those of the `auth_mechanisms.N`
    /// keys, or `PLAIN AMQPLAIN` when none is given. EXTERNAL is offered only to TLS
    /// clients that presented a verified certificate.
    pub fn auth_mechanisms(&self) -> Vec<String> {
        match &self.auth_mechanism_keys {
            Some(keys) => keys
                .iter()
                .map(|(_, mechanism)| mechanism.clone())
                .collect(),
            None => vec!["PLAIN".to_owned(), "AMQPLAIN".to_owned()],
        }
    }

    /// Whether `user` may only connect from the loopback interface.
    pub fn is_loopback_user(&self, user: &str) -> bool {
        self.loopback_users.iter().any(|name| name == user)
    }

    /// Applies rabbitmq.conf text to this configuration, line by line in order.
    ///
    /// Blank lines and lines whose first non-blank character is `#` are skipped; every other
    /// line is `key = value`, split at the first `=` (so values may contain `=` and `#`).
    /// Errors are wrapped in [`ConfigError::Line`] with the 1-based line number.
    pub fn apply_conf_str(&mut self, text: &str) -> Result<(), ConfigError> {
        for (index, line) in text.lines().enumerate() {
            let at_line = |error| ConfigError::Line {
                line: index + 1,
                error: Box::new(error),
            };
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let (key, value) = trimmed.split_once('=').ok_or_else(|| {
                at_line(ConfigError::MissingEquals {
                    text: trimmed.to_owned(),
                })
            })?;
            if key.trim().is_empty() {
                return Err(at_line(ConfigError::MissingKey));
            }
            self.set(key, value).map_err(at_line)?;
        }
        Ok(())
    }

    /// Warren's defaults with rabbitmq.conf text applied; see [`Settings::apply_conf_str`].
    pub fn from_conf_str(text: &str) -> Result<Settings, ConfigError> {
        let mut settings = Settings::default();
        settings.apply_conf_str(text)?;
        Ok(settings)
    }

    /// Warren's defaults with a rabbitmq.conf file applied. Errors name the path.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Settings, ConfigError> {
        let mut settings = Settings::default();
        settings.apply_file(path.as_ref())?;
        Ok(settings)
    }

    /// Applies a rabbitmq.conf file to this configuration. Errors are wrapped in
    /// [`ConfigError::File`] naming the path.
    pub fn apply_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let in_file = |error| ConfigError::File {
            path: path.to_owned(),
            error: Box::new(error),
        };
        let text = std::fs::read_to_string(path).map_err(|error| {
            in_file(ConfigError::Read {
                reason: error.to_string(),
            })
        })?;
        self.apply_conf_str(&text).map_err(in_file)
    }
}

/// A listener address, or what the key expects and why the value is not that.
fn parse_listener(value: &str) -> Result<ListenAddr, String> {
    ListenAddr::parse(value).map_err(|reason| {
        format!(
            "PORT, HOST:PORT, [IPV6]:PORT or IPV6:PORT with a port between 0 and 65535 ({reason})"
        )
    })
}

fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

/// A listener or user name in a key: non-empty, without whitespace or further dots.
fn is_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('.') && !name.contains(char::is_whitespace)
}

/// `none` (empty list) or comma-separated names, blanks around names ignored.
fn parse_user_list(value: &str) -> Option<Vec<String>> {
    if value == "none" {
        return Some(Vec::new());
    }
    let names: Vec<String> = value.split(',').map(|n| n.trim().to_owned()).collect();
    if names.iter().any(|n| n.is_empty()) {
        return None;
    }
    Some(names)
}

/// What a size key accepts, for its error message.
const SIZE_EXPECTED: &str =
    "a size in bytes, as an integer or with a KB, MB, GB, KiB, MiB or GiB suffix";

/// A finite, non-negative decimal number.
fn parse_ratio(value: &str) -> Option<f64> {
    value
        .parse::<f64>()
        .ok()
        .filter(|ratio| ratio.is_finite() && *ratio >= 0.0)
}

/// A byte count: a plain integer, or one with a decimal (KB, MB, GB) or binary (KiB, MiB, GiB)
/// suffix, optionally separated by a space. Suffixes are case-insensitive.
fn parse_size(value: &str) -> Option<usize> {
    let digits_end = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, suffix) = value.split_at(digits_end);
    let number: usize = number.parse().ok()?;
    let multiplier: usize = match suffix.trim_start().to_ascii_lowercase().as_str() {
        "" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(multiplier)
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
