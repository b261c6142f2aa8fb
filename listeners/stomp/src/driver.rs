//! The tokio driver: accepts sockets, runs one reader and one writer task per connection.
//!
//! The reader feeds bytes to the session's decoder and frames to the [`Session`]; the writer
//! sends whatever accumulated in the [`Outbox`] in one write, so a burst of MESSAGE frames
//! costs one syscall. The login timeout and heart-beats are the only clocks, and they live
//! here: the writer sends an EOL when it has been quiet for the agreed interval, and the
//! reader closes a connection that sent nothing for twice the interval it promised.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::Instant;
use warren_core::accept::{serve_connections, AcceptConfig};
use warren_core::flow::PublisherFlow;
use warren_core::stream::{ClientStream, Reader, TlsServerConfig, Writer};
use warren_core::Broker;

use crate::codec::Decoded;
use crate::outbox::{Outbox, READ_PAUSE_BYTES};
use crate::session::{Control, Session, SessionConfig};

/// Settings of the STOMP listener.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// What connections may do and are given.
    pub session: SessionConfig,
    /// How long a client has from connecting to a successful CONNECT (`stomp.login_timeout`).
    pub login_timeout: Duration,
    /// Most connections this listener serves at once; more are refused at accept.
    pub connection_max: Option<usize>,
    /// TLS (STOMP over TLS): every connection completes a TLS handshake first, within the
    /// login timeout.
    pub tls: Option<Arc<TlsServerConfig>>,
    /// STOMP over WebSocket (Web-STOMP, `web_stomp.*`): every connection completes a
    /// WebSocket handshake first; the same codec and session serve it.
    pub websocket: Option<warren_core::websocket::WebSocketConfig>,
    /// `stomp.max_connections`: the most STOMP connections at once across the listeners
    /// that share this count; a connection beyond it gets an ERROR frame at CONNECT.
    pub max_connections: Option<(usize, Arc<std::sync::atomic::AtomicUsize>)>,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            session: SessionConfig::default(),
            login_timeout: Duration::from_secs(10),
            connection_max: None,
            tls: None,
            websocket: None,
            max_connections: None,
        }
    }
}

/// A connection counted against `stomp.max_connections`, uncounted on drop.
struct Counted(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// How long a closing connection keeps reading (and discarding) so its last frames, an ERROR
/// above all, reach a client that is still sending instead of being lost to a TCP reset.
const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// How long a DISCONNECT waits for the store to write the messages whose RECEIPTs are pending.
const DISCONNECT_RECEIPT_WAIT: Duration = Duration::from_secs(5);

/// Accepts connections until `shutdown` turns true, then ends every connection (an ERROR
/// frame saying so) and returns once they all ended.
pub async fn serve(
    listener: TcpListener,
    broker: Arc<Broker>,
    config: ListenerConfig,
    shutdown: watch::Receiver<bool>,
) {
    let config = Arc::new(config);
    let alarm_rx = broker.alarm_watch();
    let mut accept = AcceptConfig::new(
        ("stomp", "stomps"),
        config.tls.clone(),
        config.connection_max,
        config.login_timeout,
    );
    if let Some(websocket) = &config.websocket {
        let protocol = if config.tls.is_some() {
            "web-stomps"
        } else {
            "web-stomp"
        };
        accept = accept.with_websocket(protocol, websocket.clone());
    }
    let connection_shutdown = shutdown.clone();
    serve_connections(listener, accept, shutdown, move |stream, peer| {
        run_connection(
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

/// Runs one connection (plain or TLS) to its end.
pub async fn run_connection(
    stream: ClientStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<ListenerConfig>,
    mut shutdown: watch::Receiver<bool>,
    mut alarms: watch::Receiver<Option<String>>,
) {
    let stream_local = stream.local_addr();
    let tls = stream.is_tls();
    let certificate = stream.peer_certificate();
    let (mut reader, writer) = stream.split();
    let outbox = Outbox::new();
    let broker_store_durable = broker
        .message_store()
        .map(|store| store.subscribe_durable());
    let mut flow = PublisherFlow::new(broker.message_store());
    let mut session = Session::new(
        broker,
        config.session.clone(),
        Arc::clone(&outbox),
        peer.ip().is_loopback(),
    );
    if let Some(local) = stream_local {
        session.set_addresses(peer, local);
    }
    session.set_tls(tls);
    if let Some(certificate) = &certificate {
        session.set_certificate(certificate);
    }
    // Counted for `stomp.max_connections` until this function returns.
    let _counted = config.max_connections.as_ref().map(|(max, count)| {
        if count.fetch_add(1, std::sync::atomic::Ordering::AcqRel) >= *max {
            session.refuse_over_capacity();
        }
        Counted(Arc::clone(count))
    });
    let connection_id = session.connection_id();
    tracing::debug!(connection = connection_id, %peer, "accepted STOMP connection");
    let (heartbeat_tx, heartbeat_rx) = watch::channel(None);
    let writer_task = tokio::spawn(write_loop(writer, Arc::clone(&outbox), heartbeat_rx));
    let mut buffer = BytesMut::new();
    let mut durable = broker_store_durable;
    read_loop(
        &mut reader,
        &mut buffer,
        &mut session,
        &outbox,
        &config,
        &mut shutdown,
        &mut alarms,
        &mut durable,
        &mut flow,
        &heartbeat_tx,
    )
    .await;
    let closed_by_broker = session.is_closed();
    // A DISCONNECT's RECEIPT (and any before it) still waiting for the disk goes out once the
    // store has the messages, so a client that waits for it knows they are safe.
    if let Some(durable) = durable.as_mut() {
        let _ = tokio::time::timeout(DISCONNECT_RECEIPT_WAIT, async {
            while session.awaits_durability() && !outbox.is_closed() {
                if durable.changed().await.is_err() {
                    break;
                }
                session.flush_receipts();
            }
        })
        .await;
    }
    session.terminate();
    let _ = writer_task.await;
    if closed_by_broker {
        // Wait for the client to see the last frames and close its side.
        let mut discard = [0u8; 4096];
        let _ = tokio::time::timeout(CLOSE_LINGER, async {
            while matches!(reader.read(&mut discard).await, Ok(n) if n > 0) {}
        })
        .await;
    }
    tracing::debug!(connection = connection_id, %peer, "STOMP connection closed");
}

#[allow(clippy::too_many_arguments)]
async fn read_loop(
    reader: &mut Reader,
    buffer: &mut BytesMut,
    session: &mut Session,
    outbox: &Outbox,
    config: &ListenerConfig,
    shutdown: &mut watch::Receiver<bool>,
    alarms: &mut watch::Receiver<Option<String>>,
    durable: &mut Option<watch::Receiver<u64>>,
    flow: &mut PublisherFlow,
    heartbeat_tx: &watch::Sender<Option<Duration>>,
) {
    let login_deadline = Instant::now() + config.login_timeout;
    let mut last_read = Instant::now();
    let mut alarms_alive = true;
    let far = Duration::from_secs(24 * 3600);
    let operator_wake = session.operator_wake();
    loop {
        // An operator asked this connection to close (management API, warrenctl): an ERROR
        // frame naming the reason, then the close.
        if let Some(reason) = session.close_requested() {
            session.force_close(&reason);
            return;
        }
        // A resource alarm stops reading publishing connections; subscriptions keep
        // receiving through the writer.
        // So does a queue this connection sent to that holds too much in memory, or a
        // message store that is behind, until it drains (no ERROR: just not read).
        let flow_paused = session.is_publisher() && flow.is_paused();
        let blocked = (session.is_publisher() && alarms.borrow().is_some()) || flow_paused;
        // A client that does not read its replies is not read either (bounded memory).
        let paused = outbox.pending_bytes() > READ_PAUSE_BYTES;
        let deadline = if !session.is_connected() {
            login_deadline
        } else {
            match session.heartbeat().1 {
                // Twice the promised interval: the spec asks servers to be tolerant.
                expect if expect > 0 && !blocked && !paused => {
                    last_read + Duration::from_millis(u64::from(expect) * 2)
                }
                _ => Instant::now() + far,
            }
        };
        // Biased: an alarm or shutdown is seen before more bytes are read, so a publisher
        // is held back from its very next frame.
        let read = tokio::select! {
            biased;
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    session.force_close("shutdown");
                    return;
                }
                continue;
            }
            changed = alarms.changed(), if alarms_alive => {
                alarms_alive = changed.is_ok();
                continue;
            }
            _ = outbox.drained.notified(), if paused => continue,
            _ = flow.changed(), if flow_paused => {
                // Silence while we were not reading is ours, not the client's.
                last_read = Instant::now();
                continue;
            }
            _ = operator_wake.notified() => continue,
            // RECEIPTs of persistent messages go out once the store has them on disk.
            _ = durable_changed(durable), if session.awaits_durability() => {
                session.flush_receipts();
                if session.is_closed() {
                    return;
                }
                continue;
            }
            read = reader.read_some(buffer), if !blocked && !paused => read,
            _ = tokio::time::sleep_until(deadline) => {
                if session.is_connected() {
                    tracing::warn!(connection = session.connection_id(), "no heart-beat from STOMP client; closing");
                } else {
                    tracing::warn!(connection = session.connection_id(), "STOMP login timed out");
                }
                return;
            }
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(_) => last_read = Instant::now(),
        }
        loop {
            match session.decode(buffer) {
                Ok(Some(Decoded::Heartbeat)) => {}
                Ok(Some(Decoded::Frame(frame))) => {
                    let was_connected = session.is_connected();
                    let (control, congested) =
                        warren_core::flow::observe(|| session.handle_frame(frame));
                    flow.hold(congested);
                    if control == Control::Close {
                        return;
                    }
                    if !was_connected && session.is_connected() {
                        let send = session.heartbeat().0;
                        let _ = heartbeat_tx
                            .send((send > 0).then(|| Duration::from_millis(u64::from(send))));
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    session.handle_frame_error(error);
                    return;
                }
            }
        }
        // A publisher whose socket always has data would otherwise never give its worker
        // thread back to the consumers it wakes.
        tokio::task::yield_now().await;
    }
}

async fn write_loop(
    writer: Writer,
    outbox: Arc<Outbox>,
    mut heartbeat: watch::Receiver<Option<Duration>>,
) {
    let mut last_write = Instant::now();
    let mut heartbeat_alive = true;
    loop {
        if let Some(drained) = outbox.drain() {
            // Room is free again: let starved subscriptions' queues refill the buffer while
            // this batch is on its way.
            for subscription in drained.starved {
                subscription.queue.dispatch();
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
            writer.shutdown().await;
            return;
        }
        let interval = *heartbeat.borrow();
        let next_beat = interval.map(|interval| last_write + interval);
        tokio::select! {
            _ = outbox.notify.notified() => {}
            changed = heartbeat.changed(), if heartbeat_alive => {
                heartbeat_alive = changed.is_ok();
            }
            _ = sleep_until(next_beat) => outbox.send_heartbeat(),
        }
    }
}

/// Waits for the store's durable sequence number to move (forever without a store).
async fn durable_changed(receiver: &mut Option<watch::Receiver<u64>>) {
    match receiver {
        Some(receiver) => {
            if receiver.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
