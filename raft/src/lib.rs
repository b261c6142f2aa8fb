//! # warren-raft
//!
//! Raft groups for Warren's quorum queues, on openraft 0.9: one group per queue, every group
//! of a node logging into one shared write-ahead log ([`wal::Wal`]).
//!
//! - [`wal`]: the node's WAL. One writer thread takes the records of every group, writes them
//!   with one `write` and makes them durable with one `fdatasync` per batch, then fires each
//!   group's `LogFlushed` callback. When a WAL file is full it is split into per-group segment
//!   files and deleted; a group's segment is deleted once every entry in it is purged (after a
//!   snapshot), so disk use follows the live log, not the traffic. Every record carries a
//!   CRC: recovery after a crash cuts a torn tail.
//! - [`log_store::GroupLogStore`]: openraft's `RaftLogStorage` for one group over the WAL.
//! - [`state_machine::QueueStateMachine`]: openraft's `RaftStateMachine` adapting the pure
//!   quorum queue state machine of `warren_core::quorum`, with snapshots on disk.
//! - [`propose()`]: a command proposed with a bound on the wait, answered or timed out, never
//!   left hanging when no majority is reachable.
//! - [`group::QueueGroup`]: a member with its leader-side driver: effects go to an
//!   [`group::EffectSink`] on the leader only, and a timer proposes `Tick` when something
//!   falls due (TTLs, delayed deliveries, consumer timeouts).
//!
//! - [`network`] and [`wire`]: a group's members on other nodes, reached through a
//!   [`ClusterLink`] the server supplies over the cluster transport, with the RPCs in a
//!   binary encoding; commands a member forwards to its leader.
//! - [`ops`]: the operator's side: `quorum_status`, member changes (`add_member`,
//!   `delete_member`, through the leader) and leadership transfers, which openraft 0.9
//!   lacks (the leader holds proposals, waits for the target to catch up, and the target
//!   elects itself).
//!
//! See docs/quorum-queues.md.

mod driver;
pub mod group;
pub mod log_store;
pub mod network;
pub mod ops;
pub mod propose;
pub mod queue;
mod record;
mod serde_impls;
pub mod state_machine;
pub mod wal;
pub mod wire;

use std::io::Cursor;

use openraft::BasicNode;
use warren_core::quorum::{Command, Reply};

pub use group::{EffectSink, QueueGroup};
pub use log_store::GroupLogStore;
pub use network::{ClusterLink, LinkError, LinkFuture};
pub use propose::{propose, ProposeError};
pub use queue::QuorumBackend;
pub use state_machine::QueueStateMachine;
pub use wal::{Wal, WalOptions};

/// A Raft group's id: one per quorum queue, unique on the node (the cluster layer maps queue
/// names to ids).
pub type GroupId = u64;

/// A node's id in the cluster.
pub type NodeId = u64;

/// One log entry's application data: a quorum-queue command and the time the leader stamped
/// on it when proposing (Unix milliseconds). The state machine never reads a clock, so every
/// member computes TTLs, delayed deliveries and timeouts from the same times.
#[derive(Debug, Clone)]
pub struct Stamped {
    /// Unix milliseconds on the leader when the command was proposed.
    pub at: u64,
    /// The command.
    pub command: Command,
}

/// What an applied entry answers its proposer: the state machine's reply (a newtype so that
/// it can carry the serde impls openraft may require, see `serde_impls.rs`).
#[derive(Debug, Clone)]
pub struct Response(pub Reply);

openraft::declare_raft_types!(
    /// openraft's type configuration for quorum-queue groups.
    pub TypeConfig:
        D = Stamped,
        R = Response,
        NodeId = NodeId,
        Node = BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// A Raft group handle.
pub type QueueRaft = openraft::Raft<TypeConfig>;

/// Unix milliseconds now, for stamping proposals (only the proposer reads the clock).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
