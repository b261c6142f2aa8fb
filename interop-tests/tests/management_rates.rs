//! Message rates and lifetime totals in the management API and Prometheus: with a short
//! `collect_statistics_interval`, `message_stats.*_details.rate` is non-zero on
//! /api/overview, /api/vhosts and /api/queues while lapin publishes, consumes and acks, and
//! falls to zero once the traffic stops; node totals (`message_stats` counts and
//! `rabbitmq_global_*_total`) do not drop when the queue that counted them is deleted.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::Value;
use warren_interop_tests::{wait_for_async, TestBroker};

const LIMIT: Duration = Duration::from_secs(15);

fn rate(stats: &Value, name: &str) -> f64 {
    stats["message_stats"][format!("{name}_details")]["rate"]
        .as_f64()
        .unwrap_or(0.0)
}

async fn get(broker: &TestBroker, path: &str) -> Value {
    let response = broker.api_as_guest("GET", path, None).await;
    assert_eq!(response.status, 200, "{path}");
    response.json()
}

async fn global_total(broker: &TestBroker, name: &str) -> f64 {
    let response =
        warren_management::http::send(&broker.prometheus_addr(), "GET", "/metrics", None, None)
            .await
            .expect("scrape");
    response
        .text()
        .lines()
        .find(|line| line.starts_with(name))
        .and_then(|line| line.rsplit_once(' '))
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or_else(|| panic!("{name} is exported"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rates_follow_traffic_and_totals_survive_queue_deletion() {
    let broker = TestBroker::start_with(&[("collect_statistics_interval", "200")]).await;
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .queue_declare(
            "rated".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declare");
    // A consumer that acks everything.
    let consumer_channel = connection.create_channel().await.expect("channel");
    let mut consumer = consumer_channel
        .basic_consume(
            "rated".into(),
            "c".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let acker = tokio::spawn(async move {
        while let Some(Ok(delivery)) = consumer.next().await {
            let _ = delivery.ack(BasicAckOptions::default()).await;
        }
    });
    // Publish with confirms until the rates have been seen.
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let stop = Arc::clone(&stop);
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirms");
        tokio::spawn(async move {
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                channel
                    .basic_publish(
                        "".into(),
                        "rated".into(),
                        BasicPublishOptions::default(),
                        b"tick",
                        BasicProperties::default(),
                    )
                    .await
                    .expect("publish")
                    .await
                    .expect("confirmed");
                sent += 1;
            }
            sent
        })
    };
    let busy = wait_for_async(LIMIT, || async {
        let overview = get(&broker, "/api/overview").await;
        let queue = get(&broker, "/api/queues/%2F/rated").await;
        let vhost = get(&broker, "/api/vhosts/%2F").await;
        ["publish", "confirm", "deliver_get", "ack"]
            .iter()
            .all(|name| rate(&overview, name) > 0.0)
            && ["publish", "deliver_get", "ack"]
                .iter()
                .all(|name| rate(&queue, name) > 0.0)
            && rate(&vhost, "publish") > 0.0
    })
    .await;
    assert!(busy, "rates are non-zero during traffic");
    let overview = get(&broker, "/api/overview").await;
    assert_eq!(overview["rates_mode"], "basic");
    assert!(overview["message_stats"]["publish"].as_u64().unwrap() > 0);

    stop.store(true, Ordering::Relaxed);
    let sent = publisher.await.expect("publisher");
    // Everything sent is acked, then the rates fall to zero.
    let drained = wait_for_async(LIMIT, || async {
        let queue = get(&broker, "/api/queues/%2F/rated").await;
        queue["message_stats"]["ack"].as_u64() == Some(sent)
    })
    .await;
    assert!(drained, "all {sent} messages acked");
    let idle = wait_for_async(LIMIT, || async {
        let overview = get(&broker, "/api/overview").await;
        let queue = get(&broker, "/api/queues/%2F/rated").await;
        ["publish", "confirm", "deliver_get", "ack"]
            .iter()
            .all(|name| rate(&overview, name) == 0.0)
            && ["publish", "deliver_get", "ack"]
                .iter()
                .all(|name| rate(&queue, name) == 0.0)
    })
    .await;
    assert!(idle, "rates are zero once traffic stops");

    // Totals survive the deletion of the queue that counted them.
    let before = get(&broker, "/api/overview").await["message_stats"].clone();
    let delivered = global_total(&broker, "rabbitmq_global_messages_delivered_total").await;
    let acked = global_total(&broker, "rabbitmq_global_messages_acknowledged_total").await;
    assert_eq!(delivered, sent as f64);
    assert_eq!(acked, sent as f64);
    connection.close(200, "done".into()).await.expect("close");
    acker.abort();
    let deleted = broker
        .api_as_guest("DELETE", "/api/queues/%2F/rated", None)
        .await;
    assert_eq!(deleted.status, 204);
    let after = get(&broker, "/api/overview").await["message_stats"].clone();
    for name in ["publish", "confirm", "deliver_get", "ack", "queue_publish"] {
        assert_eq!(after[name], before[name], "{name} after the queue is gone");
    }
    assert_eq!(
        global_total(&broker, "rabbitmq_global_messages_delivered_total").await,
        delivered
    );
    assert_eq!(
        global_total(&broker, "rabbitmq_global_messages_acknowledged_total").await,
        acked
    );
    broker.shutdown().await;
}
