//! Clustering with real `warren` processes on 127.0.0.1-3 (interop_tests::cluster): the
//! cluster forms from the seed list; users, vhosts, permissions and topology made through one
//! node are usable through another with lapin and the HTTP API; losing a node loses no
//! metadata; a minority refuses changes within the bound and serves reads; a partitioned
//! node catches up when the link heals; a wrong secret and a world-readable secret file are
//! refused.
//!
//! Every wait is bounded; each test runs its nodes on its own cluster port.

use std::time::{Duration, Instant};

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use warren_interop_tests::cluster::{
    node_host, node_name, set_mode, Proxy, ProxyMode, TestCluster,
};
use warren_interop_tests::process::warren_binary;
use warren_interop_tests::tls::Pki;
use warren_interop_tests::TempDir;

/// How long three nodes may take to form (the first test run may also build the binary).
const FORM_LIMIT: Duration = Duration::from_secs(30);
/// The bound within which a minority must refuse (the tests set 2 s; the contract is 10 s).
const REFUSAL_LIMIT: Duration = Duration::from_secs(10);

async fn vhosts(cluster: &TestCluster, node: usize) -> Vec<String> {
    let (status, body) = cluster.api(node, "GET", "/api/vhosts", None).await;
    assert_eq!(status, 200, "{body}");
    body.as_array()
        .map(|all| {
            all.iter()
                .filter_map(|v| v["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// PUTs a vhost through `node`, retrying while the cluster elects a leader (up to `limit`).
async fn add_vhost_eventually(cluster: &TestCluster, node: usize, name: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let (status, body) = cluster
            .api(node, "PUT", &format!("/api/vhosts/{name}"), Some("{}"))
            .await;
        if status == 201 || status == 204 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "vhost {name} not created through node {node}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_for_vhost(cluster: &TestCluster, node: usize, name: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !vhosts(cluster, node).await.iter().any(|v| v == name) {
        assert!(
            Instant::now() < deadline,
            "node {node} never got vhost {name}: it has {:?}",
            vhosts(cluster, node).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `path` answers 200 (with something in it) on `node`: a change is applied on the node that made it
/// before the call returns, and on the others a moment later (reads are local).
async fn wait_for_path(cluster: &TestCluster, node: usize, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (status, body) = cluster.api(node, "GET", path, None).await;
        // A listing answers 200 with nothing in it until the object arrives.
        if status == 200 && body.as_array().is_none_or(|list| !list.is_empty()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} on node {node}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Asserts that a change through `node` is refused as a minority must refuse it: HTTP 503
/// saying the cluster has no majority, within the bound.
async fn assert_minority_refuses(cluster: &TestCluster, node: usize, vhost: &str) {
    let started = Instant::now();
    let (status, body) = cluster
        .api(node, "PUT", &format!("/api/vhosts/{vhost}"), Some("{}"))
        .await;
    let took = started.elapsed();
    assert_eq!(status, 503, "a minority refuses with 503: {body}");
    assert!(
        body["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the cluster has no majority")),
        "{body}"
    );
    assert!(took <= REFUSAL_LIMIT, "refused after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_form_one_cluster_and_what_one_node_makes_is_usable_on_the_others() {
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    for node in 0..3 {
        assert!(cluster
            .node(node)
            .log()
            .iter()
            .any(|line| line.contains(&format!(
                "listening protocol=cluster addr={}",
                cluster.cluster_addr(node)
            ))));
    }
    // One cluster: every node names the same cluster id and leader, and lists every node.
    let mut ids = Vec::new();
    for node in 0..3 {
        let (_, status) = cluster.api(node, "GET", "/api/cluster-status", None).await;
        ids.push((status["cluster_id"].clone(), status["leader"].clone()));
        let (code, nodes) = cluster.api(node, "GET", "/api/nodes", None).await;
        assert_eq!(code, 200);
        let mut names: Vec<&str> = nodes
            .as_array()
            .expect("a list")
            .iter()
            .map(|n| {
                assert_eq!(n["running"], true, "{n}");
                n["name"].as_str().expect("a name")
            })
            .collect();
        names.sort();
        assert_eq!(names, [node_name(0), node_name(1), node_name(2)]);
        let (_, overview) = cluster.api(node, "GET", "/api/overview", None).await;
        assert_eq!(
            overview["cluster_name"],
            node_name(0),
            "named after the first seed"
        );
    }
    assert!(
        ids.iter().all(|id| *id == ids[0]) && ids[0].0 != "",
        "{ids:?}"
    );
    // Peers' entries come from the peers themselves (uptime and listeners of their own).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, nodes) = cluster.api(0, "GET", "/api/nodes", None).await;
        let complete = nodes.as_array().expect("a list").iter().all(|n| {
            n["uptime"].as_u64().is_some()
                && n["listeners"].as_array().is_some_and(|l| !l.is_empty())
        });
        if complete {
            let peer = &nodes[1];
            let ip = peer["listeners"][0]["ip_address"].as_str().unwrap_or("");
            assert_ne!(ip, node_host(0), "a peer lists its own listeners: {peer}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "peer entries incomplete: {nodes}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A user, a vhost and permissions made through node 1's HTTP API.
    for (method, path, body) in [
        ("PUT", "/api/vhosts/orders", "{}"),
        (
            "PUT",
            "/api/users/app",
            r#"{"password": "app-secret", "tags": "management"}"#,
        ),
        (
            "PUT",
            "/api/permissions/orders/app",
            r#"{"configure": ".*", "write": ".*", "read": ".*"}"#,
        ),
    ] {
        let (status, answer) = cluster.api(0, method, path, Some(body)).await;
        assert!(status == 201 || status == 204, "{path}: {status} {answer}");
    }
    for node in [1, 2] {
        wait_for_path(&cluster, node, "/api/permissions/orders/app").await;
    }
    // Topology made through node 2 by the new user, with lapin.
    let on_node_2 = Connection::connect(
        &cluster.amqp_url(1, "app", "app-secret", "orders"),
        ConnectionProperties::default(),
    )
    .await
    .expect("the user made on node 1 logs in on node 2");
    let channel = on_node_2.create_channel().await.expect("channel");
    channel
        .exchange_declare(
            "placed".into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("exchange declared on node 2");
    channel
        .queue_declare(
            "billing".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("queue declared on node 2");
    channel
        .queue_bind(
            "billing".into(),
            "placed".into(),
            "".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bound on node 2");
    wait_for_path(&cluster, 2, "/api/bindings/orders/e/placed/q/billing").await;
    // Usable through node 3: the same user, the exchange, the queue and the binding.
    let on_node_3 = Connection::connect(
        &cluster.amqp_url(2, "app", "app-secret", "orders"),
        ConnectionProperties::default(),
    )
    .await
    .expect("the user logs in on node 3");
    let channel = on_node_3.create_channel().await.expect("channel");
    channel
        .exchange_declare(
            "placed".into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("the exchange exists on node 3");
    channel
        .basic_publish(
            "placed".into(),
            "".into(),
            BasicPublishOptions::default(),
            b"order 1",
            BasicProperties::default(),
        )
        .await
        .expect("publish on node 3");
    // Routed on node 3 through the replicated binding and forwarded to the queue's home;
    // the get, forwarded too, leaves after the publish, so it sees the message.
    let got = channel
        .basic_get("billing".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get on node 3")
        .expect("the binding routed the message");
    assert_eq!(got.delivery.data, b"order 1");
    let (status, exchange) = cluster
        .api(2, "GET", "/api/exchanges/orders/placed", None)
        .await;
    assert_eq!(status, 200, "{exchange}");
    assert_eq!(exchange["type"], "fanout");
    let (status, bindings) = cluster
        .api(
            0,
            "GET",
            "/api/exchanges/orders/placed/bindings/source",
            None,
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(bindings[0]["destination"], "billing", "{bindings}");

    // A definitions import through node 3's API reaches node 1.
    let imported = r#"{"vhosts": [{"name": "imported"}],
        "queues": [{"name": "iq", "vhost": "imported", "durable": true, "auto_delete": false, "arguments": {}}]}"#;
    let (status, body) = cluster
        .api(2, "POST", "/api/definitions", Some(imported))
        .await;
    assert!(
        status == 200 || status == 201 || status == 204,
        "{status} {body}"
    );
    wait_for_path(&cluster, 0, "/api/queues/imported/iq").await;

    // warrenctl through node 2: the cluster's members, and a cluster name for every node.
    let http = cluster.http_addr(1);
    let (host, port) = http.rsplit_once(':').expect("host:port");
    let ctl = |verb: &[&str]| {
        let mut args: Vec<String> = ["--host", host, "--port", port]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(verb.iter().map(|s| s.to_string()));
        args
    };
    let status = warren_management::ctl::run(&ctl(&["cluster_status"]), None)
        .await
        .expect("cluster_status");
    for node in 0..3 {
        assert!(status.contains(&node_name(node)), "{status}");
    }
    assert!(status.contains("Running Nodes"), "{status}");
    warren_management::ctl::run(&ctl(&["set_cluster_name", "orders-cluster"]), None)
        .await
        .expect("set_cluster_name");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, overview) = cluster.api(2, "GET", "/api/overview", None).await;
        if overview["cluster_name"] == "orders-cluster" {
            break;
        }
        assert!(Instant::now() < deadline, "{overview}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Listings on every node show a queue on its home node, as RabbitMQ's do: billing was
    // declared through node 2.
    for node in 0..3 {
        let (status, queues) = cluster.api(node, "GET", "/api/queues/orders", None).await;
        assert_eq!(status, 200, "{queues}");
        let billing = queues
            .as_array()
            .and_then(|list| list.iter().find(|q| q["name"] == "billing"))
            .unwrap_or_else(|| panic!("billing listed on node {node}: {queues}"));
        assert_eq!(billing["node"], node_name(1).as_str(), "on node {node}");
    }
    // Prometheus identity per node: its own name, the cluster's current name, and one
    // permanent id for the whole cluster (the cluster id, which set_cluster_name keeps).
    let (_, status) = cluster.api(0, "GET", "/api/cluster-status", None).await;
    let cluster_id = status["cluster_id"]
        .as_str()
        .expect("cluster id")
        .to_string();
    assert!(!cluster_id.is_empty(), "{status}");
    for node in 0..3 {
        let addr = cluster.node(node).listener_addr("prometheus").to_string();
        // The new cluster name reaches each node once it applied the change.
        let deadline = Instant::now() + Duration::from_secs(5);
        let identity = loop {
            let scraped = warren_management::http::send(&addr, "GET", "/metrics", None, None)
                .await
                .expect("scrape");
            let identity = scraped
                .text()
                .lines()
                .find(|line| line.starts_with("rabbitmq_identity_info{"))
                .map(str::to_string)
                .unwrap_or_default();
            if identity.contains("orders-cluster") || Instant::now() > deadline {
                break identity;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            identity.contains(&format!("rabbitmq_node=\"{}\"", node_name(node))),
            "{identity}"
        );
        assert!(
            identity.contains("rabbitmq_cluster=\"orders-cluster\""),
            "{identity}"
        );
        assert!(
            identity.contains(&format!("rabbitmq_cluster_permanent_id=\"{cluster_id}\"")),
            "{identity}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_nodes_loses_no_metadata_and_a_minority_refuses_changes_but_serves_reads() {
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    add_vhost_eventually(&cluster, 2, "before", Duration::from_secs(5)).await;
    // Node 1 formed the cluster, so it leads: losing it costs an election, not metadata.
    cluster.kill(0);
    add_vhost_eventually(&cluster, 1, "after-one", Duration::from_secs(10)).await;
    wait_for_vhost(&cluster, 2, "after-one", Duration::from_secs(5)).await;
    cluster.kill(2);
    // Node 2 alone is a minority: it refuses within the bound, with every protocol's error...
    assert_minority_refuses(&cluster, 1, "refused").await;
    let connection = Connection::connect(
        &cluster.amqp_url(1, "guest", "guest", "%2f"),
        ConnectionProperties::default(),
    )
    .await
    .expect("connects to the minority node");
    let channel = connection.create_channel().await.expect("channel");
    let started = Instant::now();
    let refused = channel
        .exchange_declare(
            "minority-x".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect_err("a minority refuses exchange.declare");
    assert!(started.elapsed() <= REFUSAL_LIMIT);
    match refused.kind() {
        lapin::ErrorKind::ProtocolError(error) => {
            assert_eq!(error.get_id(), 506, "{error:?}");
            assert!(
                error
                    .get_message()
                    .as_str()
                    .contains("the cluster has no majority"),
                "{error:?}"
            );
        }
        other => panic!("expected the broker's close, got {other:?}"),
    }
    // ... and still serves reads.
    assert_eq!(vhosts(&cluster, 1).await, ["/", "after-one", "before"]);
    // Both come back from their own logs and catch up; the refused change never happened.
    cluster.start(0);
    cluster.start(2);
    cluster.wait_formed(3, FORM_LIMIT).await;
    wait_for_vhost(&cluster, 0, "after-one", Duration::from_secs(5)).await;
    for node in 0..3 {
        assert_eq!(
            vhosts(&cluster, node).await,
            ["/", "after-one", "before"],
            "node {node}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_node_refuses_changes_and_catches_up_when_the_link_heals() {
    let mut cluster = TestCluster::new(3);
    // Every link of node 3 through proxies: the one in front of node 3, and one in front of
    // each of the others for node 3's own connections.
    let to_three = Proxy::start(&node_host(2), cluster.cluster_addr(2)).await;
    let to_one = Proxy::start(&node_host(0), cluster.cluster_addr(0)).await;
    let to_two = Proxy::start(&node_host(1), cluster.cluster_addr(1)).await;
    cluster.route(0, 2, to_three.addr());
    cluster.route(1, 2, to_three.addr());
    cluster.route(2, 0, to_one.addr());
    cluster.route(2, 1, to_two.addr());
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    add_vhost_eventually(&cluster, 0, "shared", Duration::from_secs(5)).await;
    wait_for_vhost(&cluster, 2, "shared", Duration::from_secs(5)).await;

    // A silent partition: bytes vanish, connections stay open.
    for proxy in [&to_three, &to_one, &to_two] {
        proxy.set(ProxyMode::Drop);
    }
    add_vhost_eventually(&cluster, 0, "during", Duration::from_secs(10)).await;
    assert_minority_refuses(&cluster, 2, "cut-off").await;
    assert!(!vhosts(&cluster, 2).await.contains(&"during".to_string()));
    for proxy in [&to_three, &to_one, &to_two] {
        proxy.set(ProxyMode::Pass);
    }
    wait_for_vhost(&cluster, 2, "during", Duration::from_secs(15)).await;

    // Reset links, then node 3 hearing but not answering: it still catches up after each.
    for proxy in [&to_three, &to_one, &to_two] {
        proxy.set(ProxyMode::Reset);
    }
    add_vhost_eventually(&cluster, 1, "while-reset", Duration::from_secs(10)).await;
    for proxy in [&to_three, &to_one, &to_two] {
        proxy.set(ProxyMode::ForwardOnly);
    }
    add_vhost_eventually(&cluster, 1, "one-way", Duration::from_secs(10)).await;
    for proxy in [&to_three, &to_one, &to_two] {
        proxy.set(ProxyMode::Pass);
    }
    wait_for_vhost(&cluster, 2, "one-way", Duration::from_secs(15)).await;
    // Everything the majority made, and nothing the minority was refused.
    for node in 0..3 {
        assert_eq!(
            vhosts(&cluster, node).await,
            ["/", "during", "one-way", "shared", "while-reset"],
            "node {node}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blank_node_joins_as_a_learner_and_a_wiped_member_gets_everything_back() {
    let mut cluster = TestCluster::new(4);
    cluster.start_some(&[0, 1, 2]);
    cluster.wait_formed(3, FORM_LIMIT).await;
    add_vhost_eventually(&cluster, 1, "early", Duration::from_secs(5)).await;
    // A fourth, blank node joins the first member it reaches and gets the metadata.
    cluster.start(3);
    cluster.wait_formed(4, FORM_LIMIT).await;
    wait_for_vhost(&cluster, 3, "early", Duration::from_secs(5)).await;
    let (_, status) = cluster.api(3, "GET", "/api/cluster-status", None).await;
    let kinds: Vec<(String, String)> = status["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap_or("").to_string(),
                m["type"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        kinds.contains(&(node_name(3), "learner".to_string())),
        "{status}"
    );
    assert_eq!(
        kinds.iter().filter(|(_, kind)| kind == "voter").count(),
        3,
        "{status}"
    );
    // A member that lost its disk rejoins under its name and gets everything back.
    cluster.kill(2);
    cluster.wipe(2);
    add_vhost_eventually(&cluster, 0, "while-wiped", Duration::from_secs(10)).await;
    cluster.start(2);
    cluster.wait_formed(4, FORM_LIMIT).await;
    wait_for_vhost(&cluster, 2, "while-wiped", Duration::from_secs(10)).await;
    assert_eq!(vhosts(&cluster, 2).await, ["/", "early", "while-wiped"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_another_secret_is_refused_and_both_sides_log_why() {
    let mut cluster = TestCluster::new(2);
    let other = TempDir::new("other-secret");
    let secret = other.path().join("cluster.secret");
    std::fs::write(&secret, b"not the cluster's secret at all!").expect("writes");
    set_mode(&secret, 0o600);
    cluster.set(1, &format!("cluster.secret_file={}", secret.display()));
    cluster.start_all();
    // Node 1 forms a cluster of its own; node 2 never gets in.
    cluster.wait_formed(1, FORM_LIMIT).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let logged = |node: usize, text: &str| {
        cluster
            .node(node)
            .log()
            .iter()
            .any(|line| line.contains(text))
    };
    while !(logged(0, "presented another cluster secret") && logged(1, "cluster secret")) {
        assert!(
            Instant::now() < deadline,
            "logs: {:#?} {:#?}",
            cluster.node(0).log(),
            cluster.node(1).log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, status) = cluster.api(0, "GET", "/api/cluster-status", None).await;
    assert_eq!(
        status["members"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
    let (_, nodes) = cluster.api(1, "GET", "/api/nodes", None).await;
    assert_eq!(nodes.as_array().map(Vec::len), Some(1), "{nodes}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_form_over_tls_links_and_a_node_whose_certificate_the_ca_did_not_sign_is_refused() {
    let pki = Pki::new("cluster-links");
    let mut cluster = TestCluster::new(3);
    for node in 0..3 {
        // The third node's certificate is self-signed: the others must not let it in.
        let (certfile, keyfile) =
            pki.node_certificate(&format!("node{node}"), &node_host(node), node < 2);
        cluster.set(node, &format!("cluster.ssl_options.certfile={certfile}"));
        cluster.set(node, &format!("cluster.ssl_options.keyfile={keyfile}"));
        cluster.set(
            node,
            &format!("cluster.ssl_options.cacertfile={}", pki.path("ca.pem")),
        );
        cluster.set(node, "cluster.ssl_options.verify=verify_peer");
    }
    cluster.start_some(&[0, 1]);
    cluster.wait_formed(2, FORM_LIMIT).await;
    cluster.start(2);
    let (status, _) = cluster
        .api(1, "PUT", "/api/vhosts/over-tls", Some("{}"))
        .await;
    assert!(status == 201 || status == 204, "PUT vhost: {status}");
    wait_for_vhost(&cluster, 0, "over-tls", Duration::from_secs(5)).await;
    // A plain connection to a node's cluster port gets at most a TLS alert record
    // (content type 21), then the node closes it.
    let mut plain = tokio::net::TcpStream::connect(cluster.cluster_addr(0))
        .await
        .expect("connects");
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = plain.write_all(b"not a TLS client hello").await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer)).await;
    assert!(read.is_ok(), "the node kept a plain connection open");
    assert!(
        answer.is_empty() || answer[0] == 21,
        "a plain client got something other than a TLS alert: {answer:?}"
    );
    // The self-signed node is refused by both: it never becomes a member, and the TLS
    // failure is logged.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = "refused a cluster connection: TLS handshake failed";
    while !cluster
        .node(0)
        .log()
        .iter()
        .any(|line| line.contains(refused))
    {
        assert!(Instant::now() < deadline, "{:#?}", cluster.node(0).log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, status) = cluster.api(0, "GET", "/api/cluster-status", None).await;
    let members: Vec<String> = status["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(members, vec![node_name(0), node_name(1)], "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_alarm_on_one_node_blocks_publishers_on_the_other_until_that_node_is_gone() {
    let mut cluster = TestCluster::new(2);
    // Node 2's memory alarm is raised from the start; node 1's is not.
    cluster.set(1, "vm_memory_high_watermark.absolute=1KiB");
    cluster.start_all();
    cluster.wait_formed(2, FORM_LIMIT).await;
    let (_, nodes) = cluster.api(0, "GET", "/api/nodes", None).await;
    let alarm_of = |nodes: &serde_json::Value, name: &str| {
        nodes
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["name"] == name)
            .map(|n| n["mem_alarm"].clone())
    };
    assert_eq!(
        alarm_of(&nodes, &node_name(0)),
        Some(serde_json::Value::Bool(false)),
        "{nodes}"
    );
    let connection = Connection::connect(
        &cluster.amqp_url(0, "guest", "guest", "%2f"),
        ConnectionProperties::default(),
    )
    .await
    .expect("connects to node 1");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .queue_declare(
            "alarmed".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declared");
    // lapin holds a publish while its connection is blocked: each goes from its own task.
    let publish = || {
        let channel = channel.clone();
        tokio::spawn(async move {
            let _ = channel
                .basic_publish(
                    "".into(),
                    "alarmed".into(),
                    BasicPublishOptions::default(),
                    b"m",
                    BasicProperties::default(),
                )
                .await;
        })
    };
    // The first publish after node 1 learns of node 2's alarm (within about a second)
    // gets connection.blocked, though node 1 itself has plenty of memory.
    let deadline = Instant::now() + Duration::from_secs(15);
    while !connection.status().blocked() {
        assert!(
            Instant::now() < deadline,
            "node 1's publisher was not blocked by node 2's alarm"
        );
        publish();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A node that is gone raises nothing: once node 2 is down, node 1 unblocks.
    cluster.kill(1);
    let deadline = Instant::now() + Duration::from_secs(15);
    while connection.status().blocked() {
        assert!(
            Instant::now() < deadline,
            "node 1's publisher stayed blocked after node 2 went down"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_world_readable_secret_file_stops_start_up_naming_the_file_and_its_mode() {
    let data = TempDir::new("readable-secret");
    let secret = data.path().join("cluster.secret");
    std::fs::write(&secret, b"0123456789abcdef0123456789abcdef").expect("writes");
    set_mode(&secret, 0o644);
    let output = std::process::Command::new(warren_binary())
        .args(warren_interop_tests::test_listener_args())
        .args(["--set", &format!("data_dir={}", data.path().display())])
        .args(["--set", "node_name=warren@127.0.0.1"])
        .args(["--set", "cluster.listeners.tcp.default=127.0.0.1:0"])
        .args([
            "--set",
            &format!("cluster.secret_file={}", secret.display()),
        ])
        .args([
            "--set",
            "cluster_formation.classic_config.nodes.1=warren@127.0.0.1",
        ])
        .output()
        .expect("runs warren");
    assert!(!output.status.success(), "warren must not start");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&secret.display().to_string()), "{stderr}");
    assert!(stderr.contains("0644"), "{stderr}");
    // No secret file at all: one is created, owner-only.
    let fresh = TempDir::new("fresh-secret");
    let node = warren_interop_tests::process::WarrenProcess::start(
        fresh.path(),
        &[
            "node_name=warren@127.0.0.1",
            "cluster.listeners.tcp.default=127.0.0.1:0",
            "cluster_formation.classic_config.nodes.1=warren@127.0.0.1",
        ],
    );
    let created = fresh.path().join("cluster.secret");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let metadata = std::fs::metadata(&created).expect("the secret was created");
        assert_eq!(metadata.permissions().mode() & 0o777, 0o600);
        assert_eq!(metadata.len(), 32);
    }
    node.kill();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_lists_and_closes_the_connections_and_channels_of_the_whole_cluster() {
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    let connection = Connection::connect(
        &cluster.amqp_url(1, "guest", "guest", "%2f"),
        ConnectionProperties::default(),
    )
    .await
    .expect("connects to node 2");
    let _channel = connection.create_channel().await.expect("channel");
    let deadline = Instant::now() + Duration::from_secs(10);
    let name = loop {
        let (status, list) = cluster.api(0, "GET", "/api/connections", None).await;
        assert_eq!(status, 200);
        let found = list
            .as_array()
            .expect("a list")
            .iter()
            .find(|c| c["node"] == node_name(1))
            .cloned();
        if let Some(found) = found {
            assert_eq!(found["user"], "guest");
            assert_eq!(found["channels"], 1, "{found}");
            break found["name"].as_str().expect("a name").to_string();
        }
        assert!(
            Instant::now() < deadline,
            "node 1 never listed node 2's connection: {list}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (_, channels) = cluster.api(2, "GET", "/api/channels", None).await;
    assert!(
        channels
            .as_array()
            .expect("a list")
            .iter()
            .any(|c| c["node"] == node_name(1) && c["connection_details"]["name"] == name.as_str()),
        "node 3 lists node 2's channel: {channels}"
    );
    let (status, one) = cluster
        .api(
            0,
            "GET",
            &format!(
                "/api/connections/{}",
                name.replace(' ', "%20")
                    .replace(':', "%3A")
                    .replace('>', "%3E")
            ),
            None,
        )
        .await;
    assert_eq!(
        (status, &one["node"]),
        (200, &serde_json::json!(node_name(1))),
        "{one}"
    );

    // Closed through node 1's API: the client on node 2 sees the close.
    let (status, _) = cluster
        .api(
            0,
            "DELETE",
            &format!(
                "/api/connections/{}",
                name.replace(' ', "%20")
                    .replace(':', "%3A")
                    .replace('>', "%3E")
            ),
            None,
        )
        .await;
    assert_eq!(status, 204);
    let deadline = Instant::now() + Duration::from_secs(10);
    while connection.status().connected() {
        assert!(
            Instant::now() < deadline,
            "the connection on node 2 stayed open"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Group commit (cluster/src/metadata/group_commit.rs): declarations made at once by many
/// clients of a follower share log entries, and every one of them is committed and applied
/// on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_declarations_through_a_follower_share_log_entries_and_reach_every_node() {
    const CLIENTS: usize = 10;
    const PER_CLIENT: usize = 20;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    let (_, status) = cluster.api(0, "GET", "/api/cluster-status", None).await;
    let leader = status["leader"].as_str().expect("a leader").to_string();
    let follower = (0..3)
        .find(|&node| node_name(node) != leader)
        .expect("a follower");
    let applied_before = {
        let (_, status) = cluster
            .api(follower, "GET", "/api/cluster-status", None)
            .await;
        status["last_applied"].as_u64().expect("last_applied")
    };
    let url = cluster.amqp_url(follower, "guest", "guest", "%2f");
    let mut clients = Vec::new();
    for client in 0..CLIENTS {
        let url = url.clone();
        clients.push(tokio::spawn(async move {
            let connection = Connection::connect(&url, ConnectionProperties::default())
                .await
                .expect("connect to the follower");
            let channel = connection.create_channel().await.expect("channel");
            for i in 0..PER_CLIENT {
                let name = format!("batched-{client}-{i}");
                let declared = channel
                    .queue_declare(
                        name.as_str().into(),
                        QueueDeclareOptions {
                            durable: true,
                            ..QueueDeclareOptions::default()
                        },
                        FieldTable::default(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("declare {name}: {e}"));
                assert_eq!(declared.name().as_str(), name);
            }
            let _ = connection.close(200, "done".into()).await;
        }));
    }
    for client in clients {
        client.await.expect("client task");
    }
    let expected: Vec<String> = (0..CLIENTS)
        .flat_map(|c| (0..PER_CLIENT).map(move |i| format!("batched-{c}-{i}")))
        .collect();
    for node in 0..3 {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (status, queues) = cluster.api(node, "GET", "/api/queues/%2F", None).await;
            assert_eq!(status, 200, "{queues}");
            let listed: Vec<&str> = queues
                .as_array()
                .expect("a list")
                .iter()
                .filter_map(|q| q["name"].as_str())
                .collect();
            let missing: Vec<&String> = expected
                .iter()
                .filter(|name| !listed.contains(&name.as_str()))
                .collect();
            if missing.is_empty() {
                let home = queues
                    .as_array()
                    .and_then(|list| list.iter().find(|q| q["name"] == "batched-0-0"))
                    .map(|q| q["node"].clone())
                    .unwrap_or_default();
                assert_eq!(
                    home,
                    node_name(follower).as_str(),
                    "declared through the follower, homed there (node {node})"
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {node} lacks {} declarations, e.g. {:?}",
                missing.len(),
                &missing[..missing.len().min(5)]
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Fewer log entries than declarations: clients that declared while another's entry was
    // in flight were proposed together (10 clients, one declaration in flight each).
    let (_, status) = cluster
        .api(follower, "GET", "/api/cluster-status", None)
        .await;
    let entries = status["last_applied"].as_u64().expect("last_applied") - applied_before;
    let declarations = (CLIENTS * PER_CLIENT) as u64;
    assert!(
        entries < declarations,
        "{declarations} declarations took {entries} log entries"
    );
}
