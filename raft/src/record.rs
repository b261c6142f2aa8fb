//! The record format shared by WAL files and group segment files.
//!
//! Every record is framed as `magic u32 | length u32 | crc32 u32 | payload`, little-endian,
//! the CRC over the payload (the message store's framing, see docs/storage.md). A payload is
//! `group u64 | kind u8 | body`:
//!
//! - `1` entry: `index u64 | term u64 | leader u64 | payload kind u8 | ...` with payload
//!   `0` blank, `1` normal (`at u64 | quorum command`), `2` membership
//! - `2` vote: `term u64 | node u64 | committed u8`
//! - `3` truncate: `from index u64` (entries from there on are removed)
//! - `4` purge: `index u64 | term u64 | leader u64` (entries up to there are removed)
//! - `5` committed: `present u8 | index u64 | term u64 | leader u64`
//! - `6` remove: empty (the group was deleted: forget everything before)
//!
//! Replaying any prefix of the records in order gives a valid log state, and replaying a
//! sequence twice gives the same state as once (every record sets keys to constants), which
//! is what lets a crash between writing a segment and deleting its WAL file be harmless.

use std::collections::{BTreeMap, BTreeSet};

use openraft::{BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership, Vote};
use warren_core::quorum::codec::{decode_command, encode_command};

use crate::{GroupId, Stamped, TypeConfig};

const MAGIC: u32 = 0x5752_4C57; // "WLRW"
pub(crate) const HEADER_LEN: usize = 12;
const MAX_PAYLOAD: u32 = 512 * 1024 * 1024;

/// What a record does to its group's log state.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    Entry(Entry<TypeConfig>),
    Vote(Vote<u64>),
    Truncate(u64),
    Purge(LogId<u64>),
    Committed(Option<LogId<u64>>),
    Remove,
}

/// Appends one framed record.
pub(crate) fn encode(out: &mut Vec<u8>, group: GroupId, op: &Op) {
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    out.extend_from_slice(&group.to_le_bytes());
    match op {
        Op::Entry(entry) => {
            out.push(1);
            put_entry(out, entry);
        }
        Op::Vote(vote) => {
            out.push(2);
            out.extend_from_slice(&vote.leader_id.term.to_le_bytes());
            out.extend_from_slice(&vote.leader_id.node_id.to_le_bytes());
            out.push(u8::from(vote.committed));
        }
        Op::Truncate(from) => {
            out.push(3);
            out.extend_from_slice(&from.to_le_bytes());
        }
        Op::Purge(log_id) => {
            out.push(4);
            put_log_id(out, log_id);
        }
        Op::Committed(log_id) => {
            out.push(5);
            put_opt_log_id(out, log_id.as_ref());
        }
        Op::Remove => out.push(6),
    }
    let payload = &out[start + HEADER_LEN..];
    let length = payload.len() as u32;
    let crc = crc32fast::hash(payload);
    out[start + 4..start + 8].copy_from_slice(&length.to_le_bytes());
    out[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
}

/// What reading at an offset found.
pub(crate) enum Read {
    /// A record, and the bytes it took.
    Record(GroupId, Op, usize),
    /// The bytes end inside a record, or it is damaged: a torn or corrupted tail.
    Torn,
    /// No bytes left.
    End,
}

/// Reads the record at the start of `bytes`.
pub(crate) fn read(bytes: &[u8]) -> Read {
    if bytes.is_empty() {
        return Read::End;
    }
    if bytes.len() < HEADER_LEN {
        return Read::Torn;
    }
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let length = word(4);
    if word(0) != MAGIC || length == 0 || length > MAX_PAYLOAD {
        return Read::Torn;
    }
    let end = HEADER_LEN + length as usize;
    if bytes.len() < end {
        return Read::Torn;
    }
    let payload = &bytes[HEADER_LEN..end];
    if crc32fast::hash(payload) != word(8) {
        return Read::Torn;
    }
    match decode_payload(payload) {
        Some((group, op)) => Read::Record(group, op, end),
        None => Read::Torn,
    }
}

/// A record's group, and its index when it is an entry, read without decoding the entry:
/// what splitting a WAL file into segments needs. `None` at the end or at a bad record.
pub(crate) fn peek(bytes: &[u8]) -> Option<(GroupId, Option<u64>, usize)> {
    if bytes.len() < HEADER_LEN {
        return None;
    }
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let length = word(4);
    if word(0) != MAGIC || length == 0 || length > MAX_PAYLOAD {
        return None;
    }
    let end = HEADER_LEN + length as usize;
    let payload = bytes.get(HEADER_LEN..end)?;
    if crc32fast::hash(payload) != word(8) {
        return None;
    }
    let mut r = Reader(payload);
    let group = r.u64()?;
    let index = match r.u8()? {
        1 => Some(r.u64()?),
        _ => None,
    };
    Some((group, index, end))
}

fn decode_payload(payload: &[u8]) -> Option<(GroupId, Op)> {
    let mut r = Reader(payload);
    let group = r.u64()?;
    let op = match r.u8()? {
        1 => {
            let entry = r.entry(r.0.len())?;
            Op::Entry(entry)
        }
        2 => {
            let term = r.u64()?;
            let node = r.u64()?;
            let committed = r.u8()? == 1;
            let mut vote = Vote::new(term, node);
            vote.committed = committed;
            Op::Vote(vote)
        }
        3 => Op::Truncate(r.u64()?),
        4 => Op::Purge(r.log_id()?),
        5 => Op::Committed(r.opt_log_id()?),
        6 => Op::Remove,
        _ => return None,
    };
    r.0.is_empty().then_some((group, op))
}

/// An entry: `index u64 | term u64 | leader u64 | payload kind u8 | ...`, the payload `0`
/// blank, `1` normal (`at u64 | quorum command`), `2` membership. A normal entry's command runs
/// to the end of the bytes given to [`Reader::entry`].
pub(crate) fn put_entry(out: &mut Vec<u8>, entry: &Entry<TypeConfig>) {
    put_log_id(out, &entry.log_id);
    match &entry.payload {
        EntryPayload::Blank => out.push(0),
        EntryPayload::Normal(stamped) => {
            out.push(1);
            out.extend_from_slice(&stamped.at.to_le_bytes());
            encode_command(out, &stamped.command);
        }
        EntryPayload::Membership(membership) => {
            out.push(2);
            put_membership(out, membership);
        }
    }
}

pub(crate) fn put_log_id(out: &mut Vec<u8>, log_id: &LogId<u64>) {
    out.extend_from_slice(&log_id.index.to_le_bytes());
    out.extend_from_slice(&log_id.leader_id.term.to_le_bytes());
    out.extend_from_slice(&log_id.leader_id.node_id.to_le_bytes());
}

pub(crate) fn put_opt_log_id(out: &mut Vec<u8>, log_id: Option<&LogId<u64>>) {
    match log_id {
        Some(log_id) => {
            out.push(1);
            put_log_id(out, log_id);
        }
        None => out.push(0),
    }
}

pub(crate) fn put_membership(out: &mut Vec<u8>, membership: &Membership<u64, BasicNode>) {
    let configs = membership.get_joint_config();
    out.extend_from_slice(&(configs.len() as u32).to_le_bytes());
    for config in configs {
        out.extend_from_slice(&(config.len() as u32).to_le_bytes());
        for id in config {
            out.extend_from_slice(&id.to_le_bytes());
        }
    }
    let nodes: Vec<(&u64, &BasicNode)> = membership.nodes().collect();
    out.extend_from_slice(&(nodes.len() as u32).to_le_bytes());
    for (id, node) in nodes {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&(node.addr.len() as u32).to_le_bytes());
        out.extend_from_slice(node.addr.as_bytes());
    }
}

/// A bounds-checked reader.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }
    pub(crate) fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
    pub(crate) fn log_id(&mut self) -> Option<LogId<u64>> {
        let index = self.u64()?;
        let term = self.u64()?;
        let node = self.u64()?;
        Some(LogId::new(CommittedLeaderId::new(term, node), index))
    }
    pub(crate) fn opt_log_id(&mut self) -> Option<Option<LogId<u64>>> {
        match self.u8()? {
            0 => Some(None),
            1 => self.log_id().map(Some),
            _ => None,
        }
    }
    /// An entry written by [`put_entry`] in the next `length` bytes.
    pub(crate) fn entry(&mut self, length: usize) -> Option<Entry<TypeConfig>> {
        let mut r = Reader(self.take(length)?);
        let log_id = r.log_id()?;
        let payload = match r.u8()? {
            0 => EntryPayload::Blank,
            1 => {
                let at = r.u64()?;
                let command = decode_command(r.rest()).ok()?;
                EntryPayload::Normal(Stamped { at, command })
            }
            2 => EntryPayload::Membership(r.membership()?),
            _ => return None,
        };
        r.0.is_empty().then_some(Entry { log_id, payload })
    }
    pub(crate) fn count(&mut self, item: usize) -> Option<usize> {
        let count = self.u32()? as usize;
        (count <= self.0.len() / item).then_some(count)
    }
    pub(crate) fn membership(&mut self) -> Option<Membership<u64, BasicNode>> {
        let configs = self.count(4)?;
        let mut joint = Vec::with_capacity(configs);
        for _ in 0..configs {
            let ids = self.count(8)?;
            let mut set = BTreeSet::new();
            for _ in 0..ids {
                set.insert(self.u64()?);
            }
            joint.push(set);
        }
        let nodes = self.count(12)?;
        let mut map = BTreeMap::new();
        for _ in 0..nodes {
            let id = self.u64()?;
            let length = self.u32()? as usize;
            let addr = String::from_utf8(self.take(length)?.to_vec()).ok()?;
            map.insert(id, BasicNode { addr });
        }
        Some(Membership::new(joint, map))
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
