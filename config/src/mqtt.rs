//! The `mqtt.*` keys: the MQTT listener's settings, named as RabbitMQ's MQTT plugin names
//! them where it has the same setting.

use crate::listen_addr::ListenAddr;
use crate::settings::parse::{boolean, count_or_infinity, parse_listener, required};
use crate::settings::Setting;

/// The protocol's largest remaining length, 268435455 bytes (RabbitMQ's
/// `mqtt.max_packet_size_authenticated` default).
pub const MQTT_MAX_PACKET_SIZE_LIMIT: usize = 268_435_455;

/// Settings of the MQTT listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MqttSettings {
    /// `mqtt.listeners.tcp.default`: the MQTT listener, `None` when disabled with
    /// `mqtt.listeners.tcp = none`. Default `0.0.0.0:1883`.
    pub listener: Option<ListenAddr>,
    /// `mqtt.listeners.tcp.<name>`: further MQTT listeners.
    pub additional_listeners: Vec<(String, ListenAddr)>,
    /// `mqtt.listeners.ssl.default`: the MQTTS (MQTT over TLS) listener, usually 8883, with
    /// the certificates of `ssl_options.*`. Default none.
    pub tls_listener: Option<ListenAddr>,
    /// `mqtt.ssl_cert_login`: an MQTTS client that presented a verified certificate logs in
    /// as the user its certificate names (`ssl_cert_login_from`), without a password.
    /// Default false.
    pub ssl_cert_login: bool,
    /// `mqtt.vhost`: the vhost of clients whose user name has no `vhost:` prefix. Default `/`.
    pub vhost: String,
    /// `mqtt.default_user`: the user anonymous clients log in as. Default `guest`.
    pub default_user: String,
    /// `mqtt.default_pass`: that user's password. Default `guest`.
    pub default_pass: String,
    /// `mqtt.allow_anonymous`: whether clients without credentials log in as
    /// `mqtt.default_user`. Default true, as in RabbitMQ.
    pub allow_anonymous: bool,
    /// `mqtt.exchange`: the topic exchange MQTT publishes to and subscriptions bind to.
    /// Default `amq.topic`.
    pub exchange: String,
    /// `mqtt.prefetch`: the most unacknowledged QoS 1/2 deliveries per connection. Default 10.
    pub prefetch: u16,
    /// `mqtt.max_packet_size`: the largest packet (remaining length) accepted from an
    /// authenticated client, in bytes. Default 268435455.
    pub max_packet_size: usize,
    /// `mqtt.max_connections`: the most MQTT connections at once, on every MQTT listener
    /// together (TCP, TLS, WebSocket); more get CONNACK "server unavailable". Default none.
    pub max_connections: Option<usize>,
    /// `mqtt.max_keep_alive`: the longest keep-alive a client may ask for, in seconds (as
    /// Mosquitto's `max_keepalive`). An MQTT 5 client asking for more, or for none, is told
    /// this one in CONNACK's Server Keep Alive and held to it; an MQTT 3.1.1 client is
    /// refused with CONNACK 0x02. Default none (any keep-alive, 0 included).
    pub max_keep_alive: Option<u16>,
    /// `mqtt.durable_queue_type`: the type of a persistent session's (clean session false,
    /// or an MQTT 5 session expiry above 0) QoS 1 and 2 subscription queues, `classic` or
    /// `quorum`, as RabbitMQ's key. QoS 0 subscriptions and clean sessions keep classic
    /// queues. Default `classic`.
    pub durable_queue_type: String,
}

impl Default for MqttSettings {
    fn default() -> Self {
        MqttSettings {
            listener: Some(ListenAddr::new("0.0.0.0", 1883)),
            additional_listeners: Vec::new(),
            tls_listener: None,
            ssl_cert_login: false,
            vhost: "/".to_owned(),
            default_user: "guest".to_owned(),
            default_pass: "guest".to_owned(),
            allow_anonymous: true,
            exchange: "amq.topic".to_owned(),
            prefetch: 10,
            max_packet_size: MQTT_MAX_PACKET_SIZE_LIMIT,
            max_connections: None,
            max_keep_alive: None,
            durable_queue_type: "classic".to_owned(),
        }
    }
}

/// The `mqtt.` keys: each key's default, `--help` line and parser (see [`Setting`]).
pub const MQTT_SETTINGS: &[Setting] = &[
    Setting {
        key: "mqtt.listeners.tcp.default",
        default: "1883",
        help: "MQTT listener: PORT or HOST:PORT",
        apply: |s, _, v| {
            s.mqtt.listener = Some(parse_listener(v)?);
            Ok(())
        },
    },
    Setting {
        key: "mqtt.listeners.tcp.<name>",
        default: "",
        help: "an additional MQTT listener",
        apply: |s, name, v| {
            let addr = parse_listener(v)?;
            let listeners = &mut s.mqtt.additional_listeners;
            match listeners.iter_mut().find(|(existing, _)| existing == name) {
                Some(entry) => entry.1 = addr,
                None => listeners.push((name.to_owned(), addr)),
            }
            Ok(())
        },
    },
    Setting {
        key: "mqtt.listeners.tcp",
        default: "",
        help: "none: disable the MQTT listeners",
        apply: |s, _, v| {
            if v != "none" {
                return Err("none".to_owned());
            }
            s.mqtt.listener = None;
            s.mqtt.additional_listeners.clear();
            Ok(())
        },
    },
    Setting {
        key: "mqtt.listeners.ssl.default",
        default: "",
        help: "MQTTS listener: PORT or HOST:PORT (none); uses ssl_options.*",
        apply: |s, _, v| {
            s.mqtt.tls_listener = Some(parse_listener(v)?);
            Ok(())
        },
    },
    Setting {
        key: "mqtt.ssl_cert_login",
        default: "false",
        help: "true|false: MQTTS clients with a verified certificate log in as its name",
        apply: |s, _, v| {
            s.mqtt.ssl_cert_login = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "mqtt.vhost",
        default: "/",
        help: "vhost of users named without 'vhost:'",
        apply: |s, _, v| {
            s.mqtt.vhost = required(v, "a virtual host name")?;
            Ok(())
        },
    },
    Setting {
        key: "mqtt.default_user",
        default: "guest",
        help: "user of anonymous MQTT clients",
        apply: |s, _, v| {
            s.mqtt.default_user = required(v, "a user name")?;
            Ok(())
        },
    },
    Setting {
        key: "mqtt.default_pass",
        default: "guest",
        help: "password of that user",
        apply: |s, _, v| {
            s.mqtt.default_pass = v.to_owned();
            Ok(())
        },
    },
    Setting {
        key: "mqtt.allow_anonymous",
        default: "true",
        help: "true|false: MQTT clients may connect without credentials",
        apply: |s, _, v| {
            s.mqtt.allow_anonymous = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "mqtt.exchange",
        default: "amq.topic",
        help: "topic exchange of MQTT publishes and subscriptions",
        apply: |s, _, v| {
            s.mqtt.exchange = required(v, "an exchange name")?;
            Ok(())
        },
    },
    Setting {
        key: "mqtt.prefetch",
        default: "10",
        help: "unacknowledged QoS 1/2 deliveries per MQTT connection, 1-65535",
        apply: |s, _, v| {
            let prefetch = v.parse().ok().filter(|prefetch| *prefetch > 0);
            s.mqtt.prefetch = prefetch.ok_or("an integer between 1 and 65535")?;
            Ok(())
        },
    },
    Setting {
        key: "mqtt.max_packet_size",
        default: "268435455",
        help: "largest MQTT packet, bytes, 1-268435455",
        apply: |s, _, v| {
            let size = v
                .parse()
                .ok()
                .filter(|size| (1..=MQTT_MAX_PACKET_SIZE_LIMIT).contains(size));
            s.mqtt.max_packet_size = size.ok_or("an integer between 1 and 268435455 (bytes)")?;
            Ok(())
        },
    },
    Setting {
        key: "mqtt.max_connections",
        default: "infinity",
        help: "most MQTT connections, or infinity; more get CONNACK server unavailable",
        apply: |s, _, v| {
            s.mqtt.max_connections = count_or_infinity(v)?;
            Ok(())
        },
    },
    Setting {
        key: "mqtt.max_keep_alive",
        default: "none",
        help: "longest MQTT keep-alive, seconds 1-65535, or none; MQTT 5 clients get Server Keep Alive",
        apply: |s, _, v| {
            s.mqtt.max_keep_alive = match v {
                "none" => None,
                _ => Some(
                    v.parse()
                        .ok()
                        .filter(|seconds| *seconds > 0)
                        .ok_or("seconds between 1 and 65535, or none")?,
                ),
            };
            Ok(())
        },
    },
    Setting {
        key: "mqtt.durable_queue_type",
        default: "classic",
        help: "classic|quorum: type of persistent sessions' QoS 1/2 subscription queues",
        apply: |s, _, v| match v {
            "classic" | "quorum" => {
                s.mqtt.durable_queue_type = v.to_owned();
                Ok(())
            }
            _ => Err("classic or quorum".to_owned()),
        },
    },
];

impl MqttSettings {
    /// Every MQTT listener address: the default one (unless disabled), then the named ones.
    pub fn listeners(&self) -> impl Iterator<Item = &ListenAddr> {
        self.listener
            .iter()
            .chain(self.additional_listeners.iter().map(|(_, addr)| addr))
    }
}

#[cfg(test)]
mod tests {
    use crate::Settings;

    #[test]
    fn mqtt_keys_have_rabbitmq_defaults_and_parse() {
        let mut settings = Settings::default();
        assert_eq!(settings.mqtt.listener.as_ref().unwrap().port, 1883);
        assert_eq!(settings.mqtt.exchange, "amq.topic");
        assert_eq!(settings.mqtt.prefetch, 10);
        assert!(settings.mqtt.allow_anonymous);
        settings
            .set("mqtt.listeners.tcp.default", "127.0.0.1:0")
            .unwrap();
        settings.set("mqtt.listeners.tcp.other", "1884").unwrap();
        settings.set("mqtt.vhost", "devices").unwrap();
        settings.set("mqtt.allow_anonymous", "false").unwrap();
        settings.set("mqtt.prefetch", "100").unwrap();
        settings.set("mqtt.max_packet_size", "1024").unwrap();
        settings.set("mqtt.exchange", "mqtt.x").unwrap();
        let ports: Vec<u16> = settings.mqtt.listeners().map(|a| a.port).collect();
        assert_eq!(ports, vec![0, 1884]);
        assert_eq!(settings.mqtt.vhost, "devices");
        assert!(!settings.mqtt.allow_anonymous);
        assert_eq!(settings.mqtt.prefetch, 100);
        assert_eq!(settings.mqtt.max_packet_size, 1024);
        assert_eq!(settings.mqtt.exchange, "mqtt.x");
        assert_eq!(settings.mqtt.max_keep_alive, None);
        settings.set("mqtt.max_keep_alive", "30").unwrap();
        assert_eq!(settings.mqtt.max_keep_alive, Some(30));
        settings.set("mqtt.max_keep_alive", "none").unwrap();
        assert_eq!(settings.mqtt.max_keep_alive, None);
        settings.set("mqtt.listeners.tcp", "none").unwrap();
        assert_eq!(settings.mqtt.listeners().count(), 0);
        assert!(settings.mqtt.tls_listener.is_none() && !settings.mqtt.ssl_cert_login);
        settings.set("mqtt.listeners.ssl.default", "8883").unwrap();
        settings.set("mqtt.ssl_cert_login", "true").unwrap();
        assert_eq!(
            settings.mqtt.tls_listener.as_ref().map(|a| a.port),
            Some(8883)
        );
        assert!(settings.mqtt.ssl_cert_login);
        assert!(settings.set("mqtt.listeners.ssl.default", "nope").is_err());
        assert_eq!(settings.mqtt.durable_queue_type, "classic");
        settings.set("mqtt.durable_queue_type", "quorum").unwrap();
        assert_eq!(settings.mqtt.durable_queue_type, "quorum");
        assert!(settings.set("mqtt.durable_queue_type", "stream").is_err());
    }

    #[test]
    fn bad_mqtt_values_and_unknown_keys_are_refused() {
        let mut settings = Settings::default();
        for (key, value) in [
            ("mqtt.prefetch", "0"),
            ("mqtt.prefetch", "70000"),
            ("mqtt.max_packet_size", "268435456"),
            ("mqtt.allow_anonymous", "yes"),
            ("mqtt.listeners.tcp.default", "nope"),
            ("mqtt.listeners.tcp", "1883"),
            ("mqtt.vhost", ""),
            ("mqtt.max_keep_alive", "0"),
            ("mqtt.max_keep_alive", "65536"),
            ("mqtt.no_such_key", "1"),
        ] {
            assert!(settings.set(key, value).is_err(), "{key}={value}");
        }
        assert_eq!(settings, Settings::default());
    }
}
