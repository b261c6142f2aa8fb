//! Definitions through the management API: a broker booted from RabbitMQ 3.10's export
//! exports definitions that a fresh broker imports (POST /api/definitions) and exports
//! identically; an invalid document is refused with 400 and the reason, and nothing of it is
//! applied.

use serde_json::Value;
use warren_interop_tests::{rabbitmq_definitions_fixture, TestBroker};

fn names(document: &Value, section: &str) -> Vec<String> {
    document[section]
        .as_array()
        .unwrap_or_else(|| panic!("{section} is an array"))
        .iter()
        .map(|entry| {
            format!(
                "{}/{}",
                entry["vhost"].as_str().unwrap_or(""),
                entry["name"]
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_import_round_trip_from_a_rabbitmq_fixture() {
    // RabbitMQ's export as it is, its quorum queue included.
    let fixture = rabbitmq_definitions_fixture().display().to_string();
    let source = TestBroker::start_with(&[("load_definitions", &fixture)]).await;
    let cap = r#"{"pattern": "^orders", "definition": {"max-length": 1000}, "apply-to": "queues", "priority": 0}"#;
    let set = source
        .api_as_guest("PUT", "/api/operator-policies/%2F/cap", Some(cap))
        .await;
    assert!(set.status == 201 || set.status == 204, "{}", set.text());
    let exported = source.api_as_guest("GET", "/api/definitions", None).await;
    assert_eq!(exported.status, 200);
    let exported = exported.json();
    assert!(names(&exported, "queues").contains(&"shop/\"orders.eu\"".to_string()));
    // The quorum queue keeps its type, in `type` and in `x-queue-type`, as RabbitMQ exports it.
    let quorum = exported["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["name"] == "orders.quorum")
        .expect("the quorum queue is exported")
        .clone();
    assert_eq!(quorum["type"], "quorum");
    assert_eq!(quorum["arguments"]["x-queue-type"], "quorum");
    assert_eq!(quorum["durable"], true);
    assert!(exported["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["destination"] == "orders.quorum" && b["source"] == "orders"));
    assert!(names(&exported, "exchanges")
        .iter()
        .any(|n| n.starts_with("shop/")));
    assert_eq!(exported["policies"][0]["name"], "ttl");
    assert_eq!(exported["policies"][0]["definition"]["message-ttl"], 60000);
    assert_eq!(exported["operator_policies"][0]["name"], "cap");
    assert_eq!(exported["operator_policies"][0]["vhost"], "/");
    assert_eq!(
        exported["operator_policies"][0]["definition"]["max-length"],
        1000
    );
    let alice = exported["users"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "alice")
        .expect("alice is exported")
        .clone();
    assert_eq!(alice["hashing_algorithm"], "rabbit_password_hashing_sha256");
    assert!(!exported["bindings"].as_array().unwrap().is_empty());

    let target = TestBroker::start().await;
    let imported = target
        .api_as_guest("POST", "/api/definitions", Some(&exported.to_string()))
        .await;
    assert_eq!(imported.status, 204, "{}", imported.text());
    // Alice's RabbitMQ password hash moved with her.
    assert!(target
        .broker()
        .authenticate("alice", "s3cret-Alice", true)
        .is_ok());
    let shop = target.broker().vhost("shop").expect("vhost shop imported");
    assert_eq!(
        shop.typed_queue("orders.quorum")
            .map(|q| q.queue_type().name()),
        Some("quorum"),
        "imported as a quorum queue"
    );
    let reexported = target
        .api_as_guest("GET", "/api/definitions", None)
        .await
        .json();
    // Every section round-trips, global parameters (the source's cluster name) included.
    for section in [
        "users",
        "vhosts",
        "permissions",
        "topic_permissions",
        "parameters",
        "global_parameters",
        "policies",
        "operator_policies",
        "queues",
        "exchanges",
        "bindings",
    ] {
        assert!(exported.get(section).is_some(), "{section} is exported");
    }
    assert_eq!(reexported, exported);

    // One vhost only: topology without users, vhosts and permissions, as RabbitMQ.
    let shop = target
        .api_as_guest("GET", "/api/definitions/shop", None)
        .await
        .json();
    assert!(shop.get("users").is_none());
    assert!(names(&shop, "queues")
        .iter()
        .all(|n| n.starts_with("shop/")));
    source.shutdown().await;
    target.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_import_is_refused_whole_with_the_reason() {
    let broker = TestBroker::start().await;
    let document = r#"{
        "vhosts": [{"name": "fresh"}],
        "queues": [{"name": "q1", "vhost": "fresh", "durable": true, "auto_delete": false, "arguments": {}}],
        "bindings": [{"source": "missing", "vhost": "fresh", "destination": "q1",
                      "destination_type": "queue", "routing_key": "k", "arguments": {}}]
    }"#;
    let refused = broker
        .api_as_guest("POST", "/api/definitions", Some(document))
        .await;
    assert_eq!(refused.status, 400);
    assert_eq!(refused.json()["error"], "bad_request");
    let reason = refused.json()["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("missing"), "{reason}");
    assert!(broker.broker().vhost("fresh").is_none(), "nothing applied");

    let not_json = broker
        .api_as_guest("POST", "/api/definitions", Some("{not json"))
        .await;
    assert_eq!(not_json.status, 400);
    let guestless = broker.broker();
    guestless.add_user("ops", "pw", vec!["monitoring".into()]);
    let forbidden = broker
        .api("GET", "/api/definitions", Some(("ops", "pw")), None)
        .await;
    assert_eq!(forbidden.status, 401);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_import_declares_quorum_queues_and_classic_types_round_trip() {
    let broker = TestBroker::start().await;
    let exported = std::fs::read_to_string(rabbitmq_definitions_fixture()).expect("fixture");
    let imported = broker
        .api_as_guest("POST", "/api/definitions", Some(&exported))
        .await;
    assert_eq!(imported.status, 204, "{}", imported.text());
    let shown = broker
        .api_as_guest("GET", "/api/queues/shop/orders.quorum", None)
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    assert_eq!(shown.json()["type"], "quorum");
    // Importing it again redeclares the same queue: equivalent, nothing changes.
    let again = broker
        .api_as_guest("POST", "/api/definitions", Some(&exported))
        .await;
    assert_eq!(again.status, 204, "{}", again.text());
    // A classic queue under a quorum queue's name is refused: the type is part of a
    // queue's equivalence.
    let clash = r#"{
        "queues": [{"name": "orders.quorum", "vhost": "shop", "durable": true,
                    "auto_delete": false, "type": "classic", "arguments": {"x-queue-type": "classic"}}]
    }"#;
    let refused = broker
        .api_as_guest("POST", "/api/definitions", Some(clash))
        .await;
    assert_eq!(refused.status, 400, "{}", refused.text());
    let reason = refused.json()["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("inequivalent arg 'x-queue-type'"),
        "{reason}"
    );

    // `type` and `x-queue-type` of classic queues come back as they went in.
    let document = r#"{
        "queues": [
            {"name": "typed", "vhost": "/", "durable": true, "auto_delete": false,
             "type": "classic", "arguments": {"x-queue-type": "classic"}},
            {"name": "plain", "vhost": "/", "durable": true, "auto_delete": false,
             "type": "classic", "arguments": {}}
        ]
    }"#;
    let imported = broker
        .api_as_guest("POST", "/api/definitions", Some(document))
        .await;
    assert_eq!(imported.status, 204, "{}", imported.text());
    let exported = broker
        .api_as_guest("GET", "/api/definitions", None)
        .await
        .json();
    let queue = |name: &str| {
        exported["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == name)
            .unwrap_or_else(|| panic!("{name} exported"))
            .clone()
    };
    assert_eq!(queue("typed")["type"], "classic");
    assert_eq!(queue("typed")["arguments"]["x-queue-type"], "classic");
    assert_eq!(queue("plain")["type"], "classic");
    assert_eq!(queue("plain")["arguments"], serde_json::json!({}));
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_in_definitions_is_created_as_a_stream_and_exported_with_its_type() {
    let broker = TestBroker::start().await;
    // Named by `type` only, and by `x-queue-type` only, as RabbitMQ exports and as hand-written
    // documents often do.
    let document = r#"{
        "queues": [
            {"name": "audit", "vhost": "/", "durable": true, "auto_delete": false,
             "type": "stream", "arguments": {"x-max-length-bytes": 20000000, "x-max-age": "7D"}},
            {"name": "events", "vhost": "/", "durable": true, "auto_delete": false,
             "arguments": {"x-queue-type": "stream"}}
        ]
    }"#;
    let imported = broker
        .api_as_guest("POST", "/api/definitions", Some(document))
        .await;
    assert_eq!(imported.status, 204, "{}", imported.text());
    let listed = broker
        .api_as_guest("GET", "/api/queues/%2F/audit", None)
        .await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(listed.json()["type"], "stream");
    assert!(
        broker.broker().vhost("/").unwrap().queue("audit").is_none(),
        "no classic queue under the stream's name"
    );

    let exported = broker
        .api_as_guest("GET", "/api/definitions", None)
        .await
        .json();
    let queue = |name: &str| {
        exported["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["name"] == name)
            .unwrap_or_else(|| panic!("{name} exported"))
            .clone()
    };
    assert_eq!(queue("audit")["type"], "stream");
    assert_eq!(queue("audit")["arguments"]["x-queue-type"], "stream");
    assert_eq!(
        queue("audit")["arguments"]["x-max-length-bytes"],
        20_000_000
    );
    assert_eq!(queue("audit")["arguments"]["x-max-age"], "7D");
    assert_eq!(queue("events")["type"], "stream");

    // The export imports again into a fresh broker as the same streams.
    let again = TestBroker::start().await;
    let reimported = again
        .api_as_guest("POST", "/api/definitions", Some(&exported.to_string()))
        .await;
    assert_eq!(reimported.status, 204, "{}", reimported.text());
    let listed = again
        .api_as_guest("GET", "/api/queues/%2F/events", None)
        .await;
    assert_eq!(listed.json()["type"], "stream");
    again.shutdown().await;
    broker.shutdown().await;
}
