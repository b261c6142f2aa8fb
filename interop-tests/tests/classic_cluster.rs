//! Classic queues on a cluster of three real `warren` processes on 127.0.0.1-3, through
//! lapin: a classic queue lives on the node that declared it, and clients on every other
//! node publish to it (confirmed once the home node has the message on disk), consume from
//! it with credit, get, requeue and acknowledge. A home node's SIGKILL cancels remote
//! consumers, nacks publishes and refuses consumes with RabbitMQ's text until it returns
//! with its messages; a consumer's node's SIGKILL returns what it held.
//!
//! Every wait is bounded; the tests run one at a time.

use std::time::{Duration, Instant};

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use warren_interop_tests::cluster::{node_name, TestCluster};

mod lapin_common;
mod mqtt5_common;
mod mqtt_common;

use lapin_common::amqp_error;

static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const FORM_LIMIT: Duration = Duration::from_secs(30);
const SPREAD_LIMIT: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(15);

async fn open(cluster: &TestCluster, node: usize) -> (Connection, Channel) {
    let url = cluster.amqp_url(node, "guest", "guest", "%2f");
    let connection = Connection::connect(&url, ConnectionProperties::default())
        .await
        .unwrap_or_else(|e| panic!("connects to node {node}: {e}"));
    let channel = connection.create_channel().await.expect("channel");
    (connection, channel)
}

/// Declares durable classic queue `name` on `home`, and waits until the other nodes know it.
async fn declare_on(cluster: &TestCluster, home: usize, others: &[usize], name: &str) {
    let (_connection, channel) = open(cluster, home).await;
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
    wait_known(cluster, home, others, name).await;
}

/// Waits until `others` list queue `name` with `home` as its node.
async fn wait_known(cluster: &TestCluster, home: usize, others: &[usize], name: &str) {
    for &other in others {
        let deadline = Instant::now() + SPREAD_LIMIT;
        loop {
            let (status, body) = cluster
                .api(other, "GET", &format!("/api/queues/%2F/{name}"), None)
                .await;
            if status == 200 {
                assert_eq!(body["node"], node_name(home), "the home node: {body}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "'{name}' did not reach node {other}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn properties(i: usize) -> BasicProperties {
    let mut headers = FieldTable::default();
    headers.insert(ShortString::from("n"), AMQPValue::LongLongInt(i as i64));
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type("text/plain".into())
        .with_headers(headers)
}

/// Publishes `count` persistent messages `{prefix}{i}` with confirms; returns how many
/// were acked (the rest nacked or unanswered within [`WAIT`]).
async fn publish_confirmed(channel: &Channel, queue: &str, prefix: &str, count: usize) -> usize {
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    let mut confirms = Vec::new();
    for i in 0..count {
        let confirm = channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions::default(),
                format!("{prefix}{i}").as_bytes(),
                properties(i),
            )
            .await
            .expect("basic.publish");
        confirms.push(confirm);
    }
    let mut acked = 0;
    for confirm in confirms {
        if let Ok(Ok(confirmation)) = tokio::time::timeout(WAIT, confirm).await {
            acked += usize::from(confirmation.is_ack());
        }
    }
    acked
}

/// The queue's `messages` on `node`'s API, once it equals `expected` (within [`WAIT`]).
async fn wait_for_depth(cluster: &TestCluster, node: usize, queue: &str, expected: u64) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, body) = cluster
            .api(node, "GET", &format!("/api/queues/%2F/{queue}"), None)
            .await;
        if body["messages"].as_u64() == Some(expected) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "'{queue}' on node {node} did not reach {expected} messages: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn next_delivery(consumer: &mut lapin::Consumer) -> lapin::message::Delivery {
    tokio::time::timeout(WAIT, consumer.next())
        .await
        .expect("a delivery in time")
        .expect("a delivery")
        .expect("a good delivery")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_queue_is_reached_from_every_node_with_confirms_credit_and_acks() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let started = Instant::now();
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    eprintln!("formed in {:?}", started.elapsed());
    declare_on(&cluster, 0, &[1, 2], "orders").await;
    eprintln!("declared at {:?}", started.elapsed());
    // A definitions export on another node has the queue, as its home exports it.
    for node in [0, 2] {
        let (status, definitions) = cluster.api(node, "GET", "/api/definitions", None).await;
        assert_eq!(status, 200);
        let queue = definitions["queues"]
            .as_array()
            .expect("queues")
            .iter()
            .find(|q| q["name"] == "orders")
            .cloned()
            .unwrap_or_else(|| panic!("node {node} exports 'orders': {definitions}"));
        assert_eq!(queue["durable"], true);
        assert_eq!(queue["type"], "classic");
        assert_eq!(queue["vhost"], "/");
    }

    // Published on node 1: every confirm is an ack, and the messages are at the home node.
    let (_publisher, channel) = open(&cluster, 1).await;
    assert_eq!(publish_confirmed(&channel, "orders", "o", 200).await, 200);
    eprintln!("published at {:?}", started.elapsed());
    wait_for_depth(&cluster, 0, "orders", 200).await;
    wait_for_depth(&cluster, 2, "orders", 200).await;

    // Consumed on node 2 with a prefetch of 50: in order, properties intact.
    let (_consumer_connection, consumer_channel) = open(&cluster, 2).await;
    consumer_channel
        .basic_qos(50, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut consumer = consumer_channel
        .basic_consume(
            "orders".into(),
            "remote".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("basic.consume on a node that is not the queue's home");
    // Every node lists the consumer once, as the node its channel is on (RabbitMQ's shape),
    // not as a connection-less consumer of the home node.
    for node in 0..3 {
        let (status, list) = cluster.api(node, "GET", "/api/consumers", None).await;
        assert_eq!(status, 200);
        let found: Vec<&serde_json::Value> = list
            .as_array()
            .expect("a list")
            .iter()
            .filter(|c| c["queue"]["name"] == "orders")
            .collect();
        assert_eq!(found.len(), 1, "node {node}'s /api/consumers: {list}");
        assert_eq!(found[0]["consumer_tag"], "remote");
        assert_eq!(found[0]["ack_required"], true);
        assert_eq!(found[0]["channel_details"]["node"], node_name(2));
        assert_eq!(found[0]["channel_details"]["user"], "guest");
    }
    // The first is refused with requeue: it comes back redelivered, first again.
    let first = next_delivery(&mut consumer).await;
    assert_eq!(first.data, b"o0");
    assert!(!first.redelivered);
    first
        .nack(BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        })
        .await
        .expect("basic.nack");
    let mut bodies = Vec::new();
    for i in 0..150 {
        let delivery = next_delivery(&mut consumer).await;
        let body = String::from_utf8(delivery.data.clone()).expect("text");
        if body == "o0" {
            assert!(delivery.redelivered, "the requeued message is redelivered");
        }
        let n = delivery
            .properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get("n").cloned());
        assert_eq!(
            n,
            Some(AMQPValue::LongLongInt(body[1..].parse().expect("a number"))),
            "headers travel with the message (delivery {i})"
        );
        assert_eq!(
            delivery
                .properties
                .content_type()
                .as_ref()
                .map(|c| c.as_str()),
            Some("text/plain")
        );
        assert_eq!(delivery.properties.delivery_mode(), &Some(2));
        bodies.push(body);
        delivery
            .ack(BasicAckOptions::default())
            .await
            .expect("basic.ack");
    }
    // The requeued one comes back once, behind what the consumer's credit window had in
    // flight; the rest arrive in queue order.
    assert_eq!(
        bodies.iter().filter(|b| *b == "o0").count(),
        1,
        "{bodies:?}"
    );
    let rest: Vec<&String> = bodies.iter().filter(|b| *b != "o0").collect();
    let expected: Vec<String> = (1..150).map(|i| format!("o{i}")).collect();
    assert_eq!(rest, expected.iter().collect::<Vec<_>>(), "in queue order");
    eprintln!("consumed at {:?}", started.elapsed());
    consumer_channel.close(200, "done".into()).await.ok();
    wait_for_depth(&cluster, 0, "orders", 50).await;

    // basic.get on node 1: one message, acknowledged through node 1.
    let got = channel
        .basic_get("orders".into(), BasicGetOptions::default())
        .await
        .expect("basic.get")
        .expect("a message");
    assert_eq!(got.delivery.data, b"o150");
    assert_eq!(got.message_count, 49);
    got.delivery
        .ack(BasicAckOptions::default())
        .await
        .expect("basic.ack");
    wait_for_depth(&cluster, 0, "orders", 49).await;

    // Purged through node 2's HTTP API.
    let (status, _) = cluster
        .api(2, "DELETE", "/api/queues/%2F/orders/contents", None)
        .await;
    assert_eq!(status, 204);
    wait_for_depth(&cluster, 0, "orders", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_a_home_node_is_down_its_queue_refuses_and_it_returns_with_its_messages() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_on(&cluster, 0, &[1, 2], "homed").await;
    let (_publisher, channel) = open(&cluster, 1).await;
    assert_eq!(publish_confirmed(&channel, "homed", "h", 10).await, 10);

    // A consumer on node 2 holds one delivery unacknowledged.
    let (_consumer_connection, consumer_channel) = open(&cluster, 2).await;
    consumer_channel
        .basic_qos(1, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut consumer = consumer_channel
        .basic_consume(
            "homed".into(),
            "held".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("basic.consume");
    assert_eq!(next_delivery(&mut consumer).await.data, b"h0");

    cluster.kill(0);
    // The remote consumer is cancelled (basic.cancel: lapin ends its stream).
    let ended = tokio::time::timeout(WAIT, async {
        while let Some(next) = consumer.next().await {
            if next.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the consumer was cancelled when its queue's node went down"
    );

    // A publish is nacked, not confirmed.
    let deadline = Instant::now() + WAIT;
    loop {
        let (_connection, probe) = open(&cluster, 1).await;
        if publish_confirmed(&probe, "homed", "lost", 1).await == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "publishes were still confirmed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A consume is refused with RabbitMQ's 404.
    let (_connection, refused) = open(&cluster, 1).await;
    let error = refused
        .basic_consume(
            "homed".into(),
            "refused".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect_err("consume is refused while the home node is down");
    let (code, text) = amqp_error(&error);
    assert_eq!(code, 404, "{text}");
    assert!(
        text.contains(&format!("home node '{}'", node_name(0)))
            && text.contains("is down or inaccessible"),
        "{text}"
    );

    // The home node returns with all ten confirmed messages (h0 redelivered), and node 1
    // reaches them again.
    cluster.start(0);
    cluster.wait_formed(3, FORM_LIMIT).await;
    let deadline = Instant::now() + WAIT;
    let (_connection, channel) = loop {
        let (connection, channel) = open(&cluster, 1).await;
        channel
            .basic_qos(20, BasicQosOptions::default())
            .await
            .expect("basic.qos");
        match channel
            .basic_consume(
                "homed".into(),
                "after".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
        {
            Ok(consumer) => break ((connection, consumer), channel),
            Err(error) => {
                assert!(
                    Instant::now() < deadline,
                    "consume after the restart: {error}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let (_keep, mut consumer) = _connection;
    let mut bodies = Vec::new();
    for _ in 0..10 {
        let delivery = next_delivery(&mut consumer).await;
        bodies.push(String::from_utf8(delivery.data.clone()).expect("text"));
        delivery
            .ack(BasicAckOptions::default())
            .await
            .expect("basic.ack");
    }
    bodies.sort_by_key(|b| b[1..].parse::<u32>().unwrap_or(u32::MAX));
    let expected: Vec<String> = (0..10).map(|i| format!("h{i}")).collect();
    assert_eq!(
        bodies, expected,
        "every confirmed message survived its home node's SIGKILL"
    );
    drop(channel);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_killed_consumers_node_held_goes_back_to_the_home_queue_redelivered() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_on(&cluster, 0, &[1, 2], "work").await;
    let (_publisher, channel) = open(&cluster, 0).await;
    assert_eq!(publish_confirmed(&channel, "work", "w", 20).await, 20);

    let (_holder, holder_channel) = open(&cluster, 2).await;
    holder_channel
        .basic_qos(5, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut consumer = holder_channel
        .basic_consume(
            "work".into(),
            "holder".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("basic.consume");
    for i in 0..5 {
        assert_eq!(
            next_delivery(&mut consumer).await.data,
            format!("w{i}").into_bytes()
        );
    }
    wait_for_depth(&cluster, 0, "work", 20).await;
    cluster.kill(2);

    let (_connection, drain_channel) = open(&cluster, 1).await;
    drain_channel
        .basic_qos(50, BasicQosOptions::default())
        .await
        .expect("basic.qos");
    let mut drain = drain_channel
        .basic_consume(
            "work".into(),
            "drain".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("basic.consume");
    let mut drained = Vec::new();
    for _ in 0..20 {
        let delivery = next_delivery(&mut drain).await;
        drained.push((
            String::from_utf8(delivery.data.clone()).expect("text"),
            delivery.redelivered,
        ));
        delivery
            .ack(BasicAckOptions::default())
            .await
            .expect("basic.ack");
    }
    drained.sort_by_key(|(b, _)| b[1..].parse::<u32>().unwrap_or(u32::MAX));
    let bodies: Vec<&str> = drained.iter().map(|(b, _)| b.as_str()).collect();
    let expected: Vec<String> = (0..20).map(|i| format!("w{i}")).collect();
    assert_eq!(bodies, expected, "each message once");
    // The five its client held come back redelivered. So may those the home node had sent
    // ahead within the consumer's credit window (w5-w9): the dead node may have passed
    // them on, so they are marked as RabbitMQ marks anything a lost channel had.
    for (body, redelivered) in &drained[..5] {
        assert!(redelivered, "{body} was held by the dead node's client");
    }
    for (body, redelivered) in &drained[10..] {
        assert!(!redelivered, "{body} never left the home node");
    }
    wait_for_depth(&cluster, 0, "work", 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_and_amqp_1_0_clients_on_other_nodes_reach_a_classic_queue() {
    use fe2o3_amqp::types::messaging::{Body, Outcome};
    use fe2o3_amqp::types::primitives::Value;
    use warren_interop_tests::stomp::StompClient;

    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    declare_on(&cluster, 0, &[1, 2], "mixed").await;

    // STOMP on node 1: each SEND's RECEIPT comes once the home node has the message.
    let mut stomp = StompClient::connect(cluster.node(1).listener_addr("stomp"), "1.2").await;
    for i in 0..3 {
        stomp
            .send(
                "/amq/queue/mixed",
                &format!("stomp {i}"),
                &[("persistent", "true")],
            )
            .await;
    }
    wait_for_depth(&cluster, 0, "mixed", 3).await;

    // AMQP 1.0 on node 2: a receiver gets them in order and accepts them; a sender's
    // message is accepted once the home node has it.
    let url = format!("amqp://guest:guest@{}", cluster.node(2).addr());
    let mut connection = fe2o3_amqp::Connection::open("classic-cluster", url.as_str())
        .await
        .expect("AMQP 1.0 connection to node 2");
    let mut session = fe2o3_amqp::Session::begin(&mut connection)
        .await
        .expect("session");
    let mut receiver = fe2o3_amqp::Receiver::attach(&mut session, "r", "/queues/mixed")
        .await
        .expect("receiver attaches to a queue homed on node 0");
    for i in 0..3 {
        let delivery = tokio::time::timeout(WAIT, receiver.recv::<Body<Value>>())
            .await
            .expect("a transfer in time")
            .expect("a transfer");
        // A STOMP body reaches AMQP 1.0 as a data section.
        let bytes: Vec<u8> = match delivery.body() {
            Body::Data(sections) => sections.iter().flat_map(|d| d.0.to_vec()).collect(),
            other => panic!("a data section: {other:?}"),
        };
        assert_eq!(bytes, format!("stomp {i}").into_bytes());
        receiver.accept(&delivery).await.expect("accepted");
    }
    receiver.close().await.expect("detach");
    wait_for_depth(&cluster, 0, "mixed", 0).await;
    let mut sender = fe2o3_amqp::Sender::attach(&mut session, "s", "/queues/mixed")
        .await
        .expect("sender attaches");
    let outcome = sender.send("from amqp 1.0").await.expect("sent");
    assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    wait_for_depth(&cluster, 0, "mixed", 1).await;

    // STOMP on node 1 receives it and acknowledges it there.
    stomp
        .subscribe("/amq/queue/mixed", "sub", "client-individual", &[])
        .await;
    let message = stomp.expect_message().await;
    assert!(
        message.text().contains("from amqp 1.0"),
        "{}",
        message.text()
    );
    let (header, value) = stomp.ack_headers(&message);
    let value = value.to_string();
    stomp.request("ACK", &[(header, value.as_str())]).await;
    wait_for_depth(&cluster, 0, "mixed", 0).await;
    sender.close().await.ok();
    session.end().await.ok();
    connection.close().await.ok();
}

/// A publish the home node refuses (`x-overflow = reject-publish` on a full queue) is
/// refused to the publisher on the forwarding node in each protocol's way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_the_home_node_refuses_is_nacked_on_the_forwarding_node_in_every_protocol() {
    use rumqttc::v5::mqttbytes::v5::PubAckReason;
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::{ConnectionError, StateError};
    use warren_interop_tests::stomp::StompClient;

    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    {
        let (_connection, channel) = open(&cluster, 0).await;
        let mut arguments = FieldTable::default();
        arguments.insert(ShortString::from("x-max-length"), AMQPValue::LongLongInt(1));
        arguments.insert(
            ShortString::from("x-overflow"),
            AMQPValue::LongString("reject-publish".into()),
        );
        channel
            .queue_declare(
                "bounded".into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                arguments,
            )
            .await
            .expect("declares the bounded queue");
        channel
            .queue_bind(
                "bounded".into(),
                "amq.topic".into(),
                "bounded.t".into(),
                lapin::options::QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("binds it");
    }
    wait_known(&cluster, 0, &[1], "bounded").await;

    // AMQP 0-9-1 on node 1: the first fits, the next two are nacked.
    let (_connection, channel) = open(&cluster, 1).await;
    assert_eq!(publish_confirmed(&channel, "bounded", "b", 1).await, 1);
    assert_eq!(
        publish_confirmed(&channel, "bounded", "over", 2).await,
        0,
        "refused at the home node: nacked"
    );
    wait_for_depth(&cluster, 0, "bounded", 1).await;

    // MQTT 5 on node 1: PUBACK with reason 0x80.
    let mut options = mqtt5_common::options5(cluster.node(1).listener_addr("mqtt"), "refused5");
    options.set_clean_start(true);
    let mut mqtt = mqtt5_common::connect5(options).await;
    mqtt.publish("bounded/t", QoS::AtLeastOnce, b"over").await;
    // rumqttc ends its event loop on a refusing PUBACK, with the reason.
    match tokio::time::timeout(WAIT, mqtt.ended)
        .await
        .expect("the refusal ends rumqttc's event loop")
        .expect("event loop task")
    {
        ConnectionError::MqttState(StateError::PubAckFail { reason }) => {
            assert_eq!(reason, PubAckReason::UnspecifiedError)
        }
        other => panic!("a refusing PUBACK: {other:?}"),
    }

    // STOMP on node 1: an ERROR carrying the SEND's receipt id instead of a RECEIPT.
    let mut stomp = StompClient::connect(cluster.node(1).listener_addr("stomp"), "1.2").await;
    stomp
        .write_frame(
            "SEND",
            &[("destination", "/amq/queue/bounded"), ("receipt", "r-over")],
            b"over",
        )
        .await;
    let error = stomp.expect_error().await;
    assert_eq!(error.header("message"), Some("message not taken"));
    assert_eq!(error.header("receipt-id"), Some("r-over"));
    wait_for_depth(&cluster, 0, "bounded", 1).await;
}

/// Waits until `node` lists a binding of exchange `source` to queue `queue`.
async fn wait_bound(cluster: &TestCluster, node: usize, source: &str, queue: &str) {
    let deadline = Instant::now() + SPREAD_LIMIT;
    loop {
        let (_, list) = cluster
            .api(
                node,
                "GET",
                &format!("/api/exchanges/%2F/{source}/bindings/source"),
                None,
            )
            .await;
        if list
            .as_array()
            .is_some_and(|l| l.iter().any(|b| b["destination"] == queue))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {node} never listed {source} -> {queue}: {list}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_dead_lettering_and_alternate_exchanges_reach_queues_on_other_nodes() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut cluster = TestCluster::new(3);
    cluster.start_all();
    cluster.wait_formed(3, FORM_LIMIT).await;
    // The dead-letter queue and the alternate exchange's queue live on node 2; the queue
    // whose messages expire and both exchanges were made through node 1.
    declare_on(&cluster, 1, &[0, 2], "dead-letters").await;
    declare_on(&cluster, 1, &[0, 2], "unrouted").await;
    let (_declarer, channel) = open(&cluster, 0).await;
    let mut arguments = FieldTable::default();
    arguments.insert("x-message-ttl".into(), AMQPValue::LongInt(200));
    arguments.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString("".into()),
    );
    arguments.insert(
        "x-dead-letter-routing-key".into(),
        AMQPValue::LongString("dead-letters".into()),
    );
    channel
        .queue_declare(
            "short-lived".into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            arguments,
        )
        .await
        .expect("declares the queue with a TTL");
    let durable = lapin::options::ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .exchange_declare(
            "orders-ae".into(),
            lapin::ExchangeKind::Fanout,
            durable,
            FieldTable::default(),
        )
        .await
        .expect("declares the alternate exchange");
    let mut with_ae = FieldTable::default();
    with_ae.insert(
        "alternate-exchange".into(),
        AMQPValue::LongString("orders-ae".into()),
    );
    channel
        .exchange_declare(
            "orders-x".into(),
            lapin::ExchangeKind::Direct,
            durable,
            with_ae,
        )
        .await
        .expect("declares the exchange");
    channel
        .queue_bind(
            "unrouted".into(),
            "orders-ae".into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        )
        .await
        .expect("binds the alternate exchange's queue");
    wait_known(&cluster, 0, &[2], "short-lived").await;
    wait_bound(&cluster, 2, "orders-ae", "unrouted").await;

    // Published through node 3: five expire at node 1 and are dead-lettered to node 2;
    // three match no binding of orders-x and go to node 2's queue through orders-ae.
    let (_publisher, publishing) = open(&cluster, 2).await;
    assert_eq!(
        publish_confirmed(&publishing, "short-lived", "t", 5).await,
        5
    );
    for i in 0..3 {
        let confirm = publishing
            .basic_publish(
                "orders-x".into(),
                "no-such-key".into(),
                BasicPublishOptions::default(),
                format!("a{i}").as_bytes(),
                properties(i),
            )
            .await
            .expect("basic.publish");
        assert!(
            tokio::time::timeout(WAIT, confirm)
                .await
                .expect("confirmed in time")
                .expect("a confirm")
                .is_ack(),
            "an alternate-exchange publish is acked"
        );
    }
    wait_for_depth(&cluster, 1, "dead-letters", 5).await;
    wait_for_depth(&cluster, 1, "unrouted", 3).await;
    wait_for_depth(&cluster, 0, "short-lived", 0).await;

    // Taken on node 3: the dead letters carry x-death naming the expired queue.
    for i in 0..5 {
        let got = publishing
            .basic_get("dead-letters".into(), BasicGetOptions::default())
            .await
            .expect("basic.get")
            .expect("a dead letter");
        assert_eq!(got.delivery.data, format!("t{i}").as_bytes());
        let headers = got.delivery.properties.headers().clone().expect("headers");
        let Some(AMQPValue::FieldArray(deaths)) = headers.inner().get("x-death").cloned() else {
            panic!("x-death: {headers:?}");
        };
        let Some(AMQPValue::FieldTable(death)) = deaths.as_slice().first().cloned() else {
            panic!("an x-death entry: {deaths:?}");
        };
        assert_eq!(
            death.inner().get("reason"),
            Some(&AMQPValue::LongString("expired".into()))
        );
        assert_eq!(
            death.inner().get("queue"),
            Some(&AMQPValue::LongString("short-lived".into()))
        );
        got.delivery
            .ack(BasicAckOptions::default())
            .await
            .expect("basic.ack");
    }
    let got = publishing
        .basic_get("unrouted".into(), BasicGetOptions::default())
        .await
        .expect("basic.get")
        .expect("an alternate-exchange message");
    assert_eq!(got.delivery.data, b"a0");
    assert_eq!(got.message_count, 2);

    // x-expires: the home node (1) deletes the unused queue, and the cluster with it: the
    // other nodes forget it, and a redeclaration through node 3 makes a new queue there.
    let mut expiring = FieldTable::default();
    expiring.insert("x-expires".into(), AMQPValue::LongInt(1_000));
    channel
        .queue_declare(
            "expiring".into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            expiring.clone(),
        )
        .await
        .expect("declares a queue with x-expires");
    wait_known(&cluster, 0, &[1, 2], "expiring").await;
    for node in 0..3 {
        let deadline = Instant::now() + WAIT;
        loop {
            let (status, _) = cluster
                .api(node, "GET", "/api/queues/%2F/expiring", None)
                .await;
            if status == 404 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the expired queue is still on node {node}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let (_redeclarer, redeclaring) = open(&cluster, 2).await;
    let redeclared = redeclaring
        .queue_declare(
            "expiring".into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            expiring,
        )
        .await
        .expect("redeclares the expired queue");
    assert_eq!(redeclared.message_count(), 0);
    wait_known(&cluster, 2, &[0, 1], "expiring").await;

    // The old home restarted (SIGKILL) replays its log: its expired copy stays gone, and it
    // knows the queue homed on node 3.
    drop(channel);
    drop(_declarer);
    cluster.kill(0);
    cluster.start(0);
    cluster.wait_formed(3, FORM_LIMIT).await;
    wait_known(&cluster, 2, &[0], "expiring").await;
}
