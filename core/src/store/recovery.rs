//! Reading the segment files back at boot: replay every record in order, rebuild each durable
//! queue's live messages, and rebuild the writer's per-segment bookkeeping.
//!
//! A record that fails its checksum at the very end of the newest segment is a write the crash
//! cut short: it was never fsynced, so it was never confirmed, and it is cut off. A damaged
//! record anywhere else is logged with its file and offset; recovery then looks for the next
//! record magic whose checksum holds and carries on, so one bad sector costs only the records
//! it hit.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::message::Message;

use super::record::{read_record, read_record_at, QueueName, Read, Record, HEADER_LEN, MAGIC};
use super::SEGMENT_EXTENSION;

/// A message that comes back into a durable queue after a restart.
#[derive(Debug, Clone)]
pub struct RecoveredMessage {
    /// The store's id (queues keep it to record acks).
    pub store_id: u64,
    /// The message, for the first `queue_max_in_memory` messages of each queue; `None` for
    /// the rest, which stay on disk (paged out) until delivered.
    pub message: Option<Arc<Message>>,
    /// Delivered before the restart and not settled.
    pub redelivered: bool,
    /// The message's priority property (a paged-out message still needs its level).
    pub priority: Option<u8>,
    /// The body's length.
    pub body_len: u32,
    /// The message's own TTL (`expiration`), in milliseconds.
    pub expiration_ms: Option<u64>,
}

/// What recovery keeps per live message while it replays: where it is and what a queue needs
/// to hold it paged out. The message itself is read again only if it will be in memory.
#[derive(Debug, Clone, Copy)]
struct MessageMeta {
    segment: u64,
    offset: u64,
    body_len: u32,
    priority: Option<u8>,
    expiration_ms: Option<u64>,
}

/// A place where recovery skipped damaged bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The segment file.
    pub file: PathBuf,
    /// Byte offset of the first damaged byte.
    pub offset: u64,
    /// How many bytes were skipped.
    pub skipped: u64,
}

/// What recovery did, for the log and for tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Segment files read.
    pub segments: usize,
    /// Good records replayed.
    pub records: u64,
    /// Damaged regions skipped in the middle of the store.
    pub damaged: Vec<Damage>,
    /// A torn record cut off the end of the newest segment: (file, offset it was cut at).
    pub torn_tail: Option<(PathBuf, u64)>,
}

/// One segment as the writer tracks it.
#[derive(Debug)]
pub(super) struct SegmentState {
    pub(super) number: u64,
    pub(super) path: PathBuf,
    /// The lowest store id published in this segment.
    pub(super) first_id: Option<u64>,
    /// (queue, message) references to messages of this segment still alive.
    pub(super) live: u64,
    /// Older segments whose messages this segment's remove/delivered records refer to:
    /// while one of them exists, deleting this segment would lose those records.
    pub(super) targets: BTreeSet<u64>,
    /// Offsets of the publish records, in store id order (ids are contiguous per segment).
    pub(super) offsets: Vec<u64>,
}

/// Everything the store found on disk.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Live messages per durable queue, in store-id (publish) order.
    pub queues: BTreeMap<QueueName, Vec<RecoveredMessage>>,
    /// What was read and skipped.
    pub report: RecoveryReport,
    pub(super) segments: Vec<SegmentState>,
    pub(super) next_store_id: u64,
    pub(super) next_segment: u64,
}

/// The segment files in `dir`, oldest first.
pub(super) fn segment_files(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some(SEGMENT_EXTENSION) {
            continue;
        }
        let number = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok());
        if let Some(number) = number {
            found.push((number, path));
        }
    }
    found.sort();
    Ok(found)
}

/// Finds the segment holding `id` among segments sorted by `first_id`.
pub(super) fn segment_of(index: &[(u64, u64)], id: u64) -> Option<u64> {
    let position = index.partition_point(|(first, _)| *first <= id);
    (position > 0).then(|| index[position - 1].1)
}

/// Replays every segment in `dir`; the first `in_memory` live messages of each queue are
/// read into memory, the others are returned as index entries only.
pub(super) fn recover(dir: &Path, in_memory: usize) -> io::Result<Recovered> {
    let files = segment_files(dir)?;
    let mut report = RecoveryReport {
        segments: files.len(),
        ..RecoveryReport::default()
    };
    let mut messages: HashMap<u64, MessageMeta> = HashMap::new();
    let mut queues: BTreeMap<QueueName, BTreeMap<u64, bool>> = BTreeMap::new();
    let mut segments: Vec<SegmentState> = Vec::new();
    let mut index: Vec<(u64, u64)> = Vec::new();
    let mut next_store_id = 1;
    let last = files.len().saturating_sub(1);
    for (position, (number, path)) in files.iter().enumerate() {
        let bytes = bytes::Bytes::from(fs::read(path)?);
        let mut segment = SegmentState {
            number: *number,
            path: path.clone(),
            first_id: None,
            live: 0,
            targets: BTreeSet::new(),
            offsets: Vec::new(),
        };
        let mut offset = 0usize;
        while offset < bytes.len() {
            match read_record_at(&bytes, offset) {
                Read::Record(record, used) => {
                    report.records += 1;
                    let published = match &record {
                        Record::Publish { store_id, .. } => Some(*store_id),
                        _ => None,
                    };
                    apply(
                        record,
                        offset as u64,
                        &mut segment,
                        &mut index,
                        &mut messages,
                        &mut queues,
                        &mut next_store_id,
                    );
                    if let Some(store_id) = published {
                        note_offset(&mut segment, store_id, offset as u64);
                    }
                    offset += used;
                }
                Read::Incomplete if position == last => {
                    cut_tail(path, offset, &mut report)?;
                    break;
                }
                Read::Incomplete | Read::Damaged => match next_good_record(&bytes, offset + 1) {
                    Some(next) => {
                        tracing::error!(
                            file = %path.display(),
                            offset,
                            skipped = next - offset,
                            "message store: damaged record skipped; the records after it are kept"
                        );
                        report.damaged.push(Damage {
                            file: path.clone(),
                            offset: offset as u64,
                            skipped: (next - offset) as u64,
                        });
                        offset = next;
                    }
                    None if position == last => {
                        cut_tail(path, offset, &mut report)?;
                        break;
                    }
                    None => {
                        tracing::error!(
                            file = %path.display(),
                            offset,
                            skipped = bytes.len() - offset,
                            "message store: damaged bytes at the end of a segment skipped"
                        );
                        report.damaged.push(Damage {
                            file: path.clone(),
                            offset: offset as u64,
                            skipped: (bytes.len() - offset) as u64,
                        });
                        break;
                    }
                },
            }
        }
        segments.push(segment);
    }
    let mut recovered_queues = BTreeMap::new();
    let mut readers: HashMap<u64, fs::File> = HashMap::new();
    for (queue, ids) in queues {
        let mut list = Vec::with_capacity(ids.len());
        for (id, delivered) in ids {
            let Some(meta) = messages.get(&id) else {
                continue;
            };
            if let Ok(position) = segments.binary_search_by_key(&meta.segment, |s| s.number) {
                segments[position].live += 1;
            }
            let message = if list.len() < in_memory {
                let path = &segments
                    .iter()
                    .find(|s| s.number == meta.segment)
                    .map(|s| s.path.clone());
                let file = match (readers.get(&meta.segment), path) {
                    (Some(_), _) => None,
                    (None, Some(path)) => Some(fs::File::open(path)?),
                    (None, None) => None,
                };
                if let Some(file) = file {
                    readers.insert(meta.segment, file);
                }
                match readers.get(&meta.segment) {
                    Some(file) => Some(super::read_message_at(file, meta.offset, id)?),
                    None => None,
                }
            } else {
                None
            };
            list.push(RecoveredMessage {
                store_id: id,
                message,
                redelivered: delivered,
                priority: meta.priority,
                body_len: meta.body_len,
                expiration_ms: meta.expiration_ms,
            });
        }
        if !list.is_empty() {
            recovered_queues.insert(queue, list);
        }
    }
    let next_segment = files.last().map_or(1, |(n, _)| n + 1);
    Ok(Recovered {
        queues: recovered_queues,
        report,
        segments,
        next_store_id,
        next_segment,
    })
}

fn apply(
    record: Record,
    offset: u64,
    segment: &mut SegmentState,
    index: &mut Vec<(u64, u64)>,
    messages: &mut HashMap<u64, MessageMeta>,
    queues: &mut BTreeMap<QueueName, BTreeMap<u64, bool>>,
    next_store_id: &mut u64,
) {
    match record {
        Record::Publish {
            store_id,
            queues: targets,
            message,
        } => {
            if segment.first_id.is_none() {
                segment.first_id = Some(store_id);
                index.push((store_id, segment.number));
            }
            *next_store_id = (*next_store_id).max(store_id + 1);
            messages.insert(
                store_id,
                MessageMeta {
                    segment: segment.number,
                    offset,
                    body_len: u32::try_from(message.body.len()).unwrap_or(u32::MAX),
                    priority: message.properties.priority,
                    expiration_ms: message.properties.expiration_ms(),
                },
            );
            for queue in targets {
                queues.entry(queue).or_default().insert(store_id, false);
            }
        }
        Record::Remove { queue, ids } => {
            note_targets(segment, index, &ids);
            if let Some(live) = queues.get_mut(&queue) {
                for id in ids {
                    live.remove(&id);
                }
            }
        }
        Record::Delivered { queue, ids } => {
            note_targets(segment, index, &ids);
            if let Some(live) = queues.get_mut(&queue) {
                for id in ids {
                    if let Some(delivered) = live.get_mut(&id) {
                        *delivered = true;
                    }
                }
            }
        }
    }
}

fn note_targets(segment: &mut SegmentState, index: &[(u64, u64)], ids: &[u64]) {
    for id in ids {
        if let Some(target) = segment_of(index, *id) {
            if target != segment.number {
                segment.targets.insert(target);
            }
        }
    }
}

/// Files the offset of a publish record; a gap left by a damaged record is filled with
/// offsets that never read back as anything.
fn note_offset(segment: &mut SegmentState, store_id: u64, offset: u64) {
    let first = *segment.first_id.get_or_insert(store_id);
    let Some(index) = store_id
        .checked_sub(first)
        .and_then(|i| usize::try_from(i).ok())
    else {
        return;
    };
    if index > segment.offsets.len() + 1_000_000 {
        return;
    }
    while segment.offsets.len() < index {
        segment.offsets.push(u64::MAX);
    }
    if segment.offsets.len() == index {
        segment.offsets.push(offset);
    }
}

/// The offset of the next record at or after `from` whose checksum holds.
pub(super) fn next_good_record(bytes: &[u8], from: usize) -> Option<usize> {
    let magic = MAGIC.to_le_bytes();
    let mut at = from;
    while at + HEADER_LEN <= bytes.len() {
        let found = bytes[at..].windows(4).position(|w| w == magic)?;
        at += found;
        if let Read::Record(..) = read_record(&bytes[at..]) {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// Cuts a torn write off the end of the newest segment.
fn cut_tail(path: &Path, offset: usize, report: &mut RecoveryReport) -> io::Result<()> {
    tracing::warn!(
        file = %path.display(),
        offset,
        "message store: incomplete record at the end of the newest segment (a write cut short by a crash) removed"
    );
    let file = fs::OpenOptions::new().write(true).open(path)?;
    file.set_len(offset as u64)?;
    file.sync_all()?;
    report.torn_tail = Some((path.to_path_buf(), offset as u64));
    Ok(())
}
