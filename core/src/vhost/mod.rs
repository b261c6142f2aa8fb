//! Virtual hosts: the namespace of exchanges and queues, and every topology operation with the
//! permission checks RabbitMQ makes for it.
//!
//! Every listener calls these entry points, so a permission rule or a reply text is written once.
//! Topology changes (declare, delete, bind, unbind) are serialised per vhost by one mutex that
//! the publish path never takes; routing only takes read locks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Weak};

use base64::Engine;
use parking_lot::{Mutex, RwLock};
use rand::RngCore;

use crate::access::{access_refused, Access, Permissions, ResourceKind};
use crate::consumer::{ConsumerSpec, DeliverySink};
use crate::durability::Durability;
use crate::error::{resource, CoreError, CoreResult, ErrorKind};
use crate::exchange::{Binding, DestinationName, Exchange, ExchangeConfig, ExchangeKind, Target};
use crate::policy::{select, Policy};
use crate::queue::{ConsumerRemoval, Queue, QueueConfig};
use crate::queue_type::QueueInstance;
use crate::replication::TopologyChange;
use crate::routing::headers::validate_x_match;
use crate::value::{Table, Value};

mod bindings;
mod exchanges;
mod policies;
mod publish;
mod queues;
mod routing;
mod topic;
pub mod trace;
mod transient;

pub use publish::{
    AwaitSettlement, PublishError, PublishOptions, PublishOutcome, PublishStage, Publisher,
};
pub use routing::Enqueued;

/// The connection id the broker itself acts as (boot-time definitions).
pub const BROKER_CONNECTION: u64 = 0;

/// Who is asking: the authenticated user and the connection they came on.
#[derive(Debug, Clone, Copy)]
pub struct Actor<'a> {
    /// The user name.
    pub user: &'a str,
    /// The broker-wide connection id (owner of exclusive queues).
    pub connection_id: u64,
}

/// An exchange.declare request.
#[derive(Debug, Clone)]
pub struct ExchangeDeclare {
    /// Exchange name.
    pub name: String,
    /// Type name as the client sent it.
    pub kind: String,
    /// Only check that it exists.
    pub passive: bool,
    /// Durable flag.
    pub durable: bool,
    /// Auto-delete flag.
    pub auto_delete: bool,
    /// Internal flag.
    pub internal: bool,
    /// Arguments.
    pub arguments: Table,
}

/// A queue.declare request.
#[derive(Debug, Clone)]
pub struct QueueDeclare {
    /// Queue name; empty asks the server to pick one.
    pub name: String,
    /// Only check that it exists.
    pub passive: bool,
    /// Durable flag.
    pub durable: bool,
    /// Exclusive to the declaring connection.
    pub exclusive: bool,
    /// Auto-delete flag.
    pub auto_delete: bool,
    /// Arguments.
    pub arguments: Table,
}

/// The answer to a queue.declare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDeclared {
    /// The queue's name (server-generated when the request left it empty).
    pub name: String,
    /// Ready messages.
    pub message_count: u64,
    /// Attached consumers.
    pub consumer_count: u64,
}

/// The pseudo-queue name clients consume from and put in `reply_to` for direct reply-to.
pub const DIRECT_REPLY_TO: &str = "amq.rabbitmq.reply-to";

/// How long after a bulk fetch of the stand-ins' counters another is skipped: under the
/// half second a stand-in keeps counters it was given, so those are still fresh.
pub const REMOTE_INFO_REUSE: std::time::Duration = std::time::Duration::from_millis(250);
/// How long a bulk counters request may wait for a home node.
const REMOTE_INFO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A virtual host.
pub struct VHost {
    name: String,
    exchanges: RwLock<HashMap<String, Arc<Exchange>>>,
    queues: RwLock<HashMap<String, Arc<Queue>>>,
    /// Queues of the other types (quorum queues, streams), made by [`crate::queue_type::QueueType::declare`]
    /// and held through the queue-type interface. Classic queues stay in `queues` as the
    /// concrete type, which keeps their publish path free of dynamic calls.
    typed: RwLock<HashMap<String, Arc<dyn QueueInstance>>>,
    /// Each typed queue's stand-in in bindings ([`Queue::forward`]).
    stand_ins: RwLock<HashMap<String, Arc<Queue>>>,
    /// How many queues `typed` holds: the default exchange looks there only when non-zero
    /// (one relaxed load on the publish path).
    typed_count: AtomicUsize,
    permissions: RwLock<HashMap<String, Arc<Permissions>>>,
    topology: Mutex<()>,
    /// This vhost, for queues that route their dead letters through it.
    me: Weak<VHost>,
    /// Dead letters dropped because their dead-letter exchange did not exist.
    dead_letters_dropped: AtomicU64,
    policies: RwLock<Vec<Policy>>,
    operator_policies: RwLock<Vec<Policy>>,
    /// Exchange types enabled by plugins, shared by every vhost of the broker.
    exchange_types: ExchangeTypes,
    /// The vhost's default queue type (metadata), for durable non-exclusive queues declared
    /// without `x-queue-type`.
    default_queue_type: RwLock<Option<String>>,
    /// The broker's message store link: durable queues keep persistent messages there and
    /// durable topology changes are reported to it.
    durability: Arc<Durability>,
    /// Lifetime publish counters for metrics.
    counters: crate::counters::MessageCounters,
    /// Firehose tracing on (shared with the vhost's queues).
    trace: trace::TraceFlag,
    /// Topic permissions by user (`topic.rs`).
    topic_permissions: crate::topic_access::TopicPermissionTable,
    /// Lifetime counters of deleted queues (see [`VHost::totals`]).
    retired: Mutex<crate::counters::QueueTotals>,
    /// When the stand-ins' counters were last fetched in bulk ([`VHost::fetch_remote_info`]).
    remote_info_fetched: Mutex<Option<std::time::Instant>>,
    /// The default exchange (also in `exchanges`), held here so that counting a publish to
    /// it needs no map lookup.
    default_exchange: Arc<Exchange>,
    /// The vhost's stream logs (`crate::stream_log`); each is also a queue in `typed`.
    streams: crate::stream_log::StreamRegistry,
    /// Exclusive and auto-delete queues that this node must still settle with the cluster
    /// (`transient.rs`).
    transient: Mutex<transient::TransientPending>,
}

/// The registry of plugin exchange types, by type name.
pub type ExchangeTypes = Arc<RwLock<HashMap<String, Arc<dyn crate::exchange::ExchangeType>>>>;

impl VHost {
    /// A vhost with the standard exchanges: the default exchange, `amq.direct`,
    /// `amq.fanout`, `amq.topic`, `amq.headers`, `amq.match` and `amq.rabbitmq.trace`.
    pub fn new(name: &str) -> Arc<VHost> {
        Self::with_exchange_types(name, ExchangeTypes::default())
    }

    /// A vhost that can declare the plugin exchange types in `exchange_types`.
    pub fn with_exchange_types(name: &str, exchange_types: ExchangeTypes) -> Arc<VHost> {
        Self::in_broker(name, exchange_types, Arc::default())
    }

    /// The per-queue memory limits of the broker this vhost belongs to.
    pub(crate) fn queue_memory_limits(&self) -> Arc<crate::flow::QueueMemoryLimits> {
        Arc::clone(self.durability.queue_memory_limits())
    }

    /// A vhost of a broker: plugin exchange types and the message store link are the
    /// broker's.
    pub fn in_broker(
        name: &str,
        exchange_types: ExchangeTypes,
        durability: Arc<Durability>,
    ) -> Arc<VHost> {
        let default_exchange = Exchange::new(ExchangeConfig {
            name: String::new(),
            kind: ExchangeKind::Direct,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: Table::new(),
            plugin: None,
        });
        // Streams live beside the message store, one directory per vhost.
        let streams = crate::stream_log::StreamRegistry::open(durability.store().map(|store| {
            let data_dir = store.dir().parent().unwrap_or(store.dir());
            data_dir
                .join("streams")
                .join(crate::stream_log::registry::encode_name(name))
        }));
        let vhost = VHost {
            name: name.to_string(),
            exchanges: RwLock::new(HashMap::new()),
            queues: RwLock::new(HashMap::new()),
            typed: RwLock::new(HashMap::new()),
            stand_ins: RwLock::new(HashMap::new()),
            typed_count: AtomicUsize::new(0),
            permissions: RwLock::new(HashMap::new()),
            topology: Mutex::new(()),
            me: Weak::new(),
            dead_letters_dropped: AtomicU64::new(0),
            policies: RwLock::new(Vec::new()),
            operator_policies: RwLock::new(Vec::new()),
            exchange_types,
            default_queue_type: RwLock::new(None),
            durability,
            counters: Default::default(),
            trace: Default::default(),
            topic_permissions: Default::default(),
            retired: Default::default(),
            remote_info_fetched: Mutex::new(None),
            default_exchange: Arc::clone(&default_exchange),
            streams,
            transient: Mutex::default(),
        };
        {
            let mut exchanges = vhost.exchanges.write();
            exchanges.insert(String::new(), default_exchange);
            let standard = [
                ("amq.direct", ExchangeKind::Direct, false),
                ("amq.fanout", ExchangeKind::Fanout, false),
                ("amq.topic", ExchangeKind::Topic, false),
                ("amq.headers", ExchangeKind::Headers, false),
                ("amq.match", ExchangeKind::Headers, false),
                ("amq.rabbitmq.trace", ExchangeKind::Topic, true),
            ];
            for (name, kind, internal) in standard {
                let config = ExchangeConfig {
                    name: name.to_string(),
                    kind,
                    durable: true,
                    auto_delete: false,
                    internal,
                    arguments: Table::new(),
                    plugin: None,
                };
                exchanges.insert(name.to_string(), Exchange::new(config));
            }
        }
        let vhost = Arc::new_cyclic(|me| VHost {
            me: me.clone(),
            ..vhost
        });
        // Streams recovered from disk are queues of the vhost from the start.
        for log in vhost.streams.list() {
            vhost.add_stream_queue(log, false);
        }
        vhost
    }

    /// This vhost, for what must reach it later without keeping it alive.
    pub(crate) fn me(&self) -> Weak<VHost> {
        self.me.clone()
    }

    /// The vhost's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self, kind: &str, name: &str) -> String {
        resource(kind, name, &self.name)
    }

    /// Sets the vhost's default queue type (vhost metadata `default_queue_type`).
    pub fn set_default_queue_type(&self, queue_type: Option<String>) {
        *self.default_queue_type.write() = queue_type;
        self.durability.topology_changed();
    }

    /// The broker's message store link.
    pub fn durability(&self) -> &Arc<Durability> {
        &self.durability
    }

    /// Every user's permissions here, sorted by user.
    pub fn permission_entries(&self) -> Vec<(String, Arc<Permissions>)> {
        let mut entries: Vec<(String, Arc<Permissions>)> = self
            .permissions
            .read()
            .iter()
            .map(|(user, p)| (user.clone(), Arc::clone(p)))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    /// The vhost's default queue type, if one is set.
    pub fn default_queue_type(&self) -> Option<String> {
        self.default_queue_type.read().clone()
    }

    /// Grants `user` these permissions here, replacing earlier ones.
    pub fn set_permissions(&self, user: &str, permissions: Permissions) {
        self.permissions
            .write()
            .insert(user.to_string(), Arc::new(permissions));
        self.durability.topology_changed();
    }

    /// Removes `user`'s permissions here.
    pub fn clear_permissions(&self, user: &str) {
        self.permissions.write().remove(user);
        self.durability.topology_changed();
    }

    /// Every user's permissions here, sorted by user name.
    pub fn all_permissions(&self) -> Vec<(String, Arc<Permissions>)> {
        let mut all: Vec<(String, Arc<Permissions>)> = self
            .permissions
            .read()
            .iter()
            .map(|(user, p)| (user.clone(), Arc::clone(p)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Lifetime publish counters (received, routed, unroutable, confirmed).
    pub fn counters(&self) -> &crate::counters::MessageCounters {
        &self.counters
    }

    /// Lifetime totals of this vhost: its publish counters, and the queue counters of its
    /// queues, deleted ones included. Reads every queue's stats: for metrics and the API,
    /// not the message path.
    pub fn totals(&self) -> crate::counters::NodeTotals {
        self.fetch_remote_info();
        let mut queues = *self.retired.lock();
        for queue in self.queues() {
            queues.add_queue(&queue.stats());
        }
        for queue in self.typed_queues() {
            queues.add_queue(&queue.info());
        }
        crate::counters::NodeTotals {
            messages: self.counters.snapshot(),
            queues,
        }
    }

    /// On a cluster: asks each home node once for the counters of every stand-in here that
    /// it is home to ([`crate::remote::RemoteQueue`]), so each stand-in's `info` answers from
    /// them for a while instead of asking its home node on its own. For what visits every
    /// queue (the node's totals, the management rate sampler): one request per home node
    /// instead of one per queue, which with thousands of queues kept every node busy while
    /// idle. Calls less than [`REMOTE_INFO_REUSE`] after the last fetch do nothing.
    pub fn fetch_remote_info(&self) {
        let Some(forwarding) = self.durability.forwarding() else {
            return;
        };
        {
            let mut fetched = self.remote_info_fetched.lock();
            if fetched.is_some_and(|at| at.elapsed() < REMOTE_INFO_REUSE) {
                return;
            }
            *fetched = Some(std::time::Instant::now());
        }
        let mut by_home: HashMap<String, Vec<Arc<dyn QueueInstance>>> = HashMap::new();
        for queue in self.typed.read().values() {
            if let Some(home) = queue.home_node() {
                by_home
                    .entry(home.to_string())
                    .or_default()
                    .push(Arc::clone(queue));
            }
        }
        for (home, queues) in by_home {
            let names: Vec<String> = queues.iter().map(|q| q.name().to_string()).collect();
            let fetched: HashMap<String, crate::queue::QueueStats> = forwarding
                .fetch_stats(&home, &self.name, &names, REMOTE_INFO_TIMEOUT)
                .into_iter()
                .collect();
            for queue in &queues {
                if let Some(stats) = fetched.get(queue.name()) {
                    queue.remember_info(*stats);
                }
            }
        }
    }

    /// `user`'s permissions here, if any.
    pub fn permissions(&self, user: &str) -> Option<Arc<Permissions>> {
        self.permissions.read().get(user).cloned()
    }

    /// Checks `access` to a resource, with RabbitMQ's refusal text.
    pub fn check(
        &self,
        user: &str,
        access: Access,
        kind: ResourceKind,
        name: &str,
    ) -> CoreResult<()> {
        let allowed = self
            .permissions(user)
            .is_some_and(|p| p.allows(access, name));
        if allowed {
            Ok(())
        } else {
            Err(access_refused(access, kind, name, &self.name, user))
        }
    }

    /// The exchange called `name`.
    pub fn exchange(&self, name: &str) -> Option<Arc<Exchange>> {
        self.exchanges.read().get(name).cloned()
    }

    /// The queue called `name`.
    pub fn queue(&self, name: &str) -> Option<Arc<Queue>> {
        self.queues.read().get(name).cloned()
    }

    /// The queue of a type other than classic (quorum) called `name`.
    pub fn typed_queue(&self, name: &str) -> Option<Arc<dyn QueueInstance>> {
        if self.typed_count.load(std::sync::atomic::Ordering::Relaxed) == 0 {
            return None;
        }
        self.typed.read().get(name).cloned()
    }

    /// Every queue of a type other than classic (quorum), sorted by name.
    pub fn typed_queues(&self) -> Vec<Arc<dyn QueueInstance>> {
        let mut all: Vec<_> = self.typed.read().values().cloned().collect();
        all.sort_by(|a, b| a.name().cmp(b.name()));
        all
    }

    /// The queue called `name` of any type, through the queue-type interface.
    pub fn queue_instance(&self, name: &str) -> Option<Arc<dyn QueueInstance>> {
        match self.queue(name) {
            Some(classic) => Some(classic),
            None => self.typed_queue(name),
        }
    }

    /// Every queue of every type except streams, through the queue-type interface (for the
    /// management API and metrics; unsorted).
    pub fn queue_instances(&self) -> Vec<Arc<dyn QueueInstance>> {
        let mut all: Vec<Arc<dyn QueueInstance>> = self
            .queues
            .read()
            .values()
            .map(|queue| Arc::clone(queue) as Arc<dyn QueueInstance>)
            .collect();
        if self.typed_count.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            // Streams are typed queues too, but they are listed from their logs
            // (`VHost::streams`), with their offsets and segments.
            all.extend(
                self.typed
                    .read()
                    .values()
                    .filter(|queue| !queue.queue_type().capabilities().consumers_need_offset)
                    .cloned(),
            );
        }
        all
    }

    /// The vhost's streams.
    pub fn streams(&self) -> &crate::stream_log::StreamRegistry {
        &self.streams
    }

    /// All exchanges.
    pub fn exchanges(&self) -> Vec<Arc<Exchange>> {
        self.exchanges.read().values().cloned().collect()
    }

    /// All queues.
    pub fn queues(&self) -> Vec<Arc<Queue>> {
        self.queues.read().values().cloned().collect()
    }

    fn exchange_or_404(&self, name: &str) -> CoreResult<Arc<Exchange>> {
        self.exchange(name)
            .ok_or_else(|| CoreError::not_found(format!("no {}", self.describe("exchange", name))))
    }

    fn queue_or_404(&self, name: &str) -> CoreResult<Arc<Queue>> {
        self.queue(name)
            .ok_or_else(|| CoreError::not_found(format!("no {}", self.describe("queue", name))))
    }

    fn default_exchange_refused() -> CoreError {
        CoreError::access_refused("operation not permitted on the default exchange")
    }
}

impl std::fmt::Debug for VHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VHost").field("name", &self.name).finish()
    }
}

/// Compares the listed arguments of a redeclaration with the existing ones, with RabbitMQ's
/// "inequivalent arg" text. Integers compare by value whatever their wire width.
fn check_args_equivalence(
    what: &str,
    keys: &[&str],
    received: &Table,
    current: &Table,
) -> CoreResult<()> {
    for key in keys {
        let (r, c) = (received.get(key), current.get(key));
        let equal = match (r, c) {
            (None, None) => true,
            (Some(a), Some(b)) => match (a.as_i64(), b.as_i64()) {
                (Some(x), Some(y)) => x == y,
                _ => a == b,
            },
            _ => false,
        };
        if !equal {
            let show = |v: Option<&Value>| match v {
                None => "none".to_string(),
                Some(v) => format!("the value '{v}' of type '{}'", v.type_name()),
            };
            return Err(CoreError::precondition_failed(format!(
                "inequivalent arg '{key}' for {what}: received {} but current is {}",
                show(r),
                show(c)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
