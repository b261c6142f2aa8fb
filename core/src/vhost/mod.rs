//! Virtual hosts: the namespace of exchanges and queues, and every topology operation with the
//! permission checks RabbitMQ makes for it.
//!
//! Every listener calls these entry points, so a permission rule or a reply text is written once.
//! Topology changes (declare, delete, bind, unbind) are serialised per vhost by one mutex that
//! the publish path never takes; routing only takes read locks.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};

use base64::Engine;
use parking_lot::{Mutex, RwLock};
use rand::RngCore;

use crate::access::{access_refused, Access, Permissions, ResourceKind};
use crate::consumer::{ConsumerSpec, DeliverySink};
use crate::error::{resource, CoreError, CoreResult, ErrorKind};
use crate::exchange::{Binding, DestinationName, Exchange, ExchangeConfig, ExchangeKind, Target};
use crate::policy::{select, Policy};
use crate::queue::{ConsumerRemoval, Queue, QueueConfig, QueueLimits};
use crate::routing::headers::validate_x_match;
use crate::store::Durability;
use crate::value::{Table, Value};

mod policies;
mod routing;
mod topic;
pub mod trace;

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

/// Queue arguments compared on redeclaration, as RabbitMQ compares them.
const EQUIVALENCE_CHECKED_QUEUE_ARGS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-queue-type",
    "x-single-active-consumer",
    "x-delivery-limit",
];

/// A virtual host.
pub struct VHost {
    name: String,
    exchanges: RwLock<HashMap<String, Arc<Exchange>>>,
    queues: RwLock<HashMap<String, Arc<Queue>>>,
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
    /// The default exchange (also in `exchanges`), held here so that counting a publish to
    /// it needs no map lookup.
    default_exchange: Arc<Exchange>,
    /// The vhost's streams (`crate::stream_log`), kept beside its classic queues.
    streams: crate::stream_log::StreamRegistry,
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
            default_exchange: Arc::clone(&default_exchange),
            streams,
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
        Arc::new_cyclic(|me| VHost {
            me: me.clone(),
            ..vhost
        })
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
        let mut queues = *self.retired.lock();
        for queue in self.queues() {
            queues.add_queue(&queue.stats());
        }
        crate::counters::NodeTotals {
            messages: self.counters.snapshot(),
            queues,
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

    // ---- exchanges -------------------------------------------------------------------

    /// exchange.declare.
    pub fn declare_exchange(&self, actor: Actor<'_>, request: ExchangeDeclare) -> CoreResult<()> {
        if request.name.is_empty() {
            return Err(Self::default_exchange_refused());
        }
        if request.passive {
            self.exchange_or_404(&request.name)?;
            return Ok(());
        }
        if request.name.starts_with("amq.") {
            return Err(CoreError::access_refused(format!(
                "exchange name '{}' contains reserved prefix 'amq.*'",
                request.name
            )));
        }
        self.check(
            actor.user,
            Access::Configure,
            ResourceKind::Exchange,
            &request.name,
        )?;
        let plugin = self.exchange_types.read().get(&request.kind).cloned();
        let kind = match (ExchangeKind::from_name(&request.kind), &plugin) {
            (Some(kind), _) => kind,
            (None, Some(_)) => ExchangeKind::Plugin,
            (None, None) => {
                return Err(CoreError::new(
                    ErrorKind::CommandInvalid,
                    format!("unknown exchange type '{}'", request.kind),
                ))
            }
        };
        if let Some(alternate) = request.arguments.get("alternate-exchange") {
            let Some(alternate) = alternate.as_str() else {
                return Err(CoreError::precondition_failed(format!(
                    "invalid arg 'alternate-exchange' for {}: expected a string",
                    self.describe("exchange", &request.name)
                )));
            };
            self.check(actor.user, Access::Write, ResourceKind::Exchange, alternate)?;
            self.check(
                actor.user,
                Access::Read,
                ResourceKind::Exchange,
                &request.name,
            )?;
        }
        let _topology = self.topology.lock();
        if let Some(existing) = self.exchange(&request.name) {
            return self.check_exchange_equivalence(existing.config(), &request);
        }
        let config = ExchangeConfig {
            name: request.name.clone(),
            kind,
            durable: request.durable,
            auto_delete: request.auto_delete,
            internal: request.internal,
            arguments: request.arguments,
            plugin,
        };
        let exchange = Exchange::new(config);
        let alternate = select(&self.policies.read(), |p| p.matches_exchange(&request.name))
            .and_then(Policy::alternate_exchange);
        exchange.set_policy_alternate(alternate);
        let durable = request.durable;
        self.exchanges.write().insert(request.name, exchange);
        if durable {
            self.durability.topology_changed();
        }
        Ok(())
    }

    fn check_exchange_equivalence(
        &self,
        existing: &ExchangeConfig,
        request: &ExchangeDeclare,
    ) -> CoreResult<()> {
        let what = self.describe("exchange", &existing.name);
        let mismatch = |arg: &str,
                        received: &dyn std::fmt::Display,
                        current: &dyn std::fmt::Display| {
            CoreError::precondition_failed(format!(
                "inequivalent arg '{arg}' for {what}: received '{received}' but current is '{current}'"
            ))
        };
        if existing.type_name() != request.kind {
            return Err(mismatch("type", &request.kind, &existing.type_name()));
        }
        if existing.durable != request.durable {
            return Err(mismatch("durable", &request.durable, &existing.durable));
        }
        if existing.auto_delete != request.auto_delete {
            return Err(mismatch(
                "auto_delete",
                &request.auto_delete,
                &existing.auto_delete,
            ));
        }
        if existing.internal != request.internal {
            return Err(mismatch("internal", &request.internal, &existing.internal));
        }
        check_args_equivalence(
            &what,
            &["alternate-exchange"],
            &request.arguments,
            &existing.arguments,
        )
    }

    /// exchange.delete. Deleting a missing exchange succeeds, as in RabbitMQ.
    pub fn delete_exchange(&self, actor: Actor<'_>, name: &str, if_unused: bool) -> CoreResult<()> {
        if name.is_empty() {
            return Err(Self::default_exchange_refused());
        }
        if name.starts_with("amq.") {
            return Err(CoreError::access_refused(format!(
                "deletion of system {} not allowed",
                self.describe("exchange", name)
            )));
        }
        self.check(actor.user, Access::Configure, ResourceKind::Exchange, name)?;
        let _topology = self.topology.lock();
        let Some(exchange) = self.exchange(name) else {
            return Ok(());
        };
        let is_destination = self.is_exchange_destination(name);
        if if_unused && (exchange.has_bindings() || is_destination) {
            return Err(CoreError::precondition_failed(format!(
                "{} in use",
                self.describe("exchange", name)
            )));
        }
        self.remove_exchange_locked(name);
        Ok(())
    }

    fn is_exchange_destination(&self, name: &str) -> bool {
        let destination = DestinationName::Exchange(name.to_string());
        self.exchanges
            .read()
            .values()
            .any(|x| x.has_bindings_to(&destination))
    }

    /// Removes an exchange and every binding to or from it. Caller holds the topology lock.
    fn remove_exchange_locked(&self, name: &str) {
        let removed = self.exchanges.write().remove(name);
        self.remove_bindings_to_locked(&DestinationName::Exchange(name.to_string()));
        if removed.is_some_and(|x| x.config().durable) {
            self.durability.topology_changed();
        }
    }

    /// Removes every binding to `destination`, then deletes auto-delete exchanges that lost
    /// their last binding. Caller holds the topology lock.
    fn remove_bindings_to_locked(&self, destination: &DestinationName) {
        let exchanges = self.exchanges();
        let mut emptied = Vec::new();
        for exchange in exchanges {
            if exchange.unbind_destination(destination) > 0
                && exchange.config().auto_delete
                && !exchange.has_bindings()
            {
                emptied.push(exchange.name().to_string());
            }
        }
        for name in emptied {
            self.remove_exchange_locked(&name);
        }
    }

    // ---- queues ----------------------------------------------------------------------

    /// queue.declare.
    pub fn declare_queue(
        &self,
        actor: Actor<'_>,
        request: QueueDeclare,
    ) -> CoreResult<QueueDeclared> {
        if request.passive && request.name == DIRECT_REPLY_TO {
            return Ok(QueueDeclared {
                name: request.name,
                message_count: 0,
                consumer_count: 0,
            });
        }
        let is_stream = request
            .arguments
            .get("x-queue-type")
            .and_then(Value::as_str)
            == Some("stream")
            || (request.passive && self.streams.get(&request.name).is_some());
        if is_stream {
            return self.declare_stream_queue(actor.user, &request);
        }
        if self.streams.get(&request.name).is_some() {
            return Err(CoreError::precondition_failed(format!(
                "inequivalent arg 'x-queue-type' for {}: received none but current is the type 'stream'",
                self.describe("queue", &request.name)
            )));
        }
        if request.passive {
            let queue = self.queue_or_404(&request.name)?;
            queue.check_exclusive_access(actor.connection_id)?;
            return Ok(QueueDeclared {
                name: request.name,
                message_count: queue.message_count(),
                consumer_count: queue.consumer_count(),
            });
        }
        let name = if request.name.is_empty() {
            server_generated_queue_name()
        } else if request.name.starts_with("amq.") {
            return Err(CoreError::access_refused(format!(
                "queue name '{}' contains reserved prefix 'amq.*'",
                request.name
            )));
        } else {
            request.name.clone()
        };
        self.check(actor.user, Access::Configure, ResourceKind::Queue, &name)?;
        self.validate_queue_arguments(&name, &request.arguments)?;
        let _topology = self.topology.lock();
        if let Some(existing) = self.queue(&name) {
            existing.check_exclusive_access(actor.connection_id)?;
            self.check_queue_equivalence(&existing, &request)?;
            existing.touch();
            return Ok(QueueDeclared {
                name,
                message_count: existing.message_count(),
                consumer_count: existing.consumer_count(),
            });
        }
        if actor.connection_id != BROKER_CONNECTION
            && request.durable
            && !request.exclusive
            && request.arguments.get("x-queue-type").is_none()
        {
            // RabbitMQ 4.x applies a vhost's default queue type to durable, non-exclusive
            // queues declared without a type.
            if let Some(default) = self.default_queue_type().filter(|t| t != "classic") {
                return Err(CoreError::precondition_failed(format!(
                    "queue type '{default}' (the default queue type of vhost '{}') is not supported yet; declare {} with x-queue-type = classic",
                    self.name,
                    self.describe("queue", &name)
                )));
            }
        }
        let config = QueueConfig {
            name: name.clone(),
            vhost: self.name.clone(),
            durable: request.durable,
            exclusive_owner: request.exclusive.then_some(actor.connection_id),
            auto_delete: request.auto_delete,
            arguments: request.arguments,
        };
        let persistent = config.durable && config.exclusive_owner.is_none();
        let queue = Queue::in_vhost(config, self.me.clone());
        if persistent {
            if let Some(store) = self.durability.store() {
                queue.link_store(Arc::clone(store));
            }
        }
        self.apply_policies_to(&queue);
        self.queues.write().insert(name.clone(), queue);
        if persistent {
            self.durability.topology_changed();
        }
        Ok(QueueDeclared {
            name,
            message_count: 0,
            consumer_count: 0,
        })
    }

    fn validate_queue_arguments(&self, name: &str, arguments: &Table) -> CoreResult<()> {
        QueueLimits::from_arguments(arguments).map_err(|problem| {
            CoreError::precondition_failed(format!(
                "{problem} (queue '{name}' in vhost '{}')",
                self.name
            ))
        })?;
        if let Some(queue_type) = arguments.get("x-queue-type") {
            match queue_type.as_str() {
                Some("classic") => {}
                Some(other @ ("quorum" | "stream")) => {
                    return Err(CoreError::precondition_failed(format!(
                        "invalid arg 'x-queue-type' for {}: queue type '{other}' is not supported yet",
                        self.describe("queue", name)
                    )))
                }
                _ => {
                    return Err(CoreError::precondition_failed(format!(
                        "invalid arg 'x-queue-type' for {}: unknown queue type {}",
                        self.describe("queue", name),
                        queue_type
                    )))
                }
            }
        }
        Ok(())
    }

    fn check_queue_equivalence(&self, existing: &Queue, request: &QueueDeclare) -> CoreResult<()> {
        let config = existing.config();
        let what = existing.describe();
        if config.exclusive_owner.is_some() != request.exclusive {
            // RabbitMQ reports an exclusive mismatch as a lock conflict.
            return Err(CoreError::resource_locked(format!(
                "cannot obtain exclusive access to locked {what}. It could be originally declared \
                 on another connection or the exclusive property value does not match that of the \
                 original declaration."
            )));
        }
        if config.durable != request.durable {
            return Err(CoreError::precondition_failed(format!(
                "inequivalent arg 'durable' for {what}: received '{}' but current is '{}'",
                request.durable, config.durable
            )));
        }
        if config.auto_delete != request.auto_delete {
            return Err(CoreError::precondition_failed(format!(
                "inequivalent arg 'auto_delete' for {what}: received '{}' but current is '{}'",
                request.auto_delete, config.auto_delete
            )));
        }
        check_args_equivalence(
            &what,
            EQUIVALENCE_CHECKED_QUEUE_ARGS,
            &request.arguments,
            &config.arguments,
        )
    }

    /// queue.delete: returns the number of ready messages deleted. Deleting a missing queue
    /// succeeds with 0, as in RabbitMQ.
    pub fn delete_queue(
        &self,
        actor: Actor<'_>,
        name: &str,
        if_unused: bool,
        if_empty: bool,
    ) -> CoreResult<u64> {
        self.check(actor.user, Access::Configure, ResourceKind::Queue, name)?;
        if self.streams.delete(name) {
            return Ok(0);
        }
        let _topology = self.topology.lock();
        let Some(queue) = self.queue(name) else {
            return Ok(0);
        };
        queue.check_exclusive_access(actor.connection_id)?;
        if if_unused && queue.consumer_count() > 0 {
            return Err(CoreError::precondition_failed(format!(
                "{} in use",
                queue.describe()
            )));
        }
        if if_empty && queue.message_count() > 0 {
            return Err(CoreError::precondition_failed(format!(
                "{} not empty",
                queue.describe()
            )));
        }
        Ok(self.remove_queue_locked(&queue))
    }

    /// Removes a queue, its bindings and consumers. Caller holds the topology lock.
    fn remove_queue_locked(&self, queue: &Arc<Queue>) -> u64 {
        {
            let mut queues = self.queues.write();
            match queues.get(queue.name()) {
                Some(current) if Arc::ptr_eq(current, queue) => {
                    queues.remove(queue.name());
                }
                _ => return 0,
            }
        }
        self.remove_bindings_to_locked(&DestinationName::Queue(queue.name().to_string()));
        let count = queue.mark_deleted();
        // Keep its lifetime counters so node-wide totals do not drop with the queue.
        self.retired.lock().add_queue(&queue.stats());
        if queue.config().durable && queue.config().exclusive_owner.is_none() {
            self.durability.topology_changed();
        }
        count
    }

    /// Deletes a queue on behalf of the broker (exclusive owner gone, auto-delete), with no
    /// permission check.
    pub fn remove_queue(&self, queue: &Arc<Queue>) -> u64 {
        let _topology = self.topology.lock();
        self.remove_queue_locked(queue)
    }

    /// Creates the queue behind a direct reply-to consumer (`amq.rabbitmq.reply-to`): an
    /// exclusive, auto-delete queue named `amq.rabbitmq.reply-to.<random>`, so replies
    /// published to that name through the default exchange reach the consumer, only the
    /// owning connection can consume it, and it disappears with its consumer.
    pub fn declare_reply_queue(&self, connection_id: u64) -> Arc<Queue> {
        let name = format!(
            "{DIRECT_REPLY_TO}.{}",
            server_generated_queue_name().trim_start_matches("amq.gen-")
        );
        let queue = Queue::new(QueueConfig {
            name: name.clone(),
            vhost: self.name.clone(),
            durable: false,
            exclusive_owner: Some(connection_id),
            auto_delete: true,
            arguments: Table::new(),
        });
        let _topology = self.topology.lock();
        self.queues.write().insert(name, Arc::clone(&queue));
        queue
    }

    /// Deletes the exclusive queues `connection_id` owned, named by the listener that tracked
    /// them.
    pub fn remove_exclusive_queues(&self, connection_id: u64, names: &[String]) {
        for name in names {
            if let Some(queue) = self.queue(name) {
                if queue.config().exclusive_owner == Some(connection_id) {
                    self.remove_queue(&queue);
                }
            }
        }
    }

    /// queue.purge: returns the number of messages purged.
    pub fn purge_queue(&self, actor: Actor<'_>, name: &str) -> CoreResult<u64> {
        let queue = self.queue_for(actor, name, Access::Read)?;
        Ok(queue.purge())
    }

    /// The queue `name` for an operation needing `access` (basic.get, basic.consume,
    /// queue.purge): checks permission, existence and exclusive ownership.
    pub fn queue_for(
        &self,
        actor: Actor<'_>,
        name: &str,
        access: Access,
    ) -> CoreResult<Arc<Queue>> {
        self.check(actor.user, access, ResourceKind::Queue, name)?;
        let queue = self.queue_or_404(name)?;
        queue.check_exclusive_access(actor.connection_id)?;
        Ok(queue)
    }

    /// Attaches a consumer to `queue` (found with [`VHost::queue_for`]).
    pub fn consume(
        &self,
        queue: &Arc<Queue>,
        spec: ConsumerSpec,
        sink: Arc<dyn DeliverySink>,
    ) -> CoreResult<u64> {
        queue.add_consumer(spec, sink)
    }

    /// Detaches a consumer, deleting an auto-delete queue that lost its last consumer.
    pub fn cancel(&self, queue: &Arc<Queue>, consumer_id: u64) {
        if queue.remove_consumer(consumer_id) == ConsumerRemoval::LastOfAutoDelete {
            self.remove_queue(queue);
        }
    }

    // ---- bindings --------------------------------------------------------------------

    /// queue.bind and exchange.bind, for a connection with no topic permission variables
    /// beyond user and vhost (see [`VHost::bind_in_context`]).
    pub fn bind(
        &self,
        actor: Actor<'_>,
        source: &str,
        destination: DestinationName,
        routing_key: &str,
        arguments: Table,
    ) -> CoreResult<()> {
        self.bind_in_context(
            actor,
            &crate::topic_access::TopicVariables::NONE,
            source,
            destination,
            routing_key,
            arguments,
        )
    }

    /// queue.bind and exchange.bind. Binding to a topic exchange also checks the binding key
    /// against the actor's topic `read` permission, expanding `variables` (MQTT passes its
    /// client id).
    pub fn bind_in_context(
        &self,
        actor: Actor<'_>,
        variables: &crate::topic_access::TopicVariables<'_>,
        source: &str,
        destination: DestinationName,
        routing_key: &str,
        arguments: Table,
    ) -> CoreResult<()> {
        let (binding, target, exchange) =
            self.resolve_binding(actor, source, destination, routing_key, arguments)?;
        self.check_topic_on(&exchange, actor.user, Access::Read, routing_key, variables)?;
        if let Some(plugin) = &exchange.config().plugin {
            plugin
                .validate_binding(&binding.routing_key, &binding.arguments)
                .map_err(CoreError::precondition_failed)?;
        }
        if exchange.config().kind == ExchangeKind::Headers {
            validate_x_match(&binding.arguments).map_err(CoreError::precondition_failed)?;
        }
        let _topology = self.topology.lock();
        // Re-check under the topology lock: the destination may have been deleted meanwhile.
        let still_there = match &target {
            Target::Queue(q) => self.queue(q.name()).is_some_and(|c| Arc::ptr_eq(&c, q)),
            Target::Exchange(x) => self.exchange(x).is_some(),
        };
        let source_there = self
            .exchange(source)
            .is_some_and(|c| Arc::ptr_eq(&c, &exchange));
        if !still_there || !source_there {
            return Err(CoreError::not_found(format!(
                "no {}",
                match &binding.destination {
                    DestinationName::Queue(q) => self.describe("queue", q),
                    DestinationName::Exchange(x) => self.describe("exchange", x),
                }
            )));
        }
        let durable = exchange.config().durable
            && match &target {
                Target::Queue(q) => q.config().durable && q.config().exclusive_owner.is_none(),
                Target::Exchange(_) => true,
            };
        exchange.bind(binding, target);
        if durable {
            self.durability.topology_changed();
        }
        Ok(())
    }

    /// queue.unbind and exchange.unbind. Removing a missing binding succeeds.
    pub fn unbind(
        &self,
        actor: Actor<'_>,
        source: &str,
        destination: DestinationName,
        routing_key: &str,
        arguments: Table,
    ) -> CoreResult<()> {
        let (binding, _target, exchange) =
            self.resolve_binding(actor, source, destination, routing_key, arguments)?;
        let _topology = self.topology.lock();
        let unbound = exchange.unbind(&binding);
        if unbound && exchange.config().auto_delete && !exchange.has_bindings() {
            self.remove_exchange_locked(exchange.name());
        }
        if unbound && exchange.config().durable {
            self.durability.topology_changed();
        }
        Ok(())
    }

    fn resolve_binding(
        &self,
        actor: Actor<'_>,
        source: &str,
        destination: DestinationName,
        routing_key: &str,
        arguments: Table,
    ) -> CoreResult<(Binding, Target, Arc<Exchange>)> {
        if source.is_empty() {
            return Err(Self::default_exchange_refused());
        }
        let target = match &destination {
            DestinationName::Queue(name) => {
                self.check(actor.user, Access::Write, ResourceKind::Queue, name)?;
                let queue = self.queue_or_404(name)?;
                queue.check_exclusive_access(actor.connection_id)?;
                Target::Queue(queue)
            }
            DestinationName::Exchange(name) => {
                if name.is_empty() {
                    return Err(Self::default_exchange_refused());
                }
                self.check(actor.user, Access::Write, ResourceKind::Exchange, name)?;
                self.exchange_or_404(name)?;
                Target::Exchange(Arc::from(name.as_str()))
            }
        };
        self.check(actor.user, Access::Read, ResourceKind::Exchange, source)?;
        let exchange = self.exchange_or_404(source)?;
        let binding = Binding {
            source: source.to_string(),
            destination,
            routing_key: routing_key.to_string(),
            arguments,
        };
        Ok((binding, target, exchange))
    }
}

impl std::fmt::Debug for VHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VHost").field("name", &self.name).finish()
    }
}

/// `amq.gen-` followed by 22 URL-safe base64 characters of 16 random bytes, like RabbitMQ.
fn server_generated_queue_name() -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!(
        "amq.gen-{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
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
