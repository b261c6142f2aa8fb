//! The value types of the top-level settings: log level, TLS options, HTTP limits, alarm
//! thresholds.

use std::path::PathBuf;
use std::time::Duration;

/// How much a broker logs, from most to least verbose (`log.console.level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum LogLevel {
    /// `debug`
    Debug,
    /// `info`, the default.
    #[default]
    Info,
    /// `warning`
    Warning,
    /// `error`
    Error,
    /// `critical`
    Critical,
    /// `none`: log nothing.
    None,
}

impl LogLevel {
    /// The level named as in rabbitmq.conf (`debug`, `info`, `warning`, `error`, `critical`,
    /// `none`).
    pub fn from_name(name: &str) -> Option<LogLevel> {
        Some(match name {
            "debug" => LogLevel::Debug,
            "info" => LogLevel::Info,
            "warning" => LogLevel::Warning,
            "error" => LogLevel::Error,
            "critical" => LogLevel::Critical,
            "none" => LogLevel::None,
            _ => return None,
        })
    }

    /// The rabbitmq.conf name of the level.
    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::None => "none",
        }
    }

    /// The nearest `tracing` filter directive (`tracing` has no "critical", so it maps to
    /// `error`; `none` maps to `off`).
    pub fn tracing_directive(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warning => "warn",
            LogLevel::Error | LogLevel::Critical => "error",
            LogLevel::None => "off",
        }
    }
}

impl std::fmt::Display for LogLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `ssl_options.*`: TLS settings of the AMQPS listener, as RabbitMQ names them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SslOptions {
    /// `ssl_options.certfile`: PEM certificate chain.
    pub certfile: Option<PathBuf>,
    /// `ssl_options.keyfile`: PEM private key.
    pub keyfile: Option<PathBuf>,
    /// `ssl_options.cacertfile`: PEM CA certificates for client certificates.
    pub cacertfile: Option<PathBuf>,
    /// `ssl_options.verify = verify_peer`: ask clients for a certificate and check it.
    pub verify_peer: bool,
    /// `ssl_options.fail_if_no_peer_cert = true`: refuse clients without a certificate.
    pub fail_if_no_peer_cert: bool,
}

/// Client-certificate checks of an HTTPS endpoint (`management.ssl.*`, `prometheus.ssl.*`),
/// with the meaning of the `ssl_options.*` keys of the same names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerVerification {
    /// `*.ssl.cacertfile`: PEM CA certificates for client certificates.
    pub cacertfile: Option<PathBuf>,
    /// `*.ssl.verify = verify_peer`: ask clients for a certificate and check it.
    pub verify_peer: bool,
    /// `*.ssl.fail_if_no_peer_cert = true`: refuse clients without a certificate.
    pub fail_if_no_peer_cert: bool,
}

/// The limits of one HTTP listener (the management API over HTTP or HTTPS, Prometheus):
/// `management.http.max_body_size`, `management.tcp.max_connections` /
/// `management.ssl.max_connections`, `management.tcp.idle_timeout` /
/// `management.ssl.idle_timeout`, with RabbitMQ's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLimits {
    /// The largest request body in bytes; a larger one is answered 413 (RabbitMQ's default:
    /// 10,000,000 bytes, about 100k queues of definitions).
    pub max_body_size: usize,
    /// The most connections at once; more are closed as soon as they are accepted. `None`
    /// (`infinity`) for no limit. Default 1024 (Ranch's, which RabbitMQ's listener inherits).
    pub max_connections: Option<usize>,
    /// How long a connection may stay idle (no request in progress, nothing sent or
    /// received) before it is closed; also the longest a client may take to send a request's
    /// headers. Default 60 s (Cowboy's `idle_timeout`).
    pub idle_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            max_body_size: 10_000_000,
            max_connections: Some(1024),
            idle_timeout: Duration::from_millis(60_000),
        }
    }
}

/// Which part of a client certificate names the user it logs in as
/// (`ssl_cert_login_from`), for SASL EXTERNAL and `mqtt.ssl_cert_login`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CertLoginFrom {
    /// `distinguished_name`, RabbitMQ's default: the whole subject, as
    /// `CN=name,O=organisation,...` (RFC 4514 order).
    #[default]
    DistinguishedName,
    /// `common_name`: the subject's common name (CN).
    CommonName,
}

/// When the memory alarm is raised (`vm_memory_high_watermark.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryHighWatermark {
    /// A fraction of the memory available (`.relative`); 0 blocks every publisher.
    Relative(f64),
    /// A number of bytes (`.absolute`).
    Absolute(u64),
}

/// When the disk alarm is raised (`disk_free_limit.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DiskFreeLimit {
    /// A number of bytes of free space (`.absolute`).
    Absolute(u64),
    /// A multiple of the memory available (`.relative`), as RabbitMQ defines it.
    Relative(f64),
}
