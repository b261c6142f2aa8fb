//! Exchanges through lapin: declaration and its errors, deletion, and routing for every
//! exchange type, exchange-to-exchange bindings and alternate exchanges.
//!
//! Publishing and getting on the same channel is ordered, so a basic.get after a publish
//! sees the routing outcome without polling.

mod lapin_common;

use lapin_common::{amqp_error, args, text};

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, ExchangeBindOptions,
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use warren_interop_tests::TestBroker;

fn expect_error<T: std::fmt::Debug>(result: lapin::Result<T>, code: u16, text: &str) {
    let error = result.expect_err("the broker refuses");
    assert_eq!(amqp_error(&error), (code, text.to_string()));
}

async fn connect(broker: &TestBroker) -> Connection {
    Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects")
}

async fn declare_exchange(channel: &Channel, name: &str, kind: ExchangeKind) {
    declare_exchange_with(channel, name, kind, FieldTable::default()).await;
}

async fn declare_exchange_with(
    channel: &Channel,
    name: &str,
    kind: ExchangeKind,
    args: FieldTable,
) {
    channel
        .exchange_declare(name.into(), kind, ExchangeDeclareOptions::default(), args)
        .await
        .unwrap_or_else(|e| panic!("declare exchange {name}: {e}"));
}

async fn declare_queue(channel: &Channel, name: &str) {
    channel
        .queue_declare(
            name.into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("declare queue {name}: {e}"));
}

async fn bind(channel: &Channel, queue: &str, exchange: &str, key: &str) {
    bind_with(channel, queue, exchange, key, FieldTable::default()).await;
}

async fn bind_with(channel: &Channel, queue: &str, exchange: &str, key: &str, args: FieldTable) {
    channel
        .queue_bind(
            queue.into(),
            exchange.into(),
            key.into(),
            QueueBindOptions::default(),
            args,
        )
        .await
        .unwrap_or_else(|e| panic!("bind {queue} to {exchange} with '{key}': {e}"));
}

async fn publish(channel: &Channel, exchange: &str, key: &str, body: &[u8]) {
    publish_with(channel, exchange, key, body, BasicProperties::default()).await;
}

async fn publish_with(
    channel: &Channel,
    exchange: &str,
    key: &str,
    body: &[u8],
    properties: BasicProperties,
) {
    channel
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            body,
            properties,
        )
        .await
        .expect("publish sent");
}

/// Every message now in `queue`, in order (emptying it).
async fn drain(channel: &Channel, queue: &str) -> Vec<Vec<u8>> {
    let mut bodies = Vec::new();
    while let Some(message) = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
    {
        bodies.push(message.delivery.data.clone());
    }
    bodies
}

fn bodies(list: &[&str]) -> Vec<Vec<u8>> {
    list.iter().map(|s| s.as_bytes().to_vec()).collect()
}

/// The connection still works: a fresh channel can declare, publish and get.
async fn connection_usable(connection: &Connection) {
    let channel = connection
        .create_channel()
        .await
        .expect("another channel opens");
    declare_queue(&channel, "usable").await;
    publish(&channel, "", "usable", b"ok").await;
    assert_eq!(drain(&channel, "usable").await, bodies(&["ok"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declares_every_exchange_type_and_passive_finds_them() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    for (name, kind) in [
        ("x-direct", ExchangeKind::Direct),
        ("x-fanout", ExchangeKind::Fanout),
        ("x-topic", ExchangeKind::Topic),
        ("x-headers", ExchangeKind::Headers),
    ] {
        declare_exchange(&channel, name, kind.clone()).await;
        // Redeclaring with the same properties is fine.
        declare_exchange(&channel, name, kind.clone()).await;
        channel
            .exchange_declare(
                name.into(),
                kind,
                ExchangeDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("passive declare finds it");
    }
    // The standard exchanges exist.
    for name in [
        "amq.direct",
        "amq.fanout",
        "amq.topic",
        "amq.headers",
        "amq.match",
    ] {
        channel
            .exchange_declare(
                name.into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inequivalent_redeclare_closes_only_the_channel() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    declare_exchange(&channel, "eq", ExchangeKind::Direct).await;
    let result = channel
        .exchange_declare(
            "eq".into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await;
    expect_error(
        result,
        406,
        "PRECONDITION_FAILED - inequivalent arg 'type' for exchange 'eq' in vhost '/': received 'fanout' but current is 'direct'",
    );
    assert!(!channel.status().connected());
    assert!(connection.status().connected());
    connection_usable(&connection).await;

    let channel = connection.create_channel().await.expect("channel");
    let result = channel
        .exchange_declare(
            "eq".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    expect_error(
        result,
        406,
        "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'eq' in vhost '/': received 'true' but current is 'false'",
    );
    assert!(connection.status().connected());
    connection_usable(&connection).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passive_declare_of_a_missing_exchange_is_404() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    let result = channel
        .exchange_declare(
            "missing".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    expect_error(
        result,
        404,
        "NOT_FOUND - no exchange 'missing' in vhost '/'",
    );
    assert!(connection.status().connected());
    connection_usable(&connection).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amq_prefix_is_reserved() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    let result = channel
        .exchange_declare(
            "amq.custom".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await;
    expect_error(
        result,
        403,
        "ACCESS_REFUSED - exchange name 'amq.custom' contains reserved prefix 'amq.*'",
    );
    connection_usable(&connection).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_exchange_type_closes_the_channel_with_406() {
    // RabbitMQ 4.x (rabbit_exchange:check_type); 3.x closed the connection with 503.
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    let result = channel
        .exchange_declare(
            "weird".into(),
            ExchangeKind::Custom("x-no-such-type".into()),
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await;
    expect_error(
        result,
        406,
        "PRECONDITION_FAILED - unknown exchange type 'x-no-such-type'",
    );
    assert!(!channel.status().connected(), "the channel is closed");
    // The connection is not: a new channel on it works.
    connection_usable(&connection).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_if_unused_and_delete_missing() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    declare_exchange(&channel, "used", ExchangeKind::Direct).await;
    declare_queue(&channel, "q-used").await;
    bind(&channel, "q-used", "used", "k").await;
    let result = channel
        .exchange_delete(
            "used".into(),
            ExchangeDeleteOptions {
                if_unused: true,
                ..Default::default()
            },
        )
        .await;
    expect_error(
        result,
        406,
        "PRECONDITION_FAILED - exchange 'used' in vhost '/' in use",
    );
    let channel = connection.create_channel().await.expect("channel");
    // Still there, still routing.
    publish(&channel, "used", "k", b"m").await;
    assert_eq!(drain(&channel, "q-used").await, bodies(&["m"]));
    // Unconditional delete works and stops routing; the queue stays.
    channel
        .exchange_delete("used".into(), ExchangeDeleteOptions::default())
        .await
        .expect("deleted");
    let passive = ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let result = channel
        .exchange_declare(
            "used".into(),
            ExchangeKind::Direct,
            passive,
            FieldTable::default(),
        )
        .await;
    expect_error(result, 404, "NOT_FOUND - no exchange 'used' in vhost '/'");
    let channel = connection.create_channel().await.expect("channel");
    // Deleting a missing exchange succeeds, as in RabbitMQ.
    channel
        .exchange_delete("never-existed".into(), ExchangeDeleteOptions::default())
        .await
        .expect("deleting a missing exchange is ok");
    // An unused exchange can be deleted with if-unused.
    declare_exchange(&channel, "unused", ExchangeKind::Fanout).await;
    channel
        .exchange_delete(
            "unused".into(),
            ExchangeDeleteOptions {
                if_unused: true,
                ..Default::default()
            },
        )
        .await
        .expect("unused exchange deleted");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_and_fanout_routing() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    declare_exchange(&channel, "d", ExchangeKind::Direct).await;
    declare_exchange(&channel, "f", ExchangeKind::Fanout).await;
    for q in ["q1", "q2", "q3"] {
        declare_queue(&channel, q).await;
    }
    bind(&channel, "q1", "d", "red").await;
    bind(&channel, "q2", "d", "red").await;
    bind(&channel, "q2", "d", "blue").await;
    bind(&channel, "q1", "f", "ignored").await;
    bind(&channel, "q3", "f", "").await;

    publish(&channel, "d", "red", b"r").await;
    publish(&channel, "d", "blue", b"b").await;
    publish(&channel, "d", "green", b"g").await;
    publish(&channel, "f", "anything", b"f").await;
    // The default exchange routes by queue name.
    publish(&channel, "", "q3", b"default").await;
    assert_eq!(drain(&channel, "q1").await, bodies(&["r", "f"]));
    assert_eq!(drain(&channel, "q2").await, bodies(&["r", "b"]));
    assert_eq!(drain(&channel, "q3").await, bodies(&["f", "default"]));
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_routing_with_star_and_hash() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    declare_exchange(&channel, "t", ExchangeKind::Topic).await;
    let patterns = [
        ("star", "stock.*.nyse"),
        ("hash", "stock.#"),
        ("all", "#"),
        ("exact", "stock.ibm.nyse"),
        ("middle", "*.ibm.#"),
        ("hash-mid", "a.#.z"),
    ];
    for (queue, pattern) in patterns {
        declare_queue(&channel, queue).await;
        bind(&channel, queue, "t", pattern).await;
    }
    for key in [
        "stock.ibm.nyse",
        "stock.msft.nasdaq",
        "stock",
        "stock.ibm",
        "weather.ibm.today",
        "a.z",
        "a.b.c.z",
        "a.b.c",
        "",
    ] {
        publish(&channel, "t", key, key.as_bytes()).await;
    }
    assert_eq!(drain(&channel, "star").await, bodies(&["stock.ibm.nyse"]));
    assert_eq!(
        drain(&channel, "hash").await,
        bodies(&["stock.ibm.nyse", "stock.msft.nasdaq", "stock", "stock.ibm"])
    );
    assert_eq!(
        drain(&channel, "all").await,
        bodies(&[
            "stock.ibm.nyse",
            "stock.msft.nasdaq",
            "stock",
            "stock.ibm",
            "weather.ibm.today",
            "a.z",
            "a.b.c.z",
            "a.b.c",
            "",
        ])
    );
    assert_eq!(drain(&channel, "exact").await, bodies(&["stock.ibm.nyse"]));
    assert_eq!(
        drain(&channel, "middle").await,
        bodies(&["stock.ibm.nyse", "stock.ibm", "weather.ibm.today"])
    );
    assert_eq!(
        drain(&channel, "hash-mid").await,
        bodies(&["a.z", "a.b.c.z"])
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_routing_all_and_any() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    declare_exchange(&channel, "h", ExchangeKind::Headers).await;
    declare_queue(&channel, "all").await;
    declare_queue(&channel, "any").await;
    declare_queue(&channel, "default-all").await;
    bind_with(
        &channel,
        "all",
        "h",
        "",
        args(&[
            ("x-match", text("all")),
            ("format", text("pdf")),
            ("type", text("report")),
        ]),
    )
    .await;
    bind_with(
        &channel,
        "any",
        "h",
        "",
        args(&[
            ("x-match", text("any")),
            ("format", text("pdf")),
            ("type", text("report")),
        ]),
    )
    .await;
    // Without x-match, "all" is the default.
    bind_with(
        &channel,
        "default-all",
        "h",
        "",
        args(&[("format", text("pdf")), ("type", text("report"))]),
    )
    .await;
    let send = |name: &'static str, headers: FieldTable| {
        let channel = channel.clone();
        async move {
            publish_with(
                &channel,
                "h",
                "ignored",
                name.as_bytes(),
                BasicProperties::default().with_headers(headers),
            )
            .await;
        }
    };
    send(
        "both",
        args(&[("format", text("pdf")), ("type", text("report"))]),
    )
    .await;
    send("format-only", args(&[("format", text("pdf"))])).await;
    send(
        "wrong-value",
        args(&[("format", text("zip")), ("type", text("log"))]),
    )
    .await;
    send(
        "extra",
        args(&[
            ("format", text("pdf")),
            ("type", text("report")),
            ("x", AMQPValue::LongInt(1)),
        ]),
    )
    .await;
    send("none", FieldTable::default()).await;
    assert_eq!(drain(&channel, "all").await, bodies(&["both", "extra"]));
    assert_eq!(
        drain(&channel, "default-all").await,
        bodies(&["both", "extra"])
    );
    assert_eq!(
        drain(&channel, "any").await,
        bodies(&["both", "format-only", "extra"])
    );

    // An invalid x-match is refused with 406, closing the channel only.
    let result = channel
        .queue_bind(
            "all".into(),
            "h".into(),
            "".into(),
            QueueBindOptions::default(),
            args(&[("x-match", text("some"))]),
        )
        .await;
    let error = result.expect_err("invalid x-match refused");
    let (code, message) = amqp_error(&error);
    assert_eq!(code, 406, "{message}");
    assert!(message.starts_with("PRECONDITION_FAILED - "), "{message}");
    assert!(message.contains("x-match"), "{message}");
    connection_usable(&connection).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_to_exchange_bindings_deliver_once_and_survive_cycles() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    declare_exchange(&channel, "x1", ExchangeKind::Fanout).await;
    declare_exchange(&channel, "x2", ExchangeKind::Direct).await;
    declare_queue(&channel, "via-both").await;
    declare_queue(&channel, "via-x2").await;
    // via-both is reachable directly from x1 and through x1 -> x2.
    bind(&channel, "via-both", "x1", "").await;
    bind(&channel, "via-both", "x2", "k").await;
    bind(&channel, "via-x2", "x2", "k").await;
    channel
        .exchange_bind(
            "x2".into(),
            "x1".into(),
            "".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("x1 -> x2");
    // A cycle back: x2 -> x1.
    channel
        .exchange_bind(
            "x1".into(),
            "x2".into(),
            "k".into(),
            ExchangeBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("x2 -> x1");
    publish(&channel, "x1", "k", b"one").await;
    publish(&channel, "x2", "k", b"two").await;
    publish(&channel, "x1", "other", b"three").await;
    assert_eq!(
        drain(&channel, "via-both").await,
        bodies(&["one", "two", "three"])
    );
    assert_eq!(drain(&channel, "via-x2").await, bodies(&["one", "two"]));

    // Unbinding x1 -> x2 stops that path.
    channel
        .exchange_unbind(
            "x2".into(),
            "x1".into(),
            "".into(),
            Default::default(),
            FieldTable::default(),
        )
        .await
        .expect("unbound");
    publish(&channel, "x1", "k", b"four").await;
    assert_eq!(drain(&channel, "via-both").await, bodies(&["four"]));
    assert!(drain(&channel, "via-x2").await.is_empty());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alternate_exchange_catches_unroutable_messages() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    declare_exchange(&channel, "ae", ExchangeKind::Fanout).await;
    declare_exchange_with(
        &channel,
        "main",
        ExchangeKind::Direct,
        args(&[("alternate-exchange", text("ae"))]),
    )
    .await;
    declare_queue(&channel, "routed").await;
    declare_queue(&channel, "unroutable").await;
    bind(&channel, "routed", "main", "good").await;
    bind(&channel, "unroutable", "ae", "").await;
    publish(&channel, "main", "good", b"g").await;
    publish(&channel, "main", "bad", b"b").await;
    assert_eq!(drain(&channel, "routed").await, bodies(&["g"]));
    assert_eq!(drain(&channel, "unroutable").await, bodies(&["b"]));
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishing_to_internal_or_missing_exchange_closes_the_channel() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    channel
        .exchange_declare(
            "inner".into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions {
                internal: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("internal exchange declared");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let confirm = channel
        .basic_publish(
            "inner".into(),
            "".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await
        .expect("publish sent");
    expect_error(
        confirm.await,
        403,
        "ACCESS_REFUSED - cannot publish to internal exchange 'inner' in vhost '/'",
    );
    assert!(connection.status().connected());

    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let confirm = channel
        .basic_publish(
            "nowhere".into(),
            "".into(),
            BasicPublishOptions::default(),
            b"x",
            BasicProperties::default(),
        )
        .await
        .expect("publish sent");
    expect_error(
        confirm.await,
        404,
        "NOT_FOUND - no exchange 'nowhere' in vhost '/'",
    );
    assert!(connection.status().connected());
    connection_usable(&connection).await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_delete_exchange_goes_with_its_last_binding() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker).await;
    let channel = connection.create_channel().await.expect("channel");
    channel
        .exchange_declare(
            "ad".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                auto_delete: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("declared");
    declare_queue(&channel, "ad-q1").await;
    declare_queue(&channel, "ad-q2").await;
    bind(&channel, "ad-q1", "ad", "a").await;
    bind(&channel, "ad-q2", "ad", "b").await;
    channel
        .queue_unbind(
            "ad-q1".into(),
            "ad".into(),
            "a".into(),
            FieldTable::default(),
        )
        .await
        .expect("unbound");
    // One binding left: the exchange is still there and routes.
    publish(&channel, "ad", "b", b"still").await;
    assert_eq!(drain(&channel, "ad-q2").await, bodies(&["still"]));
    publish(&channel, "ad", "a", b"unbound").await;
    assert!(drain(&channel, "ad-q1").await.is_empty());
    channel
        .queue_unbind(
            "ad-q2".into(),
            "ad".into(),
            "b".into(),
            FieldTable::default(),
        )
        .await
        .expect("unbound");
    let result = channel
        .exchange_declare(
            "ad".into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await;
    expect_error(result, 404, "NOT_FOUND - no exchange 'ad' in vhost '/'");
    broker.shutdown().await;
}
