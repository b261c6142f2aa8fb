//! Per-vhost permissions through lapin: a user limited to resources named `bob-*` is refused
//! every operation on other resources with RabbitMQ's 403 text (closing only the channel), and
//! may do everything with his own.

mod lapin_common;

use lapin_common::amqp_error;

use lapin::options::{
    BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    ExchangeBindOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use warren_core::access::Permissions;
use warren_interop_tests::TestBroker;

/// Starts a broker where guest has created `other-q`, `other-x`, and bob may only touch
/// `bob-*`; returns the broker and bob's connection.
async fn setup() -> (TestBroker, Connection) {
    let broker = TestBroker::start().await;
    let core = broker.broker();
    core.add_user("bob", "bobpw", vec![]);
    core.vhost("/").expect("default vhost").set_permissions(
        "bob",
        Permissions::new("^bob-", "^bob-", "^bob-").expect("valid patterns"),
    );
    let guest = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("guest connects");
    let channel = guest.create_channel().await.expect("channel");
    channel
        .queue_declare(
            "other-q".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("other-q");
    channel
        .exchange_declare(
            "other-x".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("other-x");
    guest.close(200, "done".into()).await.expect("closes");
    let bob = Connection::connect(
        &broker.url_for("bob", "bobpw", "%2f"),
        ConnectionProperties::default(),
    )
    .await
    .expect("bob connects");
    (broker, bob)
}

fn refusal(access: &str, kind: &str, name: &str) -> String {
    format!(
        "ACCESS_REFUSED - {access} access to {kind} '{name}' in vhost '/' refused for user 'bob'"
    )
}

/// Checks that `result` is bob's 403 with the expected text, that the channel it came from
/// is closed and the connection is not.
fn assert_refused<T: std::fmt::Debug>(
    connection: &Connection,
    channel: &Channel,
    result: lapin::Result<T>,
    expected: &str,
) {
    let error = result.expect_err("refused");
    assert_eq!(amqp_error(&error), (403, expected.to_string()));
    assert!(!channel.status().connected(), "the channel is closed");
    assert!(connection.status().connected(), "the connection is not");
}

async fn fresh(connection: &Connection) -> Channel {
    connection.create_channel().await.expect("channel opens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configure_is_needed_to_declare_and_delete() {
    let (broker, bob) = setup().await;
    let ch = fresh(&bob).await;
    let result = ch
        .queue_declare(
            "other-q".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_refused(&bob, &ch, result, &refusal("configure", "queue", "other-q"));

    let ch = fresh(&bob).await;
    let result = ch
        .exchange_declare(
            "other-x2".into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_refused(
        &bob,
        &ch,
        result,
        &refusal("configure", "exchange", "other-x2"),
    );

    let ch = fresh(&bob).await;
    let result = ch
        .queue_delete("other-q".into(), QueueDeleteOptions::default())
        .await;
    assert_refused(&bob, &ch, result, &refusal("configure", "queue", "other-q"));

    let ch = fresh(&bob).await;
    let result = ch
        .exchange_delete("other-x".into(), Default::default())
        .await;
    assert_refused(
        &bob,
        &ch,
        result,
        &refusal("configure", "exchange", "other-x"),
    );
    // The refused deletes deleted nothing: passive declares still find both.
    let ch = fresh(&bob).await;
    ch.queue_declare(
        "other-q".into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("other-q still exists");
    ch.exchange_declare(
        "other-x".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .expect("other-x still exists");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_needs_write_on_the_destination_and_read_on_the_source() {
    let (broker, bob) = setup().await;
    let ch = fresh(&bob).await;
    ch.queue_declare(
        "bob-q".into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bob-q");
    ch.exchange_declare(
        "bob-x".into(),
        ExchangeKind::Direct,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bob-x");

    // queue.bind: write on the queue...
    let result = ch
        .queue_bind(
            "other-q".into(),
            "bob-x".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_refused(&bob, &ch, result, &refusal("write", "queue", "other-q"));
    // ...and read on the exchange.
    let ch = fresh(&bob).await;
    let result = ch
        .queue_bind(
            "bob-q".into(),
            "other-x".into(),
            "k".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_refused(&bob, &ch, result, &refusal("read", "exchange", "other-x"));
    // queue.unbind is checked the same way.
    let ch = fresh(&bob).await;
    let result = ch
        .queue_unbind(
            "bob-q".into(),
            "other-x".into(),
            "k".into(),
            FieldTable::default(),
        )
        .await;
    assert_refused(&bob, &ch, result, &refusal("read", "exchange", "other-x"));

    // exchange.bind: write on the destination exchange...
    let ch = fresh(&bob).await;
    let result = ch
        .exchange_bind(
            "other-x".into(),
            "bob-x".into(),
            "k".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_refused(&bob, &ch, result, &refusal("write", "exchange", "other-x"));
    // ...and read on the source.
    let ch = fresh(&bob).await;
    let result = ch
        .exchange_bind(
            "bob-x".into(),
            "other-x".into(),
            "k".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_refused(&bob, &ch, result, &refusal("read", "exchange", "other-x"));
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_needs_write_on_the_exchange() {
    let (broker, bob) = setup().await;
    for (exchange, shown) in [("", "amq.default"), ("other-x", "other-x")] {
        let ch = fresh(&bob).await;
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirm mode");
        let confirm = ch
            .basic_publish(
                exchange.into(),
                "other-q".into(),
                BasicPublishOptions::default(),
                b"nope",
                BasicProperties::default(),
            )
            .await
            .expect("publish sent");
        assert_refused(
            &bob,
            &ch,
            confirm.await,
            &refusal("write", "exchange", shown),
        );
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consume_get_and_purge_need_read_on_the_queue() {
    let (broker, bob) = setup().await;
    let ch = fresh(&bob).await;
    let result = ch
        .basic_consume(
            "other-q".into(),
            "".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await;
    assert_refused(&bob, &ch, result, &refusal("read", "queue", "other-q"));

    let ch = fresh(&bob).await;
    let result = ch
        .basic_get("other-q".into(), BasicGetOptions::default())
        .await;
    assert_refused(&bob, &ch, result, &refusal("read", "queue", "other-q"));

    let ch = fresh(&bob).await;
    let result = ch
        .queue_purge("other-q".into(), QueuePurgeOptions::default())
        .await;
    assert_refused(&bob, &ch, result, &refusal("read", "queue", "other-q"));
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn everything_is_allowed_on_own_resources() {
    let (broker, bob) = setup().await;
    let ch = fresh(&bob).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    let queue = ch
        .queue_declare(
            "bob-q".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bob-q");
    assert_eq!(queue.name().as_str(), "bob-q");
    ch.exchange_declare(
        "bob-x".into(),
        ExchangeKind::Topic,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bob-x");
    ch.exchange_declare(
        "bob-x2".into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("bob-x2");
    ch.queue_bind(
        "bob-q".into(),
        "bob-x".into(),
        "a.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("queue bind");
    ch.exchange_bind(
        "bob-x".into(),
        "bob-x2".into(),
        "".into(),
        ExchangeBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("exchange bind");
    for (exchange, key, body) in [
        ("bob-x", "a.b", &b"direct"[..]),
        ("bob-x2", "a.c", b"via e2e"),
    ] {
        let confirm = ch
            .basic_publish(
                exchange.into(),
                key.into(),
                BasicPublishOptions::default(),
                body,
                BasicProperties::default(),
            )
            .await
            .expect("publish sent")
            .await
            .expect("confirmed");
        assert!(confirm.is_ack(), "{confirm:?}");
    }
    let first = ch
        .basic_get("bob-q".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
        .expect("a message");
    assert_eq!(first.delivery.data, b"direct");
    assert_eq!(first.message_count, 1);
    assert_eq!(
        ch.queue_purge("bob-q".into(), QueuePurgeOptions::default())
            .await
            .expect("purge"),
        1
    );
    ch.basic_consume(
        "bob-q".into(),
        "bob-consumer".into(),
        BasicConsumeOptions::default(),
        FieldTable::default(),
    )
    .await
    .expect("consume");
    ch.queue_unbind(
        "bob-q".into(),
        "bob-x".into(),
        "a.#".into(),
        FieldTable::default(),
    )
    .await
    .expect("unbind");
    ch.exchange_delete("bob-x2".into(), Default::default())
        .await
        .expect("exchange delete");
    let ch = fresh(&bob).await;
    ch.queue_delete("bob-q".into(), QueueDeleteOptions::default())
        .await
        .expect("queue delete");
    // Other users' queues stay out of reach.
    let result = ch
        .basic_get("other-q".into(), BasicGetOptions::default())
        .await;
    assert_refused(&bob, &ch, result, &refusal("read", "queue", "other-q"));
    broker.shutdown().await;
}
