//! The quorum queue's state and how each command changes it (dispatch in `dispatch.rs`,
//! moves between indexes and limits in `transitions.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::message::Message;
use crate::queue::DeathReason;

use super::{
    Applied, Command, ConsumerKey, CreditMode, Effect, Outcome, PublishId, QuorumConfig, Reply,
    DEFAULT_PRIORITY, DELIVERY_TIME_HEADER, MAX_PREFETCH, PRIORITY_LEVELS,
};

/// Where a message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// Waiting for a consumer.
    Ready,
    /// Held until its delivery time (native delayed delivery).
    Delayed,
    /// Delivered to this consumer and not settled.
    CheckedOut(ConsumerKey),
    /// Dead-lettered at-least-once, waiting for the target's confirm.
    DeadLettering(DeathReason),
}

/// One message in the queue and what the queue knows about it.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) message: Arc<Message>,
    /// 0 to 31.
    pub(super) priority: u8,
    /// Position among ready messages of its priority: its id, or for a delayed message the
    /// id-counter value drawn when it became available (so due messages queue in time order).
    pub(super) order: u64,
    /// Body bytes.
    pub(super) length: u64,
    /// Failed deliveries (`x-delivery-count`).
    pub(super) delivery_count: u32,
    /// Times handed out; non-zero means redelivered.
    pub(super) acquired: u32,
    /// When it expires (Unix ms); set once it is available.
    pub(super) expires_at: Option<u64>,
    /// Its TTL, for a delayed message whose expiry starts when it becomes available.
    pub(super) ttl: Option<u64>,
    /// When a delayed message becomes available (Unix ms).
    pub(super) deliver_at: Option<u64>,
    pub(super) place: Place,
    /// When its checkout times out (Unix ms; `u64::MAX`: never).
    pub(super) deadline: u64,
}

/// A consumer as the replicated state records it.
#[derive(Debug, Clone)]
pub(super) struct Consumer {
    pub(super) owner: u64,
    pub(super) tag: String,
    pub(super) mode: CreditMode,
    pub(super) priority: i32,
    pub(super) auto_ack: bool,
    /// Credit left, for credited and auto-ack consumers (prefetch consumers compute theirs).
    pub(super) credit: u32,
    /// Ids delivered and not settled.
    pub(super) checked_out: BTreeSet<u64>,
    /// Cancelled: receives nothing; removed once its deliveries are settled.
    pub(super) cancelled: bool,
    /// The implicit consumer basic.get deliveries of one owner are settled through.
    pub(super) get_only: bool,
    /// Its own consumer timeout (else the queue's).
    pub(super) timeout: Option<u64>,
    /// Deliveries that timed out and were returned: the consumer is suspended until it has
    /// settled them all (late settlements change nothing else).
    pub(super) timed_out: BTreeSet<u64>,
    /// When it last received (the queue's delivery counter), for round-robin.
    pub(super) last_served: u64,
}

impl Consumer {
    pub(super) fn available_credit(&self) -> u32 {
        match self.mode {
            CreditMode::Prefetch(window) if !self.auto_ack => {
                cap_credit(window).saturating_sub(self.checked_out.len() as u32)
            }
            _ => self.credit,
        }
    }

    pub(super) fn receives(&self) -> bool {
        !self.cancelled && !self.get_only && self.timed_out.is_empty()
    }
}

/// A prefetch or credit capped at [`MAX_PREFETCH`]; 0 (unlimited prefetch) is the cap.
pub(super) fn cap_credit(window: u32) -> u32 {
    if window == 0 {
        MAX_PREFETCH
    } else {
        window.min(MAX_PREFETCH)
    }
}

/// Running totals of what passed through the queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Counters {
    pub(super) enqueued: u64,
    pub(super) duplicates: u64,
    pub(super) rejected_publishes: u64,
    pub(super) delivered: u64,
    pub(super) acknowledged: u64,
    pub(super) returned: u64,
    pub(super) expired: u64,
    pub(super) dead_lettered: u64,
    pub(super) dropped: u64,
    pub(super) delivery_limit_reached: u64,
}

/// Counters an operator reads for a quorum queue (the management API's fields).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QuorumStats {
    /// Messages waiting for a consumer (delayed ones not included).
    pub ready: u64,
    /// Messages held until their `x-opt-delivery-time`.
    pub delayed: u64,
    /// Delivered and not settled.
    pub unacknowledged: u64,
    /// At-least-once dead letters waiting for their target's confirm.
    pub dead_letter_pending: u64,
    /// Consumers receiving or waiting (get-only settlement holders not counted).
    pub consumers: u64,
    /// Body bytes of ready, delayed and pending dead-lettered messages.
    pub bytes: u64,
    /// Publishes enqueued.
    pub enqueued: u64,
    /// Publishes recognised as retries and not enqueued again.
    pub duplicates: u64,
    /// Publishes refused by reject-publish.
    pub rejected_publishes: u64,
    /// Deliveries (consume and get, redeliveries included).
    pub delivered: u64,
    /// Acknowledged deliveries.
    pub acknowledged: u64,
    /// Deliveries returned to the queue (requeue, release, modify, consumer down).
    pub returned: u64,
    /// Messages whose TTL passed.
    pub expired: u64,
    /// Messages handed to the dead-letter exchange.
    pub dead_lettered: u64,
    /// Messages dropped (dead-lettering reasons without a dead-letter exchange).
    pub dropped: u64,
    /// Messages that reached the delivery limit.
    pub delivery_limit_reached: u64,
}

/// One quorum queue's replicated state. Every member holds one and applies the same log.
#[derive(Debug, Clone)]
pub struct QuorumQueue {
    pub(super) config: QuorumConfig,
    pub(super) messages: BTreeMap<u64, Entry>,
    /// Ready messages in delivery order: (31 - priority, order, id).
    pub(super) ready: BTreeSet<(u8, u64, u64)>,
    /// Ready messages with a TTL: (expires_at, id).
    pub(super) expiring: BTreeSet<(u64, u64)>,
    /// The timer index of delayed messages: (deliver_at, id).
    pub(super) delayed: BTreeSet<(u64, u64)>,
    /// Checked-out messages: (deadline, id), for the consumer timeout.
    pub(super) checkouts: BTreeSet<(u64, u64)>,
    pub(super) consumers: BTreeMap<ConsumerKey, Consumer>,
    /// Highest sequence number applied per publisher.
    pub(super) publishers: BTreeMap<u64, u64>,
    /// The single active consumer.
    pub(super) active: Option<ConsumerKey>,
    /// Message ids and ready orders are drawn from this.
    pub(super) next_id: u64,
    pub(super) next_consumer: u64,
    /// Deliveries made, for round-robin among consumers of equal priority.
    pub(super) serve_counter: u64,
    /// Body bytes of ready, delayed and dead-lettering messages.
    pub(super) queued_bytes: u64,
    /// At-least-once dead letters waiting.
    pub(super) dead_lettering: u64,
    /// reject-publish is refusing publishes (see [`QuorumQueue::update_reject_publish`]).
    pub(super) rejecting: bool,
    pub(super) counters: Counters,
}

impl QuorumQueue {
    /// An empty queue with these settings.
    pub fn new(config: QuorumConfig) -> QuorumQueue {
        QuorumQueue {
            config,
            messages: BTreeMap::new(),
            ready: BTreeSet::new(),
            expiring: BTreeSet::new(),
            delayed: BTreeSet::new(),
            checkouts: BTreeSet::new(),
            consumers: BTreeMap::new(),
            publishers: BTreeMap::new(),
            active: None,
            next_id: 1,
            next_consumer: 1,
            serve_counter: 0,
            queued_bytes: 0,
            dead_lettering: 0,
            rejecting: false,
            counters: Counters::default(),
        }
    }

    /// The owners (connections, channels) of the consumers attached now: a member that
    /// restarts proposes `Down` for each, since none of them survived the restart.
    pub fn owners(&self) -> Vec<u64> {
        let mut owners: Vec<u64> = self.consumers.values().map(|c| c.owner).collect();
        owners.sort_unstable();
        owners.dedup();
        owners
    }

    /// Whether `x-overflow: reject-publish` refuses publishes now.
    pub fn is_rejecting(&self) -> bool {
        self.rejecting
    }

    /// The queue's settings.
    pub fn config(&self) -> &QuorumConfig {
        &self.config
    }

    /// Applies one committed command at `now` (Unix ms, the time the leader stamped on the
    /// log entry). Deterministic: the same commands at the same times give the same state,
    /// replies and effects on every member.
    pub fn apply(&mut self, now: u64, command: Command) -> Applied {
        if let Command::Batch(commands) = command {
            return self.apply_batch(now, commands);
        }
        let mut effects = Vec::new();
        self.fall_due(now, &mut effects);
        self.update_reject_publish();
        let reply = match command {
            Command::Enqueue { publish, message } => self.enqueue(now, publish, message),
            Command::PublisherDown { publisher } => {
                self.publishers.remove(&publisher);
                Reply::Ok
            }
            Command::Attach {
                owner,
                tag,
                mode,
                priority,
                auto_ack,
                timeout,
            } => {
                let credit = match mode {
                    CreditMode::Prefetch(window) => cap_credit(window),
                    CreditMode::Credited => 0,
                };
                let consumer = Consumer {
                    owner,
                    tag,
                    mode: match mode {
                        CreditMode::Prefetch(window) => CreditMode::Prefetch(cap_credit(window)),
                        other => other,
                    },
                    priority,
                    auto_ack,
                    credit,
                    checked_out: BTreeSet::new(),
                    cancelled: false,
                    get_only: false,
                    timeout,
                    timed_out: BTreeSet::new(),
                    last_served: 0,
                };
                self.attach(consumer, &mut effects)
            }
            Command::Credit {
                consumer,
                credit,
                drain,
            } => self.credit(now, consumer, credit, drain, &mut effects),
            Command::Cancel { consumer } => self.cancel(consumer),
            Command::Settle {
                consumer,
                ids,
                outcome,
            } => self.settle(now, consumer, &ids, outcome, &mut effects),
            Command::Down { owner } => {
                let gone: Vec<ConsumerKey> = self
                    .consumers
                    .iter()
                    .filter(|(_, c)| c.owner == owner)
                    .map(|(key, _)| *key)
                    .collect();
                for key in gone {
                    self.remove_consumer(key, &mut effects);
                }
                Reply::Ok
            }
            Command::Dequeue { owner, auto_ack } => {
                self.dequeue(now, owner, auto_ack, &mut effects)
            }
            Command::DeadLetterSettled { ids } => {
                for id in ids {
                    if let Some(Place::DeadLettering(_)) = self.messages.get(&id).map(|e| e.place) {
                        self.forget(id);
                        self.dead_lettering -= 1;
                    }
                }
                Reply::Ok
            }
            Command::Purge => {
                let ids: Vec<u64> = self
                    .messages
                    .iter()
                    .filter(|(_, e)| matches!(e.place, Place::Ready | Place::Delayed))
                    .map(|(id, _)| *id)
                    .collect();
                for &id in &ids {
                    self.unqueue(id);
                    self.forget(id);
                }
                Reply::Purged {
                    count: ids.len() as u64,
                }
            }
            Command::Tick => Reply::Ok,
            // Taken above.
            Command::Batch(_) => Reply::Ok,
            Command::Configure(config) => {
                let (name, single_active_consumer) = (
                    std::mem::take(&mut self.config.name),
                    self.config.single_active_consumer,
                );
                self.config = QuorumConfig {
                    name,
                    single_active_consumer,
                    ..config
                };
                Reply::Ok
            }
        };
        self.settle_active_consumer(&mut effects);
        self.dispatch(now, &mut effects);
        self.enforce_drop_head(&mut effects);
        self.update_reject_publish();
        // A message whose TTL is already over (TTL 0, or returned after it passed) goes now
        // unless the dispatch above could hand it out at once.
        self.expire(now, &mut effects);
        Applied { reply, effects }
    }

    /// A [`Command::Batch`]: each command applied in turn at `now`, as separate entries
    /// stamped `now` would be; the replies in order, the effects concatenated.
    fn apply_batch(&mut self, now: u64, commands: Vec<Command>) -> Applied {
        let mut replies = Vec::with_capacity(commands.len());
        let mut effects = Vec::new();
        for command in commands {
            let applied = self.apply(now, command);
            replies.push(applied.reply);
            effects.extend(applied.effects);
        }
        Applied {
            reply: Reply::Batch(replies),
            effects,
        }
    }

    /// The earliest time (Unix ms) at which a [`Command::Tick`] would change something: a
    /// delayed message falls due, a TTL passes or a delivery times out.
    pub fn next_timer(&self) -> Option<u64> {
        let delayed = self.delayed.first().map(|&(at, _)| at);
        let expiry = self.expiring.first().map(|&(at, _)| at);
        let timeout = self
            .checkouts
            .first()
            .map(|&(deadline, _)| deadline)
            .filter(|&deadline| deadline != u64::MAX);
        [delayed, expiry, timeout].into_iter().flatten().min()
    }

    /// The queue's counters.
    pub fn stats(&self) -> QuorumStats {
        let c = &self.counters;
        QuorumStats {
            ready: self.ready.len() as u64,
            delayed: self.delayed.len() as u64,
            unacknowledged: self.checkouts.len() as u64,
            dead_letter_pending: self.dead_lettering,
            consumers: self.consumers.values().filter(|c| !c.get_only).count() as u64,
            bytes: self.queued_bytes,
            enqueued: c.enqueued,
            duplicates: c.duplicates,
            rejected_publishes: c.rejected_publishes,
            delivered: c.delivered,
            acknowledged: c.acknowledged,
            returned: c.returned,
            expired: c.expired,
            dead_lettered: c.dead_lettered,
            dropped: c.dropped,
            delivery_limit_reached: c.delivery_limit_reached,
        }
    }

    /// Ids delivered to a consumer and not settled, in id order.
    pub fn checked_out(&self, consumer: ConsumerKey) -> Vec<u64> {
        self.consumers
            .get(&consumer)
            .map(|c| c.checked_out.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The single active consumer, when the queue has `x-single-active-consumer`.
    pub fn active_consumer(&self) -> Option<ConsumerKey> {
        self.active
    }

    /// Up to `limit` ready messages in delivery order, without taking them (the management
    /// UI's peek, the queue-type interface's browse).
    pub fn peek(&self, limit: usize) -> Vec<Arc<Message>> {
        self.ready
            .iter()
            .take(limit)
            .filter_map(|(_, _, id)| self.messages.get(id))
            .map(|entry| Arc::clone(&entry.message))
            .collect()
    }

    /// Delayed messages in the order they become available: (delivery time, id).
    pub fn delayed(&self) -> Vec<(u64, u64)> {
        self.delayed.iter().copied().collect()
    }

    /// The at-least-once dead letters still waiting for a confirm, for a new leader to send
    /// again.
    pub fn pending_dead_letters(&self) -> Vec<Effect> {
        let exchange = self.config.dead_letter_exchange.clone().unwrap_or_default();
        self.messages
            .iter()
            .filter_map(|(id, entry)| match entry.place {
                Place::DeadLettering(reason) => Some(Effect::DeadLetter {
                    id: *id,
                    message: Arc::clone(&entry.message),
                    reason,
                    exchange: exchange.clone(),
                    routing_key: self.config.dead_letter_routing_key.clone(),
                    at_least_once: true,
                }),
                _ => None,
            })
            .collect()
    }

    /// Messages in the queue in any state (ready, delayed, unsettled, dead-lettering).
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// No message in the queue in any state.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    // ----- time -----

    /// Delayed messages whose time came become ready (in time order), TTLs that passed
    /// expire, deliveries unsettled past the consumer timeout time their consumer out.
    pub(super) fn fall_due(&mut self, now: u64, effects: &mut Vec<Effect>) {
        while let Some(&(at, id)) = self.delayed.first() {
            if at > now {
                break;
            }
            self.delayed.remove(&(at, id));
            let order = self.draw_id();
            if let Some(entry) = self.messages.get_mut(&id) {
                self.queued_bytes -= entry.length;
                entry.order = order;
                entry.deliver_at = None;
                // A fresh delayed message's TTL starts now; a returned one keeps its expiry.
                entry.expires_at = entry
                    .expires_at
                    .or_else(|| entry.ttl.map(|ttl| at.saturating_add(ttl)));
            }
            self.make_ready(id);
        }
        self.expire(now, effects);
        while let Some(&(deadline, id)) = self.checkouts.first() {
            if deadline > now {
                break;
            }
            let Some(Place::CheckedOut(key)) = self.messages.get(&id).map(|e| e.place) else {
                self.checkouts.remove(&(deadline, id));
                continue;
            };
            self.time_out(key, now, effects);
        }
    }

    /// Ready messages whose TTL passed leave the queue (dead-lettered with reason `expired`).
    pub(super) fn expire(&mut self, now: u64, effects: &mut Vec<Effect>) {
        while let Some(&(at, id)) = self.expiring.first() {
            if at > now {
                break;
            }
            self.unqueue(id);
            self.counters.expired += 1;
            self.dead_letter(id, DeathReason::Expired, effects);
        }
    }

    // ----- commands -----

    pub(super) fn enqueue(
        &mut self,
        now: u64,
        publish: Option<PublishId>,
        message: Arc<Message>,
    ) -> Reply {
        if let Some(publish) = publish {
            if self
                .publishers
                .get(&publish.publisher)
                .is_some_and(|&last| publish.sequence <= last)
            {
                self.counters.duplicates += 1;
                return Reply::Duplicate;
            }
        }
        if self.rejecting {
            self.counters.rejected_publishes += 1;
            return Reply::Rejected;
        }
        if let Some(publish) = publish {
            self.publishers.insert(publish.publisher, publish.sequence);
        }
        let id = self.draw_id();
        let ttl = [self.config.message_ttl, message.properties.expiration_ms()]
            .into_iter()
            .flatten()
            .min();
        let deliver_at = delivery_time(&message).filter(|&at| at > now);
        let priority = message
            .properties
            .priority
            .unwrap_or(DEFAULT_PRIORITY)
            .min(PRIORITY_LEVELS - 1);
        let entry = Entry {
            length: message.body.len() as u64,
            message,
            priority,
            order: id,
            delivery_count: 0,
            acquired: 0,
            expires_at: match deliver_at {
                Some(_) => None,
                None => ttl.map(|ttl| now.saturating_add(ttl)),
            },
            ttl,
            deliver_at,
            place: Place::Ready,
            deadline: u64::MAX,
        };
        self.messages.insert(id, entry);
        match deliver_at {
            Some(at) => {
                if let Some(entry) = self.messages.get_mut(&id) {
                    entry.place = Place::Delayed;
                    self.queued_bytes += entry.length;
                }
                self.delayed.insert((at, id));
            }
            None => self.make_ready(id),
        }
        self.counters.enqueued += 1;
        Reply::Enqueued { id }
    }

    pub(super) fn attach(&mut self, consumer: Consumer, effects: &mut Vec<Effect>) -> Reply {
        let key = ConsumerKey(self.next_consumer);
        self.next_consumer += 1;
        self.consumers.insert(key, consumer);
        self.settle_active_consumer(effects);
        Reply::Attached {
            consumer: key,
            active: !self.config.single_active_consumer || self.active == Some(key),
        }
    }

    pub(super) fn credit(
        &mut self,
        now: u64,
        key: ConsumerKey,
        credit: u32,
        drain: bool,
        effects: &mut Vec<Effect>,
    ) -> Reply {
        let Some(consumer) = self.consumers.get_mut(&key) else {
            return Reply::UnknownConsumer;
        };
        consumer.credit = credit.min(MAX_PREFETCH);
        if drain {
            self.settle_active_consumer(effects);
            self.dispatch(now, effects);
            if let Some(consumer) = self.consumers.get_mut(&key) {
                let left = std::mem::take(&mut consumer.credit);
                effects.push(Effect::CreditDrained {
                    consumer: key,
                    credit: left,
                });
            }
        }
        Reply::Ok
    }

    pub(super) fn cancel(&mut self, key: ConsumerKey) -> Reply {
        let Some(consumer) = self.consumers.get_mut(&key) else {
            return Reply::UnknownConsumer;
        };
        consumer.cancelled = true;
        if consumer.checked_out.is_empty() {
            self.consumers.remove(&key);
        }
        Reply::Ok
    }

    pub(super) fn settle(
        &mut self,
        now: u64,
        key: ConsumerKey,
        ids: &[u64],
        outcome: Outcome,
        effects: &mut Vec<Effect>,
    ) -> Reply {
        let Some(consumer) = self.consumers.get_mut(&key) else {
            return Reply::UnknownConsumer;
        };
        // Settling what timed out resumes the consumer; the messages went back already.
        for id in ids {
            consumer.timed_out.remove(id);
        }
        let owned: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| consumer.checked_out.remove(id))
            .collect();
        for id in owned {
            self.check_in(id);
            match &outcome {
                Outcome::Ack => {
                    self.counters.acknowledged += 1;
                    self.forget(id);
                }
                Outcome::Requeue => self.give_back(id, true, effects),
                Outcome::Release => self.give_back(id, false, effects),
                Outcome::Reject => self.dead_letter(id, DeathReason::Rejected, effects),
                Outcome::Modify {
                    delivery_failed,
                    undeliverable_here,
                    annotations,
                } => {
                    if !annotations.is_empty() {
                        if let Some(entry) = self.messages.get_mut(&id) {
                            entry.message = annotated(&entry.message, annotations);
                        }
                    }
                    let delay = annotations
                        .get(DELIVERY_TIME_HEADER)
                        .and_then(|v| v.as_i64())
                        .and_then(|at| u64::try_from(at).ok())
                        .filter(|&at| at > now);
                    if *undeliverable_here {
                        self.dead_letter(id, DeathReason::Rejected, effects);
                    } else {
                        self.give_back_at(id, *delivery_failed, delay, effects);
                    }
                }
            }
        }
        if self
            .consumers
            .get(&key)
            .is_some_and(|c| (c.cancelled || c.get_only) && c.checked_out.is_empty())
        {
            self.consumers.remove(&key);
        }
        Reply::Ok
    }

    pub(super) fn dequeue(
        &mut self,
        now: u64,
        owner: u64,
        auto_ack: bool,
        effects: &mut Vec<Effect>,
    ) -> Reply {
        let Some(id) = self.take_next(now, effects) else {
            return Reply::Empty;
        };
        let consumer = if auto_ack {
            None
        } else {
            let existing = self
                .consumers
                .iter()
                .find(|(_, c)| c.get_only && c.owner == owner)
                .map(|(key, _)| *key);
            Some(existing.unwrap_or_else(|| {
                let key = ConsumerKey(self.next_consumer);
                self.next_consumer += 1;
                self.consumers.insert(
                    key,
                    Consumer {
                        owner,
                        tag: String::new(),
                        mode: CreditMode::Credited,
                        priority: 0,
                        auto_ack: false,
                        credit: 0,
                        checked_out: BTreeSet::new(),
                        cancelled: false,
                        get_only: true,
                        timeout: None,
                        timed_out: BTreeSet::new(),
                        last_served: 0,
                    },
                );
                key
            }))
        };
        let Some(delivered) = self.hand_out(id, consumer, now) else {
            return Reply::Empty;
        };
        Reply::Dequeued {
            consumer,
            delivered,
            remaining: self.ready.len() as u64,
        }
    }
}

/// A message's `x-opt-delivery-time` (Unix ms), when it has a valid one.
pub(super) fn delivery_time(message: &Message) -> Option<u64> {
    let headers = message.properties.headers.as_ref()?;
    let at = headers.get(DELIVERY_TIME_HEADER)?.as_i64()?;
    u64::try_from(at).ok()
}

/// A copy of `message` with `annotations` merged into its headers (AMQP 1.0 `modified`).
pub(super) fn annotated(message: &Arc<Message>, annotations: &crate::value::Table) -> Arc<Message> {
    let mut copy = Message::clone(message);
    let headers = copy.properties.headers.get_or_insert_with(Default::default);
    for (key, value) in annotations.iter() {
        headers.insert(key, value.clone());
    }
    copy.encoded_properties = None;
    Arc::new(copy)
}
