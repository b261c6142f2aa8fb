//! Policies and operator policies: per-vhost rules that set queue and exchange options by
//! name pattern, changeable at runtime without redeclaring anything.
//!
//! For each queue (or exchange) the matching policy with the highest priority applies, and
//! likewise one operator policy. Effective values follow RabbitMQ: for numeric limits
//! (message-ttl, expires, max-length, max-length-bytes, delivery-limit) the strictest of the
//! queue argument, the policy and the operator policy wins; for the other keys the queue
//! argument wins over the policy. Operator policies may only set the numeric limits.

use regex::Regex;

use crate::error::{CoreError, CoreResult};
use crate::queue::{Overflow, QueueLimits};
use crate::value::{Table, Value};

/// What a policy applies to (`apply-to`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyTo {
    /// Every queue type.
    Queues,
    /// Classic queues only.
    ClassicQueues,
    /// Quorum queues only.
    QuorumQueues,
    /// Streams only.
    Streams,
    /// Exchanges only.
    Exchanges,
    /// Queues and exchanges.
    All,
}

impl ApplyTo {
    /// Parses RabbitMQ's `apply-to` names.
    pub fn from_name(name: &str) -> Option<ApplyTo> {
        Some(match name {
            "queues" => ApplyTo::Queues,
            "classic_queues" => ApplyTo::ClassicQueues,
            "quorum_queues" => ApplyTo::QuorumQueues,
            "streams" => ApplyTo::Streams,
            "exchanges" => ApplyTo::Exchanges,
            "all" => ApplyTo::All,
            _ => return None,
        })
    }

    /// The `apply-to` name.
    pub fn name(self) -> &'static str {
        match self {
            ApplyTo::Queues => "queues",
            ApplyTo::ClassicQueues => "classic_queues",
            ApplyTo::QuorumQueues => "quorum_queues",
            ApplyTo::Streams => "streams",
            ApplyTo::Exchanges => "exchanges",
            ApplyTo::All => "all",
        }
    }
}

/// Keys a policy definition may carry.
const POLICY_KEYS: &[&str] = &[
    "message-ttl",
    "expires",
    "max-length",
    "max-length-bytes",
    "overflow",
    "dead-letter-exchange",
    "dead-letter-routing-key",
    "alternate-exchange",
    "delivery-limit",
    "max-age",
    "stream-max-segment-size-bytes",
];

/// Keys an operator policy may carry.
const OPERATOR_POLICY_KEYS: &[&str] = &[
    "message-ttl",
    "expires",
    "max-length",
    "max-length-bytes",
    "delivery-limit",
];

/// A validated policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The policy's name, unique per vhost (and per kind: policy or operator policy).
    pub name: String,
    /// The pattern as given.
    pub pattern: String,
    regex: Regex,
    /// What it applies to.
    pub apply_to: ApplyTo,
    /// Higher wins when several match.
    pub priority: i32,
    /// The definition as given.
    pub definition: Table,
}

impl Policy {
    /// Validates and builds a policy; errors say which key or value is wrong.
    pub fn new(
        name: &str,
        pattern: &str,
        apply_to: &str,
        priority: i32,
        definition: Table,
        operator: bool,
    ) -> CoreResult<Policy> {
        let invalid =
            |text: String| CoreError::precondition_failed(format!("Validation failed: {text}"));
        let regex = Regex::new(pattern).map_err(|e| {
            invalid(format!(
                "pattern '{pattern}' is not a valid regular expression: {e}"
            ))
        })?;
        let apply_to = ApplyTo::from_name(apply_to).ok_or_else(|| {
            invalid(format!(
                "apply-to '{apply_to}' is not one of queues, classic_queues, quorum_queues, streams, exchanges, all"
            ))
        })?;
        if operator
            && !matches!(
                apply_to,
                ApplyTo::Queues | ApplyTo::ClassicQueues | ApplyTo::QuorumQueues
            )
        {
            return Err(invalid(format!(
                "operator policies apply to queues, not '{}'",
                apply_to.name()
            )));
        }
        if definition.is_empty() {
            return Err(invalid("the definition is empty".into()));
        }
        let allowed = if operator {
            OPERATOR_POLICY_KEYS
        } else {
            POLICY_KEYS
        };
        for (key, value) in definition.iter() {
            if !allowed.contains(&key) {
                return Err(invalid(format!(
                    "'{key}' is not a recognised policy setting"
                )));
            }
            let ok = match key {
                "overflow" => matches!(
                    value.as_str(),
                    Some("drop-head" | "reject-publish" | "reject-publish-dlx")
                ),
                "dead-letter-exchange"
                | "dead-letter-routing-key"
                | "alternate-exchange"
                | "max-age" => value.as_str().is_some(),
                "expires" => value.as_i64().is_some_and(|n| n > 0),
                _ => value.as_i64().is_some_and(|n| n >= 0),
            };
            if !ok {
                return Err(invalid(format!("{value} is not a valid value for '{key}'")));
            }
        }
        Ok(Policy {
            name: name.to_string(),
            pattern: pattern.to_string(),
            regex,
            apply_to,
            priority,
            definition,
        })
    }

    /// Whether the policy applies to the classic queue `name`.
    pub fn matches_queue(&self, name: &str) -> bool {
        matches!(
            self.apply_to,
            ApplyTo::Queues | ApplyTo::ClassicQueues | ApplyTo::All
        ) && self.regex.is_match(name)
    }

    /// Whether the policy applies to the quorum queue `name` (`apply-to` queues,
    /// quorum_queues or all).
    pub fn matches_quorum_queue(&self, name: &str) -> bool {
        matches!(
            self.apply_to,
            ApplyTo::Queues | ApplyTo::QuorumQueues | ApplyTo::All
        ) && self.regex.is_match(name)
    }

    /// Whether the policy applies to the stream `name` (`apply-to` queues, streams or
    /// all).
    pub fn matches_stream(&self, name: &str) -> bool {
        matches!(
            self.apply_to,
            ApplyTo::Queues | ApplyTo::Streams | ApplyTo::All
        ) && self.regex.is_match(name)
    }

    /// Whether the policy applies to the queue `name` of type `queue_type` other than
    /// classic (a quorum queue or a stream).
    pub fn matches_typed_queue(&self, queue_type: &str, name: &str) -> bool {
        if queue_type == "stream" {
            self.matches_stream(name)
        } else {
            self.matches_quorum_queue(name)
        }
    }

    /// Whether the policy applies to the exchange `name`.
    pub fn matches_exchange(&self, name: &str) -> bool {
        matches!(self.apply_to, ApplyTo::Exchanges | ApplyTo::All) && self.regex.is_match(name)
    }

    fn number(&self, key: &str) -> Option<u64> {
        self.definition
            .get(key)
            .and_then(Value::as_i64)
            .and_then(|n| u64::try_from(n).ok())
    }

    fn text(&self, key: &str) -> Option<String> {
        self.definition
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// The alternate exchange this policy sets.
    pub fn alternate_exchange(&self) -> Option<String> {
        self.text("alternate-exchange")
    }
}

/// The policy that applies among `policies`: the highest priority that matches; on a tie,
/// the one whose name sorts first, so the choice is stable.
pub fn select(policies: &[Policy], matches: impl Fn(&Policy) -> bool) -> Option<&Policy> {
    policies.iter().filter(|p| matches(p)).max_by(|a, b| {
        a.priority
            .cmp(&b.priority)
            .then_with(|| b.name.cmp(&a.name))
    })
}

/// Combines a queue's own limits with the policy and operator policy that apply to it.
/// `arguments` tells which settings the queue declared explicitly.
pub fn effective_queue_limits(
    own: &QueueLimits,
    arguments: &Table,
    policy: Option<&Policy>,
    operator: Option<&Policy>,
) -> QueueLimits {
    let strictest = |mine: Option<u64>, key: &str| {
        [
            mine,
            policy.and_then(|p| p.number(key)),
            operator.and_then(|p| p.number(key)),
        ]
        .into_iter()
        .flatten()
        .min()
    };
    let overflow = if arguments.get("x-overflow").is_some() {
        own.overflow
    } else {
        match policy.and_then(|p| p.text("overflow")).as_deref() {
            Some("reject-publish") => Overflow::RejectPublish,
            Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
            _ => Overflow::DropHead,
        }
    };
    QueueLimits {
        message_ttl: strictest(own.message_ttl, "message-ttl"),
        expires: strictest(own.expires, "expires"),
        max_length: strictest(own.max_length, "max-length"),
        max_length_bytes: strictest(own.max_length_bytes, "max-length-bytes"),
        delivery_limit: strictest(own.delivery_limit, "delivery-limit"),
        overflow,
        dead_letter_exchange: own
            .dead_letter_exchange
            .clone()
            .or_else(|| policy.and_then(|p| p.text("dead-letter-exchange"))),
        dead_letter_routing_key: own
            .dead_letter_routing_key
            .clone()
            .or_else(|| policy.and_then(|p| p.text("dead-letter-routing-key"))),
        max_priority: own.max_priority,
        single_active_consumer: own.single_active_consumer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definition(entries: &[(&str, Value)]) -> Table {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn validation_names_the_bad_key_or_value() {
        let err = Policy::new(
            "p",
            ".*",
            "queues",
            0,
            definition(&[("max-lenght", Value::I64(1))]),
            false,
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "Validation failed: 'max-lenght' is not a recognised policy setting"
        );
        let err = Policy::new(
            "p",
            ".*",
            "queues",
            0,
            definition(&[("overflow", Value::string("explode"))]),
            false,
        )
        .unwrap_err();
        assert!(err.message.contains("'overflow'"), "{}", err.message);
        let err = Policy::new(
            "p",
            "(",
            "queues",
            0,
            definition(&[("max-length", Value::I64(1))]),
            false,
        )
        .unwrap_err();
        assert!(
            err.message.contains("regular expression"),
            "{}",
            err.message
        );
        let err = Policy::new(
            "p",
            ".*",
            "queues",
            0,
            definition(&[("dead-letter-exchange", Value::string("x"))]),
            true,
        )
        .unwrap_err();
        assert!(
            err.message.contains("'dead-letter-exchange'"),
            "{}",
            err.message
        );
    }

    #[test]
    fn highest_priority_wins_and_strictest_limit_applies() {
        let low = Policy::new(
            "low",
            "^q",
            "queues",
            1,
            definition(&[("max-length", Value::I64(10))]),
            false,
        )
        .unwrap();
        let high = Policy::new(
            "high",
            "^q",
            "all",
            5,
            definition(&[
                ("max-length", Value::I64(100)),
                ("dead-letter-exchange", Value::string("dlx")),
            ]),
            false,
        )
        .unwrap();
        let exchanges = Policy::new(
            "x",
            ".*",
            "exchanges",
            9,
            definition(&[("max-length", Value::I64(1))]),
            false,
        )
        .unwrap();
        let policies = vec![low, high, exchanges];
        let chosen = select(&policies, |p| p.matches_queue("queue-1")).unwrap();
        assert_eq!(chosen.name, "high");
        let operator = Policy::new(
            "op",
            ".*",
            "queues",
            0,
            definition(&[("max-length", Value::I64(50))]),
            true,
        )
        .unwrap();
        let own = QueueLimits {
            max_length: Some(80),
            ..Default::default()
        };
        let limits = effective_queue_limits(&own, &Table::new(), Some(chosen), Some(&operator));
        assert_eq!(limits.max_length, Some(50));
        assert_eq!(limits.dead_letter_exchange.as_deref(), Some("dlx"));
        let mine = QueueLimits {
            dead_letter_exchange: Some("own".into()),
            ..Default::default()
        };
        let limits = effective_queue_limits(&mine, &Table::new(), Some(chosen), None);
        assert_eq!(
            limits.dead_letter_exchange.as_deref(),
            Some("own"),
            "the argument wins"
        );
    }
}
