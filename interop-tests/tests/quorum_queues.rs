//! Quorum queues on a single node through lapin: declaration with RabbitMQ 4.x's refusals
//! (exclusive, non-durable, auto-delete, bad arguments, global QoS), confirms after commit,
//! consume with manual acks and requeues (redelivered flag, `x-delivery-count`), the
//! delivery limit dead-lettering with reason `delivery_limit`, and a SIGKILL of the real
//! `warren` process losing no confirmed message and redelivering the unacknowledged ones.

use std::path::Path;
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicNackOptions, BasicPublishOptions,
    BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use warren_interop_tests::process::WarrenProcess;
use warren_interop_tests::{TempDir, TestBroker};

mod lapin_common;

use lapin_common::{amqp_error, args, deaths, text};

const LIMIT: Duration = Duration::from_secs(60);

fn quorum(extra: &[(&str, AMQPValue)]) -> FieldTable {
    let mut entries = vec![("x-queue-type", text("quorum"))];
    entries.extend(extra.iter().cloned());
    args(&entries)
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

async fn open(url: &str) -> (Connection, Channel) {
    let connection = Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    (connection, channel)
}

/// Publishes persistent `bodies` with confirms; every one must be acked.
async fn publish_confirmed(channel: &Channel, queue: &str, bodies: &[Vec<u8>]) {
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");
    let mut confirms = Vec::new();
    for body in bodies {
        confirms.push(
            channel
                .basic_publish(
                    "".into(),
                    queue.into(),
                    BasicPublishOptions::default(),
                    body,
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await
                .expect("publish"),
        );
    }
    for confirm in confirms {
        assert!(
            confirm.await.expect("confirm").is_ack(),
            "confirmed with an ack"
        );
    }
}

fn delivery_count(properties: &BasicProperties) -> Option<i64> {
    match properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-delivery-count"))
    {
        None => None,
        Some(AMQPValue::LongLongInt(n)) => Some(*n),
        Some(other) => panic!("x-delivery-count is a long, got {other:?}"),
    }
}

async fn refused(
    connection: &Connection,
    name: &str,
    options: QueueDeclareOptions,
    arguments: FieldTable,
) -> (u16, String) {
    let channel = connection.create_channel().await.expect("channel");
    let error = channel
        .queue_declare(name.into(), options, arguments)
        .await
        .expect_err("refused");
    amqp_error(&error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_refusals_confirms_consume_requeue_and_the_delivery_limit() {
    tokio::time::timeout(LIMIT, async {
        let broker = TestBroker::start().await;
        let (connection, channel) = open(&broker.url()).await;
        channel
            .queue_declare("jobs".into(), durable(), quorum(&[]))
            .await
            .expect("declares a quorum queue");
        // Redeclared the same: fine; as classic: the type is part of equivalence.
        channel
            .queue_declare("jobs".into(), durable(), quorum(&[]))
            .await
            .expect("redeclares");
        let (code, text) = refused(&connection, "jobs", durable(), args(&[("x-queue-type", lapin_common::text("classic"))])).await;
        assert_eq!(code, 406, "{text}");
        assert!(text.contains("inequivalent arg 'x-queue-type'"), "{text}");

        let (code, text) = refused(
            &connection,
            "qx",
            QueueDeclareOptions { exclusive: true, ..durable() },
            quorum(&[]),
        )
        .await;
        assert_eq!((code, text.as_str()), (406, "PRECONDITION_FAILED - invalid property 'exclusive-owner' for queue 'qx' in vhost '/'"));
        let (code, text) = refused(&connection, "qt", QueueDeclareOptions::default(), quorum(&[])).await;
        assert_eq!((code, text.as_str()), (406, "PRECONDITION_FAILED - invalid property 'non-durable' for queue 'qt' in vhost '/'"));
        let (code, text) = refused(
            &connection,
            "qa",
            QueueDeclareOptions { auto_delete: true, ..durable() },
            quorum(&[]),
        )
        .await;
        assert_eq!((code, text.as_str()), (406, "PRECONDITION_FAILED - invalid property 'auto-delete' for queue 'qa' in vhost '/'"));
        let (code, text) = refused(&connection, "qp", durable(), quorum(&[("x-max-priority", AMQPValue::LongInt(300))])).await;
        assert_eq!(code, 406, "{text}");
        assert!(text.contains("x-max-priority"), "{text}");

        // Confirms come after the commit; then a consumer gets every body in order.
        let bodies: Vec<Vec<u8>> = (0..20).map(|i| format!("job-{i}").into_bytes()).collect();
        publish_confirmed(&channel, "jobs", &bodies).await;
        let declared = channel
            .queue_declare("jobs".into(), QueueDeclareOptions { passive: true, ..durable() }, FieldTable::default())
            .await
            .expect("passive");
        assert_eq!(declared.message_count(), 20);

        let consumer_channel = connection.create_channel().await.expect("channel");
        consumer_channel
            .basic_qos(5, BasicQosOptions::default())
            .await
            .expect("qos");
        let mut consumer = consumer_channel
            .basic_consume("jobs".into(), "c1".into(), BasicConsumeOptions::default(), FieldTable::default())
            .await
            .expect("consume");
        let first = consumer.next().await.expect("a delivery").expect("ok");
        assert_eq!(first.data, b"job-0");
        assert!(!first.redelivered);
        assert_eq!(delivery_count(&first.properties), None);
        // basic.reject-style requeue through nack: back at the head, redelivered.
        first
            .nack(BasicNackOptions { multiple: false, requeue: true })
            .await
            .expect("nack");
        let mut received = Vec::new();
        let mut redelivered = Vec::new();
        while received.len() < 20 {
            let delivery = consumer.next().await.expect("a delivery").expect("ok");
            received.push(String::from_utf8(delivery.data.clone()).expect("utf-8"));
            redelivered.push(delivery.redelivered);
            delivery.ack(BasicAckOptions::default()).await.expect("ack");
        }
        // Jobs 1-4 were already in flight (prefetch 5); job-0 went back to the head, so
        // it comes next, redelivered, before job-5.
        let expected: Vec<String> = [1, 2, 3, 4, 0]
            .into_iter()
            .chain(5..20)
            .map(|i| format!("job-{i}"))
            .collect();
        assert_eq!(received, expected);
        let flags: Vec<bool> = (0..20).map(|i| i == 4).collect();
        assert_eq!(redelivered, flags, "only the nacked message comes back redelivered");

        // basic.qos global=true is refused for quorum queues, as RabbitMQ refuses it.
        let global = connection.create_channel().await.expect("channel");
        global
            .basic_qos(10, BasicQosOptions { global: true })
            .await
            .expect("qos");
        let error = global
            .basic_consume("jobs".into(), "g".into(), BasicConsumeOptions::default(), FieldTable::default())
            .await
            .expect_err("global qos refused");
        let (code, text) = amqp_error(&error);
        assert_eq!((code, text.as_str()), (540, "NOT_IMPLEMENTED - queue 'jobs' in vhost '/' does not support global qos"));
        drop(connection);

        // The delivery limit: past x-delivery-limit failed deliveries the message is
        // dead-lettered with reason delivery_limit.
        let (_connection, channel) = open(&broker.url()).await;
        channel
            .queue_declare("poison-dlq".into(), QueueDeclareOptions::default(), FieldTable::default())
            .await
            .expect("dlq");
        channel
            .queue_declare(
                "work".into(),
                durable(),
                quorum(&[
                    ("x-delivery-limit", AMQPValue::LongInt(1)),
                    ("x-dead-letter-exchange", lapin_common::text("")),
                    ("x-dead-letter-routing-key", lapin_common::text("poison-dlq")),
                ]),
            )
            .await
            .expect("work");
        publish_confirmed(&channel, "work", &[b"poison".to_vec()]).await;
        for expected in [None, Some(1)] {
            let message = channel
                .basic_get("work".into(), BasicGetOptions::default())
                .await
                .expect("get")
                .expect("a message in work");
            assert_eq!(message.delivery.data, b"poison");
            assert_eq!(message.delivery.redelivered, expected.is_some());
            assert_eq!(delivery_count(&message.delivery.properties), expected);
            // basic.reject with requeue counts as a failed delivery.
            message
                .delivery
                .reject(lapin::options::BasicRejectOptions { requeue: true })
                .await
                .expect("reject");
        }
        let mut dead = None;
        for _ in 0..100 {
            dead = channel
                .basic_get("poison-dlq".into(), BasicGetOptions { no_ack: true })
                .await
                .expect("get");
            if dead.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let dead = dead.expect("dead-lettered into poison-dlq");
        assert_eq!(dead.delivery.data, b"poison");
        assert_eq!(
            deaths(&dead.delivery.properties),
            vec![("work".to_string(), "delivery_limit".to_string(), 1)]
        );
        assert!(channel
            .basic_get("work".into(), BasicGetOptions::default())
            .await
            .expect("get")
            .is_none());
    })
    .await
    .expect("bounded");
}

async fn start(dir: &Path) -> WarrenProcess {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || WarrenProcess::start(&dir, &[]))
        .await
        .expect("start task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_no_confirmed_message_and_redelivers_the_unacknowledged() {
    tokio::time::timeout(LIMIT, async {
        let dir = TempDir::new("quorum-kill");
        let warren = start(dir.path()).await;
        let (connection, channel) = open(&warren.url()).await;
        channel
            .queue_declare("orders".into(), durable(), quorum(&[]))
            .await
            .expect("declares");
        let bodies: Vec<Vec<u8>> = (0..200)
            .map(|i| format!("order-{i}").into_bytes())
            .collect();
        publish_confirmed(&channel, "orders", &bodies).await;
        // Ten delivered and not acknowledged when the node dies.
        let consumer_channel = connection.create_channel().await.expect("channel");
        consumer_channel
            .basic_qos(10, BasicQosOptions::default())
            .await
            .expect("qos");
        let mut consumer = consumer_channel
            .basic_consume(
                "orders".into(),
                "c".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("consume");
        for i in 0..10 {
            let delivery = consumer.next().await.expect("a delivery").expect("ok");
            assert_eq!(delivery.data, format!("order-{i}").into_bytes());
        }
        warren.kill();
        drop(consumer);
        drop(connection);

        let warren = start(dir.path()).await;
        let (_connection, channel) = open(&warren.url()).await;
        let declared = channel
            .queue_declare("orders".into(), durable(), quorum(&[]))
            .await
            .expect("the quorum queue is back");
        assert_eq!(
            declared.message_count(),
            200,
            "every confirmed message survived"
        );
        let mut consumer = channel
            .basic_consume(
                "orders".into(),
                "after".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("consume");
        let mut received = Vec::new();
        while received.len() < 200 {
            let delivery = consumer.next().await.expect("a delivery").expect("ok");
            received.push((
                String::from_utf8(delivery.data.clone()).expect("utf-8"),
                delivery.redelivered,
            ));
        }
        let expected: Vec<(String, bool)> =
            (0..200).map(|i| (format!("order-{i}"), i < 10)).collect();
        assert_eq!(
            received, expected,
            "in order, the unacknowledged ten redelivered"
        );
    })
    .await
    .expect("bounded");
}

/// Seed 000's program shape against a quorum queue: a topic exchange bound to it, mandatory
/// publishes with confirms (the unroutable one returned, then confirmed), prefetch 200 and
/// manual acks; the queue and its binding come back after a SIGKILL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_exchange_mandatory_returns_prefetch_200_and_the_binding_survives_sigkill() {
    tokio::time::timeout(LIMIT, async {
        use lapin::options::{ExchangeDeclareOptions, QueueBindOptions};
        use lapin::Confirmation;
        let dir = TempDir::new("quorum-topic");
        let warren = start(dir.path()).await;
        let (_connection, channel) = open(&warren.url()).await;
        channel
            .exchange_declare(
                "events".into(),
                lapin::ExchangeKind::Topic,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("exchange");
        channel
            .queue_declare("events.orders".into(), durable(), quorum(&[]))
            .await
            .expect("queue");
        channel
            .queue_bind(
                "events.orders".into(),
                "events".into(),
                "orders.#".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("bind");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm.select");
        let mandatory = BasicPublishOptions {
            mandatory: true,
            ..BasicPublishOptions::default()
        };
        // The unroutable one first (lapin pairs a basic.return with the next ack it reads).
        let unroutable = channel
            .basic_publish(
                "events".into(),
                "payments.created".into(),
                mandatory,
                b"nobody listens",
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .expect("publish");
        match unroutable.await.expect("confirm") {
            Confirmation::Ack(Some(returned)) => {
                assert_eq!(returned.reply_code, 312);
                assert_eq!(returned.data, b"nobody listens");
            }
            other => panic!("the unroutable publish is returned, then confirmed: {other:?}"),
        }
        let mut confirms = Vec::new();
        for i in 0..500 {
            confirms.push(
                channel
                    .basic_publish(
                        "events".into(),
                        format!("orders.created.{i}").as_str().into(),
                        mandatory,
                        format!("event-{i}").as_bytes(),
                        BasicProperties::default().with_delivery_mode(2),
                    )
                    .await
                    .expect("publish"),
            );
        }
        for (i, confirm) in confirms.into_iter().enumerate() {
            let confirmation = confirm.await.expect("confirm");
            assert!(
                matches!(confirmation, Confirmation::Ack(None)),
                "publish {i}: {confirmation:?}"
            );
        }
        warren.kill();

        let warren = start(dir.path()).await;
        let (_connection, channel) = open(&warren.url()).await;
        channel
            .basic_qos(200, BasicQosOptions::default())
            .await
            .expect("qos");
        let mut consumer = channel
            .basic_consume(
                "events.orders".into(),
                "worker".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("consume");
        for i in 0..500 {
            let delivery = consumer.next().await.expect("a delivery").expect("ok");
            assert_eq!(delivery.data, format!("event-{i}").into_bytes());
            assert!(!delivery.redelivered);
            delivery.ack(BasicAckOptions::default()).await.expect("ack");
        }
        // The binding came back with the queue: a new publish still reaches it.
        channel
            .basic_publish(
                "events".into(),
                "orders.after".into(),
                BasicPublishOptions::default(),
                b"after restart",
                BasicProperties::default(),
            )
            .await
            .expect("publish");
        let delivery = consumer.next().await.expect("a delivery").expect("ok");
        assert_eq!(delivery.data, b"after restart");
        delivery.ack(BasicAckOptions::default()).await.expect("ack");
    })
    .await
    .expect("bounded");
}

/// `x-overflow: reject-publish` nacks what the queue refused (the state machine decides it at
/// commit, so the confirm waits for that answer), and a channel closed with unacknowledged
/// deliveries returns them, redelivered, to the next consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reject_publish_nacks_and_a_closed_channel_returns_its_unacknowledged() {
    tokio::time::timeout(LIMIT, async {
        let broker = TestBroker::start().await;
        let (connection, channel) = open(&broker.url()).await;
        channel
            .queue_declare(
                "bounded".into(),
                durable(),
                quorum(&[
                    ("x-max-length", AMQPValue::LongInt(2)),
                    ("x-overflow", lapin_common::text("reject-publish")),
                ]),
            )
            .await
            .expect("declare");
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm.select");
        let mut acks = Vec::new();
        for i in 0..5 {
            let confirm = channel
                .basic_publish(
                    "".into(),
                    "bounded".into(),
                    BasicPublishOptions::default(),
                    format!("m{i}").as_bytes(),
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await
                .expect("publish");
            acks.push(confirm.await.expect("confirm").is_ack());
        }
        // RabbitMQ 4.3 takes the publish that crosses the limit (overshoot by one).
        assert_eq!(acks, vec![true, true, true, false, false]);

        let first = connection.create_channel().await.expect("channel");
        first
            .basic_qos(2, BasicQosOptions::default())
            .await
            .expect("qos");
        let mut consumer = first
            .basic_consume(
                "bounded".into(),
                "a".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("consume");
        for i in 0..2 {
            let delivery = consumer.next().await.expect("a delivery").expect("ok");
            assert_eq!(delivery.data, format!("m{i}").into_bytes());
        }
        first.close(200, "bye".into()).await.expect("close");

        let second = connection.create_channel().await.expect("channel");
        let mut consumer = second
            .basic_consume(
                "bounded".into(),
                "b".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("consume");
        let mut got = Vec::new();
        for _ in 0..3 {
            let delivery = consumer.next().await.expect("a delivery").expect("ok");
            got.push((
                String::from_utf8(delivery.data.clone()).expect("utf-8"),
                delivery.redelivered,
            ));
            delivery.ack(BasicAckOptions::default()).await.expect("ack");
        }
        assert_eq!(
            got,
            vec![
                ("m0".to_string(), true),
                ("m1".to_string(), true),
                ("m2".to_string(), false)
            ]
        );
    })
    .await
    .expect("bounded");
}

/// STOMP reaches a quorum queue through the queue-type interface: SEND receipts after the
/// commit, a `client-individual` subscription with a prefetch, NACK returning the message
/// redelivered, ACK settling it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_sends_subscribes_nacks_and_acks_on_a_quorum_queue() {
    use warren_interop_tests::stomp::StompClient;
    tokio::time::timeout(LIMIT, async {
        let broker = TestBroker::start().await;
        let (_connection, channel) = open(&broker.url()).await;
        channel
            .queue_declare("stomp-jobs".into(), durable(), quorum(&[]))
            .await
            .expect("declare");
        let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
        for body in ["a", "b", "c"] {
            client
                .send("/amq/queue/stomp-jobs", body, &[("persistent", "true")])
                .await;
        }
        let jobs = broker
            .broker()
            .vhost("/")
            .and_then(|v| v.typed_queue("stomp-jobs"))
            .expect("the quorum queue");
        assert_eq!(jobs.info().ready, 3, "each receipt came after its commit");
        client
            .subscribe(
                "/amq/queue/stomp-jobs",
                "s",
                "client-individual",
                &[("prefetch-count", "3")],
            )
            .await;
        let first = client.expect_message().await;
        assert_eq!(first.text(), "a");
        let (header, value) = client.ack_headers(&first);
        let value = value.to_string();
        client.request("NACK", &[(header, value.as_str())]).await;
        let mut got = Vec::new();
        for _ in 0..3 {
            let message = client.expect_message().await;
            got.push((
                message.text(),
                message.header("redelivered") == Some("true"),
            ));
            let (header, value) = client.ack_headers(&message);
            let value = value.to_string();
            client.request("ACK", &[(header, value.as_str())]).await;
        }
        got.sort();
        assert_eq!(
            got,
            vec![
                ("a".to_string(), true),
                ("b".to_string(), false),
                ("c".to_string(), false)
            ]
        );
        for _ in 0..100 {
            if jobs.info().ready == 0 && jobs.info().unacknowledged == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!((jobs.info().ready, jobs.info().unacknowledged), (0, 0));
    })
    .await
    .expect("bounded");
}

/// A policy set after the declaration reaches the quorum queue (`Configure`): a lower
/// `max-length` drops from the head at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_set_later_applies_to_a_quorum_queue() {
    tokio::time::timeout(LIMIT, async {
        let broker = TestBroker::start().await;
        let (_connection, channel) = open(&broker.url()).await;
        channel
            .queue_declare("capped".into(), durable(), quorum(&[]))
            .await
            .expect("declare");
        let bodies: Vec<Vec<u8>> = (0..5).map(|i| format!("m{i}").into_bytes()).collect();
        publish_confirmed(&channel, "capped", &bodies).await;
        let mut definition = warren_core::value::Table::new();
        definition.insert("max-length", warren_core::value::Value::I64(2));
        let vhost = broker.broker().vhost("/").expect("vhost");
        vhost.set_policy(
            warren_core::policy::Policy::new(
                "cap",
                "^capped$",
                "quorum_queues",
                1,
                definition,
                false,
            )
            .expect("valid policy"),
            false,
        );
        let queue = vhost.typed_queue("capped").expect("the quorum queue");
        for _ in 0..100 {
            if queue.info().ready == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(queue.info().ready, 2);
        let first = channel
            .basic_get("capped".into(), BasicGetOptions { no_ack: true })
            .await
            .expect("get")
            .expect("a message");
        assert_eq!(first.delivery.data, b"m3", "drop-head dropped the oldest");
    })
    .await
    .expect("bounded");
}

/// Deleting a quorum queue drops its messages and its Raft state: declared again under the
/// same name it starts empty and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_quorum_queue_declared_again_starts_empty() {
    tokio::time::timeout(LIMIT, async {
        let broker = TestBroker::start().await;
        let (_connection, channel) = open(&broker.url()).await;
        for round in 0..3 {
            let declared = channel
                .queue_declare("again".into(), durable(), quorum(&[]))
                .await
                .expect("declare");
            assert_eq!(declared.message_count(), 0, "round {round} starts empty");
            let bodies: Vec<Vec<u8>> = (0..3)
                .map(|i| format!("r{round}-{i}").into_bytes())
                .collect();
            publish_confirmed(&channel, "again", &bodies).await;
            let first = channel
                .basic_get("again".into(), BasicGetOptions { no_ack: true })
                .await
                .expect("get")
                .expect("a message");
            assert_eq!(first.delivery.data, format!("r{round}-0").into_bytes());
            let deleted = channel
                .queue_delete(
                    "again".into(),
                    lapin::options::QueueDeleteOptions::default(),
                )
                .await
                .expect("delete");
            assert_eq!(deleted, 2);
        }
    })
    .await
    .expect("bounded");
}
