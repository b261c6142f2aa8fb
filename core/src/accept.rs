//! Every listener's accept loop, plain or TLS: [`serve_connections`] accepts sockets, refuses
//! those beyond `connection_max`, completes the TLS handshake when the listener has TLS, and
//! runs each connection on its own task until shutdown, when it waits for them all to end.
//!
//! When `accept` fails, [`accept_failed`] says how long to back off, so running out of file
//! descriptors never spins a core or stops the connections already open from being served.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio_rustls::rustls::ServerConfig;

use crate::stream::ClientStream;

/// The connection tasks of one listener, counted rather than kept in a `JoinSet`: a set entry
/// per connection is a few hundred bytes that an idle MQTT device would pay for. Dropping the
/// accept loop therefore does not abort its connections; shutdown closes them through the
/// `shutdown` signal they follow, and the loop waits for the count to reach zero.
#[derive(Default)]
struct LiveConnections {
    count: AtomicUsize,
    ended: Notify,
}

/// Decrements [`LiveConnections`] when a connection task ends, however it ends.
struct LiveGuard(Arc<LiveConnections>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.ended.notify_waiters();
        }
    }
}

pin_project_lite::pin_project! {
    /// A connection task with its [`LiveGuard`]. A struct, not an `async` block awaiting the
    /// task: rustc lays out a captured future and the awaited one separately, which would
    /// double every idle connection's task (measured: +2.4 KiB per idle MQTT connection).
    struct Counted<F> {
        #[pin]
        task: F,
        _guard: LiveGuard,
    }
}

impl<F: Future<Output = ()>> Future for Counted<F> {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        self.project().task.poll(cx)
    }
}

impl LiveConnections {
    fn spawn(self: &Arc<Self>, task: impl Future<Output = ()> + Send + 'static) {
        self.count.fetch_add(1, Ordering::AcqRel);
        tokio::spawn(Counted {
            task,
            _guard: LiveGuard(Arc::clone(self)),
        });
    }

    fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    async fn all_ended(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before the count is read, so a last task ending in between is seen.
            ended.as_mut().enable();
            if self.len() == 0 {
                return;
            }
            ended.await;
        }
    }
}

/// How a listener accepts connections, whatever its protocol.
#[derive(Clone)]
pub struct AcceptConfig {
    /// The protocol's name in log lines (`amqp`, `amqps`, `mqtt`, `mqtts`, `stomp`, ...).
    pub protocol: &'static str,
    /// Most connections this listener serves at once (`connection_max`); more are closed
    /// as soon as they are accepted, as RabbitMQ does.
    pub connection_max: Option<usize>,
    /// TLS: every connection completes a handshake with this configuration before the
    /// protocol sees it.
    pub tls: Option<Arc<ServerConfig>>,
    /// How long a client has to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// WebSocket: every connection completes a WebSocket handshake (after TLS, when set)
    /// and is served as a [`ClientStream::Tunnel`] (Web-MQTT, Web-STOMP).
    pub websocket: Option<Arc<crate::websocket::WebSocketConfig>>,
}

impl AcceptConfig {
    /// A listener's accept settings, logged as `plain` or, with `tls`, as `secure` (e.g.
    /// `mqtt` / `mqtts`).
    pub fn new(
        (plain, secure): (&'static str, &'static str),
        tls: Option<Arc<ServerConfig>>,
        connection_max: Option<usize>,
        handshake_timeout: Duration,
    ) -> AcceptConfig {
        AcceptConfig {
            protocol: if tls.is_some() { secure } else { plain },
            connection_max,
            tls,
            handshake_timeout,
            websocket: None,
        }
    }

    /// The same listener speaking WebSocket, logged as `protocol` (`web-mqtt`, ...).
    pub fn with_websocket(
        mut self,
        protocol: &'static str,
        websocket: crate::websocket::WebSocketConfig,
    ) -> AcceptConfig {
        self.protocol = protocol;
        self.websocket = Some(Arc::new(websocket));
        self
    }
}

/// Accepts connections on `listener` until `shutdown` turns true, running `serve` on its own
/// task for each (after the TLS handshake, when `config.tls` is set), then waits for every
/// connection to end; connections see the same `shutdown` and close themselves.
///
/// A connection beyond `connection_max` is closed at once; a failed TLS handshake is logged
/// and the socket closed; a failed accept backs off ([`accept_failed`]) and leaves the open
/// connections alone.
pub async fn serve_connections<F, Fut>(
    listener: TcpListener,
    config: AcceptConfig,
    mut shutdown: watch::Receiver<bool>,
    serve: F,
) where
    F: Fn(ClientStream, SocketAddr) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let serve = Arc::new(serve);
    let acceptor = config.tls.clone().map(tokio_rustls::TlsAcceptor::from);
    let connections = Arc::new(LiveConnections::default());
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if config.connection_max.is_some_and(|max| connections.len() >= max) {
                        tracing::warn!(
                            protocol = config.protocol,
                            %peer,
                            "connection refused: connection_max is reached"
                        );
                        drop(stream);
                        continue;
                    }
                    let _ = stream.set_nodelay(true);
                    let serve = Arc::clone(&serve);
                    match (&acceptor, &config.websocket) {
                        (None, None) => {
                            connections.spawn(serve(ClientStream::Plain(stream), peer));
                        }
                        (acceptor, Some(websocket)) => {
                            let acceptor = acceptor.clone();
                            let websocket = Arc::clone(websocket);
                            let (protocol, timeout) = (config.protocol, config.handshake_timeout);
                            let stopping = shutdown.clone();
                            let live = Arc::clone(&connections);
                            connections.spawn(async move {
                                let handshake = websocket_handshake(stream, acceptor, &websocket);
                                let outcome = handshake_within(timeout, stopping, handshake).await;
                                match outcome {
                                    Some(Ok(Ok(stream))) => live.spawn(serve(stream, peer)),
                                    Some(Ok(Err(error))) => {
                                        tracing::warn!(protocol, %peer, "{error}");
                                    }
                                    Some(Err(_)) => {
                                        tracing::warn!(protocol, %peer, "WebSocket handshake timed out");
                                    }
                                    None => {}
                                }
                            });
                        }
                        (Some(acceptor), None) => {
                            let handshake = acceptor.accept(stream);
                            let (protocol, timeout) = (config.protocol, config.handshake_timeout);
                            let stopping = shutdown.clone();
                            let live = Arc::clone(&connections);
                            connections.spawn(async move {
                                match handshake_within(timeout, stopping, handshake).await {
                                    Some(Ok(Ok(stream))) => {
                                        live.spawn(serve(ClientStream::Tls(Box::new(stream)), peer));
                                    }
                                    Some(Ok(Err(error))) => {
                                        tracing::warn!(protocol, %peer, %error, "TLS handshake failed");
                                    }
                                    Some(Err(_)) => {
                                        tracing::warn!(protocol, %peer, "TLS handshake timed out");
                                    }
                                    None => {}
                                }
                            });
                        }
                    }
                }
                Err(error) => {
                    // Out of file descriptors and similar: back off instead of spinning,
                    // and keep serving the connections already open.
                    tokio::time::sleep(accept_failed(config.protocol, &error)).await;
                }
            },
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    connections.all_ended().await;
}

/// Runs a TLS or WebSocket handshake for at most `timeout`; `None` when shutdown began first
/// (a handshake in progress does not hold up shutdown).
///
/// The connection is served by a task of its own, spawned once the handshake is done, not by
/// the task that ran it: a task keeps room for the largest state of its future for as long as
/// it lives, and the handshake's (rustls' handshake state, tungstenite's HTTP parser, the
/// timer) is several times the size of an idle connection's. Measured on Web-MQTT: ~10 KiB
/// per idle connection in a debug build.
async fn handshake_within<T>(
    timeout: Duration,
    mut stopping: watch::Receiver<bool>,
    handshake: impl Future<Output = T>,
) -> Option<Result<T, tokio::time::error::Elapsed>> {
    tokio::select! {
        result = tokio::time::timeout(timeout, handshake) => Some(result),
        _ = stopping.changed() => None,
    }
}

/// TLS (when the listener has it), then the WebSocket handshake.
async fn websocket_handshake(
    stream: tokio::net::TcpStream,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    websocket: &crate::websocket::WebSocketConfig,
) -> Result<ClientStream, String> {
    let local = stream.local_addr().ok();
    match acceptor {
        None => {
            let tunnel = crate::websocket::accept(stream, websocket, local, false).await?;
            Ok(ClientStream::Tunnel(Box::new(tunnel)))
        }
        Some(acceptor) => {
            let stream = acceptor
                .accept(stream)
                .await
                .map_err(|error| format!("TLS handshake failed: {error}"))?;
            let tunnel = crate::websocket::accept(stream, websocket, local, true).await?;
            Ok(ClientStream::Tunnel(Box::new(tunnel)))
        }
    }
}

/// `EMFILE`: the process is out of file descriptors (the same number on Linux, the BSDs
/// and macOS).
const EMFILE: i32 = 24;
/// `ENFILE`: the system is out of file descriptors.
const ENFILE: i32 = 23;

/// How long to stop accepting after running out of file descriptors: long enough for some
/// connections to close, short enough that new clients wait in the backlog rather than
/// time out.
pub const OUT_OF_DESCRIPTORS_BACKOFF: Duration = Duration::from_millis(200);

/// How long to stop accepting after any other accept error.
pub const OTHER_ERROR_BACKOFF: Duration = Duration::from_millis(20);

/// When the last out-of-descriptors line was logged (seconds since the epoch), so a
/// sustained shortage logs once a second, not on every retry.
static LAST_LOGGED: AtomicU64 = AtomicU64::new(0);

/// Whether an accept error means the process or system ran out of file descriptors.
pub fn is_out_of_descriptors(error: &std::io::Error) -> bool {
    matches!(error.raw_os_error(), Some(EMFILE | ENFILE))
}

/// Logs a failed accept on `protocol`'s listener and returns how long to back off before
/// accepting again. Existing connections are not touched.
pub fn accept_failed(protocol: &str, error: &std::io::Error) -> Duration {
    if is_out_of_descriptors(error) {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if LAST_LOGGED.swap(now, Ordering::Relaxed) != now {
            tracing::warn!(
                protocol,
                %error,
                "out of file descriptors: refusing new connections for now, serving the open \
                 ones (raise the open-file limit, `ulimit -n`, to accept more)"
            );
        }
        OUT_OF_DESCRIPTORS_BACKOFF
    } else {
        tracing::warn!(protocol, %error, "accept failed");
        OTHER_ERROR_BACKOFF
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn connections_beyond_connection_max_are_closed_and_shutdown_waits_for_the_rest() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (shutdown_tx, shutdown) = watch::channel(false);
        let config = AcceptConfig {
            protocol: "test",
            connection_max: Some(1),
            tls: None,
            handshake_timeout: Duration::from_secs(5),
            websocket: None,
        };
        let connection_shutdown = shutdown.clone();
        let server = tokio::spawn(serve_connections(
            listener,
            config,
            shutdown,
            move |stream, _peer| {
                let mut shutdown = connection_shutdown.clone();
                async move {
                    // Greets the client, then holds the connection until shutdown.
                    let (_reader, writer) = stream.split();
                    writer.write_all(b"hi").await.unwrap();
                    let _ = shutdown.changed().await;
                }
            },
        ));
        let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut greeting = [0u8; 2];
        first.read_exact(&mut greeting).await.unwrap();
        assert_eq!(&greeting, b"hi");
        let mut second = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut rest = Vec::new();
        // Closed without a word: the first connection holds the only slot.
        assert_eq!(second.read_to_end(&mut rest).await.unwrap(), 0);
        shutdown_tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve_connections returns once its connections ended")
            .unwrap();
        first.write_all(b"x").await.ok();
        assert_eq!(first.read_to_end(&mut rest).await.unwrap_or(0), 0);
    }

    #[test]
    fn running_out_of_descriptors_backs_off_longer_than_other_errors() {
        let emfile = std::io::Error::from_raw_os_error(EMFILE);
        let enfile = std::io::Error::from_raw_os_error(ENFILE);
        let other = std::io::Error::from(std::io::ErrorKind::ConnectionAborted);
        assert!(is_out_of_descriptors(&emfile) && is_out_of_descriptors(&enfile));
        assert!(!is_out_of_descriptors(&other));
        assert_eq!(accept_failed("amqp", &emfile), OUT_OF_DESCRIPTORS_BACKOFF);
        assert_eq!(accept_failed("mqtt", &enfile), OUT_OF_DESCRIPTORS_BACKOFF);
        assert_eq!(accept_failed("mqtt", &other), OTHER_ERROR_BACKOFF);
    }
}
