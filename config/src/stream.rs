//! The stream protocol listener's settings: the `stream.` keys, named as in RabbitMQ's
//! stream plugin.

use crate::listen_addr::ListenAddr;
use crate::settings::parse::{listener_or_none, parse_listener, required};
use crate::settings::Setting;

/// The port the stream protocol listens on unless configured: 5552, as RabbitMQ.
pub const STREAM_PORT: u16 = 5552;

/// Everything the stream listener reads at start-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamProtocolSettings {
    /// `stream.listeners.tcp.default`: where to listen; `none` disables the listener.
    /// Default `0.0.0.0:5552`.
    pub listener: Option<ListenAddr>,
    /// `stream.listeners.ssl.default`: the stream protocol over TLS, usually 5551, with
    /// the certificates of `ssl_options.*`. Default none.
    pub tls_listener: Option<ListenAddr>,
    /// `stream.advertised_host`: the host Metadata tells clients to connect to. Default:
    /// the address the client connected to.
    pub advertised_host: Option<String>,
    /// `stream.advertised_port`: the port Metadata tells clients. Default: the listener's.
    pub advertised_port: Option<u16>,
    /// `stream.frame_max`: the largest frame, bytes. Default 1 MiB, as RabbitMQ.
    pub frame_max: u32,
    /// `stream.heartbeat`: the heartbeat offered, seconds. Default 60.
    pub heartbeat: u32,
    /// `stream.initial_frame_max`: the largest frame before Open. Default 8192.
    pub initial_frame_max: u32,
}

impl Default for StreamProtocolSettings {
    fn default() -> StreamProtocolSettings {
        StreamProtocolSettings {
            listener: Some(ListenAddr::new("0.0.0.0", STREAM_PORT)),
            tls_listener: None,
            advertised_host: None,
            advertised_port: None,
            frame_max: 1_048_576,
            heartbeat: 60,
            initial_frame_max: 8_192,
        }
    }
}

/// A whole number.
fn whole(value: &str) -> Result<u32, String> {
    value
        .parse::<u32>()
        .map_err(|_| "a whole number".to_owned())
}

/// The `stream.` keys: each key's default, `--help` line and parser (see [`Setting`]).
pub const STREAM_SETTINGS: &[Setting] = &[
    Setting {
        key: "stream.listeners.tcp.default",
        default: "5552",
        help: "stream protocol listener: PORT, HOST:PORT or none",
        apply: |s, _, v| {
            s.stream.listener = listener_or_none(v)?;
            Ok(())
        },
    },
    Setting {
        key: "stream.listeners.ssl.default",
        default: "",
        help: "stream protocol over TLS: PORT or HOST:PORT (none); uses ssl_options.*",
        apply: |s, _, v| {
            s.stream.tls_listener = Some(parse_listener(v)?);
            Ok(())
        },
    },
    Setting {
        key: "stream.advertised_host",
        default: "",
        help:
            "host that Metadata tells stream clients to connect to (the address they connected to)",
        apply: |s, _, v| {
            s.stream.advertised_host = Some(required(v, "a host name or address")?);
            Ok(())
        },
    },
    Setting {
        key: "stream.advertised_port",
        default: "",
        help: "port that Metadata tells stream clients (the listener's)",
        apply: |s, _, v| {
            let port = v.parse::<u16>().ok().filter(|p| *p > 0);
            s.stream.advertised_port = Some(port.ok_or("a port, 1 to 65535")?);
            Ok(())
        },
    },
    Setting {
        key: "stream.frame_max",
        default: "1048576",
        help: "largest stream protocol frame, bytes",
        apply: |s, _, v| {
            let frame_max = whole(v)?;
            if frame_max != 0 && frame_max < 8_192 {
                return Err("0 (no limit) or at least 8192".to_owned());
            }
            s.stream.frame_max = frame_max;
            Ok(())
        },
    },
    Setting {
        key: "stream.heartbeat",
        default: "60",
        help: "stream protocol heartbeat offered, seconds",
        apply: |s, _, v| {
            s.stream.heartbeat = whole(v)?;
            Ok(())
        },
    },
    Setting {
        key: "stream.initial_frame_max",
        default: "8192",
        help: "largest stream protocol frame before Open, bytes",
        apply: |s, _, v| {
            let initial = whole(v)?;
            if initial < 1_024 {
                return Err("at least 1024".to_owned());
            }
            s.stream.initial_frame_max = initial;
            Ok(())
        },
    },
];

#[cfg(test)]
mod tests {
    use crate::Settings;

    #[test]
    fn stream_keys_set_the_stream_settings() {
        let mut settings = Settings::default();
        assert_eq!(
            settings.stream.listener.as_ref().map(|a| a.port),
            Some(5552)
        );
        settings
            .set("stream.listeners.tcp.default", "127.0.0.1:0")
            .unwrap();
        settings
            .set("stream.advertised_host", "broker.example")
            .unwrap();
        settings.set("stream.advertised_port", "15552").unwrap();
        settings.set("stream.heartbeat", "0").unwrap();
        assert_eq!(
            settings.stream.listener.as_ref().map(|a| a.to_string()),
            Some("127.0.0.1:0".to_string())
        );
        assert_eq!(
            settings.stream.advertised_host.as_deref(),
            Some("broker.example")
        );
        assert_eq!(settings.stream.advertised_port, Some(15552));
        assert_eq!(settings.stream.heartbeat, 0);
        settings
            .set("stream.listeners.tcp.default", "none")
            .unwrap();
        assert!(settings.stream.listener.is_none());
    }

    #[test]
    fn bad_stream_values_and_unknown_stream_keys_are_refused() {
        let mut settings = Settings::default();
        assert!(settings.set("stream.advertised_port", "0").is_err());
        assert!(settings.set("stream.frame_max", "100").is_err());
        assert!(settings.set("stream.initial_frame_max", "x").is_err());
        let error = settings.set("stream.bogus", "1").unwrap_err();
        assert!(error.to_string().contains("stream.bogus"), "{error}");
    }
}
