//! One test per rule of the quorum queue state machine, driven by commands and times.

use std::sync::Arc;

use bytes::Bytes;

use super::codec::{decode_command, decode_snapshot, encode_command, encode_snapshot};
use super::*;
use crate::message::{Message, Properties};
use crate::queue::{DeathReason, Overflow};
use crate::value::{Table, Value};

fn message(body: &str) -> Arc<Message> {
    Arc::new(Message {
        exchange: Arc::from("orders"),
        routing_key: Arc::from("eu"),
        properties: Properties::default(),
        encoded_properties: None,
        body: Bytes::copy_from_slice(body.as_bytes()),
    })
}

fn with_properties(body: &str, change: impl FnOnce(&mut Properties)) -> Arc<Message> {
    let mut m = Message::clone(&message(body));
    change(&mut m.properties);
    Arc::new(m)
}

fn delayed(body: &str, at: u64) -> Arc<Message> {
    with_properties(body, |p| {
        let mut headers = Table::new();
        headers.insert(DELIVERY_TIME_HEADER, Value::I64(at as i64));
        p.headers = Some(headers);
    })
}

fn body(delivered: &Delivered) -> String {
    String::from_utf8(delivered.message.body.to_vec()).unwrap()
}

/// A queue under test, remembering every effect so far.
struct Harness {
    queue: QuorumQueue,
    now: u64,
    effects: Vec<Effect>,
}

impl Harness {
    fn new(config: QuorumConfig) -> Harness {
        Harness {
            queue: QuorumQueue::new(config),
            now: 1_000_000,
            effects: Vec::new(),
        }
    }

    fn plain() -> Harness {
        Harness::new(QuorumConfig::new("q"))
    }

    fn apply(&mut self, command: Command) -> Reply {
        // Every command goes through the log encoding, as it would in Raft.
        let mut bytes = Vec::new();
        encode_command(&mut bytes, &command);
        let command = decode_command(&bytes).expect("command round-trips");
        let applied = self.queue.apply(self.now, command);
        self.effects.extend(applied.effects);
        applied.reply
    }

    fn publish(&mut self, message: Arc<Message>) -> Reply {
        self.apply(Command::Enqueue {
            publish: None,
            message,
        })
    }

    fn publish_text(&mut self, text: &str) -> u64 {
        match self.publish(message(text)) {
            Reply::Enqueued { id } => id,
            other => panic!("publish of {text}: {other:?}"),
        }
    }

    fn attach(&mut self, owner: u64, prefetch: u32, priority: i32) -> ConsumerKey {
        match self.apply(Command::Attach {
            owner,
            tag: format!("ctag-{owner}"),
            mode: CreditMode::Prefetch(prefetch),
            priority,
            auto_ack: false,
            timeout: None,
        }) {
            Reply::Attached { consumer, .. } => consumer,
            other => panic!("attach: {other:?}"),
        }
    }

    fn settle(&mut self, consumer: ConsumerKey, ids: &[u64], outcome: Outcome) {
        let reply = self.apply(Command::Settle {
            consumer,
            ids: ids.to_vec(),
            outcome,
        });
        assert!(matches!(reply, Reply::Ok), "{reply:?}");
    }

    fn tick(&mut self, to: u64) {
        self.now = to;
        self.apply(Command::Tick);
    }

    /// Deliveries made since the last call, as (consumer, delivered).
    fn deliveries(&mut self) -> Vec<(ConsumerKey, Delivered)> {
        let mut out = Vec::new();
        self.effects.retain(|effect| match effect {
            Effect::Deliver {
                consumer,
                delivered,
            } => {
                out.push((*consumer, delivered.clone()));
                false
            }
            _ => true,
        });
        out
    }

    fn bodies(&mut self) -> Vec<String> {
        self.deliveries().iter().map(|(_, d)| body(d)).collect()
    }

    /// Dead letters since the last call, as (body, reason, at_least_once).
    fn dead_letters(&mut self) -> Vec<(String, DeathReason, bool, u64)> {
        let mut out = Vec::new();
        self.effects.retain(|effect| match effect {
            Effect::DeadLetter {
                id,
                message,
                reason,
                at_least_once,
                ..
            } => {
                out.push((
                    String::from_utf8(message.body.to_vec()).unwrap(),
                    *reason,
                    *at_least_once,
                    *id,
                ));
                false
            }
            _ => true,
        });
        out
    }

    fn get(&mut self, owner: u64) -> Option<(Option<ConsumerKey>, Delivered)> {
        match self.apply(Command::Dequeue {
            owner,
            auto_ack: false,
        }) {
            Reply::Dequeued {
                consumer,
                delivered,
                ..
            } => Some((consumer, delivered)),
            Reply::Empty => None,
            other => panic!("dequeue: {other:?}"),
        }
    }

    /// The state after a snapshot round trip equals the live one.
    fn assert_snapshot_round_trips(&self) {
        let bytes = encode_snapshot(&self.queue);
        let restored = decode_snapshot(&bytes).expect("snapshot decodes");
        assert_eq!(encode_snapshot(&restored), bytes);
        assert_eq!(restored.stats(), self.queue.stats());
    }
}

fn config(change: impl FnOnce(&mut QuorumConfig)) -> QuorumConfig {
    let mut c = QuorumConfig::new("q");
    change(&mut c);
    c
}

fn with_dlx(change: impl FnOnce(&mut QuorumConfig)) -> QuorumConfig {
    config(|c| {
        c.dead_letter_exchange = Some("dlx".into());
        change(c);
    })
}

// ----- publishing -----

#[test]
fn a_publish_waits_ready_and_goes_to_the_first_consumer() {
    let mut h = Harness::plain();
    h.publish_text("a");
    assert_eq!(h.queue.stats().ready, 1);
    let c = h.attach(1, 10, 0);
    let delivered = h.deliveries();
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].0, c);
    assert!(!delivered[0].1.redelivered);
    assert_eq!(delivered[0].1.delivery_count, 0);
    assert_eq!(h.queue.stats().unacknowledged, 1);
    assert_eq!(h.queue.stats().ready, 0);
}

#[test]
fn a_publish_retried_with_the_same_publisher_and_sequence_is_applied_once() {
    let mut h = Harness::plain();
    let publish = Some(PublishId {
        publisher: 7,
        sequence: 1,
    });
    let first = h.apply(Command::Enqueue {
        publish,
        message: message("a"),
    });
    assert!(matches!(first, Reply::Enqueued { .. }));
    let again = h.apply(Command::Enqueue {
        publish,
        message: message("a"),
    });
    assert!(matches!(again, Reply::Duplicate));
    let next = h.apply(Command::Enqueue {
        publish: Some(PublishId {
            publisher: 7,
            sequence: 2,
        }),
        message: message("b"),
    });
    assert!(matches!(next, Reply::Enqueued { .. }));
    // Another publisher's sequence numbers are its own.
    let other = h.apply(Command::Enqueue {
        publish: Some(PublishId {
            publisher: 8,
            sequence: 1,
        }),
        message: message("c"),
    });
    assert!(matches!(other, Reply::Enqueued { .. }));
    assert_eq!(h.queue.stats().ready, 3);
    assert_eq!(h.queue.stats().duplicates, 1);
}

#[test]
fn a_publisher_that_went_down_is_forgotten() {
    let mut h = Harness::plain();
    let publish = Some(PublishId {
        publisher: 7,
        sequence: 5,
    });
    h.apply(Command::Enqueue {
        publish,
        message: message("a"),
    });
    h.apply(Command::PublisherDown { publisher: 7 });
    assert!(h.queue.publishers.is_empty());
    let again = h.apply(Command::Enqueue {
        publish,
        message: message("a"),
    });
    assert!(matches!(again, Reply::Enqueued { .. }));
}

// ----- credit -----

#[test]
fn prefetch_bounds_unsettled_deliveries_and_acks_free_room() {
    let mut h = Harness::plain();
    for text in ["a", "b", "c"] {
        h.publish_text(text);
    }
    let c = h.attach(1, 2, 0);
    let first = h.deliveries();
    assert_eq!(first.len(), 2);
    h.settle(c, &[first[0].1.id], Outcome::Ack);
    assert_eq!(h.bodies(), vec!["c"]);
    assert_eq!(h.queue.stats().acknowledged, 1);
}

#[test]
fn prefetch_is_capped_at_two_thousand_and_zero_means_the_cap() {
    for prefetch in [0, 5_000] {
        let mut h = Harness::plain();
        for i in 0..2_100 {
            h.publish_text(&i.to_string());
        }
        h.attach(1, prefetch, 0);
        assert_eq!(h.deliveries().len(), MAX_PREFETCH as usize, "{prefetch}");
        assert_eq!(h.queue.stats().ready, 100);
    }
}

#[test]
fn link_credit_is_granted_and_drained() {
    let mut h = Harness::plain();
    for text in ["a", "b", "c"] {
        h.publish_text(text);
    }
    let c = match h.apply(Command::Attach {
        owner: 1,
        tag: "link".into(),
        mode: CreditMode::Credited,
        priority: 0,
        auto_ack: false,
        timeout: None,
    }) {
        Reply::Attached { consumer, .. } => consumer,
        other => panic!("{other:?}"),
    };
    assert!(h.deliveries().is_empty(), "no credit, no delivery");
    h.apply(Command::Credit {
        consumer: c,
        credit: 2,
        drain: false,
    });
    assert_eq!(h.bodies(), vec!["a", "b"]);
    h.apply(Command::Credit {
        consumer: c,
        credit: 5,
        drain: true,
    });
    assert_eq!(h.bodies(), vec!["c"]);
    let drained: Vec<u32> = h
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::CreditDrained { credit, .. } => Some(*credit),
            _ => None,
        })
        .collect();
    assert_eq!(drained, vec![4]);
    h.publish_text("d");
    assert!(h.deliveries().is_empty(), "drained credit is gone");
}

#[test]
fn an_auto_ack_consumer_settles_on_delivery() {
    let mut h = Harness::plain();
    h.publish_text("a");
    h.apply(Command::Attach {
        owner: 1,
        tag: "t".into(),
        mode: CreditMode::Prefetch(10),
        priority: 0,
        auto_ack: true,
        timeout: None,
    });
    let delivered = h.deliveries();
    assert!(delivered[0].1.settled);
    assert!(h.queue.is_empty());
    assert_eq!(h.queue.stats().unacknowledged, 0);
}

// ----- settlement -----

#[test]
fn a_requeued_message_goes_back_to_its_position_redelivered_and_counted() {
    let mut h = Harness::plain();
    h.publish_text("a");
    h.publish_text("b");
    let c = h.attach(1, 1, 0);
    let first = h.deliveries();
    assert_eq!(body(&first[0].1), "a");
    h.settle(c, &[first[0].1.id], Outcome::Requeue);
    let again = h.deliveries();
    assert_eq!(body(&again[0].1), "a", "back at the head, before b");
    assert!(again[0].1.redelivered);
    assert_eq!(again[0].1.delivery_count, 1);
}

#[test]
fn a_released_message_is_redelivered_without_counting_a_failure() {
    let mut h = Harness::plain();
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    let first = h.deliveries();
    h.settle(c, &[first[0].1.id], Outcome::Release);
    let again = h.deliveries();
    assert!(again[0].1.redelivered);
    assert_eq!(again[0].1.delivery_count, 0);
}

#[test]
fn a_rejected_message_is_dead_lettered_with_reason_rejected_or_dropped_without_a_dlx() {
    let mut h = Harness::new(with_dlx(|_| {}));
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    let d = h.deliveries();
    h.settle(c, &[d[0].1.id], Outcome::Reject);
    let dead = h.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(
        (dead[0].0.as_str(), dead[0].1, dead[0].2),
        ("a", DeathReason::Rejected, false)
    );
    assert!(h.queue.is_empty());

    let mut h = Harness::plain();
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    let d = h.deliveries();
    h.settle(c, &[d[0].1.id], Outcome::Reject);
    assert!(h.dead_letters().is_empty());
    assert_eq!(h.queue.stats().dropped, 1);
    assert!(h.queue.is_empty());
}

#[test]
fn modify_with_delivery_failed_counts_and_merges_annotations() {
    let mut h = Harness::plain();
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    let d = h.deliveries();
    let mut annotations = Table::new();
    annotations.insert("x-opt-reason", Value::string("timeout"));
    h.settle(
        c,
        &[d[0].1.id],
        Outcome::Modify {
            delivery_failed: true,
            undeliverable_here: false,
            annotations,
        },
    );
    let again = h.deliveries();
    assert_eq!(again[0].1.delivery_count, 1);
    let headers = again[0].1.message.properties.headers.as_ref().unwrap();
    assert_eq!(
        headers.get("x-opt-reason").and_then(Value::as_str),
        Some("timeout")
    );
}

#[test]
fn modify_without_delivery_failed_does_not_count_and_undeliverable_here_dead_letters() {
    let mut h = Harness::new(with_dlx(|_| {}));
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    let d = h.deliveries();
    h.settle(
        c,
        &[d[0].1.id],
        Outcome::Modify {
            delivery_failed: false,
            undeliverable_here: false,
            annotations: Table::new(),
        },
    );
    let again = h.deliveries();
    assert_eq!(again[0].1.delivery_count, 0);
    h.settle(
        c,
        &[again[0].1.id],
        Outcome::Modify {
            delivery_failed: true,
            undeliverable_here: true,
            annotations: Table::new(),
        },
    );
    assert_eq!(h.dead_letters()[0].1, DeathReason::Rejected);
}

#[test]
fn settling_ids_a_consumer_does_not_hold_changes_nothing() {
    let mut h = Harness::plain();
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    let other = h.attach(2, 1, 0);
    let d = h.deliveries();
    assert_eq!(d[0].0, c);
    h.settle(other, &[d[0].1.id, 999], Outcome::Ack);
    assert_eq!(h.queue.stats().unacknowledged, 1);
    let unknown = h.apply(Command::Settle {
        consumer: ConsumerKey(77),
        ids: vec![d[0].1.id],
        outcome: Outcome::Ack,
    });
    assert!(matches!(unknown, Reply::UnknownConsumer));
}

// ----- delivery limit -----

#[test]
fn the_default_delivery_limit_is_twenty_failed_deliveries() {
    let mut h = Harness::new(with_dlx(|_| {}));
    h.publish_text("poison");
    let c = h.attach(1, 1, 0);
    for attempt in 0..=20u32 {
        let d = h.deliveries();
        assert_eq!(d.len(), 1, "attempt {attempt}");
        assert_eq!(d[0].1.delivery_count, attempt);
        h.settle(c, &[d[0].1.id], Outcome::Requeue);
    }
    assert!(h.deliveries().is_empty());
    let dead = h.dead_letters();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].1, DeathReason::DeliveryLimit);
    assert_eq!(h.queue.stats().delivery_limit_reached, 1);
}

#[test]
fn releases_do_not_count_toward_the_delivery_limit() {
    let mut h = Harness::new(config(|c| c.delivery_limit = Some(0)));
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    for _ in 0..30 {
        let d = h.deliveries();
        assert_eq!(d.len(), 1);
        h.settle(c, &[d[0].1.id], Outcome::Release);
    }
    let d = h.deliveries();
    h.settle(c, &[d[0].1.id], Outcome::Requeue);
    assert!(h.queue.is_empty(), "limit 0: the first failure drops it");
    assert_eq!(h.queue.stats().dropped, 1);
}

#[test]
fn delivery_limit_minus_one_means_no_limit() {
    let mut arguments = Table::new();
    arguments.insert("x-delivery-limit", Value::I64(-1));
    let mut h = Harness::new(QuorumConfig::from_arguments("q", &arguments).unwrap());
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    for _ in 0..100 {
        let d = h.deliveries();
        h.settle(c, &[d[0].1.id], Outcome::Requeue);
    }
    assert_eq!(h.deliveries()[0].1.delivery_count, 100);
}

// ----- consumers going away -----

#[test]
fn a_consumer_going_down_returns_its_messages_redelivered_and_counted() {
    let mut h = Harness::plain();
    h.publish_text("a");
    h.publish_text("b");
    h.attach(1, 10, 0);
    assert_eq!(h.deliveries().len(), 2);
    h.apply(Command::Down { owner: 1 });
    assert_eq!(h.queue.stats().ready, 2);
    assert_eq!(h.queue.stats().consumers, 0);
    h.attach(2, 10, 0);
    let again = h.deliveries();
    assert_eq!(
        again.iter().map(|(_, d)| body(d)).collect::<Vec<_>>(),
        vec!["a", "b"],
        "in their original order"
    );
    assert!(again
        .iter()
        .all(|(_, d)| d.redelivered && d.delivery_count == 1));
}

#[test]
fn a_cancelled_consumer_receives_nothing_more_but_may_still_settle() {
    let mut h = Harness::plain();
    h.publish_text("a");
    let c = h.attach(1, 10, 0);
    let d = h.deliveries();
    h.apply(Command::Cancel { consumer: c });
    h.publish_text("b");
    assert!(h.deliveries().is_empty());
    h.settle(c, &[d[0].1.id], Outcome::Ack);
    assert_eq!(h.queue.stats().acknowledged, 1);
    assert!(
        h.queue.consumers.is_empty(),
        "removed once nothing is unsettled"
    );
    assert_eq!(h.queue.stats().ready, 1);
}

#[test]
fn a_delivery_unsettled_past_the_consumer_timeout_is_returned_and_its_consumer_suspended() {
    let mut h = Harness::new(config(|c| c.consumer_timeout = Some(30_000)));
    h.publish_text("a");
    let slow = h.attach(1, 10, 0);
    let first = h.deliveries();
    let start = h.now;
    assert_eq!(h.queue.next_timer(), Some(start + 30_000));
    h.tick(start + 29_999);
    assert_eq!(h.queue.stats().unacknowledged, 1);
    h.tick(start + 30_000);
    let timed_out: Vec<(ConsumerKey, Vec<u64>)> = h
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::ConsumerTimedOut { consumer, ids, .. } => Some((*consumer, ids.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(timed_out, vec![(slow, vec![first[0].1.id])]);
    // Returned, redelivered, not counted as a failed delivery (RabbitMQ 4.3).
    assert_eq!(h.queue.stats().ready, 1);
    let other = h.attach(2, 10, 0);
    let again = h.deliveries();
    assert_eq!(again[0].0, other, "the suspended consumer gets nothing");
    assert!(again[0].1.redelivered);
    assert_eq!(again[0].1.delivery_count, 0);
    // The late ack changes nothing for the message, and resumes the consumer.
    h.settle(slow, &[first[0].1.id], Outcome::Ack);
    assert_eq!(h.queue.stats().acknowledged, 0);
    assert_eq!(h.queue.stats().unacknowledged, 1);
    h.apply(Command::Cancel { consumer: other });
    h.publish_text("b");
    assert_eq!(h.deliveries()[0].0, slow);
}

#[test]
fn a_consumers_own_timeout_overrides_the_queues_and_none_means_never() {
    let mut h = Harness::plain();
    h.apply(Command::Attach {
        owner: 1,
        tag: "quick".into(),
        mode: CreditMode::Prefetch(1),
        priority: 0,
        auto_ack: false,
        timeout: Some(100),
    });
    h.publish_text("a");
    h.deliveries();
    let start = h.now;
    assert_eq!(h.queue.next_timer(), Some(start + 100));
    h.tick(start + 100);
    assert_eq!(h.queue.stats().ready, 1);

    let mut h = Harness::plain();
    h.attach(1, 1, 0);
    h.publish_text("a");
    h.deliveries();
    assert_eq!(h.queue.next_timer(), None, "no timeout anywhere");
    h.tick(h.now + 86_400_000);
    assert_eq!(h.queue.stats().unacknowledged, 1);
}

// ----- consumer priorities and single active consumer -----

#[test]
fn higher_priority_consumers_receive_first_and_equals_take_turns() {
    let mut h = Harness::plain();
    let low = h.attach(1, 10, 0);
    let high_a = h.attach(2, 2, 5);
    let high_b = h.attach(3, 2, 5);
    for i in 0..6 {
        h.publish_text(&i.to_string());
    }
    let got: Vec<ConsumerKey> = h.deliveries().iter().map(|(c, _)| *c).collect();
    assert_eq!(got, vec![high_a, high_b, high_a, high_b, low, low]);
}

#[test]
fn single_active_consumer_delivers_to_one_and_fails_over_to_the_next() {
    let mut h = Harness::new(config(|c| c.single_active_consumer = true));
    let first = h.attach(1, 10, 0);
    let second = h.attach(2, 10, 0);
    assert_eq!(h.queue.active_consumer(), Some(first));
    h.publish_text("a");
    h.publish_text("b");
    let got = h.deliveries();
    assert!(got.iter().all(|(c, _)| *c == first));
    h.apply(Command::Down { owner: 1 });
    assert_eq!(h.queue.active_consumer(), Some(second));
    let again = h.deliveries();
    assert_eq!(again.len(), 2);
    assert!(again.iter().all(|(c, d)| *c == second && d.redelivered));
}

#[test]
fn a_higher_priority_single_active_consumer_takes_over_once_the_active_one_settled() {
    let mut h = Harness::new(config(|c| c.single_active_consumer = true));
    let low = h.attach(1, 10, 0);
    h.publish_text("a");
    let d = h.deliveries();
    let high = h.attach(2, 10, 9);
    h.publish_text("b");
    assert!(h.deliveries().is_empty(), "the active one finishes first");
    assert_eq!(h.queue.active_consumer(), Some(low));
    h.settle(low, &[d[0].1.id], Outcome::Ack);
    assert_eq!(h.queue.active_consumer(), Some(high));
    let got = h.deliveries();
    assert_eq!((got[0].0, body(&got[0].1)), (high, "b".to_string()));
    assert!(h.effects.iter().any(|e| matches!(
        e,
        Effect::ActiveChanged { consumer, active: false } if *consumer == low
    )));
}

// ----- priorities -----

#[test]
fn messages_are_delivered_by_priority_over_thirty_two_strict_levels() {
    let mut h = Harness::plain();
    for (text, priority) in [
        ("p0", Some(0)),
        ("none", None),
        ("p31", Some(31)),
        ("p200", Some(200)),
        ("p5", Some(5)),
    ] {
        h.publish(with_properties(text, |p| p.priority = priority));
    }
    h.attach(1, 10, 0);
    // 200 is capped at 31 and queues after the earlier 31; no priority is 4.
    assert_eq!(h.bodies(), vec!["p31", "p200", "p5", "none", "p0"]);
}

// ----- TTL -----

#[test]
fn a_message_ttl_expires_ready_messages_and_dead_letters_them() {
    let mut h = Harness::new(with_dlx(|c| c.message_ttl = Some(1_000)));
    h.publish_text("a");
    let start = h.now;
    h.publish(with_properties("short", |p| {
        p.expiration = Some("10".into())
    }));
    assert_eq!(h.queue.next_timer(), Some(start + 10));
    h.tick(start + 10);
    assert_eq!(h.dead_letters()[0].0, "short");
    h.tick(start + 999);
    assert_eq!(h.queue.stats().ready, 1);
    h.tick(start + 1_000);
    let dead = h.dead_letters();
    assert_eq!((dead[0].0.as_str(), dead[0].1), ("a", DeathReason::Expired));
    assert_eq!(h.queue.stats().expired, 2);
    assert!(h.queue.is_empty());
}

#[test]
fn a_ttl_of_zero_delivers_only_to_a_waiting_consumer() {
    let mut h = Harness::new(config(|c| c.message_ttl = Some(0)));
    h.publish_text("lost");
    assert!(h.queue.is_empty());
    h.attach(1, 1, 0);
    h.publish_text("kept");
    assert_eq!(h.bodies(), vec!["kept"]);
}

#[test]
fn unsettled_messages_do_not_expire_but_expire_once_returned_late() {
    let mut h = Harness::new(config(|c| c.message_ttl = Some(100)));
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    let d = h.deliveries();
    h.tick(h.now + 500);
    assert_eq!(h.queue.stats().unacknowledged, 1);
    h.settle(c, &[d[0].1.id], Outcome::Release);
    assert!(h.deliveries().is_empty());
    assert!(h.queue.is_empty());
    assert_eq!(h.queue.stats().expired, 1);
}

// ----- length limits -----

#[test]
fn drop_head_dead_letters_the_oldest_with_reason_maxlen() {
    let mut h = Harness::new(with_dlx(|c| c.max_length = Some(2)));
    for text in ["a", "b", "c"] {
        h.publish_text(text);
    }
    let dead = h.dead_letters();
    assert_eq!((dead[0].0.as_str(), dead[0].1), ("a", DeathReason::MaxLen));
    h.attach(1, 10, 0);
    assert_eq!(h.bodies(), vec!["b", "c"]);
}

#[test]
fn reject_publish_refuses_once_over_the_limit_until_back_at_eighty_percent() {
    let mut h = Harness::new(config(|c| {
        c.max_length = Some(5);
        c.overflow = Overflow::RejectPublish;
    }));
    for i in 0..6 {
        // The sixth crosses the limit and is still taken: RabbitMQ overshoots by one.
        assert!(matches!(
            h.publish(message(&i.to_string())),
            Reply::Enqueued { .. }
        ));
    }
    assert!(matches!(h.publish(message("refused")), Reply::Rejected));
    assert_eq!(h.queue.stats().rejected_publishes, 1);
    let c = h.attach(1, 1, 0);
    // Unsettled messages do not count: 5 ready is not over 5, but not yet at 80% (4) either.
    assert!(matches!(h.publish(message("still")), Reply::Rejected));
    let d = h.deliveries();
    h.settle(c, &[d[0].1.id], Outcome::Ack);
    assert_eq!(h.queue.stats().ready, 4);
    assert!(matches!(
        h.publish(message("again")),
        Reply::Enqueued { .. }
    ));
}

#[test]
fn max_length_bytes_counts_body_bytes() {
    let mut h = Harness::new(config(|c| c.max_length_bytes = Some(5)));
    h.publish_text("aaa");
    h.publish_text("bbb");
    assert_eq!(h.queue.stats().ready, 1);
    assert_eq!(h.queue.stats().bytes, 3);
    h.attach(1, 10, 0);
    assert_eq!(h.bodies(), vec!["bbb"]);
}

#[test]
fn a_rejected_publish_does_not_consume_its_sequence_number() {
    let mut h = Harness::new(config(|c| {
        c.max_length = Some(0);
        c.overflow = Overflow::RejectPublish;
    }));
    h.publish_text("over");
    let publish = Some(PublishId {
        publisher: 1,
        sequence: 1,
    });
    assert!(matches!(
        h.apply(Command::Enqueue {
            publish,
            message: message("a")
        }),
        Reply::Rejected
    ));
    // A policy raises the limit: the retry of the same sequence number is taken.
    h.queue.config.max_length = Some(10);
    assert!(matches!(
        h.apply(Command::Enqueue {
            publish,
            message: message("a")
        }),
        Reply::Enqueued { .. }
    ));
}

// ----- dead-letter strategies -----

#[test]
fn at_least_once_keeps_a_dead_letter_until_the_target_confirms_it() {
    let mut h = Harness::new(with_dlx(|c| {
        c.dead_letter_strategy = DeadLetterStrategy::AtLeastOnce;
        c.overflow = Overflow::RejectPublish;
        c.max_length = Some(1);
    }));
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    let d = h.deliveries();
    h.settle(c, &[d[0].1.id], Outcome::Reject);
    let dead = h.dead_letters();
    assert_eq!(dead.len(), 1);
    assert!(dead[0].2, "at least once");
    assert_eq!(h.queue.stats().dead_letter_pending, 1);
    assert_eq!(h.queue.pending_dead_letters().len(), 1);
    // Waiting dead letters count against the length limit: one pending plus one ready is
    // over 1, so the next publish is refused.
    h.apply(Command::Cancel { consumer: c });
    h.publish_text("b");
    assert!(matches!(h.publish(message("c")), Reply::Rejected));
    h.apply(Command::DeadLetterSettled {
        ids: vec![dead[0].3],
    });
    assert_eq!(h.queue.stats().dead_letter_pending, 0);
    assert_eq!(h.queue.len(), 1);
    // Still at 1, above 80% of 1: refused until the queue drains.
    assert!(matches!(h.publish(message("c")), Reply::Rejected));
    h.apply(Command::Purge);
    assert!(matches!(h.publish(message("c")), Reply::Enqueued { .. }));
}

#[test]
fn at_least_once_without_reject_publish_falls_back_to_at_most_once() {
    let mut h = Harness::new(with_dlx(|c| {
        c.dead_letter_strategy = DeadLetterStrategy::AtLeastOnce;
    }));
    h.publish_text("a");
    let c = h.attach(1, 1, 0);
    let d = h.deliveries();
    h.settle(c, &[d[0].1.id], Outcome::Reject);
    assert!(!h.dead_letters()[0].2);
    assert!(h.queue.is_empty());
}

// ----- delayed delivery -----

#[test]
fn a_delayed_message_is_held_until_its_time_and_shown_apart_from_ready() {
    let mut h = Harness::plain();
    h.attach(1, 10, 0);
    let start = h.now;
    h.publish(delayed("later", start + 5_000));
    assert!(h.deliveries().is_empty());
    let stats = h.queue.stats();
    assert_eq!((stats.ready, stats.delayed), (0, 1));
    assert_eq!(h.queue.next_timer(), Some(start + 5_000));
    h.tick(start + 4_999);
    assert!(h.deliveries().is_empty());
    h.tick(start + 5_000);
    assert_eq!(h.bodies(), vec!["later"]);
    assert_eq!(h.queue.stats().delayed, 0);
}

#[test]
fn delayed_messages_become_available_in_time_order_not_publish_order() {
    let mut h = Harness::plain();
    let start = h.now;
    h.publish(delayed("third", start + 300));
    h.publish(delayed("first", start + 100));
    h.publish(delayed("second", start + 200));
    h.publish_text("now");
    assert_eq!(
        h.queue
            .delayed()
            .iter()
            .map(|(at, _)| *at - start)
            .collect::<Vec<_>>(),
        vec![100, 200, 300]
    );
    h.tick(start + 1_000);
    h.attach(1, 10, 0);
    assert_eq!(h.bodies(), vec!["now", "first", "second", "third"]);
}

#[test]
fn modify_with_a_delivery_time_annotation_holds_the_returned_message_until_then() {
    let mut h = Harness::plain();
    h.publish_text("retry me");
    h.publish_text("next");
    let c = h.attach(1, 1, 0);
    let d = h.deliveries();
    let later = h.now + 5_000;
    let mut annotations = Table::new();
    annotations.insert(DELIVERY_TIME_HEADER, Value::I64(later as i64));
    h.settle(
        c,
        &[d[0].1.id],
        Outcome::Modify {
            delivery_failed: true,
            undeliverable_here: false,
            annotations,
        },
    );
    assert_eq!(h.queue.stats().delayed, 1);
    assert_eq!(h.bodies(), vec!["next"], "the returned one waits");
    let next = h.queue.checked_out(c);
    h.settle(c, &next, Outcome::Ack);
    h.tick(later);
    let again = h.deliveries();
    assert_eq!(body(&again[0].1), "retry me");
    assert_eq!(again[0].1.delivery_count, 1);
}

#[test]
fn a_delivery_time_in_the_past_is_available_at_once() {
    let mut h = Harness::plain();
    h.publish(delayed("past", h.now - 1));
    assert_eq!(h.queue.stats().ready, 1);
}

#[test]
fn a_delayed_message_ttl_starts_when_it_becomes_available() {
    let mut h = Harness::new(config(|c| c.message_ttl = Some(100)));
    let start = h.now;
    h.publish(delayed("a", start + 1_000));
    h.tick(start + 1_050);
    assert_eq!(h.queue.stats().ready, 1);
    h.tick(start + 1_100);
    assert!(h.queue.is_empty());
}

// ----- basic.get and purge -----

#[test]
fn basic_get_checks_out_to_the_owner_and_settles_like_a_consumer() {
    let mut h = Harness::plain();
    h.publish_text("a");
    h.publish_text("b");
    let (consumer, delivered) = h.get(9).unwrap();
    let consumer = consumer.unwrap();
    assert_eq!(body(&delivered), "a");
    assert_eq!(h.queue.stats().consumers, 0, "not a consumer");
    h.settle(consumer, &[delivered.id], Outcome::Requeue);
    let (_, again) = h.get(9).unwrap();
    assert!(again.redelivered);
    h.apply(Command::Down { owner: 9 });
    assert_eq!(h.queue.stats().ready, 2);
    let reply = h.apply(Command::Dequeue {
        owner: 9,
        auto_ack: true,
    });
    assert!(matches!(
        reply,
        Reply::Dequeued {
            consumer: None,
            remaining: 1,
            ..
        }
    ));
}

#[test]
fn purge_removes_ready_and_delayed_messages_but_not_unsettled_ones() {
    let mut h = Harness::plain();
    h.publish_text("a");
    h.attach(1, 1, 0);
    h.publish_text("b");
    h.publish(delayed("c", h.now + 10));
    assert!(matches!(
        h.apply(Command::Purge),
        Reply::Purged { count: 2 }
    ));
    assert_eq!(h.queue.len(), 1);
    assert_eq!(h.queue.stats().bytes, 0);
}

// ----- arguments -----

#[test]
fn arguments_are_read_with_rabbitmq_defaults_and_errors() {
    let config = QuorumConfig::from_arguments("q", &Table::new()).unwrap();
    assert_eq!(config.delivery_limit, Some(DEFAULT_DELIVERY_LIMIT));
    // RabbitMQ's quorum queues take reject-publish-dlx as drop-head (with a warning).
    let mut arguments = Table::new();
    arguments.insert("x-overflow", Value::string("reject-publish-dlx"));
    let config = QuorumConfig::from_arguments("q", &arguments).unwrap();
    assert_eq!(config.overflow, Overflow::DropHead);
    arguments.insert("x-overflow", Value::string("drop-tail"));
    let error = QuorumConfig::from_arguments("q", &arguments).unwrap_err();
    assert!(error.contains("x-overflow"), "{error}");
    let mut arguments = Table::new();
    arguments.insert("x-delivery-limit", Value::I64(-2));
    assert!(QuorumConfig::from_arguments("q", &arguments).is_err());
    let mut arguments = Table::new();
    arguments.insert("x-dead-letter-strategy", Value::string("at-least-once"));
    arguments.insert("x-dead-letter-exchange", Value::string("dlx"));
    arguments.insert("x-overflow", Value::string("reject-publish"));
    arguments.insert("x-max-length", Value::I32(10));
    arguments.insert("x-single-active-consumer", Value::Bool(true));
    arguments.insert("x-consumer-timeout", Value::I64(5_000));
    let config = QuorumConfig::from_arguments("q", &arguments).unwrap();
    assert_eq!(config.effective_strategy(), DeadLetterStrategy::AtLeastOnce);
    assert_eq!(config.max_length, Some(10));
    assert!(config.single_active_consumer);
    assert_eq!(config.consumer_timeout, Some(5_000));
}

#[test]
fn policies_combine_with_arguments_by_rabbitmqs_rules_for_quorum_queues() {
    let mut arguments = Table::new();
    arguments.insert("x-max-length", Value::I64(100));
    arguments.insert("x-overflow", Value::string("drop-head"));
    arguments.insert("x-dead-letter-exchange", Value::string("mine"));
    arguments.insert("x-delivery-limit", Value::I64(-1));
    let own = QuorumConfig::from_arguments("q", &arguments).unwrap();
    let mut policy = Table::new();
    policy.insert("max-length", Value::I64(500));
    policy.insert("max-length-bytes", Value::I64(4096));
    policy.insert("overflow", Value::string("reject-publish"));
    policy.insert("dead-letter-exchange", Value::string("theirs"));
    policy.insert("delivery-limit", Value::I64(5));
    let mut operator = Table::new();
    operator.insert("max-length-bytes", Value::I64(1024));
    let effective = own.with_policies(&arguments, Some(&policy), Some(&operator));
    assert_eq!(effective.max_length, Some(100), "the strictest limit");
    assert_eq!(
        effective.max_length_bytes,
        Some(1024),
        "the operator's is stricter"
    );
    assert_eq!(
        effective.overflow,
        Overflow::RejectPublish,
        "a policy's overflow wins"
    );
    assert_eq!(
        effective.dead_letter_exchange.as_deref(),
        Some("mine"),
        "the argument wins"
    );
    assert_eq!(
        effective.delivery_limit,
        Some(5),
        "no-limit (-1) loses to a limit"
    );
    // Without a declared or policy limit the default stays.
    let plain = QuorumConfig::new("q").with_policies(&Table::new(), None, None);
    assert_eq!(plain.delivery_limit, Some(DEFAULT_DELIVERY_LIMIT));
}

#[test]
fn a_lower_limit_from_a_policy_applies_at_once() {
    let mut h = Harness::new(with_dlx(|_| {}));
    for text in ["a", "b", "c"] {
        h.publish_text(text);
    }
    let mut policy = Table::new();
    policy.insert("max-length", Value::I64(1));
    let config = h
        .queue
        .config()
        .with_policies(&Table::new(), Some(&policy), None);
    h.apply(Command::Configure(config));
    let dead: Vec<(String, DeathReason)> =
        h.dead_letters().into_iter().map(|d| (d.0, d.1)).collect();
    assert_eq!(
        dead,
        vec![
            ("a".to_string(), DeathReason::MaxLen),
            ("b".to_string(), DeathReason::MaxLen)
        ]
    );
    assert_eq!(h.queue.config().name, "q");
    h.assert_snapshot_round_trips();
}

// ----- snapshots -----

#[test]
fn a_snapshot_keeps_every_queued_message_and_the_index() {
    let mut h = Harness::new(with_dlx(|c| {
        c.dead_letter_strategy = DeadLetterStrategy::AtLeastOnce;
        c.overflow = Overflow::RejectPublish;
        c.message_ttl = Some(60_000);
    }));
    h.publish_text("ready");
    h.publish(delayed("delayed", h.now + 10_000));
    let c = h.attach(1, 1, 3);
    h.publish_text("dead");
    let d = h.deliveries();
    h.settle(c, &[d[0].1.id], Outcome::Reject);
    h.apply(Command::Enqueue {
        publish: Some(PublishId {
            publisher: 4,
            sequence: 9,
        }),
        message: message("deduped"),
    });
    h.assert_snapshot_round_trips();
    let restored = decode_snapshot(&encode_snapshot(&h.queue)).unwrap();
    let stats = restored.stats();
    assert_eq!(
        (
            stats.ready,
            stats.delayed,
            stats.unacknowledged,
            stats.dead_letter_pending
        ),
        (1, 1, 1, 1)
    );
    assert_eq!(restored.publishers.get(&4), Some(&9));
}

#[test]
fn damaged_snapshots_and_commands_are_errors_not_panics() {
    let mut h = Harness::plain();
    h.publish_text("a");
    let bytes = encode_snapshot(&h.queue);
    for cut in 0..bytes.len() {
        assert!(decode_snapshot(&bytes[..cut]).is_err());
    }
    let mut command = Vec::new();
    encode_command(
        &mut command,
        &Command::Enqueue {
            publish: None,
            message: message("a"),
        },
    );
    for cut in 0..command.len() {
        assert!(decode_command(&command[..cut]).is_err());
    }
}
