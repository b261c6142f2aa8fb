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
//! Classic queues ([`crate::queue::Queue`]) are the first implementation; quorum queues are
//! made by the server's [`QueueBackend`], streams by [`stream`] around the vhost's stream logs.

use std::sync::{Arc, Weak};

use crate::consumer::{ConsumerSpec, Delivery, DeliverySink};
use crate::durability::Durability;
use crate::error::{CoreError, CoreResult};
use crate::message::Message;
use crate::queue::{ConsumerRemoval, EnqueueOutcome, QueueStats, Settlement};
use crate::value::Table;
use crate::vhost::VHost;

mod classic;
mod quorum;
pub mod stream;

pub use classic::CLASSIC;
pub use quorum::QUORUM;
pub use stream::STREAM;

/// A declaration the vhost has checked (permissions, name, the type's arguments and
/// capabilities) and hands to [`QueueType::declare`] to make the queue.
#[derive(Debug, Clone)]
pub struct Declaration {
    /// The queue's name.
    pub name: String,
    /// The vhost it lives in, for dead-lettering through it.
    pub vhost: Weak<VHost>,
    /// The vhost's name.
    pub vhost_name: String,
    /// Durable flag (always true for quorum queues).
    pub durable: bool,
    /// The declaration's arguments.
    pub arguments: Table,
    /// The arguments combined with the policy and operator policy that apply now.
    pub policy: Option<Table>,
    /// The operator policy's definition, if one applies.
    pub operator_policy: Option<Table>,
}

/// What makes the queues of a type whose queues live outside the core (quorum queues on
/// Raft groups in `warren-raft`): the server installs one per broker with
/// [`Durability::set_queue_backend`].
pub trait QueueBackend: Send + Sync {
    /// Makes (or, after a restart, reopens from disk) the queue `declaration` describes.
    fn declare(
        &self,
        queue_type: &'static dyn QueueType,
        declaration: Declaration,
    ) -> CoreResult<Arc<dyn QueueInstance>>;
}

/// What [`QueueInstance::publish`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Published {
    /// Taken or refused (reject-publish).
    pub outcome: EnqueueOutcome,
    /// A sequence number of the message store to wait for before confirming (a replicated
    /// queue holds one until the publish is committed; see
    /// [`crate::store::MessageStore::hold`]).
    pub durable_seq: Option<u64>,
}

/// A node holding a replica of a replicated queue, as [`ReplicaInfo`] names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replica {
    /// The node answering (the management API shows its node name): a single node's
    /// one-member groups need no name of their own.
    ThisNode,
    /// Another node, by its node name (`warren@host`).
    Node(String),
}

/// Where a replicated queue's members are (RabbitMQ's `leader`, `members` and `online`
/// fields of a quorum queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaInfo {
    /// The member that leads now; `None` during an election.
    pub leader: Option<Replica>,
    /// Every member of the queue's group.
    pub members: Vec<Replica>,
    /// The members that are up.
    pub online: Vec<Replica>,
}

impl ReplicaInfo {
    /// A one-member group on this node, its own leader.
    pub fn this_node() -> ReplicaInfo {
        ReplicaInfo {
            leader: Some(Replica::ThisNode),
            members: vec![Replica::ThisNode],
            online: vec![Replica::ThisNode],
        }
    }
}

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

    /// Makes a queue of this type. Classic queues are made by the vhost itself (it keeps
    /// them as `Arc<Queue>` for its publish fast path) and refuse here; other types make
    /// theirs through the broker's [`QueueBackend`].
    fn declare(
        &self,
        durability: &Durability,
        declaration: Declaration,
    ) -> CoreResult<Arc<dyn QueueInstance>> {
        let _ = (durability, declaration);
        Err(CoreError::new(
            crate::error::ErrorKind::InternalError,
            format!("queues of type '{}' are made by the vhost", self.name()),
        ))
    }
}

/// The queue types this broker knows, by `x-queue-type` name. A new type adds itself here.
pub const BUILT_IN: &[&dyn QueueType] = &[&CLASSIC, &QUORUM, &STREAM];

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

    /// Refuses `basic.get` on a queue that does not support it (streams, with RabbitMQ's
    /// 540 NOT_IMPLEMENTED); listeners ask before [`QueueInstance::get`].
    fn check_get(&self) -> CoreResult<()> {
        Ok(())
    }

    /// Up to `limit` ready messages from the head, without taking them (the web UI's peek).
    fn browse(&self, limit: usize) -> Vec<Arc<Message>>;

    /// Up to `limit` ready messages starting `skip` after the head, without taking them,
    /// each with whether it was delivered before: the management API's browse by position.
    /// By default read through [`QueueInstance::browse`] (none shown as redelivered); a
    /// type that knows more (classic queues) reads only what is asked for.
    fn peek(&self, skip: usize, limit: usize) -> Vec<(Arc<Message>, bool)> {
        self.browse(skip.saturating_add(limit))
            .into_iter()
            .skip(skip)
            .map(|message| (message, false))
            .collect()
    }

    /// Drops every ready message; returns how many.
    fn purge(&self) -> u64;

    /// Refuses `queue.purge` on a queue that does not support it (streams, with RabbitMQ's
    /// 540 NOT_IMPLEMENTED); the vhost asks before [`QueueInstance::purge`].
    fn check_purge(&self) -> CoreResult<()> {
        Ok(())
    }

    /// Counters for the API and metrics.
    fn info(&self) -> QueueStats;

    /// A stand-in for a queue on another node ([`QueueInstance::home_node`]): counters its
    /// home node sent for many queues at once ([`crate::vhost::VHost::fetch_remote_info`]),
    /// which `info` answers with for a while instead of asking again. Others ignore it.
    fn remember_info(&self, stats: QueueStats) {
        let _ = stats;
    }

    /// Takes a routed message that no message-store record backs (the vhost writes the
    /// store only for classic queues) and says what its publisher waits for.
    fn publish(&self, message: Arc<Message>) -> Published {
        Published {
            outcome: self.enqueue(message, 0),
            durable_seq: None,
        }
    }

    /// The declaration's arguments (for redeclaration checks and the definitions file).
    fn arguments(&self) -> Table {
        Table::new()
    }

    /// The consumers whose channel or link is on this node, with whether each is the active
    /// one (false only for a single-active-consumer queue's waiting consumers): what
    /// `/api/consumers` lists here. A consumer that another node attached through
    /// forwarding is that node's to list, so every consumer is listed once in a cluster.
    fn local_consumers(&self) -> Vec<(ConsumerSpec, bool)> {
        Vec::new()
    }

    /// Whether the queue survives a restart.
    fn durable(&self) -> bool {
        true
    }

    /// Whether the queue is deleted when its last consumer goes.
    fn auto_delete(&self) -> bool {
        false
    }

    /// The connection an exclusive queue belongs to.
    fn exclusive_owner(&self) -> Option<u64> {
        None
    }

    /// Refuses a connection other than an exclusive queue's owner (405 RESOURCE_LOCKED).
    fn check_exclusive_access(&self, connection_id: u64) -> CoreResult<()> {
        let _ = connection_id;
        Ok(())
    }

    /// The node the queue lives on when this is a stand-in forwarding to another node
    /// ([`crate::remote::RemoteQueue`]); `None` for a queue served here.
    fn home_node(&self) -> Option<&str> {
        None
    }

    /// The policy and operator policy that apply to the queue now (their definitions), after
    /// a policy changed. Classic queues are updated by the vhost itself.
    fn apply_policies(&self, policy: Option<&Table>, operator: Option<&Table>) {
        let _ = (policy, operator);
    }

    /// Where the queue's replicas are, for a replicated queue (quorum); `None` for a queue
    /// that lives on one node only (classic).
    fn replicas(&self) -> Option<ReplicaInfo> {
        None
    }

    /// The vhost removed the queue: drop its messages and its state on disk, cancel its
    /// consumers. Returns the ready messages dropped.
    fn delete(&self) -> u64 {
        self.purge()
    }
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
