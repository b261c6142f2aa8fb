//! Vhost limits on a cluster of three real `warren` processes on 127.0.0.1-3: a limit set
//! through one node's API is committed through the metadata group and enforced by every
//! node at once. Connections are counted per node (each node its own clients); queues are
//! counted in the replicated topology, so `max-queues` holds for the whole cluster.
//!
//! Every wait is bounded; the tests run one at a time.

use std::time::{Duration, Instant};

use lapin::{Connection, ConnectionProperties};
use warren_interop_tests::cluster::TestCluster;

mod lapin_common;

use lapin_common::amqp_error;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const FORM_LIMIT: Duration = Duration::from_secs(30);
const SPREAD_LIMIT: Duration = Duration::from_secs(10);

async fn connect(cluster: &TestCluster, node: usize) -> lapin::Result<Connection> {
    Connection::connect(
        &cluster.amqp_url(node, "guest", "guest", "%2f"),
        ConnectionProperties::default(),
    )
    .await
}

/// Waits until node `node`'s API shows `/`'s limits as `expected`.
async fn wait_limits(cluster: &TestCluster, node: usize, expected: serde_json::Value) {
    let deadline = Instant::now() + SPREAD_LIMIT;
    loop {
        let (status, list) = cluster
            .api(node, "GET", "/api/vhost-limits/%2F", None)
            .await;
        if status == 200 && list[0]["value"] == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {node} never showed the limits {expected}: {list}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vhost_limit_set_on_one_node_is_enforced_by_every_node() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;

    let (status, body) = cluster
        .api(
            0,
            "PUT",
            "/api/vhost-limits/%2F/max-connections",
            Some(r#"{"value": 1}"#),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let (status, body) = cluster
        .api(
            0,
            "PUT",
            "/api/vhost-limits/%2F/max-queues",
            Some(r#"{"value": 1}"#),
        )
        .await;
    assert_eq!(status, 204, "{body}");
    let expected = serde_json::json!({"max-connections": 1, "max-queues": 1});
    for node in 0..3 {
        wait_limits(&cluster, node, expected.clone()).await;
    }

    // Per node: one connection on node 2 and one on node 3, the next on node 2 refused.
    let on_two = connect(&cluster, 1).await.expect("node 2's first");
    let on_three = connect(&cluster, 2).await.expect("node 3's first");
    let refused = connect(&cluster, 1)
        .await
        .expect_err("node 2 is at its limit");
    assert_eq!(
        amqp_error(&refused),
        (
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'guest': connection limit (1) is reached"
                .to_string()
        )
    );

    // Cluster-wide: a queue declared on node 2 fills the vhost for node 3 too.
    let channel = on_two.create_channel().await.expect("channel on node 2");
    lapin_common::declare(&channel, "only-one", Default::default()).await;
    let channel = on_three.create_channel().await.expect("channel on node 3");
    let deadline = Instant::now() + SPREAD_LIMIT;
    let error = loop {
        match channel
            .queue_declare("second".into(), Default::default(), Default::default())
            .await
        {
            Err(error) => break error,
            Ok(_) => {
                // Declared before node 3 learned of the first queue: undo and retry.
                let retry = on_three.create_channel().await.expect("channel");
                retry
                    .queue_delete("second".into(), Default::default())
                    .await
                    .expect("delete");
                assert!(
                    Instant::now() < deadline,
                    "node 3 never counted node 2's queue"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(
        amqp_error(&error),
        (
            406,
            "PRECONDITION_FAILED - cannot declare queue 'second': queue limit in vhost '/' (1) is reached"
                .to_string()
        )
    );

    // Cleared through node 3: node 2 takes another connection.
    let (status, body) = cluster
        .api(2, "DELETE", "/api/vhost-limits/%2F/max-connections", None)
        .await;
    assert_eq!(status, 204, "{body}");
    for node in 0..3 {
        wait_limits(&cluster, node, serde_json::json!({"max-queues": 1})).await;
    }
    let again = connect(&cluster, 1).await.expect("no connection limit now");
    for connection in [on_two, on_three, again] {
        connection.close(200, "done".into()).await.ok();
    }
}
