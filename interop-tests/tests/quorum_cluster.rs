//! Quorum queues on a cluster of three real `warren` processes on 127.0.0.1-3, through lapin
//! (seed 003): a queue declared on one node is served by every node; experiment B (5,000
//! persistent messages confirmed one at a time through a follower's node, SIGKILL of the
//! leader's node, drained from a survivor: none lost, none twice); experiment C (confirms
//! with 3, 2 and 1 nodes up: all, all, none, every attempt answered or timed out within its
//! bound); deliveries unacknowledged on the killed leader's node come back redelivered.
//!
//! Every wait is bounded; each test runs its nodes on its own cluster port, one test at a time.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::BasicProperties;
use warren_interop_tests::cluster::TestCluster;

mod lapin_common;
mod quorum_common;

use quorum_common::{declare_everywhere, drain, leader_of, open, publish_confirmed, FORM_LIMIT};

/// One test of this file at a time: each runs three nodes, and several clusters at once on
/// two cores starve the failure detector's pings, which is not what these tests are about.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experiment_b_confirmed_messages_survive_a_sigkill_of_the_leaders_node() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_everywhere(&cluster, 0, &[1, 2], "seed003.b").await;
    let leader = leader_of(&cluster, 1, "seed003.b").await;
    let (follower, survivor) = ((leader + 1) % 3, (leader + 2) % 3);

    // Through a follower's node, one at a time, each confirm awaited before the next.
    let (_connection, channel) = open(&cluster, follower).await;
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

    cluster.kill(leader);
    let drained = drain(&cluster, survivor, "seed003.b", MESSAGES).await;
    let bodies: Vec<&str> = drained.iter().map(|(body, _)| body.as_str()).collect();
    let distinct: HashSet<&str> = bodies.iter().copied().collect();
    assert_eq!(distinct.len(), MESSAGES, "no message twice");
    let expected: Vec<String> = (0..MESSAGES).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies, expected, "every confirmed message, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn experiment_c_confirms_with_three_two_and_one_nodes_up_are_all_all_and_none() {
    let _serial = ONE_AT_A_TIME.lock().await;
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
    let _serial = ONE_AT_A_TIME.lock().await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_in_flight_while_the_leaders_node_dies_are_confirmed_once_and_kept() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_everywhere(&cluster, 0, &[1, 2], "seed003.inflight").await;
    let (_connection, channel) = open(&cluster, 1).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    // 400 published without waiting; the leader's node dies after the first 200 are out,
    // so some of them are on their way to it, proposed, or uncommitted.
    const MESSAGES: usize = 400;
    let mut confirms = Vec::with_capacity(MESSAGES);
    for i in 0..MESSAGES {
        if i == MESSAGES / 2 {
            cluster.kill(0);
        }
        confirms.push(
            channel
                .basic_publish(
                    "".into(),
                    "seed003.inflight".into(),
                    BasicPublishOptions::default(),
                    format!("f{i}").as_bytes(),
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await
                .expect("publish"),
        );
    }
    let mut acked = 0;
    for (i, confirm) in confirms.into_iter().enumerate() {
        let confirmation = tokio::time::timeout(Duration::from_secs(30), confirm)
            .await
            .unwrap_or_else(|_| panic!("publish {i} was answered within 30 s"))
            .expect("a confirm");
        if confirmation.is_ack() {
            acked += 1;
        }
    }
    assert_eq!(
        acked, MESSAGES,
        "every publish is confirmed once a new leader has it"
    );
    let drained = drain(&cluster, 2, "seed003.inflight", MESSAGES).await;
    let bodies: HashSet<String> = drained.into_iter().map(|(body, _)| body).collect();
    let expected: HashSet<String> = (0..MESSAGES).map(|i| format!("f{i}")).collect();
    assert_eq!(bodies, expected, "every confirmed message once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_leader_confirms_nothing_and_the_majority_goes_on() {
    use warren_interop_tests::cluster::{node_host, Proxy, ProxyMode};
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    // Every link of node 0 through proxies: the one in front of node 0 for the others'
    // connections, and one in front of each of the others for node 0's own.
    let to_zero = Proxy::start(&node_host(0), cluster.cluster_addr(0)).await;
    let to_one = Proxy::start(&node_host(1), cluster.cluster_addr(1)).await;
    let to_two = Proxy::start(&node_host(2), cluster.cluster_addr(2)).await;
    cluster.route(1, 0, to_zero.addr());
    cluster.route(2, 0, to_zero.addr());
    cluster.route(0, 1, to_one.addr());
    cluster.route(0, 2, to_two.addr());
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_everywhere(&cluster, 0, &[1, 2], "seed003.partition").await;
    let (_minority_connection, minority) = open(&cluster, 0).await;
    minority
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    assert!(
        publish_confirmed(
            &minority,
            "seed003.partition",
            "before",
            Duration::from_secs(10)
        )
        .await,
        "confirmed before the partition"
    );

    // A silent partition: bytes vanish, connections stay open.
    for proxy in [&to_zero, &to_one, &to_two] {
        proxy.set(ProxyMode::Drop);
    }
    let cut_off = minority
        .basic_publish(
            "".into(),
            "seed003.partition".into(),
            BasicPublishOptions::default(),
            b"cut-off",
            BasicProperties::default().with_delivery_mode(2),
        )
        .await
        .expect("publish on the minority side");
    let (_majority_connection, majority) = open(&cluster, 1).await;
    majority
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    for i in 0..10 {
        assert!(
            publish_confirmed(
                &majority,
                "seed003.partition",
                &format!("majority-{i}"),
                Duration::from_secs(20)
            )
            .await,
            "the majority side confirms publish {i}"
        );
    }
    let mut cut_off = Box::pin(cut_off);
    assert!(
        tokio::time::timeout(Duration::from_secs(3), &mut cut_off)
            .await
            .is_err(),
        "the minority side confirmed nothing while cut off"
    );

    // Healed: the cut-off publish goes to the new leader and is confirmed once it commits.
    for proxy in [&to_zero, &to_one, &to_two] {
        proxy.set(ProxyMode::Pass);
    }
    let confirmation = tokio::time::timeout(Duration::from_secs(30), cut_off)
        .await
        .expect("the cut-off publish is answered after the heal")
        .expect("a confirm");
    assert!(confirmation.is_ack(), "confirmed once committed");
    let drained = drain(&cluster, 2, "seed003.partition", 12).await;
    let mut bodies: Vec<String> = drained.into_iter().map(|(body, _)| body).collect();
    bodies.sort();
    let mut expected: Vec<String> = (0..10).map(|i| format!("majority-{i}")).collect();
    expected.extend(["before".to_string(), "cut-off".to_string()]);
    expected.sort();
    assert_eq!(bodies, expected, "everything confirmed, once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_queue_deleted_and_declared_again_starts_empty_on_every_node() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    for round in 0..2 {
        declare_everywhere(&cluster, 0, &[1, 2], "seed003.again").await;
        let (_connection, channel) = open(&cluster, 1).await;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm.select");
        let count = if round == 0 { 300 } else { 10 };
        for i in 0..count {
            assert!(
                publish_confirmed(
                    &channel,
                    "seed003.again",
                    &format!("r{round}-{i}"),
                    Duration::from_secs(10)
                )
                .await,
                "round {round}: publish {i} was confirmed"
            );
        }
        if round == 0 {
            channel
                .queue_delete("seed003.again".into(), Default::default())
                .await
                .expect("queue.delete");
        }
    }
    let drained = drain(&cluster, 2, "seed003.again", 10).await;
    let bodies: Vec<&str> = drained.iter().map(|(body, _)| body.as_str()).collect();
    let expected: Vec<String> = (0..10).map(|i| format!("r1-{i}")).collect();
    assert_eq!(bodies, expected, "only the second round's messages");
    let (_connection, channel) = open(&cluster, 0).await;
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let declared = channel
        .queue_declare("seed003.again".into(), passive, FieldTable::default())
        .await
        .expect("passive declare on node 0");
    assert_eq!(declared.message_count(), 0, "drained, as node 0 sees it");
}

/// An idle group's members sleep until a link changes (raft/src/driver.rs): the SIGKILL of
/// the leader's node after a quiet spell must still wake them at once, so a new leader
/// confirms within a few seconds, not after the members' 15 s idle look.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_idle_before_its_leaders_node_dies_elects_within_seconds() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_everywhere(&cluster, 0, &[1, 2], "idle.failover").await;
    let leader = leader_of(&cluster, 1, "idle.failover").await;
    let survivor = (leader + 1) % 3;
    let (_connection, channel) = open(&cluster, survivor).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    assert!(
        publish_confirmed(&channel, "idle.failover", "before", Duration::from_secs(10)).await,
        "a publish before the kill is confirmed"
    );
    // Long enough for every member to find its group settled and go idle.
    tokio::time::sleep(Duration::from_secs(4)).await;

    cluster.kill(leader);
    let killed = Instant::now();
    let mut attempts = 0;
    while !publish_confirmed(&channel, "idle.failover", "after", Duration::from_secs(2)).await {
        attempts += 1;
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "no confirm 20 s after the leader's node died ({attempts} attempts)"
        );
    }
    let took = killed.elapsed();
    eprintln!("first confirm {took:?} after the idle leader's node died");
    assert!(
        took < Duration::from_secs(10),
        "a new leader confirmed within 10 s of the kill, not after the idle members' 15 s look: {took:?}"
    );
    let (status, body) = cluster
        .api(survivor, "GET", "/api/queues/%2F/idle.failover", None)
        .await;
    assert_eq!(status, 200, "{body}");
    let killed_name = warren_interop_tests::cluster::node_name(leader);
    assert!(
        body["leader"].as_str().is_some_and(|l| l != killed_name),
        "another node leads: {body}"
    );
}
