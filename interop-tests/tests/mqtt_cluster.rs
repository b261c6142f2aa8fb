//! MQTT on a cluster of three real `warren` processes on 127.0.0.1-3, through rumqttc and
//! lapin: a clean-session subscriber's queues (exclusive) are in the cluster metadata with
//! their bindings, so what is published on any node (MQTT, or AMQP 0-9-1 to `amq.topic`)
//! reaches it; its disconnect drops them on every node, and so does a SIGKILL of its node
//! (within a bound). A client identifier is held once in the cluster: connecting on
//! another node takes it over (MQTT 5 DISCONNECT 0x8E; 3.1.1 the socket closes), with
//! RabbitMQ's rule for the old connection's will, and a persistent session moves with the
//! client. Every wait is bounded; the tests run one at a time.

use std::time::{Duration, Instant};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use rumqttc::QoS;
use warren_interop_tests::cluster::{node_name, TestCluster};

mod mqtt5_common;
mod mqtt_common;

use mqtt5_common::{connect5, options5, server_disconnect_reason};
use mqtt_common::{connect, options};
use rumqttc::v5::mqttbytes::v5::{DisconnectReasonCode, LastWillProperties, UnsubAckReason};

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const FORM_LIMIT: Duration = Duration::from_secs(30);
const SPREAD_LIMIT: Duration = Duration::from_secs(10);
/// The bound within which a killed node's transient queues go from the survivors: the
/// failure detector's 500 ms, `GONE_AFTER` (3 s), a maintenance pass and a commit.
const KILL_LIMIT: Duration = Duration::from_secs(10);

/// Waits until `node`'s API lists queue `name` homed on `home` with a binding from
/// `amq.topic` with `key`.
async fn wait_bound(cluster: &TestCluster, node: usize, home: usize, name: &str, key: &str) {
    let deadline = Instant::now() + SPREAD_LIMIT;
    loop {
        let (status, body) = cluster
            .api(node, "GET", &format!("/api/queues/%2F/{name}"), None)
            .await;
        if status == 200 {
            assert_eq!(body["node"], node_name(home), "the home node: {body}");
            let (_, bindings) = cluster
                .api(
                    node,
                    "GET",
                    &format!("/api/queues/%2F/{name}/bindings"),
                    None,
                )
                .await;
            let bound = bindings.as_array().is_some_and(|list| {
                list.iter()
                    .any(|b| b["source"] == "amq.topic" && b["routing_key"] == key)
            });
            if bound {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "'{name}' bound with '{key}' did not reach node {node}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `node`'s API no longer lists queue `name`, within `limit`.
async fn wait_gone(cluster: &TestCluster, node: usize, name: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let (status, _) = cluster
            .api(node, "GET", &format!("/api/queues/%2F/{name}"), None)
            .await;
        if status == 404 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "'{name}' still listed on node {node} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Publishes `count` messages `{prefix}{i}` to `amq.topic` with `key` on `node`, confirmed.
async fn publish_amqp(cluster: &TestCluster, node: usize, key: &str, prefix: &str, count: usize) {
    let url = cluster.amqp_url(node, "guest", "guest", "%2f");
    let connection = Connection::connect(&url, ConnectionProperties::default())
        .await
        .expect("AMQP connects");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    for i in 0..count {
        let confirm = channel
            .basic_publish(
                "amq.topic".into(),
                key.into(),
                BasicPublishOptions::default(),
                format!("{prefix}{i}").as_bytes(),
                BasicProperties::default(),
            )
            .await
            .expect("basic.publish")
            .await
            .expect("confirm");
        assert!(confirm.is_ack(), "publish {i} confirmed");
    }
    let _ = connection.close(200, "done".into()).await;
}

/// The payloads of the next `count` PUBLISHes, with their QoS.
async fn receive(client: &mut mqtt_common::MqttClient, count: usize) -> Vec<(String, QoS)> {
    let mut got = Vec::new();
    for _ in 0..count {
        let publish = client.next_publish().await;
        got.push((
            String::from_utf8_lossy(&publish.payload).into_owned(),
            publish.qos,
        ));
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_session_subscriber_on_one_node_gets_what_every_node_publishes() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;

    // The subscriber on node 3, clean session, QoS 1 and QoS 0 subscriptions.
    let mut subscriber = connect(options(
        cluster.node(2).listener_addr("mqtt"),
        "fan-subscriber",
    ))
    .await;
    let started = Instant::now();
    let suback = subscriber.subscribe("fan/one", QoS::AtLeastOnce).await;
    let subscribe_latency = started.elapsed();
    assert_eq!(
        suback.return_codes,
        vec![rumqttc::SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );
    let suback = subscriber.subscribe("fan/zero", QoS::AtMostOnce).await;
    assert_eq!(
        suback.return_codes,
        vec![rumqttc::SubscribeReasonCode::Success(QoS::AtMostOnce)]
    );
    eprintln!("MQTT subscribe on a 3-node cluster took {subscribe_latency:?}");
    let q1 = "mqtt-subscription-fan-subscriberqos1";
    let q0 = "mqtt-subscription-fan-subscriberqos0";
    for node in [0, 1] {
        wait_bound(&cluster, node, 2, q1, "fan.one").await;
        wait_bound(&cluster, node, 2, q0, "fan.zero").await;
    }
    // Node 1's view says what RabbitMQ's does of another connection's exclusive queue.
    let (_, listed) = cluster
        .api(0, "GET", &format!("/api/queues/%2F/{q1}"), None)
        .await;
    assert_eq!(listed["exclusive"], true, "{listed}");

    // MQTT publisher on node 1: QoS 1 (PUBACK once node 3 has them) and QoS 0.
    let mut publisher = connect(options(
        cluster.node(0).listener_addr("mqtt"),
        "fan-publisher",
    ))
    .await;
    for i in 0..5 {
        publisher
            .publish("fan/one", QoS::AtLeastOnce, format!("m1-{i}").as_bytes())
            .await;
        match publisher.next_ack().await {
            rumqttc::Packet::PubAck(_) => {}
            other => panic!("expected PUBACK, got {other:?}"),
        }
    }
    let got = receive(&mut subscriber, 5).await;
    let expected: Vec<(String, QoS)> = (0..5)
        .map(|i| (format!("m1-{i}"), QoS::AtLeastOnce))
        .collect();
    assert_eq!(got, expected, "QoS 1 from node 1, in order");
    for i in 0..3 {
        publisher
            .publish("fan/zero", QoS::AtMostOnce, format!("z-{i}").as_bytes())
            .await;
    }
    let got = receive(&mut subscriber, 3).await;
    let expected: Vec<(String, QoS)> = (0..3)
        .map(|i| (format!("z-{i}"), QoS::AtMostOnce))
        .collect();
    assert_eq!(got, expected, "QoS 0 from node 1");

    // AMQP 0-9-1 publisher on node 2, to amq.topic.
    publish_amqp(&cluster, 1, "fan.one", "a-", 4).await;
    let got = receive(&mut subscriber, 4).await;
    let expected: Vec<(String, QoS)> = (0..4)
        .map(|i| (format!("a-{i}"), QoS::AtLeastOnce))
        .collect();
    assert_eq!(got, expected, "AMQP 0-9-1 from node 2");
    assert!(
        subscriber
            .no_publish_within(Duration::from_millis(500))
            .await,
        "nothing more (no duplicates)"
    );

    // Another node's connection cannot consume the exclusive queue: 405 RESOURCE_LOCKED.
    {
        let url = cluster.amqp_url(0, "guest", "guest", "%2f");
        let connection = Connection::connect(&url, ConnectionProperties::default())
            .await
            .expect("AMQP connects");
        let channel = connection.create_channel().await.expect("channel");
        let refused = channel
            .basic_consume(
                q1.into(),
                "thief".into(),
                lapin::options::BasicConsumeOptions::default(),
                lapin::types::FieldTable::default(),
            )
            .await
            .expect_err("another connection's exclusive queue");
        let text = refused.to_string();
        assert!(
            text.contains("RESOURCE_LOCKED")
                && text.contains("cannot obtain exclusive access to locked queue"),
            "{text}"
        );
    }

    // The subscriber leaves: its queues go from every node.
    subscriber.disconnect().await;
    publisher.disconnect().await;
    for node in [0, 1, 2] {
        wait_gone(&cluster, node, q1, SPREAD_LIMIT).await;
        wait_gone(&cluster, node, q0, SPREAD_LIMIT).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_nodes_clean_session_queues_go_from_the_survivors() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;

    let mut subscriber = connect(options(
        cluster.node(2).listener_addr("mqtt"),
        "doomed-subscriber",
    ))
    .await;
    subscriber.subscribe("doom/t", QoS::AtLeastOnce).await;
    let q1 = "mqtt-subscription-doomed-subscriberqos1";
    for node in [0, 1] {
        wait_bound(&cluster, node, 2, q1, "doom.t").await;
    }
    cluster.kill(2);
    subscriber.abort();
    let killed = Instant::now();
    for node in [0, 1] {
        wait_gone(&cluster, node, q1, KILL_LIMIT).await;
    }
    eprintln!(
        "the killed node's clean-session queue was gone from the survivors after {:?}",
        killed.elapsed()
    );

    // The killed node restarts: its old queue does not come back anywhere.
    cluster.start(2);
    cluster.wait_formed(3, FORM_LIMIT).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for node in [0, 1, 2] {
        let (status, body) = cluster
            .api(node, "GET", &format!("/api/queues/%2F/{q1}"), None)
            .await;
        assert_eq!(status, 404, "no ghost on node {node}: {body}");
    }
}

/// Subscribes a clean-session watcher of `wills/#` on `node`, bound on every node.
async fn will_watcher(cluster: &TestCluster, node: usize) -> mqtt_common::MqttClient {
    let mut watcher = connect(options(cluster.node(node).listener_addr("mqtt"), "watcher")).await;
    watcher.subscribe("wills/#", QoS::AtLeastOnce).await;
    for other in 0..3 {
        wait_bound(
            cluster,
            other,
            node,
            "mqtt-subscription-watcherqos1",
            "wills.#",
        )
        .await;
    }
    watcher
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_id_connecting_on_another_node_closes_the_old_connection_and_sends_its_will() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    let mut watcher = will_watcher(&cluster, 2).await;

    // MQTT 3.1.1, clean session, with a will, on node 1.
    let mut first = options(cluster.node(0).listener_addr("mqtt"), "roamer");
    first.set_last_will(rumqttc::LastWill::new(
        "wills/roamer",
        "roamer gone",
        QoS::AtLeastOnce,
        false,
    ));
    let mut first = connect(first).await;
    first.subscribe("roam/t", QoS::AtLeastOnce).await;
    let q1 = "mqtt-subscription-roamerqos1";
    wait_bound(&cluster, 1, 0, q1, "roam.t").await;

    // The same client identifier on node 2: node 1 closes its connection (3.1.1 has no
    // DISCONNECT from the server) before node 2 answers CONNACK.
    let started = Instant::now();
    let mut second = connect(options(cluster.node(1).listener_addr("mqtt"), "roamer")).await;
    let connect_latency = started.elapsed();
    let ended = tokio::time::timeout(Duration::from_secs(5), &mut first.ended)
        .await
        .expect("the old connection on node 1 is closed in time")
        .expect("event loop task");
    eprintln!(
        "takeover across nodes: CONNACK after {connect_latency:?}, old connection ended with \
         {ended:?}"
    );
    // As RabbitMQ: the will of the connection taken over is published, once.
    let will = watcher.next_publish().await;
    assert_eq!(
        (&will.topic[..], &will.payload[..]),
        ("wills/roamer", &b"roamer gone"[..])
    );
    // Its clean session's queue went with it, from every node.
    for node in [0, 1, 2] {
        wait_gone(&cluster, node, q1, SPREAD_LIMIT).await;
    }

    // The new connection subscribes (its queue homed on node 2) and gets what node 3
    // publishes.
    second.subscribe("roam/t", QoS::AtLeastOnce).await;
    wait_bound(&cluster, 2, 1, q1, "roam.t").await;
    publish_amqp(&cluster, 2, "roam.t", "r-", 2).await;
    let got = receive(&mut second, 2).await;
    assert_eq!(
        got,
        vec![
            ("r-0".to_string(), QoS::AtLeastOnce),
            ("r-1".to_string(), QoS::AtLeastOnce)
        ]
    );
    second.disconnect().await;
    assert!(
        watcher.no_publish_within(Duration::from_millis(500)).await,
        "one will, and none for a DISCONNECT"
    );
    watcher.disconnect().await;
}

/// MQTT 5 options resuming the session of `client_id` (clean start 0, expiry 600 s).
fn persistent5(addr: std::net::SocketAddr, client_id: &str) -> rumqttc::v5::MqttOptions {
    let mut options = options5(addr, client_id);
    options.set_clean_start(false);
    let mut properties = options.connect_properties().unwrap_or_default();
    properties.session_expiry_interval = Some(600);
    options.set_connect_properties(properties);
    options
}

/// An MQTT 5 will on `topic`, delayed `delay` seconds when `Some`.
fn will5(topic: &str, payload: &str, delay: Option<u32>) -> rumqttc::v5::mqttbytes::v5::LastWill {
    let properties = delay.map(|delay| LastWillProperties {
        delay_interval: Some(delay),
        payload_format_indicator: None,
        message_expiry_interval: None,
        content_type: None,
        response_topic: None,
        correlation_data: None,
        user_properties: Vec::new(),
    });
    rumqttc::v5::mqttbytes::v5::LastWill::new(
        topic,
        payload.to_string(),
        rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
        false,
        properties,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mqtt5_session_taken_over_on_another_node_is_told_0x8e_and_moves_with_the_client() {
    use rumqttc::v5::mqttbytes::QoS as QoS5;
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    let mut watcher = will_watcher(&cluster, 2).await;

    // A persistent MQTT 5 session on node 1 with a will, subscribed to move/a.
    let mut first = persistent5(cluster.node(0).listener_addr("mqtt"), "mover");
    first.set_last_will(will5("wills/mover", "mover gone", None));
    let mut first = connect5(first).await;
    first.subscribe("move/a", QoS5::AtLeastOnce).await;
    let q1 = "mqtt-subscription-moverqos1";
    for node in [1, 2] {
        wait_bound(&cluster, node, 0, q1, "move.a").await;
    }
    publish_amqp(&cluster, 2, "move.a", "before-", 1).await;
    assert_eq!(&first.next_publish().await.payload[..], b"before-0");

    // The client comes back on node 2, resuming its session, with a delayed will of its
    // own: node 1 tells the old connection 0x8E, and (RabbitMQ's rule) does not publish
    // the old connection's will.
    let mut second = persistent5(cluster.node(1).listener_addr("mqtt"), "mover");
    second.set_last_will(will5("wills/mover", "second gone", Some(30)));
    let mut second = connect5(second).await;
    assert!(
        second.connack.session_present,
        "the session resumed on another node"
    );
    assert_eq!(
        server_disconnect_reason(first).await,
        DisconnectReasonCode::SessionTakenOver
    );
    // The session's queue stays on node 1, consumed from node 2.
    publish_amqp(&cluster, 2, "move.a", "after-", 2).await;
    for expected in ["after-0", "after-1"] {
        assert_eq!(
            String::from_utf8_lossy(&second.next_publish().await.payload),
            expected
        );
    }

    // A subscription made on node 2, then the client leaves (DISCONNECT: no will) and
    // comes back on node 1: the session node 2 stored moves back with it, so the new
    // subscription is there to unsubscribe (rumqttc ends its loop on a failed UNSUBACK).
    second.subscribe("move/b", QoS5::AtLeastOnce).await;
    wait_bound(&cluster, 0, 0, q1, "move.b").await;
    second.disconnect().await;
    let mut back = connect5(persistent5(cluster.node(0).listener_addr("mqtt"), "mover")).await;
    assert!(back.connack.session_present);
    let unsuback = back.unsubscribe("move/b").await;
    assert_eq!(unsuback.reasons, vec![UnsubAckReason::Success]);
    publish_amqp(&cluster, 2, "move.b", "b-", 1).await;
    publish_amqp(&cluster, 2, "move.a", "a-", 1).await;
    assert_eq!(&back.next_publish().await.payload[..], b"a-0");
    assert!(
        back.publish_within(Duration::from_millis(500))
            .await
            .is_none(),
        "nothing for the filter unsubscribed"
    );
    back.disconnect().await;
    assert!(
        watcher.no_publish_within(Duration::from_secs(1)).await,
        "no will was published"
    );
    watcher.disconnect().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_subscription_membership_moves_with_a_session_taken_over_on_another_node() {
    use rumqttc::v5::mqttbytes::QoS as QoS5;
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    let group = "mqtt-shared-g-jobs";

    // A persistent member of group g on node 1.
    let mut first = connect5(persistent5(cluster.node(0).listener_addr("mqtt"), "worker")).await;
    first.subscribe("$share/g/jobs", QoS5::AtLeastOnce).await;
    for node in [1, 2] {
        wait_bound(&cluster, node, 0, group, "jobs").await;
    }

    // The client comes back on node 2: the session, its membership with it, moves there.
    let mut second = connect5(persistent5(cluster.node(1).listener_addr("mqtt"), "worker")).await;
    assert!(second.connack.session_present, "the session moved");
    assert_eq!(
        server_disconnect_reason(first).await,
        DisconnectReasonCode::SessionTakenOver
    );
    publish_amqp(&cluster, 2, "jobs", "job-", 2).await;
    for expected in ["job-0", "job-1"] {
        assert_eq!(
            String::from_utf8_lossy(&second.next_publish().await.payload),
            expected,
            "the group's messages reach the member on its new node"
        );
    }

    // It leaves the group on node 2, its only member: the group's queue goes.
    let unsuback = second.unsubscribe("$share/g/jobs").await;
    assert_eq!(unsuback.reasons, vec![UnsubAckReason::Success]);
    for node in 0..3 {
        wait_gone(&cluster, node, group, SPREAD_LIMIT).await;
    }

    // A clean member joins the group again on node 1 and leaves. Node 1 no longer counts
    // the moved session as a member, so nobody is left and the queue goes again (it was
    // kept for a member that had gone before the membership moved).
    let mut other = connect5(options5(cluster.node(0).listener_addr("mqtt"), "other")).await;
    other.subscribe("$share/g/jobs", QoS5::AtLeastOnce).await;
    wait_bound(&cluster, 2, 0, group, "jobs").await;
    publish_amqp(&cluster, 2, "jobs", "again-", 1).await;
    assert_eq!(&other.next_publish().await.payload[..], b"again-0");
    other.disconnect().await;
    for node in 0..3 {
        wait_gone(&cluster, node, group, SPREAD_LIMIT).await;
    }
    second.disconnect().await;
}

/// The payloads that reach `members` until `count` have come (each within the wait).
async fn collect_from(
    members: &mut [&mut mqtt5_common::Mqtt5Client],
    count: usize,
) -> Vec<Vec<String>> {
    let mut got = vec![Vec::new(); members.len()];
    let deadline = Instant::now() + SPREAD_LIMIT;
    while got.iter().map(Vec::len).sum::<usize>() < count {
        assert!(
            Instant::now() < deadline,
            "{count} messages did not reach the group in time: {got:?}"
        );
        for (index, member) in members.iter_mut().enumerate() {
            if let Some(publish) = member.publish_within(Duration::from_millis(20)).await {
                got[index].push(String::from_utf8_lossy(&publish.payload).into_owned());
            }
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_subscription_group_spans_the_nodes_until_its_last_member_anywhere_leaves() {
    use rumqttc::v5::mqttbytes::QoS as QoS5;
    use std::collections::BTreeSet;
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    let group = "mqtt-shared-g-tasks";

    // One member on each node: a clean one on node 1 (it declares the queue, homed
    // there), a clean one on node 2 that never acknowledges, a persistent one on node 3.
    let mut first = connect5(options5(cluster.node(0).listener_addr("mqtt"), "first")).await;
    first.subscribe("$share/g/tasks", QoS5::AtLeastOnce).await;
    for node in [1, 2] {
        wait_bound(&cluster, node, 0, group, "tasks").await;
    }
    let mut leaver = options5(cluster.node(1).listener_addr("mqtt"), "leaver");
    leaver.set_manual_acks(true);
    let mut leaver = connect5(leaver).await;
    leaver.subscribe("$share/g/tasks", QoS5::AtLeastOnce).await;
    let mut last = connect5(persistent5(cluster.node(2).listener_addr("mqtt"), "last")).await;
    last.subscribe("$share/g/tasks", QoS5::AtLeastOnce).await;

    // Each message to one member, every member getting some.
    publish_amqp(&cluster, 2, "tasks", "a-", 12).await;
    let got = collect_from(&mut [&mut first, &mut leaver, &mut last], 12).await;
    assert!(got.iter().all(|share| !share.is_empty()), "spread: {got:?}");
    let all: BTreeSet<&String> = got.iter().flatten().collect();
    assert_eq!(all.len(), 12, "each message to one member: {got:?}");

    // The member on node 2 goes with its share unacknowledged: node 2 has no member of
    // the group left, yet the group lives on, and the others get that share.
    let held: BTreeSet<String> = got[1].iter().cloned().collect();
    leaver.abort();
    let handed = collect_from(&mut [&mut first, &mut last], held.len()).await;
    let handed: BTreeSet<String> = handed.into_iter().flatten().collect();
    assert_eq!(
        handed, held,
        "the leaver's unacknowledged share went to the others"
    );
    publish_amqp(&cluster, 0, "tasks", "b-", 6).await;
    let got = collect_from(&mut [&mut first, &mut last], 6).await;
    assert_eq!(got.iter().map(Vec::len).sum::<usize>(), 6, "{got:?}");

    // The member on the queue's home node leaves too: the member on node 3 still gets
    // everything.
    first.disconnect().await;
    publish_amqp(&cluster, 1, "tasks", "c-", 3).await;
    let got = collect_from(&mut [&mut last], 3).await;
    assert_eq!(got[0], vec!["c-0", "c-1", "c-2"]);

    // The last member goes away but its session stays, a member: the group's queue
    // keeps collecting, and the member gets it on its return.
    last.disconnect().await;
    publish_amqp(&cluster, 0, "tasks", "d-", 2).await;
    for node in 0..3 {
        wait_bound(&cluster, node, 0, group, "tasks").await;
    }
    let mut back = connect5(persistent5(cluster.node(2).listener_addr("mqtt"), "last")).await;
    assert!(back.connack.session_present);
    let got = collect_from(&mut [&mut back], 2).await;
    assert_eq!(got[0], vec!["d-0", "d-1"]);

    // Its leaving ends the group everywhere.
    let unsuback = back.unsubscribe("$share/g/tasks").await;
    assert_eq!(unsuback.reasons, vec![UnsubAckReason::Success]);
    for node in 0..3 {
        wait_gone(&cluster, node, group, SPREAD_LIMIT).await;
    }
    back.disconnect().await;
}

/// Connects `client_id` over a raw MQTT 3.1.1 socket to `addr` without clean session;
/// returns the client and whether the CONNACK said a session was present.
async fn connect_persistent_raw(
    addr: std::net::SocketAddr,
    client_id: &str,
) -> (mqtt_common::RawClient, bool) {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0b1100_0000, 0, 60];
    for field in [client_id.as_bytes(), b"guest", b"guest"] {
        body.extend_from_slice(&(field.len() as u16).to_be_bytes());
        body.extend_from_slice(field);
    }
    let mut raw = mqtt_common::RawClient::open(addr).await;
    raw.send(&mqtt_common::packet(0x10, &body)).await;
    let connack = raw.read_exact(4).await;
    assert_eq!(
        (connack[0], connack[1], connack[3]),
        (0x20, 2, 0),
        "CONNACK accepted"
    );
    (raw, connack[2] == 1)
}

/// A QoS 2 PUBLISH with packet identifier `id`, DUP set if `dup`.
fn publish_qos2(topic: &str, id: u16, payload: &[u8], dup: bool) -> Vec<u8> {
    let mut body = (topic.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(topic.as_bytes());
    body.extend_from_slice(&id.to_be_bytes());
    body.extend_from_slice(payload);
    mqtt_common::packet(if dup { 0x3C } else { 0x34 }, &body)
}

/// An acknowledgement packet (`first` byte) of packet identifier `id`.
fn with_id(first: u8, id: u16) -> Vec<u8> {
    mqtt_common::packet(first, &id.to_be_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos2_identifiers_of_a_session_taken_over_on_another_node_survive_that_nodes_restart() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    // A persistent subscriber on node 3 sees what is routed.
    let mut keeper = options(cluster.node(2).listener_addr("mqtt"), "keeper");
    keeper.set_clean_session(false);
    let mut keeper = connect(keeper).await;
    keeper.subscribe("meters/+/kwh", QoS::AtLeastOnce).await;
    for node in [0, 1] {
        wait_bound(
            &cluster,
            node,
            2,
            "mqtt-subscription-keeperqos1",
            "meters.*.kwh",
        )
        .await;
    }

    // A meter's persistent session on node 1 publishes QoS 2 identifier 42 and gets its
    // PUBREC, but does not release it.
    let (mut meter, _) =
        connect_persistent_raw(cluster.node(0).listener_addr("mqtt"), "meter").await;
    meter
        .send(&publish_qos2("meters/1/kwh", 42, b"17", false))
        .await;
    assert_eq!(meter.read_exact(4).await, with_id(0x50, 42), "PUBREC");
    assert_eq!(&keeper.next_publish().await.payload[..], b"17");

    // The meter comes back on node 2: its session, identifier 42 with it, moves there.
    let (moved, present) =
        connect_persistent_raw(cluster.node(1).listener_addr("mqtt"), "meter").await;
    assert!(present, "the session moved");
    assert!(
        meter.is_closed_by_broker().await,
        "node 1 closed the old connection"
    );
    drop(moved);
    // The new node writes the identifier to its log after the CONNACK, within a flush
    // interval (a few milliseconds); then node 2 is killed and started again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.kill(1);
    cluster.start(1);
    cluster.wait_formed(3, FORM_LIMIT).await;

    // Node 2 still knows the unreleased identifier: the re-sent PUBLISH is answered with
    // PUBREC and not routed again.
    let (mut meter, present) =
        connect_persistent_raw(cluster.node(1).listener_addr("mqtt"), "meter").await;
    assert!(
        present,
        "the unreleased identifier is session state after the restart"
    );
    meter
        .send(&publish_qos2("meters/1/kwh", 42, b"17", true))
        .await;
    assert_eq!(meter.read_exact(4).await, with_id(0x50, 42), "PUBREC again");
    meter.send(&with_id(0x62, 42)).await;
    assert_eq!(meter.read_exact(4).await, with_id(0x70, 42), "PUBCOMP");
    assert!(
        keeper.no_publish_within(Duration::from_millis(500)).await,
        "the re-sent PUBLISH was routed a second time"
    );
    keeper.disconnect().await;
}
