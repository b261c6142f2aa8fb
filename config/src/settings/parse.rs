//! Applying `key = value` settings: one key through the table ([`Settings::set`]), a whole
//! rabbitmq.conf text or file, and the value parsers the table's entries share.

use std::path::Path;

use super::table::Setting;
use super::Settings;
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
            None => Setting::family(key).ok_or_else(|| ConfigError::UnknownKey {
                key: key.to_owned(),
            })?,
        };
        setting
            .apply(self, name, value)
            .map_err(|expected| ConfigError::InvalidValue {
                key: key.to_owned(),
                value: value.to_owned(),
                expected,
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

/// A listener address, or what the key expects and why the value is not that.
pub(crate) fn parse_listener(value: &str) -> Result<ListenAddr, String> {
    ListenAddr::parse(value).map_err(|reason| {
        format!(
            "PORT, HOST:PORT, [IPV6]:PORT or IPV6:PORT with a port between 0 and 65535 ({reason})"
        )
    })
}

/// A listener address (as [`parse_listener`] takes it), or `none` for no listener.
pub(crate) fn listener_or_none(value: &str) -> Result<Option<ListenAddr>, String> {
    if value == "none" {
        return Ok(None);
    }
    ListenAddr::parse(value)
        .map(Some)
        .map_err(|reason| format!("none, PORT, HOST:PORT, [IPV6]:PORT or IPV6:PORT ({reason})"))
}

/// A positive integer.
pub(crate) fn positive(value: &str) -> Result<usize, String> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| "a positive integer".to_owned())
}

/// The value, unless it is empty.
pub(crate) fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_owned())
}

/// A non-empty value, or what a key expecting `what` says.
pub(crate) fn required(value: &str, what: &str) -> Result<String, String> {
    non_empty(value).ok_or_else(|| what.to_owned())
}

/// `true` or `false`.
pub(crate) fn boolean(value: &str) -> Result<bool, String> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err("true or false".to_owned()),
    }
}

/// `verify_peer` (true) or `verify_none` (false).
pub(crate) fn verify_peer(value: &str) -> Result<bool, String> {
    match value {
        "verify_peer" => Ok(true),
        "verify_none" => Ok(false),
        _ => Err("verify_peer or verify_none".to_owned()),
    }
}

/// A TCP port.
pub(crate) fn port(value: &str) -> Result<u16, String> {
    value
        .parse()
        .map_err(|_| "a port between 0 and 65535".to_owned())
}

/// An interface to listen on: an IP address (IPv6 with or without brackets) or a host name.
pub(crate) fn interface(value: &str) -> Result<String, String> {
    ListenAddr::parse(&format!("[{}]:0", value.trim_matches(['[', ']'])))
        .or_else(|_| ListenAddr::parse(&format!("{value}:0")))
        .map(|addr| addr.host)
        .map_err(|_| "an IP address or host name".to_owned())
}

/// A positive number of milliseconds.
pub(crate) fn positive_millis(value: &str) -> Result<u64, String> {
    value
        .parse()
        .ok()
        .filter(|ms| *ms > 0)
        .ok_or_else(|| "a positive integer (milliseconds)".to_owned())
}

/// A count, or `infinity` (`None`) for no limit.
pub(crate) fn count_or_infinity(value: &str) -> Result<Option<usize>, String> {
    if value == "infinity" {
        return Ok(None);
    }
    value
        .parse()
        .map(Some)
        .map_err(|_| "a non-negative integer or 'infinity'".to_owned())
}

/// A listener or user name in a key: non-empty, without whitespace or further dots.
pub(crate) fn is_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('.') && !name.contains(char::is_whitespace)
}

/// `none` (empty list) or comma-separated names, blanks around names ignored.
pub(crate) fn parse_user_list(value: &str) -> Option<Vec<String>> {
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
pub(crate) const SIZE_EXPECTED: &str =
    "a size in bytes, as an integer or with a KB, MB, GB, KiB, MiB or GiB suffix";

/// A size as a `u64` byte count, or [`SIZE_EXPECTED`].
pub(crate) fn size_u64(value: &str) -> Result<u64, String> {
    parse_size(value)
        .and_then(|size| size.try_into().ok())
        .ok_or_else(|| SIZE_EXPECTED.to_owned())
}

/// A finite, non-negative decimal number.
pub(crate) fn parse_ratio(value: &str) -> Option<f64> {
    value
        .parse::<f64>()
        .ok()
        .filter(|ratio| ratio.is_finite() && *ratio >= 0.0)
}

/// A byte count: a plain integer, or one with a decimal (KB, MB, GB) or binary (KiB, MiB, GiB)
/// suffix, optionally separated by a space. Suffixes are case-insensitive.
pub(crate) fn parse_size(value: &str) -> Option<usize> {
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
