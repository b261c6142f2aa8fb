//! The tokio driver: accepts sockets and runs one task per connection that reads into a
//! buffer, feeds the codec and the [`Session`], and writes whatever accumulated in the
//! [`Outbox`] in one write.
//!
//! One task per connection (not a reader and a writer) and buffers allocated only while
//! there is something to read or write keep an idle connection to a few kilobytes. The
//! keep-alive and CONNECT timeouts are the only clocks, and they live here.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{timeout, Instant};
use warren_core::accept::{serve_connections, AcceptConfig};
use warren_core::flow::PublisherFlow;
use warren_core::idmap::IdMap;
use warren_core::stream::{ClientStream, Reader, TlsServerConfig, Writer};

use crate::codec::decode;
use crate::outbox::{Outbox, Signal};
use crate::session::{acknowledge_all, Control, End, MqttContext, Session};

/// Settings of an MQTT listener.
#[derive(Clone)]
pub struct ListenerConfig {
    /// How long a client has from connecting to sending CONNECT.
    pub connect_timeout: Duration,
    /// How long a new connection waits for the one it takes over to finish.
    pub takeover_timeout: Duration,
    /// Most connections this listener serves at once; more are refused.
    pub connection_max: Option<usize>,
    /// TLS for an MQTTS listener (`mqtt.listeners.ssl.default`); plain MQTT when `None`.
    pub tls: Option<Arc<TlsServerConfig>>,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            connect_timeout: Duration::from_secs(10),
            takeover_timeout: Duration::from_secs(5),
            connection_max: None,
            tls: None,
        }
    }
}

/// How much to read at a time while data flows.
const READ_CHUNK: usize = 16 * 1024;

/// The first read after a connection was idle: most such wake-ups are one small packet
/// (CONNECT, SUBSCRIBE, PINGREQ), and a small buffer does not fragment the heap the way a
/// freshly freed 16 KiB one per connection does. A full first read grows it to `READ_CHUNK`.
const FIRST_READ: usize = 512;

/// The connections of one listener: how the accept loop reaches them for shutdown and
/// resource alarms. Each holds only a weak reference to its outbox here (a few bytes per
/// connection), instead of a join handle and two watch receivers per task.
#[derive(Default)]
struct Connections {
    live: Mutex<IdMap<u64, Weak<Outbox>>>,
    next_key: AtomicU64,
    /// A resource alarm is in effect: publishers are not read.
    alarm: AtomicBool,
}

impl Connections {
    /// Registers a new connection's outbox; the returned guard unregisters it.
    fn register(self: &Arc<Self>, outbox: &Arc<Outbox>) -> Registered {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        self.live.lock().insert(key, Arc::downgrade(outbox));
        Registered {
            connections: Arc::clone(self),
            key,
        }
    }

    /// Raises `signal` on every connection.
    fn signal_all(&self, signal: Signal) {
        let outboxes: Vec<Arc<Outbox>> = self
            .live
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for outbox in outboxes {
            outbox.signal(signal);
        }
    }
}

/// A connection's entry in [`Connections`], removed on drop.
struct Registered {
    connections: Arc<Connections>,
    key: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut live = self.connections.live.lock();
        live.remove(&self.key);
        if live.is_empty() {
            live.shrink_to_fit();
        }
    }
}

/// Accepts connections until `shutdown` turns true, then closes every connection and
/// returns once they all ended. A failed accept (out of file descriptors) backs off and
/// leaves open connections alone.
pub async fn serve(
    listener: TcpListener,
    context: MqttContext,
    config: ListenerConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let config = Arc::new(config);
    let connections = Arc::new(Connections::default());
    let alarmed = Arc::clone(&connections);
    context.broker.subscribe_alarms(Box::new(move |reason| {
        alarmed.alarm.store(reason.is_some(), Ordering::Release);
        alarmed.signal_all(Signal::AlarmChanged);
    }));
    let accept = AcceptConfig::new(
        ("mqtt", "mqtts"),
        config.tls.clone(),
        config.connection_max,
        config.connect_timeout,
    );
    // Connections hold no shutdown receiver of their own (bytes per idle connection): they
    // are told through their outboxes, once here and, for one accepted while shutting
    // down, when it registers.
    let accepting = shutdown.clone();
    let registry = Arc::clone(&connections);
    let accept_loop = serve_connections(listener, accept, shutdown.clone(), move |stream, peer| {
        let outbox = Outbox::new(context.config.prefetch);
        let registered = registry.register(&outbox);
        if *accepting.borrow() {
            outbox.signal(Signal::Shutdown);
        }
        run_connection(
            stream,
            peer,
            context.clone(),
            Arc::clone(&config),
            outbox,
            registered,
        )
    });
    let tell_connections = async {
        while shutdown.changed().await.is_ok() && !*shutdown.borrow() {}
        connections.signal_all(Signal::Shutdown);
    };
    tokio::join!(accept_loop, tell_connections);
}

/// Runs one connection to its end. Set-up happens before the returned future exists, so
/// the task (which lives as long as the connection) keeps only what the connection needs.
fn run_connection(
    stream: ClientStream,
    peer: SocketAddr,
    context: MqttContext,
    config: Arc<ListenerConfig>,
    outbox: Arc<Outbox>,
    registered: Registered,
) -> impl std::future::Future<Output = ()> + Send {
    let mut flow = PublisherFlow::new(context.broker.message_store());
    let mut session = Session::new(context, Arc::clone(&outbox), peer.ip().is_loopback());
    if let Some(local) = stream.local_addr() {
        session.set_addresses(peer, local);
    }
    if stream.is_tls() {
        session.set_tls(stream.peer_certificate().as_deref());
    }
    tracing::debug!(connection = session.connection_id(), %peer, "accepted MQTT connection");
    async move {
        let (mut reader, writer) = stream.split();
        let end = drive(
            &mut reader,
            &writer,
            &mut session,
            &outbox,
            &config,
            &registered.connections.alarm,
            &mut flow,
        )
        .await;
        // Whatever the session still has to say (a refusing CONNACK) goes out before the
        // close.
        let _ = flush(&writer, &outbox).await;
        session.terminate(end);
        writer.shutdown().await;
        tracing::debug!(
            connection = session.connection_id(),
            "MQTT connection closed"
        );
        drop(registered);
    }
}

#[allow(clippy::too_many_arguments)]
async fn drive(
    reader: &mut Reader,
    writer: &Writer,
    session: &mut Session,
    outbox: &Outbox,
    config: &ListenerConfig,
    alarm: &AtomicBool,
    flow: &mut PublisherFlow,
) -> End {
    let mut buffer = BytesMut::new();
    let connect_deadline = Instant::now() + config.connect_timeout;
    let mut last_heard = Instant::now();
    let mut busy = false;
    // The store's durable sequence number: held PUBACKs/PUBRECs go out as it moves.
    let mut durable = session.subscribe_durable();
    // And the retained store's, for retained publishes.
    let mut retained_durable = session.subscribe_retained_durable();
    loop {
        // Signals are looked at on every turn, so a takeover, an operator close or shutdown
        // is seen before more input is read even while input keeps coming.
        let signals = outbox.take_signals();
        if !signals.is_empty() {
            if signals.contains(Signal::Shutdown) {
                return End::Shutdown;
            }
            if signals.contains(Signal::Kick) {
                return End::Abnormal("another connection took over the client identifier".into());
            }
            // MQTT 3.1.1 has no way to tell the client why; like RabbitMQ, the will is
            // published, since the client did not send DISCONNECT.
            if signals.contains(Signal::OperatorClose) {
                let reason = session.close_requested().unwrap_or_default();
                return End::Abnormal(format!("closed by an operator: {reason}"));
            }
            if signals.contains(Signal::AlarmChanged) {
                // A client that was not read cannot be blamed for silence: restart the clock.
                last_heard = Instant::now();
            }
        }
        // A resource alarm stops reading publishers (as RabbitMQ does: MQTT 3.1.1 has no
        // way to tell them); deliveries to subscribers go on.
        let alarmed = session.is_publisher() && alarm.load(Ordering::Acquire);
        // A queue this connection published to holds too much in memory (a slow subscriber),
        // or the message store is behind: not read until it drains.
        let flow_paused = session.is_publisher() && flow.is_paused();
        let blocked = alarmed || flow_paused;
        let deadline = match session.keep_alive() {
            // Silence is ours while blocked: the keep-alive restarts when reading resumes.
            Some(_) if blocked => Instant::now() + Duration::from_secs(24 * 3600),
            // MQTT-3.1.2-24: one and a half keep-alive periods without a packet.
            Some(keep_alive) => last_heard + keep_alive.mul_f32(1.5),
            None if !session.is_connected() => connect_deadline,
            None => Instant::now() + Duration::from_secs(24 * 3600),
        };
        // Boxed, and only while acknowledgements wait for the disk: a future inline here
        // would be part of every idle connection's task.
        // Boxed too, and only while paused: publishers are rarely held back.
        let flow_wait = flow_paused.then(|| Box::pin(flow.changed()));
        let durability = session
            .awaits_durability()
            .then(|| Box::pin(either_changed(&mut durable, &mut retained_durable)));
        // Biased: input before deliveries (every read ends with a flush anyway), so a
        // subscriber flooded with deliveries still has its PUBACKs and PINGREQs read.
        // The handlers only say what woke the task: the flush happens after the select, once
        // its futures are gone, so the task never holds both at once.
        let woken = tokio::select! {
            biased;
            _ = wait_if_some(durability) => Woken::Durable,
            read = read_some(reader, &mut buffer, &mut busy), if !blocked => Woken::Read(read),
            // Bytes to write, or a signal (looked at at the top of the loop).
            _ = outbox.notify.notified() => Woken::Outbox,
            _ = wait_if_some(flow_wait) => Woken::Flow,
            _ = tokio::time::sleep_until(deadline) => Woken::Deadline,
        };
        let read = match woken {
            Woken::Read(read) => read,
            Woken::Flow => {
                // A client that was not read cannot be blamed for silence: restart the clock.
                last_heard = Instant::now();
                continue;
            }
            Woken::Durable | Woken::Outbox => {
                session.release_held_acks();
                if let Err(error) = flush(writer, outbox).await {
                    return End::Abnormal(format!("socket error: {error}"));
                }
                continue;
            }
            Woken::Deadline => {
                return End::Abnormal(if session.is_connected() {
                    "keep-alive timeout: no packet for 1.5 keep-alive periods".into()
                } else {
                    "no CONNECT within the connect timeout".into()
                });
            }
        };
        match read {
            Ok(0) => return End::Abnormal("client closed the socket without DISCONNECT".into()),
            Err(error) => return End::Abnormal(format!("socket error: {error}")),
            Ok(_) => last_heard = Instant::now(),
        }
        loop {
            match decode(&mut buffer, session.max_packet_size()) {
                Ok(Some(packet)) => {
                    let (control, congested) =
                        warren_core::flow::observe(|| session.handle_packet(packet));
                    flow.hold(congested);
                    match control {
                        Control::Continue => {}
                        Control::Close(end) => return end,
                        Control::AwaitTakeover(takeover) => {
                            takeover.kick();
                            if timeout(config.takeover_timeout, takeover.ended())
                                .await
                                .is_err()
                            {
                                tracing::warn!(
                                    connection = session.connection_id(),
                                    "the connection taken over did not finish in time"
                                );
                            }
                            match session.resume_connect() {
                                Control::Continue => {}
                                Control::Close(end) => return end,
                                Control::AwaitTakeover(_) => {
                                    return End::Abnormal("takeover raced with another".into())
                                }
                            }
                        }
                    }
                }
                Ok(None) => break,
                Err(error) => match session.handle_decode_error(&error) {
                    Control::Close(end) => return end,
                    _ => return End::Abnormal(error.to_string()),
                },
            }
        }
        // Acknowledgements whose messages reached the disk while the batch was handled.
        session.release_held_acks();
        if let Err(error) = flush(writer, outbox).await {
            return End::Abnormal(format!("socket error: {error}"));
        }
    }
}

/// What ended a wait of the connection's task.
enum Woken {
    /// A congested queue drained or the store caught up: reading may resume.
    Flow,
    /// A durable sequence number moved.
    Durable,
    /// The socket was read.
    Read(std::io::Result<usize>),
    /// The outbox has bytes or a signal.
    Outbox,
    /// The keep-alive or CONNECT deadline passed.
    Deadline,
}

/// Waits for `future` if there is one, forever if not.
async fn wait_if_some<F: std::future::Future>(future: Option<std::pin::Pin<Box<F>>>) {
    match future {
        Some(future) => {
            future.await;
        }
        None => std::future::pending().await,
    }
}

/// Waits for either durable sequence number to move.
async fn either_changed(
    store: &mut Option<watch::Receiver<u64>>,
    retained: &mut Option<watch::Receiver<u64>>,
) {
    tokio::select! {
        _ = changed_or_pending(store) => {}
        _ = changed_or_pending(retained) => {}
    }
}

/// Waits for the store's durable sequence number to move (forever without a store).
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

/// Writes everything the outbox holds, settling what it asks for and kicking queues that
/// waited for room (which may refill it, hence the loop).
async fn flush(writer: &Writer, outbox: &Outbox) -> std::io::Result<()> {
    while let Some(drained) = outbox.drain() {
        acknowledge_all(drained.to_ack);
        for queue in drained.starved {
            queue.dispatch();
        }
        if !drained.bytes.is_empty() {
            writer.write_all(&drained.bytes).await?;
        }
    }
    Ok(())
}

/// Waits until the socket is readable. A `poll_fn` over the stream's readiness is a few
/// bytes in the task; `ReadHalf::readable` is a future of 150 that every idle connection
/// would carry.
async fn readable(reader: &OwnedReadHalf) -> std::io::Result<()> {
    let stream: &TcpStream = reader.as_ref();
    std::future::poll_fn(|cx| stream.poll_read_ready(cx)).await
}

/// Reads what is available into `buffer`. An idle connection holds no read buffer: when
/// everything read was consumed and the last read did not fill the buffer, the buffer is
/// released, and a small one is allocated only once the socket is readable again. While data
/// flows (`busy`: the last read filled the buffer) reads go straight into 16 KiB chunks.
async fn read_some(
    reader: &mut Reader,
    buffer: &mut BytesMut,
    busy: &mut bool,
) -> std::io::Result<usize> {
    let reader = match reader {
        Reader::Plain(reader) => reader,
        // rustls buffers what it decrypted: read through it into the buffer.
        // Boxed: the TLS read future would otherwise be part of every plain connection's task.
        tls => return Box::pin(tls.read_some(buffer)).await,
    };
    loop {
        if buffer.is_empty() && !*busy {
            *buffer = BytesMut::new();
            readable(reader).await?;
            buffer.reserve(FIRST_READ);
        } else if buffer.capacity() - buffer.len() < READ_CHUNK / 4 {
            buffer.reserve(READ_CHUNK);
        }
        let room = buffer.capacity() - buffer.len();
        match reader.try_read_buf(buffer) {
            Ok(read) => {
                *busy = read == room;
                return Ok(read);
            }
            // Readiness was stale, or a busy connection caught up: wait for the socket
            // (releasing the buffer first if it holds nothing).
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                *busy = false;
                if !buffer.is_empty() {
                    readable(reader).await?;
                }
            }
            Err(error) => return Err(error),
        }
    }
}
