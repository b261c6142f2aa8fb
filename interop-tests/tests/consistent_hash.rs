//! The x-consistent-hash exchange plugin through lapin: enabled by configuration, bindings
//! weighted by their keys, messages spread by the weights, bad weights refused.

use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ErrorKind, ExchangeKind};
use warren_interop_tests::TestBroker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_hash_exchange_spreads_by_weight() {
    let broker = TestBroker::start_with(&[("plugins.consistent_hash_exchange", "true")]).await;
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .exchange_declare(
            "hashed".into(),
            ExchangeKind::Custom("x-consistent-hash".into()),
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("the plugin type is enabled");
    for (queue, weight) in [("light", "1"), ("heavy", "3")] {
        channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("declare");
        channel
            .queue_bind(
                queue.into(),
                "hashed".into(),
                weight.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("bind");
    }
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let total = 4000;
    for i in 0..total {
        channel
            .basic_publish(
                "hashed".into(),
                format!("order-{i}").as_str().into(),
                BasicPublishOptions::default(),
                b"x",
                BasicProperties::default(),
            )
            .await
            .expect("publish");
    }
    channel.wait_for_confirms().await.expect("all confirmed");
    let vhost = broker.broker().vhost("/").expect("vhost");
    let light = vhost.queue("light").unwrap().stats().ready;
    let heavy = vhost.queue("heavy").unwrap().stats().ready;
    assert_eq!(
        light + heavy,
        total,
        "each message goes to exactly one queue"
    );
    let share = heavy as f64 / total as f64;
    assert!((share - 0.75).abs() < 0.05, "heavy got {heavy} of {total}");
    // The same routing key always lands in the same queue.
    channel
        .basic_publish(
            "hashed".into(),
            "order-1".into(),
            BasicPublishOptions::default(),
            b"again",
            BasicProperties::default(),
        )
        .await
        .expect("publish");
    channel.wait_for_confirms().await.expect("confirmed");
    let grown: Vec<&str> = ["light", "heavy"]
        .into_iter()
        .filter(|q| {
            let now = vhost.queue(q).unwrap().stats().ready;
            now == if *q == "light" { light + 1 } else { heavy + 1 }
        })
        .collect();
    assert_eq!(grown.len(), 1);

    let error = channel
        .queue_bind(
            "light".into(),
            "hashed".into(),
            "heavy".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect_err("a non-numeric weight is refused");
    match error.kind() {
        ErrorKind::ProtocolError(e) => assert_eq!(e.get_id(), 406),
        other => panic!("expected 406, got {other:?}"),
    }
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_type_is_unknown_unless_enabled() {
    let broker = TestBroker::start().await;
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    let error = channel
        .exchange_declare(
            "hashed".into(),
            ExchangeKind::Custom("x-consistent-hash".into()),
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect_err("not enabled");
    match error.kind() {
        ErrorKind::ProtocolError(e) => {
            assert_eq!(e.get_id(), 406);
            assert_eq!(
                e.get_message().as_str(),
                "PRECONDITION_FAILED - unknown exchange type 'x-consistent-hash'"
            );
        }
        other => panic!("expected 406, got {other:?}"),
    }
    broker.shutdown().await;
}
