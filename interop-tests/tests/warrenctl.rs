//! warrenctl's verbs against a running broker (in-process, through the management HTTP API),
//! asserting their table and JSON output and their effect on the broker.

use lapin::options::{BasicConsumeOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::{json, Value};
use warren_interop_tests::{wait_for, TestBroker};
use warren_management::ctl;

struct Ctl {
    port: String,
}

impl Ctl {
    fn new(broker: &TestBroker) -> Ctl {
        let addr = broker.management_addr();
        Ctl {
            port: addr.rsplit_once(':').unwrap().1.to_string(),
        }
    }

    fn args(&self, args: &[&str]) -> Vec<String> {
        let mut all: Vec<String> = ["--host", "127.0.0.1", "--port", &self.port]
            .iter()
            .map(|s| s.to_string())
            .collect();
        all.extend(args.iter().map(|s| s.to_string()));
        all
    }

    /// Runs a verb that must succeed; returns its output.
    async fn ok(&self, args: &[&str]) -> String {
        ctl::run(&self.args(args), None)
            .await
            .unwrap_or_else(|e| panic!("warrenctl {args:?}: {e}"))
    }

    /// Runs a verb that must fail; returns the error.
    async fn fails(&self, args: &[&str]) -> ctl::CtlError {
        ctl::run(&self.args(args), None)
            .await
            .expect_err("the command fails")
    }

    async fn json(&self, args: &[&str]) -> Value {
        let mut all = vec!["--formatter", "json"];
        all.extend_from_slice(args);
        serde_json::from_str(&self.ok(&all).await).expect("JSON output")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhost_user_and_permission_verbs() {
    let broker = TestBroker::start().await;
    let ctl = Ctl::new(&broker);

    assert_eq!(
        ctl.ok(&["add_vhost", "shop"]).await,
        "Adding vhost \"shop\" ...\n"
    );
    assert_eq!(
        ctl.ok(&["-q", "list_vhosts", "name", "default_queue_type"])
            .await,
        "name\tdefault_queue_type\n/\tclassic\nshop\tclassic\n"
    );
    ctl.ok(&["add_user", "alice", "pw1"]).await;
    assert_eq!(ctl.fails(&["add_user", "alice", "pw1"]).await.exit_code, 70);
    ctl.ok(&["set_user_tags", "alice", "management", "policymaker"])
        .await;
    assert_eq!(
        ctl.ok(&["-q", "list_users"]).await,
        "user\ttags\nalice\t[management, policymaker]\nguest\t[administrator]\n"
    );
    assert!(ctl
        .ok(&["authenticate_user", "alice", "pw1"])
        .await
        .ends_with("Success\n"));
    ctl.ok(&["change_password", "alice", "pw2"]).await;
    assert_eq!(
        ctl.fails(&["authenticate_user", "alice", "pw1"])
            .await
            .exit_code,
        65
    );
    ctl.ok(&["authenticate_user", "alice", "pw2"]).await;
    assert_eq!(
        broker.broker().user("alice").unwrap().tags,
        ["management", "policymaker"],
        "changing the password keeps the tags"
    );

    ctl.ok(&["-p", "shop", "set_permissions", "alice", "^a-", ".*", ".*"])
        .await;
    assert_eq!(
        ctl.json(&["-p", "shop", "list_permissions"]).await,
        json!([
            {"user": "alice", "configure": "^a-", "write": ".*", "read": ".*"},
            {"user": "guest", "configure": ".*", "write": ".*", "read": ".*"}
        ])
    );
    ctl.ok(&["-p", "shop", "clear_permissions", "alice"]).await;
    assert!(broker
        .broker()
        .vhost("shop")
        .unwrap()
        .permissions("alice")
        .is_none());
    ctl.ok(&["delete_user", "alice"]).await;
    assert!(broker.broker().user("alice").is_none());
    ctl.ok(&["delete_vhost", "shop"]).await;
    assert!(broker.broker().vhost("shop").is_none());
    let missing = ctl.fails(&["delete_vhost", "shop"]).await;
    assert!(missing.message.contains("404"), "{}", missing.message);

    let wrong_password = ctl::run(&ctl.args(&["--password", "nope", "list_vhosts"]), None)
        .await
        .unwrap_err();
    assert!(wrong_password.message.contains("Login failed"));
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_verbs() {
    let broker = TestBroker::start().await;
    let ctl = Ctl::new(&broker);
    ctl.ok(&[
        "set_policy",
        "--priority",
        "3",
        "--apply-to",
        "queues",
        "cap",
        "^cap\\.",
        r#"{"max-length": 10}"#,
    ])
    .await;
    assert_eq!(
        ctl.ok(&["-q", "list_policies"]).await,
        "vhost\tname\tpattern\tapply-to\tdefinition\tpriority\n/\tcap\t^cap\\.\tqueues\t{\"max-length\":10}\t3\n"
    );
    assert_eq!(
        ctl.fails(&["set_policy", "bad", ".*", "{not json"])
            .await
            .exit_code,
        65
    );
    ctl.ok(&["set_operator_policy", "ops", ".*", r#"{"max-length": 5}"#])
        .await;
    assert_eq!(
        ctl.json(&["list_operator_policies", "name", "apply-to"])
            .await,
        json!([{"name": "ops", "apply-to": "queues"}])
    );
    ctl.ok(&["clear_operator_policy", "ops"]).await;
    ctl.ok(&["clear_policy", "cap"]).await;
    assert!(broker
        .broker()
        .vhost("/")
        .unwrap()
        .policies(false)
        .is_empty());
    assert!(broker
        .broker()
        .vhost("/")
        .unwrap()
        .policies(true)
        .is_empty());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_verbs_with_columns_and_queue_and_connection_verbs() {
    let broker = TestBroker::start().await;
    let ctl = Ctl::new(&broker);
    let connection = Connection::connect(
        &broker.url(),
        ConnectionProperties::default().with_connection_name("ctl-test".into()),
    )
    .await
    .expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    for queue in ["jobs", "idle"] {
        channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("declare");
    }
    for index in 0..3 {
        channel
            .basic_publish(
                "".into(),
                "jobs".into(),
                BasicPublishOptions::default(),
                format!("job {index}").as_bytes(),
                BasicProperties::default(),
            )
            .await
            .expect("publish");
    }
    channel
        .queue_bind(
            "idle".into(),
            "amq.direct".into(),
            "idle-key".into(),
            Default::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
    assert!(
        wait_for(std::time::Duration::from_secs(5), || {
            broker
                .broker()
                .vhost("/")
                .unwrap()
                .queue("jobs")
                .unwrap()
                .message_count()
                == 3
        })
        .await
    );

    assert_eq!(
        ctl.ok(&[
            "list_queues",
            "name",
            "messages",
            "messages_ready",
            "messages_unacknowledged",
            "consumers",
            "type"
        ])
        .await,
        "Listing queues for vhost / ...\n\
         name\tmessages\tmessages_ready\tmessages_unacknowledged\tconsumers\ttype\n\
         idle\t0\t0\t0\t0\tclassic\n\
         jobs\t3\t3\t0\t0\tclassic\n"
    );
    assert_eq!(
        ctl.json(&["list_queues", "name", "messages"]).await,
        json!([{"name": "idle", "messages": 0}, {"name": "jobs", "messages": 3}])
    );
    let exchanges = ctl.ok(&["-q", "list_exchanges"]).await;
    assert!(exchanges.starts_with("name\ttype\n"));
    assert!(exchanges.contains("amq.topic\ttopic\n"));
    let bindings = ctl.ok(&["-q", "list_bindings"]).await;
    assert!(
        bindings.contains("amq.direct\texchange\tidle\tqueue\tidle-key\t{}\n"),
        "{bindings}"
    );
    assert!(
        bindings.contains("\texchange\tjobs\tqueue\tjobs\t{}\n"),
        "{bindings}"
    );

    let connections = ctl
        .json(&[
            "list_connections",
            "name",
            "protocol",
            "user",
            "vhost",
            "user_provided_name",
        ])
        .await;
    assert_eq!(connections[0]["protocol"], "AMQP 0-9-1");
    assert_eq!(connections[0]["user"], "guest");
    assert_eq!(connections[0]["vhost"], "/");
    assert_eq!(connections[0]["user_provided_name"], "ctl-test");
    let name = connections[0]["name"].as_str().unwrap().to_string();
    assert_eq!(
        ctl.json(&["list_channels", "connection", "number"]).await,
        json!([{"connection": name, "number": 1}])
    );

    let _consumer = channel
        .basic_consume(
            "idle".into(),
            "watcher".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    assert_eq!(
        ctl.json(&[
            "list_consumers",
            "queue_name",
            "consumer_tag",
            "ack_required"
        ])
        .await,
        json!([{"queue_name": "idle", "consumer_tag": "watcher", "ack_required": true}])
    );

    assert_eq!(
        ctl.ok(&["purge_queue", "jobs"]).await,
        "Purging queue 'jobs' in vhost '/' ...\n"
    );
    assert_eq!(
        broker
            .broker()
            .vhost("/")
            .unwrap()
            .queue("jobs")
            .unwrap()
            .message_count(),
        0
    );
    ctl.ok(&["delete_queue", "jobs"]).await;
    assert!(broker.broker().vhost("/").unwrap().queue("jobs").is_none());
    let in_use = ctl.fails(&["delete_queue", "--if-unused", "idle"]).await;
    assert!(in_use.message.contains("in use"), "{}", in_use.message);

    ctl.ok(&["close_connection", &name, "maintenance window"])
        .await;
    assert!(
        wait_for(std::time::Duration::from_secs(5), || !connection
            .status()
            .connected())
        .await
    );
    assert!(
        wait_for(std::time::Duration::from_secs(5), || broker
            .broker()
            .connections()
            .count()
            == 0)
        .await
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_environment_and_definitions_verbs() {
    let broker = TestBroker::start().await;
    let ctl = Ctl::new(&broker);
    let status = ctl.ok(&["status"]).await;
    assert!(status.starts_with("Status of node warren@"), "{status}");
    assert!(status.contains("Product name: Warren\n"));
    assert!(status.contains("Alarms: (none)\n"));
    assert!(status.contains(&format!("port: {}, protocol: amqp", broker.addr().port())));
    let environment = ctl.json(&["environment"]).await;
    assert!(environment["node"].as_str().unwrap().starts_with("warren@"));

    ctl.ok(&["add_vhost", "exported"]).await;
    broker
        .api_as_guest(
            "PUT",
            "/api/queues/exported/keep",
            Some(r#"{"durable":true,"arguments":{"x-message-ttl":5000}}"#),
        )
        .await;
    let dir = std::env::temp_dir().join(format!("warrenctl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("definitions.json");
    let file = file.to_str().unwrap();
    ctl.ok(&["export_definitions", file]).await;
    let exported: Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert!(exported["queues"]
        .as_array()
        .unwrap()
        .iter()
        .any(|q| q["name"] == "keep" && q["arguments"]["x-message-ttl"] == 5000));

    let other = TestBroker::start().await;
    let other_ctl = Ctl::new(&other);
    other_ctl.ok(&["import_definitions", file]).await;
    let queue = other.broker().vhost("exported").unwrap().queue("keep");
    assert!(queue.is_some(), "the queue was imported");
    std::fs::write(file, "{\"queues\": [{\"name\": \"\", \"vhost\": \"/\"}]}").unwrap();
    let refused = other_ctl.fails(&["import_definitions", file]).await;
    assert!(refused.message.contains("400"), "{}", refused.message);
    std::fs::remove_dir_all(&dir).ok();

    assert_eq!(
        ctl.ok(&["-p", "exported", "trace_on"]).await,
        "Starting tracing for vhost \"exported\" ...\n"
    );
    assert!(broker.broker().vhost("exported").unwrap().is_tracing());
    ctl.ok(&["-p", "exported", "trace_off"]).await;
    assert!(!broker.broker().vhost("exported").unwrap().is_tracing());
    assert_eq!(
        ctl.fails(&["-p", "nowhere", "trace_on"]).await.exit_code,
        70
    );
    assert_eq!(ctl.fails(&["no_such_verb"]).await.exit_code, 64);
    other.shutdown().await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topic_permission_and_parameter_verbs() {
    let broker = TestBroker::start().await;
    let ctl = Ctl::new(&broker);
    ctl.ok(&["add_user", "bob", "pw"]).await;
    assert_eq!(
        ctl.ok(&["set_topic_permissions", "bob", "amq.topic", "^bob\\.", ".*"])
            .await,
        "Setting topic permissions on \"amq.topic\" for user \"bob\" in vhost \"/\" ...\n"
    );
    ctl.ok(&["set_topic_permissions", "bob", "events", "^e", "^e"])
        .await;
    assert_eq!(
        ctl.ok(&["-q", "list_topic_permissions"]).await,
        "user\texchange\twrite\tread\nbob\tamq.topic\t^bob\\.\t.*\nbob\tevents\t^e\t^e\n"
    );
    assert_eq!(
        ctl.json(&["list_topic_permissions", "user", "exchange"])
            .await,
        json!([{"user": "bob", "exchange": "amq.topic"}, {"user": "bob", "exchange": "events"}])
    );
    let vhost = broker.broker().vhost("/").unwrap();
    assert_eq!(vhost.topic_permission_entries().len(), 2);
    ctl.ok(&["clear_topic_permissions", "bob", "events"]).await;
    assert_eq!(vhost.topic_permission_entries().len(), 1);
    ctl.ok(&["clear_topic_permissions", "bob"]).await;
    assert!(vhost.topic_permission_entries().is_empty());
    let missing = ctl.fails(&["clear_topic_permissions", "bob"]).await;
    assert_eq!(missing.exit_code, 70);
    let bad = ctl
        .fails(&["set_topic_permissions", "bob", "amq.topic", "(", ".*"])
        .await;
    assert!(bad.message.contains("'('"), "{}", bad.message);

    ctl.ok(&["add_vhost", "edge"]).await;
    ctl.ok(&[
        "-p",
        "edge",
        "set_parameter",
        "shovel",
        "s1",
        r#"{"src-queue":"a","dest-queue":"b"}"#,
    ])
    .await;
    assert_eq!(
        ctl.json(&["-p", "edge", "list_parameters"]).await,
        json!([{"component": "shovel", "name": "s1", "value": {"src-queue": "a", "dest-queue": "b"}}])
    );
    // Another vhost's listing does not show it.
    assert_eq!(ctl.json(&["list_parameters"]).await, json!([]));
    let not_json = ctl
        .fails(&["-p", "edge", "set_parameter", "shovel", "s2", "{oops"])
        .await;
    assert_eq!(not_json.exit_code, 65);
    ctl.ok(&["-p", "edge", "clear_parameter", "shovel", "s1"])
        .await;
    assert!(broker.broker().parameters(None, None).is_empty());

    ctl.ok(&["set_global_parameter", "region", r#""eu-west""#])
        .await;
    let globals = ctl.json(&["list_global_parameters"]).await;
    assert!(
        globals
            .as_array()
            .unwrap()
            .contains(&json!({"name": "region", "value": "eu-west"})),
        "{globals}"
    );
    ctl.ok(&["clear_global_parameter", "region"]).await;
    assert!(broker.broker().global_parameter("region").is_none());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn join_cluster_on_a_node_without_clustering_is_refused_and_says_what_to_configure() {
    let broker = TestBroker::start().await;
    let ctl = Ctl::new(&broker);
    let refused = ctl.fails(&["join_cluster", "warren@127.0.0.2"]).await;
    assert_eq!(refused.exit_code, 70, "{refused}");
    assert!(
        refused.message.contains("does not run clustered")
            && refused.message.contains("cluster.listeners.tcp.default")
            && refused.message.contains("(400)"),
        "{refused}"
    );
    let usage = ctl.fails(&["join_cluster"]).await;
    assert_eq!(usage.exit_code, 64, "{usage}");
    assert!(ctl.ok(&["help"]).await.contains("join_cluster NODE"));
}
