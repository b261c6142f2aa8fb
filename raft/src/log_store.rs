//! openraft's log storage for one group, over the node's shared [`Wal`].

use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, Entry, LogId, OptionalSend, StorageError, StorageIOError, Vote};
use parking_lot::Mutex;

use crate::record::Op;
use crate::wal::{GroupState, Wal};
use crate::{GroupId, TypeConfig};

/// One group's Raft log: entries in memory for reads, every change written through the WAL.
#[derive(Clone)]
pub struct GroupLogStore {
    group: GroupId,
    wal: Wal,
    state: Arc<Mutex<GroupState>>,
}

impl GroupLogStore {
    /// The log of `group` on this node, as the WAL recovered it (empty for a new group).
    pub fn new(wal: &Wal, group: GroupId) -> GroupLogStore {
        GroupLogStore {
            group,
            wal: wal.clone(),
            state: wal.group(group),
        }
    }

    /// The group.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// Appends entries outside openraft (benchmarks and tests of the WAL itself); `flushed`
    /// is fired once they are durable. openraft's [`RaftLogStorage::append`] does the same.
    pub fn append_entries(
        &self,
        entries: impl IntoIterator<Item = Entry<TypeConfig>>,
        flushed: impl FnOnce(std::io::Result<()>) + Send + 'static,
    ) {
        let ops: Vec<Op> = {
            let mut state = self.state.lock();
            entries
                .into_iter()
                .map(|entry| {
                    state.apply(Op::Entry(entry.clone()));
                    Op::Entry(entry)
                })
                .collect()
        };
        self.wal.submit(self.group, &ops, Some(Box::new(flushed)));
    }

    /// Purges entries up to `log_id` outside openraft (see [`GroupLogStore::append_entries`]).
    pub fn purge_to(&self, log_id: LogId<u64>) {
        self.state.lock().apply(Op::Purge(log_id));
        self.wal.submit(self.group, &[Op::Purge(log_id)], None);
    }

    /// Live entries in memory.
    pub fn entry_count(&self) -> usize {
        self.state.lock().entries.len()
    }

    async fn write_and_wait(&self, op: Op) -> Result<(), std::io::Error> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.wal.submit(
            self.group,
            &[op],
            Some(Box::new(move |result| {
                let _ = sender.send(result);
            })),
        );
        receiver
            .await
            .map_err(|_| std::io::Error::other("the raft WAL writer stopped"))?
    }
}

impl RaftLogReader<TypeConfig> for GroupLogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        Ok(self
            .state
            .lock()
            .entries
            .range(range)
            .map(|(_, entry)| entry.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for GroupLogStore {
    type LogReader = GroupLogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let state = self.state.lock();
        Ok(LogState {
            last_purged_log_id: state.purged,
            last_log_id: state.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        self.state.lock().apply(Op::Vote(*vote));
        self.write_and_wait(Op::Vote(*vote))
            .await
            .map_err(|e| StorageIOError::write_vote(AnyError::new(&e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.state.lock().vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        // Not waited for: a commit point lost in a crash is found again from the leader.
        self.state.lock().apply(Op::Committed(committed));
        self.wal
            .submit(self.group, &[Op::Committed(committed)], None);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.state.lock().committed)
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
        self.append_entries(entries, move |result| callback.log_io_completed(result));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        // Ordered before any later append in the WAL, so an append's flush covers it.
        self.state.lock().apply(Op::Truncate(log_id.index));
        self.wal
            .submit(self.group, &[Op::Truncate(log_id.index)], None);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        self.purge_to(log_id);
        Ok(())
    }
}
