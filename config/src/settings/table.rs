//! The table of top-level keys: each key's name, default, `--help` line and the function that
//! parses and stores its value. [`Settings::set`](super::Settings::set) looks keys up here,
//! `--help` prints it, and a test checks docs/configuration.md against it, so a key cannot be
//! parsed without being documented or documented with a default it does not have.

use std::path::PathBuf;
use std::time::Duration;

use super::parse::{
    boolean, count_or_infinity, interface, is_name, parse_listener, parse_ratio, parse_size,
    parse_user_list, port, positive_millis, required, size_u64, verify_peer, SIZE_EXPECTED,
};
use super::values::{CertLoginFrom, DiskFreeLimit, LogLevel, MemoryHighWatermark};
use super::{Settings, AUTH_MECHANISMS, FRAME_MIN_SIZE, MAX_MESSAGE_SIZE_LIMIT};
use crate::listen_addr::ListenAddr;

/// Parses a value and stores it: `(settings, name, value)`, where `name` is what stands for
/// the placeholder of a family key (`listeners.tcp.<name>`) and empty for any other key. The
/// error says what the key expects; on error nothing is changed.
type Apply = fn(&mut Settings, &str, &str) -> Result<(), String>;

/// One top-level key of rabbitmq.conf.
pub struct Setting {
    /// The key as written in a file. A key ending in `<name>` or `<N>` is a family: the
    /// placeholder stands for any name without dots or whitespace (`listeners.tcp.<name>`).
    pub key: &'static str,
    /// The default, as a value of this key would be written (setting it changes nothing);
    /// empty when the key is unset by default or its default is not one value.
    pub default: &'static str,
    /// What the key sets, in one line for `--help` (which adds the default).
    pub help: &'static str,
    pub(crate) apply: Apply,
}

impl Setting {
    /// The entry of a key that is not a family.
    pub(super) fn exact(key: &str) -> Option<&'static Setting> {
        all().find(|setting| !setting.is_family() && setting.key == key)
    }

    /// The family entry a key belongs to, with the name standing for its placeholder.
    pub(super) fn family(key: &str) -> Option<(&'static Setting, &str)> {
        all().find_map(|setting| {
            let (prefix, _) = setting.key.split_once('<')?;
            let name = key.strip_prefix(prefix).filter(|name| is_name(name))?;
            Some((setting, name))
        })
    }

    /// Whether the key is a family (`listeners.tcp.<name>`).
    pub fn is_family(&self) -> bool {
        self.key.ends_with('>')
    }

    /// Parses `value` (for the family member `name`) and stores it in `settings`.
    pub(super) fn apply(
        &self,
        settings: &mut Settings,
        name: &str,
        value: &str,
    ) -> Result<(), String> {
        (self.apply)(settings, name, value)
    }

    /// The `--help` line's description: the help text and, when there is one, the default.
    pub fn description(&self) -> String {
        if self.default.is_empty() {
            self.help.to_owned()
        } else {
            format!("{} ({})", self.help, self.default)
        }
    }
}

/// Every table: the top-level keys ([`SETTINGS`]), then each section's, which its own module
/// keeps beside its settings struct. `--help` prints them in this order.
pub const TABLES: &[&[Setting]] = &[
    SETTINGS,
    crate::stomp::STOMP_SETTINGS,
    crate::mqtt::MQTT_SETTINGS,
    crate::cluster::CLUSTER_SETTINGS,
    crate::web::WEB_MQTT_SETTINGS,
    crate::web::WEB_STOMP_SETTINGS,
    crate::web::WEB_AMQP_SETTINGS,
    crate::stream::STREAM_SETTINGS,
];

/// Every key of every table, in `--help` order.
pub fn all() -> impl Iterator<Item = &'static Setting> {
    TABLES.iter().flat_map(|table| table.iter())
}

/// Replaces the entry named `name` in a list of named values, or appends one.
fn set_named<T>(list: &mut Vec<(String, T)>, name: &str, value: T) {
    match list.iter_mut().find(|(existing, _)| existing == name) {
        Some(entry) => entry.1 = value,
        None => list.push((name.to_owned(), value)),
    }
}

/// Every top-level key, in `--help` order.
pub const SETTINGS: &[Setting] = &[
    Setting {
        key: "listeners.tcp.default",
        default: "5672",
        help: "AMQP listener: PORT or HOST:PORT",
        apply: |s, _, v| {
            s.amqp_listener = parse_listener(v)?;
            Ok(())
        },
    },
    Setting {
        key: "listeners.tcp.<name>",
        default: "",
        help: "an additional AMQP listener",
        apply: |s, name, v| {
            let addr = parse_listener(v)?;
            set_named(&mut s.additional_amqp_listeners, name, addr);
            Ok(())
        },
    },
    Setting {
        key: "default_vhost",
        default: "/",
        help: "virtual host created on first boot",
        apply: |s, _, v| {
            s.default_vhost = required(v, "a virtual host name")?;
            Ok(())
        },
    },
    Setting {
        key: "default_user",
        default: "guest",
        help: "user created on first boot",
        apply: |s, _, v| {
            s.default_user = required(v, "a user name")?;
            Ok(())
        },
    },
    Setting {
        key: "default_pass",
        default: "guest",
        help: "password of that user",
        // An empty password is allowed here; whether it may log in is the auth layer's call.
        apply: |s, _, v| {
            s.default_pass = v.to_owned();
            Ok(())
        },
    },
    Setting {
        key: "loopback_users",
        default: "guest",
        help: "none, or comma-separated users limited to localhost",
        apply: |s, _, v| {
            s.loopback_users =
                parse_user_list(v).ok_or("'none' or a comma-separated list of user names")?;
            Ok(())
        },
    },
    Setting {
        key: "loopback_users.<name>",
        default: "",
        help: "true|false: limit that user to localhost",
        apply: |s, user, v| {
            let limited = boolean(v)?;
            s.loopback_users.retain(|existing| existing != user);
            if limited {
                s.loopback_users.push(user.to_owned());
            }
            Ok(())
        },
    },
    Setting {
        key: "heartbeat",
        default: "60",
        help: "heartbeat offered to clients, seconds, 0 = off",
        apply: |s, _, v| {
            s.heartbeat = v
                .parse()
                .map_err(|_| "an integer between 0 and 65535 (seconds)")?;
            Ok(())
        },
    },
    Setting {
        key: "frame_max",
        default: "131072",
        help: "largest frame, bytes, >= 4096",
        apply: |s, _, v| {
            s.frame_max = v
                .parse()
                .ok()
                .filter(|size| *size >= FRAME_MIN_SIZE)
                .ok_or("an integer between 4096 and 4294967295 (bytes)")?;
            Ok(())
        },
    },
    Setting {
        key: "channel_max",
        default: "2047",
        help: "channels per connection, 0 = 65535",
        apply: |s, _, v| {
            s.channel_max = v.parse().map_err(|_| "an integer between 0 and 65535")?;
            Ok(())
        },
    },
    Setting {
        key: "max_message_size",
        default: "16777216",
        help: "largest message, bytes or with KB/MB/GB/KiB/MiB/GiB, <= 512MiB",
        apply: |s, _, v| {
            s.max_message_size = parse_size(v)
                .filter(|size| (1..=MAX_MESSAGE_SIZE_LIMIT).contains(size))
                .ok_or(
                    "a size between 1 and 536870912 bytes (512MiB), as an integer or with a KB, \
                     MB, GB, KiB, MiB or GiB suffix",
                )?;
            Ok(())
        },
    },
    Setting {
        key: "data_dir",
        default: "warren-data",
        help: "storage directory",
        apply: |s, _, v| {
            s.data_dir = PathBuf::from(required(v, "a directory path")?);
            Ok(())
        },
    },
    Setting {
        key: "msg_store_file_size_limit",
        default: "16777216",
        help: "message store segment size, bytes or with a suffix, >= 4096",
        apply: |s, _, v| {
            s.msg_store_file_size_limit = parse_size(v)
                .filter(|size| *size >= 4096)
                .ok_or("a size of at least 4096 bytes, as an integer or with a suffix")?;
            Ok(())
        },
    },
    Setting {
        key: "msg_store_max_unwritten_bytes",
        default: "67108864",
        help: "persistent bytes waiting for the disk before publishers are paused",
        apply: |s, _, v| {
            s.msg_store_max_unwritten_bytes = parse_size(v)
                .filter(|size| *size >= 1)
                .ok_or("a positive size, as an integer or with a suffix")?;
            Ok(())
        },
    },
    Setting {
        key: "queue_max_in_memory_messages",
        default: "100000",
        help:
            "ready messages a durable queue keeps in memory; persistent ones beyond are paged out",
        apply: |s, _, v| {
            s.queue_max_in_memory_messages = v.parse().map_err(|_| "a non-negative integer")?;
            Ok(())
        },
    },
    Setting {
        key: "queue_max_in_memory_bytes",
        default: "64MiB",
        help: "ready body bytes a queue keeps in memory before paging or pausing its publishers",
        apply: |s, _, v| {
            s.queue_max_in_memory_bytes = parse_size(v)
                .filter(|size| *size >= 1)
                .ok_or("a positive size, as an integer or with a suffix")?;
            Ok(())
        },
    },
    Setting {
        key: "consumer_timeout",
        default: "1800000",
        help: "ms a delivery may stay unacknowledged before its channel closes, or false",
        apply: |s, _, v| {
            s.consumer_timeout = if v == "false" {
                None
            } else {
                let ms: u64 = v
                    .parse()
                    .ok()
                    .filter(|ms| *ms > 0)
                    .ok_or("a positive integer (milliseconds) or 'false'")?;
                Some(Duration::from_millis(ms))
            };
            Ok(())
        },
    },
    Setting {
        key: "collect_statistics_interval",
        default: "5000",
        help: "ms between samples of the message counters for management API rates, >= 100",
        apply: |s, _, v| {
            let ms: u64 = v
                .parse()
                .ok()
                .filter(|ms| *ms >= 100)
                .ok_or("an integer of milliseconds, at least 100")?;
            s.collect_statistics_interval = Duration::from_millis(ms);
            Ok(())
        },
    },
    Setting {
        key: "management.sample_retention_seconds",
        default: "600",
        help: "seconds of rate and length history kept per active object for ?msg_rates_age=",
        apply: |s, _, v| {
            let seconds: u64 = v
                .parse()
                .ok()
                .filter(|seconds| *seconds <= 86_400)
                .ok_or("an integer of seconds, at most 86400")?;
            s.management_sample_retention = Duration::from_secs(seconds);
            Ok(())
        },
    },
    Setting {
        key: "plugins.consistent_hash_exchange",
        default: "false",
        help: "true|false: enable the x-consistent-hash exchange type",
        apply: |s, _, v| {
            s.consistent_hash_exchange = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "anonymous_login_user",
        default: "",
        help: "user AMQP 1.0 SASL ANONYMOUS logs in as; none = ANONYMOUS not offered (none)",
        apply: |s, _, v| {
            s.anonymous_login_user = match v {
                "" | "none" => None,
                user => Some(user.to_owned()),
            };
            Ok(())
        },
    },
    Setting {
        key: "anonymous_login_pass",
        default: "guest",
        help: "password of that user",
        apply: |s, _, v| {
            s.anonymous_login_pass = v.to_owned();
            Ok(())
        },
    },
    Setting {
        key: "load_definitions",
        default: "",
        help: "RabbitMQ definitions.json applied at boot (none)",
        apply: |s, _, v| {
            s.load_definitions = Some(PathBuf::from(required(
                v,
                "the path of a definitions.json file",
            )?));
            Ok(())
        },
    },
    Setting {
        key: "management.tcp.port",
        default: "15672",
        help: "management HTTP API port, 0 = any free port",
        apply: |s, _, v| {
            s.management_listener.port = port(v)?;
            Ok(())
        },
    },
    Setting {
        key: "management.tcp.ip",
        default: "0.0.0.0",
        help: "management HTTP API interface",
        apply: |s, _, v| {
            s.management_listener.host = interface(v)?;
            Ok(())
        },
    },
    Setting {
        key: "listeners.ssl.default",
        default: "",
        help: "AMQPS listener: PORT or HOST:PORT (none)",
        apply: |s, _, v| {
            s.amqps_listener = Some(parse_listener(v)?);
            Ok(())
        },
    },
    Setting {
        key: "ssl_options.certfile",
        default: "",
        help: "PEM certificate chain for AMQPS",
        apply: |s, _, v| {
            s.ssl_options.certfile = Some(required(v, "a file path")?.into());
            Ok(())
        },
    },
    Setting {
        key: "ssl_options.keyfile",
        default: "",
        help: "PEM private key for AMQPS",
        apply: |s, _, v| {
            s.ssl_options.keyfile = Some(required(v, "a file path")?.into());
            Ok(())
        },
    },
    Setting {
        key: "ssl_options.cacertfile",
        default: "",
        help: "PEM CA certificates client certificates are checked against",
        apply: |s, _, v| {
            s.ssl_options.cacertfile = Some(required(v, "a file path")?.into());
            Ok(())
        },
    },
    Setting {
        key: "ssl_options.verify",
        default: "verify_none",
        help: "verify_peer (ask for a client certificate) or verify_none",
        apply: |s, _, v| {
            s.ssl_options.verify_peer = verify_peer(v)?;
            Ok(())
        },
    },
    Setting {
        key: "ssl_options.fail_if_no_peer_cert",
        default: "false",
        help: "true|false: refuse clients without a certificate",
        apply: |s, _, v| {
            s.ssl_options.fail_if_no_peer_cert = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "ssl_cert_login_from",
        default: "distinguished_name",
        help: "distinguished_name|common_name: the user a client certificate names",
        apply: |s, _, v| {
            s.ssl_cert_login_from = match v {
                "distinguished_name" => CertLoginFrom::DistinguishedName,
                "common_name" => CertLoginFrom::CommonName,
                _ => return Err("distinguished_name or common_name".to_owned()),
            };
            Ok(())
        },
    },
    Setting {
        key: "auth_mechanisms.<N>",
        default: "",
        help: "an AMQP 0-9-1 SASL mechanism: PLAIN, AMQPLAIN or EXTERNAL (PLAIN, AMQPLAIN)",
        apply: |s, index, v| {
            let mechanism = AUTH_MECHANISMS
                .iter()
                .find(|known| **known == v)
                .ok_or("PLAIN, AMQPLAIN or EXTERNAL")?;
            // The first key replaces the default list, as in RabbitMQ.
            let keys = s.auth_mechanism_keys.get_or_insert_with(Vec::new);
            set_named(keys, index, (*mechanism).to_owned());
            Ok(())
        },
    },
    Setting {
        key: "server_properties.<name>",
        default: "",
        help: "an AMQP 0-9-1 server property (text) to add or override, e.g. product \
               (product = Warren)",
        apply: |s, name, v| {
            if name == "capabilities" {
                return Err(
                    "a property other than capabilities, which are always RabbitMQ's".to_owned(),
                );
            }
            set_named(&mut s.server_properties, name, v.to_owned());
            Ok(())
        },
    },
    Setting {
        key: "management.ssl.port",
        default: "",
        help: "management API over HTTPS on this port (none); needs certfile and keyfile",
        apply: |s, _, v| {
            let port = port(v)?;
            s.management_tls_listener
                .get_or_insert_with(|| ListenAddr::new("0.0.0.0", 0))
                .port = port;
            Ok(())
        },
    },
    Setting {
        key: "management.ssl.ip",
        default: "",
        help: "HTTPS interface (0.0.0.0)",
        apply: |s, _, v| {
            let host = interface(v)?;
            s.management_tls_listener
                .get_or_insert_with(|| ListenAddr::new("0.0.0.0", 15671))
                .host = host;
            Ok(())
        },
    },
    Setting {
        key: "management.ssl.certfile",
        default: "",
        help: "PEM certificate chain for the HTTPS API",
        apply: |s, _, v| {
            s.management_tls_certfile = Some(required(v, "a file path")?.into());
            Ok(())
        },
    },
    Setting {
        key: "management.ssl.keyfile",
        default: "",
        help: "PEM private key for the HTTPS API",
        apply: |s, _, v| {
            s.management_tls_keyfile = Some(required(v, "a file path")?.into());
            Ok(())
        },
    },
    Setting {
        key: "management.ssl.cacertfile",
        default: "",
        help: "PEM CA certificates for HTTPS API client certificates",
        apply: |s, _, v| {
            s.management_tls_verification.cacertfile = Some(required(v, "a file path")?.into());
            Ok(())
        },
    },
    Setting {
        key: "management.ssl.verify",
        default: "verify_none",
        help: "verify_peer|verify_none: ask HTTPS API clients for a certificate",
        apply: |s, _, v| {
            s.management_tls_verification.verify_peer = verify_peer(v)?;
            Ok(())
        },
    },
    Setting {
        key: "management.ssl.fail_if_no_peer_cert",
        default: "false",
        help: "true|false: refuse HTTPS API clients without a certificate",
        apply: |s, _, v| {
            s.management_tls_verification.fail_if_no_peer_cert = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "management.http.max_body_size",
        default: "10000000",
        help: "largest management API request body in bytes; larger ones get 413",
        apply: |s, _, v| {
            let bytes: usize = v
                .parse()
                .ok()
                .filter(|bytes| *bytes > 0)
                .ok_or("a positive integer (bytes)")?;
            s.management_http.max_body_size = bytes;
            s.management_https.max_body_size = bytes;
            Ok(())
        },
    },
    Setting {
        key: "management.tcp.max_connections",
        default: "1024",
        help: "most management API connections at once over HTTP, or infinity",
        apply: |s, _, v| {
            s.management_http.max_connections = count_or_infinity(v)?;
            Ok(())
        },
    },
    Setting {
        key: "management.ssl.max_connections",
        default: "1024",
        help: "most management API connections at once over HTTPS, or infinity",
        apply: |s, _, v| {
            s.management_https.max_connections = count_or_infinity(v)?;
            Ok(())
        },
    },
    Setting {
        key: "management.tcp.idle_timeout",
        default: "60000",
        help: "ms an idle management API connection over HTTP is kept open",
        apply: |s, _, v| {
            s.management_http.idle_timeout = Duration::from_millis(positive_millis(v)?);
            Ok(())
        },
    },
    Setting {
        key: "management.ssl.idle_timeout",
        default: "60000",
        help: "ms an idle management API connection over HTTPS is kept open",
        apply: |s, _, v| {
            s.management_https.idle_timeout = Duration::from_millis(positive_millis(v)?);
            Ok(())
        },
    },
    Setting {
        key: "plugins.management",
        default: "true",
        help: "true|false: serve the management HTTP API",
        apply: |s, _, v| {
            s.management_enabled = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "prometheus.tcp.port",
        default: "15692",
        help: "Prometheus metrics port, 0 = any free port",
        apply: |s, _, v| {
            s.prometheus_listener.port = port(v)?;
            Ok(())
        },
    },
    Setting {
        key: "prometheus.tcp.ip",
        default: "0.0.0.0",
        help: "Prometheus metrics interface",
        apply: |s, _, v| {
            s.prometheus_listener.host = interface(v)?;
            Ok(())
        },
    },
    Setting {
        key: "prometheus.ssl.port",
        default: "",
        help: "Prometheus metrics over HTTPS on this port (none); needs certfile and keyfile",
        apply: |s, _, v| {
            let port = port(v)?;
            s.prometheus_tls_listener
                .get_or_insert_with(|| ListenAddr::new("0.0.0.0", 0))
                .port = port;
            Ok(())
        },
    },
    Setting {
        key: "prometheus.ssl.ip",
        default: "",
        help: "Prometheus HTTPS interface (0.0.0.0)",
        apply: |s, _, v| {
            let host = interface(v)?;
            s.prometheus_tls_listener
                .get_or_insert_with(|| ListenAddr::new("0.0.0.0", 15691))
                .host = host;
            Ok(())
        },
    },
    Setting {
        key: "prometheus.ssl.certfile",
        default: "",
        help: "PEM certificate chain for Prometheus over HTTPS",
        apply: |s, _, v| {
            s.prometheus_tls_certfile = Some(required(v, "a file path")?.into());
            Ok(())
        },
    },
    Setting {
        key: "prometheus.ssl.keyfile",
        default: "",
        help: "PEM private key for Prometheus over HTTPS",
        apply: |s, _, v| {
            s.prometheus_tls_keyfile = Some(required(v, "a file path")?.into());
            Ok(())
        },
    },
    Setting {
        key: "prometheus.ssl.cacertfile",
        default: "",
        help: "PEM CA certificates for Prometheus HTTPS client certificates",
        apply: |s, _, v| {
            s.prometheus_tls_verification.cacertfile = Some(required(v, "a file path")?.into());
            Ok(())
        },
    },
    Setting {
        key: "prometheus.ssl.verify",
        default: "verify_none",
        help: "verify_peer|verify_none: ask Prometheus HTTPS clients for a certificate",
        apply: |s, _, v| {
            s.prometheus_tls_verification.verify_peer = verify_peer(v)?;
            Ok(())
        },
    },
    Setting {
        key: "prometheus.ssl.fail_if_no_peer_cert",
        default: "false",
        help: "true|false: refuse Prometheus HTTPS clients without a certificate",
        apply: |s, _, v| {
            s.prometheus_tls_verification.fail_if_no_peer_cert = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "plugins.prometheus",
        default: "true",
        help: "true|false: serve Prometheus metrics",
        apply: |s, _, v| {
            s.prometheus_enabled = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "log.console.level",
        default: "info",
        help: "debug|info|warning|error|critical|none",
        apply: |s, _, v| {
            s.log_level = LogLevel::from_name(v)
                .ok_or("one of debug, info, warning, error, critical, none")?;
            Ok(())
        },
    },
    Setting {
        key: "handshake_timeout",
        default: "10000",
        help: "protocol handshake timeout, milliseconds",
        apply: |s, _, v| {
            s.handshake_timeout = Duration::from_millis(positive_millis(v)?);
            Ok(())
        },
    },
    Setting {
        key: "connection_max",
        default: "infinity",
        help: "most client connections, or infinity",
        apply: |s, _, v| {
            s.connection_max = count_or_infinity(v)?;
            Ok(())
        },
    },
    Setting {
        key: "vm_memory_high_watermark.relative",
        default: "0.6",
        help: "memory alarm above this fraction of available memory",
        apply: |s, _, v| {
            let ratio = parse_ratio(v).ok_or("a non-negative number, e.g. 0.6")?;
            s.memory_high_watermark = MemoryHighWatermark::Relative(ratio);
            Ok(())
        },
    },
    Setting {
        key: "vm_memory_high_watermark.absolute",
        default: "",
        help: "memory alarm above this many bytes, or with KB/MB/GB/KiB/MiB/GiB",
        apply: |s, _, v| {
            s.memory_high_watermark = MemoryHighWatermark::Absolute(size_u64(v)?);
            Ok(())
        },
    },
    Setting {
        key: "total_memory_available_override_value",
        default: "",
        help: "memory the relative watermark is taken of, bytes or with units (detected)",
        apply: |s, _, v| {
            let size = size_u64(v)
                .ok()
                .filter(|size| *size > 0)
                .ok_or(SIZE_EXPECTED)?;
            s.total_memory_override = Some(size);
            Ok(())
        },
    },
    Setting {
        key: "disk_free_limit.absolute",
        default: "50MB",
        help: "disk alarm below this much free space, bytes or with units",
        apply: |s, _, v| {
            s.disk_free_limit = DiskFreeLimit::Absolute(size_u64(v)?);
            Ok(())
        },
    },
    Setting {
        key: "disk_free_limit.relative",
        default: "",
        help: "disk alarm below this multiple of available memory free",
        apply: |s, _, v| {
            let ratio = parse_ratio(v).ok_or("a non-negative number, e.g. 1.0")?;
            s.disk_free_limit = DiskFreeLimit::Relative(ratio);
            Ok(())
        },
    },
    Setting {
        key: "plugins.web_mqtt",
        default: "false",
        help: "true|false: serve MQTT over WebSocket on web_mqtt.tcp.port",
        apply: |s, _, v| {
            s.web_mqtt.enabled = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "plugins.web_stomp",
        default: "false",
        help: "true|false: serve STOMP over WebSocket on web_stomp.tcp.port",
        apply: |s, _, v| {
            s.web_stomp.enabled = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "plugins.web_amqp",
        default: "false",
        help: "true|false: serve AMQP 1.0 over WebSocket on web_amqp.tcp.port",
        apply: |s, _, v| {
            s.web_amqp.enabled = boolean(v)?;
            Ok(())
        },
    },
];
