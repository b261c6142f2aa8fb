//! Publishing through the management API goes through the core's one publish path, as every
//! protocol's publish does: persistent messages reaching durable queues are written to the
//! message store before the API answers (they survive SIGKILL of the real `warren`
//! process), and topic permissions refuse a routing key as RabbitMQ's API answers that
//! refusal (400, the channel's `403 ACCESS_REFUSED - ...` as the reason).

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use warren_interop_tests::process::WarrenProcess;
use warren_interop_tests::{TempDir, TestBroker};

/// A bound on each whole test.
const TEST_LIMIT: Duration = Duration::from_secs(120);

async fn start(dir: &Path) -> WarrenProcess {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || WarrenProcess::start(&dir, &[]))
        .await
        .expect("start task")
}

async fn api(
    warren: &WarrenProcess,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> warren_interop_tests::HttpResponse {
    let addr = warren.listener_addr("http").to_string();
    warren_management::http::send(
        &addr,
        method,
        path,
        Some(("guest", "guest")),
        body.map(str::as_bytes),
    )
    .await
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

fn publish_body(payload: &str, delivery_mode: u8) -> String {
    json!({
        "routing_key": "kept",
        "payload": payload,
        "payload_encoding": "string",
        "properties": {"delivery_mode": delivery_mode},
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistent_messages_published_over_http_to_a_durable_queue_survive_sigkill() {
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = TempDir::new("http-publish-kill");
        let warren = start(dir.path()).await;
        let declared = api(
            &warren,
            "PUT",
            "/api/queues/%2F/kept",
            Some(r#"{"durable":true}"#),
        )
        .await;
        assert_eq!(declared.status, 201, "{}", declared.text());
        for payload in ["one", "two", "three"] {
            let published = api(
                &warren,
                "POST",
                "/api/exchanges/%2F/amq.default/publish",
                Some(&publish_body(payload, 2)),
            )
            .await;
            assert_eq!(published.json(), json!({"routed": true}));
        }
        // A transient message in the same queue is not kept, as in RabbitMQ.
        let transient = api(
            &warren,
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            Some(&publish_body("transient", 1)),
        )
        .await;
        assert_eq!(transient.json(), json!({"routed": true}));
        // The API answered once the persistent messages were on disk: kill at once.
        tokio::task::spawn_blocking(move || warren.kill())
            .await
            .expect("kill");

        let warren = start(dir.path()).await;
        let got = api(
            &warren,
            "POST",
            "/api/queues/%2F/kept/get",
            Some(r#"{"count":10,"ackmode":"ack_requeue_false","encoding":"auto"}"#),
        )
        .await;
        let payloads: Vec<String> = got
            .json()
            .as_array()
            .expect("a list of messages")
            .iter()
            .map(|m| m["payload"].as_str().expect("payload").to_string())
            .collect();
        assert_eq!(payloads, ["one", "two", "three"]);
        assert!(warren.terminate().success());
    })
    .await
    .expect("bounded in time");
}

#[tokio::test]
async fn an_http_publish_refused_by_topic_permissions_is_answered_as_rabbitmq_answers() {
    let broker = TestBroker::start().await;
    broker.add_topic_user("writer", "secret", "^allowed\\.", ".*");
    // The same user again, tagged so it may use the API.
    broker
        .broker()
        .add_user("writer", "secret", vec!["management".into()]);
    let publish = |key: &'static str| {
        let broker = &broker;
        async move {
            broker
                .api(
                    "POST",
                    "/api/exchanges/%2F/amq.topic/publish",
                    Some(("writer", "secret")),
                    Some(
                        &json!({
                            "routing_key": key,
                            "payload": "m",
                            "payload_encoding": "string",
                            "properties": {},
                        })
                        .to_string(),
                    ),
                )
                .await
        }
    };
    let allowed = publish("allowed.key").await;
    assert_eq!(allowed.status, 200, "{}", allowed.text());
    assert_eq!(allowed.json(), json!({"routed": false}));
    let refused = publish("other.key").await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(
        refused.json(),
        json!({
            "error": "bad_request",
            "reason": "403 ACCESS_REFUSED - write access to topic 'other.key' in exchange \
                       'amq.topic' in vhost '/' refused for user 'writer'",
        })
    );
    broker.shutdown().await;
}
