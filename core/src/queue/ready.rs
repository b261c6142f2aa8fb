//! The ready messages of a queue: one FIFO per priority level.

use std::collections::VecDeque;
use std::sync::{Arc, OnceLock};

use crate::message::{Message, Properties};

/// A message waiting for a consumer.
#[derive(Clone)]
pub(super) struct ReadyMessage {
    pub(super) id: u64,
    pub(super) message: Arc<Message>,
    pub(super) redelivered: bool,
    /// When the message expires (`now_ms` clock), from the queue's and the message's TTL.
    pub(super) expires_at: Option<u64>,
    /// The message store's id when the message is on disk for this queue; 0 when not.
    pub(super) store_id: u64,
    /// The body is on disk only: `message` is a shared placeholder carrying the priority.
    pub(super) paged: bool,
    /// The body's length (`u32::MAX`: that or more, look at the body), kept in the entry so
    /// that counting bytes never reads the message: the expiry pass removes messages whose
    /// memory has long left the cache.
    pub(super) length: u32,
    /// Failed deliveries so far (see [`crate::consumer::Delivery::delivery_count`]); two
    /// bytes fit in the entry's padding, so counting costs no memory per message.
    pub(super) delivery_count: u16,
}

impl ReadyMessage {
    /// What an expired entry leaves behind in its level until it reaches the front or the
    /// level is compacted: a paged entry without a store id, which no real entry is (a paged
    /// body is always in the store). Holds only the shared placeholder.
    fn hole(id: u64) -> ReadyMessage {
        ReadyMessage {
            id,
            message: paged_placeholder(None),
            redelivered: false,
            expires_at: None,
            store_id: 0,
            paged: true,
            length: 0,
            delivery_count: 0,
        }
    }

    fn is_hole(&self) -> bool {
        self.paged && self.store_id == 0
    }

    /// The `length` field for a body of `len` bytes.
    pub(super) fn length_field(len: usize) -> u32 {
        u32::try_from(len).unwrap_or(u32::MAX)
    }

    /// The body's length in memory: 0 when it is paged out.
    pub(super) fn resident_len(&self) -> u64 {
        if self.paged {
            0
        } else {
            self.body_len()
        }
    }

    /// The body's length, whether it is in memory or paged out.
    pub(super) fn body_len(&self) -> u64 {
        if self.length == u32::MAX && !self.paged {
            self.message.body.len() as u64
        } else {
            u64::from(self.length)
        }
    }
}

/// The placeholder message of a paged-out ready message with this priority: one shared
/// allocation per priority, so a paged-out message costs only its index entry.
pub(super) fn paged_placeholder(priority: Option<u8>) -> Arc<Message> {
    static PLACEHOLDERS: OnceLock<Vec<Arc<Message>>> = OnceLock::new();
    let all = PLACEHOLDERS.get_or_init(|| {
        (0..=256u16)
            .map(|p| {
                let mut message = Message {
                    exchange: Arc::from(""),
                    routing_key: Arc::from(""),
                    properties: Properties::default(),
                    encoded_properties: None,
                    body: bytes::Bytes::new(),
                };
                message.properties.priority = u8::try_from(p).ok();
                Arc::new(message)
            })
            .collect()
    });
    Arc::clone(&all[priority.map_or(256, usize::from)])
}

/// Ready messages: one FIFO per priority level (one level for a queue without
/// `x-max-priority`), each in id order so a requeued message goes back to its position.
///
/// The expiry sweep removes messages from anywhere in a level without moving the others: it
/// leaves a hole (see [`ReadyMessage::hole`]) in the entry's place. Holes are skipped, never
/// at the front of a level (they are dropped as soon as they get there), and a level is
/// compacted once holes outnumber its messages.
#[derive(Default)]
pub(super) struct ReadyStore {
    levels: Vec<VecDeque<ReadyMessage>>,
    /// Messages, not counting holes.
    len: usize,
    /// Holes in all levels.
    holes: usize,
    /// No level above this holds a message, so front and pop need not scan empty levels.
    top: usize,
}

/// Where an expiry sweep of a [`ReadyStore`] continues: the level, and the first id not yet
/// looked at in it. Ids stay valid while the lock is released between steps, where indexes
/// would not (pops and requeues move them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct SweepCursor {
    level: usize,
    id: u64,
}

impl ReadyStore {
    pub(super) fn new(levels: usize) -> ReadyStore {
        ReadyStore {
            levels: (0..levels.max(1)).map(|_| VecDeque::new()).collect(),
            len: 0,
            holes: 0,
            top: 0,
        }
    }

    /// The level of a message: its priority, capped at the queue's maximum.
    pub(super) fn level_of(&self, message: &Message) -> usize {
        usize::from(message.properties.priority.unwrap_or(0)).min(self.levels.len() - 1)
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(super) fn push_back(&mut self, ready: ReadyMessage) {
        let level = self.level_of(&ready.message);
        self.levels[level].push_back(ready);
        self.len += 1;
        self.top = self.top.max(level);
    }

    /// Puts a requeued message back at its original position in its level.
    pub(super) fn insert_by_id(&mut self, ready: ReadyMessage) {
        let level = self.level_of(&ready.message);
        let position = self.levels[level].partition_point(|m| m.id < ready.id);
        self.levels[level].insert(position, ready);
        self.len += 1;
        self.top = self.top.max(level);
    }

    /// The next message to deliver: the oldest of the highest non-empty level.
    pub(super) fn front(&self) -> Option<&ReadyMessage> {
        self.levels[..=self.top]
            .iter()
            .rev()
            .find_map(|level| level.front())
    }

    /// The messages in delivery order (highest level first, oldest first in a level),
    /// holes skipped.
    pub(super) fn iter(&self) -> impl Iterator<Item = &ReadyMessage> + '_ {
        self.levels[..=self.top]
            .iter()
            .rev()
            .flat_map(|level| level.iter())
            .filter(|ready| !ready.is_hole())
    }

    pub(super) fn pop_front(&mut self) -> Option<ReadyMessage> {
        while self.top > 0 && self.levels[self.top].is_empty() {
            self.top -= 1;
        }
        let ready = self.levels[self.top].pop_front()?;
        self.len -= 1;
        self.drop_front_holes(self.top);
        Some(ready)
    }

    /// Keeps the front of `level` a message: holes that reached it go.
    fn drop_front_holes(&mut self, level: usize) {
        let level = &mut self.levels[level];
        while level.front().is_some_and(ReadyMessage::is_hole) {
            level.pop_front();
            self.holes -= 1;
        }
    }

    /// One step of an expiry sweep: looks at up to `budget` entries from `cursor` on, and
    /// hands every message for which `expired` holds, owned, to `removed`, leaving a hole in
    /// its place (nothing else moves, so a step over a large backlog writes only what
    /// expired). Returns where the next step continues, or `None` when the sweep reached the
    /// end of the last level.
    pub(super) fn sweep_step(
        &mut self,
        cursor: SweepCursor,
        budget: usize,
        mut expired: impl FnMut(&ReadyMessage) -> bool,
        mut removed: impl FnMut(ReadyMessage),
    ) -> Option<SweepCursor> {
        let mut cursor = cursor;
        let mut budget = budget.max(1);
        while cursor.level < self.levels.len() {
            let level = &mut self.levels[cursor.level];
            let start = level.partition_point(|m| m.id < cursor.id);
            let end = level.len().min(start.saturating_add(budget));
            let mut removed_here = 0;
            for entry in level.range_mut(start..end) {
                if entry.is_hole() || !expired(entry) {
                    continue;
                }
                let hole = ReadyMessage::hole(entry.id);
                removed(std::mem::replace(entry, hole));
                removed_here += 1;
            }
            let finished_level = end == level.len();
            let next_id = level.get(end).map_or(u64::MAX, |m| m.id);
            self.len -= removed_here;
            self.holes += removed_here;
            self.drop_front_holes(cursor.level);
            budget -= end - start;
            if !finished_level {
                return Some(SweepCursor {
                    level: cursor.level,
                    id: next_id,
                });
            }
            self.compact_if_mostly_holes(cursor.level);
            cursor = SweepCursor {
                level: cursor.level + 1,
                id: 0,
            };
            if budget == 0 {
                return (cursor.level < self.levels.len()).then_some(cursor);
            }
        }
        None
    }

    /// Drops the holes of `level` once they outnumber the messages of the whole store, so
    /// holes cost at most about one entry per message.
    fn compact_if_mostly_holes(&mut self, level: usize) {
        if self.holes <= self.len.max(1024) {
            return;
        }
        let before = self.levels[level].len();
        self.levels[level].retain(|m| !m.is_hole());
        self.holes -= before - self.levels[level].len();
    }

    /// The store ids of every ready message that is on disk.
    pub(super) fn store_ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.levels
            .iter()
            .flat_map(|level| level.iter().map(|m| m.store_id))
            .filter(|&id| id != 0)
    }

    pub(super) fn clear(&mut self) {
        for level in &mut self.levels {
            level.clear();
        }
        self.len = 0;
        self.holes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64, priority: u8, expires_at: u64) -> ReadyMessage {
        let mut message = (*paged_placeholder(None)).clone();
        message.properties.priority = Some(priority);
        message.body = bytes::Bytes::from(id.to_string());
        ReadyMessage {
            id,
            message: Arc::new(message),
            redelivered: false,
            expires_at: Some(expires_at),
            store_id: 0,
            paged: false,
            length: ReadyMessage::length_field(id.to_string().len()),
            delivery_count: 0,
        }
    }

    fn drain(store: &mut ReadyStore) -> Vec<u64> {
        std::iter::from_fn(|| store.pop_front().map(|m| m.id)).collect()
    }

    /// Sweeps with `budget` per step until done; returns the ids removed and the steps taken.
    fn sweep(store: &mut ReadyStore, budget: usize, now: u64) -> (Vec<u64>, usize) {
        let (mut removed, mut steps) = (Vec::new(), 0);
        let mut cursor = Some(SweepCursor::default());
        while let Some(at) = cursor {
            steps += 1;
            cursor = store.sweep_step(
                at,
                budget,
                |m| m.expires_at.is_some_and(|e| e < now),
                |m| removed.push(m.id),
            );
        }
        (removed, steps)
    }

    #[test]
    fn a_sweep_in_small_steps_removes_what_expired_from_every_level_and_keeps_order() {
        let mut store = ReadyStore::new(2);
        // Even ids expire at 10, odd ones at 100; ids 0..20 alternate between two levels.
        for id in 0..20u64 {
            store.push_back(entry(
                id,
                (id / 2 % 2) as u8,
                if id % 2 == 0 { 10 } else { 100 },
            ));
        }
        let (removed, steps) = sweep(&mut store, 3, 50);
        assert_eq!(removed.len(), 10);
        assert!(removed.iter().all(|id| id % 2 == 0));
        assert!(steps > 2, "the budget splits the pass into steps");
        assert_eq!(store.len(), 10);
        // The front is never a hole; priority 1 first, each level in id order.
        assert_eq!(store.front().map(|m| m.id), Some(3));
        assert_eq!(drain(&mut store), vec![3, 7, 11, 15, 19, 1, 5, 9, 13, 17]);
        assert!(store.is_empty());
        assert_eq!(store.holes, 0, "holes leave with the messages before them");
    }

    #[test]
    fn a_requeued_message_goes_back_between_holes_in_id_order() {
        let mut store = ReadyStore::new(1);
        for id in 0..6u64 {
            store.push_back(entry(id, 0, if id == 2 || id == 4 { 10 } else { 100 }));
        }
        let first = store.pop_front().unwrap();
        assert_eq!(sweep(&mut store, 100, 50).0, vec![2, 4]);
        store.insert_by_id(first);
        assert_eq!(store.len(), 4);
        assert_eq!(drain(&mut store), vec![0, 1, 3, 5]);
    }

    #[test]
    fn holes_behind_a_long_lived_head_are_compacted_once_they_outnumber_the_messages() {
        let mut store = ReadyStore::new(1);
        store.push_back(entry(0, 0, u64::MAX));
        for id in 1..=3000u64 {
            store.push_back(entry(id, 0, 10));
        }
        assert_eq!(sweep(&mut store, 500, 50).0.len(), 3000);
        assert_eq!(store.len(), 1);
        assert_eq!(store.holes, 0, "3000 holes behind one message are dropped");
        assert_eq!(store.levels[0].len(), 1);
        assert_eq!(drain(&mut store), vec![0]);
    }
}
