//! Quorum-queue groups between nodes: what a group needs of the cluster ([`ClusterLink`],
//! supplied by the server over warren-cluster's transport), openraft's network over it
//! ([`ClusterNetwork`]), the one-member network of a node that runs alone ([`NoPeers`]), and
//! the node's side of its peers' requests ([`GroupRegistry::serve`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use parking_lot::RwLock;
use warren_core::quorum::Reply;

use crate::wire::{self, methods};
use crate::{unix_ms, GroupId, NodeId, QueueRaft, Stamped, TypeConfig};

/// Why a request to a peer got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkError {
    /// No link to the peer, or no answer in time: it may be down.
    Unreachable(String),
    /// The peer answered with an error.
    Remote(String),
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LinkError::Unreachable(why) => write!(f, "peer unreachable: {why}"),
            LinkError::Remote(why) => write!(f, "peer refused: {why}"),
        }
    }
}

impl std::error::Error for LinkError {}

/// A request's answer, later.
pub type LinkFuture = Pin<Box<dyn Future<Output = Result<Bytes, LinkError>> + Send>>;

/// What quorum queues need of the cluster.
pub trait ClusterLink: Send + Sync + 'static {
    /// This node's name.
    fn local(&self) -> &str;
    /// The cluster's members now, this node included.
    fn members(&self) -> Vec<String>;
    /// The node a queue was declared on, as the metadata store recorded it.
    fn home_of(&self, vhost: &str, queue: &str) -> Option<String>;
    /// Whether this node has an open link to `node` (this node always has): a node that
    /// is merely slow to answer pings still has one; a killed or cut-off node has not.
    fn is_connected(&self, node: &str) -> bool;
    /// A counter that moves whenever what [`ClusterLink::is_connected`] answers may have
    /// changed for some node: an idle member sleeps on it instead of polling its links.
    /// `None` (the default) means the member polls.
    fn link_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
    /// Sends a request (`method` of [`methods`]) to `node`: Raft traffic on the control
    /// link, snapshots and forwarded commands with `bulk`.
    fn call(
        &self,
        node: &str,
        method: u16,
        bulk: bool,
        body: Bytes,
        timeout: Duration,
    ) -> LinkFuture;
}

/// A member's Raft id: FNV-1a over its node name, so every node derives the same id.
pub fn member_id(name: &str) -> NodeId {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// openraft's network of one group over the cluster.
pub struct ClusterNetwork {
    /// The cluster.
    pub link: Arc<dyn ClusterLink>,
    /// The group.
    pub group: GroupId,
}

/// One peer of one group.
pub struct PeerConnection {
    link: Arc<dyn ClusterLink>,
    group: GroupId,
    /// The peer's node name (the membership record's `addr`).
    name: String,
}

impl RaftNetworkFactory<TypeConfig> for ClusterNetwork {
    type Network = PeerConnection;

    async fn new_client(&mut self, _target: NodeId, node: &BasicNode) -> PeerConnection {
        PeerConnection {
            link: Arc::clone(&self.link),
            group: self.group,
            name: node.addr.clone(),
        }
    }
}

impl PeerConnection {
    async fn request<T, E: std::error::Error>(
        &self,
        method: u16,
        bulk: bool,
        body: Vec<u8>,
        option: &RPCOption,
        decode: fn(&[u8]) -> Option<T>,
    ) -> Result<T, RPCError<NodeId, BasicNode, E>> {
        let answer = self
            .link
            .call(
                &self.name,
                method,
                bulk,
                Bytes::from(body),
                option.hard_ttl(),
            )
            .await
            .map_err(|error| match error {
                LinkError::Unreachable(_) => RPCError::Unreachable(Unreachable::new(&error)),
                LinkError::Remote(_) => RPCError::Network(NetworkError::new(&error)),
            })?;
        decode(&answer).ok_or_else(|| {
            RPCError::Network(NetworkError::new(&std::io::Error::other(format!(
                "{} sent an answer that does not parse",
                self.name
            ))))
        })
    }
}

impl RaftNetwork<TypeConfig> for PeerConnection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let body = wire::encode_append(self.group, &rpc);
        self.request(
            methods::APPEND,
            false,
            body,
            &option,
            wire::decode_append_response,
        )
        .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let body = wire::encode_snapshot(self.group, &rpc);
        self.request(
            methods::SNAPSHOT,
            true,
            body,
            &option,
            wire::decode_snapshot_response,
        )
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let body = wire::encode_vote(self.group, &rpc);
        self.request(
            methods::VOTE,
            false,
            body,
            &option,
            wire::decode_vote_response,
        )
        .await
    }
}

/// The network of a one-member group (a node that runs alone): there is nobody to call.
pub struct NoPeers;

/// A connection to a peer that does not exist.
pub struct NoPeer(NodeId);

fn unreachable<E: std::error::Error>(target: NodeId) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(format!(
        "node {target} is not a member (this node runs alone)"
    ))))
}

impl RaftNetworkFactory<TypeConfig> for NoPeers {
    type Network = NoPeer;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> NoPeer {
        NoPeer(target)
    }
}

impl RaftNetwork<TypeConfig> for NoPeer {
    async fn append_entries(
        &mut self,
        _rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable(self.0))
    }

    async fn install_snapshot(
        &mut self,
        _rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        Err(unreachable(self.0))
    }

    async fn vote(
        &mut self,
        _rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        Err(unreachable(self.0))
    }
}

/// How long the leader waits for forwarded commands to be applied.
pub const FORWARD_BOUND: Duration = Duration::from_secs(10);

/// The groups running on this node, by id, for peers' requests.
#[derive(Default)]
pub struct GroupRegistry {
    groups: RwLock<HashMap<GroupId, QueueRaft>>,
    /// One lock per group id, held by the driver that runs the group: a queue deleted and
    /// declared again (the same group id) starts only once the old member has stopped and
    /// its log and state are gone.
    slots: parking_lot::Mutex<HashMap<GroupId, Arc<tokio::sync::Mutex<()>>>>,
    /// Groups whose leader is handing over (`transfer_leadership`): nothing new is
    /// proposed on them, so the log the new leader must match stays put.
    paused: parking_lot::Mutex<std::collections::HashSet<GroupId>>,
    /// The last commit latency of each group this node leads (a batch proposed until its
    /// last entry was applied), for `rabbitmq_raft_entry_commit_latency_seconds`.
    latency: parking_lot::Mutex<HashMap<GroupId, Duration>>,
}

impl GroupRegistry {
    /// The lock of `group`'s slot (see the field's doc).
    pub fn slot(&self, group: GroupId) -> Arc<tokio::sync::Mutex<()>> {
        let mut slots = self.slots.lock();
        // Forget slots nobody holds or waits for, so the map follows the live groups.
        slots.retain(|_, slot| Arc::strong_count(slot) > 1);
        Arc::clone(slots.entry(group).or_default())
    }

    /// Makes `raft` reachable by peers as `group`.
    pub fn insert(&self, group: GroupId, raft: QueueRaft) {
        self.groups.write().insert(group, raft);
    }

    /// Stops routing peers' requests to `group`.
    pub fn remove(&self, group: GroupId) {
        self.groups.write().remove(&group);
        self.latency.lock().remove(&group);
    }

    /// The member of `group` on this node, if it runs.
    pub fn get(&self, group: GroupId) -> Option<QueueRaft> {
        self.groups.read().get(&group).cloned()
    }

    /// Holds new proposals on `group` back until [`GroupRegistry::resume`].
    pub(crate) fn pause(&self, group: GroupId) {
        self.paused.lock().insert(group);
    }

    /// Lets proposals on `group` go again.
    pub(crate) fn resume(&self, group: GroupId) {
        self.paused.lock().remove(&group);
    }

    /// Whether proposals on `group` are held back (a leadership transfer runs).
    pub(crate) fn is_paused(&self, group: GroupId) -> bool {
        self.paused.lock().contains(&group)
    }

    /// Records how long a batch took to commit on `group`.
    pub(crate) fn record_latency(&self, group: GroupId, took: Duration) {
        self.latency.lock().insert(group, took);
    }

    /// The last commit latency measured on `group` (this node led it then).
    pub fn latency(&self, group: GroupId) -> Option<Duration> {
        self.latency.lock().get(&group).copied()
    }

    /// Proposes forwarded or local `commands` on `raft` (see [`propose_all`]), unless a
    /// leadership transfer holds the group: then nothing is applied (the proposer retries,
    /// with the new leader once there is one). Records the commit latency.
    pub(crate) async fn propose_batch(
        &self,
        group: GroupId,
        raft: &QueueRaft,
        commands: Vec<warren_core::quorum::Command>,
        bound: Duration,
    ) -> Vec<Option<Reply>> {
        if self.is_paused(group) {
            tokio::time::sleep(Duration::from_millis(20)).await;
            return vec![None; commands.len()];
        }
        let started = std::time::Instant::now();
        let replies = propose_all(raft, commands, bound).await;
        if replies.iter().any(Option::is_some) {
            self.record_latency(group, started.elapsed());
        }
        replies
    }

    /// Answers a peer's request (a method of [`methods`]).
    pub fn serve(
        self: &Arc<Self>,
        method: u16,
        body: Bytes,
    ) -> impl Future<Output = Result<Bytes, String>> + Send + 'static {
        let registry = Arc::clone(self);
        async move {
            let (group, rest) = wire::split_group(&body).ok_or("a request without its group")?;
            let raft = registry
                .groups
                .read()
                .get(&group)
                .cloned()
                .ok_or_else(|| format!("group {group:016x} does not run on this node"))?;
            let malformed = || format!("a malformed request (method {method})");
            let answer = match method {
                methods::APPEND => {
                    let rpc = wire::decode_append(rest).ok_or_else(malformed)?;
                    let response = raft.append_entries(rpc).await.map_err(|e| e.to_string())?;
                    wire::encode_append_response(&response)
                }
                methods::VOTE => {
                    let rpc = wire::decode_vote(rest).ok_or_else(malformed)?;
                    let response = raft.vote(rpc).await.map_err(|e| e.to_string())?;
                    wire::encode_vote_response(&response)
                }
                methods::SNAPSHOT => {
                    let rpc = wire::decode_snapshot(rest).ok_or_else(malformed)?;
                    let response = raft
                        .install_snapshot(rpc)
                        .await
                        .map_err(|e| e.to_string())?;
                    wire::encode_snapshot_response(&response)
                }
                methods::FORWARD => {
                    let commands = wire::decode_forward(rest).ok_or_else(malformed)?;
                    let replies = registry
                        .propose_batch(group, &raft, commands, FORWARD_BOUND)
                        .await;
                    wire::encode_forward_response(&replies)
                }
                methods::LEADS => {
                    let leads = raft.metrics().borrow().state == openraft::ServerState::Leader;
                    vec![u8::from(leads)]
                }
                other => return Err(format!("unknown quorum queue method {other}")),
            };
            Ok(Bytes::from(answer))
        }
    }
}

/// Most commands packed into one log entry.
pub(crate) const ENTRY_COMMANDS: usize = 1_024;
/// Message bytes past which no more commands are packed into the entry (one message larger
/// than this gets an entry of its own).
pub(crate) const ENTRY_BYTES: usize = 256 * 1024;

/// Splits `commands`, in order, into the contents of log entries: runs of at most
/// [`ENTRY_COMMANDS`] commands and about [`ENTRY_BYTES`] of message bodies.
pub(crate) fn pack(
    commands: Vec<warren_core::quorum::Command>,
) -> Vec<Vec<warren_core::quorum::Command>> {
    use warren_core::quorum::Command;
    let mut entries: Vec<Vec<Command>> = Vec::new();
    let mut bytes = 0;
    for command in commands {
        let size = match &command {
            Command::Enqueue { message, .. } => message.body.len() + 64,
            _ => 64,
        };
        match entries.last_mut() {
            Some(last) if last.len() < ENTRY_COMMANDS && bytes + size <= ENTRY_BYTES => {
                bytes += size;
                last.push(command);
            }
            _ => {
                bytes = size;
                entries.push(vec![command]);
            }
        }
    }
    entries
}

/// Proposes `commands` in order (stamped with this node's clock), packed into as few log
/// entries as [`pack`] allows (a [`Command::Batch`](warren_core::quorum::Command::Batch)
/// each, or the command itself when alone), and waits, at most `bound` in all, for each
/// entry to be applied: a reply per command, `None` for one that was not (this node does
/// not lead, or no majority answered). A batch commits or not as a whole.
pub async fn propose_all(
    raft: &QueueRaft,
    commands: Vec<warren_core::quorum::Command>,
    bound: Duration,
) -> Vec<Option<Reply>> {
    use warren_core::quorum::Command;
    let count = commands.len();
    let mut pending = Vec::new();
    for mut entry in pack(commands) {
        let size = entry.len();
        let command = match entry.len() {
            1 => entry.swap_remove(0),
            _ => Command::Batch(entry),
        };
        let at = unix_ms();
        let receiver = raft.client_write_ff(Stamped { at, command }).await.ok();
        pending.push((size, receiver));
    }
    let mut replies = Vec::with_capacity(count);
    let deadline = tokio::time::Instant::now() + bound;
    for (size, receiver) in pending {
        let reply = match receiver {
            Some(receiver) => match tokio::time::timeout_at(deadline, receiver).await {
                Ok(Ok(Ok(response))) => Some(response.data.0),
                _ => None,
            },
            None => None,
        };
        match reply {
            Some(Reply::Batch(each)) if size > 1 && each.len() == size => {
                replies.extend(each.into_iter().map(Some));
            }
            Some(reply) if size == 1 => replies.push(Some(reply)),
            _ => replies.extend(std::iter::repeat_n(None, size)),
        }
    }
    replies
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use warren_core::message::{Message, Properties};
    use warren_core::quorum::Command;

    use super::{pack, ENTRY_BYTES, ENTRY_COMMANDS};

    fn publish(size: usize) -> Command {
        Command::Enqueue {
            publish: None,
            message: Arc::new(Message {
                exchange: Arc::from(""),
                routing_key: Arc::from("q"),
                properties: Properties::default(),
                encoded_properties: None,
                body: Bytes::from(vec![b'm'; size]),
            }),
        }
    }

    fn sizes(entries: &[Vec<Command>]) -> Vec<usize> {
        entries.iter().map(Vec::len).collect()
    }

    #[test]
    fn commands_are_packed_in_order_within_the_count_and_byte_bounds() {
        let commands: Vec<Command> = (0..ENTRY_COMMANDS * 2 + 3).map(|_| Command::Tick).collect();
        assert_eq!(
            sizes(&pack(commands)),
            vec![ENTRY_COMMANDS, ENTRY_COMMANDS, 3]
        );
        // Big messages: a new entry once the bytes would pass the bound; one larger than the
        // bound alone in its entry.
        let half = ENTRY_BYTES / 2;
        let commands = vec![
            publish(half),
            publish(half - 200),
            publish(10),
            publish(ENTRY_BYTES * 2),
            publish(10),
        ];
        let entries = pack(commands);
        assert_eq!(sizes(&entries), vec![2, 1, 1, 1]);
        let bodies: Vec<usize> = entries
            .iter()
            .flatten()
            .map(|command| match command {
                Command::Enqueue { message, .. } => message.body.len(),
                _ => 0,
            })
            .collect();
        assert_eq!(bodies, vec![half, half - 200, 10, ENTRY_BYTES * 2, 10]);
        assert!(pack(Vec::new()).is_empty());
    }
}
