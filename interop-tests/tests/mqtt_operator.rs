//! MQTT connections in the operator surface: listed by the management API with RabbitMQ's
//! protocol names and the client id as their name, and closed by an operator (the will is
//! published, since the client did not send DISCONNECT).

mod mqtt_common;

use std::time::Duration;

use mqtt_common::{connect, options, packet, RawClient};
use rumqttc::{LastWill, QoS};
use serde_json::Value;
use warren_interop_tests::{wait_for, TestBroker};

/// The registered MQTT connection whose client id is `client_id`, from /api/connections.
async fn listed(broker: &TestBroker, client_id: &str) -> Option<Value> {
    let connections = broker
        .api_as_guest("GET", "/api/connections", None)
        .await
        .json();
    connections
        .as_array()?
        .iter()
        .find(|c| c["user_provided_name"] == client_id)
        .cloned()
}

#[tokio::test]
async fn mqtt_connections_are_listed_and_an_operator_close_publishes_the_will() {
    let broker = TestBroker::start().await;
    let mut watcher = connect(options(broker.mqtt_addr(), "watcher")).await;
    watcher.subscribe("wills/#", QoS::AtLeastOnce).await;
    let mut sensor = options(broker.mqtt_addr(), "sensor-1");
    sensor.set_last_will(LastWill::new(
        "wills/sensor-1",
        "closed by operator",
        QoS::AtLeastOnce,
        false,
    ));
    let sensor = connect(sensor).await;

    // MQTT 3.1 (protocol name MQIsdp, level 3), clean session, keep-alive 60 s.
    let mut old = RawClient::open(broker.mqtt_addr()).await;
    let mut body = vec![0, 6];
    body.extend_from_slice(b"MQIsdp");
    body.extend_from_slice(&[3, 0b0000_0010, 0, 60]);
    body.extend_from_slice(&(b"legacy".len() as u16).to_be_bytes());
    body.extend_from_slice(b"legacy");
    old.send(&packet(0x10, &body)).await;
    assert_eq!(old.read_exact(4).await, vec![0x20, 2, 0, 0]);

    assert!(
        wait_for(Duration::from_secs(5), || broker
            .broker()
            .connections()
            .count()
            == 3)
        .await
    );
    let listed_sensor = listed(&broker, "sensor-1").await.expect("sensor-1 listed");
    assert_eq!(listed_sensor["protocol"], "MQTT 3.1.1");
    assert_eq!(listed_sensor["user"], "guest");
    assert_eq!(listed_sensor["vhost"], "/");
    assert_eq!(listed_sensor["channels"], 1);
    assert_eq!(listed_sensor["timeout"], 5);
    assert_eq!(listed_sensor["client_properties"]["client_id"], "sensor-1");
    assert_eq!(listed_sensor["peer_host"], "127.0.0.1");
    assert_eq!(listed_sensor["port"], broker.mqtt_addr().port());
    let legacy = listed(&broker, "legacy").await.expect("legacy listed");
    assert_eq!(legacy["protocol"], "MQTT 3.1");
    assert_eq!(legacy["timeout"], 60);

    // The operator closes sensor-1: its socket closes and its will goes out.
    let name = listed_sensor["name"].as_str().expect("a name").to_string();
    let path = format!(
        "/api/connections/{}",
        warren_management::http::percent_encode(&name)
    );
    assert_eq!(broker.api_as_guest("DELETE", &path, None).await.status, 204);
    tokio::time::timeout(Duration::from_secs(5), sensor.ended)
        .await
        .expect("sensor-1 closed in time")
        .expect("event loop task");
    let will = watcher.next_publish().await;
    assert_eq!(
        (will.topic.as_str(), &will.payload[..]),
        ("wills/sensor-1", &b"closed by operator"[..])
    );
    assert!(
        wait_for(Duration::from_secs(5), || broker
            .broker()
            .connections()
            .count()
            == 2)
        .await
    );
    assert!(listed(&broker, "sensor-1").await.is_none());
    assert_eq!(broker.api_as_guest("GET", &path, None).await.status, 404);

    // The others are untouched; a clean DISCONNECT unregisters too.
    watcher.disconnect().await;
    old.send(&[0xE0, 0]).await;
    assert!(old.is_closed_by_broker().await);
    assert!(
        wait_for(Duration::from_secs(5), || broker
            .broker()
            .connections()
            .count()
            == 0)
        .await
    );
    assert_eq!(broker.broker().connections().closed_total(), 3);
    broker.shutdown().await;
}
