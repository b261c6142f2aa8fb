//! `warrenctl join_cluster` with real `warren` processes on 127.0.0.1-127.0.0.4: a
//! standalone node with a queue of its own joins a 3-node cluster (it resets, restarts and
//! joins; its old queue is gone, the cluster's queue and messages are reached from it), and
//! a node already in a multi-node cluster, one with another secret and one naming an
//! unreachable target are refused with the documented errors, changing nothing. `reset`
//! then takes the node out again.

use std::time::{Duration, Instant};

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use warren_interop_tests::cluster::{node_name, set_mode, TestCluster};
use warren_interop_tests::TempDir;
use warren_management::ctl;

const FORM_LIMIT: Duration = Duration::from_secs(30);
const RESTART_LIMIT: Duration = Duration::from_secs(20);
const WAIT: Duration = Duration::from_secs(15);

async fn open(cluster: &TestCluster, node: usize) -> (Connection, Channel) {
    let url = cluster.amqp_url(node, "guest", "guest", "%2f");
    let connection = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("connects to node {node}: {e}"));
    let channel = connection.create_channel().await.expect("channel");
    (connection, channel)
}

/// Declares durable queue `name` on `node` and publishes `count` persistent messages
/// `{name}-{i}`, each confirmed.
async fn declare_and_fill(cluster: &TestCluster, node: usize, name: &str, count: usize) {
    let (connection, channel) = open(cluster, node).await;
    channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declares the queue");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    for i in 0..count {
        let confirm = channel
            .basic_publish(
                "".into(),
                name.into(),
                BasicPublishOptions::default(),
                format!("{name}-{i}").as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .expect("basic.publish");
        let confirmation = tokio::time::timeout(WAIT, confirm)
            .await
            .expect("a confirm in time")
            .expect("a confirm");
        assert!(confirmation.is_ack(), "message {i} of '{name}' is acked");
    }
    let _ = connection.close(200, "done".into()).await;
}

/// Runs warrenctl against node `node`'s management API.
async fn warrenctl(
    cluster: &TestCluster,
    node: usize,
    args: &[&str],
) -> Result<String, ctl::CtlError> {
    let addr = cluster.http_addr(node);
    let (host, port) = addr.rsplit_once(':').expect("HOST:PORT");
    let mut all: Vec<String> = vec!["--host".into(), host.into(), "--port".into(), port.into()];
    all.extend(args.iter().map(|s| s.to_string()));
    ctl::run(&all, None).await
}

/// Waits until node `node` is the only member and leader of a cluster of its own.
async fn wait_alone(cluster: &TestCluster, node: usize) {
    let deadline = Instant::now() + FORM_LIMIT;
    loop {
        let (status, body) = cluster.api(node, "GET", "/api/cluster-status", None).await;
        if status == 200 && body["leader"] == node_name(node) && body["cluster_id"] != "" {
            assert_eq!(body["members"].as_array().map(Vec::len), Some(1), "{body}");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {node} did not form alone: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The names `/api/nodes` of node `node` lists, with whether each runs.
async fn nodes(cluster: &TestCluster, node: usize) -> Vec<(String, bool)> {
    let (status, body) = cluster.api(node, "GET", "/api/nodes", None).await;
    assert_eq!(status, 200, "{body}");
    let mut nodes: Vec<(String, bool)> = body
        .as_array()
        .expect("an array of nodes")
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap_or_default().to_string(),
                n["running"] == true,
            )
        })
        .collect();
    nodes.sort();
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_node_joins_a_cluster_with_join_cluster_a_clustered_node_is_refused_and_reset_takes_it_out(
) {
    let mut cluster = TestCluster::new(4);
    cluster.alone(3);
    cluster.start_some(&[0, 1, 2]);
    cluster.wait_formed(3, FORM_LIMIT).await;
    // (wait_formed asks every running node: the standalone one starts after.)
    let target = format!("{}:{}", node_name(0), cluster.cluster_addr(0).port());
    let target_4 = format!("{}:{}", node_name(3), cluster.cluster_addr(3).port());
    // Started with another secret, the standalone node is refused before anything
    // changes: the probe's handshake fails and says why.
    let other = TempDir::new("join-other-secret");
    let secret = other.path().join("cluster.secret");
    std::fs::write(&secret, b"not the cluster's secret at all!").expect("writes");
    set_mode(&secret, 0o600);
    cluster.set(3, &format!("cluster.secret_file={}", secret.display()));
    cluster.start(3);
    wait_alone(&cluster, 3).await;
    let wrong_secret = warrenctl(&cluster, 3, &["join_cluster", &target])
        .await
        .expect_err("a node with another secret is refused");
    eprintln!("join_cluster with another secret: {wrong_secret}");
    assert!(
        wrong_secret
            .message
            .contains("cannot reach warren@127.0.0.1")
            && wrong_secret.message.contains("secret")
            && wrong_secret.message.contains("(503)"),
        "{wrong_secret}"
    );
    assert!(!cluster.data_dir(3).join("join_cluster.json").exists());
    // With the cluster's secret (copied, as an operator would) it comes back alone.
    cluster.kill(3);
    cluster.clear_settings(3);
    cluster.start(3);
    wait_alone(&cluster, 3).await;
    declare_and_fill(&cluster, 0, "shared", 5).await;
    declare_and_fill(&cluster, 3, "standalone", 2).await;
    let (status, before) = cluster
        .api(3, "GET", "/api/queues/%2F/standalone", None)
        .await;
    assert_eq!(status, 200, "{before}");

    // A member of a multi-node cluster is refused, and nothing changes.
    let refused = warrenctl(&cluster, 1, &["join_cluster", &target_4])
        .await
        .expect_err("a clustered node is refused");
    eprintln!("join_cluster from a clustered node: {refused}");
    assert_eq!(refused.exit_code, 70, "{refused}");
    assert!(
        refused
            .message
            .contains("warren@127.0.0.2 is already clustered with")
            && refused.message.contains("reset it first")
            && refused.message.contains("(409)"),
        "{refused}"
    );
    let (status, body) = cluster
        .api(
            1,
            "POST",
            "/api/join-cluster",
            Some(&format!(r#"{{"node":"{target_4}"}}"#)),
        )
        .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("already_clustered")),
        "{body}"
    );
    assert!(!cluster.data_dir(1).join("join_cluster.json").exists());
    // The standalone node cannot join itself either.
    let itself = warrenctl(&cluster, 3, &["join_cluster", &target_4])
        .await
        .expect_err("joining itself is refused");
    assert!(itself.message.contains("cannot join itself"), "{itself}");

    // A target nobody answers for is refused after the probe, and nothing changes.
    let probing = Instant::now();
    let unreachable = warrenctl(&cluster, 3, &["join_cluster", "warren@127.0.0.1:1"])
        .await
        .expect_err("an unreachable target is refused");
    eprintln!(
        "join_cluster: an unreachable target refused after {:?}",
        probing.elapsed()
    );
    assert!(
        unreachable
            .message
            .contains("cannot reach warren@127.0.0.1")
            && unreachable.message.contains("(503)"),
        "{unreachable}"
    );
    assert!(!cluster.data_dir(3).join("join_cluster.json").exists());
    let (status, body) = cluster
        .api(3, "GET", "/api/queues/%2F/standalone", None)
        .await;
    assert_eq!(
        (status, body["messages"].as_u64()),
        (200, Some(2)),
        "{body}"
    );

    // The standalone node joins: it answers, resets, restarts and joins.
    let joined = warrenctl(&cluster, 3, &["join_cluster", &target])
        .await
        .unwrap_or_else(|e| panic!("join_cluster: {e}"));
    assert!(
        joined.contains("Clustering node warren@127.0.0.4 with warren@127.0.0.1"),
        "{joined}"
    );
    let started = Instant::now();
    cluster.wait_restarted(3, RESTART_LIMIT);
    cluster.wait_formed(4, FORM_LIMIT).await;
    let took = started.elapsed();
    let expected: Vec<(String, bool)> = (0..4).map(|i| (node_name(i), true)).collect();
    assert_eq!(nodes(&cluster, 3).await, expected);
    assert_eq!(nodes(&cluster, 0).await, expected);
    // The marker goes once the node is a member.
    let deadline = Instant::now() + WAIT;
    while cluster.data_dir(3).join("join_cluster.json").exists() {
        assert!(Instant::now() < deadline, "the marker stays after the join");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The cluster's queue is reached from node 4 with its messages; its own queue is gone.
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, body) = cluster.api(3, "GET", "/api/queues/%2F/shared", None).await;
        if status == 200 {
            assert_eq!(body["node"], node_name(0), "{body}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "'shared' unknown on node 4: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for node in [0, 3] {
        let (status, body) = cluster
            .api(node, "GET", "/api/queues/%2F/standalone", None)
            .await;
        assert_eq!(status, 404, "node {node}: {body}");
    }
    let (_, queues) = cluster.api(3, "GET", "/api/queues", None).await;
    let names: Vec<&str> = queues
        .as_array()
        .expect("queues")
        .iter()
        .filter_map(|q| q["name"].as_str())
        .collect();
    assert_eq!(names, ["shared"], "{queues}");
    let (connection, channel) = open(&cluster, 3).await;
    let mut bodies = Vec::new();
    let deadline = Instant::now() + WAIT;
    while bodies.len() < 5 {
        match channel
            .basic_get("shared".into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get")
        {
            Some(message) => {
                bodies.push(String::from_utf8_lossy(&message.delivery.data).into_owned())
            }
            None => {
                assert!(Instant::now() < deadline, "only {bodies:?} came");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(
        bodies,
        (0..5).map(|i| format!("shared-{i}")).collect::<Vec<_>>()
    );
    assert!(
        channel
            .basic_get("shared".into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get")
            .is_none(),
        "no sixth message"
    );
    let passive = channel
        .queue_declare(
            "standalone".into(),
            QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await;
    assert!(passive.is_err(), "the standalone queue is gone");
    let _ = connection.close(200, "done".into()).await;

    // Joined, the node reports itself a member; joining again changes nothing.
    let again = warrenctl(&cluster, 3, &["join_cluster", &target])
        .await
        .unwrap_or_else(|e| panic!("join_cluster again: {e}"));
    assert!(again.contains("already a member"), "{again}");
    let (_, status) = cluster.api(3, "GET", "/api/cluster-status", None).await;
    assert_eq!(
        status["members"].as_array().map(Vec::len),
        Some(4),
        "{status}"
    );
    eprintln!("join_cluster: restarted and joined within {took:?}");

    // reset: the node leaves the cluster through the leader, restarts and starts blank;
    // with a seed list of itself it forms a cluster of its own again.
    let reset = warrenctl(&cluster, 3, &["reset"])
        .await
        .unwrap_or_else(|e| panic!("reset: {e}"));
    assert!(reset.contains("Resetting node warren@127.0.0.4"), "{reset}");
    cluster.wait_restarted(3, RESTART_LIMIT);
    wait_alone(&cluster, 3).await;
    let deadline = Instant::now() + WAIT;
    let three: Vec<(String, bool)> = (0..3).map(|i| (node_name(i), true)).collect();
    while nodes(&cluster, 0).await != three {
        assert!(Instant::now() < deadline, "node 4 was not forgotten");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(nodes(&cluster, 3).await, [(node_name(3), true)]);
    let (_, queues) = cluster.api(3, "GET", "/api/queues", None).await;
    assert_eq!(queues.as_array().map(Vec::len), Some(0), "{queues}");
    assert!(!cluster.data_dir(3).join("reset_pending").exists());
    // The three go on without it.
    let (status, body) = cluster.api(1, "GET", "/api/queues/%2F/shared", None).await;
    assert_eq!(
        (status, body["messages"].as_u64()),
        (200, Some(0)),
        "{body}"
    );
}
