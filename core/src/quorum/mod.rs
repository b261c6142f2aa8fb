//! Quorum queues: the replicated queue state machine.
//!
//! A quorum queue is one Raft group; every member applies the same committed [`Command`]s in
//! the same order to a [`QuorumQueue`] and so reaches the same state. The state machine is
//! pure: [`QuorumQueue::apply`] takes the command and the time the leader stamped on its log
//! entry (Unix milliseconds; nothing here reads a clock) and returns the command's
//! [`Reply`] plus the [`Effect`]s a leader carries out (deliveries, dead letters, consumer
//! notices). Followers apply the same commands and drop the effects, so after a leader change
//! the new leader knows exactly which messages were checked out to whom.
//!
//! The semantics are RabbitMQ 4.x's (4.3 where versions differ, 4.4 for delayed delivery):
//! publisher deduplication by (publisher, sequence), consumers with credit (prefetch capped at
//! [`MAX_PREFETCH`]), settlement (ack, requeue, release, reject, modify), the delivery limit
//! with dead-lettering reason `delivery_limit`, at-most-once and at-least-once dead-lettering,
//! drop-head and reject-publish overflow, message TTL, 32 strict priority levels, single
//! active consumer, consumer priorities, consumer timeout, consumer down, and native delayed
//! delivery (`x-opt-delivery-time`). See docs/quorum-queues.md.
//!
//! [`codec`] encodes commands for the Raft log and the whole state for a snapshot: a snapshot
//! holds the index and every message still in the queue, so a member restored from it and
//! the log after it equals one that applied the whole log.

pub mod codec;
mod config;
mod dispatch;
mod machine;
mod transitions;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use config::{DeadLetterStrategy, QuorumConfig, DEFAULT_DELIVERY_LIMIT};
pub use machine::{QuorumQueue, QuorumStats};

use crate::message::Message;
use crate::queue::DeathReason;
use crate::value::Table;

/// Quorum queues cap a consumer's prefetch (and credit) at this, to bound how much of the
/// Raft log unsettled deliveries keep alive; a prefetch of 0 ("unlimited") also means this.
pub const MAX_PREFETCH: u32 = 2_000;
/// Priority levels of a quorum queue (RabbitMQ 4.3): 0 to 31, higher first, strictly.
pub const PRIORITY_LEVELS: u8 = 32;
/// The priority of a message published without one: AMQP 1.0's default, which RabbitMQ uses
/// for quorum queues.
pub const DEFAULT_PRIORITY: u8 = 4;
/// The header (AMQP 1.0 message annotation) holding a native delayed delivery's time, Unix
/// milliseconds.
pub const DELIVERY_TIME_HEADER: &str = "x-opt-delivery-time";

/// A consumer of one quorum queue, as the state machine numbers it when it attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConsumerKey(pub u64);

/// Who published a message and its sequence number in that publisher's stream, for
/// deduplication: a publish retried after a leader change is applied once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PublishId {
    /// The publisher (a channel, link or session; unique per queue while it lives).
    pub publisher: u64,
    /// Increasing per publisher (the 0-9-1 publisher-confirm sequence number, for example).
    pub sequence: u64,
}

/// How a consumer's credit is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditMode {
    /// AMQP 0-9-1 prefetch, STOMP prefetch, the MQTT window: at most this many unsettled
    /// deliveries (capped at [`MAX_PREFETCH`]; 0 means the cap). For an auto-ack consumer the
    /// window is spent by each delivery and topped up with [`Command::Credit`].
    Prefetch(u32),
    /// AMQP 1.0 link credit: the consumer gets exactly what [`Command::Credit`] grants.
    Credited,
}

/// How a consumer settles deliveries it received.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Processed: the message leaves the queue.
    Ack,
    /// Back to the queue at its position, counted as a failed delivery (0-9-1 basic.reject
    /// with requeue, as RabbitMQ 4.3 counts it).
    Requeue,
    /// Back to the queue without counting (AMQP 1.0 `released`; 0-9-1 basic.nack with
    /// requeue, which RabbitMQ 4.3 does not count).
    Release,
    /// Refused: dead-lettered with reason `rejected`, or dropped.
    Reject,
    /// AMQP 1.0 `modified`: the annotations are merged into the message's headers; with
    /// `undeliverable_here` the message is dead-lettered (reason `rejected`), otherwise
    /// returned, counted as failed when `delivery_failed`.
    Modify {
        /// Counts toward the delivery limit.
        delivery_failed: bool,
        /// Not to be delivered here again.
        undeliverable_here: bool,
        /// Message annotations to merge into the headers.
        annotations: Table,
    },
}

/// One entry of a quorum queue's Raft log.
#[derive(Debug, Clone)]
pub enum Command {
    /// A publish. Replied [`Reply::Enqueued`], [`Reply::Duplicate`] or [`Reply::Rejected`].
    Enqueue {
        /// For deduplication; `None` for publishers that do not retry (dead letters from a
        /// classic queue, the HTTP API).
        publish: Option<PublishId>,
        /// The message.
        message: Arc<Message>,
    },
    /// A publisher went away: forget its deduplication state.
    PublisherDown {
        /// The publisher.
        publisher: u64,
    },
    /// A consumer attaches. Replied [`Reply::Attached`].
    Attach {
        /// The connection or channel the consumer belongs to (see [`Command::Down`]).
        owner: u64,
        /// The consumer tag or link name, for display and notices.
        tag: String,
        /// How its credit is kept.
        mode: CreditMode,
        /// Consumer priority (`x-priority`).
        priority: i32,
        /// Deliveries are settled on delivery (basic.consume no-ack, pre-settled links).
        auto_ack: bool,
        /// Milliseconds a delivery may stay unsettled: the consumer's `x-consumer-timeout`,
        /// else the broker's `consumer_timeout`; `None` for the queue's `x-consumer-timeout`.
        timeout: Option<u64>,
    },
    /// Sets a consumer's credit (absolute, as AMQP 1.0 flow does); with `drain`, credit left
    /// after delivering what is ready is given up ([`Effect::CreditDrained`]).
    Credit {
        /// The consumer.
        consumer: ConsumerKey,
        /// The new credit (capped at [`MAX_PREFETCH`]).
        credit: u32,
        /// Drain.
        drain: bool,
    },
    /// The consumer stops receiving; its unsettled deliveries stay with it until settled.
    Cancel {
        /// The consumer.
        consumer: ConsumerKey,
    },
    /// Settles deliveries of one consumer.
    Settle {
        /// The consumer the messages were delivered to.
        consumer: ConsumerKey,
        /// Message ids from [`Delivered::id`].
        ids: Vec<u64>,
        /// What to do with them.
        outcome: Outcome,
    },
    /// The owner (connection, channel or the node it ran on) went away: its consumers are
    /// removed and their unsettled messages returned, redelivered and counted as failed.
    Down {
        /// The owner.
        owner: u64,
    },
    /// basic.get. Replied [`Reply::Dequeued`] or [`Reply::Empty`].
    Dequeue {
        /// Settles through the consumer the reply names, unless `auto_ack`.
        owner: u64,
        /// Settled on delivery.
        auto_ack: bool,
    },
    /// The dead-letter target confirmed these at-least-once dead letters.
    DeadLetterSettled {
        /// Message ids from [`Effect::DeadLetter`].
        ids: Vec<u64>,
    },
    /// Removes every ready and delayed message. Replied [`Reply::Purged`].
    Purge,
    /// Time passed: TTLs, delayed deliveries and consumer timeouts fall due.
    Tick,
    /// New settings (a policy changed; see [`QuorumConfig::with_policies`]). Lower limits
    /// apply at once (drop-head drops, reject-publish starts refusing); a new TTL applies to
    /// messages enqueued from now on. The name and single-active-consumer stay as declared.
    Configure(QuorumConfig),
    /// Several commands in one log entry, applied in order at the entry's time exactly as if
    /// each had its own entry. Replied [`Reply::Batch`], one reply per command. The Raft
    /// layer packs the operations it proposes together into one entry, so a batch of
    /// publishes costs one entry's replication and bookkeeping.
    Batch(Vec<Command>),
}

/// One message handed out.
#[derive(Debug, Clone)]
pub struct Delivered {
    /// The queue's id for the message, used to settle it.
    pub id: u64,
    /// The message.
    pub message: Arc<Message>,
    /// Delivered before.
    pub redelivered: bool,
    /// Failed deliveries so far: the `x-delivery-count` header when non-zero.
    pub delivery_count: u32,
    /// Already settled (auto-ack): the consumer must not settle it.
    pub settled: bool,
}

/// The answer to the command that was applied, for whoever proposed it.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Done.
    Ok,
    /// The message is in the queue under this id: confirm it.
    Enqueued {
        /// Its id.
        id: u64,
    },
    /// The publish was applied before (same publisher and sequence): confirm it again.
    Duplicate,
    /// `x-overflow: reject-publish` refused it: nack it.
    Rejected,
    /// The consumer is attached.
    Attached {
        /// Its key, for every later command about it.
        consumer: ConsumerKey,
        /// Whether it receives now (false: waiting as a single-active-consumer standby).
        active: bool,
    },
    /// basic.get found a message.
    Dequeued {
        /// The consumer to settle it through (the owner's get consumer), unless auto-ack.
        consumer: Option<ConsumerKey>,
        /// The message.
        delivered: Delivered,
        /// Ready messages left (basic.get-ok's message-count).
        remaining: u64,
    },
    /// basic.get found nothing.
    Empty,
    /// Messages removed by a purge.
    Purged {
        /// How many.
        count: u64,
    },
    /// The command named a consumer the queue does not have (timed out, or never attached).
    UnknownConsumer,
    /// The replies to a [`Command::Batch`]'s commands, in their order.
    Batch(Vec<Reply>),
}

/// Work for the leader after applying a command. Followers drop them.
#[derive(Debug, Clone)]
pub enum Effect {
    /// Send a message to a consumer.
    Deliver {
        /// The consumer.
        consumer: ConsumerKey,
        /// The consumer's owner (its `Attach`'s `owner`): on a cluster, the node hosting the
        /// owner's connection is the one that hands the delivery over.
        owner: u64,
        /// The delivery.
        delivered: Delivered,
    },
    /// Publish a dead-lettered copy to the dead-letter exchange (with `x-death`, see
    /// `crate::dead_letter`). With `at_least_once`, confirm it back with
    /// [`Command::DeadLetterSettled`]; until then the message stays in the queue.
    DeadLetter {
        /// The message's id.
        id: u64,
        /// The message.
        message: Arc<Message>,
        /// Why it left.
        reason: DeathReason,
        /// The dead-letter exchange.
        exchange: String,
        /// `x-dead-letter-routing-key`, else the message's own.
        routing_key: Option<String>,
        /// Awaiting a confirm from the target.
        at_least_once: bool,
    },
    /// A single-active-consumer switch: this consumer starts (or stops) receiving.
    ActiveChanged {
        /// The consumer.
        consumer: ConsumerKey,
        /// Receiving now.
        active: bool,
    },
    /// A drain finished: the consumer's credit left was given up.
    CreditDrained {
        /// The consumer.
        consumer: ConsumerKey,
        /// Credit given up.
        credit: u32,
    },
    /// Deliveries stayed unsettled past the consumer timeout: they were returned (redelivered,
    /// not counted as failed) and the consumer receives nothing more until it settles them
    /// (RabbitMQ 4.3). AMQP 0-9-1 sends basic.cancel to a client that takes it, else closes
    /// the channel with 406 PRECONDITION_FAILED.
    ConsumerTimedOut {
        /// The consumer.
        consumer: ConsumerKey,
        /// Its owner.
        owner: u64,
        /// Its tag.
        tag: String,
        /// The deliveries that timed out.
        ids: Vec<u64>,
    },
}

/// What applying one command produced.
#[derive(Debug, Clone)]
pub struct Applied {
    /// For the proposer.
    pub reply: Reply,
    /// For the leader to carry out.
    pub effects: Vec<Effect>,
}
