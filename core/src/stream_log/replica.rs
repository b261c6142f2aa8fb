//! A stream's log on a cluster: its placement and this node's role ([`super::replication`]
//! has the rules), confirms held until a majority of the members has a chunk, and the
//! writer's work for a replica: appending the leader's chunks as they are (same bytes, same
//! offsets) and cutting off a tail a new leader does not have.
//!
//! Lock order: `replication`, `shared` and `queue` are never held together, except
//! `queue` taken alone to hand the writer work.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::chunk::{Chunk, ChunkType};
use super::log::{Pending, StreamLog, Writer, Written};
use super::replication::{CommitTracker, ConfirmQueue, Placement, Role};
use super::segment::{self, IndexEntry, IndexFile, SEGMENT_HEADER};
use super::tracking::decode_pairs;
use super::OnWritten;

/// The file in a stream's directory keeping this node's name and the last placement it
/// applied, so a restarted member knows its role before the metadata log is replayed.
const PLACEMENT_FILE: &str = "placement";

/// Told when a replica's append or truncation is on disk: the log's new end, or why not.
pub type OnAppended = Box<dyn FnOnce(Result<u64, String>) + Send>;

/// Work for a replica's writer thread.
pub(super) enum WriterOp {
    /// Append the leader's chunks.
    Append(Vec<Bytes>, OnAppended),
    /// Remove every chunk from this offset on.
    Truncate(u64, OnAppended),
    /// Drop the whole log and start it empty at this offset.
    Restart(u64, OnAppended),
}

/// A stream's replication state (in [`super::log::Inner`]).
pub(crate) struct ReplicationState {
    role: Role,
    placement: Option<Placement>,
    local: Option<String>,
    tracker: CommitTracker,
    waiting: ConfirmQueue<(OnWritten, Written)>,
}

impl ReplicationState {
    /// The state saved in `dir` (a member restarting), or a standalone stream's.
    pub(super) fn load(dir: &Path) -> ReplicationState {
        let mut state = ReplicationState {
            role: Role::Standalone,
            placement: None,
            local: None,
            tracker: CommitTracker::default(),
            waiting: ConfirmQueue::default(),
        };
        let saved = std::fs::read_to_string(dir.join(PLACEMENT_FILE)).ok();
        if let Some((local, placement)) = saved.as_deref().and_then(|text| text.split_once('\n')) {
            if let Some(placement) = Placement::decode(placement) {
                state.role = placement.role_of(local);
                state.tracker = CommitTracker::new(placement.members.clone(), 0);
                state.local = Some(local.to_owned());
                state.placement = Some(placement);
            }
        }
        state
    }

    /// Whether the stream is on a cluster (not a single node's).
    pub(super) fn is_clustered(&self) -> bool {
        self.role != Role::Standalone
    }

    /// The epoch this node writes new chunks in, or `None` when it does not write (a
    /// replica).
    pub(super) fn writing_epoch(&self) -> Option<u64> {
        match self.role {
            Role::Standalone | Role::Pending => Some(1),
            Role::Leader { epoch } => Some(epoch),
            Role::Replica { .. } | Role::Outside => None,
        }
    }
}

/// A replica's position, as it tells the leader in each fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaTail {
    /// The offset after its last record: everything before it is on its disk.
    pub next_offset: u64,
    /// Chunks without records at the end of its log (the leader skips as many).
    pub tail_zero_chunks: u64,
    /// The epoch of its newest chunk.
    pub last_epoch: u64,
}

impl StreamLog {
    /// This node's role for the stream.
    pub fn role(&self) -> Role {
        self.inner.replication.lock().role
    }

    /// The stream's placement on the cluster, once known.
    pub fn placement(&self) -> Option<Placement> {
        self.inner.replication.lock().placement.clone()
    }

    /// Why a publish on this node is refused (a replica's), or `None` when it is taken.
    pub(super) fn refuses_publishes(&self) -> Option<String> {
        let state = self.inner.replication.lock();
        if state.role.takes_publishes() {
            return None;
        }
        Some(refusal_text(&self.inner.name, state.placement.as_ref()))
    }

    /// The stream is on a cluster but its placement is not known yet. On its home node
    /// (`home`, which will lead it) publishes are written but held unconfirmed until the
    /// placement is committed; elsewhere they are refused (this node may be a replica, whose
    /// log must hold only the leader's chunks). Nothing changes for a stream that has one.
    pub fn await_placement(&self, home: bool) {
        let mut state = self.inner.replication.lock();
        if state.role == Role::Standalone && state.placement.is_none() {
            state.role = if home { Role::Pending } else { Role::Outside };
            drop(state);
            self.inner.readable.store(0, Ordering::Release);
        }
    }

    /// A replica learns from the leader how far the stream is committed: its readers may
    /// read that far.
    pub fn leader_committed(&self, committed: u64) {
        set_readable(&self.inner, committed);
    }

    /// Applies the stream's placement as the metadata store committed it (`local` is this
    /// node): a new leader starts counting its members' tails; a node that stops leading
    /// fails the publishes it held (their publishers are told, and publish to the new leader).
    ///
    /// Only a newer epoch replaces a placement: replaying the metadata log after a restart
    /// applies the stream's older placements again, and a second proposal for an epoch
    /// already placed (a home node that proposed before it had replayed the log) loses to
    /// the first.
    pub fn set_placement(&self, placement: &Placement, local: &str) {
        if let Some(current) = &self.inner.replication.lock().placement {
            if placement.epoch < current.epoch
                || (placement.epoch == current.epoch && placement != current)
            {
                tracing::debug!(stream = %self.inner.name, epoch = placement.epoch,
                    current = current.epoch, "an older stream placement is not applied");
                return;
            }
        }
        let role = placement.role_of(local);
        let tail = self.inner.shared.lock().next_offset;
        let text = format!("{local}\n{}\n", placement.encode());
        if let Err(error) = write_atomically(&self.inner.dir.join(PLACEMENT_FILE), &text) {
            tracing::warn!(stream = %self.inner.name, %error, "cannot save the stream's placement");
        }
        let (failed, released) = {
            let mut state = self.inner.replication.lock();
            let changed = state.role != role || state.placement.is_none();
            state.placement = Some(placement.clone());
            state.local = Some(local.to_owned());
            if !changed {
                return;
            }
            tracing::info!(stream = %self.inner.name, ?role, leader = %placement.leader,
                epoch = placement.epoch, "stream placement");
            state.role = role;
            match role {
                Role::Leader { .. } => {
                    state.tracker = CommitTracker::new(placement.members.clone(), 0);
                    state.tracker.written(local, tail);
                    let committed = state.tracker.committed();
                    (Vec::new(), state.waiting.release(committed))
                }
                _ => (state.waiting.drain(), Vec::new()),
            }
        };
        if matches!(role, Role::Leader { .. }) {
            set_readable(&self.inner, self.committed_offset());
        } else if self.inner.readable.load(Ordering::Acquire) == u64::MAX {
            set_readable(&self.inner, 0);
        }
        let refusal = refusal_text(&self.inner.name, Some(placement));
        for (on_written, _) in failed {
            on_written(Err(refusal.clone()));
        }
        for (on_written, written) in released {
            on_written(Ok(written));
        }
    }

    /// The leader learns that `member` has the log up to `tail` on disk (its fetch says
    /// so): publishes now on a majority are confirmed.
    pub fn replica_written(&self, member: &str, tail: u64) {
        let released = {
            let mut state = self.inner.replication.lock();
            if !matches!(state.role, Role::Leader { .. }) {
                return;
            }
            state.tracker.written(member, tail);
            let committed = state.tracker.committed();
            (state.waiting.release(committed), committed)
        };
        let (released, committed) = released;
        set_readable(&self.inner, committed);
        for (on_written, written) in released {
            on_written(Ok(written));
        }
    }

    /// How far the stream is committed on a majority (the leader's view; 0 elsewhere).
    pub fn committed_offset(&self) -> u64 {
        self.inner.replication.lock().tracker.committed()
    }

    /// How far this node's log goes.
    pub fn replica_tail(&self) -> ReplicaTail {
        let shared = self.inner.shared.lock();
        ReplicaTail {
            next_offset: shared.next_offset,
            tail_zero_chunks: shared.tail_zero_chunks,
            last_epoch: shared.last_epoch,
        }
    }

    /// Queues the leader's `chunks` for the writer, which appends them as they are (they
    /// must start where the log ends) and fsyncs; `done` gets the log's new end.
    pub fn append_replicated(&self, chunks: Vec<Bytes>, done: OnAppended) {
        self.queue_op(WriterOp::Append(chunks, done));
    }

    /// Queues the removal of every chunk from `offset` on (chunks a new leader does not
    /// have); `done` gets the log's new end.
    pub fn truncate(&self, offset: u64, done: OnAppended) {
        self.queue_op(WriterOp::Truncate(offset, done));
    }

    /// Queues dropping the whole log to start it empty at `offset`: a replica so far
    /// behind that the leader's retention removed its tail starts again from the leader's
    /// oldest chunk (everything before it is gone from the leader too).
    pub fn restart_at(&self, offset: u64, done: OnAppended) {
        self.queue_op(WriterOp::Restart(offset, done));
    }

    /// Where a replica at `tail` must start again from, when the leader's retention removed
    /// its tail (the leader's first offset); `None` when the leader has what follows it.
    pub fn restart_point(&self, tail: ReplicaTail) -> Option<u64> {
        let first = self
            .inner
            .shared
            .lock()
            .segments
            .first()
            .map_or(0, |s| s.first_offset);
        (tail.next_offset < first).then_some(first)
    }

    fn queue_op(&self, op: WriterOp) {
        if self.is_deleted() {
            let done = match op {
                WriterOp::Append(_, done)
                | WriterOp::Truncate(_, done)
                | WriterOp::Restart(_, done) => done,
            };
            done(Err(format!("stream '{}' was deleted", self.inner.name)));
            return;
        }
        self.inner.queue.lock().ops.push(op);
        self.inner.wake.notify_one();
    }

    /// The chunks after a replica's `tail`, as on disk, up to about `max_bytes` (at least
    /// one chunk when there is one). Empty when the replica has everything.
    pub fn read_for_replica(&self, tail: ReplicaTail, max_bytes: usize) -> io::Result<Vec<Bytes>> {
        let (segments, next_offset) = {
            let shared = self.inner.shared.lock();
            (shared.segments.clone(), shared.next_offset)
        };
        let from = tail.next_offset;
        if from > next_offset {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the replica's log goes to {from}, past the leader's end {next_offset}"),
            ));
        }
        let first = segments.first().map_or(0, |s| s.first_offset);
        if from < first {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("offset {from} was removed by retention (the log starts at {first})"),
            ));
        }
        let Some(start) = segments.iter().position(|s| s.end_offset >= from) else {
            return Ok(Vec::new());
        };
        let mut skip = tail.tail_zero_chunks;
        let mut out = Vec::new();
        let mut bytes = 0;
        for segment in &segments[start..] {
            let index = IndexFile::open(&segment.index_path, segment.chunks)?;
            let Some(entry) = index.partition_point(|e| e.first_offset >= from)? else {
                continue;
            };
            let file = std::fs::File::open(&segment.path)?;
            let mut position = entry.position;
            while let Some((header, chunk)) =
                segment::read_raw_chunk_at(&file, position, segment.size)?
            {
                position += header.total_size();
                if skip > 0 && header.records == 0 && header.first_offset == from {
                    skip -= 1;
                    continue;
                }
                bytes += chunk.len();
                out.push(chunk);
                if bytes >= max_bytes {
                    return Ok(out);
                }
            }
        }
        Ok(out)
    }
}

/// Moves how far readers may read forward (never back: what was committed stays
/// committed, also across a change of leader), waking them when it moved. From a single
/// node's `u64::MAX` it may go to any value.
fn set_readable(inner: &super::log::Inner, readable: u64) {
    let current = inner.readable.load(Ordering::Acquire);
    if current != u64::MAX && readable <= current {
        return;
    }
    inner.readable.store(readable, Ordering::Release);
    inner.committed.send_modify(|_| {});
}

fn refusal_text(stream: &str, placement: Option<&Placement>) -> String {
    match placement {
        Some(placement) => format!(
            "stream '{stream}' is led by node '{}': publish there",
            placement.leader
        ),
        None => format!("stream '{stream}' has no leader on this node"),
    }
}

fn write_atomically(path: &Path, text: &str) -> io::Result<()> {
    let temporary = PathBuf::from(format!("{}.new", path.display()));
    std::fs::write(&temporary, text)?;
    std::fs::File::open(&temporary)?.sync_all()?;
    std::fs::rename(temporary, path)
}

impl Writer {
    pub(super) fn run_op(&mut self, op: WriterOp) {
        match op {
            WriterOp::Append(chunks, done) => {
                let result = self.append(chunks).map_err(|e| e.to_string());
                done(result);
            }
            WriterOp::Truncate(offset, done) => {
                let result = self.truncate_to(offset).map_err(|e| e.to_string());
                done(result);
            }
            WriterOp::Restart(offset, done) => {
                let result = self.restart_log(offset).map_err(|e| e.to_string());
                done(result);
            }
        }
    }

    /// What a publish that reached a replica's writer is told.
    pub(super) fn refusal(&self) -> String {
        let state = self.inner.replication.lock();
        refusal_text(&self.inner.name, state.placement.as_ref())
    }

    /// Confirms `outcomes`, written up to `end`: at once on a single node; on a cluster
    /// once a majority of the members has `end` on disk.
    pub(super) fn confirm_written(&mut self, outcomes: Vec<(OnWritten, Written)>, end: u64) {
        let mut state = self.inner.replication.lock();
        let leading = matches!(state.role, Role::Pending | Role::Leader { .. });
        let (ready, failed) = match state.role {
            Role::Standalone => (outcomes, Vec::new()),
            Role::Pending | Role::Leader { .. } => {
                for outcome in outcomes {
                    state.waiting.hold(end, outcome);
                }
                if let Some(local) = state.local.clone() {
                    state.tracker.written(&local, end);
                }
                let committed = state.tracker.committed();
                (state.waiting.release(committed), Vec::new())
            }
            Role::Replica { .. } | Role::Outside => (Vec::new(), outcomes),
        };
        let refusal = refusal_text(&self.inner.name, state.placement.as_ref());
        let committed = state.tracker.committed();
        drop(state);
        if leading {
            set_readable(&self.inner, committed);
        }
        for (on_written, written) in ready {
            on_written(Ok(written));
        }
        for (on_written, _) in failed {
            on_written(Err(refusal.clone()));
        }
    }

    fn append(&mut self, chunks: Vec<Bytes>) -> io::Result<u64> {
        let invalid = |text: String| io::Error::new(io::ErrorKind::InvalidData, text);
        let mut next = self.inner.shared.lock().next_offset;
        let mut pending = Vec::with_capacity(chunks.len());
        for bytes in chunks {
            let chunk = Chunk::decode(bytes.clone())
                .map_err(|e| invalid(format!("a damaged chunk from the leader: {e:?}")))?;
            let header = chunk.header;
            if header.first_offset != next {
                return Err(invalid(format!(
                    "the leader's chunk starts at {} but this log ends at {next}",
                    header.first_offset
                )));
            }
            let mut producers = Vec::new();
            {
                let mut shared = self.inner.shared.lock();
                match header.chunk_type {
                    ChunkType::User => {
                        if let Some((pairs, _)) = decode_pairs(&chunk.trailer) {
                            producers = pairs;
                        }
                    }
                    ChunkType::TrackingDelta => {
                        shared.tracking.apply_offsets(&chunk.data);
                    }
                    ChunkType::TrackingSnapshot => {
                        shared.tracking.apply_snapshot(&chunk.data);
                    }
                }
            }
            for (producer, sequence) in &producers {
                self.producers.insert(producer.clone(), *sequence);
            }
            self.last_timestamp = self.last_timestamp.max(header.timestamp);
            next = header.end_offset();
            pending.push(Pending {
                bytes,
                entry: IndexEntry::for_chunk(&header, 0),
                epoch: header.epoch,
                producers,
            });
        }
        self.write_chunks(pending, true)?;
        Ok(self.inner.shared.lock().next_offset)
    }

    /// Removes every segment and starts the log empty at `offset`.
    fn restart_log(&mut self, offset: u64) -> io::Result<u64> {
        let segments = self.inner.shared.lock().segments.clone();
        let (segment_file, index_file) = segment::create_segment(&self.inner.dir, offset)?;
        segment_file.sync_all()?;
        index_file.sync_all()?;
        for segment in segments.iter().filter(|s| s.first_offset != offset) {
            std::fs::remove_file(&segment.path)?;
            let _ = std::fs::remove_file(&segment.index_path);
        }
        self.reopen()?;
        tracing::warn!(stream = %self.inner.name, offset, "the leader's retention removed this replica's tail: its copy starts again at the leader's oldest chunk");
        Ok(offset)
    }

    /// Recovers the log from its files again (after they were cut): the writer's files,
    /// the producers' sequences and consumers' offsets as the kept chunks have them.
    fn reopen(&mut self) -> io::Result<u64> {
        if let Ok(dir) = std::fs::File::open(&self.inner.dir) {
            let _ = dir.sync_all();
        }
        let recovered = super::log::recover(&self.inner.dir)?;
        self.segment = recovered.segment;
        self.index = recovered.index;
        self.producers = recovered.producers;
        self.last_timestamp = self.last_timestamp.max(recovered.last_timestamp);
        let next = recovered.shared.next_offset;
        *self.inner.shared.lock() = recovered.shared;
        self.inner.committed.send_replace(next);
        Ok(next)
    }

    /// Removes every chunk from `offset` on: whole segments starting at or after it, then
    /// the tail of the last one kept; then the log is recovered from its files again (the
    /// producers' sequences and consumers' offsets as the kept chunks have them).
    fn truncate_to(&mut self, offset: u64) -> io::Result<u64> {
        let segments = self.inner.shared.lock().segments.clone();
        for (at, segment) in segments.iter().enumerate().rev() {
            if segment.first_offset >= offset && at > 0 {
                std::fs::remove_file(&segment.path)?;
                let _ = std::fs::remove_file(&segment.index_path);
                continue;
            }
            let entries = segment::read_index(&segment.index_path).unwrap_or_default();
            let kept: Vec<IndexEntry> = entries
                .iter()
                .take(segment.chunks as usize)
                .take_while(|entry| entry.first_offset < offset)
                .copied()
                .collect();
            let cut = entries
                .get(kept.len())
                .map(|entry| entry.position)
                .unwrap_or(segment.size)
                .max(SEGMENT_HEADER.len() as u64);
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&segment.path)?;
            file.set_len(cut)?;
            file.sync_all()?;
            segment::write_index(&segment.index_path, &kept)?;
            break;
        }
        let next = self.reopen()?;
        tracing::warn!(stream = %self.inner.name, offset, "cut the stream's unconfirmed tail off for the new leader");
        Ok(next)
    }
}
