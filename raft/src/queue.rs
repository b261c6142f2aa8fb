//! Quorum queues as the core sees them: [`QuorumBackend`] makes a [`QuorumQueueHandle`] per
//! declared queue, a [`QueueInstance`] whose operations become commands of the queue's Raft
//! group ([`QueueGroup`]).
//!
//! The core's interface is synchronous and the group is not: every operation is put, in
//! order, on the queue's command channel, and one driver task per queue proposes them with
//! `client_write_ff` (so the log keeps the order of the calls while commits are pipelined).
//! What a caller waits for comes back another way:
//! - a publish takes a held sequence number of the message store
//!   ([`MessageStore::hold`]), released once the entry is committed, so every listener holds
//!   its confirm exactly as it holds one for the disk;
//! - deliveries arrive as the state machine's `Deliver` effects, on the leader only, and go
//!   to the consumer's [`DeliverySink`]; a delivery the sink has no room for waits here
//!   until the listener calls [`QueueInstance::dispatch`];
//! - `basic.get` waits for its commit on the caller's thread (`block_in_place`; the broker
//!   runs on the multi-threaded runtime).
//!
//! On a cluster every node runs a member of every group (voters and learners, driver.rs);
//! the operator's side (status, membership, leadership) is in `ops`. See
//! docs/quorum-queues.md.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use bytes::Bytes;
use openraft::{Config, SnapshotPolicy};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use warren_core::consumer::{ConsumerSpec, Delivery, DeliverySink};
use warren_core::error::{CoreError, CoreResult};
use warren_core::message::Message;
use warren_core::queue::{ConsumerRemoval, EnqueueOutcome, QueueStats, Settlement};
use warren_core::queue_type::{
    Declaration, Published, QueueBackend, QueueInstance, QueueType, Replica, ReplicaInfo,
};
use warren_core::quorum::{
    Command, ConsumerKey, CreditMode, Delivered, Effect, Outcome, PublishId, QuorumConfig, Reply,
    MAX_PREFETCH,
};
use warren_core::store::MessageStore;
use warren_core::value::Table;
use warren_core::vhost::VHost;

use crate::driver::{Driver, Placement};
use crate::network::{member_id, ClusterLink, GroupRegistry};
use crate::{unix_ms, EffectSink, GroupId, Wal};

/// How long `basic.get` waits for its commit.
const GET_BOUND: Duration = Duration::from_secs(5);
/// An auto-ack consumer's window is topped up after this many deliveries.
const AUTO_ACK_TOP_UP: u32 = MAX_PREFETCH / 2;
/// `x-quorum-initial-group-size` when the declaration names none (RabbitMQ's default).
const DEFAULT_GROUP_SIZE: usize = 3;

/// Makes quorum queues on this node: one Raft group per queue on the node's shared WAL.
pub struct QuorumBackend {
    wal: Wal,
    store: Option<Arc<MessageStore>>,
    runtime: tokio::runtime::Handle,
    alone_config: Arc<Config>,
    cluster_config: Arc<Config>,
    identity: Identity,
    /// On a cluster: the link, once clustering has started (`None` before).
    pub(crate) cluster: Option<watch::Sender<Option<Arc<dyn ClusterLink>>>>,
    pub(crate) registry: Arc<GroupRegistry>,
}

impl QuorumBackend {
    /// A backend for a node that runs alone: logging into `wal`, holding confirms through
    /// `store`, running its groups on `runtime`.
    pub fn new(
        wal: Wal,
        store: Option<Arc<MessageStore>>,
        runtime: tokio::runtime::Handle,
    ) -> QuorumBackend {
        QuorumBackend::build(wal, store, runtime, "", false)
    }

    /// A backend for node `node` of a cluster: its groups start once [`QuorumBackend::join`]
    /// hands them the cluster.
    pub fn clustered(
        wal: Wal,
        store: Option<Arc<MessageStore>>,
        runtime: tokio::runtime::Handle,
        node: &str,
    ) -> QuorumBackend {
        QuorumBackend::build(wal, store, runtime, node, true)
    }

    fn build(
        wal: Wal,
        store: Option<Arc<MessageStore>>,
        runtime: tokio::runtime::Handle,
        node: &str,
        clustered: bool,
    ) -> QuorumBackend {
        let alone = Config {
            cluster_name: "warren-quorum".into(),
            // One member: heartbeats and elections only matter after a restart, when the
            // member elects itself.
            heartbeat_interval: 500,
            election_timeout_min: 1_000,
            election_timeout_max: 1_500,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(5_000),
            // A follower a little behind catches up from the log, not from a snapshot (the
            // entries' messages are shared with the state machine while they are queued).
            // Entries carry batches (up to 1,024 commands, 256 KiB of bodies, see
            // `network::pack`), so this bounds the bodies the log keeps alive past a
            // snapshot to 64 MiB.
            max_in_snapshot_log_to_keep: 256,
            ..Default::default()
        }
        .validate()
        .expect("the quorum queue Raft settings are valid");
        let cluster = Config {
            cluster_name: "warren-quorum".into(),
            // No heartbeats and no election timers: the driver elects when the failure
            // detector loses the leader's node (driver.rs, `watch_leader`), so an idle group
            // sends nothing. The timeouts still set openraft's leader lease (a follower
            // refuses votes this long after it last heard from its leader).
            enable_heartbeat: false,
            enable_elect: false,
            // With both off openraft's tick has nothing left to do but wake the group's core
            // every 1.35 s (a leader stepping down after removing itself is the one other
            // use, and a leader hands over before it is removed: `ops::transfer`).
            enable_tick: false,
            // Also openraft's bound on one AppendEntries (and its tick is 1.5 times this):
            // long enough that a follower slowed by a loaded machine is not timed out and
            // its replication stream restarted mid-batch.
            heartbeat_interval: 900,
            election_timeout_min: 1_000,
            election_timeout_max: 1_500,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(5_000),
            // A follower a little behind catches up from the log, not from a snapshot (the
            // entries' messages are shared with the state machine while they are queued).
            // Entries carry batches (up to 1,024 commands, 256 KiB of bodies, see
            // `network::pack`), so this bounds the bodies the log keeps alive past a
            // snapshot to 64 MiB.
            max_in_snapshot_log_to_keep: 256,
            ..Default::default()
        }
        .validate()
        .expect("the clustered quorum queue Raft settings are valid");
        QuorumBackend {
            wal,
            store,
            runtime,
            alone_config: Arc::new(alone),
            cluster_config: Arc::new(cluster),
            identity: Identity::new(node),
            cluster: clustered.then(|| watch::channel(None).0),
            registry: Arc::default(),
        }
    }

    /// Hands the cluster to this node's groups (started and to come).
    pub fn join(&self, link: Arc<dyn ClusterLink>) {
        if let Some(cluster) = &self.cluster {
            cluster.send_replace(Some(link));
        }
    }

    /// Answers a peer's quorum-queue request (`wire::methods`): Raft traffic and forwarded
    /// commands by the group registry, operator requests by `ops`.
    pub fn serve(
        &self,
        method: u16,
        body: Bytes,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Bytes, String>> + Send>> {
        match method {
            crate::wire::methods::STATUS
            | crate::wire::methods::CHANGE
            | crate::wire::methods::ELECT => Box::pin(crate::ops::serve(
                Arc::clone(&self.registry),
                self.link(),
                method,
                body,
            )),
            _ => Box::pin(self.registry.serve(method, body)),
        }
    }

    /// The cluster, once clustering has started (`None` on a node that runs alone).
    pub(crate) fn link(&self) -> Option<Arc<dyn ClusterLink>> {
        self.cluster.as_ref().and_then(|c| c.borrow().clone())
    }
}

/// A stable group id for a queue: FNV-1a over its vhost and name, so a restart finds the
/// same group (and its log) again.
pub fn group_id(vhost: &str, name: &str) -> GroupId {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in vhost.bytes().chain([0u8]).chain(name.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

impl QueueBackend for QuorumBackend {
    fn declare(
        &self,
        queue_type: &'static dyn QueueType,
        declaration: Declaration,
    ) -> CoreResult<Arc<dyn QueueInstance>> {
        let what =
            warren_core::error::resource("queue", &declaration.name, &declaration.vhost_name);
        let config = QuorumConfig::from_arguments(&declaration.name, &declaration.arguments)
            .map_err(|problem| CoreError::precondition_failed(format!("{problem} ({what})")))?
            .with_policies(
                &declaration.arguments,
                declaration.policy.as_ref(),
                declaration.operator_policy.as_ref(),
            );
        let initial_size = declaration
            .arguments
            .get("x-quorum-initial-group-size")
            .and_then(|v| v.as_i64())
            .filter(|size| *size > 0)
            .map_or(DEFAULT_GROUP_SIZE, |size| size as usize);
        let group = group_id(&declaration.vhost_name, &declaration.name);
        let (ops, receiver) = mpsc::unbounded_channel();
        let handle = Arc::new_cyclic(|me: &Weak<QuorumQueueHandle>| QuorumQueueHandle {
            me: me.clone(),
            name: declaration.name.clone(),
            queue_type,
            arguments: declaration.arguments.clone(),
            vhost: declaration.vhost.clone(),
            store: self.store.clone(),
            reject_publish: std::sync::atomic::AtomicBool::new(
                config.overflow == warren_core::queue::Overflow::RejectPublish,
            ),
            settings: Mutex::new(config.clone()),
            ops,
            machine: OnceLock::new(),
            member: OnceLock::new(),
            local: Mutex::new(Local::default()),
            identity: self.identity,
            publish_sequence: AtomicU64::new(0),
        });
        let placement = match &self.cluster {
            Some(cluster) => Placement::Cluster(cluster.subscribe()),
            None => Placement::Alone,
        };
        let driver = Driver {
            queue: Arc::downgrade(&handle),
            wal: self.wal.clone(),
            group,
            vhost: declaration.vhost_name.clone(),
            alone_config: Arc::clone(&self.alone_config),
            cluster_config: Arc::clone(&self.cluster_config),
            queue_config: config,
            initial_size,
            ops: receiver,
            placement,
            registry: Arc::clone(&self.registry),
            identity: self.identity,
        };
        self.runtime.spawn(driver.run());
        Ok(handle)
    }
}

/// Who owns consumers and publishes on this node, in this run: the ids the state machine
/// records are `node tag u16 | run u16 | connection u32`, so every member can tell which
/// consumers are its own node's (it hands them their deliveries), which belong to a
/// previous run of its node (their connections are gone), and which node any other one is
/// on (the leader forgets those of a node that goes down).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identity {
    tag: u16,
    run: u16,
}

impl Identity {
    fn new(node: &str) -> Identity {
        // Different on every start of the process (two runs colliding only costs the older
        // run's consumers being kept until the detector or a cancel removes them).
        let run = (u64::from(std::process::id()) ^ unix_ms() ^ (unix_ms() >> 16)) as u16;
        Identity {
            tag: Identity::tag_of_node(node),
            run,
        }
    }

    /// The owner id of `connection` on this node in this run.
    pub(crate) fn owner(self, connection: u64) -> u64 {
        (u64::from(self.tag) << 48) | (u64::from(self.run) << 32) | (connection & 0xFFFF_FFFF)
    }

    /// Whether `owner` is this node's, in this run.
    pub(crate) fn is_mine(self, owner: u64) -> bool {
        owner >> 32 == (u64::from(self.tag) << 16) | u64::from(self.run)
    }

    /// Whether `owner` is this node's from a previous run.
    pub(crate) fn is_previous_run(self, owner: u64) -> bool {
        Identity::tag_of(owner) == self.tag && !self.is_mine(owner)
    }

    /// The node tag in an owner id.
    pub(crate) fn tag_of(owner: u64) -> u16 {
        (owner >> 48) as u16
    }

    /// The tag of a node name: the top bits of its member id, mixed first (names that
    /// differ in their last character, as 127.0.0.1 and 127.0.0.2, differ little in FNV's
    /// top bits).
    pub(crate) fn tag_of_node(node: &str) -> u16 {
        let mut x = member_id(node);
        x ^= x >> 30;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 27;
        x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        (x >> 48) as u16
    }
}

/// What the driver proposes, in the order the core asked.
pub(crate) enum Op {
    Command(Command),
    /// A publish (an `Enqueue` with this handle's publisher id) whose confirm is held on
    /// the store's sequence number `hold`.
    Publish {
        command: Command,
        hold: Option<u64>,
        /// For a reject-publish queue: the caller waits for the state machine's answer.
        answer: Option<std::sync::mpsc::Sender<Option<Reply>>>,
    },
    Attach {
        local: u64,
        command: Command,
    },
    Dequeue {
        command: Command,
        reply: std::sync::mpsc::Sender<Option<Reply>>,
    },
    /// The queue was deleted: stop the member and drop its state on disk, then say so.
    Delete {
        done: std::sync::mpsc::Sender<()>,
    },
}

/// A consumer attached through this handle.
struct LocalConsumer {
    sink: Arc<dyn DeliverySink>,
    /// What the channel or link asked for (for `/api/consumers`).
    spec: ConsumerSpec,
    auto_ack: bool,
    /// Deliveries checked out to it that its sink had no room for yet.
    waiting: VecDeque<Delivery>,
    /// Auto-ack deliveries since its window was last topped up.
    since_top_up: u32,
}

#[derive(Default)]
struct Local {
    next_local: u64,
    consumers: HashMap<ConsumerKey, LocalConsumer>,
    /// Local consumer ids by the key the state machine gave them (`None` until the attach
    /// is committed).
    keys: HashMap<u64, Option<ConsumerKey>>,
    /// Consumers whose attach is not committed yet, by local id.
    pending: HashMap<u64, LocalConsumer>,
    /// Local consumers cancelled before their attach was committed.
    cancelled_early: BTreeSet<u64>,
    /// Consumers of this node the state machine has that no local consumer stands for.
    strays: BTreeSet<ConsumerKey>,
    /// Deliveries for a key whose attach reply has not been seen yet.
    early: HashMap<ConsumerKey, Vec<Delivered>>,
    /// Which consumer holds each unsettled message.
    holders: HashMap<u64, ConsumerKey>,
    /// The deleted flag: operations after it are dropped.
    deleted: bool,
}

/// A quorum queue on this node, through the queue-type interface.
pub struct QuorumQueueHandle {
    me: Weak<QuorumQueueHandle>,
    name: String,
    queue_type: &'static dyn QueueType,
    arguments: Table,
    vhost: Weak<VHost>,
    store: Option<Arc<MessageStore>>,
    /// `x-overflow: reject-publish`: publishes wait for their answer (see `publish`).
    reject_publish: std::sync::atomic::AtomicBool,
    /// The settings last given to the state machine (declaration plus policies), so a
    /// policy change proposes `Configure` only when they change.
    settings: Mutex<QuorumConfig>,
    ops: mpsc::UnboundedSender<Op>,
    /// The member's state machine once it started (counters are read from it).
    machine: OnceLock<crate::QueueStateMachine>,
    /// The member's Raft handle and the cluster, once it started.
    member: OnceLock<(crate::QueueRaft, Option<Arc<dyn ClusterLink>>)>,
    local: Mutex<Local>,
    identity: Identity,
    /// This handle's publishes are numbered, so one retried after a leader change is
    /// applied once.
    publish_sequence: AtomicU64,
}

impl QuorumQueueHandle {
    fn send(&self, op: Op) {
        // The driver ends only when the queue is deleted or the runtime stops; what is sent
        // then has nowhere to go.
        let _ = self.ops.send(op);
    }

    fn delivery(&self, delivered: Delivered) -> Option<Delivery> {
        let queue: Arc<dyn QueueInstance> = self.me.upgrade()?;
        Some(Delivery {
            queue,
            id: delivered.id,
            message: delivered.message,
            redelivered: delivered.redelivered,
            delivery_count: delivered.delivery_count,
            needs_settlement: !delivered.settled,
        })
    }

    pub(crate) fn store(&self) -> Option<&Arc<MessageStore>> {
        self.store.as_ref()
    }

    /// The member started: counters, stats and replica information are read from it.
    pub(crate) fn set_member(
        &self,
        machine: crate::QueueStateMachine,
        raft: crate::QueueRaft,
        link: Option<Arc<dyn ClusterLink>>,
    ) {
        let _ = self.machine.set(machine);
        let _ = self.member.set((raft, link));
    }

    /// Hands a checked-out message to its consumer, or keeps it until the sink has room.
    fn deliver(&self, local: &mut Local, key: ConsumerKey, delivered: Delivered) {
        let settled = delivered.settled;
        let id = delivered.id;
        let Some(consumer) = local.consumers.get_mut(&key) else {
            if !local.pending.is_empty() {
                // An attach of ours whose reply has not come back yet.
                local.early.entry(key).or_default().push(delivered);
            } else {
                // A consumer of ours nobody waits for (an attach retried after its first
                // try did commit): removed, and each delivery to it back, uncounted (a
                // cancelled consumer keeps what it holds until that is settled).
                if local.strays.insert(key) {
                    tracing::debug!(queue = %self.name, ?key, "a stray consumer of this node: removed");
                    self.send(Op::Command(Command::Cancel { consumer: key }));
                }
                if !settled {
                    self.send(Op::Command(Command::Settle {
                        consumer: key,
                        ids: vec![id],
                        outcome: Outcome::Release,
                    }));
                }
            }
            return;
        };
        let Some(delivery) = self.delivery(delivered) else {
            return;
        };
        if !settled {
            local.holders.insert(id, key);
        }
        if consumer.waiting.is_empty() && consumer.sink.reserve() {
            consumer.sink.deliver(delivery);
        } else {
            consumer.waiting.push_back(delivery);
        }
        if consumer.auto_ack {
            consumer.since_top_up += 1;
            if consumer.since_top_up >= AUTO_ACK_TOP_UP {
                consumer.since_top_up = 0;
                self.send(Op::Command(Command::Credit {
                    consumer: key,
                    credit: MAX_PREFETCH,
                    drain: false,
                }));
            }
        }
    }

    /// An attach was committed: the consumer receives from now on (or is cancelled, when
    /// its cancel came first).
    pub(crate) fn attach_committed(&self, local_id: u64, key: ConsumerKey) {
        let mut local = self.local.lock();
        let consumer = local.pending.remove(&local_id);
        let cancelled = local.cancelled_early.remove(&local_id);
        let Some(consumer) = consumer.filter(|_| !cancelled) else {
            let early = local.early.remove(&key).unwrap_or_default();
            drop(local);
            self.send(Op::Command(Command::Cancel { consumer: key }));
            let ids: Vec<u64> = early.iter().filter(|d| !d.settled).map(|d| d.id).collect();
            if !ids.is_empty() {
                self.send(Op::Command(Command::Settle {
                    consumer: key,
                    ids,
                    outcome: Outcome::Release,
                }));
            }
            return;
        };
        local.keys.insert(local_id, Some(key));
        local.consumers.insert(key, consumer);
        for delivered in local.early.remove(&key).unwrap_or_default() {
            self.deliver(&mut local, key, delivered);
        }
    }

    /// An attach was never committed (no majority in time): the consumer is cancelled.
    pub(crate) fn attach_failed(&self, local_id: u64) {
        let consumer = {
            let mut local = self.local.lock();
            local.keys.remove(&local_id);
            local.cancelled_early.remove(&local_id);
            local.pending.remove(&local_id)
        };
        tracing::warn!(queue = %self.name, "a consumer's attach was not committed; it is cancelled");
        if let Some(consumer) = consumer {
            consumer.sink.cancelled();
        }
    }

    fn effect(&self, effect: Effect, leading: bool) {
        match effect {
            Effect::Deliver {
                consumer,
                owner,
                delivered,
            } => {
                // Every member applies the log; the one on the consumer's node delivers.
                if self.identity.is_mine(owner) {
                    let mut local = self.local.lock();
                    self.deliver(&mut local, consumer, delivered);
                }
            }
            Effect::DeadLetter { .. } if !leading => {}
            Effect::DeadLetter {
                id,
                message,
                reason,
                exchange,
                routing_key,
                at_least_once,
            } => {
                if let Some(vhost) = self.vhost.upgrade() {
                    vhost.dead_letter_from(
                        &self.name,
                        &exchange,
                        routing_key.as_deref(),
                        vec![(message, reason)],
                    );
                }
                if at_least_once {
                    self.send(Op::Command(Command::DeadLetterSettled { ids: vec![id] }));
                }
            }
            Effect::ConsumerTimedOut { consumer, .. } => {
                let local = self.local.lock();
                if let Some(consumer) = local.consumers.get(&consumer) {
                    consumer.sink.cancelled();
                }
            }
            Effect::ActiveChanged { .. } | Effect::CreditDrained { .. } => {}
        }
    }

    fn outcome(settlement: Settlement) -> Outcome {
        match settlement {
            Settlement::Ack => Outcome::Ack,
            Settlement::Requeue => Outcome::Requeue,
            Settlement::Release => Outcome::Release,
            Settlement::Reject => Outcome::Reject,
            Settlement::Modify {
                delivery_failed,
                undeliverable_here,
            } => Outcome::Modify {
                delivery_failed,
                undeliverable_here,
                annotations: Table::new(),
            },
        }
    }

    /// An `Enqueue` numbered in this handle's publisher stream.
    fn enqueue_command(&self, message: Arc<Message>) -> Command {
        Command::Enqueue {
            publish: Some(PublishId {
                publisher: self.identity.owner(0),
                sequence: self.publish_sequence.fetch_add(1, Ordering::Relaxed) + 1,
            }),
            message,
        }
    }

    fn stats(&self) -> Option<warren_core::quorum::QuorumStats> {
        self.machine.get().map(|m| m.with_queue(|q| q.stats()))
    }
}

impl QueueInstance for QuorumQueueHandle {
    fn name(&self) -> &str {
        &self.name
    }

    fn queue_type(&self) -> &'static dyn QueueType {
        self.queue_type
    }

    fn enqueue(&self, message: Arc<Message>, _store_id: u64) -> EnqueueOutcome {
        self.publish(message).outcome
    }

    fn publish(&self, message: Arc<Message>) -> Published {
        if self
            .reject_publish
            .load(std::sync::atomic::Ordering::Relaxed)
            && multi_threaded()
        {
            // Only the applied command knows whether reject-publish took it, and a refused
            // publish must be nacked, not confirmed: wait for the commit here (the cost is
            // this queue type's with this overflow mode only).
            let (answer, reply) = std::sync::mpsc::channel();
            self.send(Op::Publish {
                command: self.enqueue_command(message),
                hold: None,
                answer: Some(answer),
            });
            let reply =
                tokio::task::block_in_place(|| reply.recv_timeout(GET_BOUND).ok().flatten());
            let outcome = match reply {
                Some(Reply::Enqueued { .. } | Reply::Duplicate) => EnqueueOutcome::Enqueued,
                _ => EnqueueOutcome::Rejected,
            };
            return Published {
                outcome,
                durable_seq: None,
            };
        }
        if let Some(machine) = self.machine.get() {
            if machine.with_queue(|q| q.is_rejecting()) {
                // reject-publish is refusing (read from the applied state): nacked now.
                return Published {
                    outcome: EnqueueOutcome::Rejected,
                    durable_seq: None,
                };
            }
        }
        let hold = self.store.as_ref().map(|store| store.hold());
        let sent = self.ops.send(Op::Publish {
            command: self.enqueue_command(message),
            hold,
            answer: None,
        });
        if sent.is_err() {
            // The member is gone (it did not start, or the queue was deleted): refused, and
            // the hold released at once so no other confirm waits behind it.
            if let (Some(store), Some(seq)) = (&self.store, hold) {
                store.release(seq);
            }
            return Published {
                outcome: EnqueueOutcome::Rejected,
                durable_seq: None,
            };
        }
        Published {
            outcome: EnqueueOutcome::Enqueued,
            durable_seq: hold,
        }
    }

    fn consume(&self, spec: ConsumerSpec, sink: Arc<dyn DeliverySink>) -> CoreResult<u64> {
        let local_id = {
            let mut local = self.local.lock();
            if local.deleted {
                return Err(CoreError::not_found(format!(
                    "no {}",
                    warren_core::error::resource("queue", &self.name, "")
                )));
            }
            local.next_local += 1;
            let id = local.next_local;
            local.keys.insert(id, None);
            id
        };
        let timeout = spec
            .arguments
            .get("x-consumer-timeout")
            .and_then(|v| v.as_i64())
            .filter(|ms| *ms > 0)
            .map(|ms| ms as u64);
        let command = Command::Attach {
            owner: self.identity.owner(spec.connection_id),
            tag: spec.tag.to_string(),
            // The listener's window, so the replicated state checks out no more than the
            // consumer takes (a requeued message then goes to the next consumer with room,
            // and a restart returns only what was really in flight).
            mode: CreditMode::Prefetch(
                sink.prefetch()
                    .map_or(MAX_PREFETCH, |p| p.min(MAX_PREFETCH)),
            ),
            priority: spec.priority,
            auto_ack: !spec.needs_settlement,
            timeout,
        };
        let consumer = LocalConsumer {
            sink,
            auto_ack: !spec.needs_settlement,
            spec: spec.clone(),
            waiting: VecDeque::new(),
            since_top_up: 0,
        };
        self.local.lock().pending_attach(local_id, consumer);
        self.send(Op::Attach {
            local: local_id,
            command,
        });
        Ok(local_id)
    }

    fn local_consumers(&self) -> Vec<(ConsumerSpec, bool)> {
        // Attached ones and those whose attach is not committed yet, as RabbitMQ lists a
        // consumer once basic.consume-ok went out. Which one a single-active-consumer queue
        // serves is the state machine's; each is shown active.
        let local = self.local.lock();
        local
            .consumers
            .values()
            .chain(local.pending.values())
            .map(|consumer| (consumer.spec.clone(), true))
            .collect()
    }

    fn cancel(&self, consumer_id: u64) -> ConsumerRemoval {
        let mut local = self.local.lock();
        match local.keys.remove(&consumer_id) {
            None => ConsumerRemoval::NotAttached,
            Some(None) => {
                local.cancelled_early.insert(consumer_id);
                local.pending.remove(&consumer_id);
                ConsumerRemoval::Removed
            }
            Some(Some(key)) => {
                let waiting = local
                    .consumers
                    .remove(&key)
                    .map(|c| c.waiting)
                    .unwrap_or_default();
                drop(local);
                self.send(Op::Command(Command::Cancel { consumer: key }));
                // Checked out here but never sent: back without counting.
                let ids: Vec<u64> = waiting
                    .iter()
                    .filter(|d| d.needs_settlement)
                    .map(|d| d.id)
                    .collect();
                if !ids.is_empty() {
                    self.settle(&ids, Settlement::Release);
                }
                ConsumerRemoval::Removed
            }
        }
    }

    fn settle(&self, ids: &[u64], settlement: Settlement) {
        let mut by_consumer: Vec<(ConsumerKey, Vec<u64>)> = Vec::new();
        {
            let mut local = self.local.lock();
            for id in ids {
                if let Some(key) = local.holders.remove(id) {
                    match by_consumer.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, list)) => list.push(*id),
                        None => by_consumer.push((key, vec![*id])),
                    }
                } else {
                    tracing::debug!(queue = %self.name, id, "settle of a message no consumer here holds");
                }
            }
        }
        for (consumer, ids) in by_consumer {
            self.send(Op::Command(Command::Settle {
                consumer,
                ids,
                outcome: Self::outcome(settlement),
            }));
        }
    }

    fn dispatch(&self) {
        let mut local = self.local.lock();
        for consumer in local.consumers.values_mut() {
            while !consumer.waiting.is_empty() && consumer.sink.reserve() {
                if let Some(delivery) = consumer.waiting.pop_front() {
                    consumer.sink.deliver(delivery);
                }
            }
        }
    }

    fn get(&self, needs_settlement: bool) -> Option<(Delivery, u64)> {
        let multi_threaded = multi_threaded();
        let (reply, answer) = std::sync::mpsc::channel();
        self.send(Op::Dequeue {
            command: Command::Dequeue {
                // One get-consumer per queue handle: settled through `holders`.
                owner: self.identity.owner(0),
                auto_ack: !needs_settlement,
            },
            reply,
        });
        let wait = || answer.recv_timeout(GET_BOUND).ok().flatten();
        let reply = if multi_threaded {
            tokio::task::block_in_place(wait)
        } else {
            wait()
        };
        match reply? {
            Reply::Dequeued {
                consumer,
                delivered,
                remaining,
            } => {
                if let (Some(key), false) = (consumer, delivered.settled) {
                    self.local.lock().holders.insert(delivered.id, key);
                }
                Some((self.delivery(delivered)?, remaining))
            }
            _ => None,
        }
    }

    fn browse(&self, limit: usize) -> Vec<Arc<Message>> {
        self.machine
            .get()
            .map(|m| m.with_queue(|q| q.peek(limit)))
            .unwrap_or_default()
    }

    fn purge(&self) -> u64 {
        let ready = self.stats().map_or(0, |s| s.ready);
        self.send(Op::Command(Command::Purge));
        ready
    }

    fn info(&self) -> QueueStats {
        let Some(stats) = self.stats() else {
            return QueueStats::default();
        };
        QueueStats {
            ready: stats.ready + stats.delayed,
            unacknowledged: stats.unacknowledged,
            consumers: stats.consumers,
            published: stats.enqueued,
            delivered: stats.delivered,
            acknowledged: stats.acknowledged,
            dropped: stats.dropped,
            expired: stats.expired,
            rejected_publishes: stats.rejected_publishes,
            dead_lettered_delivery_limit: stats.delivery_limit_reached,
            ..QueueStats::default()
        }
    }

    fn arguments(&self) -> Table {
        self.arguments.clone()
    }

    fn replicas(&self) -> Option<ReplicaInfo> {
        let Some((raft, Some(link))) = self.member.get() else {
            // A node that runs alone leads its one-member groups.
            return Some(ReplicaInfo::this_node());
        };
        let metrics = raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership();
        let name_of = |id: &crate::NodeId| membership.get_node(id).map(|n| n.addr.clone());
        let replica = |name: String| match name == link.local() {
            true => Replica::ThisNode,
            false => Replica::Node(name),
        };
        let voters: Vec<String> = membership
            .voter_ids()
            .filter_map(|id| name_of(&id))
            .collect();
        Some(ReplicaInfo {
            leader: metrics
                .current_leader
                .as_ref()
                .and_then(name_of)
                .map(replica),
            online: voters
                .iter()
                .filter(|name| link.is_connected(name))
                .cloned()
                .map(replica)
                .collect(),
            members: voters.into_iter().map(replica).collect(),
        })
    }

    fn apply_policies(&self, policy: Option<&Table>, operator: Option<&Table>) {
        let Ok(declared) = QuorumConfig::from_arguments(&self.name, &self.arguments) else {
            return;
        };
        let settings = declared.with_policies(&self.arguments, policy, operator);
        let mut current = self.settings.lock();
        if *current != settings {
            self.reject_publish.store(
                settings.overflow == warren_core::queue::Overflow::RejectPublish,
                std::sync::atomic::Ordering::Relaxed,
            );
            *current = settings.clone();
            drop(current);
            // Lower limits apply at once; the name and single-active-consumer stay.
            self.send(Op::Command(Command::Configure(settings)));
        }
    }

    fn delete(&self) -> u64 {
        let ready = self.stats().map_or(0, |s| s.ready);
        let sinks: Vec<Arc<dyn DeliverySink>> = {
            let mut local = self.local.lock();
            local.deleted = true;
            local.consumers.drain().map(|(_, c)| c.sink).collect()
        };
        for sink in sinks {
            sink.cancelled();
        }
        let (done, finished) = std::sync::mpsc::channel();
        self.send(Op::Delete { done });
        // Wait for the member to be gone and its directory removed, so a queue declared
        // again under the name (the same group id) does not open the old state.
        let wait = || {
            let _ = finished.recv_timeout(GET_BOUND);
        };
        if multi_threaded() {
            tokio::task::block_in_place(wait);
        }
        ready
    }
}

impl Local {
    /// Keeps a consumer until its attach is committed.
    fn pending_attach(&mut self, local_id: u64, consumer: LocalConsumer) {
        self.pending.insert(local_id, consumer);
    }
}

/// Whether the caller runs on a multi-threaded tokio runtime (where it may block in place).
fn multi_threaded() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// The effects pump's target: the handle, while it lives.
pub(crate) struct Effects(pub(crate) Weak<QuorumQueueHandle>);

impl EffectSink for Effects {
    fn apply(&self, _index: u64, effect: Effect, leading: bool) {
        if let Some(queue) = self.0.upgrade() {
            queue.effect(effect, leading);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::group_id;

    #[test]
    fn node_tags_tell_neighbouring_addresses_apart() {
        let tags: std::collections::BTreeSet<u16> = (1..=50)
            .map(|i| super::Identity::tag_of_node(&format!("warren@127.0.0.{i}")))
            .collect();
        assert_eq!(tags.len(), 50);
    }

    #[test]
    fn group_ids_are_stable_and_tell_vhosts_apart() {
        assert_eq!(group_id("/", "q"), group_id("/", "q"));
        assert_ne!(group_id("/", "q"), group_id("/q", ""));
        assert_ne!(group_id("a", "q"), group_id("b", "q"));
    }
}
