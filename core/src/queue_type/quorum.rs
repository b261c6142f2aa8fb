//! Quorum queues as a [`QueueType`]: what a declaration may say (RabbitMQ 4.x's rules for
//! quorum queues) and what their queues support. The queues themselves are Raft groups made
//! by the broker's [`super::QueueBackend`] (`warren-raft`'s `QuorumBackend`) around the
//! state machine in [`crate::quorum`].

use std::sync::Arc;

use super::{Capabilities, Declaration, QueueInstance, QueueType};
use crate::durability::Durability;
use crate::error::{CoreError, CoreResult};
use crate::quorum::{QuorumConfig, MAX_PREFETCH};
use crate::value::Table;

/// The quorum queue type.
pub struct Quorum;

/// The quorum queue type, for [`super::BUILT_IN`].
pub const QUORUM: Quorum = Quorum;

const CAPABILITIES: Capabilities = Capabilities {
    arguments: &[
        "x-dead-letter-exchange",
        "x-dead-letter-routing-key",
        "x-dead-letter-strategy",
        "x-expires",
        "x-max-length",
        "x-max-length-bytes",
        "x-overflow",
        "x-single-active-consumer",
        "x-queue-type",
        "x-quorum-initial-group-size",
        "x-delivery-limit",
        "x-message-ttl",
        "x-consumer-timeout",
        "x-queue-leader-locator",
        "x-max-priority",
    ],
    policy_keys: &[
        "max-length",
        "max-length-bytes",
        "overflow",
        "dead-letter-exchange",
        "dead-letter-routing-key",
        "dead-letter-strategy",
        "delivery-limit",
        "message-ttl",
        "queue-leader-locator",
    ],
    global_qos: false,
    // 32 levels without x-max-priority (RabbitMQ 4.3).
    priorities: true,
    per_message_ttl: true,
    exclusive: false,
    auto_delete: false,
    prefetch_cap: Some(MAX_PREFETCH as u16),
    consumers_need_offset: false,
    server_named: false,
};

impl QueueType for Quorum {
    fn name(&self) -> &'static str {
        "quorum"
    }

    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn validate_arguments(&self, arguments: &Table) -> Result<(), String> {
        if let Some(value) = arguments.get("x-max-priority") {
            // Accepted and not needed (every quorum queue has 32 levels), but still checked
            // as a priority as RabbitMQ checks it.
            match value.as_i64() {
                Some(n) if (0..=255).contains(&n) => {}
                _ => {
                    return Err(format!(
                        "invalid arg 'x-max-priority': expected an integer between 0 and 255, got {value}"
                    ))
                }
            }
        }
        if let Some(value) = arguments.get("x-quorum-initial-group-size") {
            match value.as_i64() {
                Some(n) if n >= 1 => {}
                _ => {
                    return Err(format!(
                        "invalid arg 'x-quorum-initial-group-size': expected a positive integer, got {value}"
                    ))
                }
            }
        }
        QuorumConfig::from_arguments("", arguments).map(|_| ())
    }

    fn equivalence_arguments(&self) -> &'static [&'static str] {
        &[
            "x-queue-type",
            "x-dead-letter-exchange",
            "x-dead-letter-routing-key",
            "x-dead-letter-strategy",
            "x-max-length",
            "x-max-length-bytes",
            "x-overflow",
            "x-single-active-consumer",
            "x-delivery-limit",
            "x-message-ttl",
        ]
    }

    fn declare(
        &self,
        durability: &Durability,
        declaration: Declaration,
    ) -> CoreResult<Arc<dyn QueueInstance>> {
        match durability.queue_backend() {
            Some(backend) => backend.declare(&QUORUM, declaration),
            None => Err(CoreError::precondition_failed(format!(
                "invalid arg 'x-queue-type' for {}: queue type 'quorum' needs a node with a data directory (this broker runs in memory)",
                crate::error::resource("queue", &declaration.name, &declaration.vhost_name)
            ))),
        }
    }
}
