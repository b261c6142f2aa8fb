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
    let alive =
        |weak: &[std::sync::Weak<Message>]| weak.iter().filter(|w| w.upgrade().is_some()).count();
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

#[test]
fn a_classic_queue_resolves_modify_as_rabbitmq_4_does() {
    let modify = |delivery_failed, undeliverable_here| Settlement::Modify {
        delivery_failed,
        undeliverable_here,
    };
    assert_eq!(modify(true, true).for_classic(), Settlement::Reject);
    assert_eq!(modify(false, true).for_classic(), Settlement::Reject);
    assert_eq!(modify(true, false).for_classic(), Settlement::Requeue);
    assert_eq!(modify(false, false).for_classic(), Settlement::Release);
    assert_eq!(Settlement::Ack.for_classic(), Settlement::Ack);
    // Through the queue: a failed delivery counts, a plain modify does not.
    let q = queue(false);
    q.enqueue(message("m"));
    let (first, _) = q.get(true).unwrap();
    q.settle(&[first.id], modify(true, false));
    let (second, _) = q.get(true).unwrap();
    assert_eq!(second.delivery_count, 1);
    q.settle(&[second.id], modify(false, false));
    let (third, _) = q.get(true).unwrap();
    assert_eq!(third.delivery_count, 1);
}

#[test]
fn peek_reads_by_position_without_taking_and_shows_redeliveries() {
    let queue = queue(false);
    for body in ["a", "b", "c", "d"] {
        queue.enqueue(message(body));
    }
    let bodies = |peeked: Vec<(Arc<Message>, bool)>| -> Vec<(Bytes, bool)> {
        peeked
            .into_iter()
            .map(|(m, redelivered)| (m.body.clone(), redelivered))
            .collect()
    };
    assert_eq!(
        bodies(queue.peek(1, 2)),
        [(Bytes::from("b"), false), (Bytes::from("c"), false)]
    );
    assert_eq!(bodies(queue.peek(3, 10)), [(Bytes::from("d"), false)]);
    assert!(queue.peek(4, 10).is_empty());
    assert_eq!(queue.stats().ready, 4, "peeking takes nothing");
    // A message taken and requeued is back at the head, marked redelivered; one still
    // unacknowledged is not ready and not peeked.
    let (first, _) = queue.get(true).unwrap();
    let (second, _) = queue.get(true).unwrap();
    queue.settle(&[first.id], Settlement::Requeue);
    assert_eq!(
        bodies(queue.peek(0, 2)),
        [(Bytes::from("a"), true), (Bytes::from("c"), false)]
    );
    queue.settle(&[second.id], Settlement::Ack);
    assert_eq!(queue.stats().ready, 3);
}
