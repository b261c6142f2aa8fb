//! Streams replicated on a cluster of three real `warren` processes on 127.0.0.1-3, through
//! lapin (AMQP 0-9-1 with `x-queue-type: stream`): a stream declared on one node leads there
//! and is copied to the other two; publishes are confirmed only once a majority has them on
//! disk; consumers on replicas read their node's copy; after SIGKILL of the leader's node a
//! replica takes over with no confirmed message lost, consumers resume, and the killed node
//! comes back as a replica that catches up.
//!
//! Every wait is bounded; one test at a time.

use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, Consumer};
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use rabbitmq_stream_client::Environment;
use warren_interop_tests::cluster::TestCluster;

mod lapin_common;
mod quorum_common;

use lapin_common::{args, text};
use quorum_common::{open, wait_declared, FORM_LIMIT, SPREAD_LIMIT};

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a failover may take: the failure detector calls the node down, the metadata
/// leader asks the members and commits the new leader (an election of the metadata group
/// too when the killed node led it).
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

async fn declare_stream(cluster: &TestCluster, node: usize, others: &[usize], name: &str) {
    let (_connection, channel) = open(cluster, node).await;
    channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            args(&[("x-queue-type", text("stream"))]),
        )
        .await
        .expect("declares the stream");
    wait_declared(cluster, others, name).await;
}

async fn confirming(cluster: &TestCluster, node: usize) -> (Connection, Channel) {
    let (connection, channel) = open(cluster, node).await;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    (connection, channel)
}

/// Publishes `bodies` at once (pipelined) and waits at most `bound` for each confirm:
/// `Some(true)` per ack, `Some(false)` per nack, `None` when none came in time.
async fn publish_all(
    channel: &Channel,
    stream: &str,
    bodies: &[String],
    bound: Duration,
) -> Vec<Option<bool>> {
    let mut confirms = Vec::with_capacity(bodies.len());
    for body in bodies {
        let confirm = channel
            .basic_publish(
                "".into(),
                stream.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .expect("publish");
        confirms.push(confirm);
    }
    let deadline = tokio::time::Instant::now() + bound;
    let mut outcomes = Vec::with_capacity(confirms.len());
    for confirm in confirms {
        outcomes.push(match tokio::time::timeout_at(deadline, confirm).await {
            Ok(Ok(confirmation)) => Some(confirmation.is_ack()),
            _ => None,
        });
    }
    outcomes
}

async fn consume_from_first(channel: &Channel, stream: &str, tag: &str) -> Consumer {
    channel
        .basic_qos(200, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    channel
        .basic_consume(
            stream.into(),
            tag.into(),
            BasicConsumeOptions::default(),
            args(&[("x-stream-offset", text("first"))]),
        )
        .await
        .expect("basic.consume")
}

/// The next `count` bodies of `consumer`, acknowledged, within `bound`.
async fn receive(consumer: &mut Consumer, count: usize, bound: Duration) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + bound;
    let mut bodies = Vec::with_capacity(count);
    while bodies.len() < count {
        let Ok(Some(Ok(delivery))) = tokio::time::timeout_at(deadline, consumer.next()).await
        else {
            panic!(
                "received {} of {count} messages within {bound:?}",
                bodies.len()
            );
        };
        bodies.push(String::from_utf8_lossy(&delivery.data).into_owned());
        delivery
            .ack(BasicAckOptions::default())
            .await
            .expect("basic.ack");
    }
    bodies
}

/// The stream's `/api/queues` entry on `node` once its placement has reached `epoch`.
async fn placement_of(
    cluster: &TestCluster,
    node: usize,
    stream: &str,
    epoch: u64,
) -> serde_json::Value {
    let path = format!("/api/queues/%2F/{stream}");
    let deadline = Instant::now() + SPREAD_LIMIT;
    loop {
        let (status, body) = cluster.api(node, "GET", &path, None).await;
        if status == 200 && body["epoch"].as_u64() == Some(epoch) {
            assert_eq!(body["type"], "stream");
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "stream '{stream}' did not reach epoch {epoch} on node {node}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn numbered(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

fn placement_lines(cluster: &TestCluster, node: usize) -> Vec<String> {
    cluster
        .node(node)
        .log()
        .into_iter()
        .filter(|line| line.contains("stream") || line.contains("ERROR"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_leader_killed_a_replica_takes_over_no_confirmed_message_lost_consumers_resume()
{
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_stream(&cluster, 0, &[1, 2], "events").await;
    declare_stream(&cluster, 0, &[1, 2], "timing").await;
    let placed = placement_of(&cluster, 1, "events", 1).await;
    assert_eq!(
        placed["leader"], "warren@127.0.0.1",
        "the home node leads: {placed}"
    );
    assert_eq!(
        placed["members"].as_array().map(Vec::len),
        Some(3),
        "{placed}"
    );

    // Confirmed on the leader (node 0, the stream's home) once a majority has each chunk.
    let (_leader_connection, leader) = confirming(&cluster, 0).await;
    let first = numbered("a", 0..1000);
    let started = Instant::now();
    let outcomes = publish_all(&leader, "events", &first, Duration::from_secs(30)).await;
    assert!(
        outcomes.iter().all(|o| *o == Some(true)),
        "every publish on the leader is confirmed: {:?}; node 0: {:#?}",
        outcomes.iter().filter(|o| **o != Some(true)).count(),
        placement_lines(&cluster, 0)
    );
    eprintln!(
        "1,000 confirmed through 3 members in {:?}",
        started.elapsed()
    );
    let started = Instant::now();
    for i in 0..100 {
        let one = publish_all(
            &leader,
            "timing",
            &[format!("t{i}")],
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(one, vec![Some(true)]);
    }
    eprintln!(
        "100 confirmed one at a time through 3 members: {:?} each",
        started.elapsed() / 100
    );

    // Each replica's node serves a consumer from its own copy.
    let (_c1, on_1) = open(&cluster, 1).await;
    let (_c2, on_2) = open(&cluster, 2).await;
    let mut reader_1 = consume_from_first(&on_1, "events", "r1").await;
    let mut reader_2 = consume_from_first(&on_2, "events", "r2").await;
    assert_eq!(
        receive(&mut reader_1, 1000, Duration::from_secs(20)).await,
        first
    );
    assert_eq!(
        receive(&mut reader_2, 1000, Duration::from_secs(20)).await,
        first
    );

    // A replica refuses publishes (nack): its log holds only the leader's chunks.
    let (_c3, replica) = confirming(&cluster, 1).await;
    let refused = publish_all(
        &replica,
        "events",
        &["x".to_string()],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(refused, vec![Some(false)], "a replica nacks");

    // SIGKILL the leader's node; a survivor takes over.
    cluster.kill(0);
    let deadline = Instant::now() + FAILOVER_LIMIT;
    let new_leader = 'found: loop {
        for node in [1, 2] {
            let (_connection, channel) = confirming(&cluster, node).await;
            let probe = publish_all(
                &channel,
                "events",
                &[format!("probe{node}")],
                Duration::from_secs(5),
            )
            .await;
            if probe == vec![Some(true)] {
                break 'found node;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no survivor took the stream over within {FAILOVER_LIMIT:?}; node 1: {:#?}; node 2: {:#?}",
            placement_lines(&cluster, 1),
            placement_lines(&cluster, 2)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let other = 3 - new_leader;
    eprintln!("node {new_leader} leads the stream now");
    let placed = placement_of(&cluster, other, "events", 2).await;
    assert_eq!(
        placed["leader"].as_str(),
        Some(warren_interop_tests::cluster::node_name(new_leader).as_str()),
        "{placed}"
    );
    let (_c4, leader) = confirming(&cluster, new_leader).await;
    let second = numbered("b", 0..500);
    let outcomes = publish_all(&leader, "events", &second, Duration::from_secs(30)).await;
    assert!(
        outcomes.iter().all(|o| *o == Some(true)),
        "every publish on the new leader is confirmed (2 of 3 members up)"
    );

    // The consumers attached before the kill resume: the probe, then the new messages.
    let mut expected_after = vec![format!("probe{new_leader}")];
    expected_after.extend(second.iter().cloned());
    for reader in [&mut reader_1, &mut reader_2] {
        let got = receive(reader, 501, Duration::from_secs(30)).await;
        assert_eq!(
            got.iter().filter(|b| b.starts_with("probe")).count(),
            1,
            "one probe was taken"
        );
        assert_eq!(got, expected_after);
    }

    // Everything confirmed is there from `first` on the other survivor, once each.
    let (_c5, fresh) = open(&cluster, other).await;
    let mut from_first = consume_from_first(&fresh, "events", "again").await;
    let mut expected = first.clone();
    expected.extend(expected_after.iter().cloned());
    assert_eq!(
        receive(&mut from_first, expected.len(), Duration::from_secs(30)).await,
        expected
    );

    // The killed node comes back as a replica and catches up: its consumer reads it all.
    cluster.start(0);
    let deadline = Instant::now() + FAILOVER_LIMIT;
    let mut caught_up = false;
    while Instant::now() < deadline && !caught_up {
        let Ok(connection) = lapin::Connection::connect(
            &cluster.amqp_url(0, "guest", "guest", "%2f"),
            lapin::ConnectionProperties::default(),
        )
        .await
        else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let channel = connection.create_channel().await.expect("channel");
        let mut reader = consume_from_first(&channel, "events", "back").await;
        let mut got = Vec::new();
        let window = tokio::time::Instant::now() + Duration::from_secs(2);
        while got.len() < expected.len() {
            match tokio::time::timeout_at(window, reader.next()).await {
                Ok(Some(Ok(delivery))) => {
                    got.push(String::from_utf8_lossy(&delivery.data).into_owned());
                    let _ = delivery.ack(BasicAckOptions::default()).await;
                }
                _ => break,
            }
        }
        caught_up = got == expected;
        assert!(
            expected.starts_with(&got),
            "the restarted node's copy is a prefix of the confirmed messages"
        );
    }
    assert!(
        caught_up,
        "node 0 caught up within {FAILOVER_LIMIT:?}: {:#?}",
        placement_lines(&cluster, 0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_is_confirmed_only_once_a_majority_has_it_and_a_restarted_replica_catches_up() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_stream(&cluster, 0, &[1, 2], "ledger").await;
    // x-initial-cluster-size sets how many members a stream has.
    {
        let (_connection, channel) = open(&cluster, 2).await;
        channel
            .queue_declare(
                "pair".into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                args(&[
                    ("x-queue-type", text("stream")),
                    (
                        "x-initial-cluster-size",
                        lapin::types::AMQPValue::LongInt(2),
                    ),
                ]),
            )
            .await
            .expect("declares a stream of 2 members");
        let placed = placement_of(&cluster, 0, "pair", 1).await;
        assert_eq!(placed["leader"], "warren@127.0.0.3", "{placed}");
        assert_eq!(
            placed["members"],
            serde_json::json!(["warren@127.0.0.3", "warren@127.0.0.1"]),
            "{placed}"
        );
    }
    let (_connection, leader) = confirming(&cluster, 0).await;
    let before = numbered("m", 0..200);
    let outcomes = publish_all(&leader, "ledger", &before, Duration::from_secs(30)).await;
    assert!(
        outcomes.iter().all(|o| *o == Some(true)),
        "3 of 3 up: confirmed"
    );

    // With both replicas down the leader alone is no majority: nothing is confirmed.
    cluster.kill(1);
    cluster.kill(2);
    let pending: Vec<String> = numbered("n", 0..50);
    let publishes = {
        let leader = leader.clone();
        let pending = pending.clone();
        tokio::spawn(async move {
            publish_all(&leader, "ledger", &pending, Duration::from_secs(60)).await
        })
    };
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !publishes.is_finished(),
        "no confirm with 1 of 3 members up"
    );

    // One replica restarts, catches up from its tail, and the held publishes are confirmed.
    cluster.start(1);
    let outcomes = publishes.await.expect("publishing task");
    assert!(
        outcomes.iter().all(|o| *o == Some(true)),
        "confirmed once a replica is back: {outcomes:?}; node 1: {:#?}",
        placement_lines(&cluster, 1)
    );
    let (_c, on_1) = open(&cluster, 1).await;
    let mut reader = consume_from_first(&on_1, "ledger", "r").await;
    let mut expected = before.clone();
    expected.extend(pending.iter().cloned());
    assert_eq!(
        receive(&mut reader, expected.len(), Duration::from_secs(30)).await,
        expected
    );
}

async fn stream_environment(cluster: &TestCluster, node: usize) -> Environment {
    let addr = cluster.node(node).listener_addr("stream");
    Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .username("guest")
        .password("guest")
        .build()
        .await
        .expect("connects to the stream listener")
}

/// Publishes `bodies` through a producer `environment` builds (it connects to the leader
/// Metadata names); true when every one was confirmed.
async fn produce(environment: &Environment, stream: &str, bodies: &[String]) -> bool {
    let Ok(producer) = environment.producer().build(stream).await else {
        return false;
    };
    for body in bodies {
        let sent = tokio::time::timeout(
            Duration::from_secs(10),
            producer.send_with_confirm(Message::builder().body(body.as_bytes().to_vec()).build()),
        )
        .await;
        if !matches!(sent, Ok(Ok(status)) if status.confirmed()) {
            let _ = producer.close().await;
            return false;
        }
    }
    producer.close().await.is_ok()
}

async fn consume_all(environment: &Environment, stream: &str, count: usize) -> Vec<String> {
    let mut consumer = environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build(stream)
        .await
        .expect("consumer");
    let mut bodies = Vec::with_capacity(count);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while bodies.len() < count {
        let Ok(Some(Ok(delivery))) = tokio::time::timeout_at(deadline, consumer.next()).await
        else {
            panic!("consumed {} of {count}: {bodies:?}", bodies.len());
        };
        bodies.push(
            String::from_utf8_lossy(delivery.message().data().unwrap_or_default()).into_owned(),
        );
    }
    let _ = consumer.handle().close().await;
    bodies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_created_through_the_stream_protocol_is_replicated_and_clients_follow_metadata_to_its_leader(
) {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    // Created through the stream protocol on node 0, which leads it.
    stream_environment(&cluster, 0)
        .await
        .stream_creator()
        .create("feed")
        .await
        .expect("creates the stream");
    wait_declared(&cluster, &[1, 2], "feed").await;

    // A client of node 1 (a replica): its producer goes to the leader Metadata names.
    let environment = stream_environment(&cluster, 1).await;
    let first = numbered("s", 0..100);
    let deadline = Instant::now() + SPREAD_LIMIT;
    while !produce(&environment, "feed", &first[..1]).await {
        assert!(
            Instant::now() < deadline,
            "a producer through node 1 reached the leader"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        produce(&environment, "feed", &first[1..]).await,
        "all confirmed"
    );
    assert_eq!(consume_all(&environment, "feed", 100).await, first);

    // The leader's node is killed: a new producer finds the new leader and is confirmed.
    cluster.kill(0);
    let second = numbered("t", 0..50);
    let deadline = Instant::now() + FAILOVER_LIMIT;
    let mut survivors = [1, 2].into_iter().cycle();
    loop {
        let node = survivors.next().unwrap_or(1);
        let environment = stream_environment(&cluster, node).await;
        if produce(&environment, "feed", &second[..1]).await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no producer reached a new leader within {FAILOVER_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let environment = stream_environment(&cluster, 2).await;
    assert!(
        produce(&environment, "feed", &second[1..]).await,
        "all confirmed"
    );
    let mut expected = first.clone();
    expected.extend(second.iter().cloned());
    assert_eq!(consume_all(&environment, "feed", 150).await, expected);

    // Deleted through the stream protocol on one node: gone from every running node.
    environment
        .delete_stream("feed")
        .await
        .expect("deletes the stream");
    for node in [1, 2] {
        let deadline = Instant::now() + SPREAD_LIMIT;
        loop {
            let (_connection, channel) = open(&cluster, node).await;
            let passive = QueueDeclareOptions {
                passive: true,
                ..QueueDeclareOptions::default()
            };
            if channel
                .queue_declare("feed".into(), passive, FieldTable::default())
                .await
                .is_err()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "node {node} still has the stream"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
