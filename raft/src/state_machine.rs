//! openraft's state machine for one quorum queue: the pure `warren_core::quorum` machine,
//! its last applied log id and membership, and snapshots written to the group's directory.

use std::fs::{self, File};
use std::io::{self, Cursor, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, OptionalSend, StorageError, StorageIOError,
    StoredMembership,
};
use parking_lot::Mutex;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Notify;
use warren_core::quorum::codec::{decode_snapshot, encode_snapshot};
use warren_core::quorum::{Command, Effect, QuorumConfig, QuorumQueue, Reply};

use crate::record::{put_membership, put_opt_log_id, Reader};
use crate::{Response, TypeConfig};

const SNAPSHOT_MAGIC: &[u8; 4] = b"WQSN";
const SNAPSHOT_FILE: &str = "snapshot";

/// Effects of one applied entry: the log index and what the leader should do.
pub type Effects = (u64, Vec<Effect>);

/// Commands applied since the last snapshot after which another is asked for. openraft's
/// own policy counts entries (every 5,000), and an entry may carry a batch of a thousand
/// commands: this bounds the log a restart replays, and the messages it holds in memory,
/// by commands.
pub const SNAPSHOT_COMMANDS: u64 = 20_000;

struct Inner {
    dir: PathBuf,
    queue: QuorumQueue,
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    /// The latest snapshot: its meta and the encoded queue.
    snapshot: Option<(SnapshotMeta<u64, BasicNode>, Vec<u8>)>,
    built: u64,
    effects: Option<UnboundedSender<Effects>>,
    /// Commands applied since the last snapshot was built or installed.
    since_snapshot: u64,
}

/// The state machine of one quorum-queue group. Cheap to clone (a handle).
#[derive(Clone)]
pub struct QueueStateMachine {
    inner: Arc<Mutex<Inner>>,
    /// Woken each time another [`SNAPSHOT_COMMANDS`] commands have been applied.
    snapshot_due: Arc<Notify>,
    /// Woken when applying entries (or installing a snapshot) moved the queue's next timer.
    timer_moved: Arc<Notify>,
}

impl QueueStateMachine {
    /// Opens the state machine of a group whose directory is `dir` (see
    /// [`crate::Wal::group_dir`]), restored from its snapshot when it has one, else empty with
    /// `config`. Applied entries' effects go to `effects` (the leader's driver reads them;
    /// followers may pass `None`).
    pub fn open(
        dir: impl Into<PathBuf>,
        config: QuorumConfig,
        effects: Option<UnboundedSender<Effects>>,
    ) -> io::Result<QueueStateMachine> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        let mut inner = Inner {
            dir,
            queue: QuorumQueue::new(config),
            last_applied: None,
            membership: StoredMembership::default(),
            snapshot: None,
            built: 0,
            effects,
            since_snapshot: 0,
        };
        if let Some((meta, data)) = read_snapshot(&inner.dir.join(SNAPSHOT_FILE))? {
            inner.queue = decode_snapshot(&data).map_err(io::Error::other)?;
            inner.last_applied = meta.last_log_id;
            inner.membership = meta.last_membership.clone();
            inner.snapshot = Some((meta, data));
        }
        Ok(QueueStateMachine {
            inner: Arc::new(Mutex::new(inner)),
            snapshot_due: Arc::new(Notify::new()),
            timer_moved: Arc::new(Notify::new()),
        })
    }

    /// Resolves once applied entries (or an installed snapshot) moved the queue's next
    /// timer (`QuorumQueue::next_timer`): a TTL, delay or consumer timeout was added or went.
    pub async fn timer_moved(&self) {
        self.timer_moved.notified().await;
    }

    /// Resolves once [`SNAPSHOT_COMMANDS`] more commands have been applied since the last
    /// snapshot: the group's timer then asks openraft for one.
    pub async fn snapshot_due(&self) {
        self.snapshot_due.notified().await;
    }

    /// Reads the queue's state (for stats and the management API).
    pub fn with_queue<T>(&self, read: impl FnOnce(&QuorumQueue) -> T) -> T {
        read(&self.inner.lock().queue)
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId<u64>> {
        self.inner.lock().last_applied
    }
}

impl RaftSnapshotBuilder<TypeConfig> for QueueStateMachine {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let (meta, data, dir) = {
            let mut inner = self.inner.lock();
            inner.built += 1;
            inner.since_snapshot = 0;
            let meta = SnapshotMeta {
                last_log_id: inner.last_applied,
                last_membership: inner.membership.clone(),
                snapshot_id: format!(
                    "{}-{}",
                    inner.last_applied.map_or(0, |id| id.index),
                    inner.built
                ),
            };
            (meta, encode_snapshot(&inner.queue), inner.dir.clone())
        };
        // Durable before openraft purges the log it replaces; its fsyncs on a blocking
        // thread, not on the runtime's (under load snapshots come several times a second).
        let written = {
            let meta = meta.clone();
            tokio::task::spawn_blocking(move || write_snapshot(&dir, &meta, &data).map(|()| data))
                .await
                .unwrap_or_else(|e| Err(io::Error::other(e)))
        };
        let data = written.map_err(|e| {
            StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e))
        })?;
        self.inner.lock().snapshot = Some((meta.clone(), data.clone()));
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for QueueStateMachine {
    type SnapshotBuilder = QueueStateMachine;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let inner = self.inner.lock();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut inner = self.inner.lock();
        let mut replies = Vec::new();
        let timer_before = inner.queue.next_timer();
        for entry in entries {
            inner.last_applied = Some(entry.log_id);
            match entry.payload {
                EntryPayload::Blank => replies.push(Response(Reply::Ok)),
                EntryPayload::Normal(stamped) => {
                    let commands = match &stamped.command {
                        Command::Batch(commands) => commands.len() as u64,
                        _ => 1,
                    };
                    let before = inner.since_snapshot;
                    inner.since_snapshot += commands;
                    if inner.since_snapshot / SNAPSHOT_COMMANDS > before / SNAPSHOT_COMMANDS {
                        self.snapshot_due.notify_one();
                    }
                    let applied = inner.queue.apply(stamped.at, stamped.command);
                    if !applied.effects.is_empty() {
                        if let Some(sender) = &inner.effects {
                            let _ = sender.send((entry.log_id.index, applied.effects));
                        }
                    }
                    replies.push(Response(applied.reply));
                }
                EntryPayload::Membership(membership) => {
                    inner.membership = StoredMembership::new(Some(entry.log_id), membership);
                    replies.push(Response(Reply::Ok));
                }
            }
        }
        if inner.queue.next_timer() != timer_before {
            self.timer_moved.notify_one();
        }
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<u64>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<u64, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<u64>> {
        let data = snapshot.into_inner();
        let queue = decode_snapshot(&data).map_err(|e| {
            StorageIOError::read_snapshot(Some(meta.signature()), AnyError::new(&e))
        })?;
        let dir = self.inner.lock().dir.clone();
        write_snapshot(&dir, meta, &data).map_err(|e| {
            StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e))
        })?;
        let mut inner = self.inner.lock();
        inner.queue = queue;
        inner.last_applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        inner.snapshot = Some((meta.clone(), data));
        inner.since_snapshot = 0;
        drop(inner);
        self.timer_moved.notify_one();
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        Ok(self
            .inner
            .lock()
            .snapshot
            .as_ref()
            .map(|(meta, data)| Snapshot {
                meta: meta.clone(),
                snapshot: Box::new(Cursor::new(data.clone())),
            }))
    }
}

/// Writes `snapshot` atomically: a temporary file, fsync, rename, fsync of the directory.
/// Layout: `magic | last log id | membership log id | membership | id | queue | crc32`.
fn write_snapshot(dir: &Path, meta: &SnapshotMeta<u64, BasicNode>, data: &[u8]) -> io::Result<()> {
    let mut out = Vec::with_capacity(data.len() + 256);
    out.extend_from_slice(SNAPSHOT_MAGIC);
    put_opt_log_id(&mut out, meta.last_log_id.as_ref());
    put_opt_log_id(&mut out, meta.last_membership.log_id().as_ref());
    put_membership(&mut out, meta.last_membership.membership());
    out.extend_from_slice(&(meta.snapshot_id.len() as u32).to_le_bytes());
    out.extend_from_slice(meta.snapshot_id.as_bytes());
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    let temporary = dir.join("snapshot.tmp");
    let mut file = File::create(&temporary)?;
    file.write_all(&out)?;
    file.sync_data()?;
    fs::rename(&temporary, dir.join(SNAPSHOT_FILE))?;
    File::open(dir)?.sync_all()
}

type StoredSnapshot = (SnapshotMeta<u64, BasicNode>, Vec<u8>);

fn read_snapshot(path: &Path) -> io::Result<Option<StoredSnapshot>> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    parse_snapshot(&bytes).map(Some).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is damaged: remove it to rebuild the queue from its peers",
                path.display()
            ),
        )
    })
}

/// Parses a snapshot file's bytes; `None` when they are damaged.
pub(crate) fn parse_snapshot(bytes: &[u8]) -> Option<StoredSnapshot> {
    if bytes.len() < 8 || &bytes[..4] != SNAPSHOT_MAGIC {
        return None;
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32fast::hash(body).to_le_bytes() != crc {
        return None;
    }
    let mut r = Reader(&body[4..]);
    let parsed = (|| {
        let last_log_id = r.opt_log_id()?;
        let membership_log_id = r.opt_log_id()?;
        let membership = r.membership()?;
        let id_length = r.u32()? as usize;
        let snapshot_id = String::from_utf8(r.take(id_length)?.to_vec()).ok()?;
        let data_length = usize::try_from(r.u64()?).ok()?;
        let data = r.take(data_length)?.to_vec();
        r.0.is_empty().then_some((
            SnapshotMeta {
                last_log_id,
                last_membership: StoredMembership::new(membership_log_id, membership),
                snapshot_id,
            },
            data,
        ))
    })();
    parsed
}
