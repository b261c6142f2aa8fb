//! WebSocket as one more byte stream under the existing codecs (Web-MQTT, Web-STOMP): the
//! server handshake (path and subprotocol checked), then [`WebSocketBytes`], which reads the
//! payloads of data messages as one byte stream and writes each write as one message. MQTT
//! and STOMP allow a packet or frame to span messages and a message to hold several, so
//! the protocols' codecs see exactly what they see on TCP; nothing protocol-specific is
//! here.
//!
//! Pings are answered by tungstenite on the next read or flush; a Close message, like the
//! end of the TCP stream, reads as the end of the stream.

use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::{Buf, Bytes};
use futures_util::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderValue, StatusCode};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// What a WebSocket listener accepts.
#[derive(Debug, Clone)]
pub struct WebSocketConfig {
    /// The request path (`/ws`); other paths get 404.
    pub path: String,
    /// The subprotocols this listener speaks, in preference order (`mqtt`; `v12.stomp`, ...).
    /// The first one the client offers is selected; a client that offers none is accepted
    /// without one (browsers' plain `new WebSocket(url)`); one that offers only others gets
    /// 400.
    pub subprotocols: Vec<&'static str>,
    /// Write text messages when the bytes are UTF-8 (Web-STOMP's default `ws_frame = text`);
    /// binary messages otherwise.
    pub text_frames: bool,
}

/// A byte stream that is not a bare socket: a listener reads and writes it through
/// `AsyncRead`/`AsyncWrite` (a WebSocket today).
pub trait Tunnel: AsyncRead + AsyncWrite + Send + Unpin {
    /// The broker's end of the underlying socket.
    fn local_addr(&self) -> Option<SocketAddr>;
    /// Whether the underlying socket runs TLS.
    fn is_tls(&self) -> bool;
    /// Waits until a read would return something (bytes, the end of the stream or an
    /// error) without needing a buffer to read into: an idle connection then holds no read
    /// buffer of its own while it waits, as a plain socket's does not.
    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>>;
}

/// The broker's end of an in-memory byte pipe, as a [`Tunnel`]: a listener's driver serves
/// it as it serves a WebSocket, so a test can drive a whole connection (driver, session,
/// core) without a socket, in tokio's paused time.
pub struct MemoryTunnel {
    inner: DuplexStream,
    /// A byte read by `poll_read_ready`, handed out by the next read.
    peeked: Option<u8>,
}

impl MemoryTunnel {
    /// A pipe holding up to `buffer` bytes each way: the broker's end and the client's.
    pub fn pair(buffer: usize) -> (MemoryTunnel, DuplexStream) {
        let (client, server) = tokio::io::duplex(buffer);
        let tunnel = MemoryTunnel {
            inner: server,
            peeked: None,
        };
        (tunnel, client)
    }
}

impl AsyncRead for MemoryTunnel {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(byte) = self.peeked.take() {
            buf.put_slice(&[byte]);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for MemoryTunnel {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl Tunnel for MemoryTunnel {
    fn local_addr(&self) -> Option<SocketAddr> {
        None
    }

    fn is_tls(&self) -> bool {
        false
    }

    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.peeked.is_some() {
            return Poll::Ready(Ok(()));
        }
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        match Pin::new(&mut self.inner).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() == 1 {
                    self.peeked = Some(byte[0]);
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

/// A WebSocket connection read and written as bytes.
pub struct WebSocketBytes<S> {
    inner: WebSocketStream<S>,
    /// What is left of the last message read.
    pending: Bytes,
    /// A Close message or the end of the stream was read: reads return `Ok(0)`.
    ended: bool,
    local: Option<SocketAddr>,
    tls: bool,
    text_frames: bool,
}

/// Completes the server handshake on `stream` (already TLS when `tls`): checks the path and
/// selects the subprotocol. Errors are for the log.
// The handshake callback's error type is tungstenite's HTTP response.
#[allow(clippy::result_large_err)]
pub async fn accept<S>(
    stream: S,
    config: &WebSocketConfig,
    local: Option<SocketAddr>,
    tls: bool,
) -> Result<WebSocketBytes<S>, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let callback = |request: &Request, mut response: Response| -> Result<Response, ErrorResponse> {
        if request.uri().path() != config.path {
            return Err(refusal(
                StatusCode::NOT_FOUND,
                format!(
                    "no WebSocket endpoint at {}; use {}",
                    request.uri().path(),
                    config.path
                ),
            ));
        }
        let offered: Vec<String> = request
            .headers()
            .get_all("sec-websocket-protocol")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(|name| name.trim().to_ascii_lowercase())
            .filter(|name| !name.is_empty())
            .collect();
        if offered.is_empty() {
            return Ok(response);
        }
        match config
            .subprotocols
            .iter()
            .find(|ours| offered.iter().any(|theirs| theirs == *ours))
        {
            Some(selected) => {
                response
                    .headers_mut()
                    .insert("sec-websocket-protocol", HeaderValue::from_static(selected));
                Ok(response)
            }
            None => Err(refusal(
                StatusCode::BAD_REQUEST,
                format!(
                    "none of the subprotocols {offered:?} is spoken here; expected one of {:?}",
                    config.subprotocols
                ),
            )),
        }
    };
    let inner = tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(buffers()))
        .await
        .map_err(|error| format!("WebSocket handshake failed: {error}"))?;
    Ok(WebSocketBytes {
        inner,
        pending: Bytes::new(),
        ended: false,
        local,
        tls,
        text_frames: config.text_frames,
    })
}

/// The size of tungstenite's read buffer, which it allocates up front for every connection
/// and keeps: its 128 KiB default made an idle Web-MQTT connection cost ~148 KiB. Larger
/// frames still arrive whole (the buffer grows for them); reads are just smaller.
const READ_BUFFER: usize = 2048;

/// tungstenite's settings for the server side: a small read buffer, and every message written
/// at once (each write of the codecs is already one whole batch; the driver flushes it).
fn buffers() -> tokio_tungstenite::tungstenite::protocol::WebSocketConfig {
    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .read_buffer_size(READ_BUFFER)
        .write_buffer_size(0)
}

/// An HTTP refusal of the handshake with `text` as its body.
fn refusal(status: StatusCode, text: String) -> ErrorResponse {
    let mut response = ErrorResponse::new(Some(text));
    *response.status_mut() = status;
    response
}

fn io_error(error: tokio_tungstenite::tungstenite::Error) -> std::io::Error {
    use tokio_tungstenite::tungstenite::Error;
    match error {
        Error::ConnectionClosed | Error::AlreadyClosed => std::io::ErrorKind::BrokenPipe.into(),
        Error::Io(error) => error,
        other => std::io::Error::other(other),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> WebSocketBytes<S> {
    /// Reads messages until one carries bytes or the stream ends.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while self.pending.is_empty() && !self.ended {
            match ready!(Pin::new(&mut self.inner).poll_next(cx)) {
                Some(Ok(Message::Binary(data))) => self.pending = data,
                Some(Ok(Message::Text(text))) => self.pending = Bytes::from(text),
                Some(Ok(Message::Close(_))) | None => self.ended = true,
                // Pings are answered by tungstenite; pongs and raw frames carry nothing.
                Some(Ok(_)) => {}
                Some(Err(error)) => return Poll::Ready(Err(io_error(error))),
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WebSocketBytes<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        ready!(self.poll_fill(cx))?;
        // Empty after `poll_fill` only at the end of the stream: nothing put into `buf`.
        let take = self.pending.len().min(buf.remaining());
        buf.put_slice(&self.pending[..take]);
        self.pending.advance(take);
        if self.pending.is_empty() {
            // An empty slice would still hold the frame's allocation.
            self.pending = Bytes::new();
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WebSocketBytes<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        ready!(Pin::new(&mut self.inner).poll_ready(cx)).map_err(io_error)?;
        let message = match std::str::from_utf8(bytes) {
            Ok(text) if self.text_frames => Message::text(text),
            _ => Message::Binary(Bytes::copy_from_slice(bytes)),
        };
        Pin::new(&mut self.inner)
            .start_send(message)
            .map_err(io_error)?;
        Poll::Ready(Ok(bytes.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx).map_err(io_error)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_close(cx).map_err(io_error)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Tunnel for WebSocketBytes<S> {
    fn local_addr(&self) -> Option<SocketAddr> {
        self.local
    }

    fn is_tls(&self) -> bool {
        self.tls
    }

    fn poll_read_ready(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.poll_fill(cx)
    }
}
