//! The quorum queue operator surface on a cluster of three real `warren` processes on
//! 127.0.0.1-3: warrenctl's `quorum_status`, `check_if_node_is_quorum_critical`,
//! `delete_member`, `grow`, `shrink`, `add_member`, `transfer_leadership` and `rebalance`
//! over the management API, and the `rabbitmq_raft_*` metrics, each asserted on what the
//! nodes report afterwards (and on lapin clients' messages: a membership change under a
//! publishing load loses none).
//!
//! Every wait is bounded; one test of this file runs at a time.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lapin::options::ConfirmSelectOptions;
use serde_json::Value as Json;
use warren_interop_tests::cluster::{node_name, TestCluster};
use warren_management::ctl::CtlError;

mod lapin_common;
mod quorum_common;

use quorum_common::{declare_everywhere, drain, open, publish_confirmed, FORM_LIMIT};

/// One test at a time: three nodes each (see quorum_cluster.rs).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a change may take to show on the node asked.
const SETTLE_LIMIT: Duration = Duration::from_secs(15);

/// Runs a warrenctl verb against node `node`'s management API.
async fn ctl(cluster: &TestCluster, node: usize, verb: &[&str]) -> Result<String, CtlError> {
    let http = cluster.http_addr(node);
    let (host, port) = http.rsplit_once(':').expect("host:port");
    let mut args: Vec<String> = ["--host", host, "--port", port]
        .iter()
        .map(|s| s.to_string())
        .collect();
    args.extend(verb.iter().map(|s| s.to_string()));
    warren_management::ctl::run(&args, None).await
}

/// `quorum_status` through warrenctl's JSON formatter.
async fn status(cluster: &TestCluster, node: usize, queue: &str) -> Vec<Json> {
    let text = ctl(
        cluster,
        node,
        &["--formatter", "json", "quorum_status", queue],
    )
    .await
    .unwrap_or_else(|e| panic!("quorum_status {queue}: {e}"));
    serde_json::from_str::<Json>(&text)
        .unwrap_or_else(|e| panic!("quorum_status prints JSON ({e}): {text}"))
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The queue's `/api/queues` entry on node `asked` once `check` holds, within
/// [`SETTLE_LIMIT`].
async fn queue_when(
    cluster: &TestCluster,
    asked: usize,
    queue: &str,
    what: &str,
    check: impl Fn(&Json) -> bool,
) -> Json {
    let path = format!("/api/queues/%2F/{queue}");
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let (code, body) = cluster.api(asked, "GET", &path, None).await;
        if code == 200 && check(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "queue '{queue}' on node {asked}: {what} within {SETTLE_LIMIT:?}; last: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The names in a JSON array of node names, sorted.
fn names(list: &Json) -> Vec<String> {
    let mut names: Vec<String> = list
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

fn nodes(indexes: &[usize]) -> Vec<String> {
    let mut names: Vec<String> = indexes.iter().map(|i| node_name(*i)).collect();
    names.sort();
    names
}

/// The index of the node named `name`.
fn index_of(name: &str) -> usize {
    (0..3)
        .find(|i| node_name(*i) == name)
        .unwrap_or_else(|| panic!("{name} is one of the nodes"))
}

/// The queue's leader once all three members are online, by index.
async fn leader(cluster: &TestCluster, asked: usize, queue: &str) -> usize {
    let entry = queue_when(cluster, asked, queue, "a leader with 3 online", |q| {
        q["leader"].is_string() && q["online"].as_array().map_or(0, Vec::len) == 3
    })
    .await;
    index_of(entry["leader"].as_str().unwrap_or_default())
}

async fn publish_some(cluster: &TestCluster, node: usize, queue: &str, prefix: &str, count: usize) {
    let (_connection, channel) = open(cluster, node).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    for i in 0..count {
        assert!(
            publish_confirmed(
                &channel,
                queue,
                &format!("{prefix}{i}"),
                Duration::from_secs(10)
            )
            .await,
            "publish {prefix}{i} was confirmed"
        );
    }
}

/// `/metrics/per-object` of node `node`: the samples of `family` by their `queue` label.
async fn raft_samples(cluster: &TestCluster, node: usize, family: &str) -> Vec<(String, f64)> {
    let addr = cluster.node(node).listener_addr("prometheus").to_string();
    let response = warren_management::http::send(&addr, "GET", "/metrics/per-object", None, None)
        .await
        .expect("scrape");
    assert_eq!(response.status, 200);
    let text = response.text();
    assert!(
        text.contains(&format!("# TYPE {family} ")),
        "{family} is exposed"
    );
    text.lines()
        .filter(|line| line.starts_with(&format!("{family}{{")))
        .filter_map(|line| {
            let queue = line
                .split("queue=\"")
                .nth(1)?
                .split('"')
                .next()?
                .to_string();
            let value = line.rsplit(' ').next()?.parse().ok()?;
            Some((queue, value))
        })
        .collect()
}

/// A publisher through node `node`: one persistent message at a time, each confirm awaited,
/// until told to stop; it answers the bodies that were confirmed, in order.
fn spawn_publisher(
    cluster: &TestCluster,
    node: usize,
    queue: &'static str,
    prefix: &'static str,
) -> (Arc<AtomicBool>, tokio::task::JoinHandle<Vec<String>>) {
    let url = cluster.amqp_url(node, "guest", "guest", "%2f");
    let stop = Arc::new(AtomicBool::new(false));
    let stopping = Arc::clone(&stop);
    let publisher = tokio::spawn(async move {
        let connection = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
            .await
            .expect("publisher connects");
        let channel = connection.create_channel().await.expect("channel");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm.select");
        let mut confirmed = Vec::new();
        let mut i = 0;
        while !stopping.load(Ordering::Relaxed) {
            let body = format!("{prefix}{i}");
            if publish_confirmed(&channel, queue, &body, Duration::from_secs(15)).await {
                confirmed.push(body);
            }
            i += 1;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        confirmed
    });
    (stop, publisher)
}

/// Stops a [`spawn_publisher`] and takes what it had confirmed.
async fn stop_publisher(
    stop: Arc<AtomicBool>,
    publisher: tokio::task::JoinHandle<Vec<String>>,
) -> Vec<String> {
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(20), publisher)
        .await
        .expect("the publisher stops")
        .expect("the publisher did not panic")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_status_metrics_and_the_quorum_critical_check_report_every_member() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_everywhere(&cluster, 0, &[1, 2], "ops.status").await;
    publish_some(&cluster, 1, "ops.status", "s", 10).await;
    let leader = leader(&cluster, 0, "ops.status").await;

    // Through a node that may or may not lead: every member reports itself.
    let rows = status(&cluster, 2, "ops.status").await;
    assert_eq!(rows.len(), 3, "{rows:?}");
    let listed: Vec<String> = {
        let mut v: Vec<String> = rows
            .iter()
            .map(|r| r["Node Name"].as_str().unwrap_or_default().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(listed, nodes(&[0, 1, 2]));
    let states: Vec<&str> = rows
        .iter()
        .filter_map(|r| r["Raft State"].as_str())
        .collect();
    assert_eq!(
        states.iter().filter(|s| **s == "leader").count(),
        1,
        "{rows:?}"
    );
    assert_eq!(
        states.iter().filter(|s| **s == "follower").count(),
        2,
        "{rows:?}"
    );
    let leader_row = rows
        .iter()
        .find(|r| r["Raft State"] == "leader")
        .expect("a leader row");
    assert_eq!(leader_row["Node Name"], node_name(leader).as_str());
    let term = leader_row["Term"].as_u64().expect("a term");
    assert!(term >= 1);
    // The declaration's membership entries, the blank entry and ten publishes.
    let commit = leader_row["Commit Index"].as_u64().expect("a commit index");
    assert!(commit >= 10, "{leader_row}");
    for row in &rows {
        assert_eq!(row["Membership"], "voter");
        assert_eq!(row["Term"].as_u64(), Some(term), "one term: {rows:?}");
        assert!(row["Last Applied"].as_u64() <= row["Commit Index"].as_u64());
        assert!(row["Commit Index"].as_u64() <= row["Last Log Index"].as_u64());
    }
    let table = ctl(&cluster, 0, &["quorum_status", "ops.status"])
        .await
        .expect("quorum_status");
    assert!(
        table.contains("Node Name\tRaft State\tMembership"),
        "{table}"
    );
    assert!(table.contains(&node_name(leader)), "{table}");
    let missing = ctl(&cluster, 0, &["quorum_status", "no.such.queue"]).await;
    assert!(missing.is_err(), "a queue that does not exist is an error");

    // The metrics of each node's member, with the figures quorum_status showed.
    let terms = raft_samples(&cluster, leader, "rabbitmq_raft_term_total").await;
    assert!(
        terms.contains(&("ops.status".to_string(), term as f64)),
        "{terms:?}"
    );
    let commits = raft_samples(&cluster, leader, "rabbitmq_raft_log_commit_index").await;
    let (_, committed) = commits
        .iter()
        .find(|(queue, _)| queue == "ops.status")
        .expect("a commit index sample");
    assert!(*committed >= 10.0, "{commits:?}");
    for family in [
        "rabbitmq_raft_log_last_applied_index",
        "rabbitmq_raft_log_last_written_index",
        "rabbitmq_raft_log_snapshot_index",
    ] {
        let samples = raft_samples(&cluster, (leader + 1) % 3, family).await;
        assert!(
            samples.iter().any(|(queue, _)| queue == "ops.status"),
            "{family}: {samples:?}"
        );
    }
    let latency = raft_samples(
        &cluster,
        leader,
        "rabbitmq_raft_entry_commit_latency_seconds",
    )
    .await;
    let (_, seconds) = latency
        .iter()
        .find(|(queue, _)| queue == "ops.status")
        .expect("the leader measured its commits");
    assert!(*seconds > 0.0 && *seconds < 10.0, "{latency:?}");

    // All three up: no node is critical. With one down, each survivor is.
    ctl(&cluster, 0, &["check_if_node_is_quorum_critical"])
        .await
        .expect("not critical with every member up");
    let (code, body) = cluster
        .api(0, "GET", "/api/health/checks/node-is-quorum-critical", None)
        .await;
    assert_eq!((code, body["status"].as_str()), (200, Some("ok")));
    cluster.kill(2);
    queue_when(&cluster, 0, "ops.status", "two members online", |q| {
        q["online"].as_array().map_or(0, Vec::len) == 2
    })
    .await;
    let error = ctl(&cluster, 0, &["check_if_node_is_quorum_critical"])
        .await
        .expect_err("critical with a member down");
    assert_eq!(error.exit_code, 69, "{error}");
    assert!(error.message.contains("ops.status"), "{error}");
    let (code, body) = cluster
        .api(1, "GET", "/api/health/checks/node-is-quorum-critical", None)
        .await;
    assert_eq!(code, 503, "{body}");
    assert_eq!(body["queues"][0]["name"], "ops.status");
    assert_eq!(body["queues"][0]["virtual_host"], "/");
    // The killed member shows without figures.
    let rows = status(&cluster, 0, "ops.status").await;
    let down = rows
        .iter()
        .find(|r| r["Node Name"] == node_name(2).as_str())
        .expect("the killed member is listed");
    assert_eq!(down["Raft State"], "noproc", "{rows:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_come_and_go_under_a_publishing_load_and_no_message_is_lost() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_everywhere(&cluster, 0, &[1, 2], "ops.members").await;
    let leader = leader(&cluster, 0, "ops.members").await;
    let follower = (leader + 1) % 3;
    let publisher_node = (leader + 2) % 3;

    // A publisher through the third node, one confirmed message at a time, all along.
    let (stop, publisher) = spawn_publisher(&cluster, publisher_node, "ops.members", "p");
    tokio::time::sleep(Duration::from_millis(500)).await;

    // delete_member: the follower stops voting, and is listed as a learner.
    ctl(
        &cluster,
        publisher_node,
        &["delete_member", "/", "ops.members", &node_name(follower)],
    )
    .await
    .expect("delete_member");
    let others = nodes(&[leader, publisher_node]);
    queue_when(
        &cluster,
        publisher_node,
        "ops.members",
        "two members",
        |q| names(&q["members"]) == others,
    )
    .await;
    let rows = status(&cluster, leader, "ops.members").await;
    let learner = rows
        .iter()
        .find(|r| r["Node Name"] == node_name(follower).as_str())
        .expect("the deleted member is still listed");
    assert_eq!(learner["Membership"], "non_voter", "{rows:?}");
    let again = ctl(
        &cluster,
        leader,
        &["delete_member", "ops.members", &node_name(follower)],
    )
    .await;
    assert!(
        again
            .as_ref()
            .is_err_and(|e| e.message.contains("not a member")),
        "{again:?}"
    );

    // grow: back to three voters.
    let grown = ctl(&cluster, follower, &["grow", &node_name(follower), "all"])
        .await
        .expect("grow");
    assert!(
        grown.contains("ops.members") && grown.contains("ok"),
        "{grown}"
    );
    queue_when(&cluster, follower, "ops.members", "three members", |q| {
        names(&q["members"]) == nodes(&[0, 1, 2])
    })
    .await;

    // shrink the leader's node: it hands its leadership over first.
    let shrunk = ctl(&cluster, follower, &["shrink", &node_name(leader)])
        .await
        .expect("shrink");
    assert!(
        shrunk.contains("ops.members") && shrunk.contains("ok"),
        "{shrunk}"
    );
    let rest = nodes(&[follower, publisher_node]);
    let entry = queue_when(&cluster, follower, "ops.members", "two members", |q| {
        names(&q["members"]) == rest && q["leader"].is_string()
    })
    .await;
    assert_ne!(entry["leader"], node_name(leader).as_str(), "{entry}");

    // add_member: the old leader's node votes again.
    ctl(
        &cluster,
        publisher_node,
        &["add_member", "ops.members", &node_name(leader)],
    )
    .await
    .expect("add_member");
    queue_when(&cluster, leader, "ops.members", "three members", |q| {
        names(&q["members"]) == nodes(&[0, 1, 2])
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let confirmed = stop_publisher(stop, publisher).await;
    eprintln!(
        "{} messages confirmed during the membership changes",
        confirmed.len()
    );
    assert!(confirmed.len() >= 20, "published {}", confirmed.len());

    // Every confirmed message is there once, read through the node that was removed and
    // added back (it applied the log all along).
    let drained = drain(&cluster, leader, "ops.members", confirmed.len()).await;
    let bodies: Vec<&str> = drained.iter().map(|(body, _)| body.as_str()).collect();
    let distinct: HashSet<&str> = bodies.iter().copied().collect();
    assert_eq!(distinct.len(), bodies.len(), "no message twice");
    for body in &confirmed {
        assert!(
            distinct.contains(body.as_str()),
            "{body} was confirmed and kept"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_moves_to_the_node_asked_and_rebalance_spreads_the_leaders() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    let queues = ["ops.lead.a", "ops.lead.b", "ops.lead.c"];
    for queue in queues {
        declare_everywhere(&cluster, 0, &[1, 2], queue).await;
    }
    publish_some(&cluster, 0, "ops.lead.a", "before", 5).await;
    let first = leader(&cluster, 0, "ops.lead.a").await;
    let term_before = status(&cluster, 0, "ops.lead.a").await[0]["Term"]
        .as_u64()
        .expect("a term");

    // transfer_leadership, asked of a node that does not lead, while a publisher goes on
    // through it (its publishes are held during the handover and retried).
    let target = (first + 1) % 3;
    let asked = (first + 2) % 3;
    let (stop, publisher) = spawn_publisher(&cluster, asked, "ops.lead.a", "during");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    ctl(
        &cluster,
        asked,
        &["transfer_leadership", "/", "ops.lead.a", &node_name(target)],
    )
    .await
    .expect("transfer_leadership");
    eprintln!("leadership transferred in {:?}", started.elapsed());
    assert_eq!(leader(&cluster, asked, "ops.lead.a").await, target);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let during = stop_publisher(stop, publisher).await;
    eprintln!("{} messages confirmed around the transfer", during.len());
    assert!(!during.is_empty(), "the publisher got confirms");
    let rows = status(&cluster, first, "ops.lead.a").await;
    let row = |node: usize| {
        rows.iter()
            .find(|r| r["Node Name"] == node_name(node).as_str())
            .cloned()
            .expect("a row per node")
    };
    assert_eq!(row(target)["Raft State"], "leader", "{rows:?}");
    assert_eq!(row(first)["Raft State"], "follower", "{rows:?}");
    assert!(row(target)["Term"].as_u64().expect("a term") > term_before);
    // A learner, or a node the cluster lacks, cannot lead.
    let refused = ctl(
        &cluster,
        asked,
        &["transfer_leadership", "ops.lead.a", "warren@127.0.0.9"],
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");

    // The queue works on: what was there before, during and after, in order, once each.
    publish_some(&cluster, asked, "ops.lead.a", "after", 5).await;
    let mut expected: Vec<String> = (0..5).map(|i| format!("before{i}")).collect();
    expected.extend(during.iter().cloned());
    expected.extend((0..5).map(|i| format!("after{i}")));
    let drained = drain(&cluster, first, "ops.lead.a", expected.len()).await;
    let bodies: Vec<String> = drained.into_iter().map(|(body, _)| body).collect();
    assert_eq!(bodies, expected);

    // rebalance: one leader per node for three queues.
    let out = ctl(&cluster, 0, &["rebalance", "quorum"])
        .await
        .expect("rebalance");
    assert!(out.contains("Number of quorum queue leaders"), "{out}");
    let deadline = Instant::now() + SETTLE_LIMIT;
    loop {
        let mut leaders = HashSet::new();
        for queue in queues {
            let (_, body) = cluster
                .api(1, "GET", &format!("/api/queues/%2F/{queue}"), None)
                .await;
            if let Some(leader) = body["leader"].as_str() {
                leaders.insert(leader.to_string());
            }
        }
        if leaders.len() == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leaders after rebalance: {leaders:?}; warrenctl said: {out}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_change_survives_a_restart_of_every_node() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_everywhere(&cluster, 0, &[1, 2], "ops.restart").await;
    publish_some(&cluster, 0, "ops.restart", "r", 5).await;
    let leader = leader(&cluster, 0, "ops.restart").await;
    let removed = (leader + 1) % 3;
    ctl(
        &cluster,
        leader,
        &["delete_member", "ops.restart", &node_name(removed)],
    )
    .await
    .expect("delete_member");
    let kept = nodes(&[leader, (leader + 2) % 3]);
    queue_when(&cluster, 0, "ops.restart", "two members", |q| {
        names(&q["members"]) == kept
    })
    .await;

    // Every node stops and starts again: the group's log holds its membership.
    for node in 0..3 {
        cluster.kill(node);
    }
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    // The removed node's learner applied the log too: it counts the five messages.
    queue_when(
        &cluster,
        removed,
        "ops.restart",
        "two members, a leader and five messages",
        |q| names(&q["members"]) == kept && q["leader"].is_string() && q["messages"] == 5,
    )
    .await;
    let rows = status(&cluster, removed, "ops.restart").await;
    let learner = rows
        .iter()
        .find(|r| r["Node Name"] == node_name(removed).as_str())
        .expect("the removed node is listed");
    assert_eq!(learner["Membership"], "non_voter", "{rows:?}");
    assert_eq!(
        rows.iter().filter(|r| r["Membership"] == "voter").count(),
        2,
        "{rows:?}"
    );
}
