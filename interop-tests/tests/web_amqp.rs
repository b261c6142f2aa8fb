//! AMQP 1.0 over WebSocket (`web_amqp.*`, subprotocol `amqp`): the fe2o3-amqp client over
//! its WebSocket binding (fe2o3-amqp-ws) sends and receives through the same AMQP 1.0
//! session code as on the AMQP port, meets TCP clients, sees an MQTT 5 publisher's user
//! properties as application properties, and is held to the same login and bad-input
//! rules; the handshake checks path and subprotocol.
//!
//! Every test uses its own broker on 127.0.0.1 port 0 and is bounded in time.

mod amqp10_common;
mod mqtt5_common;
mod mqtt_common;

use std::time::Duration;

use amqp10_common::{bind, declare_queue, ready};
use bytes::Bytes;
use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::sasl_profile::SaslProfile;
use fe2o3_amqp::types::messaging::{Body, MessageId, Outcome};
use fe2o3_amqp::types::primitives::{SimpleValue, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use fe2o3_amqp_ws::WebSocketStream;
use futures_util::{SinkExt, StreamExt};
use rumqttc::v5::mqttbytes::v5::PublishProperties;
use rumqttc::v5::mqttbytes::QoS;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use warren_interop_tests::{wait_for, TestBroker};

/// A bound on each whole test.
const TEST_LIMIT: Duration = Duration::from_secs(60);

async fn broker_with_web_amqp() -> TestBroker {
    TestBroker::start_with(&[("web_amqp.tcp.ip", "127.0.0.1"), ("web_amqp.tcp.port", "0")]).await
}

fn web_url(broker: &TestBroker) -> String {
    let addr = broker.server().web_amqp_addr().expect("web-amqp listener");
    format!("ws://{addr}/ws")
}

/// Opens an AMQP 1.0 connection over WebSocket with SASL PLAIN as `user`.
async fn open_over_websocket(
    broker: &TestBroker,
    user: &str,
    password: &str,
) -> Result<ConnectionHandle<()>, fe2o3_amqp::connection::OpenError> {
    // TCP_NODELAY: without it the client's small frames wait for delayed ACKs.
    let stream = WebSocketStream::connect_with_config(web_url(broker), None, true)
        .await
        .expect("WebSocket handshake with subprotocol amqp");
    Connection::builder()
        .container_id("web-amqp-test")
        .sasl_profile(SaslProfile::Plain {
            username: user.into(),
            password: password.into(),
        })
        .open_with_stream(stream)
        .await
}

fn text(body: &Body<Value>) -> String {
    match body {
        Body::Value(value) => match &value.0 {
            Value::String(text) => text.clone(),
            other => panic!("unexpected value {other:?}"),
        },
        Body::Data(data) => String::from_utf8_lossy(&data[0].0).into_owned(),
        other => panic!("unexpected body {other:?}"),
    }
}

// One thread: fe2o3-amqp 0.14 hands a transfer to its session task before it records the
// delivery as unsettled (`send_payload_with_transfer` in its `link/sender_link.rs`), so on
// a multi-threaded runtime the broker's disposition can be processed in between, is
// dropped as unknown, and `Sender::send` waits forever (seen about 1 run in 10 here; the
// broker wrote and flushed the disposition). With one thread the session task cannot run
// until the sender task yields, after it recorded the delivery.
#[tokio::test(flavor = "current_thread")]
async fn an_amqp_1_0_client_over_websocket_meets_one_over_tcp() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = broker_with_web_amqp().await;
        declare_queue(&broker, "browser-in");
        declare_queue(&broker, "browser-out");
        let mut web = open_over_websocket(&broker, "guest", "guest")
            .await
            .expect("AMQP 1.0 over WebSocket opens");
        let mut web_session = Session::begin(&mut web).await.expect("session");
        let mut sender = Sender::attach(&mut web_session, "web-sender", "/queues/browser-in")
            .await
            .expect("sender attaches");
        for i in 0..3 {
            let outcome = sender.send(format!("from the browser {i}")).await.unwrap();
            assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
        }
        assert_eq!(ready(&broker, "browser-in"), 3);

        // A TCP client takes them and answers on the other queue.
        let (mut tcp, mut tcp_session) = amqp10_common::connect(&broker).await;
        let mut tcp_receiver = Receiver::attach(&mut tcp_session, "tcp-r", "/queues/browser-in")
            .await
            .unwrap();
        for i in 0..3 {
            let delivery = tcp_receiver.recv::<Body<Value>>().await.unwrap();
            assert_eq!(text(delivery.body()), format!("from the browser {i}"));
            tcp_receiver.accept(&delivery).await.unwrap();
        }
        let mut tcp_sender = Sender::attach(&mut tcp_session, "tcp-s", "/queues/browser-out")
            .await
            .unwrap();
        tcp_sender.send("to the browser").await.unwrap();

        let mut web_receiver =
            Receiver::attach(&mut web_session, "web-receiver", "/queues/browser-out")
                .await
                .expect("receiver attaches");
        let delivery = web_receiver.recv::<Body<Value>>().await.unwrap();
        assert_eq!(text(delivery.body()), "to the browser");
        web_receiver.accept(&delivery).await.unwrap();
        assert!(
            wait_for(Duration::from_secs(5), || ready(&broker, "browser-out")
                == 0)
            .await,
            "settled over WebSocket"
        );
        // Operators see it as an AMQP 1.0 connection.
        let connections = broker.broker().connections().list();
        assert!(
            connections
                .iter()
                .filter(|c| c.info.protocol.contains("1.0"))
                .count()
                >= 2,
            "{:?}",
            connections
                .iter()
                .map(|c| c.info.protocol.clone())
                .collect::<Vec<_>>()
        );
        web_receiver.close().await.unwrap();
        sender.close().await.unwrap();
        web_session.end().await.unwrap();
        web.close().await.unwrap();
        tcp.close().await.unwrap();
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mqtt5_publish_reaches_an_amqp_1_0_websocket_receiver_with_its_properties() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker =
            TestBroker::start_with(&[("web_amqp.tcp.ip", "127.0.0.1"), ("web_amqp.tcp.port", "0")])
                .await;
        declare_queue(&broker, "from-devices");
        bind(&broker, "amq.topic", "from-devices", "requests.#");
        let mut device =
            mqtt5_common::connect5(mqtt5_common::options5(broker.mqtt_addr(), "pump-7")).await;
        let request = PublishProperties {
            user_properties: vec![("device".into(), "pump-7".into())],
            content_type: Some("application/json".into()),
            response_topic: Some("replies/pump-7".into()),
            correlation_data: Some(Bytes::from_static(b"req-9")),
            ..PublishProperties::default()
        };
        device
            .client
            .publish_with_properties("requests/pump", QoS::AtLeastOnce, false, "{}", request)
            .await
            .expect("publish");
        device.next_ack().await;

        let mut web = open_over_websocket(&broker, "guest", "guest")
            .await
            .expect("opens");
        let mut session = Session::begin(&mut web).await.unwrap();
        let mut receiver = Receiver::attach(&mut session, "dash", "/queues/from-devices")
            .await
            .unwrap();
        let delivery = receiver.recv::<Body<Value>>().await.unwrap();
        let message = delivery.message();
        let application = message
            .application_properties
            .as_ref()
            .expect("application properties");
        assert_eq!(
            application.0.get("device"),
            Some(&SimpleValue::String("pump-7".into()))
        );
        let properties = message.properties.as_ref().expect("properties");
        assert_eq!(
            properties.correlation_id,
            Some(MessageId::String("req-9".into()))
        );
        assert_eq!(
            properties.content_type.as_ref().map(|t| t.as_str()),
            Some("application/json")
        );
        // The response topic arrives as reply-to, in the AMQP 0-9-1 mapping's `/queues/...`
        // form today (RabbitMQ 4 writes an exchange address for MQTT's response topic), so
        // only its presence is asserted.
        assert!(properties.reply_to.is_some());
        receiver.accept(&delivery).await.unwrap();
        receiver.close().await.unwrap();
        session.end().await.unwrap();
        web.close().await.unwrap();
        device.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

/// A raw WebSocket to the web-amqp listener offering `subprotocol`.
async fn raw_websocket(
    broker: &TestBroker,
    subprotocol: &str,
) -> Result<
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
    tokio_tungstenite::tungstenite::Error,
> {
    let mut request = web_url(broker).into_client_request().expect("request");
    request.headers_mut().insert(
        "sec-websocket-protocol",
        HeaderValue::from_str(subprotocol).expect("header"),
    );
    tokio_tungstenite::connect_async(request)
        .await
        .map(|(stream, _)| stream)
}

/// The bytes of the next binary messages until `count` bytes came, or the stream ended.
async fn read_bytes(
    stream: &mut tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    count: usize,
) -> Vec<u8> {
    let mut got = Vec::new();
    while got.len() < count {
        match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
            Ok(Some(Ok(Message::Binary(data)))) => got.extend_from_slice(&data),
            Ok(Some(Ok(Message::Text(text)))) => panic!("AMQP in a text message: {text}"),
            Ok(Some(Ok(_))) => continue,
            Ok(Some(Err(_))) | Ok(None) => break,
            Err(_) => panic!("no answer in time"),
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_logins_headers_and_subprotocols_are_refused() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = broker_with_web_amqp().await;
        // A wrong password fails SASL as on the AMQP port.
        assert!(
            open_over_websocket(&broker, "guest", "wrong")
                .await
                .is_err(),
            "a wrong password is refused"
        );
        // Only subprotocol amqp is spoken here.
        let refused = raw_websocket(&broker, "mqtt").await;
        match refused {
            Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
                assert_eq!(response.status(), 400);
            }
            other => panic!("expected HTTP 400, got {other:?}"),
        }
        // An AMQP 0-9-1 header is answered with the AMQP 1.0 SASL header, then closed (the
        // AMQP 1.0 rule for an unsupported header).
        let mut raw = raw_websocket(&broker, "amqp").await.expect("handshake");
        raw.send(Message::Binary(Bytes::from_static(b"AMQP\x00\x00\x09\x01")))
            .await
            .expect("send header");
        let answer = read_bytes(&mut raw, 8).await;
        assert_eq!(&answer[..8], b"AMQP\x03\x01\x00\x00", "{answer:?}");
        let after = read_bytes(&mut raw, 1).await;
        assert!(after.is_empty(), "closed after the header, got {after:?}");
        // A header split across two messages is read as one stream.
        let mut raw = raw_websocket(&broker, "amqp").await.expect("handshake");
        raw.send(Message::Binary(Bytes::from_static(b"AMQP")))
            .await
            .unwrap();
        raw.send(Message::Binary(Bytes::from_static(b"\x03\x01\x00\x00")))
            .await
            .unwrap();
        let answer = read_bytes(&mut raw, 8).await;
        assert_eq!(&answer[..8], b"AMQP\x03\x01\x00\x00");
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

// One thread, for the fe2o3-amqp 0.14 send race described above (this test sends unsettled).
#[tokio::test(flavor = "current_thread")]
async fn amqp_1_0_application_properties_reach_an_mqtt5_subscriber_as_user_properties() {
    use fe2o3_amqp::types::messaging::{ApplicationProperties, Message as AmqpMessage, Properties};
    use fe2o3_amqp::types::primitives::{Binary, Symbol};
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start().await;
        let mut device =
            mqtt5_common::connect5(mqtt5_common::options5(broker.mqtt_addr(), "pump-8")).await;
        device.subscribe("commands/+", QoS::AtLeastOnce).await;
        let (mut connection, mut session) = amqp10_common::connect(&broker).await;
        let mut sender = Sender::attach(&mut session, "ops", "/exchanges/amq.topic/commands.stop")
            .await
            .unwrap();
        let message = AmqpMessage::builder()
            .properties(
                Properties::builder()
                    .correlation_id(String::from("cmd-3"))
                    .content_type(Symbol::from("text/plain"))
                    .build(),
            )
            .application_properties(
                ApplicationProperties::builder()
                    .insert("site", "north")
                    .insert("attempt", 2i64)
                    .build(),
            )
            .data(Binary::from(b"now".to_vec()))
            .build();
        assert!(matches!(
            sender.send(message).await.unwrap(),
            Outcome::Accepted(_)
        ));
        let command = device.next_publish().await;
        assert_eq!(&command.payload[..], b"now");
        let properties = command.properties.expect("properties");
        let mut user = properties.user_properties.clone();
        user.sort();
        assert_eq!(
            user,
            vec![
                ("attempt".to_string(), "2".to_string()),
                ("site".to_string(), "north".to_string())
            ]
        );
        assert_eq!(properties.content_type.as_deref(), Some("text/plain"));
        assert_eq!(
            properties.correlation_data,
            Some(Bytes::from_static(b"cmd-3"))
        );
        sender.close().await.unwrap();
        session.end().await.unwrap();
        connection.close().await.unwrap();
        device.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}
