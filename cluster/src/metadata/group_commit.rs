//! Group commit of metadata changes: while one proposal is in flight, the changes that
//! arrive on this node queue up, and the moment it is answered they go to the leader together
//! as one Raft entry. One client pays a round trip and an fsync per change as before; many
//! clients at once share them, so the rate grows with the concurrency instead of being
//! capped by the leader's fsyncs.
//!
//! Pure bookkeeping (no I/O, no clock): [`GroupCommit`] decides what to propose and when; the
//! store's driver (`MetadataStore::drive` in `mod.rs`) sends each batch and answers every
//! change in it with the batch's outcome. Changes keep their arrival order, inside a batch
//! and from one batch to the next (one batch in flight per node), which is the order the
//! log applies them in. Each proposer is then answered with its own result by applying its
//! own change when the log reaches it (`state_machine.rs`).

use std::collections::VecDeque;

/// The most changes proposed in one Raft entry: keeps an entry (and an AppendEntries
/// request) to a few hundred kilobytes.
pub const MAX_BATCH: usize = 256;

/// The queue of one node's changes waiting for the leader, and whether a batch is in flight.
#[derive(Debug)]
pub struct GroupCommit<T> {
    waiting: VecDeque<T>,
    in_flight: bool,
    max_batch: usize,
}

impl<T> GroupCommit<T> {
    /// An idle group that proposes at most `max_batch` changes at once (at least 1).
    pub fn new(max_batch: usize) -> GroupCommit<T> {
        GroupCommit {
            waiting: VecDeque::new(),
            in_flight: false,
            max_batch: max_batch.max(1),
        }
    }

    /// Queues `change`. When nothing is in flight, the group becomes busy and returns the
    /// batch to propose now (this change alone): the caller must drive it and then call
    /// [`GroupCommit::next_batch`]. Otherwise the change waits for the batch in flight.
    pub fn submit(&mut self, change: T) -> Option<Vec<T>> {
        self.waiting.push_back(change);
        if self.in_flight {
            return None;
        }
        self.take(|_| true)
    }

    /// The batch in flight was answered: returns the next one (the oldest waiting changes
    /// for which `live` holds, at most the batch size), keeping the group busy, or `None`,
    /// leaving it idle. Changes for which `live` is false (their caller gave up and was
    /// refused) are dropped, never proposed: a refused change must not commit later.
    pub fn next_batch(&mut self, live: impl Fn(&T) -> bool) -> Option<Vec<T>> {
        self.in_flight = false;
        self.take(live)
    }

    /// Whether a batch is in flight.
    pub fn is_in_flight(&self) -> bool {
        self.in_flight
    }

    /// How many changes wait for the next batch.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    fn take(&mut self, live: impl Fn(&T) -> bool) -> Option<Vec<T>> {
        let mut batch = Vec::new();
        while batch.len() < self.max_batch {
            let Some(change) = self.waiting.pop_front() else {
                break;
            };
            if live(&change) {
                batch.push(change);
            }
        }
        if batch.is_empty() {
            return None;
        }
        self.in_flight = true;
        Some(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_on_an_idle_group_is_proposed_at_once_alone() {
        let mut group = GroupCommit::new(8);
        assert_eq!(group.submit(1), Some(vec![1]));
        assert!(group.is_in_flight());
        assert_eq!(group.next_batch(|_| true), None);
        assert!(!group.is_in_flight());
        assert_eq!(
            group.submit(2),
            Some(vec![2]),
            "idle again: proposed at once"
        );
    }

    #[test]
    fn changes_arriving_while_one_is_in_flight_are_proposed_together_in_arrival_order() {
        let mut group = GroupCommit::new(8);
        assert_eq!(group.submit("a"), Some(vec!["a"]));
        for change in ["b", "c", "d"] {
            assert_eq!(group.submit(change), None, "waits for the batch in flight");
        }
        assert_eq!(group.waiting(), 3);
        assert_eq!(group.next_batch(|_| true), Some(vec!["b", "c", "d"]));
        assert!(group.is_in_flight());
        assert_eq!(group.submit("e"), None);
        assert_eq!(group.next_batch(|_| true), Some(vec!["e"]));
        assert_eq!(group.next_batch(|_| true), None);
        assert_eq!(group.waiting(), 0);
    }

    #[test]
    fn a_batch_holds_at_most_the_batch_size_and_the_rest_follows_in_order() {
        let mut group = GroupCommit::new(3);
        assert_eq!(group.submit(0), Some(vec![0]));
        for change in 1..=7 {
            assert_eq!(group.submit(change), None);
        }
        assert_eq!(group.next_batch(|_| true), Some(vec![1, 2, 3]));
        assert_eq!(group.next_batch(|_| true), Some(vec![4, 5, 6]));
        assert_eq!(group.next_batch(|_| true), Some(vec![7]));
        assert_eq!(group.next_batch(|_| true), None);
    }

    #[test]
    fn changes_whose_caller_gave_up_are_never_proposed() {
        let mut group = GroupCommit::new(2);
        assert_eq!(group.submit(0), Some(vec![0]));
        for change in 1..=5 {
            assert_eq!(group.submit(change), None);
        }
        // 1, 2 and 4 were refused by their callers' deadline while 0 was in flight: the
        // batch skips them and still fills up to its size from what follows.
        let live = |change: &i32| ![1, 2, 4].contains(change);
        assert_eq!(group.next_batch(live), Some(vec![3, 5]));
        assert_eq!(group.next_batch(live), None);
        assert!(!group.is_in_flight());
    }

    #[test]
    fn a_group_whose_waiting_changes_all_gave_up_goes_idle() {
        let mut group = GroupCommit::new(4);
        assert_eq!(group.submit(0), Some(vec![0]));
        assert_eq!(group.submit(1), None);
        assert_eq!(group.next_batch(|_| false), None);
        assert!(!group.is_in_flight());
        assert_eq!(group.submit(2), Some(vec![2]));
    }

    #[test]
    fn a_batch_size_of_zero_still_proposes_one_change_at_a_time() {
        let mut group = GroupCommit::new(0);
        assert_eq!(group.submit(0), Some(vec![0]));
        assert_eq!(group.submit(1), None);
        assert_eq!(group.submit(2), None);
        assert_eq!(group.next_batch(|_| true), Some(vec![1]));
        assert_eq!(group.next_batch(|_| true), Some(vec![2]));
    }
}
