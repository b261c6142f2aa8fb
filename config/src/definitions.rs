//! RabbitMQ `definitions.json`: users, vhosts, permissions and topology exported by
//! `rabbitmqctl export_definitions` or the management UI (3.x and 4.x), or written by hand.
//!
//! Parsing ([`Definitions::from_file`], [`Definitions::from_json_str`]) only checks the JSON
//! shape; [`Definitions::validate`] then checks everything else that can be checked before the
//! broker applies anything, so a broken file never leaves a half-applied topology behind.
//! Policies, parameters, global parameters and topic permissions are kept as raw JSON here;
//! the server's loader (`src/definitions.rs`) parses and applies them.

mod arguments;
mod validate;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value as Json};

use warren_core::password::{HashingAlgorithm, PasswordHash};

pub use arguments::{json_args_to_table, json_to_value};
pub use validate::{PluginExchange, ValidationReport};

/// A whole definitions document. Every section is optional and defaults to empty; unknown
/// top-level keys are ignored, as RabbitMQ does.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Definitions {
    /// `rabbit_version`: the exporting node's version (3.x exports).
    pub rabbit_version: Option<String>,
    /// `rabbitmq_version`: the exporting node's version (3.8+ exports).
    pub rabbitmq_version: Option<String>,
    /// `product_name`, such as `RabbitMQ`.
    pub product_name: Option<String>,
    /// `product_version`.
    pub product_version: Option<String>,
    /// `users`.
    #[serde(deserialize_with = "null_as_default")]
    pub users: Vec<UserDefinition>,
    /// `vhosts`.
    #[serde(deserialize_with = "null_as_default")]
    pub vhosts: Vec<VhostDefinition>,
    /// `permissions`.
    #[serde(deserialize_with = "null_as_default")]
    pub permissions: Vec<PermissionDefinition>,
    /// `topic_permissions`, kept raw (applied by the server's loader).
    #[serde(deserialize_with = "null_as_default")]
    pub topic_permissions: Vec<Json>,
    /// `parameters` (per-vhost runtime parameters such as shovels), kept raw (stored by the
    /// server's loader for export; no component is implemented).
    #[serde(deserialize_with = "null_as_default")]
    pub parameters: Vec<Json>,
    /// `global_parameters` (such as `cluster_name`), kept raw (stored by the server's loader).
    #[serde(deserialize_with = "null_as_default")]
    pub global_parameters: Vec<Json>,
    /// `policies`, kept raw (applied by the server's loader).
    #[serde(deserialize_with = "null_as_default")]
    pub policies: Vec<Json>,
    /// `operator_policies` (same shape as `policies`; written by Warren's own durable
    /// definitions so operator policies survive a restart).
    #[serde(deserialize_with = "null_as_default")]
    pub operator_policies: Vec<Json>,
    /// `queues`.
    #[serde(deserialize_with = "null_as_default")]
    pub queues: Vec<QueueDefinition>,
    /// `exchanges`.
    #[serde(deserialize_with = "null_as_default")]
    pub exchanges: Vec<ExchangeDefinition>,
    /// `bindings`.
    #[serde(deserialize_with = "null_as_default")]
    pub bindings: Vec<BindingDefinition>,
    /// The file the definitions were read from, for error messages; `None` for text.
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

/// A user. RabbitMQ exports `password_hash` and `hashing_algorithm`; a hand-written file may
/// give a plain-text `password` instead (never both).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct UserDefinition {
    /// `name`.
    pub name: String,
    /// `password_hash`: base64 of salt and digest; empty for a user that cannot log in with a
    /// password.
    #[serde(default)]
    pub password_hash: Option<String>,
    /// `password`: plain text, for hand-written files.
    #[serde(default)]
    pub password: Option<String>,
    /// `hashing_algorithm`, such as `rabbit_password_hashing_sha256` (the default if absent).
    #[serde(default)]
    pub hashing_algorithm: Option<String>,
    /// `tags`, such as `administrator`. RabbitMQ 3.9+ writes an array, older versions a
    /// comma-separated string; both are read.
    #[serde(default, deserialize_with = "tags")]
    pub tags: Vec<String>,
    /// `limits` (`max-connections`, `max-channels`), kept as JSON; `Null` if absent.
    #[serde(default)]
    pub limits: Json,
}

impl UserDefinition {
    /// The user's stored password: the exported hash (with `hashing_algorithm`, default
    /// SHA-256), or a fresh SHA-256 hash of a plain-text `password`.
    ///
    /// The error is a sentence about this user, ready for a validation report.
    pub fn credentials(&self) -> Result<PasswordHash, String> {
        let name = &self.name;
        match (&self.password_hash, &self.password) {
            (Some(_), Some(_)) => Err(format!(
                "user '{name}' has both 'password_hash' and 'password': give only one"
            )),
            (None, None) => Err(format!(
                "user '{name}' has neither 'password_hash' nor 'password' (use \
                 \"password_hash\": \"\" for a user that cannot log in with a password)"
            )),
            (Some(hash), None) => {
                let algorithm = self
                    .hashing_algorithm
                    .as_deref()
                    .unwrap_or(HashingAlgorithm::Sha256.rabbit_name());
                PasswordHash::from_rabbit(algorithm, hash)
                    .map_err(|error| format!("user '{name}': {error}"))
            }
            (None, Some(password)) => match self.hashing_algorithm.as_deref() {
                None => Ok(PasswordHash::new(password)),
                Some(algorithm) => HashingAlgorithm::from_rabbit_name(algorithm)
                    .map(|algorithm| PasswordHash::with_algorithm(algorithm, password))
                    .ok_or_else(|| {
                        format!(
                            "user '{name}': {}",
                            warren_core::password::PasswordHashError::UnknownAlgorithm(
                                algorithm.to_owned()
                            )
                        )
                    }),
            },
        }
    }
}

/// A virtual host.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct VhostDefinition {
    /// `name`.
    pub name: String,
    /// `description` (3.8+; newer exports also put it in `metadata`).
    #[serde(default)]
    pub description: Option<String>,
    /// `tags`, as an array or a comma-separated string.
    #[serde(default, deserialize_with = "tags")]
    pub tags: Vec<String>,
    /// `metadata` (3.11+): `description`, `tags`, `default_queue_type`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub metadata: Map<String, Json>,
    /// `default_queue_type`, such as `classic` or `quorum`.
    #[serde(default)]
    pub default_queue_type: Option<String>,
}

impl VhostDefinition {
    /// The default queue type from `default_queue_type` or, failing that, from `metadata`.
    pub fn effective_default_queue_type(&self) -> Option<&str> {
        self.default_queue_type.as_deref().or_else(|| {
            self.metadata
                .get("default_queue_type")
                .and_then(Json::as_str)
        })
    }
}

/// A user's permissions in a vhost: three regular expressions over resource names.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PermissionDefinition {
    /// `user`.
    pub user: String,
    /// `vhost`.
    pub vhost: String,
    /// `configure`: resources the user may declare and delete.
    pub configure: String,
    /// `write`: resources the user may publish to or bind from.
    pub write: String,
    /// `read`: resources the user may consume from or bind to.
    pub read: String,
}

/// A queue.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct QueueDefinition {
    /// `name`.
    pub name: String,
    /// `vhost`.
    pub vhost: String,
    /// `durable` (true if absent).
    #[serde(default = "yes")]
    pub durable: bool,
    /// `auto_delete` (false if absent).
    #[serde(default)]
    pub auto_delete: bool,
    /// `arguments`, such as `x-queue-type` or `x-message-ttl`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub arguments: Map<String, Json>,
    /// `type` (3.8+ exports): `classic`, `quorum` or `stream`.
    #[serde(default, rename = "type")]
    pub queue_type: Option<String>,
}

/// An exchange.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ExchangeDefinition {
    /// `name`.
    pub name: String,
    /// `vhost`.
    pub vhost: String,
    /// `type`: `direct`, `fanout`, `topic`, `headers` or an `x-` plugin type.
    #[serde(rename = "type")]
    pub exchange_type: String,
    /// `durable` (true if absent).
    #[serde(default = "yes")]
    pub durable: bool,
    /// `auto_delete` (false if absent).
    #[serde(default)]
    pub auto_delete: bool,
    /// `internal` (false if absent): clients may not publish to it directly.
    #[serde(default)]
    pub internal: bool,
    /// `arguments`, such as `alternate-exchange`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub arguments: Map<String, Json>,
}

/// What a binding routes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DestinationType {
    /// `queue`
    Queue,
    /// `exchange`: an exchange-to-exchange binding.
    Exchange,
}

impl DestinationType {
    /// `queue` or `exchange`.
    pub fn name(self) -> &'static str {
        match self {
            DestinationType::Queue => "queue",
            DestinationType::Exchange => "exchange",
        }
    }
}

/// A binding from an exchange to a queue or another exchange.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct BindingDefinition {
    /// `source`: the exchange messages come from.
    pub source: String,
    /// `vhost`.
    pub vhost: String,
    /// `destination`: the queue or exchange they go to.
    pub destination: String,
    /// `destination_type`.
    pub destination_type: DestinationType,
    /// `routing_key` (empty if absent).
    #[serde(default)]
    pub routing_key: String,
    /// `arguments` (headers exchanges match on these).
    #[serde(default, deserialize_with = "null_as_default")]
    pub arguments: Map<String, Json>,
}

/// How many kept-but-not-applied entries a document holds, per section.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnappliedCounts {
    /// `policies`.
    pub policies: usize,
    /// `parameters`.
    pub parameters: usize,
    /// `global_parameters`.
    pub global_parameters: usize,
    /// `topic_permissions`.
    pub topic_permissions: usize,
}

impl UnappliedCounts {
    /// Whether every section is empty.
    pub fn is_empty(&self) -> bool {
        *self == UnappliedCounts::default()
    }
}

impl std::fmt::Display for UnappliedCounts {
    /// `kept but not applied yet: 2 policies, 1 parameter` (or `nothing` if empty).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = [
            (self.policies, "policy", "policies"),
            (self.parameters, "parameter", "parameters"),
            (
                self.global_parameters,
                "global parameter",
                "global parameters",
            ),
            (
                self.topic_permissions,
                "topic permission",
                "topic permissions",
            ),
        ]
        .into_iter()
        .filter(|(count, _, _)| *count > 0)
        .map(|(count, one, many)| format!("{count} {}", if count == 1 { one } else { many }))
        .collect();
        if parts.is_empty() {
            f.write_str("nothing kept without being applied")
        } else {
            write!(f, "kept but not applied yet: {}", parts.join(", "))
        }
    }
}

impl Definitions {
    /// Parses a definitions document. Errors carry serde_json's line and column.
    pub fn from_json_str(text: &str) -> Result<Definitions, DefinitionsError> {
        parse(text, None)
    }

    /// Reads and parses a definitions file; errors name the path. The path is kept in
    /// [`Definitions::source`] so validation errors name it too.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Definitions, DefinitionsError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|error| DefinitionsError::Read {
            path: path.to_owned(),
            reason: error.to_string(),
        })?;
        let mut definitions = parse(&text, Some(path))?;
        definitions.source = Some(path.to_owned());
        Ok(definitions)
    }

    /// How many policies, parameters, global parameters and topic permissions were kept
    /// without being applied.
    pub fn unapplied(&self) -> UnappliedCounts {
        UnappliedCounts {
            policies: self.policies.len(),
            parameters: self.parameters.len(),
            global_parameters: self.global_parameters.len(),
            topic_permissions: self.topic_permissions.len(),
        }
    }
}

/// Parses the text as a JSON object of definitions sections.
fn parse(text: &str, path: Option<&Path>) -> Result<Definitions, DefinitionsError> {
    // serde reads a struct from a JSON array too (fields by position); a definitions
    // document is always an object, so anything else is refused where it starts.
    if let Some(offset) = text.find(|c: char| !c.is_whitespace()) {
        if !text[offset..].starts_with('{') {
            let before = &text[..offset];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |newline| newline + 1) + 1;
            return Err(DefinitionsError::Parse {
                path: path.map(Path::to_owned),
                line,
                column,
                reason: "expected a JSON object of definitions sections".to_owned(),
            });
        }
    }
    serde_json::from_str(text).map_err(|error| DefinitionsError::parse(path, &error))
}

/// Why a definitions document cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefinitionsError {
    /// The file could not be read.
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's explanation.
        reason: String,
    },
    /// The text is not JSON, or not JSON of the definitions shape.
    Parse {
        /// The file, if the text came from one.
        path: Option<PathBuf>,
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// serde_json's explanation, without its position suffix.
        reason: String,
    },
    /// The document parsed but refers to things that do not exist or holds values that cannot
    /// be applied. Every problem found is listed, so one run shows everything to fix.
    Invalid {
        /// The file, if the text came from one.
        path: Option<PathBuf>,
        /// One sentence per problem.
        problems: Vec<String>,
    },
}

impl DefinitionsError {
    fn parse(path: Option<&Path>, error: &serde_json::Error) -> DefinitionsError {
        let (line, column) = (error.line(), error.column());
        let text = error.to_string();
        let suffix = format!(" at line {line} column {column}");
        let reason = text.strip_suffix(&suffix).unwrap_or(&text).to_owned();
        DefinitionsError::Parse {
            path: path.map(Path::to_owned),
            line,
            column,
            reason,
        }
    }
}

impl std::fmt::Display for DefinitionsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let source = |path: &Option<PathBuf>| match path {
            Some(path) => format!("definitions file {}", path.display()),
            None => "definitions".to_owned(),
        };
        match self {
            DefinitionsError::Read { path, reason } => {
                write!(
                    f,
                    "cannot read definitions file {}: {reason}",
                    path.display()
                )
            }
            DefinitionsError::Parse {
                path,
                line,
                column,
                reason,
            } => write!(
                f,
                "{}: line {line}, column {column}: {reason}",
                source(path)
            ),
            DefinitionsError::Invalid { path, problems } => {
                let count = problems.len();
                let noun = if count == 1 { "problem" } else { "problems" };
                write!(f, "{}: {count} {noun}, nothing was applied:", source(path))?;
                for problem in problems {
                    write!(f, "\n  - {problem}")?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for DefinitionsError {}

fn yes() -> bool {
    true
}

/// Reads `null` as the type's default (some hand-written files write `"arguments": null`).
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Tags as an array of strings (3.9+), a comma-separated string (older), or null.
fn tags<'de, D>(deserializer: D) -> Result<Vec<String>, D::Error>
where
    D: Deserializer<'de>,
{
    let invalid = || {
        serde::de::Error::custom("expected tags as an array of strings or a comma-separated string")
    };
    match Option::<Json>::deserialize(deserializer)? {
        None => Ok(Vec::new()),
        Some(Json::String(text)) => Ok(text
            .split(',')
            .map(str::trim)
            .filter(|tag| !tag.is_empty())
            .map(str::to_owned)
            .collect()),
        Some(Json::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Json::String(tag) => Ok(tag),
                _ => Err(invalid()),
            })
            .collect(),
        Some(_) => Err(invalid()),
    }
}

#[cfg(test)]
mod tests;
