//! The queue-type interface, in the spirit of RabbitMQ's `rabbit_queue_type`: what a
//! declaration of each type may say ([`QueueType`]: argument validation, equivalence,
//! [`Capabilities`]) and what every queue of any type does for listeners and the vhost
//! ([`QueueInstance`]: enqueue, consume with credit, settle, browse, purge, delete, info).
//!
//! Listeners hold queues only as `Arc<dyn QueueInstance>` ([`crate::consumer::Delivery`]
//! names its queue that way) and ask [`Capabilities`] instead of matching on type names, so a
//! new type (quorum queues, streams) plugs in by implementing the two traits and adding its
//! [`QueueType`] to [`BUILT_IN`]; docs/architecture.md ("Queue types") says how.
//!
//! Classic queues ([`crate::queue::Queue`]) are the first implementation.

use std::sync::Arc;

use crate::consumer::{ConsumerSpec, Delivery, DeliverySink};
use crate::error::CoreResult;
use crate::message::Message;
use crate::queue::{ConsumerRemoval, EnqueueOutcome, QueueStats, Settlement};
use crate::value::Table;

mod classic;

pub use classic::CLASSIC;

/// What queues of a type support, asked by listeners and the vhost instead of matching on
/// the type's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// The `x-` arguments a declaration may give (others are refused where RabbitMQ refuses
    /// them, ignored otherwise).
    pub arguments: &'static [&'static str],
    /// The policy keys that apply to queues of the type.
    pub policy_keys: &'static [&'static str],
    /// AMQP 0-9-1 `basic.qos` with `global = true` is honoured.
    pub global_qos: bool,
    /// `x-max-priority` and message priorities.
    pub priorities: bool,
    /// Per-message TTL (`expiration`).
    pub per_message_ttl: bool,
    /// Exclusive queues of the type may be declared.
    pub exclusive: bool,
    /// Auto-delete queues of the type may be declared.
    pub auto_delete: bool,
    /// The largest prefetch a consumer may ask for (`None`: no cap).
    pub prefetch_cap: Option<u16>,
    /// Consumers must give an offset (`x-stream-offset`) and settle nothing destructively.
    pub consumers_need_offset: bool,
    /// Server-named queues (`queue.declare` with an empty name) of the type may be declared.
    pub server_named: bool,
}

/// A queue type: its name, what a declaration may say and what its queues can do.
pub trait QueueType: Send + Sync + 'static {
    /// The `x-queue-type` value naming it (`classic`, `quorum`, `stream`).
    fn name(&self) -> &'static str;

    /// What its queues support.
    fn capabilities(&self) -> &Capabilities;

    /// Checks a declaration's arguments; the error says which one is wrong and why (the
    /// vhost adds the queue's name and answers 406 PRECONDITION_FAILED).
    fn validate_arguments(&self, arguments: &Table) -> Result<(), String>;

    /// The arguments a redeclaration must repeat with the same values.
    fn equivalence_arguments(&self) -> &'static [&'static str];
}

/// The queue types this broker knows, by `x-queue-type` name. A new type adds itself here.
pub const BUILT_IN: &[&dyn QueueType] = &[&CLASSIC];

/// The queue type called `name`, if this broker has it.
pub fn lookup(name: &str) -> Option<&'static dyn QueueType> {
    BUILT_IN.iter().copied().find(|t| t.name() == name)
}

/// A queue of some type, as listeners, the vhost and the management API use it. All
/// methods take `&self`: listeners hold `Arc<dyn QueueInstance>`.
pub trait QueueInstance: Send + Sync {
    /// The queue's name.
    fn name(&self) -> &str;

    /// Its type.
    fn queue_type(&self) -> &'static dyn QueueType;

    /// Takes a routed message; `store_id` is its message-store record (0: not stored).
    fn enqueue(&self, message: Arc<Message>, store_id: u64) -> EnqueueOutcome;

    /// Attaches a consumer; deliveries go to `sink` while it reserves credit. Returns the
    /// consumer's id for [`QueueInstance::cancel`].
    fn consume(&self, spec: ConsumerSpec, sink: Arc<dyn DeliverySink>) -> CoreResult<u64>;

    /// Detaches a consumer.
    fn cancel(&self, consumer_id: u64) -> ConsumerRemoval;

    /// Settles deliveries of this queue by their ids.
    fn settle(&self, ids: &[u64], settlement: Settlement);

    /// Delivers to consumers that have credit again (a listener calls it after it freed
    /// room a sink had refused).
    fn dispatch(&self);

    /// Takes one message (`basic.get`); `needs_settlement` false takes it acknowledged.
    /// Returns the delivery and the messages still ready.
    fn get(&self, needs_settlement: bool) -> Option<(Delivery, u64)>;

    /// Up to `limit` ready messages from the head, without taking them (the web UI's peek).
    fn browse(&self, limit: usize) -> Vec<Arc<Message>>;

    /// Drops every ready message; returns how many.
    fn purge(&self) -> u64;

    /// Counters for the API and metrics.
    fn info(&self) -> QueueStats;
}

impl std::fmt::Debug for dyn QueueInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.name())
            .field("type", &self.queue_type().name())
            .finish()
    }
}

#[cfg(test)]
mod tests;
