//! A quorum queue's driver task on one node: it starts this node's member of the queue's
//! group, then proposes what the handle asks, in the order it asked.
//!
//! Operations go in batches, one batch at a time: to the group through openraft when this
//! member leads, else forwarded to the leader's node (`wire::methods::FORWARD`), which
//! proposes them in order and answers once they are applied. What was not applied (the
//! leader changed, or no majority answered) is proposed again, first, in its order:
//! publishes carry the publisher's sequence number, so one applied twice is answered
//! `Duplicate`, and are retried until they commit (a confirm means a majority has the
//! message); other operations give up after [`RETRY_BOUND`].
//!
//! On a cluster the driver also keeps its group tidy (`maintain`): every member forgets the
//! consumers of its own node's previous run, and the leader forgets those of nodes the
//! failure detector holds to be down (their deliveries come back, redelivered) and adds
//! every cluster node the group lacks as a learner, so every node applies the log and can
//! serve consumers locally. It looks every second while something is pending (a leader
//! out of reach, a member without a link, a `Down` or learner just asked for); once all is
//! settled it sleeps until the failure detector sees a link open or break, so an idle
//! group's driver does not wake.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use openraft::{BasicNode, Config, ServerState};
use tokio::sync::{mpsc, watch};
use warren_core::quorum::{Command, QuorumConfig, Reply};

use crate::network::{
    member_id, ClusterLink, ClusterNetwork, GroupRegistry, NoPeers, FORWARD_BOUND,
};
use crate::queue::{Identity, Op, QuorumQueueHandle};
use crate::wire::{self, methods};
use crate::{EffectSink, GroupId, NodeId, QueueGroup, Wal};

/// This node's id in the one-member group of a node that runs alone.
const ALONE: NodeId = 1;
/// How long a restarted one-member group may take to lead again.
const LEADER_BOUND: Duration = Duration::from_secs(10);
/// How long a batch proposed on this node's own member may wait for its commit.
const COMMIT_BOUND: Duration = Duration::from_secs(10);
/// Operations other than publishes are given up after this long without a commit.
pub const RETRY_BOUND: Duration = Duration::from_secs(30);
/// The pause before a batch that was not applied is proposed again.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How often a clustered member tidies its group and checks on its leader.
const MAINTENANCE: Duration = Duration::from_secs(1);
/// How often a settled member (a leader in reach, every member linked, nothing pending)
/// looks again when no link changes: a link opening or breaking wakes it at once.
const IDLE_MAINTENANCE: Duration = Duration::from_secs(15);
/// A voter whose leader's node has had no link this long (plus a random part of as much
/// again, so that voters rarely stand together) starts an election.
const ELECT_AFTER: Duration = Duration::from_millis(800);
/// A consumer owner forgotten is not proposed again for this long.
const DOWN_AGAIN: Duration = Duration::from_secs(5);
/// A node without a link for this long has its consumers forgotten by the leader (a link
/// that breaks and re-opens at once, as under load, is not a node going down).
const GONE_AFTER: Duration = Duration::from_secs(2);
/// Most operations in one batch.
const MAX_BATCH: usize = 2_048;

/// Where the group's members are.
pub(crate) enum Placement {
    /// This node runs alone: one member.
    Alone,
    /// A cluster: the link arrives once clustering has started.
    Cluster(watch::Receiver<Option<Arc<dyn ClusterLink>>>),
}

/// The queue's driver task.
pub(crate) struct Driver {
    pub(crate) queue: Weak<QuorumQueueHandle>,
    pub(crate) wal: Wal,
    pub(crate) group: GroupId,
    pub(crate) vhost: String,
    pub(crate) alone_config: Arc<Config>,
    pub(crate) cluster_config: Arc<Config>,
    pub(crate) queue_config: QuorumConfig,
    /// `x-quorum-initial-group-size`.
    pub(crate) initial_size: usize,
    pub(crate) ops: mpsc::UnboundedReceiver<Op>,
    pub(crate) placement: Placement,
    pub(crate) registry: Arc<GroupRegistry>,
    pub(crate) identity: Identity,
}

/// An operation on its way into the log, with what to do with its reply.
struct Pending {
    command: Command,
    done: Done,
    since: Instant,
}

enum Done {
    Nothing,
    /// A publish whose confirm is held on the store's sequence number `hold`.
    Publish {
        hold: Option<u64>,
        answer: Option<std::sync::mpsc::Sender<Option<Reply>>>,
    },
    Attach {
        local: u64,
    },
    Dequeue {
        reply: std::sync::mpsc::Sender<Option<Reply>>,
    },
}

impl Pending {
    fn of(op: Op) -> Option<Pending> {
        let (command, done) = match op {
            Op::Command(command) => (command, Done::Nothing),
            Op::Publish {
                command,
                hold,
                answer,
            } => (command, Done::Publish { hold, answer }),
            Op::Attach { local, command } => (command, Done::Attach { local }),
            Op::Dequeue { command, reply } => (command, Done::Dequeue { reply }),
            Op::Delete { .. } => return None,
        };
        Some(Pending {
            command,
            done,
            since: Instant::now(),
        })
    }

    /// Whether it should be proposed again after it was not applied.
    fn retry(&self) -> bool {
        match self.done {
            // A reject-publish caller waits for the answer (a bounded wait): retried while
            // it may still be heard; every other publish until it commits.
            Done::Publish {
                answer: Some(_), ..
            } => self.since.elapsed() < Duration::from_secs(5),
            Done::Publish { .. } => true,
            Done::Dequeue { .. } => self.since.elapsed() < Duration::from_secs(5),
            Done::Nothing | Done::Attach { .. } => self.since.elapsed() < RETRY_BOUND,
        }
    }
}

/// What `maintain` and `watch_leader` remember between rounds.
#[derive(Default)]
struct Tidy {
    /// Since when this voter has seen no leader it can reach, and how long it waits then.
    leaderless: Option<(Instant, Duration)>,
    /// A leader named by a peer while this member knows none (after a restart).
    hint: Option<String>,
    /// Consumer owners proposed `Down` recently.
    downed: HashMap<u64, Instant>,
    /// Nodes added as learners recently.
    learners: HashMap<NodeId, Instant>,
    /// Members without a link, since when.
    absent: HashMap<String, Instant>,
}

impl Tidy {
    /// Nothing is being waited for: a leader is known, every member is linked, and no
    /// `Down` or learner was asked for recently.
    fn is_settled(&self) -> bool {
        self.leaderless.is_none()
            && self.hint.is_none()
            && self.downed.is_empty()
            && self.learners.is_empty()
            && self.absent.is_empty()
    }
}

/// Resolves when `changes` moves; never without one (or once its sender is gone).
async fn link_changed(changes: &mut Option<watch::Receiver<u64>>) {
    if let Some(changes) = changes {
        if changes.changed().await.is_ok() {
            return;
        }
    }
    std::future::pending().await
}

/// Who leads the group, as this member knows it.
enum Leader {
    Me,
    Peer(String),
    Unknown,
}

/// A running member and where it is.
struct Member {
    group: QueueGroup,
    link: Option<Arc<dyn ClusterLink>>,
}

impl Driver {
    pub(crate) async fn run(mut self) {
        let name = self.queue_config.name.clone();
        // Held until this driver is done (the group deleted, or the node stopping).
        let _slot = self.registry.slot(self.group).lock_owned().await;
        let member = match self.start().await {
            Ok(member) => member,
            Err(error) => {
                tracing::error!(queue = %name, %error, "quorum queue member did not start");
                self.refuse_all();
                return;
            }
        };
        let mut retry: Vec<Pending> = Vec::new();
        let mut tidy = Tidy::default();
        let mut last_maintenance = Instant::now();
        let mut link_changes = member.link.as_ref().and_then(|link| link.link_changes());
        // Whether the last maintenance found nothing to watch: the member then sleeps
        // until a link changes (or `IDLE_MAINTENANCE`), so idle groups cost nothing.
        let mut settled = false;
        // A link opened or broke since the last maintenance (seen while waiting).
        let mut link_moved = false;
        loop {
            let mut batch = std::mem::take(&mut retry);
            let mut delete = None;
            let period = if settled && link_changes.is_some() {
                IDLE_MAINTENANCE
            } else {
                MAINTENANCE
            };
            if batch.is_empty() {
                let next = match member.link {
                    Some(_) => {
                        let wait = period.saturating_sub(last_maintenance.elapsed());
                        tokio::select! {
                            op = self.ops.recv() => Some(op),
                            _ = tokio::time::sleep(wait) => None,
                            _ = link_changed(&mut link_changes) => {
                                link_moved = true;
                                None
                            }
                        }
                    }
                    None => Some(self.ops.recv().await),
                };
                match next {
                    Some(None) => break,
                    Some(Some(Op::Delete { done })) => delete = Some(done),
                    Some(Some(op)) => batch.extend(Pending::of(op)),
                    None => {}
                }
            }
            while delete.is_none() && batch.len() < MAX_BATCH {
                match self.ops.try_recv() {
                    Ok(Op::Delete { done }) => delete = Some(done),
                    Ok(op) => batch.extend(Pending::of(op)),
                    Err(_) => break,
                }
            }
            if let Some(link) = &member.link {
                // `changed()` marks what it saw as seen, so a change noticed while waiting
                // is remembered in `link_moved`; one that came while busy shows here.
                let changed = link_moved
                    || link_changes
                        .as_mut()
                        .is_some_and(|changes| changes.has_changed().unwrap_or(false));
                if changed || last_maintenance.elapsed() >= period {
                    if let Some(changes) = link_changes.as_mut() {
                        changes.borrow_and_update();
                    }
                    link_moved = false;
                    last_maintenance = Instant::now();
                    self.watch_leader(&member.group, link, &mut tidy).await;
                    let commands = self.maintain(&member.group, link, &mut tidy);
                    settled = commands.is_empty()
                        && tidy.is_settled()
                        && !matches!(Self::leader(&member.group), Leader::Unknown);
                    for command in commands {
                        batch.push(Pending {
                            command,
                            done: Done::Nothing,
                            since: Instant::now(),
                        });
                    }
                }
            }
            if !batch.is_empty() {
                let commands: Vec<Command> = batch.iter().map(|p| p.command.clone()).collect();
                let replies = self.submit(&member, commands, tidy.hint.as_deref()).await;
                for (pending, reply) in batch.into_iter().zip(replies) {
                    match reply {
                        Some(reply) => self.complete(pending.done, Some(reply)),
                        None if pending.retry() => retry.push(pending),
                        None => self.complete(pending.done, None),
                    }
                }
                if !retry.is_empty() {
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
            if let Some(done) = delete {
                // A barrier: once this commits, every earlier publish has been applied and
                // its hold released, so no confirm waits on a stopped member.
                let _ = self.submit(&member, vec![Command::Tick], None).await;
                for pending in retry.drain(..) {
                    // The queue is gone: what it never took is not waited for.
                    self.complete(pending.done, None);
                }
                let dir = self.wal.group_dir(self.group);
                self.registry.remove(self.group);
                member.group.stop().await;
                self.wal.remove_group(self.group, None);
                if let Err(error) = std::fs::remove_dir_all(&dir) {
                    if error.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(queue = %name, %error, "cannot remove a deleted quorum queue's state");
                    }
                }
                let _ = done.send(());
                return;
            }
        }
        self.registry.remove(self.group);
        member.group.stop().await;
    }

    /// The member did not start: nothing will commit. Later operations are refused (the
    /// channel closes); publishes already queued keep their holds: releasing them would
    /// confirm messages no log has (the node's disk is failing, the log says so).
    fn refuse_all(&mut self) {
        self.ops.close();
        while let Ok(op) = self.ops.try_recv() {
            match op {
                Op::Publish {
                    answer: Some(answer),
                    ..
                } => {
                    let _ = answer.send(None);
                }
                Op::Dequeue { reply, .. } => {
                    let _ = reply.send(None);
                }
                _ => {}
            }
        }
    }

    fn leader(group: &QueueGroup) -> Leader {
        let metrics = group.raft.metrics().borrow().clone();
        match metrics.current_leader {
            Some(id) if id == group.node && metrics.state == ServerState::Leader => Leader::Me,
            Some(id) if id == group.node => Leader::Unknown,
            Some(id) => match metrics.membership_config.membership().get_node(&id) {
                Some(node) => Leader::Peer(node.addr.clone()),
                None => Leader::Unknown,
            },
            None => Leader::Unknown,
        }
    }

    /// Proposes `commands` in order through the leader: a reply per command, `None` for one
    /// that was not applied.
    async fn submit(
        &self,
        member: &Member,
        commands: Vec<Command>,
        hint: Option<&str>,
    ) -> Vec<Option<Reply>> {
        let count = commands.len();
        let leader = match (Self::leader(&member.group), hint) {
            (Leader::Unknown, Some(hint)) => Leader::Peer(hint.to_string()),
            (leader, _) => leader,
        };
        match (leader, &member.link) {
            (Leader::Me, _) => {
                self.registry
                    .propose_batch(self.group, &member.group.raft, commands, COMMIT_BOUND)
                    .await
            }
            (Leader::Peer(node), Some(link)) => {
                let body = wire::encode_forward(self.group, &commands);
                match link
                    .call(
                        &node,
                        methods::FORWARD,
                        true,
                        bytes::Bytes::from(body),
                        FORWARD_BOUND + Duration::from_secs(1),
                    )
                    .await
                {
                    Ok(answer) => wire::decode_forward_response(&answer)
                        .filter(|replies| replies.len() == count)
                        .unwrap_or_else(|| vec![None; count]),
                    Err(error) => {
                        tracing::debug!(group = self.group, %node, %error, "forwarding to the quorum queue leader failed");
                        vec![None; count]
                    }
                }
            }
            _ => vec![None; count],
        }
    }

    fn complete(&self, done: Done, reply: Option<Reply>) {
        match done {
            Done::Nothing => {}
            Done::Publish { hold, answer } => {
                let queue = self.queue.upgrade();
                // Released only once committed (or the queue is gone): a confirm means the
                // log has it.
                if let (Some(store), Some(seq)) = (queue.as_ref().and_then(|q| q.store()), hold) {
                    store.release(seq);
                }
                if let Some(answer) = answer {
                    let _ = answer.send(reply);
                }
            }
            Done::Attach { local } => {
                let Some(queue) = self.queue.upgrade() else {
                    return;
                };
                match reply {
                    Some(Reply::Attached { consumer, .. }) => {
                        queue.attach_committed(local, consumer)
                    }
                    _ => queue.attach_failed(local),
                }
            }
            Done::Dequeue { reply: sender } => {
                let _ = sender.send(reply);
            }
        }
    }

    /// Starts (or restarts) this node's member.
    async fn start(&mut self) -> std::io::Result<Member> {
        let sink: Arc<dyn EffectSink> = Arc::new(crate::queue::Effects(self.queue.clone()));
        let link = match &mut self.placement {
            Placement::Alone => None,
            Placement::Cluster(receiver) => {
                let link = receiver
                    .wait_for(Option::is_some)
                    .await
                    .map_err(|_| {
                        std::io::Error::other("the node stopped before clustering started")
                    })?
                    .clone();
                link
            }
        };
        let Some(link) = link else {
            return self.start_alone(sink).await;
        };
        let me = member_id(link.local());
        let group = QueueGroup::start(
            me,
            self.group,
            Arc::clone(&self.cluster_config),
            &self.wal,
            ClusterNetwork {
                link: Arc::clone(&link),
                group: self.group,
            },
            self.queue_config.clone(),
            sink,
        )
        .await?;
        self.registry.insert(self.group, group.raft.clone());
        let initialized = group
            .raft
            .is_initialized()
            .await
            .map_err(std::io::Error::other)?;
        if !initialized {
            let home = link.home_of(&self.vhost, &self.queue_config.name);
            let voters = choose_voters(link.members(), home.as_deref(), self.initial_size);
            // One node initialises the group: the queue's home (x-queue-leader-locator
            // client-local), else the first chosen; the others wait to be contacted.
            if voters.first().map(String::as_str) == Some(link.local()) {
                let members: BTreeMap<NodeId, BasicNode> = voters
                    .iter()
                    .map(|name| (member_id(name), BasicNode { addr: name.clone() }))
                    .collect();
                if let Err(error) = group.raft.initialize(members).await {
                    tracing::debug!(group = self.group, %error, "quorum queue group already initialised");
                }
            }
        }
        if let Some(queue) = self.queue.upgrade() {
            queue.set_member(
                group.machine.clone(),
                group.raft.clone(),
                Some(Arc::clone(&link)),
            );
        }
        Ok(Member {
            group,
            link: Some(link),
        })
    }

    /// A node that runs alone: a one-member group, led once its log is replayed.
    async fn start_alone(&mut self, sink: Arc<dyn EffectSink>) -> std::io::Result<Member> {
        let group = QueueGroup::start(
            ALONE,
            self.group,
            Arc::clone(&self.alone_config),
            &self.wal,
            NoPeers,
            self.queue_config.clone(),
            sink,
        )
        .await?;
        // Found by `quorum_status` and the metrics.
        self.registry.insert(self.group, group.raft.clone());
        let initialized = group
            .raft
            .is_initialized()
            .await
            .map_err(std::io::Error::other)?;
        if !initialized {
            let members: BTreeSet<NodeId> = [ALONE].into_iter().collect();
            group
                .raft
                .initialize(members)
                .await
                .map_err(std::io::Error::other)?;
        }
        group
            .raft
            .wait(Some(LEADER_BOUND))
            .state(ServerState::Leader, "quorum queue member leads")
            .await
            .map_err(std::io::Error::other)?;
        // Leading is not enough: the log replays into the machine after that. Wait until
        // it has applied everything the log holds (the leader's blank entry included), or
        // a declaration right after a restart reads a partial message count.
        let last_log_index = group.raft.metrics().borrow().last_log_index;
        group
            .raft
            .wait(Some(LEADER_BOUND))
            .applied_index_at_least(last_log_index, "quorum queue log replayed")
            .await
            .map_err(std::io::Error::other)?;
        // Forget the consumers of the previous run: none of their connections survived.
        let owners = group.machine.with_queue(|q| q.owners());
        for owner in owners {
            let _ = group
                .propose(Command::Down { owner }, Duration::from_secs(5))
                .await;
        }
        if let Some(queue) = self.queue.upgrade() {
            queue.set_member(group.machine.clone(), group.raft.clone(), None);
        }
        Ok(Member { group, link: None })
    }

    /// Elections on a cluster are this node's: groups send no heartbeats of their own (an
    /// idle group costs nothing), so a voter elects when the node of its leader has no link
    /// (the failure detector's view), after a random wait. A member that knows no leader
    /// (it restarted, and an idle leader does not call) asks its peers first, and pokes the
    /// leader they name with a no-op, so that the leader replicates to it.
    async fn watch_leader(&self, group: &QueueGroup, link: &Arc<dyn ClusterLink>, tidy: &mut Tidy) {
        let metrics = group.raft.metrics().borrow().clone();
        if metrics.state == ServerState::Leader {
            tidy.leaderless = None;
            tidy.hint = None;
            return;
        }
        let membership = metrics.membership_config.membership().clone();
        let name_of = |id: &NodeId| membership.get_node(id).map(|n| n.addr.clone());
        let reachable = |id: &NodeId| name_of(id).is_some_and(|name| link.is_connected(&name));
        if metrics.current_leader.as_ref().is_some_and(reachable) {
            tidy.leaderless = None;
            tidy.hint = None;
            return;
        }
        if metrics.current_leader.is_none() && metrics.state != ServerState::Candidate {
            if let Some(leader) = self.ask_for_leader(&membership, link).await {
                tidy.hint = Some(leader);
                tidy.leaderless = None;
                return;
            }
        }
        tidy.hint = None;
        let voters: Vec<NodeId> = membership.voter_ids().collect();
        if !voters.contains(&group.node) {
            return;
        }
        let now = Instant::now();
        let (since, wait) = *tidy
            .leaderless
            .get_or_insert_with(|| (now, ELECT_AFTER + jitter(ELECT_AFTER)));
        if since.elapsed() < wait {
            return;
        }
        // Without a majority in reach an election cannot be won: it would only raise terms.
        let in_reach = voters
            .iter()
            .filter(|id| **id == group.node || reachable(id))
            .count();
        if in_reach * 2 <= voters.len() {
            return;
        }
        tracing::info!(queue = %self.queue_config.name, vhost = %self.vhost, "quorum queue leader unreachable: electing");
        tidy.leaderless = Some((now, 2 * ELECT_AFTER + jitter(2 * ELECT_AFTER)));
        let raft = group.raft.clone();
        tokio::spawn(async move {
            let _ = raft.trigger().elect().await;
        });
    }

    /// Asks the group's other members which of them leads; pokes it so that it replicates
    /// to this member.
    async fn ask_for_leader(
        &self,
        membership: &openraft::Membership<NodeId, BasicNode>,
        link: &Arc<dyn ClusterLink>,
    ) -> Option<String> {
        for (_, node) in membership.nodes() {
            if node.addr == link.local() || !link.is_connected(&node.addr) {
                continue;
            }
            let asked = link
                .call(
                    &node.addr,
                    methods::LEADS,
                    false,
                    bytes::Bytes::from(self.group.to_le_bytes().to_vec()),
                    Duration::from_secs(2),
                )
                .await;
            if matches!(asked.as_deref(), Ok([1])) {
                let body = wire::encode_forward(self.group, &[Command::Tick]);
                let _ = link
                    .call(
                        &node.addr,
                        methods::FORWARD,
                        true,
                        bytes::Bytes::from(body),
                        FORWARD_BOUND,
                    )
                    .await;
                return Some(node.addr.clone());
            }
        }
        None
    }

    /// What a clustered member proposes to keep its group tidy (see the module's doc).
    fn maintain(
        &self,
        group: &QueueGroup,
        link: &Arc<dyn ClusterLink>,
        tidy: &mut Tidy,
    ) -> Vec<Command> {
        let metrics = group.raft.metrics().borrow().clone();
        let leading = metrics.state == ServerState::Leader;
        let members = link.members();
        let now = Instant::now();
        for name in &members {
            if link.is_connected(name) {
                tidy.absent.remove(name);
            } else {
                tidy.absent.entry(name.clone()).or_insert(now);
            }
        }
        let gone_node = |owner: u64| {
            let node = members
                .iter()
                .find(|name| Identity::tag_of_node(name) == Identity::tag_of(owner));
            match node {
                Some(name) => tidy
                    .absent
                    .get(name)
                    .is_some_and(|since| since.elapsed() >= GONE_AFTER),
                // Not a member any more (forgotten): its connections are gone.
                None => true,
            }
        };
        let mut commands = Vec::new();
        tidy.downed.retain(|_, at| at.elapsed() < DOWN_AGAIN);
        for owner in group.machine.with_queue(|q| q.owners()) {
            if self.identity.is_mine(owner) || tidy.downed.contains_key(&owner) {
                continue;
            }
            let gone = self.identity.is_previous_run(owner) || (leading && gone_node(owner));
            if gone {
                tracing::debug!(
                    group = self.group,
                    owner,
                    "forgetting the consumers of a connection that is gone"
                );
                tidy.downed.insert(owner, now);
                commands.push(Command::Down { owner });
            }
        }
        let learners = &mut tidy.learners;
        if leading {
            learners.retain(|_, at| at.elapsed() < Duration::from_secs(10));
            let membership = metrics.membership_config.membership().clone();
            for name in members {
                let id = member_id(&name);
                if membership.get_node(&id).is_some() || learners.contains_key(&id) {
                    continue;
                }
                learners.insert(id, Instant::now());
                let raft = group.raft.clone();
                tokio::spawn(async move {
                    let node = BasicNode { addr: name.clone() };
                    if let Err(error) = raft.add_learner(id, node, false).await {
                        tracing::debug!(node = %name, %error, "cannot add a quorum queue learner yet");
                    }
                });
            }
        }
        commands
    }
}

/// A random duration below `bound` (from the clock's nanoseconds: no generator needed).
fn jitter(bound: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let bound = bound.as_millis().max(1) as u64;
    Duration::from_millis(u64::from(nanos) % bound)
}

/// The voters of a new group: `size` of the cluster's members (all of them when fewer),
/// starting at the queue's home node and going on in name order, so every node that asks
/// gets the same answer.
pub(crate) fn choose_voters(
    mut members: Vec<String>,
    home: Option<&str>,
    size: usize,
) -> Vec<String> {
    members.sort();
    members.dedup();
    if members.is_empty() {
        return members;
    }
    let size = size.clamp(1, members.len());
    let start = home
        .and_then(|home| members.iter().position(|m| m == home))
        .unwrap_or(0);
    (0..size)
        .map(|i| members[(start + i) % members.len()].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::choose_voters;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn voters_start_at_the_home_node_and_are_the_same_for_every_caller() {
        let members = names(&["warren@c", "warren@a", "warren@b"]);
        assert_eq!(
            choose_voters(members.clone(), Some("warren@b"), 3),
            names(&["warren@b", "warren@c", "warren@a"])
        );
        assert_eq!(
            choose_voters(members.clone(), Some("warren@c"), 2),
            names(&["warren@c", "warren@a"])
        );
        assert_eq!(
            choose_voters(members.clone(), None, 5),
            names(&["warren@a", "warren@b", "warren@c"])
        );
        assert_eq!(
            choose_voters(members, Some("warren@x"), 1),
            names(&["warren@a"])
        );
        assert!(choose_voters(Vec::new(), None, 3).is_empty());
    }
}
