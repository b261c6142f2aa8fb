//! MQTT session behaviour: last will, retained messages, persistent sessions across
//! disconnects, redelivery of unacknowledged QoS 1 messages with DUP, and QoS 2 both ways.

mod mqtt_common;

use std::time::Duration;

use mqtt_common::{connect, options, packet, RawClient};
use rumqttc::{LastWill, QoS};
use warren_interop_tests::{wait_for, TestBroker};

/// A raw CONNECT (3.1.1, clean session, guest/guest) with a QoS 0 will.
fn connect_with_will(client_id: &str, keep_alive: u16, topic: &str, message: &[u8]) -> Vec<u8> {
    let [ka_high, ka_low] = keep_alive.to_be_bytes();
    let mut body = vec![
        0,
        4,
        b'M',
        b'Q',
        b'T',
        b'T',
        4,
        0b1100_0110,
        ka_high,
        ka_low,
    ];
    for field in [
        client_id.as_bytes(),
        topic.as_bytes(),
        message,
        b"guest",
        b"guest",
    ] {
        body.extend_from_slice(&(field.len() as u16).to_be_bytes());
        body.extend_from_slice(field);
    }
    packet(0x10, &body)
}

async fn raw_with_will(broker: &TestBroker, client_id: &str, keep_alive: u16) -> RawClient {
    let mut raw = RawClient::open(broker.mqtt_addr()).await;
    raw.send(&connect_with_will(
        client_id,
        keep_alive,
        "wills/gone",
        client_id.as_bytes(),
    ))
    .await;
    assert_eq!(raw.read_exact(4).await, vec![0x20, 2, 0, 0]);
    raw
}

#[tokio::test]
async fn the_will_is_published_on_abnormal_ends_and_not_on_disconnect() {
    let broker = TestBroker::start().await;
    let mut watcher = connect(options(broker.mqtt_addr(), "watcher")).await;
    watcher.subscribe("wills/#", QoS::AtLeastOnce).await;

    // DISCONNECT: no will.
    let mut polite = raw_with_will(&broker, "polite", 60).await;
    polite.send(&[0xE0, 0]).await;
    assert!(polite.is_closed_by_broker().await);

    // Socket closed without DISCONNECT.
    let dropped = raw_with_will(&broker, "dropped", 60).await;
    drop(dropped);
    let will = watcher.next_publish().await;
    assert_eq!(
        (will.topic.as_str(), &will.payload[..]),
        ("wills/gone", &b"dropped"[..])
    );

    // Protocol error (a second CONNECT).
    let mut rude = raw_with_will(&broker, "rude", 60).await;
    rude.send(&mqtt_common::connect_packet("rude")).await;
    assert_eq!(&watcher.next_publish().await.payload[..], b"rude");

    // Keep-alive of 1 s and silence: the will after 1.5 s.
    let started = std::time::Instant::now();
    let _silent = raw_with_will(&broker, "silent", 1).await;
    assert_eq!(&watcher.next_publish().await.payload[..], b"silent");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1400),
        "will after {waited:?}"
    );

    // The polite client's will never came.
    assert!(watcher.no_publish_within(Duration::from_millis(200)).await);
    watcher.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn a_takeover_publishes_the_will_of_the_connection_taken_over() {
    let broker = TestBroker::start().await;
    let mut watcher = connect(options(broker.mqtt_addr(), "watcher")).await;
    watcher.subscribe("wills/+", QoS::AtMostOnce).await;
    let mut first = options(broker.mqtt_addr(), "device");
    first.set_last_will(LastWill::new(
        "wills/device",
        "taken over",
        QoS::AtLeastOnce,
        false,
    ));
    let first = connect(first).await;
    let second = connect(options(broker.mqtt_addr(), "device")).await;
    assert_eq!(&watcher.next_publish().await.payload[..], b"taken over");
    first.abort();
    second.disconnect().await;
    watcher.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn retained_messages_reach_new_subscribers_including_wildcards() {
    let broker = TestBroker::start().await;
    broker.broker().add_vhost("other");
    broker
        .broker()
        .set_permissions("guest", "other", warren_core::access::Permissions::full())
        .unwrap();
    let mut publisher = connect(options(broker.mqtt_addr(), "publisher")).await;
    publisher
        .client
        .publish("status/a", QoS::AtLeastOnce, true, "a-on")
        .await
        .unwrap();
    publisher
        .client
        .publish("status/b", QoS::AtMostOnce, true, "b-on")
        .await
        .unwrap();
    publisher
        .client
        .publish("status/a", QoS::AtLeastOnce, true, "a-off")
        .await
        .unwrap();
    // A subscription of our own answers once the publishes before it were handled.
    publisher.subscribe("sync", QoS::AtMostOnce).await;

    let mut exact = connect(options(broker.mqtt_addr(), "exact")).await;
    exact.subscribe("status/a", QoS::AtLeastOnce).await;
    let retained = exact.next_publish().await;
    assert_eq!(
        &retained.payload[..],
        b"a-off",
        "the latest retained message"
    );
    assert!(retained.retain);
    assert_eq!(retained.qos, QoS::AtLeastOnce);

    let mut wildcard = connect(options(broker.mqtt_addr(), "wildcard")).await;
    wildcard.subscribe("status/+", QoS::AtLeastOnce).await;
    let mut got = [wildcard.next_publish().await, wildcard.next_publish().await];
    got.sort_by(|x, y| x.topic.cmp(&y.topic));
    assert_eq!(got[0].topic, "status/a");
    assert_eq!(
        (got[1].topic.as_str(), got[1].qos),
        ("status/b", QoS::AtMostOnce)
    );
    assert!(got.iter().all(|p| p.retain));

    // Another vhost has its own retained messages.
    let mut elsewhere = options(broker.mqtt_addr(), "elsewhere");
    elsewhere.set_credentials("other:guest", "guest");
    let mut elsewhere = connect(elsewhere).await;
    elsewhere.subscribe("status/#", QoS::AtMostOnce).await;
    assert!(
        elsewhere
            .no_publish_within(Duration::from_millis(200))
            .await
    );

    // An empty retained payload clears the topic and still reaches current subscribers.
    publisher
        .client
        .publish("status/a", QoS::AtLeastOnce, true, Vec::<u8>::new())
        .await
        .unwrap();
    let cleared = exact.next_publish().await;
    assert!(cleared.payload.is_empty() && !cleared.retain);
    let mut late = connect(options(broker.mqtt_addr(), "late")).await;
    late.subscribe("status/#", QoS::AtMostOnce).await;
    assert_eq!(late.next_publish().await.topic, "status/b");
    assert!(late.no_publish_within(Duration::from_millis(200)).await);

    for client in [publisher, exact, wildcard, elsewhere, late] {
        client.disconnect().await;
    }
    broker.shutdown().await;
}

fn persistent(broker: &TestBroker, client_id: &str) -> rumqttc::MqttOptions {
    let mut options = options(broker.mqtt_addr(), client_id);
    options.set_clean_session(false);
    options
}

#[tokio::test]
async fn a_persistent_session_keeps_qos1_messages_while_away() {
    let broker = TestBroker::start().await;
    let mut away = connect(persistent(&broker, "away")).await;
    assert!(!away.connack.session_present);
    away.subscribe("news/#", QoS::AtLeastOnce).await;
    away.disconnect().await;

    let vhost = broker.broker().vhost("/").unwrap();
    let queue = vhost.queue("mqtt-subscription-awayqos1").expect("kept");
    assert!(queue.config().durable);
    assert!(wait_for(Duration::from_secs(5), || queue.consumer_count() == 0).await);

    let mut publisher = connect(options(broker.mqtt_addr(), "publisher")).await;
    for text in ["one", "two", "three"] {
        publisher
            .publish("news/today", QoS::AtLeastOnce, text.as_bytes())
            .await;
    }
    assert!(wait_for(Duration::from_secs(5), || queue.message_count() == 3).await);

    let mut back = connect(persistent(&broker, "away")).await;
    assert!(back.connack.session_present);
    for text in ["one", "two", "three"] {
        let publish = back.next_publish().await;
        assert_eq!(
            (publish.topic.as_str(), &publish.payload[..]),
            ("news/today", text.as_bytes())
        );
    }
    // The subscription itself was remembered: unsubscribing stops it.
    back.client.unsubscribe("news/#").await.unwrap();
    assert!(matches!(back.next().await, rumqttc::Packet::UnsubAck(_)));
    publisher
        .publish("news/later", QoS::AtLeastOnce, b"not for you")
        .await;
    assert!(back.no_publish_within(Duration::from_millis(200)).await);
    back.disconnect().await;

    // A clean session discards it all.
    let clean = connect(options(broker.mqtt_addr(), "away")).await;
    assert!(!clean.connack.session_present);
    assert!(vhost.queue("mqtt-subscription-awayqos1").is_none());
    clean.disconnect().await;
    publisher.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn unacknowledged_qos1_messages_are_redelivered_with_dup_after_reconnect() {
    let broker = TestBroker::start().await;
    let mut first = persistent(&broker, "forgetful");
    first.set_manual_acks(true);
    let mut first = connect(first).await;
    first.subscribe("jobs", QoS::AtLeastOnce).await;
    first.publish("jobs", QoS::AtLeastOnce, b"job-1").await;
    let delivered = first.next_publish().await;
    assert_eq!(
        (&delivered.payload[..], delivered.dup),
        (&b"job-1"[..], false)
    );
    first.abort();

    let queue = broker
        .broker()
        .vhost("/")
        .unwrap()
        .queue("mqtt-subscription-forgetfulqos1")
        .unwrap();
    assert!(wait_for(Duration::from_secs(5), || queue.consumer_count() == 0).await);
    let mut second = persistent(&broker, "forgetful");
    second.set_manual_acks(true);
    let mut second = connect(second).await;
    let redelivered = second.next_publish().await;
    assert_eq!(
        (&redelivered.payload[..], redelivered.dup),
        (&b"job-1"[..], true)
    );
    second.client.ack(&redelivered).await.unwrap();
    second.disconnect().await;
    let mut third = connect(persistent(&broker, "forgetful")).await;
    assert!(third.connack.session_present);
    assert!(third.no_publish_within(Duration::from_millis(200)).await);
    third.disconnect().await;
    broker.shutdown().await;
}

fn qos2_publish(packet_id: u16, dup: bool, payload: &[u8]) -> Vec<u8> {
    let mut body = vec![0, 4];
    body.extend_from_slice(b"q2/t");
    body.extend_from_slice(&packet_id.to_be_bytes());
    body.extend_from_slice(payload);
    packet(if dup { 0x3C } else { 0x34 }, &body)
}

#[tokio::test]
async fn a_qos2_publish_is_routed_exactly_once() {
    let broker = TestBroker::start().await;
    let mut subscriber = connect(options(broker.mqtt_addr(), "sub")).await;
    subscriber.subscribe("q2/t", QoS::AtLeastOnce).await;
    let mut raw = RawClient::connected(broker.mqtt_addr(), "raw-q2").await;
    raw.send(&qos2_publish(7, false, b"once")).await;
    assert_eq!(raw.read_exact(4).await, vec![0x50, 2, 0, 7], "PUBREC");
    // Re-sent before PUBREL: acknowledged again, not routed again.
    raw.send(&qos2_publish(7, true, b"once")).await;
    assert_eq!(raw.read_exact(4).await, vec![0x50, 2, 0, 7], "PUBREC again");
    raw.send(&[0x62, 2, 0, 7]).await;
    assert_eq!(raw.read_exact(4).await, vec![0x70, 2, 0, 7], "PUBCOMP");
    // After PUBREL the identifier is free: a new message with it is routed.
    raw.send(&qos2_publish(7, false, b"twice")).await;
    assert_eq!(raw.read_exact(4).await, vec![0x50, 2, 0, 7]);
    raw.send(&[0x62, 2, 0, 7]).await;
    assert_eq!(raw.read_exact(4).await, vec![0x70, 2, 0, 7]);

    assert_eq!(&subscriber.next_publish().await.payload[..], b"once");
    assert_eq!(&subscriber.next_publish().await.payload[..], b"twice");
    assert!(
        subscriber
            .no_publish_within(Duration::from_millis(200))
            .await
    );
    subscriber.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn qos2_subscriptions_are_granted_and_delivered_with_the_full_flow() {
    // A window of one: the next message goes out only once PUBCOMP ended the previous.
    let broker = TestBroker::start_with(&[("mqtt.prefetch", "1")]).await;
    let mut subscriber = connect(options(broker.mqtt_addr(), "exactly")).await;
    let suback = subscriber.subscribe("q2/#", QoS::ExactlyOnce).await;
    assert_eq!(
        suback.return_codes,
        vec![rumqttc::SubscribeReasonCode::Success(QoS::ExactlyOnce)]
    );
    let mut publisher = connect(options(broker.mqtt_addr(), "pub")).await;
    for i in 0..3u8 {
        publisher.publish("q2/x", QoS::ExactlyOnce, &[i]).await;
    }
    for i in 0..3u8 {
        let publish = subscriber.next_publish().await;
        assert_eq!((publish.qos, publish.payload[0]), (QoS::ExactlyOnce, i));
    }
    let queue = broker
        .broker()
        .vhost("/")
        .unwrap()
        .queue("mqtt-subscription-exactlyqos2")
        .unwrap();
    assert!(wait_for(Duration::from_secs(5), || queue.message_count() == 0).await);
    subscriber.disconnect().await;
    publisher.disconnect().await;
    broker.shutdown().await;
}
