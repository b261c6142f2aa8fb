//! Helpers shared by the multi-node quorum queue tests (quorum_cluster.rs,
//! quorum_operations.rs; a subdirectory module, so cargo does not build it as a test of its
//! own): connecting to a node, declaring a quorum queue everywhere, finding its leader through
//! the management API, confirmed publishes and bounded drains.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use warren_interop_tests::cluster::{node_name, TestCluster};

use crate::lapin_common::{args, text};

/// How long three nodes may take to form (the first test run may also build the binary).
pub const FORM_LIMIT: Duration = Duration::from_secs(30);
/// How long a queue declared on one node may take to exist on the others.
pub const SPREAD_LIMIT: Duration = Duration::from_secs(10);
/// How long a drain may take, a leader election included.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(60);

pub async fn open(cluster: &TestCluster, node: usize) -> (Connection, Channel) {
    let url = cluster.amqp_url(node, "guest", "guest", "%2f");
    let connection = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("connects to node {node}: {e}"));
    let channel = connection.create_channel().await.expect("channel");
    (connection, channel)
}

pub fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

/// Declares quorum queue `name` on `node`, then waits until every other running node has
/// it (a passive declare succeeds there).
pub async fn declare_everywhere(cluster: &TestCluster, node: usize, others: &[usize], name: &str) {
    let (_connection, channel) = open(cluster, node).await;
    channel
        .queue_declare(
            name.into(),
            durable(),
            args(&[("x-queue-type", text("quorum"))]),
        )
        .await
        .expect("declares the quorum queue");
    wait_declared(cluster, others, name).await;
}

/// Waits until every node of `others` has queue or stream `name` (a passive declare
/// succeeds there), within [`SPREAD_LIMIT`].
pub async fn wait_declared(cluster: &TestCluster, others: &[usize], name: &str) {
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

/// The node leading quorum queue `name`, from the management API's `leader` field on
/// `asked` (seed 003 finds it this way), once every one of the three members is online.
pub async fn leader_of(cluster: &TestCluster, asked: usize, name: &str) -> usize {
    let path = format!("/api/queues/%2F/{name}");
    let deadline = Instant::now() + SPREAD_LIMIT;
    loop {
        let (status, body) = cluster.api(asked, "GET", &path, None).await;
        let online = body["online"].as_array().map_or(0, Vec::len);
        if status == 200 && online == 3 {
            if let Some(leader) = body["leader"].as_str() {
                assert_eq!(body["type"], "quorum");
                assert_eq!(body["members"].as_array().map(Vec::len), Some(3), "{body}");
                return (0..3)
                    .find(|i| node_name(*i) == leader)
                    .unwrap_or_else(|| panic!("the leader {leader} is one of the nodes"));
            }
        }
        assert!(
            Instant::now() < deadline,
            "queue '{name}' had no leader with 3 members online within {SPREAD_LIMIT:?}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publishes one persistent message and waits at most `bound` for its confirm: `true` only
/// for an ack.
pub async fn publish_confirmed(
    channel: &Channel,
    queue: &str,
    body: &str,
    bound: Duration,
) -> bool {
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
pub async fn drain(
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
            let log: Vec<String> = cluster
                .node(node)
                .log()
                .into_iter()
                .filter(|line| {
                    line.contains("quorum") || line.contains("WARN") || line.contains("ERROR")
                })
                .collect();
            panic!(
                "drained {} of {count} messages from node {node} within {DRAIN_LIMIT:?}; its log: {log:#?}",
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
