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

fn samples(details: &Value) -> Vec<(u64, u64)> {
    details["samples"]
        .as_array()
        .unwrap_or_else(|| panic!("samples in {details}"))
        .iter()
        .map(|s| {
            (
                s["timestamp"].as_u64().expect("timestamp"),
                s["sample"].as_u64().expect("sample"),
            )
        })
        .collect()
}

/// RabbitMQ's history shape: `age / incr + 1` samples, newest first, on multiples of `incr`
/// seconds, with `avg` and `avg_rate`.
fn assert_history(details: &Value, incr_ms: u64, count: usize) -> Vec<(u64, u64)> {
    let list = samples(details);
    assert_eq!(list.len(), count, "{details}");
    for pair in list.windows(2) {
        assert_eq!(pair[0].0 - pair[1].0, incr_ms, "{details}");
    }
    assert!(list.iter().all(|(t, _)| t % incr_ms == 0), "{details}");
    assert!(details["avg"].is_number(), "{details}");
    assert!(details["avg_rate"].is_number(), "{details}");
    list
}

async fn publish(channel: &lapin::Channel, exchange: &str, key: &str) {
    channel
        .basic_publish(
            exchange.into(),
            key.into(),
            BasicPublishOptions::default(),
            b"m",
            BasicProperties::default(),
        )
        .await
        .expect("publish")
        .await
        .expect("confirmed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchange_rates_length_rates_and_history_follow_known_traffic() {
    let broker = TestBroker::start_with(&[("collect_statistics_interval", "200")]).await;
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    for (name, kind) in [("fan", "fanout"), ("nowhere", "direct")] {
        let body = format!(r#"{{"type":"{kind}","durable":false}}"#);
        let path = format!("/api/exchanges/%2F/{name}");
        let made = broker.api_as_guest("PUT", &path, Some(&body)).await;
        assert_eq!(made.status, 201);
    }
    for queue in ["left", "right"] {
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
                "fan".into(),
                "".into(),
                Default::default(),
                FieldTable::default(),
            )
            .await
            .expect("bind");
    }

    // Publish into the fanout exchange (two queues, no consumers) until the sampler has
    // seen the exchange rates and the queues' and node's length rates.
    let stop = Arc::new(AtomicBool::new(false));
    let publisher = {
        let stop = Arc::clone(&stop);
        let channel = channel.clone();
        tokio::spawn(async move {
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                publish(&channel, "fan", "").await;
                sent += 1;
            }
            sent
        })
    };
    let busy = wait_for_async(LIMIT, || async {
        let exchange = get(&broker, "/api/exchanges/%2F/fan").await;
        let queue = get(&broker, "/api/queues/%2F/left").await;
        let overview = get(&broker, "/api/overview").await;
        let publish_in = rate(&exchange, "publish_in");
        publish_in > 0.0
            && rate(&exchange, "publish_out") >= publish_in
            && queue["messages_details"]["rate"].as_f64().unwrap_or(0.0) > 0.0
            && queue["messages_ready_details"]["rate"]
                .as_f64()
                .unwrap_or(0.0)
                > 0.0
            && overview["queue_totals"]["messages_details"]["rate"]
                .as_f64()
                .unwrap_or(0.0)
                > 0.0
    })
    .await;
    assert!(
        busy,
        "exchange and length rates are non-zero during traffic"
    );
    stop.store(true, Ordering::Relaxed);
    let sent = publisher.await.expect("publisher");

    // Counts are exact: one in per publish, one out per queue reached; unroutable publishes
    // count in only; the default exchange counts too (as `amq.default` in paths).
    for _ in 0..3 {
        publish(&channel, "nowhere", "x").await;
    }
    for _ in 0..2 {
        publish(&channel, "", "left").await;
    }
    let exchange = get(&broker, "/api/exchanges/%2F/fan").await;
    assert_eq!(exchange["message_stats"]["publish_in"], sent);
    assert_eq!(exchange["message_stats"]["publish_out"], 2 * sent);
    let nowhere = get(&broker, "/api/exchanges/%2F/nowhere").await;
    assert_eq!(nowhere["message_stats"]["publish_in"], 3);
    assert_eq!(nowhere["message_stats"]["publish_out"], 0);
    let default = get(&broker, "/api/exchanges/%2F/amq.default").await;
    assert_eq!(default["name"], "");
    assert_eq!(default["message_stats"]["publish_in"], 2);
    assert_eq!(default["message_stats"]["publish_out"], 2);
    let listed = get(&broker, "/api/exchanges/%2F").await;
    let fan = listed
        .as_array()
        .expect("list")
        .iter()
        .find(|e| e["name"] == "fan")
        .expect("fan listed");
    assert_eq!(fan["message_stats"]["publish_in"], sent);
    let left = get(&broker, "/api/queues/%2F/left").await;
    assert_eq!(left["messages"], sent + 2);
    assert_eq!(left["messages_ready"], sent + 2);
    assert_eq!(left["messages_unacknowledged"], 0);
    assert_eq!(left["messages_unacknowledged_details"]["rate"], 0.0);

    // Rates fall to zero once traffic stops and the sampler has seen the last messages.
    let idle = wait_for_async(LIMIT, || async {
        let exchange = get(&broker, "/api/exchanges/%2F/fan").await;
        let queue = get(&broker, "/api/queues/%2F/left").await;
        rate(&exchange, "publish_in") == 0.0
            && rate(&exchange, "publish_out") == 0.0
            && queue["messages_details"]["rate"] == 0.0
    })
    .await;
    assert!(idle, "rates are zero once traffic stops");

    // History: 6 samples a second apart, newest first, counters never decreasing over time.
    // Counter samples stop at the last whole second (RabbitMQ's floor), so the final count
    // shows once that second has passed a sample taken after the traffic.
    const FAN_HISTORY: &str = "/api/exchanges/%2F/fan?msg_rates_age=5&msg_rates_incr=1";
    let settled = wait_for_async(LIMIT, || async {
        let exchange = get(&broker, FAN_HISTORY).await;
        samples(&exchange["message_stats"]["publish_in_details"])
            .first()
            .map(|s| s.1)
            == Some(sent)
    })
    .await;
    assert!(settled, "the newest publish_in sample reaches {sent}");
    let exchange = get(&broker, FAN_HISTORY).await;
    let history = assert_history(&exchange["message_stats"]["publish_in_details"], 1000, 6);
    assert!(history.windows(2).all(|w| w[0].1 >= w[1].1), "{history:?}");
    let out = assert_history(&exchange["message_stats"]["publish_out_details"], 1000, 6);
    assert!(out.windows(2).all(|w| w[0].1 >= w[1].1), "{out:?}");
    assert!(out[0].1 <= 2 * sent && out[0].1 > 0, "{out:?}");
    // Without the parameters there is no history.
    let plain = get(&broker, "/api/exchanges/%2F/fan").await;
    assert!(plain["message_stats"]["publish_in_details"]
        .get("samples")
        .is_none());

    // Length history: the newest sample is the live length (rounded up, as RabbitMQ does).
    let queue = get(
        &broker,
        "/api/queues/%2F/left?lengths_age=4&lengths_incr=2&msg_rates_age=4&msg_rates_incr=2",
    )
    .await;
    let lengths = assert_history(&queue["messages_details"], 2000, 3);
    assert_eq!(lengths[0].1, sent + 2);
    assert_history(&queue["messages_ready_details"], 2000, 3);
    assert_history(&queue["messages_unacknowledged_details"], 2000, 3);
    assert_history(&queue["message_stats"]["publish_details"], 2000, 3);
    let overview = get(&broker, "/api/overview?lengths_age=4&lengths_incr=2").await;
    let totals = assert_history(&overview["queue_totals"]["messages_details"], 2000, 3);
    assert_eq!(totals[0].1, 2 * sent + 2);
    assert_eq!(overview["queue_totals"]["messages"], 2 * sent + 2);
    let vhost = get(&broker, "/api/vhosts/%2F?msg_rates_age=4&msg_rates_incr=2").await;
    assert_history(&vhost["message_stats"]["publish_details"], 2000, 3);

    // Bad windows are refused as RabbitMQ refuses them; non-integers are ignored.
    for query in [
        "msg_rates_age=0&msg_rates_incr=5",
        "msg_rates_age=60&msg_rates_incr=0",
        "lengths_age=-5&lengths_incr=5",
        "lengths_age=1000&lengths_incr=1",
    ] {
        for path in [
            "/api/overview",
            "/api/queues/%2F/left",
            "/api/exchanges/%2F",
            "/api/vhosts",
        ] {
            let response = broker
                .api_as_guest("GET", &format!("{path}?{query}"), None)
                .await;
            assert_eq!(response.status, 400, "{path}?{query}");
            let body = response.json();
            assert_eq!(body["error"], "bad_request");
            assert!(body["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("Invalid range parameters: age ")));
        }
    }
    let ignored = get(
        &broker,
        "/api/queues/%2F/left?msg_rates_age=foo&msg_rates_incr=5",
    )
    .await;
    assert!(ignored["message_stats"]["publish_details"]
        .get("samples")
        .is_none());

    connection.close(200, "done".into()).await.expect("close");
    broker.shutdown().await;
}
