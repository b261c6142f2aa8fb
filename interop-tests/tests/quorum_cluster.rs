//! Quorum queues on a cluster of three real `warren` processes on 127.0.0.1-3, through lapin
//! (seed 003): a queue declared on one node is served by every node; experiment B (5,000
//! persistent messages confirmed one at a time through a follower's node, SIGKILL of the
//! leader's node, drained from a survivor: none lost, none twice); experiment C (confirms
//! with 3, 2 and 1 nodes up: all, all, none, every attempt answered or timed out within its
//! bound); deliveries unacknowledged on the killed leader's node come back redelivered.
//!
//! Every wait is bounded; each test runs its nodes on its own cluster port.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use warren_interop_tests::cluster::TestCluster;

mod lapin_common;

use lapin_common::{args, text};

/// How long three nodes may take to form (the first test run may also build the binary).
const FORM_LIMIT: Duration = Duration::from_secs(30);
/// How long a queue declared on one node may take to exist on the others.
const SPREAD_LIMIT: Duration = Duration::from_secs(10);
/// How long a drain may take, a leader election included.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

async fn open(cluster: &TestCluster, node: usize) -> (Connection, Channel) {
    let url = cluster.amqp_url(node, "guest", "guest", "%2f");
    let connection = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("connects to node {node}: {e}"));
    let channel = connection.create_channel().await.expect("channel");
    (connection, channel)
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

/// Declares quorum queue `name` on `node`, then waits until every other running node has
/// it (a passive declare succeeds there).
async fn declare_everywhere(cluster: &TestCluster, node: usize, others: &[usize], name: &str) {
    let (_connection, channel) = open(cluster, node).await;
    channel
        .queue_declare(
            name.into(),
            durable(),
            args(&[("x-queue-type", text("quorum"))]),
        )
        .await
        .expect("declares the quorum queue");
    for &other in others {
        let deadline = Instant::now() + SPREAD_LIMIT;
        loop {
            let (_connection, channel) = open(cluster, other).await;
            let passive = QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            };
            if channel
                .queue_declare(name.into(), passive, FieldTable::default())
                .await
                .is_ok()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "queue '{name}' did not reach node {other} within {SPREAD_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Publishes one persistent message and waits at most `bound` for its confirm: `true` only
/// for an ack.
async fn publish_confirmed(channel: &Channel, queue: &str, body: &str, bound: Duration) -> bool {
    let publish = async {
        let confirm = channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .ok()?;
        confirm.await.ok()
    };
    matches!(
        tokio::time::timeout(bound, publish).await,
        Ok(Some(confirmation)) if confirmation.is_ack()
    )
}

/// Consumes from `queue` on `node` until `count` messages arrived (acking each), within
/// [`DRAIN_LIMIT`]; returns the bodies in arrival order with their redelivered flags.
async fn drain(
    cluster: &TestCluster,
    node: usize,
    queue: &str,
    count: usize,
) -> Vec<(String, bool)> {
    let (_connection, channel) = open(cluster, node).await;
    channel
        .basic_qos(500, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut consumer = channel
        .basic_consume(
            queue.into(),
            "drain".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("basic.consume");
    let mut received = Vec::with_capacity(count);
    let deadline = tokio::time::Instant::now() + DRAIN_LIMIT;
    while received.len() < count {
        let next = tokio::time::timeout_at(deadline, consumer.next()).await;
        let Ok(Some(Ok(delivery))) = next else {
            panic!(
                "drained {} of {count} messages from node {node} within {DRAIN_LIMIT:?}",
                received.len()
            );
        };
        received.push((
            String::from_utf8_lossy(&delivery.data).into_owned(),
            delivery.redelivered,
        ));
        delivery
            .ack(BasicAckOptions::default())
            .await
            .expect("basic.ack");
    }
    received
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experiment_b_confirmed_messages_survive_a_sigkill_of_the_leaders_node() {
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    // Declared on node 0: its home, the member that initialises the group and leads it.
    declare_everywhere(&cluster, 0, &[1, 2], "seed003.b").await;

    // Through a follower's node, one at a time, each confirm awaited before the next.
    let (_connection, channel) = open(&cluster, 1).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    const MESSAGES: usize = 5_000;
    let started = Instant::now();
    for i in 0..MESSAGES {
        assert!(
            publish_confirmed(
                &channel,
                "seed003.b",
                &format!("m{i}"),
                Duration::from_secs(10)
            )
            .await,
            "publish {i} was confirmed"
        );
    }
    eprintln!(
        "{MESSAGES} confirmed one at a time through a follower in {:?}",
        started.elapsed()
    );

    cluster.kill(0);
    let drained = drain(&cluster, 2, "seed003.b", MESSAGES).await;
    let bodies: Vec<&str> = drained.iter().map(|(body, _)| body.as_str()).collect();
    let distinct: HashSet<&str> = bodies.iter().copied().collect();
    assert_eq!(distinct.len(), MESSAGES, "no message twice");
    let expected: Vec<String> = (0..MESSAGES).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies, expected, "every confirmed message, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experiment_c_confirms_with_three_two_and_one_nodes_up_are_all_all_and_none() {
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_everywhere(&cluster, 0, &[1, 2], "seed003.c").await;
    const ATTEMPTS: usize = 20;
    let mut confirmed_per_stage = Vec::new();
    for (stage, up) in [(0, 3), (1, 2), (2, 1)] {
        if stage > 0 {
            // Node 0 first (the leader), then node 1: node 2 survives alone.
            cluster.kill(stage - 1);
        }
        let (_connection, channel) = open(&cluster, 2).await;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm.select");
        // Without a majority every attempt waits out its bound: fewer of them.
        let (attempts, bound) = match up {
            1 => (4, Duration::from_secs(3)),
            _ => (ATTEMPTS, Duration::from_secs(8)),
        };
        let mut confirmed = 0;
        for attempt in 0..attempts {
            let started = Instant::now();
            if publish_confirmed(&channel, "seed003.c", &format!("{up}-{attempt}"), bound).await {
                confirmed += 1;
            }
            assert!(
                started.elapsed() < bound + Duration::from_secs(2),
                "attempt {attempt} with {up} nodes up was answered or timed out within its bound"
            );
        }
        eprintln!("{up} nodes up: {confirmed} of {attempts} confirmed");
        confirmed_per_stage.push((up, confirmed, attempts));
    }
    assert_eq!(
        confirmed_per_stage,
        vec![(3, ATTEMPTS, ATTEMPTS), (2, ATTEMPTS, ATTEMPTS), (1, 0, 4)],
        "all with 3 nodes up, all with 2, none with 1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_unacknowledged_on_the_killed_leaders_node_come_back_redelivered() {
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_everywhere(&cluster, 0, &[1, 2], "seed003.unacked").await;
    {
        let (_connection, channel) = open(&cluster, 1).await;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm.select");
        for i in 0..20 {
            assert!(
                publish_confirmed(
                    &channel,
                    "seed003.unacked",
                    &format!("u{i}"),
                    Duration::from_secs(10)
                )
                .await,
                "publish {i} was confirmed"
            );
        }
    }
    // A consumer on the leader's node takes 10 and acknowledges none of them.
    let (leader_connection, channel) = open(&cluster, 0).await;
    channel
        .basic_qos(10, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut consumer = channel
        .basic_consume(
            "seed003.unacked".into(),
            "holder".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("basic.consume");
    for i in 0..10 {
        let delivery = tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .expect("a delivery in time")
            .expect("a delivery")
            .expect("a good delivery");
        assert_eq!(delivery.data, format!("u{i}").into_bytes());
        assert!(!delivery.redelivered);
    }
    cluster.kill(0);
    drop(leader_connection);

    // The ten never held come first or after the returned ones, depending on when the new
    // leader forgets the dead node's consumer: each message once, the held ten redelivered.
    let mut drained = drain(&cluster, 1, "seed003.unacked", 20).await;
    drained.sort_by_key(|(body, _)| body[1..].parse::<u32>().unwrap_or(u32::MAX));
    let expected: Vec<(String, bool)> = (0..20).map(|i| (format!("u{i}"), i < 10)).collect();
    assert_eq!(
        drained, expected,
        "all 20 back once, the 10 held on the dead node redelivered"
    );
}
