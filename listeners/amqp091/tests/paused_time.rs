//! The AMQP 0-9-1 driver's timers in tokio's paused time: a client drives a whole connection
//! (driver, session, outbox, core) over an in-memory pipe, and time moves only when every task
//! waits, straight to the next timer. Heartbeats and the consumer timeout are pinned to the
//! virtual millisecond they are due, and the tests take no wall-clock time.
//!
//! A pipe rather than a loopback socket: with a socket, tokio's auto-advance moves the clock
//! while the kernel still holds bytes for the other end, so virtual time is not the time the
//! protocol saw.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::sync::watch;
use tokio::time::Instant;
use warren_amqp091::codec::{
    decode_frame, write_content, write_frame, write_method_frame, Frame, Method, EMPTY_PROPERTIES,
    FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, PROTOCOL_HEADER_091,
};
use warren_amqp091::driver::run_tunnel;
use warren_amqp091::{ListenerConfig, SessionConfig};
use warren_core::access::Permissions;
use warren_core::broker::Limits;
use warren_core::value::Table;
use warren_core::websocket::MemoryTunnel;
use warren_core::Broker;

/// A hand-driven AMQP 0-9-1 client on the other end of the pipe.
struct Client {
    stream: DuplexStream,
    buffer: BytesMut,
}

impl Client {
    async fn send(&mut self, channel: u16, method: &Method) {
        let mut out = BytesMut::new();
        write_method_frame(&mut out, channel, method).expect("encodes");
        self.stream.write_all(&out).await.expect("pipe open");
    }

    /// The next frame, or `None` once the broker closed its end.
    async fn frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(frame) = decode_frame(&mut self.buffer, 0).expect("valid frames") {
                return Some(frame);
            }
            if self.stream.read_buf(&mut self.buffer).await.expect("pipe") == 0 {
                return None;
            }
        }
    }

    /// The next frame other than a heartbeat, which must be a method.
    async fn method(&mut self) -> (u16, Method) {
        let mut frame = self.frame().await.expect("a method frame");
        while frame.frame_type == FRAME_HEARTBEAT {
            frame = self.frame().await.expect("a method frame");
        }
        assert_eq!(frame.frame_type, FRAME_METHOD, "{frame:?}");
        let method = Method::decode(&frame.payload).expect("decodes");
        (frame.channel, method)
    }

    /// Declares a non-durable queue on channel 1.
    async fn declare(&mut self, queue: &str) {
        self.send(
            1,
            &Method::QueueDeclare {
                queue: queue.into(),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                no_wait: false,
                arguments: Table::new(),
            },
        )
        .await;
        let (channel, declared) = self.method().await;
        assert_eq!(channel, 1);
        assert!(
            matches!(declared, Method::QueueDeclareOk { .. }),
            "{declared:?}"
        );
    }

    /// The handshake as guest on `/` with the given heartbeat, then channel 1.
    async fn open(&mut self, heartbeat: u16) {
        self.stream
            .write_all(&PROTOCOL_HEADER_091)
            .await
            .expect("pipe");
        assert!(matches!(
            self.method().await,
            (0, Method::ConnectionStart { .. })
        ));
        self.send(
            0,
            &Method::ConnectionStartOk {
                client_properties: Table::new(),
                mechanism: "PLAIN".into(),
                response: b"\0guest\0guest".to_vec(),
                locale: "en_US".into(),
            },
        )
        .await;
        let (_, tune) = self.method().await;
        let Method::ConnectionTune {
            channel_max,
            frame_max,
            ..
        } = tune
        else {
            panic!("expected connection.tune, got {tune:?}");
        };
        self.send(
            0,
            &Method::ConnectionTuneOk {
                channel_max,
                frame_max,
                heartbeat,
            },
        )
        .await;
        self.send(
            0,
            &Method::ConnectionOpen {
                virtual_host: "/".into(),
            },
        )
        .await;
        assert_eq!(self.method().await, (0, Method::ConnectionOpenOk));
        self.send(1, &Method::ChannelOpen).await;
        assert_eq!(self.method().await, (1, Method::ChannelOpenOk));
    }
}

/// A connection served by the driver, with what keeps it running.
struct Connection {
    broker: Arc<Broker>,
    client: Client,
    driver: tokio::task::JoinHandle<()>,
    /// Held for the connection's life: the driver takes a dropped sender as a shutdown.
    _shutdown: watch::Sender<bool>,
}

/// A broker with guest on `/`, and a connection to it served by the driver on `session`.
fn connect(session: SessionConfig) -> Connection {
    let broker = Broker::new(Limits::default());
    broker
        .add_vhost("/")
        .set_permissions("guest", Permissions::full());
    broker.add_user("guest", "guest", vec![]);
    let config = Arc::new(ListenerConfig {
        session,
        handshake_timeout: Duration::from_secs(10),
        close_timeout: Duration::from_secs(3),
        closing_timeout: Duration::from_secs(30),
        connection_max: None,
        tls: None,
        amqp10: None,
    });
    let (server, client) = MemoryTunnel::pair(64 * 1024);
    let (shutdown_tx, shutdown) = watch::channel(false);
    let peer = SocketAddr::from(([127, 0, 0, 1], 40_000));
    let driver = tokio::spawn(run_tunnel(
        Box::new(server),
        peer,
        Arc::clone(&broker),
        config,
        shutdown,
        broker.alarm_watch(),
    ));
    Connection {
        broker,
        client: Client {
            stream: client,
            buffer: BytesMut::new(),
        },
        driver,
        _shutdown: shutdown_tx,
    }
}

/// Ported from the raw-socket interop test of the same name (raw_protocol.rs), which slept
/// through the real two seconds: here each heartbeat and the disconnect are checked at their
/// virtual instant.
#[tokio::test(start_paused = true)]
async fn heartbeats_are_sent_and_a_silent_client_is_disconnected() {
    let Connection {
        mut client,
        driver,
        _shutdown: _running,
        ..
    } = connect(SessionConfig::default());
    client.open(1).await;
    let opened = Instant::now();
    let mut beats = Vec::new();
    while let Some(frame) = client.frame().await {
        assert_eq!(
            frame.frame_type, FRAME_HEARTBEAT,
            "only heartbeats on an idle connection"
        );
        beats.push(opened.elapsed().as_millis());
    }
    let closed = opened.elapsed().as_millis();
    // A heartbeat every half interval the broker has written nothing (0.5 s, 1 s, 1.5 s; one
    // more at 2 s when its writer's timer runs before the reader's in that instant), and the
    // connection closed two intervals after the client was last heard.
    assert!(
        beats[..] == [500, 1000, 1500] || beats[..] == [500, 1000, 1500, 2000],
        "heartbeats at half the interval: {beats:?}"
    );
    assert_eq!(closed, 2000, "closed after two silent intervals");
    driver.await.expect("the driver ends without panicking");
}

/// A client that keeps sending heartbeats is never disconnected, however long it is idle.
#[tokio::test(start_paused = true)]
async fn a_client_that_sends_heartbeats_stays_connected() {
    let Connection {
        broker,
        mut client,
        driver,
        _shutdown: _running,
    } = connect(SessionConfig::default());
    client.open(1).await;
    let mut heartbeat = BytesMut::new();
    write_frame(&mut heartbeat, FRAME_HEARTBEAT, 0, &[]);
    let started = Instant::now();
    for _ in 0..120 {
        tokio::time::sleep(Duration::from_millis(900)).await;
        client.stream.write_all(&heartbeat).await.expect("pipe");
    }
    assert_eq!(started.elapsed(), Duration::from_secs(108));
    assert!(!driver.is_finished(), "still connected after 108 s");
    client.declare("alive").await;
    assert!(broker.vhost("/").expect("vhost").queue("alive").is_some());
}

/// Ported from amqprs_consumer_timeout.rs, which waited through the real timeout: the channel
/// is closed with RabbitMQ's 406 exactly when `consumer_timeout` has passed since the
/// delivery, not before, the message is back in the queue and the connection stays open.
#[tokio::test(start_paused = true)]
async fn an_unacknowledged_delivery_past_the_timeout_closes_the_channel_and_requeues() {
    let session = SessionConfig {
        consumer_timeout: Some(Duration::from_millis(300)),
        ..SessionConfig::default()
    };
    let Connection {
        broker,
        mut client,
        _shutdown: _running,
        ..
    } = connect(session);
    client.open(0).await;
    client.declare("slow").await;
    let mut publish = BytesMut::new();
    write_method_frame(
        &mut publish,
        1,
        &Method::BasicPublish {
            exchange: "".into(),
            routing_key: "slow".into(),
            mandatory: false,
            immediate: false,
        },
    )
    .expect("encodes");
    write_content(&mut publish, 1, 60, &EMPTY_PROPERTIES, b"work", 4096);
    client.stream.write_all(&publish).await.expect("pipe");
    client
        .send(
            1,
            &Method::BasicConsume {
                queue: "slow".into(),
                consumer_tag: "lazy".into(),
                no_local: false,
                no_ack: false,
                exclusive: false,
                no_wait: false,
                arguments: Table::new(),
            },
        )
        .await;
    assert!(matches!(
        client.method().await,
        (1, Method::BasicConsumeOk { .. })
    ));
    assert!(matches!(
        client.method().await,
        (
            1,
            Method::BasicDeliver {
                delivery_tag: 1,
                redelivered: false,
                ..
            }
        )
    ));
    let delivered = Instant::now();
    let header = client.frame().await.expect("content header");
    assert_eq!(header.frame_type, FRAME_HEADER);
    let body = client.frame().await.expect("body");
    assert_eq!(
        (body.frame_type, &body.payload[..]),
        (FRAME_BODY, &b"work"[..])
    );
    let queue = broker
        .vhost("/")
        .expect("vhost")
        .queue("slow")
        .expect("queue");
    assert_eq!(queue.message_count(), 0, "the delivery is outstanding");

    let (channel, close) = client.method().await;
    let waited = delivered.elapsed();
    assert_eq!(channel, 1);
    assert_eq!(
        close,
        Method::ChannelClose {
            reply_code: 406,
            reply_text: "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. \
                         Timeout value used: 300 ms. This timeout value can be configured, see \
                         consumers doc guide to learn more"
                .into(),
            class_id: 0,
            method_id: 0,
        }
    );
    assert_eq!(
        waited,
        Duration::from_millis(300),
        "closed when the timeout ran out"
    );
    assert_eq!(queue.message_count(), 1, "the message is requeued");
    client.send(1, &Method::ChannelCloseOk).await;
    // The connection itself stays open: a new channel works.
    client.send(2, &Method::ChannelOpen).await;
    assert_eq!(client.method().await, (2, Method::ChannelOpenOk));
}
