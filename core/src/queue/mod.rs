//! Classic queues: ready messages in order, unsettled deliveries, consumers and dispatch.
//!
//! Each queue guards its own state with its own lock, so queues scale with cores and the
//! publish path never waits on another queue. The publisher's task enqueues and, while a
//! consumer has credit, hands the message straight to the consumer's sink under the same lock:
//! no extra task hop on the hot path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

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

mod limits;
mod ready;

pub use limits::{DeathReason, Overflow, QueueLimits};
use ready::{paged_placeholder, ReadyMessage, ReadyStore, SweepCursor};

/// Least time between two full expiry passes over one queue; with the server's 250 ms tick,
/// an expired message is removed within a second.
const SWEEP_INTERVAL_MS: u64 = 700;
/// Ready entries an expiry pass looks at per lock hold (about a millisecond's work).
const SWEEP_STEP: usize = 16_384;

/// Milliseconds on a monotonic clock, for message expiry.
pub fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

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
}

impl Settlement {
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
        })
    }

    /// Keeps this queue's persistent messages in `store` from now on.
    pub(crate) fn link_store(&self, store: Arc<MessageStore>) {
        let name = QueueName {
            vhost: self.config.vhost.clone(),
            name: self.config.name.clone(),
        };
        let _ = self.store.set(Box::new(StoreLink { store, name }));
    }

    /// The store and this queue's name in it, for a durable queue of a broker with a store.
    pub fn store_name(&self) -> Option<(&Arc<MessageStore>, &QueueName)> {
        self.store.get().map(|link| (&link.store, &link.name))
    }

    /// Puts messages recovered from the store back, in order, before any client can reach
    /// the queue.
    pub fn restore(self: &Arc<Self>, messages: Vec<RecoveredMessage>) {
        let mut state = self.state.lock();
        let now = self.clock.now_ms();
        for recovered in messages {
            let ttl = match (state.limits.message_ttl, recovered.expiration_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let id = state.next_message_id;
            state.next_message_id += 1;
            let (message, paged) = match recovered.message {
                Some(message) => (message, false),
                None => (paged_placeholder(recovered.priority), true),
            };
            let length = if paged {
                recovered.body_len
            } else {
                ReadyMessage::length_field(message.body.len())
            };
            let ready = ReadyMessage {
                id,
                message,
                redelivered: recovered.redelivered,
                expires_at: ttl.map(|ttl| now.saturating_add(ttl)),
                store_id: recovered.store_id,
                length,
                paged,
                // The store does not keep the count: it starts again after a restart.
                delivery_count: 0,
            };
            let ready = self.page_out_if_over(&state, ready);
            state.push_ready(ready);
        }
        self.finish(state);
    }

    /// Beyond the store's per-queue limit of ready messages in memory, a stored message keeps
    /// only its index entry; the body is read back from disk when it is delivered.
    fn page_out_if_over(&self, state: &QueueState, ready: ReadyMessage) -> ReadyMessage {
        let Some(link) = self.store.get() else {
            return ready;
        };
        let resident = state.ready.len() - state.paged_out() as usize;
        let over_bytes =
            state.resident_bytes + ready.message.body.len() as u64 > self.memory_limits.bytes();
        if ready.store_id == 0
            || ready.paged
            || (resident < link.store.queue_max_in_memory() && !over_bytes)
            || ready.message.body.len() > u32::MAX as usize
        {
            return ready;
        }
        link.store
            .hold_until_written(ready.store_id, &ready.message);
        ReadyMessage {
            paged: true,
            length: ready.message.body.len() as u32,
            message: paged_placeholder(ready.message.properties.priority),
            ..ready
        }
    }

    /// The message of a ready message, read back from the store if it was paged out. `None`
    /// (logged) if the store cannot give it back.
    /// Up to `limit` ready messages from the head, in delivery order, without taking them.
    /// A paged-out body is read back from the store (outside the queue's lock).
    pub fn browse(&self, limit: usize) -> Vec<Arc<Message>> {
        let entries: Vec<ReadyMessage> = {
            let state = self.state.lock();
            state.ready.iter().take(limit).cloned().collect()
        };
        entries
            .iter()
            .filter_map(|ready| self.page_in(ready))
            .collect()
    }

    fn page_in(&self, ready: &ReadyMessage) -> Option<Arc<Message>> {
        if !ready.paged {
            return Some(Arc::clone(&ready.message));
        }
        let link = self.store.get()?;
        match link.store.read(ready.store_id) {
            Ok(message) => Some(message),
            Err(error) => {
                tracing::error!(
                    queue = %self.config.name,
                    vhost = %self.config.vhost,
                    %error,
                    "a paged-out message cannot be read back from the message store; it is dropped"
                );
                None
            }
        }
    }

    /// Discards a ready message: the body is read back only when it is dead-lettered.
    fn discard_ready(&self, state: &mut QueueState, ready: ReadyMessage, reason: DeathReason) {
        let message = if ready.paged && state.limits.dead_letter_exchange.is_some() {
            self.page_in(&ready)
                .unwrap_or_else(|| Arc::clone(&ready.message))
        } else {
            Arc::clone(&ready.message)
        };
        self.discard(state, message, ready.store_id, reason);
    }

    /// Records in the store what left the queue and what was delivered; called with the
    /// queue lock released.
    fn flush_store(&self, removed: Vec<u64>, delivered: Vec<u64>) {
        if let Some(link) = self.store.get() {
            link.store.mark_delivered(&link.name, &delivered);
            link.store.remove(&link.name, &removed);
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

    /// Records a use of the queue (a redeclaration) for `x-expires`.
    pub fn touch(&self) {
        self.state.lock().last_used = self.clock.now_ms();
    }

    /// Whether `x-expires` says the queue should be deleted: unused (no consumers, no get,
    /// no redeclaration) for longer than the limit.
    pub fn idle_expired(&self, now: u64) -> bool {
        let state = self.state.lock();
        let Some(expires) = state.limits.expires else {
            return false;
        };
        state.consumers.is_empty()
            && !state.deleted
            && now.saturating_sub(state.last_used) >= expires
    }

    /// Removes expired messages at the head, where dispatch and get look.
    fn expire_head(&self, state: &mut QueueState, now: u64) {
        while state.expiring > 0 {
            match state.ready.front() {
                Some(head) if head.expires_at.is_some_and(|at| at < now) => {
                    if let Some(expired) = state.pop_ready() {
                        self.discard_ready(state, expired, DeathReason::Expired);
                    }
                }
                _ => return,
            }
        }
    }

    /// Removes every expired ready message, wherever it is in the queue, so expired messages
    /// stop counting toward depth and limits within one sweep (RabbitMQ only drops them at
    /// the head). Returns how many expired.
    pub fn expire(self: &Arc<Self>, now: u64) -> usize {
        let mut state = self.state.lock();
        // A full pass at most every SWEEP_INTERVAL_MS keeps the cost of large backlogs with
        // mixed TTLs bounded, while every expired message still goes within a second.
        if now.saturating_sub(state.last_sweep) < SWEEP_INTERVAL_MS {
            return 0;
        }
        // What publishers did not free since the last pass is freed here, outside the lock.
        let leftover = state
            .activity
            .as_deref_mut()
            .map(|activity| std::mem::take(&mut activity.expired_garbage))
            .unwrap_or_default();
        if state.expiring == 0 || now <= state.next_expiry {
            if !leftover.is_empty() {
                state.last_sweep = now;
            }
            drop(state);
            drop(leftover);
            return 0;
        }
        state.last_sweep = now;
        // Messages that arrive or are requeued during the pass lower this again.
        state.next_expiry = u64::MAX;
        let mut cursor = Some(SweepCursor::default());
        let mut expired = 0;
        while let Some(at) = cursor {
            let mut next_expiry = u64::MAX;
            let dead_lettering = state.limits.dead_letter_exchange.is_some();
            // Messages that only need freeing (not stored, not dead-lettered) leave as bare
            // references; the others go through discard.
            let mut garbage: Vec<Arc<Message>> = Vec::new();
            let mut to_discard: Vec<ReadyMessage> = Vec::new();
            let (mut bytes, mut paged) = (0u64, 0u64);
            cursor = state.ready.sweep_step(
                at,
                SWEEP_STEP,
                |m| match m.expires_at {
                    Some(at) if at < now => true,
                    Some(at) => {
                        next_expiry = next_expiry.min(at);
                        false
                    }
                    None => false,
                },
                |ready| {
                    bytes += ready.body_len();
                    paged += u64::from(ready.paged);
                    if dead_lettering || ready.store_id != 0 {
                        to_discard.push(ready);
                    } else {
                        garbage.push(ready.message);
                    }
                },
            );
            let removed = garbage.len() + to_discard.len();
            expired += removed;
            state.next_expiry = state.next_expiry.min(next_expiry);
            // Every removed message carried an expiry.
            state.expiring -= removed;
            state.ready_bytes -= bytes;
            let activity = state.active();
            activity.stats.paged_out -= paged;
            activity.stats.expired += garbage.len() as u64;
            // The expired messages are freed by the next enqueues, a few each, on the
            // publishing thread: freeing hundreds of thousands of messages here, on another
            // thread, made every free contend with the publisher's allocations in the same
            // malloc arena and halved the publish rate of a large queue with mixed TTLs. The
            // next pass frees whatever is left.
            activity.expired_garbage.append(&mut garbage);
            for ready in to_discard {
                self.discard_ready(&mut state, ready, DeathReason::Expired);
            }
            if cursor.is_some() {
                // Publishers and consumers get the queue between steps: a pass over millions
                // of messages holds the lock for a step at a time, not for the whole pass.
                self.finish(state);
                state = self.state.lock();
                if state.deleted {
                    break;
                }
            }
        }
        self.finish(state);
        drop(leftover);
        expired
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

    /// Hands ready messages to consumers while they have credit. Listeners call this when a
    /// consumer's credit frees up after [`DeliverySink::reserve`] refused.
    pub fn dispatch(self: &Arc<Self>) {
        let mut state = self.state.lock();
        state.consumers_starved = false;
        self.dispatch_locked(&mut state);
        self.finish(state);
    }

    fn dispatch_locked(self: &Arc<Self>, state: &mut QueueState) {
        if state.consumers.is_empty() || state.consumers_starved {
            return;
        }
        let now = if state.expiring > 0 {
            self.clock.now_ms()
        } else {
            0
        };
        loop {
            self.expire_head(state, now);
            if state.ready.is_empty() || state.consumers.is_empty() {
                return;
            }
            // A paged-out head is read back before any consumer's credit is reserved for it.
            let paged_in = match state.ready.front() {
                Some(head) if head.paged => match self.page_in(head) {
                    Some(message) => Some(message),
                    None => {
                        if let Some(lost) = state.pop_ready() {
                            state.active().store_removed.push(lost.store_id);
                        }
                        continue;
                    }
                },
                _ => None,
            };
            if state.limits.single_active_consumer && !Self::promote_waiting_consumer(state) {
                // The active consumer keeps what it holds; no more until it settled all.
                return;
            }
            let Some(index) = self.next_consumer_with_credit(state) else {
                state.consumers_starved = true;
                return;
            };
            let Some(mut ready) = state.pop_ready() else {
                return;
            };
            if let Some(message) = paged_in {
                ready.message = message;
            }
            let consumer = &state.consumers[index];
            let needs_settlement = consumer.spec.needs_settlement;
            let sink = Arc::clone(&consumer.sink);
            if needs_settlement {
                state.unsettled.insert(
                    ready.id,
                    UnsettledMessage {
                        message: Arc::clone(&ready.message),
                        expires_at: ready.expires_at,
                        store_id: ready.store_id,
                        delivery_count: ready.delivery_count,
                    },
                );
            }
            state.note_delivered(ready.store_id, needs_settlement);
            state.active().stats.delivered += 1;
            if self.trace.load(Ordering::Relaxed) {
                state
                    .active()
                    .traced
                    .push((Arc::clone(&ready.message), ready.redelivered));
            }
            sink.deliver(Delivery {
                queue: Arc::clone(self) as Arc<dyn QueueInstance>,
                id: ready.id,
                message: ready.message,
                redelivered: ready.redelivered,
                delivery_count: u32::from(ready.delivery_count),
                needs_settlement,
            });
        }
    }

    /// With a single active consumer: a waiting consumer of higher priority than the active
    /// one takes over, once the active one has settled every delivery it holds so that
    /// processing order is kept (RabbitMQ 4.x; in a single-active queue every unsettled
    /// delivery is the active consumer's or a basic.get's). The old active one goes back to
    /// waiting at its priority. Returns false while the hand-over waits for settlements.
    fn promote_waiting_consumer(state: &mut QueueState) -> bool {
        let (Some(active), Some(next)) = (state.consumers.first(), state.consumers.get(1)) else {
            return true;
        };
        if next.spec.priority <= active.spec.priority {
            return true;
        }
        if !state.unsettled.is_empty() {
            return false;
        }
        let previous = state.consumers.remove(0);
        let position =
            1 + state.consumers[1..].partition_point(|c| c.spec.priority >= previous.spec.priority);
        state.consumers.insert(position, previous);
        true
    }

    /// Picks the next consumer to deliver to: the highest priority group that has credit,
    /// round-robin within the group. Reserves credit on the chosen sink.
    fn next_consumer_with_credit(&self, state: &mut QueueState) -> Option<usize> {
        if state.limits.single_active_consumer {
            // Only the active consumer (the first entry) receives.
            return state
                .consumers
                .first()
                .is_some_and(|c| c.sink.reserve())
                .then_some(0);
        }
        let count = state.consumers.len();
        let mut group_start = 0;
        while group_start < count {
            let priority = state.consumers[group_start].spec.priority;
            let group_end = state.consumers[group_start..]
                .iter()
                .position(|c| c.spec.priority != priority)
                .map_or(count, |offset| group_start + offset);
            let group_len = group_end - group_start;
            for step in 0..group_len {
                let index = group_start + (state.next_round_robin + step) % group_len;
                if state.consumers[index].sink.reserve() {
                    state.next_round_robin = state.next_round_robin.wrapping_add(step + 1);
                    return Some(index);
                }
            }
            group_start = group_end;
        }
        None
    }

    /// Takes the next ready message for a basic.get, with the number of ready messages left.
    pub fn get(self: &Arc<Self>, needs_settlement: bool) -> Option<(Delivery, u64)> {
        let mut state = self.state.lock();
        let now = self.clock.now_ms();
        state.last_used = now;
        self.expire_head(&mut state, now);
        let ready = loop {
            let Some(mut ready) = state.pop_ready() else {
                self.finish(state);
                return None;
            };
            if !ready.paged {
                break ready;
            }
            match self.page_in(&ready) {
                Some(message) => {
                    ready.message = message;
                    ready.paged = false;
                    break ready;
                }
                None => state.active().store_removed.push(ready.store_id),
            }
        };
        if needs_settlement {
            state.unsettled.insert(
                ready.id,
                UnsettledMessage {
                    message: Arc::clone(&ready.message),
                    expires_at: ready.expires_at,
                    store_id: ready.store_id,
                    delivery_count: ready.delivery_count,
                },
            );
        }
        state.note_delivered(ready.store_id, needs_settlement);
        state.active().stats.delivered += 1;
        if self.trace.load(Ordering::Relaxed) {
            state
                .active()
                .traced
                .push((Arc::clone(&ready.message), ready.redelivered));
        }
        let remaining = state.ready.len() as u64;
        let delivery = Delivery {
            queue: Arc::clone(self) as Arc<dyn QueueInstance>,
            id: ready.id,
            message: ready.message,
            redelivered: ready.redelivered,
            delivery_count: u32::from(ready.delivery_count),
            needs_settlement,
        };
        self.finish(state);
        Some((delivery, remaining))
    }

    /// Settles unsettled deliveries by id. Unknown ids (already settled, or the queue was
    /// purged or deleted meanwhile) are ignored: the listener validates its own tags.
    pub fn settle(self: &Arc<Self>, ids: &[u64], settlement: Settlement) {
        let mut state = self.state.lock();
        match settlement {
            Settlement::Ack => {
                for id in ids {
                    if let Some(unsettled) = state.unsettled.remove(id) {
                        state.active().stats.acknowledged += 1;
                        if unsettled.store_id != 0 {
                            state.active().store_removed.push(unsettled.store_id);
                        }
                    }
                }
            }
            Settlement::Reject => {
                for id in ids {
                    if let Some(unsettled) = state.unsettled.remove(id) {
                        self.discard(
                            &mut state,
                            unsettled.message,
                            unsettled.store_id,
                            DeathReason::Rejected,
                        );
                    }
                }
            }
            Settlement::Requeue | Settlement::Release => {
                let failed = settlement == Settlement::Requeue;
                for &id in ids {
                    if let Some(unsettled) = state.unsettled.remove(&id) {
                        let delivery_count = if failed {
                            unsettled.delivery_count.saturating_add(1)
                        } else {
                            unsettled.delivery_count
                        };
                        if failed
                            && state
                                .limits
                                .delivery_limit
                                .is_some_and(|limit| u64::from(delivery_count) > limit)
                        {
                            self.discard(
                                &mut state,
                                unsettled.message,
                                unsettled.store_id,
                                DeathReason::DeliveryLimit,
                            );
                            continue;
                        }
                        let length = ReadyMessage::length_field(unsettled.message.body.len());
                        let ready = ReadyMessage {
                            id,
                            message: unsettled.message,
                            redelivered: true,
                            expires_at: unsettled.expires_at,
                            store_id: unsettled.store_id,
                            length,
                            paged: false,
                            delivery_count,
                        };
                        state.ready_bytes += ready.body_len();
                        state.resident_bytes += ready.resident_len();
                        state.expiring += usize::from(ready.expires_at.is_some());
                        if let Some(at) = ready.expires_at {
                            state.next_expiry = state.next_expiry.min(at);
                        }
                        state.ready.insert_by_id(ready);
                    }
                }
                if !state.deleted {
                    self.dispatch_locked(&mut state);
                }
            }
        }
        // A single-active hand-over to a higher priority consumer waits for the active one
        // to settle everything; this settlement may have been the last.
        if state.limits.single_active_consumer
            && state.unsettled.is_empty()
            && state.consumers.len() > 1
            && !state.deleted
            && matches!(settlement, Settlement::Ack | Settlement::Reject)
        {
            state.consumers_starved = false;
            self.dispatch_locked(&mut state);
        }
        self.finish(state);
    }

    /// Attaches a consumer and starts delivering to it. Fails with 403 when an exclusive
    /// consumer holds the queue, or when an exclusive consumer is asked for a queue in use.
    pub fn add_consumer(
        self: &Arc<Self>,
        spec: ConsumerSpec,
        sink: Arc<dyn DeliverySink>,
    ) -> CoreResult<u64> {
        let mut state = self.state.lock();
        if state.deleted {
            return Err(CoreError::not_found(format!("no {}", self.describe())));
        }
        let exclusive_held = state.consumers.iter().any(|c| c.spec.exclusive);
        if exclusive_held || (spec.exclusive && !state.consumers.is_empty()) {
            return Err(CoreError::access_refused(format!(
                "{} in exclusive use",
                self.describe()
            )));
        }
        let id = NEXT_CONSUMER_ID.fetch_add(1, Ordering::Relaxed);
        // With a single active consumer the first entry is the active one and the others wait
        // in priority order (attach order among equals): the highest priority waiting
        // consumer is the next active one (RabbitMQ 4.x). `dispatch_locked` hands over to a
        // newcomer of higher priority.
        let position = if state.limits.single_active_consumer {
            if state.consumers.is_empty() {
                0
            } else {
                1 + state.consumers[1..].partition_point(|c| c.spec.priority >= spec.priority)
            }
        } else {
            state
                .consumers
                .partition_point(|c| c.spec.priority >= spec.priority)
        };
        // Most queues have one consumer (every MQTT subscription, for one): room for exactly
        // one instead of the four a first push reserves.
        state.consumers.reserve_exact(1);
        state
            .consumers
            .insert(position, AttachedConsumer { id, spec, sink });
        state.had_consumers = true;
        state.consumers_starved = false;
        self.dispatch_locked(&mut state);
        self.finish(state);
        Ok(id)
    }

    /// Detaches a consumer. Its unsettled deliveries stay unsettled (AMQP 0-9-1 lets a
    /// channel settle them after cancelling).
    pub fn remove_consumer(self: &Arc<Self>, consumer_id: u64) -> ConsumerRemoval {
        let mut state = self.state.lock();
        let Some(index) = state.consumers.iter().position(|c| c.id == consumer_id) else {
            return ConsumerRemoval::NotAttached;
        };
        state.consumers.remove(index);
        state.last_used = self.clock.now_ms();
        state.consumers_starved = false;
        // The next consumer may be able to take what this one could not (and with a single
        // active consumer, it becomes the active one now).
        self.dispatch_locked(&mut state);
        let removal =
            if state.consumers.is_empty() && self.config.auto_delete && state.had_consumers {
                ConsumerRemoval::LastOfAutoDelete
            } else {
                ConsumerRemoval::Removed
            };
        self.finish(state);
        removal
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
mod tests {
    use super::*;
    use crate::message::Properties;
    use bytes::Bytes;
    use std::sync::atomic::AtomicUsize;

    /// A sink with a fixed number of credits that records what it got.
    struct RecordingSink {
        credit: AtomicUsize,
        received: Mutex<Vec<Delivery>>,
        cancelled: AtomicUsize,
    }

    impl RecordingSink {
        fn new(credit: usize) -> Arc<RecordingSink> {
            Arc::new(RecordingSink {
                credit: AtomicUsize::new(credit),
                received: Mutex::new(Vec::new()),
                cancelled: AtomicUsize::new(0),
            })
        }

        fn bodies(&self) -> Vec<Bytes> {
            self.received
                .lock()
                .iter()
                .map(|d| d.message.body.clone())
                .collect()
        }
    }

    impl DeliverySink for RecordingSink {
        fn reserve(&self) -> bool {
            self.credit
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| c.checked_sub(1))
                .is_ok()
        }
        fn deliver(&self, delivery: Delivery) {
            self.received.lock().push(delivery);
        }
        fn cancelled(&self) {
            self.cancelled.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn queue(auto_delete: bool) -> Arc<Queue> {
        Queue::new(QueueConfig {
            name: "q".into(),
            vhost: "/".into(),
            durable: false,
            exclusive_owner: None,
            auto_delete,
            arguments: Table::new(),
        })
    }

    /// A queue `q` with one argument.
    fn queue_with(argument: &str, value: crate::value::Value) -> Arc<Queue> {
        let mut arguments = Table::new();
        arguments.insert(argument, value);
        Queue::new(QueueConfig {
            name: "q".into(),
            vhost: "/".into(),
            durable: false,
            exclusive_owner: None,
            auto_delete: false,
            arguments,
        })
    }

    fn message(body: &'static str) -> Arc<Message> {
        Arc::new(Message {
            exchange: "".into(),
            routing_key: "q".into(),
            properties: Properties::default(),
            encoded_properties: None,
            body: Bytes::from_static(body.as_bytes()),
        })
    }

    fn spec(tag: &str, priority: i32, exclusive: bool) -> ConsumerSpec {
        ConsumerSpec {
            tag: Arc::from(tag),
            connection_id: 1,
            needs_settlement: true,
            exclusive,
            priority,
            arguments: Table::new(),
        }
    }

    #[test]
    fn an_idle_queue_allocates_no_activity_until_a_message_arrives() {
        let q = queue(false);
        q.purge();
        assert!(q.state.lock().activity.is_none());
        assert_eq!(q.stats(), QueueStats::default());
        q.enqueue(message("first"));
        assert!(q.state.lock().activity.is_some());
        assert_eq!(q.stats().published, 1);
    }

    #[test]
    fn messages_wait_until_a_consumer_has_credit_then_flow_in_order() {
        let q = queue(false);
        for body in ["a", "b", "c"] {
            q.enqueue(message(body));
        }
        let sink = RecordingSink::new(2);
        q.add_consumer(spec("c", 0, false), sink.clone()).unwrap();
        assert_eq!(sink.bodies(), vec!["a", "b"]);
        assert_eq!(q.stats().ready, 1);
        assert_eq!(q.stats().unacknowledged, 2);
        sink.credit.store(5, Ordering::Relaxed);
        q.dispatch();
        assert_eq!(sink.bodies(), vec!["a", "b", "c"]);
    }

    #[test]
    fn a_queue_over_its_memory_limit_flags_its_publishers_until_it_drains_to_half() {
        let q = queue(false);
        q.memory_limits.set(4, 1_000_000);
        let ((), noted) = crate::flow::observe(|| {
            for body in ["a", "b", "c", "d"] {
                q.enqueue(message(body));
            }
        });
        assert!(noted.is_empty(), "4 messages are within the limit");
        assert!(!q.flow().is_congested());
        let ((), noted) = crate::flow::observe(|| {
            q.enqueue(message("e"));
        });
        assert_eq!(noted.len(), 1, "the fifth message goes over the limit");
        assert!(q.flow().is_congested());
        // Draining to 3 (over half of 4) keeps it raised; to 2 lowers it.
        q.get(false).unwrap();
        q.get(false).unwrap();
        assert!(q.flow().is_congested());
        q.get(false).unwrap();
        assert!(!q.flow().is_congested());
        assert_eq!(q.in_memory_bytes(), 2);
    }

    #[test]
    fn requeued_deliveries_over_the_limit_hold_back_no_publisher_until_a_new_message_does() {
        let q = queue(false);
        q.memory_limits.set(2, 1_000_000);
        q.enqueue(message("a"));
        q.enqueue(message("b"));
        let (first, _) = q.get(true).unwrap();
        let (second, _) = q.get(true).unwrap();
        q.enqueue(message("c"));
        q.enqueue(message("d"));
        q.settle(&[first.id, second.id], Settlement::Requeue);
        assert_eq!(q.stats().ready, 4);
        assert!(!q.flow().is_congested(), "a requeue raises nothing");
        q.enqueue(message("e"));
        assert!(q.flow().is_congested(), "a new message over the limit does");
    }

    #[test]
    fn a_queue_over_its_byte_limit_is_congested_and_deletion_releases_its_publishers() {
        let q = queue(false);
        q.memory_limits.set(1_000, 10);
        for body in ["12345", "67890"] {
            q.enqueue(message(body));
        }
        assert!(!q.flow().is_congested());
        q.enqueue(message("x"));
        assert!(q.flow().is_congested());
        q.mark_deleted();
        assert!(!q.flow().is_congested());
    }

    #[test]
    fn requeued_messages_return_to_their_position_marked_redelivered() {
        let q = queue(false);
        for body in ["a", "b", "c"] {
            q.enqueue(message(body));
        }
        let (first, _) = q.get(true).unwrap();
        let (second, left) = q.get(true).unwrap();
        assert_eq!(left, 1);
        q.settle(&[second.id, first.id], Settlement::Requeue);
        let order: Vec<(Bytes, bool)> = std::iter::from_fn(|| q.get(false))
            .map(|(d, _)| (d.message.body.clone(), d.redelivered))
            .collect();
        assert_eq!(
            order,
            vec![
                (Bytes::from_static(b"a"), true),
                (Bytes::from_static(b"b"), true),
                (Bytes::from_static(b"c"), false)
            ]
        );
    }

    #[test]
    fn ack_and_reject_forget_the_message() {
        let q = queue(false);
        q.enqueue(message("a"));
        q.enqueue(message("b"));
        let (a, _) = q.get(true).unwrap();
        let (b, _) = q.get(true).unwrap();
        q.settle(&[a.id], Settlement::Ack);
        q.settle(&[b.id], Settlement::Reject);
        q.settle(&[b.id], Settlement::Requeue); // already settled: ignored
        let stats = q.stats();
        assert_eq!((stats.ready, stats.unacknowledged), (0, 0));
        assert_eq!((stats.acknowledged, stats.dropped), (1, 1));
    }

    #[test]
    fn higher_priority_consumers_are_served_first_and_equal_ones_round_robin() {
        let q = queue(false);
        let low = RecordingSink::new(100);
        let high_a = RecordingSink::new(1);
        let high_b = RecordingSink::new(1);
        q.add_consumer(spec("low", 0, false), low.clone()).unwrap();
        q.add_consumer(spec("high-a", 10, false), high_a.clone())
            .unwrap();
        q.add_consumer(spec("high-b", 10, false), high_b.clone())
            .unwrap();
        for body in ["1", "2", "3", "4"] {
            q.enqueue(message(body));
        }
        assert_eq!(high_a.bodies().len() + high_b.bodies().len(), 2);
        assert_eq!(high_a.bodies().len(), 1);
        assert_eq!(low.bodies(), vec!["3", "4"]);
    }

    #[test]
    fn exclusive_consumer_locks_the_queue() {
        let q = queue(false);
        q.add_consumer(spec("x", 0, true), RecordingSink::new(1))
            .unwrap();
        let err = q
            .add_consumer(spec("y", 0, false), RecordingSink::new(1))
            .unwrap_err();
        assert_eq!(err.kind, crate::ErrorKind::AccessRefused);
        assert_eq!(err.message, "queue 'q' in vhost '/' in exclusive use");
    }

    #[test]
    fn last_consumer_of_auto_delete_queue_is_reported_and_deletion_cancels_consumers() {
        let q = queue(true);
        let sink = RecordingSink::new(1);
        let first = q.add_consumer(spec("a", 0, false), sink.clone()).unwrap();
        let second = q.add_consumer(spec("b", 0, false), sink.clone()).unwrap();
        assert_eq!(q.remove_consumer(first), ConsumerRemoval::Removed);
        assert_eq!(q.remove_consumer(first), ConsumerRemoval::NotAttached);
        assert_eq!(q.remove_consumer(second), ConsumerRemoval::LastOfAutoDelete);
        let q = queue(false);
        q.add_consumer(spec("a", 0, false), sink.clone()).unwrap();
        q.enqueue(message("x"));
        q.enqueue(message("y"));
        assert_eq!(q.mark_deleted(), 1);
        assert_eq!(sink.cancelled.load(Ordering::Relaxed), 1);
        assert!(q.is_deleted());
    }

    #[test]
    fn purge_drops_ready_messages_only() {
        let q = queue(false);
        for body in ["a", "b", "c"] {
            q.enqueue(message(body));
        }
        let _held = q.get(true).unwrap();
        assert_eq!(q.purge(), 2);
        assert_eq!(q.stats().unacknowledged, 1);
    }

    fn queue_with_delivery_limit(limit: i64) -> Arc<Queue> {
        queue_with("x-delivery-limit", crate::value::Value::I64(limit))
    }

    #[test]
    fn requeue_counts_failed_deliveries_and_release_does_not() {
        let q = queue(false);
        q.enqueue(message("a"));
        let (first, _) = q.get(true).unwrap();
        assert_eq!((first.delivery_count, first.redelivered), (0, false));
        q.settle(&[first.id], Settlement::Requeue);
        let (second, _) = q.get(true).unwrap();
        assert_eq!((second.delivery_count, second.redelivered), (1, true));
        q.settle(&[second.id], Settlement::Release);
        let (third, _) = q.get(true).unwrap();
        assert_eq!(third.delivery_count, 1);
        q.settle(&[third.id], Settlement::Requeue);
        let sink = RecordingSink::new(1);
        q.add_consumer(spec("c", 0, false), sink.clone()).unwrap();
        assert_eq!(sink.received.lock()[0].delivery_count, 2);
    }

    #[test]
    fn a_message_returned_more_often_than_the_delivery_limit_is_dropped() {
        let q = queue_with_delivery_limit(2);
        q.enqueue(message("poison"));
        q.enqueue(message("fine"));
        for expected_count in 0..=2 {
            let (delivery, _) = q.get(true).unwrap();
            assert_eq!(delivery.message.body, "poison");
            assert_eq!(delivery.delivery_count, expected_count);
            q.settle(&[delivery.id], Settlement::Requeue);
        }
        let (next, left) = q.get(true).unwrap();
        assert_eq!((next.message.body.as_ref(), left), (&b"fine"[..], 0));
        let stats = q.stats();
        assert_eq!(stats.dropped_delivery_limit, 1);
        assert_eq!(stats.dead_lettered_delivery_limit, 0);
    }

    #[test]
    fn delivery_limit_zero_allows_no_failed_delivery_but_releases_are_free() {
        let q = queue_with_delivery_limit(0);
        q.enqueue(message("a"));
        let (delivery, _) = q.get(true).unwrap();
        q.settle(&[delivery.id], Settlement::Release);
        let (delivery, _) = q.get(true).unwrap();
        q.settle(&[delivery.id], Settlement::Requeue);
        assert_eq!(q.stats().ready, 0);
        assert_eq!(q.stats().dropped_delivery_limit, 1);
    }

    #[test]
    fn delivery_limit_argument_must_be_a_non_negative_integer() {
        let mut arguments = Table::new();
        arguments.insert("x-delivery-limit", crate::value::Value::I64(-1));
        assert_eq!(
            QueueLimits::from_arguments(&arguments).unwrap_err(),
            "invalid arg 'x-delivery-limit': expected a non-negative integer, got -1 of type long"
        );
        arguments.insert("x-delivery-limit", crate::value::Value::I32(5));
        assert_eq!(
            QueueLimits::from_arguments(&arguments)
                .unwrap()
                .delivery_limit,
            Some(5)
        );
    }

    fn single_active_queue() -> Arc<Queue> {
        queue_with("x-single-active-consumer", crate::value::Value::Bool(true))
    }

    #[test]
    fn single_active_consumer_goes_to_the_highest_priority_after_the_active_one_settles() {
        let q = single_active_queue();
        let first = RecordingSink::new(10);
        let low = RecordingSink::new(10);
        let high = RecordingSink::new(10);
        let other_high = RecordingSink::new(10);
        q.add_consumer(spec("first", 0, false), first.clone())
            .unwrap();
        q.enqueue(message("1"));
        assert_eq!(first.bodies(), vec!["1"]);
        q.add_consumer(spec("low", 1, false), low.clone()).unwrap();
        let high_id = q
            .add_consumer(spec("high", 10, false), high.clone())
            .unwrap();
        q.add_consumer(spec("other-high", 10, false), other_high.clone())
            .unwrap();
        // The active consumer holds a delivery: it stays active and gets nothing more.
        q.enqueue(message("2"));
        assert_eq!(first.bodies(), vec!["1"]);
        assert!(high.bodies().is_empty());
        let active: Vec<bool> = q.consumers().iter().map(|(_, active)| *active).collect();
        assert_eq!(active, vec![true, false, false, false]);
        let held = first.received.lock()[0].id;
        q.settle(&[held], Settlement::Ack);
        // The highest priority waiting consumer (the first of equals to attach) took over.
        assert_eq!(high.bodies(), vec!["2"]);
        let tags: Vec<String> = q
            .consumers()
            .iter()
            .map(|(c, _)| c.tag.to_string())
            .collect();
        assert_eq!(tags, vec!["high", "other-high", "low", "first"]);
        // Cancelling the active consumer hands over to the next by priority.
        q.remove_consumer(high_id);
        q.enqueue(message("3"));
        assert_eq!(other_high.bodies(), vec!["3"]);
        assert!(low.bodies().is_empty());
        assert_eq!(first.bodies(), vec!["1"]);
    }

    #[test]
    fn single_active_consumer_hands_over_at_once_when_nothing_is_held() {
        let q = single_active_queue();
        let first = RecordingSink::new(10);
        let high = RecordingSink::new(10);
        q.add_consumer(spec("first", 0, false), first.clone())
            .unwrap();
        q.add_consumer(spec("high", 5, false), high.clone())
            .unwrap();
        q.enqueue(message("1"));
        assert_eq!(high.bodies(), vec!["1"]);
        assert!(first.bodies().is_empty());
    }

    fn expiring(body: &'static str, expiration: &str, priority: u8) -> Arc<Message> {
        Arc::new(Message {
            exchange: "".into(),
            routing_key: "q".into(),
            properties: Properties {
                expiration: Some(expiration.to_string()),
                priority: Some(priority),
                ..Properties::default()
            },
            encoded_properties: None,
            body: Bytes::from_static(body.as_bytes()),
        })
    }

    #[test]
    fn the_sweep_removes_expired_messages_anywhere_and_keeps_the_order_of_the_rest() {
        let q = queue_with("x-max-priority", crate::value::Value::I64(2));
        for (body, expiration, priority) in [
            ("keep-1", "600000", 0),
            ("expire-1", "10", 0),
            ("keep-2", "600000", 1),
            ("expire-2", "10", 1),
            ("keep-3", "600000", 0),
            ("expire-3", "20", 0),
        ] {
            q.enqueue(expiring(body, expiration, priority));
        }
        assert_eq!(q.expire(now_ms() + 1_000), 3);
        let stats = q.stats();
        assert_eq!((stats.ready, stats.expired), (3, 3));
        // Nothing else is due: the next sweep is free and removes nothing.
        assert_eq!(q.expire(now_ms() + 10_000), 0);
        let order: Vec<Bytes> = std::iter::from_fn(|| q.get(false))
            .map(|(d, _)| d.message.body.clone())
            .collect();
        assert_eq!(order, vec!["keep-2", "keep-1", "keep-3"]);
    }

    #[test]
    fn expired_messages_are_freed_by_later_enqueues_or_by_the_next_pass() {
        let q = queue(false);
        let expired: Vec<_> = (0..4)
            .map(|_| {
                let message = expiring("gone", "10", 0);
                let weak = Arc::downgrade(&message);
                q.enqueue(message);
                weak
            })
            .collect();
        let alive = |weak: &[std::sync::Weak<Message>]| {
            weak.iter().filter(|w| w.upgrade().is_some()).count()
        };
        let now = now_ms() + 1_000;
        assert_eq!(q.expire(now), 4);
        // Gone from the queue at once, freed later.
        assert_eq!(q.stats().ready, 0);
        assert_eq!(alive(&expired), 4);
        // Each enqueue frees one.
        q.enqueue(expiring("keep", "600000", 0));
        q.enqueue(expiring("keep", "600000", 0));
        assert_eq!(alive(&expired), 2);
        // Without publishers, the next pass frees the rest.
        assert_eq!(q.expire(now + SWEEP_INTERVAL_MS), 0);
        assert_eq!(alive(&expired), 0);
        assert_eq!(q.stats().ready, 2);
    }

    #[test]
    fn a_ready_entry_stays_compact() {
        assert!(std::mem::size_of::<ReadyMessage>() <= 48);
    }
}
