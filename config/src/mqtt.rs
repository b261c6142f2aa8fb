//! The `mqtt.*` keys: the MQTT listener's settings, named as RabbitMQ's MQTT plugin names
//! them where it has the same setting.

use crate::error::ConfigError;
use crate::listen_addr::ListenAddr;

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

/// The `mqtt.*` keys with what they set, for `--help`.
pub const MQTT_KEYS: &[(&str, &str)] = &[
    (
        "mqtt.listeners.tcp.default",
        "MQTT listener: PORT or HOST:PORT (0.0.0.0:1883)",
    ),
    ("mqtt.listeners.tcp.<name>", "an additional MQTT listener"),
    ("mqtt.listeners.tcp", "none: disable the MQTT listeners"),
    (
        "mqtt.listeners.ssl.default",
        "MQTTS listener: PORT or HOST:PORT (none); uses ssl_options.*",
    ),
    (
        "mqtt.ssl_cert_login",
        "true|false: MQTTS clients with a verified certificate log in as its name (false)",
    ),
    ("mqtt.vhost", "vhost of users named without 'vhost:' (/)"),
    (
        "mqtt.default_user",
        "user of anonymous MQTT clients (guest)",
    ),
    ("mqtt.default_pass", "password of that user (guest)"),
    (
        "mqtt.allow_anonymous",
        "true|false: MQTT clients may connect without credentials (true)",
    ),
    (
        "mqtt.exchange",
        "topic exchange of MQTT publishes and subscriptions (amq.topic)",
    ),
    (
        "mqtt.prefetch",
        "unacknowledged QoS 1/2 deliveries per MQTT connection, 1-65535 (10)",
    ),
    (
        "mqtt.max_packet_size",
        "largest MQTT packet, bytes, 1-268435455 (268435455)",
    ),
    (
        "mqtt.max_connections",
        "most MQTT connections, or infinity; more get CONNACK server unavailable (infinity)",
    ),
    (
        "mqtt.max_keep_alive",
        "longest MQTT keep-alive, seconds 1-65535, or none; MQTT 5 clients get Server Keep Alive (none)",
    ),
    (
        "mqtt.durable_queue_type",
        "classic|quorum: type of persistent sessions' QoS 1/2 subscription queues (classic)",
    ),
];

impl MqttSettings {
    /// Applies one `mqtt.*` key; `parse_listener` parses listener addresses as the AMQP keys
    /// do. `Err(UnknownKey)` for a key this section does not have.
    pub(crate) fn set(
        &mut self,
        key: &str,
        value: &str,
        parse_listener: impl Fn(&str) -> Result<ListenAddr, String>,
    ) -> Result<(), ConfigError> {
        let invalid = |expected: &str| ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            expected: expected.to_owned(),
        };
        let boolean = || match value {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err(invalid("true or false")),
        };
        match key {
            "mqtt.listeners.tcp.default" => {
                self.listener = Some(parse_listener(value).map_err(|e| invalid(&e))?);
            }
            "mqtt.listeners.tcp" => {
                if value != "none" {
                    return Err(invalid("none"));
                }
                self.listener = None;
                self.additional_listeners.clear();
            }
            "mqtt.listeners.ssl.default" => {
                self.tls_listener = Some(parse_listener(value).map_err(|e| invalid(&e))?);
            }
            "mqtt.ssl_cert_login" => self.ssl_cert_login = boolean()?,
            "mqtt.vhost" => {
                if value.is_empty() {
                    return Err(invalid("a virtual host name"));
                }
                self.vhost = value.to_owned();
            }
            "mqtt.default_user" => {
                if value.is_empty() {
                    return Err(invalid("a user name"));
                }
                self.default_user = value.to_owned();
            }
            "mqtt.default_pass" => self.default_pass = value.to_owned(),
            "mqtt.allow_anonymous" => self.allow_anonymous = boolean()?,
            "mqtt.exchange" => {
                if value.is_empty() {
                    return Err(invalid("an exchange name"));
                }
                self.exchange = value.to_owned();
            }
            "mqtt.prefetch" => {
                self.prefetch = value
                    .parse()
                    .ok()
                    .filter(|prefetch| *prefetch > 0)
                    .ok_or_else(|| invalid("an integer between 1 and 65535"))?;
            }
            "mqtt.max_connections" => {
                self.max_connections = match value {
                    "infinity" => None,
                    _ => Some(
                        value
                            .parse()
                            .map_err(|_| invalid("a number of connections or infinity"))?,
                    ),
                };
            }
            "mqtt.max_keep_alive" => {
                self.max_keep_alive = match value {
                    "none" => None,
                    _ => Some(
                        value
                            .parse()
                            .ok()
                            .filter(|seconds| *seconds > 0)
                            .ok_or_else(|| invalid("seconds between 1 and 65535, or none"))?,
                    ),
                };
            }
            "mqtt.durable_queue_type" => match value {
                "classic" | "quorum" => self.durable_queue_type = value.to_owned(),
                _ => return Err(invalid("classic or quorum")),
            },
            "mqtt.max_packet_size" => {
                self.max_packet_size = value
                    .parse()
                    .ok()
                    .filter(|size| (1..=MQTT_MAX_PACKET_SIZE_LIMIT).contains(size))
                    .ok_or_else(|| invalid("an integer between 1 and 268435455 (bytes)"))?;
            }
            _ => {
                let name = key
                    .strip_prefix("mqtt.listeners.tcp.")
                    .filter(|n| !n.is_empty() && !n.contains('.'))
                    .ok_or_else(|| ConfigError::UnknownKey {
                        key: key.to_owned(),
                    })?;
                let addr = parse_listener(value).map_err(|e| invalid(&e))?;
                match self
                    .additional_listeners
                    .iter_mut()
                    .find(|(existing, _)| existing == name)
                {
                    Some(entry) => entry.1 = addr,
                    None => self.additional_listeners.push((name.to_owned(), addr)),
                }
            }
        }
        Ok(())
    }

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
