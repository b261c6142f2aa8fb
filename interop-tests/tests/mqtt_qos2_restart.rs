//! QoS 2 state of a persistent MQTT session against the real `warren` binary across SIGKILL:
//! a QoS 2 PUBLISH acknowledged with PUBREC and re-sent (DUP) after the restart is answered
//! with PUBREC and not routed again, and once released (PUBCOMP) its packet identifier can
//! carry a new message after another restart.
//!
//! Raw packets, so the test controls packet identifiers and DUP exactly. Every test uses its
//! own temporary `data_dir` and port 0, and is bounded in time.

mod mqtt_common;

use std::path::Path;
use std::time::Duration;

use mqtt_common::{connect, options, packet, RawClient};
use rumqttc::QoS;
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

/// Connects `client_id` without clean session; returns the client and whether the CONNACK
/// said a session was present.
async fn connect_persistent(warren: &WarrenProcess, client_id: &str) -> (RawClient, bool) {
    let mut body = Vec::new();
    body.extend_from_slice(&[0, 4, b'M', b'Q', b'T', b'T', 4, 0b1100_0000, 0, 60]);
    for field in [client_id.as_bytes(), b"guest", b"guest"] {
        body.extend_from_slice(&(field.len() as u16).to_be_bytes());
        body.extend_from_slice(field);
    }
    let mut raw = RawClient::open(warren.listener_addr("mqtt")).await;
    raw.send(&packet(0x10, &body)).await;
    let connack = raw.read_exact(4).await;
    assert_eq!(
        (connack[0], connack[1], connack[3]),
        (0x20, 2, 0),
        "CONNACK accepted"
    );
    (raw, connack[2] == 1)
}

/// A QoS 2 PUBLISH with packet identifier `id`, DUP set if `dup`.
fn publish_qos2(topic: &str, id: u16, payload: &[u8], dup: bool) -> Vec<u8> {
    let mut body = (topic.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(topic.as_bytes());
    body.extend_from_slice(&id.to_be_bytes());
    body.extend_from_slice(payload);
    packet(if dup { 0x3C } else { 0x34 }, &body)
}

fn with_id(first: u8, id: u16) -> Vec<u8> {
    packet(first, &id.to_be_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_qos2_publish_resent_after_sigkill_is_not_routed_twice() {
    // Building the binary (once per test run) is not part of the bound.
    tokio::task::spawn_blocking(warren_interop_tests::process::warren_binary)
        .await
        .expect("build task");
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = TempDir::new("mqtt-qos2-restart");
        let warren = start(dir.path()).await;
        let mut keeper = options(warren.listener_addr("mqtt"), "keeper");
        keeper.set_clean_session(false);
        let mut subscriber = connect(keeper).await;
        subscriber.subscribe("meters/+/kwh", QoS::AtLeastOnce).await;
        subscriber.disconnect().await;

        let (mut meter, _) = connect_persistent(&warren, "meter-1").await;
        meter
            .send(&publish_qos2("meters/1/kwh", 42, b"17", false))
            .await;
        assert_eq!(meter.read_exact(4).await, with_id(0x50, 42), "PUBREC");
        // PUBREC sent means the identifier is on disk: nothing is flushed on a SIGKILL.
        warren.kill();

        let warren = start(dir.path()).await;
        let (mut meter, session_present) = connect_persistent(&warren, "meter-1").await;
        assert!(
            session_present,
            "the unreleased identifier is session state"
        );
        // The client never saw the PUBREC (as far as it knows) and sends the PUBLISH again.
        meter
            .send(&publish_qos2("meters/1/kwh", 42, b"17", true))
            .await;
        assert_eq!(meter.read_exact(4).await, with_id(0x50, 42), "PUBREC again");
        meter.send(&with_id(0x62, 42)).await;
        assert_eq!(meter.read_exact(4).await, with_id(0x70, 42), "PUBCOMP");
        // Released and on disk: after another SIGKILL, identifier 42 is a new message.
        warren.kill();

        let warren = start(dir.path()).await;
        let (mut meter, _) = connect_persistent(&warren, "meter-1").await;
        meter
            .send(&publish_qos2("meters/1/kwh", 42, b"18", false))
            .await;
        assert_eq!(meter.read_exact(4).await, with_id(0x50, 42), "PUBREC");
        meter.send(&with_id(0x62, 42)).await;
        assert_eq!(meter.read_exact(4).await, with_id(0x70, 42), "PUBCOMP");

        let mut keeper = options(warren.listener_addr("mqtt"), "keeper");
        keeper.set_clean_session(false);
        let mut subscriber = connect(keeper).await;
        let mut bodies = Vec::new();
        for _ in 0..2 {
            bodies.push(subscriber.next_publish().await.payload.to_vec());
        }
        assert_eq!(bodies, vec![b"17".to_vec(), b"18".to_vec()]);
        assert!(
            subscriber
                .no_publish_within(Duration::from_millis(300))
                .await,
            "the re-sent PUBLISH was routed a second time"
        );
        subscriber.disconnect().await;
        assert!(warren.terminate().success());
    })
    .await
    .expect("bounded in time");
}
