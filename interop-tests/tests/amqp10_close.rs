//! The AMQP 1.0 close handshake over a raw socket: frames the client wrote after its close
//! are dropped, the broker answers with its close and keeps the socket open until the
//! client closes it (rabbit_amqp_reader's `closed` state), so a client still flushing its
//! writes does not fail on a reset socket.

use std::time::Duration;

use bytes::BytesMut;
use fe2o3_amqp::types::performatives::{
    Begin, ChannelMax, Close, MaxFrameSize, Open, Performative,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_amqp10::codec::{decode_frame, encode_amqp_frame, FrameBody};
use warren_interop_tests::TestBroker;

/// How long any one answer may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// Reads the next performative from the broker; `None` at the end of the stream.
async fn next_performative(stream: &mut TcpStream, buffer: &mut BytesMut) -> Option<Performative> {
    loop {
        if let Some(frame) = decode_frame(buffer, u32::MAX).expect("broker frames decode") {
            match frame.body {
                FrameBody::Amqp { performative, .. } => return Some(performative),
                // Heartbeats.
                _ => continue,
            }
        }
        let read = tokio::time::timeout(REPLY_TIMEOUT, stream.read_buf(buffer))
            .await
            .expect("the broker answers in time")
            .expect("read");
        if read == 0 {
            assert!(buffer.is_empty(), "stream ended mid-frame");
            return None;
        }
    }
}

fn open() -> Performative {
    Performative::Open(Open {
        container_id: "raw-close".into(),
        hostname: None,
        max_frame_size: MaxFrameSize(65_536),
        channel_max: ChannelMax(255),
        idle_time_out: None,
        outgoing_locales: None,
        incoming_locales: None,
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    })
}

fn begin() -> Performative {
    Performative::Begin(Begin {
        remote_channel: None,
        next_outgoing_id: 0,
        incoming_window: 100,
        outgoing_window: 100,
        handle_max: Default::default(),
        offered_capabilities: None,
        desired_capabilities: None,
        properties: None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_after_the_clients_close_are_dropped_and_the_socket_stays_open() {
    let broker = TestBroker::start_with(&[("anonymous_login_user", "guest")]).await;
    let mut stream = TcpStream::connect(broker.addr()).await.expect("connects");
    stream
        .write_all(b"AMQP\x00\x01\x00\x00")
        .await
        .expect("header");
    let mut header = [0u8; 8];
    stream.read_exact(&mut header).await.expect("header back");
    assert_eq!(&header, b"AMQP\x00\x01\x00\x00");
    let mut out = BytesMut::new();
    encode_amqp_frame(&mut out, 0, &open(), &[]);
    stream.write_all(&out).await.expect("open");
    let mut buffer = BytesMut::new();
    assert!(matches!(
        next_performative(&mut stream, &mut buffer).await,
        Some(Performative::Open(_))
    ));

    // A close overtaking 100 session begins the client wrote earlier.
    let mut out = BytesMut::new();
    encode_amqp_frame(
        &mut out,
        0,
        &Performative::Close(Close { error: None }),
        &[],
    );
    for channel in 1..=100 {
        encode_amqp_frame(&mut out, channel, &begin(), &[]);
    }
    stream.write_all(&out).await.expect("close and begins");
    match next_performative(&mut stream, &mut buffer).await {
        Some(Performative::Close(Close { error: None })) => {}
        other => panic!("expected a close without error, got {other:?}"),
    }
    // Nothing more comes, and the socket stays open: later writes succeed.
    stream
        .write_all(&out)
        .await
        .expect("the socket is still open");
    let mut byte = [0u8; 1];
    let quiet = tokio::time::timeout(Duration::from_millis(500), stream.read(&mut byte)).await;
    assert!(
        quiet.is_err(),
        "the broker neither wrote nor closed: {quiet:?}"
    );
    assert_eq!(broker.broker().connections().count(), 0);

    // The client closes its side; the broker follows.
    stream.shutdown().await.expect("half-close");
    assert!(next_performative(&mut stream, &mut buffer).await.is_none());
    broker.shutdown().await;
}
