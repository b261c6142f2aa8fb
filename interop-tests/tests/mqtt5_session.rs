//! MQTT 5 session properties through rumqttc's v5 client over a socket: Server Keep Alive
//! (`mqtt.max_keep_alive`) told in CONNACK and enforced, Response Information and a
//! request/response exchange between two MQTT 5 clients with binary correlation data,
//! Request Problem Information 0 honoured, an MQTT 3.1.1 client above the maximum
//! refused, PUBACK/PUBREC reason codes for a message no queue took (0x10) or a full
//! queue refused (0x97), and the server's receive maximum: 1024 unreleased QoS 2 publishes
//! whose PUBRECs wait for the disk are within it, one more is DISCONNECT 0x93.
//!
//! Every test uses its own broker on 127.0.0.1 port 0 and is bounded in time.

mod amqp10_common;
mod mqtt5_common;
mod mqtt_common;

use std::time::Duration;

use bytes::Bytes;
use mqtt5_common::{connect5, connect5_packet, options5, packet, Raw5};
use rumqttc::v5::mqttbytes::v5::{
    ConnectProperties, ConnectReturnCode, Packet, PubAckReason, PublishProperties,
};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{ConnectionError, StateError};
use warren_interop_tests::TestBroker;

/// A bound on each whole test.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// `connect5_packet`'s CONNECT for `client_id` with its keep-alive (60 s) set to `seconds`.
fn connect_with_keep_alive(client_id: &str, seconds: u8) -> Vec<u8> {
    let mut connect = connect5_packet(client_id, &[]);
    let at = connect
        .windows(4)
        .position(|w| w == [5, 0b1100_0010, 0, 60])
        .expect("protocol level, flags and keep-alive");
    connect[at + 3] = seconds;
    connect
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keep_alive_above_the_maximum_is_replaced_in_connack_and_enforced() {
    tokio::time::timeout(TEST_LIMIT, async {
        // rumqttc's v5 client takes no keep-alive under 5 s.
        let broker = TestBroker::start_with(&[("mqtt.max_keep_alive", "5")]).await;
        let addr = broker.mqtt_addr();
        // Within the maximum: no Server Keep Alive.
        let mut options = options5(addr, "punctual");
        options.set_keep_alive(Duration::from_secs(5));
        let punctual = connect5(options).await;
        let properties = punctual.connack.properties.clone().expect("properties");
        assert_eq!(properties.server_keep_alive, None);
        // Above it: CONNACK says 5 s.
        let mut options = options5(addr, "sleepy");
        options.set_keep_alive(Duration::from_secs(60));
        let sleepy = connect5(options).await;
        let properties = sleepy.connack.properties.clone().expect("properties");
        assert_eq!(properties.server_keep_alive, Some(5));
        // Operators see the keep-alive the broker holds the client to.
        let connections = broker.broker().connections().list();
        let shown = connections
            .iter()
            .find(|c| c.info.connection_name.as_deref() == Some("sleepy"))
            .map(|c| c.info.heartbeat);
        assert_eq!(shown, Some(5));
        punctual.disconnect().await;
        sleepy.disconnect().await;
        broker.shutdown().await;

        // Enforced: with a 1 s maximum, a client that asked for none (keep-alive 0) is told
        // 1 s and disconnected for its keep-alive (0x8D) after 1.5 s of silence, while one
        // that pings every 500 ms stays.
        let broker = TestBroker::start_with(&[("mqtt.max_keep_alive", "1")]).await;
        let addr = broker.mqtt_addr();
        let mut silent = Raw5::open(addr).await;
        silent.send(&connect_with_keep_alive("silent", 0)).await;
        let (first, body) = silent.read_packet().await;
        assert_eq!((first, body[1]), (0x20, 0), "CONNACK success");
        // Property 0x13 (Server Keep Alive) with 1.
        assert!(
            body.windows(3).any(|w| w == [0x13, 0, 1]),
            "Server Keep Alive 1 in {body:02x?}"
        );
        let mut pinging = Raw5::open(addr).await;
        pinging.send(&connect_with_keep_alive("pinging", 1)).await;
        let (first, body) = pinging.read_packet().await;
        assert_eq!((first, body[1]), (0x20, 0), "CONNACK success");
        assert!(!body.windows(1).any(|w| w == [0x13]), "{body:02x?}");
        let silent_ended = tokio::spawn(async move { silent.disconnect_reason().await });
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            pinging.send(&[0xC0, 0]).await;
            let (first, _) = pinging.read_packet().await;
            assert_eq!(first, 0xD0, "PINGRESP");
        }
        // 3 s of pings later: the silent one was disconnected, the pinging one was not.
        assert!(
            silent_ended.is_finished(),
            "the silent client is disconnected"
        );
        assert_eq!(silent_ended.await.expect("silent task"), 0x8D);
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mqtt_3_1_1_client_above_the_maximum_keep_alive_is_refused() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start_with(&[("mqtt.max_keep_alive", "10")]).await;
        let mut options = mqtt_common::options(broker.mqtt_addr(), "old-sleepy");
        options.set_keep_alive(Duration::from_secs(30));
        match mqtt_common::try_connect(options).await {
            Err(rumqttc::ConnectionError::ConnectionRefused(code)) => {
                assert_eq!(code, rumqttc::ConnectReturnCode::BadClientId);
            }
            Err(other) => panic!("expected CONNACK 0x02, got {other:?}"),
            Ok(_) => panic!("a 30 s keep-alive above a 10 s maximum was accepted"),
        }
        // Within it: accepted.
        let mut options = mqtt_common::options(broker.mqtt_addr(), "old-punctual");
        options.set_keep_alive(Duration::from_secs(10));
        let client = mqtt_common::connect(options).await;
        let _ = client.client.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_information_and_a_request_response_exchange_between_mqtt5_clients() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();

        // The requester asks for Response Information and builds its response topic on it.
        let mut options = options5(addr, "requester-5");
        options.set_connect_properties(ConnectProperties {
            request_response_info: Some(1),
            ..ConnectProperties::new()
        });
        let mut requester = connect5(options).await;
        let prefix = requester
            .connack
            .properties
            .clone()
            .and_then(|p| p.response_information)
            .expect("Response Information in CONNACK");
        assert_eq!(prefix, "responses/requester-5");
        // A client that does not ask gets none.
        let mut responder = connect5(options5(addr, "responder-5")).await;
        let properties = responder.connack.properties.clone().expect("properties");
        assert_eq!(properties.response_information, None);

        let response_topic = format!("{prefix}/pump");
        requester
            .subscribe(&format!("{prefix}/#"), QoS::AtLeastOnce)
            .await;
        responder.subscribe("requests/+", QoS::AtLeastOnce).await;

        // Correlation data that is not UTF-8 comes through byte for byte.
        let correlation = Bytes::from_static(&[0xff, 0x00, 0x10, 0x80]);
        let request = PublishProperties {
            response_topic: Some(response_topic.clone()),
            correlation_data: Some(correlation.clone()),
            user_properties: vec![("op".into(), "start".into())],
            ..PublishProperties::default()
        };
        requester
            .client
            .publish_with_properties("requests/pump", QoS::AtLeastOnce, false, "go", request)
            .await
            .expect("publish request");
        let got = responder.next_publish().await;
        assert_eq!(got.payload, Bytes::from_static(b"go"));
        let got = got.properties.expect("request properties");
        assert_eq!(got.response_topic.as_deref(), Some(response_topic.as_str()));
        assert_eq!(got.correlation_data, Some(correlation.clone()));
        assert_eq!(got.user_properties, vec![("op".into(), "start".into())]);

        // The responder answers on the response topic with the correlation data.
        let response = PublishProperties {
            correlation_data: got.correlation_data.clone(),
            ..PublishProperties::default()
        };
        responder
            .client
            .publish_with_properties(
                got.response_topic.clone().expect("response topic"),
                QoS::AtLeastOnce,
                false,
                "started",
                response,
            )
            .await
            .expect("publish response");
        let answer = requester.next_publish().await;
        assert_eq!(
            String::from_utf8_lossy(&answer.topic),
            response_topic.as_str()
        );
        assert_eq!(answer.payload, Bytes::from_static(b"started"));
        assert_eq!(
            answer.properties.and_then(|p| p.correlation_data),
            Some(correlation)
        );
        requester.disconnect().await;
        responder.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

/// A QoS 1 MQTT 5 PUBLISH with packet identifier 1, payload format indicator 1 and a
/// payload that is not UTF-8: the broker refuses it with PUBACK 0x99.
fn bad_utf8_publish() -> Vec<u8> {
    let mut body = vec![0, 3, b'a', b'/', b'b', 0, 1];
    // Properties: payload format indicator (0x01) = 1.
    body.extend_from_slice(&[2, 0x01, 1]);
    body.extend_from_slice(&[0xff, 0xfe]);
    packet(0x32, &body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_problem_information_0_leaves_the_reason_string_out_of_acknowledgements() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        for (client_id, properties, reason_string) in [
            ("talkative", &[][..], true),
            // Request Problem Information (0x17) = 0.
            ("quiet", &[0x17, 0][..], false),
        ] {
            let mut raw = Raw5::open(addr).await;
            raw.send(&connect5_packet(client_id, properties)).await;
            let (first, body) = raw.read_packet().await;
            assert_eq!((first, body[1]), (0x20, 0), "CONNACK success");
            raw.send(&bad_utf8_publish()).await;
            let (first, body) = raw.read_packet().await;
            assert_eq!(first, 0x40, "PUBACK");
            assert_eq!(
                &body[..3],
                &[0, 1, 0x99],
                "packet 1, payload format invalid"
            );
            // Property 0x1F is the reason string.
            let has_reason = body.len() > 4 && body[4] == 0x1F;
            assert_eq!(has_reason, reason_string, "{client_id}: {body:02x?}");
            if !reason_string {
                assert_eq!(body.len(), 4, "no properties: {body:02x?}");
            }
        }
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connack_refusal_keeps_its_code_for_a_v5_client() {
    // Guard for the keep-alive check's place in CONNECT: an MQTT 5 client with bad
    // credentials is still refused with 0x86, whatever its keep-alive.
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start_with(&[("mqtt.max_keep_alive", "5")]).await;
        let mut options = options5(broker.mqtt_addr(), "wrong");
        options.set_credentials("guest", "not-the-password");
        options.set_keep_alive(Duration::from_secs(60));
        match mqtt5_common::try_connect5(options).await {
            Err(rumqttc::v5::ConnectionError::ConnectionRefused(code)) => {
                assert_eq!(code, ConnectReturnCode::BadUserNamePassword);
            }
            Err(other) => panic!("expected CONNACK 0x86, got {other:?}"),
            Ok(_) => panic!("wrong password accepted"),
        }
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

/// `Raw5`'s next packet, which must be `first` (a PUBACK, PUBREC or PUBCOMP for packet 1):
/// its reason code (0 when the packet has none).
async fn acknowledgement_code(raw: &mut Raw5, first: u8) -> u8 {
    let (got, body) = raw.read_packet().await;
    assert_eq!(got, first, "{body:02x?}");
    assert_eq!(&body[..2], &[0, 1], "packet identifier 1");
    body.get(2).copied().unwrap_or(0)
}

/// A QoS 1 or 2 MQTT 5 PUBLISH with packet identifier 1 and no properties.
fn publish_with_id(topic: &str, qos: u8) -> Vec<u8> {
    let mut body = (topic.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(topic.as_bytes());
    body.extend_from_slice(&[0, 1, 0]);
    body.extend_from_slice(b"payload");
    packet(0x30 | (qos << 1), &body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledgements_say_no_matching_subscribers_and_quota_exceeded() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let mut arguments = warren_core::value::Table::new();
        arguments.insert("x-max-length", warren_core::value::Value::I64(1));
        arguments.insert(
            "x-overflow",
            warren_core::value::Value::string("reject-publish"),
        );
        amqp10_common::declare_queue_with(&broker, "full", arguments);
        amqp10_common::bind(&broker, "amq.topic", "full", "full.#");
        let addr = broker.mqtt_addr();

        // rumqttc takes 0x10 as success and 0x97 as a failed publish.
        let mut client = connect5(options5(addr, "reporter")).await;
        client
            .publish("nobody/listens", QoS::AtLeastOnce, b"x")
            .await;
        match client.next_ack().await {
            Packet::PubAck(ack) => assert_eq!(ack.reason, PubAckReason::NoMatchingSubscribers),
            other => panic!("expected PUBACK, got {other:?}"),
        }
        client.publish("full/first", QoS::AtLeastOnce, b"x").await;
        match client.next_ack().await {
            Packet::PubAck(ack) => assert_eq!(ack.reason, PubAckReason::Success),
            other => panic!("expected PUBACK, got {other:?}"),
        }
        client.publish("full/second", QoS::AtLeastOnce, b"x").await;
        match tokio::time::timeout(Duration::from_secs(5), client.ended)
            .await
            .expect("the refusal ends rumqttc's event loop")
            .expect("event loop task")
        {
            ConnectionError::MqttState(StateError::PubAckFail { reason }) => {
                assert_eq!(reason, PubAckReason::QuotaExceeded);
            }
            other => panic!("expected a PUBACK refusal, got {other:?}"),
        }
        assert_eq!(amqp10_common::ready(&broker, "full"), 1);

        // QoS 2 by hand: a refusing PUBREC ends the exchange; 0x10 goes on to PUBCOMP.
        let mut raw = Raw5::connected(addr, "raw-reporter").await;
        raw.send(&publish_with_id("full/third", 2)).await;
        assert_eq!(acknowledgement_code(&mut raw, 0x50).await, 0x97);
        raw.send(&publish_with_id("nobody/listens", 2)).await;
        assert_eq!(acknowledgement_code(&mut raw, 0x50).await, 0x10);
        raw.send(&packet(0x62, &[0, 1])).await;
        assert_eq!(acknowledgement_code(&mut raw, 0x70).await, 0);
        // An MQTT 3.1.1 client is told nothing of it (its PUBACK has no reason code).
        let mut old = mqtt_common::RawClient::connected(addr, "old-reporter").await;
        let mut body = vec![0, 14];
        body.extend_from_slice(b"nobody/listens");
        body.extend_from_slice(&[0, 1, b'x']);
        old.send(&packet(0x32, &body)).await;
        assert_eq!(old.read_exact(4).await, vec![0x40, 2, 0, 1]);
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

/// A QoS 2 MQTT 5 PUBLISH to `topic` with packet identifier `id` and no properties.
fn qos2_publish(topic: &str, id: u16) -> Vec<u8> {
    let mut body = (topic.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(topic.as_bytes());
    body.extend_from_slice(&id.to_be_bytes());
    body.push(0);
    body.extend_from_slice(b"payload");
    packet(0x34, &body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_receive_maximum_counts_each_unreleased_qos2_publish_once() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        // A durable queue: each PUBREC waits for the disk, so many are held at once while
        // their packet identifiers are also awaiting PUBREL.
        amqp10_common::declare_queue(&broker, "held");
        amqp10_common::bind(&broker, "amq.topic", "held", "held.#");
        let mut raw = Raw5::connected(broker.mqtt_addr(), "burst").await;
        // The server's receive maximum (1024) QoS 2 publishes, none released, in one write.
        let burst: Vec<u8> = (1..=1024u16)
            .flat_map(|id| qos2_publish("held/burst", id))
            .collect();
        raw.send(&burst).await;
        for id in 1..=1024u16 {
            let (first, body) = raw.read_packet().await;
            assert_eq!(first, 0x50, "PUBREC for {id}, got {first:#x} {body:02x?}");
            assert_eq!(u16::from_be_bytes([body[0], body[1]]), id);
        }
        // One more is over the limit: DISCONNECT 0x93 (MQTT-3.3.4-9).
        raw.send(&qos2_publish("held/burst", 1025)).await;
        let (first, body) = raw.read_packet().await;
        assert_eq!(first, 0xE0, "DISCONNECT, got {body:02x?}");
        assert_eq!(body[0], 0x93, "receive maximum exceeded");
        assert_eq!(amqp10_common::ready(&broker, "held"), 1024);
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_still_writing_after_disconnect_0x93_reads_it_before_the_socket_closes() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let mut raw = Raw5::connected(broker.mqtt_addr(), "eager").await;
        // One more unreleased QoS 2 publish than the receive maximum (1024), in one write,
        // as paho's test_flow_control2 sends them.
        let burst: Vec<u8> = (1..=1025u16)
            .flat_map(|id| qos2_publish("eager/burst", id))
            .collect();
        raw.send(&burst).await;
        // The client goes on as paho's does: it releases what it has PUBRECs for while the
        // broker has already closed its side. The broker still reads (and discards) that,
        // so neither write fails and the socket is not reset before the DISCONNECT is read.
        tokio::time::sleep(Duration::from_millis(300)).await;
        for id in [1u16, 2] {
            raw.send(&packet(0x62, &id.to_be_bytes())).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut pubrecs = 0;
        loop {
            let (first, body) = raw.read_packet().await;
            if first == 0x50 {
                pubrecs += 1;
                continue;
            }
            assert_eq!(first, 0xE0, "DISCONNECT, got {first:#x} {body:02x?}");
            assert_eq!(body[0], 0x93, "receive maximum exceeded");
            break;
        }
        assert_eq!(pubrecs, 1024);
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}
