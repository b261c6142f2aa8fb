//! Retained MQTT messages against the real `warren` binary across restarts: a retained
//! message acknowledged with PUBACK survives a clean restart and a SIGKILL right after the
//! PUBACK, and one cleared by an empty retained payload stays cleared.
//!
//! Every test uses its own temporary `data_dir` and port 0, and is bounded in time.

mod mqtt_common;

use std::path::Path;
use std::time::Duration;

use mqtt_common::{connect, options, MqttClient};
use rumqttc::{Packet, QoS};
use warren_interop_tests::process::WarrenProcess;
use warren_interop_tests::TempDir;

/// A bound on each whole test.
const TEST_LIMIT: Duration = Duration::from_secs(120);

async fn start(dir: &Path) -> WarrenProcess {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || WarrenProcess::start(&dir, &[]))
        .await
        .expect("start task")
}

/// Publishes a retained QoS 1 message and waits for its PUBACK.
async fn publish_retained(client: &mut MqttClient, topic: &str, payload: &[u8]) {
    client
        .client
        .publish(topic, QoS::AtLeastOnce, true, payload.to_vec())
        .await
        .expect("publish queued");
    assert!(matches!(client.next_ack().await, Packet::PubAck(_)));
}

/// Subscribes a new client to `filter` and returns the retained messages it gets, sorted,
/// after checking nothing else comes.
async fn retained_for(
    warren: &WarrenProcess,
    client_id: &str,
    filter: &str,
    expected: usize,
) -> Vec<(String, Vec<u8>)> {
    let mut subscriber = connect(options(warren.listener_addr("mqtt"), client_id)).await;
    subscriber.subscribe(filter, QoS::AtLeastOnce).await;
    let mut received = Vec::new();
    for _ in 0..expected {
        let publish = subscriber.next_publish().await;
        assert!(publish.retain, "a retained message is sent with RETAIN set");
        received.push((publish.topic.clone(), publish.payload.to_vec()));
    }
    assert!(
        subscriber
            .no_publish_within(Duration::from_millis(300))
            .await
    );
    subscriber.disconnect().await;
    received.sort();
    received
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retained_messages_survive_a_clean_restart_and_a_sigkill_after_the_puback() {
    // Building the binary (once per test run) is not part of the bound.
    tokio::task::spawn_blocking(warren_interop_tests::process::warren_binary)
        .await
        .expect("build task");
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = TempDir::new("mqtt-retained-restart");
        let warren = start(dir.path()).await;
        let mut publisher = connect(options(warren.listener_addr("mqtt"), "lamp")).await;
        publish_retained(&mut publisher, "status/lamp", b"on").await;
        publish_retained(&mut publisher, "status/door", b"open").await;
        // An empty retained payload clears the topic.
        publish_retained(&mut publisher, "status/door", b"").await;
        publisher.disconnect().await;
        assert!(warren.terminate().success());

        // Clean restart: the retained message is back, the cleared one stays cleared.
        let warren = start(dir.path()).await;
        assert_eq!(
            retained_for(&warren, "reader-1", "status/#", 1).await,
            vec![("status/lamp".to_string(), b"on".to_vec())]
        );
        let mut publisher = connect(options(warren.listener_addr("mqtt"), "fan")).await;
        publish_retained(&mut publisher, "status/fan", b"fast").await;
        // Acknowledged means on disk: nothing is flushed on a SIGKILL.
        warren.kill();

        let warren = start(dir.path()).await;
        assert_eq!(
            retained_for(&warren, "reader-2", "status/+", 2).await,
            vec![
                ("status/fan".to_string(), b"fast".to_vec()),
                ("status/lamp".to_string(), b"on".to_vec()),
            ]
        );
        // A retained message for exactly its topic, too.
        assert_eq!(
            retained_for(&warren, "reader-3", "status/fan", 1).await,
            vec![("status/fan".to_string(), b"fast".to_vec())]
        );
        assert!(warren.terminate().success());
    })
    .await
    .expect("bounded in time");
}
