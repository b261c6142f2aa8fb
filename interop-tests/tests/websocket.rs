//! MQTT and STOMP over WebSocket: rumqttc (3.1.1 and 5, `websocket` feature) and a STOMP
//! client over tokio-tungstenite reach the same exchanges as the TCP listeners, through the
//! same codecs; a wrong path or subprotocol is refused in the handshake.
//!
//! Every test uses its own broker on 127.0.0.1 port 0 and is bounded in time.

mod mqtt5_common;
mod mqtt_common;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;
use warren_interop_tests::TestBroker;

/// A bound on each whole test.
const TEST_LIMIT: Duration = Duration::from_secs(60);

async fn broker_with_websockets() -> TestBroker {
    TestBroker::start_with(&[
        ("web_mqtt.tcp.ip", "127.0.0.1"),
        ("web_mqtt.tcp.port", "0"),
        ("web_stomp.tcp.ip", "127.0.0.1"),
        ("web_stomp.tcp.port", "0"),
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_clients_over_websocket_meet_tcp_clients() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = broker_with_websockets().await;
        let web = broker.server().web_mqtt_addr().expect("Web-MQTT listener");
        let url = format!("ws://{web}/ws");

        // MQTT 3.1.1 over WebSocket.
        let mut options = rumqttc::MqttOptions::new("web-311", &url, web.port());
        options.set_transport(rumqttc::Transport::Ws);
        options.set_credentials("guest", "guest");
        let mut web_311 = mqtt_common::connect(options).await;
        web_311.subscribe("dash/+", rumqttc::QoS::AtLeastOnce).await;

        // MQTT 5 over WebSocket.
        let mut options = rumqttc::v5::MqttOptions::new("web-5", &url, web.port());
        options.set_transport(rumqttc::Transport::Ws);
        options.set_credentials("guest", "guest");
        let mut web_5 = mqtt5_common::connect5(options).await;
        web_5
            .subscribe("dash/+", rumqttc::v5::mqttbytes::QoS::AtLeastOnce)
            .await;

        // A device on plain TCP publishes; both browsers get it.
        let mut device =
            mqtt_common::connect(mqtt_common::options(broker.mqtt_addr(), "device")).await;
        device
            .publish("dash/temp", rumqttc::QoS::AtLeastOnce, b"21")
            .await;
        assert_eq!(&web_311.next_publish().await.payload[..], b"21");
        assert_eq!(&web_5.next_publish().await.payload[..], b"21");
        // And a WebSocket client publishes to the TCP one.
        device.subscribe("cmd/#", rumqttc::QoS::AtLeastOnce).await;
        web_5
            .publish("cmd/fan", rumqttc::v5::mqttbytes::QoS::AtLeastOnce, b"on")
            .await;
        assert_eq!(&device.next_publish().await.payload[..], b"on");
        web_311.disconnect().await;
        web_5.disconnect().await;
        device.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

/// A STOMP frame as text.
fn frame(command: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut text = format!("{command}\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}:{value}\n"));
    }
    text.push('\n');
    text.push_str(body);
    text.push('\0');
    text
}

/// A STOMP connection over a WebSocket: frames out as text messages, frames in from
/// whatever messages they arrive in.
struct StompSocket {
    socket: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    received: String,
}

impl StompSocket {
    async fn send(&mut self, frame: String) {
        self.socket.send(Message::text(frame)).await.expect("send");
    }

    /// Sends a frame in binary messages, split after `split` bytes.
    async fn send_binary(&mut self, frame: String, split: usize) {
        let (head, tail) = frame.as_bytes().split_at(split);
        for part in [head, tail] {
            self.socket
                .send(Message::binary(part.to_vec()))
                .await
                .expect("send");
        }
    }

    /// The next frame, without its heart-beat newlines.
    async fn next_frame(&mut self) -> String {
        loop {
            if let Some(end) = self.received.find('\0') {
                let frame: String = self.received.drain(..=end).collect();
                return frame.trim_start_matches('\n').to_string();
            }
            let message = tokio::time::timeout(Duration::from_secs(5), self.socket.next())
                .await
                .expect("a frame in time")
                .expect("a message")
                .expect("no error");
            match message {
                Message::Text(text) => self.received.push_str(text.as_str()),
                Message::Binary(bytes) => self.received.push_str(&String::from_utf8_lossy(&bytes)),
                _ => {}
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_over_websocket_in_text_and_binary_messages() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = broker_with_websockets().await;
        let web = broker
            .server()
            .web_stomp_addr()
            .expect("Web-STOMP listener");
        let mut request = format!("ws://{web}/ws")
            .into_client_request()
            .expect("request");
        request.headers_mut().insert(
            "sec-websocket-protocol",
            HeaderValue::from_static("v12.stomp, v11.stomp"),
        );
        let (socket, response) = tokio_tungstenite::connect_async(request)
            .await
            .expect("WebSocket handshake");
        assert_eq!(
            response
                .headers()
                .get("sec-websocket-protocol")
                .map(|v| v.to_str().unwrap()),
            Some("v12.stomp")
        );
        let connect = frame(
            "CONNECT",
            &[
                ("accept-version", "1.2"),
                ("host", "/"),
                ("login", "guest"),
                ("passcode", "guest"),
            ],
            "",
        );
        let mut stomp = StompSocket {
            socket,
            received: String::new(),
        };
        stomp.send(connect).await;
        let connected = stomp.next_frame().await;
        assert!(connected.starts_with("CONNECTED\n"), "{connected}");
        assert!(connected.contains("version:1.2"), "{connected}");

        // An MQTT device publishes; the browser's STOMP subscription to /topic/ gets it.
        let subscribe = frame(
            "SUBSCRIBE",
            &[
                ("id", "0"),
                ("destination", "/topic/dash.temp"),
                ("receipt", "r1"),
            ],
            "",
        );
        stomp.send(subscribe).await;
        let receipt = stomp.next_frame().await;
        assert!(receipt.starts_with("RECEIPT\n"), "{receipt}");
        let mut device =
            mqtt_common::connect(mqtt_common::options(broker.mqtt_addr(), "device")).await;
        device
            .publish("dash/temp", rumqttc::QoS::AtMostOnce, b"22.5")
            .await;
        let message = stomp.next_frame().await;
        assert!(message.starts_with("MESSAGE\n"), "{message}");
        assert!(message.ends_with("\n22.5\0"), "{message:?}");

        // The browser answers in binary messages, one frame split across two.
        device.subscribe("cmd/#", rumqttc::QoS::AtLeastOnce).await;
        let send = frame(
            "SEND",
            &[("destination", "/topic/cmd.fan"), ("receipt", "r2")],
            "off",
        );
        stomp.send_binary(send, 10).await;
        let receipt = stomp.next_frame().await;
        assert!(receipt.starts_with("RECEIPT\n"), "{receipt}");
        let command = device.next_publish().await;
        assert_eq!(command.topic, "cmd/fan");
        assert_eq!(&command.payload[..], b"off");
        device.disconnect().await;
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_checks_path_and_subprotocol() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = broker_with_websockets().await;
        let web = broker.server().web_mqtt_addr().expect("Web-MQTT listener");
        let wrong_path = tokio_tungstenite::connect_async(format!("ws://{web}/mqtt")).await;
        assert!(wrong_path.is_err(), "a path other than /ws is refused");
        let mut request = format!("ws://{web}/ws")
            .into_client_request()
            .expect("request");
        request.headers_mut().insert(
            "sec-websocket-protocol",
            HeaderValue::from_static("v12.stomp"),
        );
        assert!(
            tokio_tungstenite::connect_async(request).await.is_err(),
            "Web-MQTT does not speak STOMP"
        );
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

/// Sends a STOMP CONNECT over plain TCP and returns the first frame's command line.
async fn stomp_connect_over_tcp(addr: std::net::SocketAddr) -> (tokio::net::TcpStream, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    let connect = frame(
        "CONNECT",
        &[
            ("accept-version", "1.2"),
            ("host", "/"),
            ("login", "guest"),
            ("passcode", "guest"),
        ],
        "",
    );
    socket.write_all(connect.as_bytes()).await.expect("write");
    let mut reply = Vec::new();
    let mut chunk = [0u8; 1024];
    while !reply.contains(&0) {
        let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut chunk))
            .await
            .expect("a reply in time")
            .expect("read");
        if read == 0 {
            break;
        }
        reply.extend_from_slice(&chunk[..read]);
    }
    let text = String::from_utf8_lossy(&reply).into_owned();
    (socket, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_max_connections_is_answered_with_an_error_frame() {
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = TestBroker::start_with(&[
            ("stomp.max_connections", "1"),
            ("web_stomp.tcp.ip", "127.0.0.1"),
            ("web_stomp.tcp.port", "0"),
        ])
        .await;
        let addr = broker.server().stomp_addr().expect("STOMP listener");
        let (_first, reply) = stomp_connect_over_tcp(addr).await;
        assert!(reply.starts_with("CONNECTED\n"), "{reply}");
        let (_second, reply) = stomp_connect_over_tcp(addr).await;
        assert!(reply.starts_with("ERROR\n"), "{reply}");
        assert!(reply.contains("stomp.max_connections"), "{reply}");
        // The count covers Web-STOMP too.
        let web = broker
            .server()
            .web_stomp_addr()
            .expect("Web-STOMP listener");
        let (socket, _) = tokio_tungstenite::connect_async(format!("ws://{web}/ws"))
            .await
            .expect("WebSocket handshake");
        let mut stomp = StompSocket {
            socket,
            received: String::new(),
        };
        stomp
            .send(frame(
                "CONNECT",
                &[("accept-version", "1.2"), ("host", "/")],
                "",
            ))
            .await;
        let reply = stomp.next_frame().await;
        assert!(reply.starts_with("ERROR\n"), "{reply}");
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_logs_each_websocket_listener_and_serves_it_at_ws() {
    // Building the binary (once per test run) is not part of the bound.
    tokio::task::spawn_blocking(warren_interop_tests::process::warren_binary)
        .await
        .expect("build task");
    tokio::time::timeout(TEST_LIMIT, async {
        let dir = warren_interop_tests::TempDir::new("websocket-log");
        let path = dir.path().to_path_buf();
        let warren = tokio::task::spawn_blocking(move || {
            warren_interop_tests::process::WarrenProcess::start(
                &path,
                &[
                    "web_mqtt.tcp.ip=127.0.0.1",
                    "web_mqtt.tcp.port=0",
                    "web_stomp.tcp.ip=127.0.0.1",
                    "web_stomp.tcp.port=0",
                    "web_amqp.tcp.ip=127.0.0.1",
                    "web_amqp.tcp.port=0",
                ],
            )
        })
        .await
        .expect("start task");
        // `listening protocol=web-mqtt|web-stomp|web-amqp addr=...`, each taking its
        // subprotocol at /ws.
        for (protocol, subprotocol) in [
            ("web-mqtt", "mqtt"),
            ("web-stomp", "v12.stomp"),
            ("web-amqp", "amqp"),
        ] {
            let addr = warren.listener_addr(protocol);
            let mut request = format!("ws://{addr}/ws")
                .into_client_request()
                .expect("request");
            request.headers_mut().insert(
                "sec-websocket-protocol",
                HeaderValue::from_static(subprotocol),
            );
            let (mut socket, response) = tokio_tungstenite::connect_async(request)
                .await
                .unwrap_or_else(|e| panic!("{protocol} handshake: {e}"));
            assert_eq!(
                response
                    .headers()
                    .get("sec-websocket-protocol")
                    .map(|v| v.to_str().unwrap()),
                Some(subprotocol),
                "{protocol}"
            );
            let _ = socket.close(None).await;
        }
        assert!(warren.terminate().success());
    })
    .await
    .expect("test in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn web_mqtt_applies_the_tcp_listeners_login_and_permission_rules() {
    use rumqttc::v5::mqttbytes::v5::{ConnectReturnCode, SubscribeReasonCode};
    use rumqttc::v5::{ConnectionError, StateError};
    tokio::time::timeout(TEST_LIMIT, async {
        let broker = broker_with_websockets().await;
        broker.add_topic_user("bob", "bobpw", ".*", "^bob\\.");
        let web = broker.server().web_mqtt_addr().expect("Web-MQTT listener");
        let url = format!("ws://{web}/ws");
        let web_options = |client_id: &str, user: &str, password: &str| {
            let mut options = rumqttc::v5::MqttOptions::new(client_id, &url, web.port());
            options.set_transport(rumqttc::Transport::Ws);
            options.set_credentials(user, password);
            options
        };
        // A wrong password: CONNACK 0x86, as on the TCP listener.
        match mqtt5_common::try_connect5(web_options("web-bad", "bob", "wrong")).await {
            Err(ConnectionError::ConnectionRefused(code)) => {
                assert_eq!(code, ConnectReturnCode::BadUserNamePassword)
            }
            Err(other) => panic!("expected CONNACK 0x86, got {other:?}"),
            Ok(_) => panic!("a wrong password was accepted"),
        }
        // A topic permission refusing the filter: SUBACK 0x87 (rumqttc then ends its loop).
        let bob = mqtt5_common::connect5(web_options("web-bob", "bob", "bobpw")).await;
        bob.client
            .subscribe("alice/inbox", rumqttc::v5::mqttbytes::QoS::AtLeastOnce)
            .await
            .expect("subscribe");
        match tokio::time::timeout(Duration::from_secs(5), bob.ended)
            .await
            .expect("SUBACK in time")
            .expect("event loop task")
        {
            ConnectionError::MqttState(StateError::SubFail { reason }) => {
                assert_eq!(reason, SubscribeReasonCode::NotAuthorized)
            }
            other => panic!("expected a refused SUBACK, got {other:?}"),
        }
        broker.shutdown().await;
    })
    .await
    .expect("test in time");
}
