//! The registry of client connections of every protocol, for operators: the management API
//! lists them, counts them for metrics and asks them to close.
//!
//! A listener registers a connection once it is authenticated and has a vhost
//! ([`Broker::register_connection`](crate::Broker::register_connection)) and keeps the returned
//! [`ConnectionHandle`] for the connection's lifetime: dropping it unregisters. The registry is
//! never touched on the message path; a channel count is one relaxed store.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, RwLock};

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
    close_reason: Mutex<Option<String>>,
    waker: CloseWaker,
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
    fn new(info: ConnectionInfo, names: &NameInterner, waker: CloseWaker) -> Entry {
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
            close_reason: Mutex::new(None),
            waker,
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
}

/// Every registered connection, and lifetime counters for metrics.
#[derive(Default)]
pub struct ConnectionRegistry {
    entries: RwLock<HashMap<u64, Arc<Entry>>>,
    names: NameInterner,
    opened: AtomicU64,
    closed: AtomicU64,
}

impl ConnectionRegistry {
    pub(crate) fn register(
        self: &Arc<Self>,
        info: ConnectionInfo,
        waker: CloseWaker,
    ) -> ConnectionHandle {
        let id = info.id;
        let entry = Arc::new(Entry::new(info, &self.names, waker));
        self.entries.write().insert(id, Arc::clone(&entry));
        self.opened.fetch_add(1, Ordering::Relaxed);
        ConnectionHandle {
            registry: Arc::downgrade(self),
            entry,
        }
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
    /// Records how many channels (sessions) the connection has open.
    pub fn set_channels(&self, channels: u32) {
        self.entry.channels.store(channels, Ordering::Relaxed);
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
            if registry.entries.write().remove(&self.entry.id).is_some() {
                registry.closed.fetch_add(1, Ordering::Relaxed);
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
        let first = registry.register(info(1), Box::new(|| {}));
        let second = registry.register(info(2), Box::new(|| {}));
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
            .map(|info| registry.register(info.clone(), Box::new(|| {})))
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
        let handle = registry.register(
            info(7),
            Box::new(move || flag.store(true, Ordering::SeqCst)),
        );
        assert_eq!(handle.close_requested(), None);
        assert!(registry.close(7, "maintenance"));
        assert!(woken.load(Ordering::SeqCst));
        assert_eq!(handle.close_requested().as_deref(), Some("maintenance"));
        assert!(!registry.close(8, "no such connection"));
    }
}
