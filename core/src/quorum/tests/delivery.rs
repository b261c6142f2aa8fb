//! Publishing, credit, settlement, the delivery limit, consumers and priorities.

use super::*;

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

#[test]
fn peek_shows_ready_messages_in_delivery_order_without_taking_them() {
    let mut h = Harness::plain();
    h.publish(with_properties("low", |p| p.priority = Some(0)));
    h.publish(with_properties("high", |p| p.priority = Some(9)));
    h.publish(delayed("later", h.now + 1_000));
    let peeked: Vec<String> = h
        .queue
        .peek(10)
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect();
    assert_eq!(peeked, vec!["high", "low"]);
    assert_eq!(h.queue.stats().ready, 2);
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
