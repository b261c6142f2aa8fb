//! MQTT CONNECT through rumqttc and raw sockets: CONNACK return codes 1 to 5, vhost
//! selection with `vhost:user` and `mqtt.vhost`, anonymous logins, permission refusals for
//! publish and subscribe, and client identifier takeover.

mod mqtt_common;

use std::time::Duration;

use mqtt_common::{connect, options, packet, refused, RawClient, WAIT};
use rumqttc::{ConnectReturnCode, QoS, SubscribeReasonCode};
use warren_core::access::Permissions;
use warren_interop_tests::{wait_for, TestBroker};

fn add_user(broker: &TestBroker, vhost: &str, user: &str, permissions: Permissions) {
    let core = broker.broker();
    core.add_vhost(vhost);
    core.add_user(user, "secret", vec![]);
    core.set_permissions(user, vhost, permissions).unwrap();
}

#[tokio::test]
async fn connack_return_codes_follow_the_spec() {
    let broker = TestBroker::start().await;
    add_user(&broker, "/", "alice", Permissions::full());
    broker.broker().add_vhost("empty");
    let addr = broker.mqtt_addr();

    let mut bad_password = options(addr, "c1");
    bad_password.set_credentials("alice", "wrong");
    assert_eq!(
        refused(bad_password).await,
        ConnectReturnCode::BadUserNamePassword
    );

    let mut unknown_user = options(addr, "c2");
    unknown_user.set_credentials("nobody", "secret");
    assert_eq!(
        refused(unknown_user).await,
        ConnectReturnCode::BadUserNamePassword
    );

    let mut unknown_vhost = options(addr, "c3");
    unknown_vhost.set_credentials("no-such-vhost:alice", "secret");
    assert_eq!(
        refused(unknown_vhost).await,
        ConnectReturnCode::BadUserNamePassword
    );

    let mut no_permissions = options(addr, "c4");
    no_permissions.set_credentials("empty:alice", "secret");
    assert_eq!(
        refused(no_permissions).await,
        ConnectReturnCode::NotAuthorized
    );

    // 0x02: an empty client identifier cannot have a persistent session (rumqttc will not
    // send that, so a raw CONNECT).
    let mut raw = RawClient::open(addr).await;
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0b1100_0000, 0, 60, 0, 0];
    for field in [&b"guest"[..], b"guest"] {
        body.extend_from_slice(&(field.len() as u16).to_be_bytes());
        body.extend_from_slice(field);
    }
    raw.send(&packet(0x10, &body)).await;
    assert_eq!(raw.read_exact(4).await, vec![0x20, 2, 0, 2]);
    assert!(raw.is_closed_by_broker().await);

    // 0x01: a protocol level this server does not speak (MQTT 5 it does: level 6 here).
    let mut raw = RawClient::open(addr).await;
    let body = [
        0,
        4,
        b'M',
        b'Q',
        b'T',
        b'T',
        6,
        0b0000_0010,
        0,
        60,
        0,
        0,
        1,
        b'x',
    ];
    raw.send(&packet(0x10, &body)).await;
    assert_eq!(raw.read_exact(4).await, vec![0x20, 2, 0, 1]);
    assert!(raw.is_closed_by_broker().await);

    // An empty client identifier with a clean session gets one generated.
    let client = connect(options(addr, "")).await;
    assert!(!client.connack.session_present);
    client.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn a_vhost_without_the_mqtt_exchange_answers_server_unavailable() {
    let broker = TestBroker::start_with(&[("mqtt.exchange", "no.such.exchange")]).await;
    assert_eq!(
        refused(options(broker.mqtt_addr(), "c")).await,
        ConnectReturnCode::ServiceUnavailable
    );
    broker.shutdown().await;
}

#[tokio::test]
async fn anonymous_clients_use_the_default_user_unless_refused() {
    let broker = TestBroker::start().await;
    // No credentials at all: the default user.
    let anonymous = rumqttc::MqttOptions::new("anon", "127.0.0.1", broker.mqtt_addr().port());
    let client = connect(anonymous).await;
    client.disconnect().await;
    broker.shutdown().await;

    let broker = TestBroker::start_with(&[("mqtt.allow_anonymous", "false")]).await;
    let anonymous = rumqttc::MqttOptions::new("anon", "127.0.0.1", broker.mqtt_addr().port());
    assert_eq!(
        refused(anonymous).await,
        ConnectReturnCode::BadUserNamePassword
    );
    // With credentials it still works.
    connect(options(broker.mqtt_addr(), "named"))
        .await
        .disconnect()
        .await;
    broker.shutdown().await;
}

#[tokio::test]
async fn vhost_is_chosen_by_user_name_prefix_or_mqtt_vhost() {
    let broker = TestBroker::start_with(&[("mqtt.vhost", "fleet")]).await;
    add_user(&broker, "fleet", "sensor", Permissions::full());
    add_user(&broker, "lab", "sensor2", Permissions::full());
    broker
        .broker()
        .set_permissions("sensor", "lab", Permissions::full())
        .unwrap();

    // No prefix: mqtt.vhost.
    let mut in_fleet = options(broker.mqtt_addr(), "s1");
    in_fleet.set_credentials("sensor", "secret");
    let mut in_fleet = connect(in_fleet).await;
    in_fleet.subscribe("t", QoS::AtLeastOnce).await;
    let fleet = broker.broker().vhost("fleet").unwrap();
    assert!(fleet.queue("mqtt-subscription-s1qos1").is_some());

    // Prefix: that vhost. The same client id in another vhost is another client.
    let mut in_lab = options(broker.mqtt_addr(), "s1");
    in_lab.set_credentials("lab:sensor", "secret");
    let mut in_lab = connect(in_lab).await;
    in_lab.subscribe("t", QoS::AtLeastOnce).await;
    let lab = broker.broker().vhost("lab").unwrap();
    assert!(lab.queue("mqtt-subscription-s1qos1").is_some());

    in_lab.publish("t", QoS::AtLeastOnce, b"lab only").await;
    assert_eq!(&in_lab.next_publish().await.payload[..], b"lab only");
    assert!(in_fleet.no_publish_within(Duration::from_millis(300)).await);
    in_fleet.disconnect().await;
    in_lab.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn forbidden_subscription_gets_0x80_and_forbidden_publish_closes() {
    let broker = TestBroker::start().await;
    // May read and bind its own queues but not write to amq.topic.
    add_user(
        &broker,
        "/",
        "reader",
        Permissions::new("^mqtt-subscription-", "^mqtt-subscription-", ".*").unwrap(),
    );
    // May publish but read only its own qos0 queue.
    add_user(
        &broker,
        "/",
        "writer",
        Permissions::new(".*", ".*", "^(amq\\.topic|mqtt-subscription-wqos0)$").unwrap(),
    );
    let mut writer_options = options(broker.mqtt_addr(), "w");
    writer_options.set_credentials("writer", "secret");
    let mut writer = connect(writer_options).await;
    let suback = writer.subscribe("x/#", QoS::AtLeastOnce).await;
    assert_eq!(suback.return_codes, vec![SubscribeReasonCode::Failure]);
    let suback = writer.subscribe("x/#", QoS::AtMostOnce).await;
    assert_eq!(
        suback.return_codes,
        vec![SubscribeReasonCode::Success(QoS::AtMostOnce)]
    );
    writer.publish("x/1", QoS::AtMostOnce, b"allowed").await;
    assert_eq!(&writer.next_publish().await.payload[..], b"allowed");

    let mut reader_options = options(broker.mqtt_addr(), "r");
    reader_options.set_credentials("reader", "secret");
    let mut reader = connect(reader_options).await;
    assert_eq!(
        reader.subscribe("x/#", QoS::AtLeastOnce).await.return_codes,
        vec![SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );
    reader.publish("x/2", QoS::AtLeastOnce, b"forbidden").await;
    let ended = tokio::time::timeout(WAIT, reader.ended)
        .await
        .expect("closed");
    assert!(
        ended.is_ok(),
        "the event loop ended with the broker's close"
    );
    // Nothing was routed; the writer still works.
    assert!(writer.no_publish_within(Duration::from_millis(200)).await);
    writer.publish("x/3", QoS::AtMostOnce, b"still here").await;
    assert_eq!(&writer.next_publish().await.payload[..], b"still here");
    writer.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn a_second_connection_with_the_same_client_id_takes_over() {
    let broker = TestBroker::start().await;
    let mut first = connect(options(broker.mqtt_addr(), "dup-id")).await;
    first.subscribe("t", QoS::AtLeastOnce).await;
    let mut second = connect(options(broker.mqtt_addr(), "dup-id")).await;
    let ended = tokio::time::timeout(WAIT, &mut first.ended)
        .await
        .expect("the first connection is closed");
    assert!(ended.is_ok());
    // The clean second session starts without the first one's subscription.
    second.publish("t", QoS::AtMostOnce, b"x").await;
    assert!(second.no_publish_within(Duration::from_millis(200)).await);
    second.subscribe("t", QoS::AtLeastOnce).await;
    second.publish("t", QoS::AtLeastOnce, b"y").await;
    assert_eq!(&second.next_publish().await.payload[..], b"y");
    let registry_settled = wait_for(Duration::from_secs(5), || {
        broker.broker().vhost("/").unwrap().queues().len() == 1
    })
    .await;
    assert!(registry_settled);
    second.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn mqtt_3_1_clients_connect_and_get_no_session_present_flag() {
    let broker = TestBroker::start().await;
    let mut raw = RawClient::open(broker.mqtt_addr()).await;
    // "MQIsdp" level 3, persistent session, guest/guest.
    let mut body = vec![
        0,
        6,
        b'M',
        b'Q',
        b'I',
        b's',
        b'd',
        b'p',
        3,
        0b1100_0000,
        0,
        60,
    ];
    for field in [&b"old-device"[..], b"guest", b"guest"] {
        body.extend_from_slice(&(field.len() as u16).to_be_bytes());
        body.extend_from_slice(field);
    }
    raw.send(&packet(0x10, &body)).await;
    assert_eq!(raw.read_exact(4).await, vec![0x20, 2, 0, 0]);
    raw.send(&[0xE0, 0]).await;
    assert!(raw.is_closed_by_broker().await);
    // Its queue-less session exists now; a 3.1 CONNACK still carries no session-present bit.
    let mut raw = RawClient::open(broker.mqtt_addr()).await;
    raw.send(&packet(0x10, &body)).await;
    assert_eq!(raw.read_exact(4).await, vec![0x20, 2, 0, 0]);
    broker.shutdown().await;
}

#[tokio::test]
async fn mqtt_listeners_can_be_disabled() {
    let broker = TestBroker::start_with(&[("mqtt.listeners.tcp", "none")]).await;
    assert!(broker.server().mqtt_addr().is_none());
    broker.shutdown().await;
}
