//! The writer thread: takes everything pending, appends it to the open segment with one
//! `write`, fsyncs once, publishes the durable sequence number, and deletes or compacts
//! segments whose messages are gone.

use std::collections::BTreeSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::recovery::{self, segment_of, SegmentState};
use super::{record, Event, SegmentFile, Shared, StoreConfig, SEGMENT_EXTENSION};

/// The gap left after a definitions write, as a multiple of its duration (see
/// [`Writer::definitions_due`]), and its ceiling.
const DEFINITIONS_GAP_FACTOR: u32 = 4;
const MAX_DEFINITIONS_GAP: Duration = Duration::from_secs(1);

/// The writer thread's own state: the open segment and every segment's bookkeeping.
pub(super) struct Writer {
    dir: PathBuf,
    segment_size: u64,
    /// Every segment on disk, oldest first; the last one is open for appends.
    segments: Vec<SegmentState>,
    /// (first store id, segment number), ascending, for segments that hold messages.
    index: Vec<(u64, u64)>,
    file: Option<File>,
    size: u64,
    next_segment: u64,
    written_generation: u64,
    /// When the definitions were last written, and how long to leave them before the next
    /// rewrite when only the topology moved (see [`Writer::definitions_due`]).
    definitions_written_at: Option<Instant>,
    definitions_gap: Duration,
    /// The open segment, opened for reading (paged-out messages are read through it).
    reader: Option<Arc<File>>,
    /// The first store id filed under the open segment in [`Locations`], once it has one.
    reader_segment: Option<u64>,
}

impl Writer {
    pub(super) fn new(
        config: &StoreConfig,
        segments: Vec<SegmentState>,
        next: u64,
    ) -> io::Result<Writer> {
        let index = segments
            .iter()
            .filter_map(|s| s.first_id.map(|id| (id, s.number)))
            .collect();
        let mut writer = Writer {
            dir: config.dir.clone(),
            segment_size: config.segment_size.max(1024),
            segments,
            index,
            file: None,
            size: 0,
            next_segment: next,
            written_generation: 0,
            definitions_written_at: None,
            definitions_gap: Duration::ZERO,
            reader: None,
            reader_segment: None,
        };
        writer.start_segment()?;
        Ok(writer)
    }

    /// Opens a fresh segment file (never appends to one left by an earlier run: its tail
    /// may have been cut).
    fn start_segment(&mut self) -> io::Result<()> {
        let number = self.next_segment;
        self.next_segment += 1;
        let path = self.dir.join(format!("{number:012}.{SEGMENT_EXTENSION}"));
        self.file = Some(
            OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(&path)?,
        );
        // The new directory entry must survive a crash too.
        File::open(&self.dir)?.sync_all()?;
        self.reader = Some(Arc::new(File::open(&path)?));
        self.reader_segment = None;
        self.size = 0;
        self.segments.push(SegmentState {
            number,
            path,
            first_id: None,
            live: 0,
            targets: BTreeSet::new(),
            offsets: Vec::new(),
        });
        Ok(())
    }

    /// With no message waiting, how much longer a topology-only change should wait before
    /// the definitions are rewritten (`None`: now). The file is rewritten whole, so a stream
    /// of declarations against thousands of queues would otherwise rewrite it back to back;
    /// leaving a gap of a few times the last write's duration keeps that under a fifth of one
    /// core and gathers the changes into one write. A message to confirm never waits for it.
    fn definitions_due(&self) -> Option<Duration> {
        let written_at = self.definitions_written_at?;
        let ready_at = written_at + self.definitions_gap;
        ready_at
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
    }

    pub(super) fn run(&mut self, shared: &Shared) {
        let mut spare = Vec::new();
        let mut events_spare = Vec::new();
        loop {
            let (mut buffer, mut events, seq, stopping) = {
                let mut pending = shared.pending.lock();
                loop {
                    let idle = pending.buffer.is_empty() && pending.events.is_empty();
                    let topology_moved = shared.topology_generation.load(Ordering::Acquire)
                        != self.written_generation;
                    // Holds taken while the definitions were behind wait for this writer
                    // (see `MessageStore::hold`): like a message, they do not wait the gap.
                    let holds_wait = pending.written_seq < pending.last_seq;
                    if !idle || pending.stopping || holds_wait {
                        break;
                    }
                    if topology_moved {
                        match self.definitions_due() {
                            None => break,
                            Some(left) => {
                                shared.wake.wait_for(&mut pending, left);
                                continue;
                            }
                        }
                    }
                    shared.wake.wait(&mut pending);
                }
                let buffer = std::mem::replace(&mut pending.buffer, std::mem::take(&mut spare));
                let events =
                    std::mem::replace(&mut pending.events, std::mem::take(&mut events_spare));
                pending.in_flight = buffer.len();
                pending.writing = true;
                (buffer, events, pending.last_seq, pending.stopping)
            };
            let generation = shared.topology_generation.load(Ordering::Acquire);
            if generation != self.written_generation {
                if let Some(write_definitions) = shared.definitions.lock().as_ref() {
                    // Like messages: nothing is confirmed before the queues it sits in are
                    // on disk, so a failed write is retried (given up only at shutdown).
                    let started = Instant::now();
                    let mut attempts = 0u32;
                    while let Err(error) = write_definitions() {
                        attempts += 1;
                        if attempts.rem_euclid(100) == 1 {
                            tracing::error!(%error, attempts, "cannot write durable definitions; retrying");
                        }
                        if stopping && attempts >= 10 {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    let now = Instant::now();
                    self.definitions_gap = (now.duration_since(started) * DEFINITIONS_GAP_FACTOR)
                        .min(MAX_DEFINITIONS_GAP);
                    self.definitions_written_at = Some(now);
                }
                self.written_generation = generation;
                shared
                    .written_generation
                    .store(generation, Ordering::Release);
            }
            let (written, base) = self.append_until_written(&buffer, stopping);
            if written {
                self.note_locations(shared, &events, base);
                let durable = {
                    let mut pending = shared.pending.lock();
                    pending.written_seq = pending.written_seq.max(seq);
                    pending.durable_seq()
                };
                shared.durable.send_if_modified(|current| {
                    let moved = durable > *current;
                    if moved {
                        *current = durable;
                    }
                    moved
                });
            }
            for event in events.drain(..) {
                self.account(event);
            }
            if self.size >= self.segment_size {
                if let Err(error) = self.start_segment() {
                    tracing::error!(%error, "message store: cannot start a new segment");
                }
            }
            self.collect_garbage(shared);
            buffer.clear();
            {
                let mut pending = shared.pending.lock();
                pending.in_flight = 0;
                pending.writing = false;
                let definitions_written =
                    shared.topology_generation.load(Ordering::Acquire) == self.written_generation;
                if written
                    && definitions_written
                    && pending.buffer.is_empty()
                    && pending.events.is_empty()
                {
                    // Nothing was submitted meanwhile: every sequence number taken since the
                    // batch (holds only) is written too, and only its hold keeps it back
                    // (unless the topology moved meanwhile: the next round writes it first).
                    pending.written_seq = pending.last_seq;
                    let durable = pending.durable_seq();
                    shared.durable.send_if_modified(|current| {
                        let moved = durable > *current;
                        if moved {
                            *current = durable;
                        }
                        moved
                    });
                }
                if pending.flow_blocked && pending.buffer.len() <= shared.max_unwritten / 2 {
                    pending.flow_blocked = false;
                    shared.flow.send_replace(false);
                }
                let done = stopping && pending.buffer.is_empty() && pending.events.is_empty();
                // Keep one allocation around instead of growing a new buffer every batch.
                if buffer.capacity() <= 4 * 1024 * 1024 {
                    spare = buffer;
                }
                events_spare = events;
                if done {
                    return;
                }
            }
        }
    }

    /// Files the offsets of the publish records just written and releases held messages.
    fn note_locations(&mut self, shared: &Shared, events: &[Event], base: u64) {
        let mut locations = shared.locations.lock();
        let mut highest = locations.written_through;
        for event in events {
            let Event::Published { id, at, .. } = *event else {
                continue;
            };
            highest = highest.max(id);
            let offset = base + at as u64;
            let needs_new =
                locations
                    .segments
                    .range(..=id)
                    .next_back()
                    .is_none_or(|(first, segment)| {
                        first + segment.offsets.len() as u64 != id
                            || self.reader_segment != Some(*first)
                    });
            if needs_new {
                let Some(file) = self.reader.clone() else {
                    continue;
                };
                self.reader_segment = Some(id);
                locations.segments.insert(
                    id,
                    SegmentFile {
                        file,
                        offsets: Vec::new(),
                    },
                );
            }
            if let Some((_, segment)) = locations.segments.range_mut(..=id).next_back() {
                segment.offsets.push(offset);
            }
        }
        locations.written_through = highest;
        if !locations.held.is_empty() {
            let keep = locations.held.split_off(&(highest + 1));
            locations.held = keep;
        }
    }

    /// Writes a batch, retrying (in a fresh segment) until the disk takes it: confirms wait
    /// and, as unwritten bytes pile up, publishers are paused, but nothing is confirmed that
    /// is not on disk. Gives up only while shutting down. Returns whether the batch was
    /// written and the offset it starts at.
    fn append_until_written(&mut self, buffer: &[u8], stopping: bool) -> (bool, u64) {
        if buffer.is_empty() {
            return (true, self.size);
        }
        let mut attempts = 0u32;
        loop {
            let base = self.size;
            let error = match self.append(buffer) {
                Ok(()) => return (true, base),
                Err(error) => error,
            };
            attempts += 1;
            if attempts.rem_euclid(100) == 1 {
                tracing::error!(%error, attempts, "message store: write failed (disk full?); persistent publishes wait until it succeeds");
            }
            if stopping && attempts >= 10 {
                return (false, base);
            }
            // The failed write may have left part of the batch behind: go on in a new segment
            // (recovery skips the damaged tail of the old one).
            if let Err(error) = self.start_segment() {
                tracing::error!(%error, "message store: cannot start a new segment");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| io::Error::other("no open segment"))?;
        let result = file.write_all(bytes).and_then(|()| file.sync_data());
        match result {
            Ok(()) => self.size += bytes.len() as u64,
            // Part of the batch may be in the file: keep offsets true to the file.
            Err(_) => self.size = file.metadata().map_or(self.size, |m| m.len()),
        }
        result
    }

    fn segment_mut(&mut self, number: u64) -> Option<&mut SegmentState> {
        let position = self
            .segments
            .binary_search_by_key(&number, |s| s.number)
            .ok()?;
        self.segments.get_mut(position)
    }

    fn account(&mut self, event: Event) {
        let current = self.segments.last().map_or(0, |s| s.number);
        match event {
            Event::Published { id, refs, .. } => {
                if let Some(segment) = self.segments.last_mut() {
                    if segment.first_id.is_none() {
                        segment.first_id = Some(id);
                        self.index.push((id, segment.number));
                    }
                    segment.live += u64::from(refs);
                }
            }
            Event::Removed { id } => {
                if let Some(target) = segment_of(&self.index, id) {
                    if let Some(segment) = self.segment_mut(target) {
                        segment.live = segment.live.saturating_sub(1);
                    }
                    if target != current {
                        if let Some(segment) = self.segments.last_mut() {
                            segment.targets.insert(target);
                        }
                    }
                }
            }
            Event::Marked { id } => {
                if let Some(target) = segment_of(&self.index, id) {
                    if target != current {
                        if let Some(segment) = self.segments.last_mut() {
                            segment.targets.insert(target);
                        }
                    }
                }
            }
        }
    }

    /// Deletes every closed segment with no live message whose records no longer matter:
    /// every segment its removals refer to is gone already.
    fn collect_garbage(&mut self, shared: &Shared) {
        loop {
            let last = self.segments.len().saturating_sub(1);
            let existing: BTreeSet<u64> = self.segments.iter().map(|s| s.number).collect();
            let Some(position) = self.segments[..last]
                .iter()
                .position(|s| s.live == 0 && s.targets.iter().all(|t| !existing.contains(t)))
            else {
                break;
            };
            self.delete_segment(position, shared);
        }
        self.compact_pinned(shared);
    }

    /// Deletes the segment at `position` of `self.segments`.
    fn delete_segment(&mut self, position: usize, shared: &Shared) {
        // The index keeps the deleted segment's range, so a late id of it can never be taken
        // for an id of the segment before.
        let segment = self.segments.remove(position);
        if let Some(first) = segment.first_id {
            shared.locations.lock().segments.remove(&first);
        }
        match fs::remove_file(&segment.path) {
            Ok(()) => {
                tracing::debug!(file = %segment.path.display(), "message store: segment deleted")
            }
            Err(error) => {
                tracing::warn!(file = %segment.path.display(), %error, "message store: cannot delete segment")
            }
        }
    }

    /// A long-unacknowledged message keeps its segment, and every later segment whose remove
    /// records refer to a segment still there, on disk: a chain. Once `PINNED_SEGMENTS_BEFORE_COMPACTION`
    /// segments without a live message are kept only for their records, the oldest is
    /// compacted: the remove and delivered records that still matter (those about messages in
    /// segments that exist) are appended again to the open segment, then it is deleted. The
    /// next pass can then delete the segments that referred to it.
    fn compact_pinned(&mut self, shared: &Shared) {
        let last = self.segments.len().saturating_sub(1);
        let pinned: Vec<usize> = (0..last).filter(|&i| self.segments[i].live == 0).collect();
        if pinned.len() < PINNED_SEGMENTS_BEFORE_COMPACTION {
            return;
        }
        // Only segments held by a few stragglers: while a backlog drains, segments are
        // pinned by segments with many live messages that will go soon anyway, and carrying
        // their records forward would only write them again.
        let live_of = |number: &u64| {
            self.segments
                .binary_search_by_key(number, |s| s.number)
                .map_or(0, |i| self.segments[i].live)
        };
        let Some(position) = pinned.into_iter().find(|&i| {
            self.segments[i]
                .targets
                .iter()
                .all(|t| live_of(t) <= STRAGGLERS)
        }) else {
            return;
        };
        let number = self.segments[position].number;
        let bytes = match fs::read(&self.segments[position].path) {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::warn!(%error, "message store: cannot read a segment to compact it");
                return;
            }
        };
        let existing: BTreeSet<u64> = self.segments.iter().map(|s| s.number).collect();
        let mut carried = Vec::new();
        let mut targets = BTreeSet::new();
        let mut offset = 0;
        while offset < bytes.len() {
            let (found, used) = match record::read_record(&bytes[offset..]) {
                record::Read::Record(found, used) => (found, used),
                // Recovery skips damage the same way: what it would not read is not carried.
                _ => match recovery::next_good_record(&bytes, offset + 1) {
                    Some(next) => {
                        offset = next;
                        continue;
                    }
                    None => break,
                },
            };
            offset += used;
            let (delivered, queue, ids) = match found {
                record::Record::Remove { queue, ids } => (false, queue, ids),
                record::Record::Delivered { queue, ids } => (true, queue, ids),
                record::Record::Publish { .. } => continue,
            };
            let still_relevant: Vec<u64> = ids
                .into_iter()
                .filter(|id| {
                    segment_of(&self.index, *id).is_some_and(|target| {
                        target != number && existing.contains(&target) && {
                            targets.insert(target);
                            true
                        }
                    })
                })
                .collect();
            if !still_relevant.is_empty() {
                record::encode_ids(&mut carried, delivered, &queue, &still_relevant);
            }
        }
        if !carried.is_empty() {
            let (written, _) = self.append_until_written(&carried, false);
            if !written {
                return;
            }
            if let Some(current) = self.segments.last_mut() {
                current.targets.extend(targets);
            }
        }
        tracing::debug!(
            segment = number,
            carried = carried.len(),
            "message store: segment compacted"
        );
        self.delete_segment(position, shared);
    }
}

/// Closed segments without a live message, kept only because of their records, before the
/// oldest is compacted (see `Writer::compact_pinned`).
const PINNED_SEGMENTS_BEFORE_COMPACTION: usize = 4;

/// Live messages in a segment few enough to call them stragglers (see `compact_pinned`).
const STRAGGLERS: u64 = 64;
