//! One stream's log: recovery, the group-committing writer thread, and the shared view
//! readers and the management API read.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use super::chunk::{ChunkBuilder, ChunkType};
use super::reader::{OffsetSpec, StreamReader};
use super::retention::{segments_to_delete, PolicyLimits, SegmentFacts, StreamSettings};
use super::segment::{self, IndexEntry, IndexFile, SEGMENT_HEADER};
use super::single_active::ConsumerGroups;
use super::tracking::{encode_pairs, Tracking};

/// Most records in one chunk (the header counts entries in 16 bits).
const MAX_CHUNK_RECORDS: u32 = 4_000;
/// A chunk is closed once its data reaches this many bytes.
const MAX_CHUNK_DATA: usize = 1 << 20;
/// How often an idle writer applies age retention.
const RETENTION_TICK: Duration = Duration::from_secs(1);

/// One record to append.
#[derive(Debug, Clone)]
pub struct Record {
    /// The message as the publisher sent it (an AMQP 1.0 message from stream clients).
    pub body: Bytes,
    /// The publisher's id for it (deduplication, confirms).
    pub publishing_id: u64,
    /// Its `x-stream-filter-value`, if any.
    pub filter: Option<String>,
}

/// What a publish came to once its chunk is on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The publishing ids to confirm: every record written, and every duplicate (a named
    /// producer's id at or below its last one), which is confirmed but not written again.
    pub confirmed: Vec<u64>,
    /// How many of them were duplicates.
    pub duplicates: usize,
}

/// Called once a publish is on disk (or failed).
pub type OnWritten = Box<dyn FnOnce(Result<Written, String>) + Send>;

/// A batch of records from one publisher.
pub struct Publish {
    /// The producer reference (`DeclarePublisher`): when given, ids at or below the last
    /// one written for it are duplicates.
    pub producer: Option<String>,
    /// The records.
    pub records: Vec<Record>,
    /// Told when the records are durable.
    pub on_written: OnWritten,
}

/// A segment as the shared view knows it.
#[derive(Debug, Clone)]
pub(crate) struct SegmentInfo {
    pub first_offset: u64,
    pub path: PathBuf,
    pub index_path: PathBuf,
    /// Committed bytes (readers never read past them).
    pub size: u64,
    /// Committed chunks (index entries readers may use).
    pub chunks: u64,
    pub first_timestamp: Option<i64>,
    pub newest_timestamp: Option<i64>,
    /// The offset after its last record.
    pub end_offset: u64,
}

/// The committed state, shared by the writer, readers and operators.
pub(crate) struct Shared {
    pub segments: Vec<SegmentInfo>,
    /// The offset the next record gets, once committed.
    pub next_offset: u64,
    /// The first offset of the newest user chunk, and where it is.
    pub last_chunk: Option<(u64, u64, u64)>,
    /// Offsets stored by consumers (updated at once) and producers' committed sequences.
    pub tracking: Tracking,
    /// The epoch of the newest chunk (0 when there is none).
    pub last_epoch: u64,
    /// How many chunks without records end the log (tracking chunks at `next_offset`): a
    /// replica tells the leader, which skips as many when it sends from `next_offset`.
    pub tail_zero_chunks: u64,
}

pub(super) struct Queue {
    pub(super) publishes: Vec<Publish>,
    offsets: Vec<(String, u64)>,
    pub(super) ops: Vec<super::replica::WriterOp>,
    stop: bool,
}

pub(crate) struct Inner {
    pub name: String,
    pub dir: PathBuf,
    pub settings: StreamSettings,
    /// The settings in force: the arguments' with a policy's limits in their place.
    pub effective: Mutex<StreamSettings>,
    pub shared: Mutex<Shared>,
    pub(super) queue: Mutex<Queue>,
    pub(super) wake: Condvar,
    /// Replication on a cluster: the stream's placement, this node's role, and the
    /// publishes waiting for a majority.
    pub(super) replication: Mutex<super::replica::ReplicationState>,
    /// The committed next offset; readers wait for it to move.
    pub committed: watch::Sender<u64>,
    pub deleted: AtomicBool,
    /// Readers stop before a chunk ending past this offset: on a cluster, what a majority
    /// of the members has (as osiris reads only committed chunks); `u64::MAX` on a single
    /// node. Moving it wakes readers through `committed`.
    pub readable: std::sync::atomic::AtomicU64,
}

/// A stream's statistics (management API, `StreamStats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStats {
    /// The first offset still kept.
    pub first_offset: u64,
    /// The offset the next record gets.
    pub next_offset: u64,
    /// The first offset of the newest chunk (`committed_chunk_id`), if any.
    pub last_chunk_offset: Option<u64>,
    /// Segment files.
    pub segments: usize,
    /// Bytes on disk.
    pub bytes: u64,
}

/// An open stream: appends go to its writer thread, readers read its files.
pub struct StreamLog {
    pub(super) inner: Arc<Inner>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    consumer_groups: Arc<ConsumerGroups>,
}

/// Milliseconds since the Unix epoch, as chunk timestamps count them.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl StreamLog {
    /// Opens (or creates) the stream kept in `dir`, recovering it after a crash: the newest
    /// segment is scanned, a torn or corrupt tail is cut off, its index rebuilt, and the
    /// consumer offsets and producer sequences replayed.
    pub fn open(name: &str, dir: &Path, settings: StreamSettings) -> io::Result<Arc<StreamLog>> {
        std::fs::create_dir_all(dir)?;
        let recovered = recover(dir)?;
        let (committed, _) = watch::channel(recovered.shared.next_offset);
        let inner = Arc::new(Inner {
            name: name.to_owned(),
            dir: dir.to_owned(),
            effective: Mutex::new(settings.clone()),
            settings,
            shared: Mutex::new(recovered.shared),
            queue: Mutex::new(Queue {
                publishes: Vec::new(),
                offsets: Vec::new(),
                ops: Vec::new(),
                stop: false,
            }),
            wake: Condvar::new(),
            replication: Mutex::new(super::replica::ReplicationState::load(dir)),
            committed,
            deleted: AtomicBool::new(false),
            readable: std::sync::atomic::AtomicU64::new(u64::MAX),
        });
        if inner.replication.lock().is_clustered() {
            // A member restarting: nothing is readable until the leader says what is
            // committed (or, leading, until a majority has it).
            inner.readable.store(0, Ordering::Release);
        }
        let writer = Writer {
            inner: Arc::clone(&inner),
            segment: recovered.segment,
            index: recovered.index,
            producers: recovered.producers,
            last_timestamp: recovered.last_timestamp,
        };
        let handle = std::thread::Builder::new()
            .name(format!("stream {name}"))
            .spawn(move || writer.run())?;
        Ok(Arc::new(StreamLog {
            inner,
            writer: Mutex::new(Some(handle)),
            consumer_groups: Arc::default(),
        }))
    }

    /// The stream's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The stream's single-active-consumer groups.
    pub fn consumer_groups(&self) -> &Arc<ConsumerGroups> {
        &self.consumer_groups
    }

    /// The stream's settings from its arguments.
    pub fn settings(&self) -> &StreamSettings {
        &self.inner.settings
    }

    /// The settings in force: the arguments' with the applying policy's limits in their
    /// place.
    pub fn effective_settings(&self) -> StreamSettings {
        self.inner.effective.lock().clone()
    }

    /// A policy's limits now apply (all `None`: no policy, the arguments alone). Retention
    /// runs at once with them; a new segment size applies from the next chunk written.
    pub fn set_policy(&self, limits: &PolicyLimits) {
        let effective = self.inner.settings.with_policy(limits);
        {
            let mut current = self.inner.effective.lock();
            if *current == effective {
                return;
            }
            *current = effective;
        }
        tracing::info!(stream = %self.inner.name, ?limits, "a policy sets the stream's retention");
        apply_retention(&self.inner, now_ms());
    }

    /// Queues records for the writer; `on_written` is called from the writer thread once
    /// the chunk holding them is on disk. Fails at once on a deleted stream.
    pub fn publish(&self, publish: Publish) {
        if self.is_deleted() {
            (publish.on_written)(Err(format!("stream '{}' was deleted", self.inner.name)));
            return;
        }
        if let Some(refusal) = self.refuses_publishes() {
            (publish.on_written)(Err(refusal));
            return;
        }
        let mut queue = self.inner.queue.lock();
        queue.publishes.push(publish);
        self.inner.wake.notify_one();
    }

    /// Stores a consumer's offset under `reference`: queryable at once, written to the log
    /// with the next chunk.
    pub fn store_offset(&self, reference: &str, offset: u64) {
        self.inner
            .shared
            .lock()
            .tracking
            .offsets
            .insert(reference.to_owned(), offset);
        let mut queue = self.inner.queue.lock();
        queue.offsets.push((reference.to_owned(), offset));
        self.inner.wake.notify_one();
    }

    /// The offset stored under `reference`.
    pub fn query_offset(&self, reference: &str) -> Option<u64> {
        self.inner
            .shared
            .lock()
            .tracking
            .offsets
            .get(reference)
            .copied()
    }

    /// The last publishing id written for producer `reference` (0 when none, as RabbitMQ
    /// answers `QueryPublisherSequence`).
    pub fn producer_sequence(&self, reference: &str) -> u64 {
        self.inner
            .shared
            .lock()
            .tracking
            .producers
            .get(reference)
            .copied()
            .unwrap_or(0)
    }

    /// Statistics.
    pub fn stats(&self) -> LogStats {
        let shared = self.inner.shared.lock();
        LogStats {
            first_offset: shared.segments.first().map_or(0, |s| s.first_offset),
            next_offset: shared.next_offset,
            last_chunk_offset: shared.last_chunk.map(|(offset, _, _)| offset),
            segments: shared.segments.len(),
            bytes: shared.segments.iter().map(|s| s.size).sum(),
        }
    }

    /// A reader positioned at `spec`, delivering only chunks that may hold one of
    /// `filter`'s values (all chunks when `filter` is `None`).
    pub fn reader(&self, spec: OffsetSpec) -> io::Result<StreamReader> {
        StreamReader::new(Arc::clone(&self.inner), spec)
    }

    /// Resolves `spec` to the offset a reader would start at.
    pub fn resolve(&self, spec: OffsetSpec) -> io::Result<u64> {
        Ok(self.reader(spec)?.start_offset())
    }

    /// Tells when the committed end moves (or the stream is deleted).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.committed.subscribe()
    }

    /// Whether the stream was deleted.
    pub fn is_deleted(&self) -> bool {
        self.inner.deleted.load(Ordering::Acquire)
    }

    /// Applies retention now (the writer also does after each segment and every second).
    pub fn apply_retention(&self) {
        apply_retention(&self.inner, now_ms());
    }

    /// Stops the writer after what is queued, then deletes the stream's files; readers and
    /// later publishes see it deleted.
    pub fn delete(&self) -> io::Result<()> {
        self.inner.deleted.store(true, Ordering::Release);
        self.stop();
        self.inner.committed.send_modify(|_| {});
        std::fs::remove_dir_all(&self.inner.dir)
    }

    /// Stops the writer thread once it has written what is queued.
    pub fn stop(&self) {
        self.inner.queue.lock().stop = true;
        self.inner.wake.notify_one();
        if let Some(handle) = self.writer.lock().take() {
            let _ = handle.join();
        }
    }
}

impl Drop for StreamLog {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for StreamLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamLog")
            .field("name", &self.inner.name)
            .finish()
    }
}

pub(super) struct Recovered {
    pub(super) shared: Shared,
    pub(super) segment: File,
    pub(super) index: File,
    pub(super) producers: HashMap<String, u64>,
    pub(super) last_timestamp: i64,
}

pub(super) fn recover(dir: &Path) -> io::Result<Recovered> {
    let mut firsts = segment::list_segments(dir)?;
    let mut tracking = Tracking::default();
    let mut last_epoch = 0;
    // The newest segment holding a chunk is the live one; empty newer ones (a crash right
    // after a roll) are removed.
    let mut live = None;
    while let Some(first) = firsts.pop() {
        let (path, index_path) = segment::segment_paths(dir, first);
        let mut replay = Tracking::default();
        let mut epoch = 0;
        let (entries, valid) = segment::scan_segment(&path, |chunk| {
            epoch = chunk.header.epoch;
            match chunk.header.chunk_type {
                ChunkType::TrackingSnapshot => replay.apply_snapshot(&chunk.data),
                ChunkType::TrackingDelta => replay.apply_offsets(&chunk.data),
                ChunkType::User => replay.apply_producers(&chunk.trailer),
            };
        })?;
        if entries.is_empty() && !firsts.is_empty() {
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::remove_file(&index_path);
            continue;
        }
        tracking = replay;
        last_epoch = epoch;
        live = Some((first, path, index_path, entries, valid));
        break;
    }
    let mut segments = Vec::new();
    for first in firsts {
        let (path, index_path) = segment::segment_paths(dir, first);
        let entries = match segment::read_index(&index_path) {
            Some(entries) if !entries.is_empty() => entries,
            _ => {
                let (entries, _) = segment::scan_segment(&path, |_| {})?;
                segment::write_index(&index_path, &entries)?;
                entries
            }
        };
        let size = std::fs::metadata(&path)?.len();
        segments.push(info(first, path, index_path, size, &entries));
    }
    let (segment_file, index_file) = match live {
        Some((first, path, index_path, entries, valid)) => {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)?;
            let valid = valid.max(SEGMENT_HEADER.len() as u64);
            if file.metadata()?.len() != valid {
                tracing::warn!(
                    segment = %path.display(),
                    kept = valid,
                    "stream segment had a torn or corrupt tail; cut it off"
                );
                file.set_len(valid)?;
                if valid == SEGMENT_HEADER.len() as u64 {
                    file.write_all_at(SEGMENT_HEADER, 0)?;
                }
                file.sync_all()?;
            }
            let index = segment::write_index(&index_path, &entries)?;
            segments.push(info(first, path, index_path, valid, &entries));
            (file, index)
        }
        None => {
            let (segment_file, index_file) = segment::create_segment(dir, 0)?;
            segment_file.sync_all()?;
            let (path, index_path) = segment::segment_paths(dir, 0);
            segments.push(info(0, path, index_path, SEGMENT_HEADER.len() as u64, &[]));
            (segment_file, index_file)
        }
    };
    let next_offset = segments.last().map_or(0, |s| s.end_offset);
    let last_timestamp = segments
        .iter()
        .rev()
        .find_map(|s| s.newest_timestamp)
        .unwrap_or(0);
    let last_chunk = find_last_user_chunk(&segments)?;
    let tail_zero_chunks = count_tail_zero_chunks(&segments, next_offset)?;
    let producers = tracking.producers.clone();
    Ok(Recovered {
        shared: Shared {
            segments,
            next_offset,
            last_chunk,
            tracking,
            last_epoch,
            tail_zero_chunks,
        },
        segment: segment_file,
        index: index_file,
        producers,
        last_timestamp,
    })
}

fn info(
    first: u64,
    path: PathBuf,
    index_path: PathBuf,
    size: u64,
    entries: &[IndexEntry],
) -> SegmentInfo {
    SegmentInfo {
        first_offset: first,
        path,
        index_path,
        size,
        chunks: entries.len() as u64,
        first_timestamp: entries.first().map(|e| e.timestamp),
        newest_timestamp: entries.last().map(|e| e.timestamp),
        end_offset: entries.last().map_or(first, |e| e.end_offset()),
    }
}

/// The newest user chunk: `(first offset, segment, position)`.
fn find_last_user_chunk(segments: &[SegmentInfo]) -> io::Result<Option<(u64, u64, u64)>> {
    for segment in segments.iter().rev() {
        if segment.chunks == 0 {
            continue;
        }
        let index = IndexFile::open(&segment.index_path, segment.chunks)?;
        for i in (0..segment.chunks).rev() {
            let entry = index.entry(i)?;
            if entry.chunk_type == ChunkType::User && entry.records > 0 {
                return Ok(Some((
                    entry.first_offset,
                    segment.first_offset,
                    entry.position,
                )));
            }
        }
    }
    Ok(None)
}

/// How many chunks without records end the log at `next_offset`, over segment boundaries.
fn count_tail_zero_chunks(segments: &[SegmentInfo], next_offset: u64) -> io::Result<u64> {
    let mut count = 0;
    for segment in segments.iter().rev() {
        let index = IndexFile::open(&segment.index_path, segment.chunks)?;
        for i in (0..segment.chunks).rev() {
            let entry = index.entry(i)?;
            if entry.records > 0 || entry.first_offset != next_offset {
                return Ok(count);
            }
            count += 1;
        }
    }
    Ok(count)
}

/// Deletes the oldest segments that retention no longer keeps.
fn apply_retention(inner: &Inner, now: i64) {
    let settings = inner.effective.lock().clone();
    let doomed: Vec<SegmentInfo> = {
        let mut shared = inner.shared.lock();
        let facts: Vec<SegmentFacts> = shared
            .segments
            .iter()
            .map(|s| SegmentFacts {
                size: s.size,
                newest_timestamp: s.newest_timestamp,
            })
            .collect();
        let count = segments_to_delete(&facts, &settings, now);
        shared.segments.drain(..count).collect()
    };
    for segment in doomed {
        tracing::debug!(stream = %inner.name, first_offset = segment.first_offset, "retention deletes a segment");
        let _ = std::fs::remove_file(&segment.path);
        let _ = std::fs::remove_file(&segment.index_path);
    }
}

/// The writer thread's state: the open segment and index, and the producers' sequences
/// including what is being written (the shared view has only the committed ones).
pub(super) struct Writer {
    pub(super) inner: Arc<Inner>,
    pub(super) segment: File,
    pub(super) index: File,
    pub(super) producers: HashMap<String, u64>,
    pub(super) last_timestamp: i64,
}

/// A chunk ready to write, and what it means once written.
pub(super) struct Pending {
    pub(super) bytes: Bytes,
    pub(super) entry: IndexEntry,
    pub(super) epoch: u64,
    pub(super) producers: Vec<(String, u64)>,
}

impl Writer {
    fn run(mut self) {
        loop {
            let (publishes, offsets, ops, stop) = {
                let mut queue = self.inner.queue.lock();
                let idle = |queue: &Queue| {
                    queue.publishes.is_empty() && queue.offsets.is_empty() && queue.ops.is_empty()
                };
                if idle(&queue) && !queue.stop {
                    let timed_out = self
                        .inner
                        .wake
                        .wait_for(&mut queue, RETENTION_TICK)
                        .timed_out();
                    if timed_out && idle(&queue) {
                        drop(queue);
                        apply_retention(&self.inner, now_ms());
                        continue;
                    }
                }
                (
                    std::mem::take(&mut queue.publishes),
                    std::mem::take(&mut queue.offsets),
                    std::mem::take(&mut queue.ops),
                    queue.stop,
                )
            };
            for op in ops {
                self.run_op(op);
            }
            if !publishes.is_empty() || !offsets.is_empty() {
                self.write_batch(publishes, offsets);
            }
            if stop {
                return;
            }
        }
    }

    fn timestamp(&mut self) -> i64 {
        self.last_timestamp = self.last_timestamp.max(now_ms());
        self.last_timestamp
    }

    /// Writes one group commit: every queued publish and stored offset, in as few chunks
    /// as the limits allow, then one fdatasync, then the confirms.
    fn write_batch(&mut self, publishes: Vec<Publish>, offsets: Vec<(String, u64)>) {
        let Some(epoch) = self.inner.replication.lock().writing_epoch() else {
            // A replica (the role changed after these were queued): not written here.
            let refusal = self.refusal();
            for publish in publishes {
                (publish.on_written)(Err(refusal.clone()));
            }
            return;
        };
        let mut next = self.inner.shared.lock().next_offset;
        let mut chunks: Vec<Pending> = Vec::new();
        if !offsets.is_empty() {
            let mut latest: HashMap<String, u64> = HashMap::new();
            latest.extend(offsets);
            let mut builder = ChunkBuilder::new(ChunkType::TrackingDelta);
            builder.set_data(&encode_pairs(latest.iter()));
            let timestamp = self.timestamp();
            chunks.push(self.pending(builder, epoch, next, timestamp, Vec::new()));
        }
        let mut outcomes = Vec::with_capacity(publishes.len());
        let mut builder = ChunkBuilder::new(ChunkType::User);
        let mut in_chunk: HashMap<String, u64> = HashMap::new();
        for publish in publishes {
            let mut written = Written {
                confirmed: Vec::with_capacity(publish.records.len()),
                duplicates: 0,
            };
            for record in publish.records {
                if let Some(producer) = &publish.producer {
                    let last = self.producers.get(producer).copied();
                    if last.is_some_and(|last| record.publishing_id <= last) {
                        written.duplicates += 1;
                        written.confirmed.push(record.publishing_id);
                        continue;
                    }
                    self.producers
                        .insert(producer.clone(), record.publishing_id);
                    in_chunk.insert(producer.clone(), record.publishing_id);
                }
                builder.push_record(&record.body, record.filter.as_deref());
                written.confirmed.push(record.publishing_id);
                if builder.records() >= MAX_CHUNK_RECORDS || builder.data_len() >= MAX_CHUNK_DATA {
                    let full = std::mem::replace(&mut builder, ChunkBuilder::new(ChunkType::User));
                    let timestamp = self.timestamp();
                    let producers: Vec<_> = in_chunk.drain().collect();
                    let pending = self.pending(full, epoch, next, timestamp, producers);
                    next = pending.entry.end_offset();
                    chunks.push(pending);
                }
            }
            outcomes.push((publish.on_written, written));
        }
        if builder.records() > 0 {
            let timestamp = self.timestamp();
            let producers: Vec<_> = in_chunk.drain().collect();
            chunks.push(self.pending(builder, epoch, next, timestamp, producers));
        }
        let result = self.write_chunks(chunks, false);
        if let Err(error) = &result {
            tracing::error!(stream = %self.inner.name, %error, "stream write failed");
        }
        match &result {
            Ok(()) => {
                let end = self.inner.shared.lock().next_offset;
                self.confirm_written(outcomes, end);
            }
            Err(error) => {
                for (on_written, _) in outcomes {
                    on_written(Err(format!("stream write failed: {error}")));
                }
            }
        }
    }

    fn pending(
        &self,
        builder: ChunkBuilder,
        epoch: u64,
        first_offset: u64,
        timestamp: i64,
        producers: Vec<(String, u64)>,
    ) -> Pending {
        let trailer = if producers.is_empty() {
            Vec::new()
        } else {
            encode_pairs(producers.iter().map(|(r, s)| (r, s))).to_vec()
        };
        let chunk_type = if builder.records() > 0 {
            ChunkType::User
        } else {
            ChunkType::TrackingDelta
        };
        let records = builder.records();
        let bytes = builder.finish_in_epoch(epoch, first_offset, timestamp, &trailer);
        Pending {
            bytes,
            epoch,
            entry: IndexEntry {
                first_offset,
                records,
                chunk_type,
                timestamp,
                position: 0,
            },
            producers,
        }
    }

    /// Writes `chunks` at the end of the log, rolling to a new segment when the live one is
    /// full; a replica (`mirror`) rolls where the leader did instead, at the leader's
    /// tracking snapshot chunks, so both logs hold the same chunks in the same order.
    pub(super) fn write_chunks(&mut self, chunks: Vec<Pending>, mirror: bool) -> io::Result<()> {
        for mut chunk in chunks {
            let (size, chunk_count, segment_first, segment_end) = {
                let shared = self.inner.shared.lock();
                let live = shared
                    .segments
                    .last()
                    .expect("a stream always has a segment");
                (live.size, live.chunks, live.first_offset, live.end_offset)
            };
            let (mut size, mut chunk_count) = (size, chunk_count);
            let max_segment_size = self.inner.effective.lock().max_segment_size;
            if mirror {
                if chunk.entry.chunk_type == ChunkType::TrackingSnapshot
                    && chunk.entry.first_offset > segment_first
                {
                    self.roll(chunk.entry.first_offset, Some(&chunk.bytes))?;
                    continue;
                }
            } else if size + chunk.bytes.len() as u64 > max_segment_size
                && segment_end > segment_first
            {
                self.roll(chunk.entry.first_offset, None)?;
                let shared = self.inner.shared.lock();
                let live = shared
                    .segments
                    .last()
                    .expect("a stream always has a segment");
                size = live.size;
                chunk_count = live.chunks;
            }
            chunk.entry.position = size;
            let written = self
                .segment
                .write_all_at(&chunk.bytes, size)
                .and_then(|()| {
                    self.index.write_all_at(
                        &chunk.entry.encode(),
                        segment::INDEX_HEADER.len() as u64
                            + chunk_count * segment::INDEX_ENTRY_SIZE,
                    )
                })
                .and_then(|()| self.segment.sync_data());
            if let Err(error) = written {
                // Nothing past the committed size is ever read; the next write overwrites it.
                let _ = self.segment.set_len(size);
                return Err(error);
            }
            let mut shared = self.inner.shared.lock();
            let live = shared
                .segments
                .last_mut()
                .expect("a stream always has a segment");
            live.size = size + chunk.bytes.len() as u64;
            live.chunks += 1;
            live.first_timestamp.get_or_insert(chunk.entry.timestamp);
            live.newest_timestamp = Some(chunk.entry.timestamp);
            live.end_offset = chunk.entry.end_offset();
            let live_first = live.first_offset;
            shared.next_offset = chunk.entry.end_offset();
            if chunk.entry.chunk_type == ChunkType::User {
                shared.last_chunk = Some((chunk.entry.first_offset, live_first, size));
            }
            for (producer, sequence) in chunk.producers {
                shared.tracking.producers.insert(producer, sequence);
            }
            shared.last_epoch = chunk.epoch;
            if chunk.entry.records == 0 {
                shared.tail_zero_chunks += 1;
            } else {
                shared.tail_zero_chunks = 0;
            }
            let next = shared.next_offset;
            drop(shared);
            self.inner.committed.send_replace(next);
        }
        Ok(())
    }

    /// Closes the live segment and starts one at `first_offset` with a tracking snapshot
    /// (the leader's, `given`, on a replica), then applies retention.
    fn roll(&mut self, first_offset: u64, given: Option<&Bytes>) -> io::Result<()> {
        self.index.sync_data()?;
        let (segment_file, index_file) = segment::create_segment(&self.inner.dir, first_offset)?;
        let (bytes, timestamp) = match given {
            Some(bytes) => {
                let header = super::chunk::ChunkHeader::decode(bytes)
                    .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bad snapshot"))?;
                (bytes.clone(), header.timestamp)
            }
            None => {
                let snapshot = {
                    let shared = self.inner.shared.lock();
                    let mut tracking = shared.tracking.clone();
                    tracking.producers = self.producers.clone();
                    tracking.encode_snapshot()
                };
                let mut builder = ChunkBuilder::new(ChunkType::TrackingSnapshot);
                builder.set_data(&snapshot);
                let timestamp = self.timestamp();
                let epoch = self.inner.replication.lock().writing_epoch().unwrap_or(1);
                (
                    builder.finish_in_epoch(epoch, first_offset, timestamp, &[]),
                    timestamp,
                )
            }
        };
        let entry = IndexEntry {
            first_offset,
            records: 0,
            chunk_type: ChunkType::TrackingSnapshot,
            timestamp,
            position: SEGMENT_HEADER.len() as u64,
        };
        segment_file.write_all_at(&bytes, entry.position)?;
        index_file.write_all_at(&entry.encode(), segment::INDEX_HEADER.len() as u64)?;
        segment_file.sync_all()?;
        if let Ok(dir) = File::open(&self.inner.dir) {
            let _ = dir.sync_all();
        }
        self.segment = segment_file;
        self.index = index_file;
        let (path, index_path) = segment::segment_paths(&self.inner.dir, first_offset);
        let epoch = super::chunk::ChunkHeader::decode(&bytes).map_or(1, |header| header.epoch);
        let mut shared = self.inner.shared.lock();
        shared.last_epoch = epoch;
        shared.tail_zero_chunks += 1;
        shared.segments.push(SegmentInfo {
            first_offset,
            path,
            index_path,
            size: entry.position + bytes.len() as u64,
            chunks: 1,
            first_timestamp: Some(timestamp),
            newest_timestamp: Some(timestamp),
            end_offset: first_offset,
        });
        drop(shared);
        apply_retention(&self.inner, now_ms());
        Ok(())
    }
}
