//! TTL, length limits, dead-lettering, delayed delivery, basic.get and purge, arguments,
//! policies and snapshots.

use super::*;

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

#[test]
fn replies_round_trip_through_their_encoding() {
    let mut h = Harness::plain();
    h.publish_text("a");
    let mut replies = vec![
        Reply::Ok,
        Reply::Enqueued { id: 7 },
        Reply::Duplicate,
        Reply::Rejected,
        Reply::Attached {
            consumer: ConsumerKey(3),
            active: false,
        },
        Reply::Empty,
        Reply::Purged { count: 9 },
        Reply::UnknownConsumer,
    ];
    replies.push(h.apply(Command::Dequeue {
        owner: 1,
        auto_ack: false,
    }));
    for reply in replies {
        let mut bytes = Vec::new();
        super::super::codec::encode_reply(&mut bytes, &reply);
        let back = super::super::codec::decode_reply(&bytes).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{reply:?}"));
        for cut in 0..bytes.len() {
            assert!(super::super::codec::decode_reply(&bytes[..cut]).is_err());
        }
    }
}
