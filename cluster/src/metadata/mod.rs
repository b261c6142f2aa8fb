//! The replicated metadata store: one openraft 0.9 group per cluster whose log holds every
//! topology change, applied by each node's state machine to its own core.
//!
//! - **Formation** (`formation.rs`): nodes started from one seed list form one cluster (the
//!   node with the smallest name among itself and its seeds initialises it, the others join
//!   it); a blank node joins the first member it reaches; a former member restarts from its
//!   own log and membership. Voters are the first 3 (or 5) nodes to join, the rest learners.
//! - **Changes**: the core calls [`MetadataStore`] (a
//!   [`TopologyReplicator`]) before it applies a change. The change is proposed to the leader
//!   (forwarded over the control link from a follower), committed by a majority, and handed
//!   back to the proposing call in log order (see `state_machine.rs`). Each node has one
//!   proposal in flight at a time; the changes that arrive meanwhile are proposed together
//!   as one entry once it is answered (group commit, `group_commit.rs`). Without a majority the
//!   call is refused within `cluster.change_timeout` (at most 10 s) with
//!   [`warren_core::replication::no_majority`].
//! - **Heartbeats**: this one group keeps openraft's own heartbeats and elections (raised to
//!   a 250 ms heartbeat, 1-2 s election timeout): simpler than driving elections from the
//!   failure detector, and one group's ticks cost nothing. Quorum queue groups, of which there
//!   are many, are the ones that should turn them off and consult [`crate::detector`].

mod command;
mod formation;
pub mod group_commit;
mod log_store;
mod network;
mod state_machine;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, Config, Raft, ServerState, SnapshotPolicy};
use parking_lot::RwLock;
use serde_json::{json, Value as Json};
use sha2::{Digest, Sha256};
use tokio::runtime::{Handle, RuntimeFlavor};
use warren_core::replication::{
    no_majority, ReplicationPermit, TopologyChange, TopologyReplicator,
};
use warren_core::{Broker, CoreError, CoreResult};

pub use command::{BatchedChange, CommandResponse, MetadataCommand, Operation};
pub use log_store::LogStore;
pub use state_machine::{DefinitionsExport, DefinitionsImport, SnapshotIo};

use crate::codec::LinkKind;
use crate::transport::{Handler, Transport};
use group_commit::GroupCommit;

openraft::declare_raft_types!(
    /// The metadata group's openraft types.
    pub TypeConfig:
        D = MetadataCommand,
        R = CommandResponse,
);

/// Methods of the transport's requests beyond the Raft RPCs.
pub mod methods {
    pub use super::network::methods::*;
    /// Formation: is the peer a member, and who leads?
    pub const INFO: u16 = 10;
    /// Formation: add the caller to the cluster (forwarded to the leader).
    pub const JOIN: u16 = 11;
    /// A follower's change, proposed to the leader.
    pub const PROPOSE: u16 = 12;
    /// The node's `/api/nodes` entry.
    pub const NODE: u16 = 13;
    /// Remove a node from the cluster (forwarded to the leader).
    pub const FORGET: u16 = 14;
}

/// The Raft node id of a node name: the first 8 bytes of its SHA-256, so every node derives
/// the same id from the same name.
pub fn node_id(name: &str) -> u64 {
    let digest = Sha256::digest(name.as_bytes());
    u64::from_be_bytes([
        digest[0], digest[1], digest[2], digest[3], digest[4], digest[5], digest[6], digest[7],
    ])
}

/// The membership's node record: `NAME HOST:PORT`.
pub fn basic_node(name: &str, address: &str) -> BasicNode {
    BasicNode {
        addr: format!("{name} {address}"),
    }
}

/// The node name in a membership record.
pub fn node_name_of(node: &BasicNode) -> &str {
    node.addr
        .split_once(' ')
        .map_or(&node.addr, |(name, _)| name)
}

/// The dial address in a membership record.
pub fn node_address_of(node: &BasicNode) -> &str {
    node.addr.split_once(' ').map_or("", |(_, address)| address)
}

/// What the metadata store needs to start.
#[derive(Clone)]
pub struct MetadataConfig {
    /// This node's name.
    pub node: String,
    /// The address peers dial for this node (`HOST:PORT` of its cluster listener).
    pub address: String,
    /// The seed list: names and addresses (this node may be among them).
    pub seeds: Vec<(String, String)>,
    /// Where the log, vote and snapshots live.
    pub dir: PathBuf,
    /// How long a change waits for a majority.
    pub change_timeout: Duration,
    /// This node's `/api/nodes` entry, for peers that ask.
    pub node_info: Arc<dyn Fn() -> Json + Send + Sync>,
    /// A blank node completing `join_cluster` ([`crate::join`]): it joins its seeds and never
    /// forms a cluster of its own, however long they take to answer.
    pub join_only: bool,
}

/// One cluster member as `cluster_status` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The node name.
    pub name: String,
    /// Its cluster address.
    pub address: String,
    /// Whether it votes (else it is a learner).
    pub voter: bool,
    /// Whether it is this node or answering pings.
    pub running: bool,
}

/// The metadata store of this node.
pub struct MetadataStore {
    config: MetadataConfig,
    raft: Raft<TypeConfig>,
    transport: Arc<Transport>,
    shared: Arc<state_machine::Shared>,
    next_ticket: AtomicU64,
    runtime: Handle,
    /// Peers' `/api/nodes` entries, refreshed in the background.
    peer_info: RwLock<BTreeMap<String, Json>>,
    /// Serialises membership changes on the leader.
    membership_lock: tokio::sync::Mutex<()>,
    /// Serialises leadership checks; holds when the last successful one started.
    leadership_check: tokio::sync::Mutex<Option<Instant>>,
    /// This node's changes waiting for the leader while a batch of them is in flight.
    group: parking_lot::Mutex<GroupCommit<Queued>>,
    /// The store itself, for the task that drives a batch.
    me: Weak<MetadataStore>,
}

/// A change of this node waiting in [`MetadataStore::group`].
struct Queued {
    ticket: u64,
    change: Json,
    /// When its caller gives up.
    deadline: Instant,
    /// The batch's outcome: committed, or why not.
    answer: tokio::sync::oneshot::Sender<Result<(), String>>,
}

/// Why the store could not start.
#[derive(Debug)]
pub struct StartError(pub String);

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StartError {}

impl MetadataStore {
    /// Opens the log in `config.dir`, starts the Raft node on `transport`, installs itself as
    /// `broker`'s replicator, and starts forming or rejoining the cluster in the background.
    pub async fn start(
        config: MetadataConfig,
        broker: Arc<Broker>,
        transport: Arc<Transport>,
        cluster_id: Arc<RwLock<String>>,
        snapshot_io: SnapshotIo,
    ) -> Result<Arc<MetadataStore>, StartError> {
        let log = LogStore::open(&config.dir).map_err(|e| {
            StartError(format!(
                "cannot open the metadata log in {}: {e}",
                config.dir.display()
            ))
        })?;
        let blank = log.is_blank();
        let machine = state_machine::StateMachine::open(
            Arc::clone(&broker),
            config.node.clone(),
            config.dir.clone(),
            snapshot_io,
            cluster_id,
        );
        let shared = machine.shared();
        let raft_config = Config {
            cluster_name: "warren-metadata".to_string(),
            heartbeat_interval: 250,
            election_timeout_min: 1000,
            election_timeout_max: 2000,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(5000),
            max_in_snapshot_log_to_keep: 1000,
            ..Config::default()
        }
        .validate()
        .map_err(|e| StartError(format!("metadata group configuration: {e}")))?;
        let raft = Raft::new(
            node_id(&config.node),
            Arc::new(raft_config),
            network::Network {
                transport: Arc::clone(&transport),
            },
            log,
            machine,
        )
        .await
        .map_err(|e| StartError(format!("cannot start the metadata group: {e}")))?;
        for (name, address) in &config.seeds {
            transport.add_seed(name, address);
        }
        let store = Arc::new_cyclic(|me| MetadataStore {
            config,
            raft,
            transport: Arc::clone(&transport),
            shared,
            next_ticket: AtomicU64::new(rand::random::<u32>() as u64 * 1_000_000),
            runtime: Handle::current(),
            peer_info: RwLock::default(),
            membership_lock: tokio::sync::Mutex::new(()),
            leadership_check: tokio::sync::Mutex::new(None),
            group: parking_lot::Mutex::new(GroupCommit::new(group_commit::MAX_BATCH)),
            me: me.clone(),
        });
        transport.set_handler(store.handler());
        broker.set_replicator(Arc::clone(&store) as Arc<dyn TopologyReplicator>);
        tokio::spawn(Arc::clone(&store).follow_membership());
        tokio::spawn(Arc::clone(&store).refresh_peer_info());
        tokio::spawn(formation::form(Arc::clone(&store), blank));
        Ok(store)
    }

    /// This node's name.
    pub fn node(&self) -> &str {
        &self.config.node
    }

    /// The transport.
    pub fn transport(&self) -> &Arc<Transport> {
        &self.transport
    }

    /// The cluster's id (empty until this node is a member).
    pub fn cluster_id(&self) -> String {
        self.shared.cluster_id.read().clone()
    }

    /// The leader's name, when one is known.
    pub fn leader(&self) -> Option<String> {
        let metrics = self.raft.metrics().borrow().clone();
        let leader = metrics.current_leader?;
        metrics
            .membership_config
            .membership()
            .get_node(&leader)
            .map(|node| node_name_of(node).to_string())
    }

    /// Whether this node is in a cluster's membership.
    pub fn is_member(&self) -> bool {
        let metrics = self.raft.metrics().borrow().clone();
        metrics
            .membership_config
            .membership()
            .get_node(&node_id(&self.config.node))
            .is_some()
    }

    /// The members, voters first, with whether each is running.
    pub fn members(&self) -> Vec<Member> {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership().clone();
        let voters: BTreeSet<u64> = membership.voter_ids().collect();
        let mut members: Vec<Member> = membership
            .nodes()
            .map(|(id, node)| {
                let name = node_name_of(node).to_string();
                let running = name == self.config.node || self.transport.detector().is_up(&name);
                Member {
                    name,
                    address: node_address_of(node).to_string(),
                    voter: voters.contains(id),
                    running,
                }
            })
            .collect();
        members.sort_by(|a, b| (!a.voter, &a.name).cmp(&(!b.voter, &b.name)));
        members
    }

    /// The home node of a queue, as the log recorded it.
    pub fn home_of(&self, vhost: &str, queue: &str) -> Option<String> {
        self.shared.home_of(vhost, queue)
    }

    /// The last `/api/nodes` entry each peer sent.
    pub fn peer_info(&self) -> BTreeMap<String, Json> {
        self.peer_info.read().clone()
    }

    /// `cluster_status` as JSON: this node, the cluster id, the leader, the members.
    pub fn status_json(&self) -> Json {
        let members: Vec<Json> = self
            .members()
            .into_iter()
            .map(|m| {
                json!({"name": m.name, "address": m.address,
                       "type": if m.voter { "voter" } else { "learner" },
                       "running": m.running})
            })
            .collect();
        let metrics = self.raft.metrics().borrow().clone();
        json!({
            "node": self.config.node,
            "cluster_id": self.cluster_id(),
            "leader": self.leader(),
            "raft_state": format!("{:?}", metrics.state),
            "term": metrics.current_term,
            "last_applied": self.shared.last_applied(),
            "members": members,
        })
    }

    /// Keeps the transport dialing every member openraft knows.
    async fn follow_membership(self: Arc<Self>) {
        let mut metrics = self.raft.metrics();
        loop {
            let membership = metrics.borrow().membership_config.membership().clone();
            for (_, node) in membership.nodes() {
                self.transport
                    .add_peer(node_name_of(node), node_address_of(node));
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// Fetches every running peer's `/api/nodes` entry about once a second.
    async fn refresh_peer_info(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let members = self.members();
            for member in &members {
                if member.name == self.config.node {
                    continue;
                }
                if !member.running {
                    // A node that is down raises nothing here (RabbitMQ clears its alarms).
                    self.shared
                        .broker
                        .set_remote_alarms(&member.name, Vec::new());
                    continue;
                }
                let answer = self
                    .transport
                    .call(
                        &member.name,
                        LinkKind::Control,
                        methods::NODE,
                        Bytes::new(),
                        Duration::from_millis(500),
                    )
                    .await;
                if let Some(info) = answer
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Json>(&b).ok())
                {
                    self.shared
                        .broker
                        .set_remote_alarms(&member.name, alarms_of(&info));
                    self.peer_info.write().insert(member.name.clone(), info);
                }
            }
            // Forgotten members block nobody.
            let forgotten: Vec<String> = self
                .peer_info
                .read()
                .keys()
                .filter(|name| !members.iter().any(|m| &m.name == *name))
                .cloned()
                .collect();
            for name in forgotten {
                self.shared.broker.set_remote_alarms(&name, Vec::new());
                self.peer_info.write().remove(&name);
            }
        }
    }

    /// The handler of peers' requests.
    fn handler(self: &Arc<Self>) -> Handler {
        let weak = Arc::downgrade(self);
        Arc::new(move |from, method, body| {
            let weak = weak.clone();
            Box::pin(async move {
                let Some(store) = weak.upgrade() else {
                    return Err("node is stopping".to_string());
                };
                store.handle(from, method, body).await
            })
        })
    }

    async fn handle(&self, from: String, method: u16, body: Bytes) -> Result<Bytes, String> {
        fn encode<T: serde::Serialize>(value: &T) -> Result<Bytes, String> {
            serde_json::to_vec(value)
                .map(Bytes::from)
                .map_err(|e| e.to_string())
        }
        fn decode<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
            serde_json::from_slice(body).map_err(|e| format!("bad request: {e}"))
        }
        match method {
            methods::APPEND => encode(&self.raft.append_entries(decode(&body)?).await),
            methods::VOTE => encode(&self.raft.vote(decode(&body)?).await),
            methods::SNAPSHOT => encode(&self.raft.install_snapshot(decode(&body)?).await),
            methods::INFO => encode(&json!({
                "member": self.is_member(),
                "leader": self.leader(),
                "cluster_id": self.cluster_id(),
            })),
            methods::JOIN => {
                let request: Json = decode(&body)?;
                let (Some(name), Some(address)) = (
                    request.get("name").and_then(Json::as_str),
                    request.get("address").and_then(Json::as_str),
                ) else {
                    return Err("a join names the node and its address".into());
                };
                self.transport.add_peer(name, address);
                self.add_member(name, address).await?;
                encode(&json!({"joined": true}))
            }
            methods::FORGET => {
                let request: Json = decode(&body)?;
                let name = request
                    .get("name")
                    .and_then(Json::as_str)
                    .ok_or("a forget names the node")?;
                self.forget_member(name).await?;
                encode(&json!({"forgotten": true}))
            }
            methods::PROPOSE => {
                let command: MetadataCommand = decode(&body)?;
                self.write_on_leader(command).await?;
                encode(&json!({"committed": true}))
            }
            methods::NODE => encode(&(self.config.node_info)()),
            other => Err(format!("unknown method {other} from {from}")),
        }
    }

    /// Whether a majority of the voters (this node included) answers pings now.
    fn majority_reachable(&self) -> bool {
        let metrics = self.raft.metrics().borrow().clone();
        let membership = metrics.membership_config.membership().clone();
        let voters: Vec<String> = membership
            .voter_ids()
            .filter_map(|id| {
                membership
                    .get_node(&id)
                    .map(|n| node_name_of(n).to_string())
            })
            .collect();
        let up = voters
            .iter()
            .filter(|name| **name == self.config.node || self.transport.detector().is_up(name))
            .count();
        up * 2 > voters.len()
    }

    /// On the leader: commits `command`; elsewhere: says who leads.
    ///
    /// A leader cut off from its followers would append the change to its own log, time out,
    /// and then commit it anyway once the followers are back, after the caller was told it
    /// was refused. So before appending, the leader checks that a majority answers: from the
    /// failure detector (at once), then by openraft's leadership check (a round of
    /// heartbeats acknowledged by a quorum).
    async fn write_on_leader(&self, command: MetadataCommand) -> Result<(), String> {
        if !self.majority_reachable() {
            return Err("a majority of the voters is not reachable".into());
        }
        self.confirm_leadership().await?;
        match self.raft.client_write(command).await {
            Ok(_) => {
                // Followers learn the new commit index with the next append: send it now, so
                // a follower's proposer (and every other follower) applies without waiting
                // for the heartbeat interval.
                let _ = self.raft.trigger().heartbeat().await;
                Ok(())
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward))) => Err(format!(
                "not the leader{}",
                forward
                    .leader_node
                    .as_ref()
                    .map(|n| format!("; the leader is {}", node_name_of(n)))
                    .unwrap_or_default()
            )),
            Err(error) => Err(error.to_string()),
        }
    }

    /// openraft's leadership check (heartbeats acknowledged by a quorum), shared by the
    /// changes that arrive together: a change may rely on a check that *started* after it
    /// arrived, so concurrent changes cost one or two rounds instead of one each.
    async fn confirm_leadership(&self) -> Result<(), String> {
        let arrived = Instant::now();
        let mut last_confirmed = self.leadership_check.lock().await;
        if last_confirmed.is_some_and(|started| started >= arrived) {
            return Ok(());
        }
        let started = Instant::now();
        self.raft
            .ensure_linearizable()
            .await
            .map_err(|e| format!("leadership not confirmed by a majority: {e}"))?;
        *last_confirmed = Some(started);
        Ok(())
    }

    /// Sends `method` to the leader (or runs `local` when this node leads), retrying while
    /// an election is under way, until `deadline`.
    async fn on_leader<F, Fut>(
        &self,
        method: u16,
        body: Json,
        deadline: Instant,
        local: F,
    ) -> Result<(), String>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let mut last_error = "no leader is known".to_string();
        loop {
            let metrics = self.raft.metrics().borrow().clone();
            let leader = metrics.current_leader.and_then(|id| {
                metrics
                    .membership_config
                    .membership()
                    .get_node(&id)
                    .map(|n| (id, node_name_of(n).to_string()))
            });
            match leader {
                Some((id, _)) if id == node_id(&self.config.node) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    return match tokio::time::timeout(left, local()).await {
                        Ok(result) => result,
                        Err(_) => Err("the change was not committed in time".into()),
                    };
                }
                Some((_, name)) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let bytes = Bytes::from(serde_json::to_vec(&body).map_err(|e| e.to_string())?);
                    match self
                        .transport
                        .call(&name, LinkKind::Control, method, bytes, left)
                        .await
                    {
                        Ok(_) => return Ok(()),
                        Err(error) => last_error = format!("leader {name}: {error}"),
                    }
                }
                None => {}
            }
            if Instant::now() + Duration::from_millis(50) >= deadline {
                return Err(last_error);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Proposes `change` and waits for this node's turn to apply it.
    ///
    /// The change joins this node's group commit ([`group_commit`]): proposed at once when
    /// no batch of this node is in flight, else with the others that arrive meanwhile, as one
    /// entry, as soon as the batch in flight is answered.
    async fn propose(
        &self,
        change: &TopologyChange,
    ) -> CoreResult<tokio::sync::oneshot::Sender<()>> {
        let deadline = Instant::now() + self.config.change_timeout;
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let turn = self.shared.wait_for_turn(ticket);
        let (answer, answered) = tokio::sync::oneshot::channel();
        let queued = Queued {
            ticket,
            change: command::encode_change(change),
            deadline,
            answer,
        };
        let batch = self.group.lock().submit(queued);
        if let Some(batch) = batch {
            match self.me.upgrade() {
                Some(store) => {
                    self.runtime.spawn(store.drive(batch));
                }
                None => {
                    self.shared.forget(ticket);
                    return Err(no_majority(&change.describe()));
                }
            }
        }
        // The leader's own write returns only once its machine applied the entry, which
        // waits for this node's turn: wait for either.
        tokio::pin!(answered);
        tokio::pin!(turn);
        let left = deadline.saturating_duration_since(Instant::now());
        let outcome = tokio::time::timeout(left, async {
            tokio::select! {
                turn = &mut turn => return turn.map_err(|_| "the state machine stopped".to_string()),
                written = &mut answered => written.map_err(|_| "the proposal was dropped".to_string())??,
            }
            // Committed: the turn follows once this node's machine reaches the entry.
            (&mut turn)
                .await
                .map_err(|_| "the state machine stopped".to_string())
        })
        .await;
        match outcome {
            Ok(Ok(turn)) => Ok(turn.done),
            Ok(Err(reason)) => {
                self.shared.forget(ticket);
                tracing::warn!(change = %change.describe(), %reason, "metadata change refused");
                Err(no_majority(&change.describe()))
            }
            Err(_) => {
                self.shared.forget(ticket);
                tracing::warn!(change = %change.describe(), timeout = ?self.config.change_timeout, "metadata change not committed in time");
                Err(no_majority(&change.describe()))
            }
        }
    }

    /// Proposes `batch`, answers each of its changes with the outcome, and goes on with the
    /// changes that queued meanwhile until none is left: one batch of this node in flight at
    /// a time, so the log holds this node's changes in the order they arrived.
    async fn drive(self: Arc<Self>, mut batch: Vec<Queued>) {
        loop {
            let outcome = self.propose_batch(&batch).await;
            for queued in batch {
                let _ = queued.answer.send(outcome.clone());
            }
            // A change whose caller gave up was refused: it must not be proposed now.
            let next = self.group.lock().next_batch(|q| !q.answer.is_closed());
            match next {
                Some(next) => batch = next,
                None => return,
            }
        }
    }

    /// Commits `batch` as one entry through the leader (one change alone is a plain
    /// [`Operation::Topology`] entry, as before batches existed).
    async fn propose_batch(&self, batch: &[Queued]) -> Result<(), String> {
        // The earliest caller's deadline: past it that caller is refused, so the batch must
        // stop trying then too, or a change answered "no majority" could still commit. Later
        // callers in the batch are refused a little early, which is safe.
        let deadline = batch
            .iter()
            .map(|q| q.deadline)
            .min()
            .unwrap_or_else(|| Instant::now() + self.config.change_timeout);
        let command = match batch {
            [only] => MetadataCommand {
                origin: self.config.node.clone(),
                ticket: only.ticket,
                operation: Operation::Topology(only.change.clone()),
            },
            _ => MetadataCommand {
                origin: self.config.node.clone(),
                ticket: 0,
                operation: Operation::Batch(
                    batch
                        .iter()
                        .map(|q| BatchedChange {
                            ticket: q.ticket,
                            change: q.change.clone(),
                        })
                        .collect(),
                ),
            },
        };
        let body = serde_json::to_value(&command).map_err(|e| e.to_string())?;
        self.on_leader(methods::PROPOSE, body, deadline, || {
            self.write_on_leader(command.clone())
        })
        .await
    }

    /// On the leader: adds `name` as a learner, then as a voter while there are fewer than
    /// 3 voters (5 once 5 nodes are members).
    async fn add_member(&self, name: &str, address: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let body = json!({"name": name, "address": address});
        self.on_leader(methods::JOIN, body, deadline, || async {
            let _serial = self.membership_lock.lock().await;
            let id = node_id(name);
            let metrics = self.raft.metrics().borrow().clone();
            let membership = metrics.membership_config.membership().clone();
            if membership.get_node(&id).is_none() {
                self.raft
                    .add_learner(id, basic_node(name, address), true)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            let metrics = self.raft.metrics().borrow().clone();
            let membership = metrics.membership_config.membership().clone();
            let mut voters: BTreeSet<u64> = membership.voter_ids().collect();
            let all: Vec<u64> = membership.nodes().map(|(id, _)| *id).collect();
            let target = match all.len() {
                n if n >= 5 => 5,
                n if n >= 3 => 3,
                n => n,
            };
            for candidate in all {
                if voters.len() >= target {
                    break;
                }
                voters.insert(candidate);
            }
            if voters != membership.voter_ids().collect::<BTreeSet<u64>>() {
                self.raft
                    .change_membership(voters, true)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            tracing::info!(node = %name, "cluster member added");
            Ok(())
        })
        .await
    }

    /// On the leader: removes `name` from the membership (`forget_cluster_node`).
    async fn forget_member(&self, name: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        self.on_leader(methods::FORGET, json!({"name": name}), deadline, || async {
            let _serial = self.membership_lock.lock().await;
            let id = node_id(name);
            let metrics = self.raft.metrics().borrow().clone();
            let membership = metrics.membership_config.membership().clone();
            if membership.get_node(&id).is_none() {
                return Err(format!("{name} is not a member of this cluster"));
            }
            if membership.voter_ids().any(|v| v == id) {
                let voters: BTreeSet<u64> = membership.voter_ids().filter(|v| *v != id).collect();
                if voters.is_empty() {
                    return Err("cannot forget the last voter".into());
                }
                // Replacing the voters without retaining removes the node entirely.
                self.raft
                    .change_membership(voters, false)
                    .await
                    .map_err(|e| e.to_string())?;
            } else {
                // A learner: replacing the voters (unchanged) would keep it.
                self.raft
                    .change_membership(
                        openraft::ChangeMembers::RemoveNodes(BTreeSet::from([id])),
                        false,
                    )
                    .await
                    .map_err(|e| e.to_string())?;
            }
            tracing::info!(node = %name, "cluster member forgotten");
            Ok(())
        })
        .await
    }

    /// `forget_cluster_node`: removes a node from the cluster, through the leader.
    pub async fn forget(&self, name: &str) -> Result<(), String> {
        self.forget_member(name).await
    }

    /// Whether the raft node is the leader now.
    pub fn is_leader(&self) -> bool {
        self.raft.metrics().borrow().state == ServerState::Leader
    }

    /// Stops the Raft node.
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }
}

impl TopologyReplicator for MetadataStore {
    fn replicate(&self, change: TopologyChange) -> CoreResult<ReplicationPermit> {
        let propose = self.propose(&change);
        let done = match Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| self.runtime.block_on(propose))
            }
            Ok(_) => {
                return Err(CoreError::new(
                    warren_core::ErrorKind::InternalError,
                    "metadata changes need the multi-threaded runtime",
                ))
            }
            Err(_) => self.runtime.block_on(propose),
        }?;
        Ok(ReplicationPermit::new(move || {
            let _ = done.send(());
        }))
    }
}

/// The resource alarms a peer's `/api/nodes` entry reports (`mem_alarm`, `disk_free_alarm`).
fn alarms_of(info: &Json) -> Vec<warren_core::broker::Alarm> {
    use warren_core::broker::Alarm;
    let mut alarms = Vec::new();
    if info.get("mem_alarm").and_then(Json::as_bool) == Some(true) {
        alarms.push(Alarm::Memory);
    }
    if info.get("disk_free_alarm").and_then(Json::as_bool) == Some(true) {
        alarms.push(Alarm::Disk);
    }
    alarms
}
