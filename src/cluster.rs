//! Clustering in the server: when `node_name`/the seed list turn it on, binds the cluster
//! listener, loads the secret, starts the transport and the metadata store, and shows the
//! cluster to the management API. A node without a seed list starts none of this.

use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;
use serde_json::{json, Value as Json};
use tokio::sync::watch;
use tokio::task::JoinSet;
use warren_cluster::metadata::{MetadataConfig, MetadataStore, SnapshotIo};
use warren_cluster::secret::Secret;
use warren_cluster::transport::{Transport, TransportConfig};
use warren_config::{ListenAddr, Settings, CLUSTER_PORT};
use warren_core::remote::{Forwarding, RemoteLink};
use warren_core::Broker;
use warren_management::{ClusterView, ListingKind, Management};

use crate::join::JoinContext;
use crate::stream_replication::StreamReplication;
use crate::StartError;
use warren_cluster::join::JoinMarker;

/// The metadata directory inside `data_dir`.
pub const METADATA_DIR: &str = "metadata";
/// The default secret file inside `data_dir`.
pub const SECRET_FILE: &str = "cluster.secret";

/// A running cluster membership.
pub struct ClusterNode {
    /// The metadata store.
    pub metadata: Arc<MetadataStore>,
    /// Where peers reach this node.
    pub addr: std::net::SocketAddr,
    /// What `join_cluster` needs.
    pub join: Arc<JoinContext>,
}

/// `join_cluster` at start-up: the marker this start found (the node was just reset), and
/// what to tell when a new `join_cluster` wants the process restarted.
pub struct Joining {
    /// The pending join's marker ([`crate::join::reset_for_pending_join`]).
    pub pending: Option<JoinMarker>,
    /// Told to restart the process.
    pub restart: Arc<tokio::sync::Notify>,
}

/// The node's name: `node_name`, or `warren@<hostname>`.
pub fn node_name(settings: &Settings) -> String {
    settings.cluster.node_name_or(&crate::host_name())
}

/// Starts clustering for `broker`. `management` is filled once the API is built (for the
/// `/api/nodes` entry peers ask for).
pub async fn start(
    settings: &Settings,
    broker: &Arc<Broker>,
    quorum: &Arc<warren_raft::QuorumBackend>,
    management: Arc<OnceLock<Arc<Management>>>,
    joining: Joining,
    shutdown: &watch::Receiver<bool>,
    tasks: &mut JoinSet<()>,
) -> Result<ClusterNode, StartError> {
    let name = node_name(settings);
    let host = name
        .split_once('@')
        .map_or("localhost", |(_, host)| host)
        .to_string();
    let secret_path = settings
        .cluster
        .secret_file
        .clone()
        .unwrap_or_else(|| settings.data_dir.join(SECRET_FILE));
    let secret =
        Secret::load_or_create(&secret_path).map_err(|e| StartError::Cluster(e.to_string()))?;
    let listen = settings
        .cluster
        .listener
        .clone()
        .unwrap_or_else(|| ListenAddr::new(host.clone(), CLUSTER_PORT));
    let (listener, bound) = crate::bind("cluster", &listen).await?;
    // Peers dial the node name's host (the contract: HOST is the address peers use) on the
    // listener's port.
    let address = ListenAddr::new(host.clone(), bound.port()).to_socket_addr_string();
    let cluster_id = Arc::new(RwLock::new(String::new()));
    let mut transport_config = TransportConfig::new(name.clone(), secret);
    if settings.cluster.ssl.enabled() {
        let tls =
            crate::tls::cluster_link_tls(&settings.cluster.ssl).map_err(StartError::Cluster)?;
        transport_config.tls = Some(tls);
    }
    let join = Arc::new(JoinContext {
        data_dir: settings.data_dir.clone(),
        transport: transport_config.clone(),
        restart: joining.restart,
    });
    let transport = Transport::new(transport_config, Arc::clone(&cluster_id), shutdown.clone());
    tasks.spawn(Arc::clone(&transport).serve(listener));
    let export = {
        let broker = Arc::clone(broker);
        Arc::new(move || crate::persistence::snapshot(&broker))
            as Arc<dyn Fn() -> Json + Send + Sync>
    };
    let import = {
        let broker = Arc::clone(broker);
        let settings = settings.clone();
        Arc::new(move |definitions: &Json| {
            let bytes = serde_json::to_vec(definitions).map_err(|e| e.to_string())?;
            crate::import_definitions(&broker, &bytes, &settings, "metadata snapshot")
        }) as Arc<dyn Fn(&Json) -> Result<(), String> + Send + Sync>
    };
    // Peers' listing requests are answered by this node's management API.
    let management_for_peers = Arc::clone(&management);
    let node_info = {
        let name = name.clone();
        Arc::new(move || match management.get() {
            Some(management) => management.node_entry(),
            None => json!({"name": name, "running": true}),
        }) as Arc<dyn Fn() -> Json + Send + Sync>
    };
    let config = MetadataConfig {
        node: name.clone(),
        address,
        seeds: settings
            .cluster
            .seed_nodes()
            .map(|seed| (seed.name.clone(), seed.socket_addr_string()))
            .collect(),
        dir: settings.data_dir.join(METADATA_DIR),
        change_timeout: settings.cluster.change_timeout(),
        node_info,
        join_only: joining.pending.is_some(),
    };
    // Quorum queues' groups answer their peers from the start: a node replaying its
    // metadata log declares queues whose members on other nodes already call.
    // Classic queues' forwarding (docs/clustering.md, "Any node"), ready once the metadata
    // store knows every queue's home.
    let forwarding: Arc<OnceLock<Arc<Forwarding>>> = Arc::new(OnceLock::new());
    // Streams' replication (docs/streams.md, "Replication"), ready once the metadata store is.
    let streams: Arc<OnceLock<Arc<StreamReplication>>> = Arc::new(OnceLock::new());
    {
        let quorum = Arc::clone(quorum);
        let forwarding = Arc::clone(&forwarding);
        let streams = Arc::clone(&streams);
        transport.set_extension_handler(Arc::new(move |from, method, body| {
            if (STREAM_METHODS).contains(&method) {
                return match streams.get().and_then(|s| s.serve(from, method, body)) {
                    Some(answer) => answer,
                    None => Box::pin(async { Err("this node is still starting".to_string()) }),
                };
            }
            if method == LISTING_METHOD {
                let answer = serve_listing(management_for_peers.get(), &body);
                return Box::pin(async move { answer });
            }
            if method == FORWARD_METHOD {
                // Served now (the transport calls this in arrival order), answered when
                // the returned future is done.
                return match forwarding.get() {
                    Some(forwarding) => {
                        let answer = forwarding.serve_in_order(&from, &body);
                        Box::pin(async move { Ok(bytes::Bytes::from(answer.await)) })
                    }
                    None => Box::pin(async { Err("this node is still starting".to_string()) }),
                };
            }
            Box::pin(quorum.serve(method, body))
        }));
    }
    broker.set_local_node(&name);
    let metadata = MetadataStore::start(
        config,
        Arc::clone(broker),
        Arc::clone(&transport),
        cluster_id,
        SnapshotIo { export, import },
    )
    .await
    .map_err(|e| StartError::Cluster(e.to_string()))?;
    let replication = StreamReplication::new(
        Arc::clone(broker),
        Arc::clone(&metadata),
        Arc::clone(&transport),
    );
    let _ = streams.set(Arc::clone(&replication));
    tasks.spawn(replication.run(shutdown.clone()));
    quorum.join(Arc::new(QuorumLink {
        transport: Arc::clone(&transport),
        metadata: Arc::clone(&metadata),
    }));
    let forwarder = Forwarding::new(
        broker,
        Arc::new(ForwardLink {
            transport,
            metadata: Arc::clone(&metadata),
        }),
        tokio::runtime::Handle::current(),
    );
    broker.set_forwarding(Arc::clone(&forwarder));
    let _ = forwarding.set(Arc::clone(&forwarder));
    tasks.spawn(maintain_forwarding(forwarder, shutdown.clone()));
    if let Some(marker) = joining.pending {
        tokio::spawn(crate::join::finish_join(
            Arc::clone(&metadata),
            settings.data_dir.clone(),
            marker,
        ));
    }
    tracing::info!(node = %name, "clustering enabled");
    Ok(ClusterNode {
        metadata,
        addr: bound,
        join,
    })
}

/// What quorum queues' groups use of the cluster: its members, the failure detector and
/// the transport's links.
struct QuorumLink {
    transport: Arc<Transport>,
    metadata: Arc<MetadataStore>,
}

impl warren_raft::ClusterLink for QuorumLink {
    fn local(&self) -> &str {
        self.transport.node()
    }

    fn members(&self) -> Vec<String> {
        self.metadata
            .members()
            .into_iter()
            .map(|m| m.name)
            .collect()
    }

    fn home_of(&self, vhost: &str, queue: &str) -> Option<String> {
        self.metadata.home_of(vhost, queue)
    }

    fn is_connected(&self, node: &str) -> bool {
        node == self.transport.node()
            || self.transport.detector().status(node) != warren_cluster::detector::NodeStatus::Down
    }

    fn link_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.transport.detector().subscribe_changes())
    }

    fn call(
        &self,
        node: &str,
        method: u16,
        bulk: bool,
        body: bytes::Bytes,
        timeout: std::time::Duration,
    ) -> warren_raft::LinkFuture {
        let transport = Arc::clone(&self.transport);
        let node = node.to_string();
        let kind = match bulk {
            true => warren_cluster::codec::LinkKind::Bulk,
            false => warren_cluster::codec::LinkKind::Control,
        };
        Box::pin(async move {
            transport
                .call(&node, kind, method, body, timeout)
                .await
                .map_err(|error| match error {
                    warren_cluster::transport::CallError::Remote(text) => {
                        warren_raft::LinkError::Remote(text)
                    }
                    other => warren_raft::LinkError::Unreachable(other.to_string()),
                })
        })
    }
}

/// The transport method carrying classic queues' forwarding (`warren_core::remote`);
/// quorum queues' groups use 100-119.
const FORWARD_METHOD: u16 = 120;

/// The transport methods of streams' replication (`crate::stream_replication`).
const STREAM_METHODS: std::ops::RangeInclusive<u16> =
    crate::stream_replication::FETCH_METHOD..=crate::stream_replication::TAIL_METHOD;

/// The transport method by which the management API asks a peer for its own connections
/// and channels (and to close one of its connections).
const LISTING_METHOD: u16 = 121;
/// How long a listing waits for a peer.
const LISTING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Answers a peer's listing request: `connections` or `channels`, or `close\n<name>\n<reason>`.
fn serve_listing(
    management: Option<&Arc<Management>>,
    body: &[u8],
) -> Result<bytes::Bytes, String> {
    let management = management.ok_or("this node is still starting")?;
    let request = std::str::from_utf8(body).map_err(|_| "a listing request that is not text")?;
    if let Some(close) = request.strip_prefix("close\n") {
        let (name, reason) = close
            .split_once('\n')
            .unwrap_or((close, "Closed via management plugin"));
        let closed = management.close_local_connection(name, reason);
        return Ok(bytes::Bytes::from_static(if closed {
            b"true"
        } else {
            b"false"
        }));
    }
    let kind =
        ListingKind::from_name(request).ok_or_else(|| format!("unknown listing '{request}'"))?;
    serde_json::to_vec(&management.local_listing(kind))
        .map(bytes::Bytes::from)
        .map_err(|e| e.to_string())
}

/// Runs forwarding's periodic work once a second until shutdown.
async fn maintain_forwarding(forwarding: Arc<Forwarding>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => forwarding.maintain(),
            _ = shutdown.changed() => return,
        }
    }
}

/// What classic queues' forwarding uses of the cluster: queue homes from the metadata
/// store, the failure detector and the bulk links.
struct ForwardLink {
    transport: Arc<Transport>,
    metadata: Arc<MetadataStore>,
}

impl RemoteLink for ForwardLink {
    fn local(&self) -> &str {
        self.transport.node()
    }

    fn home_of(&self, vhost: &str, queue: &str) -> Option<String> {
        self.metadata.home_of(vhost, queue)
    }

    fn is_up(&self, node: &str) -> bool {
        node == self.transport.node()
            || self.transport.detector().status(node) != warren_cluster::detector::NodeStatus::Down
    }

    fn peers(&self) -> Vec<String> {
        self.metadata
            .members()
            .into_iter()
            .filter(|member| member.running && member.name != self.transport.node())
            .map(|member| member.name)
            .collect()
    }

    fn call(
        &self,
        node: &str,
        body: Vec<u8>,
        timeout: std::time::Duration,
    ) -> warren_core::remote::CallFuture {
        let transport = Arc::clone(&self.transport);
        let node = node.to_string();
        Box::pin(async move {
            transport
                .call(
                    &node,
                    warren_cluster::codec::LinkKind::Bulk,
                    FORWARD_METHOD,
                    bytes::Bytes::from(body),
                    timeout,
                )
                .await
                .map(|answer| answer.to_vec())
                .map_err(|error| error.to_string())
        })
    }
}

/// What the management API shows of the cluster (and `join_cluster`).
pub struct View(pub Arc<MetadataStore>, pub Arc<JoinContext>);

impl View {
    /// Sends `body` to every running peer's listing service at once and waits (on this
    /// worker thread, as `forget` does) for the answers that come within [`LISTING_TIMEOUT`].
    fn ask_peers(&self, body: &'static [u8], owned: Option<Vec<u8>>) -> Vec<bytes::Bytes> {
        let transport = Arc::clone(self.0.transport());
        let peers: Vec<String> = self
            .0
            .members()
            .into_iter()
            .filter(|member| member.running && member.name != self.0.node())
            .map(|member| member.name)
            .collect();
        if peers.is_empty() {
            return Vec::new();
        }
        let body = owned.map_or_else(|| bytes::Bytes::from_static(body), bytes::Bytes::from);
        let ask = async move {
            let calls = peers.iter().map(|peer| {
                transport.call(
                    peer,
                    warren_cluster::codec::LinkKind::Control,
                    LISTING_METHOD,
                    body.clone(),
                    LISTING_TIMEOUT,
                )
            });
            let mut answers = Vec::new();
            for call in calls.collect::<Vec<_>>() {
                if let Ok(answer) = call.await {
                    answers.push(answer);
                }
            }
            answers
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(ask))
            }
            _ => Vec::new(),
        }
    }
}

impl ClusterView for View {
    fn peer_nodes(&self) -> Vec<Json> {
        let info = self.0.peer_info();
        self.0
            .members()
            .into_iter()
            .filter(|member| member.name != self.0.node())
            .map(|member| {
                let mut entry = info
                    .get(&member.name)
                    .cloned()
                    .filter(|_| member.running)
                    .unwrap_or_else(|| json!({"name": member.name, "type": "disc"}));
                if let Some(object) = entry.as_object_mut() {
                    object.insert("running".into(), json!(member.running));
                }
                entry
            })
            .collect()
    }

    fn status(&self) -> Json {
        self.0.status_json()
    }

    fn home_of(&self, vhost: &str, queue: &str) -> Option<String> {
        self.0.home_of(vhost, queue)
    }

    fn cluster_id(&self) -> Option<String> {
        Some(self.0.cluster_id())
    }

    fn peer_listing(&self, kind: ListingKind) -> Vec<Json> {
        let body: &'static [u8] = kind.name().as_bytes();
        self.ask_peers(body, None)
            .into_iter()
            .filter_map(|answer| serde_json::from_slice::<Json>(&answer).ok())
            .flat_map(|list| match list {
                Json::Array(objects) => objects,
                _ => Vec::new(),
            })
            .collect()
    }

    fn close_peer_connection(&self, name: &str, reason: &str) -> bool {
        let body = format!("close\n{name}\n{reason}").into_bytes();
        self.ask_peers(b"", Some(body))
            .iter()
            .any(|answer| answer.as_ref() == b"true")
    }

    fn join(
        &self,
        node: &str,
    ) -> Result<warren_management::JoinOutcome, warren_management::JoinError> {
        let store = Arc::clone(&self.0);
        let context = Arc::clone(&self.1);
        let node = node.to_string();
        let join = async move { context.join(&store, &node).await };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(join))
            }
            _ => Err(warren_management::JoinError::NotSupported),
        }
    }

    fn reset(&self) -> Result<(), warren_management::JoinError> {
        let store = Arc::clone(&self.0);
        let context = Arc::clone(&self.1);
        let reset = async move { context.reset(&store).await };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(reset))
            }
            _ => Err(warren_management::JoinError::NotSupported),
        }
    }

    fn forget(&self, node: &str) -> Result<(), String> {
        let store = Arc::clone(&self.0);
        let node = node.to_string();
        let forget = async move { store.forget(&node).await };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(forget))
            }
            _ => Err("forget_cluster_node needs the multi-threaded runtime".into()),
        }
    }
}
