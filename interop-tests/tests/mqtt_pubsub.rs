//! MQTT publish and subscribe through rumqttc: wildcards, QoS 0 and 1, the in-flight
//! window, and the topic translation both ways with AMQP 0-9-1 (lapin).

mod mqtt_common;

use std::time::Duration;

use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use mqtt_common::{connect, options};
use rumqttc::{QoS, SubscribeReasonCode};
use warren_interop_tests::{wait_for, TestBroker};

#[tokio::test]
async fn qos0_and_qos1_reach_wildcard_subscribers_with_translated_topics() {
    let broker = TestBroker::start().await;
    let mut subscriber = connect(options(broker.mqtt_addr(), "subscriber")).await;
    let suback = subscriber
        .subscribe("devices/+/temp", QoS::AtLeastOnce)
        .await;
    assert_eq!(
        suback.return_codes,
        vec![SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );
    let suback = subscriber.subscribe("alerts/#", QoS::AtMostOnce).await;
    assert_eq!(
        suback.return_codes,
        vec![SubscribeReasonCode::Success(QoS::AtMostOnce)]
    );

    let mut publisher = connect(options(broker.mqtt_addr(), "publisher")).await;
    publisher
        .publish("devices/42/temp", QoS::AtLeastOnce, b"21.5")
        .await;
    let publish = subscriber.next_publish().await;
    assert_eq!(publish.topic, "devices/42/temp");
    assert_eq!(&publish.payload[..], b"21.5");
    assert_eq!(publish.qos, QoS::AtLeastOnce);
    assert!(!publish.retain && !publish.dup);

    // A QoS 0 publish keeps QoS 0 even on a QoS 1 subscription.
    publisher
        .publish("devices/7/temp", QoS::AtMostOnce, b"3")
        .await;
    let publish = subscriber.next_publish().await;
    assert_eq!(
        (publish.topic.as_str(), publish.qos),
        ("devices/7/temp", QoS::AtMostOnce)
    );

    // Dots inside a level survive the translation; '#' matches the parent level too.
    publisher
        .publish("alerts/v1.0/fire", QoS::AtLeastOnce, b"!")
        .await;
    let publish = subscriber.next_publish().await;
    assert_eq!(
        (publish.topic.as_str(), publish.qos),
        ("alerts/v1.0/fire", QoS::AtMostOnce)
    );
    publisher
        .publish("alerts", QoS::AtMostOnce, b"parent")
        .await;
    assert_eq!(subscriber.next_publish().await.topic, "alerts");

    // Not matching: one level too many for '+', another prefix.
    publisher
        .publish("devices/42/temp/raw", QoS::AtMostOnce, b"x")
        .await;
    publisher
        .publish("other/42/temp", QoS::AtMostOnce, b"x")
        .await;
    publisher
        .publish("devices/1/temp", QoS::AtMostOnce, b"last")
        .await;
    assert_eq!(&subscriber.next_publish().await.payload[..], b"last");

    let queues: Vec<String> = broker
        .broker()
        .vhost("/")
        .unwrap()
        .queues()
        .iter()
        .map(|q| q.name().to_string())
        .filter(|name| name.starts_with("mqtt-subscription-"))
        .collect();
    assert_eq!(queues.len(), 2, "{queues:?}");
    assert!(queues.contains(&"mqtt-subscription-subscriberqos0".to_string()));
    assert!(queues.contains(&"mqtt-subscription-subscriberqos1".to_string()));

    subscriber.disconnect().await;
    // A clean session's queues go with the connection.
    let vhost = broker.broker().vhost("/").unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || vhost
            .queue("mqtt-subscription-subscriberqos1")
            .is_none())
        .await
    );
    publisher.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn unsubscribe_stops_deliveries() {
    let broker = TestBroker::start().await;
    let mut client = connect(options(broker.mqtt_addr(), "unsub")).await;
    client.subscribe("a/b", QoS::AtMostOnce).await;
    client.subscribe("c/d", QoS::AtMostOnce).await;
    client.client.unsubscribe("a/b").await.unwrap();
    match client.next().await {
        rumqttc::Packet::UnsubAck(_) => {}
        other => panic!("expected UNSUBACK, got {other:?}"),
    }
    client.publish("a/b", QoS::AtMostOnce, b"gone").await;
    client.publish("c/d", QoS::AtMostOnce, b"kept").await;
    let publish = client.next_publish().await;
    assert_eq!(
        (publish.topic.as_str(), &publish.payload[..]),
        ("c/d", &b"kept"[..])
    );
    client.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn unacknowledged_qos1_deliveries_are_limited_by_the_prefetch_window() {
    let broker = TestBroker::start_with(&[("mqtt.prefetch", "3")]).await;
    let mut subscriber_options = options(broker.mqtt_addr(), "slow");
    subscriber_options.set_manual_acks(true);
    let mut subscriber = connect(subscriber_options).await;
    subscriber.subscribe("work", QoS::AtLeastOnce).await;
    let mut publisher = connect(options(broker.mqtt_addr(), "fast")).await;
    for i in 0..5u8 {
        publisher.publish("work", QoS::AtLeastOnce, &[i]).await;
    }
    let queue = broker
        .broker()
        .vhost("/")
        .unwrap()
        .queue("mqtt-subscription-slowqos1")
        .unwrap();
    assert!(wait_for(Duration::from_secs(5), || queue.message_count() == 2).await);
    let mut received = Vec::new();
    for _ in 0..3 {
        received.push(subscriber.next_publish().await);
    }
    assert_eq!(
        received.iter().map(|p| p.payload[0]).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert!(
        subscriber
            .no_publish_within(Duration::from_millis(200))
            .await
    );
    subscriber.client.ack(&received[0]).await.unwrap();
    assert_eq!(subscriber.next_publish().await.payload[0], 3);
    assert_eq!(queue.message_count(), 1);
    subscriber.disconnect().await;
    publisher.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test]
async fn mqtt_publish_reaches_amqp_queue_bound_with_translated_key() {
    let broker = TestBroker::start().await;
    let amqp = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = amqp.create_channel().await.unwrap();
    channel
        .queue_declare(
            "telemetry".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    channel
        .queue_bind(
            "telemetry".into(),
            "amq.topic".into(),
            "devices.*.temp".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();

    let mut publisher = connect(options(broker.mqtt_addr(), "device-42")).await;
    publisher
        .publish("devices/42/temp", QoS::AtLeastOnce, b"21.5")
        .await;
    publisher
        .publish("devices/42/humidity", QoS::AtMostOnce, b"40")
        .await;
    let queue = broker
        .broker()
        .vhost("/")
        .unwrap()
        .queue("telemetry")
        .unwrap();
    assert!(wait_for(Duration::from_secs(5), || queue.message_count() == 1).await);

    let message = channel
        .basic_get("telemetry".into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("one message");
    assert_eq!(message.delivery.data, b"21.5");
    assert_eq!(message.delivery.exchange.as_str(), "amq.topic");
    assert_eq!(message.delivery.routing_key.as_str(), "devices.42.temp");
    let properties = &message.delivery.properties;
    assert_eq!(*properties.delivery_mode(), Some(2), "QoS 1 is persistent");
    let headers = properties.headers().as_ref().expect("MQTT headers");
    assert_eq!(
        headers.inner().get("x-mqtt-publish-qos"),
        Some(&AMQPValue::ShortShortInt(1))
    );
    assert_eq!(
        headers.inner().get("x-mqtt-dup"),
        Some(&AMQPValue::Boolean(false))
    );
    publisher.disconnect().await;
    amqp.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn amqp_publish_to_amq_topic_reaches_mqtt_subscriber() {
    let broker = TestBroker::start().await;
    let mut subscriber = connect(options(broker.mqtt_addr(), "dashboard")).await;
    subscriber
        .subscribe("devices/+/temp", QoS::AtLeastOnce)
        .await;

    let amqp = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = amqp.create_channel().await.unwrap();
    channel
        .basic_publish(
            "amq.topic".into(),
            "devices.42.temp".into(),
            BasicPublishOptions::default(),
            b"from amqp",
            BasicProperties::default().with_content_type("text/plain".into()),
        )
        .await
        .unwrap();
    let publish = subscriber.next_publish().await;
    assert_eq!(publish.topic, "devices/42/temp");
    assert_eq!(&publish.payload[..], b"from amqp");
    // Without an MQTT QoS header a message gets the subscription's QoS.
    assert_eq!(publish.qos, QoS::AtLeastOnce);
    // A '/' in a routing key becomes '.' in the topic.
    channel
        .basic_publish(
            "amq.topic".into(),
            "devices.v1/0.temp".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    assert_eq!(subscriber.next_publish().await.topic, "devices/v1.0/temp");
    let _ = BasicConsumeOptions::default();
    subscriber.disconnect().await;
    amqp.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn a_resource_alarm_stops_reading_publishers_until_cleared() {
    use warren_core::broker::Alarm;
    let broker = TestBroker::start().await;
    let mut subscriber = connect(options(broker.mqtt_addr(), "reader")).await;
    subscriber.subscribe("load", QoS::AtLeastOnce).await;
    let mut publisher = connect(options(broker.mqtt_addr(), "writer")).await;
    publisher.publish("load", QoS::AtLeastOnce, b"before").await;
    assert_eq!(&subscriber.next_publish().await.payload[..], b"before");

    broker.broker().set_alarm(Alarm::Memory, true);
    let queue = broker
        .broker()
        .vhost("/")
        .unwrap()
        .queue("mqtt-subscription-readerqos1")
        .unwrap();
    publisher.publish("load", QoS::AtLeastOnce, b"during").await;
    assert!(
        subscriber
            .no_publish_within(Duration::from_millis(300))
            .await
    );
    assert_eq!(queue.message_count(), 0, "not read, so not routed");

    broker.broker().set_alarm(Alarm::Memory, false);
    assert_eq!(&subscriber.next_publish().await.payload[..], b"during");
    subscriber.disconnect().await;
    publisher.disconnect().await;
    broker.shutdown().await;
}
