//! Single active consumer on a stream, as RabbitMQ's stream plugin has it
//! (`rabbit_stream_sac_coordinator`): subscriptions that give the same consumer name to one
//! stream form a group, and only one of them, the active one, is sent chunks. The first to
//! join is active; when the active one leaves (unsubscribes, or its connection closes), the
//! next in joining order becomes active and its connection is woken to tell its client
//! (`ConsumerUpdate`), which answers where to resume.
//!
//! Groups span connections, so they live with the stream's log; a connection holds a
//! [`GroupMember`] per such subscription, and dropping it leaves the group.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;

struct Member {
    id: u64,
    active: Arc<AtomicBool>,
    wake: Arc<Notify>,
}

/// The single-active-consumer groups of one stream, by consumer name.
#[derive(Default)]
pub struct ConsumerGroups {
    groups: Mutex<HashMap<String, Vec<Member>>>,
    next_id: AtomicU64,
}

/// A subscription's place in a group; dropping it leaves the group.
pub struct GroupMember {
    groups: Weak<ConsumerGroups>,
    name: String,
    id: u64,
    active: Arc<AtomicBool>,
}

impl ConsumerGroups {
    /// Joins the group `name`; `wake` is notified when this member becomes active later.
    pub fn join(self: &Arc<Self>, name: &str, wake: Arc<Notify>) -> GroupMember {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut groups = self.groups.lock();
        let group = groups.entry(name.to_owned()).or_default();
        let active = Arc::new(AtomicBool::new(group.is_empty()));
        group.push(Member {
            id,
            active: Arc::clone(&active),
            wake,
        });
        GroupMember {
            groups: Arc::downgrade(self),
            name: name.to_owned(),
            id,
            active,
        }
    }

    /// How many subscriptions are in group `name` (for tests and the API).
    pub fn members(&self, name: &str) -> usize {
        self.groups.lock().get(name).map_or(0, Vec::len)
    }

    fn leave(&self, name: &str, id: u64) {
        let mut groups = self.groups.lock();
        let Some(group) = groups.get_mut(name) else {
            return;
        };
        let Some(index) = group.iter().position(|m| m.id == id) else {
            return;
        };
        let left = group.remove(index);
        if left.active.load(Ordering::Acquire) {
            if let Some(next) = group.first() {
                next.active.store(true, Ordering::Release);
                next.wake.notify_one();
            }
        }
        if group.is_empty() {
            groups.remove(name);
        }
    }
}

impl GroupMember {
    /// Whether this subscription is the group's active one now.
    pub fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }
}

impl Drop for GroupMember {
    fn drop(&mut self) {
        if let Some(groups) = self.groups.upgrade() {
            groups.leave(&self.name, self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_active_and_the_next_takes_over_when_it_leaves() {
        let groups = Arc::new(ConsumerGroups::default());
        let wake = Arc::new(Notify::new());
        let first = groups.join("app", Arc::clone(&wake));
        let second = groups.join("app", Arc::clone(&wake));
        let third = groups.join("app", Arc::clone(&wake));
        let other = groups.join("other", Arc::clone(&wake));
        assert!(first.is_active() && other.is_active());
        assert!(!second.is_active() && !third.is_active());
        // An inactive member leaving changes nothing.
        drop(third);
        assert!(first.is_active() && !second.is_active());
        drop(first);
        assert!(second.is_active());
        assert_eq!(groups.members("app"), 1);
        drop(second);
        assert_eq!(groups.members("app"), 0);
        assert!(other.is_active());
    }
}
