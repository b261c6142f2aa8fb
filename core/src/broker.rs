//! The broker: the set of vhosts and users, authentication, and connection ids.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::access::{Permissions, User};
use crate::connections::{CloseWaker, ConnectionHandle, ConnectionInfo, ConnectionRegistry};
use crate::durability::Durability;
use crate::error::{CoreError, CoreResult};
use crate::exchange::ExchangeType;
use crate::password::PasswordHash;
use crate::store::MessageStore;
use crate::vhost::{ExchangeTypes, VHost};

/// Broker-wide limits every listener enforces.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The largest message body accepted, in bytes.
    pub max_message_size: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_size: 16 * 1024 * 1024,
        }
    }
}

/// Why a login failed. Listeners answer every variant with the same refusal (as RabbitMQ
/// does, so as not to tell an attacker which part was wrong) and log the reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthFailure {
    /// No such user.
    UnknownUser,
    /// Wrong password, or a user without a password.
    BadPassword,
    /// A loopback-only user connected from another address.
    LoopbackOnly,
}

impl std::fmt::Display for AuthFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AuthFailure::UnknownUser => "user does not exist",
            AuthFailure::BadPassword => "invalid credentials",
            AuthFailure::LoopbackOnly => "user can only connect via localhost",
        })
    }
}

/// A resource alarm. While any is raised, publishing connections are blocked on every
/// listener; consumers keep receiving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Alarm {
    /// The memory high watermark was crossed.
    Memory,
    /// Free disk space fell below the limit.
    Disk,
}

impl Alarm {
    /// The reason RabbitMQ gives in connection.blocked.
    pub fn reason(self) -> &'static str {
        match self {
            Alarm::Memory => "low on memory",
            Alarm::Disk => "low on disk",
        }
    }
}

/// Called with the blocking reason (`None` when every alarm cleared) whenever alarms change.
pub type AlarmListener = Box<dyn Fn(Option<String>) + Send + Sync>;

/// The whole broker model.
pub struct Broker {
    vhosts: RwLock<HashMap<String, Arc<VHost>>>,
    users: RwLock<HashMap<String, Arc<User>>>,
    loopback_users: RwLock<HashSet<String>>,
    limits: Limits,
    next_connection_id: AtomicU64,
    alarms: Mutex<Vec<Alarm>>,
    /// Alarms raised on other nodes of the cluster, by node: as in RabbitMQ they block this
    /// node's publishers too.
    remote_alarms: Mutex<std::collections::BTreeMap<String, Vec<Alarm>>>,
    alarm_listeners: Mutex<Vec<AlarmListener>>,
    exchange_types: ExchangeTypes,
    pub(crate) durability: Arc<Durability>,
    connections: Arc<ConnectionRegistry>,
    /// The stream protocol's publishers and consumers.
    stream_clients: Arc<crate::stream_clients::StreamClients>,
    /// Lifetime totals of deleted vhosts (see [`Broker::totals`]).
    retired: Mutex<crate::counters::NodeTotals>,
    /// Runtime and global parameters (`parameters.rs`).
    pub(crate) parameters: crate::parameters::ParameterStore,
}

impl Broker {
    /// An empty broker: no vhosts, no users.
    pub fn new(limits: Limits) -> Arc<Broker> {
        let durability: Arc<Durability> = Arc::default();
        let connections = Arc::new(ConnectionRegistry::with_limits(Arc::clone(
            durability.resource_limits(),
        )));
        Arc::new(Broker {
            vhosts: RwLock::new(HashMap::new()),
            users: RwLock::new(HashMap::new()),
            loopback_users: RwLock::new(HashSet::new()),
            limits,
            next_connection_id: AtomicU64::new(1),
            alarms: Mutex::new(Vec::new()),
            remote_alarms: Mutex::default(),
            alarm_listeners: Mutex::new(Vec::new()),
            exchange_types: ExchangeTypes::default(),
            durability,
            connections,
            stream_clients: Arc::default(),
            parameters: Default::default(),
            retired: Default::default(),
        })
    }

    /// Attaches the message store: durable queues declared from now on keep their persistent
    /// messages there, and durable topology changes are written by its writer. Attach before
    /// declaring anything.
    pub fn attach_store(&self, store: Arc<MessageStore>) -> bool {
        self.durability.attach(store)
    }

    /// Installs what makes quorum queues on this node (the server's `warren_raft`
    /// backend). Install before declaring anything; false if one was installed already.
    pub fn set_queue_backend(&self, backend: Arc<dyn crate::queue_type::QueueBackend>) -> bool {
        self.durability.set_queue_backend(backend)
    }

    /// Installs forwarding to classic queues homed on other nodes of the cluster (see
    /// [`crate::remote`]); false if installed already.
    pub fn set_forwarding(&self, forwarding: Arc<crate::remote::Forwarding>) -> bool {
        self.durability.set_forwarding(forwarding)
    }

    /// Forwarding to other nodes, on a cluster.
    pub fn forwarding(&self) -> Option<&Arc<crate::remote::Forwarding>> {
        self.durability.forwarding()
    }

    /// Installs how this node closes its MQTT connection holding a client identifier that
    /// a connection on another node takes over; false if one was installed already.
    pub fn set_client_takeover(&self, takeover: Arc<dyn crate::remote::ClientTakeover>) -> bool {
        self.durability.set_client_takeover(takeover)
    }

    /// The MQTT listener's takeover of client identifiers, once installed.
    pub fn client_takeover(&self) -> Option<&Arc<dyn crate::remote::ClientTakeover>> {
        self.durability.client_takeover()
    }

    /// Installs how streams encode the messages AMQP 0-9-1, STOMP and MQTT publish to them
    /// (the server's AMQP 1.0 message mapping). Install before publishing to a stream; false
    /// if one was installed already.
    pub fn set_stream_format(&self, format: Arc<dyn crate::stream_log::MessageFormat>) -> bool {
        self.durability.set_stream_format(format)
    }

    /// How much each queue keeps in memory (`queue_max_in_memory_messages`,
    /// `queue_max_in_memory_bytes`): beyond it persistent messages of durable queues are paged
    /// to disk and publishers of anything else are held back (see [`crate::flow`]).
    pub fn queue_memory_limits(&self) -> &Arc<crate::flow::QueueMemoryLimits> {
        self.durability.queue_memory_limits()
    }

    /// The message store, when the broker has one.
    pub fn message_store(&self) -> Option<&Arc<MessageStore>> {
        self.durability.store()
    }

    /// Every user, sorted by name.
    pub fn users(&self) -> Vec<Arc<User>> {
        let mut users: Vec<Arc<User>> = self.users.read().values().cloned().collect();
        users.sort_by(|a, b| a.name.cmp(&b.name));
        users
    }

    /// Broker-wide limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A fresh connection id, unique for the broker's lifetime.
    pub fn next_connection_id(&self) -> u64 {
        self.next_connection_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Registers an open client connection for operators (listing, metrics, closing). Keep
    /// the handle for the connection's lifetime: dropping it unregisters. `waker` is called
    /// when an operator asks the connection to close; see [`ConnectionHandle::close_requested`].
    ///
    /// Every listener calls this once a connection is authenticated and has its vhost, and
    /// refuses the connection when it is refused here: over the vhost's or the user's
    /// `max-connections` ([`crate::resource_limits`]), with RabbitMQ's texts.
    pub fn register_connection(
        &self,
        info: ConnectionInfo,
        waker: CloseWaker,
    ) -> Result<ConnectionHandle, crate::resource_limits::ConnectionLimitReached> {
        let user = info.user.clone();
        let vhost = info.vhost.clone();
        self.connections
            .register(info, waker)
            .inspect_err(|refusal| {
                tracing::warn!(%user, %vhost, reason = %refusal, "connection refused");
            })
    }

    /// Vhost and user limits as they apply now.
    pub fn resource_limits(&self) -> &crate::resource_limits::ResourceLimits {
        self.durability.resource_limits()
    }

    /// The registry of open client connections.
    pub fn connections(&self) -> &ConnectionRegistry {
        &self.connections
    }

    /// The stream protocol's publishers and consumers on this node (listed by the
    /// management API, counted by metrics).
    pub fn stream_clients(&self) -> &Arc<crate::stream_clients::StreamClients> {
        &self.stream_clients
    }

    /// Asks connection `id` to close with `reason` (its listener closes it as its protocol
    /// does); false if no such connection is registered.
    pub fn close_connection(&self, id: u64, reason: &str) -> bool {
        self.connections.close(id, reason)
    }

    /// Deletes a user and their permissions and topic permissions in every vhost; false if no
    /// such user.
    pub fn delete_user(&self, name: &str) -> bool {
        let removed = self.users.write().remove(name).is_some();
        if removed {
            let vhosts: Vec<Arc<VHost>> = self.vhosts.read().values().cloned().collect();
            for vhost in vhosts {
                vhost.clear_permissions(name);
                vhost.clear_topic_permissions(name, None);
            }
        }
        removed
    }

    /// Enables a plugin exchange type in every vhost.
    pub fn register_exchange_type(&self, exchange_type: Arc<dyn ExchangeType>) {
        self.exchange_types
            .write()
            .insert(exchange_type.name().to_string(), exchange_type);
    }

    /// Whether a plugin exchange type called `name` is enabled.
    pub fn has_exchange_type(&self, name: &str) -> bool {
        self.exchange_types.read().contains_key(name)
    }

    /// Raises or clears a resource alarm and tells every listener when the set changed.
    pub fn set_alarm(&self, alarm: Alarm, raised: bool) {
        {
            let mut alarms = self.alarms.lock();
            let present = alarms.contains(&alarm);
            match (raised, present) {
                (true, false) => alarms.push(alarm),
                (false, true) => alarms.retain(|a| *a != alarm),
                _ => return,
            }
            tracing::warn!(alarm = alarm.reason(), raised, "resource alarm changed");
        }
        self.notify_alarm_listeners();
    }

    /// Records the alarms raised on another node of the cluster (none: cleared, also when
    /// the node is down or left); publishers here are blocked while any node has one.
    pub fn set_remote_alarms(&self, node: &str, alarms: Vec<Alarm>) {
        {
            let mut remote = self.remote_alarms.lock();
            let before = remote.get(node).cloned().unwrap_or_default();
            if before == alarms {
                return;
            }
            tracing::warn!(%node, alarms = ?alarms.iter().map(|a| a.reason()).collect::<Vec<_>>(), "resource alarm of another cluster node changed");
            if alarms.is_empty() {
                remote.remove(node);
            } else {
                remote.insert(node.to_owned(), alarms);
            }
        }
        self.notify_alarm_listeners();
    }

    fn notify_alarm_listeners(&self) {
        let reason = self.blocking_reason();
        for listener in self.alarm_listeners.lock().iter() {
            listener(reason.clone());
        }
    }

    /// The alarms raised on this node now (another node's are not listed here).
    pub fn alarms(&self) -> Vec<Alarm> {
        self.alarms.lock().clone()
    }

    /// Why publishers are blocked: every alarm of this node and of the other nodes, once each.
    fn blocking_reason(&self) -> Option<String> {
        let mut all = self.alarms.lock().clone();
        for alarms in self.remote_alarms.lock().values() {
            for alarm in alarms {
                if !all.contains(alarm) {
                    all.push(*alarm);
                }
            }
        }
        (!all.is_empty()).then(|| {
            all.iter()
                .map(|a| a.reason())
                .collect::<Vec<_>>()
                .join(" & ")
        })
    }

    /// Registers `listener` for alarm changes; it is called at once with the current state.
    pub fn subscribe_alarms(&self, listener: AlarmListener) {
        listener(self.blocking_reason());
        self.alarm_listeners.lock().push(listener);
    }

    /// The resource-alarm state as a watch channel (`Some(reason)` while publishers must be
    /// blocked), for listeners whose connections wait on it.
    pub fn alarm_watch(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        let (sender, receiver) = tokio::sync::watch::channel(None);
        self.subscribe_alarms(Box::new(move |reason| {
            let _ = sender.send(reason);
        }));
        receiver
    }

    /// Makes the queues created from now on read `clock` for expiry, and the expiry sweep
    /// too; false if a clock was set already. Tests pass `Clock::tokio()` (paused time) or
    /// `Clock::manual()`.
    pub fn use_clock(&self, clock: crate::clock::Clock) -> bool {
        self.durability.use_clock(clock)
    }

    /// Removes expired messages from every queue of every vhost; the server calls this about
    /// every 250 ms so an expired message anywhere in a queue is gone within a second.
    pub fn expire_messages(&self) -> usize {
        let now = self.durability.clock().now_ms();
        let vhosts: Vec<Arc<VHost>> = self.vhosts.read().values().cloned().collect();
        vhosts.iter().map(|v| v.expire_messages(now)).sum()
    }

    /// Creates a vhost, or returns the existing one.
    pub fn add_vhost(&self, name: &str) -> Arc<VHost> {
        let mut created = false;
        let vhost = {
            let mut vhosts = self.vhosts.write();
            Arc::clone(vhosts.entry(name.to_string()).or_insert_with(|| {
                created = true;
                VHost::in_broker(
                    name,
                    Arc::clone(&self.exchange_types),
                    Arc::clone(&self.durability),
                )
            }))
        };
        if created {
            self.durability.topology_changed();
        }
        vhost
    }

    /// Deletes a vhost and everything in it.
    pub fn delete_vhost(&self, name: &str) -> bool {
        let removed = self.vhosts.write().remove(name);
        if let Some(vhost) = &removed {
            for queue in vhost.queues() {
                vhost.remove_queue(&queue);
            }
            // Quorum queues (their group's member and directory on this node: every node
            // applies the replicated vhost deletion) and streams (their consumers are
            // cancelled before their logs go), so a vhost made again under the name does
            // not reopen their state.
            for queue in vhost.typed_queues() {
                vhost.remove_typed_queue(queue.name());
            }
            vhost.streams().delete_all();
            self.clear_vhost_parameters(name);
            let totals = vhost.totals();
            self.retired.lock().add(&totals);
            self.durability.topology_changed();
        }
        removed.is_some()
    }

    /// Node-wide lifetime totals (RabbitMQ's `rabbitmq_global_*` counters): every vhost's,
    /// deleted queues and vhosts included, so they never go backwards.
    pub fn totals(&self) -> crate::counters::NodeTotals {
        let mut totals = *self.retired.lock();
        let vhosts: Vec<Arc<VHost>> = self.vhosts.read().values().cloned().collect();
        for vhost in vhosts {
            totals.add(&vhost.totals());
        }
        totals
    }

    /// The vhost called `name`.
    pub fn vhost(&self, name: &str) -> Option<Arc<VHost>> {
        self.vhosts.read().get(name).cloned()
    }

    /// All vhost names, sorted.
    pub fn vhost_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.vhosts.read().keys().cloned().collect();
        names.sort();
        names
    }

    /// Adds or replaces a user.
    pub fn put_user(&self, user: User) {
        self.users.write().insert(user.name.clone(), Arc::new(user));
        self.durability.topology_changed();
    }

    /// Adds or replaces a user with a plain-text password (hashed here).
    pub fn add_user(&self, name: &str, password: &str, tags: Vec<String>) {
        self.put_user(User {
            name: name.to_string(),
            password: Some(PasswordHash::new(password)),
            tags,
        });
    }

    /// The user called `name`.
    pub fn user(&self, name: &str) -> Option<Arc<User>> {
        self.users.read().get(name).cloned()
    }

    /// Makes `user` loopback-only (RabbitMQ's `loopback_users`).
    pub fn set_loopback_users(&self, users: impl IntoIterator<Item = String>) {
        *self.loopback_users.write() = users.into_iter().collect();
    }

    /// Grants `user` permissions in `vhost`.
    pub fn set_permissions(
        &self,
        user: &str,
        vhost: &str,
        permissions: Permissions,
    ) -> CoreResult<()> {
        let vhost = self
            .vhost(vhost)
            .ok_or_else(|| CoreError::not_found(format!("no vhost '{vhost}'")))?;
        vhost.set_permissions(user, permissions);
        Ok(())
    }

    /// Checks a user name and password. `from_loopback` tells whether the peer address is a
    /// loopback address.
    pub fn authenticate(
        &self,
        username: &str,
        password: &str,
        from_loopback: bool,
    ) -> Result<Arc<User>, AuthFailure> {
        let user = self.user(username).ok_or(AuthFailure::UnknownUser)?;
        let valid = user
            .password
            .as_ref()
            .is_some_and(|hash| hash.verify(password));
        if !valid {
            return Err(AuthFailure::BadPassword);
        }
        if !from_loopback && self.loopback_users.read().contains(username) {
            return Err(AuthFailure::LoopbackOnly);
        }
        Ok(user)
    }

    /// Logs in a user whose identity was established another way, by a verified TLS client
    /// certificate (SASL EXTERNAL, `mqtt.ssl_cert_login`): the user must exist, and loopback
    /// users must connect from the loopback interface; no password is checked, as RabbitMQ.
    pub fn authenticate_trusted(
        &self,
        username: &str,
        from_loopback: bool,
    ) -> Result<Arc<User>, AuthFailure> {
        let user = self.user(username).ok_or(AuthFailure::UnknownUser)?;
        if !from_loopback && self.loopback_users.read().contains(username) {
            return Err(AuthFailure::LoopbackOnly);
        }
        Ok(user)
    }

    /// Opens `vhost` for `user`: the vhost must exist and the user must have permissions
    /// there (any, as RabbitMQ requires). Errors carry RabbitMQ's 530 texts.
    pub fn open_vhost(&self, user: &str, vhost: &str) -> CoreResult<Arc<VHost>> {
        let found = self
            .vhost(vhost)
            .ok_or_else(|| CoreError::not_allowed(format!("vhost {vhost} not found")))?;
        if found.permissions(user).is_none() {
            return Err(CoreError::not_allowed(format!(
                "access to vhost '{vhost}' refused for user '{user}'"
            )));
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex as StdMutex;

    #[test]
    fn alarm_listeners_see_each_change_with_rabbitmq_reasons() {
        let broker = Broker::new(Limits::default());
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        broker.subscribe_alarms(Box::new(move |reason| sink.lock().unwrap().push(reason)));
        broker.set_alarm(Alarm::Memory, true);
        broker.set_alarm(Alarm::Memory, true); // no change, no call
        broker.set_alarm(Alarm::Disk, true);
        broker.set_alarm(Alarm::Memory, false);
        broker.set_alarm(Alarm::Disk, false);
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                None,
                Some("low on memory".to_string()),
                Some("low on memory & low on disk".to_string()),
                Some("low on disk".to_string()),
                None
            ]
        );
        assert!(broker.alarms().is_empty());
    }

    #[test]
    fn another_nodes_alarm_blocks_publishers_here_until_that_node_clears_it() {
        let broker = Broker::new(Limits::default());
        let seen = Arc::new(StdMutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        broker.subscribe_alarms(Box::new(move |reason| sink.lock().unwrap().push(reason)));
        broker.set_remote_alarms("warren@b", vec![Alarm::Disk]);
        broker.set_remote_alarms("warren@b", vec![Alarm::Disk]); // no change, no call
        broker.set_alarm(Alarm::Disk, true); // the same alarm here too: reported once
        broker.set_remote_alarms("warren@c", vec![Alarm::Memory]);
        broker.set_remote_alarms("warren@b", Vec::new());
        broker.set_alarm(Alarm::Disk, false);
        broker.set_remote_alarms("warren@c", Vec::new());
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                None,
                Some("low on disk".to_string()),
                Some("low on disk".to_string()),
                Some("low on disk & low on memory".to_string()),
                Some("low on disk & low on memory".to_string()),
                Some("low on memory".to_string()),
                None
            ]
        );
        assert!(
            broker.alarms().is_empty(),
            "another node's alarms are not this node's"
        );
    }

    #[test]
    fn loopback_users_are_refused_from_other_addresses() {
        let broker = Broker::new(Limits::default());
        broker.add_user("guest", "guest", vec![]);
        broker.set_loopback_users(["guest".to_string()]);
        assert!(broker.authenticate("guest", "guest", true).is_ok());
        assert_eq!(
            broker.authenticate("guest", "guest", false).unwrap_err(),
            AuthFailure::LoopbackOnly
        );
        assert_eq!(
            broker.authenticate("guest", "nope", true).unwrap_err(),
            AuthFailure::BadPassword
        );
        assert_eq!(
            broker.authenticate("who", "x", true).unwrap_err(),
            AuthFailure::UnknownUser
        );
    }

    #[test]
    fn trusted_logins_need_an_existing_user_but_no_password() {
        let broker = Broker::new(Limits::default());
        broker.add_user("client", "secret", vec![]);
        broker.add_user("guest", "guest", vec![]);
        broker.set_loopback_users(["guest".to_string()]);
        assert_eq!(
            broker.authenticate_trusted("client", false).unwrap().name,
            "client"
        );
        assert_eq!(
            broker.authenticate_trusted("nobody", true).unwrap_err(),
            AuthFailure::UnknownUser
        );
        assert_eq!(
            broker.authenticate_trusted("guest", false).unwrap_err(),
            AuthFailure::LoopbackOnly
        );
    }
}
