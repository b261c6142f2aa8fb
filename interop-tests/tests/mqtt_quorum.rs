//! `mqtt.durable_queue_type = quorum` (RabbitMQ's key) with rumqttc: a persistent session's
//! QoS 1 subscription queue is a quorum queue (its QoS 0 one and a clean session's stay
//! classic), QoS 1 publishes routed into it are acknowledged after its commit, and the
//! session finds them there when it reconnects, also after a SIGKILL of the real `warren`
//! process; a clean session removes it, and an MQTT 5 session's goes when the session
//! expires (quorum queues have no `x-expires`).

mod mqtt5_common;
mod mqtt_common;

use std::time::Duration;

use mqtt_common::{connect, options};
use rumqttc::{MqttOptions, QoS};
use warren_interop_tests::process::WarrenProcess;
use warren_interop_tests::{wait_for, TempDir, TestBroker};

fn persistent(broker: &TestBroker, client_id: &str) -> MqttOptions {
    let mut options = options(broker.mqtt_addr(), client_id);
    options.set_clean_session(false);
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_session_subscribes_through_a_quorum_queue_that_survives_reconnect() {
    let broker = TestBroker::start_with(&[("mqtt.durable_queue_type", "quorum")]).await;
    let mut away = connect(persistent(&broker, "sensor")).await;
    assert!(!away.connack.session_present);
    away.subscribe("news/#", QoS::AtLeastOnce).await;
    away.subscribe("chatter/#", QoS::AtMostOnce).await;
    let vhost = broker.broker().vhost("/").unwrap();
    let quorum = vhost
        .typed_queue("mqtt-subscription-sensorqos1")
        .expect("the QoS 1 queue is a quorum queue");
    // The consumer's attach is committed after SUBACK; wait for it, so the cancel below is
    // not the early-cancel path (see the report: a delivery to a consumer cancelled before
    // its attach committed is kept by the handle).
    assert!(wait_for(Duration::from_secs(5), || quorum.info().consumers == 1).await);
    away.disconnect().await;

    assert_eq!(quorum.queue_type().name(), "quorum");
    assert!(vhost.queue("mqtt-subscription-sensorqos1").is_none());
    let qos0 = vhost
        .queue("mqtt-subscription-sensorqos0")
        .expect("the QoS 0 queue stays classic");
    assert!(qos0.config().durable);
    assert!(wait_for(Duration::from_secs(5), || quorum.info().consumers == 0).await);
    let listed = broker
        .api_as_guest("GET", "/api/queues/%2F/mqtt-subscription-sensorqos1", None)
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(listed.json()["type"], "quorum");

    // QoS 1 publishes: each PUBACK comes once the quorum queue committed it.
    let mut publisher = connect(options(broker.mqtt_addr(), "publisher")).await;
    for text in ["one", "two", "three"] {
        publisher
            .publish("news/today", QoS::AtLeastOnce, text.as_bytes())
            .await;
        assert!(matches!(
            publisher.next_ack().await,
            rumqttc::Packet::PubAck(_)
        ));
    }
    assert!(
        wait_for(Duration::from_secs(5), || quorum.info().ready == 3).await,
        "{:?}",
        quorum.info()
    );

    let mut back = connect(persistent(&broker, "sensor")).await;
    assert!(back.connack.session_present);
    for text in ["one", "two", "three"] {
        let publish = back.next_publish().await;
        assert_eq!(
            (publish.topic.as_str(), &publish.payload[..], publish.qos),
            ("news/today", text.as_bytes(), QoS::AtLeastOnce)
        );
    }
    // Acknowledged by rumqttc's PUBACKs: the queue is empty once they are settled.
    assert!(
        wait_for(Duration::from_secs(5), || {
            let info = quorum.info();
            info.ready == 0 && info.unacknowledged == 0 && info.consumers == 1
        })
        .await,
        "{:?}",
        quorum.info()
    );
    // A later publish reaches the resumed session at once.
    publisher
        .publish("news/later", QoS::AtLeastOnce, b"four")
        .await;
    assert_eq!(&back.next_publish().await.payload[..], b"four");
    back.disconnect().await;

    // A clean session discards the persistent one, its quorum queue too.
    let clean = connect(options(broker.mqtt_addr(), "sensor")).await;
    assert!(!clean.connack.session_present);
    assert!(vhost.typed_queue("mqtt-subscription-sensorqos1").is_none());
    assert!(vhost.queue("mqtt-subscription-sensorqos0").is_none());
    clean.disconnect().await;
    publisher.disconnect().await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_session_keeps_classic_exclusive_queues_with_durable_queue_type_quorum() {
    let broker = TestBroker::start_with(&[("mqtt.durable_queue_type", "quorum")]).await;
    let mut client = connect(options(broker.mqtt_addr(), "passing")).await;
    client.subscribe("news/#", QoS::AtLeastOnce).await;
    let vhost = broker.broker().vhost("/").unwrap();
    let queue = vhost
        .queue("mqtt-subscription-passingqos1")
        .expect("a classic queue");
    assert!(!queue.config().durable);
    assert!(queue.config().exclusive_owner.is_some());
    assert!(vhost.typed_queue("mqtt-subscription-passingqos1").is_none());
    client.disconnect().await;
    assert!(
        wait_for(Duration::from_secs(5), || vhost
            .queue("mqtt-subscription-passingqos1")
            .is_none())
        .await
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mqtt5_session_that_expires_takes_its_quorum_queue_with_it() {
    use rumqttc::v5::mqttbytes::QoS as QoS5;
    let broker = TestBroker::start_with(&[("mqtt.durable_queue_type", "quorum")]).await;
    let mut options = mqtt5_common::options5(broker.mqtt_addr(), "brief");
    options.set_clean_start(false);
    let mut properties = options.connect_properties().unwrap_or_default();
    properties.session_expiry_interval = Some(1);
    options.set_connect_properties(properties);
    let mut client = mqtt5_common::connect5(options).await;
    client.subscribe("news/#", QoS5::AtLeastOnce).await;
    let vhost = broker.broker().vhost("/").unwrap();
    let quorum = vhost
        .typed_queue("mqtt-subscription-briefqos1")
        .expect("a quorum queue");
    assert!(wait_for(Duration::from_secs(5), || quorum.info().consumers == 1).await);
    client.disconnect().await;
    assert!(vhost.typed_queue("mqtt-subscription-briefqos1").is_some());
    assert!(
        wait_for(Duration::from_secs(5), || vhost
            .typed_queue("mqtt-subscription-briefqos1")
            .is_none())
        .await,
        "deleted once the session expired"
    );
    broker.shutdown().await;
}

async fn start_process(dir: &std::path::Path) -> WarrenProcess {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || {
        WarrenProcess::start(&dir, &["mqtt.durable_queue_type=quorum"])
    })
    .await
    .expect("start task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_publishes_to_a_quorum_subscription_queue_survive_sigkill() {
    // Building the binary (once per test run) is not part of the bound.
    tokio::task::spawn_blocking(warren_interop_tests::process::warren_binary)
        .await
        .expect("build task");
    tokio::time::timeout(Duration::from_secs(120), async {
        let dir = TempDir::new("mqtt-quorum-kill");
        let warren = start_process(dir.path()).await;
        let addr = warren.listener_addr("mqtt");
        let mut keeper = options(addr, "keeper");
        keeper.set_clean_session(false);
        let mut subscriber = connect(keeper.clone()).await;
        subscriber.subscribe("plant/+/temp", QoS::AtLeastOnce).await;
        let mut publisher = connect(options(addr, "thermometer")).await;
        // A first message received proves the consumer is attached before it leaves.
        publisher
            .publish("plant/1/temp", QoS::AtLeastOnce, b"warm-up")
            .await;
        assert!(matches!(
            publisher.next_ack().await,
            rumqttc::Packet::PubAck(_)
        ));
        assert_eq!(&subscriber.next_publish().await.payload[..], b"warm-up");
        subscriber.disconnect().await;

        for reading in ["20.5", "21.0", "21.5"] {
            publisher
                .publish("plant/7/temp", QoS::AtLeastOnce, reading.as_bytes())
                .await;
            assert!(matches!(
                publisher.next_ack().await,
                rumqttc::Packet::PubAck(_)
            ));
        }
        // Acknowledged means committed to the quorum queue's log: nothing flushes on SIGKILL.
        warren.kill();

        let warren = start_process(dir.path()).await;
        let addr = warren.listener_addr("mqtt");
        let mut keeper = options(addr, "keeper");
        keeper.set_clean_session(false);
        let mut subscriber = connect(keeper).await;
        assert!(subscriber.connack.session_present);
        for reading in ["20.5", "21.0", "21.5"] {
            let publish = subscriber.next_publish().await;
            assert_eq!(
                (publish.topic.as_str(), &publish.payload[..]),
                ("plant/7/temp", reading.as_bytes())
            );
        }
        subscriber.disconnect().await;
        assert!(warren.terminate().success());
    })
    .await
    .expect("bounded in time");
}
