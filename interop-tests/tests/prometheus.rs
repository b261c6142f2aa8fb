//! Prometheus metrics after known AMQP traffic (lapin): the text format parses, and the
//! RabbitMQ metric names carry the counts the traffic produced, aggregated on /metrics and
//! per queue on /metrics/per-object.

use std::collections::HashMap;
use std::time::Duration;

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use warren_interop_tests::{wait_for, TestBroker};

/// Parses the exposition text into `name{labels}` -> value, checking every line's shape.
fn parse(text: &str) -> HashMap<String, f64> {
    let mut samples = HashMap::new();
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix("# ") {
            assert!(
                comment.starts_with("TYPE ") || comment.starts_with("HELP "),
                "bad comment: {line}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("sample has a value");
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad metric name: {line}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "bad labels: {line}");
        }
        let value: f64 = value.parse().expect("numeric value");
        samples.insert(series.to_string(), value);
    }
    samples
}

async fn scrape(broker: &TestBroker, path: &str) -> HashMap<String, f64> {
    let response =
        warren_management::http::send(&broker.prometheus_addr(), "GET", path, None, None)
            .await
            .expect("scrape");
    assert_eq!(response.status, 200);
    assert!(response
        .headers
        .iter()
        .any(|(n, v)| n == "content-type" && v.starts_with("text/plain; version=0.0.4")));
    parse(&response.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_known_traffic_with_rabbitmq_names() {
    let broker = TestBroker::start().await;
    let before = scrape(&broker, "/metrics").await;
    assert_eq!(before["rabbitmq_connections"], 0.0);
    assert_eq!(before["rabbitmq_queues"], 0.0);

    let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    channel
        .queue_declare(
            "metered".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declare");
    for index in 0..5 {
        channel
            .basic_publish(
                "".into(),
                "metered".into(),
                BasicPublishOptions::default(),
                format!("m{index}").as_bytes(),
                BasicProperties::default(),
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
    }
    // Two unroutable messages: one dropped, one returned (mandatory).
    for mandatory in [false, true] {
        channel
            .basic_publish(
                "amq.direct".into(),
                "nowhere".into(),
                BasicPublishOptions {
                    mandatory,
                    ..BasicPublishOptions::default()
                },
                b"lost",
                BasicProperties::default(),
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
    }
    // Two fetched: one acked, one left unacked.
    let first = channel
        .basic_get("metered".into(), BasicGetOptions::default())
        .await
        .expect("get")
        .expect("a message");
    first
        .delivery
        .acker
        .ack(BasicAckOptions::default())
        .await
        .expect("ack");
    let _second = channel
        .basic_get("metered".into(), BasicGetOptions::default())
        .await
        .expect("get")
        .expect("a message");
    assert!(
        wait_for(Duration::from_secs(5), || {
            let stats = broker
                .broker()
                .vhost("/")
                .unwrap()
                .queue("metered")
                .unwrap()
                .stats();
            stats.acknowledged == 1 && stats.unacknowledged == 1
        })
        .await
    );

    let metrics = scrape(&broker, "/metrics").await;
    let global = |name: &str| metrics[&format!("{name}{{protocol=\"amqp091\"}}")];
    assert_eq!(metrics["rabbitmq_connections"], 1.0);
    assert_eq!(metrics["rabbitmq_channels"], 1.0);
    assert_eq!(metrics["rabbitmq_connections_opened_total"], 1.0);
    assert_eq!(metrics["rabbitmq_queues"], 1.0);
    assert_eq!(metrics["rabbitmq_queue_messages_ready"], 3.0);
    assert_eq!(metrics["rabbitmq_queue_messages_unacked"], 1.0);
    assert_eq!(metrics["rabbitmq_queue_messages"], 4.0);
    assert_eq!(global("rabbitmq_global_messages_received_total"), 7.0);
    assert_eq!(global("rabbitmq_global_messages_routed_total"), 5.0);
    assert_eq!(
        global("rabbitmq_global_messages_unroutable_dropped_total"),
        1.0
    );
    assert_eq!(
        global("rabbitmq_global_messages_unroutable_returned_total"),
        1.0
    );
    assert_eq!(global("rabbitmq_global_messages_confirmed_total"), 7.0);
    assert_eq!(global("rabbitmq_global_messages_delivered_total"), 2.0);
    assert_eq!(global("rabbitmq_global_messages_acknowledged_total"), 1.0);
    assert_eq!(metrics["rabbitmq_alarms_memory_used_watermark"], 0.0);
    assert!(metrics["rabbitmq_process_resident_memory_bytes"] > 0.0);
    assert!(metrics
        .keys()
        .any(|k| k.starts_with("rabbitmq_identity_info{")));

    let per_object = scrape(&broker, "/metrics/per-object").await;
    assert_eq!(
        per_object["rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"metered\"}"],
        3.0
    );
    assert_eq!(
        per_object["rabbitmq_queue_messages_unacked{vhost=\"/\",queue=\"metered\"}"],
        1.0
    );

    connection.close(200, "bye".into()).await.expect("close");
    assert!(
        wait_for(Duration::from_secs(5), || broker
            .broker()
            .connections()
            .count()
            == 0)
        .await
    );
    let after = scrape(&broker, "/metrics").await;
    assert_eq!(after["rabbitmq_connections"], 0.0);
    assert_eq!(after["rabbitmq_connections_closed_total"], 1.0);
    // The unacked message went back to the queue when the connection closed.
    assert_eq!(after["rabbitmq_queue_messages_ready"], 4.0);
    broker.shutdown().await;
}
