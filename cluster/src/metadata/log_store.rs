//! The metadata group's durable Raft log: one append-only file of CRC-checked records
//! (entries, truncations, purges), fsynced before openraft is told an append is durable, and
//! the vote in its own file, replaced atomically. Small by design: the metadata log is
//! bounded by snapshots. It should move onto the shared WAL of the `raft/` crate (quorum
//! queues) once that lands; this module is the boundary to replace.

// The helpers return openraft's own (large) error type, which the storage traits return.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{
    AnyError, Entry, LogId, OptionalSend, RaftLogReader, StorageError, StorageIOError, Vote,
};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::TypeConfig;

/// The log file inside the metadata directory.
const LOG_FILE: &str = "raft.log";
/// The vote (and the last known commit) inside the metadata directory.
const VOTE_FILE: &str = "raft.vote";
/// Rewrite the log without dead records once it has this many bytes more than it needs.
const COMPACT_AFTER_BYTES: u64 = 4 * 1024 * 1024;

/// One record of the log file.
#[derive(Debug, Serialize, Deserialize)]
enum Record {
    /// An entry, replacing any entry at its index.
    Entry(Entry<TypeConfig>),
    /// Entries from this index on are gone.
    Truncate(u64),
    /// Entries up to and including this log id are gone (in a snapshot).
    Purge(LogId<u64>),
}

/// The vote file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct VoteFile {
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
}

struct Inner {
    dir: PathBuf,
    file: File,
    file_bytes: u64,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
    last_purged: Option<LogId<u64>>,
    vote: VoteFile,
    /// When the commit-index hint was last written to the vote file.
    committed_saved_at: Option<std::time::Instant>,
}

/// How often at most the commit-index hint is written: a rename per commit cost more than
/// the log's own fdatasync on a busy disk, and a stale hint is only re-learned from the leader.
const COMMITTED_SAVE_INTERVAL: std::time::Duration = std::time::Duration::from_millis(200);

/// The durable log; clones share it (openraft reads through one while it appends through
/// another).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<Inner>>,
}

fn io_error(error: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::write_logs(AnyError::error(error)).into()
}

fn encode_record(record: &Record, out: &mut Vec<u8>) -> Result<(), StorageError<u64>> {
    let body = serde_json::to_vec(record).map_err(io_error)?;
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(())
}

/// Reads records until the end or the first torn or corrupt one; returns them and the
/// length of the good prefix.
fn read_records(bytes: &[u8]) -> (Vec<Record>, usize) {
    let mut records = Vec::new();
    let mut at = 0;
    while bytes.len() >= at + 8 {
        let length =
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        let crc = u32::from_be_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        let Some(body) = bytes.get(at + 8..at + 8 + length) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        match serde_json::from_slice(body) {
            Ok(record) => records.push(record),
            Err(_) => break,
        }
        at += 8 + length;
    }
    (records, at)
}

/// Writes `bytes` to `path` so a crash leaves the old or the new file whole.
fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let temporary = path.with_extension("tmp");
    let mut file = File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&temporary, path)?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, dropping a torn last record.
    pub fn open(dir: &Path) -> std::io::Result<LogStore> {
        fs::create_dir_all(dir)?;
        let path = dir.join(LOG_FILE);
        let mut bytes = Vec::new();
        if path.exists() {
            File::open(&path)?.read_to_end(&mut bytes)?;
        }
        let (records, good) = read_records(&bytes);
        let mut entries = BTreeMap::new();
        let mut last_purged = None;
        for record in records {
            match record {
                Record::Entry(entry) => {
                    entries.insert(entry.log_id.index, entry);
                }
                Record::Truncate(from) => {
                    entries.split_off(&from);
                }
                Record::Purge(log_id) => {
                    entries = entries.split_off(&(log_id.index + 1));
                    last_purged = Some(log_id);
                }
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        if (good as u64) < bytes.len() as u64 {
            tracing::warn!(
                path = %path.display(),
                dropped = bytes.len() - good,
                "metadata log: a torn last record was dropped"
            );
            file.set_len(good as u64)?;
        }
        let vote = match fs::read(dir.join(VOTE_FILE)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(std::io::Error::other)?,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => VoteFile::default(),
            Err(error) => return Err(error),
        };
        Ok(LogStore {
            inner: Arc::new(Mutex::new(Inner {
                dir: dir.to_owned(),
                file,
                file_bytes: good as u64,
                entries,
                last_purged,
                vote,
                committed_saved_at: None,
            })),
        })
    }

    /// Whether this node has ever been part of a cluster (it has a vote or log entries).
    pub fn is_blank(&self) -> bool {
        let inner = self.inner.lock();
        inner.vote.vote.is_none() && inner.entries.is_empty() && inner.last_purged.is_none()
    }

    fn write_records(inner: &mut Inner, records: &[Record]) -> Result<(), StorageError<u64>> {
        let mut out = Vec::new();
        for record in records {
            encode_record(record, &mut out)?;
        }
        inner.file.write_all(&out).map_err(io_error)?;
        inner.file.sync_data().map_err(io_error)?;
        inner.file_bytes += out.len() as u64;
        Ok(())
    }

    /// Rewrites the file with only the live entries once dead records dominate it.
    fn compact(inner: &mut Inner) -> Result<(), StorageError<u64>> {
        let mut out = Vec::new();
        if let Some(purged) = inner.last_purged {
            encode_record(&Record::Purge(purged), &mut out)?;
        }
        for entry in inner.entries.values() {
            encode_record(&Record::Entry(entry.clone()), &mut out)?;
        }
        if inner.file_bytes < out.len() as u64 + COMPACT_AFTER_BYTES {
            return Ok(());
        }
        let path = inner.dir.join(LOG_FILE);
        replace_file(&path, &out).map_err(io_error)?;
        inner.file = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io_error)?;
        inner.file_bytes = out.len() as u64;
        Ok(())
    }

    fn save_vote_file(inner: &Inner, sync: bool) -> Result<(), StorageError<u64>> {
        let bytes = serde_json::to_vec(&inner.vote).map_err(io_error)?;
        let path = inner.dir.join(VOTE_FILE);
        if sync {
            replace_file(&path, &bytes).map_err(io_error)
        } else {
            // The commit index is a hint (openraft re-learns it from the leader): no fsync.
            let temporary = path.with_extension("tmp");
            fs::write(&temporary, &bytes)
                .and_then(|()| fs::rename(&temporary, &path))
                .map_err(io_error)
        }
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        let inner = self.inner.lock();
        Ok(inner
            .entries
            .range(range)
            .map(|(_, entry)| entry.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let inner = self.inner.lock();
        let last = inner
            .entries
            .values()
            .next_back()
            .map(|entry| entry.log_id)
            .or(inner.last_purged);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.inner.lock();
        inner.vote.vote = Some(*vote);
        Self::save_vote_file(&inner, true)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.inner.lock().vote.vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        let mut inner = self.inner.lock();
        inner.vote.committed = committed;
        let now = std::time::Instant::now();
        let due = inner
            .committed_saved_at
            .is_none_or(|at| now.duration_since(at) >= COMMITTED_SAVE_INTERVAL);
        if !due {
            return Ok(());
        }
        inner.committed_saved_at = Some(now);
        Self::save_vote_file(&inner, false)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.inner.lock().vote.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.inner.lock();
        let records: Vec<Record> = entries.into_iter().map(Record::Entry).collect();
        let written = Self::write_records(&mut inner, &records);
        if written.is_ok() {
            for record in records {
                if let Record::Entry(entry) = record {
                    inner.entries.insert(entry.log_id.index, entry);
                }
            }
        }
        callback.log_io_completed(
            written
                .as_ref()
                .map(|_| ())
                .map_err(|e| std::io::Error::other(e.to_string())),
        );
        written
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.inner.lock();
        Self::write_records(&mut inner, &[Record::Truncate(log_id.index)])?;
        inner.entries.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.inner.lock();
        Self::write_records(&mut inner, &[Record::Purge(log_id)])?;
        inner.entries = inner.entries.split_off(&(log_id.index + 1));
        inner.last_purged = Some(log_id);
        Self::compact(&mut inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, EntryPayload};

    fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(term, 1), index),
            payload: EntryPayload::Blank,
        }
    }

    fn temporary_dir() -> PathBuf {
        std::env::temp_dir().join(format!(
            "warren-metadata-log-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ))
    }

    #[test]
    fn entries_truncations_purges_and_the_vote_survive_a_reopen_and_a_torn_tail_is_dropped() {
        let dir = temporary_dir();
        let store = LogStore::open(&dir).unwrap();
        assert!(store.is_blank());
        {
            let mut inner = store.inner.lock();
            let records: Vec<Record> = (1..=5).map(|i| Record::Entry(entry(1, i))).collect();
            LogStore::write_records(&mut inner, &records).unwrap();
            LogStore::write_records(&mut inner, &[Record::Truncate(4)]).unwrap();
            LogStore::write_records(&mut inner, &[Record::Entry(entry(2, 4))]).unwrap();
            LogStore::write_records(&mut inner, &[Record::Purge(entry(1, 1).log_id)]).unwrap();
            inner.vote.vote = Some(Vote::new(2, 7));
            LogStore::save_vote_file(&inner, true).unwrap();
        }
        drop(store);
        // A torn record at the end: a length with half a body.
        let mut file = OpenOptions::new()
            .append(true)
            .open(dir.join(LOG_FILE))
            .unwrap();
        file.write_all(&[0, 0, 0, 50, 1, 2, 3, 4, b'{']).unwrap();
        drop(file);
        let reopened = LogStore::open(&dir).unwrap();
        assert!(!reopened.is_blank());
        let inner = reopened.inner.lock();
        let indexes: Vec<(u64, u64)> = inner
            .entries
            .values()
            .map(|e| (e.log_id.leader_id.term, e.log_id.index))
            .collect();
        assert_eq!(indexes, [(1, 2), (1, 3), (2, 4)]);
        assert_eq!(inner.last_purged.map(|l| l.index), Some(1));
        assert_eq!(inner.vote.vote, Some(Vote::new(2, 7)));
        let on_disk = fs::metadata(dir.join(LOG_FILE)).unwrap().len();
        assert_eq!(on_disk, inner.file_bytes, "the torn tail was cut off");
        drop(inner);
        fs::remove_dir_all(dir).unwrap();
    }
}
