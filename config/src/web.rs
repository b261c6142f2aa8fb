//! The `web_mqtt.*`, `web_stomp.*` and `web_amqp.*` keys: MQTT, STOMP and AMQP 1.0 over
//! WebSocket, named as RabbitMQ's Web-MQTT and Web-STOMP plugins name them (AMQP 1.0 over
//! WebSocket follows the same pattern). Off unless `plugins.web_mqtt` / `plugins.web_stomp`
//! / `plugins.web_amqp` is true or a port is set.

use crate::listen_addr::ListenAddr;
use crate::settings::parse::{port, required};
use crate::settings::Setting;

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
}

/// The four keys of one WebSocket listener, `$prefix.tcp.port` and so on, setting
/// `Settings::$field`.
macro_rules! web_settings {
    ($field:ident, $prefix:literal, $name:literal, $port:literal) => {
        &[
            Setting {
                key: concat!($prefix, ".tcp.port"),
                // Not the default as a value: setting the port also enables the listener.
                default: "",
                help: concat!(
                    $name,
                    " port; setting it enables the listener (",
                    $port,
                    ")"
                ),
                apply: |s, _, v| {
                    s.$field.listener.port = port(v)?;
                    s.$field.enabled = true;
                    Ok(())
                },
            },
            Setting {
                key: concat!($prefix, ".tcp.ip"),
                default: "0.0.0.0",
                help: concat!($name, " interface"),
                apply: |s, _, v| {
                    s.$field.listener.host = required(v, "an IP address or host name")?;
                    Ok(())
                },
            },
            Setting {
                key: concat!($prefix, ".ssl.port"),
                default: "",
                help: concat!($name, " over TLS port (none); uses ssl_options.*"),
                apply: |s, _, v| {
                    s.$field.tls_port = Some(port(v)?);
                    Ok(())
                },
            },
            Setting {
                key: concat!($prefix, ".ws_path"),
                default: "/ws",
                help: concat!($name, " request path"),
                apply: |s, _, v| {
                    if !v.starts_with('/') {
                        return Err("a path starting with /".to_owned());
                    }
                    s.$field.path = v.to_owned();
                    Ok(())
                },
            },
        ]
    };
}

/// The `web_mqtt.` keys (see [`Setting`]).
pub const WEB_MQTT_SETTINGS: &[Setting] = web_settings!(web_mqtt, "web_mqtt", "Web-MQTT", "15675");
/// The `web_stomp.` keys (see [`Setting`]).
pub const WEB_STOMP_SETTINGS: &[Setting] =
    web_settings!(web_stomp, "web_stomp", "Web-STOMP", "15674");
/// The `web_amqp.` keys (see [`Setting`]).
pub const WEB_AMQP_SETTINGS: &[Setting] =
    web_settings!(web_amqp, "web_amqp", "AMQP 1.0 over WebSocket", "15678");

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
