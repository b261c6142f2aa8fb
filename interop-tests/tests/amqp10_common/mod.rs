//! Helpers shared by the AMQP 1.0 tests (a subdirectory module, so cargo does not build it as
//! a test of its own): topology declared through the core, as definitions would, and
//! fe2o3-amqp connections.

#![allow(dead_code)]

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::{Connection, Session};
use warren_core::exchange::DestinationName;
use warren_core::value::Table;
use warren_core::vhost::{Actor, ExchangeDeclare, QueueDeclare, BROKER_CONNECTION};
use warren_interop_tests::TestBroker;

const ACTOR: Actor<'static> = Actor {
    user: "guest",
    connection_id: BROKER_CONNECTION,
};

/// Declares a durable queue in the default vhost with `arguments`.
pub fn declare_queue_with(broker: &TestBroker, name: &str, arguments: Table) {
    let vhost = broker.broker().vhost("/").expect("default vhost");
    vhost
        .declare_queue(
            ACTOR,
            QueueDeclare {
                name: name.to_string(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments,
            },
        )
        .expect("queue declared");
}

/// Declares a durable queue in the default vhost.
pub fn declare_queue(broker: &TestBroker, name: &str) {
    declare_queue_with(broker, name, Table::new());
}

/// Declares an exchange of `kind` in the default vhost.
pub fn declare_exchange(broker: &TestBroker, name: &str, kind: &str) {
    let vhost = broker.broker().vhost("/").expect("default vhost");
    vhost
        .declare_exchange(
            ACTOR,
            ExchangeDeclare {
                name: name.to_string(),
                kind: kind.to_string(),
                passive: false,
                durable: true,
                auto_delete: false,
                internal: false,
                arguments: Table::new(),
            },
        )
        .expect("exchange declared");
}

/// Binds `queue` to `exchange` with `key`.
pub fn bind(broker: &TestBroker, exchange: &str, queue: &str, key: &str) {
    let vhost = broker.broker().vhost("/").expect("default vhost");
    vhost
        .bind(
            ACTOR,
            exchange,
            DestinationName::Queue(queue.to_string()),
            key,
            Table::new(),
        )
        .expect("bound");
}

/// Ready messages in `queue`.
pub fn ready(broker: &TestBroker, queue: &str) -> u64 {
    broker
        .broker()
        .vhost("/")
        .and_then(|vhost| vhost.queue(queue))
        .map(|queue| queue.message_count())
        .unwrap_or(0)
}

/// Unsettled deliveries of `queue`.
pub fn unacked(broker: &TestBroker, queue: &str) -> u64 {
    broker
        .broker()
        .vhost("/")
        .and_then(|vhost| vhost.queue(queue))
        .map(|queue| queue.stats().unacknowledged)
        .unwrap_or(0)
}

/// `amqp://guest:guest@127.0.0.1:PORT`, the URL an AMQP 1.0 client connects with.
pub fn url(broker: &TestBroker) -> String {
    format!("amqp://guest:guest@{}", broker.addr())
}

/// Opens a connection (SASL PLAIN as guest) and one session.
pub async fn connect(broker: &TestBroker) -> (ConnectionHandle<()>, SessionHandle<()>) {
    let mut connection = Connection::open("warren-test", url(broker).as_str())
        .await
        .expect("AMQP 1.0 connection opens");
    let session = Session::begin(&mut connection)
        .await
        .expect("session begins");
    (connection, session)
}

/// A hand-driven AMQP 1.0 client for malformed input: SASL PLAIN as guest, then raw frames.
pub struct RawClient {
    stream: tokio::net::TcpStream,
    buffer: bytes::BytesMut,
}

impl RawClient {
    /// Connects, logs in with SASL PLAIN and sends the AMQP header.
    pub async fn connect(broker: &TestBroker) -> RawClient {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(broker.addr()).await.unwrap();
        stream.write_all(b"AMQP\x03\x01\x00\x00").await.unwrap();
        let mut header = [0u8; 8];
        stream.read_exact(&mut header).await.unwrap();
        assert_eq!(&header, b"AMQP\x03\x01\x00\x00");
        read_raw_frame(&mut stream).await; // sasl-mechanisms
        let mut init = bytes::BytesMut::new();
        warren_amqp10::codec::encode_sasl_frame(
            &mut init,
            &fe2o3_amqp::types::sasl::SaslInit {
                mechanism: "PLAIN".into(),
                initial_response: Some(b"\0guest\0guest".to_vec().into()),
                hostname: None,
            },
        );
        stream.write_all(&init).await.unwrap();
        let outcome = read_raw_frame(&mut stream).await;
        // sasl-outcome: descriptor 0x44, then a list whose first field is the code (ok = 0).
        assert!(
            outcome.windows(3).any(|w| w == [0x53, 0x44, 0xc0]),
            "{outcome:?}"
        );
        stream.write_all(b"AMQP\x00\x01\x00\x00").await.unwrap();
        stream.read_exact(&mut header).await.unwrap();
        assert_eq!(&header, b"AMQP\x00\x01\x00\x00");
        RawClient {
            stream,
            buffer: bytes::BytesMut::new(),
        }
    }

    /// Sends an open with `hostname` and returns the broker's open.
    pub async fn open(&mut self, hostname: Option<&str>) -> fe2o3_amqp::types::performatives::Open {
        use fe2o3_amqp::types::performatives::{ChannelMax, MaxFrameSize, Open, Performative};
        let open = Open {
            container_id: "raw".into(),
            hostname: hostname.map(str::to_string),
            max_frame_size: MaxFrameSize(65536),
            channel_max: ChannelMax(100),
            idle_time_out: None,
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        self.send(0, Performative::Open(open)).await;
        match self.next().await {
            Some(Performative::Open(open)) => open,
            other => panic!("expected open, got {other:?}"),
        }
    }

    /// Sends one performative on `channel`.
    pub async fn send(
        &mut self,
        channel: u16,
        performative: fe2o3_amqp::types::performatives::Performative,
    ) {
        let mut out = bytes::BytesMut::new();
        warren_amqp10::codec::encode_amqp_frame(&mut out, channel, &performative, &[]);
        self.send_raw(&out).await;
    }

    /// Sends bytes as they are.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        use tokio::io::AsyncWriteExt;
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next performative from the broker (heartbeats skipped); `None` once the broker
    /// closed the socket.
    pub async fn next(&mut self) -> Option<fe2o3_amqp::types::performatives::Performative> {
        use tokio::io::AsyncReadExt;
        use warren_amqp10::codec::{decode_frame, FrameBody};
        loop {
            match decode_frame(&mut self.buffer, 1 << 20).expect("broker frames decode") {
                Some(frame) => match frame.body {
                    FrameBody::Amqp { performative, .. } => return Some(performative),
                    _ => continue,
                },
                None => {
                    let read = tokio::time::timeout(
                        std::time::Duration::from_secs(10),
                        self.stream.read_buf(&mut self.buffer),
                    )
                    .await
                    .expect("broker answers within 10 s");
                    if read.unwrap_or(0) == 0 {
                        return None;
                    }
                }
            }
        }
    }
}

async fn read_raw_frame(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await.unwrap();
    let mut rest = vec![0u8; u32::from_be_bytes(size) as usize - 4];
    stream.read_exact(&mut rest).await.unwrap();
    rest
}
