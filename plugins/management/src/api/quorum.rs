//! Quorum queues' operator endpoints, at RabbitMQ 4.x's paths:
//!
//! - `GET /api/queues/quorum/{vhost}/{name}/status`: every member's Raft figures
//!   (`rabbitmq-queues quorum_status`);
//! - `GET /api/health/checks/node-is-quorum-critical`.
//!
//! The Raft side is the server's ([`QuorumView`], over warren-raft).

use std::time::Duration;

use serde_json::{json, Value as Json};
use warren_core::queue_type::{Replica, ReplicaInfo};

use super::{bad_request, error, not_authorized, not_found, Caller, Management};
use crate::http::{Request, Response};

/// A member's Raft figures, as it reported them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftFigures {
    /// `leader`, `follower`, `candidate` or `learner`.
    pub state: String,
    /// The current term.
    pub term: u64,
    /// The last index in the member's log (written to its WAL).
    pub last_log_index: u64,
    /// The last index applied to its state machine.
    pub last_applied: u64,
    /// The last index it knows to be committed.
    pub commit_index: u64,
    /// The last index its snapshot covers.
    pub snapshot_index: u64,
}

/// One member of a quorum queue's group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftMember {
    /// Its node name.
    pub node: String,
    /// Whether it votes (a learner applies the log without counting for a majority).
    pub voter: bool,
    /// Its figures; `None` when it could not be reached.
    pub figures: Option<RaftFigures>,
}

/// Why a quorum queue operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuorumOpError {
    /// No such quorum queue here (404).
    NotFound(String),
    /// The members did not answer (503).
    Unavailable(String),
}

impl QuorumOpError {
    fn message(&self) -> &str {
        match self {
            QuorumOpError::NotFound(why) | QuorumOpError::Unavailable(why) => why,
        }
    }
}

/// What the API needs of quorum queues' Raft groups (implemented by the server over
/// warren-raft). Calls may wait on other nodes, each within its own bound.
pub trait QuorumView: Send + Sync {
    /// Every member of the queue's group, as each reports itself.
    fn status(&self, vhost: &str, queue: &str) -> Result<Vec<RaftMember>, QuorumOpError>;
    /// This node's member of the queue's group, and the last commit latency this node
    /// measured leading it (`None` when no member runs here).
    fn local(&self, vhost: &str, queue: &str) -> Option<(RaftFigures, Option<Duration>)>;
}

/// A quorum queue and where its members are, by node name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QuorumQueue {
    pub vhost: String,
    pub name: String,
    pub leader: Option<String>,
    pub members: Vec<String>,
    pub online: Vec<String>,
}

impl QuorumQueue {
    fn json_name(&self) -> Json {
        json!({
            "name": self.name,
            "virtual_host": self.vhost,
            "readable_name": format!("queue '{}' in vhost '{}'", self.name, self.vhost),
            "type": "quorum",
        })
    }
}

/// Whether stopping `node` would leave the queue without a majority of its voters up.
pub(crate) fn is_critical(queue: &QuorumQueue, node: &str) -> bool {
    if !queue.members.iter().any(|m| m == node) {
        return false;
    }
    let others_up = queue
        .online
        .iter()
        .filter(|m| *m != node && queue.members.contains(m))
        .count();
    others_up < queue.members.len() / 2 + 1
}

impl Management {
    /// Every quorum queue, with its members by node name.
    pub(crate) fn quorum_queues(&self) -> Vec<QuorumQueue> {
        let node = |replica: &Replica| match replica {
            Replica::ThisNode => self.node_name.clone(),
            Replica::Node(name) => name.clone(),
        };
        let mut out = Vec::new();
        for vhost_name in self.broker.vhost_names() {
            let Some(vhost) = self.broker.vhost(&vhost_name) else {
                continue;
            };
            for queue in vhost.queue_instances() {
                if queue.queue_type().name() != "quorum" {
                    continue;
                }
                let ReplicaInfo {
                    leader,
                    members,
                    online,
                } = queue.replicas().unwrap_or_else(ReplicaInfo::this_node);
                out.push(QuorumQueue {
                    vhost: vhost_name.clone(),
                    name: queue.name().to_string(),
                    leader: leader.as_ref().map(node),
                    members: members.iter().map(node).collect(),
                    online: online.iter().map(node).collect(),
                });
            }
        }
        out
    }

    /// Routes `/api/queues/quorum/...` and the quorum-critical health check; `None` for
    /// other paths.
    pub(crate) fn quorum_api(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
    ) -> Option<Response> {
        let response = match (request.method.as_str(), path) {
            ("GET", ["queues", "quorum", vhost, name, "status"]) => {
                self.quorum_status(caller, vhost, name)
            }
            ("GET", ["health", "checks", "node-is-quorum-critical"]) => self.quorum_critical(),
            _ => return None,
        };
        Some(response)
    }

    fn quorum_view(&self) -> Result<&dyn QuorumView, Response> {
        self.quorum
            .as_deref()
            .ok_or_else(|| error(503, "unavailable", "quorum queues are not available"))
    }

    /// The quorum queue `name` in `vhost`, as the caller may see it.
    fn find_quorum(&self, caller: &Caller, vhost: &str, name: &str) -> Result<(), Response> {
        let target = self.broker.vhost(vhost).ok_or_else(not_found)?;
        if !caller.sees_vhost(&target) {
            return Err(not_authorized("User not authorised to access virtual host"));
        }
        let queue = target.queue_instance(name).ok_or_else(not_found)?;
        if queue.queue_type().name() != "quorum" {
            return Err(bad_request(format!(
                "queue '{name}' in vhost '{vhost}' is not a quorum queue"
            )));
        }
        Ok(())
    }

    fn quorum_status(&self, caller: &Caller, vhost: &str, name: &str) -> Response {
        if let Err(refusal) = self.find_quorum(caller, vhost, name) {
            return refusal;
        }
        let view = match self.quorum_view() {
            Ok(view) => view,
            Err(refusal) => return refusal,
        };
        match view.status(vhost, name) {
            Ok(members) => {
                let rows: Vec<Json> = members.iter().map(|m| self.status_row(m)).collect();
                Response::json(200, &Json::Array(rows))
            }
            Err(failure) => Response::json(
                503,
                &json!({"status": "failed", "reason": failure.message()}),
            ),
        }
    }

    /// A member as rabbitmq-queues quorum_status shows it (its keys are RabbitMQ's).
    fn status_row(&self, member: &RaftMember) -> Json {
        let node = match member.node.as_str() {
            "" => self.node_name.clone(),
            name => name.to_string(),
        };
        let membership = if member.voter { "voter" } else { "non_voter" };
        match &member.figures {
            Some(f) => json!({
                "Node Name": node,
                "Raft State": f.state,
                "Membership": membership,
                "Last Log Index": f.last_log_index,
                "Last Written": f.last_log_index,
                "Last Applied": f.last_applied,
                "Commit Index": f.commit_index,
                "Snapshot Index": f.snapshot_index,
                "Term": f.term,
                "Machine Version": 1,
            }),
            None => json!({
                "Node Name": node,
                "Raft State": "noproc",
                "Membership": membership,
                "Last Log Index": Json::Null,
                "Last Written": Json::Null,
                "Last Applied": Json::Null,
                "Commit Index": Json::Null,
                "Snapshot Index": Json::Null,
                "Term": Json::Null,
                "Machine Version": Json::Null,
            }),
        }
    }

    fn quorum_critical(&self) -> Response {
        let critical: Vec<Json> = self
            .quorum_queues()
            .iter()
            .filter(|q| is_critical(q, &self.node_name))
            .map(QuorumQueue::json_name)
            .collect();
        if critical.is_empty() {
            return Response::json(200, &json!({"status": "ok"}));
        }
        Response::json(
            503,
            &json!({
                "status": "failed",
                "reason": "There are quorum queues that would lose their quorum if the target node is shut down",
                "queues": critical,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(name: &str, leader: Option<&str>, members: &[&str], online: &[&str]) -> QuorumQueue {
        QuorumQueue {
            vhost: "/".into(),
            name: name.into(),
            leader: leader.map(str::to_string),
            members: members.iter().map(|s| s.to_string()).collect(),
            online: online.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_node_is_critical_only_where_stopping_it_loses_the_majority() {
        let all = ["a", "b", "c"];
        assert!(!is_critical(&queue("q", Some("a"), &all, &all), "a"));
        assert!(is_critical(&queue("q", Some("a"), &all, &["a", "b"]), "a"));
        assert!(!is_critical(&queue("q", Some("a"), &all, &["a", "b"]), "c"));
        assert!(is_critical(&queue("q", Some("a"), &["a"], &["a"]), "a"));
        assert!(!is_critical(&queue("q", Some("a"), &["a"], &["a"]), "b"));
        let five = ["a", "b", "c", "d", "e"];
        assert!(!is_critical(
            &queue("q", None, &five, &["a", "b", "c", "d"]),
            "a"
        ));
        assert!(is_critical(&queue("q", None, &five, &["a", "b", "c"]), "a"));
    }
}
