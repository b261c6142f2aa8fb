//! The AMQP 0-9-1 close handshake driven by hand over a raw TCP socket. A client may send
//! connection.close while frames it wrote earlier are still in flight (amqplib queues each
//! channel's frames separately): as RabbitMQ's rabbit_reader, the broker answers close-ok,
//! drops whatever follows and keeps the socket open until the client closes it or the
//! closing timeout passes.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_amqp091::codec::{
    write_content, write_method_frame, Method, EMPTY_PROPERTIES, FRAME_HEARTBEAT,
};
use warren_interop_tests::TestBroker;

mod raw_common;

use raw_common::{Raw, REPLY_TIMEOUT};

/// connection.close from the client, with reply code 200.
fn client_close() -> Method {
    Method::ConnectionClose {
        reply_code: 200,
        reply_text: "bye".to_string(),
        class_id: 0,
        method_id: 0,
    }
}

/// `count` basic.publish frames with a small body each, to `queue` on channel 1.
fn publishes(queue: &str, count: usize) -> BytesMut {
    let mut out = BytesMut::new();
    for index in 0..count {
        write_method_frame(
            &mut out,
            1,
            &Method::BasicPublish {
                exchange: "".into(),
                routing_key: queue.to_string(),
                mandatory: false,
                immediate: false,
            },
        )
        .expect("encodes");
        write_content(
            &mut out,
            1,
            60,
            &EMPTY_PROPERTIES,
            format!("late {index}").as_bytes(),
            4096,
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_followed_by_publishes_gets_close_ok_and_the_socket_stays_open() {
    let broker = TestBroker::start().await;
    let mut raw = Raw::open_with_channel(broker.addr()).await;
    raw.publish_and_get("late", b"before the close").await;
    // As amqplib: connection.close overtakes 2,000 publishes written on channel 1.
    let mut out = BytesMut::new();
    write_method_frame(&mut out, 0, &client_close()).expect("encodes");
    out.extend_from_slice(&publishes("late", 2_000));
    raw.send_raw(&out).await;
    assert_eq!(raw.recv_method().await, (0, Method::ConnectionCloseOk));

    // The socket stays open and silent: more writes succeed, nothing comes back.
    raw.send_raw(&publishes("late", 100)).await;
    let mut byte = [0u8; 1];
    let quiet = tokio::time::timeout(Duration::from_millis(500), raw.stream.read(&mut byte)).await;
    assert!(
        quiet.is_err(),
        "the broker neither wrote nor closed after close-ok: {quiet:?}"
    );
    let queue = broker
        .broker()
        .vhost("/")
        .expect("vhost")
        .queue("late")
        .expect("queue");
    assert_eq!(
        queue.stats().published,
        1,
        "publishes after connection.close are dropped"
    );
    assert_eq!(
        broker.broker().connections().count(),
        0,
        "the connection is closed for operators"
    );

    // The client closes its side; the broker closes the socket in turn.
    raw.stream.shutdown().await.expect("half-close");
    raw.expect_eof().await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_the_client_leaves_open_after_close_ok_is_closed_after_the_heartbeat_interval() {
    let broker = TestBroker::start().await;
    let mut raw = Raw::connect(broker.addr()).await;
    // With a 1-second heartbeat the closing timeout is 1 second (rabbit_reader takes the
    // heartbeat interval when it is below the 30-second limit).
    raw.heartbeat = 1;
    raw.handshake("PLAIN", b"\0guest\0guest".to_vec()).await;
    raw.send_method(0, &client_close()).await;
    assert_eq!(raw.recv_method().await, (0, Method::ConnectionCloseOk));
    let closed_ok = Instant::now();
    // No heartbeat follows close-ok: the next thing is the end of the stream.
    raw.expect_eof().await;
    let waited = closed_ok.elapsed();
    assert!(
        waited >= Duration::from_millis(800) && waited < REPLY_TIMEOUT,
        "closed {waited:?} after close-ok"
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_after_a_broker_close_are_ignored_until_close_ok() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let mut raw = Raw::open_with_channel(addr).await;
    raw.send_frame(FRAME_HEARTBEAT, 1, &[]).await;
    let (channel, close) = raw.recv_method().await;
    assert_eq!(channel, 0);
    assert!(
        matches!(
            close,
            Method::ConnectionClose {
                reply_code: 501,
                ..
            }
        ),
        "{close:?}"
    );
    // While closing, the broker discards everything but close / close-ok.
    raw.send_method(
        1,
        &Method::BasicGet {
            queue: "x".to_string(),
            no_ack: true,
        },
    )
    .await;
    raw.send_method(0, &Method::ConnectionCloseOk).await;
    raw.expect_eof().await;
    broker.shutdown().await;
}
