//! The broker's link to its message store ([`Durability`]), shared with every vhost, and the
//! services installed next to it (clock, replicator, queue backends, forwarding). It lives
//! outside `store` so the message store needs none of those services.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::store::MessageStore;

/// The broker's link to its message store, shared with every vhost: empty until the server
/// attaches a store (an in-memory broker never does).
#[derive(Default)]
pub struct Durability {
    store: std::sync::OnceLock<Arc<MessageStore>>,
    /// How much each queue keeps in memory before paging (persistent messages of durable
    /// queues) or holding its publishers back (everything else): see [`crate::flow`].
    queue_memory: Arc<crate::flow::QueueMemoryLimits>,
    /// The cluster's replicator, when the node runs clustered (`replication.rs`).
    replicator: std::sync::OnceLock<Arc<dyn crate::replication::TopologyReplicator>>,
    /// The clock queues read for expiry; set once, before queues exist (tests pass tokio's
    /// paused clock or a manual one), the process's monotonic clock otherwise.
    clock: std::sync::OnceLock<crate::clock::Clock>,
    /// Makes the queues of replicated types (quorum queues), installed by the server.
    queue_backend: std::sync::OnceLock<Arc<dyn crate::queue_type::QueueBackend>>,
    /// How streams encode the messages published to them through the core, installed by
    /// the server (the AMQP 1.0 message mapping).
    stream_format: std::sync::OnceLock<Arc<dyn crate::stream_log::MessageFormat>>,
    /// Forwarding to classic queues on other nodes, installed by a clustered server.
    forwarding: std::sync::OnceLock<Arc<crate::remote::Forwarding>>,
    /// This node's name in its cluster, set before the metadata log is replayed.
    local_node: std::sync::OnceLock<String>,
    /// Closes this node's MQTT connection holding a client identifier another node's
    /// connection takes over, installed by the MQTT listener.
    client_takeover: std::sync::OnceLock<Arc<dyn crate::remote::ClientTakeover>>,
    /// Vhost and user limits, parsed from their parameters (`resource_limits.rs`).
    resource_limits: Arc<crate::resource_limits::ResourceLimits>,
    /// Where stream protocol clients reach each running peer (`host`, stream port), kept
    /// by a clustered server: the stream listener's `Metadata` names leaders and replicas.
    stream_endpoints: parking_lot::RwLock<std::collections::HashMap<String, (String, u16)>>,
}

impl Durability {
    /// Vhost and user limits, kept in step with their parameters by the broker.
    pub fn resource_limits(&self) -> &Arc<crate::resource_limits::ResourceLimits> {
        &self.resource_limits
    }

    /// The clock every queue of the broker reads.
    pub fn clock(&self) -> crate::clock::Clock {
        self.clock.get().cloned().unwrap_or_default()
    }

    /// Makes queues created from now on read `clock`; false if a clock was set already.
    pub fn use_clock(&self, clock: crate::clock::Clock) -> bool {
        self.clock.set(clock).is_ok()
    }

    /// The per-queue memory limits shared by every queue of the broker.
    pub fn queue_memory_limits(&self) -> &Arc<crate::flow::QueueMemoryLimits> {
        &self.queue_memory
    }

    /// The store, once attached.
    pub fn store(&self) -> Option<&Arc<MessageStore>> {
        self.store.get()
    }

    /// Attaches the store; false if one was attached already.
    pub fn attach(&self, store: Arc<MessageStore>) -> bool {
        self.store.set(store).is_ok()
    }

    /// Installs what makes quorum queues on this node; false if one was installed already.
    pub fn set_queue_backend(&self, backend: Arc<dyn crate::queue_type::QueueBackend>) -> bool {
        self.queue_backend.set(backend).is_ok()
    }

    /// Installs forwarding to classic queues homed on other nodes; false if installed
    /// already.
    pub fn set_forwarding(&self, forwarding: Arc<crate::remote::Forwarding>) -> bool {
        self.forwarding.set(forwarding).is_ok()
    }

    /// Installs the MQTT listener's takeover of client identifiers; false if one was.
    pub fn set_client_takeover(&self, takeover: Arc<dyn crate::remote::ClientTakeover>) -> bool {
        self.client_takeover.set(takeover).is_ok()
    }

    /// The MQTT listener's takeover of client identifiers, once installed.
    pub fn client_takeover(&self) -> Option<&Arc<dyn crate::remote::ClientTakeover>> {
        self.client_takeover.get()
    }

    /// Forwarding to other nodes' classic queues, on a cluster.
    pub fn forwarding(&self) -> Option<&Arc<crate::remote::Forwarding>> {
        self.forwarding.get()
    }

    /// What makes quorum queues on this node, once installed.
    pub fn queue_backend(&self) -> Option<&Arc<dyn crate::queue_type::QueueBackend>> {
        self.queue_backend.get()
    }

    /// Installs how streams encode messages published through the core; false if one was
    /// installed already.
    pub fn set_stream_format(&self, format: Arc<dyn crate::stream_log::MessageFormat>) -> bool {
        self.stream_format.set(format).is_ok()
    }

    /// How streams encode messages published through the core, once installed.
    pub fn stream_format(&self) -> Option<&Arc<dyn crate::stream_log::MessageFormat>> {
        self.stream_format.get()
    }

    /// Installs the cluster's replicator; false if one was installed already.
    pub fn set_replicator(
        &self,
        replicator: Arc<dyn crate::replication::TopologyReplicator>,
    ) -> bool {
        self.replicator.set(replicator).is_ok()
    }

    /// Names this node in its cluster; false if it was named already.
    pub fn set_local_node(&self, name: &str) -> bool {
        self.local_node.set(name.to_string()).is_ok()
    }

    /// Replaces the stream protocol endpoints of the running peers.
    pub fn set_stream_endpoints(
        &self,
        endpoints: std::collections::HashMap<String, (String, u16)>,
    ) {
        *self.stream_endpoints.write() = endpoints;
    }

    /// Where stream protocol clients reach peer `node` (`None`: not running, or it has no
    /// stream listener).
    pub fn stream_endpoint(&self, node: &str) -> Option<(String, u16)> {
        self.stream_endpoints.read().get(node).cloned()
    }

    /// This node's cluster name, once named (clustered nodes only).
    pub fn local_node(&self) -> Option<&str> {
        self.local_node.get().map(String::as_str)
    }

    /// Whether a replicator is installed (the node runs clustered).
    pub fn is_replicated(&self) -> bool {
        self.replicator.get().is_some()
    }

    /// Commits a topology change through the cluster before the caller applies it; hold the
    /// permit until the local apply is over. Without a replicator (single node), or inside a
    /// change that is already being applied, nothing is built or sent.
    pub fn replicate(
        &self,
        change: impl FnOnce() -> crate::replication::TopologyChange,
    ) -> crate::error::CoreResult<crate::replication::ReplicationPermit> {
        match self.replicator.get() {
            Some(replicator) if !crate::replication::applying() => replicator.replicate(change()),
            _ => Ok(crate::replication::ReplicationPermit::none()),
        }
    }

    /// Durable topology changed (call after the change is visible): the writer persists the
    /// definitions before it next confirms anything.
    pub fn topology_changed(&self) {
        if let Some(store) = self.store.get() {
            store.topology_generation().fetch_add(1, Ordering::Release);
            store.wake();
        }
    }
}
