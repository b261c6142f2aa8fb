//! Classic queues: ready messages in order, unsettled deliveries, consumers and dispatch.
//!
//! Each queue guards its own state with its own lock, so queues scale with cores and the
//! publish path never waits on another queue. The publisher's task enqueues and, while a
//! consumer has credit, hands the message straight to the consumer's sink under the same lock:
//! no extra task hop on the hot path.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Mutex, MutexGuard};

use crate::consumer::{ConsumerSpec, Delivery, DeliverySink};
use crate::error::{resource, CoreError, CoreResult};
use crate::flow::{QueueFlow, QueueMemoryLimits};
use crate::idmap::IdMap;
use crate::message::Message;
use crate::queue_type::QueueInstance;
use crate::store::{MessageStore, QueueName, RecoveredMessage};
use crate::value::Table;
use crate::vhost::VHost;

mod dispatch;
mod expiry;
mod limits;
mod paging;
mod ready;

pub use limits::{DeathReason, Overflow, QueueLimits};
use ready::{paged_placeholder, ReadyMessage, ReadyStore, SweepCursor};

/// Least time between two full expiry passes over one queue; with the server's 250 ms tick,
/// an expired message is removed within a second.
const SWEEP_INTERVAL_MS: u64 = 700;
/// Ready entries an expiry pass looks at per lock hold (about a millisecond's work).
const SWEEP_STEP: usize = 16_384;

/// Milliseconds on the process's monotonic clock (tokio's), for message expiry and
/// delivery timestamps; defined in [`crate::clock`], re-exported here for the listeners.
pub use crate::clock::now_ms;

/// What happened to a message offered to a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueOutcome {
    /// Accepted (or dropped because the queue was deleted meanwhile).
    Enqueued,
    /// Refused by `x-overflow = reject-publish(-dlx)`: the publisher gets a nack.
    Rejected,
}

/// How a listener settles deliveries it received from a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Processed: forget the message (basic.ack, accepted, MQTT PUBACK, STOMP ACK).
    Ack,
    /// Put back in the queue at its original position, marked redelivered, counted as a
    /// failed delivery (`x-delivery-count`; see `x-delivery-limit`): basic.nack/reject with
    /// requeue, AMQP 1.0 `modified` with delivery-failed, a consumer going away with it
    /// unsettled.
    Requeue,
    /// Put back like [`Settlement::Requeue`] without counting a failed delivery: AMQP 1.0
    /// `released`, or a delivery that never reached the client.
    Release,
    /// Refused without requeue: dead-lettered where configured, otherwise dropped.
    Reject,
    /// AMQP 1.0 `modified`: the queue's type decides what it means. A classic queue
    /// rejects a message `undeliverable_here`, and otherwise requeues it, counted as a failed
    /// delivery when `delivery_failed` (RabbitMQ 4.x), released when not.
    Modify {
        /// The delivery attempt failed (counts toward `x-delivery-limit`).
        delivery_failed: bool,
        /// The message must not come back to this consumer's queue.
        undeliverable_here: bool,
    },
}

impl Settlement {
    /// What a classic queue does for this settlement: `Modify` resolved to one of the
    /// others.
    pub fn for_classic(self) -> Settlement {
        match self {
            Settlement::Modify {
                undeliverable_here: true,
                ..
            } => Settlement::Reject,
            Settlement::Modify {
                delivery_failed: true,
                ..
            } => Settlement::Requeue,
            Settlement::Modify { .. } => Settlement::Release,
            other => other,
        }
    }

    /// The one rule for a delivery still outstanding when its channel, link, session,
    /// subscription or connection ends, whatever the protocol: one that never reached the
    /// client (still in an outbox, or arriving after the close) is released, so a client's
    /// disconnect never counts toward `x-delivery-limit`; one the client had but did not
    /// settle is requeued and counted, as RabbitMQ returns it.
    pub fn outstanding(sent: bool) -> Settlement {
        if sent {
            Settlement::Requeue
        } else {
            Settlement::Release
        }
    }
}

/// Declared properties of a queue, fixed at declaration.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// The queue's name.
    pub name: String,
    /// The vhost it lives in.
    pub vhost: String,
    /// Survives a broker restart (recorded; disk storage comes with persistence).
    pub durable: bool,
    /// The connection that owns an exclusive queue.
    pub exclusive_owner: Option<u64>,
    /// Deleted when its last consumer goes away (after it had one).
    pub auto_delete: bool,
    /// `x-` arguments as declared.
    pub arguments: Table,
}

/// Counters an operator can read for a queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Messages waiting for a consumer.
    pub ready: u64,
    /// Messages delivered and not yet settled.
    pub unacknowledged: u64,
    /// Attached consumers.
    pub consumers: u64,
    /// Messages ever enqueued.
    pub published: u64,
    /// Messages ever delivered (consume and get), redeliveries included.
    pub delivered: u64,
    /// Messages ever acknowledged.
    pub acknowledged: u64,
    /// Messages ever rejected without requeue and dropped.
    pub dropped: u64,
    /// Messages ever removed because their TTL passed.
    pub expired: u64,
    /// Messages ever dead-lettered, by reason: rejected, expired, maxlen.
    pub dead_lettered_rejected: u64,
    /// See `dead_lettered_rejected`.
    pub dead_lettered_expired: u64,
    /// See `dead_lettered_rejected`.
    pub dead_lettered_maxlen: u64,
    /// Messages dropped by a length limit (drop-head without a dead-letter exchange).
    pub dropped_maxlen: u64,
    /// Publishes refused by `reject-publish`.
    pub rejected_publishes: u64,
    /// Ready messages whose body is on disk only (paged out; see docs/storage.md).
    pub paged_out: u64,
    /// Messages dead-lettered because they were returned more often than `x-delivery-limit`.
    pub dead_lettered_delivery_limit: u64,
    /// Messages dropped for the delivery limit (no dead-letter exchange).
    pub dropped_delivery_limit: u64,
}

struct UnsettledMessage {
    message: Arc<Message>,
    expires_at: Option<u64>,
    /// See [`ReadyMessage`]'s `store_id`.
    store_id: u64,
    /// See [`ReadyMessage`]'s `delivery_count`.
    delivery_count: u16,
}

/// A durable queue's link to the message store.
struct StoreLink {
    store: Arc<MessageStore>,
    name: QueueName,
}

struct AttachedConsumer {
    id: u64,
    spec: ConsumerSpec,
    sink: Arc<dyn DeliverySink>,
}

#[derive(Default)]
struct QueueState {
    /// Ready messages by priority, each level in id order.
    ready: ReadyStore,
    unsettled: IdMap<u64, UnsettledMessage>,
    /// Sorted by priority, highest first (stable, so equal priorities keep attach order).
    consumers: Vec<AttachedConsumer>,
    next_round_robin: usize,
    next_message_id: u64,
    had_consumers: bool,
    deleted: bool,
    /// Counters and deferred work, allocated on the first message: an idle queue (one per
    /// idle MQTT subscription) carries none of it.
    activity: Option<Box<QueueActivity>>,
    /// The effective limits: arguments combined with policies. Shared (see
    /// [`shared_limits`]): most queues have none, and an idle queue should not carry them.
    limits: Arc<QueueLimits>,
    /// Every consumer refused the last delivery for lack of credit. Until a listener kicks
    /// the queue (`dispatch`), enqueues skip dispatch: asking sinks that just said no would
    /// take their connection's lock for every publish while a backlog builds.
    consumers_starved: bool,
    /// Body bytes of the ready messages (for x-max-length-bytes).
    ready_bytes: u64,
    /// Body bytes of the ready messages held in memory (not paged out), for flow control.
    resident_bytes: u64,
    /// When the queue was last used (consumer attached or gone, basic.get, redeclared), for
    /// `x-expires`; `now_ms` clock.
    last_used: u64,
    /// Ready messages that carry an expiry, so queues without TTLs skip the sweep.
    expiring: usize,
    /// No ready message expires before this (`now_ms` clock), so sweeps before it are free.
    next_expiry: u64,
    /// When the last full expiry pass ran.
    last_sweep: u64,
}

/// What a queue accumulates once messages pass through it: its counters and the work
/// collected under the lock to do once it is released.
#[derive(Default)]
struct QueueActivity {
    stats: QueueStats,
    /// Messages to dead-letter once the lock is released (routing takes other queues' locks).
    dead_letters: Vec<(Arc<Message>, DeathReason)>,
    /// Store ids that left the queue for good, recorded in the store once the lock is
    /// released.
    store_removed: Vec<u64>,
    /// Store ids delivered unsettled, recorded likewise.
    store_delivered: Vec<u64>,
    /// Deliveries to copy to the firehose once the lock is released (message, redelivered).
    traced: Vec<(Arc<Message>, bool)>,
    /// Expired messages the last sweep removed, freed a few per enqueue by the publishing
    /// thread (see [`Queue::expire`]).
    expired_garbage: Vec<Arc<Message>>,
}

impl QueueState {
    /// The counters and deferred-work lists, allocated on first use.
    fn active(&mut self) -> &mut QueueActivity {
        self.activity.get_or_insert_with(Box::default)
    }

    /// The counters so far (all zero for a queue no message has passed through).
    fn counters(&self) -> QueueStats {
        self.activity
            .as_deref()
            .map(|activity| activity.stats)
            .unwrap_or_default()
    }

    /// Ready messages whose bodies are on disk only (cheaper than copying every counter).
    fn paged_out(&self) -> u64 {
        self.activity
            .as_deref()
            .map_or(0, |activity| activity.stats.paged_out)
    }

    fn push_ready(&mut self, ready: ReadyMessage) {
        self.ready_bytes += ready.body_len();
        self.resident_bytes += ready.resident_len();
        self.active().stats.paged_out += u64::from(ready.paged);
        self.expiring += usize::from(ready.expires_at.is_some());
        if let Some(at) = ready.expires_at {
            self.next_expiry = self.next_expiry.min(at);
        }
        self.ready.push_back(ready);
    }

    fn pop_ready(&mut self) -> Option<ReadyMessage> {
        let ready = self.ready.pop_front()?;
        self.forget_ready(&ready);
        Some(ready)
    }

    /// Notes a delivery of a stored message: a delivered mark when it awaits settlement, a
    /// removal when it was settled on the spot (auto-ack).
    fn note_delivered(&mut self, store_id: u64, needs_settlement: bool) {
        if store_id == 0 {
            return;
        }
        if needs_settlement {
            self.active().store_delivered.push(store_id);
        } else {
            self.active().store_removed.push(store_id);
        }
    }

    fn forget_ready(&mut self, ready: &ReadyMessage) {
        self.ready_bytes -= ready.body_len();
        self.resident_bytes -= ready.resident_len();
        self.active().stats.paged_out -= u64::from(ready.paged);
        self.expiring -= usize::from(ready.expires_at.is_some());
    }
}

/// A classic queue.
pub struct Queue {
    /// This queue, for the [`crate::queue_type::QueueInstance`] methods that hand out
    /// deliveries naming it.
    me: Weak<Queue>,
    /// What the queue reads as now (expiry, `x-expires`): the broker's clock.
    clock: crate::clock::Clock,
    config: QueueConfig,
    /// The limits the queue's own arguments ask for; policies combine with these into the
    /// effective limits kept in the state. Shared like those.
    argument_limits: Arc<QueueLimits>,
    /// The vhost dead letters are routed in.
    vhost: Weak<VHost>,
    /// The vhost's firehose switch: deliveries are traced while it is on.
    trace: crate::vhost::trace::TraceFlag,
    state: Mutex<QueueState>,
    /// Set for a durable queue when the broker has a message store.
    store: OnceLock<Box<StoreLink>>,
    /// How much the queue keeps in memory (the broker's limits).
    memory_limits: Arc<QueueMemoryLimits>,
    /// Raised while the queue holds more in memory than `memory_limits` allow: publishers
    /// to it are not read until it drains (see [`crate::flow`]).
    /// Allocated the first time the queue goes over its limits (or someone asks): most
    /// queues never do.
    flow: OnceLock<Arc<QueueFlow>>,
    /// Set on the stand-in a queue of another type (quorum) has in bindings: routing hands
    /// what reaches it to that queue (see [`Queue::forward`]).
    forward: OnceLock<Arc<dyn crate::queue_type::QueueInstance>>,
    /// Whether the server's sweep has anything to look at here: a message with a TTL was
    /// enqueued, expired ones wait to be freed, or `x-expires` is set. Set and cleared under
    /// the state lock; read without it, so a sweep over thousands of queues without TTLs
    /// skips them instead of locking each.
    sweep_wanted: AtomicBool,
}

static NEXT_CONSUMER_ID: AtomicU64 = AtomicU64::new(1);

/// `limits` behind an `Arc`; the defaults (no limits at all, most queues) are one allocation
/// shared by every queue.
fn shared_limits(limits: QueueLimits) -> Arc<QueueLimits> {
    static NONE: OnceLock<Arc<QueueLimits>> = OnceLock::new();
    if limits == QueueLimits::default() {
        Arc::clone(NONE.get_or_init(|| Arc::new(QueueLimits::default())))
    } else {
        Arc::new(limits)
    }
}

/// What removing a consumer left behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsumerRemoval {
    /// The consumer was not attached (already cancelled).
    NotAttached,
    /// Removed; the queue goes on.
    Removed,
    /// Removed, and it was the last consumer of an auto-delete queue: delete the queue.
    LastOfAutoDelete,
}

impl Queue {
    /// A new, empty queue.
    /// Arguments are taken as valid (see [`QueueLimits::from_arguments`]); invalid ones
    /// are ignored here.
    pub fn new(config: QueueConfig) -> Arc<Queue> {
        Self::in_vhost(config, Weak::new())
    }

    /// The queue of another type this stand-in forwards to, if it is one: exchanges bind
    /// classic queues by `Arc<Queue>` (a binding target stays two words), so a quorum
    /// queue is bound through a stand-in that holds no messages.
    pub fn forward(&self) -> Option<&Arc<dyn crate::queue_type::QueueInstance>> {
        self.forward.get()
    }

    /// A stand-in for `target` in bindings (see [`Queue::forward`]).
    pub(crate) fn stand_in(
        target: Arc<dyn crate::queue_type::QueueInstance>,
        vhost: &str,
    ) -> Arc<Queue> {
        let queue = Queue::new(QueueConfig {
            name: target.name().to_string(),
            vhost: vhost.to_string(),
            durable: target.durable(),
            exclusive_owner: None,
            auto_delete: false,
            arguments: Table::new(),
        });
        let _ = queue.forward.set(target);
        queue
    }

    /// A new, empty queue that dead-letters through `vhost`.
    pub fn in_vhost(config: QueueConfig, vhost: Weak<VHost>) -> Arc<Queue> {
        let limits =
            shared_limits(QueueLimits::from_arguments(&config.arguments).unwrap_or_default());
        let levels = usize::from(limits.max_priority.unwrap_or(0)) + 1;
        let trace = vhost
            .upgrade()
            .map(|vhost| vhost.trace_flag())
            .unwrap_or_default();
        let memory_limits = vhost
            .upgrade()
            .map(|vhost| vhost.queue_memory_limits())
            .unwrap_or_default();
        let clock = vhost
            .upgrade()
            .map(|vhost| vhost.durability().clock())
            .unwrap_or_default();
        let now = clock.now_ms();
        let sweep_wanted = AtomicBool::new(limits.expires.is_some());
        Arc::new_cyclic(|me| Queue {
            me: me.clone(),
            clock,
            config,
            argument_limits: Arc::clone(&limits),
            vhost,
            trace,
            state: Mutex::new(QueueState {
                limits,
                ready: ReadyStore::new(levels),
                last_used: now,
                ..QueueState::default()
            }),
            store: OnceLock::new(),
            memory_limits,
            flow: OnceLock::new(),
            forward: OnceLock::new(),
            sweep_wanted,
        })
    }

    /// Whether the server's expiry sweep should visit this queue (see `sweep_wanted`).
    pub fn wants_sweep(&self) -> bool {
        self.sweep_wanted.load(Ordering::Relaxed)
    }

    /// Marks the queue for the sweep; the caller holds the state lock.
    fn want_sweep(&self) {
        if !self.sweep_wanted.load(Ordering::Relaxed) {
            self.sweep_wanted.store(true, Ordering::Relaxed);
        }
    }

    /// The queue's effective limits and dead-letter settings (arguments and policies).
    pub fn limits(&self) -> QueueLimits {
        QueueLimits::clone(&self.state.lock().limits)
    }

    /// The limits from the queue's own arguments.
    pub fn argument_limits(&self) -> &QueueLimits {
        &self.argument_limits
    }

    /// Replaces the effective limits (a policy changed) and applies them at once: a lower
    /// length limit drops or dead-letters the oldest messages now.
    pub fn set_limits(self: &Arc<Self>, limits: QueueLimits) {
        let mut state = self.state.lock();
        if limits.expires.is_some() {
            self.want_sweep();
        }
        state.limits = shared_limits(limits);
        loop {
            let over = state
                .limits
                .max_length
                .is_some_and(|max| state.ready.len() as u64 > max)
                || state
                    .limits
                    .max_length_bytes
                    .is_some_and(|max| state.ready_bytes > max);
            if !over {
                break;
            }
            let Some(head) = state.pop_ready() else { break };
            self.discard_ready(&mut state, head, DeathReason::MaxLen);
        }
        self.finish(state);
    }

    /// Releases the lock, then routes the dead letters it collected.
    fn finish(&self, mut state: MutexGuard<'_, QueueState>) {
        self.update_flow(&state);
        // An idle queue has no activity record and nothing deferred.
        let Some(activity) = state.activity.as_deref_mut() else {
            return;
        };
        let dead = std::mem::take(&mut activity.dead_letters);
        let stored = !activity.store_removed.is_empty() || !activity.store_delivered.is_empty();
        let removed = std::mem::take(&mut activity.store_removed);
        let delivered = std::mem::take(&mut activity.store_delivered);
        let traced = if activity.traced.is_empty() {
            Vec::new()
        } else {
            std::mem::take(&mut activity.traced)
        };
        drop(state);
        if stored {
            self.flush_store(removed, delivered);
        }
        if dead.is_empty() && traced.is_empty() {
            return;
        }
        if let Some(vhost) = self.vhost.upgrade() {
            if !dead.is_empty() {
                vhost.dead_letter(self, dead);
            }
            if !traced.is_empty() {
                vhost.trace_deliveries(&self.config.name, traced);
            }
        }
    }

    /// Lowers the queue's flow signal once it drained to half of its limits (or was
    /// deleted). The signal is raised only by an enqueue that left the queue over its limits
    /// with a message that cannot be paged out: requeued deliveries going over the limits
    /// hold back no publisher.
    fn update_flow(&self, state: &QueueState) {
        let Some(flow) = self.flow.get().filter(|flow| flow.is_congested()) else {
            return;
        };
        let resident = state.ready.len() - state.paged_out() as usize;
        if state.deleted
            || self
                .memory_limits
                .is_drained(resident, state.resident_bytes)
        {
            flow.clear();
        }
    }

    /// The queue's flow signal (see [`crate::flow`]).
    pub fn flow(&self) -> &Arc<QueueFlow> {
        self.flow.get_or_init(Arc::default)
    }

    /// Whether the queue's flow signal is raised (without allocating it).
    fn is_congested(&self) -> bool {
        self.flow.get().is_some_and(|flow| flow.is_congested())
    }

    /// Body bytes of the ready messages the queue holds in memory (paged-out ones excluded).
    pub fn in_memory_bytes(&self) -> u64 {
        self.state.lock().resident_bytes
    }

    /// Removes a message for `reason`: dead-letters it where the queue has a dead-letter
    /// exchange, otherwise counts it as dropped.
    fn discard(
        &self,
        state: &mut QueueState,
        message: Arc<Message>,
        store_id: u64,
        reason: DeathReason,
    ) {
        if store_id != 0 {
            state.active().store_removed.push(store_id);
        }
        match reason {
            DeathReason::Expired => state.active().stats.expired += 1,
            DeathReason::Rejected => state.active().stats.dropped += 1,
            DeathReason::MaxLen => state.active().stats.dropped_maxlen += 1,
            DeathReason::DeliveryLimit => state.active().stats.dropped_delivery_limit += 1,
        }
        if state.limits.dead_letter_exchange.is_some() {
            match reason {
                DeathReason::Rejected => state.active().stats.dead_lettered_rejected += 1,
                DeathReason::Expired => state.active().stats.dead_lettered_expired += 1,
                DeathReason::MaxLen => state.active().stats.dead_lettered_maxlen += 1,
                DeathReason::DeliveryLimit => {
                    state.active().stats.dropped_delivery_limit -= 1;
                    state.active().stats.dead_lettered_delivery_limit += 1;
                }
            }
            state.active().dead_letters.push((message, reason));
        }
    }

    /// The queue's declared properties.
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// `queue 'name' in vhost 'v'`, for error texts.
    pub fn describe(&self) -> String {
        resource("queue", &self.config.name, &self.config.vhost)
    }

    /// Whether `connection_id` may use this queue (it is not another connection's exclusive
    /// queue). The error is RabbitMQ's 405 text.
    pub fn check_exclusive_access(&self, connection_id: u64) -> CoreResult<()> {
        match self.config.exclusive_owner {
            Some(owner) if owner != connection_id => Err(CoreError::resource_locked(format!(
                "cannot obtain exclusive access to locked {}. It could be originally declared on \
                 another connection or the exclusive property value does not match that of the \
                 original declaration.",
                self.describe()
            ))),
            _ => Ok(()),
        }
    }

    /// Number of ready messages.
    pub fn message_count(&self) -> u64 {
        self.state.lock().ready.len() as u64
    }

    /// Number of attached consumers.
    pub fn consumer_count(&self) -> u64 {
        self.state.lock().consumers.len() as u64
    }

    /// The attached consumers' specs, in delivery-priority order, with whether each is the
    /// active one (always true unless the queue has a single active consumer).
    pub fn consumers(&self) -> Vec<(ConsumerSpec, bool)> {
        let state = self.state.lock();
        let single = state.limits.single_active_consumer;
        state
            .consumers
            .iter()
            .enumerate()
            .map(|(index, c)| (c.spec.clone(), !single || index == 0))
            .collect()
    }

    /// A snapshot of the queue's counters.
    pub fn stats(&self) -> QueueStats {
        let state = self.state.lock();
        QueueStats {
            ready: state.ready.len() as u64,
            unacknowledged: state.unsettled.len() as u64,
            consumers: state.consumers.len() as u64,
            ..state.counters()
        }
    }

    /// Appends a message and hands ready messages to consumers with credit, applying the
    /// queue's TTL and length limits.
    pub fn enqueue(self: &Arc<Self>, message: Arc<Message>) -> EnqueueOutcome {
        self.enqueue_stored(message, 0)
    }

    /// [`Queue::enqueue`] for a message the store holds for this queue under `store_id`
    /// (0: not stored). Whatever does not stay in the queue is recorded as removed.
    pub fn enqueue_stored(
        self: &Arc<Self>,
        message: Arc<Message>,
        store_id: u64,
    ) -> EnqueueOutcome {
        let mut state = self.state.lock();
        if state.deleted {
            if store_id != 0 {
                state.active().store_removed.push(store_id);
                self.finish(state);
            }
            return EnqueueOutcome::Enqueued;
        }
        let ttl = match (state.limits.message_ttl, message.properties.expiration_ms()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        // The clock is read only when something can expire.
        let needs_clock = ttl.is_some() || state.expiring > 0;
        let now = if needs_clock { self.clock.now_ms() } else { 0 };
        let size = message.body.len() as u64;
        let (max_length, max_length_bytes, overflow) = (
            state.limits.max_length,
            state.limits.max_length_bytes,
            state.limits.overflow,
        );
        if max_length.is_some() || max_length_bytes.is_some() {
            self.expire_head(&mut state, now);
            let over = |state: &QueueState| {
                max_length.is_some_and(|max| state.ready.len() as u64 + 1 > max)
                    || max_length_bytes.is_some_and(|max| state.ready_bytes + size > max)
            };
            match overflow {
                Overflow::DropHead => {
                    while over(&state) {
                        let Some(head) = state.pop_ready() else { break };
                        self.discard_ready(&mut state, head, DeathReason::MaxLen);
                    }
                    // A message larger than the byte limit by itself is dropped too.
                    if over(&state) {
                        state.active().stats.published += 1;
                        self.discard(&mut state, message, store_id, DeathReason::MaxLen);
                        self.finish(state);
                        return EnqueueOutcome::Enqueued;
                    }
                }
                Overflow::RejectPublish | Overflow::RejectPublishDlx if over(&state) => {
                    state.active().stats.rejected_publishes += 1;
                    if overflow == Overflow::RejectPublishDlx {
                        self.discard(&mut state, message, store_id, DeathReason::MaxLen);
                    } else if store_id != 0 {
                        state.active().store_removed.push(store_id);
                    }
                    self.finish(state);
                    return EnqueueOutcome::Rejected;
                }
                _ => {}
            }
        }
        let id = state.next_message_id;
        state.next_message_id += 1;
        state.active().stats.published += 1;
        let ready = ReadyMessage {
            id,
            message,
            redelivered: false,
            expires_at: ttl.map(|ttl| now.saturating_add(ttl)),
            store_id,
            paged: false,
            length: ReadyMessage::length_field(size as usize),
            delivery_count: 0,
        };
        if ttl.is_some() {
            self.want_sweep();
        }
        let ready = self.page_out_if_over(&state, ready);
        // Only a message that has to stay in memory can make the queue congested: persistent
        // messages of a durable queue beyond the limits are paged out instead.
        let stays_in_memory = !ready.paged;
        state.push_ready(ready);
        // One expired message freed per message allocated, on this thread (see `expire`):
        // the allocator's per-thread cache hands the freed blocks straight to the next
        // message. Where messages expire as fast as they arrive this drains a pass's garbage
        // before the next pass, which frees whatever is left.
        let freed = state.activity.as_deref_mut().and_then(|activity| {
            let garbage = &mut activity.expired_garbage;
            let one = garbage.pop()?;
            if garbage.is_empty() {
                // The list of a large sweep is not kept once drained.
                *garbage = Vec::new();
            }
            Some(one)
        });
        self.dispatch_locked(&mut state);
        if stays_in_memory && !self.is_congested() {
            let resident = state.ready.len() - state.paged_out() as usize;
            if self.memory_limits.is_over(resident, state.resident_bytes) {
                self.flow().raise();
            }
        }
        self.finish(state);
        drop(freed);
        if self.is_congested() {
            crate::flow::note_congested(self.flow());
        }
        EnqueueOutcome::Enqueued
    }

    /// Drops every ready message, returning how many there were. Unsettled deliveries are
    /// not touched, as in RabbitMQ.
    pub fn purge(&self) -> u64 {
        let mut state = self.state.lock();
        let count = state.ready.len() as u64;
        let removed: Vec<u64> = state.ready.store_ids().collect();
        if !removed.is_empty() {
            state.active().store_removed.extend(removed);
        }
        state.ready.clear();
        state.ready_bytes = 0;
        state.resident_bytes = 0;
        if let Some(activity) = state.activity.as_deref_mut() {
            activity.stats.paged_out = 0;
        }
        state.expiring = 0;
        self.finish(state);
        count
    }

    /// Marks the queue deleted, drops its messages and tells every consumer it was cancelled.
    /// Returns the number of ready messages it held.
    /// This queue as an `Arc` (it always lives in one).
    pub(crate) fn arc(&self) -> Option<Arc<Queue>> {
        self.me.upgrade()
    }

    pub(crate) fn mark_deleted(&self) -> u64 {
        let (count, consumers) = {
            let mut state = self.state.lock();
            state.deleted = true;
            let count = state.ready.len() as u64;
            let mut removed: Vec<u64> = state.ready.store_ids().collect();
            removed.extend(
                state
                    .unsettled
                    .values()
                    .map(|u| u.store_id)
                    .filter(|&id| id != 0),
            );
            if !removed.is_empty() {
                self.flush_store(removed, Vec::new());
            }
            state.ready.clear();
            state.ready_bytes = 0;
            state.resident_bytes = 0;
            if let Some(activity) = state.activity.as_deref_mut() {
                activity.stats.paged_out = 0;
            }
            state.expiring = 0;
            state.unsettled.clear();
            (count, std::mem::take(&mut state.consumers))
        };
        // Publishers waiting for this queue to drain go on.
        if let Some(flow) = self.flow.get() {
            flow.clear();
        }
        // Outside the queue lock: a sink may take its own locks to send a cancel.
        for consumer in consumers {
            consumer.sink.cancelled();
        }
        count
    }

    /// Whether the queue was deleted.
    pub fn is_deleted(&self) -> bool {
        self.state.lock().deleted
    }
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.config.name)
            .finish()
    }
}

#[cfg(test)]
mod tests;
