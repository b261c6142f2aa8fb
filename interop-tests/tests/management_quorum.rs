//! Quorum queues through the management HTTP API and Prometheus, on a single node: declared
//! with `PUT /api/queues`, listed and shown with `type: quorum` and RabbitMQ's `leader`,
//! `members` and `online`, published into, got from with each ack mode, browsed, purged and
//! deleted, and counted per queue on `/metrics/per-object`. A lapin consumer shows in the
//! listing's consumer and unacknowledged counts.

use std::time::Duration;

use futures_lite::StreamExt;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use serde_json::{json, Value};
use warren_interop_tests::TestBroker;

const LIMIT: Duration = Duration::from_secs(10);

async fn queue(broker: &TestBroker, name: &str) -> Value {
    let shown = broker
        .api_as_guest("GET", &format!("/api/queues/%2F/{name}"), None)
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    shown.json()
}

async fn publish(broker: &TestBroker, queue: &str, body: &str) {
    let document = json!({
        "properties": {"delivery_mode": 2},
        "routing_key": queue,
        "payload": body,
        "payload_encoding": "string",
    });
    let published = broker
        .api_as_guest(
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            Some(&document.to_string()),
        )
        .await;
    assert_eq!(published.status, 200, "{}", published.text());
    assert_eq!(published.json()["routed"], true);
}

async fn get(broker: &TestBroker, queue: &str, count: u64, ackmode: &str) -> Vec<Value> {
    let body = json!({"count": count, "ackmode": ackmode, "encoding": "auto"});
    let got = broker
        .api_as_guest(
            "POST",
            &format!("/api/queues/%2F/{queue}/get"),
            Some(&body.to_string()),
        )
        .await;
    assert_eq!(got.status, 200, "{}", got.text());
    got.json().as_array().expect("a list").clone()
}

fn payloads(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["payload"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Waits until the queue's listing shows `ready` ready and `unacked` unacknowledged messages.
async fn wait_for_counts(broker: &TestBroker, name: &str, ready: u64, unacked: u64) -> Value {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let shown = queue(broker, name).await;
        if shown["messages_ready"] == ready && shown["messages_unacknowledged"] == unacked {
            return shown;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: expected {ready} ready and {unacked} unacked: {shown}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn scrape_per_object(broker: &TestBroker) -> String {
    let response = warren_management::http::send(
        &broker.prometheus_addr(),
        "GET",
        "/metrics/per-object",
        None,
        None,
    )
    .await
    .expect("scrape");
    assert_eq!(response.status, 200);
    response.text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_lists_gets_publishes_browses_purges_and_deletes_a_quorum_queue() {
    let broker = TestBroker::start().await;
    let node = broker
        .api_as_guest("GET", "/api/overview", None)
        .await
        .json()["node"]
        .as_str()
        .expect("the node's name")
        .to_string();
    let declared = broker
        .api_as_guest(
            "PUT",
            "/api/queues/%2F/orders",
            Some(r#"{"durable": true, "arguments": {"x-queue-type": "quorum"}}"#),
        )
        .await;
    assert_eq!(declared.status, 201, "{}", declared.text());
    // The UI's form names the type in `type` instead of an argument.
    let by_type = broker
        .api_as_guest(
            "PUT",
            "/api/queues/%2F/jobs",
            Some(r#"{"durable": true, "type": "quorum"}"#),
        )
        .await;
    assert_eq!(by_type.status, 201, "{}", by_type.text());
    assert!(
        broker
            .broker()
            .vhost("/")
            .unwrap()
            .queue("orders")
            .is_none(),
        "no classic queue under the quorum queue's name"
    );

    for body in ["one", "two", "three"] {
        publish(&broker, "orders", body).await;
    }
    let shown = wait_for_counts(&broker, "orders", 3, 0).await;
    assert_eq!(shown["type"], "quorum");
    assert_eq!(shown["durable"], true);
    assert_eq!(shown["auto_delete"], false);
    assert_eq!(shown["exclusive"], false);
    assert_eq!(shown["arguments"]["x-queue-type"], "quorum");
    assert_eq!(shown["messages"], 3);
    assert_eq!(shown["consumers"], 0);
    assert_eq!(shown["leader"], node.as_str());
    assert_eq!(shown["members"], json!([node]));
    assert_eq!(shown["online"], json!([node]));
    assert_eq!(shown["node"], node.as_str());

    let listed = broker.api_as_guest("GET", "/api/queues", None).await.json();
    let listed: Vec<&Value> = listed.as_array().expect("a list").iter().collect();
    let names: Vec<&str> = listed.iter().filter_map(|q| q["name"].as_str()).collect();
    assert_eq!(names, ["jobs", "orders"], "sorted, both quorum queues");
    assert!(listed.iter().all(|q| q["type"] == "quorum"));
    assert_eq!(listed[1]["messages_ready"], 3);
    let in_vhost = broker
        .api_as_guest("GET", "/api/queues/%2F", None)
        .await
        .json();
    assert_eq!(in_vhost.as_array().map(Vec::len), Some(2));
    let bindings = broker
        .api_as_guest("GET", "/api/queues/%2F/orders/bindings", None)
        .await;
    assert_eq!(bindings.status, 200, "{}", bindings.text());
    assert_eq!(bindings.json()[0]["source"], "");
    assert_eq!(bindings.json()[0]["routing_key"], "orders");

    // Browsing reads in place, by position.
    let browsed = broker
        .api_as_guest(
            "GET",
            "/api/queues/%2F/orders/browse?position=2&count=5",
            None,
        )
        .await;
    assert_eq!(browsed.status, 200, "{}", browsed.text());
    let browsed = browsed.json().as_array().expect("a list").clone();
    assert_eq!(payloads(&browsed), ["two", "three"]);
    assert_eq!(browsed[0]["position"], 2);
    wait_for_counts(&broker, "orders", 3, 0).await;
    // Browsed twice from the head: the same bodies, and the depth the API shows unchanged.
    for _ in 0..2 {
        let whole = broker
            .api_as_guest("GET", "/api/queues/%2F/orders/browse?count=10", None)
            .await
            .json();
        let whole = whole.as_array().expect("a list").clone();
        assert_eq!(payloads(&whole), ["one", "two", "three"]);
        assert_eq!(queue(&broker, "orders").await["messages_ready"], 3);
    }

    // Nack with requeue: both come back, in place, redelivered.
    let peeked = get(&broker, "orders", 2, "ack_requeue_true").await;
    assert_eq!(payloads(&peeked), ["one", "two"]);
    assert_eq!(peeked[0]["redelivered"], false);
    wait_for_counts(&broker, "orders", 3, 0).await;
    // Reject with requeue: counted as a failed delivery (`x-delivery-count`).
    let rejected = get(&broker, "orders", 1, "reject_requeue_true").await;
    assert_eq!(payloads(&rejected), ["one"]);
    wait_for_counts(&broker, "orders", 3, 0).await;
    // Acked: taken for good.
    let taken = get(&broker, "orders", 1, "ack_requeue_false").await;
    assert_eq!(payloads(&taken), ["one"]);
    assert_eq!(taken[0]["redelivered"], true);
    assert_eq!(
        taken[0]["properties"]["headers"]["x-delivery-count"], 1,
        "the reject with requeue counted, the nack did not: {}",
        taken[0]
    );
    wait_for_counts(&broker, "orders", 2, 0).await;
    let next = get(&broker, "orders", 1, "reject_requeue_false").await;
    assert_eq!(payloads(&next), ["two"]);
    wait_for_counts(&broker, "orders", 1, 0).await;

    // A consumer shows in the listing: one consumer, its delivery unacknowledged.
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .basic_qos(10, BasicQosOptions::default())
        .await
        .expect("qos");
    let mut consumer = channel
        .basic_consume(
            "orders".into(),
            "watcher".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let delivery = tokio::time::timeout(LIMIT, consumer.next())
        .await
        .expect("a delivery in time")
        .expect("a delivery")
        .expect("no error");
    assert_eq!(&delivery.data[..], b"three");
    let consumed = wait_for_counts(&broker, "orders", 0, 1).await;
    assert_eq!(consumed["consumers"], 1);
    // /api/consumers lists a quorum queue's consumer with its channel.
    let consumers = broker
        .api_as_guest("GET", "/api/consumers/%2F", None)
        .await
        .json();
    let listed: Vec<&Value> = consumers
        .as_array()
        .expect("a list")
        .iter()
        .filter(|c| c["queue"]["name"] == "orders")
        .collect();
    assert_eq!(listed.len(), 1, "{consumers}");
    assert_eq!(listed[0]["consumer_tag"], "watcher");
    assert_eq!(listed[0]["ack_required"], true);
    assert_eq!(listed[0]["channel_details"]["user"], "guest");
    connection.close(200, "bye".into()).await.expect("close");
    wait_for_counts(&broker, "orders", 1, 0).await;

    // Prometheus counts quorum queues per queue too.
    let metrics = scrape_per_object(&broker).await;
    assert!(
        metrics.contains("rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"orders\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("rabbitmq_queue_messages_ready{vhost=\"/\",queue=\"jobs\"} 0"),
        "{metrics}"
    );

    // Purge drops what is ready.
    publish(&broker, "orders", "four").await;
    wait_for_counts(&broker, "orders", 2, 0).await;
    let purged = broker
        .api_as_guest("DELETE", "/api/queues/%2F/orders/contents", None)
        .await;
    assert_eq!(purged.status, 204, "{}", purged.text());
    wait_for_counts(&broker, "orders", 0, 0).await;
    assert!(get(&broker, "orders", 1, "ack_requeue_false")
        .await
        .is_empty());

    // Delete: gone from the API and from the vhost.
    let deleted = broker
        .api_as_guest("DELETE", "/api/queues/%2F/orders", None)
        .await;
    assert_eq!(deleted.status, 204, "{}", deleted.text());
    let missing = broker
        .api_as_guest("GET", "/api/queues/%2F/orders", None)
        .await;
    assert_eq!(missing.status, 404);
    assert!(broker
        .broker()
        .vhost("/")
        .unwrap()
        .typed_queue("orders")
        .is_none());
    let again = broker
        .api_as_guest("DELETE", "/api/queues/%2F/orders", None)
        .await;
    assert_eq!(again.status, 404);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_nodes_quorum_queue_shows_one_member_and_refuses_membership_changes() {
    let broker = TestBroker::start().await;
    let node = broker
        .api_as_guest("GET", "/api/overview", None)
        .await
        .json()["node"]
        .as_str()
        .expect("the node's name")
        .to_string();
    let declared = broker
        .api_as_guest(
            "PUT",
            "/api/queues/%2F/solo",
            Some(r#"{"durable": true, "arguments": {"x-queue-type": "quorum"}}"#),
        )
        .await;
    assert_eq!(declared.status, 201, "{}", declared.text());
    publish(&broker, "solo", "one").await;
    publish(&broker, "solo", "two").await;

    let status = broker
        .api_as_guest("GET", "/api/queues/quorum/%2F/solo/status", None)
        .await;
    assert_eq!(status.status, 200, "{}", status.text());
    let rows = status.json();
    let rows = rows.as_array().expect("a list of members");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["Node Name"], node.as_str());
    assert_eq!(rows[0]["Raft State"], "leader");
    assert_eq!(rows[0]["Membership"], "voter");
    assert!(rows[0]["Commit Index"].as_u64() >= Some(2), "{rows:?}");

    // One member on this node: stopping it stops the queue, as RabbitMQ counts it.
    let check = broker
        .api_as_guest("GET", "/api/health/checks/node-is-quorum-critical", None)
        .await;
    assert_eq!(check.status, 503, "{}", check.text());
    assert_eq!(check.json()["queues"][0]["name"], "solo");

    // Membership and leadership need a cluster.
    let body = format!(r#"{{"node": "{node}"}}"#);
    let add = broker
        .api_as_guest(
            "POST",
            "/api/queues/quorum/%2F/solo/replicas/add",
            Some(&body),
        )
        .await;
    assert_eq!(add.status, 400, "{}", add.text());
    assert!(add.json()["reason"]
        .as_str()
        .is_some_and(|r| r.contains("runs alone")));
    let no_node = broker
        .api_as_guest("POST", "/api/queues/quorum/%2F/solo/leader", Some("{}"))
        .await;
    assert_eq!(no_node.status, 400, "{}", no_node.text());
    // They need the administrator tag; the status a user of the vhost may read.
    let user = broker
        .api_as_guest(
            "PUT",
            "/api/users/watcher",
            Some(r#"{"password": "pw", "tags": "management"}"#),
        )
        .await;
    assert_eq!(user.status, 201, "{}", user.text());
    let granted = broker
        .api_as_guest(
            "PUT",
            "/api/permissions/%2F/watcher",
            Some(r#"{"configure": ".*", "write": ".*", "read": ".*"}"#),
        )
        .await;
    assert!(
        granted.status == 201 || granted.status == 204,
        "{}",
        granted.text()
    );
    let refused = broker
        .api(
            "DELETE",
            "/api/queues/quorum/%2F/solo/replicas/delete",
            Some(("watcher", "pw")),
            Some(&body),
        )
        .await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    let read = broker
        .api(
            "GET",
            "/api/queues/quorum/%2F/solo/status",
            Some(("watcher", "pw")),
            None,
        )
        .await;
    assert_eq!(read.status, 200, "{}", read.text());

    // A classic queue has no Raft status.
    let classic = broker
        .api_as_guest("PUT", "/api/queues/%2F/plain", Some(r#"{"durable": true}"#))
        .await;
    assert_eq!(classic.status, 201, "{}", classic.text());
    let refused = broker
        .api_as_guest("GET", "/api/queues/quorum/%2F/plain/status", None)
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    let missing = broker
        .api_as_guest("GET", "/api/queues/quorum/%2F/nothing/status", None)
        .await;
    assert_eq!(missing.status, 404, "{}", missing.text());
}
