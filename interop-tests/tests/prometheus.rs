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

/// Stream protocol traffic with `rabbitmq-stream-client`: the `protocol="stream"` samples
/// of the global counters (received, confirmed, delivered, publishers, consumers), the
/// highest consumer offset lag and the segment files, as rabbitmq_prometheus names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_protocol_traffic_is_counted_with_rabbitmq_stream_names() {
    use futures_lite::StreamExt;
    use rabbitmq_stream_client::types::{Message, OffsetSpecification};
    let delivered =
        "rabbitmq_global_messages_delivered_total{protocol=\"stream\",queue_type=\"rabbit_stream_queue\"}";
    let stream = |name: &str| format!("{name}{{protocol=\"stream\"}}");
    let broker = TestBroker::start().await;
    let before = scrape(&broker, "/metrics").await;
    assert_eq!(before[&stream("rabbitmq_global_publishers")], 0.0);
    assert_eq!(before["rabbitmq_stream_segments"], 0.0);
    let addr = broker.stream_addr();
    let environment = rabbitmq_stream_client::Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .build()
        .await
        .expect("connects");
    environment
        .stream_creator()
        .create("metered-stream")
        .await
        .expect("created");
    // Creating it again is refused: one STREAM_ALREADY_EXISTS response.
    assert!(environment
        .stream_creator()
        .create("metered-stream")
        .await
        .is_err());
    let producer = environment
        .producer()
        .build("metered-stream")
        .await
        .expect("producer");
    for body in ["m0", "m1", "m2", "m3"] {
        let status = producer
            .send_with_confirm(Message::builder().body(body.as_bytes().to_vec()).build())
            .await
            .expect("sent");
        assert!(status.confirmed());
    }
    let mut consumer = environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build("metered-stream")
        .await
        .expect("consumer");
    for _ in 0..4 {
        tokio::time::timeout(Duration::from_secs(10), consumer.next())
            .await
            .expect("in time")
            .expect("open")
            .expect("delivered");
    }
    let mut found = HashMap::new();
    assert!(
        wait_for_scrape(&broker, "/metrics", &mut found, |m| m.get(delivered)
            == Some(&4.0))
        .await,
        "delivered: {found:?}"
    );
    assert_eq!(
        found[&stream("rabbitmq_global_messages_received_total")],
        4.0
    );
    assert_eq!(
        found[&stream("rabbitmq_global_messages_received_confirm_total")],
        4.0
    );
    assert_eq!(
        found[&stream("rabbitmq_global_messages_confirmed_total")],
        4.0
    );
    assert_eq!(found[&stream("rabbitmq_global_publishers")], 1.0);
    assert_eq!(found[&stream("rabbitmq_global_consumers")], 1.0);
    assert_eq!(found["rabbitmq_stream_consumer_max_offset_lag"], 0.0);
    assert_eq!(found["rabbitmq_stream_segments"], 1.0);
    assert_eq!(
        found[&stream("rabbitmq_global_stream_error_stream_already_exists_total")],
        1.0
    );
    assert_eq!(
        found[&stream("rabbitmq_global_stream_error_access_refused_total")],
        0.0
    );
    let error_families = found
        .keys()
        .filter(|k| k.starts_with("rabbitmq_global_stream_error_"))
        .count();
    assert_eq!(error_families, 17, "RabbitMQ's 17 stream error counters");

    // A single active consumer group at `first`: the active member reads all four, the
    // waiting one stays at offset 0, four behind the end.
    let mut group = Vec::new();
    for _ in 0..2 {
        group.push(
            environment
                .consumer()
                .name("metered-group")
                .enable_single_active_consumer(true)
                .offset(OffsetSpecification::First)
                .consumer_update(|_, _| async { OffsetSpecification::First })
                .build("metered-stream")
                .await
                .expect("group member"),
        );
    }
    assert!(
        wait_for_scrape(&broker, "/metrics", &mut found, |m| m.get(delivered)
            == Some(&8.0))
        .await,
        "the active member read: {found:?}"
    );
    assert_eq!(found[&stream("rabbitmq_global_consumers")], 3.0);
    assert_eq!(found["rabbitmq_stream_consumer_max_offset_lag"], 4.0);
    let per_object = scrape(&broker, "/metrics/per-object").await;
    assert_eq!(
        per_object["rabbitmq_stream_consumer_max_offset_lag{vhost=\"/\",queue=\"metered-stream\"}"],
        4.0
    );
    assert_eq!(
        per_object["rabbitmq_stream_segments{vhost=\"/\",queue=\"metered-stream\"}"],
        1.0
    );
    for member in group {
        member.handle().close().await.expect("closed");
    }
    consumer.handle().close().await.expect("closed");
    producer.close().await.expect("closed");
    assert!(
        wait_for_scrape(&broker, "/metrics", &mut found, |m| {
            m.get(&stream("rabbitmq_global_consumers")) == Some(&0.0)
                && m.get(&stream("rabbitmq_global_publishers")) == Some(&0.0)
        })
        .await,
        "{found:?}"
    );
    // Lifetime counters stay.
    assert_eq!(
        found[&stream("rabbitmq_global_messages_confirmed_total")],
        4.0
    );
    // Each family is declared once.
    let response =
        warren_management::http::send(&broker.prometheus_addr(), "GET", "/metrics", None, None)
            .await
            .expect("scrape");
    let text = response.text();
    let mut types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let all = types.len();
    types.sort_unstable();
    types.dedup();
    assert_eq!(types.len(), all, "a family declared twice");
}

/// Scrapes `path` until `done` holds (or 10 s pass), leaving the last scrape in `found`.
async fn wait_for_scrape(
    broker: &TestBroker,
    path: &str,
    found: &mut HashMap<String, f64>,
    done: impl Fn(&HashMap<String, f64>) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        *found = scrape(broker, path).await;
        if done(found) {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
