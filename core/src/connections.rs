//! The registry of client connections of every protocol, for operators: the management API
//! lists them, counts them for metrics and asks them to close.
//!
//! A listener registers a connection once it is authenticated and has a vhost
//! ([`Broker::register_connection`](crate::Broker::register_connection)) and keeps the returned
//! [`ConnectionHandle`] for the connection's lifetime: dropping it unregisters. The registry is
//! never touched on the message path; a channel count is one relaxed store.
//!
//! The registry also enforces the vhost and user limits on connections and channels
//! ([`crate::resource_limits`]): it counts this node's connections by vhost and by user, and
//! the AMQP 0-9-1 channels of each user, and refuses what would go over a limit.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

use crate::error::CoreResult;
use crate::resource_limits::{
    channel_limit_reached, ConnectionLimitKind, ConnectionLimitReached, ResourceLimits,
};
use crate::value::{Table, Value};

/// What a listener knows about a connection when it registers it.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    /// The broker-wide connection id ([`Broker::next_connection_id`](crate::Broker::next_connection_id)).
    pub id: u64,
    /// The protocol as RabbitMQ names it: `AMQP 0-9-1`, `AMQP 1.0`, `MQTT 3.1.1`, `STOMP 1.2`.
    pub protocol: String,
    /// The authenticated user.
    pub user: String,
    /// The vhost the connection is in.
    pub vhost: String,
    /// The client's address.
    pub peer: SocketAddr,
    /// The broker's address the client connected to.
    pub local: SocketAddr,
    /// Client properties (AMQP 0-9-1 `client_properties`; other protocols fill in what they
    /// have, such as the MQTT client id).
    pub client_properties: Table,
    /// The name the client gave its connection (`connection_name` client property).
    pub connection_name: Option<String>,
    /// Whether the connection runs over TLS.
    pub tls: bool,
    /// Negotiated frame_max (0 when the protocol has none).
    pub frame_max: u32,
    /// Negotiated channel_max (0 when the protocol has none).
    pub channel_max: u16,
    /// Negotiated heartbeat / keep-alive in seconds.
    pub heartbeat: u16,
    /// When the connection opened, in milliseconds since the Unix epoch.
    pub connected_at: u64,
}

impl ConnectionInfo {
    /// The name RabbitMQ gives a connection: `PEER:PORT -> LOCAL:PORT`.
    pub fn name(&self) -> String {
        format!("{} -> {}", self.peer, self.local)
    }

    /// The `connection_name` client property, if a client sent one.
    pub fn connection_name_from(client_properties: &Table) -> Option<String> {
        match client_properties.get("connection_name") {
            Some(Value::LongString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        }
    }
}

/// Called (from any thread) when an operator asks a connection to close; the listener then
/// reads the reason with [`ConnectionHandle::close_requested`] and closes the connection as
/// its protocol does (AMQP 0-9-1: 320 CONNECTION_FORCED with the reason).
pub type CloseWaker = Box<dyn Fn() + Send + Sync>;

/// A registered connection as the registry keeps it: [`ConnectionInfo`] in a compact form,
/// rebuilt only when an operator lists connections. Every idle connection carries one, so
/// names that many connections share (protocol, user, vhost, client property keys) are one
/// interned `Arc<str>`, and a connection name that repeats a client property is not stored
/// twice.
struct Entry {
    id: u64,
    protocol: Arc<str>,
    user: Arc<str>,
    vhost: Arc<str>,
    peer: SocketAddr,
    local: SocketAddr,
    client_properties: Box<[(Arc<str>, Value)]>,
    connection_name: StoredConnectionName,
    tls: bool,
    frame_max: u32,
    channel_max: u16,
    heartbeat: u16,
    connected_at: u64,
    channels: AtomicU32,
    /// This connection's channels counted in its user's total against `max-channels` (only
    /// connections that open channels with [`ConnectionHandle::open_channel`]).
    counted_channels: AtomicU32,
    /// The user's channel total on this node, shared by the user's connections.
    user_channels: Arc<AtomicU32>,
    close_reason: Mutex<Option<String>>,
    waker: CloseWaker,
    /// What the listener tells of each channel, when it keeps per-channel state (AMQP 0-9-1).
    channel_view: std::sync::OnceLock<Arc<dyn ChannelView>>,
}

/// One channel of a connection as the management API lists it (RabbitMQ's `/api/channels`
/// fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelSummary {
    /// The channel number.
    pub number: u16,
    /// basic.qos global=false: the prefetch of consumers created from now on (0 = none).
    pub prefetch: u16,
    /// basic.qos global=true: the channel-wide limit (0 = none).
    pub global_prefetch: u32,
    /// Consumers on the channel.
    pub consumers: u32,
    /// Deliveries sent and not yet acknowledged.
    pub unacknowledged: u32,
    /// Publisher confirms are on (confirm.select).
    pub confirm: bool,
    /// The channel is transactional (tx.select).
    pub transactional: bool,
}

/// A listener's per-channel state, read when the channels are listed (never on the message
/// path: the listener keeps the figures where it keeps them anyway).
pub trait ChannelView: Send + Sync {
    /// The connection's open channels, by number.
    fn channels(&self) -> Vec<ChannelSummary>;
}

/// Where an entry's connection name is.
enum StoredConnectionName {
    /// The client gave none.
    None,
    /// The value of the client property at this index (AMQP 0-9-1 `connection_name`, the
    /// MQTT client id).
    Property(usize),
    /// A name found in no client property.
    Own(Box<str>),
}

impl Entry {
    fn new(
        info: ConnectionInfo,
        names: &NameInterner,
        waker: CloseWaker,
        user_channels: Arc<AtomicU32>,
    ) -> Entry {
        let client_properties: Box<[(Arc<str>, Value)]> = info
            .client_properties
            .0
            .into_iter()
            .map(|(key, value)| (names.intern(&key), value))
            .collect();
        let connection_name = match info.connection_name {
            None => StoredConnectionName::None,
            Some(name) => client_properties
                .iter()
                .position(|(_, value)| {
                    matches!(value, Value::LongString(bytes) if bytes == name.as_bytes())
                })
                .map_or_else(
                    || StoredConnectionName::Own(name.into_boxed_str()),
                    StoredConnectionName::Property,
                ),
        };
        Entry {
            id: info.id,
            protocol: names.intern(&info.protocol),
            user: names.intern(&info.user),
            vhost: names.intern(&info.vhost),
            peer: info.peer,
            local: info.local,
            client_properties,
            connection_name,
            tls: info.tls,
            frame_max: info.frame_max,
            channel_max: info.channel_max,
            heartbeat: info.heartbeat,
            connected_at: info.connected_at,
            channels: AtomicU32::new(0),
            counted_channels: AtomicU32::new(0),
            user_channels,
            close_reason: Mutex::new(None),
            waker,
            channel_view: std::sync::OnceLock::new(),
        }
    }

    /// The [`ConnectionInfo`] the listener registered.
    fn info(&self) -> ConnectionInfo {
        let connection_name = match &self.connection_name {
            StoredConnectionName::None => None,
            StoredConnectionName::Property(index) => match self.client_properties.get(*index) {
                Some((_, Value::LongString(bytes))) => {
                    Some(String::from_utf8_lossy(bytes).into_owned())
                }
                _ => None,
            },
            StoredConnectionName::Own(name) => Some(name.to_string()),
        };
        ConnectionInfo {
            id: self.id,
            protocol: self.protocol.to_string(),
            user: self.user.to_string(),
            vhost: self.vhost.to_string(),
            peer: self.peer,
            local: self.local,
            client_properties: Table(
                self.client_properties
                    .iter()
                    .map(|(key, value)| (key.to_string(), value.clone()))
                    .collect(),
            ),
            connection_name,
            tls: self.tls,
            frame_max: self.frame_max,
            channel_max: self.channel_max,
            heartbeat: self.heartbeat,
            connected_at: self.connected_at,
        }
    }
}

/// Shares one allocation among equal names. Bounded: past [`NameInterner::CAPACITY`]
/// distinct names (say, one user per device) new names are allocated per connection instead,
/// so the table cannot grow without limit; interned names live as long as the broker.
#[derive(Default)]
struct NameInterner {
    names: Mutex<std::collections::HashSet<Arc<str>>>,
}

impl NameInterner {
    const CAPACITY: usize = 4096;

    fn intern(&self, name: &str) -> Arc<str> {
        let mut names = self.names.lock();
        if let Some(shared) = names.get(name) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(name);
        if names.len() < Self::CAPACITY {
            names.insert(Arc::clone(&shared));
        }
        shared
    }
}

/// A snapshot of one registered connection.
#[derive(Debug, Clone)]
pub struct ConnectionSnapshot {
    /// What the listener registered.
    pub info: ConnectionInfo,
    /// Open channels (sessions for AMQP 1.0; 1 for MQTT and STOMP).
    pub channels: u32,
    /// Each channel's state, from a listener that keeps it ([`ConnectionHandle::set_channel_view`]).
    pub channel_details: Option<Vec<ChannelSummary>>,
}

/// This node's connections by vhost and by user, for the `max-connections` limits.
#[derive(Default)]
struct Tallies {
    vhosts: HashMap<Arc<str>, u64>,
    users: HashMap<Arc<str>, UserTally>,
}

impl Tallies {
    /// Refuses a connection over its vhost's or its user's `max-connections`.
    fn admits(
        &self,
        vhost: &str,
        user: &str,
        vhost_limit: Option<u64>,
        user_limit: Option<u64>,
    ) -> Result<(), ConnectionLimitReached> {
        let refused = |kind, limit| ConnectionLimitReached {
            kind,
            vhost: vhost.to_string(),
            user: user.to_string(),
            limit,
        };
        let in_vhost = self.vhosts.get(vhost).copied().unwrap_or(0);
        if let Some(limit) = vhost_limit.filter(|limit| in_vhost >= *limit) {
            return Err(refused(ConnectionLimitKind::Vhost, limit));
        }
        let of_user = self.users.get(user).map_or(0, |tally| tally.connections);
        if let Some(limit) = user_limit.filter(|limit| of_user >= *limit) {
            return Err(refused(ConnectionLimitKind::User, limit));
        }
        Ok(())
    }
}

/// One user's connections and AMQP 0-9-1 channels on this node.
struct UserTally {
    connections: u64,
    channels: Arc<AtomicU32>,
}

/// Every registered connection, and lifetime counters for metrics.
#[derive(Default)]
pub struct ConnectionRegistry {
    entries: RwLock<HashMap<u64, Arc<Entry>>>,
    names: NameInterner,
    opened: AtomicU64,
    closed: AtomicU64,
    /// Counted under their own lock, taken after `entries` is released (never both).
    tallies: Mutex<Tallies>,
    limits: Arc<ResourceLimits>,
}

impl ConnectionRegistry {
    /// An empty registry enforcing `limits`.
    pub(crate) fn with_limits(limits: Arc<ResourceLimits>) -> ConnectionRegistry {
        ConnectionRegistry {
            limits,
            ..ConnectionRegistry::default()
        }
    }

    pub(crate) fn register(
        self: &Arc<Self>,
        info: ConnectionInfo,
        waker: CloseWaker,
    ) -> Result<ConnectionHandle, ConnectionLimitReached> {
        let id = info.id;
        let vhost_limit = self.limits.vhost(&info.vhost).max_connections;
        let user_limit = self.limits.user(&info.user).max_connections;
        let vhost = self.names.intern(&info.vhost);
        let user = self.names.intern(&info.user);
        let user_channels = {
            let mut tallies = self.tallies.lock();
            tallies.admits(&info.vhost, &info.user, vhost_limit, user_limit)?;
            *tallies.vhosts.entry(vhost).or_insert(0) += 1;
            let tally = tallies.users.entry(user).or_insert_with(|| UserTally {
                connections: 0,
                channels: Arc::default(),
            });
            tally.connections += 1;
            Arc::clone(&tally.channels)
        };
        let entry = Arc::new(Entry::new(info, &self.names, waker, user_channels));
        self.entries.write().insert(id, Arc::clone(&entry));
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(ConnectionHandle {
            registry: Arc::downgrade(self),
            entry,
        })
    }

    /// Whether a connection of `user` to `vhost` would be admitted now (the check
    /// [`ConnectionRegistry::register`] makes), for a listener that must refuse before it
    /// changes anything (MQTT, before a client identifier is taken over).
    pub fn admits(&self, vhost: &str, user: &str) -> Result<(), ConnectionLimitReached> {
        let vhost_limit = self.limits.vhost(vhost).max_connections;
        let user_limit = self.limits.user(user).max_connections;
        self.tallies
            .lock()
            .admits(vhost, user, vhost_limit, user_limit)
    }

    /// Takes an unregistered connection out of the tallies.
    fn uncount(&self, entry: &Entry) {
        let counted = entry.counted_channels.swap(0, Ordering::Relaxed);
        entry.user_channels.fetch_sub(counted, Ordering::Relaxed);
        let mut tallies = self.tallies.lock();
        if let Some(count) = tallies.vhosts.get_mut(&entry.vhost) {
            *count -= 1;
            if *count == 0 {
                tallies.vhosts.remove(&entry.vhost);
            }
        }
        if let Some(tally) = tallies.users.get_mut(&entry.user) {
            tally.connections -= 1;
            if tally.connections == 0 {
                tallies.users.remove(&entry.user);
            }
        }
    }

    /// This node's connections in `vhost` now.
    pub fn count_in_vhost(&self, vhost: &str) -> u64 {
        self.tallies.lock().vhosts.get(vhost).copied().unwrap_or(0)
    }

    /// This node's connections of `user` now.
    pub fn count_of_user(&self, user: &str) -> u64 {
        self.tallies
            .lock()
            .users
            .get(user)
            .map_or(0, |tally| tally.connections)
    }

    /// This node's AMQP 0-9-1 channels of `user` now.
    pub fn channels_of_user(&self, user: &str) -> u32 {
        self.tallies
            .lock()
            .users
            .get(user)
            .map_or(0, |tally| tally.channels.load(Ordering::Relaxed))
    }

    /// Snapshots of every registered connection, oldest first.
    pub fn list(&self) -> Vec<ConnectionSnapshot> {
        let mut list: Vec<ConnectionSnapshot> = self
            .entries
            .read()
            .values()
            .map(|entry| ConnectionSnapshot {
                info: entry.info(),
                channels: entry.channels.load(Ordering::Relaxed),
                channel_details: entry.channel_view.get().map(|view| view.channels()),
            })
            .collect();
        list.sort_by_key(|c| c.info.id);
        list
    }

    /// How many connections are registered now.
    pub fn count(&self) -> usize {
        self.entries.read().len()
    }

    /// Open channels over every connection.
    pub fn channel_count(&self) -> u64 {
        self.entries
            .read()
            .values()
            .map(|e| u64::from(e.channels.load(Ordering::Relaxed)))
            .sum()
    }

    /// Connections registered since the broker started.
    pub fn opened_total(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// Registered connections that ended since the broker started.
    pub fn closed_total(&self) -> u64 {
        self.closed.load(Ordering::Relaxed)
    }

    /// Asks connection `id` to close with `reason`; false if no such connection.
    pub fn close(&self, id: u64, reason: &str) -> bool {
        let Some(entry) = self.entries.read().get(&id).cloned() else {
            return false;
        };
        *entry.close_reason.lock() = Some(reason.to_string());
        (entry.waker)();
        true
    }
}

/// A registered connection. Dropping it unregisters the connection.
pub struct ConnectionHandle {
    registry: Weak<ConnectionRegistry>,
    entry: Arc<Entry>,
}

impl ConnectionHandle {
    /// Lets the management API read the connection's channels from `view` (once; later
    /// calls are ignored).
    pub fn set_channel_view(&self, view: Arc<dyn ChannelView>) {
        let _ = self.entry.channel_view.set(view);
    }

    /// Records how many channels (sessions) the connection has open. For a connection that
    /// opens its channels with [`ConnectionHandle::open_channel`], this also gives back the
    /// closed ones to its user's `max-channels` total.
    pub fn set_channels(&self, channels: u32) {
        self.entry.channels.store(channels, Ordering::Relaxed);
        let counted = self.entry.counted_channels.load(Ordering::Relaxed);
        if counted != 0 && counted != channels {
            // Only this connection's own thread changes its counted channels.
            self.entry
                .counted_channels
                .store(channels, Ordering::Relaxed);
            if channels > counted {
                self.entry
                    .user_channels
                    .fetch_add(channels - counted, Ordering::Relaxed);
            } else {
                self.entry
                    .user_channels
                    .fetch_sub(counted - channels, Ordering::Relaxed);
            }
        }
    }

    /// Opens one more channel on a connection that has `open_now` open (AMQP 0-9-1
    /// channel.open), unless the user's `max-channels` is reached over all their
    /// connections on this node: then RabbitMQ's 530 refusal. On success the connection
    /// counts `open_now + 1` channels.
    pub fn open_channel(&self, open_now: u32) -> CoreResult<()> {
        let limit = self
            .registry
            .upgrade()
            .and_then(|registry| registry.limits.user(&self.entry.user).max_channels);
        let counted = self.entry.counted_channels.load(Ordering::Relaxed);
        let wanted = open_now.saturating_add(1);
        let result =
            self.entry
                .user_channels
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |total| {
                    let others = total.saturating_sub(counted);
                    let after = others.saturating_add(wanted);
                    match limit {
                        Some(limit) if u64::from(others) + u64::from(open_now) >= limit => None,
                        _ => Some(after),
                    }
                });
        match (result, limit) {
            (Ok(_), _) => {
                self.entry.counted_channels.store(wanted, Ordering::Relaxed);
                self.entry.channels.store(wanted, Ordering::Relaxed);
                Ok(())
            }
            (Err(_), Some(limit)) => Err(channel_limit_reached(&self.entry.user, limit)),
            (Err(_), None) => Ok(()),
        }
    }

    /// The reason an operator gave when asking this connection to close, once asked.
    pub fn close_requested(&self) -> Option<String> {
        self.entry.close_reason.lock().clone()
    }

    /// The registered connection's id.
    pub fn id(&self) -> u64 {
        self.entry.id
    }
}

impl Drop for ConnectionHandle {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            let removed = registry.entries.write().remove(&self.entry.id).is_some();
            if removed {
                registry.closed.fetch_add(1, Ordering::Relaxed);
                registry.uncount(&self.entry);
            }
        }
    }
}

impl std::fmt::Debug for ConnectionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionHandle")
            .field("id", &self.entry.id)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn info(id: u64) -> ConnectionInfo {
        let mut client_properties = Table::new();
        client_properties.insert("connection_name", Value::string("orders"));
        ConnectionInfo {
            id,
            protocol: "AMQP 0-9-1".into(),
            user: "guest".into(),
            vhost: "/".into(),
            peer: "127.0.0.1:50000".parse().unwrap(),
            local: "127.0.0.1:5672".parse().unwrap(),
            connection_name: ConnectionInfo::connection_name_from(&client_properties),
            client_properties,
            tls: false,
            frame_max: 131072,
            channel_max: 2047,
            heartbeat: 60,
            connected_at: 0,
        }
    }

    #[test]
    fn handle_unregisters_on_drop_and_counts_open_and_closed() {
        let registry = Arc::new(ConnectionRegistry::default());
        let first = registry.register(info(1), Box::new(|| {})).unwrap();
        let second = registry.register(info(2), Box::new(|| {})).unwrap();
        first.set_channels(3);
        second.set_channels(1);
        assert_eq!(registry.count(), 2);
        assert_eq!(registry.channel_count(), 4);
        let listed = registry.list();
        assert_eq!(listed[0].info.id, 1);
        assert_eq!(listed[0].channels, 3);
        assert_eq!(listed[0].info.connection_name.as_deref(), Some("orders"));
        assert_eq!(listed[0].info.name(), "127.0.0.1:50000 -> 127.0.0.1:5672");
        drop(first);
        assert_eq!(registry.count(), 1);
        assert_eq!(registry.opened_total(), 2);
        assert_eq!(registry.closed_total(), 1);
    }

    #[test]
    fn listing_rebuilds_what_was_registered_and_shares_repeated_names() {
        let registry = Arc::new(ConnectionRegistry::default());
        let amqp = info(1);
        let mut mqtt = info(2);
        mqtt.protocol = "MQTT 3.1.1".into();
        mqtt.client_properties = Table(vec![("client_id".into(), Value::string("sensor-1"))]);
        mqtt.connection_name = Some("sensor-1".into());
        let mut named_elsewhere = info(3);
        named_elsewhere.connection_name = Some("not a property".into());
        let mut unnamed = info(4);
        unnamed.client_properties = Table::new();
        unnamed.connection_name = None;
        let registered = [amqp, mqtt, named_elsewhere, unnamed];
        let _handles: Vec<ConnectionHandle> = registered
            .iter()
            .map(|info| registry.register(info.clone(), Box::new(|| {})).unwrap())
            .collect();
        let listed = registry.list();
        for (snapshot, info) in listed.iter().zip(&registered) {
            assert_eq!(format!("{:?}", snapshot.info), format!("{info:?}"));
        }
        let entries = registry.entries.read();
        assert!(Arc::ptr_eq(&entries[&1].user, &entries[&2].user));
        assert!(Arc::ptr_eq(&entries[&1].vhost, &entries[&4].vhost));
        assert!(matches!(
            entries[&2].connection_name,
            StoredConnectionName::Property(0)
        ));
    }

    #[test]
    fn close_request_wakes_the_listener_with_the_reason() {
        let registry = Arc::new(ConnectionRegistry::default());
        let woken = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&woken);
        let handle = registry
            .register(
                info(7),
                Box::new(move || flag.store(true, Ordering::SeqCst)),
            )
            .unwrap();
        assert_eq!(handle.close_requested(), None);
        assert!(registry.close(7, "maintenance"));
        assert!(woken.load(Ordering::SeqCst));
        assert_eq!(handle.close_requested().as_deref(), Some("maintenance"));
        assert!(!registry.close(8, "no such connection"));
    }

    #[test]
    fn connection_and_channel_limits_count_per_vhost_and_user_and_free_places_on_close() {
        use crate::resource_limits::{
            USER_LIMITS_PARAMETER, VHOST_LIMITS_COMPONENT, VHOST_LIMITS_NAME,
        };
        let limits = Arc::new(ResourceLimits::default());
        let registry = Arc::new(ConnectionRegistry::with_limits(Arc::clone(&limits)));
        limits.runtime_parameter_changed(
            "/",
            VHOST_LIMITS_COMPONENT,
            VHOST_LIMITS_NAME,
            Some(r#"{"max-connections": 2}"#),
        );
        limits.global_parameter_changed(
            USER_LIMITS_PARAMETER,
            Some(r#"{"guest": {"max-channels": 3}}"#),
        );
        let first = registry.register(info(1), Box::new(|| {})).unwrap();
        let second = registry.register(info(2), Box::new(|| {})).unwrap();
        let refused = registry.register(info(3), Box::new(|| {})).unwrap_err();
        assert_eq!(refused.kind, ConnectionLimitKind::Vhost);
        assert_eq!(refused.limit, 2);
        assert_eq!(registry.count_in_vhost("/"), 2);

        first.open_channel(0).unwrap();
        first.open_channel(1).unwrap();
        second.open_channel(0).unwrap();
        assert_eq!(registry.channels_of_user("guest"), 3);
        let error = second.open_channel(1).unwrap_err();
        assert_eq!(
            error.message,
            "number of channels opened for user 'guest' has reached the maximum allowed user limit of (3)"
        );
        // A channel closed (the listener records its count) frees a place for another
        // connection of the user.
        first.set_channels(1);
        assert_eq!(registry.channels_of_user("guest"), 2);
        second.open_channel(1).unwrap();
        assert_eq!(registry.channels_of_user("guest"), 3);
        // A connection that goes gives back its connection and its channels.
        drop(second);
        assert_eq!(registry.channels_of_user("guest"), 1);
        assert_eq!(registry.count_in_vhost("/"), 1);
        let _third = registry.register(info(3), Box::new(|| {})).unwrap();
        // Connections that never open channels (MQTT, STOMP) are not counted as channels.
        let mut mqtt = info(4);
        mqtt.vhost = "other".into();
        let mqtt = registry.register(mqtt, Box::new(|| {})).unwrap();
        mqtt.set_channels(1);
        assert_eq!(registry.channels_of_user("guest"), 1);
    }
}
