//! Quorum queues' operator endpoints, at RabbitMQ 4.x's paths:
//!
//! - `GET /api/queues/quorum/{vhost}/{name}/status`: every member's Raft figures
//!   (`rabbitmq-queues quorum_status`);
//! - `POST /api/queues/quorum/{vhost}/{name}/replicas/add` and
//!   `DELETE .../replicas/delete` with `{"node": ...}` (`add_member`, `delete_member`);
//! - `POST /api/queues/quorum/replicas/on/{node}/grow` with `strategy` (`all` or `even`),
//!   `vhost_pattern` and `queue_pattern`, and `DELETE .../replicas/on/{node}/shrink`;
//! - `POST /api/queues/quorum/{vhost}/{name}/leader` with `{"node": ...}`
//!   (`transfer_leadership`; RabbitMQ's CLI has the verb, its HTTP API does not) and
//!   `POST /api/rebalance/queues`;
//! - `GET /api/health/checks/node-is-quorum-critical`.
//!
//! The Raft side is the server's ([`QuorumView`], over warren-raft); this module decides
//! which queues a bulk operation touches and how a rebalance moves leaders.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value as Json};
use warren_core::queue_type::{Replica, ReplicaInfo};

use super::{bad_request, error, not_authorized, not_found, Caller, Management, Role};
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

/// A change to a quorum queue's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaChange {
    /// The node becomes a voting member.
    Add,
    /// The node stops being a voting member.
    Delete,
    /// The node becomes the leader.
    Transfer,
}

/// Why a quorum queue operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuorumOpError {
    /// No such quorum queue here (404).
    NotFound(String),
    /// Refused for a reason the operator can act on (400).
    Refused(String),
    /// No leader carried it out in time (503).
    Unavailable(String),
}

impl QuorumOpError {
    fn message(&self) -> &str {
        match self {
            QuorumOpError::NotFound(why)
            | QuorumOpError::Refused(why)
            | QuorumOpError::Unavailable(why) => why,
        }
    }

    fn response(&self) -> Response {
        match self {
            QuorumOpError::NotFound(why) => error(404, "not_found", why.clone()),
            QuorumOpError::Refused(why) => bad_request(why.clone()),
            QuorumOpError::Unavailable(why) => error(503, "unavailable", why.clone()),
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
    /// Carries a change about `node` out through the group's leader.
    fn change(
        &self,
        vhost: &str,
        queue: &str,
        change: ReplicaChange,
        node: &str,
    ) -> Result<(), QuorumOpError>;
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

/// A leader move a rebalance makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Move {
    /// The queue's index in the list planned over.
    pub queue: usize,
    pub from: String,
    pub to: String,
}

/// Moves that spread the queues' leaders over `nodes` as evenly as their members allow:
/// while a node leads more than its share (the queues over the nodes, rounded up), one of
/// its queues goes to the member node leading the fewest, if that one leads less than its
/// share. Queues without a leader, or whose only online members are already at their
/// share, stay.
pub(crate) fn plan_rebalance(queues: &[QuorumQueue], nodes: &[String]) -> Vec<Move> {
    let mut counts: BTreeMap<String, usize> = nodes.iter().map(|n| (n.clone(), 0)).collect();
    for queue in queues {
        if let Some(leader) = &queue.leader {
            *counts.entry(leader.clone()).or_default() += 1;
        }
    }
    let led = queues.iter().filter(|q| q.leader.is_some()).count();
    if counts.is_empty() || led == 0 {
        return Vec::new();
    }
    let share = led.div_ceil(counts.len());
    let mut leaders: Vec<Option<String>> = queues.iter().map(|q| q.leader.clone()).collect();
    let mut moves = Vec::new();
    for (index, queue) in queues.iter().enumerate() {
        let Some(from) = leaders[index].clone() else {
            continue;
        };
        if counts.get(&from).copied().unwrap_or(0) <= share {
            continue;
        }
        let target = queue
            .members
            .iter()
            .filter(|m| **m != from && queue.online.contains(m) && counts.contains_key(*m))
            .min_by_key(|m| (counts[*m], (*m).clone()))
            .cloned();
        let Some(to) = target.filter(|t| counts[t] < share) else {
            continue;
        };
        if let Some(count) = counts.get_mut(&from) {
            *count -= 1;
        }
        if let Some(count) = counts.get_mut(&to) {
            *count += 1;
        }
        leaders[index] = Some(to.clone());
        moves.push(Move {
            queue: index,
            from,
            to,
        });
    }
    moves
}

/// Whether `text` matches `pattern` (an unanchored regular expression, as RabbitMQ's
/// `--vhost-pattern` and `--queue-pattern`).
fn matches(pattern: &regex::Regex, text: &str) -> bool {
    pattern.is_match(text)
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

    /// Routes `/api/queues/quorum/...`, `/api/rebalance/queues` and the quorum-critical
    /// health check; `None` for other paths.
    pub(crate) fn quorum_api(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
    ) -> Option<Response> {
        let admin =
            || (!caller.is(Role::Administrator)).then(|| not_authorized("Not administrator user"));
        let response = match (request.method.as_str(), path) {
            ("GET", ["queues", "quorum", vhost, name, "status"]) => {
                self.quorum_status(caller, vhost, name)
            }
            ("POST", ["queues", "quorum", vhost, name, "replicas", "add"]) => admin()
                .unwrap_or_else(|| self.replica_change(request, vhost, name, ReplicaChange::Add)),
            ("DELETE", ["queues", "quorum", vhost, name, "replicas", "delete"]) => admin()
                .unwrap_or_else(|| {
                    self.replica_change(request, vhost, name, ReplicaChange::Delete)
                }),
            ("POST", ["queues", "quorum", vhost, name, "leader"]) => admin().unwrap_or_else(|| {
                self.replica_change(request, vhost, name, ReplicaChange::Transfer)
            }),
            ("POST", ["queues", "quorum", "replicas", "on", node, "grow"]) => {
                admin().unwrap_or_else(|| self.grow(request, node))
            }
            ("DELETE", ["queues", "quorum", "replicas", "on", node, "shrink"]) => {
                admin().unwrap_or_else(|| self.shrink(node))
            }
            ("POST", ["rebalance", "queues"]) => admin().unwrap_or_else(|| self.rebalance()),
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

    /// The `node` of a replica request's body.
    fn body_node(request: &Request) -> Result<String, Response> {
        let body: Json = super::requests::parse(request)?;
        body["node"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| bad_request("the body needs \"node\": the node name"))
    }

    fn replica_change(
        &self,
        request: &Request,
        vhost: &str,
        name: &str,
        change: ReplicaChange,
    ) -> Response {
        let view = match self.quorum_view() {
            Ok(view) => view,
            Err(refusal) => return refusal,
        };
        let node = match Self::body_node(request) {
            Ok(node) => node,
            Err(refusal) => return refusal,
        };
        match self
            .broker
            .vhost(vhost)
            .and_then(|v| v.queue_instance(name))
        {
            Some(queue) if queue.queue_type().name() == "quorum" => {}
            Some(_) => {
                return bad_request(format!(
                    "queue '{name}' in vhost '{vhost}' is not a quorum queue"
                ))
            }
            None => return not_found(),
        }
        match view.change(vhost, name, change, &node) {
            Ok(()) => Response::empty(204),
            Err(failure) => failure.response(),
        }
    }

    /// Runs `change` about `node` on each of `queues`: RabbitMQ's grow/shrink result rows.
    fn bulk(&self, queues: Vec<QuorumQueue>, node: &str, change: ReplicaChange) -> Response {
        let view = match self.quorum_view() {
            Ok(view) => view,
            Err(refusal) => return refusal,
        };
        let rows: Vec<Json> = queues
            .into_iter()
            .map(|queue| {
                let result = view.change(&queue.vhost, &queue.name, change, node);
                let size = queue.members.len() as i64
                    + match (&result, change) {
                        (Ok(()), ReplicaChange::Add) => 1,
                        (Ok(()), ReplicaChange::Delete) => -1,
                        _ => 0,
                    };
                json!({
                    "vhost": queue.vhost,
                    "name": queue.name,
                    "size": size,
                    "result": match &result {
                        Ok(()) => "ok".to_string(),
                        Err(failure) => failure.message().to_string(),
                    },
                })
            })
            .collect();
        Response::json(200, &Json::Array(rows))
    }

    fn is_cluster_node(&self, node: &str) -> bool {
        node == self.node_name
            || self.cluster.as_ref().is_some_and(|cluster| {
                cluster
                    .peer_nodes()
                    .iter()
                    .any(|peer| peer["name"].as_str() == Some(node))
            })
    }

    fn grow(&self, request: &Request, node: &str) -> Response {
        if !self.is_cluster_node(node) {
            return not_found();
        }
        let body: Json = match super::requests::parse(request) {
            Ok(body) => body,
            Err(refusal) => return refusal,
        };
        let pattern = |key: &str| -> Result<regex::Regex, Response> {
            let text = body[key].as_str().unwrap_or(".*");
            regex::Regex::new(text)
                .map_err(|e| bad_request(format!("{key} is not a regular expression: {e}")))
        };
        let (vhosts, names) = match (pattern("vhost_pattern"), pattern("queue_pattern")) {
            (Ok(v), Ok(q)) => (v, q),
            (Err(refusal), _) | (_, Err(refusal)) => return refusal,
        };
        let even = match body["strategy"].as_str().unwrap_or("all") {
            "all" => false,
            "even" => true,
            other => return bad_request(format!("strategy '{other}' is not one of: all, even")),
        };
        let queues: Vec<QuorumQueue> = self
            .quorum_queues()
            .into_iter()
            .filter(|q| matches(&vhosts, &q.vhost) && matches(&names, &q.name))
            .filter(|q| !q.members.iter().any(|m| m == node))
            .filter(|q| !even || q.members.len() % 2 == 0)
            .collect();
        self.bulk(queues, node, ReplicaChange::Add)
    }

    fn shrink(&self, node: &str) -> Response {
        let queues: Vec<QuorumQueue> = self
            .quorum_queues()
            .into_iter()
            .filter(|q| q.members.iter().any(|m| m == node))
            .collect();
        self.bulk(queues, node, ReplicaChange::Delete)
    }

    fn rebalance(&self) -> Response {
        let view = match self.quorum_view() {
            Ok(view) => view,
            Err(refusal) => return refusal,
        };
        let queues = self.quorum_queues();
        let mut nodes = vec![self.node_name.clone()];
        if let Some(cluster) = &self.cluster {
            nodes.extend(
                cluster
                    .peer_nodes()
                    .iter()
                    .filter(|peer| peer["running"] != false)
                    .filter_map(|peer| peer["name"].as_str().map(str::to_string)),
            );
        }
        let moves: Vec<Json> = plan_rebalance(&queues, &nodes)
            .into_iter()
            .map(|planned| {
                let queue = &queues[planned.queue];
                let result = view.change(
                    &queue.vhost,
                    &queue.name,
                    ReplicaChange::Transfer,
                    &planned.to,
                );
                json!({
                    "vhost": queue.vhost,
                    "name": queue.name,
                    "from": planned.from,
                    "to": planned.to,
                    "result": match &result {
                        Ok(()) => "ok".to_string(),
                        Err(failure) => failure.message().to_string(),
                    },
                })
            })
            .collect();
        let mut leaders: BTreeMap<String, usize> = nodes.iter().map(|n| (n.clone(), 0)).collect();
        for queue in self.quorum_queues() {
            if let Some(leader) = queue.leader {
                *leaders.entry(leader).or_default() += 1;
            }
        }
        Response::json(200, &json!({"moves": moves, "leaders": leaders}))
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

    #[test]
    fn a_rebalance_spreads_leaders_over_the_members_it_may_use() {
        let all = ["a", "b", "c"];
        let nodes: Vec<String> = all.iter().map(|s| s.to_string()).collect();
        let queues: Vec<QuorumQueue> = (0..6)
            .map(|i| queue(&format!("q{i}"), Some("a"), &all, &all))
            .collect();
        let moves = plan_rebalance(&queues, &nodes);
        let mut after: BTreeMap<String, usize> = BTreeMap::new();
        for (index, q) in queues.iter().enumerate() {
            let leader = moves
                .iter()
                .find(|m| m.queue == index)
                .map_or(q.leader.clone().unwrap(), |m| m.to.clone());
            *after.entry(leader).or_default() += 1;
        }
        assert_eq!(after.values().copied().collect::<Vec<_>>(), vec![2, 2, 2]);
        assert_eq!(moves.len(), 4);

        // Balanced already: nothing moves.
        let balanced = vec![
            queue("x", Some("a"), &all, &all),
            queue("y", Some("b"), &all, &all),
            queue("z", Some("c"), &all, &all),
        ];
        assert!(plan_rebalance(&balanced, &nodes).is_empty());

        // A queue whose other members are down, or not members, stays.
        let stuck = vec![
            queue("x", Some("a"), &all, &["a"]),
            queue("y", Some("a"), &["a", "b"], &["a", "b"]),
        ];
        let moves = plan_rebalance(&stuck, &nodes);
        assert_eq!(
            moves,
            vec![Move {
                queue: 1,
                from: "a".into(),
                to: "b".into()
            }]
        );
        assert!(plan_rebalance(&[queue("x", None, &all, &all)], &nodes).is_empty());
    }
}
