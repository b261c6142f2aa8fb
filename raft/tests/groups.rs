//! Raft groups of quorum queues in one process, over an in-memory network (no sockets): a
//! single-member group, three groups of three members sharing each node's WAL, a member's
//! removal, and a member restarted from its WAL on disk.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, Config, SnapshotPolicy};
use parking_lot::Mutex;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};
use warren_core::message::{Message, Properties};
use warren_core::quorum::codec::encode_snapshot;
use warren_core::quorum::{Command, CreditMode, Effect, PublishId, QuorumConfig, Reply};
use warren_raft::state_machine::Effects;
use warren_raft::{
    propose, unix_ms, EffectSink, GroupId, GroupLogStore, NodeId, QueueGroup, QueueRaft,
    QueueStateMachine, Stamped, TypeConfig, Wal, WalOptions,
};

const TIMEOUT: Duration = Duration::from_secs(10);

/// Every group member of every node, by (group, node); a node that is down is absent.
#[derive(Default)]
struct Router {
    members: Mutex<BTreeMap<(GroupId, NodeId), QueueRaft>>,
}

impl Router {
    fn get(&self, group: GroupId, node: NodeId) -> Option<QueueRaft> {
        self.members.lock().get(&(group, node)).cloned()
    }
}

struct Network {
    router: Arc<Router>,
    group: GroupId,
}

struct Connection {
    router: Arc<Router>,
    group: GroupId,
    target: NodeId,
}

fn unreachable<E: std::error::Error>(target: NodeId) -> RPCError<NodeId, BasicNode, E> {
    RPCError::Unreachable(Unreachable::new(&std::io::Error::other(format!(
        "node {target} is down"
    ))))
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Connection;

    async fn new_client(&mut self, target: NodeId, _node: &BasicNode) -> Connection {
        Connection {
            router: Arc::clone(&self.router),
            group: self.group,
            target,
        }
    }
}

impl RaftNetwork<TypeConfig> for Connection {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self
            .router
            .get(self.group, self.target)
            .ok_or_else(|| unreachable(self.target))?;
        raft.append_entries(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let raft = self
            .router
            .get(self.group, self.target)
            .ok_or_else(|| unreachable(self.target))?;
        raft.install_snapshot(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        _option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let raft = self
            .router
            .get(self.group, self.target)
            .ok_or_else(|| unreachable(self.target))?;
        raft.vote(rpc)
            .await
            .map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

fn config() -> Arc<Config> {
    Arc::new(
        Config {
            heartbeat_interval: 50,
            election_timeout_min: 200,
            election_timeout_max: 400,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(20),
            max_in_snapshot_log_to_keep: 5,
            purge_batch_size: 1,
            ..Default::default()
        }
        .validate()
        .expect("valid raft config"),
    )
}

/// One node: its WAL and its member of each group.
struct TestNode {
    id: NodeId,
    dir: PathBuf,
    wal: Wal,
    members: BTreeMap<GroupId, (QueueRaft, QueueStateMachine)>,
    /// What each group's state machine asked this node to do (a driver acts only as leader).
    effects: BTreeMap<GroupId, UnboundedReceiver<Effects>>,
}

impl TestNode {
    async fn start(router: &Arc<Router>, id: NodeId, dir: &Path, groups: &[GroupId]) -> TestNode {
        let (wal, _) = Wal::open(dir, WalOptions::default()).expect("WAL opens");
        let mut members = BTreeMap::new();
        let mut effects = BTreeMap::new();
        for &group in groups {
            let log = GroupLogStore::new(&wal, group);
            let (sender, receiver) = unbounded_channel();
            effects.insert(group, receiver);
            let machine = QueueStateMachine::open(
                wal.group_dir(group),
                QuorumConfig::new(format!("q{group}")),
                Some(sender),
            )
            .expect("state machine opens");
            let raft = QueueRaft::new(
                id,
                config(),
                Network {
                    router: Arc::clone(router),
                    group,
                },
                log,
                machine.clone(),
            )
            .await
            .expect("raft starts");
            router.members.lock().insert((group, id), raft.clone());
            members.insert(group, (raft, machine));
        }
        TestNode {
            id,
            dir: dir.to_path_buf(),
            wal,
            members,
            effects,
        }
    }

    /// Takes the node off the network and stops it, as a crash would (nothing is flushed
    /// beyond what was already durable).
    async fn stop(self, router: &Router) -> PathBuf {
        for (group, (raft, _)) in &self.members {
            router.members.lock().remove(&(*group, self.id));
            raft.shutdown().await.expect("raft stops");
        }
        self.wal.close();
        self.dir
    }

    fn raft(&self, group: GroupId) -> &QueueRaft {
        &self.members[&group].0
    }

    fn queue_bytes(&self, group: GroupId) -> Vec<u8> {
        self.members[&group].1.with_queue(encode_snapshot)
    }
}

fn message(text: &str) -> Arc<Message> {
    Arc::new(Message {
        exchange: Arc::from(""),
        routing_key: Arc::from("q"),
        properties: Properties {
            delivery_mode: Some(2),
            ..Default::default()
        },
        encoded_properties: None,
        body: Bytes::copy_from_slice(text.as_bytes()),
    })
}

async fn publish(raft: &QueueRaft, publisher: u64, sequence: u64) -> Reply {
    raft.client_write(Stamped {
        at: unix_ms(),
        command: Command::Enqueue {
            publish: Some(PublishId {
                publisher,
                sequence,
            }),
            message: message(&format!("{publisher}-{sequence}")),
        },
    })
    .await
    .expect("committed")
    .data
    .0
}

async fn leader_of(nodes: &[&TestNode], group: GroupId) -> NodeId {
    let raft = nodes[0].raft(group);
    let metrics = raft
        .wait(Some(TIMEOUT))
        .metrics(
            |m| {
                m.current_leader
                    .is_some_and(|leader| nodes.iter().any(|n| n.id == leader))
            },
            "a live leader",
        )
        .await
        .expect("a leader is elected");
    metrics.current_leader.expect("leader")
}

fn node<'a>(nodes: &[&'a TestNode], id: NodeId) -> &'a TestNode {
    nodes.iter().find(|n| n.id == id).expect("node")
}

async fn wait_applied(nodes: &[&TestNode], group: GroupId, index: u64) {
    for node in nodes {
        node.raft(group)
            .wait(Some(TIMEOUT))
            .applied_index_at_least(Some(index), "caught up")
            .await
            .expect("member catches up");
    }
}

fn members(ids: &[NodeId]) -> BTreeMap<NodeId, BasicNode> {
    ids.iter()
        .map(|id| {
            (
                *id,
                BasicNode {
                    addr: format!("node-{id}"),
                },
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_member_group_commits_applies_and_recovers_from_its_wal() {
    let dir = tempfile::tempdir().unwrap();
    let router = Arc::new(Router::default());
    let node = TestNode::start(&router, 1, dir.path(), &[1]).await;
    node.raft(1).initialize(members(&[1])).await.unwrap();
    leader_of(&[&node], 1).await;
    for sequence in 1..=30 {
        assert!(matches!(
            publish(node.raft(1), 9, sequence).await,
            Reply::Enqueued { .. }
        ));
    }
    // A retry of a publish already applied is recognised, on the replicated state.
    assert!(matches!(
        publish(node.raft(1), 9, 30).await,
        Reply::Duplicate
    ));
    let attached = node
        .raft(1)
        .client_write(Stamped {
            at: unix_ms(),
            command: Command::Attach {
                owner: 1,
                tag: "c".into(),
                mode: CreditMode::Prefetch(10),
                priority: 0,
                auto_ack: false,
                timeout: None,
            },
        })
        .await
        .unwrap()
        .data
        .0;
    let Reply::Attached { consumer, .. } = attached else {
        panic!("attach: {attached:?}");
    };
    // The attach was applied with its effects: ten deliveries to the new consumer.
    let mut node = node;
    let mut delivered = Vec::new();
    while let Ok((_, effects)) = node.effects.get_mut(&1).unwrap().try_recv() {
        for effect in effects {
            if let Effect::Deliver {
                consumer: to,
                delivered: d,
                ..
            } = effect
            {
                assert_eq!(to, consumer);
                delivered.push(String::from_utf8(d.message.body.to_vec()).unwrap());
            }
        }
    }
    assert_eq!(
        delivered,
        (1..=10).map(|s| format!("9-{s}")).collect::<Vec<_>>()
    );
    let before = node.members[&1].1.with_queue(|q| q.stats());
    assert_eq!((before.ready, before.unacknowledged), (20, 10));
    let expected = node.queue_bytes(1);
    let dir = node.stop(&router).await;

    // Reopened from disk: snapshot plus the log after it give the same queue.
    let node = TestNode::start(&router, 1, &dir, &[1]).await;
    leader_of(&[&node], 1).await;
    let last = node.raft(1).metrics().borrow().last_log_index.unwrap();
    wait_applied(&[&node], 1, last).await;
    assert_eq!(node.queue_bytes(1), expected);
    assert!(matches!(
        publish(node.raft(1), 9, 30).await,
        Reply::Duplicate
    ));
    node.stop(&router).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_groups_of_three_members_agree_and_survive_a_removal_and_a_restart() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let router = Arc::new(Router::default());
    let groups = [10, 11, 12];
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        nodes.push(TestNode::start(&router, i as u64 + 1, dir.path(), &groups).await);
    }
    for &group in &groups {
        nodes[0]
            .raft(group)
            .initialize(members(&[1, 2, 3]))
            .await
            .unwrap();
    }
    let all: Vec<&TestNode> = nodes.iter().collect();
    for &group in &groups {
        let leader = leader_of(&all, group).await;
        for sequence in 1..=25 {
            let reply = publish(node(&all, leader).raft(group), group, sequence).await;
            assert!(matches!(reply, Reply::Enqueued { .. }), "{reply:?}");
        }
        let last = node(&all, leader)
            .raft(group)
            .metrics()
            .borrow()
            .last_log_index
            .unwrap();
        wait_applied(&all, group, last).await;
        let reference = nodes[0].queue_bytes(group);
        for n in &nodes {
            assert_eq!(
                n.queue_bytes(group),
                reference,
                "group {group} on node {}",
                n.id
            );
        }
    }
    // Each node's three groups logged through its one WAL.
    assert!(nodes.iter().all(|n| n.wal.groups() == groups.to_vec()));

    // A new member of group 12 joins after the log was purged behind a snapshot: it gets the
    // snapshot (the queue's index and every queued message) and agrees.
    let dir4 = tempfile::tempdir().unwrap();
    let fourth = TestNode::start(&router, 4, dir4.path(), &[12]).await;
    let leader = leader_of(&all, 12).await;
    let leader_raft = node(&all, leader).raft(12);
    assert!(
        leader_raft.metrics().borrow().purged.is_some(),
        "log purged behind a snapshot"
    );
    leader_raft
        .add_learner(
            4,
            BasicNode {
                addr: "node-4".into(),
            },
            true,
        )
        .await
        .expect("learner added");
    leader_raft
        .change_membership(BTreeSet::from([1, 2, 3, 4]), false)
        .await
        .expect("learner promoted");
    let last = leader_raft.metrics().borrow().last_log_index.unwrap();
    wait_applied(&[&fourth], 12, last).await;
    assert_eq!(fourth.queue_bytes(12), node(&all, leader).queue_bytes(12));
    assert!(fourth.raft(12).metrics().borrow().snapshot.is_some());
    fourth.stop(&router).await;
    leader_raft
        .change_membership(BTreeSet::from([1, 2, 3]), false)
        .await
        .expect("member 4 removed");

    // Remove node 3 from group 11: the two others still commit.
    let leader = leader_of(&all, 11).await;
    node(&all, leader)
        .raft(11)
        .change_membership(BTreeSet::from([1, 2]), false)
        .await
        .expect("membership changes");
    let survivors: Vec<&TestNode> = nodes.iter().filter(|n| n.id != 3).collect();
    let leader = leader_of(&survivors, 11).await;
    assert!(matches!(
        publish(node(&survivors, leader).raft(11), 11, 26).await,
        Reply::Enqueued { .. }
    ));
    let voters: Vec<NodeId> = node(&survivors, leader)
        .raft(11)
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect();
    assert_eq!(voters, vec![1, 2]);

    // Stop the leader's node of group 10; the other two elect a new leader and go on.
    let old_leader = leader_of(&all, 10).await;
    drop(all);
    drop(survivors);
    let index = nodes.iter().position(|n| n.id == old_leader).unwrap();
    let stopped = nodes.remove(index);
    let stopped_id = stopped.id;
    let dir = stopped.stop(&router).await;
    let alive: Vec<&TestNode> = nodes.iter().collect();
    let leader = leader_of(&alive, 10).await;
    assert_ne!(leader, old_leader);
    for sequence in 26..=40 {
        let reply = publish(node(&alive, leader).raft(10), 10, sequence).await;
        assert!(matches!(reply, Reply::Enqueued { .. }), "{reply:?}");
    }
    // The publisher retries sequence 40 against the new leader: applied once.
    assert!(matches!(
        publish(node(&alive, leader).raft(10), 10, 40).await,
        Reply::Duplicate
    ));
    drop(alive);

    // Restart it from its WAL on disk: it catches up and agrees.
    nodes.push(TestNode::start(&router, stopped_id, &dir, &groups).await);
    let all: Vec<&TestNode> = nodes.iter().collect();
    let leader = leader_of(&all, 10).await;
    let last = node(&all, leader)
        .raft(10)
        .metrics()
        .borrow()
        .last_log_index
        .unwrap();
    wait_applied(&all, 10, last).await;
    let reference = node(&all, leader).queue_bytes(10);
    for n in &all {
        assert_eq!(n.queue_bytes(10), reference, "group 10 on node {}", n.id);
    }
    let stats = node(&all, stopped_id).members[&10]
        .1
        .with_queue(|q| q.stats());
    assert_eq!(stats.ready, 40);
    assert_eq!(stats.duplicates, 1);
    drop(all);
    for n in nodes {
        n.stop(&router).await;
    }
}

/// Seed 003's experiment C in one process: confirms with 3, 2 and 1 members up are all, all and
/// none, and every attempt is answered or timed out within the bound, never left hanging.
/// Publishes that timed out and are retried after the members return are applied once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirms_with_three_two_and_one_members_up_are_all_all_and_none_within_a_bound() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let router = Arc::new(Router::default());
    let group = 20;
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        nodes.push(TestNode::start(&router, i as u64 + 1, dir.path(), &[group]).await);
    }
    nodes[0]
        .raft(group)
        .initialize(members(&[1, 2, 3]))
        .await
        .unwrap();
    // Generous while a majority is up (a loaded machine must not turn a commit into a
    // timeout); short when none can be.
    let bound_for = |up: usize| {
        if up > 1 {
            Duration::from_secs(3)
        } else {
            Duration::from_millis(250)
        }
    };
    let publish_through = |raft: QueueRaft, sequence: u64, bound: Duration| async move {
        let started = std::time::Instant::now();
        let result = propose(
            &raft,
            Command::Enqueue {
                publish: Some(PublishId {
                    publisher: 1,
                    sequence,
                }),
                message: message(&sequence.to_string()),
            },
            bound,
        )
        .await;
        assert!(
            started.elapsed() < bound + Duration::from_millis(750),
            "attempt {sequence} took {:?}",
            started.elapsed()
        );
        matches!(result, Ok(Reply::Enqueued { .. }))
    };
    let mut confirmed = Vec::new();
    let mut sequence = 0;
    for up in [3usize, 2, 1] {
        let alive: Vec<&TestNode> = nodes.iter().collect();
        let target = if up > 1 {
            node(&alive, leader_of(&alive, group).await)
                .raft(group)
                .clone()
        } else {
            alive[0].raft(group).clone()
        };
        let attempts = if up > 1 { 20 } else { 8 };
        let mut succeeded = 0;
        for _ in 0..attempts {
            sequence += 1;
            if publish_through(target.clone(), sequence, bound_for(up)).await {
                succeeded += 1;
            }
        }
        confirmed.push((up, succeeded, attempts));
        drop(alive);
        if up > 1 {
            // Stop a member that is not the leader: with 2 of 3 the leader goes on at once;
            // with 1 of 3 the lone leader can append but never commit.
            let alive: Vec<&TestNode> = nodes.iter().collect();
            let leader = leader_of(&alive, group).await;
            drop(alive);
            let index = nodes.iter().position(|n| n.id != leader).unwrap();
            let stopped = nodes.remove(index);
            stopped.stop(&router).await;
            // Keep the leader first, so the last stage targets it.
            let leader_at = nodes.iter().position(|n| n.id == leader).unwrap();
            nodes.swap(0, leader_at);
        }
    }
    assert_eq!(confirmed, vec![(3, 20, 20), (2, 20, 20), (1, 0, 8)]);

    // The two members come back; the publisher retries the 8 unconfirmed publishes.
    let lone = nodes.remove(0);
    let lone_id = lone.id;
    let lone_dir = lone.stop(&router).await;
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let id = i as u64 + 1;
        let path = if id == lone_id {
            lone_dir.clone()
        } else {
            dir.path().to_path_buf()
        };
        nodes.push(TestNode::start(&router, id, &path, &[group]).await);
    }
    let all: Vec<&TestNode> = nodes.iter().collect();
    let leader = node(&all, leader_of(&all, group).await).raft(group).clone();
    for retry in 41..=48 {
        let reply = propose(
            &leader,
            Command::Enqueue {
                publish: Some(PublishId {
                    publisher: 1,
                    sequence: retry,
                }),
                message: message(&retry.to_string()),
            },
            TIMEOUT,
        )
        .await;
        assert!(
            matches!(reply, Ok(Reply::Enqueued { .. }) | Ok(Reply::Duplicate)),
            "{reply:?}"
        );
    }
    let last = leader.metrics().borrow().last_log_index.unwrap();
    wait_applied(&all, group, last).await;
    for n in &all {
        let stats = n.members[&group].1.with_queue(|q| q.stats());
        assert_eq!(stats.ready, 48, "node {}: every publish once", n.id);
    }
    drop(all);
    for n in nodes {
        n.stop(&router).await;
    }
}

/// Seed 003's experiment B in one process: confirmed publishes one at a time, the leader's
/// node stopped, the queue drained from a survivor: none lost, none duplicated, and what was
/// delivered unsettled on the lost leader comes again with the redelivered flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_publishes_survive_the_leaders_node_and_unsettled_ones_come_back_redelivered() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let router = Arc::new(Router::default());
    let group = 30;
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        nodes.push(TestNode::start(&router, i as u64 + 1, dir.path(), &[group]).await);
    }
    nodes[0]
        .raft(group)
        .initialize(members(&[1, 2, 3]))
        .await
        .unwrap();
    let all: Vec<&TestNode> = nodes.iter().collect();
    let leader = node(&all, leader_of(&all, group).await).raft(group).clone();
    let count = 500u64;
    for sequence in 1..=count {
        let reply = propose(
            &leader,
            Command::Enqueue {
                publish: Some(PublishId {
                    publisher: 1,
                    sequence,
                }),
                message: message(&sequence.to_string()),
            },
            TIMEOUT,
        )
        .await;
        assert!(matches!(reply, Ok(Reply::Enqueued { .. })), "{reply:?}");
    }
    // A consumer on the leader's node takes 10 and settles none.
    let attached = propose(
        &leader,
        Command::Attach {
            owner: 77,
            tag: "doomed".into(),
            mode: CreditMode::Prefetch(10),
            priority: 0,
            auto_ack: false,
            timeout: None,
        },
        TIMEOUT,
    )
    .await;
    assert!(
        matches!(attached, Ok(Reply::Attached { .. })),
        "{attached:?}"
    );
    let old_leader = leader_of(&all, group).await;
    drop(all);
    let index = nodes.iter().position(|n| n.id == old_leader).unwrap();
    nodes.remove(index).stop(&router).await;

    let mut survivors = nodes;
    let alive: Vec<&TestNode> = survivors.iter().collect();
    let new_leader = leader_of(&alive, group).await;
    assert_ne!(new_leader, old_leader);
    let raft = node(&alive, new_leader).raft(group).clone();
    drop(alive);
    let receiver = survivors
        .iter_mut()
        .find(|n| n.id == new_leader)
        .unwrap()
        .effects
        .get_mut(&group)
        .unwrap();
    while receiver.try_recv().is_ok() {}
    // The consumer's node is gone: its deliveries return. Then drain everything.
    propose(&raft, Command::Down { owner: 77 }, TIMEOUT)
        .await
        .unwrap();
    let drained = propose(
        &raft,
        Command::Attach {
            owner: 5,
            tag: "drain".into(),
            mode: CreditMode::Prefetch(0),
            priority: 0,
            auto_ack: true,
            timeout: None,
        },
        TIMEOUT,
    )
    .await;
    let Ok(Reply::Attached {
        consumer: drain, ..
    }) = drained
    else {
        panic!("{drained:?}");
    };
    let mut bodies = Vec::new();
    let mut redelivered = Vec::new();
    while let Ok((_, effects)) = receiver.try_recv() {
        for effect in effects {
            // Only the drain's: this member may apply the doomed consumer's attach (and
            // emit its deliveries) after the channel was emptied above.
            if let Effect::Deliver {
                consumer,
                delivered,
                ..
            } = effect
            {
                if consumer != drain {
                    continue;
                }
                let body: u64 = String::from_utf8(delivered.message.body.to_vec())
                    .unwrap()
                    .parse()
                    .unwrap();
                if delivered.redelivered {
                    redelivered.push(body);
                }
                bodies.push(body);
            }
        }
    }
    let unique: BTreeSet<u64> = bodies.iter().copied().collect();
    assert_eq!(bodies.len() as u64, count, "none duplicated");
    assert_eq!(unique, (1..=count).collect::<BTreeSet<_>>(), "none lost");
    assert_eq!(redelivered, (1..=10).collect::<Vec<_>>());
    for n in survivors {
        n.stop(&router).await;
    }
}

/// Collects what the leader's driver delivers, with the time it arrived.
#[derive(Default)]
struct Collect {
    delivered: Mutex<Vec<(String, u64, bool)>>,
}

impl EffectSink for Collect {
    fn apply(&self, _index: u64, effect: Effect, leading: bool) {
        if !leading {
            return;
        }
        if let Effect::Deliver { delivered, .. } = effect {
            self.delivered.lock().push((
                String::from_utf8(delivered.message.body.to_vec()).unwrap(),
                unix_ms(),
                delivered.redelivered,
            ));
        }
    }
}

fn delayed_message(text: &str, at: u64) -> Arc<Message> {
    let mut headers = warren_core::value::Table::new();
    headers.insert(
        warren_core::quorum::DELIVERY_TIME_HEADER,
        warren_core::value::Value::I64(at as i64),
    );
    Arc::new(Message {
        exchange: Arc::from(""),
        routing_key: Arc::from("q"),
        properties: Properties {
            delivery_mode: Some(2),
            headers: Some(headers),
            ..Default::default()
        },
        encoded_properties: None,
        body: Bytes::copy_from_slice(text.as_bytes()),
    })
}

/// Native delayed delivery through a real group and its driver: messages become available at
/// their time, not before, in time order; one still delayed when the node restarts is
/// delivered at its time by the restarted member.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_messages_are_delivered_at_their_time_in_time_order_and_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let router = Arc::new(Router::default());
    let group = 40;
    let start = |sink: Arc<Collect>| {
        let router = Arc::clone(&router);
        let path = dir.path().to_path_buf();
        async move {
            let (wal, _) = Wal::open(&path, WalOptions::default()).unwrap();
            let member = QueueGroup::start(
                1,
                group,
                config(),
                &wal,
                Network {
                    router: Arc::clone(&router),
                    group,
                },
                QuorumConfig::new("delayed"),
                sink,
            )
            .await
            .unwrap();
            router
                .members
                .lock()
                .insert((group, 1), member.raft.clone());
            (wal, member)
        }
    };
    let sink = Arc::new(Collect::default());
    let (wal, member) = start(Arc::clone(&sink)).await;
    member.raft.initialize(members(&[1])).await.unwrap();
    member
        .raft
        .wait(Some(TIMEOUT))
        .current_leader(1, "leader")
        .await
        .unwrap();
    let consume = Command::Attach {
        owner: 1,
        tag: "c".into(),
        mode: CreditMode::Prefetch(0),
        priority: 0,
        auto_ack: true,
        timeout: None,
    };
    member.propose(consume.clone(), TIMEOUT).await.unwrap();
    let base = unix_ms();
    let times = [
        ("third", base + 900),
        ("first", base + 300),
        ("second", base + 600),
    ];
    for (text, at) in times {
        let reply = member
            .propose(
                Command::Enqueue {
                    publish: None,
                    message: delayed_message(text, at),
                },
                TIMEOUT,
            )
            .await
            .unwrap();
        assert!(matches!(reply, Reply::Enqueued { .. }));
    }
    assert_eq!(member.machine.with_queue(|q| q.stats().delayed), 3);
    let deadline = std::time::Instant::now() + TIMEOUT;
    while sink.delivered.lock().len() < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got = sink.delivered.lock().clone();
    let order: Vec<&str> = got.iter().map(|(t, _, _)| t.as_str()).collect();
    assert_eq!(order, vec!["first", "second", "third"]);
    for ((text, received, _), (_, due)) in got.iter().zip([
        ("first", base + 300),
        ("second", base + 600),
        ("third", base + 900),
    ]) {
        assert!(
            *received >= due,
            "{text} arrived {} ms early",
            due - received
        );
        assert!(
            *received < due + 3_000,
            "{text} arrived {} ms late",
            received - due
        );
    }

    // One more, due after a restart of the (only) member.
    let due = unix_ms() + 1_200;
    member
        .propose(
            Command::Enqueue {
                publish: None,
                message: delayed_message("after restart", due),
            },
            TIMEOUT,
        )
        .await
        .unwrap();
    router.members.lock().remove(&(group, 1));
    member.stop().await;
    wal.close();
    let sink = Arc::new(Collect::default());
    let (wal, member) = start(Arc::clone(&sink)).await;
    member
        .raft
        .wait(Some(TIMEOUT))
        .current_leader(1, "leader again")
        .await
        .unwrap();
    // The consumer's connection did not survive the restart: a new one attaches.
    member
        .propose(Command::Down { owner: 1 }, TIMEOUT)
        .await
        .unwrap();
    member.propose(consume, TIMEOUT).await.unwrap();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !sink
        .delivered
        .lock()
        .iter()
        .any(|(t, _, _)| t == "after restart")
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let got: Vec<(String, u64, bool)> = sink
        .delivered
        .lock()
        .iter()
        .filter(|(t, _, _)| t == "after restart")
        .cloned()
        .collect();
    assert_eq!(got.len(), 1, "delivered once after the restart");
    assert!(got[0].1 >= due, "arrived {} ms early", due - got[0].1);
    router.members.lock().remove(&(group, 1));
    member.stop().await;
    wal.close();
}
