//! A minimal async AMQP 0-9-1 client on tokio and Warren's sans-IO codec: the handshake,
//! synchronous calls for topology, and a zero-copy delivery parser for the hot path.
//!
//! Each connection is owned by one task (no locks, no channels between tasks): it reads into
//! one big buffer and parses every complete frame in it, and it writes many frames per
//! socket write. Heartbeats are turned off (tune-ok heartbeat 0) so idle connections cost
//! nothing.

use std::fmt;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use warren_amqp091::codec::{
    decode_frame, write_method_frame, Method, FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEARTBEAT,
    FRAME_METHOD, PROTOCOL_HEADER_091,
};
use warren_core::value::{Table, Value};

use crate::args::Uri;

/// The frame_max we ask for (RabbitMQ's default).
const FRAME_MAX: u32 = 131_072;

/// Everything that can go wrong talking to the broker.
#[derive(Debug)]
pub enum AmqpError {
    Connect {
        addr: String,
        error: std::io::Error,
    },
    Io(std::io::Error),
    /// The broker sent connection.close.
    ConnectionClosed {
        code: u16,
        text: String,
        method: String,
    },
    /// The broker sent channel.close.
    ChannelClosed {
        code: u16,
        text: String,
        method: String,
    },
    /// The socket closed; `during` says what we were waiting for.
    Eof {
        during: &'static str,
    },
    Protocol(String),
}

impl fmt::Display for AmqpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AmqpError::Connect { addr, error } => write!(f, "cannot connect to {addr}: {error}"),
            AmqpError::Io(error) => write!(f, "socket error: {error}"),
            AmqpError::ConnectionClosed { code, text, method } => {
                write!(f, "the broker closed the connection: {code} {text}{method}")
            }
            AmqpError::ChannelClosed { code, text, method } => {
                write!(f, "the broker closed the channel: {code} {text}{method}")
            }
            AmqpError::Eof { during } => write!(
                f,
                "the broker closed the socket while we waited for {during}{}",
                if during.starts_with("connection.") {
                    " (wrong credentials, vhost or protocol?)"
                } else {
                    ""
                }
            ),
            AmqpError::Protocol(message) => write!(f, "protocol error: {message}"),
        }
    }
}

impl From<std::io::Error> for AmqpError {
    fn from(error: std::io::Error) -> Self {
        AmqpError::Io(error)
    }
}

fn method_suffix(class_id: u16, method_id: u16) -> String {
    if class_id == 0 {
        return String::new();
    }
    match warren_amqp091::codec::method_name(class_id, method_id) {
        Some(name) => format!(" (in reply to {name})"),
        None => format!(" (in reply to method {class_id}.{method_id})"),
    }
}

/// One connection with channel 1 open.
pub struct Conn {
    pub rd: OwnedReadHalf,
    pub wr: OwnedWriteHalf,
    pub rbuf: BytesMut,
    pub wbuf: BytesMut,
    pub frame_max: u32,
}

/// How long connecting, the handshake and channel.open may take.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// The channel every role uses.
pub const CH: u16 = 1;

impl Conn {
    /// Connects, authenticates (PLAIN), opens the vhost and channel 1. `buffer` is the
    /// initial read buffer capacity.
    pub async fn open(uri: &Uri, name: &str, buffer: usize) -> Result<Conn, AmqpError> {
        match tokio::time::timeout(OPEN_TIMEOUT, Self::open_inner(uri, name, buffer)).await {
            Ok(result) => result,
            Err(_) => Err(AmqpError::Protocol(format!(
                "no connection to {}:{} within {} s (handshake and channel.open)",
                uri.host,
                uri.port,
                OPEN_TIMEOUT.as_secs()
            ))),
        }
    }

    async fn open_inner(uri: &Uri, name: &str, buffer: usize) -> Result<Conn, AmqpError> {
        let addr = if uri.host.contains(':') {
            format!("[{}]:{}", uri.host, uri.port)
        } else {
            format!("{}:{}", uri.host, uri.port)
        };
        let stream = TcpStream::connect((uri.host.as_str(), uri.port))
            .await
            .map_err(|error| AmqpError::Connect {
                addr: addr.clone(),
                error,
            })?;
        let _ = stream.set_nodelay(true);
        let (rd, wr) = stream.into_split();
        let mut conn = Conn {
            rd,
            wr,
            rbuf: BytesMut::with_capacity(buffer.max(1024)),
            wbuf: BytesMut::with_capacity(512),
            frame_max: 0,
        };
        conn.wbuf.extend_from_slice(&PROTOCOL_HEADER_091);
        conn.flush().await?;
        match conn.recv_method(0, "connection.start").await? {
            Method::ConnectionStart { mechanisms, .. } => {
                let plain = mechanisms
                    .split(|b| *b == b' ')
                    .any(|mechanism| mechanism == b"PLAIN");
                if !plain {
                    return Err(AmqpError::Protocol(format!(
                        "the broker does not offer PLAIN authentication (offers: {})",
                        String::from_utf8_lossy(&mechanisms)
                    )));
                }
            }
            other => return Err(unexpected("connection.start", &other)),
        }
        let mut capabilities = Table::new();
        for capability in [
            "publisher_confirms",
            "basic.nack",
            "consumer_cancel_notify",
            "connection.blocked",
            "authentication_failure_close",
            "exchange_exchange_bindings",
        ] {
            capabilities.insert(capability, Value::Bool(true));
        }
        let mut client_properties = Table::new();
        client_properties.insert("product", Value::string("warren-perf"));
        client_properties.insert("version", Value::string(env!("CARGO_PKG_VERSION")));
        client_properties.insert("platform", Value::string("Rust"));
        client_properties.insert("capabilities", Value::Table(capabilities));
        client_properties.insert("connection_name", Value::string(name));
        let mut response = Vec::with_capacity(2 + uri.user.len() + uri.password.len());
        response.push(0);
        response.extend_from_slice(uri.user.as_bytes());
        response.push(0);
        response.extend_from_slice(uri.password.as_bytes());
        conn.send(
            0,
            &Method::ConnectionStartOk {
                client_properties,
                mechanism: "PLAIN".into(),
                response,
                locale: "en_US".into(),
            },
        )?;
        conn.flush().await?;
        match conn.recv_method(0, "connection.tune").await? {
            Method::ConnectionTune {
                channel_max,
                frame_max,
                ..
            } => {
                conn.frame_max = match frame_max {
                    0 => FRAME_MAX,
                    n => n.min(FRAME_MAX),
                };
                conn.send(
                    0,
                    &Method::ConnectionTuneOk {
                        channel_max: if channel_max == 0 { 2047 } else { channel_max },
                        frame_max: conn.frame_max,
                        heartbeat: 0,
                    },
                )?;
            }
            Method::ConnectionSecure { .. } => {
                return Err(AmqpError::Protocol(
                    "the broker asked for a SASL challenge; only PLAIN is supported".into(),
                ))
            }
            other => return Err(unexpected("connection.tune", &other)),
        }
        conn.send(
            0,
            &Method::ConnectionOpen {
                virtual_host: uri.vhost.clone(),
            },
        )?;
        conn.flush().await?;
        match conn.recv_method(0, "connection.open-ok").await? {
            Method::ConnectionOpenOk => {}
            other => return Err(unexpected("connection.open-ok", &other)),
        }
        match conn.call(CH, &Method::ChannelOpen).await? {
            Method::ChannelOpenOk => {}
            other => return Err(unexpected("channel.open-ok", &other)),
        }
        Ok(conn)
    }

    /// Appends a method frame to the write buffer.
    pub fn send(&mut self, channel: u16, method: &Method) -> Result<(), AmqpError> {
        write_method_frame(&mut self.wbuf, channel, method)
            .map_err(|e| AmqpError::Protocol(format!("cannot encode {}: {e}", method.name())))
    }

    /// Writes out the write buffer.
    pub async fn flush(&mut self) -> Result<(), AmqpError> {
        if !self.wbuf.is_empty() {
            self.wr.write_all(&self.wbuf).await?;
            self.wbuf.clear();
        }
        Ok(())
    }

    /// Sends a method and waits for the next method on the same channel.
    pub async fn call(&mut self, channel: u16, method: &Method) -> Result<Method, AmqpError> {
        self.send(channel, method)?;
        self.flush().await?;
        self.recv_method(channel, method.name()).await
    }

    /// Reads until the next method frame on `channel`, skipping heartbeats, content frames
    /// and other channels. connection.close and channel.close become errors (after the
    /// close-ok is sent).
    pub async fn recv_method(
        &mut self,
        channel: u16,
        during: &'static str,
    ) -> Result<Method, AmqpError> {
        loop {
            while let Some(frame) = decode_frame(&mut self.rbuf, self.frame_max)
                .map_err(|e| AmqpError::Protocol(e.to_string()))?
            {
                if frame.frame_type != FRAME_METHOD {
                    continue;
                }
                let method = Method::decode(&frame.payload)
                    .map_err(|e| AmqpError::Protocol(format!("{e:?}")))?;
                if let Some(error) = self.check_close(frame.channel, &method).await {
                    return Err(error);
                }
                // Asynchronous methods (the broker cancelling our consumer when its queue is
                // deleted, confirms, deliveries, flow control) are not replies.
                let asynchronous = matches!(
                    method,
                    Method::BasicCancel { .. }
                        | Method::BasicDeliver { .. }
                        | Method::BasicReturn { .. }
                        | Method::BasicAck { .. }
                        | Method::BasicNack { .. }
                        | Method::ConnectionBlocked { .. }
                        | Method::ConnectionUnblocked
                );
                if frame.channel == channel && !asynchronous {
                    return Ok(method);
                }
            }
            self.rbuf.reserve(4096);
            if self.rd.read_buf(&mut self.rbuf).await? == 0 {
                return Err(AmqpError::Eof { during });
            }
        }
    }

    /// Answers connection.close / channel.close from the broker and turns them into errors.
    pub async fn check_close(&mut self, channel: u16, method: &Method) -> Option<AmqpError> {
        match method {
            Method::ConnectionClose {
                reply_code,
                reply_text,
                class_id,
                method_id,
            } => {
                let _ = self.send(0, &Method::ConnectionCloseOk);
                let _ = self.flush().await;
                Some(AmqpError::ConnectionClosed {
                    code: *reply_code,
                    text: reply_text.clone(),
                    method: method_suffix(*class_id, *method_id),
                })
            }
            Method::ChannelClose {
                reply_code,
                reply_text,
                class_id,
                method_id,
            } => {
                let _ = self.send(channel, &Method::ChannelCloseOk);
                let _ = self.flush().await;
                Some(AmqpError::ChannelClosed {
                    code: *reply_code,
                    text: reply_text.clone(),
                    method: method_suffix(*class_id, *method_id),
                })
            }
            _ => None,
        }
    }

    /// Sends connection.close and waits (at most 5 s) for close-ok, then (at most 1 s) for
    /// the broker to close the socket, so that TIME_WAIT lands on the broker's side rather
    /// than using up our ephemeral ports under --churn. Errors are ignored: the socket is
    /// closed either way.
    pub async fn close(mut self) {
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            self.wbuf.clear();
            self.send(0, &close_method())?;
            self.flush().await?;
            loop {
                match self.recv_method(0, "connection.close-ok").await? {
                    Method::ConnectionCloseOk => return Ok::<(), AmqpError>(()),
                    _ => continue,
                }
            }
        })
        .await;
        // After close-ok the client closes the socket, as the spec says; waiting for the
        // broker's EOF instead costs a full timeout against RabbitMQ, which waits for ours.
        let _ = closed;
        let _ = self.wr.shutdown().await;
    }
}

/// connection.close with reply 200.
pub fn close_method() -> Method {
    Method::ConnectionClose {
        reply_code: 200,
        reply_text: "Goodbye".into(),
        class_id: 0,
        method_id: 0,
    }
}

/// connection.close, encoded.
pub fn encode_close() -> BytesMut {
    let mut out = BytesMut::new();
    write_method_frame(&mut out, 0, &close_method()).expect("close encodes");
    out
}

pub fn unexpected(expected: &str, got: &Method) -> AmqpError {
    AmqpError::Protocol(format!("expected {expected}, got {}", got.name()))
}

/// Where a zero-copy scan of the read buffer stopped.
#[derive(Debug, PartialEq)]
pub enum Stop {
    /// No complete frame left.
    Drained,
    /// A method other than basic.deliver (consume-ok, cancel, close, ack...): the caller
    /// handles it and calls [`DeliveryParser::parse`] again.
    Method(u16, Method),
    /// `completed` reached the limit the caller set (time to ack).
    Limit,
}

/// Scans deliveries (basic.deliver, content header, body frames) straight out of the read
/// buffer without copying or allocating: only the delivery tag, the body size and the
/// body's first 8 octets (the latency timestamp) are looked at.
#[derive(Debug, Default)]
pub struct DeliveryParser {
    /// Body octets still expected for the current message.
    remaining: u64,
    /// Whether the next body frame is the message's first.
    first_body: bool,
    /// Whether to collect the timestamps at the start of the bodies.
    pub want_timestamps: bool,
    pending_timestamp: u64,
    /// The delivery tag of the last basic.deliver seen.
    pub last_tag: u64,
}

impl DeliveryParser {
    pub fn new(want_timestamps: bool) -> Self {
        DeliveryParser {
            want_timestamps,
            ..Default::default()
        }
    }

    /// Parses complete frames at the start of `buf`. Returns the octets consumed, why it
    /// stopped, and adds to `completed` (messages whose body is complete) and `timestamps`.
    /// Stops with [`Stop::Limit`] once `completed` reaches `limit`.
    pub fn parse(
        &mut self,
        buf: &[u8],
        completed: &mut u64,
        timestamps: &mut Vec<u64>,
        limit: u64,
    ) -> Result<(usize, Stop), AmqpError> {
        let mut pos = 0;
        while let Some(header) = buf.get(pos..pos + 7) {
            let frame_type = header[0];
            let channel = u16::from_be_bytes([header[1], header[2]]);
            let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
            let total = size + 8;
            if buf.len() - pos < total {
                break;
            }
            if buf[pos + total - 1] != FRAME_END {
                return Err(AmqpError::Protocol("bad frame end octet".into()));
            }
            let payload = &buf[pos + 7..pos + 7 + size];
            pos += total;
            match frame_type {
                FRAME_BODY => {
                    if self.first_body {
                        self.first_body = false;
                        if self.want_timestamps && payload.len() >= 8 {
                            let mut ts = [0u8; 8];
                            ts.copy_from_slice(&payload[..8]);
                            self.pending_timestamp = u64::from_be_bytes(ts);
                        } else {
                            self.pending_timestamp = 0;
                        }
                    }
                    self.remaining = self.remaining.saturating_sub(size as u64);
                    if self.remaining == 0 {
                        self.complete(completed, timestamps);
                        if *completed >= limit {
                            return Ok((pos, Stop::Limit));
                        }
                    }
                }
                FRAME_HEADER => {
                    if size < 14 {
                        return Err(AmqpError::Protocol("short content header".into()));
                    }
                    let mut body_size = [0u8; 8];
                    body_size.copy_from_slice(&payload[4..12]);
                    self.remaining = u64::from_be_bytes(body_size);
                    self.first_body = true;
                    self.pending_timestamp = 0;
                    if self.remaining == 0 {
                        self.complete(completed, timestamps);
                        if *completed >= limit {
                            return Ok((pos, Stop::Limit));
                        }
                    }
                }
                FRAME_METHOD => {
                    // basic.deliver: class 60, method 60, consumer-tag, delivery-tag, ...
                    if payload.len() >= 5 && payload[..4] == [0, 60, 0, 60] {
                        let tag_at = 5 + payload[4] as usize;
                        if let Some(tag) = payload.get(tag_at..tag_at + 8) {
                            let mut bytes = [0u8; 8];
                            bytes.copy_from_slice(tag);
                            self.last_tag = u64::from_be_bytes(bytes);
                            continue;
                        }
                    }
                    let method = Method::decode(payload)
                        .map_err(|e| AmqpError::Protocol(format!("{e:?}")))?;
                    return Ok((pos, Stop::Method(channel, method)));
                }
                FRAME_HEARTBEAT => {}
                other => return Err(AmqpError::Protocol(format!("unknown frame type {other}"))),
            }
        }
        Ok((pos, Stop::Drained))
    }

    fn complete(&mut self, completed: &mut u64, timestamps: &mut Vec<u64>) {
        *completed += 1;
        if self.want_timestamps && self.pending_timestamp != 0 {
            timestamps.push(self.pending_timestamp);
        }
    }
}

/// Reads more from the socket into `rbuf`, reserving `chunk` octets first.
pub async fn read_more(
    rd: &mut OwnedReadHalf,
    rbuf: &mut BytesMut,
    chunk: usize,
    during: &'static str,
) -> Result<(), AmqpError> {
    rbuf.reserve(chunk);
    if rd.read_buf(rbuf).await? == 0 {
        return Err(AmqpError::Eof { during });
    }
    Ok(())
}

/// Drops `n` parsed octets from the front of the read buffer.
pub fn consume(rbuf: &mut BytesMut, n: usize) {
    rbuf.advance(n);
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_amqp091::codec::{write_content, write_deliver, EMPTY_PROPERTIES};

    #[test]
    fn parser_reads_deliveries_and_stops_at_other_methods() {
        let mut buf = BytesMut::new();
        let mut body = 123_456u64.to_be_bytes().to_vec();
        body.extend_from_slice(&[7; 300]);
        write_deliver(
            &mut buf,
            1,
            "ctag",
            5,
            false,
            "",
            "q",
            &EMPTY_PROPERTIES,
            &body,
            4096,
        );
        // A body split over several frames.
        let big = vec![1u8; 10_000];
        write_deliver(
            &mut buf,
            1,
            "ctag",
            6,
            false,
            "",
            "q",
            &EMPTY_PROPERTIES,
            &big,
            4096,
        );
        write_deliver(
            &mut buf,
            1,
            "ctag",
            7,
            false,
            "",
            "q",
            &EMPTY_PROPERTIES,
            b"",
            4096,
        );
        write_method_frame(
            &mut buf,
            1,
            &Method::BasicCancelOk {
                consumer_tag: "ctag".into(),
            },
        )
        .unwrap();
        let split_at = buf.len();
        write_method_frame(
            &mut buf,
            1,
            &Method::BasicDeliver {
                consumer_tag: "ctag".into(),
                delivery_tag: 8,
                redelivered: false,
                exchange: "".into(),
                routing_key: "q".into(),
            },
        )
        .unwrap();
        write_content(&mut buf, 1, 60, &EMPTY_PROPERTIES, b"0123456789", 4096);

        let mut parser = DeliveryParser::new(true);
        let mut completed = 0;
        let mut timestamps = Vec::new();
        let (used, stop) = parser
            .parse(&buf, &mut completed, &mut timestamps, u64::MAX)
            .unwrap();
        assert_eq!(used, split_at);
        assert!(matches!(
            stop,
            Stop::Method(1, Method::BasicCancelOk { .. })
        ));
        assert_eq!(completed, 3);
        // The big body starts with 1s: a timestamp of 0x0101.. is kept; the empty body has
        // none.
        assert_eq!(timestamps[0], 123_456);
        assert_eq!(timestamps.len(), 2);
        assert_eq!(parser.last_tag, 7);

        // The rest, fed in two pieces.
        let rest = &buf[used..];
        let (used2, stop) = parser
            .parse(
                &rest[..rest.len() - 3],
                &mut completed,
                &mut timestamps,
                u64::MAX,
            )
            .unwrap();
        assert_eq!(stop, Stop::Drained);
        assert_eq!(completed, 3);
        let (used3, stop) = parser
            .parse(&rest[used2..], &mut completed, &mut timestamps, u64::MAX)
            .unwrap();
        assert_eq!(stop, Stop::Drained);
        assert_eq!(used2 + used3, rest.len());
        assert_eq!(completed, 4);
        assert_eq!(parser.last_tag, 8);
    }

    #[test]
    fn parser_stops_at_the_limit() {
        let mut buf = BytesMut::new();
        for tag in 1..=5 {
            write_deliver(
                &mut buf,
                1,
                "c",
                tag,
                false,
                "",
                "q",
                &EMPTY_PROPERTIES,
                b"x",
                4096,
            );
        }
        let mut parser = DeliveryParser::new(false);
        let (mut completed, mut ts) = (0, Vec::new());
        let (used, stop) = parser.parse(&buf, &mut completed, &mut ts, 2).unwrap();
        assert_eq!((stop, completed, parser.last_tag), (Stop::Limit, 2, 2));
        let (_, stop) = parser
            .parse(&buf[used..], &mut completed, &mut ts, u64::MAX)
            .unwrap();
        assert_eq!((stop, completed, parser.last_tag), (Stop::Drained, 5, 5));
    }

    #[test]
    fn parser_rejects_garbage() {
        let mut parser = DeliveryParser::new(false);
        let mut completed = 0;
        let mut ts = Vec::new();
        let bad = [3u8, 0, 1, 0, 0, 0, 1, 9, 0];
        assert!(parser
            .parse(&bad, &mut completed, &mut ts, u64::MAX)
            .is_err());
    }
}
