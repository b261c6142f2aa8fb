//! The operator's side of quorum queues: what `warrenctl quorum_status` shows of a queue's
//! group. Every member reports itself ([`wire::methods::STATUS`]); the node asked gathers
//! them, a member it cannot reach shown without figures.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::{BasicNode, RaftMetrics, ServerState};

use crate::network::GroupRegistry;
use crate::queue::{group_id, QuorumBackend};
use crate::wire::{self, methods, MemberStatus};
use crate::{GroupId, NodeId, QueueRaft};

/// How long a member may take to report its status.
const STATUS_BOUND: Duration = Duration::from_secs(3);
/// Why an operator request on a quorum queue failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpError {
    /// No quorum queue of that name runs on this node.
    NotFound(String),
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::NotFound(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for OpError {}

/// One member of a group as `quorum_status` lists it: its node, and its report when it
/// answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRow {
    /// The member's node name.
    pub node: String,
    /// Whether the group's membership counts it as a voter.
    pub voter: bool,
    /// What it reported; `None` when it could not be reached.
    pub status: Option<MemberStatus>,
}

fn what(vhost: &str, queue: &str) -> String {
    format!("quorum queue '{queue}' in vhost '{vhost}'")
}

impl QuorumBackend {
    fn member_of(&self, vhost: &str, queue: &str) -> Result<(GroupId, QueueRaft), OpError> {
        let group = group_id(vhost, queue);
        match self.registry.get(group) {
            Some(raft) => Ok((group, raft)),
            None => Err(OpError::NotFound(format!(
                "no {} runs on this node",
                what(vhost, queue)
            ))),
        }
    }

    /// This node's member of the queue's group, as it reports itself (`None` when the
    /// queue has no member running here).
    pub async fn local_status(&self, vhost: &str, queue: &str) -> Option<MemberStatus> {
        let raft = self.registry.get(group_id(vhost, queue))?;
        Some(local_status(&raft).await)
    }

    /// The last commit latency this node measured as the queue's leader.
    pub fn commit_latency(&self, vhost: &str, queue: &str) -> Option<Duration> {
        self.registry.latency(group_id(vhost, queue))
    }

    /// Every member of the queue's group (voters and learners), each as it reports itself.
    pub async fn status(&self, vhost: &str, queue: &str) -> Result<Vec<MemberRow>, OpError> {
        let (group, raft) = self.member_of(vhost, queue)?;
        let me = local_status(&raft).await;
        let Some(link) = self.link() else {
            return Ok(vec![MemberRow {
                node: me.node.clone(),
                voter: true,
                status: Some(me),
            }]);
        };
        let membership = raft
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .clone();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let mut rows = Vec::new();
        for (id, node) in membership.nodes() {
            let status = if node.addr == link.local() {
                Some(me.clone())
            } else if link.is_connected(&node.addr) {
                let body = Bytes::from(group.to_le_bytes().to_vec());
                link.call(&node.addr, methods::STATUS, false, body, STATUS_BOUND)
                    .await
                    .ok()
                    .and_then(|answer| wire::decode_status(&answer))
            } else {
                None
            };
            rows.push(MemberRow {
                node: node.addr.clone(),
                voter: voters.contains(id),
                status,
            });
        }
        // Voters first, then by name: the order RabbitMQ's tools show does not matter, a
        // stable one does.
        rows.sort_by(|a, b| (!a.voter, &a.node).cmp(&(!b.voter, &b.node)));
        Ok(rows)
    }
}

/// The node `metrics` take to lead, by name.
fn leader_name(metrics: &RaftMetrics<NodeId, BasicNode>) -> Option<String> {
    let leader = metrics.current_leader?;
    metrics
        .membership_config
        .membership()
        .get_node(&leader)
        .map(|node| node.addr.clone())
}

/// A member's report of itself.
async fn local_status(raft: &QueueRaft) -> MemberStatus {
    let metrics = raft.metrics().borrow().clone();
    let committed = raft
        .with_raft_state(|state| state.committed.map(|log_id| log_id.index))
        .await
        .ok()
        .flatten();
    let membership = metrics.membership_config.membership();
    let voter = membership.voter_ids().any(|id| id == metrics.id);
    let state = match metrics.state {
        ServerState::Leader => "leader",
        ServerState::Candidate => "candidate",
        ServerState::Follower if voter => "follower",
        ServerState::Follower | ServerState::Learner => "learner",
        ServerState::Shutdown => "shutdown",
    };
    MemberStatus {
        node: membership
            .get_node(&metrics.id)
            .map(|node| node.addr.clone())
            .unwrap_or_default(),
        state: state.to_string(),
        voter,
        term: metrics.current_term,
        last_log_index: metrics.last_log_index.unwrap_or(0),
        last_applied: metrics.last_applied.map_or(0, |log_id| log_id.index),
        commit_index: committed.unwrap_or(0),
        snapshot_index: metrics.snapshot.map_or(0, |log_id| log_id.index),
        leader: leader_name(&metrics),
    }
}

/// Answers a peer's [`methods::STATUS`] request.
pub(crate) async fn serve(registry: Arc<GroupRegistry>, body: Bytes) -> Result<Bytes, String> {
    let (group, _) = wire::split_group(&body).ok_or("a request without its group")?;
    let raft = registry
        .get(group)
        .ok_or_else(|| format!("group {group:016x} does not run on this node"))?;
    Ok(Bytes::from(wire::encode_status(&local_status(&raft).await)))
}
