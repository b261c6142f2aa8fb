//! Streams over AMQP 0-9-1 with lapin, as RabbitMQ 4.x serves them: `queue.declare` with
//! `x-queue-type: stream` and its refusals, publishing with confirms, consumers from every
//! `x-stream-offset` form with the offset header on each delivery, the prefetch they must
//! set, acks (and nacks) that only give credit back, `basic.get` refused, filtering by
//! `x-stream-filter-value`, and messages crossing between the stream protocol and 0-9-1
//! with their properties.
//!
//! Every test runs on a multi-threaded runtime (see stream_client.rs: the stream client's
//! producer closes itself with a blocking call).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_lite::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, BasicRejectOptions, ConfirmSelectOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Consumer};
use rabbitmq_stream_client::types::{Message as StreamMessage, OffsetSpecification, SimpleValue};
use rabbitmq_stream_client::Environment;
use warren_interop_tests::process::WarrenProcess;
use warren_interop_tests::{TempDir, TestBroker};

mod lapin_common;

use lapin_common::{amqp_error, args, connect, header_text, text};

const LIMIT: Duration = Duration::from_secs(10);

fn stream_args() -> FieldTable {
    args(&[("x-queue-type", text("stream"))])
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

async fn declare_stream(channel: &Channel, name: &str) {
    channel
        .queue_declare(name.into(), durable(), stream_args())
        .await
        .unwrap_or_else(|e| panic!("declare stream {name}: {e}"));
}

/// Publishes `bodies` to `stream` through the default exchange with confirms, each with
/// `properties`, and waits until the broker confirmed them all (written to the stream).
async fn publish_confirmed(
    channel: &Channel,
    stream: &str,
    bodies: &[&str],
    properties: BasicProperties,
) {
    for body in bodies {
        let confirm = channel
            .basic_publish(
                "".into(),
                stream.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                properties.clone(),
            )
            .await
            .expect("publish");
        let confirmation = tokio::time::timeout(LIMIT, confirm)
            .await
            .expect("confirmed in time")
            .expect("confirm");
        assert!(confirmation.is_ack(), "{body} confirmed");
    }
}

/// A consumer of `stream` with prefetch `prefetch` and `arguments`, on its own channel.
async fn consume(
    connection: &lapin::Connection,
    stream: &str,
    prefetch: u16,
    arguments: FieldTable,
) -> (Channel, Consumer) {
    let channel = connection.create_channel().await.expect("channel");
    channel
        .basic_qos(prefetch, BasicQosOptions::default())
        .await
        .expect("qos");
    let consumer = channel
        .basic_consume(
            stream.into(),
            "".into(),
            BasicConsumeOptions::default(),
            arguments,
        )
        .await
        .expect("consume");
    (channel, consumer)
}

/// The `x-stream-offset` header of a delivery: a long, as RabbitMQ sets it.
fn offset_of(delivery: &Delivery) -> i64 {
    match delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-stream-offset"))
    {
        Some(AMQPValue::LongLongInt(offset)) => *offset,
        other => panic!("x-stream-offset is a long, got {other:?}"),
    }
}

/// The next `count` deliveries as (offset, body), acknowledged.
async fn take(consumer: &mut Consumer, count: usize) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    while out.len() < count {
        let delivery = tokio::time::timeout(LIMIT, consumer.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {count} deliveries: {out:?}", out.len()))
            .expect("consumer open")
            .expect("delivery");
        out.push((
            offset_of(&delivery),
            String::from_utf8_lossy(&delivery.data).into_owned(),
        ));
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    }
    out
}

/// Asserts nothing more arrives for a moment.
async fn nothing_more(consumer: &mut Consumer) {
    if let Ok(Some(Ok(delivery))) =
        tokio::time::timeout(Duration::from_millis(300), consumer.next()).await
    {
        panic!(
            "unexpected delivery at offset {}: {:?}",
            offset_of(&delivery),
            String::from_utf8_lossy(&delivery.data)
        );
    }
}

/// The next delivery, not acknowledged.
async fn next_delivery(consumer: &mut Consumer) -> Delivery {
    tokio::time::timeout(LIMIT, consumer.next())
        .await
        .expect("a delivery in time")
        .expect("consumer open")
        .expect("delivery")
}

fn offsets(taken: &[(i64, String)]) -> Vec<i64> {
    taken.iter().map(|(offset, _)| *offset).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_declared_durable_and_refused_exclusive_auto_delete_or_transient() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    for (options, text) in [
        (
            QueueDeclareOptions {
                durable: true,
                auto_delete: true,
                ..QueueDeclareOptions::default()
            },
            "PRECONDITION_FAILED - invalid property 'auto-delete' for queue 'events' in vhost '/'",
        ),
        (
            QueueDeclareOptions {
                durable: true,
                exclusive: true,
                ..QueueDeclareOptions::default()
            },
            "PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue 'events' in vhost '/'",
        ),
        (
            QueueDeclareOptions::default(),
            "PRECONDITION_FAILED - invalid property 'non-durable' for queue 'events' in vhost '/'",
        ),
    ] {
        let channel = connection.create_channel().await.expect("channel");
        let error = channel
            .queue_declare("events".into(), options, stream_args())
            .await
            .expect_err("refused");
        assert_eq!(amqp_error(&error), (406, text.to_string()));
    }
    declare_stream(&channel, "events").await;
    // Declared again, with and without its type, it is the same stream.
    declare_stream(&channel, "events").await;
    let passive = channel
        .queue_declare(
            "events".into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("passive declare");
    assert_eq!(passive.message_count(), 0);
    let queue = broker
        .broker()
        .vhost("/")
        .and_then(|v| v.queue_instance("events"))
        .expect("a queue of the vhost");
    assert_eq!(queue.queue_type().name(), "stream");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_must_set_a_prefetch_and_basic_get_is_refused() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    declare_stream(&channel, "events").await;

    let error = channel
        .basic_consume(
            "events".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect_err("no prefetch");
    assert_eq!(
        amqp_error(&error),
        (
            406,
            "PRECONDITION_FAILED - consumer prefetch count is not set for stream queue 'events' in vhost '/'".to_string()
        )
    );

    let channel = connection.create_channel().await.expect("channel");
    channel
        .basic_qos(10, BasicQosOptions::default())
        .await
        .expect("qos");
    let error = channel
        .basic_consume(
            "events".into(),
            "c".into(),
            BasicConsumeOptions {
                no_ack: true,
                ..BasicConsumeOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect_err("auto-ack refused");
    assert_eq!(
        amqp_error(&error),
        (
            540,
            "NOT_IMPLEMENTED - automatic acknowledgement not supported by stream queue 'events' in vhost '/'".to_string()
        )
    );
    // 540 is a connection error in AMQP 0-9-1: RabbitMQ closes the connection.
    assert!(!connection.status().connected());

    let (_connection, channel) = connect(&broker).await;
    let error = channel
        .basic_get("events".into(), BasicGetOptions::default())
        .await
        .expect_err("basic.get refused");
    assert_eq!(
        amqp_error(&error),
        (
            540,
            "NOT_IMPLEMENTED - basic.get not supported by stream queues queue 'events' in vhost '/'"
                .to_string()
        )
    );

    let (_connection, channel) = connect(&broker).await;
    channel
        .basic_qos(10, BasicQosOptions::default())
        .await
        .expect("qos");
    let error = channel
        .basic_consume(
            "events".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            args(&[("x-stream-offset", text("soon"))]),
        )
        .await
        .expect_err("a bad offset is refused");
    let (code, message) = amqp_error(&error);
    assert_eq!(code, 406);
    assert!(
        message.starts_with(
            "PRECONDITION_FAILED - failed consuming from stream queue 'events' in vhost '/': invalid x-stream-offset"
        ),
        "{message}"
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_offset_specification_starts_where_it_says_and_deliveries_carry_their_offset() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare_stream(&channel, "events").await;
    publish_confirmed(
        &channel,
        "events",
        &["e0", "e1", "e2", "e3", "e4"],
        BasicProperties::default(),
    )
    .await;
    // Confirmed apart, so the last one is a chunk of its own (`last` starts there).
    publish_confirmed(&channel, "events", &["e5"], BasicProperties::default()).await;

    let (_c1, mut first) = consume(
        &connection,
        "events",
        10,
        args(&[("x-stream-offset", text("first"))]),
    )
    .await;
    let taken = take(&mut first, 6).await;
    assert_eq!(offsets(&taken), [0, 1, 2, 3, 4, 5]);
    assert_eq!(taken[2].1, "e2");

    let (_c2, mut last) = consume(
        &connection,
        "events",
        10,
        args(&[("x-stream-offset", text("last"))]),
    )
    .await;
    assert_eq!(take(&mut last, 1).await, [(5, "e5".to_string())]);
    nothing_more(&mut last).await;

    let (_c3, mut at_three) = consume(
        &connection,
        "events",
        10,
        args(&[("x-stream-offset", AMQPValue::LongLongInt(3))]),
    )
    .await;
    assert_eq!(offsets(&take(&mut at_three, 3).await), [3, 4, 5]);

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (_c4, mut since_long_ago) = consume(
        &connection,
        "events",
        10,
        args(&[("x-stream-offset", AMQPValue::Timestamp(now - 3600))]),
    )
    .await;
    assert_eq!(take(&mut since_long_ago, 1).await[0].0, 0);
    let (_c5, mut from_future) = consume(
        &connection,
        "events",
        10,
        args(&[("x-stream-offset", AMQPValue::Timestamp(now + 3600))]),
    )
    .await;
    let (_c6, mut last_hour) = consume(
        &connection,
        "events",
        10,
        args(&[("x-stream-offset", text("1h"))]),
    )
    .await;
    assert_eq!(
        take(&mut last_hour, 1).await[0].0,
        0,
        "an interval counts back from now"
    );
    let (_c7, mut last_week) = consume(
        &connection,
        "events",
        10,
        args(&[("x-stream-offset", text("7D"))]),
    )
    .await;
    assert_eq!(take(&mut last_week, 1).await[0].0, 0);
    let (_c8, mut next) = consume(
        &connection,
        "events",
        10,
        args(&[("x-stream-offset", text("next"))]),
    )
    .await;
    let (_c9, mut default) = consume(&connection, "events", 10, FieldTable::default()).await;
    nothing_more(&mut next).await;
    nothing_more(&mut default).await;
    nothing_more(&mut from_future).await;

    publish_confirmed(&channel, "events", &["e6"], BasicProperties::default()).await;
    for consumer in [&mut next, &mut default, &mut from_future, &mut first] {
        assert_eq!(take(consumer, 1).await, [(6, "e6".to_string())]);
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_nacks_and_rejects_only_give_credit_back() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare_stream(&channel, "events").await;
    publish_confirmed(
        &channel,
        "events",
        &["a", "b", "c", "d", "e", "f"],
        BasicProperties::default(),
    )
    .await;
    let (consumer_channel, mut consumer) = consume(
        &connection,
        "events",
        2,
        args(&[("x-stream-offset", text("first"))]),
    )
    .await;
    let a = next_delivery(&mut consumer).await;
    let b = next_delivery(&mut consumer).await;
    assert_eq!((offset_of(&a), offset_of(&b)), (0, 1));
    assert!(!a.redelivered);
    nothing_more(&mut consumer).await;
    // A nack with requeue and a reject give the credit back; nothing comes again.
    a.nack(BasicNackOptions {
        multiple: false,
        requeue: true,
    })
    .await
    .expect("nack");
    b.reject(BasicRejectOptions { requeue: false })
        .await
        .expect("reject");
    let c = next_delivery(&mut consumer).await;
    let d = next_delivery(&mut consumer).await;
    assert_eq!((offset_of(&c), offset_of(&d)), (2, 3));
    nothing_more(&mut consumer).await;
    d.ack(BasicAckOptions { multiple: true })
        .await
        .expect("ack both");
    assert_eq!(offsets(&take(&mut consumer, 2).await), [4, 5]);
    nothing_more(&mut consumer).await;
    // Nothing was taken from the stream; the consumer is listed until its channel closes.
    let queue = broker
        .broker()
        .vhost("/")
        .and_then(|v| v.queue_instance("events"))
        .unwrap();
    assert_eq!(queue.info().ready, 6);
    let listed = broker
        .api_as_guest("GET", "/api/queues/%2F/events", None)
        .await;
    let listed: serde_json::Value = serde_json::from_slice(&listed.body).expect("json");
    assert_eq!(listed["consumers"], 1, "{listed}");
    consumer_channel
        .close(200, "done".into())
        .await
        .expect("close");
    assert!(
        warren_interop_tests::wait_for(LIMIT, || queue.info().consumers == 0).await,
        "the consumer went with its channel"
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtering_consumer_gets_the_values_it_asked_for() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare_stream(&channel, "orders").await;
    let valued = |value: &str| {
        BasicProperties::default().with_headers(args(&[("x-stream-filter-value", text(value))]))
    };
    publish_confirmed(&channel, "orders", &["eu-1"], valued("eu")).await;
    publish_confirmed(&channel, "orders", &["us-1"], valued("us")).await;
    publish_confirmed(&channel, "orders", &["plain"], BasicProperties::default()).await;
    // In one chunk together: the consumer still gets only its value.
    for (body, value) in [("eu-2", "eu"), ("us-2", "us"), ("asia-1", "asia")] {
        channel
            .basic_publish(
                "".into(),
                "orders".into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                valued(value),
            )
            .await
            .expect("publish");
    }
    channel.wait_for_confirms().await.expect("confirmed");

    let bodies = |taken: Vec<(i64, String)>| taken.into_iter().map(|(_, b)| b).collect::<Vec<_>>();
    let (_c1, mut eu) = consume(
        &connection,
        "orders",
        10,
        args(&[
            ("x-stream-offset", text("first")),
            ("x-stream-filter", text("eu")),
        ]),
    )
    .await;
    assert_eq!(bodies(take(&mut eu, 2).await), ["eu-1", "eu-2"]);
    nothing_more(&mut eu).await;

    let (_c2, mut us_and_plain) = consume(
        &connection,
        "orders",
        10,
        args(&[
            ("x-stream-offset", text("first")),
            (
                "x-stream-filter",
                AMQPValue::FieldArray(vec![text("us"), text("asia")].into()),
            ),
            ("x-stream-match-unfiltered", AMQPValue::Boolean(true)),
        ]),
    )
    .await;
    assert_eq!(
        bodies(take(&mut us_and_plain, 4).await),
        ["us-1", "plain", "us-2", "asia-1"]
    );
    nothing_more(&mut us_and_plain).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_bound_to_an_exchange_keeps_where_each_message_was_published() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    declare_stream(&channel, "audit").await;
    channel
        .queue_bind(
            "audit".into(),
            "amq.topic".into(),
            "orders.#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
    let properties = BasicProperties::default()
        .with_message_id(ShortString::from("m-1"))
        .with_content_type(ShortString::from("application/json"))
        .with_correlation_id(ShortString::from("c-1"))
        .with_delivery_mode(2)
        .with_headers(args(&[("region", text("eu"))]));
    let confirm = channel
        .basic_publish(
            "amq.topic".into(),
            "orders.created".into(),
            BasicPublishOptions::default(),
            b"{}",
            properties,
        )
        .await
        .expect("publish");
    assert!(confirm.await.expect("confirm").is_ack());
    let (_c, mut consumer) = consume(
        &connection,
        "audit",
        5,
        args(&[("x-stream-offset", text("first"))]),
    )
    .await;
    let delivery = tokio::time::timeout(LIMIT, consumer.next())
        .await
        .expect("in time")
        .expect("open")
        .expect("delivery");
    assert_eq!(delivery.exchange.as_str(), "amq.topic");
    assert_eq!(delivery.routing_key.as_str(), "orders.created");
    let p = &delivery.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("m-1"));
    assert_eq!(
        p.content_type().as_ref().map(|s| s.as_str()),
        Some("application/json")
    );
    assert_eq!(p.correlation_id().as_ref().map(|s| s.as_str()), Some("c-1"));
    assert_eq!(*p.delivery_mode(), Some(2));
    assert_eq!(header_text(p, "region").as_deref(), Some("eu"));
    assert_eq!(offset_of(&delivery), 0);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_cross_between_the_stream_protocol_and_amqp_0_9_1_with_their_properties() {
    let broker = TestBroker::start().await;
    let addr = broker.stream_addr();
    let environment = Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .build()
        .await
        .expect("stream client connects");
    environment
        .stream_creator()
        .create("mixed")
        .await
        .expect("create");

    // Published on 5552...
    let producer = environment
        .producer()
        .build("mixed")
        .await
        .expect("producer");
    let message = StreamMessage::builder()
        .body(b"from-stream".to_vec())
        .properties()
        .message_id("s-1".to_string())
        .content_type("text/plain")
        .message_builder()
        .application_properties()
        .insert("region", "eu")
        .message_builder()
        .build();
    let confirmed = producer.send_with_confirm(message).await.expect("sent");
    assert!(confirmed.confirmed());
    producer.close().await.expect("closed");

    // ...read over 0-9-1.
    let (connection, channel) = connect(&broker).await;
    let (_c, mut consumer) = consume(
        &connection,
        "mixed",
        5,
        args(&[("x-stream-offset", text("first"))]),
    )
    .await;
    let delivery = tokio::time::timeout(LIMIT, consumer.next())
        .await
        .expect("in time")
        .expect("open")
        .expect("delivery");
    assert_eq!(delivery.data, b"from-stream");
    assert_eq!(offset_of(&delivery), 0);
    let p = &delivery.properties;
    assert_eq!(p.message_id().as_ref().map(|s| s.as_str()), Some("s-1"));
    assert_eq!(
        p.content_type().as_ref().map(|s| s.as_str()),
        Some("text/plain")
    );
    assert_eq!(header_text(p, "region").as_deref(), Some("eu"));
    delivery.ack(BasicAckOptions::default()).await.expect("ack");

    // Published over 0-9-1, read on 5552.
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    publish_confirmed(
        &channel,
        "mixed",
        &["from-amqp"],
        BasicProperties::default()
            .with_message_id(ShortString::from("a-1"))
            .with_headers(args(&[("region", text("us"))])),
    )
    .await;
    let mut stream_consumer = environment
        .consumer()
        .offset(OffsetSpecification::Offset(1))
        .build("mixed")
        .await
        .expect("stream consumer");
    let delivery = tokio::time::timeout(LIMIT, stream_consumer.next())
        .await
        .expect("in time")
        .expect("open")
        .expect("delivery");
    assert_eq!(delivery.offset(), 1);
    let message = delivery.message();
    assert_eq!(message.data(), Some(&b"from-amqp"[..]));
    let id = message
        .properties()
        .and_then(|p| p.message_id.clone())
        .map(|id| format!("{id:?}"));
    assert!(id.is_some_and(|id| id.contains("a-1")), "message id kept");
    let region = message
        .application_properties()
        .and_then(|properties| properties.get("region").cloned());
    assert!(
        matches!(&region, Some(SimpleValue::String(text)) if text == "us"),
        "{region:?}"
    );
    stream_consumer.handle().close().await.expect("closed");

    // The 0-9-1 consumer, still attached, got it too, published through the default
    // exchange.
    let delivery = next_delivery(&mut consumer).await;
    assert_eq!(
        (offset_of(&delivery), &delivery.data[..]),
        (1, &b"from-amqp"[..])
    );
    assert_eq!(delivery.routing_key.as_str(), "mixed");

    // Deleted on 5552: the 0-9-1 consumer is cancelled by the broker.
    environment.delete_stream("mixed").await.expect("delete");
    let ended = tokio::time::timeout(LIMIT, consumer.next())
        .await
        .expect("the consumer ends in time");
    assert!(ended.is_none(), "cancelled, not delivered to: {ended:?}");
    assert!(broker
        .broker()
        .vhost("/")
        .and_then(|v| v.queue_instance("mixed"))
        .is_none());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_and_its_bindings_survive_a_restart() {
    let dir = TempDir::new("stream-restart");
    let path = dir.path().to_path_buf();
    let warren = tokio::task::spawn_blocking(move || WarrenProcess::start(&path, &[]))
        .await
        .expect("start");
    let connection =
        lapin::Connection::connect(&warren.url(), lapin::ConnectionProperties::default())
            .await
            .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    channel
        .queue_declare(
            "audit".into(),
            durable(),
            args(&[
                ("x-queue-type", text("stream")),
                ("x-max-length-bytes", AMQPValue::LongLongInt(1_000_000_000)),
            ]),
        )
        .await
        .expect("declare");
    channel
        .queue_bind(
            "audit".into(),
            "amq.topic".into(),
            "audit.#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
    publish_confirmed(&channel, "audit", &["before"], BasicProperties::default()).await;
    drop(connection);
    assert!(warren.terminate().success());

    let path = dir.path().to_path_buf();
    let warren = tokio::task::spawn_blocking(move || WarrenProcess::start(&path, &[]))
        .await
        .expect("restart");
    let connection =
        lapin::Connection::connect(&warren.url(), lapin::ConnectionProperties::default())
            .await
            .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    // Redeclared as it was: equivalent, with what it held.
    let declared = channel
        .queue_declare(
            "audit".into(),
            durable(),
            args(&[
                ("x-queue-type", text("stream")),
                ("x-max-length-bytes", AMQPValue::LongInt(1_000_000_000)),
            ]),
        )
        .await
        .expect("redeclare after the restart");
    assert_eq!(declared.message_count(), 1);
    let confirm = channel
        .basic_publish(
            "amq.topic".into(),
            "audit.login".into(),
            BasicPublishOptions::default(),
            b"after",
            BasicProperties::default(),
        )
        .await
        .expect("publish");
    assert!(confirm.await.expect("confirm").is_ack());
    let (_c, mut consumer) = consume(
        &connection,
        "audit",
        5,
        args(&[("x-stream-offset", text("first"))]),
    )
    .await;
    assert_eq!(
        take(&mut consumer, 2).await,
        [(0, "before".to_string()), (1, "after".to_string())],
        "the binding routed to the stream after the restart"
    );
    drop(connection);
    warren.terminate();
}
