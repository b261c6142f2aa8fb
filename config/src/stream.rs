//! The stream protocol listener's settings: the `stream.` keys, named as in RabbitMQ's
//! stream plugin.

use crate::error::ConfigError;
use crate::listen_addr::ListenAddr;

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

/// The `stream.` keys, with what they set; shown by `--help`.
pub const STREAM_KEYS: &[(&str, &str)] = &[
    (
        "stream.listeners.tcp.default",
        "stream protocol listener: PORT, HOST:PORT or none (0.0.0.0:5552)",
    ),
    (
        "stream.listeners.ssl.default",
        "stream protocol over TLS: PORT or HOST:PORT (none); uses ssl_options.*",
    ),
    (
        "stream.advertised_host",
        "host that Metadata tells stream clients to connect to (the address they connected to)",
    ),
    (
        "stream.advertised_port",
        "port that Metadata tells stream clients (the listener's)",
    ),
    (
        "stream.frame_max",
        "largest stream protocol frame, bytes (1048576)",
    ),
    (
        "stream.heartbeat",
        "stream protocol heartbeat offered, seconds (60)",
    ),
    (
        "stream.initial_frame_max",
        "largest stream protocol frame before Open, bytes (8192)",
    ),
];

impl StreamProtocolSettings {
    /// Applies one key; `key` is the full key, `stream.` prefix included.
    pub(crate) fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let invalid = |expected: &str| ConfigError::InvalidValue {
            key: key.to_owned(),
            value: value.to_owned(),
            expected: expected.to_owned(),
        };
        let number = || value.parse::<u32>().map_err(|_| invalid("a whole number"));
        match key {
            "stream.listeners.tcp.default" => {
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
            "stream.listeners.ssl.default" => {
                self.tls_listener = Some(ListenAddr::parse(value).map_err(|reason| {
                    invalid(&format!(
                        "PORT, HOST:PORT, [IPV6]:PORT or IPV6:PORT ({reason})"
                    ))
                })?);
            }
            "stream.advertised_host" => {
                if value.is_empty() {
                    return Err(invalid("a host name or address"));
                }
                self.advertised_host = Some(value.to_owned());
            }
            "stream.advertised_port" => {
                self.advertised_port = Some(
                    value
                        .parse::<u16>()
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| invalid("a port, 1 to 65535"))?,
                );
            }
            "stream.frame_max" => {
                let frame_max = number()?;
                if frame_max != 0 && frame_max < 8_192 {
                    return Err(invalid("0 (no limit) or at least 8192"));
                }
                self.frame_max = frame_max;
            }
            "stream.heartbeat" => self.heartbeat = number()?,
            "stream.initial_frame_max" => {
                let initial = number()?;
                if initial < 1_024 {
                    return Err(invalid("at least 1024"));
                }
                self.initial_frame_max = initial;
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
