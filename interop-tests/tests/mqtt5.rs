//! MQTT 5.0 through rumqttc's v5 client over a socket: what CONNACK advertises, shared
//! subscriptions, topic aliases both ways, receive maximum, message expiry with the
//! consumer away, subscription identifiers, reason codes, request/response and user
//! properties to and from an AMQP 0-9-1 consumer, 3.1.1 and 5 clients on one topic, the
//! server's DISCONNECT reasons, and bad input answered with the right reason code.
//!
//! Every test uses its own broker on 127.0.0.1 port 0 and is bounded in time.

mod mqtt5_common;
mod mqtt_common;

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use mqtt5_common::{
    connect5, connect5_packet, options5, packet, publish5_packet, server_disconnect_reason,
    try_connect5, Raw5,
};
use rumqttc::v5::mqttbytes::v5::{
    ConnectReturnCode, DisconnectReasonCode, Filter, LastWill, LastWillProperties, Packet,
    PublishProperties, RetainForwardRule, SubscribeProperties, SubscribeReasonCode, UnsubAckReason,
};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{ConnectionError, MqttOptions, StateError};
use warren_interop_tests::TestBroker;

/// A bound on each whole test.
const TEST_LIMIT: Duration = Duration::from_secs(60);

/// Sets the session expiry interval a CONNECT asks for.
fn session_expiry(options: &mut MqttOptions, seconds: u32) {
    let mut properties = options.connect_properties().unwrap_or_default();
    properties.session_expiry_interval = Some(seconds);
    options.set_connect_properties(properties);
}

fn payload_text(payload: &Bytes) -> String {
    String::from_utf8_lossy(payload).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connack_advertises_the_limits_and_assigns_an_identifier() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let client = connect5(options5(broker.mqtt_addr(), "")).await;
        assert_eq!(client.connack.code, ConnectReturnCode::Success);
        let properties = client
            .connack
            .properties
            .clone()
            .expect("CONNACK properties");
        assert_eq!(properties.receive_max, Some(1024));
        assert_eq!(properties.topic_alias_max, Some(16));
        assert_eq!(properties.shared_subscription_available, Some(1));
        assert_eq!(properties.subscription_identifiers_available, Some(1));
        assert_eq!(properties.wildcard_subscription_available, Some(1));
        assert_eq!(properties.retain_available, Some(1));
        let assigned = properties
            .assigned_client_identifier
            .expect("an identifier");
        assert!(assigned.starts_with("warren-"), "{assigned}");
        // Operators see it as an MQTT 5 connection.
        let connections = broker.broker().connections().list();
        assert!(connections.iter().any(|c| c.info.protocol == "MQTT 5.0"));
        client.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_subscription_spreads_messages_and_a_leaving_member_hands_over() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        // The leaver takes its share and never acknowledges it.
        let mut leaver_options = options5(addr, "leaver");
        leaver_options.set_manual_acks(true);
        let mut leaver = connect5(leaver_options).await;
        let mut stayer_1 = connect5(options5(addr, "stayer-1")).await;
        let mut stayer_2 = connect5(options5(addr, "stayer-2")).await;
        for member in [&mut stayer_1, &mut stayer_2, &mut leaver] {
            let suback = member
                .subscribe("$share/workers/jobs/#", QoS::AtLeastOnce)
                .await;
            assert_eq!(
                suback.return_codes,
                vec![SubscribeReasonCode::Success(QoS::AtLeastOnce)]
            );
        }
        let mut publisher = connect5(options5(addr, "dispatcher")).await;
        let total = 9;
        for job in 0..total {
            publisher
                .publish(
                    &format!("jobs/{job}"),
                    QoS::AtLeastOnce,
                    format!("job-{job}").as_bytes(),
                )
                .await;
            assert!(matches!(publisher.next_ack().await, Packet::PubAck(_)));
        }
        // Each message goes to one member; all three get some.
        let mut held = Vec::new();
        let mut got: Vec<Vec<String>> = vec![Vec::new(), Vec::new()];
        while held.len() + got[0].len() + got[1].len() < total {
            tokio::select! {
                Some(publish) = leaver.publish_within(Duration::from_millis(50)) => {
                    held.push(payload_text(&publish.payload));
                }
                Some(publish) = stayer_1.publish_within(Duration::from_millis(50)) => {
                    got[0].push(payload_text(&publish.payload));
                }
                Some(publish) = stayer_2.publish_within(Duration::from_millis(50)) => {
                    got[1].push(payload_text(&publish.payload));
                }
                else => {}
            }
        }
        assert!(
            !held.is_empty() && !got[0].is_empty() && !got[1].is_empty(),
            "spread: leaver {held:?}, stayers {got:?}"
        );
        let mut all: BTreeSet<String> = held.iter().cloned().collect();
        all.extend(got.iter().flatten().cloned());
        assert_eq!(all.len(), total, "each message to exactly one member");
        // The leaver goes away with its share unacknowledged: the others get it.
        leaver.abort();
        let mut handed_over = BTreeSet::new();
        while handed_over.len() < held.len() {
            tokio::select! {
                Some(publish) = stayer_1.publish_within(Duration::from_millis(100)) => {
                    handed_over.insert(payload_text(&publish.payload));
                }
                Some(publish) = stayer_2.publish_within(Duration::from_millis(100)) => {
                    handed_over.insert(payload_text(&publish.payload));
                }
                else => {}
            }
        }
        assert_eq!(handed_over, held.into_iter().collect::<BTreeSet<_>>());
        stayer_1.disconnect().await;
        stayer_2.disconnect().await;
        publisher.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_aliases_work_both_ways() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let mut options = options5(broker.mqtt_addr(), "aliaser");
        options.set_topic_alias_max(Some(4));
        let mut client = connect5(options).await;
        client.subscribe("sensors/+/temp", QoS::AtMostOnce).await;
        let aliased = |alias| PublishProperties {
            topic_alias: Some(alias),
            ..PublishProperties::default()
        };
        // The topic once with alias 3, then only the alias.
        client
            .client
            .publish_with_properties("sensors/1/temp", QoS::AtMostOnce, false, "20", aliased(3))
            .await
            .expect("publish");
        client
            .client
            .publish_with_properties("", QoS::AtMostOnce, false, "21", aliased(3))
            .await
            .expect("publish");
        for expected in ["20", "21"] {
            let publish = client.next_publish().await;
            // rumqttc resolved the alias the broker chose for its deliveries.
            assert_eq!(payload_text(&publish.topic), "sensors/1/temp");
            assert_eq!(payload_text(&publish.payload), expected);
            let properties = publish.properties.expect("delivery properties");
            assert_eq!(properties.topic_alias, Some(1), "the broker's alias");
        }
        client.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_receive_maximum_bounds_deliveries_in_flight() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut options = options5(addr, "slow");
        options.set_receive_maximum(Some(2));
        options.set_manual_acks(true);
        let mut slow = connect5(options).await;
        slow.subscribe("work", QoS::AtLeastOnce).await;
        let mut publisher = connect5(options5(addr, "fast")).await;
        for n in 0..5 {
            publisher
                .publish("work", QoS::AtLeastOnce, format!("{n}").as_bytes())
                .await;
            assert!(matches!(publisher.next_ack().await, Packet::PubAck(_)));
        }
        let first = slow.next_publish().await;
        let second = slow.next_publish().await;
        assert!(
            slow.publish_within(Duration::from_millis(400))
                .await
                .is_none(),
            "no third delivery while two are unacknowledged"
        );
        slow.client.ack(&first).await.expect("ack");
        slow.client.ack(&second).await.expect("ack");
        let mut rest = Vec::new();
        for _ in 0..3 {
            let publish = slow.next_publish().await;
            rest.push(payload_text(&publish.payload));
            slow.client.ack(&publish).await.expect("ack");
        }
        assert_eq!(rest, vec!["2", "3", "4"]);
        slow.disconnect().await;
        publisher.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_message_is_not_delivered_and_the_rest_carry_what_is_left() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut away = options5(addr, "away");
        away.set_clean_start(false);
        session_expiry(&mut away, 300);
        let mut subscriber = connect5(away.clone()).await;
        subscriber.subscribe("news", QoS::AtLeastOnce).await;
        subscriber.disconnect().await;

        let mut publisher = connect5(options5(addr, "newsroom")).await;
        for (text, expiry) in [("stale", 1), ("fresh", 60)] {
            let properties = PublishProperties {
                message_expiry_interval: Some(expiry),
                ..PublishProperties::default()
            };
            publisher
                .client
                .publish_with_properties("news", QoS::AtLeastOnce, false, text, properties)
                .await
                .expect("publish");
            assert!(matches!(publisher.next_ack().await, Packet::PubAck(_)));
        }
        tokio::time::sleep(Duration::from_millis(1600)).await;

        let mut subscriber = connect5(away).await;
        assert!(subscriber.connack.session_present);
        let publish = subscriber.next_publish().await;
        assert_eq!(payload_text(&publish.payload), "fresh");
        let left = publish
            .properties
            .and_then(|p| p.message_expiry_interval)
            .expect("the remaining expiry interval");
        assert!((57..=59).contains(&left), "{left} s left of 60");
        assert!(subscriber
            .publish_within(Duration::from_millis(300))
            .await
            .is_none());
        subscriber.disconnect().await;
        publisher.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscription_identifiers_retain_handling_and_unsubscribe_reasons() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut publisher = connect5(options5(addr, "retainer")).await;
        publisher
            .client
            .publish("status/door", QoS::AtLeastOnce, true, "open")
            .await
            .expect("publish");
        assert!(matches!(publisher.next_ack().await, Packet::PubAck(_)));

        let mut client = connect5(options5(addr, "identified")).await;
        let with_id = |id| SubscribeProperties {
            id: Some(id),
            user_properties: Vec::new(),
        };
        // Retain handling 2: no retained message on subscribe.
        let mut filter = Filter::new("status/#", QoS::AtMostOnce);
        filter.retain_forward_rule = RetainForwardRule::Never;
        client
            .client
            .subscribe_many_with_properties([filter], with_id(7))
            .await
            .expect("subscribe");
        assert!(matches!(client.next().await, Packet::SubAck(_)));
        assert!(client
            .publish_within(Duration::from_millis(300))
            .await
            .is_none());
        // A second filter with another identifier: a matching delivery carries both.
        client
            .client
            .subscribe_with_properties("status/door", QoS::AtMostOnce, with_id(9))
            .await
            .expect("subscribe");
        assert!(matches!(client.next().await, Packet::SubAck(_)));
        let retained = client.next_publish().await;
        assert!(
            retained.retain,
            "retain handling 0 sends the retained message"
        );
        publisher
            .publish("status/door", QoS::AtMostOnce, b"closed")
            .await;
        assert_eq!(payload_text(&retained.payload), "open");
        let publish = client.next_publish().await;
        assert_eq!(payload_text(&publish.payload), "closed");
        let mut identifiers = publish
            .properties
            .expect("properties")
            .subscription_identifiers;
        identifiers.sort_unstable();
        assert_eq!(identifiers, vec![7, 9]);
        let unsuback = client.unsubscribe("status/#").await;
        assert_eq!(unsuback.reasons, vec![UnsubAckReason::Success]);
        // rumqttc ends its event loop on a failed UNSUBACK, with the broker's reason.
        client
            .client
            .unsubscribe("never/subscribed")
            .await
            .expect("unsubscribe");
        match tokio::time::timeout(Duration::from_secs(5), client.ended)
            .await
            .expect("the loop ends")
            .expect("event loop task")
        {
            ConnectionError::MqttState(StateError::UnsubFail { reason }) => {
                assert_eq!(reason, UnsubAckReason::NoSubscriptionExisted)
            }
            other => panic!("expected an UNSUBACK failure, got {other:?}"),
        }
        publisher.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

fn header_text(headers: &FieldTable, name: &str) -> Option<String> {
    headers
        .inner()
        .iter()
        .find(|(key, _)| key.as_str() == name)
        .and_then(|(_, value)| match value {
            AMQPValue::LongString(text) => {
                Some(String::from_utf8_lossy(text.as_bytes()).into_owned())
            }
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_properties_and_request_response_reach_amqp_and_come_back() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let amqp = Connection::connect(&broker.url(), ConnectionProperties::default())
            .await
            .expect("AMQP connects");
        let channel = amqp.create_channel().await.expect("channel");
        channel
            .queue_declare(
                "from-mqtt5".into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("declare");
        channel
            .queue_bind(
                "from-mqtt5".into(),
                "amq.topic".into(),
                "requests.#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("bind");

        let mut client = connect5(options5(broker.mqtt_addr(), "requester")).await;
        client
            .subscribe("replies/requester", QoS::AtLeastOnce)
            .await;
        let request = PublishProperties {
            user_properties: vec![("device".into(), "pump-7".into())],
            content_type: Some("application/json".into()),
            response_topic: Some("replies/requester".into()),
            correlation_data: Some(Bytes::from_static(b"req-42")),
            payload_format_indicator: Some(1),
            ..PublishProperties::default()
        };
        client
            .client
            .publish_with_properties("requests/pump", QoS::AtLeastOnce, false, "{}", request)
            .await
            .expect("publish");
        assert!(matches!(client.next_ack().await, Packet::PubAck(_)));

        let got = channel
            .basic_get("from-mqtt5".into(), BasicGetOptions::default())
            .await
            .expect("get")
            .expect("a message");
        let properties = &got.delivery.properties;
        assert_eq!(
            properties.reply_to().as_ref().map(|s| s.as_str()),
            Some("replies.requester")
        );
        assert_eq!(
            properties.correlation_id().as_ref().map(|s| s.as_str()),
            Some("req-42")
        );
        assert_eq!(
            properties.content_type().as_ref().map(|s| s.as_str()),
            Some("application/json")
        );
        let headers = properties.headers().clone().expect("headers");
        assert_eq!(header_text(&headers, "device").as_deref(), Some("pump-7"));

        // The AMQP side answers on the reply-to routing key with a header of its own.
        let mut reply_headers = FieldTable::default();
        reply_headers.insert("status".into(), AMQPValue::LongString("done".into()));
        channel
            .basic_publish(
                "amq.topic".into(),
                properties
                    .reply_to()
                    .clone()
                    .expect("reply_to")
                    .as_str()
                    .into(),
                BasicPublishOptions::default(),
                b"ok",
                BasicProperties::default()
                    .with_correlation_id(properties.correlation_id().clone().expect("id"))
                    .with_reply_to("requests.again".into())
                    .with_headers(reply_headers),
            )
            .await
            .expect("publish reply");
        let reply = client.next_publish().await;
        assert_eq!(payload_text(&reply.payload), "ok");
        let reply = reply.properties.expect("reply properties");
        assert_eq!(reply.correlation_data, Some(Bytes::from_static(b"req-42")));
        assert_eq!(reply.response_topic.as_deref(), Some("requests/again"));
        assert_eq!(
            reply.user_properties,
            vec![("status".to_string(), "done".to_string())]
        );
        client.disconnect().await;
        let _ = amqp.close(0, "bye".into()).await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_1_and_5_clients_share_a_topic() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut old = mqtt_common::connect(mqtt_common::options(addr, "old-client")).await;
        old.subscribe("mixed/t", rumqttc::QoS::AtLeastOnce).await;
        let mut new = connect5(options5(addr, "new-client")).await;
        new.subscribe("mixed/t", QoS::AtLeastOnce).await;

        let properties = PublishProperties {
            user_properties: vec![("from".into(), "v5".into())],
            ..PublishProperties::default()
        };
        new.client
            .publish_with_properties("mixed/t", QoS::AtLeastOnce, false, "five", properties)
            .await
            .expect("publish");
        old.publish("mixed/t", rumqttc::QoS::AtLeastOnce, b"three")
            .await;

        let mut at_old = vec![
            String::from_utf8_lossy(&old.next_publish().await.payload).into_owned(),
            String::from_utf8_lossy(&old.next_publish().await.payload).into_owned(),
        ];
        at_old.sort();
        assert_eq!(at_old, vec!["five", "three"]);
        let mut at_new = Vec::new();
        for _ in 0..2 {
            let publish = new.next_publish().await;
            let user = publish
                .properties
                .map(|p| p.user_properties)
                .unwrap_or_default();
            at_new.push((payload_text(&publish.payload), user));
        }
        at_new.sort();
        assert_eq!(
            at_new,
            vec![
                (
                    "five".to_string(),
                    vec![("from".to_string(), "v5".to_string())]
                ),
                ("three".to_string(), vec![]),
            ]
        );
        old.disconnect().await;
        new.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_says_why_it_disconnects() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        // Takeover: the first connection is told 0x8E.
        let first = connect5(options5(addr, "twin")).await;
        let second = connect5(options5(addr, "twin")).await;
        assert_eq!(
            server_disconnect_reason(first).await,
            DisconnectReasonCode::SessionTakenOver
        );
        // Shutdown: 0x8B.
        let shutdown = tokio::spawn(broker.shutdown());
        assert_eq!(
            server_disconnect_reason(second).await,
            DisconnectReasonCode::ServerShuttingDown
        );
        shutdown.await.expect("shutdown");
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_answered_with_its_reason_code() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start_with(&[("mqtt.max_packet_size", "1024")]).await;
        let addr = broker.mqtt_addr();
        // (properties of a QoS 0 PUBLISH to "t", reason code)
        let cases: &[(&[u8], u8)] = &[
            // Topic alias 0.
            (&[0x23, 0, 0], 0x94),
            // Topic alias 17, above the maximum of 16 CONNACK gave.
            (&[0x23, 0, 17], 0x94),
            // The message expiry interval twice.
            (&[0x02, 0, 0, 0, 1, 0x02, 0, 0, 0, 2], 0x82),
            // A CONNECT property in a PUBLISH.
            (&[0x11, 0, 0, 0, 1], 0x81),
            // A subscription identifier from the client.
            (&[0x0B, 1], 0x82),
        ];
        for (index, (properties, code)) in cases.iter().enumerate() {
            let mut raw = Raw5::connected(addr, &format!("bad-{index}")).await;
            raw.send(&publish5_packet("t", properties, b"x")).await;
            assert_eq!(raw.disconnect_reason().await, *code, "case {index}");
        }
        // An alias that was never set.
        let mut raw = Raw5::connected(addr, "bad-alias").await;
        raw.send(&publish5_packet("", &[0x23, 0, 2], b"x")).await;
        assert_eq!(raw.disconnect_reason().await, 0x82);
        // A payload format indicator of UTF-8 with a payload that is not: 0x99.
        let mut raw = Raw5::connected(addr, "bad-format").await;
        raw.send(&publish5_packet("t", &[0x01, 1], &[0xff, 0xfe]))
            .await;
        assert_eq!(raw.disconnect_reason().await, 0x99);
        // A packet above mqtt.max_packet_size: 0x95.
        let mut raw = Raw5::connected(addr, "too-big").await;
        raw.send(&publish5_packet("t", &[], &[b'x'; 2000])).await;
        assert_eq!(raw.disconnect_reason().await, 0x95);
        // AUTH without an authentication method in CONNECT: 0x82.
        let mut raw = Raw5::connected(addr, "auth").await;
        raw.send(&[0xF0, 0]).await;
        assert_eq!(raw.disconnect_reason().await, 0x82);
        // Enhanced authentication is refused in CONNACK with 0x8C.
        let mut raw = Raw5::open(addr).await;
        let method = [0x15, 0, 5, b'S', b'C', b'R', b'A', b'M'];
        raw.send(&connect5_packet("scram", &method)).await;
        let (first, body) = raw.read_packet().await;
        assert_eq!((first, body[1]), (0x20, 0x8C));
        // A malformed CONNECT property list gets a CONNACK with 0x81.
        let mut raw = Raw5::open(addr).await;
        raw.send(&connect5_packet("broken", &[0x7F, 0])).await;
        let (first, body) = raw.read_packet().await;
        assert_eq!((first, body[1]), (0x20, 0x81));
        // The maximum packet size CONNACK advertises (remaining length + header).
        let client = connect5(options5(addr, "sized")).await;
        assert_eq!(
            client
                .connack
                .properties
                .as_ref()
                .and_then(|p| p.max_packet_size),
            Some(1029)
        );
        client.disconnect().await;
        // rumqttc refuses a bad password in CONNACK with the MQTT 5 code.
        let mut wrong = options5(addr, "wrong");
        wrong.set_credentials("guest", "nope");
        match try_connect5(wrong).await {
            Err(ConnectionError::ConnectionRefused(code)) => {
                assert_eq!(code, ConnectReturnCode::BadUserNamePassword)
            }
            Err(other) => panic!("expected a refusal, got {other:?}"),
            Ok(_) => panic!("expected a refusal"),
        }
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_local_and_retain_as_published() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut chatty = connect5(options5(addr, "chatty")).await;
        let mut filter = Filter::new("room/+", QoS::AtMostOnce);
        filter.nolocal = true;
        chatty
            .client
            .subscribe_many([filter])
            .await
            .expect("subscribe");
        assert!(matches!(chatty.next().await, Packet::SubAck(_)));
        let mut listener = connect5(options5(addr, "listener")).await;
        let mut filter = Filter::new("room/+", QoS::AtMostOnce);
        filter.preserve_retain = true;
        listener
            .client
            .subscribe_many([filter])
            .await
            .expect("subscribe");
        assert!(matches!(listener.next().await, Packet::SubAck(_)));
        let mut plain = connect5(options5(addr, "plain")).await;
        plain.subscribe("room/+", QoS::AtMostOnce).await;

        chatty
            .client
            .publish("room/1", QoS::AtMostOnce, true, "hello")
            .await
            .expect("publish");
        // The listener keeps RETAIN (retain as published), the plain subscriber does not.
        let heard = listener.next_publish().await;
        assert_eq!(payload_text(&heard.payload), "hello");
        assert!(heard.retain);
        let heard = plain.next_publish().await;
        assert_eq!(payload_text(&heard.payload), "hello");
        assert!(!heard.retain);
        // No local: the publisher does not get its own message, but gets the listener's.
        listener
            .publish("room/2", QoS::AtMostOnce, b"hi back")
            .await;
        let heard = chatty.next_publish().await;
        assert_eq!(payload_text(&heard.payload), "hi back");
        assert!(chatty
            .publish_within(Duration::from_millis(300))
            .await
            .is_none());
        for client in [chatty, listener, plain] {
            client.disconnect().await;
        }
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

/// A "no local" subscription beside plain ones of the same client: its own message still
/// comes back through a plain subscription that matches it, whether the plain one was made
/// before the "no local" one or after (the outbox records plain subscriptions only once a
/// "no local" one exists).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_local_beside_plain_subscriptions() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut chatty = connect5(options5(addr, "chatty-mixed")).await;
        chatty.subscribe("desk/+", QoS::AtMostOnce).await;
        for topic in ["desk/1", "room/+"] {
            let mut filter = Filter::new(topic, QoS::AtMostOnce);
            filter.nolocal = true;
            chatty
                .client
                .subscribe_many([filter])
                .await
                .expect("subscribe");
            assert!(matches!(chatty.next().await, Packet::SubAck(_)));
        }
        chatty.subscribe("lamp/#", QoS::AtMostOnce).await;

        // Only the "no local" room/+ matches: not delivered to its publisher.
        chatty.publish("room/1", QoS::AtMostOnce, b"mine").await;
        assert!(chatty
            .publish_within(Duration::from_millis(300))
            .await
            .is_none());
        // desk/+ (made before the first "no local" one) lets desk/1 through.
        chatty.publish("desk/1", QoS::AtMostOnce, b"desk").await;
        let heard = chatty.next_publish().await;
        assert_eq!(payload_text(&heard.payload), "desk");
        // lamp/# (made after) is a plain subscription too.
        chatty.publish("lamp/2", QoS::AtMostOnce, b"lamp").await;
        let heard = chatty.next_publish().await;
        assert_eq!(payload_text(&heard.payload), "lamp");
        assert!(chatty
            .publish_within(Duration::from_millis(300))
            .await
            .is_none());
        chatty.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

/// Options with a will on `topic` delayed by `delay` seconds, in a session that lasts a
/// minute.
fn with_delayed_will(
    addr: std::net::SocketAddr,
    client_id: &str,
    topic: &str,
    delay: u32,
) -> MqttOptions {
    let mut options = options5(addr, client_id);
    options.set_clean_start(false);
    session_expiry(&mut options, 60);
    let properties = LastWillProperties {
        delay_interval: Some(delay),
        payload_format_indicator: None,
        message_expiry_interval: None,
        content_type: None,
        response_topic: None,
        correlation_data: None,
        user_properties: Vec::new(),
    };
    options.set_last_will(LastWill::new(
        topic,
        "gone",
        QoS::AtMostOnce,
        false,
        Some(properties),
    ));
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delayed_will_waits_and_is_dropped_when_the_client_returns() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut watcher = connect5(options5(addr, "watcher")).await;
        watcher.subscribe("wills/#", QoS::AtMostOnce).await;

        let leaving = connect5(with_delayed_will(addr, "leaving", "wills/leaving", 1)).await;
        let returning = connect5(with_delayed_will(addr, "returning", "wills/returning", 2)).await;
        leaving.abort();
        returning.abort();
        // Back within its delay: its will is not published.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let back = connect5(with_delayed_will(addr, "returning", "wills/returning", 2)).await;
        assert!(back.connack.session_present);
        // Not at once, but after its second.
        assert!(watcher
            .publish_within(Duration::from_millis(400))
            .await
            .is_none());
        let will = watcher.next_publish().await;
        assert_eq!(&will.topic[..], b"wills/leaving");
        assert!(
            watcher
                .publish_within(Duration::from_millis(2500))
                .await
                .is_none(),
            "the returning client's will is not published"
        );
        back.disconnect().await;
        watcher.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_sends_the_old_will_unless_the_new_connection_resumes_with_a_delayed_one() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut watcher = connect5(options5(addr, "watcher")).await;
        watcher.subscribe("wills/#", QoS::AtMostOnce).await;
        let with_will = |client_id: &str, payload: &str| {
            let mut options = options5(addr, client_id);
            options.set_clean_start(false);
            session_expiry(&mut options, 60);
            options.set_last_will(LastWill::new(
                "wills/twin",
                payload.to_string(),
                QoS::AtMostOnce,
                false,
                None,
            ));
            options
        };

        // Taken over by a connection without a will delay: the old will is published.
        let first = connect5(with_will("twin", "first gone")).await;
        let second = connect5(with_will("twin", "second gone")).await;
        assert_eq!(
            server_disconnect_reason(first).await,
            DisconnectReasonCode::SessionTakenOver
        );
        assert_eq!(&watcher.next_publish().await.payload[..], b"first gone");

        // Taken over by a connection resuming the session with a delayed will (RabbitMQ's
        // rule, MQTT 5 3.1.3.2.2): the old will is not published.
        let third = connect5(with_delayed_will(addr, "twin", "wills/twin", 30)).await;
        assert!(third.connack.session_present);
        assert_eq!(
            server_disconnect_reason(second).await,
            DisconnectReasonCode::SessionTakenOver
        );
        assert!(
            watcher
                .publish_within(Duration::from_millis(500))
                .await
                .is_none(),
            "the second connection's will is not published"
        );
        third.disconnect().await;
        watcher.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_max_connections_is_answered_with_server_unavailable() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start_with(&[("mqtt.max_connections", "2")]).await;
        let addr = broker.mqtt_addr();
        let first = connect5(options5(addr, "first")).await;
        let second = mqtt_common::connect(mqtt_common::options(addr, "second")).await;
        // A third is refused in CONNACK, in its own protocol, not dropped.
        assert_eq!(
            mqtt_common::refused(mqtt_common::options(addr, "third")).await,
            rumqttc::ConnectReturnCode::ServiceUnavailable
        );
        match try_connect5(options5(addr, "third-5")).await {
            Err(ConnectionError::ConnectionRefused(code)) => {
                assert_eq!(code, ConnectReturnCode::ServerUnavailable)
            }
            Err(other) => panic!("expected a refusal, got {other:?}"),
            Ok(_) => panic!("expected a refusal"),
        }
        // Room again once one leaves.
        first.disconnect().await;
        let mut again = None;
        for _ in 0..20 {
            if let Ok(client) = try_connect5(options5(addr, "again")).await {
                if client.connack.code == ConnectReturnCode::Success {
                    again = Some(client);
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        again
            .expect("a connection after one left")
            .disconnect()
            .await;
        second.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumed_with_expiry_0_ends_with_its_connection() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut lasting = options5(addr, "shortening");
        lasting.set_clean_start(false);
        session_expiry(&mut lasting, 60);
        let mut client = connect5(lasting).await;
        client.subscribe("short/#", QoS::AtLeastOnce).await;
        client.disconnect().await;
        let vhost = broker.broker().vhost("/").expect("vhost");
        assert!(vhost.queue("mqtt-subscription-shorteningqos1").is_some());

        let mut ending = options5(addr, "shortening");
        ending.set_clean_start(false);
        let client = connect5(ending).await;
        assert!(client.connack.session_present);
        client.disconnect().await;
        assert!(
            warren_interop_tests::wait_for(Duration::from_secs(5), || vhost
                .queue("mqtt-subscription-shorteningqos1")
                .is_none())
            .await,
            "the session's queue goes with its last connection"
        );
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_refused_by_topic_permissions_gets_suback_0x87_and_the_connection_goes_on() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        // As paho's test_subscribe_failure needs it: a topic the user may not subscribe to
        // (RabbitMQ's topic permission; its read pattern is matched against the binding key).
        let root = broker.broker().vhost("/").expect("default vhost");
        root.set_topic_permission(
            "guest",
            warren_core::topic_access::TopicPermission::new(
                "guest",
                "/",
                "amq.topic",
                ".*",
                "^allowed\\.",
            )
            .expect("valid patterns"),
        );
        // rumqttc ends its event loop on a refused subscription: the refusal it saw is
        // the SUBACK's reason code.
        let refused = connect5(options5(broker.mqtt_addr(), "refused-5")).await;
        refused
            .client
            .subscribe("test/nosubscribe", QoS::ExactlyOnce)
            .await
            .expect("subscribe");
        match tokio::time::timeout(Duration::from_secs(5), refused.ended)
            .await
            .expect("SUBACK in time")
            .expect("event loop task")
        {
            ConnectionError::MqttState(StateError::SubFail { reason }) => {
                assert_eq!(reason, SubscribeReasonCode::NotAuthorized)
            }
            other => panic!("expected a refused SUBACK, got {other:?}"),
        }
        // The broker keeps the connection: a raw client's refused SUBSCRIBE (0x87, with a
        // reason string) is followed by a granted one on the same connection.
        let mut raw = Raw5::connected(broker.mqtt_addr(), "raw-refused").await;
        for (packet_id, filter, expected) in
            [(1u16, "test/nosubscribe", 0x87), (2, "allowed/in", 0x01)]
        {
            let mut body = packet_id.to_be_bytes().to_vec();
            body.push(0);
            body.extend_from_slice(&(filter.len() as u16).to_be_bytes());
            body.extend_from_slice(filter.as_bytes());
            body.push(1);
            raw.send(&packet(0x82, &body)).await;
            let (first, suback) = raw.read_packet().await;
            assert_eq!(first, 0x90, "SUBACK, got {first:#x} {suback:02x?}");
            assert_eq!(&suback[..2], &packet_id.to_be_bytes());
            assert_eq!(suback.last(), Some(&expected), "{filter}: {suback:02x?}");
        }
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_and_response_between_two_no_local_subscribers_of_one_topic() {
    tokio::time::timeout(TEST_LIMIT, async {
        // paho's test_request_response, with each SUBACK awaited.
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let topic = "client_test5/TopicA";
        let mut requester = connect5(options5(addr, "requester")).await;
        let mut responder = connect5(options5(addr, "responder")).await;
        for client in [&mut requester, &mut responder] {
            let mut filter = Filter::new(topic, QoS::ExactlyOnce);
            filter.nolocal = true;
            client
                .client
                .subscribe_many([filter])
                .await
                .expect("subscribe");
            assert!(matches!(client.next().await, Packet::SubAck(_)));
        }
        let properties = PublishProperties {
            response_topic: Some(topic.to_string()),
            correlation_data: Some(Bytes::from_static(b"334")),
            ..PublishProperties::default()
        };
        requester
            .client
            .publish_with_properties(topic, QoS::AtLeastOnce, false, "request", properties)
            .await
            .expect("publish");
        let request = responder.next_publish().await;
        assert_eq!(payload_text(&request.payload), "request");
        let received = request.properties.clone().expect("properties");
        assert_eq!(received.response_topic.as_deref(), Some(topic));
        assert_eq!(received.correlation_data, Some(Bytes::from_static(b"334")));
        // The responder answers with the properties it received, as paho's test does.
        responder
            .client
            .publish_with_properties(topic, QoS::AtLeastOnce, false, "response", received)
            .await
            .expect("publish");
        let response = requester.next_publish().await;
        assert_eq!(payload_text(&response.payload), "response");
        assert_eq!(
            response.properties.and_then(|p| p.correlation_data),
            Some(Bytes::from_static(b"334"))
        );
        for client in [&mut requester, &mut responder] {
            assert!(
                client
                    .publish_within(Duration::from_millis(300))
                    .await
                    .is_none(),
                "no local: nothing of its own"
            );
        }
        requester.disconnect().await;
        responder.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_above_the_clients_maximum_packet_size_is_dropped_and_settled() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let addr = broker.mqtt_addr();
        let mut small = options5(addr, "small-packets");
        small.set_clean_start(false);
        session_expiry(&mut small, 60);
        small.set_max_packet_size(Some(200));
        let mut subscriber = connect5(small.clone()).await;
        subscriber.subscribe("sizes/#", QoS::AtLeastOnce).await;
        let mut publisher = connect5(options5(addr, "sizes-publisher")).await;
        publisher
            .publish("sizes/big", QoS::AtLeastOnce, &[b'x'; 500])
            .await;
        publisher
            .publish("sizes/small", QoS::AtLeastOnce, b"fits")
            .await;
        // The larger one would break the client's limit: it is not sent (MQTT-3.1.2-25)...
        let heard = subscriber.next_publish().await;
        assert_eq!(payload_text(&heard.payload), "fits");
        assert!(subscriber
            .publish_within(Duration::from_millis(300))
            .await
            .is_none());
        // ... and settled, not kept for a later connection of the session.
        subscriber.disconnect().await;
        let mut subscriber = connect5(small).await;
        assert!(subscriber.connack.session_present);
        assert!(subscriber
            .publish_within(Duration::from_millis(500))
            .await
            .is_none());
        subscriber.disconnect().await;
        publisher.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_properties_and_content_type_reach_stomp_headers_and_come_back() {
    use warren_interop_tests::stomp::StompClient;
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let mut stomp = StompClient::connect(broker.stomp_addr(), "1.2").await;
        stomp
            .subscribe("/topic/telemetry.#", "dash", "auto", &[])
            .await;
        let mut device = connect5(options5(broker.mqtt_addr(), "pump")).await;
        device.subscribe("commands/+", QoS::AtLeastOnce).await;

        // MQTT 5 to STOMP: user properties become headers, content type content-type.
        let properties = PublishProperties {
            user_properties: vec![("device".into(), "pump-7".into())],
            content_type: Some("application/json".into()),
            ..PublishProperties::default()
        };
        device
            .client
            .publish_with_properties(
                "telemetry/pump-7",
                QoS::AtLeastOnce,
                false,
                "{\"bar\":2}",
                properties,
            )
            .await
            .expect("publish");
        let message = stomp.expect_message().await;
        assert_eq!(message.text(), "{\"bar\":2}");
        assert_eq!(message.header("device"), Some("pump-7"));
        assert_eq!(message.header("content-type"), Some("application/json"));

        // STOMP to MQTT 5: a plain header becomes a user property.
        stomp
            .send(
                "/topic/commands.stop",
                "now",
                &[("site", "north"), ("content-type", "text/plain")],
            )
            .await;
        let command = device.next_publish().await;
        assert_eq!(payload_text(&command.payload), "now");
        let properties = command.properties.expect("properties");
        assert!(
            properties
                .user_properties
                .contains(&("site".to_string(), "north".to_string())),
            "{:?}",
            properties.user_properties
        );
        assert_eq!(properties.content_type.as_deref(), Some("text/plain"));
        device.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}
