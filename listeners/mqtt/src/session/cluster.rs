//! Client identifiers across the nodes of a cluster (docs/clustering.md, "Any node"): a
//! client identifier is held by one connection in the whole cluster, as RabbitMQ holds it.
//!
//! A CONNECT on a node where no connection holds the identifier asks every other running
//! node to close its connection holding it ([`takeover_elsewhere`], over the core's
//! forwarding link). The node that holds it ([`RegistryTakeover`]) kicks that connection
//! (MQTT 5: DISCONNECT 0x8E; 3.1.1: the socket closes), waits for its session to end (a
//! clean session's queues are dropped cluster-wide, a persistent one is stored), and
//! answers with the persistent session it kept for the client, which it gives up: the new
//! connection resumes it (subscriptions, QoS 2 packet identifiers) as if the client had
//! come back to the same node; the new node writes the QoS 2 identifiers to its own
//! retained store log, so they survive its restart. The session's queues stay on their home node and are
//! consumed through their stand-ins; its shared subscription group memberships move with it
//! (the old node stops counting them). The will follows RabbitMQ's rule
//! ([`super::registry::Takeover::send_will`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use warren_core::remote::{ClientTakeover, SessionFuture, REMOTE_OWNER};
use warren_core::retained::RetainedStore;
use warren_core::vhost::VHost;

use super::registry::{ClientKey, ClientRegistry, StoredSession, Takeover};
use super::{queue_name, MqttContext};
use crate::codec::QoS;

/// How often a connection that took over a client identifier looks whether the old
/// connection's exclusive queues are gone from this node's copy of the metadata.
const SETTLE_POLL: Duration = Duration::from_millis(10);

/// Closes this node's connection holding a client identifier when a connection on another
/// node takes it over, and hands over the persistent session stored here (installed on the
/// broker as its [`ClientTakeover`]).
pub struct RegistryTakeover {
    /// The node's client identifiers and stored sessions.
    pub registry: Arc<ClientRegistry>,
    /// The node's retained messages and QoS 2 session records.
    pub retained: Arc<dyn RetainedStore>,
    /// How long to wait for the old connection to finish.
    pub timeout: Duration,
}

impl ClientTakeover for RegistryTakeover {
    fn take_over(&self, vhost: &str, client_id: &str, send_will: bool) -> SessionFuture {
        let key: ClientKey = (vhost.to_string(), client_id.to_string());
        let holder = self.registry.holder(&key);
        let registry = Arc::clone(&self.registry);
        let retained = Arc::clone(&self.retained);
        let timeout = self.timeout;
        Box::pin(async move {
            if let Some(takeover) = holder {
                tracing::info!(
                    client_id = %key.1,
                    send_will,
                    "MQTT client identifier connected on another node: closing this node's connection"
                );
                let takeover = takeover.send_will(send_will);
                takeover.kick();
                if tokio::time::timeout(timeout, takeover.ended())
                    .await
                    .is_err()
                {
                    tracing::warn!(client_id = %key.1, "the connection taken over from another node did not finish in time");
                }
            }
            // The session is the other node's from now on: nothing of it stays here to be
            // resumed (stale) or expired (its queues are in use) later.
            let session = registry.take_session(&key)?;
            // Its shared subscription memberships move with it: the new node counts them
            // when the session resumes there. The groups' queues stay (the session is
            // still a member), and the memberships' records go with the forgotten session.
            for (filter, _) in &session.shared {
                if let Some(Ok((group, inner))) = super::shared::parse_shared(filter) {
                    let group = (
                        key.0.clone(),
                        super::shared::shared_queue_name(group, inner),
                    );
                    registry.leave_group(&group, &key.1);
                }
            }
            retained.forget_session(&key.0, &key.1);
            Some(encode_session(&session))
        })
    }
}

/// On a cluster, the takeover of the client identifier from whichever other node holds it
/// (`None` on a single node). Once the other nodes answered, the persistent session one of
/// them handed over is stored here for [`super::Session::resume_connect`], and the wait
/// goes on until the old connection's exclusive queues are gone from this node's metadata
/// too, so the new session never resumes a queue that is being dropped.
pub(super) fn takeover_elsewhere(
    context: &Arc<MqttContext>,
    vhost: &Arc<VHost>,
    client_id: &str,
    send_will: bool,
) -> Option<Takeover> {
    let forwarding = context.broker.forwarding()?;
    if !forwarding.has_peers() {
        return None;
    }
    let asked = Arc::clone(forwarding).take_over_elsewhere(
        vhost.name().to_string(),
        client_id.to_string(),
        send_will,
    );
    let context = Arc::clone(context);
    let vhost = Arc::clone(vhost);
    let client_id = client_id.to_string();
    Some(Takeover::elsewhere(async move {
        let started = Instant::now();
        let session = asked.await;
        let key = (vhost.name().to_string(), client_id.clone());
        if let Some(session) = session.as_deref().and_then(decode_session) {
            tracing::debug!(client_id = %client_id, "MQTT session handed over by another node");
            record_qos2_state(&*context.retained, &key, &session);
            context.registry.store_session(key, session);
        }
        while holds_remote_exclusive_queue(&vhost, &client_id)
            && started.elapsed() < warren_core::remote::TAKEOVER_TIMEOUT
        {
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }))
}

/// Writes the QoS 2 state of a session handed over by another node (which forgot it) to
/// this node's retained store log, as this node's own persistent sessions keep it: the
/// packet identifiers received and awaiting PUBREL, and the outbound ones released and
/// awaiting PUBCOMP. A restart of this node then still knows them. (A clean start that
/// discards the session forgets them again.)
fn record_qos2_state(retained: &dyn RetainedStore, key: &ClientKey, session: &StoredSession) {
    let (vhost, client_id) = (key.0.as_str(), key.1.as_str());
    for packet_id in &session.inbound_qos2 {
        retained.qos2_received(vhost, client_id, *packet_id);
    }
    for packet_id in &session.outbound_released {
        retained.outbound_qos2_released(vhost, client_id, *packet_id);
    }
}

/// Whether this node still has a stand-in for an exclusive subscription queue of
/// `client_id` (a clean session's, owned by a connection of another node).
fn holds_remote_exclusive_queue(vhost: &VHost, client_id: &str) -> bool {
    [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce]
        .into_iter()
        .filter_map(|qos| vhost.queue_instance(&queue_name(client_id, qos)))
        .any(|queue| queue.exclusive_owner() == Some(REMOTE_OWNER))
}

/// The format version of an encoded session.
const SESSION_FORMAT: u8 = 1;

/// Encodes a stored session for another node: little-endian counts, length-prefixed
/// filters with their QoS, packet identifiers.
pub fn encode_session(session: &StoredSession) -> Vec<u8> {
    let mut out = vec![SESSION_FORMAT];
    for filters in [&session.subscriptions, &session.shared] {
        out.extend_from_slice(&(filters.len() as u32).to_le_bytes());
        for (filter, qos) in filters {
            out.extend_from_slice(&(filter.len() as u32).to_le_bytes());
            out.extend_from_slice(filter.as_bytes());
            out.push(qos.as_u8());
        }
    }
    for ids in [&session.inbound_qos2, &session.outbound_released] {
        out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        for id in ids {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    out
}

/// Decodes what [`encode_session`] made; `None` for anything else.
pub fn decode_session(bytes: &[u8]) -> Option<StoredSession> {
    let mut input = Input(bytes);
    if input.take(1)? != [SESSION_FORMAT] {
        return None;
    }
    let subscriptions = input.filters()?;
    let shared = input.filters()?;
    let inbound_qos2 = input.ids()?;
    let outbound_released = input.ids()?;
    input.0.is_empty().then_some(StoredSession {
        subscriptions,
        inbound_qos2,
        outbound_released,
        shared,
        // Not a connection of this node: no expiry timer here ends it.
        stored_by: u64::MAX,
        recovered: false,
    })
}

/// The rest of an encoded session.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u32(&mut self) -> Option<usize> {
        let bytes = self.take(4)?;
        Some(u32::from_le_bytes(bytes.try_into().ok()?) as usize)
    }

    /// A count of items of at least `size` bytes each, checked against what is left.
    fn count(&mut self, size: usize) -> Option<usize> {
        let count = self.u32()?;
        (count.checked_mul(size)? <= self.0.len()).then_some(count)
    }

    fn filters(&mut self) -> Option<Vec<(String, QoS)>> {
        let count = self.count(5)?;
        let mut filters = Vec::with_capacity(count);
        for _ in 0..count {
            let len = self.u32()?;
            let filter = std::str::from_utf8(self.take(len)?).ok()?.to_string();
            let qos = QoS::from_u8(*self.take(1)?.first()?)?;
            filters.push((filter, qos));
        }
        Some(filters)
    }

    fn ids(&mut self) -> Option<Vec<u16>> {
        let count = self.count(2)?;
        (0..count)
            .map(|_| Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_survives_its_encoding_and_damage_is_refused() {
        let session = StoredSession {
            subscriptions: vec![
                ("a/+".to_string(), QoS::AtLeastOnce),
                ("b/#".to_string(), QoS::ExactlyOnce),
            ],
            inbound_qos2: vec![7, 9],
            outbound_released: vec![3],
            shared: vec![("$share/g/c".to_string(), QoS::AtMostOnce)],
            stored_by: u64::MAX,
            recovered: false,
        };
        let bytes = encode_session(&session);
        assert_eq!(decode_session(&bytes), Some(session));
        for cut in 0..bytes.len() {
            assert_eq!(decode_session(&bytes[..cut]), None, "cut at {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode_session(&longer), None);
        // A count far beyond the bytes that follow is refused before any allocation.
        assert_eq!(decode_session(&[1, 255, 255, 255, 255]), None);
    }
}
