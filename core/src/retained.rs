//! Retained messages: the last message published with the retain flag on each topic, per
//! vhost, handed to new subscribers whose filter matches.
//!
//! MQTT is the only protocol that retains today, but the store knows no protocol: topics are
//! opaque strings and the listener passes its own filter matching in. [`RetainedStore`] is the
//! seam for the disk store: [`InMemoryRetained`] keeps everything in memory (lost on
//! restart); [`crate::retained_file::FileRetained`] adds a log file in `data_dir` so retained
//! messages survive a restart.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::message::Message;

/// One retained message.
#[derive(Debug, Clone)]
pub struct RetainedMessage {
    /// The topic it was published to, in the publishing protocol's form.
    pub topic: String,
    /// The message; its body is shared, never copied.
    pub message: Arc<Message>,
    /// The quality of service it was published with (MQTT 0, 1 or 2).
    pub qos: u8,
}

/// Where retained messages live. Implementations must be cheap to read concurrently:
/// every subscription reads, only retained publishes write.
pub trait RetainedStore: Send + Sync {
    /// Stores `retained` as the topic's retained message, replacing any previous one.
    fn retain(&self, vhost: &str, retained: RetainedMessage);

    /// Removes the topic's retained message (MQTT: a retained publish with an empty payload).
    fn clear(&self, vhost: &str, topic: &str);

    /// Appends to `out` the retained messages of `vhost` whose topic `matches` accepts.
    fn matching(&self, vhost: &str, matches: &dyn Fn(&str) -> bool, out: &mut Vec<RetainedMessage>);

    /// The retained message of one topic, if any (a subscription without wildcards).
    fn get(&self, vhost: &str, topic: &str) -> Option<RetainedMessage>;

    /// How many retained messages `vhost` holds.
    fn count(&self, vhost: &str) -> usize;

    /// The sequence number of the latest [`retain`](Self::retain) or
    /// [`clear`](Self::clear); once [`durable`](Self::durable) reaches it, that change is
    /// on disk. 0 for a store that keeps nothing on disk.
    fn last_change(&self) -> u64 {
        0
    }

    /// Follows the sequence number of the last change on disk; `None` for a store that keeps
    /// nothing on disk (nothing to wait for before acknowledging).
    fn durable(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }

    // The other MQTT state that must survive a restart lives here too, so it shares the
    // log and its durable sequence number: per persistent session (clean session 0), the QoS 2
    // packet identifiers in the middle of their four-packet exchange, both ways. A store that
    // keeps nothing on disk ignores them (the listener holds them in memory anyway).

    /// Inbound QoS 2: records that `client_id`'s persistent session routed QoS 2 `packet_id`
    /// (PUBREC to send) and waits for its PUBREL.
    fn qos2_received(&self, _vhost: &str, _client_id: &str, _packet_id: u16) {}

    /// Inbound QoS 2: records that the client released `packet_id` (PUBREL).
    fn qos2_released(&self, _vhost: &str, _client_id: &str, _packet_id: u16) {}

    /// Forgets every QoS 2 packet identifier of `client_id`, inbound and outbound, and its
    /// session records (its session was discarded).
    fn forget_session(&self, _vhost: &str, _client_id: &str) {}

    /// Inbound QoS 2: the packet identifiers `client_id` has not released, as recovered at
    /// boot and recorded since.
    fn qos2_pending(&self, _vhost: &str, _client_id: &str) -> Vec<u16> {
        Vec::new()
    }

    /// Outbound QoS 2: records that the client received delivery `packet_id` (its PUBREC
    /// arrived), so the broker owes it a PUBREL until PUBCOMP, across a restart too
    /// (MQTT-4.4.0-1).
    fn outbound_qos2_released(&self, _vhost: &str, _client_id: &str, _packet_id: u16) {}

    /// Outbound QoS 2: records that the client completed delivery `packet_id` (PUBCOMP).
    fn outbound_qos2_completed(&self, _vhost: &str, _client_id: &str, _packet_id: u16) {}

    /// Outbound QoS 2: the packet identifiers awaiting PUBCOMP from `client_id`, in PUBREC
    /// order, as recovered at boot and recorded since.
    fn outbound_qos2_pending(&self, _vhost: &str, _client_id: &str) -> Vec<u16> {
        Vec::new()
    }

    // Named records of a persistent session, opaque to the store, that must outlive the
    // process (MQTT 5: shared subscription memberships, delayed wills). They share the log
    // and go with [`forget_session`](Self::forget_session).

    /// Keeps `value` as `client_id`'s record `name`, replacing one of that name.
    fn session_put(&self, _vhost: &str, _client_id: &str, _name: &str, _value: &[u8]) {}

    /// Removes `client_id`'s record `name`, if any.
    fn session_remove(&self, _vhost: &str, _client_id: &str, _name: &str) {}

    /// Every session record, as recovered at boot and changed since.
    fn session_records(&self) -> Vec<SessionRecord> {
        Vec::new()
    }
}

/// One named record of a persistent session ([`RetainedStore::session_put`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The session's vhost.
    pub vhost: String,
    /// The session's client identifier.
    pub client_id: String,
    /// The record's name, unique per session.
    pub name: String,
    /// What the listener put, opaque to the store.
    pub value: Vec<u8>,
}

/// Retained messages in memory, one map per vhost.
#[derive(Default)]
pub struct InMemoryRetained {
    vhosts: RwLock<HashMap<String, HashMap<String, RetainedMessage>>>,
}

impl InMemoryRetained {
    /// An empty store.
    pub fn new() -> Arc<InMemoryRetained> {
        Arc::new(InMemoryRetained::default())
    }

    /// The vhosts that hold retained messages.
    pub fn vhost_names(&self) -> Vec<String> {
        self.vhosts.read().keys().cloned().collect()
    }
}

impl RetainedStore for InMemoryRetained {
    fn retain(&self, vhost: &str, retained: RetainedMessage) {
        let mut vhosts = self.vhosts.write();
        let topics = match vhosts.get_mut(vhost) {
            Some(topics) => topics,
            None => vhosts.entry(vhost.to_string()).or_default(),
        };
        topics.insert(retained.topic.clone(), retained);
    }

    fn clear(&self, vhost: &str, topic: &str) {
        let mut vhosts = self.vhosts.write();
        if let Some(topics) = vhosts.get_mut(vhost) {
            topics.remove(topic);
            if topics.is_empty() {
                vhosts.remove(vhost);
            }
        }
    }

    fn matching(
        &self,
        vhost: &str,
        matches: &dyn Fn(&str) -> bool,
        out: &mut Vec<RetainedMessage>,
    ) {
        let vhosts = self.vhosts.read();
        if let Some(topics) = vhosts.get(vhost) {
            out.extend(
                topics
                    .values()
                    .filter(|retained| matches(&retained.topic))
                    .cloned(),
            );
        }
    }

    fn get(&self, vhost: &str, topic: &str) -> Option<RetainedMessage> {
        self.vhosts.read().get(vhost)?.get(topic).cloned()
    }

    fn count(&self, vhost: &str) -> usize {
        self.vhosts.read().get(vhost).map_or(0, HashMap::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Properties;
    use bytes::Bytes;

    fn retained(topic: &str, body: &'static str) -> RetainedMessage {
        RetainedMessage {
            topic: topic.to_string(),
            message: Arc::new(Message {
                exchange: "amq.topic".into(),
                routing_key: topic.replace('/', ".").into(),
                properties: Properties::default(),
                encoded_properties: None,
                body: Bytes::from_static(body.as_bytes()),
            }),
            qos: 1,
        }
    }

    #[test]
    fn retained_messages_are_kept_per_vhost_replaced_and_cleared() {
        let store = InMemoryRetained::new();
        store.retain("/", retained("a/b", "one"));
        store.retain("/", retained("a/b", "two"));
        store.retain("/", retained("a/c", "three"));
        store.retain("other", retained("a/b", "elsewhere"));
        assert_eq!(store.count("/"), 2);
        assert_eq!(&store.get("/", "a/b").unwrap().message.body[..], b"two");
        assert_eq!(
            &store.get("other", "a/b").unwrap().message.body[..],
            b"elsewhere"
        );

        let mut out = Vec::new();
        store.matching("/", &|topic| topic.starts_with("a/"), &mut out);
        assert_eq!(out.len(), 2);

        store.clear("/", "a/b");
        assert!(store.get("/", "a/b").is_none());
        assert_eq!(store.count("/"), 1);
        store.clear("/", "a/c");
        assert_eq!(store.count("/"), 0);
        assert_eq!(store.count("other"), 1);
    }
}
