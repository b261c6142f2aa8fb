//! Applying `key = value` settings: one key through the table ([`Settings::set`]), a whole
//! rabbitmq.conf text or file, and the value parsers the table's entries share.

use std::path::Path;

use super::table::Setting;
use super::Settings;
use crate::cluster::ClusterSettings;
use crate::error::ConfigError;
use crate::listen_addr::ListenAddr;

impl Settings {
    /// Applies one `key = value` setting. Surrounding whitespace on either is ignored.
    ///
    /// Fails with [`ConfigError::UnknownKey`] for a key Warren does not know and
    /// [`ConfigError::InvalidValue`] (naming key, value and what is expected) for a bad value;
    /// on failure the settings are unchanged.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        let key = key.trim();
        let value = value.trim();
        let (setting, name) = match Setting::exact(key) {
            Some(setting) => (setting, ""),
            None => {
                if let Some(result) = self.set_in_section(key, value) {
                    return result;
                }
                Setting::family(key).ok_or_else(|| ConfigError::UnknownKey {
                    key: key.to_owned(),
                })?
            }
        };
        setting
            .apply(self, name, value)
            .map_err(|expected| ConfigError::InvalidValue {
                key: key.to_owned(),
                value: value.to_owned(),
                expected,
            })
    }

    /// Hands a key of a section with its own module (`stomp.`, clustering, `web_*.`,
    /// `stream.`, `mqtt.`) to that module; `None` for a key of no section.
    fn set_in_section(&mut self, key: &str, value: &str) -> Option<Result<(), ConfigError>> {
        if !in_section(key) {
            return None;
        }
        Some(if key.starts_with("stomp.") {
            self.stomp.set(key, value)
        } else if key.starts_with("web_mqtt.") {
            self.web_mqtt.set("web_mqtt", key, value)
        } else if key.starts_with("web_stomp.") {
            self.web_stomp.set("web_stomp", key, value)
        } else if key.starts_with("web_amqp.") {
            self.web_amqp.set("web_amqp", key, value)
        } else if key.starts_with("stream.") {
            self.stream.set(key, value)
        } else if key.starts_with("mqtt.") {
            self.mqtt.set(key, value, parse_listener)
        } else {
            self.cluster.set(key, value)
        })
    }

    /// Applies rabbitmq.conf text to this configuration, line by line in order.
    ///
    /// Blank lines and lines whose first non-blank character is `#` are skipped; every other
    /// line is `key = value`, split at the first `=` (so values may contain `=` and `#`).
    /// Errors are wrapped in [`ConfigError::Line`] with the 1-based line number.
    pub fn apply_conf_str(&mut self, text: &str) -> Result<(), ConfigError> {
        for (index, line) in text.lines().enumerate() {
            let at_line = |error| ConfigError::Line {
                line: index + 1,
                error: Box::new(error),
            };
            let trimmed = line.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let (key, value) = trimmed.split_once('=').ok_or_else(|| {
                at_line(ConfigError::MissingEquals {
                    text: trimmed.to_owned(),
                })
            })?;
            if key.trim().is_empty() {
                return Err(at_line(ConfigError::MissingKey));
            }
            self.set(key, value).map_err(at_line)?;
        }
        Ok(())
    }

    /// Warren's defaults with rabbitmq.conf text applied; see [`Settings::apply_conf_str`].
    pub fn from_conf_str(text: &str) -> Result<Settings, ConfigError> {
        let mut settings = Settings::default();
        settings.apply_conf_str(text)?;
        Ok(settings)
    }

    /// Warren's defaults with a rabbitmq.conf file applied. Errors name the path.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Settings, ConfigError> {
        let mut settings = Settings::default();
        settings.apply_file(path.as_ref())?;
        Ok(settings)
    }

    /// Applies a rabbitmq.conf file to this configuration. Errors are wrapped in
    /// [`ConfigError::File`] naming the path.
    pub fn apply_file(&mut self, path: &Path) -> Result<(), ConfigError> {
        let in_file = |error| ConfigError::File {
            path: path.to_owned(),
            error: Box::new(error),
        };
        let text = std::fs::read_to_string(path).map_err(|error| {
            in_file(ConfigError::Read {
                reason: error.to_string(),
            })
        })?;
        self.apply_conf_str(&text).map_err(in_file)
    }
}

/// Whether a key belongs to a section with its own module (`stomp.`, clustering, `web_*.`,
/// `stream.`, `mqtt.`), which [`Settings::set`] hands it to.
pub(super) fn in_section(key: &str) -> bool {
    [
        "stomp.",
        "web_mqtt.",
        "web_stomp.",
        "web_amqp.",
        "stream.",
        "mqtt.",
    ]
    .iter()
    .any(|prefix| key.starts_with(prefix))
        || ClusterSettings::owns(key)
}

/// A listener address, or what the key expects and why the value is not that.
pub(crate) fn parse_listener(value: &str) -> Result<ListenAddr, String> {
    ListenAddr::parse(value).map_err(|reason| {
        format!(
            "PORT, HOST:PORT, [IPV6]:PORT or IPV6:PORT with a port between 0 and 65535 ({reason})"
        )
    })
}

/// The value, unless it is empty.
pub(super) fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

/// A non-empty value, or what a key expecting `what` says.
pub(super) fn required(value: &str, what: &str) -> Result<String, String> {
    non_empty(value).ok_or_else(|| what.to_owned())
}

/// `true` or `false`.
pub(super) fn boolean(value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("true or false".to_owned()),
    }
}

/// `verify_peer` (true) or `verify_none` (false).
pub(super) fn verify_peer(value: &str) -> Result<bool, String> {
    match value {
        "verify_peer" => Ok(true),
        "verify_none" => Ok(false),
        _ => Err("verify_peer or verify_none".to_owned()),
    }
}

/// A TCP port.
pub(super) fn port(value: &str) -> Result<u16, String> {
    value
        .parse()
        .map_err(|_| "a port between 0 and 65535".to_owned())
}

/// An interface to listen on: an IP address (IPv6 with or without brackets) or a host name.
pub(super) fn interface(value: &str) -> Result<String, String> {
    ListenAddr::parse(&format!("[{}]:0", value.trim_matches(['[', ']'])))
        .or_else(|_| ListenAddr::parse(&format!("{value}:0")))
        .map(|addr| addr.host)
        .map_err(|_| "an IP address or host name".to_owned())
}

/// A positive number of milliseconds.
pub(super) fn positive_millis(value: &str) -> Result<u64, String> {
    value
        .parse()
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or_else(|| "a positive integer (milliseconds)".to_owned())
}

/// A count, or `infinity` (`None`) for no limit.
pub(super) fn count_or_infinity(value: &str) -> Result<Option<usize>, String> {
    if value == "infinity" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|_| "a non-negative integer or 'infinity'".to_owned())
}

/// A listener or user name in a key: non-empty, without whitespace or further dots.
pub(super) fn is_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('.') && !name.contains(char::is_whitespace)
}

/// `none` (empty list) or comma-separated names, blanks around names ignored.
pub(super) fn parse_user_list(value: &str) -> Option<Vec<String>> {
    if value == "none" {
        return Some(Vec::new());
    }
    let names: Vec<String> = value.split(',').map(|n| n.trim().to_owned()).collect();
    if names.iter().any(|n| n.is_empty()) {
        return None;
    }
    Some(names)
}

/// What a size key accepts, for its error message.
pub(super) const SIZE_EXPECTED: &str =
    "a size in bytes, as an integer or with a KB, MB, GB, KiB, MiB or GiB suffix";

/// A size as a `u64` byte count, or [`SIZE_EXPECTED`].
pub(super) fn size_u64(value: &str) -> Result<u64, String> {
    parse_size(value)
        .and_then(|size| size.try_into().ok())
        .ok_or_else(|| SIZE_EXPECTED.to_owned())
}

/// A finite, non-negative decimal number.
pub(super) fn parse_ratio(value: &str) -> Option<f64> {
    value
        .parse::<f64>()
        .ok()
        .filter(|ratio| ratio.is_finite() && *ratio >= 0.0)
}

/// A byte count: a plain integer, or one with a decimal (KB, MB, GB) or binary (KiB, MiB, GiB)
/// suffix, optionally separated by a space. Suffixes are case-insensitive.
pub(super) fn parse_size(value: &str) -> Option<usize> {
    let digits_end = value
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(value.len());
    let (number, suffix) = value.split_at(digits_end);
    let number: usize = number.parse().ok()?;
    let multiplier: usize = match suffix.trim_start().to_ascii_lowercase().as_str() {
        "" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(multiplier)
}
