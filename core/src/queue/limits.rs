//! A queue's limits and dead-letter settings, read from its `x-` arguments and combined with
//! policies (see `policy.rs`).

use crate::value::Table;

/// Why a message left its queue for the dead-letter exchange (the `reason` in `x-death`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeathReason {
    /// Rejected or nacked without requeue.
    Rejected,
    /// Its TTL passed.
    Expired,
    /// Pushed out (or refused) by a length limit.
    MaxLen,
    /// Redelivered more often than the delivery limit allows.
    DeliveryLimit,
}

impl DeathReason {
    /// The reason as RabbitMQ writes it.
    pub fn name(self) -> &'static str {
        match self {
            DeathReason::Rejected => "rejected",
            DeathReason::Expired => "expired",
            DeathReason::MaxLen => "maxlen",
            DeathReason::DeliveryLimit => "delivery_limit",
        }
    }
}

/// What a queue does when a length limit is reached (`x-overflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overflow {
    /// Drop (or dead-letter) the oldest ready message.
    #[default]
    DropHead,
    /// Refuse the new message (publishers with confirms get a nack).
    RejectPublish,
    /// Refuse the new message and dead-letter it.
    RejectPublishDlx,
}

/// Limits and dead-lettering settings of a queue, from its `x-` arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueLimits {
    /// `x-message-ttl` in milliseconds.
    pub message_ttl: Option<u64>,
    /// `x-max-length`: most ready messages.
    pub max_length: Option<u64>,
    /// `x-max-length-bytes`: most ready body bytes.
    pub max_length_bytes: Option<u64>,
    /// `x-overflow`.
    pub overflow: Overflow,
    /// `x-dead-letter-exchange`.
    pub dead_letter_exchange: Option<String>,
    /// `x-dead-letter-routing-key`.
    pub dead_letter_routing_key: Option<String>,
    /// `x-max-priority` (1 to 255): the queue keeps one FIFO per priority up to this.
    pub max_priority: Option<u8>,
    /// `x-expires`: delete the queue after it was unused for this many milliseconds.
    pub expires: Option<u64>,
    /// `x-single-active-consumer`: only the first attached consumer receives; the next one
    /// takes over when it goes.
    pub single_active_consumer: bool,
    /// `x-delivery-limit` (policy key `delivery-limit`): a message returned to the queue
    /// more often than this is dead-lettered with reason `delivery_limit`, or dropped without
    /// a dead-letter exchange. RabbitMQ honours it on quorum queues only; Warren on classic
    /// queues too.
    pub delivery_limit: Option<u64>,
}

impl QueueLimits {
    /// Reads and validates the arguments; the error names the argument and what is wrong.
    pub fn from_arguments(arguments: &Table) -> Result<QueueLimits, String> {
        let non_negative = |key: &str| -> Result<Option<u64>, String> {
            match arguments.get(key) {
                None => Ok(None),
                Some(value) => match value.as_i64() {
                    Some(n) if n >= 0 => Ok(Some(n as u64)),
                    _ => Err(format!(
                        "invalid arg '{key}': expected a non-negative integer, got {value} of type {}",
                        value.type_name()
                    )),
                },
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
        let overflow = match string("x-overflow")?.as_deref() {
            None | Some("drop-head") => Overflow::DropHead,
            Some("reject-publish") => Overflow::RejectPublish,
            Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
            Some(other) => {
                return Err(format!(
                    "invalid arg 'x-overflow': expected drop-head, reject-publish or reject-publish-dlx, got '{other}'"
                ))
            }
        };
        let max_priority = match non_negative("x-max-priority")? {
            None => None,
            Some(p @ 1..=255) => Some(p as u8),
            Some(p) => {
                return Err(format!(
                    "invalid arg 'x-max-priority': expected an integer from 1 to 255, got {p}"
                ))
            }
        };
        let expires = match non_negative("x-expires")? {
            Some(0) => {
                return Err("invalid arg 'x-expires': expected a positive integer, got 0".into())
            }
            other => other,
        };
        let single_active_consumer = match arguments.get("x-single-active-consumer") {
            None => false,
            Some(value) => value.as_bool().ok_or_else(|| {
                format!(
                    "invalid arg 'x-single-active-consumer': expected a boolean, got {value} of type {}",
                    value.type_name()
                )
            })?,
        };
        let limits = QueueLimits {
            expires,
            single_active_consumer,
            max_priority,
            message_ttl: non_negative("x-message-ttl")?,
            max_length: non_negative("x-max-length")?,
            delivery_limit: non_negative("x-delivery-limit")?,
            max_length_bytes: non_negative("x-max-length-bytes")?,
            overflow,
            dead_letter_exchange: string("x-dead-letter-exchange")?,
            dead_letter_routing_key: string("x-dead-letter-routing-key")?,
        };
        if limits.dead_letter_routing_key.is_some() && limits.dead_letter_exchange.is_none() {
            return Err(
                "invalid arg 'x-dead-letter-routing-key': it needs x-dead-letter-exchange".into(),
            );
        }
        Ok(limits)
    }
}
