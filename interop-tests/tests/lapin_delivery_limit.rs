//! Delivery counts and the delivery limit through lapin: `x-delivery-count` on redeliveries
//! (as RabbitMQ 4.x quorum queues write it), `x-delivery-limit` and the `delivery-limit`
//! policy on classic queues (a Warren extension), dead-lettering with reason
//! `delivery_limit`.

use std::time::Duration;

use lapin::options::{BasicGetOptions, BasicNackOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ErrorKind};
use warren_interop_tests::{wait_for, TestBroker};

mod lapin_common;

use lapin_common::{args, connect, deaths, declare, header_text, publish, stats, text};

async fn get(channel: &Channel, queue: &str) -> lapin::message::BasicGetMessage {
    channel
        .basic_get(queue.into(), BasicGetOptions::default())
        .await
        .expect("get")
        .unwrap_or_else(|| panic!("a message in {queue}"))
}

async fn nack_requeue(message: &lapin::message::BasicGetMessage) {
    message
        .delivery
        .nack(BasicNackOptions {
            multiple: false,
            requeue: true,
        })
        .await
        .expect("nack");
}

/// The `x-delivery-count` header: None when absent.
fn delivery_count(properties: &BasicProperties) -> Option<i64> {
    match properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-delivery-count"))
    {
        None => None,
        Some(AMQPValue::LongLongInt(n)) => Some(*n),
        Some(other) => panic!("x-delivery-count is a long, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_requeue_counts_up_until_the_limit_then_dead_letters_with_reason_delivery_limit() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = connect(&broker).await;
    declare(&channel, "poison-dlq", FieldTable::default()).await;
    declare(
        &channel,
        "work",
        args(&[
            ("x-delivery-limit", AMQPValue::LongInt(2)),
            ("x-dead-letter-exchange", text("")),
            ("x-dead-letter-routing-key", text("poison-dlq")),
        ]),
    )
    .await;
    publish(&channel, "work", b"poison", BasicProperties::default()).await;
    // Three deliveries: the first plus two counted returns; the third return exceeds 2.
    for expected in [None, Some(1), Some(2)] {
        let message = get(&channel, "work").await;
        assert_eq!(message.delivery.data, b"poison");
        assert_eq!(message.delivery.redelivered, expected.is_some());
        assert_eq!(delivery_count(&message.delivery.properties), expected);
        nack_requeue(&message).await;
    }
    assert!(
        wait_for(Duration::from_secs(10), || stats(&broker, "poison-dlq")
            .ready
            == 1)
        .await
    );
    assert_eq!(stats(&broker, "work").ready, 0);
    assert_eq!(stats(&broker, "work").dead_lettered_delivery_limit, 1);
    let dead = get(&channel, "poison-dlq").await;
    assert_eq!(dead.delivery.data, b"poison");
    assert_eq!(
        deaths(&dead.delivery.properties),
        vec![("work".into(), "delivery_limit".into(), 1)]
    );
    assert_eq!(
        header_text(&dead.delivery.properties, "x-first-death-reason").as_deref(),
        Some("delivery_limit")
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_closed_with_the_message_unacked_counts_a_failed_delivery() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    declare(&channel, "q", FieldTable::default()).await;
    publish(&channel, "q", b"m", BasicProperties::default()).await;
    let first = get(&channel, "q").await;
    assert_eq!(delivery_count(&first.delivery.properties), None);
    channel.close(200, "bye".into()).await.expect("close");
    let channel = connection.create_channel().await.expect("channel");
    assert!(wait_for(Duration::from_secs(10), || stats(&broker, "q").ready == 1).await);
    let again = get(&channel, "q").await;
    assert!(again.delivery.redelivered);
    assert_eq!(delivery_count(&again.delivery.properties), Some(1));
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delivery_limit_policy_drops_without_a_dead_letter_exchange() {
    use warren_core::policy::Policy;
    use warren_core::value::{Table, Value};
    let broker = TestBroker::start().await;
    let (_connection, channel) = connect(&broker).await;
    declare(&channel, "limited", FieldTable::default()).await;
    let mut definition = Table::new();
    definition.insert("delivery-limit", Value::I64(0));
    broker.broker().vhost("/").expect("vhost").set_policy(
        Policy::new("no-retries", "^limited$", "queues", 0, definition, false).expect("valid"),
        false,
    );
    publish(&channel, "limited", b"once", BasicProperties::default()).await;
    publish(&channel, "limited", b"next", BasicProperties::default()).await;
    let message = get(&channel, "limited").await;
    assert_eq!(message.delivery.data, b"once");
    nack_requeue(&message).await;
    let next = get(&channel, "limited").await;
    assert_eq!(next.delivery.data, b"next");
    assert_eq!(delivery_count(&next.delivery.properties), None);
    let stats = stats(&broker, "limited");
    assert_eq!((stats.ready, stats.dropped_delivery_limit), (0, 1));
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_negative_delivery_limit_is_a_406() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    let error = channel
        .queue_declare(
            "bad".into(),
            QueueDeclareOptions::default(),
            args(&[("x-delivery-limit", AMQPValue::LongInt(-1))]),
        )
        .await
        .expect_err("refused");
    match error.kind() {
        ErrorKind::ProtocolError(e) => {
            assert_eq!(e.get_id(), 406);
            assert_eq!(
                e.get_message().as_str(),
                "PRECONDITION_FAILED - invalid arg 'x-delivery-limit': expected a non-negative integer, got -1 of type signedint (queue 'bad' in vhost '/')"
            );
        }
        other => panic!("expected a 406 channel close, got {other:?}"),
    }
    assert!(connection.status().connected(), "only the channel closes");
    broker.shutdown().await;
}
