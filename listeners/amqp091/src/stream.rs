//! The two halves of a client socket, plain TCP or TLS (AMQPS), behind one small interface
//! so the driver's read and write loops serve both.
//!
//! A plain reader keeps the idle-connection saving (no read buffer until the socket is
//! readable); a TLS reader reads through rustls into the buffer.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio_rustls::server::TlsStream;

/// How much to read at a time.
pub(crate) const READ_CHUNK: usize = 64 * 1024;

/// The read half of a client connection.
pub enum Reader {
    /// Plain TCP.
    Plain(OwnedReadHalf),
    /// TLS over TCP.
    Tls(ReadHalf<TlsStream<TcpStream>>),
}

/// The write half of a client connection, shared by the writer task and the reader (which
/// writes small replies itself when the writer is idle; the outbox lets one write at a time).
pub enum Writer {
    /// Plain TCP.
    Plain(OwnedWriteHalf),
    /// TLS over TCP. rustls needs `&mut` to write, hence the lock (never contended: the
    /// outbox admits one writer at a time).
    Tls(tokio::sync::Mutex<WriteHalf<TlsStream<TcpStream>>>),
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
        Writer::Tls(tokio::sync::Mutex::new(writer)),
    )
}

impl Reader {
    /// Fills `buffer` exactly.
    pub async fn read_exact(&mut self, buffer: &mut [u8]) -> std::io::Result<()> {
        match self {
            Reader::Plain(reader) => reader.read_exact(buffer).await.map(|_| ()),
            Reader::Tls(reader) => reader.read_exact(buffer).await.map(|_| ()),
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
            Writer::Tls(writer) => {
                let mut writer = writer.lock().await;
                writer.write_all(bytes).await?;
                writer.flush().await
            }
        }
    }

    /// Writes what the socket takes now without waiting. TLS connections always answer
    /// `WouldBlock`: their writes go through the writer task.
    pub fn try_write(&self, bytes: &[u8]) -> std::io::Result<usize> {
        match self {
            Writer::Plain(writer) => writer.try_write(bytes),
            Writer::Tls(_) => Err(std::io::ErrorKind::WouldBlock.into()),
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
        }
    }
}
