//! Users, their tags and their per-vhost permissions, checked the same way for every protocol.
//!
//! Permissions are three regular expressions per (user, vhost), matched against resource
//! names as RabbitMQ's internal auth backend does: unanchored, with the empty pattern meaning
//! "nothing" (RabbitMQ turns `""` into `^$`).

use regex::Regex;

use crate::error::{resource, CoreError, CoreResult};
use crate::password::PasswordHash;

/// A broker user.
#[derive(Debug, Clone)]
pub struct User {
    /// The user name.
    pub name: String,
    /// The stored password hash; `None` for users that cannot log in with a password.
    pub password: Option<PasswordHash>,
    /// Tags such as `administrator` or `management`.
    pub tags: Vec<String>,
}

/// Which of the three permissions an operation needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Declaring and deleting resources.
    Configure,
    /// Publishing to an exchange, or binding to a queue or exchange (the destination).
    Write,
    /// Consuming, getting and purging from a queue, or binding from an exchange (the source).
    Read,
}

impl Access {
    /// The permission's name as RabbitMQ prints it.
    pub fn name(self) -> &'static str {
        match self {
            Access::Configure => "configure",
            Access::Write => "write",
            Access::Read => "read",
        }
    }
}

/// The kind of resource a permission is checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    /// An exchange.
    Exchange,
    /// A queue.
    Queue,
}

impl ResourceKind {
    /// The kind's name as RabbitMQ prints it.
    pub fn name(self) -> &'static str {
        match self {
            ResourceKind::Exchange => "exchange",
            ResourceKind::Queue => "queue",
        }
    }
}

/// A user's permissions in one vhost.
#[derive(Debug, Clone)]
pub struct Permissions {
    configure: Pattern,
    write: Pattern,
    read: Pattern,
}

#[derive(Debug, Clone)]
struct Pattern {
    source: String,
    regex: Regex,
}

impl Pattern {
    fn new(source: &str) -> CoreResult<Pattern> {
        let effective = if source.is_empty() { "^$" } else { source };
        let regex = Regex::new(effective).map_err(|e| {
            CoreError::precondition_failed(format!("invalid permission pattern '{source}': {e}"))
        })?;
        Ok(Pattern {
            source: source.to_string(),
            regex,
        })
    }
}

impl Permissions {
    /// Permissions from three patterns; an invalid regular expression is an error naming it.
    pub fn new(configure: &str, write: &str, read: &str) -> CoreResult<Permissions> {
        Ok(Permissions {
            configure: Pattern::new(configure)?,
            write: Pattern::new(write)?,
            read: Pattern::new(read)?,
        })
    }

    /// Full access: `.*` for all three.
    pub fn full() -> Permissions {
        // The pattern is a constant known to compile.
        Permissions::new(".*", ".*", ".*").expect("'.*' is a valid pattern")
    }

    /// The pattern sources: (configure, write, read).
    pub fn patterns(&self) -> (&str, &str, &str) {
        (
            &self.configure.source,
            &self.write.source,
            &self.read.source,
        )
    }

    /// Whether `access` to a resource called `name` is granted.
    pub fn allows(&self, access: Access, name: &str) -> bool {
        let pattern = match access {
            Access::Configure => &self.configure,
            Access::Write => &self.write,
            Access::Read => &self.read,
        };
        pattern.regex.is_match(name)
    }
}

/// The error RabbitMQ gives when a permission check fails.
pub fn access_refused(
    access: Access,
    kind: ResourceKind,
    name: &str,
    vhost: &str,
    user: &str,
) -> CoreError {
    let shown = if kind == ResourceKind::Exchange && name.is_empty() {
        "amq.default"
    } else {
        name
    };
    CoreError::access_refused(format!(
        "{} access to {} refused for user '{user}'",
        access.name(),
        resource(kind.name(), shown, vhost)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_pattern_grants_nothing_and_patterns_are_unanchored() {
        let p = Permissions::new("", "^amq\\.gen", "q").unwrap();
        assert!(!p.allows(Access::Configure, "anything"));
        // RabbitMQ's `^$` still matches the empty name (the default exchange).
        assert!(p.allows(Access::Configure, ""));
        assert!(p.allows(Access::Write, "amq.gen-123"));
        assert!(!p.allows(Access::Write, "x.amq.gen"));
        assert!(p.allows(Access::Read, "my-queue"));
    }

    #[test]
    fn invalid_pattern_is_an_error_naming_it() {
        let err = Permissions::new("(", ".*", ".*").unwrap_err();
        assert!(err.message.contains("'('"), "{}", err.message);
    }

    #[test]
    fn refusal_text_matches_rabbitmq() {
        let err = access_refused(Access::Write, ResourceKind::Exchange, "", "/", "bob");
        assert_eq!(
            err.message,
            "write access to exchange 'amq.default' in vhost '/' refused for user 'bob'"
        );
    }
}
