//! Queue features through lapin: TTL, per-message expiration, dead-lettering with x-death,
//! length limits and priorities. Waits are event waits on broker state with generous bounds.

use std::time::Duration;

use lapin::options::{
    BasicGetOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ErrorKind};
use warren_interop_tests::{wait_for, TestBroker};

mod lapin_common;

use lapin_common::{args, connect, deaths, declare, header_text, publish, stats, text};

/// A synchronous round trip on `channel`: the broker handles a connection's frames in
/// order, so every publish sent before it has been routed when it returns.
async fn sync(channel: &Channel) {
    channel
        .queue_declare(
            "amq.rabbitmq.reply-to".into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("round trip");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_ladder_with_two_delay_tiers_dead_letters_expired_messages_with_x_death() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = connect(&broker).await;
    declare(&channel, "work", FieldTable::default()).await;
    for (tier, ttl) in [("retry-1", 50i32), ("retry-2", 150)] {
        declare(
            &channel,
            tier,
            args(&[
                ("x-message-ttl", AMQPValue::LongInt(ttl)),
                ("x-dead-letter-exchange", text("")),
                ("x-dead-letter-routing-key", text("work")),
            ]),
        )
        .await;
    }
    publish(&channel, "retry-1", b"first", BasicProperties::default()).await;
    assert!(
        wait_for(Duration::from_secs(10), || stats(&broker, "work").ready
            == 1)
        .await,
        "tier 1 expires into work"
    );
    let message = channel
        .basic_get("work".into(), BasicGetOptions::default())
        .await
        .expect("get")
        .expect("a dead-lettered message");
    assert_eq!(message.delivery.data, b"first");
    assert_eq!(message.delivery.routing_key.as_str(), "work");
    assert_eq!(
        deaths(&message.delivery.properties),
        vec![("retry-1".into(), "expired".into(), 1)]
    );
    assert_eq!(
        header_text(&message.delivery.properties, "x-first-death-reason").unwrap_or_default(),
        "expired"
    );
    assert_eq!(
        header_text(&message.delivery.properties, "x-last-death-queue").unwrap_or_default(),
        "retry-1"
    );

    // Second round: the consumer sends it to the slower tier with a per-message expiration
    // that is longer than the queue TTL (the lower wins) and must be removed on expiry.
    let properties = message
        .delivery
        .properties
        .clone()
        .with_expiration("60000".into());
    message.delivery.ack(Default::default()).await.expect("ack");
    publish(&channel, "retry-2", b"first", properties).await;
    assert!(
        wait_for(Duration::from_secs(10), || stats(&broker, "work").ready
            == 1)
        .await,
        "tier 2 expires into work"
    );
    let message = channel
        .basic_get("work".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
        .expect("dead-lettered again");
    assert_eq!(
        deaths(&message.delivery.properties),
        vec![
            ("retry-2".into(), "expired".into(), 1),
            ("retry-1".into(), "expired".into(), 1)
        ]
    );
    assert_eq!(
        message.delivery.properties.expiration(),
        &None,
        "expiration is removed"
    );
    assert_eq!(
        header_text(&message.delivery.properties, "x-first-death-queue").unwrap_or_default(),
        "retry-1"
    );
    assert_eq!(
        header_text(&message.delivery.properties, "x-last-death-queue").unwrap_or_default(),
        "retry-2"
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rejected_messages_count_up_in_x_death_over_several_rounds() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = connect(&broker).await;
    declare(
        &channel,
        "jobs",
        args(&[
            ("x-dead-letter-exchange", text("")),
            ("x-dead-letter-routing-key", text("jobs")),
        ]),
    )
    .await;
    publish(&channel, "jobs", b"job", BasicProperties::default()).await;
    for round in 1..=3i64 {
        assert!(
            wait_for(Duration::from_secs(10), || stats(&broker, "jobs").ready
                == 1)
            .await
        );
        let message = channel
            .basic_get("jobs".into(), BasicGetOptions::default())
            .await
            .expect("get")
            .expect("the job");
        if round > 1 {
            assert_eq!(
                deaths(&message.delivery.properties),
                vec![("jobs".into(), "rejected".into(), round - 1)]
            );
        }
        message
            .delivery
            .nack(BasicNackOptions {
                multiple: false,
                requeue: false,
            })
            .await
            .expect("nack");
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_messages_anywhere_in_the_queue_are_removed_and_never_delivered() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = connect(&broker).await;
    declare(&channel, "mixed", FieldTable::default()).await;
    publish(&channel, "mixed", b"keep-1", BasicProperties::default()).await;
    publish(
        &channel,
        "mixed",
        b"short",
        BasicProperties::default().with_expiration("30".into()),
    )
    .await;
    publish(&channel, "mixed", b"keep-2", BasicProperties::default()).await;
    assert!(
        {
            sync(&channel).await;
            wait_for(Duration::from_secs(5), || {
                stats(&broker, "mixed").ready == 2
            })
            .await
        },
        "the expired middle message stops counting within a second"
    );
    for expected in [&b"keep-1"[..], b"keep-2"] {
        let message = channel
            .basic_get("mixed".into(), BasicGetOptions { no_ack: true })
            .await
            .expect("get")
            .expect("message");
        assert_eq!(message.delivery.data, expected);
    }
    let stats = broker
        .broker()
        .vhost("/")
        .unwrap()
        .queue("mixed")
        .unwrap()
        .stats();
    assert_eq!(stats.expired, 1);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_expiration_is_a_406_channel_error() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare(&channel, "q", FieldTable::default()).await;
    let confirm = channel
        .basic_publish(
            "".into(),
            "q".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default().with_expiration("soon".into()),
        )
        .await
        .expect("sent");
    let error = confirm
        .await
        .expect_err("the broker refuses the expiration");
    match error.kind() {
        ErrorKind::ProtocolError(e) => {
            assert_eq!(e.get_id(), 406);
            assert_eq!(
                e.get_message().as_str(),
                "PRECONDITION_FAILED - invalid expiration 'soon': expected a non-negative integer of milliseconds"
            );
        }
        other => panic!("expected a 406 channel close, got {other:?}"),
    }
    assert!(connection.status().connected(), "only the channel closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_modes_under_confirms() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = connect(&broker).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare(&channel, "dlq", FieldTable::default()).await;
    declare(
        &channel,
        "head",
        args(&[
            ("x-max-length", AMQPValue::LongInt(2)),
            ("x-dead-letter-exchange", text("")),
            ("x-dead-letter-routing-key", text("dlq")),
        ]),
    )
    .await;
    declare(
        &channel,
        "refuse",
        args(&[
            ("x-max-length", AMQPValue::LongInt(2)),
            ("x-overflow", text("reject-publish")),
        ]),
    )
    .await;
    declare(
        &channel,
        "refuse-dlx",
        args(&[
            ("x-max-length", AMQPValue::LongInt(2)),
            ("x-overflow", text("reject-publish-dlx")),
            ("x-dead-letter-exchange", text("")),
            ("x-dead-letter-routing-key", text("dlq")),
        ]),
    )
    .await;
    let mut outcomes = Vec::new();
    for queue in ["head", "refuse", "refuse-dlx"] {
        for body in ["1", "2", "3"] {
            let confirm = channel
                .basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    body.as_bytes(),
                    BasicProperties::default(),
                )
                .await
                .expect("sent")
                .await
                .expect("confirmed or nacked");
            outcomes.push((queue, body, confirm.is_ack()));
        }
    }
    assert_eq!(
        outcomes,
        vec![
            ("head", "1", true),
            ("head", "2", true),
            ("head", "3", true),
            ("refuse", "1", true),
            ("refuse", "2", true),
            ("refuse", "3", false),
            ("refuse-dlx", "1", true),
            ("refuse-dlx", "2", true),
            ("refuse-dlx", "3", false),
        ]
    );
    let mut bodies = Vec::new();
    while let Some(message) = channel
        .basic_get("head".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
    {
        bodies.push(String::from_utf8(message.delivery.data.clone()).unwrap());
    }
    assert_eq!(bodies, ["2", "3"], "drop-head drops the oldest");
    let mut dead = Vec::new();
    while let Some(message) = channel
        .basic_get("dlq".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
    {
        dead.push((
            String::from_utf8(message.delivery.data.clone()).unwrap(),
            deaths(&message.delivery.properties)[0].clone(),
        ));
    }
    assert_eq!(
        dead,
        vec![
            ("1".into(), ("head".into(), "maxlen".into(), 1)),
            ("3".into(), ("refuse-dlx".into(), "maxlen".into(), 1)),
        ]
    );
    assert_eq!(stats(&broker, "refuse").ready, 2);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_queue_delivers_highest_first_fifo_within_a_priority() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    declare(
        &channel,
        "urgent",
        args(&[("x-max-priority", AMQPValue::LongInt(5))]),
    )
    .await;
    for (body, priority) in [
        ("low", 1u8),
        ("five-a", 5),
        ("mid", 3),
        ("capped", 9),
        ("five-b", 5),
        ("none", 0),
    ] {
        publish(
            &channel,
            "urgent",
            body.as_bytes(),
            BasicProperties::default().with_priority(priority),
        )
        .await;
    }
    let mut order = Vec::new();
    while let Some(message) = channel
        .basic_get("urgent".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
    {
        order.push(String::from_utf8(message.delivery.data.clone()).unwrap());
    }
    // 9 is above the maximum and counts as 5; within a priority the order is FIFO.
    assert_eq!(order, ["five-a", "capped", "five-b", "mid", "low", "none"]);

    let error = channel
        .queue_declare(
            "too-many".into(),
            QueueDeclareOptions::default(),
            args(&[("x-max-priority", AMQPValue::LongInt(256))]),
        )
        .await
        .expect_err("256 levels are refused");
    match error.kind() {
        ErrorKind::ProtocolError(e) => assert_eq!(e.get_id(), 406),
        other => panic!("expected 406, got {other:?}"),
    }
    assert!(connection.status().connected());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cc_and_bcc_route_to_extra_keys_and_bcc_is_never_delivered() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = connect(&broker).await;
    for queue in ["main", "copy", "secret"] {
        declare(&channel, queue, FieldTable::default()).await;
    }
    let mut headers = FieldTable::default();
    headers.insert(
        "CC".into(),
        AMQPValue::FieldArray(vec![text("copy")].into()),
    );
    headers.insert(
        "BCC".into(),
        AMQPValue::FieldArray(vec![text("secret")].into()),
    );
    publish(
        &channel,
        "main",
        b"memo",
        BasicProperties::default().with_headers(headers),
    )
    .await;
    for queue in ["main", "copy", "secret"] {
        let message = channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .expect("get")
            .unwrap_or_else(|| panic!("{queue} got the memo"));
        assert_eq!(message.delivery.data, b"memo");
        let headers = message
            .delivery
            .properties
            .headers()
            .as_ref()
            .expect("headers");
        assert!(headers.inner().contains_key("CC"), "CC is kept in {queue}");
        assert!(
            !headers.inner().contains_key("BCC"),
            "BCC is removed in {queue}"
        );
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unused_queue_is_deleted_after_x_expires() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = connect(&broker).await;
    declare(
        &channel,
        "ephemeral",
        args(&[("x-expires", AMQPValue::LongInt(200))]),
    )
    .await;
    declare(&channel, "kept", FieldTable::default()).await;
    let vhost = broker.broker().vhost("/").expect("vhost");
    assert!(
        wait_for(Duration::from_secs(10), || vhost
            .queue("ephemeral")
            .is_none())
        .await,
        "the unused queue is deleted"
    );
    assert!(vhost.queue("kept").is_some());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_applies_to_live_queues_at_once_and_is_cleared_at_once() {
    use warren_core::policy::Policy;
    use warren_core::value::{Table, Value};
    let broker = TestBroker::start().await;
    let (_connection, channel) = connect(&broker).await;
    declare(&channel, "capped", FieldTable::default()).await;
    declare(&channel, "capped-dlq", FieldTable::default()).await;
    for body in ["1", "2", "3", "4", "5"] {
        publish(
            &channel,
            "capped",
            body.as_bytes(),
            BasicProperties::default(),
        )
        .await;
    }
    sync(&channel).await;
    assert_eq!(stats(&broker, "capped").ready, 5);
    let vhost = broker.broker().vhost("/").expect("vhost");
    let mut definition = Table::new();
    definition.insert("max-length", Value::I64(2));
    definition.insert("dead-letter-exchange", Value::string(""));
    definition.insert("dead-letter-routing-key", Value::string("capped-dlq"));
    vhost.set_policy(
        Policy::new("cap", "^capped$", "queues", 0, definition, false).expect("valid"),
        false,
    );
    // The lower max-length truncates the live queue now, dead-lettering the oldest.
    assert_eq!(stats(&broker, "capped").ready, 2);
    assert_eq!(stats(&broker, "capped-dlq").ready, 3);
    let mut kept = Vec::new();
    while let Some(message) = channel
        .basic_get("capped".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
    {
        kept.push(String::from_utf8(message.delivery.data.clone()).unwrap());
    }
    assert_eq!(kept, ["4", "5"]);
    let dead = channel
        .basic_get("capped-dlq".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
        .expect("dead-lettered");
    assert_eq!(
        deaths(&dead.delivery.properties),
        vec![("capped".into(), "maxlen".into(), 1)]
    );

    // An operator policy that is stricter wins over the policy.
    let mut strict = Table::new();
    strict.insert("max-length", Value::I64(1));
    vhost.set_policy(
        Policy::new("strict", ".*", "queues", 0, strict, true).expect("valid"),
        true,
    );
    for body in ["a", "b"] {
        publish(
            &channel,
            "capped",
            body.as_bytes(),
            BasicProperties::default(),
        )
        .await;
    }
    sync(&channel).await;
    assert_eq!(stats(&broker, "capped").ready, 1);

    vhost.clear_policy("strict", true).expect("cleared");
    vhost.clear_policy("cap", false).expect("cleared");
    for body in ["c", "d", "e"] {
        publish(
            &channel,
            "capped",
            body.as_bytes(),
            BasicProperties::default(),
        )
        .await;
    }
    sync(&channel).await;
    assert_eq!(
        stats(&broker, "capped").ready,
        4,
        "without policies the queue is unbounded again"
    );
    assert_eq!(
        vhost.clear_policy("cap", false).unwrap_err().kind,
        warren_core::ErrorKind::NotFound
    );
    broker.shutdown().await;
}
