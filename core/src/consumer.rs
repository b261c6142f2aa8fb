//! Consumers as the core sees them: a sink that takes deliveries while it has credit.
//!
//! Every protocol's flow control becomes the same thing here: AMQP 0-9-1 prefetch, AMQP 1.0
//! link credit, the MQTT in-flight window and STOMP prefetch are all answered by
//! [`DeliverySink::reserve`]. A queue only hands a message to a sink that reserved room for it,
//! so a slow consumer is held back by its credit and never buffers without bound.

use std::sync::Arc;

use crate::message::Message;
use crate::queue_type::QueueInstance;
use crate::value::Table;

/// Where a queue sends deliveries for one consumer. Implemented by each listener.
///
/// Called with the queue's lock held: implementations must not call back into the queue
/// (lock order: queue, then listener state; see docs/architecture.md).
pub trait DeliverySink: Send + Sync {
    /// Reserves room for one delivery. Returns false when the consumer has no credit left
    /// (prefetch reached, link credit spent, outgoing buffer full); the listener must then
    /// call [`QueueInstance::dispatch`] once room frees up.
    fn reserve(&self) -> bool;

    /// Hands over one delivery for which [`DeliverySink::reserve`] returned true.
    fn deliver(&self, delivery: Delivery);

    /// The server cancelled the consumer (its queue was deleted).
    fn cancelled(&self);

    /// The consumer's prefetch window (AMQP 0-9-1 `basic.qos`), for queue types that keep
    /// each consumer's credit in their own replicated state (quorum queues) and so must
    /// check out no more than the listener will take. `None`: unlimited or not known.
    fn prefetch(&self) -> Option<u32> {
        None
    }

    /// Whether the consumer's flow is its protocol's own credit (AMQP 1.0 link credit:
    /// RabbitMQ's `credited` consume mode) rather than a prefetch window. A stream takes
    /// such a consumer without a prefetch, and pre-settled: the credit bounds what it is
    /// sent either way.
    fn credited(&self) -> bool {
        false
    }

    /// The queue has handed over everything it has for this consumer now (a stream's
    /// consumer caught up with the stream's end). Queues that deliver from a task of their
    /// own call it, so a listener answering an AMQP 1.0 drain knows no delivery is still on
    /// its way; queues that deliver within `dispatch` need not.
    fn idle(&self) {}
}

/// One message handed to a consumer or to a basic.get.
#[derive(Clone)]
pub struct Delivery {
    /// The queue the message came from, of whatever type; settle through it.
    pub queue: Arc<dyn QueueInstance>,
    /// The queue's id for this message, passed back to [`QueueInstance::settle`].
    pub id: u64,
    /// The message itself, shared with every other queue it was routed to.
    pub message: Arc<Message>,
    /// Whether the message was delivered before and returned to the queue.
    pub redelivered: bool,
    /// How often the message came back to its queue after a failed delivery (a requeue, or
    /// its consumer going away with it unsettled): RabbitMQ's `x-delivery-count`. 0 on the
    /// first delivery; not kept across a broker restart.
    pub delivery_count: u32,
    /// Whether the queue waits for a settlement (false for auto-ack / pre-settled).
    pub needs_settlement: bool,
}

/// What a listener asks for when it attaches a consumer to a queue.
#[derive(Clone)]
pub struct ConsumerSpec {
    /// The consumer tag (unique per channel in AMQP 0-9-1).
    pub tag: Arc<str>,
    /// The connection that owns the consumer (for exclusive-queue checks).
    pub connection_id: u64,
    /// Whether deliveries must be settled (false = auto-ack).
    pub needs_settlement: bool,
    /// An exclusive consumer: no other consumer may attach while it exists.
    pub exclusive: bool,
    /// Consumer priority (`x-priority`); higher gets messages first while it has credit.
    pub priority: i32,
    /// Consumer arguments as the client sent them.
    pub arguments: Table,
}
