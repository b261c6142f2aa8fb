//! Cross-protocol delivery between STOMP and MQTT in one vhost, both ways, through the topic
//! exchange they share (`amq.topic`): a STOMP `/topic/` destination's routing key and an MQTT
//! topic are the same address after MQTT's `/`-to-`.` translation (docs/protocol-mapping.md).

mod mqtt_common;

use mqtt_common::{connect, options};
use rumqttc::QoS;
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::TestBroker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_topic_send_reaches_an_mqtt_wildcard_subscriber() {
    let broker = TestBroker::start().await;
    let mut device = connect(options(broker.mqtt_addr(), "display-1")).await;
    device.subscribe("devices/+/temp", QoS::AtLeastOnce).await;

    let mut stomp = StompClient::connect(broker.stomp_addr(), "1.2").await;
    // Returns once the broker's RECEIPT says the message was routed.
    stomp
        .send(
            "/topic/devices.42.temp",
            "21.5",
            &[("content-type", "text/plain")],
        )
        .await;

    let publish = device.next_publish().await;
    assert_eq!(publish.topic, "devices/42/temp");
    assert_eq!(&publish.payload[..], b"21.5");
    assert!(!publish.retain);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_publish_reaches_a_stomp_topic_subscriber_with_its_qos_header() {
    let broker = TestBroker::start().await;
    let mut stomp = StompClient::connect(broker.stomp_addr(), "1.2").await;
    stomp
        .subscribe("/topic/sensors.*.humidity", "s1", "client-individual", &[])
        .await;

    let mut sensor = connect(options(broker.mqtt_addr(), "sensor-7")).await;
    sensor
        .publish("sensors/7/humidity", QoS::AtLeastOnce, b"48%")
        .await;

    let message = stomp.expect_message().await;
    assert_eq!(message.text(), "48%");
    assert_eq!(
        message.header("destination"),
        Some("/topic/sensors.7.humidity")
    );
    assert_eq!(message.header("x-mqtt-publish-qos"), Some("1"));
    let (name, value) = stomp.ack_headers(&message);
    stomp.request("ACK", &[(name, value)]).await;
    broker.shutdown().await;
}
