//! The operator's side of quorum queues: what `warrenctl quorum_status`, the membership
//! verbs (`add_member`, `delete_member`, `grow`, `shrink`) and `transfer_leadership` /
//! `rebalance` do to a queue's group.
//!
//! - Status: every member reports itself ([`wire::methods::STATUS`]); the node asked
//!   gathers them, a member it cannot reach shown without figures.
//! - Membership changes are made by the group's leader with openraft's
//!   `change_membership`; a node that does not lead forwards the change to the leader
//!   ([`wire::methods::CHANGE`]) and asks again when the leadership moved meanwhile. Every
//!   cluster node already runs a learner of every group (driver.rs adds them), so a new
//!   voter has the log; the leader waits until it has caught up before promoting it.
//!   A deleted member goes back to being a learner: every node keeps applying the log to
//!   serve its own consumers, it just no longer votes or counts for a majority. The
//!   membership lives in the group's log and snapshots, so a restart keeps it
//!   (`choose_voters` only places a new group's first voters).
//! - Leadership transfer, which openraft 0.9 lacks: the leader holds new proposals back
//!   (they wait and are retried, with the new leader once there is one), waits until
//!   everything it logged is applied and the target has all of it, then asks the target to
//!   elect itself ([`wire::methods::ELECT`]). The target's log is as long as the leader's,
//!   so the leader grants its vote once its own leader lease (an election timeout after
//!   it was elected) is over and steps down; the target's vote and the old leader's are a
//!   majority of three. The other members, still inside the lease of the last append, may
//!   refuse: with five voters the request is repeated until their leases are over too
//!   (the held proposals send them nothing meanwhile).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::raft::ClientWriteResponse;
use openraft::{BasicNode, ChangeMembers, RaftMetrics, ServerState};

use crate::network::{member_id, ClusterLink, GroupRegistry};
use crate::queue::{group_id, QuorumBackend};
use crate::wire::{self, methods, Change, ChangeAnswer, MemberStatus};
use crate::{GroupId, NodeId, QueueRaft, TypeConfig};

/// How long a change may take on the node asked, forwarding and retries included.
pub const CHANGE_BOUND: Duration = Duration::from_secs(30);
/// How long a new voter or a transfer's target may take to catch up with the leader's log.
const CATCH_UP_BOUND: Duration = Duration::from_secs(10);
/// How long one membership change may take to commit.
const COMMIT_BOUND: Duration = Duration::from_secs(10);
/// How long the target of a transfer may take to win its election.
const TRANSFER_BOUND: Duration = Duration::from_secs(8);
/// How long a member may take to report its status.
const STATUS_BOUND: Duration = Duration::from_secs(3);
/// How long a transfer waits, once the leader stepped down, for the new leader to be known:
/// several election timeouts, since a vote can be lost on a loaded machine (3 s was not
/// always enough on two busy cores).
const NEW_LEADER_BOUND: Duration = Duration::from_secs(8);
/// The pause before a change is asked again (the leader moved, or a change was running).
const RETRY_PAUSE: Duration = Duration::from_millis(200);

/// Why an operator request on a quorum queue failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpError {
    /// No quorum queue of that name runs on this node.
    NotFound(String),
    /// Refused for a reason the operator can act on (not a member, already one, the last
    /// member, a node the cluster does not have, a node that runs alone).
    Refused(String),
    /// No leader carried the request out in time.
    Unavailable(String),
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::NotFound(why) | OpError::Refused(why) | OpError::Unavailable(why) => {
                f.write_str(why)
            }
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

    /// Carries `change` about `node` out on the queue's group, through its leader.
    pub async fn change(
        &self,
        vhost: &str,
        queue: &str,
        change: Change,
        node: &str,
    ) -> Result<(), OpError> {
        let (group, raft) = self.member_of(vhost, queue)?;
        let Some(link) = self.link() else {
            return Err(OpError::Refused(
                "this node runs alone: its quorum queues have one member, and membership or \
                 leadership changes need a cluster"
                    .into(),
            ));
        };
        if !link.members().iter().any(|member| member == node) {
            return Err(OpError::Refused(format!(
                "{node} is not a member of the cluster"
            )));
        }
        let deadline = Instant::now() + CHANGE_BOUND;
        loop {
            let metrics = raft.metrics().borrow().clone();
            let answer = if metrics.state == ServerState::Leader {
                lead(&self.registry, &link, group, &raft, change, node).await
            } else {
                match leader_name(&metrics) {
                    Some(leader) => {
                        let body = Bytes::from(wire::encode_change(group, change, node));
                        match link
                            .call(&leader, methods::CHANGE, true, body, CHANGE_BOUND)
                            .await
                        {
                            Ok(answer) => wire::decode_change_answer(&answer)
                                .unwrap_or(ChangeAnswer::NotLeader),
                            Err(error) => {
                                tracing::debug!(%leader, %error, "forwarding a quorum queue change failed");
                                ChangeAnswer::NotLeader
                            }
                        }
                    }
                    None => ChangeAnswer::NotLeader,
                }
            };
            match answer {
                ChangeAnswer::Done => return Ok(()),
                ChangeAnswer::Refused(why) => return Err(OpError::Refused(why)),
                ChangeAnswer::NotLeader if Instant::now() < deadline => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                ChangeAnswer::NotLeader => {
                    return Err(OpError::Unavailable(format!(
                        "no leader of {} carried the change out within {CHANGE_BOUND:?}",
                        what(vhost, queue)
                    )))
                }
            }
        }
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

/// The index `target` has matched on the leader (`None`: nothing yet, or not the leader).
fn matched(metrics: &RaftMetrics<NodeId, BasicNode>, target: NodeId) -> Option<u64> {
    metrics
        .replication
        .as_ref()?
        .get(&target)?
        .as_ref()
        .map(|log_id| log_id.index)
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

/// Answers a peer's operator request ([`methods::STATUS`], [`methods::CHANGE`],
/// [`methods::ELECT`]).
pub(crate) async fn serve(
    registry: Arc<GroupRegistry>,
    link: Option<Arc<dyn ClusterLink>>,
    method: u16,
    body: Bytes,
) -> Result<Bytes, String> {
    let (group, rest) = wire::split_group(&body).ok_or("a request without its group")?;
    let raft = registry
        .get(group)
        .ok_or_else(|| format!("group {group:016x} does not run on this node"))?;
    let answer = match method {
        methods::STATUS => wire::encode_status(&local_status(&raft).await),
        methods::CHANGE => {
            let link = link.ok_or("this node has not joined its cluster yet")?;
            let (change, node) = wire::decode_change(rest)
                .ok_or_else(|| format!("a malformed request (method {method})"))?;
            let answer = lead(&registry, &link, group, &raft, change, &node).await;
            wire::encode_change_answer(&answer)
        }
        methods::ELECT => {
            tracing::info!(
                group,
                "quorum queue leadership handed to this node: electing"
            );
            raft.trigger().elect().await.map_err(|e| e.to_string())?;
            vec![1]
        }
        other => return Err(format!("unknown quorum queue method {other}")),
    };
    Ok(Bytes::from(answer))
}

/// The leader's side of a change.
async fn lead(
    registry: &Arc<GroupRegistry>,
    link: &Arc<dyn ClusterLink>,
    group: GroupId,
    raft: &QueueRaft,
    change: Change,
    node: &str,
) -> ChangeAnswer {
    let metrics = raft.metrics().borrow().clone();
    if metrics.state != ServerState::Leader {
        return ChangeAnswer::NotLeader;
    }
    let id = member_id(node);
    let membership = metrics.membership_config.membership().clone();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    match change {
        Change::AddMember => {
            if voters.contains(&id) {
                return ChangeAnswer::Refused(format!("{node} is already a member"));
            }
            if membership.get_node(&id).is_none() {
                let learner = BasicNode {
                    addr: node.to_string(),
                };
                let added = write(raft.add_learner(id, learner, false)).await;
                if added != ChangeAnswer::Done {
                    return added;
                }
            }
            if !caught_up(raft, id, CATCH_UP_BOUND).await {
                return ChangeAnswer::Refused(format!(
                    "{node} did not catch up with the leader's log within {CATCH_UP_BOUND:?}"
                ));
            }
            write(raft.change_membership(ChangeMembers::AddVoterIds([id].into()), false)).await
        }
        Change::DeleteMember => {
            if !voters.contains(&id) {
                return ChangeAnswer::Refused(format!("{node} is not a member"));
            }
            if voters.len() == 1 {
                return ChangeAnswer::Refused(format!(
                    "{node} is the queue's last member: delete the queue instead"
                ));
            }
            if id == metrics.id {
                // A leader removing itself leaves the group without one: elections are
                // the driver's, on the failure detector's word, and this node is up.
                // Hand over first; the change is then asked of the new leader.
                let Some(next) = successor(&metrics, &voters) else {
                    return ChangeAnswer::NotLeader;
                };
                return match transfer(registry, link, group, raft, &next).await {
                    ChangeAnswer::Done => ChangeAnswer::NotLeader,
                    other => other,
                };
            }
            // Retained as a learner: the node keeps applying the log for its consumers.
            write(raft.change_membership(ChangeMembers::RemoveVoters([id].into()), true)).await
        }
        Change::TransferLeadership => {
            if id == metrics.id {
                return ChangeAnswer::Done;
            }
            if !voters.contains(&id) {
                return ChangeAnswer::Refused(format!(
                    "{node} is not a voting member: add it with add_member first"
                ));
            }
            transfer(registry, link, group, raft, node).await
        }
    }
}

/// The voter (other than the leader) furthest along the leader's log, by name.
fn successor(
    metrics: &RaftMetrics<NodeId, BasicNode>,
    voters: &BTreeSet<NodeId>,
) -> Option<String> {
    let membership = metrics.membership_config.membership();
    voters
        .iter()
        .filter(|id| **id != metrics.id)
        .max_by_key(|id| matched(metrics, **id))
        .and_then(|id| membership.get_node(id))
        .map(|node| node.addr.clone())
}

/// Waits until `target` has everything the leader logged when asked.
async fn caught_up(raft: &QueueRaft, target: NodeId, bound: Duration) -> bool {
    let last = raft.metrics().borrow().last_log_index;
    raft.wait(Some(bound))
        .metrics(
            |m| m.state != ServerState::Leader || matched(m, target) >= last,
            "a quorum queue member caught up",
        )
        .await
        .is_ok_and(|m| m.state == ServerState::Leader)
}

/// Lets proposals go again when a transfer ends, however it ends.
struct Resume<'a>(&'a GroupRegistry, GroupId);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.resume(self.1);
    }
}

/// Hands the leadership of `group` to `target` (see the module's doc).
async fn transfer(
    registry: &Arc<GroupRegistry>,
    link: &Arc<dyn ClusterLink>,
    group: GroupId,
    raft: &QueueRaft,
    target: &str,
) -> ChangeAnswer {
    let id = member_id(target);
    if !link.is_connected(target) {
        return ChangeAnswer::Refused(format!("{target} is not reachable"));
    }
    registry.pause(group);
    let _resume = Resume(registry, group);
    // What was proposed before the pause is applied, and the target has all of it: its
    // log is then as long as the leader's, the condition for the leader's vote.
    let settled = raft
        .wait(Some(CATCH_UP_BOUND))
        .metrics(
            |m| {
                let last = m.last_log_index;
                m.state != ServerState::Leader
                    || (m.last_applied.map(|l| l.index) >= last && matched(m, id) >= last)
            },
            "the transfer's target caught up",
        )
        .await;
    match settled {
        Ok(m) if m.state == ServerState::Leader => {}
        Ok(_) => return ChangeAnswer::NotLeader,
        Err(_) => {
            return ChangeAnswer::Refused(format!(
                "{target} did not catch up with the leader's log within {CATCH_UP_BOUND:?}"
            ))
        }
    }
    let deadline = Instant::now() + TRANSFER_BOUND;
    while Instant::now() < deadline {
        let body = Bytes::from(group.to_le_bytes().to_vec());
        if let Err(error) = link
            .call(target, methods::ELECT, false, body, STATUS_BOUND)
            .await
        {
            tracing::debug!(%target, %error, "asking a quorum queue member to elect failed");
        }
        // Refused while this leader's lease lasts; asked again until it is over.
        let stepped_down = raft
            .wait(Some(Duration::from_millis(750)))
            .metrics(
                |m| m.state != ServerState::Leader,
                "the leader stepped down",
            )
            .await
            .is_ok();
        if stepped_down {
            let known = raft
                .wait(Some(NEW_LEADER_BOUND))
                .metrics(
                    |m| m.current_leader.is_some_and(|leader| leader != m.id),
                    "a new leader is known",
                )
                .await;
            return match known.ok().and_then(|m| m.current_leader) {
                Some(leader) if leader == id => ChangeAnswer::Done,
                // Another member won (its log was ahead of the target's by what was
                // proposed during the hand-over) or none yet: the node asked tries again
                // through whoever leads now, within its CHANGE_BOUND.
                Some(_) | None => {
                    tracing::info!(%target, "the transfer's target did not win the election; retrying through the new leader");
                    ChangeAnswer::NotLeader
                }
            };
        }
    }
    ChangeAnswer::Refused(format!(
        "{target} did not take the leadership within {TRANSFER_BOUND:?}"
    ))
}

/// Waits for a membership change to commit, bounded.
async fn write<F>(change: F) -> ChangeAnswer
where
    F: std::future::Future<
        Output = Result<
            ClientWriteResponse<TypeConfig>,
            RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>,
        >,
    >,
{
    match tokio::time::timeout(COMMIT_BOUND, change).await {
        Ok(Ok(_)) => ChangeAnswer::Done,
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
            ChangeAnswer::NotLeader
        }
        // Another change (a learner added by the driver) is committing: asked again.
        Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(
            ChangeMembershipError::InProgress(_),
        )))) => ChangeAnswer::NotLeader,
        Ok(Err(error)) => ChangeAnswer::Refused(error.to_string()),
        Err(_) => ChangeAnswer::Refused(format!(
            "the membership change was not committed within {COMMIT_BOUND:?} (no majority \
             answered); quorum_status shows where it stands"
        )),
    }
}
