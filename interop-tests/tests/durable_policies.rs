//! Policies and operator policies are durable definitions: set through the management API of
//! the real `warren` binary, they are in force again after the process is restarted on the
//! same data directory (and a cleared one stays cleared).

use std::path::Path;
use std::time::Duration;

use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use warren_interop_tests::process::WarrenProcess;
use warren_interop_tests::TempDir;
use warren_management::http::{send, ClientResponse};

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
) -> ClientResponse {
    let addr = warren.listener_addr("http").to_string();
    send(
        &addr,
        method,
        path,
        Some(("guest", "guest")),
        body.map(str::as_bytes),
    )
    .await
    .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

async fn stop(warren: WarrenProcess) {
    tokio::task::spawn_blocking(move || warren.terminate())
        .await
        .expect("terminate task");
}

/// The names and patterns the API lists at `path`, sorted.
async fn listed(warren: &WarrenProcess, path: &str) -> Vec<(String, String, i64)> {
    let response = api(warren, "GET", path, None).await;
    assert_eq!(response.status, 200, "GET {path}");
    let json: serde_json::Value = serde_json::from_slice(&response.body).expect("JSON");
    let mut entries: Vec<(String, String, i64)> = json
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or_default().to_string(),
                p["pattern"].as_str().unwrap_or_default().to_string(),
                p["definition"]
                    .as_object()
                    .and_then(|d| d.values().next())
                    .and_then(serde_json::Value::as_i64)
                    .unwrap_or_default(),
            )
        })
        .collect();
    entries.sort();
    entries
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_and_operator_policies_survive_a_restart_of_the_binary() {
    tokio::time::timeout(Duration::from_secs(120), async {
        let dir = TempDir::new("durable-policies");
        let warren = start(dir.path()).await;
        for (path, body) in [
            (
                "/api/policies/%2F/ttl",
                r#"{"pattern":"^t\\.","definition":{"message-ttl":5000},"apply-to":"queues","priority":3}"#,
            ),
            (
                "/api/policies/%2F/gone",
                r#"{"pattern":"^g\\.","definition":{"max-length":7},"apply-to":"queues"}"#,
            ),
            (
                "/api/operator-policies/%2F/cap",
                r#"{"pattern":".*","definition":{"max-length":10},"apply-to":"queues","priority":1}"#,
            ),
            (
                "/api/operator-policies/%2F/cap-bytes",
                r#"{"pattern":"^b\\.","definition":{"max-length-bytes":4096},"apply-to":"queues"}"#,
            ),
        ] {
            let response = api(&warren, "PUT", path, Some(body)).await;
            assert!(
                (200..300).contains(&response.status),
                "PUT {path}: {}",
                response.status
            );
        }
        for path in ["/api/policies/%2F/gone", "/api/operator-policies/%2F/cap-bytes"] {
            let response = api(&warren, "DELETE", path, None).await;
            assert!(
                (200..300).contains(&response.status),
                "DELETE {path}: {}",
                response.status
            );
        }
        let policies = listed(&warren, "/api/policies/%2F").await;
        let operator_policies = listed(&warren, "/api/operator-policies/%2F").await;
        assert_eq!(
            policies,
            vec![("ttl".to_string(), "^t\\.".to_string(), 5000)]
        );
        assert_eq!(
            operator_policies,
            vec![("cap".to_string(), ".*".to_string(), 10)]
        );
        stop(warren).await;

        let warren = start(dir.path()).await;
        assert_eq!(listed(&warren, "/api/policies/%2F").await, policies);
        assert_eq!(
            listed(&warren, "/api/operator-policies/%2F").await,
            operator_policies,
            "operator policies are restored, the cleared one is not"
        );
        // And the operator policy is in force: a queue declared now keeps at most 10.
        let connection = Connection::connect(&warren.url(), ConnectionProperties::default())
            .await
            .expect("connects");
        let channel = connection.create_channel().await.expect("channel");
        channel
            .queue_declare("capped".into(), Default::default(), Default::default())
            .await
            .expect("declare");
        for i in 0..15 {
            channel
                .basic_publish(
                    "".into(),
                    "capped".into(),
                    BasicPublishOptions::default(),
                    format!("m{i}").as_bytes(),
                    BasicProperties::default(),
                )
                .await
                .expect("publish");
        }
        // Publishes on a channel are handled before a later declare on it.
        let queue = channel
            .queue_declare(
                "capped".into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .expect("passive declare");
        assert_eq!(queue.message_count(), 10, "the restored operator policy's max-length");
        drop(connection);
        stop(warren).await;
    })
    .await
    .expect("bounded in time");
}
