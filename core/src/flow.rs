//! Publisher flow control: a publisher faster than its queues (or the disk) can absorb stops
//! being read, so its TCP window fills instead of the broker's memory growing.
//!
//! Two signals hold a publishing connection back. Neither is a resource alarm: clients get no
//! `connection.blocked`, as with RabbitMQ's internal credit flow.
//!
//! - **A congested queue.** Each queue counts the ready messages and body bytes it holds in
//!   memory. Persistent messages of a durable queue beyond [`QueueMemoryLimits`] are paged to
//!   disk (docs/storage.md); anything else (transient messages, non-durable queues) has to
//!   stay in memory, so once a queue is over either limit it raises its [`QueueFlow`], and
//!   lowers it when it has drained to half of both. Only connections that published to that
//!   queue wait: other publishers, to other queues, are not slowed.
//! - **The message store's writer is behind** (`MessageStore::subscribe_flow`): every
//!   publishing connection waits.
//!
//! How a connection learns that a queue it published to is congested without every protocol
//! session passing it up: `Queue::enqueue` notes a congested queue in a per-thread list, and a
//! listener's driver wraps each synchronous call into its session with [`observe`], which
//! clears the list before and takes it after. Sessions never `.await` while they handle
//! input, so what the list holds afterwards was published by that call. The driver keeps the
//! result in its [`PublisherFlow`], stops reading while [`PublisherFlow::is_paused`] and wakes
//! on [`PublisherFlow::changed`]. Consumers are never held back: their deliveries, acks and
//! credit go on, which is what drains the queue.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{watch, Notify};

/// How much a queue keeps in memory (shared by every queue of a broker; the server sets it
/// from `queue_max_in_memory_messages` and `queue_max_in_memory_bytes`).
#[derive(Debug)]
pub struct QueueMemoryLimits {
    messages: AtomicUsize,
    bytes: AtomicU64,
}

impl Default for QueueMemoryLimits {
    fn default() -> Self {
        QueueMemoryLimits {
            messages: AtomicUsize::new(DEFAULT_MAX_IN_MEMORY_MESSAGES),
            bytes: AtomicU64::new(DEFAULT_MAX_IN_MEMORY_BYTES),
        }
    }
}

/// Default of `queue_max_in_memory_messages`.
pub const DEFAULT_MAX_IN_MEMORY_MESSAGES: usize = 100_000;
/// Default of `queue_max_in_memory_bytes`.
pub const DEFAULT_MAX_IN_MEMORY_BYTES: u64 = 64 * 1024 * 1024;

impl QueueMemoryLimits {
    /// Limits of `messages` ready messages and `bytes` body bytes per queue (at least 1 each).
    pub fn new(messages: usize, bytes: u64) -> QueueMemoryLimits {
        QueueMemoryLimits {
            messages: AtomicUsize::new(messages.max(1)),
            bytes: AtomicU64::new(bytes.max(1)),
        }
    }

    /// Replaces both limits; queues apply them at their next change.
    pub fn set(&self, messages: usize, bytes: u64) {
        self.messages.store(messages.max(1), Ordering::Relaxed);
        self.bytes.store(bytes.max(1), Ordering::Relaxed);
    }

    /// Ready messages a queue keeps in memory.
    pub fn messages(&self) -> usize {
        self.messages.load(Ordering::Relaxed)
    }

    /// Body bytes of ready messages a queue keeps in memory.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Whether a queue holding `messages` and `bytes` in memory is over a limit.
    pub fn is_over(&self, messages: usize, bytes: u64) -> bool {
        messages > self.messages() || bytes > self.bytes()
    }

    /// Whether a congested queue holding `messages` and `bytes` has drained enough (half of
    /// both limits) to let its publishers go on.
    pub fn is_drained(&self, messages: usize, bytes: u64) -> bool {
        messages <= self.messages() / 2 && bytes <= self.bytes() / 2
    }
}

/// One queue's congestion signal.
#[derive(Debug, Default)]
pub struct QueueFlow {
    congested: AtomicBool,
    cleared: Notify,
}

impl QueueFlow {
    /// Whether the queue holds more in memory than its limits allow.
    pub fn is_congested(&self) -> bool {
        self.congested.load(Ordering::Acquire)
    }

    /// Raises the signal (the queue went over a limit).
    pub(crate) fn raise(&self) {
        self.congested.store(true, Ordering::Release);
    }

    /// Lowers the signal and wakes the publishers waiting on it.
    pub(crate) fn clear(&self) {
        if self.congested.swap(false, Ordering::AcqRel) {
            self.cleared.notify_waiters();
        }
    }

    /// Waits until the signal is lowered (at once if it is not raised).
    pub async fn cleared(&self) {
        let notified = self.cleared.notified();
        tokio::pin!(notified);
        // Registered before the check, so a clear between the check and the wait is seen.
        notified.as_mut().enable();
        if !self.is_congested() {
            return;
        }
        notified.await;
    }
}

thread_local! {
    /// Congested queues published to on this thread since the last [`observe`].
    static OBSERVED: RefCell<Vec<Arc<QueueFlow>>> = const { RefCell::new(Vec::new()) };
}

/// Notes that a message was just put into a congested queue (called by the queue).
pub(crate) fn note_congested(flow: &Arc<QueueFlow>) {
    OBSERVED.with(|observed| {
        let mut observed = observed.borrow_mut();
        if !observed.iter().any(|seen| Arc::ptr_eq(seen, flow)) {
            observed.push(Arc::clone(flow));
        }
    });
}

/// Runs `publish` (a synchronous call into a protocol session) and returns, with its result,
/// the congested queues it published to. `publish` must not block on another thread's work.
pub fn observe<R>(publish: impl FnOnce() -> R) -> (R, Vec<Arc<QueueFlow>>) {
    // Whatever was noted outside a driver (a management API publish, a dead letter routed by
    // a sweep) on this thread belongs to no connection.
    OBSERVED.with(|observed| observed.borrow_mut().clear());
    let result = publish();
    let congested = OBSERVED.with(|observed| std::mem::take(&mut *observed.borrow_mut()));
    (result, congested)
}

/// A publishing connection's flow state: the congested queues it published to and the
/// store's flow signal.
#[derive(Debug, Default)]
pub struct PublisherFlow {
    store: Option<watch::Receiver<bool>>,
    congested: Vec<Arc<QueueFlow>>,
}

impl PublisherFlow {
    /// Flow state for a connection of a broker with (or without) a message store.
    pub fn new(store: Option<&Arc<crate::store::MessageStore>>) -> PublisherFlow {
        PublisherFlow {
            store: store.map(|store| store.subscribe_flow()),
            congested: Vec::new(),
        }
    }

    /// Adds the congested queues an [`observe`]d call published to.
    pub fn hold(&mut self, congested: Vec<Arc<QueueFlow>>) {
        for flow in congested {
            if !self.congested.iter().any(|held| Arc::ptr_eq(held, &flow)) {
                self.congested.push(flow);
            }
        }
    }

    /// Whether the connection must not be read now (queues that drained are forgotten).
    pub fn is_paused(&mut self) -> bool {
        self.congested.retain(|flow| flow.is_congested());
        !self.congested.is_empty() || self.store.as_ref().is_some_and(|store| *store.borrow())
    }

    /// Whether one of the connection's queues is congested (as opposed to the store).
    pub fn waits_for_queues(&mut self) -> bool {
        self.congested.retain(|flow| flow.is_congested());
        !self.congested.is_empty()
    }

    /// Resolves when a signal this connection waits for may have changed: a congested queue
    /// drained, or the store's flow signal moved. Never resolves when nothing holds it back
    /// (use it only while [`PublisherFlow::is_paused`]).
    pub async fn changed(&mut self) {
        let queue = self.congested.first().cloned();
        let store = &mut self.store;
        tokio::select! {
            _ = async {
                match &queue {
                    Some(flow) => flow.cleared().await,
                    None => std::future::pending().await,
                }
            } => {}
            _ = async {
                let moved = match store {
                    Some(store) => store.changed().await.is_ok(),
                    None => false,
                };
                if !moved {
                    std::future::pending::<()>().await;
                }
            } => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_have_a_high_mark_and_a_low_mark_at_half() {
        let limits = QueueMemoryLimits::new(10, 1000);
        assert!(!limits.is_over(10, 1000));
        assert!(limits.is_over(11, 0));
        assert!(limits.is_over(0, 1001));
        assert!(!limits.is_drained(6, 0));
        assert!(!limits.is_drained(0, 501));
        assert!(limits.is_drained(5, 500));
    }

    #[test]
    fn observe_takes_only_what_the_call_noted() {
        let stale = Arc::new(QueueFlow::default());
        note_congested(&stale);
        let fresh = Arc::new(QueueFlow::default());
        let ((), noted) = observe(|| {
            note_congested(&fresh);
            note_congested(&fresh);
        });
        assert_eq!(noted.len(), 1);
        assert!(Arc::ptr_eq(&noted[0], &fresh));
        let ((), noted) = observe(|| {});
        assert!(noted.is_empty());
    }

    #[tokio::test]
    async fn a_publisher_is_paused_until_its_queue_drains() {
        let flow = Arc::new(QueueFlow::default());
        flow.raise();
        let mut publisher = PublisherFlow::new(None);
        assert!(!publisher.is_paused());
        publisher.hold(vec![Arc::clone(&flow)]);
        assert!(publisher.is_paused());
        let clearer = Arc::clone(&flow);
        let waiter = tokio::spawn(async move {
            publisher.changed().await;
            publisher.is_paused()
        });
        tokio::task::yield_now().await;
        clearer.clear();
        assert!(!waiter.await.unwrap());
    }
}
