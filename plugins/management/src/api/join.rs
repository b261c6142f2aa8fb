//! What `POST /api/join-cluster` (`warrenctl join_cluster`) answers: the outcome and the
//! typed refusals, each with its HTTP status and error name (docs/clustering.md).

/// What [`ClusterView::join`](super::ClusterView::join) did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinOutcome {
    /// The join is under way: the node restarts and joins `node`'s cluster.
    Restarting {
        /// The target's node name.
        node: String,
    },
    /// This node is already a member of the target's cluster; nothing was done.
    AlreadyMember,
}

/// Why [`ClusterView::join`](super::ClusterView::join) (or
/// [`ClusterView::reset`](super::ClusterView::reset)) refused; nothing was changed. The HTTP status and error name
/// of each are [`JoinError::status`] and [`JoinError::name`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinError {
    /// This build's cluster view cannot join.
    NotSupported,
    /// The target is not `warren@HOST[:PORT]`, or names this node.
    BadTarget(String),
    /// This node is a member of a cluster with other members (RabbitMQ refuses the same
    /// way): it must be reset first.
    AlreadyClustered {
        /// This node.
        node: String,
        /// The other members.
        members: Vec<String>,
    },
    /// The target could not be reached with this node's secret and certificate.
    Unreachable {
        /// The target.
        node: String,
        /// The transport's reason.
        reason: String,
    },
    /// The target answers but is not a member of a cluster.
    TargetNotMember(String),
    /// `reset`: this node could not leave its cluster (no majority, no leader).
    LeaveFailed {
        /// This node.
        node: String,
        /// Why.
        reason: String,
    },
    /// The join marker could not be written.
    Storage(String),
}

impl JoinError {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> u16 {
        match self {
            JoinError::NotSupported | JoinError::BadTarget(_) => 400,
            JoinError::AlreadyClustered { .. } | JoinError::TargetNotMember(_) => 409,
            JoinError::Unreachable { .. } | JoinError::LeaveFailed { .. } => 503,
            JoinError::Storage(_) => 500,
        }
    }

    /// The `error` field of the refusal.
    pub fn name(&self) -> &'static str {
        match self {
            JoinError::NotSupported | JoinError::BadTarget(_) => "bad_request",
            JoinError::AlreadyClustered { .. } => "already_clustered",
            JoinError::TargetNotMember(_) => "target_not_clustered",
            JoinError::Unreachable { .. } | JoinError::LeaveFailed { .. } => "unavailable",
            JoinError::Storage(_) => "internal_error",
        }
    }
}

impl std::fmt::Display for JoinError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JoinError::NotSupported => f.write_str("this node cannot join a cluster"),
            JoinError::BadTarget(why) => f.write_str(why),
            JoinError::AlreadyClustered { node, members } => write!(
                f,
                "{node} is already clustered with {}: reset it first (stop it, run \
                 forget_cluster_node {node} on one of those nodes and empty its data_dir) \
                 before it joins another cluster",
                members.join(", ")
            ),
            JoinError::Unreachable { node, reason } => write!(
                f,
                "cannot reach {node} with this node's cluster secret: {reason}; nothing was changed"
            ),
            JoinError::TargetNotMember(node) => write!(
                f,
                "{node} is not a member of a cluster yet; nothing was changed"
            ),
            JoinError::LeaveFailed { node, reason } => write!(
                f,
                "{node} could not leave its cluster: {reason}; nothing was changed"
            ),
            JoinError::Storage(why) => write!(f, "cannot record the join or reset: {why}"),
        }
    }
}

impl std::error::Error for JoinError {}
