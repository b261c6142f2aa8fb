//! Broker settings in rabbitmq.conf's sysctl format (`listeners.tcp.default = 5672`).
//!
//! [`Settings::default`] holds Warren's embedded defaults; a configuration file and then
//! `--set KEY=VALUE` arguments are applied on top, one key at a time, through
//! [`Settings::set`]. An unknown key or a bad value stops start-up with a message naming it:
//! a typo must never silently fall back to a default.
//!
//! Tables of [`Setting`]s list every key with its default, its `--help` line and the
//! function that parses and stores its value: [`SETTINGS`] (in `table.rs`) the top-level
//! keys, and each listener with its own section (`stomp.`, `mqtt.`, `stream.`, `web_*.`,
//! clustering) a table in its own module, beside its settings struct ([`TABLES`] lists
//! them all). [`Settings::set`] looks keys up in them (`parse.rs`), `--help` prints them, and
//! tests check that docs/configuration.md documents exactly their keys with their defaults
//! and that setting a default changes nothing. `values.rs` holds the value types.

use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::ClusterSettings;
use crate::listen_addr::ListenAddr;
use crate::mqtt::MqttSettings;
use crate::stomp::StompSettings;
use crate::stream::StreamProtocolSettings;

pub(crate) mod parse;
mod table;
mod values;

pub use table::{all as all_settings, Setting, SETTINGS, TABLES};
pub use values::{
    CertLoginFrom, DiskFreeLimit, HttpLimits, LogLevel, MemoryHighWatermark, PeerVerification,
    SslOptions,
};

/// RabbitMQ's (and so Warren's) smallest negotiable frame size.
pub const FRAME_MIN_SIZE: u32 = 4096;

/// RabbitMQ's hard ceiling for `max_message_size`: 512 MiB.
pub const MAX_MESSAGE_SIZE_LIMIT: usize = 512 * 1024 * 1024;

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

impl Settings {
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
}

#[cfg(test)]
mod tests;
