//! Over HTTP against a broker this test starts: browsing a classic queue by position and a
//! stream by offset without consuming (messages published with lapin and the stream
//! client), vhost and user limits in RabbitMQ's API shape, and request bodies that do not
//! fit answered 400 with RabbitMQ's error shape and a reason naming the field.

mod lapin_common;

use std::time::Duration;

use lapin::options::{BasicGetOptions, BasicRejectOptions};
use lapin::BasicProperties;
use serde_json::{json, Value as Json};
use warren_interop_tests::TestBroker;

async fn ok(broker: &TestBroker, method: &str, path: &str, body: Option<&str>) -> Json {
    let response = broker.api_as_guest(method, path, body).await;
    assert!(
        response.status < 300,
        "{method} {path}: {} {}",
        response.status,
        response.text()
    );
    response.json()
}

fn payloads(list: &Json) -> Vec<String> {
    list.as_array()
        .expect("an array")
        .iter()
        .map(|m| m["payload"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_queue_is_browsed_by_position_without_consuming() {
    let broker = TestBroker::start().await;
    let (connection, channel) = lapin_common::connect(&broker).await;
    lapin_common::declare(&channel, "browsed", Default::default()).await;
    for body in ["m1", "m2", "m3", "m4", "m5"] {
        let properties = BasicProperties::default().with_message_id(format!("id-{body}").into());
        lapin_common::publish(&channel, "browsed", body.as_bytes(), properties).await;
    }
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(5), || {
            lapin_common::stats(&broker, "browsed").ready == 5
        })
        .await
    );

    let head = ok(&broker, "GET", "/api/queues/%2F/browsed/browse", None).await;
    assert_eq!(payloads(&head), ["m1"], "one message by default: {head}");
    assert_eq!(head[0]["position"], 1);
    assert_eq!(head[0]["properties"]["message_id"], "id-m1");
    assert_eq!(head[0]["message_count"], 5);

    let middle = ok(
        &broker,
        "GET",
        "/api/queues/%2F/browsed/browse?position=2&count=3",
        None,
    )
    .await;
    assert_eq!(payloads(&middle), ["m2", "m3", "m4"]);
    let positions: Vec<_> = middle
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["position"].as_u64().unwrap())
        .collect();
    assert_eq!(positions, [2, 3, 4]);
    let tail = ok(
        &broker,
        "GET",
        "/api/queues/%2F/browsed/browse?position=5&count=10&encoding=base64",
        None,
    )
    .await;
    assert_eq!(payloads(&tail), ["bTU="], "m5 in base64: {tail}");
    assert_eq!(tail[0]["payload_encoding"], "base64");
    let beyond = ok(
        &broker,
        "GET",
        "/api/queues/%2F/browsed/browse?position=6",
        None,
    )
    .await;
    assert_eq!(beyond, json!([]));

    // Nothing was taken: a real consumer still gets m1 first, and its requeue shows as a
    // redelivery at the head.
    assert_eq!(lapin_common::stats(&broker, "browsed").ready, 5);
    let got = channel
        .basic_get("browsed".into(), BasicGetOptions::default())
        .await
        .expect("basic.get")
        .expect("a message");
    assert_eq!(got.delivery.data, b"m1");
    // While m1 is unacknowledged it is not ready, and the head is m2.
    let head = ok(&broker, "GET", "/api/queues/%2F/browsed/browse", None).await;
    assert_eq!(payloads(&head), ["m2"]);
    got.delivery
        .reject(BasicRejectOptions { requeue: true })
        .await
        .expect("requeue");
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(5), || {
            lapin_common::stats(&broker, "browsed").ready == 5
        })
        .await
    );
    let head = ok(
        &broker,
        "GET",
        "/api/queues/%2F/browsed/browse?count=2&truncate=1",
        None,
    )
    .await;
    assert_eq!(payloads(&head), ["m", "m"], "truncated to one byte: {head}");
    assert_eq!(head[0]["redelivered"], true);
    assert_eq!(head[0]["payload_bytes"], 2);
    assert_eq!(head[1]["redelivered"], false);

    // Bad queries are 400s that say what to send; a missing queue is 404.
    for (query, reason) in [
        (
            "position=0",
            "position: the head of the queue is position 1",
        ),
        ("count=0", "count: expected 1 to 1000"),
        ("count=lots", "count: expected a whole number"),
        ("encoding=hex", "encoding: unknown variant `hex`"),
    ] {
        let response = broker
            .api_as_guest(
                "GET",
                &format!("/api/queues/%2F/browsed/browse?{query}"),
                None,
            )
            .await;
        assert_eq!(response.status, 400, "{query}: {}", response.text());
        let body = response.json();
        assert_eq!(body["error"], "bad_request");
        assert!(
            body["reason"]
                .as_str()
                .unwrap_or_default()
                .starts_with(reason),
            "{query}: {body}"
        );
    }
    let missing = broker
        .api_as_guest("GET", "/api/queues/%2F/nowhere/browse", None)
        .await;
    assert_eq!(missing.status, 404, "{}", missing.text());

    // Browsing needs read permission on the queue, as /get does.
    ok(
        &broker,
        "PUT",
        "/api/users/peeker",
        Some(r#"{"password":"pw","tags":"management"}"#),
    )
    .await;
    ok(
        &broker,
        "PUT",
        "/api/permissions/%2F/peeker",
        Some(r#"{"configure":"","write":"","read":"^other$"}"#),
    )
    .await;
    let refused = broker
        .api(
            "GET",
            "/api/queues/%2F/browsed/browse",
            Some(("peeker", "pw")),
            None,
        )
        .await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    assert_eq!(lapin_common::stats(&broker, "browsed").ready, 5);
    connection.close(200, "done".into()).await.ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_browsed_by_offset() {
    let broker = TestBroker::start().await;
    ok(
        &broker,
        "PUT",
        "/api/queues/%2F/events",
        Some(r#"{"durable":true,"arguments":{"x-queue-type":"stream"}}"#),
    )
    .await;
    let addr = broker.stream_addr();
    let environment = rabbitmq_stream_client::Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .build()
        .await
        .expect("stream client connects");
    let producer = environment
        .producer()
        .build("events")
        .await
        .expect("producer");
    for body in ["e0", "e1", "e2", "e3"] {
        let message = rabbitmq_stream_client::types::Message::builder()
            .body(body.as_bytes().to_vec())
            .build();
        let confirmed = producer.send_with_confirm(message).await.expect("sent");
        assert!(confirmed.confirmed());
    }
    producer.close().await.expect("closed");

    let first = ok(
        &broker,
        "GET",
        "/api/queues/%2F/events/browse?count=10",
        None,
    )
    .await;
    assert_eq!(payloads(&first), ["e0", "e1", "e2", "e3"], "{first}");
    assert_eq!(first[0]["offset"], 0);
    let later = ok(
        &broker,
        "GET",
        "/api/queues/%2F/events/browse?offset=2&count=1",
        None,
    )
    .await;
    assert_eq!(payloads(&later), ["e2"], "{later}");
    assert_eq!(later[0]["offset"], 2);
    // Browsing a stream consumes nothing either.
    let again = ok(
        &broker,
        "GET",
        "/api/queues/%2F/events/browse?count=10",
        None,
    )
    .await;
    assert_eq!(payloads(&again).len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_and_user_limits_are_kept_listed_and_exported_in_rabbitmqs_shape() {
    let broker = TestBroker::start().await;
    assert_eq!(
        ok(&broker, "GET", "/api/vhost-limits", None).await,
        json!([])
    );
    let put = broker
        .api_as_guest(
            "PUT",
            "/api/vhost-limits/%2F/max-queues",
            Some(r#"{"value": 100}"#),
        )
        .await;
    assert_eq!(put.status, 204, "{}", put.text());
    ok(
        &broker,
        "PUT",
        "/api/vhost-limits/%2F/max-connections",
        Some(r#"{"value": "10"}"#),
    )
    .await;
    assert_eq!(
        ok(&broker, "GET", "/api/vhost-limits", None).await,
        json!([{"vhost": "/", "value": {"max-queues": 100, "max-connections": 10}}])
    );
    assert_eq!(
        ok(&broker, "GET", "/api/vhost-limits/%2F", None).await[0]["value"]["max-queues"],
        100
    );
    // Kept as RabbitMQ keeps them: the vhost-limits runtime parameter, so exports carry it.
    let definitions = ok(&broker, "GET", "/api/definitions", None).await;
    let parameter = definitions["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .find(|p| p["component"] == "vhost-limits")
        .cloned()
        .unwrap_or_else(|| panic!("exported: {definitions}"));
    assert_eq!(parameter["name"], "limits");
    assert_eq!(parameter["value"]["max-queues"], 100);

    let unknown = broker
        .api_as_guest(
            "PUT",
            "/api/vhost-limits/%2F/max-exchanges",
            Some(r#"{"value": 1}"#),
        )
        .await;
    assert_eq!(unknown.status, 400);
    assert!(unknown.json()["reason"]
        .as_str()
        .unwrap()
        .contains("max-connections and max-queues"));
    let not_a_number = broker
        .api_as_guest(
            "PUT",
            "/api/vhost-limits/%2F/max-queues",
            Some(r#"{"value": "many"}"#),
        )
        .await;
    assert_eq!(not_a_number.status, 400);
    assert!(not_a_number.json()["reason"]
        .as_str()
        .unwrap()
        .starts_with("value: invalid value"));
    let deleted = broker
        .api_as_guest("DELETE", "/api/vhost-limits/%2F/max-queues", None)
        .await;
    assert_eq!(deleted.status, 204);
    assert_eq!(
        ok(&broker, "GET", "/api/vhost-limits", None).await,
        json!([{"vhost": "/", "value": {"max-connections": 10}}])
    );
    let missing_vhost = broker
        .api_as_guest(
            "PUT",
            "/api/vhost-limits/nowhere/max-queues",
            Some(r#"{"value": 1}"#),
        )
        .await;
    assert_eq!(missing_vhost.status, 404);

    // User limits.
    ok(
        &broker,
        "PUT",
        "/api/user-limits/guest/max-channels",
        Some(r#"{"value": 64}"#),
    )
    .await;
    assert_eq!(
        ok(&broker, "GET", "/api/user-limits", None).await,
        json!([{"user": "guest", "value": {"max-channels": 64}}])
    );
    assert_eq!(
        ok(&broker, "GET", "/api/user-limits/guest", None).await[0]["value"]["max-channels"],
        64
    );
    // In the user record, where RabbitMQ shows them and exports them.
    let guest = ok(&broker, "GET", "/api/users/guest", None).await;
    assert_eq!(guest["limits"], json!({"max-channels": 64}), "{guest}");
    let definitions = ok(&broker, "GET", "/api/definitions", None).await;
    let exported = definitions["users"]
        .as_array()
        .and_then(|users| users.iter().find(|u| u["name"] == "guest"))
        .cloned()
        .unwrap_or_else(|| panic!("guest exported: {definitions}"));
    assert_eq!(exported["limits"], json!({"max-channels": 64}));
    // A RabbitMQ definitions file's users[].limits are imported.
    let imported = r#"{"users": [{"name": "limited", "password_hash": "", "tags": "",
        "limits": {"max-connections": 3}}]}"#;
    ok(&broker, "POST", "/api/definitions", Some(imported)).await;
    let limited = ok(&broker, "GET", "/api/user-limits/limited", None).await;
    assert_eq!(
        limited,
        json!([{"user": "limited", "value": {"max-connections": 3}}])
    );
    ok(&broker, "DELETE", "/api/users/limited", None).await;
    let wrong = broker
        .api_as_guest(
            "PUT",
            "/api/user-limits/guest/max-queues",
            Some(r#"{"value": 1}"#),
        )
        .await;
    assert_eq!(wrong.status, 400, "{}", wrong.text());
    ok(
        &broker,
        "DELETE",
        "/api/user-limits/guest/max-channels",
        None,
    )
    .await;
    assert_eq!(
        ok(&broker, "GET", "/api/user-limits", None).await,
        json!([])
    );
    // A deleted user's limits go with it: the same name made again has none.
    let user = r#"{"password":"pw","tags":""}"#;
    ok(&broker, "PUT", "/api/users/brief", Some(user)).await;
    let limit = r#"{"value": 2}"#;
    ok(
        &broker,
        "PUT",
        "/api/user-limits/brief/max-connections",
        Some(limit),
    )
    .await;
    ok(&broker, "DELETE", "/api/users/brief", None).await;
    ok(&broker, "PUT", "/api/users/brief", Some(user)).await;
    let after = ok(&broker, "GET", "/api/user-limits", None).await;
    assert_eq!(after, json!([]));

    // Only administrators change limits.
    ok(
        &broker,
        "PUT",
        "/api/users/watcher",
        Some(r#"{"password":"pw","tags":"monitoring"}"#),
    )
    .await;
    let refused = broker
        .api(
            "PUT",
            "/api/vhost-limits/%2F/max-queues",
            Some(("watcher", "pw")),
            Some(r#"{"value": 1}"#),
        )
        .await;
    assert_eq!(refused.status, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_that_do_not_fit_are_400s_naming_the_field() {
    let broker = TestBroker::start().await;
    for (method, path, body, reason) in [
        (
            "PUT",
            "/api/queues/%2F/q",
            r#"{"durable":"yes"}"#,
            "durable: invalid value: string \"yes\", expected true or false",
        ),
        (
            "PUT",
            "/api/exchanges/%2F/x",
            r#"{"durable":true}"#,
            "body: missing field `type`",
        ),
        (
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            r#"{"routing_key":"q","payload":"p","properties":{"priority":"high"}}"#,
            "properties.priority: invalid value",
        ),
        (
            "POST",
            "/api/queues/%2F/q/get",
            r#"{"count":1,"ackmode":"ack"}"#,
            "ackmode: unknown variant `ack`",
        ),
        (
            "PUT",
            "/api/permissions/%2F/guest",
            r#"{"configure":".*","write":".*"}"#,
            "body: missing field `read`",
        ),
        (
            "PUT",
            "/api/policies/%2F/p",
            r#"{"pattern":".*","definition":[]}"#,
            "definition: invalid type: sequence, expected a map",
        ),
        (
            "PUT",
            "/api/users/someone",
            r#"{"password":"pw","tags":{"admin":true}}"#,
            "tags: expected the tags",
        ),
        (
            "PUT",
            "/api/queues/%2F/q",
            r#"{"durable": tru"#,
            "body is not valid JSON",
        ),
    ] {
        let response = broker.api_as_guest(method, path, Some(body)).await;
        assert_eq!(response.status, 400, "{method} {path}: {}", response.text());
        let answer = response.json();
        assert_eq!(answer["error"], "bad_request", "{answer}");
        let text = answer["reason"].as_str().unwrap_or_default();
        assert!(text.starts_with(reason), "{method} {path}: {text}");
    }
    // As rabbitmqadmin sends them: booleans and counts as text.
    let created = broker
        .api_as_guest(
            "PUT",
            "/api/queues/%2F/texts",
            Some(r#"{"durable":"false","auto_delete":"false","vhost":"/"}"#),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    let queue = broker.broker().vhost("/").unwrap().queue("texts").unwrap();
    assert!(!queue.config().durable, "durable=\"false\" is honoured");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn browsing_reads_paged_out_bodies_back_from_the_store() {
    let broker = TestBroker::start_with(&[("queue_max_in_memory_messages", "5")]).await;
    ok(
        &broker,
        "PUT",
        "/api/queues/%2F/deep",
        Some(r#"{"durable":true}"#),
    )
    .await;
    for n in 1..=20 {
        let body = json!({"routing_key": "deep", "payload": format!("m{n}"),
            "payload_encoding": "string", "properties": {"delivery_mode": 2}});
        ok(
            &broker,
            "POST",
            "/api/exchanges/%2F/amq.default/publish",
            Some(&body.to_string()),
        )
        .await;
    }
    let stats = lapin_common::stats(&broker, "deep");
    assert_eq!(stats.ready, 20);
    assert!(
        stats.paged_out > 0,
        "bodies beyond 5 are on disk only: {stats:?}"
    );
    let deep = ok(
        &broker,
        "GET",
        "/api/queues/%2F/deep/browse?position=15&count=3",
        None,
    )
    .await;
    assert_eq!(payloads(&deep), ["m15", "m16", "m17"], "{deep}");
    assert_eq!(deep[0]["properties"]["delivery_mode"], 2);
    assert_eq!(lapin_common::stats(&broker, "deep").ready, 20);
}
