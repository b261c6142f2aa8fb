//! A client socket, plain TCP or TLS, and its two halves behind one small interface so every
//! listener's read and write loops serve both: TLS is added once, here and in
//! [`crate::accept::serve_connections`], not once per protocol.
//!
//! A plain reader keeps the idle-connection saving (no read buffer until the socket is
//! readable); a TLS reader reads through rustls into the buffer.

use std::net::SocketAddr;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::server::TlsStream;

/// A TLS server configuration, as listeners take it (rustls).
pub use tokio_rustls::rustls::ServerConfig as TlsServerConfig;

/// How much to read at a time.
pub const READ_CHUNK: usize = 64 * 1024;

/// An accepted client connection: plain TCP, or TLS with the handshake completed.
pub enum ClientStream {
    /// Plain TCP.
    Plain(TcpStream),
    /// TLS over TCP (boxed: the rustls state is large and most connections are plain).
    Tls(Box<TlsStream<TcpStream>>),
    /// A byte stream over another protocol (WebSocket, over plain TCP or TLS), read and
    /// written through `AsyncRead`/`AsyncWrite` like TLS.
    Tunnel(Box<dyn crate::websocket::Tunnel>),
}

impl ClientStream {
    /// The broker's end of the connection.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            ClientStream::Plain(stream) => stream.local_addr().ok(),
            ClientStream::Tls(stream) => stream.get_ref().0.local_addr().ok(),
            ClientStream::Tunnel(stream) => stream.local_addr(),
        }
    }

    /// Whether the connection runs over TLS.
    pub fn is_tls(&self) -> bool {
        match self {
            ClientStream::Plain(_) => false,
            ClientStream::Tls(_) => true,
            ClientStream::Tunnel(stream) => stream.is_tls(),
        }
    }

    /// The client's certificate (its end-entity certificate), when it presented one. The
    /// TLS configuration only lets a certificate through once it verified it against the
    /// CA (`ssl_options.verify = verify_peer`), so a certificate here is a verified one.
    pub fn peer_certificate(&self) -> Option<CertificateDer<'static>> {
        match self {
            ClientStream::Plain(_) | ClientStream::Tunnel(_) => None,
            ClientStream::Tls(stream) => stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|chain| chain.first())
                .map(|certificate| certificate.clone().into_owned()),
        }
    }

    /// Splits the connection into its read and write halves.
    pub fn split(self) -> (Reader, Writer) {
        match self {
            ClientStream::Plain(stream) => plain(stream),
            ClientStream::Tls(stream) => tls(*stream),
            ClientStream::Tunnel(stream) => {
                let (reader, writer) = tokio::io::split(stream);
                (
                    Reader::Tunnel(reader),
                    Writer::Tunnel(Box::new(tokio::sync::Mutex::new(writer))),
                )
            }
        }
    }
}

/// Reading and writing a connection whole, for a listener that serves it from one task which
/// reads and writes in turn (MQTT): a plain socket needs only `&TcpStream` for both, so it is
/// not split into two halves around an `Arc` (one allocation less per connection). TLS needs
/// `&mut` for both, which one task can give in turn.
impl ClientStream {
    /// Reads what is available into `buffer`, growing it by [`READ_CHUNK`] when it is nearly
    /// full; `Ok(0)` at the end of the stream.
    pub async fn read_some(&mut self, buffer: &mut BytesMut) -> std::io::Result<usize> {
        if buffer.capacity() - buffer.len() < READ_CHUNK / 4 {
            buffer.reserve(READ_CHUNK);
        }
        match self {
            ClientStream::Plain(stream) => stream.read_buf(buffer).await,
            ClientStream::Tls(stream) => stream.read_buf(buffer).await,
            ClientStream::Tunnel(stream) => stream.read_buf(buffer).await,
        }
    }

    /// Reads what is available into the spare capacity `buffer` already has (the caller
    /// sizes it: an idle MQTT connection over TLS or WebSocket waits with a small one);
    /// `Ok(0)` at the end of the stream or when `buffer` has no spare capacity.
    pub async fn read_into(&mut self, buffer: &mut BytesMut) -> std::io::Result<usize> {
        if buffer.capacity() == buffer.len() {
            return Ok(0);
        }
        match self {
            ClientStream::Plain(stream) => stream.read_buf(buffer).await,
            ClientStream::Tls(stream) => stream.read_buf(buffer).await,
            ClientStream::Tunnel(stream) => stream.read_buf(buffer).await,
        }
    }

    /// Waits until a read would return something, without a buffer to read into. Only a
    /// tunnel (WebSocket) waits here; plain and TLS connections are ready at once (a plain
    /// reader waits on the socket itself; rustls may hold decrypted bytes the socket's
    /// readiness does not show).
    pub fn poll_read_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self {
            ClientStream::Plain(_) | ClientStream::Tls(_) => std::task::Poll::Ready(Ok(())),
            ClientStream::Tunnel(stream) => stream.poll_read_ready(cx),
        }
    }

    /// Reads exactly `buffer.len()` bytes, no more: what follows stays in the stream (a
    /// protocol header read before the connection is handed to its protocol's driver).
    pub async fn read_exact(&mut self, buffer: &mut [u8]) -> std::io::Result<()> {
        match self {
            ClientStream::Plain(stream) => stream.read_exact(buffer).await.map(|_| ()),
            ClientStream::Tls(stream) => stream.read_exact(buffer).await.map(|_| ()),
            ClientStream::Tunnel(stream) => stream.read_exact(buffer).await.map(|_| ()),
        }
    }

    /// Writes what the socket takes now without waiting. TLS connections always answer
    /// `WouldBlock`: write them with [`ClientStream::write_all`].
    pub fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            ClientStream::Plain(stream) => stream.try_write(bytes),
            ClientStream::Tls(_) | ClientStream::Tunnel(_) => {
                Err(std::io::ErrorKind::WouldBlock.into())
            }
        }
    }

    /// Writes all of `bytes` (and flushes TLS), waiting for the socket as needed.
    pub async fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            ClientStream::Plain(stream) => stream.write_all(bytes).await,
            ClientStream::Tls(stream) => {
                stream.write_all(bytes).await?;
                stream.flush().await
            }
            ClientStream::Tunnel(stream) => {
                stream.write_all(bytes).await?;
                stream.flush().await
            }
        }
    }

    /// Shuts the write side down (FIN; close_notify on TLS).
    pub async fn shutdown(&mut self) {
        match self {
            ClientStream::Plain(stream) => {
                let _ = socket2::SockRef::from(&*stream).shutdown(std::net::Shutdown::Write);
            }
            // Boxed: the TLS shutdown future would otherwise be part of every plain
            // connection's task.
            ClientStream::Tls(stream) => {
                let _ = Box::pin(stream.shutdown()).await;
            }
            ClientStream::Tunnel(stream) => {
                let _ = Box::pin(stream.shutdown()).await;
            }
        }
    }
}

/// The read half of a client connection.
pub enum Reader {
    /// Plain TCP.
    Plain(OwnedReadHalf),
    /// TLS over TCP.
    Tls(ReadHalf<TlsStream<TcpStream>>),
    /// A tunnelled byte stream (WebSocket).
    Tunnel(ReadHalf<Box<dyn crate::websocket::Tunnel>>),
}

/// The write half of a client connection, shared by the writer task and the reader (which
/// writes small replies itself when the writer is idle; the outbox lets one write at a time).
pub enum Writer {
    /// Plain TCP.
    Plain(OwnedWriteHalf),
    /// TLS over TCP. rustls needs `&mut` to write, hence the lock (never contended: the
    /// outbox admits one writer at a time).
    Tls(Box<tokio::sync::Mutex<WriteHalf<TlsStream<TcpStream>>>>),
    /// A tunnelled byte stream (WebSocket), locked like TLS.
    Tunnel(Box<tokio::sync::Mutex<WriteHalf<Box<dyn crate::websocket::Tunnel>>>>),
}

/// Splits a plain socket.
pub fn plain(stream: TcpStream) -> (Reader, Writer) {
    let (reader, writer) = stream.into_split();
    (Reader::Plain(reader), Writer::Plain(writer))
}

/// Splits a TLS stream.
pub fn tls(stream: TlsStream<TcpStream>) -> (Reader, Writer) {
    let (reader, writer) = tokio::io::split(stream);
    (
        Reader::Tls(reader),
        Writer::Tls(Box::new(tokio::sync::Mutex::new(writer))),
    )
}

impl Reader {
    /// Asks the kernel to acknowledge what was read at once rather than delay the ACK
    /// (Linux `TCP_QUICKACK`, which does not stick: call it after each read). A client that
    /// leaves Nagle's algorithm on (no TCP_NODELAY) holds each small write until its previous
    /// one is acknowledged; when the broker has nothing to answer with, that waits for the
    /// delayed-ACK timer (40 ms) every time. Plain TCP only; elsewhere a no-op.
    pub fn acknowledge_now(&self) {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Reader::Plain(reader) = self {
            let _ = socket2::SockRef::from(reader.as_ref()).set_tcp_quickack(true);
        }
    }

    /// Fills `buffer` exactly.
    pub async fn read_exact(&mut self, buffer: &mut [u8]) -> std::io::Result<()> {
        match self {
            Reader::Plain(reader) => reader.read_exact(buffer).await.map(|_| ()),
            Reader::Tls(reader) => reader.read_exact(buffer).await.map(|_| ()),
            Reader::Tunnel(reader) => reader.read_exact(buffer).await.map(|_| ()),
        }
    }

    /// Reads what is available into `buffer` (for discarding what a closing client still
    /// sends); `Ok(0)` at the end of the stream.
    pub async fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Reader::Plain(reader) => reader.read(buffer).await,
            Reader::Tls(reader) => reader.read(buffer).await,
            Reader::Tunnel(reader) => reader.read(buffer).await,
        }
    }

    /// Reads what is available into `buffer`. An idle plain connection holds no read buffer:
    /// when everything read was consumed the buffer is released, and a new one is allocated
    /// only once the socket is readable again. This keeps 10,000 idle connections cheap.
    pub async fn read_some(&mut self, buffer: &mut BytesMut) -> std::io::Result<usize> {
        let reader = match self {
            Reader::Plain(reader) => reader,
            Reader::Tls(reader) => {
                if buffer.capacity() - buffer.len() < READ_CHUNK / 4 {
                    buffer.reserve(READ_CHUNK);
                }
                return reader.read_buf(buffer).await;
            }
            Reader::Tunnel(reader) => {
                if buffer.capacity() - buffer.len() < READ_CHUNK / 4 {
                    buffer.reserve(READ_CHUNK);
                }
                return reader.read_buf(buffer).await;
            }
        };
        loop {
            if buffer.is_empty() {
                *buffer = BytesMut::new();
                reader.readable().await?;
                buffer.reserve(READ_CHUNK);
            } else if buffer.capacity() - buffer.len() < READ_CHUNK / 4 {
                buffer.reserve(READ_CHUNK);
            }
            match reader.try_read_buf(buffer) {
                Ok(read) => return Ok(read),
                // Readiness was stale: wait for the socket instead of spinning on a partial
                // frame.
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                    reader.readable().await?;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

impl Writer {
    /// Writes all of `bytes`, waiting for the socket as needed.
    pub async fn write_all(&self, bytes: &[u8]) -> std::io::Result<()> {
        match self {
            Writer::Plain(writer) => {
                let mut written = 0;
                while written < bytes.len() {
                    writer.writable().await?;
                    match writer.try_write(&bytes[written..]) {
                        Ok(n) => written += n,
                        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(error) => return Err(error),
                    }
                }
                Ok(())
            }
            // Boxed: the lock and TLS write futures would otherwise be part of every plain
            // connection's task, idle or not.
            Writer::Tls(writer) => {
                Box::pin(async move {
                    let mut writer = writer.lock().await;
                    writer.write_all(bytes).await?;
                    writer.flush().await
                })
                .await
            }
            Writer::Tunnel(writer) => {
                Box::pin(async move {
                    let mut writer = writer.lock().await;
                    writer.write_all(bytes).await?;
                    writer.flush().await
                })
                .await
            }
        }
    }

    /// Writes what the socket takes now without waiting. TLS connections always answer
    /// `WouldBlock`: their writes go through the writer task.
    pub fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            Writer::Plain(writer) => writer.try_write(bytes),
            Writer::Tls(_) | Writer::Tunnel(_) => Err(std::io::ErrorKind::WouldBlock.into()),
        }
    }

    /// Shuts the write side down (FIN; close_notify on TLS) while the reader may still hold
    /// the socket.
    pub async fn shutdown(&self) {
        match self {
            Writer::Plain(writer) => {
                let _ = socket2::SockRef::from(writer.as_ref()).shutdown(std::net::Shutdown::Write);
            }
            Writer::Tls(writer) => {
                let _ = writer.lock().await.shutdown().await;
            }
            Writer::Tunnel(writer) => {
                let _ = writer.lock().await.shutdown().await;
            }
        }
    }
}
