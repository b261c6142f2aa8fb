//! The tokio driver: accepts sockets, runs one reader and one writer task per connection.
//!
//! The reader feeds bytes to the codec and frames to the [`Session`]; the writer sends
//! whatever accumulated in the [`Outbox`] in one write, so a burst of deliveries costs one
//! syscall. Heartbeats and the handshake timeout are the only clocks, and they live here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{timeout, Instant};
use warren_core::Broker;

use crate::codec::{decode_frame, parse_protocol_header, ProtocolHeader, PROTOCOL_HEADER_091};
use crate::outbox::{Outbox, READ_PAUSE_BYTES};
use crate::session::{Control, Session, SessionConfig, FRAME_MIN_SIZE};
use crate::stream::{Reader, Writer};
use warren_core::queue::now_ms;

/// Settings of the AMQP 0-9-1 listener.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// Protocol limits proposed to and enforced on clients.
    pub session: SessionConfig,
    /// How long a client has from connecting to connection.open.
    pub handshake_timeout: Duration,
    /// How long to wait for connection.close-ok after the broker closed a connection.
    pub close_timeout: Duration,
    /// Most connections this listener serves at once (`connection_max`); more are refused.
    pub connection_max: Option<usize>,
    /// TLS (AMQPS): every connection completes a TLS handshake first.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            session: SessionConfig::default(),
            handshake_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(3),
            connection_max: None,
            tls: None,
        }
    }
}

/// Accepts connections until `shutdown` turns true, then asks every connection to close
/// (320 CONNECTION_FORCED) and returns once they all ended.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: ListenerConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let config = Arc::new(config);
    let (alarm_tx, alarm_rx) = watch::channel(None);
    broker.subscribe_alarms(Box::new(move |reason| {
        let _ = alarm_tx.send(reason);
    }));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if config.connection_max.is_some_and(|max| connections.len() >= max) {
                        // RabbitMQ refuses at the socket too: the client sees the close.
                        tracing::warn!(%peer, "connection refused: connection_max is reached");
                        drop(stream);
                        continue;
                    }
                    let broker = Arc::clone(&broker);
                    let config = Arc::clone(&config);
                    let shutdown = shutdown.clone();
                    let alarms = alarm_rx.clone();
                    match config.tls.clone() {
                        None => {
                            connections.spawn(run_connection(stream, peer, broker, config, shutdown, alarms));
                        }
                        Some(tls) => {
                            connections.spawn(run_tls_connection(stream, peer, tls, broker, config, shutdown, alarms));
                        }
                    }
                }
                Err(error) => {
                    // Out of file descriptors and similar: back off instead of spinning.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Completes the TLS handshake (within the handshake timeout), then runs the connection.
async fn run_tls_connection(
    stream: TcpStream,
    peer: SocketAddr,
    tls: Arc<tokio_rustls::rustls::ServerConfig>,
    broker: Arc<Broker>,
    config: Arc<ListenerConfig>,
    shutdown: watch::Receiver<bool>,
    alarms: watch::Receiver<Option<String>>,
) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().ok();
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    match timeout(config.handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(stream)) => {
            let (reader, writer) = crate::stream::tls(stream);
            run_stream(
                reader, writer, peer, local, broker, config, shutdown, alarms,
            )
            .await;
        }
        Ok(Err(error)) => tracing::warn!(%peer, %error, "TLS handshake failed"),
        Err(_) => tracing::warn!(%peer, "TLS handshake timed out"),
    }
}

/// Runs one connection to its end.
pub async fn run_connection(
    stream: TcpStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<ListenerConfig>,
    shutdown: watch::Receiver<bool>,
    alarms: watch::Receiver<Option<String>>,
) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().ok();
    let (reader, writer) = crate::stream::plain(stream);
    run_stream(
        reader, writer, peer, local, broker, config, shutdown, alarms,
    )
    .await;
}

#[allow(clippy::too_many_arguments)]
async fn run_stream(
    mut reader: Reader,
    mut writer: Writer,
    peer: SocketAddr,
    local: Option<SocketAddr>,
    broker: Arc<Broker>,
    config: Arc<ListenerConfig>,
    mut shutdown: watch::Receiver<bool>,
    mut alarms: watch::Receiver<Option<String>>,
) {
    let mut header = [0u8; 8];
    match timeout(config.handshake_timeout, reader.read_exact(&mut header)).await {
        Ok(Ok(_)) => {}
        _ => return,
    }
    if parse_protocol_header(&header) != ProtocolHeader::Amqp091 {
        // Tell the client which protocol we speak, then close, as the spec asks.
        let _ = writer.write_all(&PROTOCOL_HEADER_091).await;
        let _ = writer.shutdown().await;
        return;
    }
    let outbox = Outbox::new(FRAME_MIN_SIZE);
    let from_loopback = peer.ip().is_loopback();
    let mut session = Session::new(
        broker,
        config.session.clone(),
        Arc::clone(&outbox),
        from_loopback,
    );
    if let Some(local) = local {
        session.set_addresses(peer, local);
    }
    session.set_tls(matches!(reader, Reader::Tls(_)));
    let connection_id = session.connection_id();
    tracing::debug!(connection = connection_id, %peer, "accepted AMQP 0-9-1 connection");
    let (heartbeat_tx, heartbeat_rx) = watch::channel(None);
    let writer_task = tokio::spawn(write_loop(writer, Arc::clone(&outbox), heartbeat_rx));

    read_loop(
        &mut reader,
        &mut session,
        &outbox,
        &config,
        &mut shutdown,
        &mut alarms,
        &heartbeat_tx,
    )
    .await;

    session.terminate();
    let _ = writer_task.await;
    tracing::debug!(connection = connection_id, %peer, "connection closed");
}

async fn read_loop(
    reader: &mut Reader,
    session: &mut Session,
    outbox: &Outbox,
    config: &ListenerConfig,
    shutdown: &mut watch::Receiver<bool>,
    alarms: &mut watch::Receiver<Option<String>>,
    heartbeat_tx: &watch::Sender<Option<Duration>>,
) {
    let mut buffer = BytesMut::new();
    let handshake_deadline = Instant::now() + config.handshake_timeout;
    let mut close_deadline: Option<Instant> = None;
    let mut shutting_down = false;
    let mut alarms_alive = true;
    loop {
        // An operator asked this connection to close (management API, warrenctl).
        if close_deadline.is_none() {
            if let Some(reason) = session.close_requested() {
                if session.close_by_operator(&reason) == Control::Close {
                    return;
                }
                close_deadline = Some(Instant::now() + config.close_timeout);
                continue;
            }
        }
        // A resource alarm stops reading publishing connections (consumers keep receiving
        // through the writer); the client is told with connection.blocked.
        let blocked =
            close_deadline.is_none() && session.is_publisher() && alarms.borrow().is_some();
        let reason = if blocked {
            alarms.borrow().clone()
        } else {
            None
        };
        session.set_blocked(reason.as_deref());
        // A client that does not read its replies is not read either (bounded memory).
        let paused = close_deadline.is_none() && outbox.pending_bytes() > READ_PAUSE_BYTES;
        let timeout_due = if close_deadline.is_none() {
            session.consumer_timeout_due()
        } else {
            None
        };
        let deadline = if let Some(deadline) = close_deadline {
            deadline
        } else if !session.is_open() && heartbeat_tx.borrow().is_none() {
            handshake_deadline
        } else {
            match session.heartbeat() {
                // Two missed heartbeats and the peer is considered dead (not while we are
                // the ones not reading).
                Some(interval) if !blocked && !paused => Instant::now() + interval * 2,
                _ => Instant::now() + Duration::from_secs(24 * 3600),
            }
        };
        let read = tokio::select! {
            read = reader.read_some(&mut buffer), if !blocked && !paused => read,
            _ = outbox.drained.notified(), if paused => continue,
            changed = alarms.changed(), if alarms_alive => {
                alarms_alive = changed.is_ok();
                continue;
            }
            // A first unacked delivery arms the consumer timeout below.
            _ = outbox.reader_wake.notified() => continue,
            _ = sleep_until_ms(timeout_due), if timeout_due.is_some() => {
                session.check_consumer_timeout(now_ms());
                continue;
            }
            _ = tokio::time::sleep_until(deadline) => {
                if close_deadline.is_none() && session.is_open() {
                    tracing::warn!(connection = session.connection_id(), "missed heartbeats from client");
                } else if close_deadline.is_none() {
                    tracing::warn!(connection = session.connection_id(), "handshake timed out");
                }
                return;
            }
            changed = shutdown.changed(), if !shutting_down => {
                shutting_down = true;
                if changed.is_err() || *shutdown.borrow() {
                    if session.force_close("shutdown") == Control::Close {
                        return;
                    }
                    close_deadline = Some(Instant::now() + config.close_timeout);
                }
                continue;
            }
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        loop {
            match decode_frame(&mut buffer, session.frame_max()) {
                Ok(Some(frame)) => {
                    let was_open = session.heartbeat();
                    let control = session.handle_frame(frame);
                    if was_open != session.heartbeat() {
                        let _ = heartbeat_tx.send(session.heartbeat());
                    }
                    if control == Control::Close {
                        session.end_of_batch();
                        return;
                    }
                    if session.is_closing() && close_deadline.is_none() {
                        close_deadline = Some(Instant::now() + config.close_timeout);
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    if session.handle_frame_error(error) == Control::Close {
                        return;
                    }
                    close_deadline = Some(Instant::now() + config.close_timeout);
                    // The stream can no longer be framed: wait for nothing but the timeout.
                    buffer.clear();
                    break;
                }
            }
        }
        session.end_of_batch();
        // A publisher whose socket always has data would otherwise never give its worker
        // thread back: the consumers it wakes (in tokio's LIFO slot) would starve. One read
        // (at most READ_CHUNK bytes) per turn keeps connections fair.
        tokio::task::yield_now().await;
    }
}

/// Sleeps until `at` on the `now_ms` clock (forever for `None`).
async fn sleep_until_ms(at: Option<u64>) {
    match at {
        Some(at) => {
            let wait = at.saturating_sub(now_ms());
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        None => std::future::pending().await,
    }
}

async fn write_loop(
    mut writer: Writer,
    outbox: Arc<Outbox>,
    mut heartbeat: watch::Receiver<Option<Duration>>,
) {
    let mut last_write = Instant::now();
    loop {
        if let Some(drained) = outbox.drain() {
            // Room is free again: let starved consumers' queues refill the buffer while this
            // batch is on its way.
            for sink in drained.starved {
                sink.queue.dispatch();
            }
            outbox.set_writing(drained.bytes.len());
            let written = writer.write_all(&drained.bytes).await;
            outbox.set_writing(0);
            if written.is_err() {
                outbox.close();
                return;
            }
            last_write = Instant::now();
            continue;
        }
        if outbox.is_closed() {
            let _ = writer.shutdown().await;
            return;
        }
        let interval = *heartbeat.borrow();
        match interval {
            Some(interval) => {
                let next_beat = last_write + interval / 2;
                tokio::select! {
                    _ = outbox.notify.notified() => {}
                    _ = heartbeat.changed() => {}
                    _ = tokio::time::sleep_until(next_beat) => {
                        outbox.send_heartbeat();
                    }
                }
            }
            None => {
                tokio::select! {
                    _ = outbox.notify.notified() => {}
                    changed = heartbeat.changed() => {
                        if changed.is_err() {
                            // The reader is gone; flush and stop once the outbox closes.
                            if outbox.is_closed() && outbox.is_empty() {
                                let _ = writer.shutdown().await;
                                return;
                            }
                            outbox.notify.notified().await;
                        }
                    }
                }
            }
        }
    }
}
