//! A replicated stream's state, as pure data and functions (no sockets, no clocks, no files):
//! where the stream lives ([`Placement`], decided in the cluster's metadata store), what this
//! node is for it ([`Role`]), when the leader may confirm a publish ([`CommitTracker`],
//! [`ConfirmQueue`]), and what a replica must cut off its log when a new leader takes over
//! ([`truncation_point`]).
//!
//! The model is RabbitMQ's osiris: the leader writes chunks; each replica asks the leader
//! for the chunks after its own durable tail (its request says how far it has written, which
//! is its acknowledgement); the leader confirms a publish once a majority of the members
//! have the chunk holding it on disk. When the leader's node is lost, the metadata leader
//! makes the online member with the longest log leader of the next epoch, recording where
//! the epoch starts; a member whose log goes past that point with chunks of an older epoch
//! cuts them off (they were never confirmed) before it follows the new leader.

use std::collections::{HashMap, VecDeque};

/// Where a stream lives: its members, its leader and the leader's epoch, with the offset
/// each epoch started at. Committed through the metadata store; every node holds the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Every member (the leader too), in the order they were chosen.
    pub members: Vec<String>,
    /// The member that writes.
    pub leader: String,
    /// The leader's epoch (1 for the first leader).
    pub epoch: u64,
    /// `(epoch, first offset written in it)`, oldest first, the current epoch last.
    pub epochs: Vec<(u64, u64)>,
}

impl Placement {
    /// The first placement of a stream declared on `home`: it leads epoch 1 from offset
    /// `tail` (0 for a new stream).
    pub fn initial(members: Vec<String>, home: &str, tail: u64) -> Placement {
        Placement {
            members,
            leader: home.to_owned(),
            epoch: 1,
            epochs: vec![(1, tail)],
        }
    }

    /// The next epoch, led by `leader` from `tail` (its log's end).
    pub fn next_epoch(&self, leader: &str, tail: u64) -> Placement {
        let mut next = self.clone();
        next.leader = leader.to_owned();
        next.epoch = self.epoch + 1;
        next.epochs.push((next.epoch, tail));
        next
    }

    /// The replicas: the members other than the leader.
    pub fn replicas(&self) -> impl Iterator<Item = &str> {
        self.members
            .iter()
            .map(String::as_str)
            .filter(move |member| *member != self.leader)
    }

    /// How many members must have a chunk before it is confirmed.
    pub fn majority(&self) -> usize {
        self.members.len() / 2 + 1
    }

    /// The role of `node` in this placement.
    pub fn role_of(&self, node: &str) -> Role {
        if self.leader == node {
            Role::Leader { epoch: self.epoch }
        } else if self.members.iter().any(|member| member == node) {
            Role::Replica { epoch: self.epoch }
        } else {
            Role::Outside
        }
    }

    /// The placement as one line of text (the metadata log and each member's
    /// `placement` file): `epoch leader members(,) epochs(epoch:offset,)`.
    pub fn encode(&self) -> String {
        let epochs: Vec<String> = self
            .epochs
            .iter()
            .map(|(epoch, offset)| format!("{epoch}:{offset}"))
            .collect();
        format!(
            "{} {} {} {}",
            self.epoch,
            self.leader,
            self.members.join(","),
            epochs.join(",")
        )
    }

    /// The inverse of [`Placement::encode`].
    pub fn decode(text: &str) -> Option<Placement> {
        let mut words = text.split_whitespace();
        let epoch = words.next()?.parse().ok()?;
        let leader = words.next()?.to_owned();
        let members = words.next()?.split(',').map(str::to_owned).collect();
        let epochs = words
            .next()?
            .split(',')
            .map(|pair| {
                let (epoch, offset) = pair.split_once(':')?;
                Some((epoch.parse().ok()?, offset.parse().ok()?))
            })
            .collect::<Option<Vec<_>>>()?;
        if words.next().is_some() {
            return None;
        }
        Some(Placement {
            members,
            leader,
            epoch,
            epochs,
        })
    }
}

/// What this node is for a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// No cluster: the stream confirms once its own disk has a chunk.
    Standalone,
    /// On a cluster, before the stream's placement is known: publishes are written but not
    /// confirmed until a placement makes this node the leader and a majority has them.
    Pending,
    /// The leader of `epoch`: takes publishes, confirms after a majority.
    Leader {
        /// Its epoch.
        epoch: u64,
    },
    /// A replica in `epoch`: copies the leader's chunks; refuses publishes.
    Replica {
        /// The epoch it follows.
        epoch: u64,
    },
    /// Not a member: the node keeps no copy (publishes refused).
    Outside,
}

impl Role {
    /// Whether publishes on this node are taken (written, then confirmed or held).
    pub fn takes_publishes(self) -> bool {
        matches!(self, Role::Standalone | Role::Pending | Role::Leader { .. })
    }
}

/// The leader's view of how far each member has written, and so how far the stream is
/// committed (on a majority of disks).
#[derive(Debug, Clone, Default)]
pub struct CommitTracker {
    members: Vec<String>,
    tails: HashMap<String, u64>,
    committed: u64,
}

impl CommitTracker {
    /// A tracker for `members`, committed up to `committed` (what was confirmed before).
    pub fn new(members: Vec<String>, committed: u64) -> CommitTracker {
        CommitTracker {
            members,
            tails: HashMap::new(),
            committed,
        }
    }

    /// The offset up to which (exclusive) a majority of members has the log.
    pub fn committed(&self) -> u64 {
        self.committed
    }

    /// How far `member` has written (a replica's fetch, or the leader's own write); returns
    /// the new committed offset when it moved. Tails of non-members are ignored, and a tail
    /// never moves back.
    pub fn written(&mut self, member: &str, tail: u64) -> Option<u64> {
        if !self.members.iter().any(|m| m == member) {
            return None;
        }
        let known = self.tails.entry(member.to_owned()).or_insert(0);
        *known = (*known).max(tail);
        let mut tails: Vec<u64> = self
            .members
            .iter()
            .map(|m| self.tails.get(m).copied().unwrap_or(0))
            .collect();
        tails.sort_unstable_by(|a, b| b.cmp(a));
        let majority = self.members.len() / 2 + 1;
        let on_majority = tails.get(majority - 1).copied().unwrap_or(0);
        if on_majority > self.committed {
            self.committed = on_majority;
            Some(on_majority)
        } else {
            None
        }
    }

    /// How far each member is known to have written.
    pub fn tail_of(&self, member: &str) -> Option<u64> {
        self.tails.get(member).copied()
    }
}

/// Publishes written on the leader and waiting for a majority, in offset order: each is
/// released once the committed offset reaches the end of its chunk.
#[derive(Debug)]
pub struct ConfirmQueue<T> {
    waiting: VecDeque<(u64, T)>,
}

impl<T> Default for ConfirmQueue<T> {
    fn default() -> Self {
        ConfirmQueue {
            waiting: VecDeque::new(),
        }
    }
}

impl<T> ConfirmQueue<T> {
    /// Holds `item` until the log is committed up to `end` (the offset after its records).
    pub fn hold(&mut self, end: u64, item: T) {
        self.waiting.push_back((end, item));
    }

    /// Everything held whose end is at or below `committed`, in the order held.
    pub fn release(&mut self, committed: u64) -> Vec<T> {
        let mut released = Vec::new();
        while self
            .waiting
            .front()
            .is_some_and(|(end, _)| *end <= committed)
        {
            if let Some((_, item)) = self.waiting.pop_front() {
                released.push(item);
            }
        }
        released
    }

    /// Everything held (the node stopped leading: its publishers are told).
    pub fn drain(&mut self) -> Vec<T> {
        self.waiting.drain(..).map(|(_, item)| item).collect()
    }

    /// How many are held.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

/// Where a member whose log ends at `tail`, its last chunk written in `last_epoch`, must cut
/// its log before following a leader with `epochs`: at the start of the first epoch after
/// `last_epoch`, when its log goes past it (those chunks were written by a leader of an older
/// epoch and never reached the new leader, so they were never confirmed). `None`: keep all.
pub fn truncation_point(tail: u64, last_epoch: u64, epochs: &[(u64, u64)]) -> Option<u64> {
    let start = epochs
        .iter()
        .filter(|(epoch, _)| *epoch > last_epoch)
        .map(|(_, start)| *start)
        .min()?;
    (tail > start).then_some(start)
}

/// The member to lead the next epoch: the one with the longest log among those that
/// answered (`(member, tail)`), ties going to the earlier member of `placement`; `None`
/// unless a majority of the members answered (only then does one of them hold every
/// confirmed chunk).
pub fn choose_leader(placement: &Placement, answers: &[(String, u64)]) -> Option<(String, u64)> {
    let answered: Vec<&(String, u64)> = answers
        .iter()
        .filter(|(member, _)| placement.members.contains(member))
        .collect();
    if answered.len() < placement.majority() {
        return None;
    }
    let rank = |member: &str| placement.members.iter().position(|m| m == member);
    answered
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| rank(&b.0).cmp(&rank(&a.0))))
        .cloned()
}

/// The members of a new stream declared on `home`: `home` first, then up to `size - 1` of
/// the other running nodes in name order.
pub fn choose_members(home: &str, running: &[String], size: usize) -> Vec<String> {
    let mut others: Vec<&String> = running.iter().filter(|node| *node != home).collect();
    others.sort();
    others.dedup();
    std::iter::once(home.to_owned())
        .chain(
            others
                .into_iter()
                .take(size.saturating_sub(1))
                .map(String::clone),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_chunk_is_committed_once_a_majority_of_members_has_it() {
        let mut tracker = CommitTracker::new(names(&["a", "b", "c"]), 0);
        assert_eq!(
            tracker.written("a", 10),
            None,
            "the leader alone is no majority"
        );
        assert_eq!(tracker.written("b", 4), Some(4));
        assert_eq!(tracker.written("c", 10), Some(10));
        assert_eq!(tracker.written("b", 3), None, "a tail never moves back");
        assert_eq!(tracker.written("x", 100), None, "not a member");
        assert_eq!(tracker.committed(), 10);
    }

    #[test]
    fn a_single_member_stream_commits_on_its_own_write() {
        let mut tracker = CommitTracker::new(names(&["a"]), 0);
        assert_eq!(tracker.written("a", 5), Some(5));
    }

    #[test]
    fn five_members_need_three() {
        let mut tracker = CommitTracker::new(names(&["a", "b", "c", "d", "e"]), 0);
        tracker.written("a", 9);
        tracker.written("b", 7);
        assert_eq!(tracker.committed(), 0);
        assert_eq!(tracker.written("e", 8), Some(7));
    }

    #[test]
    fn confirms_are_released_in_order_when_their_chunk_is_committed() {
        let mut queue = ConfirmQueue::default();
        queue.hold(5, "first");
        queue.hold(9, "second");
        queue.hold(12, "third");
        assert!(queue.release(4).is_empty());
        assert_eq!(queue.release(9), vec!["first", "second"]);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.drain(), vec!["third"]);
        assert!(queue.is_empty());
    }

    #[test]
    fn an_old_leader_cuts_what_it_wrote_after_the_new_epoch_started() {
        // Epoch 1 from 0; epoch 2 (another node) from 80. The old leader wrote to 100 in
        // epoch 1: it keeps 0..80.
        let epochs = [(1, 0), (2, 80)];
        assert_eq!(truncation_point(100, 1, &epochs), Some(80));
        assert_eq!(
            truncation_point(70, 1, &epochs),
            None,
            "behind: it catches up"
        );
        assert_eq!(truncation_point(80, 1, &epochs), None);
        assert_eq!(
            truncation_point(120, 2, &epochs),
            None,
            "already of epoch 2"
        );
        // Epochs 2 and 3 both began before its tail: the earlier start wins.
        assert_eq!(
            truncation_point(100, 1, &[(1, 0), (2, 60), (3, 90)]),
            Some(60)
        );
    }

    #[test]
    fn the_longest_log_among_a_majority_leads_the_next_epoch() {
        let placement = Placement::initial(names(&["a", "b", "c"]), "a", 0);
        assert_eq!(
            choose_leader(&placement, &[("b".into(), 7)]),
            None,
            "one of three is no majority"
        );
        assert_eq!(
            choose_leader(&placement, &[("b".into(), 7), ("c".into(), 9)]),
            Some(("c".into(), 9))
        );
        assert_eq!(
            choose_leader(&placement, &[("c".into(), 9), ("b".into(), 9)]),
            Some(("b".into(), 9)),
            "a tie goes to the earlier member"
        );
        let next = placement.next_epoch("c", 9);
        assert_eq!(next.epoch, 2);
        assert_eq!(next.epochs, vec![(1, 0), (2, 9)]);
        assert_eq!(next.role_of("c"), Role::Leader { epoch: 2 });
        assert_eq!(next.role_of("a"), Role::Replica { epoch: 2 });
        assert_eq!(next.role_of("z"), Role::Outside);
        assert_eq!(next.replicas().collect::<Vec<_>>(), vec!["a", "b"]);
    }

    #[test]
    fn members_are_the_home_and_the_next_nodes_by_name() {
        let running = names(&["warren@c", "warren@a", "warren@b", "warren@d"]);
        assert_eq!(
            choose_members("warren@b", &running, 3),
            names(&["warren@b", "warren@a", "warren@c"])
        );
        assert_eq!(
            choose_members("warren@b", &running, 1),
            names(&["warren@b"])
        );
        assert_eq!(
            choose_members("warren@a", &names(&["warren@a"]), 3),
            names(&["warren@a"])
        );
    }

    #[test]
    fn a_placement_survives_its_text_form() {
        let placement = Placement::initial(names(&["warren@1", "warren@2"]), "warren@1", 0)
            .next_epoch("warren@2", 44);
        assert_eq!(Placement::decode(&placement.encode()), Some(placement));
        assert_eq!(Placement::decode("garbage"), None);
    }
}
