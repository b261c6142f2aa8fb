//! A hand-driven AMQP 0-9-1 client over a raw TCP socket, shared by the raw protocol tests
//! (a subdirectory module, so cargo does not build it as a test of its own).
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_amqp091::codec::{
    decode_frame, write_content, write_frame, write_method_frame, Frame, Method, EMPTY_PROPERTIES,
    FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT, FRAME_METHOD, PROTOCOL_HEADER_091,
};
use warren_core::value::Table;

/// How long to wait for any single reply; a broker that does not answer fails the test.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(5);

/// A client that writes and reads frames by hand.
pub struct Raw {
    pub stream: TcpStream,
    pub buffer: BytesMut,
    /// The heartbeat interval the handshake asks for in tune-ok (0: none).
    pub heartbeat: u16,
}

impl Raw {
    pub async fn connect(addr: SocketAddr) -> Raw {
        let stream = TcpStream::connect(addr).await.expect("TCP connects");
        Raw {
            stream,
            buffer: BytesMut::new(),
            heartbeat: 0,
        }
    }

    /// Connects and completes the handshake as guest on `/` with PLAIN, heartbeats off.
    pub async fn open(addr: SocketAddr) -> Raw {
        let mut raw = Raw::connect(addr).await;
        raw.handshake("PLAIN", b"\0guest\0guest".to_vec()).await;
        raw
    }

    /// Opens a connection and channel 1.
    pub async fn open_with_channel(addr: SocketAddr) -> Raw {
        let mut raw = Raw::open(addr).await;
        raw.send_method(1, &Method::ChannelOpen).await;
        assert_eq!(raw.recv_method().await, (1, Method::ChannelOpenOk));
        raw
    }

    /// Sends the protocol header and answers start and tune; returns connection.start.
    pub async fn handshake(&mut self, mechanism: &str, response: Vec<u8>) -> Method {
        self.handshake_with(mechanism, response, Table::new()).await
    }

    /// The handshake, sending `client_properties` in start-ok.
    pub async fn handshake_with(
        &mut self,
        mechanism: &str,
        response: Vec<u8>,
        client_properties: Table,
    ) -> Method {
        self.send_raw(&PROTOCOL_HEADER_091).await;
        let (channel, start) = self.recv_method().await;
        assert_eq!(channel, 0);
        assert!(matches!(start, Method::ConnectionStart { .. }), "{start:?}");
        self.send_method(
            0,
            &Method::ConnectionStartOk {
                client_properties,
                mechanism: mechanism.to_string(),
                response,
                locale: "en_US".to_string(),
            },
        )
        .await;
        let (_, tune) = self.recv_method().await;
        let Method::ConnectionTune {
            channel_max,
            frame_max,
            ..
        } = tune
        else {
            panic!("expected connection.tune, got {tune:?}");
        };
        self.send_method(
            0,
            &Method::ConnectionTuneOk {
                channel_max,
                frame_max,
                heartbeat: self.heartbeat,
            },
        )
        .await;
        self.send_method(
            0,
            &Method::ConnectionOpen {
                virtual_host: "/".to_string(),
            },
        )
        .await;
        assert_eq!(self.recv_method().await, (0, Method::ConnectionOpenOk));
        start
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    pub async fn send_method(&mut self, channel: u16, method: &Method) {
        let mut out = BytesMut::new();
        write_method_frame(&mut out, channel, method).expect("encodes");
        self.send_raw(&out).await;
    }

    pub async fn send_frame(&mut self, frame_type: u8, channel: u16, payload: &[u8]) {
        let mut out = BytesMut::new();
        write_frame(&mut out, frame_type, channel, payload);
        self.send_raw(&out).await;
    }

    /// The next frame, or `None` once the broker closed the socket.
    pub async fn recv_frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(frame) = decode_frame(&mut self.buffer, 0).expect("broker frames are valid")
            {
                return Some(frame);
            }
            let read = tokio::time::timeout(REPLY_TIMEOUT, self.stream.read_buf(&mut self.buffer))
                .await
                .expect("the broker answers in time");
            match read {
                Ok(0) | Err(_) => {
                    assert!(self.buffer.is_empty(), "socket closed mid-frame");
                    return None;
                }
                Ok(_) => {}
            }
        }
    }

    /// The next method frame (heartbeats skipped), with its channel.
    pub async fn recv_method(&mut self) -> (u16, Method) {
        loop {
            let frame = self.recv_frame().await.expect("a frame, not end of stream");
            match frame.frame_type {
                FRAME_HEARTBEAT => continue,
                FRAME_METHOD => {
                    let method = Method::decode(&frame.payload).expect("broker methods decode");
                    return (frame.channel, method);
                }
                other => panic!("expected a method frame, got frame type {other}"),
            }
        }
    }

    /// Expects connection.close, answers close-ok, and checks that the broker then closes
    /// the socket. Returns (code, text, class, method).
    pub async fn expect_connection_close(&mut self) -> (u16, String, u16, u16) {
        let (channel, method) = self.recv_method().await;
        assert_eq!(channel, 0, "connection.close travels on channel 0");
        let Method::ConnectionClose {
            reply_code,
            reply_text,
            class_id,
            method_id,
        } = method
        else {
            panic!("expected connection.close, got {method:?}");
        };
        self.send_method(0, &Method::ConnectionCloseOk).await;
        self.expect_eof().await;
        (reply_code, reply_text, class_id, method_id)
    }

    /// Expects the broker to close the socket with nothing more to say.
    pub async fn expect_eof(&mut self) {
        if let Some(frame) = self.recv_frame().await {
            panic!("expected the socket to close, got {frame:?}");
        }
    }

    /// Declares `queue`, publishes a message to it through the default exchange on channel
    /// 1, and gets it back: proof that this connection and the broker still work.
    pub async fn publish_and_get(&mut self, queue: &str, body: &[u8]) {
        self.send_method(
            1,
            &Method::QueueDeclare {
                queue: queue.to_string(),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                no_wait: false,
                arguments: Table::new(),
            },
        )
        .await;
        let (channel, declared) = self.recv_method().await;
        assert_eq!(channel, 1);
        assert!(
            matches!(&declared, Method::QueueDeclareOk { queue: q, message_count: 0, .. } if q == queue),
            "{declared:?}"
        );
        let mut out = BytesMut::new();
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
        write_content(&mut out, 1, 60, &EMPTY_PROPERTIES, body, 4096);
        write_method_frame(
            &mut out,
            1,
            &Method::BasicGet {
                queue: queue.to_string(),
                no_ack: true,
            },
        )
        .expect("encodes");
        self.send_raw(&out).await;
        let (channel, get_ok) = self.recv_method().await;
        assert_eq!(channel, 1);
        assert!(
            matches!(&get_ok, Method::BasicGetOk { routing_key, message_count: 0, .. } if routing_key == queue),
            "{get_ok:?}"
        );
        let header = self.recv_frame().await.expect("content header");
        assert_eq!(header.frame_type, FRAME_HEADER);
        assert_eq!(
            u64::from_be_bytes(header.payload[4..12].try_into().expect("8 bytes")),
            body.len() as u64
        );
        let mut received = Vec::new();
        while received.len() < body.len() {
            let frame = self.recv_frame().await.expect("body frame");
            assert_eq!(frame.frame_type, FRAME_BODY);
            received.extend_from_slice(&frame.payload);
        }
        assert_eq!(received, body);
    }
}

/// A connection opened before the misbehaving one; checked to still work afterwards.
pub async fn bystander(addr: SocketAddr) -> Raw {
    let mut raw = Raw::open_with_channel(addr).await;
    raw.publish_and_get("bystander", b"before").await;
    raw
}

pub async fn still_healthy(mut bystander: Raw, addr: SocketAddr) {
    bystander.publish_and_get("bystander", b"after").await;
    // And a brand-new connection works too.
    let mut fresh = Raw::open_with_channel(addr).await;
    fresh.publish_and_get("fresh", b"fresh").await;
}

/// Encodes a method's payload (class id, method id, arguments), without the frame around it.
pub fn method_payload(method: &Method) -> Vec<u8> {
    let mut out = BytesMut::new();
    write_method_frame(&mut out, 0, method).expect("encodes");
    out[7..out.len() - 1].to_vec()
}
