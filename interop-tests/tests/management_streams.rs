//! Streams and quorum queues through the management API: publishing with
//! `POST /api/exchanges/{vhost}/amq.default/publish` appends to a stream (read back with the
//! stream client), and `DELETE /api/vhosts/{vhost}` deletes the vhost's quorum queues and
//! streams with it, so a vhost created again under the name starts empty.
//!
//! Multi-threaded runtimes, as in stream_client.rs (the client's producer and consumer close
//! with blocking calls).

use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::OffsetSpecification;
use rabbitmq_stream_client::Environment;
use serde_json::{json, Value as Json};
use warren_interop_tests::{wait_for_async, TestBroker};

const LIMIT: Duration = Duration::from_secs(10);

async fn call(broker: &TestBroker, method: &str, path: &str, body: Option<&str>) -> (u16, Json) {
    let response = broker.api_as_guest(method, path, body).await;
    (response.status, response.json())
}

async fn expect(broker: &TestBroker, method: &str, path: &str, body: Option<&str>, status: u16) {
    let response = broker.api_as_guest(method, path, body).await;
    assert_eq!(
        response.status,
        status,
        "{method} {path}: {}",
        response.text()
    );
}

async fn publish(broker: &TestBroker, vhost: &str, routing_key: &str, payload: &str) -> Json {
    let body = json!({
        "routing_key": routing_key,
        "payload": payload,
        "payload_encoding": "string",
        "properties": {"content_type": "text/plain", "headers": {"source": "http"}},
    })
    .to_string();
    let (status, json) = call(
        broker,
        "POST",
        &format!("/api/exchanges/{vhost}/amq.default/publish"),
        Some(&body),
    )
    .await;
    assert_eq!(status, 200, "{json}");
    json
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_over_http_appends_to_a_stream() {
    let broker = TestBroker::start().await;
    expect(
        &broker,
        "PUT",
        "/api/queues/%2F/events",
        Some(r#"{"durable": true, "arguments": {"x-queue-type": "stream"}}"#),
        201,
    )
    .await;
    for payload in ["first", "second"] {
        assert_eq!(
            publish(&broker, "%2F", "events", payload).await,
            json!({"routed": true})
        );
    }
    // The API answered once each record was written: both are in the stream now.
    let (_, info) = call(&broker, "GET", "/api/queues/%2F/events", None).await;
    assert_eq!(info["type"], "stream");
    assert_eq!(info["messages"], 2, "{info}");
    assert_eq!(info["last_offset"], 1, "{info}");

    let addr = broker.stream_addr();
    let environment = Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .build()
        .await
        .expect("stream client connects");
    let mut consumer = environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build("events")
        .await
        .expect("consumer");
    let mut read = Vec::new();
    while read.len() < 2 {
        let delivery = tokio::time::timeout(LIMIT, consumer.next())
            .await
            .expect("a delivery in time")
            .expect("consumer open")
            .expect("a delivery");
        let message = delivery.message();
        let content_type = message
            .properties()
            .and_then(|p| p.content_type.clone())
            .map(|s| s.to_string());
        read.push((
            delivery.offset(),
            String::from_utf8_lossy(message.data().unwrap_or_default()).into_owned(),
            content_type,
        ));
    }
    assert_eq!(
        read,
        vec![
            (0, "first".to_string(), Some("text/plain".to_string())),
            (1, "second".to_string(), Some("text/plain".to_string())),
        ]
    );
    consumer.handle().close().await.expect("closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_vhost_deletes_its_quorum_queues_and_streams() {
    let broker = TestBroker::start().await;
    let permissions = r#"{"configure": ".*", "write": ".*", "read": ".*"}"#;
    let make_vhost = || async {
        expect(&broker, "PUT", "/api/vhosts/v", None, 201).await;
        // The creating user was granted permissions on the new vhost (as RabbitMQ
        // grants them): this sets them again.
        expect(
            &broker,
            "PUT",
            "/api/permissions/v/guest",
            Some(permissions),
            204,
        )
        .await;
    };
    make_vhost().await;
    expect(
        &broker,
        "PUT",
        "/api/queues/v/jobs",
        Some(r#"{"durable": true, "arguments": {"x-queue-type": "quorum"}}"#),
        201,
    )
    .await;
    expect(
        &broker,
        "PUT",
        "/api/queues/v/log",
        Some(r#"{"durable": true, "arguments": {"x-queue-type": "stream"}}"#),
        201,
    )
    .await;
    for payload in ["a", "b"] {
        assert_eq!(publish(&broker, "v", "jobs", payload).await["routed"], true);
        assert_eq!(publish(&broker, "v", "log", payload).await["routed"], true);
    }
    assert!(
        wait_for_async(LIMIT, || async {
            call(&broker, "GET", "/api/queues/v/jobs", None).await.1["messages"] == 2
        })
        .await,
        "the quorum queue holds both"
    );

    expect(&broker, "DELETE", "/api/vhosts/v", None, 204).await;
    let (status, _) = call(&broker, "GET", "/api/queues/v/jobs", None).await;
    assert_eq!(status, 404, "the vhost and its queues are gone");

    // Created again under the same names, they start empty: nothing of the old quorum
    // queue's group or the old stream's log is reopened.
    make_vhost().await;
    expect(
        &broker,
        "PUT",
        "/api/queues/v/jobs",
        Some(r#"{"durable": true, "arguments": {"x-queue-type": "quorum"}}"#),
        201,
    )
    .await;
    expect(
        &broker,
        "PUT",
        "/api/queues/v/log",
        Some(r#"{"durable": true, "arguments": {"x-queue-type": "stream"}}"#),
        201,
    )
    .await;
    // Given time to recover anything it would have found.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, jobs) = call(&broker, "GET", "/api/queues/v/jobs", None).await;
    assert_eq!(jobs["messages"], 0, "a new, empty quorum queue: {jobs}");
    let (_, log) = call(&broker, "GET", "/api/queues/v/log", None).await;
    assert_eq!(log["messages"], 0, "a new, empty stream: {log}");
    assert_eq!(publish(&broker, "v", "jobs", "c").await["routed"], true);
    assert!(
        wait_for_async(LIMIT, || async {
            call(&broker, "GET", "/api/queues/v/jobs", None).await.1["messages"] == 1
        })
        .await,
        "the new quorum queue works"
    );
    broker.shutdown().await;
}
