//! The metadata state machine: this node's core is the state. Committed entries are applied
//! in log order; an entry this node proposed is applied by the proposing call itself (it is
//! handed its turn and the machine waits until it is done), every other entry through
//! [`warren_core::replication::apply`].
//!
//! The machine keeps no durable state of its own apart from snapshots: at boot the core has
//! loaded its saved definitions, and openraft replays the log after the last snapshot onto
//! it. Replaying a change already applied converges (declarations and deletions set the
//! final state), which is what makes that safe.
//!
//! A snapshot is the cluster's definitions (exported from the core) with the queues' home
//! nodes and the cluster id; installing one imports the definitions (adding and updating;
//! objects the snapshot lacks are not removed yet, see docs/clustering.md).

use std::collections::{BTreeMap, HashMap};
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, RaftSnapshotBuilder, SnapshotMeta,
    StorageError, StorageIOError, StoredMembership,
};
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use tokio::sync::oneshot;
use warren_core::replication::TopologyChange;
use warren_core::Broker;

use super::command::{decode_change, CommandResponse, MetadataCommand, Operation};
use super::TypeConfig;

/// The snapshot file inside the metadata directory.
const SNAPSHOT_FILE: &str = "snapshot.json";

/// How the machine reads and writes the core's definitions for snapshots (the server's
/// definitions export and import).
#[derive(Clone)]
pub struct SnapshotIo {
    /// The core's durable definitions as a RabbitMQ definitions document.
    pub export: DefinitionsExport,
    /// Applies a definitions document to the core.
    pub import: DefinitionsImport,
}

/// Exports the core's definitions.
pub type DefinitionsExport = Arc<dyn Fn() -> Json + Send + Sync>;

/// Imports definitions into the core.
pub type DefinitionsImport = Arc<dyn Fn(&Json) -> Result<(), String> + Send + Sync>;

/// A proposer's turn: apply your change, then send on `done`.
pub struct Turn {
    /// Sent (or dropped) when the proposer's local apply is over.
    pub done: oneshot::Sender<()>,
}

/// What the machine knows besides the core.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Meta {
    last_applied: Option<LogId<u64>>,
    membership: StoredMembership<u64, BasicNode>,
    /// `(vhost, queue)` to the node that declared it.
    homes: BTreeMap<String, BTreeMap<String, String>>,
}

/// A snapshot as stored and sent.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<u64, BasicNode>,
    definitions: Json,
    homes: BTreeMap<String, BTreeMap<String, String>>,
    cluster_id: String,
}

/// State shared by the machine, its snapshot builder and the proposers.
pub struct Shared {
    pub(super) broker: Arc<Broker>,
    node: String,
    dir: PathBuf,
    io: SnapshotIo,
    meta: Mutex<Meta>,
    /// Waiting proposers of this node, by ticket.
    proposals: Mutex<HashMap<u64, oneshot::Sender<Turn>>>,
    /// The cluster id, shared with the transport's handshake.
    pub cluster_id: Arc<RwLock<String>>,
    snapshot_counter: std::sync::atomic::AtomicU64,
}

impl Shared {
    /// Registers a proposer waiting for its turn.
    pub fn wait_for_turn(&self, ticket: u64) -> oneshot::Receiver<Turn> {
        let (sender, receiver) = oneshot::channel();
        self.proposals.lock().insert(ticket, sender);
        receiver
    }

    /// Forgets a proposer that gave up; its entry, if it commits, is applied by the machine.
    pub fn forget(&self, ticket: u64) {
        self.proposals.lock().remove(&ticket);
    }

    /// The home node of a queue, if the log declared it.
    pub fn home_of(&self, vhost: &str, queue: &str) -> Option<String> {
        self.meta
            .lock()
            .homes
            .get(vhost)
            .and_then(|queues| queues.get(queue))
            .cloned()
    }

    /// The index of the last entry applied here.
    pub fn last_applied(&self) -> Option<u64> {
        self.meta.lock().last_applied.map(|l| l.index)
    }

    fn record_home(&self, origin: &str, change: &TopologyChange) {
        let mut meta = self.meta.lock();
        match change {
            TopologyChange::DeclareQueue { vhost, request, .. } => {
                meta.homes
                    .entry(vhost.clone())
                    .or_default()
                    .entry(request.name.clone())
                    .or_insert_with(|| origin.to_string());
            }
            TopologyChange::DeleteQueue { vhost, name, .. } => {
                if let Some(queues) = meta.homes.get_mut(vhost) {
                    queues.remove(name);
                }
            }
            TopologyChange::DropQueue { vhost, name, home } => {
                if let Some(queues) = meta.homes.get_mut(vhost) {
                    if queues.get(name) == Some(home) {
                        queues.remove(name);
                    }
                }
            }
            TopologyChange::DeleteVhost { name } => {
                meta.homes.remove(name);
            }
            _ => {}
        }
    }

    /// Applies one committed command.
    async fn apply_command(&self, command: &MetadataCommand) -> CommandResponse {
        match &command.operation {
            Operation::ClusterId(id) => {
                let mut current = self.cluster_id.write();
                if current.is_empty() {
                    *current = id.clone();
                }
                CommandResponse::default()
            }
            Operation::Topology(json) => {
                self.apply_change(&command.origin, command.ticket, json)
                    .await
            }
            Operation::Batch(changes) => {
                let mut errors = Vec::new();
                for batched in changes {
                    let response = self
                        .apply_change(&command.origin, batched.ticket, &batched.change)
                        .await;
                    errors.extend(response.error);
                }
                CommandResponse {
                    error: (!errors.is_empty()).then(|| errors.join("; ")),
                }
            }
        }
    }

    /// Applies one committed change proposed by `origin` under `ticket`: hands it to its
    /// proposer when that is a call of this node still waiting, else applies it here.
    async fn apply_change(&self, origin: &str, ticket: u64, json: &Json) -> CommandResponse {
        let change = match decode_change(json) {
            Ok(change) => change,
            Err(error) => {
                tracing::error!(%error, "metadata log: skipped an entry");
                return CommandResponse {
                    error: Some(error.to_string()),
                };
            }
        };
        self.record_home(origin, &change);
        if origin == self.node {
            let waiting = self.proposals.lock().remove(&ticket);
            if let Some(proposer) = waiting {
                let (done, finished) = oneshot::channel();
                if proposer.send(Turn { done }).is_ok() {
                    // The proposer applies it now, in log order. A proposer that is
                    // stuck must not stop the log: after a while, move on.
                    if tokio::time::timeout(Duration::from_secs(30), finished)
                        .await
                        .is_err()
                    {
                        tracing::warn!(change = %change.describe(), "metadata log: the proposer took over 30 s to apply its change");
                    }
                    return CommandResponse::default();
                }
            }
        }
        match warren_core::replication::apply(&self.broker, &change) {
            Ok(()) => CommandResponse::default(),
            Err(error) => {
                // The same refusal the proposer got (a precondition, a permission):
                // every node refuses it alike.
                tracing::debug!(change = %change.describe(), %error, "metadata log: change refused here too");
                CommandResponse {
                    error: Some(error.message),
                }
            }
        }
    }

    fn snapshot_path(&self) -> PathBuf {
        self.dir.join(SNAPSHOT_FILE)
    }

    fn read_snapshot_file(&self) -> Option<SnapshotFile> {
        let bytes = std::fs::read(self.snapshot_path()).ok()?;
        match serde_json::from_slice(&bytes) {
            Ok(snapshot) => Some(snapshot),
            Err(error) => {
                tracing::error!(%error, "metadata snapshot unreadable; ignored");
                None
            }
        }
    }
}

/// The state machine handed to openraft.
pub struct StateMachine {
    shared: Arc<Shared>,
}

fn sm_error(error: impl std::fmt::Display) -> StorageError<u64> {
    StorageIOError::write_state_machine(AnyError::error(error)).into()
}

impl StateMachine {
    /// The machine for `broker`, restoring the last snapshot from `dir` (its definitions are
    /// imported again: they may be newer than the core's saved ones).
    pub fn open(
        broker: Arc<Broker>,
        node: String,
        dir: PathBuf,
        io: SnapshotIo,
        cluster_id: Arc<RwLock<String>>,
    ) -> StateMachine {
        let shared = Arc::new(Shared {
            broker,
            node,
            dir,
            io,
            meta: Mutex::default(),
            proposals: Mutex::default(),
            cluster_id,
            snapshot_counter: Default::default(),
        });
        if let Some(snapshot) = shared.read_snapshot_file() {
            if let Err(error) = (shared.io.import)(&snapshot.definitions) {
                tracing::error!(%error, "metadata snapshot: definitions not applied");
            }
            let mut meta = shared.meta.lock();
            meta.last_applied = snapshot.meta.last_log_id;
            meta.membership = snapshot.meta.last_membership.clone();
            meta.homes = snapshot.homes;
            *shared.cluster_id.write() = snapshot.cluster_id;
        }
        StateMachine { shared }
    }

    /// The state shared with proposers.
    pub fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }
}

/// Builds snapshots from the core.
pub struct SnapshotBuilder {
    shared: Arc<Shared>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<u64>> {
        let shared = &self.shared;
        let meta = shared.meta.lock().clone();
        let counter = shared
            .snapshot_counter
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let snapshot_id = match meta.last_applied {
            Some(last) => format!("{}-{}-{counter}", last.leader_id.term, last.index),
            None => format!("none-{counter}"),
        };
        let file = SnapshotFile {
            meta: SnapshotMeta {
                last_log_id: meta.last_applied,
                last_membership: meta.membership.clone(),
                snapshot_id,
            },
            definitions: (shared.io.export)(),
            homes: meta.homes.clone(),
            cluster_id: shared.cluster_id.read().clone(),
        };
        let bytes = serde_json::to_vec(&file).map_err(sm_error)?;
        write_atomically(&shared.snapshot_path(), &bytes).map_err(sm_error)?;
        Ok(Snapshot {
            meta: file.meta,
            snapshot: Box::new(Cursor::new(bytes)),
        })
    }
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let temporary = path.with_extension("tmp");
    let mut file = std::fs::File::create(&temporary)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&temporary, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<u64>>, StoredMembership<u64, BasicNode>), StorageError<u64>> {
        let meta = self.shared.meta.lock();
        Ok((meta.last_applied, meta.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<CommandResponse>, StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        let mut responses = Vec::new();
        for entry in entries {
            let response = match &entry.payload {
                EntryPayload::Blank => CommandResponse::default(),
                EntryPayload::Normal(command) => self.shared.apply_command(command).await,
                EntryPayload::Membership(membership) => {
                    self.shared.meta.lock().membership =
                        StoredMembership::new(Some(entry.log_id), membership.clone());
                    CommandResponse::default()
                }
            };
            self.shared.meta.lock().last_applied = Some(entry.log_id);
            responses.push(response);
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: Arc::clone(&self.shared),
        }
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
        let bytes = snapshot.into_inner();
        let mut file: SnapshotFile = serde_json::from_slice(&bytes).map_err(sm_error)?;
        file.meta = meta.clone();
        warren_core::replication::applying_replicated(|| {
            (self.shared.io.import)(&file.definitions)
        })
        .map_err(sm_error)?;
        {
            let mut state = self.shared.meta.lock();
            state.last_applied = meta.last_log_id;
            state.membership = meta.last_membership.clone();
            state.homes = file.homes.clone();
        }
        if !file.cluster_id.is_empty() {
            *self.shared.cluster_id.write() = file.cluster_id.clone();
        }
        let stored = serde_json::to_vec(&file).map_err(sm_error)?;
        write_atomically(&self.shared.snapshot_path(), &stored).map_err(sm_error)?;
        tracing::info!(snapshot = %meta.snapshot_id, "metadata snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<u64>> {
        let Some(file) = self.shared.read_snapshot_file() else {
            return Ok(None);
        };
        let bytes = serde_json::to_vec(&file).map_err(sm_error)?;
        Ok(Some(Snapshot {
            meta: file.meta,
            snapshot: Box::new(Cursor::new(bytes)),
        }))
    }
}
