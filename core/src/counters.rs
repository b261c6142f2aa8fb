//! Lifetime message counters for metrics, kept per vhost with relaxed atomics so the publish
//! path takes no lock for them (RabbitMQ's `rabbitmq_global_messages_*` families).

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters one vhost keeps since it was created.
#[derive(Debug, Default)]
pub struct MessageCounters {
    received: AtomicU64,
    routed: AtomicU64,
    unroutable: AtomicU64,
    unroutable_returned: AtomicU64,
    confirmed: AtomicU64,
}

/// A snapshot of [`MessageCounters`] (or their sum over vhosts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MessageCounts {
    /// Messages published into an exchange.
    pub received: u64,
    /// Published messages that reached at least one queue.
    pub routed: u64,
    /// Published messages that reached no queue and were dropped.
    pub unroutable_dropped: u64,
    /// Published messages that reached no queue and were returned to a mandatory publisher.
    pub unroutable_returned: u64,
    /// Publishes confirmed to publishers.
    pub confirmed: u64,
}

impl MessageCounts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: MessageCounts) {
        self.received += other.received;
        self.routed += other.routed;
        self.unroutable_dropped += other.unroutable_dropped;
        self.unroutable_returned += other.unroutable_returned;
        self.confirmed += other.confirmed;
    }
}

impl MessageCounters {
    /// Records one published message and whether it reached a queue.
    pub fn record_publish(&self, routed: bool) {
        self.received.fetch_add(1, Ordering::Relaxed);
        if routed {
            self.routed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.unroutable.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records that an unroutable message was returned (mandatory) rather than dropped.
    pub fn record_returned(&self) {
        self.unroutable_returned.fetch_add(1, Ordering::Relaxed);
    }

    /// Records `count` publishes confirmed to a publisher.
    pub fn record_confirmed(&self, count: u64) {
        self.confirmed.fetch_add(count, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> MessageCounts {
        let unroutable = self.unroutable.load(Ordering::Relaxed);
        let returned = self.unroutable_returned.load(Ordering::Relaxed);
        MessageCounts {
            received: self.received.load(Ordering::Relaxed),
            routed: self.routed.load(Ordering::Relaxed),
            unroutable_dropped: unroutable.saturating_sub(returned),
            unroutable_returned: returned,
            confirmed: self.confirmed.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returned_messages_are_not_counted_as_dropped() {
        let counters = MessageCounters::default();
        counters.record_publish(true);
        counters.record_publish(false);
        counters.record_publish(false);
        counters.record_returned();
        counters.record_confirmed(3);
        assert_eq!(
            counters.snapshot(),
            MessageCounts {
                received: 3,
                routed: 1,
                unroutable_dropped: 1,
                unroutable_returned: 1,
                confirmed: 3,
            }
        );
    }
}

/// Lifetime queue counters summed over queues, kept when queues go away: a vhost folds a
/// deleted queue's counters into its retired totals, and the broker folds a deleted vhost's,
/// so node-wide totals never go backwards. Nothing is counted on the message path: the
/// queues' own counters are read when totals are asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueTotals {
    /// Messages enqueued.
    pub published: u64,
    /// Messages delivered (consume and get), redeliveries included.
    pub delivered: u64,
    /// Messages acknowledged.
    pub acknowledged: u64,
    /// Messages rejected without requeue and dropped.
    pub dropped: u64,
    /// Messages removed because their TTL passed.
    pub expired: u64,
    /// Messages dead-lettered after a rejection.
    pub dead_lettered_rejected: u64,
    /// Messages dead-lettered after their TTL passed.
    pub dead_lettered_expired: u64,
    /// Messages dead-lettered by a length limit.
    pub dead_lettered_maxlen: u64,
    /// Messages dead-lettered by the delivery limit.
    pub dead_lettered_delivery_limit: u64,
}

impl QueueTotals {
    /// Adds a queue's lifetime counters.
    pub fn add_queue(&mut self, stats: &crate::queue::QueueStats) {
        self.published += stats.published;
        self.delivered += stats.delivered;
        self.acknowledged += stats.acknowledged;
        self.dropped += stats.dropped;
        self.expired += stats.expired;
        self.dead_lettered_rejected += stats.dead_lettered_rejected;
        self.dead_lettered_expired += stats.dead_lettered_expired;
        self.dead_lettered_maxlen += stats.dead_lettered_maxlen;
        self.dead_lettered_delivery_limit += stats.dead_lettered_delivery_limit;
    }

    /// Adds other totals.
    pub fn add(&mut self, other: &QueueTotals) {
        self.published += other.published;
        self.delivered += other.delivered;
        self.acknowledged += other.acknowledged;
        self.dropped += other.dropped;
        self.expired += other.expired;
        self.dead_lettered_rejected += other.dead_lettered_rejected;
        self.dead_lettered_expired += other.dead_lettered_expired;
        self.dead_lettered_maxlen += other.dead_lettered_maxlen;
        self.dead_lettered_delivery_limit += other.dead_lettered_delivery_limit;
    }
}

/// Node-wide lifetime totals: publish counters and queue counters of every vhost, deleted
/// queues and vhosts included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeTotals {
    /// Publish-side counters.
    pub messages: MessageCounts,
    /// Queue-side counters.
    pub queues: QueueTotals,
}

impl NodeTotals {
    /// Adds other totals.
    pub fn add(&mut self, other: &NodeTotals) {
        self.messages.add(other.messages);
        self.queues.add(&other.queues);
    }
}
