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

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{timeout, Instant};
use warren_core::accept::{serve_connections, AcceptConfig};
use warren_core::flow::PublisherFlow;
use warren_core::idmap::IdMap;
use warren_core::stream::{ClientStream, TlsServerConfig};

use crate::codec::{connect_protocol, decode_with, reason};
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
    /// MQTT over WebSocket (Web-MQTT, `web_mqtt.*`): every connection completes a WebSocket
    /// handshake first; the same codec and session serve it.
    pub websocket: Option<warren_core::websocket::WebSocketConfig>,
    /// `mqtt.max_connections`: the most MQTT connections at once across the listeners that
    /// share this count; a connection beyond it is answered CONNACK "server unavailable"
    /// (0x03; MQTT 5: 0x88) at CONNECT, not dropped.
    pub max_connections: Option<(usize, Arc<std::sync::atomic::AtomicUsize>)>,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            connect_timeout: Duration::from_secs(10),
            takeover_timeout: Duration::from_secs(5),
            connection_max: None,
            tls: None,
            websocket: None,
            max_connections: None,
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
    /// The count of MQTT connections shared by every listener (`mqtt.max_connections`),
    /// kept by [`Registered`] so a connection carries nothing more for it.
    shared_count: Option<Arc<std::sync::atomic::AtomicUsize>>,
}

impl Connections {
    /// Registers a new connection's outbox; the returned guard unregisters it.
    fn register(self: &Arc<Self>, outbox: &Arc<Outbox>) -> Registered {
        let key = self.next_key.fetch_add(1, Ordering::Relaxed);
        if let Some(count) = &self.shared_count {
            count.fetch_add(1, Ordering::AcqRel);
        }
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
        if let Some(count) = &self.connections.shared_count {
            count.fetch_sub(1, Ordering::AcqRel);
        }
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
    // One shared context: a session holds one pointer to it, not a copy of its four.
    let context = Arc::new(context);
    let connections = Arc::new(Connections {
        shared_count: config
            .max_connections
            .as_ref()
            .map(|(_, count)| Arc::clone(count)),
        ..Connections::default()
    });
    let alarmed = Arc::clone(&connections);
    context.broker.subscribe_alarms(Box::new(move |reason| {
        alarmed.alarm.store(reason.is_some(), Ordering::Release);
        alarmed.signal_all(Signal::AlarmChanged);
    }));
    let mut accept = AcceptConfig::new(
        ("mqtt", "mqtts"),
        config.tls.clone(),
        config.connection_max,
        config.connect_timeout,
    );
    if let Some(websocket) = &config.websocket {
        let protocol = if config.tls.is_some() {
            "web-mqtts"
        } else {
            "web-mqtt"
        };
        accept = accept.with_websocket(protocol, websocket.clone());
    }
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
        let over_capacity = config
            .max_connections
            .as_ref()
            .is_some_and(|(max, count)| count.load(Ordering::Acquire) > *max);
        let mut connection = Connection::new(
            stream,
            peer,
            Arc::clone(&context),
            Arc::clone(&config),
            outbox,
            registered,
        );
        if over_capacity {
            connection.session.refuse_over_capacity();
        }
        connection.run()
    });
    let tell_connections = async {
        while shutdown.changed().await.is_ok() && !*shutdown.borrow() {}
        connections.signal_all(Signal::Shutdown);
    };
    tokio::join!(accept_loop, tell_connections);
}

/// Serves one MQTT connection over any byte stream, as [`serve`] does for each accepted
/// socket, with no listener around it (no `mqtt.max_connections` count, no shutdown or
/// alarm signals). Tests drive it over an in-memory pipe
/// ([`ClientStream::Tunnel`]) in tokio's paused time, where the keep-alive and the
/// CONNECT timeout run in virtual time.
pub async fn run_stream(
    stream: ClientStream,
    peer: SocketAddr,
    context: Arc<MqttContext>,
    config: Arc<ListenerConfig>,
) {
    let connections = Arc::new(Connections::default());
    let outbox = Outbox::new(context.config.prefetch);
    let registered = connections.register(&outbox);
    Connection::new(stream, peer, context, config, outbox, registered)
        .run()
        .await;
}

/// One connection: everything its task holds for as long as the connection lives. Its
/// size is most of what an idle connection costs, so what only some connections need
/// (publishing, TLS, a takeover, a socket that is not writable) is boxed and allocated when
/// needed. The socket is kept whole, not split into halves around an `Arc`: the task reads
/// and writes it in turn.
struct Connection {
    stream: ClientStream,
    /// The session, which also holds the connection's outbox.
    session: Session,
    config: Arc<ListenerConfig>,
    registered: Registered,
    /// Created when the client first publishes: most connections never do.
    publishing: Option<Box<Publishing>>,
    /// Bytes read and not yet decoded; no allocation while idle (see [`read_some`]).
    buffer: BytesMut,
    /// The last read filled the buffer: read on at once instead of waiting for readiness.
    busy: bool,
}

/// What a connection that publishes waits on besides its socket.
struct Publishing {
    /// Congested queues it published to, and the message store's flow signal.
    flow: PublisherFlow,
    /// The store's durable sequence number: held PUBACKs/PUBRECs go out as it moves.
    durable: Option<watch::Receiver<u64>>,
    /// And the retained store's, for retained publishes.
    retained_durable: Option<watch::Receiver<u64>>,
}

impl Publishing {
    /// Resolves when something it waits for may have moved: a durable sequence number when
    /// `durability` (acknowledgements wait for the disk), the flow signals when `flow` (the
    /// connection is paused). At least one of the two must be asked for.
    async fn changed(&mut self, flow: bool, durability: bool) -> Woken {
        let Publishing {
            flow: publisher_flow,
            durable,
            retained_durable,
        } = self;
        tokio::select! {
            biased;
            _ = either_changed(durable, retained_durable), if durability => Woken::Durable,
            _ = publisher_flow.changed(), if flow => Woken::Flow,
        }
    }
}

impl Connection {
    /// Set-up happens here, before the connection's future exists, so the task keeps only
    /// what the connection needs.
    fn new(
        stream: ClientStream,
        peer: SocketAddr,
        context: Arc<MqttContext>,
        config: Arc<ListenerConfig>,
        outbox: Arc<Outbox>,
        registered: Registered,
    ) -> Connection {
        let mut session = Session::new(context, outbox, peer.ip().is_loopback());
        if let Some(local) = stream.local_addr() {
            session.set_addresses(peer, local);
        }
        if stream.is_tls() {
            session.set_tls(stream.peer_certificate().as_deref());
        }
        tracing::debug!(connection = session.connection_id(), %peer, "accepted MQTT connection");
        Connection {
            stream,
            session,
            config,
            registered,
            publishing: None,
            buffer: BytesMut::new(),
            busy: false,
        }
    }

    /// Runs the connection to its end. An `async` block, not an `async fn`: the body of an
    /// `async fn` keeps a second copy of its by-value arguments.
    #[allow(clippy::manual_async_fn)]
    fn run(mut self) -> impl std::future::Future<Output = ()> + Send {
        async move {
            let end = self.drive().await;
            // In its own future: `end` held across an await here would take a slot (and
            // its drop flag) in this one, beside the connection.
            self.close(end).await;
        }
    }

    /// Ends the connection: what the session still has to say (a refusing CONNACK) goes
    /// out first, then the session ends and the socket is shut down.
    async fn close(&mut self, end: End) {
        // The broker ends these while the client may still be sending; the others end
        // with the client's DISCONNECT or the broker's shutdown.
        let lingers = matches!(end, End::Abnormal(_) | End::TakenOver { .. });
        if matches!(end, End::Disconnect) {
            // The client said goodbye and reads nothing more: deliveries still buffered
            // never reached it, so the session ends before the buffer would be written
            // (they are released, not counted as failed deliveries).
            self.session.terminate(end);
            let _ = flush(&mut self.stream, self.session.outbox()).await;
        } else {
            let _ = flush(&mut self.stream, self.session.outbox()).await;
            self.session.terminate(end);
        }
        self.stream.shutdown().await;
        if lingers {
            // Boxed: rare, and its buffer and timer would otherwise be part of every
            // connection's task.
            Box::pin(linger(&mut self.stream)).await;
        }
        tracing::debug!(
            connection = self.session.connection_id(),
            "MQTT connection closed"
        );
    }

    /// Starts following the stores' durability and the publisher flow signals once the
    /// client publishes (or has acknowledgements waiting for the disk).
    fn note_publisher(&mut self) {
        if self.publishing.is_some()
            || !(self.session.is_publisher() || self.session.awaits_durability())
        {
            return;
        }
        self.publishing = Some(Box::new(Publishing {
            flow: self.session.publisher_flow(),
            durable: self.session.subscribe_durable(),
            retained_durable: self.session.subscribe_retained_durable(),
        }));
        // An acknowledgement held before the receivers existed would wait for the next
        // disk write: look at the durable sequence numbers once now that they follow.
        self.session.release_held_acks();
    }

    /// Serves the connection until it ends; returns why it ended.
    async fn drive(&mut self) -> End {
        let connect_deadline = Instant::now() + self.config.connect_timeout;
        let mut last_heard = Instant::now();
        loop {
            // Signals are looked at on every turn, so a takeover, an operator close or
            // shutdown is seen before more input is read even while input keeps coming.
            let signals = self.session.outbox().take_signals();
            if !signals.is_empty() {
                if signals.contains(Signal::Shutdown) {
                    self.session
                        .server_disconnect(reason::SERVER_SHUTTING_DOWN, "server shutting down");
                    return End::Shutdown;
                }
                let kicked = signals.contains(Signal::Kick);
                if kicked || signals.contains(Signal::KickWithoutWill) {
                    self.session.server_disconnect(
                        reason::SESSION_TAKEN_OVER,
                        "another connection took over the client identifier",
                    );
                    return End::TakenOver { send_will: kicked };
                }
                // MQTT 3.1.1 has no way to tell the client why; like RabbitMQ, the will is
                // published, since the client did not send DISCONNECT.
                if signals.contains(Signal::OperatorClose) {
                    let reason = self.session.close_requested().unwrap_or_default();
                    self.session
                        .server_disconnect(reason::ADMINISTRATIVE_ACTION, &reason);
                    return End::Abnormal(format!("closed by an operator: {reason}"));
                }
                if signals.contains(Signal::AlarmChanged) {
                    // A client that was not read cannot be blamed for silence: restart the
                    // clock.
                    last_heard = Instant::now();
                }
            }
            self.note_publisher();
            // A resource alarm stops reading publishers (as RabbitMQ does: MQTT 3.1.1 has no
            // way to tell them); deliveries to subscribers go on.
            let alarmed = self.session.is_publisher()
                && self.registered.connections.alarm.load(Ordering::Acquire);
            // A queue this connection published to holds too much in memory (a slow
            // subscriber), or the message store is behind: not read until it drains.
            let flow_paused = self.session.is_publisher()
                && self
                    .publishing
                    .as_mut()
                    .is_some_and(|publishing| publishing.flow.is_paused());
            let blocked = alarmed || flow_paused;
            let deadline = match self.session.keep_alive() {
                // Silence is ours while blocked: the keep-alive restarts when reading resumes.
                Some(_) if blocked => Instant::now() + Duration::from_secs(24 * 3600),
                // MQTT-3.1.2-24: one and a half keep-alive periods without a packet.
                Some(keep_alive) => last_heard + keep_alive.mul_f32(1.5),
                None if !self.session.is_connected() => connect_deadline,
                None => Instant::now() + Duration::from_secs(24 * 3600),
            };
            // Boxed, and only while acknowledgements wait for the disk or the connection is
            // paused: a future inline here would be part of every idle connection's task.
            let awaits_durability = self.session.awaits_durability();
            let publishing = match self.publishing.as_deref_mut() {
                Some(publishing) if flow_paused || awaits_durability => {
                    Some(Box::pin(publishing.changed(flow_paused, awaits_durability)))
                }
                _ => None,
            };
            // In a block: what woke the task and what was read end here, so neither is kept
            // across a later await (a value kept across two awaits takes a slot of its own
            // in the task, beside the select's futures).
            {
                // Biased: input before deliveries (every read ends with a flush anyway), so a
                // subscriber flooded with deliveries still has its PUBACKs and PINGREQs read.
                // The handlers only say what woke the task: the flush happens after the
                // select, once its futures are gone, so the task never holds both at once.
                let woken = tokio::select! {
                    biased;
                    woken = wait_if_some(publishing) => woken,
                    read = read_some(&mut self.stream, &mut self.buffer, &mut self.busy), if !blocked => {
                        Woken::Read(read)
                    }
                    // Bytes to write, or a signal (looked at at the top of the loop).
                    _ = self.session.outbox().notify.notified() => Woken::Outbox,
                    _ = tokio::time::sleep_until(deadline) => Woken::Deadline,
                };
                let read = match woken {
                    Woken::Read(read) => read,
                    Woken::Flow => {
                        // A client that was not read cannot be blamed for silence: restart the
                        // clock.
                        last_heard = Instant::now();
                        continue;
                    }
                    Woken::Durable | Woken::Outbox => {
                        self.session.release_held_acks();
                        if let Err(error) = flush(&mut self.stream, self.session.outbox()).await {
                            return End::Abnormal(format!("socket error: {error}"));
                        }
                        continue;
                    }
                    Woken::Deadline => {
                        if self.session.is_connected() {
                            let why = "keep-alive timeout: no packet for 1.5 keep-alive periods";
                            self.session
                                .server_disconnect(reason::KEEP_ALIVE_TIMEOUT, why);
                            return End::Abnormal(why.into());
                        }
                        return End::Abnormal("no CONNECT within the connect timeout".into());
                    }
                };
                match read {
                    Ok(0) => {
                        return End::Abnormal("client closed the socket without DISCONNECT".into())
                    }
                    Err(error) => return End::Abnormal(format!("socket error: {error}")),
                    Ok(_) => last_heard = Instant::now(),
                }
            }
            loop {
                // The decoded packet is handled in this statement, so nothing of it is held
                // across the takeover wait below.
                if !self.session.is_connected() {
                    // A CONNECT that fails to decode is refused in the client's protocol.
                    if let Some(protocol) = connect_protocol(&self.buffer) {
                        self.session.note_connect_protocol(protocol);
                    }
                }
                let protocol = self.session.protocol();
                let max_packet_size = self.session.max_packet_size();
                let control = match decode_with(&mut self.buffer, max_packet_size, protocol) {
                    Ok(Some(packet)) => {
                        let session = &mut self.session;
                        let (control, congested) =
                            warren_core::flow::observe(|| session.handle_packet(packet));
                        if !congested.is_empty() {
                            self.note_publisher();
                            if let Some(publishing) = self.publishing.as_deref_mut() {
                                publishing.flow.hold(congested);
                            }
                        }
                        control
                    }
                    Ok(None) => break,
                    Err(error) => match self.session.handle_decode_error(&error) {
                        Control::Close(end) => return end,
                        _ => return End::Abnormal(error.to_string()),
                    },
                };
                match control {
                    Control::Continue => {}
                    Control::Close(end) => return end,
                    Control::AwaitTakeover(takeover) => {
                        takeover.kick();
                        // Boxed: a takeover is rare, and its timer would otherwise be part of
                        // every connection's task.
                        let waited =
                            Box::pin(timeout(self.config.takeover_timeout, takeover.ended())).await;
                        if waited.is_err() {
                            tracing::warn!(
                                connection = self.session.connection_id(),
                                "the connection taken over did not finish in time"
                            );
                        }
                        match self.session.resume_connect() {
                            Control::Continue => {}
                            Control::Close(end) => return end,
                            Control::AwaitTakeover(_) => {
                                return End::Abnormal("takeover raced with another".into())
                            }
                        }
                    }
                }
            }
            // Acknowledgements whose messages reached the disk while the batch was handled.
            self.session.release_held_acks();
            if let Err(error) = flush(&mut self.stream, self.session.outbox()).await {
                return End::Abnormal(format!("socket error: {error}"));
            }
        }
    }
}

/// How long a connection the broker closes (a DISCONNECT with a reason code, or a refused
/// CONNECT) goes on reading, and discarding, what the client still sends after the broker's
/// last packet and FIN.
const LINGER: Duration = Duration::from_secs(1);

/// Reads and discards input until the client closes its side, the socket fails, or
/// [`LINGER`] has passed. A socket closed with input unread, or receiving input after its
/// close, answers with a reset: the client's next write fails before it has read the
/// broker's DISCONNECT (paho's `test_flow_control2` writes PUBRELs for the PUBRECs it reads
/// ahead of the DISCONNECT 0x93), and a reset can discard what it had not read yet.
async fn linger(stream: &mut ClientStream) {
    let mut discarded = BytesMut::with_capacity(4096);
    let _ = timeout(LINGER, async {
        loop {
            discarded.clear();
            match stream.read_into(&mut discarded).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
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
async fn wait_if_some<F: std::future::Future>(future: Option<std::pin::Pin<Box<F>>>) -> F::Output {
    match future {
        Some(future) => future.await,
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

/// Writes everything the outbox holds. What the socket takes at once (the usual case) is
/// written without a future; a write that has to wait for the socket (and every TLS write)
/// is boxed, so that wait is not part of every idle connection's task.
async fn flush(stream: &mut ClientStream, outbox: &Outbox) -> std::io::Result<()> {
    while let Some(bytes) = next_output(outbox) {
        let written = match stream.try_write(&bytes) {
            Ok(written) => written,
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(error) => return Err(error),
        };
        if written < bytes.len() {
            Box::pin(stream.write_all(&bytes[written..])).await?;
        }
    }
    Ok(())
}

/// Takes the outbox's encoded packets, settling what it asks for and kicking queues that
/// waited for room (which may refill it, hence the loop); `None` once there is nothing to
/// write.
fn next_output(outbox: &Outbox) -> Option<Bytes> {
    while let Some(drained) = outbox.drain() {
        acknowledge_all(drained.to_ack);
        for queue in drained.starved {
            queue.dispatch();
        }
        if !drained.bytes.is_empty() {
            return Some(drained.bytes);
        }
    }
    None
}

/// Reads what is available into `buffer`. An idle connection holds no read buffer: when
/// everything read was consumed and the last read did not fill the buffer, the buffer is
/// released, and a small one is allocated only once the socket is readable again. While data
/// flows (`busy`: the last read filled the buffer) reads go straight into 16 KiB chunks.
///
/// A `poll_fn` over the socket's readiness rather than an `async fn`: this future is part of
/// every idle connection's task, and a closure over three references is a fraction of the
/// size of the equivalent state machine.
fn read_some<'a>(
    stream: &'a mut ClientStream,
    buffer: &'a mut BytesMut,
    busy: &'a mut bool,
) -> impl std::future::Future<Output = std::io::Result<usize>> + Send + 'a {
    /// What a read goes through.
    enum Read<'a> {
        Plain(&'a TcpStream, &'a mut BytesMut, &'a mut bool),
        /// rustls buffers what it decrypted: read through it into the buffer. Boxed: the
        /// TLS read future would otherwise be part of every plain connection's task.
        Tls(ReadFuture<'a>),
    }
    let mut read = match stream {
        ClientStream::Plain(stream) => Read::Plain(&*stream, buffer, busy),
        // TLS and WebSocket need room to read into while they wait: an idle connection
        // waits with a small buffer (not a 64 KiB one per connection), a busy one reads in
        // chunks, as on a plain socket.
        // A WebSocket connection waits with no buffer at all: the tunnel holds the message
        // it read until the buffer is allocated.
        tls => {
            let idle = buffer.is_empty() && !*busy;
            if idle {
                *buffer = BytesMut::new();
            } else if buffer.capacity() - buffer.len() < READ_CHUNK / 4 {
                buffer.reserve(READ_CHUNK);
            }
            Read::Tls(Box::pin(async move {
                if idle {
                    std::future::poll_fn(|cx| tls.poll_read_ready(cx)).await?;
                    buffer.reserve(FIRST_READ);
                }
                let room = buffer.capacity() - buffer.len();
                let read = tls.read_into(buffer).await?;
                *busy = read == room;
                Ok(read)
            }))
        }
    };
    std::future::poll_fn(move |cx| match &mut read {
        Read::Plain(stream, buffer, busy) => poll_read_plain(cx, stream, buffer, busy),
        Read::Tls(future) => future.as_mut().poll(cx),
    })
}

/// A boxed TLS read.
type ReadFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<usize>> + Send + 'a>>;

/// One poll of [`read_some`] on a plain socket.
fn poll_read_plain(
    cx: &mut std::task::Context<'_>,
    stream: &TcpStream,
    buffer: &mut BytesMut,
    busy: &mut bool,
) -> std::task::Poll<std::io::Result<usize>> {
    loop {
        if buffer.is_empty() && !*busy {
            *buffer = BytesMut::new();
            std::task::ready!(stream.poll_read_ready(cx))?;
            buffer.reserve(FIRST_READ);
        } else if buffer.capacity() - buffer.len() < READ_CHUNK / 4 {
            buffer.reserve(READ_CHUNK);
        }
        let room = buffer.capacity() - buffer.len();
        match stream.try_read_buf(buffer) {
            Ok(read) => {
                *busy = read == room;
                return std::task::Poll::Ready(Ok(read));
            }
            // Readiness was stale, or a busy connection caught up: wait for the socket
            // (releasing the buffer first if it holds nothing).
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                *busy = false;
                if !buffer.is_empty() {
                    std::task::ready!(stream.poll_read_ready(cx))?;
                }
            }
            Err(error) => return std::task::Poll::Ready(Err(error)),
        }
    }
}
