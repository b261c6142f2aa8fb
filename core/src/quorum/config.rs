//! A quorum queue's settings, read from its `x-` arguments as RabbitMQ 4.x accepts them for
//! quorum queues.

use crate::queue::Overflow;
use crate::value::{Table, Value};

/// `x-delivery-limit` when the queue does not set one (RabbitMQ 4.0 and later).
pub const DEFAULT_DELIVERY_LIMIT: u32 = 20;

/// How a quorum queue hands messages to its dead-letter exchange
/// (`x-dead-letter-strategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeadLetterStrategy {
    /// Fire and forget: the message leaves the queue when it is dead-lettered, whether or not
    /// the dead-letter target took it.
    #[default]
    AtMostOnce,
    /// The message stays in the queue (counted against its length limit) until the
    /// dead-letter target confirmed it. Only in effect with `x-overflow: reject-publish`,
    /// as in RabbitMQ; otherwise the queue falls back to at-most-once.
    AtLeastOnce,
}

/// The settings the quorum state machine applies; every member derives the same ones from
/// the declaration, so they are part of the replicated state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumConfig {
    /// The queue's name, written into `x-death` by the dead-lettering driver.
    pub name: String,
    /// Failed deliveries a message may have before it is dead-lettered with reason
    /// `delivery_limit`; `None` (declared as `-1`) for no limit.
    pub delivery_limit: Option<u32>,
    /// `x-message-ttl` in milliseconds.
    pub message_ttl: Option<u64>,
    /// `x-max-length`: most messages in the queue (ready, delayed and, with at-least-once
    /// dead-lettering, waiting for the dead-letter target).
    pub max_length: Option<u64>,
    /// `x-max-length-bytes`: most body bytes, counted like `max_length`.
    pub max_length_bytes: Option<u64>,
    /// `x-overflow`: drop-head or reject-publish (reject-publish-dlx is taken as drop-head,
    /// as RabbitMQ does for quorum queues).
    pub overflow: Overflow,
    /// `x-dead-letter-exchange`.
    pub dead_letter_exchange: Option<String>,
    /// `x-dead-letter-routing-key`.
    pub dead_letter_routing_key: Option<String>,
    /// `x-dead-letter-strategy` as declared (see [`QuorumConfig::effective_strategy`]).
    pub dead_letter_strategy: DeadLetterStrategy,
    /// `x-single-active-consumer`.
    pub single_active_consumer: bool,
    /// `x-consumer-timeout`: milliseconds a delivery may stay unsettled before its consumer
    /// is timed out and its messages returned.
    pub consumer_timeout: Option<u64>,
}

impl QuorumConfig {
    /// A queue with RabbitMQ's defaults: delivery limit 20, no other limit.
    pub fn new(name: impl Into<String>) -> QuorumConfig {
        QuorumConfig {
            name: name.into(),
            delivery_limit: Some(DEFAULT_DELIVERY_LIMIT),
            message_ttl: None,
            max_length: None,
            max_length_bytes: None,
            overflow: Overflow::DropHead,
            dead_letter_exchange: None,
            dead_letter_routing_key: None,
            dead_letter_strategy: DeadLetterStrategy::AtMostOnce,
            single_active_consumer: false,
            consumer_timeout: None,
        }
    }

    /// Reads and validates a declaration's arguments; the error names the argument and what
    /// is wrong with it, for a 406 PRECONDITION_FAILED.
    pub fn from_arguments(name: &str, arguments: &Table) -> Result<QuorumConfig, String> {
        let integer = |key: &str| -> Result<Option<i64>, String> {
            match arguments.get(key) {
                None => Ok(None),
                Some(value) => value.as_i64().map(Some).ok_or_else(|| {
                    format!(
                        "invalid arg '{key}': expected an integer, got {value} of type {}",
                        value.type_name()
                    )
                }),
            }
        };
        let non_negative = |key: &str| -> Result<Option<u64>, String> {
            match integer(key)? {
                None => Ok(None),
                Some(n) if n >= 0 => Ok(Some(n as u64)),
                Some(n) => Err(format!(
                    "invalid arg '{key}': expected a non-negative integer, got {n}"
                )),
            }
        };
        let string = |key: &str| -> Result<Option<String>, String> {
            match arguments.get(key) {
                None => Ok(None),
                Some(value) => value.as_str().map(|s| Some(s.to_string())).ok_or_else(|| {
                    format!(
                        "invalid arg '{key}': expected a string, got {value} of type {}",
                        value.type_name()
                    )
                }),
            }
        };
        let delivery_limit = match integer("x-delivery-limit")? {
            None => Some(DEFAULT_DELIVERY_LIMIT),
            Some(-1) => None,
            Some(n) if (0..=i64::from(u32::MAX)).contains(&n) => Some(n as u32),
            Some(n) => {
                return Err(format!(
                    "invalid arg 'x-delivery-limit': expected -1 (no limit) or a non-negative integer, got {n}"
                ))
            }
        };
        let overflow = match string("x-overflow")?.as_deref() {
            None | Some("drop-head") => Overflow::DropHead,
            Some("reject-publish") => Overflow::RejectPublish,
            Some("reject-publish-dlx") => {
                // RabbitMQ accepts it on a quorum queue, warns, and uses drop-head.
                tracing::warn!(
                    queue = name,
                    "x-overflow reject-publish-dlx is not supported by quorum queues; using drop-head"
                );
                Overflow::DropHead
            }
            Some(other) => {
                return Err(format!(
                    "invalid arg 'x-overflow': expected drop-head, reject-publish or reject-publish-dlx, got '{other}'"
                ))
            }
        };
        let dead_letter_strategy = match string("x-dead-letter-strategy")?.as_deref() {
            None | Some("at-most-once") => DeadLetterStrategy::AtMostOnce,
            Some("at-least-once") => DeadLetterStrategy::AtLeastOnce,
            Some(other) => {
                return Err(format!(
                    "invalid arg 'x-dead-letter-strategy': expected at-most-once or at-least-once, got '{other}'"
                ))
            }
        };
        let single_active_consumer = match arguments.get("x-single-active-consumer") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(value) => {
                return Err(format!(
                    "invalid arg 'x-single-active-consumer': expected a boolean, got {value} of type {}",
                    value.type_name()
                ))
            }
        };
        let config = QuorumConfig {
            name: name.to_string(),
            delivery_limit,
            message_ttl: non_negative("x-message-ttl")?,
            max_length: non_negative("x-max-length")?,
            max_length_bytes: non_negative("x-max-length-bytes")?,
            overflow,
            dead_letter_exchange: string("x-dead-letter-exchange")?,
            dead_letter_routing_key: string("x-dead-letter-routing-key")?,
            dead_letter_strategy,
            single_active_consumer,
            consumer_timeout: match non_negative("x-consumer-timeout")? {
                Some(0) => {
                    return Err(
                        "invalid arg 'x-consumer-timeout': expected a positive integer of milliseconds, got 0"
                            .into(),
                    )
                }
                other => other,
            },
        };
        if config.dead_letter_routing_key.is_some() && config.dead_letter_exchange.is_none() {
            return Err(
                "invalid arg 'x-dead-letter-routing-key': it needs x-dead-letter-exchange".into(),
            );
        }
        Ok(config)
    }

    /// These settings combined with the policy and operator policy that apply to the queue
    /// (their definitions), by RabbitMQ's rules for quorum queues: limits and TTL take the
    /// strictest of argument, policy and operator policy; `overflow` from a policy wins over
    /// the argument; dead-letter settings from the arguments win over a policy; a delivery
    /// limit takes the lower of argument and policy unless one of them is negative (no limit),
    /// then the higher. `arguments` are the declaration's, to tell what it set.
    pub fn with_policies(
        &self,
        arguments: &Table,
        policy: Option<&Table>,
        operator: Option<&Table>,
    ) -> QuorumConfig {
        let number = |table: Option<&Table>, key: &str| {
            table.and_then(|t| t.get(key)).and_then(Value::as_i64)
        };
        let text = |table: Option<&Table>, key: &str| {
            table
                .and_then(|t| t.get(key))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let strictest = |own: Option<u64>, key: &str| {
            [number(policy, key), number(operator, key)]
                .into_iter()
                .flatten()
                .filter_map(|n| u64::try_from(n).ok())
                .chain(own)
                .min()
        };
        let policy_limit = [
            number(policy, "delivery-limit"),
            number(operator, "delivery-limit"),
        ]
        .into_iter()
        .flatten()
        .min();
        let declared_limit = arguments.get("x-delivery-limit").and_then(Value::as_i64);
        let limit = match (declared_limit, policy_limit) {
            (Some(a), Some(p)) if a < 0 || p < 0 => Some(a.max(p)),
            (Some(a), Some(p)) => Some(a.min(p)),
            (a, p) => a.or(p),
        };
        let delivery_limit = match limit {
            None => Some(DEFAULT_DELIVERY_LIMIT),
            Some(n) if n < 0 => None,
            Some(n) => Some(u32::try_from(n).unwrap_or(u32::MAX)),
        };
        let overflow = match text(policy, "overflow").as_deref() {
            Some("reject-publish") => Overflow::RejectPublish,
            Some(_) => Overflow::DropHead,
            None => self.overflow,
        };
        let strategy = match text(policy, "dead-letter-strategy").as_deref() {
            _ if arguments.get("x-dead-letter-strategy").is_some() => self.dead_letter_strategy,
            Some("at-least-once") => DeadLetterStrategy::AtLeastOnce,
            Some(_) => DeadLetterStrategy::AtMostOnce,
            None => self.dead_letter_strategy,
        };
        QuorumConfig {
            name: self.name.clone(),
            delivery_limit,
            message_ttl: strictest(self.message_ttl, "message-ttl"),
            max_length: strictest(self.max_length, "max-length"),
            max_length_bytes: strictest(self.max_length_bytes, "max-length-bytes"),
            overflow,
            dead_letter_exchange: self
                .dead_letter_exchange
                .clone()
                .or_else(|| text(policy, "dead-letter-exchange")),
            dead_letter_routing_key: self
                .dead_letter_routing_key
                .clone()
                .or_else(|| text(policy, "dead-letter-routing-key")),
            dead_letter_strategy: strategy,
            single_active_consumer: self.single_active_consumer,
            consumer_timeout: self.consumer_timeout,
        }
    }

    /// The strategy in force: at-least-once needs a dead-letter exchange and
    /// `x-overflow: reject-publish` (RabbitMQ falls back to at-most-once otherwise, since
    /// drop-head would have to drop messages that are waiting for their dead-letter confirm).
    pub fn effective_strategy(&self) -> DeadLetterStrategy {
        if self.dead_letter_strategy == DeadLetterStrategy::AtLeastOnce
            && self.overflow == Overflow::RejectPublish
            && self.dead_letter_exchange.is_some()
        {
            DeadLetterStrategy::AtLeastOnce
        } else {
            DeadLetterStrategy::AtMostOnce
        }
    }
}
