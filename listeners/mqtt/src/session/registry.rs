//! Which connection holds each client identifier, and the state of persistent sessions
//! between connections. Shared by every MQTT listener of a broker.
//!
//! A client identifier is unique per vhost (as in RabbitMQ): a second CONNECT with the same
//! one takes over, and the first connection is closed (MQTT-3.1.4-2). The new connection
//! waits for the old one to finish (its in-flight deliveries requeued, its session stored)
//! before it resumes the session.
//!
//! Subscription queues and their bindings live in the core (durable for persistent
//! sessions, so they survive a restart); what is kept here between connections is the
//! subscription list with granted QoS and the QoS 2 packet identifiers in mid-exchange. After
//! a restart the subscriptions are rebuilt from the bindings and the QoS 2 identifiers come
//! from the retained store's log, where a persistent session records them: inbound ones
//! (`RetainedStore::qos2_pending`) before its PUBREC, outbound ones awaiting PUBCOMP
//! (`RetainedStore::outbound_qos2_pending`) before its PUBREL, so the PUBREL is sent again.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::codec::QoS;
use crate::outbox::Outbox;

/// A client identifier in a vhost.
pub type ClientKey = (String, String);

/// What a persistent session keeps between connections.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredSession {
    /// Topic filters with the QoS granted for each.
    pub subscriptions: Vec<(String, QoS)>,
    /// QoS 2 packet identifiers received and routed but not yet released by PUBREL: a
    /// re-sent PUBLISH with one of these is not routed again.
    pub inbound_qos2: Vec<u16>,
    /// Outbound QoS 2 packet identifiers released (PUBREL sent) but not completed: PUBREL
    /// is sent again on reconnect.
    pub outbound_released: Vec<u16>,
    /// MQTT 5 shared subscriptions (`$share/GROUP/filter`) with their granted QoS: the
    /// session stays a member of each group while it is away, and consumes the group's
    /// queue again when it resumes.
    pub shared: Vec<(String, QoS)>,
    /// The connection that stored it: a session expiry timer started when that connection
    /// ended only ends this session, not one stored by a later connection.
    pub stored_by: u64,
    /// Recovered at boot from the retained store's log (only its shared subscriptions):
    /// the rest of the session is rebuilt from its queues' bindings and the log's QoS 2
    /// records, as after a restart without one.
    pub recovered: bool,
}

/// Wakes connections waiting for a session they take over to end. One for the process: a
/// takeover is rare, and a waiter woken for another session's end looks at its own flag and
/// waits again. Each session's end is a flag on its outbox, so no connection allocates a
/// signal of its own.
static SESSION_ENDED: Notify = Notify::const_new();

/// Held by a session while it holds a client identifier; dropping it tells a connection
/// taking over that the session has ended.
pub struct EndSender(Arc<Outbox>);

impl EndSender {
    /// The end signal of the session whose outbox this is.
    pub fn new(outbox: Arc<Outbox>) -> EndSender {
        EndSender(outbox)
    }
}

impl Drop for EndSender {
    fn drop(&mut self) {
        self.0.mark_ended();
        SESSION_ENDED.notify_waiters();
    }
}

struct Holder {
    connection_id: u64,
    outbox: Arc<Outbox>,
}

/// A connection to close before the new one resumes the session: one of this node, or
/// (on a cluster) whichever other node holds the client identifier.
pub struct Takeover {
    old: Old,
    /// Whether the old connection publishes its will (see [`Takeover::send_will`]).
    send_will: bool,
}

enum Old {
    /// A connection of this node, by its outbox.
    Here(Arc<Outbox>),
    /// The other nodes were asked to close theirs; resolves once they answered.
    Elsewhere(Pin<Box<dyn Future<Output = ()> + Send>>),
}

impl Takeover {
    /// The takeover of the connections other nodes hold with the client identifier, which
    /// `asked` asks them to close.
    pub fn elsewhere(asked: impl Future<Output = ()> + Send + 'static) -> Takeover {
        Takeover {
            old: Old::Elsewhere(Box::pin(asked)),
            send_will: true,
        }
    }

    /// The takeover of this node's connection with `outbox`.
    pub(super) fn here(outbox: Arc<Outbox>) -> Takeover {
        Takeover {
            old: Old::Here(outbox),
            send_will: true,
        }
    }

    /// Whether the old connection publishes its will, as RabbitMQ decides it: yes, unless
    /// the new connection resumes the session (clean start 0) and has a will delay of its
    /// own (MQTT 5, 3.1.3.2.2 as RabbitMQ reads it).
    pub fn send_will(mut self, send_will: bool) -> Takeover {
        self.send_will = send_will;
        self
    }

    /// Whether the old connection is on another node.
    pub fn is_elsewhere(&self) -> bool {
        matches!(self.old, Old::Elsewhere(_))
    }

    /// Asks the old connection to close (the other nodes are asked by the future itself).
    pub fn kick(&self) {
        if let Old::Here(outbox) = &self.old {
            outbox.signal(if self.send_will {
                crate::outbox::Signal::Kick
            } else {
                crate::outbox::Signal::KickWithoutWill
            });
        }
    }

    /// Waits until the old connection has finished (its session's [`EndSender`] dropped).
    pub async fn ended(self) {
        let outbox = match self.old {
            Old::Here(outbox) => outbox,
            Old::Elsewhere(asked) => return asked.await,
        };
        loop {
            let notified = SESSION_ENDED.notified();
            tokio::pin!(notified);
            // Registered before the flag is read, so an end in between is not missed.
            notified.as_mut().enable();
            if outbox.has_ended() {
                return;
            }
            notified.await;
        }
    }
}

/// A shared subscription group's queue in a vhost: `(vhost, queue name)`.
pub type GroupKey = (String, String);

#[derive(Default)]
struct RegistryState {
    holders: HashMap<ClientKey, Holder>,
    sessions: HashMap<ClientKey, StoredSession>,
    /// The sessions, connected or stored, that are members of each shared subscription
    /// group (by client identifier): the group's queue lives as long as one is.
    groups: HashMap<GroupKey, Vec<String>>,
    /// Delayed wills waiting for their delay, by the connection that scheduled them.
    wills: HashMap<ClientKey, u64>,
}

/// Client identifiers in use and stored persistent sessions.
#[derive(Default)]
pub struct ClientRegistry {
    state: Mutex<RegistryState>,
}

impl ClientRegistry {
    /// An empty registry.
    pub fn new() -> Arc<ClientRegistry> {
        Arc::new(ClientRegistry::default())
    }

    /// Records that `connection_id` holds `key`; returns the connection that held it
    /// before, to take over.
    pub fn claim(
        &self,
        key: ClientKey,
        connection_id: u64,
        outbox: Arc<Outbox>,
    ) -> Option<Takeover> {
        let previous = self.state.lock().holders.insert(
            key,
            Holder {
                connection_id,
                outbox,
            },
        );
        previous.map(|holder| Takeover::here(holder.outbox))
    }

    /// Forgets that `connection_id` holds `key` (unless another connection took it over).
    pub fn release(&self, key: &ClientKey, connection_id: u64) {
        let mut state = self.state.lock();
        if state
            .holders
            .get(key)
            .is_some_and(|holder| holder.connection_id == connection_id)
        {
            state.holders.remove(key);
        }
    }

    /// Keeps a persistent session's state until the client reconnects.
    pub fn store_session(&self, key: ClientKey, session: StoredSession) {
        self.state.lock().sessions.insert(key, session);
    }

    /// Takes a stored session's state (on reconnect, or to discard it for a clean session).
    pub fn take_session(&self, key: &ClientKey) -> Option<StoredSession> {
        self.state.lock().sessions.remove(key)
    }

    /// Whether `connection_id` holds `key` now.
    pub fn is_held_by(&self, key: &ClientKey, connection_id: u64) -> bool {
        self.state
            .lock()
            .holders
            .get(key)
            .is_some_and(|holder| holder.connection_id == connection_id)
    }

    /// Whether a connection holds `key` now.
    pub fn is_held(&self, key: &ClientKey) -> bool {
        self.state.lock().holders.contains_key(key)
    }

    /// The takeover of this node's connection holding `key`, if one does.
    pub fn holder(&self, key: &ClientKey) -> Option<Takeover> {
        self.state
            .lock()
            .holders
            .get(key)
            .map(|holder| Takeover::here(Arc::clone(&holder.outbox)))
    }

    /// Records that the session of `client_id` is a member of `group`.
    pub fn join_group(&self, group: GroupKey, client_id: &str) {
        let mut state = self.state.lock();
        let members = state.groups.entry(group).or_default();
        if !members.iter().any(|member| member == client_id) {
            members.push(client_id.to_string());
        }
    }

    /// Records that the session of `client_id` left `group`; whether the group has no
    /// member left (its queue is then deleted).
    pub fn leave_group(&self, group: &GroupKey, client_id: &str) -> bool {
        let mut state = self.state.lock();
        let Some(members) = state.groups.get_mut(group) else {
            return true;
        };
        members.retain(|member| member != client_id);
        let empty = members.is_empty();
        if empty {
            state.groups.remove(group);
        }
        empty
    }

    /// The members of `group` (connected or stored sessions).
    pub fn group_members(&self, group: &GroupKey) -> Vec<String> {
        self.state
            .lock()
            .groups
            .get(group)
            .cloned()
            .unwrap_or_default()
    }

    /// Removes the session stored under `key` by connection `stored_by`, when it is still
    /// stored and its client is not connected: its session expiry interval has passed.
    pub fn expire_session(&self, key: &ClientKey, stored_by: u64) -> Option<StoredSession> {
        let mut state = self.state.lock();
        if state.holders.contains_key(key) {
            return None;
        }
        match state.sessions.get(key) {
            Some(session) if session.stored_by == stored_by => state.sessions.remove(key),
            _ => None,
        }
    }

    /// Records that `scheduled_by` waits to publish `key`'s delayed will (replacing one
    /// scheduled before).
    pub fn schedule_will(&self, key: ClientKey, scheduled_by: u64) {
        self.state.lock().wills.insert(key, scheduled_by);
    }

    /// Whether the delayed will `scheduled_by` waits with is still due (not cancelled by
    /// the client's return, not replaced); it is no longer pending afterwards.
    pub fn take_will(&self, key: &ClientKey, scheduled_by: u64) -> bool {
        let mut state = self.state.lock();
        if state.wills.get(key) == Some(&scheduled_by) {
            state.wills.remove(key);
            true
        } else {
            false
        }
    }

    /// Cancels `key`'s delayed will (the client is back); whether one was pending.
    pub fn cancel_will(&self, key: &ClientKey) -> bool {
        self.state.lock().wills.remove(key).is_some()
    }

    /// How many client identifiers are connected.
    pub fn connected(&self) -> usize {
        self.state.lock().holders.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn end_signal_wakes_a_waiter_and_a_late_one() {
        let outbox = Outbox::new(10);
        let sender = EndSender::new(Arc::clone(&outbox));
        let takeover = Takeover::here(outbox);
        let waiter = tokio::spawn(takeover.ended());
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(sender);
        waiter.await.expect("waiter ended");

        let outbox = Outbox::new(10);
        drop(EndSender::new(Arc::clone(&outbox)));
        Takeover::here(outbox).ended().await;
    }

    #[test]
    fn a_group_lives_while_a_member_does_and_expiry_spares_a_returned_or_later_session() {
        let registry = ClientRegistry::new();
        let group: GroupKey = ("/".into(), "mqtt-shared-g-jobs/#".into());
        registry.join_group(group.clone(), "a");
        registry.join_group(group.clone(), "b");
        registry.join_group(group.clone(), "a");
        assert_eq!(registry.group_members(&group), vec!["a", "b"]);
        assert!(!registry.leave_group(&group, "a"));
        assert!(registry.leave_group(&group, "b"));
        assert!(registry.group_members(&group).is_empty());

        let key: ClientKey = ("/".into(), "a".into());
        let stored = |stored_by| StoredSession {
            shared: vec![("$share/g/jobs/#".into(), QoS::AtLeastOnce)],
            stored_by,
            ..StoredSession::default()
        };
        registry.store_session(key.clone(), stored(7));
        // A timer of an earlier connection finds a later session: nothing expires.
        assert!(registry.expire_session(&key, 6).is_none());
        // The client is back: nothing expires either.
        registry.claim(key.clone(), 8, Outbox::new(10));
        assert!(registry.expire_session(&key, 7).is_none());
        registry.release(&key, 8);
        let expired = registry.expire_session(&key, 7).expect("expired");
        assert_eq!(expired.shared.len(), 1);
        assert!(registry.take_session(&key).is_none());
    }

    #[tokio::test]
    async fn another_session_ending_does_not_end_the_wait() {
        let outbox = Outbox::new(10);
        let _sender = EndSender::new(Arc::clone(&outbox));
        let waiter = tokio::spawn(Takeover::here(outbox).ended());
        tokio::task::yield_now().await;
        drop(EndSender::new(Outbox::new(10)));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        waiter.abort();
    }
}
