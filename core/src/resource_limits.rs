//! Vhost limits (`max-connections`, `max-queues`) and user limits (`max-connections`,
//! `max-channels`), as RabbitMQ keeps and enforces them.
//!
//! They are kept where RabbitMQ keeps them, as parameters (so definitions export and import
//! carry them): a vhost's limits are its runtime parameter `limits` of the component
//! `vhost-limits` (`{"max-connections": N, "max-queues": N}`); every user's limits are the
//! global parameter [`USER_LIMITS_PARAMETER`] (`{"user": {"max-channels": N}}`), since the
//! core's user record has no such field. A negative or absent value means no limit; 0 refuses
//! everything, as in RabbitMQ.
//!
//! The broker parses them into [`ResourceLimits`] whenever those parameters change, so a
//! check on the connection, channel and declare paths is one read lock and one hash lookup,
//! and a limit set (or lowered below the current count) takes effect for the next
//! connection, channel or queue; what is open already stays.
//!
//! Where they are enforced, once for every listener:
//! - connections: [`crate::Broker::register_connection`] refuses a connection over its
//!   vhost's or its user's `max-connections` ([`ConnectionLimitReached`]); each listener
//!   turns the refusal into its protocol's (AMQP 0-9-1 530 at connection.open, AMQP 1.0
//!   `amqp:resource-limit-exceeded`, MQTT CONNACK 5, STOMP ERROR);
//! - channels: [`crate::connections::ConnectionHandle::open_channel`] (AMQP 0-9-1
//!   channel.open, 530 as RabbitMQ);
//! - queues: [`crate::vhost::VHost::check_queue_limit`], called by queue.declare of a new
//!   queue from any client connection and by the management API (406 as RabbitMQ).
//!
//! Counting: connections and channels are counted per node (each node its own clients);
//! queues are counted in the vhost's topology, which on a cluster holds every node's queues.

use std::collections::HashMap;

use parking_lot::RwLock;

use crate::error::CoreError;

/// The runtime parameter component of vhost limits (RabbitMQ's).
pub const VHOST_LIMITS_COMPONENT: &str = "vhost-limits";
/// The name of the one `vhost-limits` parameter of a vhost (RabbitMQ's).
pub const VHOST_LIMITS_NAME: &str = "limits";
/// The global parameter holding every user's limits.
pub const USER_LIMITS_PARAMETER: &str = "warren_user_limits";

/// A vhost's limits; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct VhostLimits {
    /// `max-connections`: client connections in the vhost.
    pub max_connections: Option<u64>,
    /// `max-queues`: queues in the vhost.
    pub max_queues: Option<u64>,
}

/// A user's limits; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserLimits {
    /// `max-connections`: the user's client connections.
    pub max_connections: Option<u64>,
    /// `max-channels`: AMQP 0-9-1 channels over all the user's connections.
    pub max_channels: Option<u64>,
}

/// A limit's value as RabbitMQ reads it: a non-negative integer is the limit, anything else
/// (negative, absent, not a number) is none.
fn limit_of(object: &serde_json::Map<String, serde_json::Value>, key: &str) -> Option<u64> {
    object.get(key).and_then(|value| {
        value
            .as_u64()
            .or_else(|| value.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
    })
}

impl VhostLimits {
    /// Parses the value of a vhost's `vhost-limits` parameter (JSON text).
    pub fn parse(json: &str) -> VhostLimits {
        match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json) {
            Ok(object) => VhostLimits {
                max_connections: limit_of(&object, "max-connections"),
                max_queues: limit_of(&object, "max-queues"),
            },
            Err(_) => VhostLimits::default(),
        }
    }

    fn is_empty(&self) -> bool {
        *self == VhostLimits::default()
    }
}

impl UserLimits {
    fn from_object(object: &serde_json::Map<String, serde_json::Value>) -> UserLimits {
        UserLimits {
            max_connections: limit_of(object, "max-connections"),
            max_channels: limit_of(object, "max-channels"),
        }
    }

    /// Parses the value of [`USER_LIMITS_PARAMETER`] (JSON text): every user's limits.
    pub fn parse_all(json: &str) -> HashMap<String, UserLimits> {
        let Ok(all) = serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json)
        else {
            return HashMap::new();
        };
        all.iter()
            .filter_map(|(user, limits)| {
                let limits = UserLimits::from_object(limits.as_object()?);
                (limits != UserLimits::default()).then(|| (user.clone(), limits))
            })
            .collect()
    }
}

/// The parsed limits of every vhost and user, kept in step with their parameters by the
/// broker (see the module doc).
#[derive(Debug, Default)]
pub struct ResourceLimits {
    vhosts: RwLock<HashMap<String, VhostLimits>>,
    users: RwLock<HashMap<String, UserLimits>>,
}

impl ResourceLimits {
    /// The limits of `vhost` (none when it has none).
    pub fn vhost(&self, vhost: &str) -> VhostLimits {
        self.vhosts.read().get(vhost).copied().unwrap_or_default()
    }

    /// The limits of `user` (none when they have none).
    pub fn user(&self, user: &str) -> UserLimits {
        self.users.read().get(user).copied().unwrap_or_default()
    }

    /// A runtime parameter was set (`Some(value)`) or cleared (`None`): vhost limits follow
    /// their parameter.
    pub(crate) fn runtime_parameter_changed(
        &self,
        vhost: &str,
        component: &str,
        name: &str,
        value: Option<&str>,
    ) {
        if component != VHOST_LIMITS_COMPONENT || name != VHOST_LIMITS_NAME {
            return;
        }
        let limits = value.map(VhostLimits::parse).unwrap_or_default();
        let mut vhosts = self.vhosts.write();
        if limits.is_empty() {
            vhosts.remove(vhost);
        } else {
            vhosts.insert(vhost.to_string(), limits);
        }
    }

    /// The vhost's parameters went with it.
    pub(crate) fn vhost_deleted(&self, vhost: &str) {
        self.vhosts.write().remove(vhost);
    }

    /// A global parameter was set or cleared: user limits follow theirs.
    pub(crate) fn global_parameter_changed(&self, name: &str, value: Option<&str>) {
        if name != USER_LIMITS_PARAMETER {
            return;
        }
        *self.users.write() = value.map(UserLimits::parse_all).unwrap_or_default();
    }
}

/// Which `max-connections` refused a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionLimitKind {
    /// The vhost's.
    Vhost,
    /// The user's.
    User,
}

/// A connection refused by a `max-connections` limit
/// ([`crate::Broker::register_connection`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionLimitReached {
    /// Whose limit.
    pub kind: ConnectionLimitKind,
    /// The vhost the connection asked for.
    pub vhost: String,
    /// The connection's user.
    pub user: String,
    /// The limit.
    pub limit: u64,
}

impl ConnectionLimitReached {
    /// RabbitMQ's text for AMQP 0-9-1 (connection.close 530), also used by STOMP and in logs.
    pub fn text(&self) -> String {
        match self.kind {
            ConnectionLimitKind::Vhost => format!(
                "access to vhost '{}' refused for user '{}': connection limit ({}) is reached",
                self.vhost, self.user, self.limit
            ),
            ConnectionLimitKind::User => format!(
                "connection refused for user '{}': user connection limit ({}) is reached",
                self.user, self.limit
            ),
        }
    }

    /// RabbitMQ's text for AMQP 1.0 (`amqp:resource-limit-exceeded` on close), which names
    /// the vhost's limit a "vhost connection limit".
    pub fn text_amqp10(&self) -> String {
        match self.kind {
            ConnectionLimitKind::Vhost => format!(
                "access to vhost '{}' refused for user '{}': vhost connection limit ({}) is reached",
                self.vhost, self.user, self.limit
            ),
            ConnectionLimitKind::User => self.text(),
        }
    }
}

impl std::fmt::Display for ConnectionLimitReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text())
    }
}

impl From<ConnectionLimitReached> for CoreError {
    /// NOT_ALLOWED (0-9-1: 530) with RabbitMQ's text.
    fn from(refusal: ConnectionLimitReached) -> CoreError {
        CoreError::not_allowed(refusal.text())
    }
}

/// RabbitMQ's refusal of a channel over the user's `max-channels` (0-9-1: 530).
pub fn channel_limit_reached(user: &str, limit: u64) -> CoreError {
    CoreError::not_allowed(format!(
        "number of channels opened for user '{user}' has reached the maximum allowed user limit of ({limit})"
    ))
}

/// RabbitMQ's refusal of a new queue over the vhost's `max-queues` (0-9-1: 406).
pub fn queue_limit_reached(queue: &str, vhost: &str, limit: u64) -> CoreError {
    CoreError::precondition_failed(format!(
        "cannot declare queue '{queue}': queue limit in vhost '{vhost}' ({limit}) is reached"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negative_absent_and_malformed_values_are_no_limit() {
        assert_eq!(
            VhostLimits::parse(r#"{"max-connections": 2, "max-queues": -1}"#),
            VhostLimits {
                max_connections: Some(2),
                max_queues: None
            }
        );
        assert_eq!(
            VhostLimits::parse(r#"{"max-queues": 0}"#).max_queues,
            Some(0)
        );
        assert_eq!(VhostLimits::parse("not json"), VhostLimits::default());
        let users = UserLimits::parse_all(
            r#"{"a": {"max-channels": 3}, "b": {"max-connections": -1}, "c": 7}"#,
        );
        assert_eq!(users.len(), 1);
        assert_eq!(users["a"].max_channels, Some(3));
    }

    #[test]
    fn limits_follow_their_parameters() {
        let limits = ResourceLimits::default();
        limits.runtime_parameter_changed("v", "shovel", "limits", Some(r#"{"max-queues":1}"#));
        assert_eq!(limits.vhost("v"), VhostLimits::default());
        limits.runtime_parameter_changed(
            "v",
            VHOST_LIMITS_COMPONENT,
            VHOST_LIMITS_NAME,
            Some(r#"{"max-queues":1}"#),
        );
        assert_eq!(limits.vhost("v").max_queues, Some(1));
        limits.vhost_deleted("v");
        assert_eq!(limits.vhost("v"), VhostLimits::default());
        limits.global_parameter_changed(
            USER_LIMITS_PARAMETER,
            Some(r#"{"u":{"max-connections":0}}"#),
        );
        assert_eq!(limits.user("u").max_connections, Some(0));
        limits.global_parameter_changed(USER_LIMITS_PARAMETER, None);
        assert_eq!(limits.user("u"), UserLimits::default());
    }

    #[test]
    fn refusals_carry_rabbitmq_texts() {
        let vhost = ConnectionLimitReached {
            kind: ConnectionLimitKind::Vhost,
            vhost: "v".into(),
            user: "u".into(),
            limit: 1,
        };
        assert_eq!(
            CoreError::from(vhost.clone()).message,
            "access to vhost 'v' refused for user 'u': connection limit (1) is reached"
        );
        assert!(vhost.text_amqp10().contains("vhost connection limit (1)"));
        assert_eq!(
            queue_limit_reached("q", "v", 2).message,
            "cannot declare queue 'q': queue limit in vhost 'v' (2) is reached"
        );
    }
}
