//! Stream retention by policy, set through the management API (`PUT /api/policies`) and
//! observed with the stream client and the API: `stream-max-segment-size-bytes` cuts new
//! segments, `max-length-bytes` and `max-age` delete old ones whole, always keeping the
//! newest, and a policy wins over the stream's own arguments.
//!
//! Multi-threaded runtimes, as in stream_client.rs (the client's producer closes itself with
//! a blocking call).

use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{ByteCapacity, Message, OffsetSpecification};
use rabbitmq_stream_client::Environment;
use serde_json::Value as Json;
use warren_interop_tests::{wait_for_async, TestBroker};

const LIMIT: Duration = Duration::from_secs(10);

async fn environment(broker: &TestBroker) -> Environment {
    let addr = broker.stream_addr();
    Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .username("guest")
        .password("guest")
        .build()
        .await
        .expect("connects to the stream listener")
}

/// Publishes `count` bodies of 200 bytes, each confirmed before the next (one chunk each).
async fn publish(environment: &Environment, stream: &str, count: usize) {
    let producer = environment
        .producer()
        .build(stream)
        .await
        .expect("producer");
    let body = "x".repeat(200);
    for _ in 0..count {
        let confirmed = producer
            .send_with_confirm(Message::builder().body(body.clone().into_bytes()).build())
            .await
            .expect("sent");
        assert!(confirmed.confirmed());
    }
    producer.close().await.expect("closed");
}

async fn stream_info(broker: &TestBroker, name: &str) -> Json {
    let response = broker
        .api_as_guest("GET", &format!("/api/queues/%2F/{name}"), None)
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

async fn put_policy(broker: &TestBroker, name: &str, body: &str) {
    let response = broker
        .api_as_guest("PUT", &format!("/api/policies/%2F/{name}"), Some(body))
        .await;
    assert!(
        response.status == 201 || response.status == 204,
        "{}: {}",
        response.status,
        response.text()
    );
}

/// The offset the first delivery of a consumer from `first` has.
async fn first_readable(environment: &Environment, stream: &str) -> u64 {
    let mut consumer = environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build(stream)
        .await
        .expect("consumer");
    let delivery = tokio::time::timeout(LIMIT, consumer.next())
        .await
        .expect("a delivery in time")
        .expect("consumer open")
        .expect("a delivery");
    let offset = delivery.offset();
    consumer.handle().close().await.expect("closed");
    offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_sets_segment_size_and_length_over_the_arguments() {
    let broker = TestBroker::start().await;
    let environment = environment(&broker).await;
    // The stream's own argument allows a gigabyte; the policy's limits win.
    environment
        .stream_creator()
        .max_length(ByteCapacity::GB(1))
        .create("bounded")
        .await
        .expect("created");
    put_policy(
        &broker,
        "small-segments",
        r#"{"pattern": "^bounded$", "apply-to": "streams",
            "definition": {"stream-max-segment-size-bytes": 1000}}"#,
    )
    .await;
    publish(&environment, "bounded", 40).await;
    let info = stream_info(&broker, "bounded").await;
    assert!(
        info["segments"].as_u64().unwrap() >= 8,
        "the policy's segment size cut segments: {info}"
    );
    assert_eq!(info["first_offset"], 0, "nothing deleted yet: {info}");
    assert_eq!(info["last_offset"], 39);

    // A policy of higher priority adds a length limit: old segments go at once.
    put_policy(
        &broker,
        "small-stream",
        r#"{"pattern": "^bounded$", "apply-to": "streams", "priority": 1,
            "definition": {"stream-max-segment-size-bytes": 1000, "max-length-bytes": 3000}}"#,
    )
    .await;
    let info = stream_info(&broker, "bounded").await;
    let first = info["first_offset"].as_u64().expect("first offset");
    assert!(first > 0, "old segments deleted: {info}");
    assert!(info["disk_bytes"].as_u64().unwrap() <= 4_000, "{info}");
    assert_eq!(info["last_offset"], 39, "the newest are kept: {info}");
    assert_eq!(info["retention_unbounded"], false);
    assert_eq!(
        info["policy"], "small-stream",
        "the policy of higher priority"
    );
    assert_eq!(first_readable(&environment, "bounded").await, first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_max_age_policy_deletes_old_segments_and_keeps_the_newest() {
    let broker = TestBroker::start().await;
    let environment = environment(&broker).await;
    environment
        .stream_creator()
        .max_segment_size(ByteCapacity::B(1_000))
        .create("aging")
        .await
        .expect("created");
    publish(&environment, "aging", 20).await;
    let before = stream_info(&broker, "aging").await;
    assert_eq!(before["first_offset"], 0);
    assert!(before["segments"].as_u64().unwrap() > 1, "{before}");
    // `apply-to: queues` reaches streams too, as in RabbitMQ.
    put_policy(
        &broker,
        "short-lived",
        r#"{"pattern": "^aging$", "apply-to": "queues", "definition": {"max-age": "1s"}}"#,
    )
    .await;
    let aged = wait_for_async(Duration::from_secs(10), || async {
        stream_info(&broker, "aging").await["segments"] == 1
    })
    .await;
    let after = stream_info(&broker, "aging").await;
    assert!(aged, "only the newest segment is left: {after}");
    let first = after["first_offset"].as_u64().unwrap();
    assert!(first > 0 && first <= 19, "{after}");
    assert_eq!(after["last_offset"], 19);
    assert_eq!(after["retention_unbounded"], false);
    assert_eq!(first_readable(&environment, "aging").await, first);

    // Cleared, the policy's limit no longer applies: the stream's own settings (none) do.
    let cleared = broker
        .api_as_guest("DELETE", "/api/policies/%2F/short-lived", None)
        .await;
    assert_eq!(cleared.status, 204, "{}", cleared.text());
    assert_eq!(
        stream_info(&broker, "aging").await["retention_unbounded"],
        true
    );
}
