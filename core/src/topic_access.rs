//! Topic permissions, as RabbitMQ's "topic authorisation": per user, vhost and exchange, a
//! `write` and a `read` regular expression matched against routing keys of topic exchanges.
//!
//! - Publishing to a topic exchange checks the routing key against `write`.
//! - Binding a queue or exchange to a topic exchange (queue.bind, exchange.bind, an MQTT
//!   subscription, a STOMP `/topic/` subscription) checks the binding key against `read`.
//! - A user with no topic permission for an exchange is not restricted on it (topic
//!   permissions only narrow what the ordinary permissions grant), and exchanges of other
//!   types are never checked.
//! - Patterns may hold `{username}`, `{vhost}` and `{client_id}` (MQTT); they are replaced by
//!   the connection's values before matching, without escaping, as RabbitMQ does. A variable
//!   the connection does not have stays as written.
//! - Patterns are unanchored; the empty pattern matches only the empty key (`^$`), like the
//!   ordinary permissions.
//!
//! Every listener calls [`crate::vhost::VHost::check_topic`] (publish) and binds through
//! [`crate::vhost::VHost::bind_in_context`]; the check costs one relaxed atomic load while
//! no topic permission exists in the vhost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use regex::Regex;

use crate::access::Access;
use crate::error::{CoreError, CoreResult};

/// What a connection knows about itself for variable expansion in topic permission patterns.
#[derive(Debug, Clone, Copy, Default)]
pub struct TopicVariables<'a> {
    /// The MQTT client id, for `{client_id}`.
    pub client_id: Option<&'a str>,
}

impl<'a> TopicVariables<'a> {
    /// No connection-specific variables (AMQP, STOMP, the management API).
    pub const NONE: TopicVariables<'static> = TopicVariables { client_id: None };

    /// The variables of an MQTT connection.
    pub fn mqtt(client_id: &'a str) -> TopicVariables<'a> {
        TopicVariables {
            client_id: Some(client_id),
        }
    }
}

/// A pattern as the operator wrote it, with `{username}` and `{vhost}` already expanded and
/// compiled; patterns that name `{client_id}` are compiled per client id on first use.
#[derive(Debug)]
struct TopicPattern {
    source: String,
    compiled: CompiledPattern,
}

#[derive(Debug)]
enum CompiledPattern {
    /// No connection-specific variable: compiled once.
    Fixed(Regex),
    /// Holds `{client_id}`: the expanded text (user and vhost filled in) and a cache of
    /// compiled patterns by client id.
    PerClient {
        expanded: String,
        cache: Mutex<HashMap<String, Option<Regex>>>,
    },
}

/// Bound on the per-client compiled pattern cache; cleared when full.
const CLIENT_CACHE_LIMIT: usize = 4096;

const CLIENT_ID_VARIABLE: &str = "{client_id}";

impl TopicPattern {
    fn new(source: &str, user: &str, vhost: &str) -> CoreResult<TopicPattern> {
        let effective = if source.is_empty() { "^$" } else { source };
        let expanded = effective
            .replace("{username}", user)
            .replace("{vhost}", vhost);
        let invalid = |e: regex::Error| {
            CoreError::precondition_failed(format!(
                "invalid topic permission pattern '{source}': {e}"
            ))
        };
        let compiled = if expanded.contains(CLIENT_ID_VARIABLE) {
            // Validate with a neutral client id so a broken pattern is refused when set.
            Regex::new(&expanded.replace(CLIENT_ID_VARIABLE, "client")).map_err(invalid)?;
            CompiledPattern::PerClient {
                expanded,
                cache: Mutex::new(HashMap::new()),
            }
        } else {
            CompiledPattern::Fixed(Regex::new(&expanded).map_err(invalid)?)
        };
        Ok(TopicPattern {
            source: source.to_string(),
            compiled,
        })
    }

    fn is_match(&self, key: &str, variables: &TopicVariables<'_>) -> bool {
        match &self.compiled {
            CompiledPattern::Fixed(regex) => regex.is_match(key),
            CompiledPattern::PerClient { expanded, cache } => {
                let Some(client_id) = variables.client_id else {
                    // RabbitMQ leaves an unknown variable as written.
                    return Regex::new(expanded).is_ok_and(|r| r.is_match(key));
                };
                let mut cache = cache.lock();
                if cache.len() >= CLIENT_CACHE_LIMIT && !cache.contains_key(client_id) {
                    cache.clear();
                }
                cache
                    .entry(client_id.to_string())
                    .or_insert_with(|| {
                        Regex::new(&expanded.replace(CLIENT_ID_VARIABLE, client_id)).ok()
                    })
                    .as_ref()
                    .is_some_and(|r| r.is_match(key))
            }
        }
    }
}

/// One topic permission: the exchange it restricts and its two patterns.
#[derive(Debug)]
pub struct TopicPermission {
    exchange: String,
    write: TopicPattern,
    read: TopicPattern,
}

impl TopicPermission {
    /// A topic permission of `user` in `vhost` on `exchange`; `{username}` and `{vhost}` are
    /// expanded here. An invalid regular expression is an error naming it.
    pub fn new(
        user: &str,
        vhost: &str,
        exchange: &str,
        write: &str,
        read: &str,
    ) -> CoreResult<TopicPermission> {
        Ok(TopicPermission {
            exchange: exchange.to_string(),
            write: TopicPattern::new(write, user, vhost)?,
            read: TopicPattern::new(read, user, vhost)?,
        })
    }

    /// The exchange this permission restricts.
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// The patterns as written: (write, read).
    pub fn patterns(&self) -> (&str, &str) {
        (&self.write.source, &self.read.source)
    }

    /// Whether `access` (write or read) with routing or binding key `key` is granted.
    /// `Configure` is never asked of a topic permission and is granted.
    pub fn allows(&self, access: Access, key: &str, variables: &TopicVariables<'_>) -> bool {
        match access {
            Access::Write => self.write.is_match(key, variables),
            Access::Read => self.read.is_match(key, variables),
            Access::Configure => true,
        }
    }
}

/// The topic permissions of one vhost, by user. The flag lets the publish path skip the
/// lookup entirely while no topic permission exists.
#[derive(Debug, Default)]
pub struct TopicPermissionTable {
    any: AtomicBool,
    by_user: RwLock<HashMap<String, Vec<Arc<TopicPermission>>>>,
}

impl TopicPermissionTable {
    /// Sets `user`'s permission on the permission's exchange, replacing an earlier one.
    /// Returns whether it was new.
    pub fn set(&self, user: &str, permission: TopicPermission) -> bool {
        let mut by_user = self.by_user.write();
        let entries = by_user.entry(user.to_string()).or_default();
        let created = match entries
            .iter_mut()
            .find(|p| p.exchange == permission.exchange)
        {
            Some(existing) => {
                *existing = Arc::new(permission);
                false
            }
            None => {
                entries.push(Arc::new(permission));
                true
            }
        };
        self.any.store(true, Ordering::Release);
        created
    }

    /// Removes `user`'s permission on `exchange`, or all of them when `exchange` is `None`.
    /// Returns whether anything was removed.
    pub fn clear(&self, user: &str, exchange: Option<&str>) -> bool {
        let mut by_user = self.by_user.write();
        let removed = match (by_user.get_mut(user), exchange) {
            (None, _) => false,
            (Some(_), None) => by_user.remove(user).is_some(),
            (Some(entries), Some(exchange)) => {
                let before = entries.len();
                entries.retain(|p| p.exchange != exchange);
                let removed = entries.len() != before;
                if entries.is_empty() {
                    by_user.remove(user);
                }
                removed
            }
        };
        self.any.store(!by_user.is_empty(), Ordering::Release);
        removed
    }

    /// Every (user, permission), sorted by user then exchange.
    pub fn entries(&self) -> Vec<(String, Arc<TopicPermission>)> {
        let mut all: Vec<(String, Arc<TopicPermission>)> = self
            .by_user
            .read()
            .iter()
            .flat_map(|(user, list)| list.iter().map(|p| (user.clone(), Arc::clone(p))))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.exchange.cmp(&b.1.exchange)));
        all
    }

    /// `user`'s permission on `exchange`, if one is set. Cheap while the table is empty.
    pub fn lookup(&self, user: &str, exchange: &str) -> Option<Arc<TopicPermission>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        self.by_user
            .read()
            .get(user)?
            .iter()
            .find(|p| p.exchange == exchange)
            .cloned()
    }
}

/// The error RabbitMQ gives when a topic permission refuses a key.
pub fn topic_access_refused(
    access: Access,
    key: &str,
    exchange: &str,
    vhost: &str,
    user: &str,
) -> CoreError {
    CoreError::access_refused(format!(
        "{} access to topic '{key}' in exchange '{exchange}' in vhost '{vhost}' refused for user '{user}'",
        access.name()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_expand_username_and_vhost_when_set_and_client_id_when_checked() {
        let p = TopicPermission::new("bob", "/", "amq.topic", "^{username}\\.", "^{client_id}\\.")
            .unwrap();
        assert!(p.allows(Access::Write, "bob.x", &TopicVariables::NONE));
        assert!(!p.allows(Access::Write, "alice.x", &TopicVariables::NONE));
        assert!(p.allows(Access::Read, "dev1.x", &TopicVariables::mqtt("dev1")));
        assert!(!p.allows(Access::Read, "dev2.x", &TopicVariables::mqtt("dev1")));
        // Without a client id the variable stays as written, which matches nothing here.
        assert!(!p.allows(Access::Read, "dev1.x", &TopicVariables::NONE));
    }

    #[test]
    fn empty_pattern_allows_only_the_empty_key_and_patterns_are_unanchored() {
        let p = TopicPermission::new("u", "/", "x", "", "b").unwrap();
        assert!(!p.allows(Access::Write, "a", &TopicVariables::NONE));
        assert!(p.allows(Access::Write, "", &TopicVariables::NONE));
        assert!(p.allows(Access::Read, "a.b.c", &TopicVariables::NONE));
    }

    #[test]
    fn invalid_patterns_are_refused_naming_them() {
        let err = TopicPermission::new("u", "/", "x", "(", ".*").unwrap_err();
        assert!(err.message.contains("'('"), "{}", err.message);
        let err = TopicPermission::new("u", "/", "x", ".*", "{client_id}(").unwrap_err();
        assert!(err.message.contains("{client_id}("), "{}", err.message);
    }

    #[test]
    fn table_replaces_per_exchange_and_clears_one_or_all() {
        let table = TopicPermissionTable::default();
        assert!(table.lookup("u", "amq.topic").is_none());
        let make = |x: &str, w: &str| TopicPermission::new("u", "/", x, w, ".*").unwrap();
        assert!(table.set("u", make("amq.topic", "a")));
        assert!(!table.set("u", make("amq.topic", "b")));
        assert!(table.set("u", make("other", "c")));
        assert_eq!(table.entries().len(), 2);
        assert_eq!(table.lookup("u", "amq.topic").unwrap().patterns().0, "b");
        assert!(table.clear("u", Some("other")));
        assert!(!table.clear("u", Some("other")));
        assert!(table.clear("u", None));
        assert!(table.entries().is_empty());
        assert!(table.lookup("u", "amq.topic").is_none());
    }

    #[test]
    fn refusal_text_matches_rabbitmq() {
        let err = topic_access_refused(Access::Write, "a.b", "amq.topic", "/", "u");
        assert_eq!(
            err.message,
            "write access to topic 'a.b' in exchange 'amq.topic' in vhost '/' refused for user 'u'"
        );
    }
}
