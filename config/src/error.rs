//! The one error type for settings: what went wrong, wrapped in where (line, file, argument).

use std::path::PathBuf;

/// Why the settings could not be built. The `Display` text is the complete message for the
/// operator, context included (`/etc/warren.conf: line 3: unknown configuration key 'foo'`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// `--help` or `-h` was given: print the usage text and exit successfully.
    HelpRequested(String),
    /// A key Warren does not know (often a typo).
    UnknownKey {
        /// The key as written.
        key: String,
    },
    /// A known key with a value it cannot take.
    InvalidValue {
        /// The key.
        key: String,
        /// The value as written, trimmed.
        value: String,
        /// What the key accepts, phrased to follow "expected".
        expected: String,
    },
    /// A configuration line that is not `key = value`.
    MissingEquals {
        /// The line, trimmed.
        text: String,
    },
    /// A configuration line of the form `= value`.
    MissingKey,
    /// A file that could not be read.
    Read {
        /// The operating system's explanation.
        reason: String,
    },
    /// A command-line argument Warren does not know.
    UnknownArgument(String),
    /// A command-line option given without the value it needs.
    MissingArgumentValue {
        /// The option, such as `--config`.
        option: String,
        /// What should follow it.
        expected: String,
    },
    /// An option that may be given only once was given again.
    DuplicateArgument(String),
    /// An error on a line of configuration text (1-based).
    Line {
        /// The line number.
        line: usize,
        /// What went wrong on it.
        error: Box<ConfigError>,
    },
    /// An error while reading or applying a configuration file.
    File {
        /// The file.
        path: PathBuf,
        /// What went wrong in it.
        error: Box<ConfigError>,
    },
    /// An error in one command-line argument, such as `--set heartbeat=x`.
    Argument {
        /// The argument as given.
        argument: String,
        /// What went wrong with it.
        error: Box<ConfigError>,
    },
}

impl ConfigError {
    /// The error without its line, file and argument context.
    pub fn innermost(&self) -> &ConfigError {
        match self {
            ConfigError::Line { error, .. }
            | ConfigError::File { error, .. }
            | ConfigError::Argument { error, .. } => error.innermost(),
            other => other,
        }
    }
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigError::HelpRequested(usage) => f.write_str(usage),
            ConfigError::UnknownKey { key } => write!(f, "unknown configuration key '{key}'"),
            ConfigError::InvalidValue {
                key,
                value,
                expected,
            } => write!(
                f,
                "invalid value '{value}' for '{key}': expected {expected}"
            ),
            ConfigError::MissingEquals { text } => {
                write!(f, "expected 'key = value', found '{text}'")
            }
            ConfigError::MissingKey => write!(f, "expected 'key = value', found no key"),
            ConfigError::Read { reason } => write!(f, "cannot read configuration file: {reason}"),
            ConfigError::UnknownArgument(argument) => {
                write!(f, "unknown argument '{argument}' (try --help)")
            }
            ConfigError::MissingArgumentValue { option, expected } => {
                write!(f, "'{option}' needs {expected}")
            }
            ConfigError::DuplicateArgument(option) => {
                write!(f, "'{option}' may be given only once")
            }
            ConfigError::Line { line, error } => write!(f, "line {line}: {error}"),
            ConfigError::File { path, error } => write!(f, "{}: {error}", path.display()),
            ConfigError::Argument { argument, error } => write!(f, "{argument}: {error}"),
        }
    }
}

impl std::error::Error for ConfigError {}
