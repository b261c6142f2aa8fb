//! The core's one rule for deliveries outstanding when a connection ends, over STOMP and
//! MQTT: a delivery that never reached the client (still in the connection's outbox) goes
//! back without counting a failed delivery, so a client's disconnect does not push messages
//! toward `x-delivery-limit`; one the client was sent but did not acknowledge is counted.
//!
//! Each test publishes from the subscribing connection itself and disconnects in the same
//! write: the broker handles both in one batch, so the delivery is in the outbox, never
//! written, when the connection ends (the broker runs on this test's single-threaded
//! runtime, so its writer cannot run in between).

mod mqtt_common;

use std::sync::Arc;
use std::time::Duration;

use mqtt_common::{packet, RawClient};
use tokio::io::AsyncReadExt;
use warren_core::policy::Policy;
use warren_core::queue::Queue;
use warren_core::value::{Table, Value};
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::{wait_for, TestBroker};

/// `delivery-limit: 1` on the queues matching `pattern`: a message returned twice after a
/// failed delivery is dropped.
fn limit_deliveries(broker: &TestBroker, pattern: &str) {
    let mut definition = Table::new();
    definition.insert("delivery-limit", Value::I32(1));
    let policy = Policy::new("limit", pattern, "queues", 0, definition, false).expect("policy");
    broker
        .broker()
        .vhost("/")
        .expect("default vhost")
        .set_policy(policy, false);
}

fn queue(broker: &TestBroker, name: &str) -> Arc<Queue> {
    broker
        .broker()
        .vhost("/")
        .expect("default vhost")
        .queue(name)
        .unwrap_or_else(|| panic!("queue {name} exists"))
}

/// Waits until `queue` holds `ready` messages and none unacknowledged, then takes them
/// all: (body, delivery count).
async fn settle_and_take(queue: &Arc<Queue>, ready: u64) -> Vec<(String, u32)> {
    let settled = wait_for(Duration::from_secs(5), || {
        let stats = queue.stats();
        stats.ready == ready && stats.unacknowledged == 0
    })
    .await;
    assert!(settled, "queue stats: {:?}", queue.stats());
    let mut taken = Vec::new();
    while let Some((delivery, _)) = queue.get(false) {
        taken.push((
            String::from_utf8_lossy(&delivery.message.body).into_owned(),
            delivery.delivery_count,
        ));
    }
    taken
}

/// Reads until the broker closes the connection.
async fn until_closed(stream: &mut (impl AsyncReadExt + Unpin)) {
    let mut buf = [0u8; 4096];
    let read_all = async { while !matches!(stream.read(&mut buf).await, Ok(0) | Err(_)) {} };
    tokio::time::timeout(Duration::from_secs(5), read_all)
        .await
        .expect("the broker closes the connection");
}

#[tokio::test]
async fn a_stomp_connection_ending_with_undelivered_messages_leaves_their_delivery_count() {
    let broker = TestBroker::start().await;
    limit_deliveries(&broker, "^work$");
    for body in ["first", "second"] {
        let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
        client.subscribe("/queue/work", "s", "client", &[]).await;
        if body == "second" {
            // "first" is sent to this connection, which never acknowledges it.
            assert_eq!(client.expect_message().await.text(), "first");
        }
        // The SEND is delivered to this connection's own subscription, and the connection
        // ends before the delivery is written.
        let frames = format!(
            "SEND\ndestination:/queue/work\npersistent:true\ncontent-length:{}\n\n{body}\0\
             DISCONNECT\nreceipt:bye\n\n\0",
            body.len()
        );
        client.write_raw(frames.as_bytes()).await;
        // The connection flushes what it had buffered before the RECEIPT; the message may
        // be among it, but the connection is closing and can settle nothing.
        let mut receipt = client.expect_frame().await;
        while receipt.command == "MESSAGE" {
            assert_eq!(receipt.text(), body);
            receipt = client.expect_frame().await;
        }
        assert_eq!(receipt.command, "RECEIPT", "{receipt:?}");
    }
    // "first" was sent to the second connection unacknowledged (counted once: still within
    // the limit); "second" never reached a client (not counted).
    let taken = settle_and_take(&queue(&broker, "work"), 2).await;
    assert_eq!(taken, [("first".to_string(), 1), ("second".to_string(), 0)]);
    assert_eq!(queue(&broker, "work").stats().dropped_delivery_limit, 0);
    broker.shutdown().await;
}

/// CONNECT for a persistent session (clean session off), guest/guest.
fn persistent_connect(client_id: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&[0, 4, b'M', b'Q', b'T', b'T', 4, 0b1100_0000, 0, 60]);
    for field in [client_id.as_bytes(), b"guest", b"guest"] {
        body.extend_from_slice(&(field.len() as u16).to_be_bytes());
        body.extend_from_slice(field);
    }
    packet(0x10, &body)
}

/// PUBLISH at QoS 1.
fn publish_qos1(topic: &str, packet_id: u16, payload: &[u8]) -> Vec<u8> {
    let mut body = (topic.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(topic.as_bytes());
    body.extend_from_slice(&packet_id.to_be_bytes());
    body.extend_from_slice(payload);
    packet(0x32, &body)
}

#[tokio::test]
async fn an_mqtt_connection_ending_with_undelivered_messages_leaves_their_delivery_count() {
    let broker = TestBroker::start().await;
    limit_deliveries(&broker, "^mqtt-subscription-");
    for (round, body) in [(0u16, "first"), (1, "second")] {
        let mut client = RawClient::open(broker.mqtt_addr()).await;
        client.send(&persistent_connect("keeper")).await;
        let connack = client.read_exact(4).await;
        assert_eq!(
            connack,
            [0x20, 2, round as u8, 0],
            "CONNACK, session present"
        );
        if round == 1 {
            // "first" is sent to this connection at CONNECT; it never acknowledges it.
            let header = client.read_exact(2).await;
            assert_eq!(header[0] & 0xF0, 0x30, "a PUBLISH");
            let rest = client.read_exact(usize::from(header[1])).await;
            assert!(rest.ends_with(b"first"), "{rest:?}");
        }
        if round == 0 {
            let mut subscribe = 1u16.to_be_bytes().to_vec();
            subscribe.extend_from_slice(&[0, 5]);
            subscribe.extend_from_slice(b"shelf");
            subscribe.push(1);
            client.send(&packet(0x82, &subscribe)).await;
            assert_eq!(
                client.read_exact(5).await,
                [0x90, 3, 0, 1, 1],
                "SUBACK QoS 1"
            );
        }
        // Delivered to this session's own subscription; the DISCONNECT in the same write
        // ends the connection before the delivery is written.
        let mut bytes = publish_qos1("shelf", 10 + round, body.as_bytes());
        bytes.extend_from_slice(&[0xE0, 0]);
        client.send(&bytes).await;
        until_closed(&mut client.stream).await;
    }
    // "first" reached the second connection at CONNECT (counted once, within the limit),
    // "second" never reached a client (not counted).
    let taken = settle_and_take(&queue(&broker, "mqtt-subscription-keeperqos1"), 2).await;
    assert_eq!(taken, [("first".to_string(), 1), ("second".to_string(), 0)]);
    broker.shutdown().await;
}
