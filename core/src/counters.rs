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
