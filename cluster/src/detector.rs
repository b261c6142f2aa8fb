//! The node-level failure detector: one per node, fed by the pings every control link sends
//! (about every 100 ms), consulted by the metadata group, `/api/nodes` and (later) every
//! quorum queue group, so idle Raft groups need no heartbeats of their own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tokio::sync::watch;

/// What the detector thinks of a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeStatus {
    /// Its control link is open and it answered a ping recently.
    Up,
    /// Its link is open but no pong came for longer than the suspicion timeout.
    Suspected,
    /// No open control link.
    Down,
}

/// One peer's health, updated from its control link.
#[derive(Debug, Clone, Copy, Default)]
struct PeerHealth {
    connected: bool,
    last_pong: Option<Instant>,
    /// Round-trip time of the last ping.
    round_trip: Option<Duration>,
}

impl PeerHealth {
    fn status(&self, now: Instant, suspect_after: Duration) -> NodeStatus {
        match (self.connected, self.last_pong) {
            (false, _) => NodeStatus::Down,
            (true, Some(at)) if now.saturating_duration_since(at) <= suspect_after => {
                NodeStatus::Up
            }
            (true, _) => NodeStatus::Suspected,
        }
    }
}

/// The failure detector.
pub struct FailureDetector {
    peers: RwLock<BTreeMap<String, PeerHealth>>,
    ping_period: Duration,
    suspect_after: Duration,
    up: watch::Sender<BTreeSet<String>>,
    /// Bumped whenever a peer's link opens or breaks or the set of peers up changes.
    changes: watch::Sender<u64>,
}

impl FailureDetector {
    /// A detector for pings every `ping_period`, suspecting a peer after
    /// `suspect_after` without a pong.
    pub fn new(ping_period: Duration, suspect_after: Duration) -> FailureDetector {
        FailureDetector {
            peers: RwLock::new(BTreeMap::new()),
            ping_period,
            suspect_after,
            up: watch::channel(BTreeSet::new()).0,
            changes: watch::channel(0).0,
        }
    }

    /// How often control links ping.
    pub fn ping_period(&self) -> Duration {
        self.ping_period
    }

    /// A peer answered a ping sent `round_trip` ago.
    pub fn record_pong(&self, peer: &str, now: Instant, round_trip: Duration) {
        let mut peers = self.peers.write();
        let health = peers.entry(peer.to_string()).or_default();
        health.connected = true;
        health.last_pong = Some(now);
        health.round_trip = Some(round_trip);
        drop(peers);
        self.publish(now);
    }

    /// A peer's control link opened (true) or broke (false).
    pub fn record_link(&self, peer: &str, connected: bool, now: Instant) {
        let mut peers = self.peers.write();
        let health = peers.entry(peer.to_string()).or_default();
        let flipped = health.connected != connected;
        health.connected = connected;
        if !connected {
            health.last_pong = None;
        }
        drop(peers);
        if flipped {
            self.changes.send_modify(|n| *n += 1);
        }
        self.publish(now);
    }

    /// What the detector thinks of `peer` now.
    pub fn status(&self, peer: &str) -> NodeStatus {
        self.status_at(peer, Instant::now())
    }

    /// What the detector thinks of `peer` at `now`.
    pub fn status_at(&self, peer: &str, now: Instant) -> NodeStatus {
        self.peers
            .read()
            .get(peer)
            .map_or(NodeStatus::Down, |h| h.status(now, self.suspect_after))
    }

    /// Whether `peer` is up now.
    pub fn is_up(&self, peer: &str) -> bool {
        self.status(peer) == NodeStatus::Up
    }

    /// The last ping round trip to `peer`, while it is connected.
    pub fn round_trip(&self, peer: &str) -> Option<Duration> {
        self.peers
            .read()
            .get(peer)
            .filter(|h| h.connected)
            .and_then(|h| h.round_trip)
    }

    /// The peers up at `now`.
    pub fn up_at(&self, now: Instant) -> BTreeSet<String> {
        self.peers
            .read()
            .iter()
            .filter(|(_, h)| h.status(now, self.suspect_after) == NodeStatus::Up)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The set of peers up, as a watch: groups wait on it instead of polling.
    pub fn subscribe(&self) -> watch::Receiver<BTreeSet<String>> {
        self.up.subscribe()
    }

    /// A counter bumped whenever any peer's link opens or breaks or a peer goes up or
    /// stops answering: idle quorum queue members sleep on it instead of polling links.
    pub fn subscribe_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Re-evaluates suspicion (the transport calls this every ping period).
    pub fn tick(&self, now: Instant) {
        self.publish(now);
    }

    fn publish(&self, now: Instant) {
        let up = self.up_at(now);
        let changed = self.up.send_if_modified(|current| {
            if *current == up {
                return false;
            }
            for gone in current.difference(&up) {
                tracing::warn!(node = %gone, "cluster peer is no longer answering pings");
            }
            for back in up.difference(current) {
                tracing::info!(node = %back, "cluster peer is up");
            }
            *current = up;
            true
        });
        if changed {
            self.changes.send_modify(|n| *n += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_up_while_it_answers_then_suspected_then_down() {
        let detector = FailureDetector::new(Duration::from_millis(100), Duration::from_millis(500));
        let start = Instant::now();
        assert_eq!(detector.status_at("b", start), NodeStatus::Down);
        detector.record_link("b", true, start);
        assert_eq!(detector.status_at("b", start), NodeStatus::Suspected);
        detector.record_pong("b", start, Duration::from_micros(50));
        assert_eq!(detector.status_at("b", start), NodeStatus::Up);
        assert!(detector.subscribe().borrow().contains("b"));
        let later = start + Duration::from_millis(600);
        assert_eq!(detector.status_at("b", later), NodeStatus::Suspected);
        detector.tick(later);
        assert!(!detector.subscribe().borrow().contains("b"));
        detector.record_link("b", false, later);
        assert_eq!(detector.status_at("b", later), NodeStatus::Down);
        assert_eq!(detector.round_trip("b"), None);
    }

    #[test]
    fn the_change_counter_moves_on_link_and_liveness_changes_only() {
        let detector = FailureDetector::new(Duration::from_millis(100), Duration::from_millis(500));
        let changes = detector.subscribe_changes();
        let start = Instant::now();
        detector.record_link("b", true, start);
        assert_eq!(*changes.borrow(), 1, "the link opened");
        detector.record_pong("b", start, Duration::from_micros(50));
        assert_eq!(*changes.borrow(), 2, "b is up");
        detector.record_pong("b", start + Duration::from_millis(100), Duration::from_micros(50));
        detector.tick(start + Duration::from_millis(200));
        assert_eq!(*changes.borrow(), 2, "pongs and ticks of a healthy peer change nothing");
        detector.tick(start + Duration::from_millis(700));
        assert_eq!(*changes.borrow(), 3, "b is suspected");
        detector.record_link("b", false, start + Duration::from_millis(800));
        assert_eq!(*changes.borrow(), 4, "the link broke while b was already not up");
    }
}
