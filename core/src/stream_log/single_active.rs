//! Single active consumer on a stream, as RabbitMQ's stream plugin has it
//! (`rabbit_stream_sac_coordinator`): subscriptions that give the same consumer name to one
//! stream form a group, and only one of them, the active one, is sent chunks. The first to
//! join is active; when the active one leaves (unsubscribes, or its connection closes), the
//! next in joining order becomes active and its connection is woken to tell its client
//! (`ConsumerUpdate`), which answers where to resume.
//!
//! A group of a super stream's partition (subscriptions giving `super-stream`) knows the
//! partition's index, and its active member is the one at `index % members` in joining
//! order, so a group's consumers spread over the partitions. When a member joins or leaves
//! and that moves the choice, the active member is first asked to step down (its
//! connection is woken to send `ConsumerUpdate` with active false); once its client
//! answered ([`GroupMember::stepped_down`]), or it left, the new choice is made active.
//!
//! Groups span connections, so they live with the stream's log; a connection holds a
//! [`GroupMember`] per such subscription, and dropping it leaves the group.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// A member that is not sent chunks.
const WAITING: u8 = 0;
/// The group's active member.
const ACTIVE: u8 = 1;
/// Asked to step down; still counts as the active one until its client answered.
const DEACTIVATING: u8 = 2;

struct Member {
    id: u64,
    status: Arc<AtomicU8>,
    wake: Arc<Notify>,
}

impl Member {
    fn status(&self) -> u8 {
        self.status.load(Ordering::Acquire)
    }

    fn set(&self, status: u8) {
        self.status.store(status, Ordering::Release);
        self.wake.notify_one();
    }
}

/// One group: its partition index (super stream partitions) and its members in joining
/// order.
#[derive(Default)]
struct Group {
    partition: Option<usize>,
    members: Vec<Member>,
}

impl Group {
    /// The member that should be active: the first, or for a partition the one at
    /// `index % members`.
    fn choice(&self) -> Option<usize> {
        match (self.members.len(), self.partition) {
            (0, _) => None,
            (_, None) => Some(0),
            (len, Some(index)) => Some(index % len),
        }
    }

    fn position(&self, status: u8) -> Option<usize> {
        self.members.iter().position(|m| m.status() == status)
    }

    /// After a member joined or left: ask the active member to step down if the choice
    /// moved, or make the choice active when nobody is (and nobody is stepping down).
    fn rebalance(&self) {
        let Some(choice) = self.choice() else {
            return;
        };
        match self.position(ACTIVE) {
            Some(active) if active != choice && self.partition.is_some() => {
                self.members[active].set(DEACTIVATING)
            }
            Some(_) => {}
            None if self.position(DEACTIVATING).is_none() => self.members[choice].set(ACTIVE),
            None => {}
        }
    }
}

/// The single-active-consumer groups of one stream, by consumer name.
#[derive(Default)]
pub struct ConsumerGroups {
    groups: Mutex<HashMap<String, Group>>,
    next_id: AtomicU64,
}

/// A subscription's place in a group; dropping it leaves the group.
pub struct GroupMember {
    groups: Weak<ConsumerGroups>,
    name: String,
    id: u64,
    status: Arc<AtomicU8>,
}

/// A subscription joined a group of a super stream partition with another partition index
/// than the group's (RabbitMQ's `partition_index_conflict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionConflict;

impl ConsumerGroups {
    /// Joins the group `name`; `wake` is notified when this member becomes active later.
    pub fn join(self: &Arc<Self>, name: &str, wake: Arc<Notify>) -> GroupMember {
        self.join_partition(name, None, wake)
            .expect("a group without a partition index has no conflict")
    }

    /// Joins the group `name` of this stream as the partition at `partition` of a super
    /// stream (`None`: a plain group); `wake` is notified when this member's status changes
    /// (made active, asked to step down).
    pub fn join_partition(
        self: &Arc<Self>,
        name: &str,
        partition: Option<usize>,
        wake: Arc<Notify>,
    ) -> Result<GroupMember, PartitionConflict> {
        let mut groups = self.groups.lock();
        let group = groups.entry(name.to_owned()).or_insert_with(|| Group {
            partition,
            members: Vec::new(),
        });
        if group.partition != partition {
            return Err(PartitionConflict);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let status = Arc::new(AtomicU8::new(if group.members.is_empty() {
            ACTIVE
        } else {
            WAITING
        }));
        group.members.push(Member {
            id,
            status: Arc::clone(&status),
            wake,
        });
        group.rebalance();
        Ok(GroupMember {
            groups: Arc::downgrade(self),
            name: name.to_owned(),
            id,
            status,
        })
    }

    /// How many subscriptions are in group `name` (for tests and the API).
    pub fn members(&self, name: &str) -> usize {
        self.groups.lock().get(name).map_or(0, |g| g.members.len())
    }

    fn leave(&self, name: &str, id: u64) {
        let mut groups = self.groups.lock();
        let Some(group) = groups.get_mut(name) else {
            return;
        };
        let Some(index) = group.members.iter().position(|m| m.id == id) else {
            return;
        };
        group.members.remove(index);
        group.rebalance();
        if group.members.is_empty() {
            groups.remove(name);
        }
    }

    /// The member `id` of group `name` stepped down: the choice is made active.
    fn stepped_down(&self, name: &str, id: u64) {
        let groups = self.groups.lock();
        let Some(group) = groups.get(name) else {
            return;
        };
        if let Some(member) = group
            .members
            .iter()
            .find(|m| m.id == id && m.status() == DEACTIVATING)
        {
            member.status.store(WAITING, Ordering::Release);
        }
        group.rebalance();
    }
}

impl GroupMember {
    /// Whether this subscription is the group's active one now (and not asked to step
    /// down).
    pub fn is_active(&self) -> bool {
        self.status.load(Ordering::Acquire) == ACTIVE
    }

    /// Whether this subscription was asked to step down: it stops being sent chunks, tells
    /// its client, and calls [`GroupMember::stepped_down`] once the client answered.
    pub fn must_step_down(&self) -> bool {
        self.status.load(Ordering::Acquire) == DEACTIVATING
    }

    /// The client of a member asked to step down answered: another member is made active.
    pub fn stepped_down(&self) {
        if let Some(groups) = self.groups.upgrade() {
            groups.stepped_down(&self.name, self.id);
        }
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

    #[test]
    fn partition_groups_spread_and_hand_over_after_the_active_one_steps_down() {
        let groups = Arc::new(ConsumerGroups::default());
        let wake = Arc::new(Notify::new());
        // Partition 1 of a super stream: with one member it is active; with two, the second
        // (1 % 2) should be, so the first is asked to step down.
        let first = groups
            .join_partition("app", Some(1), Arc::clone(&wake))
            .unwrap();
        assert!(first.is_active());
        let second = groups
            .join_partition("app", Some(1), Arc::clone(&wake))
            .unwrap();
        assert!(first.must_step_down() && !first.is_active());
        assert!(!second.is_active(), "not before the first stepped down");
        first.stepped_down();
        assert!(second.is_active() && !first.is_active() && !first.must_step_down());
        // A third: 1 % 3 is still the second.
        let third = groups
            .join_partition("app", Some(1), Arc::clone(&wake))
            .unwrap();
        assert!(second.is_active() && !third.is_active());
        // The second leaves: 1 % 2 is now the third, made active at once (nobody to ask).
        drop(second);
        assert!(third.is_active() && !first.is_active());
        // Partition 0 of the same name elsewhere is another group; a conflicting index is
        // refused.
        assert!(groups
            .join_partition("app", Some(0), Arc::clone(&wake))
            .is_err());
        assert!(groups.join_partition("app", None, wake).is_err());
        // A member asked to step down that leaves instead hands over too.
        let fourth = groups
            .join_partition("app", Some(1), Arc::new(Notify::new()))
            .unwrap();
        // Members: first, third, fourth; 1 % 3 = third, still active.
        assert!(third.is_active() && !fourth.is_active());
        drop(first);
        // Members: third, fourth; 1 % 2 = fourth: the third is asked to step down.
        assert!(third.must_step_down());
        drop(third);
        assert!(fourth.is_active());
    }
}
