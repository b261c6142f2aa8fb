//! The real Rust stream client (`rabbitmq-stream-client`) against Warren's stream protocol
//! listener: creating streams, publishing with and without a producer name, deduplication
//! across a producer restart, consuming from every offset specification, offset tracking,
//! retention by size, permissions, and streams seen as queues by the management API.
//!
//! Every test runs on a multi-threaded runtime: the client's `Producer` closes itself with a
//! blocking `block_on` in `Drop`, which deadlocks a current-thread runtime when a failing
//! assertion drops an unclosed producer.

use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{ByteCapacity, Message, OffsetSpecification};
use rabbitmq_stream_client::{Consumer, Environment};
use warren_interop_tests::TestBroker;

const LIMIT: Duration = Duration::from_secs(10);

async fn environment(broker: &TestBroker) -> Environment {
    environment_as(broker, "guest", "guest").await
}

async fn environment_as(broker: &TestBroker, user: &str, password: &str) -> Environment {
    let addr = broker.stream_addr();
    Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .username(user)
        .password(password)
        .build()
        .await
        .expect("connects to the stream listener")
}

fn message(body: &str) -> Message {
    Message::builder().body(body.as_bytes().to_vec()).build()
}

/// Reads `count` deliveries as `(offset, body)`.
async fn take(consumer: &mut Consumer, count: usize) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    while out.len() < count {
        let delivery = tokio::time::timeout(LIMIT, consumer.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {count} deliveries: {out:?}", out.len()))
            .expect("consumer open")
            .expect("a delivery");
        let body =
            String::from_utf8_lossy(delivery.message().data().unwrap_or_default()).into_owned();
        out.push((delivery.offset(), body));
    }
    out
}

/// Asserts nothing more arrives for a moment.
async fn nothing_more(consumer: &mut Consumer) {
    if let Ok(Some(Ok(delivery))) =
        tokio::time::timeout(Duration::from_millis(300), consumer.next()).await
    {
        panic!("unexpected delivery at offset {}", delivery.offset());
    }
}

async fn publish(environment: &Environment, stream: &str, name: Option<&str>, bodies: &[&str]) {
    match name {
        Some(name) => {
            let mut producer = environment
                .producer()
                .name(name)
                .build(stream)
                .await
                .expect("producer");
            for body in bodies {
                let confirmed = producer
                    .send_with_confirm(message(body))
                    .await
                    .expect("sent");
                assert!(confirmed.confirmed(), "{body} confirmed");
            }
            producer.close().await.expect("closed");
        }
        None => {
            let producer = environment
                .producer()
                .build(stream)
                .await
                .expect("producer");
            for body in bodies {
                let confirmed = producer
                    .send_with_confirm(message(body))
                    .await
                    .expect("sent");
                assert!(confirmed.confirmed(), "{body} confirmed");
            }
            producer.close().await.expect("closed");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_published_with_and_without_a_producer_name_are_consumed_from_first() {
    let broker = TestBroker::start().await;
    let environment = environment(&broker).await;
    environment
        .stream_creator()
        .create("events")
        .await
        .expect("created");
    publish(&environment, "events", None, &["a", "b", "c"]).await;
    publish(&environment, "events", Some("billing"), &["d", "e"]).await;
    let mut consumer = environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build("events")
        .await
        .expect("consumer");
    let read = take(&mut consumer, 5).await;
    assert_eq!(
        read,
        vec![
            (0, "a".into()),
            (1, "b".into()),
            (2, "c".into()),
            (3, "d".into()),
            (4, "e".into())
        ]
    );
    nothing_more(&mut consumer).await;
    // Creating it again says it exists.
    assert!(environment.stream_creator().create("events").await.is_err());
    consumer.handle().close().await.expect("closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_producer_is_deduplicated_across_a_restart() {
    let broker = TestBroker::start().await;
    let environment = environment(&broker).await;
    environment
        .stream_creator()
        .create("ledger")
        .await
        .expect("created");
    publish(
        &environment,
        "ledger",
        Some("writer"),
        &["0", "1", "2", "3"],
    )
    .await;
    // The restarted producer resumes after the last id the stream has for it.
    let mut producer = environment
        .producer()
        .name("writer")
        .build("ledger")
        .await
        .expect("producer");
    // Ids 2 and 3 again (a retry after a lost confirm): confirmed, not stored twice.
    for id in [2u64, 3] {
        let resent = Message::builder()
            .body(b"dup".to_vec())
            .publishing_id(id)
            .build();
        let status = producer.send_with_confirm(resent).await.expect("sent");
        assert!(status.confirmed(), "a duplicate is confirmed");
    }
    let status = producer
        .send_with_confirm(message("4"))
        .await
        .expect("sent");
    assert_eq!(
        status.publishing_id(),
        4,
        "the sequence resumed after the stored one"
    );
    producer.close().await.expect("closed");
    let mut consumer = environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build("ledger")
        .await
        .expect("consumer");
    let bodies: Vec<String> = take(&mut consumer, 5)
        .await
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(bodies, vec!["0", "1", "2", "3", "4"]);
    nothing_more(&mut consumer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_offset_specification_starts_where_it_says() {
    let broker = TestBroker::start().await;
    let environment = environment(&broker).await;
    environment
        .stream_creator()
        .create("ticks")
        .await
        .expect("created");
    publish(&environment, "ticks", None, &["t0", "t1", "t2"]).await;
    let before_last = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    tokio::time::sleep(Duration::from_millis(20)).await;
    publish(&environment, "ticks", None, &["t3", "t4"]).await;
    let consumer_at = |spec| {
        let environment = environment.clone();
        async move {
            environment
                .consumer()
                .offset(spec)
                .build("ticks")
                .await
                .expect("consumer")
        }
    };
    let mut first = consumer_at(OffsetSpecification::First).await;
    assert_eq!(take(&mut first, 5).await.first().map(|r| r.0), Some(0));
    let mut at_offset = consumer_at(OffsetSpecification::Offset(2)).await;
    assert_eq!(
        take(&mut at_offset, 3).await,
        vec![(2, "t2".into()), (3, "t3".into()), (4, "t4".into())]
    );
    let mut from_time = consumer_at(OffsetSpecification::Timestamp(before_last)).await;
    assert_eq!(take(&mut from_time, 1).await, vec![(3, "t3".into())]);
    let mut last = consumer_at(OffsetSpecification::Last).await;
    assert_eq!(take(&mut last, 1).await, vec![(4, "t4".into())]);
    let mut next = consumer_at(OffsetSpecification::Next).await;
    nothing_more(&mut next).await;
    publish(&environment, "ticks", None, &["t5"]).await;
    assert_eq!(take(&mut next, 1).await, vec![(5, "t5".into())]);
    // Followers see new chunks too.
    assert_eq!(take(&mut first, 1).await, vec![(5, "t5".into())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_consumer_stores_and_queries_its_offset() {
    let broker = TestBroker::start().await;
    let environment = environment(&broker).await;
    environment
        .stream_creator()
        .create("audit")
        .await
        .expect("created");
    publish(&environment, "audit", None, &["x", "y", "z"]).await;
    let mut consumer = environment
        .consumer()
        .name("auditor")
        .offset(OffsetSpecification::First)
        .build("audit")
        .await
        .expect("consumer");
    assert!(
        consumer.query_offset().await.is_err(),
        "no offset stored yet"
    );
    let read = take(&mut consumer, 2).await;
    consumer.store_offset(read[1].0).await.expect("stored");
    let mut stored = None;
    for _ in 0..50 {
        if let Ok(offset) = consumer.query_offset().await {
            stored = Some(offset);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(stored, Some(1));
    // A restarted consumer resumes after the stored offset.
    consumer.handle().close().await.expect("closed");
    let mut resumed = environment
        .consumer()
        .name("auditor")
        .offset(OffsetSpecification::Offset(stored.unwrap() + 1))
        .build("audit")
        .await
        .expect("consumer");
    assert_eq!(take(&mut resumed, 1).await, vec![(2, "z".into())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_by_size_drops_the_oldest_segments() {
    let broker = TestBroker::start().await;
    let environment = environment(&broker).await;
    environment
        .stream_creator()
        .max_length(ByteCapacity::B(3_000))
        .max_segment_size(ByteCapacity::B(1_000))
        .create("bounded")
        .await
        .expect("created");
    let body = "x".repeat(200);
    let bodies: Vec<&str> = (0..40).map(|_| body.as_str()).collect();
    publish(&environment, "bounded", None, &bodies).await;
    let queues = broker
        .api_as_guest("GET", "/api/queues/%2F/bounded", None)
        .await;
    assert_eq!(queues.status, 200, "{}", queues.text());
    let json = queues.json();
    assert_eq!(json["type"], "stream");
    let first = json["first_offset"].as_u64().expect("first offset");
    assert!(first > 0, "old segments deleted: {json}");
    assert!(json["disk_bytes"].as_u64().unwrap() <= 4_000, "{json}");
    assert_eq!(json["last_offset"], 39);
    let mut consumer = environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build("bounded")
        .await
        .expect("consumer");
    assert_eq!(
        take(&mut consumer, 1).await[0].0,
        first,
        "reading starts at the oldest kept"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_queues_of_their_vhost_in_the_management_api() {
    let broker = TestBroker::start().await;
    let environment = environment(&broker).await;
    environment
        .stream_creator()
        .create("orders")
        .await
        .expect("created");
    publish(&environment, "orders", None, &["o1", "o2"]).await;
    let listing = broker.api_as_guest("GET", "/api/queues", None).await.json();
    let orders = listing
        .as_array()
        .expect("a list")
        .iter()
        .find(|q| q["name"] == "orders")
        .expect("the stream is listed")
        .clone();
    assert_eq!(orders["type"], "stream");
    assert_eq!(orders["messages"], 2);
    assert_eq!(orders["segments"], 1);
    assert_eq!(orders["retention_unbounded"], true);
    let deleted = broker
        .api_as_guest("DELETE", "/api/queues/%2F/orders", None)
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.text());
    assert!(
        environment.producer().build("orders").await.is_err(),
        "the stream is gone"
    );
    let created = broker
        .api_as_guest(
            "PUT",
            "/api/queues/%2F/declared",
            Some(r#"{"durable":true,"arguments":{"x-queue-type":"stream"}}"#),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    publish(&environment, "declared", None, &["via the API"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_are_checked_as_rabbitmq_checks_them_on_streams() {
    let broker = TestBroker::start().await;
    let core = broker.broker();
    core.add_user("reader", "secret", vec![]);
    let root = core.vhost("/").expect("default vhost");
    root.set_permissions(
        "reader",
        warren_core::access::Permissions::new("^$", "^$", ".*").unwrap(),
    );
    let admin = environment(&broker).await;
    admin
        .stream_creator()
        .create("private")
        .await
        .expect("created");
    publish(&admin, "private", None, &["p"]).await;
    let reader = environment_as(&broker, "reader", "secret").await;
    assert!(
        reader.stream_creator().create("mine").await.is_err(),
        "configure needed to create"
    );
    assert!(
        reader.producer().build("private").await.is_err(),
        "write needed to publish"
    );
    assert!(
        reader.delete_stream("private").await.is_err(),
        "configure needed to delete"
    );
    let mut consumer = reader
        .consumer()
        .offset(OffsetSpecification::First)
        .build("private")
        .await
        .expect("read is enough to consume");
    assert_eq!(take(&mut consumer, 1).await, vec![(0, "p".into())]);
    let refused = Environment::builder()
        .host(&broker.stream_addr().ip().to_string())
        .port(broker.stream_addr().port())
        .username("reader")
        .password("wrong")
        .build()
        .await;
    assert!(refused.is_err(), "a bad password is refused");
}

fn body_as_key(message: &Message) -> String {
    String::from_utf8_lossy(message.data().unwrap_or_default()).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_super_stream_routes_by_binding_key_to_its_partitions() {
    use rabbitmq_stream_client::types::{RoutingKeyRoutingStrategy, RoutingStrategy};
    let broker = TestBroker::start().await;
    let environment = environment(&broker).await;
    environment
        .stream_creator()
        .create_super_stream("invoices", 3, None)
        .await
        .expect("super stream created");
    let mut producer = environment
        .super_stream_producer(RoutingStrategy::RoutingKeyStrategy(
            RoutingKeyRoutingStrategy {
                routing_extractor: &body_as_key,
            },
        ))
        .build("invoices")
        .await
        .expect("super stream producer");
    let confirmed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for key in ["0", "1", "2", "1"] {
        let confirmed = std::sync::Arc::clone(&confirmed);
        producer
            .send(message(key), move |status| {
                if status.is_ok_and(|s| s.confirmed()) {
                    confirmed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                async {}
            })
            .await
            .expect("sent");
    }
    assert!(
        warren_interop_tests::wait_for(LIMIT, || confirmed
            .load(std::sync::atomic::Ordering::SeqCst)
            == 4)
        .await,
        "all four confirmed"
    );
    let mut partition = environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build("invoices-1")
        .await
        .expect("partition consumer");
    assert_eq!(
        take(&mut partition, 2).await,
        vec![(0, "1".into()), (1, "1".into())]
    );
    nothing_more(&mut partition).await;
    partition.handle().close().await.expect("closed");
    producer.close().await.expect("closed");
    environment
        .delete_super_stream("invoices")
        .await
        .expect("deleted");
    assert!(
        environment.producer().build("invoices-0").await.is_err(),
        "partitions deleted with it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_clients_declare_see_and_delete_streams_as_queues() {
    use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
    use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
    let broker = TestBroker::start().await;
    let connection =
        lapin::Connection::connect(&broker.url(), lapin::ConnectionProperties::default())
            .await
            .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    let mut arguments = FieldTable::default();
    arguments.insert(
        ShortString::from("x-queue-type"),
        AMQPValue::LongString(LongString::from("stream")),
    );
    arguments.insert(
        ShortString::from("x-max-length-bytes"),
        AMQPValue::LongLongInt(1_000_000),
    );
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare("amqp-declared".into(), durable, arguments.clone())
        .await
        .expect("a stream declared over AMQP 0-9-1");
    let environment = environment(&broker).await;
    publish(&environment, "amqp-declared", None, &["one", "two"]).await;
    let passive = channel
        .queue_declare(
            "amqp-declared".into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("a passive declare finds the stream");
    assert_eq!(passive.message_count(), 2);
    let listed = broker
        .api_as_guest("GET", "/api/queues/%2F/amqp-declared", None)
        .await
        .json();
    assert_eq!(listed["arguments"]["x-max-length-bytes"], "1000000");
    channel
        .queue_delete("amqp-declared".into(), QueueDeleteOptions::default())
        .await
        .expect("deleted over AMQP");
    assert!(
        environment.producer().build("amqp-declared").await.is_err(),
        "the stream is gone"
    );
    // Streams are durable only (406 PRECONDITION_FAILED, which closes the channel).
    let error = channel
        .queue_declare(
            "transient".into(),
            QueueDeclareOptions::default(),
            arguments,
        )
        .await
        .expect_err("a non-durable stream is refused");
    assert!(
        error.to_string().contains("406") || error.to_string().contains("PRECONDITION"),
        "{error}"
    );
}
