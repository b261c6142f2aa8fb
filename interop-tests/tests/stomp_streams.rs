//! Streams over STOMP as RabbitMQ's STOMP plugin serves them: a `/queue/` destination
//! declared with `x-queue-type: stream`, SUBSCRIBE to `/amq/queue/<stream>` with the
//! `x-stream-offset` header (`first`, `last`, `next`, `offset=N`, `timestamp=N`) and the
//! `prefetch-count` a stream consumer must set, the offset on each MESSAGE, filtering with
//! `x-stream-filter`, and the refusals.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::TestBroker;

const QUIET: Duration = Duration::from_millis(300);

fn offset(message: &warren_interop_tests::stomp::ReceivedFrame) -> Option<u64> {
    message
        .header("x-stream-offset")
        .and_then(|o| o.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_subscribed_from_an_offset_with_a_prefetch_and_acked_for_credit() {
    let broker = TestBroker::start().await;
    let mut consumer = StompClient::connect(broker.stomp_addr(), "1.2").await;
    // A /queue/ destination with x-queue-type declares the stream.
    consumer
        .subscribe(
            "/queue/events",
            "live",
            "client-individual",
            &[("x-queue-type", "stream"), ("prefetch-count", "10")],
        )
        .await;
    let queue = broker
        .broker()
        .vhost("/")
        .and_then(|v| v.queue_instance("events"))
        .expect("declared");
    assert_eq!(queue.queue_type().name(), "stream");

    let mut publisher = StompClient::connect(broker.stomp_addr(), "1.2").await;
    for body in ["e0", "e1", "e2", "e3"] {
        publisher.send("/amq/queue/events", body, &[]).await;
    }
    // The live subscription started at `next`: it gets them all as they come.
    for (expected, body) in ["e0", "e1", "e2", "e3"].iter().enumerate() {
        let message = consumer.expect_message().await;
        assert_eq!(message.text(), *body);
        assert_eq!(offset(&message), Some(expected as u64));
        assert_eq!(message.header("subscription"), Some("live"));
        let (header, value) = consumer.ack_headers(&message);
        let value = value.to_string();
        consumer.request("ACK", &[(header, &value)]).await;
    }

    // From an offset, two at a time: the third waits for an ack.
    let mut reader = StompClient::connect(broker.stomp_addr(), "1.2").await;
    reader
        .subscribe(
            "/amq/queue/events",
            "from-1",
            "client",
            &[("x-stream-offset", "offset=1"), ("prefetch-count", "2")],
        )
        .await;
    let first = reader.expect_message().await;
    let second = reader.expect_message().await;
    assert_eq!((offset(&first), offset(&second)), (Some(1), Some(2)));
    assert!(
        reader.read_frame(QUIET).await.is_none(),
        "held back by prefetch-count"
    );
    let (header, value) = reader.ack_headers(&second);
    let value = value.to_string();
    // `client` acks cumulatively.
    reader.request("ACK", &[(header, &value)]).await;
    assert_eq!(offset(&reader.expect_message().await), Some(3));

    // first, last, and a timestamp in seconds.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let long_ago = format!("timestamp={}", now - 3600);
    for (spec, expected) in [("first", 0), (long_ago.as_str(), 0)] {
        let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
        client
            .subscribe(
                "/amq/queue/events",
                "s",
                "client",
                &[("x-stream-offset", spec), ("prefetch-count", "1")],
            )
            .await;
        assert_eq!(
            offset(&client.expect_message().await),
            Some(expected),
            "{spec}"
        );
    }
    let mut last = StompClient::connect(broker.stomp_addr(), "1.2").await;
    last.subscribe(
        "/amq/queue/events",
        "s",
        "client",
        &[("x-stream-offset", "last"), ("prefetch-count", "10")],
    )
    .await;
    let newest = offset(&last.expect_message().await).expect("an offset");
    assert!(newest <= 3);
    // The stream keeps everything.
    assert_eq!(queue.info().ready, 4);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtering_subscription_gets_only_its_values() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client
        .send(
            "/queue/orders",
            "eu-1",
            &[("x-queue-type", "stream"), ("x-stream-filter-value", "eu")],
        )
        .await;
    client
        .send(
            "/amq/queue/orders",
            "us-1",
            &[("x-stream-filter-value", "us")],
        )
        .await;
    client.send("/amq/queue/orders", "plain", &[]).await;
    client
        .send(
            "/amq/queue/orders",
            "eu-2",
            &[("x-stream-filter-value", "eu")],
        )
        .await;
    client
        .subscribe(
            "/amq/queue/orders",
            "eu",
            "client",
            &[
                ("x-stream-offset", "first"),
                ("prefetch-count", "10"),
                ("x-stream-filter", "eu,asia"),
            ],
        )
        .await;
    assert_eq!(client.expect_message().await.text(), "eu-1");
    assert_eq!(client.expect_message().await.text(), "eu-2");
    assert!(client.read_frame(QUIET).await.is_none());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_subscription_without_prefetch_or_with_auto_ack_is_refused() {
    let broker = TestBroker::start().await;
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client
        .send("/queue/events", "e0", &[("x-queue-type", "stream")])
        .await;
    client
        .write_frame(
            "SUBSCRIBE",
            &[
                ("destination", "/amq/queue/events"),
                ("id", "s"),
                ("ack", "client"),
            ],
            b"",
        )
        .await;
    let error = client.expect_error().await;
    assert_eq!(
        error.text(),
        "consumer prefetch count is not set for stream queue 'events' in vhost '/'"
    );

    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client
        .write_frame(
            "SUBSCRIBE",
            &[
                ("destination", "/amq/queue/events"),
                ("id", "s"),
                ("prefetch-count", "5"),
            ],
            b"",
        )
        .await;
    let error = client.expect_error().await;
    assert_eq!(
        error.text(),
        "automatic acknowledgement not supported by stream queue 'events' in vhost '/'"
    );
    broker.shutdown().await;
}
