//! The command line: `--config PATH` and repeatable `--set KEY=VALUE`, so tests and scripts can
//! give every setting without writing a file.

use std::path::PathBuf;

use crate::error::ConfigError;
use crate::settings::{all_settings, Settings};

/// The usage text `--help` returns in [`ConfigError::HelpRequested`].
pub fn usage() -> String {
    let mut text = String::from(
        "Usage: warren [--config PATH] [--set KEY=VALUE]...\n\
         \n\
         Options:\n  \
           --config PATH     apply a rabbitmq.conf-style file (key = value lines)\n  \
           --set KEY=VALUE   apply one setting after the file; repeatable, applied in order\n  \
           -h, --help        print this help\n\
         \n\
         Keys (default in parentheses):\n",
    );
    let keys: Vec<(&str, String)> = all_settings()
        .map(|setting| (setting.key, setting.description()))
        .collect();
    let width = keys.iter().map(|(key, _)| key.len()).max().unwrap_or(0);
    for (key, description) in &keys {
        text.push_str(&format!("  {key:width$}  {description}\n"));
    }
    text
}

impl Settings {
    /// Builds settings from command-line arguments, not including the program name (pass
    /// `std::env::args().skip(1)`).
    ///
    /// Starts from [`Settings::default`], applies the `--config` file (at most one) and then
    /// every `--set KEY=VALUE` in the order given, wherever the `--config` appeared. Both
    /// options also take their value after `=` (`--config=PATH`, `--set=KEY=VALUE`).
    /// `--help`/`-h` returns [`ConfigError::HelpRequested`] with the usage text; any other
    /// argument is [`ConfigError::UnknownArgument`].
    pub fn from_args(args: impl Iterator<Item = String>) -> Result<Settings, ConfigError> {
        let mut config: Option<PathBuf> = None;
        let mut sets: Vec<String> = Vec::new();
        let mut args = args;
        while let Some(argument) = args.next() {
            let (option, inline_value) = match argument.split_once('=') {
                Some((option, value)) if option.starts_with("--") => {
                    (option.to_owned(), Some(value.to_owned()))
                }
                _ => (argument.clone(), None),
            };
            match option.as_str() {
                "-h" | "--help" if inline_value.is_none() => {
                    return Err(ConfigError::HelpRequested(usage()))
                }
                "--config" => {
                    let path = take_value(&option, inline_value, &mut args, "a file path")?;
                    if config.is_some() {
                        return Err(ConfigError::DuplicateArgument(option));
                    }
                    config = Some(PathBuf::from(path));
                }
                "--set" => sets.push(take_value(&option, inline_value, &mut args, "KEY=VALUE")?),
                _ => return Err(ConfigError::UnknownArgument(argument)),
            }
        }
        let mut settings = Settings::default();
        if let Some(path) = config {
            settings.apply_file(&path)?;
        }
        for assignment in sets {
            let in_argument = |error| ConfigError::Argument {
                argument: format!("--set {assignment}"),
                error: Box::new(error),
            };
            let (key, value) = assignment.split_once('=').ok_or_else(|| {
                in_argument(ConfigError::MissingEquals {
                    text: assignment.clone(),
                })
            })?;
            if key.trim().is_empty() {
                return Err(in_argument(ConfigError::MissingKey));
            }
            settings.set(key, value).map_err(in_argument)?;
        }
        Ok(settings)
    }
}

/// The option's value: after `=` in the same argument, or the next argument.
fn take_value(
    option: &str,
    inline_value: Option<String>,
    args: &mut impl Iterator<Item = String>,
    expected: &str,
) -> Result<String, ConfigError> {
    inline_value
        .or_else(|| args.next())
        .filter(|value| !value.is_empty())
        .ok_or_else(|| ConfigError::MissingArgumentValue {
            option: option.to_owned(),
            expected: expected.to_owned(),
        })
}
