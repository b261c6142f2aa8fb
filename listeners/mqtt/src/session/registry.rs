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
use std::sync::atomic::{AtomicBool, Ordering};
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
}

/// Tells a connection taking over a client identifier that the old session has ended.
/// Much smaller than a `watch` channel, and every connected client holds one.
#[derive(Default)]
struct EndSignal {
    ended: AtomicBool,
    notify: Notify,
}

/// Held by a session while it runs; dropping it signals the end.
pub struct EndSender(Arc<EndSignal>);

/// Waits for the [`EndSender`] to be dropped.
pub struct EndReceiver(Arc<EndSignal>);

/// A new end signal.
pub fn end_signal() -> (EndSender, EndReceiver) {
    let signal = Arc::new(EndSignal::default());
    (EndSender(Arc::clone(&signal)), EndReceiver(signal))
}

impl Drop for EndSender {
    fn drop(&mut self) {
        self.0.ended.store(true, Ordering::Release);
        self.0.notify.notify_waiters();
    }
}

impl EndReceiver {
    /// Returns once the sender was dropped.
    pub async fn ended(&self) {
        loop {
            let notified = self.0.notify.notified();
            tokio::pin!(notified);
            // Registered before the flag is read, so a drop in between is not missed.
            notified.as_mut().enable();
            if self.0.ended.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

struct Holder {
    connection_id: u64,
    outbox: Arc<Outbox>,
    ended: EndReceiver,
}

/// A connection to close before the new one resumes the session.
pub struct Takeover {
    outbox: Arc<Outbox>,
    ended: EndReceiver,
}

impl Takeover {
    /// Asks the old connection to close.
    pub fn kick(&self) {
        self.outbox.signal(crate::outbox::Signal::Kick);
    }

    /// Waits until the old connection has finished (its session's end signal dropped).
    pub async fn ended(self) {
        self.ended.ended().await;
    }
}

#[derive(Default)]
struct RegistryState {
    holders: HashMap<ClientKey, Holder>,
    sessions: HashMap<ClientKey, StoredSession>,
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
        ended: EndReceiver,
    ) -> Option<Takeover> {
        let previous = self.state.lock().holders.insert(
            key,
            Holder {
                connection_id,
                outbox,
                ended,
            },
        );
        previous.map(|holder| Takeover {
            outbox: holder.outbox,
            ended: holder.ended,
        })
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
        let (sender, receiver) = end_signal();
        let waiter = tokio::spawn(async move { receiver.ended().await });
        tokio::task::yield_now().await;
        drop(sender);
        waiter.await.expect("waiter ended");

        let (sender, receiver) = end_signal();
        drop(sender);
        receiver.ended().await;
    }
}
