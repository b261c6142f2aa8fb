//! Boot-time definitions: a definitions.json exported from RabbitMQ 3.10 (committed as a
//! fixture; user alice / `s3cret-Alice`, vhost `shop`, a topic exchange bound to a classic
//! queue, a quorum queue and a fanout exchange, a policy) is loaded with `load_definitions`,
//! its users log in with their RabbitMQ passwords and clients use the pre-declared topology.
//! A bad file stops start-up naming the path and the problem.

use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ErrorKind};
use warren::Server;
use warren_config::Settings;
use warren_interop_tests::{rabbitmq_definitions_fixture, TempDir, TestBroker, TEST_LISTENERS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_users_log_in_and_use_the_predeclared_topology() {
    // RabbitMQ's export as it is, its quorum queue included.
    let fixture = rabbitmq_definitions_fixture().display().to_string();
    let broker = TestBroker::start_with(&[("load_definitions", &fixture)]).await;
    let url = broker.url_for("alice", "s3cret-Alice", "shop");
    let connection = Connection::connect(&url, ConnectionProperties::default())
        .await
        .expect("alice logs in with her RabbitMQ password");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .basic_publish(
            "orders".into(),
            "eu.paris".into(),
            BasicPublishOptions::default(),
            b"order-1",
            BasicProperties::default(),
        )
        .await
        .expect("publish");
    // The topic bindings `eu.#` and `#` match: the classic queue and the quorum queue.
    for queue in ["orders.eu", "orders.quorum"] {
        let message = channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get")
            .unwrap_or_else(|| panic!("{queue} got the message"));
        assert_eq!(message.delivery.data, b"order-1");
    }
    // The file's policy (message-ttl 60000 on ^orders\.) applies to the queues it matches.
    let shop = broker.broker().vhost("shop").expect("vhost shop");
    assert_eq!(shop.policies(false).len(), 1);
    assert_eq!(
        shop.queue("orders.eu").expect("queue").limits().message_ttl,
        Some(60_000)
    );
    // The quorum queue is one, made through the queue-type interface.
    let quorum = shop.typed_queue("orders.quorum").expect("a quorum queue");
    assert_eq!(quorum.queue_type().name(), "quorum");
    assert!(shop.queue("orders.quorum").is_none(), "no classic stand-in");
    // The classic queue kept its x-max-length: redeclaring without it is inequivalent.
    let error = channel
        .queue_declare(
            "orders.eu".into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .expect_err("arguments differ");
    match error.kind() {
        ErrorKind::ProtocolError(e) => assert_eq!(e.get_id(), 406),
        other => panic!("expected 406, got {other:?}"),
    }

    // Permissions from the file: on "/" alice may only configure `^alice-`.
    let root = Connection::connect(
        &broker.url_for("alice", "s3cret-Alice", "%2f"),
        ConnectionProperties::default(),
    )
    .await
    .expect("alice may open /");
    let channel = root.create_channel().await.expect("channel");
    channel
        .queue_declare(
            "alice-q".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("allowed name");
    let error = channel
        .queue_declare(
            "other".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect_err("refused name");
    match error.kind() {
        ErrorKind::ProtocolError(e) => {
            assert_eq!(e.get_id(), 403);
            assert_eq!(
                e.get_message().as_str(),
                "ACCESS_REFUSED - configure access to queue 'other' in vhost '/' refused for user 'alice'"
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }

    let wrong = Connection::connect(
        &broker.url_for("alice", "wrong", "shop"),
        ConnectionProperties::default(),
    )
    .await;
    assert!(wrong.is_err(), "a wrong password is refused");
    broker.shutdown().await;
}

async fn start_error(contents: &str) -> (String, String) {
    let dir = std::env::temp_dir().join(format!(
        "warren-defs-{}-{}",
        std::process::id(),
        contents.len()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("definitions.json");
    std::fs::write(&path, contents).expect("write fixture");
    let mut settings = Settings::default();
    for (key, value) in TEST_LISTENERS {
        settings.set(key, value).expect("test listener");
    }
    settings
        .set("load_definitions", &path.display().to_string())
        .expect("path");
    // Its own data_dir, so the message store is not created in the working directory.
    settings
        .set("data_dir", &dir.join("data").display().to_string())
        .expect("data_dir");
    let error = match Server::start(settings).await {
        Ok(server) => {
            server.shutdown().await;
            panic!("start-up must fail for {contents}");
        }
        Err(error) => error.to_string(),
    };
    let _ = std::fs::remove_dir_all(&dir);
    (path.display().to_string(), error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_definitions_stop_start_up_naming_the_path_and_problem() {
    let (path, error) = start_error("{\"queues\": [").await;
    assert!(error.contains(&path), "names the path: {error}");
    assert!(error.contains("line 1"), "names the position: {error}");

    let (path, error) = start_error(
        r#"{"queues": [{"name": "q", "vhost": "missing", "durable": true, "auto_delete": false, "arguments": {}}]}"#,
    )
    .await;
    assert!(error.contains(&path), "names the path: {error}");
    assert!(
        error.contains("missing"),
        "names the unknown vhost: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_queue_named_by_its_argument_loads_at_boot_and_an_unknown_type_stops_start_up() {
    let dir = TempDir::new("quorum-definitions");
    let path = dir.path().join("definitions.json");
    std::fs::write(
        &path,
        r#"{"queues": [{"name": "jobs", "vhost": "/", "durable": true, "auto_delete": false,
                        "arguments": {"x-queue-type": "quorum", "x-delivery-limit": 5}}]}"#,
    )
    .expect("write definitions");
    let broker = TestBroker::start_with(&[("load_definitions", &path.display().to_string())]).await;
    let shown = broker
        .api_as_guest("GET", "/api/queues/%2F/jobs", None)
        .await;
    assert_eq!(shown.status, 200, "{}", shown.text());
    assert_eq!(shown.json()["type"], "quorum");
    assert_eq!(shown.json()["arguments"]["x-delivery-limit"], 5);
    broker.shutdown().await;

    // A type Warren does not have is refused whole, naming the queue and the type.
    let (path, error) = start_error(
        r#"{"queues": [{"name": "jobs", "vhost": "/", "durable": true, "auto_delete": false, "arguments": {"x-queue-type": "delayed"}}]}"#,
    )
    .await;
    assert!(error.contains(&path), "names the path: {error}");
    assert!(
        error.contains(
            "queue 'jobs' in vhost '/' has type 'delayed', which Warren does not support yet"
        ),
        "{error}"
    );
}
