//! The inter-node transport: per peer, one outgoing control link and one outgoing bulk link,
//! each a TCP connection opened by the HMAC handshake (`handshake.rs`), kept open, re-opened
//! with backoff after a break. Requests wait in a bounded queue per link: a slow peer holds
//! its callers back instead of growing memory. The control link pings every period for the
//! failure detector.
//!
//! Every node dials every peer it knows and serves what peers dial: a request goes out on
//! this node's own link and its response comes back on the same connection.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::{Mutex, RwLock};
use rand::RngCore;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

use crate::codec::{self, Frame, LinkKind, NONCE_LENGTH, PROTOCOL_VERSION};
use crate::detector::FailureDetector;
use crate::handshake::{cluster_mismatch, Role, Transcript};
use crate::secret::Secret;

/// What a node's request handler answers: a body, or an error text for the caller.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Bytes, String>> + Send>>;

/// Request methods from this one on go to the extension handler
/// ([`Transport::set_extension_handler`]).
pub const EXTENSION_METHODS: u16 = 100;

/// Serves requests from peers: `(from node, method, body)`. It is called on the link's
/// reader in the order requests arrive (what it does before returning its future happens in
/// that order); the future is awaited in a task of its own, so answers may leave in any order.
pub type Handler = Arc<dyn Fn(String, u16, Bytes) -> HandlerFuture + Send + Sync>;

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// No open link to the peer (it is down, unknown, or refused us).
    Unreachable(String),
    /// No answer within the time allowed.
    Timeout,
    /// The peer's handler failed, with its text.
    Remote(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(why) => write!(f, "peer unreachable: {why}"),
            CallError::Timeout => f.write_str("peer did not answer in time"),
            CallError::Remote(text) => write!(f, "peer answered with an error: {text}"),
        }
    }
}

impl std::error::Error for CallError {}

/// A link's byte stream: plain TCP, or TLS over it (`cluster.ssl_options.*`).
trait LinkIo: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> LinkIo for T {}
type LinkStream = Box<dyn LinkIo>;

/// TLS on the inter-node links: every node presents its certificate and checks its peer's
/// against the cluster's CA, in both directions; the HMAC handshake then runs inside.
#[derive(Clone)]
pub struct LinkTls {
    /// What a node accepting a link presents and how it checks the dialling node.
    pub server: Arc<tokio_rustls::rustls::ServerConfig>,
    /// What a dialling node presents and how it checks the node it dials.
    pub client: Arc<tokio_rustls::rustls::ClientConfig>,
}

impl std::fmt::Debug for LinkTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LinkTls")
    }
}

/// The transport's settings.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// This node's name.
    pub node: String,
    /// The shared secret.
    pub secret: Secret,
    /// How often control links ping (about 100 ms).
    pub ping_period: Duration,
    /// Requests that may wait per link before callers are held back.
    pub queue_capacity: usize,
    /// The largest frame accepted.
    pub max_frame: usize,
    /// Time allowed for a handshake.
    pub handshake_timeout: Duration,
    /// TLS on every link, when set.
    pub tls: Option<LinkTls>,
}

impl TransportConfig {
    /// Defaults for `node` and `secret`: pings every 100 ms, 256 queued requests per link.
    pub fn new(node: String, secret: Secret) -> TransportConfig {
        TransportConfig {
            node,
            secret,
            ping_period: Duration::from_millis(100),
            queue_capacity: 256,
            max_frame: codec::DEFAULT_MAX_FRAME,
            handshake_timeout: Duration::from_secs(3),
            tls: None,
        }
    }
}

type Pending = Mutex<HashMap<u64, oneshot::Sender<Result<Bytes, CallError>>>>;

/// One outgoing link to a peer.
struct Link {
    kind: LinkKind,
    queue: mpsc::Sender<Frame>,
    pending: Arc<Pending>,
    connected: Arc<AtomicBool>,
    /// Why the last attempt failed, for callers told the peer is unreachable.
    last_error: Arc<Mutex<String>>,
}

/// A peer: its address and its two links.
struct Peer {
    address: Arc<RwLock<String>>,
    /// The address was configured (the seed list): membership records do not replace it,
    /// so an operator's route to a peer (a proxy, a NAT) wins over the peer's own.
    pinned: bool,
    control: Link,
    bulk: Link,
}

/// The running transport.
pub struct Transport {
    config: TransportConfig,
    cluster_id: Arc<RwLock<String>>,
    handler: OnceLock<Handler>,
    /// The handler of methods from [`EXTENSION_METHODS`] on (quorum queues' groups).
    extension: OnceLock<Handler>,
    peers: RwLock<HashMap<String, Arc<Peer>>>,
    detector: Arc<FailureDetector>,
    next_id: AtomicU64,
    shutdown: watch::Receiver<bool>,
}

impl Transport {
    /// A transport for `config`, stopping when `shutdown` turns true. Serve peers with
    /// [`Transport::serve`]; add peers with [`Transport::add_peer`].
    pub fn new(
        config: TransportConfig,
        cluster_id: Arc<RwLock<String>>,
        shutdown: watch::Receiver<bool>,
    ) -> Arc<Transport> {
        let detector = Arc::new(FailureDetector::new(
            config.ping_period,
            config.ping_period * 5,
        ));
        Arc::new(Transport {
            config,
            cluster_id,
            handler: OnceLock::new(),
            extension: OnceLock::new(),
            peers: RwLock::new(HashMap::new()),
            detector,
            next_id: AtomicU64::new(1),
            shutdown,
        })
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.config.node
    }

    /// The failure detector the control links feed.
    pub fn detector(&self) -> &Arc<FailureDetector> {
        &self.detector
    }

    /// Installs the handler for peers' requests (once).
    pub fn set_handler(&self, handler: Handler) {
        let _ = self.handler.set(handler);
    }

    /// Installs the handler for peers' requests with methods from [`EXTENSION_METHODS`]
    /// on (once): the quorum queues' groups, beside the metadata store's handler.
    pub fn set_extension_handler(&self, handler: Handler) {
        let _ = self.extension.set(handler);
    }

    /// The known peers.
    pub fn peers(&self) -> Vec<String> {
        let mut names: Vec<String> = self.peers.read().keys().cloned().collect();
        names.sort();
        names
    }

    /// Starts dialing `name` at `address` (`HOST:PORT`), or updates its address unless it
    /// was pinned by [`Transport::add_seed`].
    pub fn add_peer(self: &Arc<Self>, name: &str, address: &str) {
        self.insert_peer(name, address, false);
    }

    /// Starts dialing a seed at the configured `address`, which later membership records do
    /// not replace.
    pub fn add_seed(self: &Arc<Self>, name: &str, address: &str) {
        self.insert_peer(name, address, true);
    }

    fn insert_peer(self: &Arc<Self>, name: &str, address: &str, pinned: bool) {
        if name == self.config.node {
            return;
        }
        if let Some(peer) = self.peers.read().get(name) {
            if !peer.pinned {
                let mut current = peer.address.write();
                if *current != address {
                    *current = address.to_string();
                }
            }
            return;
        }
        let mut peers = self.peers.write();
        if peers.contains_key(name) {
            return;
        }
        let address = Arc::new(RwLock::new(address.to_string()));
        let control = self.start_link(name, LinkKind::Control, Arc::clone(&address));
        let bulk = self.start_link(name, LinkKind::Bulk, Arc::clone(&address));
        peers.insert(
            name.to_string(),
            Arc::new(Peer {
                address,
                pinned,
                control,
                bulk,
            }),
        );
    }

    /// Whether the link of `kind` to `peer` is open.
    pub fn is_connected(&self, peer: &str, kind: LinkKind) -> bool {
        self.peers.read().get(peer).is_some_and(|p| {
            let link = match kind {
                LinkKind::Control => &p.control,
                LinkKind::Bulk => &p.bulk,
            };
            link.connected.load(Ordering::Acquire)
        })
    }

    /// Sends a request to `peer` on its `kind` link and waits up to `timeout` for the answer.
    /// Fails at once when the link is not open.
    pub async fn call(
        &self,
        peer: &str,
        kind: LinkKind,
        method: u16,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, CallError> {
        let (queue, pending) = {
            let peers = self.peers.read();
            let Some(found) = peers.get(peer) else {
                return Err(CallError::Unreachable(format!(
                    "{peer} is not a known peer"
                )));
            };
            let link = match kind {
                LinkKind::Control => &found.control,
                LinkKind::Bulk => &found.bulk,
            };
            if !link.connected.load(Ordering::Acquire) {
                let why = link.last_error.lock().clone();
                return Err(CallError::Unreachable(format!(
                    "no {} link to {peer}{}{why}",
                    link.kind.name(),
                    if why.is_empty() { "" } else { ": " }
                )));
            }
            (link.queue.clone(), Arc::clone(&link.pending))
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        pending.lock().insert(id, sender);
        let outcome = tokio::time::timeout(timeout, async {
            // A full queue holds the caller here: the per-peer bound.
            queue
                .send(Frame::Request { id, method, body })
                .await
                .map_err(|_| CallError::Unreachable("the link stopped".into()))?;
            receiver
                .await
                .unwrap_or_else(|_| Err(CallError::Unreachable("the link broke".into())))
        })
        .await;
        match outcome {
            Ok(result) => result,
            Err(_) => {
                pending.lock().remove(&id);
                Err(CallError::Timeout)
            }
        }
    }

    fn start_link(
        self: &Arc<Self>,
        peer: &str,
        kind: LinkKind,
        address: Arc<RwLock<String>>,
    ) -> Link {
        let (queue, outgoing) = mpsc::channel(self.config.queue_capacity);
        let link = Link {
            kind,
            queue,
            pending: Arc::default(),
            connected: Arc::default(),
            last_error: Arc::default(),
        };
        let task = LinkTask {
            transport: Arc::clone(self),
            peer: peer.to_string(),
            kind,
            address,
            pending: Arc::clone(&link.pending),
            connected: Arc::clone(&link.connected),
            last_error: Arc::clone(&link.last_error),
        };
        tokio::spawn(task.run(outgoing));
        link
    }

    /// Accepts peers' connections on `listener` until shutdown.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        let mut shutdown = self.shutdown.clone();
        loop {
            tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let _ = stream.set_nodelay(true);
                        tokio::spawn(Arc::clone(&self).serve_connection(stream, peer));
                    }
                    Err(error) => {
                        tracing::warn!(%error, "cluster listener: accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
                _ = shutdown.changed() => return,
            }
        }
    }

    /// The listener's side of one connection: handshake, then answer pings and requests.
    async fn serve_connection(self: Arc<Self>, stream: TcpStream, address: SocketAddr) {
        let mut buffer = BytesMut::with_capacity(4096);
        let handshake = tokio::time::timeout(self.config.handshake_timeout, async {
            let mut stream: LinkStream = match &self.config.tls {
                None => Box::new(stream),
                Some(tls) => {
                    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&tls.server));
                    match acceptor.accept(stream).await {
                        Ok(stream) => Box::new(stream),
                        Err(error) => return Err(format!("TLS handshake failed: {error}")),
                    }
                }
            };
            let accepted = self
                .accept_handshake(&mut stream, &mut buffer, address)
                .await?;
            Ok((stream, accepted))
        })
        .await;
        let (stream, (peer, link)) = match handshake {
            Ok(Ok(accepted)) => accepted,
            Ok(Err(reason)) => {
                tracing::warn!(peer = %address, "refused a cluster connection: {reason}");
                return;
            }
            Err(_) => {
                tracing::warn!(peer = %address, "refused a cluster connection: no handshake in time");
                return;
            }
        };
        tracing::debug!(node = %peer, link = link.name(), "cluster link accepted");
        let (mut reader, mut writer) = tokio::io::split(stream);
        let (replies, mut outgoing) = mpsc::channel::<Frame>(self.config.queue_capacity);
        let writer_task = tokio::spawn(async move {
            let mut out = BytesMut::new();
            while let Some(frame) = outgoing.recv().await {
                codec::encode(&frame, &mut out);
                // Batch whatever else is ready into the same write.
                while let Ok(frame) = outgoing.try_recv() {
                    codec::encode(&frame, &mut out);
                }
                if writer.write_all(&out).await.is_err() {
                    return;
                }
                out.clear();
            }
        });
        let mut shutdown = self.shutdown.clone();
        'connection: loop {
            loop {
                match codec::decode(&mut buffer, self.config.max_frame) {
                    Ok(Some(Frame::Ping { sequence })) => {
                        if replies.send(Frame::Pong { sequence }).await.is_err() {
                            break 'connection;
                        }
                    }
                    Ok(Some(Frame::Request { id, method, body })) => {
                        let handler = match method >= EXTENSION_METHODS {
                            true => self.extension.get(),
                            false => self.handler.get(),
                        };
                        let Some(handler) = handler.cloned() else {
                            let _ = replies
                                .send(Frame::Response {
                                    id,
                                    ok: false,
                                    body: Bytes::from_static(b"node is starting"),
                                })
                                .await;
                            continue;
                        };
                        let replies = replies.clone();
                        // Called here, in arrival order: a handler may do its synchronous
                        // part before returning its future (forwarding keeps a link's
                        // requests in order that way); only the waiting is spawned.
                        let answer = handler(peer.clone(), method, body);
                        tokio::spawn(async move {
                            let (ok, body) = match answer.await {
                                Ok(body) => (true, body),
                                Err(text) => (false, Bytes::from(text)),
                            };
                            let _ = replies.send(Frame::Response { id, ok, body }).await;
                        });
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(error) => {
                        tracing::warn!(node = %peer, %error, "cluster link closed");
                        break 'connection;
                    }
                }
            }
            tokio::select! {
                read = reader.read_buf(&mut buffer) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                },
                _ = shutdown.changed() => break,
            }
        }
        drop(replies);
        writer_task.abort();
    }

    async fn accept_handshake(
        &self,
        stream: &mut LinkStream,
        buffer: &mut BytesMut,
        address: SocketAddr,
    ) -> Result<(String, LinkKind), String> {
        let hello = read_frame(stream, buffer, 4096).await?;
        let Frame::Hello {
            version,
            link,
            node: client_node,
            cluster_id: client_cluster,
            nonce: client_nonce,
        } = hello
        else {
            return Err("the first frame was not a hello".into());
        };
        if version != PROTOCOL_VERSION {
            let reason = format!("protocol version {version} is not {PROTOCOL_VERSION}");
            refuse(stream, &reason).await;
            return Err(format!("{client_node} at {address}: {reason}"));
        }
        let server_cluster = self.cluster_id.read().clone();
        if let Some(reason) = cluster_mismatch(&server_cluster, &client_cluster) {
            refuse(stream, &reason).await;
            return Err(format!("{client_node} at {address}: {reason}"));
        }
        let mut server_nonce = [0u8; NONCE_LENGTH];
        rand::thread_rng().fill_bytes(&mut server_nonce);
        let transcript = Transcript {
            client_node: &client_node,
            server_node: &self.config.node,
            client_cluster: &client_cluster,
            server_cluster: &server_cluster,
            client_nonce: &client_nonce,
            server_nonce: &server_nonce,
            link,
        };
        let challenge = Frame::Challenge {
            node: self.config.node.clone(),
            cluster_id: server_cluster.clone(),
            nonce: server_nonce,
            proof: transcript.proof(&self.config.secret, Role::Server),
        };
        write_frame(stream, &challenge).await?;
        match read_frame(stream, buffer, 4096).await? {
            Frame::Proof { proof }
                if transcript.verify(&self.config.secret, Role::Client, &proof) =>
            {
                write_frame(stream, &Frame::Welcome).await?;
                Ok((client_node, link))
            }
            Frame::Proof { .. } => {
                refuse(
                    stream,
                    "wrong cluster secret: the proof did not match this node's secret",
                )
                .await;
                Err(format!(
                    "{client_node} at {address} presented another cluster secret (its proof did not match)"
                ))
            }
            Frame::Refused { reason } => {
                Err(format!("{client_node} at {address} gave up: {reason}"))
            }
            other => Err(format!(
                "{client_node} at {address} sent {other:?} instead of a proof"
            )),
        }
    }

    /// The dialer's side of the handshake.
    async fn dial_handshake(
        &self,
        stream: &mut LinkStream,
        buffer: &mut BytesMut,
        peer: &str,
        link: LinkKind,
    ) -> Result<(), String> {
        let mut client_nonce = [0u8; NONCE_LENGTH];
        rand::thread_rng().fill_bytes(&mut client_nonce);
        let client_cluster = self.cluster_id.read().clone();
        let hello = Frame::Hello {
            version: PROTOCOL_VERSION,
            link,
            node: self.config.node.clone(),
            cluster_id: client_cluster.clone(),
            nonce: client_nonce,
        };
        write_frame(stream, &hello).await?;
        let (server_node, server_cluster, server_nonce, proof) =
            match read_frame(stream, buffer, 4096).await? {
                Frame::Challenge {
                    node,
                    cluster_id,
                    nonce,
                    proof,
                } => (node, cluster_id, nonce, proof),
                Frame::Refused { reason } => return Err(format!("refused by {peer}: {reason}")),
                other => return Err(format!("{peer} answered {other:?} instead of a challenge")),
            };
        if server_node != peer {
            let reason = format!("expected node {peer}, reached {server_node}");
            refuse(stream, &reason).await;
            return Err(reason);
        }
        let transcript = Transcript {
            client_node: &self.config.node,
            server_node: &server_node,
            client_cluster: &client_cluster,
            server_cluster: &server_cluster,
            client_nonce: &client_nonce,
            server_nonce: &server_nonce,
            link,
        };
        if !transcript.verify(&self.config.secret, Role::Server, &proof) {
            refuse(
                stream,
                "wrong cluster secret: the challenge's proof did not match",
            )
            .await;
            return Err(format!(
                "{peer} presented another cluster secret (its proof did not match)"
            ));
        }
        if let Some(reason) = cluster_mismatch(&client_cluster, &server_cluster) {
            refuse(stream, &reason).await;
            return Err(reason);
        }
        let proof = transcript.proof(&self.config.secret, Role::Client);
        write_frame(stream, &Frame::Proof { proof }).await?;
        match read_frame(stream, buffer, 4096).await? {
            Frame::Welcome => Ok(()),
            Frame::Refused { reason } => Err(format!("refused by {peer}: {reason}")),
            other => Err(format!("{peer} answered {other:?} instead of welcome")),
        }
    }
}

/// The task that keeps one outgoing link open.
struct LinkTask {
    transport: Arc<Transport>,
    peer: String,
    kind: LinkKind,
    address: Arc<RwLock<String>>,
    pending: Arc<Pending>,
    connected: Arc<AtomicBool>,
    last_error: Arc<Mutex<String>>,
}

impl LinkTask {
    async fn run(self, mut outgoing: mpsc::Receiver<Frame>) {
        let mut shutdown = self.transport.shutdown.clone();
        let mut backoff = Duration::from_millis(50);
        // Log each distinct failure once, not on every retry.
        let mut logged = String::new();
        loop {
            if *shutdown.borrow() {
                return;
            }
            let address = self.address.read().clone();
            let attempt =
                tokio::time::timeout(self.transport.config.handshake_timeout, self.open(&address))
                    .await
                    .unwrap_or_else(|_| Err("no answer to the handshake in time".into()));
            match attempt {
                Ok((stream, buffer)) => {
                    backoff = Duration::from_millis(50);
                    logged.clear();
                    self.last_error.lock().clear();
                    tracing::info!(node = %self.peer, link = self.kind.name(), %address, "cluster link open");
                    self.connected.store(true, Ordering::Release);
                    if self.kind == LinkKind::Control {
                        self.transport
                            .detector
                            .record_link(&self.peer, true, Instant::now());
                    }
                    let why = self
                        .pump(stream, buffer, &mut outgoing, &mut shutdown)
                        .await;
                    self.connected.store(false, Ordering::Release);
                    if self.kind == LinkKind::Control {
                        self.transport
                            .detector
                            .record_link(&self.peer, false, Instant::now());
                    }
                    for (_, waiter) in self.pending.lock().drain() {
                        let _ = waiter.send(Err(CallError::Unreachable(why.clone())));
                    }
                    tracing::info!(node = %self.peer, link = self.kind.name(), "cluster link closed: {why}");
                    *self.last_error.lock() = why;
                }
                Err(why) => {
                    if why != logged {
                        // Connection refusals are expected while a peer starts; other
                        // failures (a wrong secret) are worth a warning.
                        if why.contains("secret")
                            || why.contains("cluster")
                            || why.contains("expected node")
                        {
                            tracing::warn!(node = %self.peer, link = self.kind.name(), %address, "cannot open cluster link: {why}");
                        } else {
                            tracing::debug!(node = %self.peer, link = self.kind.name(), %address, "cannot open cluster link: {why}");
                        }
                        logged = why.clone();
                    }
                    *self.last_error.lock() = why;
                }
            }
            // Requests queued while the link was down are failed, not kept.
            while let Ok(frame) = outgoing.try_recv() {
                if let Frame::Request { id, .. } = frame {
                    if let Some(waiter) = self.pending.lock().remove(&id) {
                        let _ = waiter.send(Err(CallError::Unreachable("the link broke".into())));
                    }
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => return,
            }
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    async fn open(&self, address: &str) -> Result<(LinkStream, BytesMut), String> {
        let tcp = TcpStream::connect(address)
            .await
            .map_err(|e| format!("connect to {address}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let mut stream: LinkStream = match &self.transport.config.tls {
            None => Box::new(tcp),
            Some(tls) => {
                // The peer's certificate must name the host it is dialled by.
                let host = address
                    .rsplit_once(':')
                    .map_or(address, |(host, _)| host)
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.to_owned())
                    .map_err(|e| format!("TLS to {address}: bad host name: {e}"))?;
                let connector = tokio_rustls::TlsConnector::from(Arc::clone(&tls.client));
                let stream = tokio::time::timeout(
                    self.transport.config.handshake_timeout,
                    connector.connect(name, tcp),
                )
                .await
                .map_err(|_| format!("TLS to {address}: no handshake in time"))?
                .map_err(|e| format!("TLS to {address}: {e}"))?;
                Box::new(stream)
            }
        };
        let mut buffer = BytesMut::with_capacity(4096);
        self.transport
            .dial_handshake(&mut stream, &mut buffer, &self.peer, self.kind)
            .await?;
        Ok((stream, buffer))
    }

    /// Moves frames both ways until the connection breaks; returns why it did.
    async fn pump(
        &self,
        stream: LinkStream,
        mut buffer: BytesMut,
        outgoing: &mut mpsc::Receiver<Frame>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> String {
        let (mut reader, mut writer) = tokio::io::split(stream);
        let period = self.transport.config.ping_period;
        let mut ping = tokio::time::interval(period);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sequence = 0u64;
        let mut sent_at: HashMap<u64, Instant> = HashMap::new();
        let mut out = BytesMut::new();
        // A link whose peer stopped answering (a silent network) is closed and re-opened:
        // bytes lost in between would leave the stream mid-frame.
        let dead_after = period * 20;
        let mut last_pong = Instant::now();
        loop {
            loop {
                match codec::decode(&mut buffer, self.transport.config.max_frame) {
                    Ok(Some(Frame::Pong { sequence })) => {
                        last_pong = Instant::now();
                        if let Some(at) = sent_at.remove(&sequence) {
                            if self.kind == LinkKind::Control {
                                let now = Instant::now();
                                self.transport
                                    .detector
                                    .record_pong(&self.peer, now, now - at);
                            }
                        }
                    }
                    Ok(Some(Frame::Response { id, ok, body })) => {
                        if let Some(waiter) = self.pending.lock().remove(&id) {
                            let answer = if ok {
                                Ok(body)
                            } else {
                                Err(CallError::Remote(
                                    String::from_utf8_lossy(&body).into_owned(),
                                ))
                            };
                            let _ = waiter.send(answer);
                        }
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(error) => return error.to_string(),
                }
            }
            tokio::select! {
                read = reader.read_buf(&mut buffer) => match read {
                    Ok(0) => return "the peer closed the connection".into(),
                    Err(error) => return error.to_string(),
                    Ok(_) => {}
                },
                frame = outgoing.recv() => {
                    let Some(frame) = frame else { return "the transport stopped".into() };
                    codec::encode(&frame, &mut out);
                    while let Ok(frame) = outgoing.try_recv() {
                        codec::encode(&frame, &mut out);
                    }
                    if let Err(error) = writer.write_all(&out).await {
                        return error.to_string();
                    }
                    out.clear();
                }
                _ = ping.tick() => {
                    sequence += 1;
                    let now = Instant::now();
                    if now.duration_since(last_pong) > dead_after {
                        return format!("no answer to pings for {dead_after:?}");
                    }
                    sent_at.insert(sequence, now);
                    // Pings never answered are forgotten after a while.
                    sent_at.retain(|_, at| now.duration_since(*at) < period * 50);
                    self.transport.detector.tick(now);
                    codec::encode(&Frame::Ping { sequence }, &mut out);
                    if let Err(error) = writer.write_all(&out).await {
                        return error.to_string();
                    }
                    out.clear();
                }
                _ = shutdown.changed() => return "shutting down".into(),
            }
        }
    }
}

async fn read_frame(
    stream: &mut LinkStream,
    buffer: &mut BytesMut,
    max: usize,
) -> Result<Frame, String> {
    loop {
        if let Some(frame) = codec::decode(buffer, max).map_err(|e| e.to_string())? {
            return Ok(frame);
        }
        let read = stream.read_buf(buffer).await.map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("the connection closed during the handshake".into());
        }
    }
}

async fn write_frame(stream: &mut LinkStream, frame: &Frame) -> Result<(), String> {
    let mut out = BytesMut::new();
    codec::encode(frame, &mut out);
    stream.write_all(&out).await.map_err(|e| e.to_string())
}

async fn refuse(stream: &mut LinkStream, reason: &str) {
    let _ = write_frame(
        stream,
        &Frame::Refused {
            reason: reason.to_string(),
        },
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn node(name: &str, secret: &[u8]) -> (Arc<Transport>, SocketAddr, watch::Sender<bool>) {
        let (stop, shutdown) = watch::channel(false);
        let config = TransportConfig {
            ping_period: Duration::from_millis(20),
            ..TransportConfig::new(name.to_string(), Secret::from_bytes(secret.to_vec()))
        };
        let transport = Transport::new(config, Arc::default(), shutdown);
        let echo: Handler = Arc::new(|from, method, body| {
            Box::pin(async move {
                if method == 0 {
                    return Err("method 0 fails".to_string());
                }
                Ok(Bytes::from(format!(
                    "{from}:{method}:{}",
                    String::from_utf8_lossy(&body)
                )))
            })
        });
        transport.set_handler(echo);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(Arc::clone(&transport).serve(listener));
        (transport, address, stop)
    }

    async fn wait_until(what: &str, condition: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !condition() {
            assert!(Instant::now() < deadline, "timed out waiting until {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn peers_with_the_same_secret_call_each_other_on_both_links_and_see_pings() {
        let (a, _, _stop_a) = node("a", b"secret").await;
        let (b, b_address, _stop_b) = node("b", b"secret").await;
        a.add_peer("b", &b_address.to_string());
        wait_until("a's links to b are open", || {
            a.is_connected("b", LinkKind::Control) && a.is_connected("b", LinkKind::Bulk)
        })
        .await;
        let answer = a
            .call(
                "b",
                LinkKind::Control,
                7,
                Bytes::from_static(b"hi"),
                Duration::from_secs(2),
            )
            .await
            .unwrap();
        assert_eq!(&answer[..], b"a:7:hi");
        let answer = a
            .call(
                "b",
                LinkKind::Bulk,
                8,
                Bytes::from_static(b"big"),
                Duration::from_secs(2),
            )
            .await
            .unwrap();
        assert_eq!(&answer[..], b"a:8:big");
        let failed = a
            .call(
                "b",
                LinkKind::Control,
                0,
                Bytes::new(),
                Duration::from_secs(2),
            )
            .await;
        assert_eq!(failed, Err(CallError::Remote("method 0 fails".into())));
        wait_until("the detector sees b up", || a.detector().is_up("b")).await;
        // b never dialed a: to b, a is unknown.
        assert!(!b.detector().is_up("a"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_peer_with_another_secret_is_refused_and_calls_fail_at_once() {
        let (a, _, _stop_a) = node("a", b"secret").await;
        let (_b, b_address, _stop_b) = node("b", b"another").await;
        a.add_peer("b", &b_address.to_string());
        wait_until("a's attempt failed on the secret", || {
            a.peers
                .read()
                .get("b")
                .is_some_and(|p| p.control.last_error.lock().contains("secret"))
        })
        .await;
        let started = Instant::now();
        let failed = a
            .call(
                "b",
                LinkKind::Control,
                1,
                Bytes::new(),
                Duration::from_secs(5),
            )
            .await;
        assert!(
            matches!(&failed, Err(CallError::Unreachable(why)) if why.contains("secret")),
            "{failed:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(1));
        assert!(!a.detector().is_up("b"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_link_reopens_after_the_peer_restarts() {
        let (a, _, _stop_a) = node("a", b"secret").await;
        let (_b, b_address, stop_b) = node("b", b"secret").await;
        a.add_peer("b", &b_address.to_string());
        wait_until("the link is open", || {
            a.is_connected("b", LinkKind::Control)
        })
        .await;
        stop_b.send(true).unwrap();
        wait_until("the link noticed", || {
            !a.is_connected("b", LinkKind::Control)
        })
        .await;
        // A new b on the same address.
        let (stop, shutdown) = watch::channel(false);
        let config = TransportConfig {
            ping_period: Duration::from_millis(20),
            ..TransportConfig::new("b".into(), Secret::from_bytes(b"secret".to_vec()))
        };
        let again = Transport::new(config, Arc::default(), shutdown);
        // The old b's socket may hold the port a moment longer (AddrInUse): try again.
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(b_address).await {
                Ok(listener) => break listener,
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!(%error, "rebinding b's address");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(error) => panic!("cannot bind b's address again: {error}"),
            }
        };
        tokio::spawn(Arc::clone(&again).serve(listener));
        wait_until("the link reopened", || {
            a.is_connected("b", LinkKind::Control)
        })
        .await;
        drop(stop);
    }
}
