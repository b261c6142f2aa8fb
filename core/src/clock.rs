//! The time the core's queue operations read (message TTL, `x-expires`, the expiry sweep),
//! passed in instead of read from the system inside each operation, so expiry can be tested
//! with tokio's paused time (`Clock::tokio`) or a hand-moved clock (`Clock::manual`) instead
//! of sleeping.
//!
//! The process's clock, [`now_ms`], is tokio's: outside tests it is the monotonic clock of
//! the operating system, and under `tokio::time::pause` (or `#[tokio::test(start_paused =
//! true)]`) it stands still and moves with `advance` and the runtime's auto-advance. The
//! listeners' timers (heartbeats, keep-alives, handshake and consumer timeouts) sleep on
//! tokio's clock too, and the deliveries' timestamps for `consumer_timeout` are taken from
//! [`now_ms`], so a whole broker runs in virtual time in a paused test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// How far before the first call [`now_ms`] counts from: a paused runtime's clock starts at
/// the real time the runtime was built, which precedes the first call (by milliseconds in
/// any test), and must not read as before the epoch.
const EPOCH_MARGIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Milliseconds on the process's monotonic clock, tokio's (see the module documentation),
/// counted from a minute before the first call; never going back.
pub fn now_ms() -> u64 {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(|| {
        let now = std::time::Instant::now();
        now.checked_sub(EPOCH_MARGIN).unwrap_or(now)
    });
    tokio::time::Instant::now()
        .into_std()
        .saturating_duration_since(epoch)
        .as_millis() as u64
}

/// Milliseconds on a monotonic clock. Cheap to clone; every queue of a broker holds the
/// broker's.
#[derive(Debug, Clone, Default)]
pub enum Clock {
    /// The process's monotonic clock ([`now_ms`]): what a server runs on.
    #[default]
    Monotonic,
    /// Tokio's clock, counted from `start`: follows `tokio::time::pause` and `advance` in
    /// tests (and is the monotonic clock otherwise).
    Tokio(tokio::time::Instant),
    /// A clock that moves only when told to ([`Clock::advance`]), for unit tests.
    Manual(Arc<AtomicU64>),
}

impl Clock {
    /// Tokio's clock, from now.
    pub fn tokio() -> Clock {
        Clock::Tokio(tokio::time::Instant::now())
    }

    /// A manual clock at 0 ms.
    pub fn manual() -> Clock {
        Clock::Manual(Arc::default())
    }

    /// The time now, in milliseconds.
    pub fn now_ms(&self) -> u64 {
        match self {
            Clock::Monotonic => now_ms(),
            Clock::Tokio(start) => tokio::time::Instant::now()
                .saturating_duration_since(*start)
                .as_millis() as u64,
            Clock::Manual(now) => now.load(Ordering::Acquire),
        }
    }

    /// Moves a manual clock forward by `ms`; other clocks are not moved by hand.
    pub fn advance(&self, ms: u64) {
        if let Clock::Manual(now) = self {
            now.fetch_add(ms, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = Clock::manual();
        let copy = clock.clone();
        assert_eq!(clock.now_ms(), 0);
        clock.advance(1_500);
        assert_eq!(copy.now_ms(), 1_500);
    }

    #[tokio::test(start_paused = true)]
    async fn the_process_clock_follows_paused_time() {
        let before = now_ms();
        tokio::time::advance(std::time::Duration::from_secs(30)).await;
        assert_eq!(now_ms() - before, 30_000);
        assert_eq!(Clock::default().now_ms() - before, 30_000);
    }

    #[tokio::test(start_paused = true)]
    async fn the_tokio_clock_follows_paused_time() {
        let clock = Clock::tokio();
        tokio::time::advance(std::time::Duration::from_secs(90)).await;
        assert_eq!(clock.now_ms(), 90_000);
    }

    /// The queues of a broker read its clock: with tokio's time paused, a message TTL and
    /// `x-expires` run out exactly when time is advanced past them, with no sleep.
    #[tokio::test(start_paused = true)]
    async fn queue_expiry_follows_the_broker_clock() {
        use crate::access::Permissions;
        use crate::broker::{Broker, Limits};
        use crate::message::{Message, Properties};
        use crate::value::{Table, Value};
        use crate::vhost::{Actor, PublishOptions, Publisher, QueueDeclare};
        use std::time::Duration;

        let broker = Broker::new(Limits::default());
        assert!(broker.use_clock(Clock::tokio()));
        let vhost = broker.add_vhost("/");
        vhost.set_permissions("u", Permissions::full());
        let actor = Actor {
            user: "u",
            connection_id: 1,
        };
        for (name, argument, ms) in [
            ("ttl", "x-message-ttl", 60_000),
            ("idle", "x-expires", 120_000),
            ("plain", "", 0),
        ] {
            let mut arguments = Table::new();
            if !argument.is_empty() {
                arguments.insert(argument, Value::I32(ms));
            }
            vhost
                .declare_queue(
                    actor,
                    QueueDeclare {
                        name: name.into(),
                        passive: false,
                        durable: false,
                        exclusive: false,
                        auto_delete: false,
                        arguments,
                    },
                )
                .unwrap();
        }
        let message = Message {
            exchange: "".into(),
            routing_key: "ttl".into(),
            properties: Properties::default(),
            encoded_properties: None,
            body: bytes::Bytes::from_static(b"m"),
        };
        // The sweep visits only queues with something to expire: none yet but `x-expires`.
        let sweeps = |name: &str| vhost.queue(name).unwrap().wants_sweep();
        assert!(!sweeps("ttl") && sweeps("idle") && !sweeps("plain"));
        vhost
            .publish(
                &mut Publisher::new(),
                actor,
                Arc::new(message),
                PublishOptions::default(),
            )
            .unwrap();
        assert!(sweeps("ttl"), "a message with a TTL arrived");
        tokio::time::advance(Duration::from_millis(59_999)).await;
        assert_eq!(broker.expire_messages(), 0);
        assert_eq!(vhost.queue("ttl").unwrap().message_count(), 1);
        // A queue runs a full expiry pass at most every 700 ms.
        tokio::time::advance(Duration::from_millis(701)).await;
        assert_eq!(broker.expire_messages(), 1);
        assert!(sweeps("ttl"), "the expired message is still to be freed");
        // The next pass frees it, the one after finds nothing left.
        for _ in 0..2 {
            tokio::time::advance(Duration::from_millis(701)).await;
            broker.expire_messages();
        }
        assert!(
            !sweeps("ttl"),
            "nothing left to expire: skipped from now on"
        );
        assert!(!sweeps("plain"));
        assert!(vhost.queue("idle").is_some());
        tokio::time::advance(Duration::from_secs(60)).await;
        broker.expire_messages();
        assert!(
            vhost.queue("idle").is_none(),
            "unused past x-expires: deleted"
        );
    }

    /// Ported from lapin_queue_features.rs (`expired_messages_anywhere_in_the_queue_...`),
    /// which waited for the server's sweep in real time. With the broker's default clock (the
    /// process's, tokio's): a per-message expiration in the middle of the queue runs out when
    /// time is advanced past it, the sweep removes it, and it is never handed out.
    #[tokio::test(start_paused = true)]
    async fn an_expired_message_in_the_middle_is_removed_and_never_delivered() {
        use crate::access::Permissions;
        use crate::broker::{Broker, Limits};
        use crate::message::{Message, Properties};
        use crate::value::Table;
        use crate::vhost::{Actor, PublishOptions, Publisher, QueueDeclare};
        use std::time::Duration;

        let broker = Broker::new(Limits::default());
        let vhost = broker.add_vhost("/");
        vhost.set_permissions("u", Permissions::full());
        let actor = Actor {
            user: "u",
            connection_id: 1,
        };
        vhost
            .declare_queue(
                actor,
                QueueDeclare {
                    name: "mixed".into(),
                    passive: false,
                    durable: false,
                    exclusive: false,
                    auto_delete: false,
                    arguments: Table::new(),
                },
            )
            .unwrap();
        let mut publisher = Publisher::new();
        for (body, expiration) in [("keep-1", None), ("short", Some("30")), ("keep-2", None)] {
            let message = Message {
                exchange: "".into(),
                routing_key: "mixed".into(),
                properties: Properties {
                    expiration: expiration.map(str::to_owned),
                    ..Properties::default()
                },
                encoded_properties: None,
                body: bytes::Bytes::from(body),
            };
            vhost
                .publish(
                    &mut publisher,
                    actor,
                    Arc::new(message),
                    PublishOptions::default(),
                )
                .unwrap();
        }
        let queue = vhost.queue("mixed").unwrap();
        tokio::time::advance(Duration::from_millis(29)).await;
        assert_eq!(broker.expire_messages(), 0, "29 ms: not expired yet");
        assert_eq!(queue.stats().ready, 3);
        // Past its expiration and the queue's least time between two sweeps (700 ms).
        tokio::time::advance(Duration::from_millis(701)).await;
        assert_eq!(broker.expire_messages(), 1);
        let stats = queue.stats();
        assert_eq!((stats.ready, stats.expired), (2, 1));
        for expected in ["keep-1", "keep-2"] {
            let (delivery, _) = queue.get(false).expect("a message");
            assert_eq!(&delivery.message.body[..], expected.as_bytes());
        }
        assert!(
            queue.get(false).is_none(),
            "the expired one is never handed out"
        );
    }
}
