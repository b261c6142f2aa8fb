//! Streams as a [`QueueType`]: what a declaration may say (RabbitMQ 4.x's rules for
//! streams) and the queue the core's listeners use ([`StreamQueue`]): publishing appends to
//! the stream's log ([`crate::stream_log`]) and confirms once the chunk is on disk; each
//! consumer reads from the offset it asked for (`x-stream-offset`) with its own reader, and
//! settling only gives credit back (reads are non-destructive).
//!
//! The stream protocol listener reads and writes the same logs directly, whole chunks at a
//! time; this module is how every other protocol reaches them.

use std::sync::Arc;

use super::{Capabilities, Declaration, QueueInstance, QueueType};
use crate::durability::Durability;
use crate::error::{CoreError, CoreResult, ErrorKind};
use crate::stream_log::vhost_streams::table_to_arguments;
use crate::stream_log::{StreamCreated, StreamSettings};
use crate::value::Table;

mod consumer;
mod offset;
mod queue;
#[cfg(test)]
mod tests;

pub use offset::{consumer_filter, offset_spec, ConsumerFilter};
pub use queue::StreamQueue;

/// The stream queue type.
pub struct Stream;

/// The stream queue type, for [`super::BUILT_IN`].
pub const STREAM: Stream = Stream;

/// The largest segment RabbitMQ accepts (`x-stream-max-segment-size-bytes`).
const MAX_SEGMENT_SIZE: i64 = 3_000_000_000;

const CAPABILITIES: Capabilities = Capabilities {
    arguments: &[
        "x-max-length-bytes",
        "x-queue-type",
        "x-max-age",
        "x-stream-max-segment-size-bytes",
        "x-stream-filter-size-bytes",
        "x-initial-cluster-size",
        "x-queue-leader-locator",
    ],
    // Policy wins over the argument (RabbitMQ's policy precedence for streams).
    policy_keys: &[
        "max-age",
        "max-length-bytes",
        "stream-max-segment-size-bytes",
    ],
    global_qos: false,
    priorities: false,
    per_message_ttl: false,
    exclusive: false,
    auto_delete: false,
    prefetch_cap: None,
    consumers_need_offset: true,
    server_named: false,
};

impl QueueType for Stream {
    fn name(&self) -> &'static str {
        "stream"
    }

    fn capabilities(&self) -> &Capabilities {
        &CAPABILITIES
    }

    fn validate_arguments(&self, arguments: &Table) -> Result<(), String> {
        if let Some(size) = arguments
            .get("x-stream-max-segment-size-bytes")
            .and_then(|v| v.as_i64())
        {
            if size > MAX_SEGMENT_SIZE {
                return Err("Exceeded max value for x-stream-max-segment-size-bytes".into());
            }
        }
        if let Some(value) = arguments.get("x-stream-filter-size-bytes") {
            match value.as_i64() {
                Some(size) if (16..=255).contains(&size) => {}
                Some(_) => return Err("Invalid value for x-stream-filter-size-bytes".into()),
                None => return Err("Invalid type for x-stream-filter-size-bytes".into()),
            }
        }
        StreamSettings::from_arguments(&table_to_arguments(arguments)).map(|_| ())
    }

    fn equivalence_arguments(&self) -> &'static [&'static str] {
        &[
            "x-queue-type",
            "x-max-length-bytes",
            "x-max-age",
            "x-stream-max-segment-size-bytes",
            "x-stream-filter-size-bytes",
        ]
    }

    fn declare(
        &self,
        durability: &Durability,
        declaration: Declaration,
    ) -> CoreResult<Arc<dyn QueueInstance>> {
        let Some(vhost) = declaration.vhost.upgrade() else {
            return Err(CoreError::new(
                ErrorKind::InternalError,
                format!("vhost '{}' is gone", declaration.vhost_name),
            ));
        };
        let arguments = table_to_arguments(&declaration.arguments);
        let log = match vhost.streams().create(&declaration.name, &arguments) {
            Ok(StreamCreated::Created(log) | StreamCreated::Existed(log)) => log,
            Err(problem) => {
                return Err(CoreError::precondition_failed(format!(
                    "{problem} ({})",
                    crate::error::resource("queue", &declaration.name, &declaration.vhost_name)
                )))
            }
        };
        if let Some(local) = durability.local_node() {
            // On a cluster: nothing is confirmed until the stream's placement (committed by
            // its home node right after this declaration) makes a leader of this node.
            let home = durability.forwarding().and_then(|forwarding| {
                forwarding.link_home_of(&declaration.vhost_name, &declaration.name)
            });
            log.await_placement(home.as_deref() == Some(local));
        }
        let queue = StreamQueue::new(log, &vhost);
        queue.apply_policies(
            declaration.policy.as_ref(),
            declaration.operator_policy.as_ref(),
        );
        Ok(queue)
    }
}
