//! The tokio driver: the core's shared accept loop, then one task per connection that
//! reads frames into the [`Session`], pumps deliveries while subscriptions have credit,
//! writes everything pending in one write, and sends heartbeats.
//!
//! A caught-up subscription waits on its stream's commit watch through a small forwarding
//! task that wakes the connection; publish confirms wake it through the session's confirm
//! queue.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use warren_core::accept::{serve_connections, AcceptConfig};
use warren_core::connections::{ConnectionHandle, ConnectionInfo};
use warren_core::stream::{ClientStream, TlsServerConfig};
use warren_core::Broker;

use crate::codec::{code, decode, split_frame, FrameError};
use crate::session::{Control, Session, SessionConfig, SubscriptionChange};

/// Settings of the stream listener.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// What connections may do and are offered.
    pub session: SessionConfig,
    /// How long a client has from connecting to a successful Open.
    pub login_timeout: Duration,
    /// Most connections this listener serves at once.
    pub connection_max: Option<usize>,
    /// TLS: every connection completes a handshake first.
    pub tls: Option<Arc<TlsServerConfig>>,
}

impl Default for ListenerConfig {
    fn default() -> ListenerConfig {
        ListenerConfig {
            session: SessionConfig::default(),
            login_timeout: Duration::from_secs(10),
            connection_max: None,
            tls: None,
        }
    }
}

/// Output bytes gathered before a write while deliveries are being pumped.
const WRITE_BUDGET: usize = 512 * 1024;

/// Accepts stream protocol connections until `shutdown` turns true, then closes each
/// connection and returns once they all ended.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: ListenerConfig,
    shutdown: watch::Receiver<bool>,
) {
    let config = Arc::new(config);
    let accept = AcceptConfig::new(
        ("stream", "stream/ssl"),
        config.tls.clone(),
        config.connection_max,
        config.login_timeout,
    );
    let connection_shutdown = shutdown.clone();
    serve_connections(listener, accept, shutdown, move |stream, peer| {
        run_connection(
            stream,
            peer,
            Arc::clone(&broker),
            Arc::clone(&config),
            connection_shutdown.clone(),
        )
    })
    .await;
}

/// Aborts the commit-watch forwarders of a connection when it ends.
#[derive(Default)]
struct Forwarders(HashMap<u8, JoinHandle<()>>);

impl Drop for Forwarders {
    fn drop(&mut self) {
        for (_, task) in self.0.drain() {
            task.abort();
        }
    }
}

fn registration(
    broker: &Broker,
    session: &Session,
    peer: SocketAddr,
    local: SocketAddr,
    tls: bool,
    wake: &Arc<Notify>,
    close_requested: &Arc<AtomicBool>,
) -> Option<Result<ConnectionHandle, warren_core::resource_limits::ConnectionLimitReached>> {
    let (user, vhost) = session.opened()?;
    let mut client_properties = warren_core::value::Table::new();
    for (key, value) in session.client_properties() {
        client_properties.insert(
            key.clone(),
            warren_core::value::Value::string(value.clone()),
        );
    }
    let connection_name = session
        .client_properties()
        .iter()
        .find(|(k, _)| k == "connection_name")
        .map(|(_, v)| v.clone());
    let (wake, flag) = (Arc::clone(wake), Arc::clone(close_requested));
    Some(
        broker.register_connection(
            ConnectionInfo {
                id: session.connection_id(),
                protocol: "RabbitMQ Stream".to_owned(),
                user: user.to_owned(),
                vhost: vhost.to_owned(),
                peer,
                local,
                client_properties,
                connection_name,
                tls,
                frame_max: session.frame_max(),
                channel_max: 0,
                heartbeat: u16::try_from(session.heartbeat()).unwrap_or(u16::MAX),
                connected_at: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            },
            Box::new(move || {
                flag.store(true, Ordering::Release);
                wake.notify_one();
            }),
        ),
    )
}

/// Runs one connection to its end.
pub async fn run_connection(
    stream: ClientStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<ListenerConfig>,
    mut shutdown: watch::Receiver<bool>,
) {
    let local = stream.local_addr().unwrap_or(peer);
    let tls = stream.is_tls();
    let certificate = stream.peer_certificate();
    let (mut reader, writer) = stream.split();
    let wake = Arc::new(Notify::new());
    let close_requested = Arc::new(AtomicBool::new(false));
    let mut session = Session::new(
        Arc::clone(&broker),
        Arc::new(config.session.clone()),
        peer,
        local,
        Arc::clone(&wake),
    );
    if let Some(certificate) = &certificate {
        session.set_certificate(certificate);
    }
    let mut forwarders = Forwarders::default();
    let mut registered: Option<ConnectionHandle> = None;
    let mut buffer = BytesMut::with_capacity(64 * 1024);
    let login_deadline = Instant::now() + config.login_timeout;
    let mut last_read = Instant::now();
    let mut last_write = Instant::now();
    let mut closing = false;
    tracing::debug!(%peer, "accepted stream connection");
    loop {
        if close_requested.load(Ordering::Acquire) && !closing {
            session.close(code::OK, "closed by an operator");
            closing = true;
        }
        session.take_confirms();
        let more = !closing && session.pump(WRITE_BUDGET);
        for change in session.take_changes() {
            match change {
                SubscriptionChange::Started(id, mut committed) => {
                    let wake = Arc::clone(&wake);
                    let task = tokio::spawn(async move {
                        while committed.changed().await.is_ok() {
                            wake.notify_one();
                        }
                        // The stream is gone: one last wake so the session notices.
                        wake.notify_one();
                    });
                    if let Some(old) = forwarders.0.insert(id, task) {
                        old.abort();
                    }
                }
                SubscriptionChange::Ended(id) => {
                    if let Some(task) = forwarders.0.remove(&id) {
                        task.abort();
                    }
                }
            }
        }
        if !session.out.is_empty() {
            if writer.write_all(&session.out).await.is_err() {
                break;
            }
            session.out.clear();
            last_write = Instant::now();
        }
        if closing {
            break;
        }
        if registered.is_none() && session.opened().is_some() {
            match registration(&broker, &session, peer, local, tls, &wake, &close_requested) {
                Some(Ok(handle)) => registered = Some(handle),
                // Another connection took the last place since the open was checked.
                Some(Err(_)) => break,
                None => {}
            }
        }
        if more {
            // Deliveries are waiting: read what the client sent meanwhile without blocking,
            // then go on delivering.
            tokio::task::yield_now().await;
        }
        let heartbeat = Duration::from_secs(u64::from(session.heartbeat()));
        let now = Instant::now();
        let deadline = if session.opened().is_none() {
            login_deadline
        } else if heartbeat.is_zero() {
            now + Duration::from_secs(3600)
        } else {
            (last_write + heartbeat).min(last_read + heartbeat * 2)
        };
        tokio::select! {
            biased;
            _ = shutdown.changed() => {
                session.close(code::OK, "broker is shutting down");
                closing = true;
            }
            read = reader.read_some(&mut buffer) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        last_read = Instant::now();
                        loop {
                            match split_frame(&mut buffer, session.frame_max()) {
                                Ok(Some(frame)) => {
                                    let control = match decode(frame) {
                                        Ok(request) => session.handle(request),
                                        Err(error) => {
                                            tracing::info!(%peer, %error, "malformed stream frame");
                                            session.close(code::UNKNOWN_FRAME, &error.to_string());
                                            Control::Close
                                        }
                                    };
                                    if control == Control::Close {
                                        closing = true;
                                        break;
                                    }
                                }
                                Ok(None) => break,
                                Err(FrameError::TooLarge { size, limit }) => {
                                    tracing::info!(%peer, size, limit, "stream frame too large");
                                    session.close(code::FRAME_TOO_LARGE, "frame too large");
                                    closing = true;
                                    break;
                                }
                            }
                        }
                    }
                }
            }
            _ = wake.notified() => session.streams_moved(),
            _ = tokio::time::sleep_until(deadline), if !more => {
                let now = Instant::now();
                if session.opened().is_none() && now >= login_deadline {
                    tracing::info!(%peer, "stream connection closed: no Open within the login timeout");
                    break;
                }
                if !heartbeat.is_zero() && now >= last_read + heartbeat * 2 {
                    tracing::info!(%peer, "stream connection closed: missed heartbeats");
                    break;
                }
                crate::codec::encode::heartbeat(&mut session.out);
            }
            _ = std::future::ready(()), if more => {}
        }
    }
    drop(forwarders);
    drop(registered);
    tracing::debug!(%peer, "stream connection closed");
}
