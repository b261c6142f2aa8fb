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
    /// The body is on disk only: `message` is a shared placeholder carrying the priority,
    /// and `paged_len` the body's length.
    pub(super) paged: bool,
    pub(super) paged_len: u32,
    /// Failed deliveries so far (see [`crate::consumer::Delivery::delivery_count`]); two
    /// bytes fit in the entry's padding, so counting costs no memory per message.
    pub(super) delivery_count: u16,
}

impl ReadyMessage {
    /// The body's length in memory: 0 when it is paged out.
    pub(super) fn resident_len(&self) -> u64 {
        if self.paged {
            0
        } else {
            self.message.body.len() as u64
        }
    }

    /// The body's length, whether it is in memory or paged out.
    pub(super) fn body_len(&self) -> u64 {
        if self.paged {
            u64::from(self.paged_len)
        } else {
            self.message.body.len() as u64
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
#[derive(Default)]
pub(super) struct ReadyStore {
    levels: Vec<VecDeque<ReadyMessage>>,
    len: usize,
    /// No level above this holds a message, so front and pop need not scan empty levels.
    top: usize,
}

impl ReadyStore {
    pub(super) fn new(levels: usize) -> ReadyStore {
        ReadyStore {
            levels: (0..levels.max(1)).map(|_| VecDeque::new()).collect(),
            len: 0,
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

    pub(super) fn pop_front(&mut self) -> Option<ReadyMessage> {
        while self.top > 0 && self.levels[self.top].is_empty() {
            self.top -= 1;
        }
        let ready = self.levels[self.top].pop_front()?;
        self.len -= 1;
        Some(ready)
    }

    /// Removes every message for which `expired` holds and hands each one, owned, to
    /// `removed`, in one pass and in place: no copy of the entries, no reallocation of a large
    /// backlog. Returns how many were removed.
    pub(super) fn remove_where(
        &mut self,
        mut expired: impl FnMut(&ReadyMessage) -> bool,
        mut removed: impl FnMut(ReadyMessage),
    ) -> usize {
        let mut count = 0;
        // Stands in for a removed entry until retain drops it: one shared allocation.
        let hole = ReadyMessage {
            id: 0,
            message: paged_placeholder(None),
            redelivered: false,
            expires_at: None,
            store_id: 0,
            paged: true,
            paged_len: 0,
            delivery_count: 0,
        };
        for level in &mut self.levels {
            // Retain compacts in place, keeping order; the removed entries leave by value, in
            // queue order (dead letters keep the order of the queue).
            level.retain_mut(|entry| {
                if !expired(entry) {
                    return true;
                }
                removed(std::mem::replace(entry, hole.clone()));
                count += 1;
                false
            });
        }
        self.len -= count;
        count
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
    }
}
