//! What the management API shows and changes of quorum queues' Raft groups, over
//! warren-raft's operator side (`warren_raft::ops`).

use std::sync::Arc;
use std::time::Duration;

use warren_management::{QuorumOpError, QuorumView, RaftFigures, RaftMember, ReplicaChange};
use warren_raft::ops::OpError;
use warren_raft::wire::{Change, MemberStatus};
use warren_raft::QuorumBackend;

/// The management API's [`QuorumView`] on this node's quorum backend.
pub struct View(pub Arc<QuorumBackend>);

/// Runs `work` to its end from a management handler (synchronous, on the multi-threaded
/// runtime); every operation it runs is bounded.
fn block_on<T>(work: impl std::future::Future<Output = T>) -> Option<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            Some(tokio::task::block_in_place(|| handle.block_on(work)))
        }
        _ => None,
    }
}

fn figures(status: MemberStatus) -> RaftFigures {
    RaftFigures {
        state: status.state,
        term: status.term,
        last_log_index: status.last_log_index,
        last_applied: status.last_applied,
        commit_index: status.commit_index,
        snapshot_index: status.snapshot_index,
    }
}

fn op_error(error: OpError) -> QuorumOpError {
    match error {
        OpError::NotFound(why) => QuorumOpError::NotFound(why),
        OpError::Refused(why) => QuorumOpError::Refused(why),
        OpError::Unavailable(why) => QuorumOpError::Unavailable(why),
    }
}

fn no_runtime() -> QuorumOpError {
    QuorumOpError::Unavailable("quorum queue operations need the multi-threaded runtime".into())
}

impl QuorumView for View {
    fn status(&self, vhost: &str, queue: &str) -> Result<Vec<RaftMember>, QuorumOpError> {
        let rows = block_on(self.0.status(vhost, queue))
            .ok_or_else(no_runtime)?
            .map_err(op_error)?;
        Ok(rows
            .into_iter()
            .map(|row| RaftMember {
                node: row.node,
                voter: row.voter,
                figures: row.status.map(figures),
            })
            .collect())
    }

    fn local(&self, vhost: &str, queue: &str) -> Option<(RaftFigures, Option<Duration>)> {
        let status = block_on(self.0.local_status(vhost, queue))??;
        Some((figures(status), self.0.commit_latency(vhost, queue)))
    }

    fn change(
        &self,
        vhost: &str,
        queue: &str,
        change: ReplicaChange,
        node: &str,
    ) -> Result<(), QuorumOpError> {
        let change = match change {
            ReplicaChange::Add => Change::AddMember,
            ReplicaChange::Delete => Change::DeleteMember,
            ReplicaChange::Transfer => Change::TransferLeadership,
        };
        block_on(self.0.change(vhost, queue, change, node))
            .ok_or_else(no_runtime)?
            .map_err(op_error)
    }
}
