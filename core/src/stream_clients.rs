//! The stream protocol's publishers and consumers as operators see them: the stream
//! listener registers each declared publisher and each subscription here, with live
//! counters (published, confirmed, errored; credits, consumed, offset, active), and the
//! management API lists them (`/api/stream/publishers`, `/api/stream/consumers`, per
//! connection) while the metrics endpoint reads the node's totals. RabbitMQ keeps the same
//! figures in its `rabbit_stream_publisher_created` / `rabbit_stream_consumer_created`
//! tables and `rabbit_global_counters` (protocol `stream`).
//!
//! A registration is a handle: dropping it (DeletePublisher, Unsubscribe, the connection
//! closing) removes the entry. Counters are atomics updated on the connection's task (and,
//! for confirms, the stream's writer thread); listings take one read lock per kind.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::RwLock;

/// What identifies a registration: the connection's id and the publisher or subscription
/// id within it.
type Key = (u64, u8);

/// Every stream protocol publisher and consumer of this node, and lifetime totals.
#[derive(Default)]
pub struct StreamClients {
    publishers: RwLock<HashMap<Key, Arc<PublisherEntry>>>,
    consumers: RwLock<HashMap<Key, Arc<ConsumerEntry>>>,
    totals: Arc<Totals>,
    /// Error responses sent, by [`STREAM_ERRORS`] entry.
    errors: [AtomicU64; STREAM_ERRORS.len()],
}

/// The stream protocol's error response codes RabbitMQ counts (`rabbit_stream_metrics.hrl`):
/// code, the counter's name (`rabbitmq_global_stream_error_<name>_total`) and its help.
pub const STREAM_ERRORS: [(u16, &str, &str); 17] = [
    (
        0x02,
        "stream_does_not_exist",
        "Total number of commands rejected with stream does not exist error",
    ),
    (
        0x03,
        "subscription_id_already_exists",
        "Total number of commands failed with subscription id already exists",
    ),
    (
        0x04,
        "subscription_id_does_not_exist",
        "Total number of commands failed with subscription id does not exist",
    ),
    (
        0x05,
        "stream_already_exists",
        "Total number of commands failed with stream already exists",
    ),
    (
        0x06,
        "stream_not_available",
        "Total number of commands failed with stream not available",
    ),
    (
        0x07,
        "sasl_mechanism_not_supported",
        "Total number of commands failed with sasl mechanism not supported",
    ),
    (
        0x08,
        "authentication_failure",
        "Total number of commands failed with authentication failure",
    ),
    (
        0x09,
        "sasl_error",
        "Total number of commands failed with sasl error",
    ),
    (
        0x0a,
        "sasl_challenge",
        "Total number of commands failed with sasl challenge",
    ),
    (
        0x0b,
        "sasl_authentication_failure_loopback",
        "Total number of commands failed with sasl authentication failure loopback",
    ),
    (
        0x0c,
        "vhost_access_failure",
        "Total number of commands failed with vhost access failure",
    ),
    (
        0x0d,
        "unknown_frame",
        "Total number of commands failed with unknown frame",
    ),
    (
        0x0e,
        "frame_too_large",
        "Total number of commands failed with frame too large",
    ),
    (
        0x0f,
        "internal_error",
        "Total number of commands failed with internal error",
    ),
    (
        0x10,
        "access_refused",
        "Total number of commands failed with access refused",
    ),
    (
        0x11,
        "precondition_failed",
        "Total number of commands failed with precondition failed",
    ),
    (
        0x12,
        "publisher_does_not_exist",
        "Total number of commands failed with publisher does not exist",
    ),
];

/// Lifetime totals of the stream protocol on this node.
#[derive(Default)]
struct Totals {
    received: AtomicU64,
    confirmed: AtomicU64,
    errored: AtomicU64,
    delivered: AtomicU64,
}

/// The node's stream protocol figures, for metrics (RabbitMQ's `rabbitmq_global_*` with
/// `protocol="stream"`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamTotals {
    /// Publishers declared now.
    pub publishers: u64,
    /// Subscriptions now.
    pub consumers: u64,
    /// Messages received from publishers (every publisher asks for confirms).
    pub received: u64,
    /// Messages confirmed to publishers.
    pub confirmed: u64,
    /// Messages answered with a PublishError.
    pub errored: u64,
    /// Messages delivered to subscriptions.
    pub delivered: u64,
}

/// A declared publisher, as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPublisherInfo {
    /// The connection's id (as in [`crate::connections::ConnectionInfo::id`]).
    pub connection: u64,
    /// The publisher id the client chose.
    pub publisher_id: u8,
    /// The stream's vhost.
    pub vhost: String,
    /// The stream published to.
    pub stream: String,
    /// The producer name given for deduplication, empty when none.
    pub reference: String,
}

/// A subscription, as registered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamConsumerInfo {
    /// The connection's id.
    pub connection: u64,
    /// The subscription id the client chose.
    pub subscription_id: u8,
    /// The stream's vhost.
    pub vhost: String,
    /// The stream read.
    pub stream: String,
    /// The Subscribe properties (`name`, `single-active-consumer`, `filter.N`, ...).
    pub properties: Vec<(String, String)>,
    /// Whether it subscribed as a single active consumer.
    pub single_active: bool,
}

struct PublisherEntry {
    info: StreamPublisherInfo,
    counters: Arc<PublisherCounters>,
}

struct ConsumerEntry {
    info: StreamConsumerInfo,
    credits: AtomicU64,
    consumed: AtomicU64,
    offset: AtomicU64,
    active: AtomicBool,
}

/// A publisher's counters, shared with the confirm callbacks of its writes.
pub struct PublisherCounters {
    published: AtomicU64,
    confirmed: AtomicU64,
    errored: AtomicU64,
    totals: Arc<Totals>,
}

impl PublisherCounters {
    /// `count` messages received from the client.
    pub fn published(&self, count: u64) {
        self.published.fetch_add(count, Ordering::Relaxed);
        self.totals.received.fetch_add(count, Ordering::Relaxed);
    }

    /// `count` messages confirmed to the client.
    pub fn confirmed(&self, count: u64) {
        self.confirmed.fetch_add(count, Ordering::Relaxed);
        self.totals.confirmed.fetch_add(count, Ordering::Relaxed);
    }

    /// `count` messages answered with a PublishError.
    pub fn errored(&self, count: u64) {
        self.errored.fetch_add(count, Ordering::Relaxed);
        self.totals.errored.fetch_add(count, Ordering::Relaxed);
    }
}

/// A publisher with its counters, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamPublisherSnapshot {
    /// What was registered.
    pub info: StreamPublisherInfo,
    /// Messages received.
    pub published: u64,
    /// Messages confirmed.
    pub confirmed: u64,
    /// Messages errored.
    pub errored: u64,
}

/// A subscription with its counters, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamConsumerSnapshot {
    /// What was registered.
    pub info: StreamConsumerInfo,
    /// Chunks the client will still take.
    pub credits: u64,
    /// Messages delivered.
    pub consumed: u64,
    /// The offset after the last record delivered (where it reads next).
    pub offset: u64,
    /// Whether it is sent chunks (false for a single active consumer that waits).
    pub active: bool,
}

impl StreamClients {
    /// Registers a declared publisher; keep the handle while it is declared.
    pub fn add_publisher(self: &Arc<Self>, info: StreamPublisherInfo) -> StreamPublisher {
        let key = (info.connection, info.publisher_id);
        let entry = Arc::new(PublisherEntry {
            info,
            counters: Arc::new(PublisherCounters {
                published: AtomicU64::new(0),
                confirmed: AtomicU64::new(0),
                errored: AtomicU64::new(0),
                totals: Arc::clone(&self.totals),
            }),
        });
        self.publishers.write().insert(key, Arc::clone(&entry));
        StreamPublisher {
            registry: Arc::downgrade(self),
            entry,
        }
    }

    /// Registers a subscription reading from `offset`; keep the handle while it lasts.
    pub fn add_consumer(
        self: &Arc<Self>,
        info: StreamConsumerInfo,
        credits: u64,
        offset: u64,
    ) -> StreamConsumer {
        let key = (info.connection, info.subscription_id);
        let active = !info.single_active;
        let entry = Arc::new(ConsumerEntry {
            info,
            credits: AtomicU64::new(credits),
            consumed: AtomicU64::new(0),
            offset: AtomicU64::new(offset),
            active: AtomicBool::new(active),
        });
        self.consumers.write().insert(key, Arc::clone(&entry));
        StreamConsumer {
            registry: Arc::downgrade(self),
            entry,
        }
    }

    /// Every publisher, ordered by connection and publisher id.
    pub fn publishers(&self) -> Vec<StreamPublisherSnapshot> {
        let mut list: Vec<StreamPublisherSnapshot> = self
            .publishers
            .read()
            .values()
            .map(|entry| StreamPublisherSnapshot {
                info: entry.info.clone(),
                published: entry.counters.published.load(Ordering::Relaxed),
                confirmed: entry.counters.confirmed.load(Ordering::Relaxed),
                errored: entry.counters.errored.load(Ordering::Relaxed),
            })
            .collect();
        list.sort_by_key(|p| (p.info.connection, p.info.publisher_id));
        list
    }

    /// Every subscription, ordered by connection and subscription id.
    pub fn consumers(&self) -> Vec<StreamConsumerSnapshot> {
        let mut list: Vec<StreamConsumerSnapshot> = self
            .consumers
            .read()
            .values()
            .map(|entry| StreamConsumerSnapshot {
                info: entry.info.clone(),
                credits: entry.credits.load(Ordering::Relaxed),
                consumed: entry.consumed.load(Ordering::Relaxed),
                offset: entry.offset.load(Ordering::Relaxed),
                active: entry.active.load(Ordering::Relaxed),
            })
            .collect();
        list.sort_by_key(|c| (c.info.connection, c.info.subscription_id));
        list
    }

    /// Counts a response sent with `code` when it is one of [`STREAM_ERRORS`].
    pub fn count_response(&self, code: u16) {
        if let Some(index) = STREAM_ERRORS.iter().position(|(c, _, _)| *c == code) {
            self.errors[index].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Each of [`STREAM_ERRORS`] with its count: name, help, responses sent.
    pub fn error_counts(&self) -> Vec<(&'static str, &'static str, u64)> {
        STREAM_ERRORS
            .iter()
            .zip(&self.errors)
            .map(|((_, name, help), count)| (*name, *help, count.load(Ordering::Relaxed)))
            .collect()
    }

    /// How many subscriptions read `stream` of `vhost` now.
    pub fn consumers_of(&self, vhost: &str, stream: &str) -> usize {
        self.consumers
            .read()
            .values()
            .filter(|entry| entry.info.vhost == vhost && entry.info.stream == stream)
            .count()
    }

    /// The node's figures now.
    pub fn totals(&self) -> StreamTotals {
        StreamTotals {
            publishers: self.publishers.read().len() as u64,
            consumers: self.consumers.read().len() as u64,
            received: self.totals.received.load(Ordering::Relaxed),
            confirmed: self.totals.confirmed.load(Ordering::Relaxed),
            errored: self.totals.errored.load(Ordering::Relaxed),
            delivered: self.totals.delivered.load(Ordering::Relaxed),
        }
    }
}

/// A registered publisher. Dropping it removes the registration.
pub struct StreamPublisher {
    registry: Weak<StreamClients>,
    entry: Arc<PublisherEntry>,
}

impl StreamPublisher {
    /// Its counters, to be moved into confirm callbacks.
    pub fn counters(&self) -> &Arc<PublisherCounters> {
        &self.entry.counters
    }
}

impl Drop for StreamPublisher {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            let key = (self.entry.info.connection, self.entry.info.publisher_id);
            let mut publishers = registry.publishers.write();
            // Only this registration's entry (an id may have been declared again).
            if publishers
                .get(&key)
                .is_some_and(|entry| Arc::ptr_eq(entry, &self.entry))
            {
                publishers.remove(&key);
            }
        }
    }
}

/// A registered subscription. Dropping it removes the registration.
pub struct StreamConsumer {
    registry: Weak<StreamClients>,
    entry: Arc<ConsumerEntry>,
}

impl StreamConsumer {
    /// The client's credit now.
    pub fn set_credits(&self, credits: u64) {
        self.entry.credits.store(credits, Ordering::Relaxed);
    }

    /// A chunk of `records` messages was sent; the consumer reads from `next_offset` on.
    pub fn delivered(&self, records: u64, next_offset: u64) {
        self.entry.consumed.fetch_add(records, Ordering::Relaxed);
        self.entry.offset.store(next_offset, Ordering::Relaxed);
        if let Some(registry) = self.registry.upgrade() {
            registry
                .totals
                .delivered
                .fetch_add(records, Ordering::Relaxed);
        }
    }

    /// The consumer reads from `offset` on (a single active consumer resuming).
    pub fn moved_to(&self, offset: u64) {
        self.entry.offset.store(offset, Ordering::Relaxed);
    }

    /// Whether it is sent chunks.
    pub fn set_active(&self, active: bool) {
        self.entry.active.store(active, Ordering::Relaxed);
    }
}

impl Drop for StreamConsumer {
    fn drop(&mut self) {
        if let Some(registry) = self.registry.upgrade() {
            let key = (self.entry.info.connection, self.entry.info.subscription_id);
            let mut consumers = registry.consumers.write();
            if consumers
                .get(&key)
                .is_some_and(|entry| Arc::ptr_eq(entry, &self.entry))
            {
                consumers.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registrations_are_listed_with_their_counters_until_dropped() {
        let clients = Arc::new(StreamClients::default());
        let publisher = clients.add_publisher(StreamPublisherInfo {
            connection: 7,
            publisher_id: 1,
            vhost: "/".into(),
            stream: "s".into(),
            reference: "app".into(),
        });
        publisher.counters().published(3);
        publisher.counters().confirmed(2);
        publisher.counters().errored(1);
        let consumer = clients.add_consumer(
            StreamConsumerInfo {
                connection: 7,
                subscription_id: 0,
                vhost: "/".into(),
                stream: "s".into(),
                properties: vec![],
                single_active: false,
            },
            10,
            0,
        );
        consumer.delivered(4, 4);
        consumer.set_credits(9);
        let listed = &clients.publishers()[0];
        assert_eq!(
            (listed.published, listed.confirmed, listed.errored),
            (3, 2, 1)
        );
        assert_eq!(clients.consumers_of("/", "s"), 1);
        assert_eq!(clients.consumers_of("/", "t"), 0);
        let listed = &clients.consumers()[0];
        assert_eq!(
            (
                listed.credits,
                listed.consumed,
                listed.offset,
                listed.active
            ),
            (9, 4, 4, true)
        );
        assert_eq!(
            clients.totals(),
            StreamTotals {
                publishers: 1,
                consumers: 1,
                received: 3,
                confirmed: 2,
                errored: 1,
                delivered: 4
            }
        );
        clients.count_response(0x01);
        clients.count_response(0x02);
        clients.count_response(0x13);
        let errors = clients.error_counts();
        assert_eq!(errors.len(), 17);
        assert_eq!(errors[0], ("stream_does_not_exist", STREAM_ERRORS[0].2, 1));
        assert_eq!(errors.iter().map(|e| e.2).sum::<u64>(), 1);
        drop(publisher);
        drop(consumer);
        assert!(clients.publishers().is_empty() && clients.consumers().is_empty());
        // Lifetime totals stay.
        assert_eq!(clients.totals().confirmed, 2);
    }
}
