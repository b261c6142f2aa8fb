//! The `web_mqtt.*`, `web_stomp.*` and `web_amqp.*` keys: MQTT, STOMP and AMQP 1.0 over
//! WebSocket, named as RabbitMQ's Web-MQTT and Web-STOMP plugins name them (AMQP 1.0 over
//! WebSocket follows the same pattern). Off unless `plugins.web_mqtt` / `plugins.web_stomp`
//! / `plugins.web_amqp` is true or a port is set.

use crate::error::ConfigError;
use crate::listen_addr::ListenAddr;

/// The Web-MQTT port (RabbitMQ's default).
pub const WEB_MQTT_PORT: u16 = 15675;
/// The Web-STOMP port (RabbitMQ's default).
pub const WEB_STOMP_PORT: u16 = 15674;
/// The AMQP 1.0 over WebSocket port: open source RabbitMQ has no such listener, so this is
/// Warren's choice, next to the Web-MQTT and Web-STOMP ports.
pub const WEB_AMQP_PORT: u16 = 15678;

/// One WebSocket listener's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSettings {
    /// Whether the plain WebSocket listener runs (`plugins.web_*`, or a `tcp.port` set).
    pub enabled: bool,
    /// `*.tcp.ip` and `*.tcp.port`: where it listens. Default `0.0.0.0` and the protocol's
    /// port.
    pub listener: ListenAddr,
    /// `*.ssl.port`: a WebSocket-over-TLS listener (on `*.tcp.ip`), with `ssl_options.*`.
    pub tls_port: Option<u16>,
    /// `*.ws_path`: the request path. Default `/ws`.
    pub path: String,
}

impl WebSettings {
    /// Off, on `port` when enabled.
    pub fn new(port: u16) -> WebSettings {
        WebSettings {
            enabled: false,
            listener: ListenAddr::new("0.0.0.0", port),
            tls_port: None,
            path: "/ws".to_owned(),
        }
    }

    /// The TLS listener's address, when one is configured.
    pub fn tls_listener(&self) -> Option<ListenAddr> {
        self.tls_port
            .map(|port| ListenAddr::new(self.listener.host.clone(), port))
    }

    /// Applies `<prefix>.tcp.port`, `<prefix>.tcp.ip`, `<prefix>.ssl.port` or
    /// `<prefix>.ws_path`; `Err(UnknownKey)` for anything else.
    pub(crate) fn set(&mut self, prefix: &str, key: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |expected: &str| ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            expected: expected.to_owned(),
        };
        let port = || value.parse::<u16>().map_err(|_| invalid("a port, 0-65535"));
        match key.strip_prefix(prefix) {
            Some(".tcp.port") => {
                self.listener.port = port()?;
                self.enabled = true;
            }
            Some(".tcp.ip") => {
                if value.is_empty() {
                    return Err(invalid("an IP address or host name"));
                }
                self.listener.host = value.to_owned();
            }
            Some(".ssl.port") => self.tls_port = Some(port()?),
            Some(".ws_path") => {
                if !value.starts_with('/') {
                    return Err(invalid("a path starting with /"));
                }
                self.path = value.to_owned();
            }
            _ => {
                return Err(ConfigError::UnknownKey {
                    key: key.to_owned(),
                })
            }
        }
        Ok(())
    }
}

/// The `web_mqtt.*` and `web_stomp.*` keys with what they set, for `--help`.
pub const WEB_KEYS: &[(&str, &str)] = &[
    (
        "web_mqtt.tcp.port",
        "Web-MQTT port; setting it enables Web-MQTT (15675)",
    ),
    ("web_mqtt.tcp.ip", "Web-MQTT interface (0.0.0.0)"),
    (
        "web_mqtt.ssl.port",
        "Web-MQTT over TLS port (none); uses ssl_options.*",
    ),
    ("web_mqtt.ws_path", "Web-MQTT request path (/ws)"),
    (
        "web_stomp.tcp.port",
        "Web-STOMP port; setting it enables Web-STOMP (15674)",
    ),
    ("web_stomp.tcp.ip", "Web-STOMP interface (0.0.0.0)"),
    (
        "web_stomp.ssl.port",
        "Web-STOMP over TLS port (none); uses ssl_options.*",
    ),
    ("web_stomp.ws_path", "Web-STOMP request path (/ws)"),
    (
        "web_amqp.tcp.port",
        "AMQP 1.0 over WebSocket port; setting it enables it (15678)",
    ),
    (
        "web_amqp.tcp.ip",
        "AMQP 1.0 over WebSocket interface (0.0.0.0)",
    ),
    (
        "web_amqp.ssl.port",
        "AMQP 1.0 over WebSocket over TLS port (none); uses ssl_options.*",
    ),
    (
        "web_amqp.ws_path",
        "AMQP 1.0 over WebSocket request path (/ws)",
    ),
];

#[cfg(test)]
mod tests {
    use crate::Settings;

    #[test]
    fn web_listeners_are_off_until_enabled_or_given_a_port() {
        let mut settings = Settings::default();
        assert!(!settings.web_mqtt.enabled && !settings.web_stomp.enabled);
        settings.set("plugins.web_stomp", "true").unwrap();
        assert!(settings.web_stomp.enabled);
        assert_eq!(settings.web_stomp.listener.port, 15674);
        settings.set("web_mqtt.tcp.port", "0").unwrap();
        settings.set("web_mqtt.tcp.ip", "127.0.0.1").unwrap();
        settings.set("web_mqtt.ssl.port", "15676").unwrap();
        assert!(settings.web_mqtt.enabled);
        assert_eq!(settings.web_mqtt.path, "/ws");
        assert_eq!(
            settings.web_mqtt.tls_listener().map(|addr| addr.port),
            Some(15676)
        );
        assert!(settings.set("web_mqtt.ws_path", "ws").is_err());
        assert!(settings.set("web_mqtt.tcp.port", "99999").is_err());
        assert!(settings.set("web_mqtt.nonsense", "1").is_err());
        assert!(!settings.web_amqp.enabled);
        assert_eq!(settings.web_amqp.listener.port, 15678);
        settings.set("plugins.web_amqp", "true").unwrap();
        settings.set("web_amqp.ws_path", "/amqp").unwrap();
        assert!(settings.web_amqp.enabled);
        assert_eq!(settings.web_amqp.path, "/amqp");
        assert!(settings.set("plugins.web_amqp", "on").is_err());
    }
}
