//! Bad input over raw sockets: each case closes the offending connection (or refuses the
//! one subscription, where the spec allows it) and leaves another client untouched.

mod mqtt_common;

use mqtt_common::{connect_packet, packet, subscribe_packet, RawClient};
use warren_interop_tests::TestBroker;

/// A bystander connection must still answer PINGREQ after each bad client.
async fn assert_alive(bystander: &mut RawClient) {
    bystander.send(&[0xC0, 0]).await;
    assert_eq!(bystander.read_exact(2).await, vec![0xD0, 0]);
}

fn publish_packet(topic: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut body = (topic.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(topic);
    body.extend_from_slice(payload);
    packet(0x30, &body)
}

#[tokio::test]
async fn protocol_violations_close_only_the_offending_connection() {
    let broker = TestBroker::start_with(&[("mqtt.max_packet_size", "1024")]).await;
    let addr = broker.mqtt_addr();
    let mut bystander = RawClient::connected(addr, "bystander").await;

    // A first packet that is not CONNECT.
    let mut raw = RawClient::open(addr).await;
    raw.send(&[0xC0, 0]).await;
    assert!(raw.is_closed_by_broker().await, "PINGREQ before CONNECT");
    assert_alive(&mut bystander).await;

    // A second CONNECT.
    let mut raw = RawClient::connected(addr, "twice").await;
    raw.send(&connect_packet("twice")).await;
    assert!(raw.is_closed_by_broker().await, "second CONNECT");
    assert_alive(&mut bystander).await;

    // A wildcard in a PUBLISH topic name.
    for topic in [&b"a/+"[..], b"a/#"] {
        let mut raw = RawClient::connected(addr, "wild").await;
        raw.send(&publish_packet(topic, b"x")).await;
        assert!(raw.is_closed_by_broker().await, "wildcard in {topic:?}");
    }
    assert_alive(&mut bystander).await;

    // Invalid UTF-8 in a topic name.
    let mut raw = RawClient::connected(addr, "utf8").await;
    raw.send(&publish_packet(&[b'a', 0xFF, 0xFE], b"x")).await;
    assert!(raw.is_closed_by_broker().await, "invalid UTF-8");
    assert_alive(&mut bystander).await;

    // A packet over mqtt.max_packet_size, refused from its fixed header alone.
    let mut raw = RawClient::connected(addr, "big").await;
    raw.send(&publish_packet(b"t", &[0u8; 2000])).await;
    assert!(raw.is_closed_by_broker().await, "over max_packet_size");
    assert_alive(&mut bystander).await;

    // A reserved packet type.
    let mut raw = RawClient::connected(addr, "reserved").await;
    raw.send(&[0xF0, 0]).await;
    assert!(raw.is_closed_by_broker().await, "reserved type 15");

    // A reserved CONNECT flag (MQTT-3.1.2-3).
    let mut raw = RawClient::open(addr).await;
    let mut connect = connect_packet("flag");
    connect[9] |= 1;
    raw.send(&connect).await;
    assert!(raw.is_closed_by_broker().await, "reserved CONNECT flag");
    assert_alive(&mut bystander).await;
    broker.shutdown().await;
}

#[tokio::test]
async fn invalid_topic_filters_are_refused_in_suback() {
    let broker = TestBroker::start().await;
    let mut raw = RawClient::connected(broker.mqtt_addr(), "filters").await;
    for (packet_id, filter) in [(1u16, "a/#/b"), (2, "a+"), (3, "a/b#")] {
        raw.send(&subscribe_packet(packet_id, filter)).await;
        let [high, low] = packet_id.to_be_bytes();
        assert_eq!(
            raw.read_exact(5).await,
            vec![0x90, 3, high, low, 0x80],
            "{filter}"
        );
    }
    // A valid one on the same connection is granted.
    raw.send(&subscribe_packet(4, "a/+/b")).await;
    assert_eq!(raw.read_exact(5).await, vec![0x90, 3, 0, 4, 0]);
    assert_alive(&mut raw).await;
    broker.shutdown().await;
}
