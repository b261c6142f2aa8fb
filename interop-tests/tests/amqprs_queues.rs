//! Queue lifecycle through amqprs: declare (server-named, passive, equivalence, exclusive,
//! auto-delete, reserved names), purge, delete with its conditions, and a message with every
//! basic property surviving the broker unchanged.

mod amqprs_common;

use amqprs::channel::{
    BasicCancelArguments, BasicConsumeArguments, BasicGetArguments, BasicPublishArguments,
    QueueDeclareArguments, QueueDeleteArguments,
};
use amqprs::{BasicProperties, DecimalValue, FieldArray, FieldTable, FieldValue};
use amqprs_common::{connect, next_delivery, queue_exists, LIMIT};
use warren_interop_tests::{wait_for, TestBroker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_named_queue_gets_an_amq_gen_name() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let ch = conn.channel().await;
    let (name, messages, consumers) = ch
        .channel
        .queue_declare(QueueDeclareArguments::exclusive_server_named())
        .await
        .expect("declare")
        .expect("declare-ok");
    assert!(name.starts_with("amq.gen-"), "server-named queue: {name}");
    // amq.gen- and 22 characters of URL-safe base64, as RabbitMQ names them.
    assert_eq!(name.len(), "amq.gen-".len() + 22, "{name}");
    assert_eq!((messages, consumers), (0, 0));
    assert!(queue_exists(&broker, &name));
    // A second server-named declare gets a different queue.
    let (other, _, _) = ch
        .channel
        .queue_declare(QueueDeclareArguments::exclusive_server_named())
        .await
        .expect("declare")
        .expect("declare-ok");
    assert_ne!(name, other);
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_of_a_missing_queue_closes_only_the_channel_with_404() {
    let broker = TestBroker::start().await;
    let mut conn = connect(&broker).await;
    let mut ch = conn.channel().await;
    let result = ch
        .channel
        .queue_declare(QueueDeclareArguments::new("missing").passive(true).finish())
        .await;
    assert!(
        result.is_err(),
        "declare-ok for a missing queue: {result:?}"
    );
    let (code, text) = ch.expect_close().await;
    assert_eq!(code, 404);
    assert_eq!(text, "NOT_FOUND - no queue 'missing' in vhost '/'");
    assert!(!ch.channel.is_open());
    // The connection survives: a new channel works.
    assert!(conn.connection.is_open());
    let other = conn.channel().await;
    assert_eq!(other.declare("present").await, "present");
    assert!(conn.closes.try_recv().is_err(), "no connection.close");
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declare_ok_reports_message_and_consumer_counts() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let ch = conn.channel().await;
    ch.declare("counted").await;
    for i in 0..3 {
        ch.publish("counted", format!("m{i}").as_bytes()).await;
    }
    // A redeclare with the same arguments reports the current counts.
    let (_, messages, consumers) = ch
        .channel
        .queue_declare(QueueDeclareArguments::new("counted"))
        .await
        .expect("declare")
        .expect("declare-ok");
    assert_eq!((messages, consumers), (3, 0));

    // A consumer on another channel takes the messages (unacked: no longer ready).
    let consumer = conn.channel().await;
    let (_tag, mut rx) = consumer
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("counted", "c1"))
        .await
        .expect("consume");
    for i in 0..3 {
        assert_eq!(
            next_delivery(&mut rx).await.body,
            format!("m{i}").as_bytes()
        );
    }
    assert_eq!(ch.counts("counted").await, (0, 1));
    ch.publish("counted", b"more").await;
    assert_eq!(next_delivery(&mut rx).await.body, b"more");
    let second = conn.channel().await;
    let (_tag2, _rx2) = second
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("counted", "c2"))
        .await
        .expect("consume");
    assert_eq!(ch.counts("counted").await, (0, 2));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclare_with_different_durable_is_406() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let ch = conn.channel().await;
    ch.declare("transient").await;
    let mut ch2 = conn.channel().await;
    let result = ch2
        .channel
        .queue_declare(QueueDeclareArguments::durable_client_named("transient"))
        .await;
    assert!(result.is_err(), "{result:?}");
    let (code, text) = ch2.expect_close().await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'transient' in vhost '/': \
         received 'true' but current is 'false'"
    );
    // The original queue is untouched and the first channel still works.
    assert_eq!(ch.counts("transient").await, (0, 0));
    assert!(ch.channel.is_open());
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_queue_is_locked_for_other_connections_with_405() {
    let broker = TestBroker::start().await;
    let owner = connect(&broker).await;
    let owner_ch = owner.channel().await;
    owner_ch
        .channel
        .queue_declare(QueueDeclareArguments::new("mine").exclusive(true).finish())
        .await
        .expect("declare")
        .expect("declare-ok");

    let mut other = connect(&broker).await;
    let expected = "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'mine' in \
                    vhost '/'. It could be originally declared on another connection or the \
                    exclusive property value does not match that of the original declaration.";

    // basic.consume
    let mut ch = other.channel().await;
    let result = ch
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("mine", "thief"))
        .await;
    assert!(result.is_err());
    assert_eq!(ch.expect_close().await, (405, expected.to_string()));

    // passive queue.declare
    let mut ch = other.channel().await;
    let result = ch
        .channel
        .queue_declare(QueueDeclareArguments::new("mine").passive(true).finish())
        .await;
    assert!(result.is_err());
    assert_eq!(ch.expect_close().await, (405, expected.to_string()));

    // non-passive queue.declare with the same flags
    let mut ch = other.channel().await;
    let result = ch
        .channel
        .queue_declare(QueueDeclareArguments::new("mine").exclusive(true).finish())
        .await;
    assert!(result.is_err());
    assert_eq!(ch.expect_close().await, (405, expected.to_string()));

    // queue.delete
    let mut ch = other.channel().await;
    let result = ch
        .channel
        .queue_delete(QueueDeleteArguments::new("mine"))
        .await;
    assert!(result.is_err());
    assert_eq!(ch.expect_close().await, (405, expected.to_string()));

    // Channel errors only: the other connection is still open.
    assert!(other.connection.is_open());
    assert!(other.closes.try_recv().is_err());
    // The owner still uses it.
    owner_ch.publish("mine", b"x").await;
    assert_eq!(owner_ch.counts("mine").await, (1, 0));
    other.connection.close().await.expect("closes");
    owner.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_queue_is_deleted_when_its_connection_closes() {
    let broker = TestBroker::start().await;
    let owner = connect(&broker).await;
    let ch = owner.channel().await;
    ch.channel
        .queue_declare(
            QueueDeclareArguments::new("ephemeral")
                .exclusive(true)
                .finish(),
        )
        .await
        .expect("declare")
        .expect("declare-ok");
    ch.publish("ephemeral", b"lost").await;
    assert_eq!(ch.counts("ephemeral").await, (1, 0));
    assert!(queue_exists(&broker, "ephemeral"));
    owner.connection.close().await.expect("closes");
    assert!(
        wait_for(LIMIT, || !queue_exists(&broker, "ephemeral")).await,
        "exclusive queue outlived its connection"
    );
    // Seen from a client too: 404 on a passive declare.
    let other = connect(&broker).await;
    let mut ch = other.channel().await;
    let result = ch
        .channel
        .queue_declare(
            QueueDeclareArguments::new("ephemeral")
                .passive(true)
                .finish(),
        )
        .await;
    assert!(result.is_err());
    assert_eq!(ch.expect_close().await.0, 404);
    other.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_delete_queue_is_deleted_after_its_last_consumer_cancels() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let ch = conn.channel().await;
    ch.channel
        .queue_declare(QueueDeclareArguments::transient_autodelete("fleeting"))
        .await
        .expect("declare")
        .expect("declare-ok");
    // Never consumed: an auto-delete queue stays.
    ch.publish("fleeting", b"kept").await;
    assert_eq!(ch.counts("fleeting").await, (1, 0));

    let (first, _rx1) = ch
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("fleeting", "first"))
        .await
        .expect("consume");
    let (second, _rx2) = ch
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("fleeting", "second"))
        .await
        .expect("consume");
    assert_eq!(ch.counts("fleeting").await.1, 2);

    ch.channel
        .basic_cancel(BasicCancelArguments::new(&first))
        .await
        .expect("cancel-ok");
    // One consumer left: still there.
    assert_eq!(ch.counts("fleeting").await.1, 1);
    assert!(queue_exists(&broker, "fleeting"));

    ch.channel
        .basic_cancel(BasicCancelArguments::new(&second))
        .await
        .expect("cancel-ok");
    assert!(
        wait_for(LIMIT, || !queue_exists(&broker, "fleeting")).await,
        "auto-delete queue survived its last consumer"
    );
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_names_with_the_amq_prefix_are_refused_with_403() {
    let broker = TestBroker::start().await;
    let mut conn = connect(&broker).await;
    let mut ch = conn.channel().await;
    let result = ch
        .channel
        .queue_declare(QueueDeclareArguments::new("amq.mine"))
        .await;
    assert!(result.is_err());
    assert_eq!(
        ch.expect_close().await,
        (
            403,
            "ACCESS_REFUSED - queue name 'amq.mine' contains reserved prefix 'amq.*'".to_string()
        )
    );
    assert!(!queue_exists(&broker, "amq.mine"));
    assert!(conn.connection.is_open());
    assert!(conn.closes.try_recv().is_err());
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_returns_the_number_of_messages_purged() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let ch = conn.channel().await;
    ch.declare("purged").await;
    for i in 0..5u8 {
        ch.publish("purged", &[i]).await;
    }
    assert_eq!(ch.purge("purged").await, 5);
    assert_eq!(ch.counts("purged").await, (0, 0));
    assert_eq!(ch.get_body("purged").await, None);
    assert_eq!(ch.purge("purged").await, 0);
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_unused_with_a_consumer_is_406() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let consumer = conn.channel().await;
    consumer.declare("busy").await;
    let (_tag, _rx) = consumer
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("busy", "c"))
        .await
        .expect("consume");
    let mut ch = conn.channel().await;
    let result = ch
        .channel
        .queue_delete(QueueDeleteArguments::new("busy").if_unused(true).finish())
        .await;
    assert!(result.is_err(), "{result:?}");
    assert_eq!(
        ch.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - queue 'busy' in vhost '/' in use".to_string()
        )
    );
    assert!(queue_exists(&broker, "busy"));
    assert_eq!(consumer.counts("busy").await, (0, 1));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_empty_with_messages_is_406() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let publisher = conn.channel().await;
    publisher.declare("full").await;
    publisher.publish("full", b"x").await;
    let mut ch = conn.channel().await;
    let result = ch
        .channel
        .queue_delete(QueueDeleteArguments::new("full").if_empty(true).finish())
        .await;
    assert!(result.is_err(), "{result:?}");
    assert_eq!(
        ch.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - queue 'full' in vhost '/' not empty".to_string()
        )
    );
    assert_eq!(publisher.counts("full").await, (1, 0));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_returns_the_message_count_and_missing_queues_delete_fine() {
    let broker = TestBroker::start().await;
    let mut conn = connect(&broker).await;
    let mut ch = conn.channel().await;
    ch.declare("doomed").await;
    for _ in 0..4 {
        ch.publish("doomed", b"x").await;
    }
    let deleted = ch
        .channel
        .queue_delete(QueueDeleteArguments::new("doomed"))
        .await
        .expect("delete")
        .expect("delete-ok");
    assert_eq!(deleted, 4);
    assert!(!queue_exists(&broker, "doomed"));
    // Deleting it again (or any missing queue) succeeds with 0, as in RabbitMQ.
    let deleted = ch
        .channel
        .queue_delete(QueueDeleteArguments::new("doomed"))
        .await
        .expect("delete")
        .expect("delete-ok");
    assert_eq!(deleted, 0);
    let deleted = ch
        .channel
        .queue_delete(
            QueueDeleteArguments::new("never-existed")
                .if_unused(true)
                .if_empty(true)
                .finish(),
        )
        .await
        .expect("delete")
        .expect("delete-ok");
    assert_eq!(deleted, 0);
    assert!(ch.channel.is_open());
    assert!(ch.events.try_recv().is_err(), "no channel.close");
    assert!(conn.closes.try_recv().is_err());
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}

fn field_table(entries: Vec<(&str, FieldValue)>) -> FieldTable {
    let mut table = FieldTable::new();
    for (key, value) in entries {
        table.insert(key.try_into().expect("short key"), value);
    }
    table
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_basic_properties_and_headers_round_trip_unchanged() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let ch = conn.channel().await;
    ch.declare("props").await;

    let nested = field_table(vec![
        ("inner-string", FieldValue::from("deep")),
        ("inner-int", FieldValue::I(-7)),
        (
            "innermost",
            FieldValue::F(field_table(vec![("flag", FieldValue::t(false))])),
        ),
    ]);
    let array: FieldArray = vec![
        FieldValue::from("one"),
        FieldValue::I(2),
        FieldValue::t(true),
        FieldValue::F(field_table(vec![("k", FieldValue::from("v"))])),
        FieldValue::A(vec![FieldValue::l(i64::MIN)].try_into().unwrap()),
    ]
    .try_into()
    .unwrap();
    let headers = field_table(vec![
        ("string", FieldValue::from("héllo wörld")),
        ("bool-true", FieldValue::t(true)),
        ("bool-false", FieldValue::t(false)),
        ("i8", FieldValue::b(-8)),
        ("u8", FieldValue::B(200)),
        ("i16", FieldValue::s(-1600)),
        ("u16", FieldValue::u(65000)),
        ("i32", FieldValue::I(i32::MIN)),
        ("u32", FieldValue::i(u32::MAX)),
        ("i64", FieldValue::l(i64::MAX)),
        ("f32", FieldValue::f(1.5)),
        ("f64", FieldValue::d(-2.25)),
        ("decimal", FieldValue::D(DecimalValue::new(2, 31415))),
        ("timestamp", FieldValue::T(1_700_000_000)),
        ("void", FieldValue::V),
        (
            "bytes",
            FieldValue::x(vec![0u8, 1, 2, 255].try_into().unwrap()),
        ),
        ("nested", FieldValue::F(nested)),
        ("array", FieldValue::A(array)),
    ]);
    let properties = BasicProperties::default()
        .with_content_type("application/json")
        .with_content_encoding("gzip")
        .with_headers(headers.clone())
        .with_delivery_mode(2)
        .with_priority(7)
        .with_correlation_id("corr-1")
        .with_reply_to("replies")
        .with_expiration("60000")
        .with_message_id("msg-1")
        .with_timestamp(1_700_000_123)
        .with_message_type("order.created")
        .with_user_id("guest")
        .with_app_id("interop")
        .with_cluster_id("cluster-a")
        .finish();
    let body: Vec<u8> = (0..=255u8).collect();

    let (_tag, mut rx) = ch
        .channel
        .basic_consume_rx(
            BasicConsumeArguments::new("props", "props-consumer")
                .manual_ack(false)
                .finish(),
        )
        .await
        .expect("consume");
    ch.channel
        .basic_publish(
            properties.clone(),
            body.clone(),
            BasicPublishArguments::new("", "props"),
        )
        .await
        .expect("publish");
    let got = next_delivery(&mut rx).await;
    assert_eq!(got.body, body);
    let p = &got.properties;
    assert_eq!(
        p.content_type().map(String::as_str),
        Some("application/json")
    );
    assert_eq!(p.content_encoding().map(String::as_str), Some("gzip"));
    assert_eq!(p.headers(), Some(&headers));
    assert_eq!(p.delivery_mode(), Some(2));
    assert_eq!(p.priority(), Some(7));
    assert_eq!(p.correlation_id().map(String::as_str), Some("corr-1"));
    assert_eq!(p.reply_to().map(String::as_str), Some("replies"));
    assert_eq!(p.expiration().map(String::as_str), Some("60000"));
    assert_eq!(p.message_id().map(String::as_str), Some("msg-1"));
    assert_eq!(p.timestamp(), Some(1_700_000_123));
    assert_eq!(p.message_type().map(String::as_str), Some("order.created"));
    assert_eq!(p.user_id().map(String::as_str), Some("guest"));
    assert_eq!(p.app_id().map(String::as_str), Some("interop"));
    assert_eq!(p.cluster_id().map(String::as_str), Some("cluster-a"));

    // And through basic.get, which writes the same stored properties in get-ok.
    ch.channel
        .basic_cancel(BasicCancelArguments::new("props-consumer"))
        .await
        .expect("cancel-ok");
    ch.channel
        .basic_publish(
            properties.clone(),
            body.clone(),
            BasicPublishArguments::new("", "props"),
        )
        .await
        .expect("publish");
    let (_, p, got_body) = ch
        .channel
        .basic_get(BasicGetArguments::new("props").no_ack(true).finish())
        .await
        .expect("get")
        .expect("get-ok");
    assert_eq!(got_body, body);
    assert_eq!(p.headers(), Some(&headers));
    assert_eq!(p.user_id().map(String::as_str), Some("guest"));
    assert_eq!(p.cluster_id().map(String::as_str), Some("cluster-a"));
    assert_eq!(p.timestamp(), Some(1_700_000_123));
    conn.connection.close().await.expect("closes");
    broker.shutdown().await;
}
