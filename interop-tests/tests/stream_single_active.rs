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
