//! One member of a quorum queue's group with its driver tasks: the effects pump (every
//! member's applied effects, marked with whether it leads) and the leader's timer that
//! proposes `Tick` when a TTL, a delayed delivery or a consumer timeout falls due.

use std::sync::Arc;
use std::time::Duration;

use openraft::{Config, RaftNetworkFactory, ServerState};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use warren_core::quorum::{Command, Effect, QuorumConfig, Reply};

use crate::propose::{propose, ProposeError};
use crate::{
    unix_ms, GroupId, GroupLogStore, NodeId, QueueRaft, QueueStateMachine, TypeConfig, Wal,
};

/// Longest the timer sleeps without looking again. A follower becoming leader wakes it at
/// once (openraft's metrics), and so does an applied entry that moved the next timer.
const TIMER_POLL: Duration = Duration::from_secs(30);
/// Bound on a `Tick` proposal.
const TICK_BOUND: Duration = Duration::from_secs(5);

/// Where applied entries' effects go: deliveries to consumers' sinks, dead letters to the
/// vhost. Called on the pump task of every member, in log order, with whether this member
/// leads: every member applies the log, so the member on the node of a consumer's
/// connection hands it its deliveries, while what must happen once (dead letters) is the
/// leader's. Effects for consumers the sink does not know (another node's, or a previous
/// run's replayed after a restart) must be ignored.
pub trait EffectSink: Send + Sync + 'static {
    /// Carries out one effect of the entry at `index`.
    fn apply(&self, index: u64, effect: Effect, leading: bool);
}

/// A running member of one group on this node.
pub struct QueueGroup {
    /// This node.
    pub node: NodeId,
    /// The group.
    pub group: GroupId,
    /// The Raft member.
    pub raft: QueueRaft,
    /// Its state machine (stats and queries read it).
    pub machine: QueueStateMachine,
    tasks: Vec<JoinHandle<()>>,
}

impl QueueGroup {
    /// Starts this node's member of `group`: its log from `wal`, its state machine from the
    /// group's snapshot (or empty with `queue`), and the driver tasks.
    pub async fn start<N>(
        node: NodeId,
        group: GroupId,
        config: Arc<Config>,
        wal: &Wal,
        network: N,
        queue: QuorumConfig,
        sink: Arc<dyn EffectSink>,
    ) -> std::io::Result<QueueGroup>
    where
        N: RaftNetworkFactory<TypeConfig>,
    {
        let (sender, mut effects) = mpsc::unbounded_channel();
        let machine = QueueStateMachine::open(wal.group_dir(group), queue, Some(sender))?;
        let raft = QueueRaft::new(
            node,
            config,
            network,
            GroupLogStore::new(wal, group),
            machine.clone(),
        )
        .await
        .map_err(std::io::Error::other)?;
        let pump = {
            let raft = raft.clone();
            tokio::spawn(async move {
                while let Some((index, batch)) = effects.recv().await {
                    let leading = raft.metrics().borrow().state == ServerState::Leader;
                    for effect in batch {
                        sink.apply(index, effect, leading);
                    }
                }
            })
        };
        let timer = {
            let raft = raft.clone();
            let machine = machine.clone();
            let mut metrics = raft.metrics();
            tokio::spawn(async move {
                // The due time the last Tick was proposed for: if it is still due afterwards
                // (the Tick was not committed), wait a poll before proposing again.
                let mut ticked_for = None;
                loop {
                    let leading = metrics.borrow_and_update().state == ServerState::Leader;
                    let next = machine.with_queue(|q| q.next_timer());
                    let now = unix_ms();
                    let wait = match next {
                        Some(at) if leading && at <= now && ticked_for != Some(at) => {
                            ticked_for = Some(at);
                            match propose(&raft, Command::Tick, TICK_BOUND).await {
                                Err(ProposeError::Stopped(_)) => return,
                                _ => continue,
                            }
                        }
                        Some(at) if leading && at > now => {
                            Duration::from_millis(at - now).min(TIMER_POLL)
                        }
                        _ => TIMER_POLL,
                    };
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = machine.timer_moved() => {}
                        // Only a follower waits on the metrics (to notice that it now
                        // leads): a leader's change with every entry.
                        changed = metrics.changed(), if !leading => {
                            if changed.is_err() {
                                return;
                            }
                        }
                        _ = machine.snapshot_due() => {
                            // Entries carry batches: snapshots follow the commands applied
                            // (`SNAPSHOT_COMMANDS`), not only openraft's count of entries.
                            if raft.trigger().snapshot().await.is_err() {
                                return;
                            }
                        }
                    }
                }
            })
        };
        Ok(QueueGroup {
            node,
            group,
            raft,
            machine,
            tasks: vec![pump, timer],
        })
    }

    /// Proposes a command and waits at most `bound` (see [`propose`]).
    pub async fn propose(&self, command: Command, bound: Duration) -> Result<Reply, ProposeError> {
        propose(&self.raft, command, bound).await
    }

    /// Stops the member and its driver.
    pub async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        let _ = self.raft.shutdown().await;
    }
}
