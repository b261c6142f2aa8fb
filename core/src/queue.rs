//! Classic queues: ready messages in order, unsettled deliveries, consumers and dispatch.
//!
//! Each queue guards its own state with its own lock, so queues scale with cores and the
//! publish path never waits on another queue. The publisher's task enqueues and, while a
//! consumer has credit, hands the message straight to the consumer's sink under the same lock:
//! no extra task hop on the hot path.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::consumer::{ConsumerSpec, Delivery, DeliverySink};
use crate::error::{resource, CoreError, CoreResult};
use crate::message::Message;
use crate::value::Table;

/// How a listener settles deliveries it received from a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Processed: forget the message (basic.ack, accepted, MQTT PUBACK, STOMP ACK).
    Ack,
    /// Put back in the queue at its original position, marked redelivered.
    Requeue,
    /// Refused without requeue: dead-lettered where configured, otherwise dropped.
    Reject,
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
}

struct ReadyMessage {
    id: u64,
    message: Arc<Message>,
    redelivered: bool,
}

struct UnsettledMessage {
    message: Arc<Message>,
}

struct AttachedConsumer {
    id: u64,
    spec: ConsumerSpec,
    sink: Arc<dyn DeliverySink>,
}

#[derive(Default)]
struct QueueState {
    /// Ready messages in id order; requeued messages are put back at their position.
    ready: VecDeque<ReadyMessage>,
    unsettled: HashMap<u64, UnsettledMessage>,
    /// Sorted by priority, highest first (stable, so equal priorities keep attach order).
    consumers: Vec<AttachedConsumer>,
    next_round_robin: usize,
    next_message_id: u64,
    had_consumers: bool,
    deleted: bool,
    stats: QueueStats,
}

/// A classic queue.
pub struct Queue {
    config: QueueConfig,
    state: Mutex<QueueState>,
}

static NEXT_CONSUMER_ID: AtomicU64 = AtomicU64::new(1);

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
    pub fn new(config: QueueConfig) -> Arc<Queue> {
        Arc::new(Queue {
            config,
            state: Mutex::new(QueueState::default()),
        })
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

    /// A snapshot of the queue's counters.
    pub fn stats(&self) -> QueueStats {
        let state = self.state.lock();
        QueueStats {
            ready: state.ready.len() as u64,
            unacknowledged: state.unsettled.len() as u64,
            consumers: state.consumers.len() as u64,
            ..state.stats
        }
    }

    /// Appends a message and hands ready messages to consumers with credit.
    pub fn enqueue(self: &Arc<Self>, message: Arc<Message>) {
        let mut state = self.state.lock();
        if state.deleted {
            return;
        }
        let id = state.next_message_id;
        state.next_message_id += 1;
        state.stats.published += 1;
        state.ready.push_back(ReadyMessage {
            id,
            message,
            redelivered: false,
        });
        self.dispatch_locked(&mut state);
    }

    /// Hands ready messages to consumers while they have credit. Listeners call this when a
    /// consumer's credit frees up after [`DeliverySink::reserve`] refused.
    pub fn dispatch(self: &Arc<Self>) {
        let mut state = self.state.lock();
        self.dispatch_locked(&mut state);
    }

    fn dispatch_locked(self: &Arc<Self>, state: &mut QueueState) {
        while !state.ready.is_empty() && !state.consumers.is_empty() {
            let Some(index) = Self::next_consumer_with_credit(state) else {
                return;
            };
            let Some(ready) = state.ready.pop_front() else {
                return;
            };
            let consumer = &state.consumers[index];
            let needs_settlement = consumer.spec.needs_settlement;
            let sink = Arc::clone(&consumer.sink);
            if needs_settlement {
                state.unsettled.insert(
                    ready.id,
                    UnsettledMessage {
                        message: Arc::clone(&ready.message),
                    },
                );
            }
            state.stats.delivered += 1;
            sink.deliver(Delivery {
                queue: Arc::clone(self),
                id: ready.id,
                message: ready.message,
                redelivered: ready.redelivered,
                needs_settlement,
            });
        }
    }

    /// Picks the next consumer to deliver to: the highest priority group that has credit,
    /// round-robin within the group. Reserves credit on the chosen sink.
    fn next_consumer_with_credit(state: &mut QueueState) -> Option<usize> {
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
        let ready = state.ready.pop_front()?;
        if needs_settlement {
            state.unsettled.insert(
                ready.id,
                UnsettledMessage {
                    message: Arc::clone(&ready.message),
                },
            );
        }
        state.stats.delivered += 1;
        let remaining = state.ready.len() as u64;
        let delivery = Delivery {
            queue: Arc::clone(self),
            id: ready.id,
            message: ready.message,
            redelivered: ready.redelivered,
            needs_settlement,
        };
        Some((delivery, remaining))
    }

    /// Settles unsettled deliveries by id. Unknown ids (already settled, or the queue was
    /// purged or deleted meanwhile) are ignored: the listener validates its own tags.
    pub fn settle(self: &Arc<Self>, ids: &[u64], settlement: Settlement) {
        let mut state = self.state.lock();
        match settlement {
            Settlement::Ack | Settlement::Reject => {
                for id in ids {
                    if state.unsettled.remove(id).is_some() {
                        if settlement == Settlement::Ack {
                            state.stats.acknowledged += 1;
                        } else {
                            state.stats.dropped += 1;
                        }
                    }
                }
            }
            Settlement::Requeue => {
                for &id in ids {
                    if let Some(unsettled) = state.unsettled.remove(&id) {
                        let position = state.ready.partition_point(|m| m.id < id);
                        state.ready.insert(
                            position,
                            ReadyMessage {
                                id,
                                message: unsettled.message,
                                redelivered: true,
                            },
                        );
                    }
                }
                if !state.deleted {
                    self.dispatch_locked(&mut state);
                }
            }
        }
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
        let position = state
            .consumers
            .partition_point(|c| c.spec.priority >= spec.priority);
        state
            .consumers
            .insert(position, AttachedConsumer { id, spec, sink });
        state.had_consumers = true;
        self.dispatch_locked(&mut state);
        Ok(id)
    }

    /// Detaches a consumer. Its unsettled deliveries stay unsettled (AMQP 0-9-1 lets a
    /// channel settle them after cancelling).
    pub fn remove_consumer(&self, consumer_id: u64) -> ConsumerRemoval {
        let mut state = self.state.lock();
        let Some(index) = state.consumers.iter().position(|c| c.id == consumer_id) else {
            return ConsumerRemoval::NotAttached;
        };
        state.consumers.remove(index);
        if state.consumers.is_empty() && self.config.auto_delete && state.had_consumers {
            ConsumerRemoval::LastOfAutoDelete
        } else {
            ConsumerRemoval::Removed
        }
    }

    /// Drops every ready message, returning how many there were. Unsettled deliveries are
    /// not touched, as in RabbitMQ.
    pub fn purge(&self) -> u64 {
        let mut state = self.state.lock();
        let count = state.ready.len() as u64;
        state.ready.clear();
        count
    }

    /// Marks the queue deleted, drops its messages and tells every consumer it was cancelled.
    /// Returns the number of ready messages it held.
    pub(crate) fn mark_deleted(&self) -> u64 {
        let (count, consumers) = {
            let mut state = self.state.lock();
            state.deleted = true;
            let count = state.ready.len() as u64;
            state.ready.clear();
            state.unsettled.clear();
            (count, std::mem::take(&mut state.consumers))
        };
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

    fn message(body: &'static str) -> Arc<Message> {
        Arc::new(Message {
            exchange: String::new(),
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
}
