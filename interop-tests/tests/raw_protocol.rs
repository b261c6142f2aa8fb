//! The wire protocol driven by hand over a raw TCP socket: protocol header negotiation,
//! malformed frames and methods, and the close handshake. Every misbehaving client must be
//! answered with the right connection.close and must not harm any other connection.

use bytes::{BufMut, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_amqp091::codec::{
    decode_frame, write_content, write_frame, write_method_frame, write_table, Method,
    EMPTY_PROPERTIES, FRAME_BODY, FRAME_END, FRAME_HEARTBEAT, FRAME_METHOD, PROTOCOL_HEADER_091,
};
use warren_core::value::{Table, Value};
use warren_interop_tests::TestBroker;

mod raw_common;

use raw_common::{bystander, method_payload, still_healthy, Raw, REPLY_TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_protocol_version_is_answered_with_the_091_header() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    for header in [&b"AMQP\x00\x00\x09\x02"[..], b"AMQP\x01\x01\x08\x00"] {
        let mut raw = Raw::connect(addr).await;
        raw.send_raw(header).await;
        let mut answer = [0u8; 8];
        tokio::time::timeout(REPLY_TIMEOUT, raw.stream.read_exact(&mut answer))
            .await
            .expect("answered in time")
            .expect("8 bytes");
        assert_eq!(answer, PROTOCOL_HEADER_091);
        raw.expect_eof().await;
    }
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_amqp_header_is_answered_with_a_protocol_header_then_closed() {
    // RabbitMQ 4.x answers a non-AMQP header with its preferred protocol, AMQP 1.0 SASL
    // ("AMQP\x03\x01\x00\x00"); Warren speaks only 0-9-1, so it offers that instead.
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    let mut raw = Raw::connect(addr).await;
    raw.send_raw(b"HTTP/1.1").await;
    let mut answer = [0u8; 8];
    tokio::time::timeout(REPLY_TIMEOUT, raw.stream.read_exact(&mut answer))
        .await
        .expect("answered in time")
        .expect("8 bytes");
    assert_eq!(answer, PROTOCOL_HEADER_091);
    raw.expect_eof().await;
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_start_advertises_rabbitmq_capabilities() {
    let broker = TestBroker::start().await;
    let mut raw = Raw::connect(broker.addr()).await;
    let start = raw.handshake("PLAIN", b"\0guest\0guest".to_vec()).await;
    let Method::ConnectionStart {
        version_major,
        version_minor,
        server_properties,
        mechanisms,
        locales,
    } = start
    else {
        unreachable!("handshake checked connection.start");
    };
    assert_eq!((version_major, version_minor), (0, 9));
    let mechanisms = String::from_utf8(mechanisms).expect("utf-8");
    let mechanisms: Vec<&str> = mechanisms.split(' ').collect();
    assert!(mechanisms.contains(&"PLAIN"), "{mechanisms:?}");
    assert!(mechanisms.contains(&"AMQPLAIN"), "{mechanisms:?}");
    assert_eq!(locales, b"en_US");
    for key in ["product", "version", "platform", "copyright", "information"] {
        assert!(
            server_properties.get(key).and_then(Value::as_str).is_some(),
            "server property {key} is a string"
        );
    }
    let Some(Value::Table(capabilities)) = server_properties.get("capabilities") else {
        panic!("capabilities table missing: {server_properties:?}");
    };
    for capability in [
        "publisher_confirms",
        "exchange_exchange_bindings",
        "basic.nack",
        "consumer_cancel_notify",
        "connection.blocked",
        "per_consumer_qos",
        "authentication_failure_close",
        "consumer_priorities",
        "direct_reply_to",
    ] {
        assert_eq!(
            capabilities.get(capability),
            Some(&Value::Bool(true)),
            "capability {capability}"
        );
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqplain_login_works() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let mut table = Table::new();
    table.insert("LOGIN", Value::string("guest"));
    table.insert("PASSWORD", Value::string("guest"));
    let mut encoded = BytesMut::new();
    write_table(&mut encoded, &table).expect("encodes");
    // AMQPLAIN's response is the table without its length prefix.
    let response = encoded[4..].to_vec();
    let mut raw = Raw::connect(addr).await;
    raw.handshake("AMQPLAIN", response).await;
    raw.send_method(1, &Method::ChannelOpen).await;
    assert_eq!(raw.recv_method().await, (1, Method::ChannelOpenOk));
    raw.publish_and_get("amqplain", b"via AMQPLAIN").await;

    // A wrong AMQPLAIN password is refused with 403, like PLAIN.
    let mut table = Table::new();
    table.insert("LOGIN", Value::string("guest"));
    table.insert("PASSWORD", Value::string("nope"));
    let mut encoded = BytesMut::new();
    write_table(&mut encoded, &table).expect("encodes");
    let mut raw = Raw::connect(addr).await;
    raw.send_raw(&PROTOCOL_HEADER_091).await;
    let _start = raw.recv_method().await;
    raw.send_method(
        0,
        &Method::ConnectionStartOk {
            client_properties: Table::new(),
            mechanism: "AMQPLAIN".to_string(),
            response: encoded[4..].to_vec(),
            locale: "en_US".to_string(),
        },
    )
    .await;
    let (channel, close) = raw.recv_method().await;
    assert_eq!(channel, 0);
    assert!(
        matches!(&close, Method::ConnectionClose { reply_code: 403, reply_text, .. }
            if reply_text == "ACCESS_REFUSED - Login was refused using authentication mechanism AMQPLAIN. For details see the broker logfile."),
        "{close:?}"
    );
    // Before tuning there is no close handshake: the broker just closes the socket.
    raw.expect_eof().await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frame_end_octet_is_a_frame_error() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    let mut raw = Raw::open(addr).await;
    let mut out = BytesMut::new();
    write_method_frame(&mut out, 1, &Method::ChannelOpen).expect("encodes");
    let last = out.len() - 1;
    assert_eq!(out[last], FRAME_END);
    out[last] = 0xAB;
    raw.send_raw(&out).await;
    let (code, text, _, _) = raw.expect_connection_close().await;
    assert_eq!(code, 501, "{text}");
    assert!(text.starts_with("FRAME_ERROR - "), "{text}");
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frame_larger_than_frame_max_is_a_frame_error() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    let mut raw = Raw::open_with_channel(addr).await;
    // frame_max is 131072; a payload of frame_max octets is tolerated (RabbitMQ's fudge),
    // one more is not. Only the header is needed for the broker to refuse it.
    let mut out = BytesMut::new();
    out.put_u8(FRAME_BODY);
    out.put_u16(1);
    out.put_u32(131_073);
    out.put_slice(&[0u8; 1024]);
    raw.send_raw(&out).await;
    let (code, text, _, _) = raw.expect_connection_close().await;
    assert_eq!(code, 501, "{text}");
    assert!(text.starts_with("FRAME_ERROR - "), "{text}");
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_class_and_method_is_not_implemented() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    let mut raw = Raw::open_with_channel(addr).await;
    raw.send_frame(FRAME_METHOD, 1, &[0, 99, 0, 7]).await;
    let (code, text, class_id, method_id) = raw.expect_connection_close().await;
    assert_eq!(code, 540, "{text}");
    assert!(text.starts_with("NOT_IMPLEMENTED - "), "{text}");
    assert_eq!((class_id, method_id), (99, 7));
    // An unknown method of a known class too.
    let mut raw = Raw::open_with_channel(addr).await;
    raw.send_frame(FRAME_METHOD, 1, &[0, 50, 0, 99]).await;
    let (code, text, _, _) = raw.expect_connection_close().await;
    assert_eq!(code, 540, "{text}");
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_method_is_a_syntax_error() {
    // Warren answers 502 SYNTAX_ERROR; RabbitMQ 4.x sends 501 FRAME_ERROR "cannot decode"
    // for undecodable method fields. Both close the connection.
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    let mut raw = Raw::open_with_channel(addr).await;
    let payload = method_payload(&Method::QueueDeclare {
        queue: "truncated".to_string(),
        passive: false,
        durable: false,
        exclusive: false,
        auto_delete: false,
        no_wait: false,
        arguments: Table::new(),
    });
    // Cut inside the queue name.
    raw.send_frame(FRAME_METHOD, 1, &payload[..10]).await;
    let (code, text, class_id, method_id) = raw.expect_connection_close().await;
    assert_eq!(code, 502, "{text}");
    assert!(text.starts_with("SYNTAX_ERROR - "), "{text}");
    assert_eq!((class_id, method_id), (50, 10));
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_header_without_publish_is_unexpected() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    let mut raw = Raw::open_with_channel(addr).await;
    let mut out = BytesMut::new();
    write_content(&mut out, 1, 60, &EMPTY_PROPERTIES, b"orphan", 4096);
    raw.send_raw(&out).await;
    let (code, text, _, _) = raw.expect_connection_close().await;
    assert_eq!(code, 505, "{text}");
    assert_eq!(
        text,
        "UNEXPECTED_FRAME - expected method frame, got non method frame instead"
    );
    // A body frame where a content header is expected is unexpected too.
    let mut raw = Raw::open_with_channel(addr).await;
    let mut out = BytesMut::new();
    write_method_frame(
        &mut out,
        1,
        &Method::BasicPublish {
            exchange: "".into(),
            routing_key: "x".to_string(),
            mandatory: false,
            immediate: false,
        },
    )
    .expect("encodes");
    write_frame(&mut out, FRAME_BODY, 1, b"no header");
    raw.send_raw(&out).await;
    let (code, text, _, _) = raw.expect_connection_close().await;
    assert_eq!(code, 505, "{text}");
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn method_on_a_channel_never_opened_is_a_channel_error() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    let mut raw = Raw::open_with_channel(addr).await;
    raw.send_method(
        5,
        &Method::QueueDeclare {
            queue: "nowhere".to_string(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: Table::new(),
        },
    )
    .await;
    let (code, text, _, _) = raw.expect_connection_close().await;
    assert_eq!(code, 504, "{text}");
    assert!(text.starts_with("CHANNEL_ERROR - "), "{text}");
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_channel_open_is_a_channel_error() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    let mut raw = Raw::open_with_channel(addr).await;
    raw.send_method(1, &Method::ChannelOpen).await;
    let (code, text, class_id, method_id) = raw.expect_connection_close().await;
    assert_eq!(code, 504, "{text}");
    assert_eq!(text, "CHANNEL_ERROR - second 'channel.open' seen");
    assert_eq!((class_id, method_id), (20, 10));
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_on_a_nonzero_channel_is_a_frame_error() {
    // The spec asks for 501 FRAME_ERROR (section 4.2.7); RabbitMQ 4.x answers
    // 505 UNEXPECTED_FRAME. Both close the connection.
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    let mut raw = Raw::open_with_channel(addr).await;
    raw.send_frame(FRAME_HEARTBEAT, 1, &[]).await;
    let (code, text, _, _) = raw.expect_connection_close().await;
    assert_eq!(code, 501, "{text}");
    assert!(text.starts_with("FRAME_ERROR - "), "{text}");
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_on_channel_zero_is_accepted() {
    let broker = TestBroker::start().await;
    let mut raw = Raw::open_with_channel(broker.addr()).await;
    raw.send_frame(FRAME_HEARTBEAT, 0, &[]).await;
    raw.publish_and_get("after-heartbeat", b"beat").await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_more_channels_than_channel_max_closes_the_connection() {
    let broker = TestBroker::start_with(&[("channel_max", "2")]).await;
    let addr = broker.addr();
    let other = bystander(addr).await;
    let mut raw = Raw::open(addr).await;
    for channel in [1, 2] {
        raw.send_method(channel, &Method::ChannelOpen).await;
        assert_eq!(raw.recv_method().await, (channel, Method::ChannelOpenOk));
    }
    raw.send_method(3, &Method::ChannelOpen).await;
    let (code, text, _, _) = raw.expect_connection_close().await;
    assert_eq!(code, 530, "{text}");
    assert_eq!(
        text,
        "NOT_ALLOWED - number of channels opened (2) has reached the negotiated channel_max (2)"
    );
    // A closed channel frees its slot (it counts until close-ok).
    let mut raw = Raw::open(addr).await;
    for channel in [1, 2] {
        raw.send_method(channel, &Method::ChannelOpen).await;
        assert_eq!(raw.recv_method().await, (channel, Method::ChannelOpenOk));
    }
    raw.send_method(
        2,
        &Method::ChannelClose {
            reply_code: 200,
            reply_text: "bye".to_string(),
            class_id: 0,
            method_id: 0,
        },
    )
    .await;
    assert_eq!(raw.recv_method().await, (2, Method::ChannelCloseOk));
    raw.send_method(3, &Method::ChannelOpen).await;
    assert_eq!(raw.recv_method().await, (3, Method::ChannelOpenOk));
    raw.publish_and_get("slots", b"freed").await;
    // A closed channel's number may be opened again (clients reuse them).
    raw.send_method(
        1,
        &Method::ChannelClose {
            reply_code: 200,
            reply_text: "bye".to_string(),
            class_id: 0,
            method_id: 0,
        },
    )
    .await;
    assert_eq!(raw.recv_method().await, (1, Method::ChannelCloseOk));
    raw.send_method(1, &Method::ChannelOpen).await;
    assert_eq!(raw.recv_method().await, (1, Method::ChannelOpenOk));
    raw.publish_and_get("slots-again", b"reopened").await;
    still_healthy(other, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_publisher_is_not_read_until_the_alarm_clears() {
    use warren_core::broker::Alarm;
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let mut capabilities = Table::new();
    capabilities.insert("connection.blocked", Value::Bool(true));
    let mut properties = Table::new();
    properties.insert("capabilities", Value::Table(capabilities));
    let mut publisher = Raw::connect(addr).await;
    publisher
        .handshake_with("PLAIN", b"\0guest\0guest".to_vec(), properties)
        .await;
    publisher.send_method(1, &Method::ChannelOpen).await;
    assert_eq!(publisher.recv_method().await, (1, Method::ChannelOpenOk));
    publisher.publish_and_get("alarmed", b"first").await;

    broker.broker().set_alarm(Alarm::Memory, true);
    assert_eq!(
        publisher.recv_method().await,
        (
            0,
            Method::ConnectionBlocked {
                reason: "low on memory".into()
            }
        )
    );
    let mut out = BytesMut::new();
    let publish = Method::BasicPublish {
        exchange: "".into(),
        routing_key: "alarmed".into(),
        mandatory: false,
        immediate: false,
    };
    write_method_frame(&mut out, 1, &publish).expect("encodes");
    write_content(&mut out, 1, 60, &EMPTY_PROPERTIES, b"held", 4096);
    publisher.send_raw(&out).await;

    // Another connection is served meanwhile, and the held message is not there.
    let mut other = Raw::open_with_channel(addr).await;
    other.publish_and_get("other", b"served").await;
    let queue = broker
        .broker()
        .vhost("/")
        .expect("vhost")
        .queue("alarmed")
        .expect("queue");
    assert_eq!(queue.stats().published, 1, "the blocked socket is not read");

    broker.broker().set_alarm(Alarm::Memory, false);
    assert_eq!(
        publisher.recv_method().await,
        (0, Method::ConnectionUnblocked)
    );
    assert!(
        warren_interop_tests::wait_for(REPLY_TIMEOUT, || queue.stats().published == 2).await,
        "the held publish is read once unblocked"
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_are_sent_and_a_silent_client_is_disconnected() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let mut silent = Raw::connect(addr).await;
    silent.send_raw(&PROTOCOL_HEADER_091).await;
    assert!(matches!(
        silent.recv_method().await,
        (0, Method::ConnectionStart { .. })
    ));
    silent
        .send_method(
            0,
            &Method::ConnectionStartOk {
                client_properties: Table::new(),
                mechanism: "PLAIN".into(),
                response: b"\0guest\0guest".to_vec(),
                locale: "en_US".into(),
            },
        )
        .await;
    let (_, tune) = silent.recv_method().await;
    let Method::ConnectionTune {
        channel_max,
        frame_max,
        ..
    } = tune
    else {
        panic!("expected connection.tune, got {tune:?}");
    };
    // A 1-second heartbeat: the broker sends heartbeats and, hearing nothing back for two
    // intervals, closes the socket.
    silent
        .send_method(
            0,
            &Method::ConnectionTuneOk {
                channel_max,
                frame_max,
                heartbeat: 1,
            },
        )
        .await;
    silent
        .send_method(
            0,
            &Method::ConnectionOpen {
                virtual_host: "/".into(),
            },
        )
        .await;
    assert_eq!(silent.recv_method().await, (0, Method::ConnectionOpenOk));
    let mut heartbeats = 0;
    while let Some(frame) = silent.recv_frame().await {
        assert_eq!(
            frame.frame_type, FRAME_HEARTBEAT,
            "only heartbeats on an idle connection"
        );
        heartbeats += 1;
    }
    assert!(
        heartbeats >= 1,
        "the broker sent heartbeats before giving up"
    );
    let bystander = Raw::open_with_channel(addr).await;
    still_healthy(bystander, addr).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_does_not_read_replies_is_paused_and_loses_nothing() {
    let broker = TestBroker::start().await;
    let addr = broker.addr();
    let bystander = bystander(addr).await;
    let mut flooder = Raw::open_with_channel(addr).await;
    // Each passive declare gets a 42-byte declare-ok; 600,000 of them are ~25 MB of replies, far more
    // than the broker buffers for one connection before it stops reading it.
    const REQUESTS: usize = 600_000;
    let mut requests = BytesMut::new();
    for _ in 0..REQUESTS {
        write_method_frame(
            &mut requests,
            1,
            &Method::QueueDeclare {
                queue: "amq.rabbitmq.reply-to".into(),
                passive: true,
                durable: false,
                exclusive: false,
                auto_delete: false,
                no_wait: false,
                arguments: Table::new(),
            },
        )
        .expect("encodes");
    }
    let (mut read_half, mut write_half) = flooder.stream.into_split();
    let writer = tokio::spawn(async move {
        write_half
            .write_all(&requests)
            .await
            .expect("the broker keeps the socket open");
        write_half
    });
    // Meanwhile the broker serves everybody else.
    still_healthy(bystander, addr).await;
    // Not reading for a while lets the replies pile up past the pause threshold, so the
    // broker stops reading this client (that path is what this test is for); whatever the
    // timing, the assertions below only check that nothing is lost.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    assert!(
        !writer.is_finished(),
        "a paused client cannot push all its requests"
    );
    // Now read every reply: none is lost, in order.
    let mut buffer = std::mem::take(&mut flooder.buffer);
    let mut replies = 0;
    while replies < REQUESTS {
        while let Some(frame) = decode_frame(&mut buffer, 0).expect("valid frames") {
            let method = Method::decode(&frame.payload).expect("decodes");
            assert!(
                matches!(method, Method::QueueDeclareOk { .. }),
                "{method:?}"
            );
            replies += 1;
        }
        if replies == REQUESTS {
            break;
        }
        let read = tokio::time::timeout(REPLY_TIMEOUT, read_half.read_buf(&mut buffer))
            .await
            .expect("replies keep coming")
            .expect("read");
        assert!(
            read > 0,
            "the broker closed the connection after {replies} replies"
        );
    }
    let _write_half = writer.await.expect("all requests were sent");
    broker.shutdown().await;
}
