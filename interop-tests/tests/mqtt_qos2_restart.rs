//! QoS 2 state of a persistent MQTT session against the real `warren` binary across SIGKILL.
//! Inbound: a QoS 2 PUBLISH acknowledged with PUBREC and re-sent (DUP) after the restart is
//! answered with PUBREC and not routed again, and once released (PUBCOMP) its packet
//! identifier can carry a new message after another restart. Outbound: a delivery the client
//! PUBRECed but did not PUBCOMP gets its PUBREL again after the restart, with the same packet
//! identifier and before any delivery, and deliveries the client never acknowledged come back
//! with DUP (MQTT-4.4.0-1); once PUBCOMPed, nothing comes back after another restart.
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

/// Reads one packet: its first byte and its body.
async fn read_packet(raw: &mut RawClient) -> (u8, Vec<u8>) {
    let first = raw.read_exact(1).await[0];
    let mut length = 0usize;
    for shift in [0, 7, 14, 21] {
        let byte = raw.read_exact(1).await[0];
        length |= usize::from(byte & 0x7F) << shift;
        if byte & 0x80 == 0 {
            break;
        }
    }
    let body = if length == 0 {
        Vec::new()
    } else {
        raw.read_exact(length).await
    };
    (first, body)
}

/// A PUBLISH from the broker, as the test needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Delivered {
    dup: bool,
    qos: u8,
    topic: String,
    packet_id: u16,
    payload: Vec<u8>,
}

/// Reads the next packet and expects a QoS 1 or 2 PUBLISH.
async fn read_publish(raw: &mut RawClient) -> Delivered {
    let (first, body) = read_packet(raw).await;
    assert_eq!(
        first & 0xF0,
        0x30,
        "PUBLISH expected, got {first:#x} {body:?}"
    );
    let qos = (first >> 1) & 3;
    assert!(qos > 0, "a QoS 0 delivery: {body:?}");
    let topic_length = usize::from(u16::from_be_bytes([body[0], body[1]]));
    let topic = String::from_utf8(body[2..2 + topic_length].to_vec()).expect("UTF-8 topic");
    let at = 2 + topic_length;
    Delivered {
        dup: first & 0x08 != 0,
        qos,
        topic,
        packet_id: u16::from_be_bytes([body[at], body[at + 1]]),
        payload: body[at + 2..].to_vec(),
    }
}

/// SUBSCRIBE to one filter at `qos`, expecting it granted.
async fn subscribe(raw: &mut RawClient, packet_id: u16, filter: &str, qos: u8) {
    let mut body = packet_id.to_be_bytes().to_vec();
    body.extend_from_slice(&(filter.len() as u16).to_be_bytes());
    body.extend_from_slice(filter.as_bytes());
    body.push(qos);
    raw.send(&packet(0x82, &body)).await;
    let suback = raw.read_exact(5).await;
    let id = packet_id.to_be_bytes();
    assert_eq!(suback, vec![0x90, 3, id[0], id[1], qos], "SUBACK granted");
}

/// A QoS 2 publish from `raw` through PUBCOMP (PUBREC means the message is on disk).
async fn publish_qos2_through(raw: &mut RawClient, topic: &str, id: u16, payload: &[u8]) {
    raw.send(&publish_qos2(topic, id, payload, false)).await;
    assert_eq!(raw.read_exact(4).await, with_id(0x50, id), "PUBREC");
    raw.send(&with_id(0x62, id)).await;
    assert_eq!(raw.read_exact(4).await, with_id(0x70, id), "PUBCOMP");
}

/// PINGREQ, expecting PINGRESP as the very next packet: nothing else was queued before it.
async fn expect_nothing_before_pingresp(raw: &mut RawClient) {
    raw.send(&[0xC0, 0]).await;
    let (first, body) = read_packet(raw).await;
    assert_eq!(
        (first, body),
        (0xD0, Vec::new()),
        "PINGRESP and nothing before it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pubrel_owed_before_sigkill_is_sent_again_and_unacknowledged_deliveries_come_back_with_dup(
) {
    tokio::task::spawn_blocking(warren_interop_tests::process::warren_binary)
        .await
        .expect("build task");
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = TempDir::new("mqtt-qos2-outbound-restart");
        let warren = start(dir.path()).await;
        let mqtt = warren.listener_addr("mqtt");
        // A persistent session away with a durable queue for "sync/#": a QoS 2 publish there
        // gets its PUBREC once the message store has it, and every record before it, on
        // disk (the store writes in order), and once the retained log has the publisher's
        // own records on disk if it is a persistent session.
        let (mut archive, _) = connect_persistent(&warren, "archive").await;
        subscribe(&mut archive, 1, "sync/#", 1).await;
        archive.send(&[0xE0, 0]).await;

        // A persistent session with a QoS 2 and a QoS 1 subscription (durable queues).
        let (mut sink, _) = connect_persistent(&warren, "sink").await;
        subscribe(&mut sink, 1, "rooms/+/temp", 2).await;
        subscribe(&mut sink, 2, "rooms/+/humidity", 1).await;
        let mut sensor = RawClient::connected(mqtt, "sensor").await;

        // A: received (PUBREC), PUBREL sent, never completed.
        publish_qos2_through(&mut sensor, "rooms/1/temp", 1, b"21").await;
        let a = read_publish(&mut sink).await;
        assert_eq!((a.qos, a.dup, &a.payload[..]), (2, false, &b"21"[..]));
        sink.send(&with_id(0x50, a.packet_id)).await;
        // PUBREL goes out once the owed PUBREL is on disk.
        assert_eq!(
            sink.read_exact(4).await,
            with_id(0x62, a.packet_id),
            "PUBREL"
        );

        // B (QoS 2) and C (QoS 1): delivered, never acknowledged.
        publish_qos2_through(&mut sensor, "rooms/1/temp", 2, b"22").await;
        let b = read_publish(&mut sink).await;
        assert_eq!((b.qos, b.dup, &b.payload[..]), (2, false, &b"22"[..]));
        let mut humidity = publish_qos2("rooms/1/humidity", 3, b"40", false);
        humidity[0] = 0x32; // QoS 1
        sensor.send(&humidity).await;
        assert_eq!(sensor.read_exact(4).await, with_id(0x40, 3), "PUBACK");
        let c = read_publish(&mut sink).await;
        assert_eq!((c.qos, c.dup, &c.payload[..]), (1, false, &b"40"[..]));
        // The records that B and C were delivered are on disk once this is.
        publish_qos2_through(&mut sensor, "sync/1", 4, b"sync").await;
        warren.kill();

        let warren = start(dir.path()).await;
        let (mut sink, session_present) = connect_persistent(&warren, "sink").await;
        assert!(session_present, "the persistent session survived");
        // PUBREL for A with its identifier, before any delivery (MQTT-4.4.0-1).
        assert_eq!(
            sink.read_exact(4).await,
            with_id(0x62, a.packet_id),
            "PUBREL again after the restart"
        );
        // B and C come back with DUP; A does not (the client has it).
        let mut redelivered = Vec::new();
        for _ in 0..2 {
            redelivered.push(read_publish(&mut sink).await);
        }
        expect_nothing_before_pingresp(&mut sink).await;
        for delivery in &redelivered {
            assert!(delivery.dup, "redelivery without DUP: {delivery:?}");
            assert_ne!(
                delivery.packet_id, a.packet_id,
                "an identifier awaiting PUBCOMP was reused"
            );
        }
        let mut bodies: Vec<(u8, Vec<u8>)> = redelivered
            .iter()
            .map(|d| (d.qos, d.payload.clone()))
            .collect();
        bodies.sort();
        assert_eq!(bodies, vec![(1, b"40".to_vec()), (2, b"22".to_vec())]);

        // Complete A; finish B (PUBREC, PUBREL, PUBCOMP), acknowledge the rest.
        sink.send(&with_id(0x70, a.packet_id)).await;
        for delivery in &redelivered {
            if delivery.qos == 1 {
                sink.send(&with_id(0x40, delivery.packet_id)).await;
            } else {
                sink.send(&with_id(0x50, delivery.packet_id)).await;
                assert_eq!(
                    sink.read_exact(4).await,
                    with_id(0x62, delivery.packet_id),
                    "PUBREL"
                );
                sink.send(&with_id(0x70, delivery.packet_id)).await;
            }
        }
        // PUBCOMP and the acknowledgements are not waited for; this publish is, and it
        // comes after them.
        publish_qos2_through(&mut sink, "sync/2", 7, b"sync").await;
        warren.kill();

        let warren = start(dir.path()).await;
        let (mut sink, session_present) = connect_persistent(&warren, "sink").await;
        assert!(session_present, "the subscriptions are still there");
        expect_nothing_before_pingresp(&mut sink).await;
        // The session still works: a new delivery, identifier free again.
        let mut sensor = RawClient::connected(warren.listener_addr("mqtt"), "sensor").await;
        publish_qos2_through(&mut sensor, "rooms/2/temp", 1, b"23").await;
        let fresh = read_publish(&mut sink).await;
        assert_eq!(
            (fresh.qos, fresh.dup, &fresh.payload[..]),
            (2, false, &b"23"[..])
        );
        assert!(warren.terminate().success());
    })
    .await
    .expect("bounded in time");
}
