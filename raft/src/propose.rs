//! Proposing a command to a group with a bound on the wait: what a listener does for a
//! publish it must confirm or refuse (seed 003's experiment C: every attempt answered or timed
//! out, never a hang).

use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use warren_core::quorum::{Command, Reply};

use crate::{unix_ms, NodeId, QueueRaft, Stamped};

/// Why a proposal did not produce a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProposeError {
    /// This member is not the leader; send it to `leader` (unknown during an election).
    NotLeader {
        /// The leader this member knows of.
        leader: Option<NodeId>,
    },
    /// Not committed within the bound: no majority reachable, or an election in progress.
    /// The command may still be committed later; a publish retried with the same publisher
    /// and sequence number is then applied once.
    Timeout,
    /// The member stopped.
    Stopped(String),
}

impl std::fmt::Display for ProposeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProposeError::NotLeader {
                leader: Some(leader),
            } => {
                write!(f, "not the queue's leader: node {leader} is")
            }
            ProposeError::NotLeader { leader: None } => {
                write!(f, "the queue has no leader (an election is in progress)")
            }
            ProposeError::Timeout => write!(
                f,
                "the queue did not commit in time: a majority of its members is not reachable"
            ),
            ProposeError::Stopped(reason) => write!(f, "the queue's member stopped: {reason}"),
        }
    }
}

impl std::error::Error for ProposeError {}

/// Proposes `command`, stamped with the time now, and waits at most `bound` for it to be
/// committed and applied.
pub async fn propose(
    raft: &QueueRaft,
    command: Command,
    bound: Duration,
) -> Result<Reply, ProposeError> {
    let write = raft.client_write(Stamped {
        at: unix_ms(),
        command,
    });
    match tokio::time::timeout(bound, write).await {
        Err(_) => Err(ProposeError::Timeout),
        Ok(Ok(response)) => Ok(response.data.0),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(forward)))) => {
            Err(ProposeError::NotLeader {
                leader: forward.leader_id,
            })
        }
        Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => {
            Err(ProposeError::Stopped(e.to_string()))
        }
        Ok(Err(RaftError::Fatal(fatal))) => Err(ProposeError::Stopped(fatal.to_string())),
    }
}
