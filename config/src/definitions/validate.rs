//! Checks a parsed definitions document before anything in it is applied.

use std::collections::HashSet;

use regex::Regex;

use super::arguments::oversized_integers;
use super::{Definitions, DefinitionsError, DestinationType, UnappliedCounts};

/// The exchange types built into the broker.
const BUILT_IN_EXCHANGE_TYPES: [&str; 4] = ["direct", "fanout", "topic", "headers"];

/// The exchanges every vhost has without declaring them (RabbitMQ's `amq.*` set).
const BUILT_IN_EXCHANGES: [&str; 6] = [
    "amq.direct",
    "amq.fanout",
    "amq.topic",
    "amq.headers",
    "amq.match",
    "amq.rabbitmq.trace",
];

/// An exchange whose type is an `x-` plugin type: kept in the definitions, but only usable if
/// a plugin provides the type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginExchange {
    /// The exchange's vhost.
    pub vhost: String,
    /// The exchange's name.
    pub name: String,
    /// The plugin type, such as `x-delayed-message`.
    pub exchange_type: String,
}

impl std::fmt::Display for PluginExchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exchange '{}' in vhost '{}' has plugin type '{}'",
            self.name, self.vhost, self.exchange_type
        )
    }
}

/// What a successful validation found worth telling the operator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationReport {
    /// Exchanges with `x-` plugin types, in file order.
    pub plugin_exchanges: Vec<PluginExchange>,
    /// Sections kept as JSON but not applied yet.
    pub unapplied: UnappliedCounts,
}

impl Definitions {
    /// Checks everything that can be checked before the definitions are applied, and reports
    /// every problem at once in [`DefinitionsError::Invalid`].
    ///
    /// - Permissions, queues, exchanges and bindings must name a vhost the file declares or
    ///   `default_vhost`.
    /// - Permission users must be declared in the file or be among `existing_users` (the
    ///   broker's users at boot, such as the default user).
    /// - Permission patterns must be valid regular expressions (Rust `regex` syntax, which
    ///   covers what RabbitMQ users write but not PCRE look-around or back-references).
    /// - Users need a readable hash with a known `hashing_algorithm`, or a plain `password`.
    /// - Exchange types must be `direct`, `fanout`, `topic`, `headers` or an `x-` plugin type
    ///   (the latter are listed in the report).
    /// - Binding sources and destinations must be declared in the file in the binding's vhost
    ///   or be built-in `amq.*` exchanges; the default exchange cannot be bound.
    /// - Queue and exchange names must be non-empty, and argument integers must fit 64 bits.
    ///
    /// A name declared twice is not a problem: the last declaration wins when applied.
    pub fn validate(
        &self,
        default_vhost: &str,
        existing_users: &[&str],
    ) -> Result<ValidationReport, DefinitionsError> {
        self.validate_with(&[default_vhost], existing_users)
    }

    /// [`Definitions::validate`] for a running broker: `existing_vhosts` (the first being
    /// the default vhost) may be named without being declared in the file.
    pub fn validate_with(
        &self,
        existing_vhosts: &[&str],
        existing_users: &[&str],
    ) -> Result<ValidationReport, DefinitionsError> {
        let default_vhost = existing_vhosts.first().copied().unwrap_or("/");
        let mut problems = Vec::new();
        let mut report = ValidationReport {
            plugin_exchanges: Vec::new(),
            unapplied: self.unapplied(),
        };

        let vhosts: HashSet<&str> = self
            .vhosts
            .iter()
            .map(|vhost| vhost.name.as_str())
            .chain(existing_vhosts.iter().copied())
            .collect();
        let check_vhost = |what: &str, vhost: &str, problems: &mut Vec<String>| {
            let known = vhosts.contains(vhost);
            if !known {
                problems.push(if existing_vhosts.len() > 1 {
                    format!(
                        "{what} names vhost '{vhost}', which is neither declared in the file nor \
                         an existing vhost"
                    )
                } else {
                    format!(
                        "{what} names vhost '{vhost}', which is neither declared in the file nor \
                         the default vhost '{default_vhost}'"
                    )
                });
            }
            known
        };
        let users: HashSet<&str> = self
            .users
            .iter()
            .map(|user| user.name.as_str())
            .chain(existing_users.iter().copied())
            .collect();
        let queues: HashSet<(&str, &str)> = self
            .queues
            .iter()
            .map(|queue| (queue.vhost.as_str(), queue.name.as_str()))
            .collect();
        let exchanges: HashSet<(&str, &str)> = self
            .exchanges
            .iter()
            .map(|exchange| (exchange.vhost.as_str(), exchange.name.as_str()))
            .collect();
        let exchange_exists = |vhost: &str, name: &str| {
            BUILT_IN_EXCHANGES.contains(&name) || exchanges.contains(&(vhost, name))
        };

        for vhost in &self.vhosts {
            if vhost.name.is_empty() {
                problems.push("a vhost has an empty name".to_owned());
            }
        }

        for user in &self.users {
            if user.name.is_empty() {
                problems.push("a user has an empty name".to_owned());
            }
            if let Err(problem) = user.credentials() {
                problems.push(problem);
            }
        }

        for permission in &self.permissions {
            let what = format!(
                "permission of user '{}' in vhost '{}'",
                permission.user, permission.vhost
            );
            check_vhost(&what, &permission.vhost, &mut problems);
            if !users.contains(permission.user.as_str()) {
                problems.push(format!(
                    "{what} names user '{}', which is neither declared in the file nor an \
                     existing user",
                    permission.user
                ));
            }
            for (field, pattern) in [
                ("configure", &permission.configure),
                ("write", &permission.write),
                ("read", &permission.read),
            ] {
                if let Err(error) = Regex::new(pattern) {
                    problems.push(format!(
                        "{what}: '{field}' pattern '{pattern}' is not a valid regular \
                         expression: {}",
                        regex_reason(&error)
                    ));
                }
            }
        }

        for queue in &self.queues {
            let what = format!("queue '{}' in vhost '{}'", queue.name, queue.vhost);
            if queue.name.is_empty() {
                problems.push(format!(
                    "{what} has an empty name (server-named queues cannot be pre-declared)"
                ));
            }
            check_vhost(&what, &queue.vhost, &mut problems);
            check_arguments(&what, &queue.arguments, &mut problems);
        }

        for exchange in &self.exchanges {
            let what = format!("exchange '{}' in vhost '{}'", exchange.name, exchange.vhost);
            if exchange.name.is_empty() {
                problems.push(format!(
                    "{what} has an empty name (the default exchange is built in and cannot be \
                     declared)"
                ));
            }
            check_vhost(&what, &exchange.vhost, &mut problems);
            let exchange_type = exchange.exchange_type.as_str();
            if exchange_type.starts_with("x-") {
                report.plugin_exchanges.push(PluginExchange {
                    vhost: exchange.vhost.clone(),
                    name: exchange.name.clone(),
                    exchange_type: exchange.exchange_type.clone(),
                });
            } else if !BUILT_IN_EXCHANGE_TYPES.contains(&exchange_type) {
                problems.push(format!(
                    "{what} has unknown type '{exchange_type}' (expected direct, fanout, topic, \
                     headers or an x- plugin type)"
                ));
            }
            check_arguments(&what, &exchange.arguments, &mut problems);
        }

        for binding in &self.bindings {
            let vhost = binding.vhost.as_str();
            let destination_type = binding.destination_type.name();
            let what = format!(
                "binding in vhost '{vhost}' from exchange '{}' to {destination_type} '{}'",
                binding.source, binding.destination
            );
            check_arguments(&what, &binding.arguments, &mut problems);
            if !check_vhost(&what, vhost, &mut problems) {
                continue;
            }
            if binding.source.is_empty() {
                problems.push(format!(
                    "{what}: the default exchange's bindings are implicit and cannot be declared"
                ));
            } else if !exchange_exists(vhost, &binding.source) {
                problems.push(format!(
                    "{what}: exchange '{}' is not declared in vhost '{vhost}'",
                    binding.source
                ));
            }
            let destination_exists = match binding.destination_type {
                DestinationType::Queue => queues.contains(&(vhost, binding.destination.as_str())),
                DestinationType::Exchange => exchange_exists(vhost, &binding.destination),
            };
            if !destination_exists {
                problems.push(format!(
                    "{what}: {destination_type} '{}' is not declared in vhost '{vhost}'",
                    binding.destination
                ));
            }
        }

        if problems.is_empty() {
            Ok(report)
        } else {
            Err(DefinitionsError::Invalid {
                path: self.source.clone(),
                problems,
            })
        }
    }
}

fn check_arguments(
    what: &str,
    arguments: &serde_json::Map<String, serde_json::Value>,
    problems: &mut Vec<String>,
) {
    for path in oversized_integers(arguments) {
        problems.push(format!(
            "{what}: argument '{path}' is an integer above {}, which no field value can hold",
            i64::MAX
        ));
    }
}

/// The one-line cause from a regex error (its syntax errors span several lines with a caret
/// under the problem).
fn regex_reason(error: &regex::Error) -> String {
    let text = error.to_string();
    text.lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("error: "))
        .unwrap_or(text.trim())
        .to_owned()
}
