//! The tokio driver: accepts sockets, runs one reader and one writer task per connection.
//!
//! The reader feeds bytes to the codec and frames to the [`Session`]; the writer sends
//! whatever accumulated in the [`Outbox`] in one write, so a burst of deliveries costs one
//! syscall. Heartbeats and the handshake timeout are the only clocks, and they live here.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{timeout, Instant};
use warren_core::flow::PublisherFlow;
use warren_core::Broker;

use crate::codec::{decode_frame, parse_protocol_header, ProtocolHeader, PROTOCOL_HEADER_091};
use crate::outbox::{Drained, Outbox, READ_PAUSE_BYTES};
use crate::session::{Control, Session, SessionConfig, CLOSING_TIMEOUT, FRAME_MIN_SIZE};
use tokio_rustls::rustls::pki_types::CertificateDer;
use warren_core::accept::{serve_connections, AcceptConfig};
use warren_core::queue::now_ms;
use warren_core::stream::{ClientStream, Reader, Writer};

/// Settings of the AMQP 0-9-1 listener.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// Protocol limits proposed to and enforced on clients.
    pub session: SessionConfig,
    /// How long a client has from connecting to connection.open.
    pub handshake_timeout: Duration,
    /// How long to wait for connection.close-ok after the broker closed a connection.
    pub close_timeout: Duration,
    /// How long the socket stays open after close-ok was sent to a client that closed its
    /// connection, waiting for the client to close it (shortened to the heartbeat interval,
    /// see [`Session::closing_timeout`]).
    pub closing_timeout: Duration,
    /// Most connections this listener serves at once (`connection_max`); more are refused.
    pub connection_max: Option<usize>,
    /// TLS (AMQPS): every connection completes a TLS handshake first.
    pub tls: Option<Arc<tokio_rustls::rustls::ServerConfig>>,
    /// Where connections that start with an AMQP 1.0 header go (the port is shared, as in
    /// RabbitMQ). `None` answers them with the 0-9-1 header and closes.
    pub amqp10: Option<ProtocolHandoff>,
}

/// The future serving one handed-off connection.
pub type HandoffFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Starts serving a handed-off connection: the stream (plain, or TLS with the handshake
/// done), the peer, the 8-byte protocol header already read from it, and the shutdown
/// signal.
pub type HandoffFn =
    dyn Fn(ClientStream, SocketAddr, [u8; 8], watch::Receiver<bool>) -> HandoffFuture + Send + Sync;

/// Serves connections of another protocol on this port (AMQP 1.0).
#[derive(Clone)]
pub struct ProtocolHandoff(pub Arc<HandoffFn>);

impl std::fmt::Debug for ProtocolHandoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProtocolHandoff")
    }
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            session: SessionConfig::default(),
            handshake_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(3),
            closing_timeout: CLOSING_TIMEOUT,
            connection_max: None,
            amqp10: None,
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
    shutdown: watch::Receiver<bool>,
) {
    let config = Arc::new(config);
    let alarm_rx = broker.alarm_watch();
    let accept = AcceptConfig::new(
        ("amqp", "amqps"),
        config.tls.clone(),
        config.connection_max,
        config.handshake_timeout,
    );
    let connection_shutdown = shutdown.clone();
    serve_connections(listener, accept, shutdown, move |stream, peer| {
        run_client(
            stream,
            peer,
            Arc::clone(&broker),
            Arc::clone(&config),
            connection_shutdown.clone(),
            alarm_rx.clone(),
        )
    })
    .await;
}

/// Runs one accepted connection (plain or TLS) to its end.
async fn run_client(
    stream: ClientStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<ListenerConfig>,
    shutdown: watch::Receiver<bool>,
    alarms: watch::Receiver<Option<String>>,
) {
    match stream {
        ClientStream::Plain(stream) => {
            run_connection(stream, peer, broker, config, shutdown, alarms).await
        }
        // AMQP 0-9-1 is served over TCP and TLS only.
        ClientStream::Tunnel(_) => {}
        ClientStream::Tls(mut tls) => {
            let mut header = [0u8; 8];
            match timeout(config.handshake_timeout, tls.read_exact(&mut header)).await {
                Ok(Ok(_)) => {}
                _ => return,
            }
            let stream = ClientStream::Tls(tls);
            // AMQPS serves AMQP 1.0 too, told apart by the header as on the plain port.
            if let (ProtocolHeader::Amqp10 { protocol_id: 0 | 3 }, Some(handoff)) =
                (parse_protocol_header(&header), &config.amqp10)
            {
                return (handoff.0)(stream, peer, header, shutdown).await;
            }
            let local = stream.local_addr();
            let certificate = stream.peer_certificate();
            let (reader, writer) = stream.split();
            let connection = Connection {
                header,
                peer,
                local,
                certificate,
            };
            run_stream(reader, writer, connection, broker, config, shutdown, alarms).await;
        }
    }
}

/// Runs one connection to its end. A connection that starts with an AMQP 1.0 header goes to
/// the AMQP 1.0 hand-off when one is configured.
pub async fn run_connection(
    mut stream: TcpStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<ListenerConfig>,
    shutdown: watch::Receiver<bool>,
    alarms: watch::Receiver<Option<String>>,
) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().ok();
    let mut header = [0u8; 8];
    match timeout(config.handshake_timeout, stream.read_exact(&mut header)).await {
        Ok(Ok(_)) => {}
        _ => return,
    }
    if let (ProtocolHeader::Amqp10 { protocol_id: 0 | 3 }, Some(handoff)) =
        (parse_protocol_header(&header), &config.amqp10)
    {
        return (handoff.0)(ClientStream::Plain(stream), peer, header, shutdown).await;
    }
    let (reader, writer) = warren_core::stream::plain(stream);
    let connection = Connection {
        header,
        peer,
        local,
        certificate: None,
    };
    run_stream(reader, writer, connection, broker, config, shutdown, alarms).await;
}

/// Runs one AMQP 0-9-1 connection over a byte stream that is not a socket (a
/// [`Tunnel`](warren_core::websocket::Tunnel)), from its protocol header to its end, as
/// [`run_connection`] does for TCP. Tests drive the whole driver this way over an in-memory
/// pipe, in tokio's paused time: heartbeats, the handshake and consumer timeouts then run in
/// virtual time, without sleeping and without a socket whose readiness the runtime must poll.
pub async fn run_tunnel(
    mut stream: Box<dyn warren_core::websocket::Tunnel>,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<ListenerConfig>,
    shutdown: watch::Receiver<bool>,
    alarms: watch::Receiver<Option<String>>,
) {
    let mut header = [0u8; 8];
    match timeout(config.handshake_timeout, stream.read_exact(&mut header)).await {
        Ok(Ok(_)) => {}
        _ => return,
    }
    let stream = ClientStream::Tunnel(stream);
    let local = stream.local_addr();
    let (reader, writer) = stream.split();
    let connection = Connection {
        header,
        peer,
        local,
        certificate: None,
    };
    run_stream(reader, writer, connection, broker, config, shutdown, alarms).await;
}

/// What the driver knows of a connection once its protocol header was read.
struct Connection {
    header: [u8; 8],
    peer: SocketAddr,
    local: Option<SocketAddr>,
    /// The client's verified TLS certificate, for SASL EXTERNAL.
    certificate: Option<CertificateDer<'static>>,
}

async fn run_stream(
    mut reader: Reader,
    writer: Writer,
    connection: Connection,
    broker: Arc<Broker>,
    config: Arc<ListenerConfig>,
    mut shutdown: watch::Receiver<bool>,
    mut alarms: watch::Receiver<Option<String>>,
) {
    let Connection {
        header,
        peer,
        local,
        certificate,
    } = connection;
    if parse_protocol_header(&header) != ProtocolHeader::Amqp091 {
        // Tell the client which protocol we speak, then close, as the spec asks.
        let _ = writer.write_all(&PROTOCOL_HEADER_091).await;
        writer.shutdown().await;
        return;
    }
    // The writer task and the reader (for small replies, see Outbox::end_batch) both write;
    // the outbox makes sure only one does at a time.
    let writer = Arc::new(writer);
    let outbox = Outbox::new(FRAME_MIN_SIZE);
    let from_loopback = peer.ip().is_loopback();
    let store_handle = broker.message_store().cloned();
    let mut session = Session::with_certificate(
        broker,
        config.session.clone(),
        Arc::clone(&outbox),
        from_loopback,
        certificate.as_deref(),
    );
    if let Some(local) = local {
        session.set_addresses(peer, local);
    }
    session.set_tls(matches!(reader, Reader::Tls(_)));
    let connection_id = session.connection_id();
    let mut store = StoreSignals {
        durable: store_handle.as_ref().map(|s| s.subscribe_durable()),
        flow: PublisherFlow::new(store_handle.as_ref()),
    };
    tracing::debug!(connection = connection_id, %peer, "accepted AMQP 0-9-1 connection");
    let (heartbeat_tx, heartbeat_rx) = watch::channel(None);
    let writer_task = tokio::spawn(write_loop(
        Arc::clone(&writer),
        Arc::clone(&outbox),
        heartbeat_rx,
    ));

    read_loop(
        &mut reader,
        &writer,
        &mut session,
        &outbox,
        &config,
        &mut shutdown,
        &mut alarms,
        &mut store,
        &heartbeat_tx,
    )
    .await;

    drop(writer);
    session.terminate();
    let _ = writer_task.await;
    tracing::debug!(connection = connection_id, %peer, "connection closed");
}

#[allow(clippy::too_many_arguments)]
async fn read_loop(
    reader: &mut Reader,
    writer: &Writer,
    session: &mut Session,
    outbox: &Outbox,
    config: &ListenerConfig,
    shutdown: &mut watch::Receiver<bool>,
    alarms: &mut watch::Receiver<Option<String>>,
    store: &mut StoreSignals,
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
        // A queue this connection published to holds too much in memory, or the message
        // store is behind: publishers wait (credit-based back-pressure; not an alarm, so no
        // connection.blocked, as with RabbitMQ's internal flow control).
        let flow_paused =
            close_deadline.is_none() && session.is_publisher() && store.flow.is_paused();
        let awaits_durability = session.awaits_durability() && store.durable.is_some();
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
                Some(interval) if !blocked && !paused && !flow_paused => {
                    Instant::now() + interval * 2
                }
                _ => Instant::now() + Duration::from_secs(24 * 3600),
            }
        };
        let read = tokio::select! {
            read = reader.read_some(&mut buffer), if !blocked && !paused && !flow_paused => read,
            // Confirms of persistent messages go out once the store has them on disk.
            _ = changed_or_pending(&mut store.durable), if awaits_durability => {
                session.end_of_batch();
                continue;
            }
            _ = store.flow.changed(), if flow_paused => continue,
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
        outbox.begin_batch();
        let (end, congested) = warren_core::flow::observe(|| {
            handle_batch(
                &mut buffer,
                session,
                config,
                heartbeat_tx,
                &mut close_deadline,
            )
        });
        store.flow.hold(congested);
        if let Some(drained) = outbox.end_batch() {
            write_inline(writer, outbox, drained);
        }
        if end == BatchEnd::Close {
            return;
        }
        // A publisher whose socket always has data would otherwise never give its worker
        // thread back: the consumers it wakes (in tokio's LIFO slot) would starve. One read
        // (at most READ_CHUNK bytes) per turn keeps connections fair.
        tokio::task::yield_now().await;
    }
}

/// How a read batch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchEnd {
    Continue,
    Close,
}

/// Hands every complete frame in `buffer` to the session.
fn handle_batch(
    buffer: &mut BytesMut,
    session: &mut Session,
    config: &ListenerConfig,
    heartbeat_tx: &watch::Sender<Option<Duration>>,
    close_deadline: &mut Option<Instant>,
) -> BatchEnd {
    loop {
        match decode_frame(buffer, session.frame_max()) {
            Ok(Some(frame)) => {
                let was_open = session.heartbeat();
                let control = session.handle_frame(frame);
                if was_open != session.heartbeat() {
                    let _ = heartbeat_tx.send(session.heartbeat());
                }
                match control {
                    Control::Close => {
                        session.end_of_batch();
                        return BatchEnd::Close;
                    }
                    // Frames after the client's close are read and dropped until it closes
                    // the socket or the closing timeout passes.
                    Control::AwaitSocketClose => {
                        *close_deadline =
                            Some(Instant::now() + session.closing_timeout(config.closing_timeout));
                    }
                    Control::Continue => {}
                }
                if session.is_closing() && close_deadline.is_none() {
                    *close_deadline = Some(Instant::now() + config.close_timeout);
                }
            }
            Ok(None) => break,
            Err(error) => {
                if session.handle_frame_error(error) == Control::Close {
                    return BatchEnd::Close;
                }
                *close_deadline = Some(Instant::now() + config.close_timeout);
                // The stream can no longer be framed: wait for nothing but the timeout.
                buffer.clear();
                break;
            }
        }
    }
    session.end_of_batch();
    BatchEnd::Continue
}

/// Writes a small batch from the reader task: as much as the socket takes now, the rest goes
/// back to the writer task.
fn write_inline(writer: &Writer, outbox: &Outbox, drained: Drained) {
    for sink in drained.starved {
        sink.queue.dispatch();
    }
    let bytes = &drained.bytes[..];
    let mut written = 0;
    while written < bytes.len() {
        match writer.try_write(&bytes[written..]) {
            Ok(n) => written += n,
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => {
                outbox.write_done(&[]);
                outbox.close();
                return;
            }
        }
    }
    outbox.write_done(&bytes[written..]);
}

/// The message store's signals a connection follows.
struct StoreSignals {
    /// The durable sequence number, for holding confirms of persistent messages.
    durable: Option<watch::Receiver<u64>>,
    /// Publisher flow control: congested queues and the store's writer falling behind.
    flow: PublisherFlow,
}

/// Waits for the durable sequence number to move (forever without a store).
async fn changed_or_pending(receiver: &mut Option<watch::Receiver<u64>>) {
    match receiver {
        Some(receiver) => {
            if receiver.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
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
    writer: Arc<Writer>,
    outbox: Arc<Outbox>,
    mut heartbeat: watch::Receiver<Option<Duration>>,
) {
    let mut last_write = Instant::now();
    loop {
        if let Some(drained) = outbox.take_for_write() {
            // Room is free again: let starved consumers' queues refill the buffer while this
            // batch is on its way.
            for sink in drained.starved {
                sink.queue.dispatch();
            }
            outbox.set_writing(drained.bytes.len());
            let written = writer.write_all(&drained.bytes).await;
            outbox.set_writing(0);
            outbox.write_done(&[]);
            if written.is_err() {
                outbox.close();
                return;
            }
            last_write = Instant::now();
            continue;
        }
        if outbox.is_closed() {
            writer.shutdown().await;
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
                                writer.shutdown().await;
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
