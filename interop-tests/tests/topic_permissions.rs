//! Topic permissions (RabbitMQ's topic authorisation) end to end: a user whose topic
//! permission on `amq.topic` allows only some routing keys is refused the others with
//! RabbitMQ's 403 text over AMQP 0-9-1 (lapin), MQTT (rumqttc, with `{client_id}`) and STOMP,
//! and allowed the rest; the management API and definitions carry them, and they survive a
//! restart.

mod lapin_common;
mod mqtt_common;

use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use lapin_common::amqp_error;
use rumqttc::{QoS, SubscribeReasonCode};
use serde_json::{json, Value};
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::{TempDir, TestBroker};

/// A broker where `bob` (password `bobpw`) has full permissions in `/` but may only publish
/// to `amq.topic` with keys starting `bob.` and bind with keys starting `bob.` or `shared.`.
async fn broker_with_bob() -> TestBroker {
    let broker = TestBroker::start().await;
    broker.add_topic_user("bob", "bobpw", "^{username}\\.", "^(bob|shared)\\.");
    broker
}

fn refusal(access: &str, key: &str) -> String {
    format!(
        "ACCESS_REFUSED - {access} access to topic '{key}' in exchange 'amq.topic' in vhost '/' refused for user 'bob'"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_publish_and_bind_are_checked_against_the_topic_permission() {
    let broker = broker_with_bob().await;
    let bob = Connection::connect(
        &broker.url_for("bob", "bobpw", "%2f"),
        ConnectionProperties::default(),
    )
    .await
    .expect("bob connects");
    let channel = bob.create_channel().await.expect("channel");
    channel
        .queue_declare(
            "inbox".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declare");
    // Allowed binding key.
    channel
        .queue_bind(
            "inbox".into(),
            "amq.topic".into(),
            "bob.#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bob.# may be bound");
    // Allowed publish: confirmed and routed.
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let confirm = channel
        .basic_publish(
            "amq.topic".into(),
            "bob.news".into(),
            BasicPublishOptions::default(),
            b"hello",
            BasicProperties::default(),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(confirm.is_ack());
    let got = channel
        .basic_get("inbox".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("get")
        .expect("the allowed message arrived");
    assert_eq!(got.delivery.data, b"hello");

    // Refused binding key: 403 on the channel, the connection stays.
    let channel = bob.create_channel().await.expect("channel");
    let error = channel
        .queue_bind(
            "inbox".into(),
            "amq.topic".into(),
            "alice.#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect_err("alice.# is refused");
    assert_eq!(amqp_error(&error), (403, refusal("read", "alice.#")));
    assert!(bob.status().connected());

    // Refused publish: 403 closes the channel.
    let channel = bob.create_channel().await.expect("channel");
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let confirm = channel
        .basic_publish(
            "amq.topic".into(),
            "alice.news".into(),
            BasicPublishOptions::default(),
            b"nope",
            BasicProperties::default(),
        )
        .await
        .expect("publish sent");
    let error = confirm.await.expect_err("refused");
    assert_eq!(amqp_error(&error), (403, refusal("write", "alice.news")));
    assert!(!channel.status().connected(), "the channel is closed");
    assert!(bob.status().connected(), "the connection is not");

    // Other exchanges (even with any key) are not restricted.
    let channel = bob.create_channel().await.expect("channel");
    channel
        .queue_bind(
            "inbox".into(),
            "amq.direct".into(),
            "alice.news".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("direct exchanges are not checked");
    let inbox = broker.broker().vhost("/").unwrap().queue("inbox").unwrap();
    assert_eq!(inbox.stats().ready, 0, "the refused message was not routed");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_subscribe_and_publish_are_checked_with_the_client_id() {
    let broker = TestBroker::start().await;
    broker.add_topic_user("dev", "devpw", "^{client_id}\\.", "^{client_id}\\.");
    let root = broker.broker().vhost("/").expect("default vhost");
    let mut options = mqtt_common::options(broker.mqtt_addr(), "sensor1");
    options.set_credentials("dev", "devpw");
    let mut client = mqtt_common::connect(options).await;
    // MQTT topics are checked as AMQP routing keys: `sensor1/#` is `sensor1.#`.
    let granted = client.subscribe("sensor1/#", QoS::AtLeastOnce).await;
    assert_eq!(
        granted.return_codes,
        vec![SubscribeReasonCode::Success(QoS::AtLeastOnce)]
    );
    let refused = client.subscribe("sensor2/#", QoS::AtLeastOnce).await;
    assert_eq!(refused.return_codes, vec![SubscribeReasonCode::Failure]);
    assert_eq!(
        root.queues().len(),
        1,
        "only the allowed subscription has a queue"
    );

    client
        .publish("sensor1/temp", QoS::AtLeastOnce, b"21")
        .await;
    let delivered = client.next_publish().await;
    assert_eq!(delivered.topic, "sensor1/temp");
    assert_eq!(&delivered.payload[..], b"21");

    // A refused PUBLISH closes the connection (MQTT 3.1.1 cannot refuse one otherwise).
    client
        .publish("sensor2/temp", QoS::AtLeastOnce, b"22")
        .await;
    let ended = tokio::time::timeout(mqtt_common::WAIT, &mut client.ended)
        .await
        .expect("the broker closes the connection");
    assert!(ended.is_ok(), "the event loop ended with an error");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_topic_destinations_are_checked() {
    let broker = broker_with_bob().await;
    let headers = [
        ("accept-version", "1.2"),
        ("host", "/"),
        ("login", "bob"),
        ("passcode", "bobpw"),
    ];
    let (mut client, _) = StompClient::connect_with(broker.stomp_addr(), &headers).await;
    client.subscribe("/topic/bob.news", "s1", "auto", &[]).await;
    client.send("/topic/bob.news", "allowed", &[]).await;
    let message = client.expect_message().await;
    assert_eq!(message.text(), "allowed");
    client
        .write_frame(
            "SEND",
            &[("destination", "/topic/alice.news"), ("receipt", "r1")],
            b"refused",
        )
        .await;
    let error = client.expect_error().await;
    let text = format!("{} {}", error.header("message").unwrap_or(""), error.text());
    assert!(
        text.contains("write access to topic 'alice.news' in exchange 'amq.topic'"),
        "{error:?}"
    );

    let (mut client, _) = StompClient::connect_with(broker.stomp_addr(), &headers).await;
    client
        .write_frame(
            "SUBSCRIBE",
            &[
                ("destination", "/topic/alice.news"),
                ("id", "s2"),
                ("receipt", "r2"),
            ],
            b"",
        )
        .await;
    let error = client.expect_error().await;
    let text = format!("{} {}", error.header("message").unwrap_or(""), error.text());
    assert!(
        text.contains("read access to topic 'alice.news' in exchange 'amq.topic'"),
        "{error:?}"
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_permissions_api_answers_as_rabbitmq() {
    let broker = TestBroker::start().await;
    broker.broker().add_user("bob", "bobpw", vec![]);
    let body = json!({"exchange": "amq.topic", "write": "^bob\\.", "read": ".*"}).to_string();
    let created = broker
        .api_as_guest("PUT", "/api/topic-permissions/%2F/bob", Some(&body))
        .await;
    assert_eq!(created.status, 201);
    let updated = broker
        .api_as_guest("PUT", "/api/topic-permissions/%2F/bob", Some(&body))
        .await;
    assert_eq!(updated.status, 204);
    let expected = json!([{"user": "bob", "vhost": "/", "exchange": "amq.topic", "write": "^bob\\.", "read": ".*"}]);
    for path in [
        "/api/topic-permissions",
        "/api/topic-permissions/%2F/bob",
        "/api/vhosts/%2F/topic-permissions",
        "/api/users/bob/topic-permissions",
    ] {
        let listed = broker.api_as_guest("GET", path, None).await;
        assert_eq!(listed.status, 200, "{path}");
        assert_eq!(listed.json(), expected, "{path}");
    }
    // Bad requests: an invalid pattern, a missing field, an unknown user.
    let bad = json!({"exchange": "amq.topic", "write": "(", "read": ".*"}).to_string();
    let refused = broker
        .api_as_guest("PUT", "/api/topic-permissions/%2F/bob", Some(&bad))
        .await;
    assert_eq!(refused.status, 400);
    assert!(refused.json()["reason"].as_str().unwrap().contains("'('"));
    let missing = broker
        .api_as_guest(
            "PUT",
            "/api/topic-permissions/%2F/bob",
            Some(r#"{"exchange":"amq.topic"}"#),
        )
        .await;
    assert_eq!(missing.status, 400);
    let unknown = broker
        .api_as_guest("PUT", "/api/topic-permissions/%2F/nobody", Some(&body))
        .await;
    assert_eq!(unknown.status, 400);
    // Only administrators.
    broker
        .broker()
        .add_user("watcher", "pw", vec!["monitoring".into()]);
    let forbidden = broker
        .api(
            "GET",
            "/api/topic-permissions",
            Some(("watcher", "pw")),
            None,
        )
        .await;
    assert_eq!(forbidden.status, 401);
    // Delete, then 404.
    let deleted = broker
        .api_as_guest("DELETE", "/api/topic-permissions/%2F/bob", None)
        .await;
    assert_eq!(deleted.status, 204);
    let gone = broker
        .api_as_guest("GET", "/api/topic-permissions/%2F/bob", None)
        .await;
    assert_eq!(gone.status, 404);
    let again = broker
        .api_as_guest("DELETE", "/api/topic-permissions/%2F/bob", None)
        .await;
    assert_eq!(again.status, 404);
    broker.shutdown().await;
}

/// A document with every section Warren used to drop: topic permissions, runtime parameters
/// (of components Warren does not implement) and global parameters.
fn document_with_every_section() -> Value {
    json!({
        "users": [{"name": "carol", "password": "carolpw", "tags": []}],
        "vhosts": [{"name": "iot"}],
        "permissions": [
            {"user": "carol", "vhost": "iot", "configure": ".*", "write": ".*", "read": ".*"},
            {"user": "guest", "vhost": "iot", "configure": ".*", "write": ".*", "read": ".*"}
        ],
        "topic_permissions": [
            {"user": "carol", "vhost": "iot", "exchange": "amq.topic", "write": "^carol\\.", "read": "^{client_id}\\."}
        ],
        "parameters": [
            {"vhost": "iot", "component": "shovel", "name": "to-cloud",
             "value": {"src-uri": "amqp://", "src-queue": "a", "dest-uri": "amqp://cloud", "dest-queue": "b"}},
            {"vhost": "iot", "component": "federation-upstream", "name": "origin",
             "value": {"uri": "amqp://origin", "expires": 3600000}}
        ],
        "global_parameters": [
            {"name": "cluster_name", "value": "iot-cluster"},
            {"name": "internal_cluster_id", "value": "rabbitmq-cluster-id-abc"}
        ]
    })
}

fn section(document: &Value, name: &str) -> Value {
    document[name].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn definitions_round_trip_topic_permissions_and_parameters_and_survive_a_restart() {
    let dir = TempDir::new("topic-permissions");
    let data_dir = dir.path().display().to_string();
    let settings = [("data_dir", data_dir.as_str())];
    let broker = TestBroker::start_with(&settings).await;
    let document = document_with_every_section();
    let imported = broker
        .api_as_guest("POST", "/api/definitions", Some(&document.to_string()))
        .await;
    assert_eq!(imported.status, 204, "{}", imported.text());
    let exported = broker
        .api_as_guest("GET", "/api/definitions", None)
        .await
        .json();
    let mut expected_topic = section(&document, "topic_permissions");
    assert_eq!(section(&exported, "topic_permissions"), expected_topic);
    // Parameters come back sorted by vhost, component and name.
    let parameters = section(&exported, "parameters");
    assert_eq!(parameters[0]["component"], "federation-upstream");
    assert_eq!(parameters[0]["value"], document["parameters"][1]["value"]);
    assert_eq!(parameters[1]["name"], "to-cloud");
    assert_eq!(parameters[1]["value"], document["parameters"][0]["value"]);
    assert_eq!(
        section(&exported, "global_parameters"),
        section(&document, "global_parameters")
    );
    let overview = broker
        .api_as_guest("GET", "/api/overview", None)
        .await
        .json();
    assert_eq!(overview["cluster_name"], "iot-cluster");
    // Listed at /api/parameters and /api/global-parameters.
    let listed = broker.api_as_guest("GET", "/api/parameters", None).await;
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json(), parameters);
    let one = broker
        .api_as_guest("GET", "/api/parameters/shovel/iot/to-cloud", None)
        .await;
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["value"]["dest-queue"], "b");
    let shovels = broker
        .api_as_guest("GET", "/api/parameters/shovel", None)
        .await;
    assert_eq!(shovels.json().as_array().unwrap().len(), 1);
    let global = broker
        .api_as_guest("GET", "/api/global-parameters/internal_cluster_id", None)
        .await;
    assert_eq!(global.status, 200);
    assert_eq!(global.json()["value"], "rabbitmq-cluster-id-abc");
    broker.shutdown().await;

    // Saved with the durable definitions.
    let broker = TestBroker::start_with(&settings).await;
    let exported = broker
        .api_as_guest("GET", "/api/definitions", None)
        .await
        .json();
    assert_eq!(section(&exported, "topic_permissions"), expected_topic);
    assert_eq!(section(&exported, "parameters"), parameters);
    assert_eq!(
        section(&exported, "global_parameters"),
        section(&document, "global_parameters")
    );
    // And changed through the API: PUT and DELETE with RabbitMQ's status codes.
    let put = broker
        .api_as_guest(
            "PUT",
            "/api/parameters/shovel/iot/second",
            Some(r#"{"value": {"src-queue": "c"}}"#),
        )
        .await;
    assert_eq!(put.status, 201);
    let put_again = broker
        .api_as_guest(
            "PUT",
            "/api/parameters/shovel/iot/second",
            Some(r#"{"value": {"src-queue": "d"}}"#),
        )
        .await;
    assert_eq!(put_again.status, 204);
    let no_value = broker
        .api_as_guest("PUT", "/api/parameters/shovel/iot/third", Some("{}"))
        .await;
    assert_eq!(no_value.status, 400);
    for path in [
        "/api/parameters/shovel/iot/second",
        "/api/global-parameters/internal_cluster_id",
    ] {
        assert_eq!(broker.api_as_guest("DELETE", path, None).await.status, 204);
        assert_eq!(broker.api_as_guest("GET", path, None).await.status, 404);
    }
    let cleared = broker
        .api_as_guest("DELETE", "/api/topic-permissions/iot/carol/amq.topic", None)
        .await;
    assert_eq!(cleared.status, 204);
    expected_topic = json!([]);
    let exported = broker
        .api_as_guest("GET", "/api/definitions", None)
        .await
        .json();
    assert_eq!(section(&exported, "topic_permissions"), expected_topic);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_topic_permission_refuses_the_whole_import() {
    let broker = TestBroker::start().await;
    let document = json!({
        "vhosts": [{"name": "fresh"}],
        "topic_permissions": [
            {"user": "guest", "vhost": "fresh", "exchange": "amq.topic", "write": "(", "read": ".*"}
        ]
    });
    let refused = broker
        .api_as_guest("POST", "/api/definitions", Some(&document.to_string()))
        .await;
    assert_eq!(refused.status, 400);
    assert!(refused.json()["reason"].as_str().unwrap().contains("'('"));
    assert!(broker.broker().vhost("fresh").is_none(), "nothing applied");
    broker.shutdown().await;
}
