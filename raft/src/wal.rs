//! The node's shared write-ahead log and the per-group segment files it is split into.
//!
//! Layout under the WAL's directory (see docs/quorum-queues.md):
//!
//! ```text
//! wal/00000000000000000007.wal        records of every group, in write order
//! groups/<group>/00000000000000000006.seg   one group's records from WAL file 6
//! groups/<group>/snapshot             the group's latest state-machine snapshot
//! ```
//!
//! Data flow: a group's log store updates its in-memory log ([`GroupState`]) and hands the
//! record to [`Wal::submit`]; one writer thread takes everything pending from every group,
//! writes it with one `write`, calls `fdatasync` once, then fires the callbacks (openraft's
//! `LogFlushed`) of every group in the batch. A WAL file that reached
//! [`WalOptions::max_wal_bytes`] is closed and, on a second thread so that no batch waits
//! for it, split into one segment file per group (each
//! starting with that group's vote, commit and purge point, so older files are never needed
//! for them), and deleted. A group's segments are deleted oldest first once every entry in
//! them is purged (openraft purges after each snapshot), so disk use follows the live log.
//!
//! Recovery replays segments then WAL files in order; a record whose CRC or length does not
//! hold ends its file there, and the file is cut to the last good record (a torn write from a
//! crash). Every record sets log state to constants (votes, commits and purges only move
//! forward), so replaying a WAL file whose split finished just before a crash is harmless.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use openraft::{Entry, LogId, Vote};
use parking_lot::{Condvar, Mutex};

use crate::record::{self, Op, Read};
use crate::{GroupId, TypeConfig};

/// A callback fired by the writer once a batch is durable (or failed to be written).
pub type Flushed = Box<dyn FnOnce(io::Result<()>) + Send>;

/// Settings of a node's WAL.
#[derive(Debug, Clone)]
pub struct WalOptions {
    /// A WAL file this large is split into group segments and deleted.
    pub max_wal_bytes: u64,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            max_wal_bytes: 64 * 1024 * 1024,
        }
    }
}

/// One group's log as recovered and kept in memory: live entries, vote, commit and purge
/// point. Reads are served from here; the WAL and segments are for durability.
#[derive(Debug, Default)]
pub struct GroupState {
    pub(crate) entries: BTreeMap<u64, Entry<TypeConfig>>,
    pub(crate) vote: Option<Vote<u64>>,
    pub(crate) committed: Option<LogId<u64>>,
    pub(crate) purged: Option<LogId<u64>>,
    /// The last record was a removal: the group is gone.
    pub(crate) removed: bool,
}

impl GroupState {
    /// Applies one record, as written or as replayed.
    pub(crate) fn apply(&mut self, op: Op) {
        self.removed = false;
        match op {
            Op::Remove => {
                *self = GroupState {
                    removed: true,
                    ..GroupState::default()
                };
            }
            Op::Entry(entry) => {
                if self
                    .purged
                    .is_some_and(|purged| entry.log_id.index <= purged.index)
                {
                    return;
                }
                self.entries.insert(entry.log_id.index, entry);
            }
            Op::Vote(vote) => {
                let older = self.vote.is_some_and(|current| {
                    vote.partial_cmp(&current) == Some(std::cmp::Ordering::Less)
                });
                if !older {
                    self.vote = Some(vote);
                }
            }
            Op::Truncate(from) => {
                self.entries.split_off(&from);
            }
            Op::Purge(log_id) => {
                if self.purged.is_none_or(|purged| log_id.index > purged.index) {
                    self.purged = Some(log_id);
                }
                let keep = self.entries.split_off(&(log_id.index + 1));
                self.entries = keep;
            }
            Op::Committed(log_id) => {
                if log_id > self.committed {
                    self.committed = log_id;
                }
            }
        }
    }

    /// The last log id: the last entry's, or the purge point when every entry is purged.
    pub(crate) fn last_log_id(&self) -> Option<LogId<u64>> {
        self.entries
            .values()
            .next_back()
            .map(|entry| entry.log_id)
            .or(self.purged)
    }
}

/// Files a [`Wal`] has on disk, for operators and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUse {
    /// WAL files.
    pub wal_files: usize,
    /// Segment files of all groups.
    pub segment_files: usize,
    /// Bytes in both.
    pub bytes: u64,
}

/// What recovery found and cut.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Records replayed.
    pub records: u64,
    /// Files whose tail was torn or damaged and cut, with the bytes cut.
    pub cut: Vec<(PathBuf, u64)>,
}

#[derive(Default)]
struct Pending {
    buffer: Vec<u8>,
    callbacks: Vec<Flushed>,
    /// Purge points in `buffer`, per group.
    purged: BTreeMap<GroupId, u64>,
    /// Groups removed in `buffer`, with the callback fired once their files are deleted.
    removed: Vec<(GroupId, Option<Flushed>)>,
    closing: bool,
}

struct Shared {
    dir: PathBuf,
    options: WalOptions,
    pending: Mutex<Pending>,
    wake: Condvar,
    groups: Mutex<BTreeMap<GroupId, Arc<Mutex<GroupState>>>>,
    /// The writer thread, then the segment thread.
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// Work for the segment thread; `None` once closed.
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    syncs: AtomicU64,
}

/// A node's write-ahead log, shared by every Raft group on the node. Cheap to clone.
#[derive(Clone)]
pub struct Wal {
    shared: Arc<Shared>,
}

fn wal_dir(dir: &Path) -> PathBuf {
    dir.join("wal")
}

fn group_dir(dir: &Path, group: GroupId) -> PathBuf {
    dir.join("groups").join(group.to_string())
}

fn numbered(dir: &Path, extension: &str) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    if !dir.exists() {
        return Ok(files);
    }
    for item in fs::read_dir(dir)? {
        let path = item?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("tmp") {
            fs::remove_file(&path)?;
            continue;
        }
        if path.extension().and_then(|e| e.to_str()) != Some(extension) {
            continue;
        }
        if let Some(seq) = path
            .file_stem()
            .and_then(|s| s.to_str())
            .and_then(|s| s.parse::<u64>().ok())
        {
            files.push((seq, path));
        }
    }
    files.sort();
    Ok(files)
}

fn file_name(seq: u64, extension: &str) -> String {
    format!("{seq:020}.{extension}")
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Replays one file into `groups`; cuts it at the first bad record. Returns, per group, the
/// highest entry index the file holds.
fn replay_file(
    path: &Path,
    groups: &mut BTreeMap<GroupId, GroupState>,
    report: &mut RecoveryReport,
) -> io::Result<BTreeMap<GroupId, Option<u64>>> {
    let bytes = fs::read(path)?;
    let mut offset = 0;
    let mut highest: BTreeMap<GroupId, Option<u64>> = BTreeMap::new();
    loop {
        match record::read(&bytes[offset..]) {
            Read::Record(group, op, used) => {
                let seen = highest.entry(group).or_default();
                if let Op::Entry(entry) = &op {
                    *seen = (*seen).max(Some(entry.log_id.index));
                }
                groups.entry(group).or_default().apply(op);
                report.records += 1;
                offset += used;
            }
            Read::End => break,
            Read::Torn => {
                let cut = (bytes.len() - offset) as u64;
                tracing::warn!(
                    path = %path.display(),
                    offset,
                    cut,
                    "raft log file ends in a torn or damaged record; cutting it there"
                );
                let file = OpenOptions::new().write(true).open(path)?;
                file.set_len(offset as u64)?;
                file.sync_all()?;
                report.cut.push((path.to_path_buf(), cut));
                break;
            }
        }
    }
    Ok(highest)
}

/// A group's segment files as the writer tracks them: (sequence, highest entry index).
type Segments = BTreeMap<GroupId, Vec<(u64, Option<u64>)>>;

impl Wal {
    /// Opens (or creates) the WAL under `dir`, recovering every group's log, and starts the
    /// writer thread.
    pub fn open(dir: impl Into<PathBuf>, options: WalOptions) -> io::Result<(Wal, RecoveryReport)> {
        let dir = dir.into();
        fs::create_dir_all(wal_dir(&dir))?;
        fs::create_dir_all(dir.join("groups"))?;
        let mut report = RecoveryReport::default();
        let mut groups: BTreeMap<GroupId, GroupState> = BTreeMap::new();
        let mut segments: Segments = BTreeMap::new();
        for item in fs::read_dir(dir.join("groups"))? {
            let path = item?.path();
            let Some(group) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.parse::<GroupId>().ok())
            else {
                continue;
            };
            let mut files = Vec::new();
            for (seq, file) in numbered(&path, "seg")? {
                let highest = replay_file(&file, &mut groups, &mut report)?;
                files.push((seq, highest.get(&group).copied().flatten()));
            }
            groups.entry(group).or_default();
            segments.insert(group, files);
        }
        let closed = numbered(&wal_dir(&dir), "wal")?;
        for (_, file) in &closed {
            replay_file(file, &mut groups, &mut report)?;
        }
        // Groups whose last record is their removal: finish deleting them.
        let removed: Vec<GroupId> = groups
            .iter()
            .filter(|(_, state)| state.removed)
            .map(|(group, _)| *group)
            .collect();
        for group in removed {
            groups.remove(&group);
            segments.remove(&group);
            match fs::remove_dir_all(group_dir(&dir, group)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let next_seq = closed
            .last()
            .map(|(seq, _)| seq + 1)
            .into_iter()
            .chain(
                segments
                    .values()
                    .flat_map(|files| files.iter().map(|(seq, _)| seq + 1)),
            )
            .max()
            .unwrap_or(1);
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            options,
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            groups: Mutex::new(
                groups
                    .into_iter()
                    .map(|(group, state)| (group, Arc::new(Mutex::new(state))))
                    .collect(),
            ),
            threads: Mutex::new(Vec::new()),
            jobs: Mutex::new(None),
            syncs: AtomicU64::new(0),
        });
        let mut segmenter = Segmenter {
            shared: Arc::clone(&shared),
            segments,
            durable_purged: shared
                .groups
                .lock()
                .iter()
                .filter_map(|(group, state)| state.lock().purged.map(|p| (*group, p.index)))
                .collect(),
        };
        // Earlier WAL files become segments before anything new is written.
        for (seq, path) in closed {
            segmenter.split(seq, &path)?;
        }
        let (jobs, receiver) = mpsc::channel();
        let mut writer = Writer {
            shared: Arc::clone(&shared),
            file: None,
            seq: next_seq,
            size: 0,
            jobs: jobs.clone(),
        };
        writer.open_current()?;
        *shared.jobs.lock() = Some(jobs);
        let writer = std::thread::Builder::new()
            .name("warren-raft-wal".into())
            .spawn(move || writer.run())?;
        let segments = std::thread::Builder::new()
            .name("warren-raft-segments".into())
            .spawn(move || segmenter.run(receiver))?;
        shared.threads.lock().extend([writer, segments]);
        Ok((Wal { shared }, report))
    }

    /// The in-memory log of a group (recovered, or empty for a new group).
    pub fn group(&self, group: GroupId) -> Arc<Mutex<GroupState>> {
        Arc::clone(self.shared.groups.lock().entry(group).or_default())
    }

    /// Deletes a group (its queue was deleted): its log is forgotten at once, and its segment
    /// files and snapshot are deleted once the removal is on disk (`flushed` is fired then).
    /// Stop the group's Raft member first: a snapshot written afterwards would come back.
    pub fn remove_group(&self, group: GroupId, flushed: Option<Flushed>) {
        self.shared.groups.lock().remove(&group);
        let mut pending = self.shared.pending.lock();
        if pending.closing {
            drop(pending);
            if let Some(flushed) = flushed {
                flushed(Err(io::Error::other("the raft WAL is closed")));
            }
            return;
        }
        record::encode(&mut pending.buffer, group, &Op::Remove);
        pending.removed.push((group, flushed));
        drop(pending);
        self.shared.wake.notify_one();
    }

    /// Waits until the segment thread has done everything asked of it so far (splits of full
    /// WAL files, deletions): for tests and disk-use checks that must not race it.
    pub fn wait_for_segments(&self) {
        let (sender, receiver) = mpsc::channel();
        let queued = self.shared.jobs.lock().as_ref().map(|jobs| {
            jobs.send(Job::Barrier(Box::new(move |_| {
                let _ = sender.send(());
            })))
        });
        if let Some(Ok(())) = queued {
            let _ = receiver.recv();
        }
    }

    /// The groups that have a log on this node.
    pub fn groups(&self) -> Vec<GroupId> {
        self.shared.groups.lock().keys().copied().collect()
    }

    /// The directory of a group's segments and snapshot.
    pub fn group_dir(&self, group: GroupId) -> PathBuf {
        group_dir(&self.shared.dir, group)
    }

    /// Queues records of one group for the writer; `flushed` is fired once they (and
    /// everything queued before them) are on disk.
    pub(crate) fn submit(&self, group: GroupId, ops: &[Op], flushed: Option<Flushed>) {
        let mut pending = self.shared.pending.lock();
        if pending.closing {
            // The writer is gone or going: nothing more is written, and a waiter must hear so.
            drop(pending);
            if let Some(flushed) = flushed {
                flushed(Err(io::Error::other("the raft WAL is closed")));
            }
            return;
        }
        for op in ops {
            record::encode(&mut pending.buffer, group, op);
            if let Op::Purge(log_id) = op {
                let point = pending.purged.entry(group).or_default();
                *point = (*point).max(log_id.index);
            }
        }
        if let Some(flushed) = flushed {
            pending.callbacks.push(flushed);
        }
        drop(pending);
        self.shared.wake.notify_one();
    }

    /// `fdatasync` calls made so far (one per batch, whatever the number of groups in it).
    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// WAL and segment files on disk now.
    pub fn disk_use(&self) -> io::Result<DiskUse> {
        let mut usage = DiskUse::default();
        for (_, path) in numbered(&wal_dir(&self.shared.dir), "wal")? {
            usage.wal_files += 1;
            usage.bytes += fs::metadata(path)?.len();
        }
        for group in self.groups() {
            for (_, path) in numbered(&self.group_dir(group), "seg")? {
                usage.segment_files += 1;
                usage.bytes += fs::metadata(path)?.len();
            }
        }
        Ok(usage)
    }

    /// Writes what is pending and stops the writer. Records submitted afterwards are never
    /// written (their callbacks get an error).
    pub fn close(&self) {
        self.shared.pending.lock().closing = true;
        self.shared.wake.notify_one();
        // The segment thread ends once the writer and this handle dropped their senders.
        self.shared.jobs.lock().take();
        let threads: Vec<JoinHandle<()>> = self.shared.threads.lock().drain(..).collect();
        for thread in threads {
            let _ = thread.join();
        }
    }
}

/// Work the writer hands to the segment thread, in the order it must be done.
enum Job {
    /// WAL file `seq` is closed: split it into segments and delete it.
    Split(u64, PathBuf),
    /// A purge up to this index is on disk: delete the segments it empties.
    Purged(GroupId, u64),
    /// A group's removal is on disk: delete its files, then fire the callback.
    Forget(GroupId, Option<Flushed>),
    /// Fire the callback (everything queued before is done).
    Barrier(Flushed),
}

/// The writer thread's own state: only the current WAL file. Splitting full files and
/// deleting segments happen on the segment thread, so a batch never waits for them.
struct Writer {
    shared: Arc<Shared>,
    file: Option<File>,
    /// The current WAL file's sequence number.
    seq: u64,
    size: u64,
    jobs: mpsc::Sender<Job>,
}

/// The segment thread's state: every group's segment files.
struct Segmenter {
    shared: Arc<Shared>,
    segments: Segments,
    /// Per group, the purge point known to be on disk: only segments at or below it may go
    /// (the in-memory one may be ahead of the disk).
    durable_purged: BTreeMap<GroupId, u64>,
}

impl Writer {
    fn open_current(&mut self) -> io::Result<()> {
        let dir = wal_dir(&self.shared.dir);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(file_name(self.seq, "wal")))?;
        sync_dir(&dir)?;
        self.size = file.metadata()?.len();
        self.file = Some(file);
        Ok(())
    }

    fn run(mut self) {
        loop {
            let (buffer, callbacks, purged, removed, closing) = {
                let mut pending = self.shared.pending.lock();
                while pending.buffer.is_empty() && !pending.closing {
                    self.shared.wake.wait(&mut pending);
                }
                (
                    std::mem::take(&mut pending.buffer),
                    std::mem::take(&mut pending.callbacks),
                    std::mem::take(&mut pending.purged),
                    std::mem::take(&mut pending.removed),
                    pending.closing,
                )
            };
            let mut written = buffer.is_empty();
            if !buffer.is_empty() {
                let result = self.write(&buffer);
                written = result.is_ok();
                for (group, flushed) in removed {
                    match (&result, flushed) {
                        (Ok(()), flushed) => {
                            let _ = self.jobs.send(Job::Forget(group, flushed));
                        }
                        (Err(e), Some(flushed)) => {
                            flushed(Err(io::Error::new(e.kind(), e.to_string())))
                        }
                        (Err(_), None) => {}
                    }
                }
                for callback in callbacks {
                    callback(match &result {
                        Ok(()) => Ok(()),
                        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                    });
                }
                if let Err(e) = result {
                    tracing::error!(error = %e, "raft WAL write failed");
                }
            } else {
                for callback in callbacks {
                    callback(Ok(()));
                }
            }
            for (group, point) in purged.into_iter().filter(|_| written) {
                let _ = self.jobs.send(Job::Purged(group, point));
            }
            if self.size >= self.shared.options.max_wal_bytes {
                if let Err(e) = self.roll() {
                    tracing::error!(error = %e, "rolling the raft WAL over failed");
                }
            }
            if closing {
                let mut pending = self.shared.pending.lock();
                for callback in pending.callbacks.drain(..) {
                    callback(Err(io::Error::other("the raft WAL is closed")));
                }
                return;
            }
        }
    }

    fn write(&mut self, buffer: &[u8]) -> io::Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| io::Error::other("no current WAL file"))?;
        file.write_all(buffer)?;
        file.sync_data()?;
        self.size += buffer.len() as u64;
        self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Closes the current WAL file, starts the next one, and has the closed one split.
    fn roll(&mut self) -> io::Result<()> {
        self.file = None;
        let closed = self.seq;
        self.seq += 1;
        self.open_current()?;
        let path = wal_dir(&self.shared.dir).join(file_name(closed, "wal"));
        let _ = self.jobs.send(Job::Split(closed, path));
        Ok(())
    }
}

impl Segmenter {
    fn run(mut self, jobs: mpsc::Receiver<Job>) {
        while let Ok(job) = jobs.recv() {
            match job {
                Job::Split(seq, path) => {
                    if let Err(e) = self.split(seq, &path) {
                        tracing::error!(error = %e, path = %path.display(), "splitting a raft WAL file into segments failed");
                    }
                }
                Job::Purged(group, point) => {
                    self.purged_on_disk(group, point);
                    if let Err(e) = self.compact(group) {
                        tracing::warn!(group, error = %e, "deleting purged raft segments failed");
                    }
                }
                Job::Forget(group, flushed) => {
                    let result = self.forget(group);
                    if let Err(e) = &result {
                        tracing::warn!(group, error = %e, "deleting a removed raft group's files failed");
                    }
                    if let Some(flushed) = flushed {
                        flushed(result);
                    }
                }
                Job::Barrier(flushed) => flushed(Ok(())),
            }
        }
    }

    fn purged_on_disk(&mut self, group: GroupId, point: u64) {
        let known = self.durable_purged.entry(group).or_default();
        *known = (*known).max(point);
    }

    /// Writes each group's records of WAL file `seq` to a segment of that group (entries
    /// already purged left out, the group's vote, commit and purge point first), then
    /// deletes the WAL file.
    fn split(&mut self, seq: u64, path: &Path) -> io::Result<()> {
        let bytes = fs::read(path)?;
        let mut per_group: BTreeMap<GroupId, (Vec<u8>, Option<u64>)> = BTreeMap::new();
        // Purge points only move forward: reading them once keeps at most a few more entries.
        let purged: BTreeMap<GroupId, Option<u64>> = self
            .shared
            .groups
            .lock()
            .iter()
            .map(|(group, state)| (*group, state.lock().purged.map(|p| p.index)))
            .collect();
        let mut offset = 0;
        while let Some((group, index, used)) = record::peek(&bytes[offset..]) {
            // Records of a group that no longer exists are left out.
            if let Some(purged) = purged.get(&group) {
                let (out, highest) = per_group.entry(group).or_default();
                let live = match index {
                    Some(index) => purged.is_none_or(|p| index > p),
                    None => true,
                };
                if live {
                    *highest = (*highest).max(index);
                    out.extend_from_slice(&bytes[offset..offset + used]);
                }
            }
            offset += used;
        }
        for (group, (records, highest)) in per_group {
            let Some(state) = self.shared.groups.lock().get(&group).cloned() else {
                continue;
            };
            let mut out = Vec::with_capacity(records.len() + 128);
            let purged = {
                let state = state.lock();
                if let Some(vote) = state.vote {
                    record::encode(&mut out, group, &Op::Vote(vote));
                }
                record::encode(&mut out, group, &Op::Committed(state.committed));
                if let Some(purged) = state.purged {
                    record::encode(&mut out, group, &Op::Purge(purged));
                }
                state.purged
            };
            out.extend_from_slice(&records);
            let dir = group_dir(&self.shared.dir, group);
            fs::create_dir_all(&dir)?;
            let temporary = dir.join(file_name(seq, "tmp"));
            let mut file = File::create(&temporary)?;
            file.write_all(&out)?;
            file.sync_data()?;
            fs::rename(&temporary, dir.join(file_name(seq, "seg")))?;
            sync_dir(&dir)?;
            self.segments.entry(group).or_default().push((seq, highest));
            if let Some(purged) = purged {
                self.purged_on_disk(group, purged.index);
            }
            self.compact(group)?;
        }
        fs::remove_file(path)?;
        sync_dir(&wal_dir(&self.shared.dir))
    }

    /// Deletes the files of a group whose removal is on disk (unless it was created again
    /// meanwhile).
    fn forget(&mut self, group: GroupId) -> io::Result<()> {
        if self.shared.groups.lock().contains_key(&group) {
            return Ok(());
        }
        self.segments.remove(&group);
        self.durable_purged.remove(&group);
        let dir = group_dir(&self.shared.dir, group);
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => sync_dir(&self.shared.dir.join("groups")),
        }
    }

    /// Deletes a group's oldest segments while every entry in them is purged (never its
    /// newest one, and never out of order: an older segment may hold entries a newer one's
    /// truncation removes).
    fn compact(&mut self, group: GroupId) -> io::Result<()> {
        let purged = self.durable_purged.get(&group).copied();
        let Some(files) = self.segments.get_mut(&group) else {
            return Ok(());
        };
        let dir = group_dir(&self.shared.dir, group);
        let mut removed = 0;
        while files.len() > removed + 1 {
            let (seq, highest) = files[removed];
            let dead = match highest {
                None => true,
                Some(index) => purged.is_some_and(|p| index <= p),
            };
            if !dead {
                break;
            }
            fs::remove_file(dir.join(file_name(seq, "seg")))?;
            removed += 1;
        }
        files.drain(..removed);
        Ok(())
    }
}

#[cfg(test)]
#[path = "wal_tests.rs"]
mod tests;
