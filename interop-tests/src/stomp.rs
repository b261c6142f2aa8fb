//! A small STOMP client for the interop tests, written from the STOMP 1.2 spec and kept
//! independent of Warren's own codec, so a bug there cannot hide itself on both ends.
//!
//! No maintained Rust STOMP client fits: `tokio-stomp` speaks 1.0 only and has no ACK/NACK
//! helpers, `async-stomp` is EUPL-licensed, the rest are stale (see
//! ../shared/DEPENDENCIES.md). Frames go over a `TcpStream` or a TLS stream: headers escaped
//! per version, bodies with `content-length`, heart-beat EOLs counted.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a test waits for a frame before deciding none is coming.
pub const FRAME_TIMEOUT: Duration = Duration::from_secs(5);

/// A frame as the client received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedFrame {
    /// The command line.
    pub command: String,
    /// Headers in order, unescaped.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl ReceivedFrame {
    /// The first header called `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A byte stream a STOMP client talks over: TCP, or TLS over TCP.
pub trait Transport: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> Transport for T {}

/// One STOMP connection.
pub struct StompClient {
    stream: Box<dyn Transport>,
    buffer: Vec<u8>,
    /// MESSAGEs that arrived while waiting for a RECEIPT.
    early_messages: VecDeque<ReceivedFrame>,
    /// The version the server chose (`1.0` until CONNECTED says otherwise).
    pub version: String,
    /// Heart-beat EOLs received between frames.
    pub heartbeats_received: usize,
}

impl StompClient {
    /// Opens a TCP connection without sending anything.
    pub async fn open(addr: SocketAddr) -> StompClient {
        let stream = TcpStream::connect(addr).await.expect("connect to STOMP");
        stream.set_nodelay(true).expect("nodelay");
        StompClient::over(Box::new(stream))
    }

    /// A client over an open stream (a TLS stream for STOMP over TLS), without sending
    /// anything.
    pub fn over(stream: Box<dyn Transport>) -> StompClient {
        StompClient {
            stream,
            buffer: Vec::new(),
            early_messages: VecDeque::new(),
            version: "1.0".to_string(),
            heartbeats_received: 0,
        }
    }

    /// Connects as guest to vhost `/`, asking for `accept_version`; panics unless CONNECTED.
    pub async fn connect(addr: SocketAddr, accept_version: &str) -> StompClient {
        Self::connect_with(
            addr,
            &[
                ("accept-version", accept_version),
                ("host", "/"),
                ("login", "guest"),
                ("passcode", "guest"),
            ],
        )
        .await
        .0
    }

    /// Sends CONNECT with `headers` and returns the client with the server's answer, which
    /// must be CONNECTED.
    pub async fn connect_with(
        addr: SocketAddr,
        headers: &[(&str, &str)],
    ) -> (StompClient, ReceivedFrame) {
        Self::connect_over(Self::open(addr).await, headers).await
    }

    /// Sends CONNECT with `headers` on `client`'s stream and returns it with the server's
    /// answer, which must be CONNECTED.
    pub async fn connect_over(
        mut client: StompClient,
        headers: &[(&str, &str)],
    ) -> (StompClient, ReceivedFrame) {
        client.write_frame("CONNECT", headers, b"").await;
        let connected = client.expect_frame().await;
        assert_eq!(connected.command, "CONNECTED", "{connected:?}");
        if let Some(version) = connected.header("version") {
            client.version = version.to_string();
        }
        (client, connected)
    }

    /// Writes raw bytes.
    pub async fn write_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Writes a frame, escaping headers as the negotiated version requires and adding
    /// `content-length` to a non-empty body.
    pub async fn write_frame(&mut self, command: &str, headers: &[(&str, &str)], body: &[u8]) {
        let escape = self.version != "1.0" && command != "CONNECT" && command != "STOMP";
        let mut out = Vec::new();
        out.extend_from_slice(command.as_bytes());
        out.push(b'\n');
        for (name, value) in headers {
            push_escaped(&mut out, name, escape);
            out.push(b':');
            push_escaped(&mut out, value, escape);
            out.push(b'\n');
        }
        if !body.is_empty() {
            out.extend_from_slice(format!("content-length:{}\n", body.len()).as_bytes());
        }
        out.push(b'\n');
        out.extend_from_slice(body);
        out.push(0);
        self.write_raw(&out).await;
    }

    /// SEND with a receipt, waiting for the RECEIPT: when it returns the broker has routed
    /// the message.
    pub async fn send(&mut self, destination: &str, body: &str, headers: &[(&str, &str)]) {
        let receipt = format!("send-{}", rand_suffix());
        let mut all = vec![("destination", destination), ("receipt", receipt.as_str())];
        all.extend_from_slice(headers);
        self.write_frame("SEND", &all, body.as_bytes()).await;
        self.expect_receipt(&receipt).await;
    }

    /// SUBSCRIBE with an id, an ack mode and extra headers, waiting for the RECEIPT.
    pub async fn subscribe(
        &mut self,
        destination: &str,
        id: &str,
        ack: &str,
        headers: &[(&str, &str)],
    ) {
        let receipt = format!("sub-{id}");
        let mut all = vec![
            ("destination", destination),
            ("id", id),
            ("ack", ack),
            ("receipt", receipt.as_str()),
        ];
        all.extend_from_slice(headers);
        self.write_frame("SUBSCRIBE", &all, b"").await;
        self.expect_receipt(&receipt).await;
    }

    /// Sends `command` (ACK, NACK, BEGIN, ...) with a receipt and waits for it.
    pub async fn request(&mut self, command: &str, headers: &[(&str, &str)]) {
        let receipt = format!("{}-{}", command.to_lowercase(), rand_suffix());
        let mut all = vec![("receipt", receipt.as_str())];
        all.extend_from_slice(headers);
        self.write_frame(command, &all, b"").await;
        self.expect_receipt(&receipt).await;
    }

    /// The header a client acknowledges a MESSAGE with in this version.
    pub fn ack_headers<'a>(&self, message: &'a ReceivedFrame) -> (&'static str, &'a str) {
        if self.version == "1.2" {
            (
                "id",
                message.header("ack").expect("ack header on a 1.2 MESSAGE"),
            )
        } else {
            (
                "message-id",
                message.header("message-id").expect("message-id header"),
            )
        }
    }

    /// Reads the next frame; panics on timeout or a closed connection.
    pub async fn expect_frame(&mut self) -> ReceivedFrame {
        match self.read_frame(FRAME_TIMEOUT).await {
            Some(frame) => frame,
            None => panic!("no frame within {FRAME_TIMEOUT:?}"),
        }
    }

    /// Reads the next frame, which must be a MESSAGE (one that arrived while waiting for a
    /// RECEIPT comes first).
    pub async fn expect_message(&mut self) -> ReceivedFrame {
        if let Some(message) = self.early_messages.pop_front() {
            return message;
        }
        let frame = self.expect_frame().await;
        assert_eq!(frame.command, "MESSAGE", "{frame:?}");
        frame
    }

    /// Reads frames until the RECEIPT for `id`, which must come before any other frame but
    /// MESSAGE (a SEND to a queue this client consumes from may be delivered before its
    /// receipt); those MESSAGEs are kept for [`StompClient::expect_message`].
    pub async fn expect_receipt(&mut self, id: &str) {
        let mut frame = self.expect_frame().await;
        while frame.command == "MESSAGE" {
            self.early_messages.push_back(frame);
            frame = self.expect_frame().await;
        }
        assert_eq!(frame.command, "RECEIPT", "{frame:?}");
        assert_eq!(frame.header("receipt-id"), Some(id));
    }

    /// Reads the next frame, which must be an ERROR, and checks the connection closes after.
    pub async fn expect_error(&mut self) -> ReceivedFrame {
        let frame = self.expect_frame().await;
        assert_eq!(frame.command, "ERROR", "{frame:?}");
        assert!(
            self.is_closed_by_server().await,
            "connection stays open after ERROR"
        );
        frame
    }

    /// Whether the server closes the connection (EOF) within the frame timeout, reading and
    /// discarding anything before it.
    pub async fn is_closed_by_server(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        let deadline = tokio::time::Instant::now() + FRAME_TIMEOUT;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
                Err(_) => return false,
            }
        }
    }

    /// Waits up to `limit` for a frame; `None` on timeout or when the server closed.
    pub async fn read_frame(&mut self, limit: Duration) -> Option<ReceivedFrame> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if let Some(frame) = self.parse_frame() {
                return Some(frame);
            }
            let mut chunk = [0u8; 16 * 1024];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return None,
                Ok(Ok(n)) => self.buffer.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// Whether no frame arrives within `limit` (heart-beats do not count).
    pub async fn no_frame_within(&mut self, limit: Duration) -> bool {
        self.early_messages.is_empty() && self.read_frame(limit).await.is_none()
    }

    fn parse_frame(&mut self) -> Option<ReceivedFrame> {
        // EOLs between frames are heart-beats.
        loop {
            match self.buffer.first() {
                Some(b'\n') => {
                    self.buffer.remove(0);
                    self.heartbeats_received += 1;
                }
                Some(b'\r') if self.buffer.get(1) == Some(&b'\n') => {
                    self.buffer.drain(..2);
                    self.heartbeats_received += 1;
                }
                _ => break,
            }
        }
        let head_end = self.buffer.windows(2).position(|w| w == b"\n\n")?;
        let head = String::from_utf8(self.buffer[..head_end].to_vec()).expect("UTF-8 head");
        let mut lines = head.split('\n');
        let command = lines.next()?.trim_end_matches('\r').to_string();
        let unescape = self.version != "1.0" && command != "CONNECTED";
        let headers: Vec<(String, String)> = lines
            .map(|line| {
                let line = line.trim_end_matches('\r');
                let (name, value) = line.split_once(':').expect("header with a colon");
                (unescaped(name, unescape), unescaped(value, unescape))
            })
            .collect();
        let body_start = head_end + 2;
        let length = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map(|(_, v)| v.parse::<usize>().expect("numeric content-length"));
        let body_end = match length {
            Some(length) => {
                if self.buffer.len() < body_start + length + 1 {
                    return None;
                }
                assert_eq!(self.buffer[body_start + length], 0, "NUL after the body");
                body_start + length
            }
            None => body_start + self.buffer[body_start..].iter().position(|b| *b == 0)?,
        };
        let body = self.buffer[body_start..body_end].to_vec();
        self.buffer.drain(..=body_end);
        Some(ReceivedFrame {
            command,
            headers,
            body,
        })
    }

    /// Sends DISCONNECT with a receipt and waits for the RECEIPT and the close.
    pub async fn disconnect(mut self) {
        self.write_frame("DISCONNECT", &[("receipt", "bye")], b"")
            .await;
        self.expect_receipt("bye").await;
        assert!(self.is_closed_by_server().await);
    }
}

fn push_escaped(out: &mut Vec<u8>, text: &str, escape: bool) {
    for byte in text.bytes() {
        match (escape, byte) {
            (true, b'\\') => out.extend_from_slice(b"\\\\"),
            (true, b'\n') => out.extend_from_slice(b"\\n"),
            (true, b'\r') => out.extend_from_slice(b"\\r"),
            (true, b':') => out.extend_from_slice(b"\\c"),
            (_, other) => out.push(other),
        }
    }
}

fn unescaped(text: &str, unescape: bool) -> String {
    if !unescape {
        return text.to_string();
    }
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('c') => out.push(':'),
            Some('\\') => out.push('\\'),
            other => panic!("server sent an undefined escape \\{other:?}"),
        }
    }
    out
}

fn rand_suffix() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
