//! The STOMP listener's settings: the `stomp.` keys, named as in RabbitMQ's STOMP plugin.

use std::time::Duration;

use crate::error::ConfigError;
use crate::listen_addr::ListenAddr;

/// The port STOMP listens on unless configured: 61613, as RabbitMQ.
pub const STOMP_PORT: u16 = 61613;

/// Everything the STOMP listener reads at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StompSettings {
    /// `stomp.listeners.tcp.default`: where to listen; `none` disables the listener.
    /// Default `0.0.0.0:61613`.
    pub listener: Option<ListenAddr>,
    /// `stomp.listeners.ssl.default`: the STOMP-over-TLS listener, usually 61614, with the
    /// certificates of `ssl_options.*`. Default none.
    pub tls_listener: Option<ListenAddr>,
    /// `stomp.default_user`: the login used when CONNECT has none. Default `guest`.
    pub default_user: Option<String>,
    /// `stomp.default_pass`: the passcode used with the default login. Default `guest`.
    pub default_pass: Option<String>,
    /// `stomp.default_vhost`: the vhost used when CONNECT has no `host`. Default `/`.
    pub default_vhost: String,
    /// `stomp.implicit_connect`: a first frame other than CONNECT logs in with the default
    /// user. Default false.
    pub implicit_connect: bool,
    /// `stomp.max_frame_size`: the largest frame body, in bytes. Default 4 MiB.
    pub max_frame_size: usize,
    /// `stomp.max_frame_size_unauthenticated`: the largest frame body before CONNECT.
    /// Default 64 KiB.
    pub max_frame_size_unauthenticated: usize,
    /// `stomp.max_headers`: the most headers in one frame. Default 100.
    pub max_headers: usize,
    /// `stomp.max_header_length`: the longest command or header line. Default 100 KiB.
    pub max_header_length: usize,
    /// `stomp.default_nack_requeue`: whether a NACK without `requeue` requeues. Default true.
    pub default_nack_requeue: bool,
    /// `stomp.login_timeout`: milliseconds a client has to CONNECT. Default 10 s.
    pub login_timeout: Duration,
    /// `stomp.ssl_cert_login`: a STOMP-over-TLS client that presented a verified certificate
    /// and sends CONNECT without a `login` header logs in as the user its certificate names
    /// (`ssl_cert_login_from`), without a passcode. Default false.
    pub ssl_cert_login: bool,
    /// `stomp.max_connections`: the most STOMP connections at once, on every STOMP listener
    /// together (TCP, TLS, WebSocket); more get an ERROR frame at CONNECT. Default none.
    pub max_connections: Option<usize>,
}

impl Default for StompSettings {
    fn default() -> StompSettings {
        StompSettings {
            listener: Some(ListenAddr::new("0.0.0.0", STOMP_PORT)),
            tls_listener: None,
            default_user: Some("guest".to_owned()),
            default_pass: Some("guest".to_owned()),
            default_vhost: "/".to_owned(),
            implicit_connect: false,
            max_frame_size: 4 * 1024 * 1024,
            max_frame_size_unauthenticated: 64 * 1024,
            max_headers: 100,
            max_header_length: 100 * 1024,
            default_nack_requeue: true,
            login_timeout: Duration::from_millis(10_000),
            ssl_cert_login: false,
            max_connections: None,
        }
    }
}

/// The `stomp.` keys, with what they set; shown by `--help`.
pub const STOMP_KEYS: &[(&str, &str)] = &[
    (
        "stomp.listeners.tcp.default",
        "STOMP listener: PORT, HOST:PORT or none (0.0.0.0:61613)",
    ),
    (
        "stomp.listeners.ssl.default",
        "STOMP-over-TLS listener: PORT or HOST:PORT (none); uses ssl_options.*",
    ),
    (
        "stomp.default_user",
        "login when CONNECT has none, or none (guest)",
    ),
    ("stomp.default_pass", "passcode of that login (guest)"),
    (
        "stomp.default_vhost",
        "vhost when CONNECT has no host header (/)",
    ),
    (
        "stomp.implicit_connect",
        "true|false: log in with the default user without CONNECT (false)",
    ),
    (
        "stomp.max_frame_size",
        "largest STOMP body, bytes (4194304)",
    ),
    (
        "stomp.max_frame_size_unauthenticated",
        "largest STOMP body before CONNECT, bytes (65536)",
    ),
    ("stomp.max_headers", "most headers in a STOMP frame (100)"),
    (
        "stomp.max_header_length",
        "longest STOMP header line, bytes (102400)",
    ),
    (
        "stomp.default_nack_requeue",
        "true|false: NACK without a requeue header requeues (true)",
    ),
    (
        "stomp.login_timeout",
        "milliseconds a STOMP client has to CONNECT (10000)",
    ),
    (
        "stomp.max_connections",
        "most STOMP connections, or infinity; more get an ERROR frame at CONNECT (infinity)",
    ),
    (
        "stomp.ssl_cert_login",
        "true|false: TLS clients with a certificate and no login header log in as its user (false)",
    ),
];

impl StompSettings {
    /// Applies one key; `key` is the full key, `stomp.` prefix included.
    pub(crate) fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
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
        let positive = || {
            value
                .parse::<usize>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| invalid("a positive integer"))
        };
        match key {
            "stomp.listeners.tcp.default" => {
                self.listener = if value == "none" {
                    None
                } else {
                    Some(ListenAddr::parse(value).map_err(|reason| {
                        invalid(&format!(
                            "none, PORT, HOST:PORT, [IPV6]:PORT or IPV6:PORT ({reason})"
                        ))
                    })?)
                };
            }
            "stomp.listeners.ssl.default" => {
                self.tls_listener = Some(ListenAddr::parse(value).map_err(|reason| {
                    invalid(&format!(
                        "PORT, HOST:PORT, [IPV6]:PORT or IPV6:PORT ({reason})"
                    ))
                })?);
            }
            "stomp.default_user" => {
                self.default_user = match value {
                    "" => return Err(invalid("a user name or none")),
                    "none" => None,
                    user => Some(user.to_owned()),
                };
            }
            "stomp.default_pass" => self.default_pass = Some(value.to_owned()),
            "stomp.default_vhost" => {
                if value.is_empty() {
                    return Err(invalid("a virtual host name"));
                }
                self.default_vhost = value.to_owned();
            }
            "stomp.implicit_connect" => self.implicit_connect = boolean()?,
            "stomp.default_nack_requeue" => self.default_nack_requeue = boolean()?,
            "stomp.ssl_cert_login" => self.ssl_cert_login = boolean()?,
            "stomp.max_connections" => {
                self.max_connections = match value {
                    "infinity" => None,
                    _ => Some(
                        value
                            .parse()
                            .map_err(|_| invalid("a number of connections or infinity"))?,
                    ),
                };
            }
            "stomp.max_frame_size" => self.max_frame_size = positive()?,
            "stomp.max_frame_size_unauthenticated" => {
                self.max_frame_size_unauthenticated = positive()?
            }
            "stomp.max_headers" => self.max_headers = positive()?,
            "stomp.max_header_length" => self.max_header_length = positive()?,
            "stomp.login_timeout" => {
                self.login_timeout = Duration::from_millis(positive()? as u64);
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

#[cfg(test)]
mod tests {
    use crate::Settings;

    #[test]
    fn stomp_keys_set_the_stomp_settings() {
        let mut settings = Settings::default();
        assert_eq!(
            settings.stomp.listener.as_ref().map(|a| a.port),
            Some(61613)
        );
        settings
            .set("stomp.listeners.tcp.default", "127.0.0.1:0")
            .unwrap();
        settings.set("stomp.implicit_connect", "true").unwrap();
        settings.set("stomp.max_headers", "7").unwrap();
        settings.set("stomp.default_user", "none").unwrap();
        assert_eq!(
            settings.stomp.listener.as_ref().map(|a| a.to_string()),
            Some("127.0.0.1:0".to_string())
        );
        assert!(settings.stomp.implicit_connect);
        assert_eq!(settings.stomp.max_headers, 7);
        assert_eq!(settings.stomp.default_user, None);
        settings.set("stomp.listeners.tcp.default", "none").unwrap();
        assert!(settings.stomp.listener.is_none());
        assert!(settings.stomp.tls_listener.is_none());
        settings
            .set("stomp.listeners.ssl.default", "61614")
            .unwrap();
        assert_eq!(
            settings.stomp.tls_listener.as_ref().map(|a| a.port),
            Some(61614)
        );
        assert!(settings.set("stomp.listeners.ssl.default", "x").is_err());
        assert!(!settings.stomp.ssl_cert_login);
        settings.set("stomp.ssl_cert_login", "true").unwrap();
        assert!(settings.stomp.ssl_cert_login);
        assert!(settings.set("stomp.ssl_cert_login", "yes").is_err());
    }

    #[test]
    fn bad_stomp_values_and_unknown_stomp_keys_are_refused() {
        let mut settings = Settings::default();
        assert!(settings.set("stomp.max_frame_size", "0").is_err());
        assert!(settings.set("stomp.implicit_connect", "yes").is_err());
        assert!(settings
            .set("stomp.listeners.tcp.default", "nowhere")
            .is_err());
        let error = settings.set("stomp.bogus", "1").unwrap_err();
        assert!(error.to_string().contains("stomp.bogus"), "{error}");
    }
}
