//! The STOMP listener's settings: the `stomp.` keys, named as in RabbitMQ's STOMP plugin.

use std::time::Duration;

use crate::listen_addr::ListenAddr;
use crate::settings::parse::{
    boolean, count_or_infinity, listener_or_none, parse_listener, positive, required,
};
use crate::settings::Setting;

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

/// The `stomp.` keys: each key's default, `--help` line and parser (see [`Setting`]).
pub const STOMP_SETTINGS: &[Setting] = &[
    Setting {
        key: "stomp.listeners.tcp.default",
        default: "61613",
        help: "STOMP listener: PORT, HOST:PORT or none",
        apply: |s, _, v| {
            s.stomp.listener = listener_or_none(v)?;
            Ok(())
        },
    },
    Setting {
        key: "stomp.listeners.ssl.default",
        default: "",
        help: "STOMP-over-TLS listener: PORT or HOST:PORT (none); uses ssl_options.*",
        apply: |s, _, v| {
            s.stomp.tls_listener = Some(parse_listener(v)?);
            Ok(())
        },
    },
    Setting {
        key: "stomp.default_user",
        default: "guest",
        help: "login when CONNECT has none, or none",
        apply: |s, _, v| {
            s.stomp.default_user = match v {
                "" => return Err("a user name or none".to_owned()),
                "none" => None,
                user => Some(user.to_owned()),
            };
            Ok(())
        },
    },
    Setting {
        key: "stomp.default_pass",
        default: "guest",
        help: "passcode of that login",
        apply: |s, _, v| {
            s.stomp.default_pass = Some(v.to_owned());
            Ok(())
        },
    },
    Setting {
        key: "stomp.default_vhost",
        default: "/",
        help: "vhost when CONNECT has no host header",
        apply: |s, _, v| {
            s.stomp.default_vhost = required(v, "a virtual host name")?;
            Ok(())
        },
    },
    Setting {
        key: "stomp.implicit_connect",
        default: "false",
        help: "true|false: log in with the default user without CONNECT",
        apply: |s, _, v| {
            s.stomp.implicit_connect = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "stomp.max_frame_size",
        default: "4194304",
        help: "largest STOMP body, bytes",
        apply: |s, _, v| {
            s.stomp.max_frame_size = positive(v)?;
            Ok(())
        },
    },
    Setting {
        key: "stomp.max_frame_size_unauthenticated",
        default: "65536",
        help: "largest STOMP body before CONNECT, bytes",
        apply: |s, _, v| {
            s.stomp.max_frame_size_unauthenticated = positive(v)?;
            Ok(())
        },
    },
    Setting {
        key: "stomp.max_headers",
        default: "100",
        help: "most headers in a STOMP frame",
        apply: |s, _, v| {
            s.stomp.max_headers = positive(v)?;
            Ok(())
        },
    },
    Setting {
        key: "stomp.max_header_length",
        default: "102400",
        help: "longest STOMP header line, bytes",
        apply: |s, _, v| {
            s.stomp.max_header_length = positive(v)?;
            Ok(())
        },
    },
    Setting {
        key: "stomp.default_nack_requeue",
        default: "true",
        help: "true|false: NACK without a requeue header requeues",
        apply: |s, _, v| {
            s.stomp.default_nack_requeue = boolean(v)?;
            Ok(())
        },
    },
    Setting {
        key: "stomp.login_timeout",
        default: "10000",
        help: "milliseconds a STOMP client has to CONNECT",
        apply: |s, _, v| {
            s.stomp.login_timeout = Duration::from_millis(positive(v)? as u64);
            Ok(())
        },
    },
    Setting {
        key: "stomp.max_connections",
        default: "infinity",
        help: "most STOMP connections, or infinity; more get an ERROR frame at CONNECT",
        apply: |s, _, v| {
            s.stomp.max_connections = count_or_infinity(v)?;
            Ok(())
        },
    },
    Setting {
        key: "stomp.ssl_cert_login",
        default: "false",
        help: "true|false: TLS clients with a certificate and no login header log in as its user",
        apply: |s, _, v| {
            s.stomp.ssl_cert_login = boolean(v)?;
            Ok(())
        },
    },
];

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
