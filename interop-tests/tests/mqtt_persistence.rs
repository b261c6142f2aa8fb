//! MQTT against the real `warren` binary across restarts: a QoS 1 and a QoS 2 message
//! acknowledged (PUBACK, PUBREC) for a persistent session's durable queue survive a SIGKILL
//! right after the acknowledgement, and the session gets them on reconnect.
//!
//! Every test uses its own temporary `data_dir` and port 0, and is bounded in time.

mod mqtt_common;

use std::path::Path;
use std::time::Duration;

use mqtt_common::{connect, options};
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

async fn mqtt_addr(warren: &WarrenProcess) -> std::net::SocketAddr {
    warren.listener_addr("mqtt")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_publishes_to_a_persistent_session_survive_sigkill() {
    // Building the binary (once per test run) is not part of the bound.
    tokio::task::spawn_blocking(warren_interop_tests::process::warren_binary)
        .await
        .expect("build task");
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = TempDir::new("mqtt-durable-ack");
        let warren = start(dir.path()).await;
        let addr = mqtt_addr(&warren).await;

        let mut keeper = options(addr, "keeper");
        keeper.set_clean_session(false);
        let mut subscriber = connect(keeper.clone()).await;
        subscriber.subscribe("plant/+/temp", QoS::AtLeastOnce).await;
        subscriber.disconnect().await;

        let mut publisher = connect(options(addr, "thermometer")).await;
        publisher
            .publish("plant/7/temp", QoS::AtLeastOnce, b"21.5")
            .await;
        assert!(matches!(publisher.next_ack().await, Packet::PubAck(_)));
        publisher
            .publish("plant/8/temp", QoS::ExactlyOnce, b"19.0")
            .await;
        assert!(matches!(publisher.next_ack().await, Packet::PubRec(_)));
        // Acknowledged means on disk: nothing is flushed on a SIGKILL.
        warren.kill();

        let warren = start(dir.path()).await;
        let addr = mqtt_addr(&warren).await;
        let mut keeper = options(addr, "keeper");
        keeper.set_clean_session(false);
        let mut subscriber = connect(keeper).await;
        assert!(subscriber.connack.session_present);
        let mut received = Vec::new();
        for _ in 0..2 {
            let publish = subscriber.next_publish().await;
            assert_eq!(publish.qos, QoS::AtLeastOnce);
            received.push((publish.topic.clone(), publish.payload.to_vec()));
        }
        received.sort();
        assert_eq!(
            received,
            vec![
                ("plant/7/temp".to_string(), b"21.5".to_vec()),
                ("plant/8/temp".to_string(), b"19.0".to_vec()),
            ]
        );
        subscriber.disconnect().await;
        assert!(warren.terminate().success());
    })
    .await
    .expect("bounded in time");
}
