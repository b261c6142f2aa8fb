//! Single active consumer over the stream protocol, with `rabbitmq-stream-client`: two
//! subscriptions giving the same name with `single-active-consumer` form a group; only the
//! first is sent chunks, after the broker told it it is active (ConsumerUpdate) and it
//! answered where to start; when it closes, the other is told it is active and resumes at
//! the offset its listener answers. (RabbitMQ offers single active consumer on streams to
//! stream protocol clients only.)
//!
//! Multi-threaded runtime, as in stream_client.rs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use rabbitmq_stream_client::{Consumer, Environment};
use std::sync::Mutex;
use warren_interop_tests::TestBroker;

const LIMIT: Duration = Duration::from_secs(10);

async fn environment(broker: &TestBroker) -> Environment {
    let addr = broker.stream_addr();
    Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .build()
        .await
        .expect("connects to the stream listener")
}

async fn publish(environment: &Environment, stream: &str, bodies: &[&str]) {
    let producer = environment
        .producer()
        .build(stream)
        .await
        .expect("producer");
    for body in bodies {
        let confirmed = producer
            .send_with_confirm(Message::builder().body(body.as_bytes().to_vec()).build())
            .await
            .expect("sent");
        assert!(confirmed.confirmed());
    }
    producer.close().await.expect("closed");
}

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

async fn nothing_more(consumer: &mut Consumer) {
    if let Ok(Some(Ok(delivery))) =
        tokio::time::timeout(Duration::from_millis(400), consumer.next()).await
    {
        panic!("unexpected delivery at offset {}", delivery.offset());
    }
}

fn read(items: &[(u64, &str)]) -> Vec<(u64, String)> {
    items.iter().map(|(o, b)| (*o, b.to_string())).collect()
}

/// A single active consumer named `app` whose update listener records `(label, active)`
/// and answers `Offset(resume_at)`.
async fn member(
    environment: &Environment,
    label: &'static str,
    updates: &Arc<Mutex<Vec<(&'static str, u8)>>>,
    resume_at: &Arc<AtomicU64>,
) -> Consumer {
    let (updates, resume_at) = (Arc::clone(updates), Arc::clone(resume_at));
    environment
        .consumer()
        .name("app")
        .enable_single_active_consumer(true)
        .offset(OffsetSpecification::First)
        .consumer_update(move |active, _context| {
            updates.lock().unwrap().push((label, active));
            let offset = resume_at.load(Ordering::SeqCst);
            async move { OffsetSpecification::Offset(offset) }
        })
        .build("orders")
        .await
        .expect("single active consumer subscribes")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_active_consumer_reads_and_the_next_takes_over_where_it_says() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let broker = TestBroker::start().await;
        let environment = environment(&broker).await;
        environment
            .stream_creator()
            .create("orders")
            .await
            .expect("created");
        publish(&environment, "orders", &["o0", "o1", "o2"]).await;
        let updates = Arc::new(Mutex::new(Vec::new()));
        let resume_at = Arc::new(AtomicU64::new(1));

        let mut first = member(&environment, "first", &updates, &resume_at).await;
        // Active at once: told so, it starts where its listener said (offset 1).
        assert_eq!(take(&mut first, 2).await, read(&[(1, "o1"), (2, "o2")]));
        let mut second = member(&environment, "second", &updates, &resume_at).await;
        publish(&environment, "orders", &["o3"]).await;
        assert_eq!(take(&mut first, 1).await, read(&[(3, "o3")]));
        nothing_more(&mut second).await;
        assert_eq!(*updates.lock().unwrap(), vec![("first", 1)]);

        // The active one leaves: the second is told and resumes where its listener says
        // (from offset 2, as an application would after reading its stored offset).
        resume_at.store(2, Ordering::SeqCst);
        first.handle().close().await.expect("first closes");
        assert_eq!(
            take(&mut second, 2).await,
            read(&[(2, "o2"), (3, "o3")]),
            "the second consumer resumes at the offset its listener gave"
        );
        assert_eq!(*updates.lock().unwrap(), vec![("first", 1), ("second", 1)]);
        publish(&environment, "orders", &["o4"]).await;
        assert_eq!(take(&mut second, 1).await, read(&[(4, "o4")]));

        // A plain consumer next to the group is not part of it.
        let mut plain = environment
            .consumer()
            .offset(OffsetSpecification::First)
            .build("orders")
            .await
            .expect("plain consumer");
        assert_eq!(take(&mut plain, 1).await, read(&[(0, "o0")]));
        plain.handle().close().await.expect("closed");
        second.handle().close().await.expect("second closes");
    })
    .await
    .expect("bounded");
}

type Updates = Arc<Mutex<Vec<(&'static str, String, u8)>>>;

/// A super stream consumer named `app` with single active consumer whose update listener
/// records `(label, partition, active)` and answers `First`.
async fn super_member(
    environment: &Environment,
    label: &'static str,
    updates: &Updates,
) -> rabbitmq_stream_client::types::SuperStreamConsumer {
    let updates = Arc::clone(updates);
    environment
        .super_stream_consumer()
        .name("app")
        .enable_single_active_consumer(true)
        .offset(OffsetSpecification::First)
        .consumer_update(move |active, context| {
            updates
                .lock()
                .unwrap()
                .push((label, context.stream(), active));
            async { OffsetSpecification::First }
        })
        .build("orders")
        .await
        .expect("super stream consumer subscribes")
}

/// The next `count` deliveries of a super stream consumer as `(partition, body)`, sorted.
async fn take_partitions(
    consumer: &mut rabbitmq_stream_client::types::SuperStreamConsumer,
    count: usize,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while out.len() < count {
        let delivery = tokio::time::timeout(LIMIT, consumer.next())
            .await
            .unwrap_or_else(|_| panic!("only {} of {count} deliveries: {out:?}", out.len()))
            .expect("consumer open")
            .expect("a delivery");
        let body =
            String::from_utf8_lossy(delivery.message().data().unwrap_or_default()).into_owned();
        out.push((delivery.stream().clone(), body));
    }
    out.sort();
    out
}

async fn nothing_more_from(consumer: &mut rabbitmq_stream_client::types::SuperStreamConsumer) {
    if let Ok(Some(Ok(delivery))) =
        tokio::time::timeout(Duration::from_millis(400), consumer.next()).await
    {
        panic!(
            "unexpected delivery from {} at offset {}",
            delivery.stream(),
            delivery.offset()
        );
    }
}

fn partitioned(items: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = items
        .iter()
        .map(|(p, b)| (p.to_string(), b.to_string()))
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn super_stream_single_active_consumers_spread_over_the_partitions() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let broker = TestBroker::start().await;
        let environment = environment(&broker).await;
        environment
            .stream_creator()
            .create_super_stream("orders", 3, None)
            .await
            .expect("super stream created");
        for partition in ["orders-0", "orders-1", "orders-2"] {
            publish(&environment, partition, &[&format!("{partition}/a")]).await;
        }
        let updates: Updates = Arc::new(Mutex::new(Vec::new()));

        // Alone in the group, the first consumer is active on every partition.
        let mut first = super_member(&environment, "first", &updates).await;
        assert_eq!(
            take_partitions(&mut first, 3).await,
            partitioned(&[
                ("orders-0", "orders-0/a"),
                ("orders-1", "orders-1/a"),
                ("orders-2", "orders-2/a"),
            ])
        );

        // A second joins: partition 1 (1 % 2) goes to it. The first is told to step down
        // there, then the second is told it is active and reads partition 1 from `first`.
        let mut second = super_member(&environment, "second", &updates).await;
        assert_eq!(
            take_partitions(&mut second, 1).await,
            partitioned(&[("orders-1", "orders-1/a")])
        );
        {
            let seen = updates.lock().unwrap().clone();
            let step_down = seen
                .iter()
                .position(|u| *u == ("first", "orders-1".to_string(), 0))
                .expect("the first stepped down on partition 1");
            let takeover = seen
                .iter()
                .position(|u| *u == ("second", "orders-1".to_string(), 1))
                .expect("the second took partition 1");
            assert!(step_down < takeover, "{seen:?}");
            let second_active: Vec<&str> = seen
                .iter()
                .filter(|(label, _, active)| *label == "second" && *active == 1)
                .map(|(_, partition, _)| partition.as_str())
                .collect();
            assert_eq!(second_active, ["orders-1"], "{seen:?}");
        }
        for partition in ["orders-0", "orders-1", "orders-2"] {
            publish(&environment, partition, &[&format!("{partition}/b")]).await;
        }
        assert_eq!(
            take_partitions(&mut first, 2).await,
            partitioned(&[("orders-0", "orders-0/b"), ("orders-2", "orders-2/b")])
        );
        assert_eq!(
            take_partitions(&mut second, 1).await,
            partitioned(&[("orders-1", "orders-1/b")])
        );
        nothing_more_from(&mut first).await;
        nothing_more_from(&mut second).await;

        // The management API shows who is active where.
        let consumers = broker
            .api_as_guest("GET", "/api/stream/consumers/%2F", None)
            .await
            .json();
        let mut status: Vec<(String, String)> = consumers
            .as_array()
            .expect("a list")
            .iter()
            .map(|c| {
                (
                    c["queue"]["name"].as_str().unwrap_or("").to_string(),
                    c["activity_status"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        status.sort();
        assert_eq!(
            status,
            partitioned(&[
                ("orders-0", "single_active"),
                ("orders-0", "waiting"),
                ("orders-1", "single_active"),
                ("orders-1", "waiting"),
                ("orders-2", "single_active"),
                ("orders-2", "waiting"),
            ])
        );

        // The second leaves: the first takes partition 1 back and reads it from `first`.
        second.handle().close().await.expect("second closes");
        assert_eq!(
            take_partitions(&mut first, 2).await,
            partitioned(&[("orders-1", "orders-1/a"), ("orders-1", "orders-1/b")])
        );
        nothing_more_from(&mut first).await;
        first.handle().close().await.expect("first closes");
    })
    .await
    .expect("bounded");
}
