//! The management HTTP API against a running broker: status codes and JSON shapes of each
//! endpoint as RabbitMQ gives them (401 `not_authorised` for a failed login, a missing tag
//! or a vhost the user may not use), CRUD of vhosts, users, permissions, exchanges, queues
//! and policies, publish and get through the API, health checks, and AMQP connections and
//! consumers showing up with their client properties.

use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::{json, Value};
use warren_core::broker::Alarm;
use warren_interop_tests::{wait_for, TestBroker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_and_tags_are_checked_as_rabbitmq_does() {
    let broker = TestBroker::start().await;
    broker.broker().add_user("plain", "pw", vec![]);
    broker
        .broker()
        .add_user("viewer", "pw", vec!["management".into()]);
    broker
        .broker()
        .add_user("watcher", "pw", vec!["monitoring".into()]);

    let anonymous = broker.api("GET", "/api/overview", None, None).await;
    assert_eq!(anonymous.status, 401);
    assert!(anonymous
        .headers
        .iter()
        .any(|(name, value)| name == "www-authenticate" && value.starts_with("Basic")));
    let wrong = broker
        .api("GET", "/api/overview", Some(("guest", "nope")), None)
        .await;
    assert_eq!(wrong.status, 401);
    assert_eq!(wrong.json()["error"], "not_authorised");

    let untagged = broker
        .api("GET", "/api/whoami", Some(("plain", "pw")), None)
        .await;
    assert_eq!(untagged.status, 401);
    assert_eq!(untagged.json()["reason"], "Not management user");

    let viewer = Some(("viewer", "pw"));
    let whoami = broker.api("GET", "/api/whoami", viewer, None).await;
    assert_eq!(whoami.status, 200);
    assert_eq!(
        whoami.json(),
        json!({"name": "viewer", "tags": ["management"]})
    );
    let users = broker.api("GET", "/api/users", viewer, None).await;
    assert_eq!(users.status, 401);
    assert_eq!(users.json()["reason"], "Not administrator user");
    let nodes = broker.api("GET", "/api/nodes", viewer, None).await;
    assert_eq!(nodes.json()["reason"], "Not monitor user");
    // No permissions in "/": the vhost is hidden from the list and refused by name.
    let vhosts = broker.api("GET", "/api/vhosts", viewer, None).await;
    assert_eq!(vhosts.json(), json!([]));
    let queues = broker.api("GET", "/api/queues/%2F", viewer, None).await;
    assert_eq!(queues.status, 401);
    assert_eq!(
        queues.json()["reason"],
        "User not authorised to access virtual host"
    );
    let policy = broker
        .api(
            "PUT",
            "/api/policies/%2F/p",
            viewer,
            Some(r#"{"pattern":".*","definition":{"max-length":1}}"#),
        )
        .await;
    assert_eq!(policy.json()["reason"], "Not policymaker user");

    let watcher = Some(("watcher", "pw"));
    assert_eq!(
        broker.api("GET", "/api/nodes", watcher, None).await.status,
        200
    );
    let vhosts = broker.api("GET", "/api/vhosts", watcher, None).await.json();
    assert_eq!(vhosts[0]["name"], "/");
    assert_eq!(
        broker.api("GET", "/api/users", watcher, None).await.status,
        401
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vhosts_users_and_permissions_are_created_listed_and_deleted() {
    let broker = TestBroker::start().await;
    assert_eq!(
        broker
            .api_as_guest("PUT", "/api/vhosts/shop", Some("{}"))
            .await
            .status,
        201
    );
    assert_eq!(
        broker
            .api_as_guest("PUT", "/api/vhosts/shop", Some("{}"))
            .await
            .status,
        204
    );
    let vhost = broker
        .api_as_guest("GET", "/api/vhosts/shop", None)
        .await
        .json();
    assert_eq!(vhost["name"], "shop");
    assert_eq!(vhost["messages"], 0);
    assert_eq!(vhost["default_queue_type"], "classic");
    assert_eq!(
        broker
            .api_as_guest("GET", "/api/vhosts/none", None)
            .await
            .json(),
        json!({"error": "Object Not Found", "reason": "Not Found"})
    );

    let created = broker
        .api_as_guest(
            "PUT",
            "/api/users/alice",
            Some(r#"{"password":"s3cret","tags":"management,policymaker"}"#),
        )
        .await;
    assert_eq!(created.status, 201);
    let alice = broker
        .api_as_guest("GET", "/api/users/alice", None)
        .await
        .json();
    assert_eq!(alice["tags"], json!(["management", "policymaker"]));
    assert_eq!(alice["hashing_algorithm"], "rabbit_password_hashing_sha256");
    assert!(alice["password_hash"].as_str().unwrap().len() > 40);
    assert!(broker
        .broker()
        .authenticate("alice", "s3cret", true)
        .is_ok());
    // A hash exported from RabbitMQ moves the user with their password.
    let moved = broker
        .api_as_guest(
            "PUT",
            "/api/users/bob",
            Some(&json!({"password_hash": alice["password_hash"], "tags": []}).to_string()),
        )
        .await;
    assert_eq!(moved.status, 201);
    assert!(broker.broker().authenticate("bob", "s3cret", true).is_ok());

    let missing_user = broker
        .api_as_guest(
            "PUT",
            "/api/permissions/shop/nobody",
            Some(r#"{"configure":".*","write":".*","read":".*"}"#),
        )
        .await;
    assert_eq!(missing_user.status, 400);
    assert_eq!(missing_user.json()["reason"], "vhost_or_user_not_found");
    let granted = broker
        .api_as_guest(
            "PUT",
            "/api/permissions/shop/alice",
            Some(r#"{"configure":"^alice-","write":".*","read":".*"}"#),
        )
        .await;
    assert_eq!(granted.status, 201);
    let permission = broker
        .api_as_guest("GET", "/api/permissions/shop/alice", None)
        .await
        .json();
    assert_eq!(
        permission,
        json!({"user":"alice","vhost":"shop","configure":"^alice-","write":".*","read":".*"})
    );
    let all = broker
        .api_as_guest("GET", "/api/permissions", None)
        .await
        .json();
    assert!(all.as_array().unwrap().iter().any(|p| p["user"] == "alice"));
    let bad_pattern = broker
        .api_as_guest(
            "PUT",
            "/api/permissions/shop/alice",
            Some(r#"{"configure":"(","write":".*","read":".*"}"#),
        )
        .await;
    assert_eq!(bad_pattern.status, 400);

    // Alice sees her vhost now, and may declare only what her configure pattern allows.
    let alice_auth = Some(("alice", "s3cret"));
    let visible = broker
        .api("GET", "/api/vhosts", alice_auth, None)
        .await
        .json();
    assert_eq!(visible.as_array().unwrap().len(), 1);
    let allowed = broker
        .api("PUT", "/api/queues/shop/alice-q", alice_auth, Some("{}"))
        .await;
    assert_eq!(allowed.status, 201);
    let refused = broker
        .api("PUT", "/api/queues/shop/other", alice_auth, Some("{}"))
        .await;
    assert_eq!(refused.status, 401);

    assert_eq!(
        broker
            .api_as_guest("DELETE", "/api/permissions/shop/alice", None)
            .await
            .status,
        204
    );
    assert_eq!(
        broker
            .api_as_guest("DELETE", "/api/users/bob", None)
            .await
            .status,
        204
    );
    assert_eq!(
        broker
            .api_as_guest("DELETE", "/api/users/bob", None)
            .await
            .status,
        404
    );
    assert_eq!(
        broker
            .api_as_guest("DELETE", "/api/vhosts/shop", None)
            .await
            .status,
        204
    );
    assert!(broker.broker().vhost("shop").is_none());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanges_queues_bindings_publish_and_get() {
    let broker = TestBroker::start().await;
    let put = |path: &'static str, body: &'static str| {
        let broker = &broker;
        async move { broker.api_as_guest("PUT", path, Some(body)).await.status }
    };
    assert_eq!(
        put(
            "/api/exchanges/%2F/orders",
            r#"{"type":"topic","durable":true}"#
        )
        .await,
        201
    );
    assert_eq!(
        put("/api/exchanges/%2F/bad", r#"{"type":"nope"}"#).await,
        400
    );
    assert_eq!(
        put(
            "/api/queues/%2F/orders.eu",
            r#"{"durable":true,"arguments":{"x-max-length":100}}"#
        )
        .await,
        201
    );
    assert_eq!(
        put("/api/queues/%2F/orders.eu", r#"{"durable":false}"#).await,
        400,
        "an inequivalent redeclaration is refused"
    );
    broker
        .broker()
        .vhost("/")
        .unwrap()
        .bind(
            warren_core::vhost::Actor {
                user: "guest",
                connection_id: 0,
            },
            "orders",
            warren_core::exchange::DestinationName::Queue("orders.eu".into()),
            "eu.#",
            Default::default(),
        )
        .unwrap();

    let exchange = broker
        .api_as_guest("GET", "/api/exchanges/%2F/orders", None)
        .await
        .json();
    assert_eq!(exchange["type"], "topic");
    assert_eq!(exchange["durable"], true);
    let exchanges = broker
        .api_as_guest("GET", "/api/exchanges", None)
        .await
        .json();
    assert!(exchanges
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "amq.topic" && e["vhost"] == "/"));

    let published = broker
        .api_as_guest(
            "POST",
            "/api/exchanges/%2F/orders/publish",
            Some(r#"{"routing_key":"eu.fr","payload":"order 1","payload_encoding":"string","properties":{"delivery_mode":2,"headers":{"n":1}}}"#),
        )
        .await;
    assert_eq!(published.json(), json!({"routed": true}));
    let unroutable = broker
        .api_as_guest(
            "POST",
            "/api/exchanges/%2F/orders/publish",
            Some(
                r#"{"routing_key":"us","payload":"x","payload_encoding":"string","properties":{}}"#,
            ),
        )
        .await;
    assert_eq!(unroutable.json(), json!({"routed": false}));
    let queue = broker
        .api_as_guest("GET", "/api/queues/%2F/orders.eu", None)
        .await
        .json();
    assert_eq!(queue["messages"], 1);
    assert_eq!(queue["messages_ready"], 1);
    assert_eq!(queue["messages_unacknowledged"], 0);
    assert_eq!(queue["consumers"], 0);
    assert_eq!(queue["type"], "classic");
    assert_eq!(queue["arguments"], json!({"x-max-length": 100}));

    let bindings = broker
        .api_as_guest("GET", "/api/bindings/%2F", None)
        .await
        .json();
    assert!(bindings.as_array().unwrap().contains(&json!({
        "source": "orders", "vhost": "/", "destination": "orders.eu",
        "destination_type": "queue", "routing_key": "eu.#", "arguments": {},
        "properties_key": "eu.%23"
    })));
    assert!(bindings
        .as_array()
        .unwrap()
        .iter()
        .any(|b| b["source"] == "" && b["destination"] == "orders.eu"));
    let queue_bindings = broker
        .api_as_guest("GET", "/api/queues/%2F/orders.eu/bindings", None)
        .await
        .json();
    assert_eq!(queue_bindings.as_array().unwrap().len(), 2);

    // Bindings created and deleted through the API, as rabbitmqadmin does.
    let created = broker
        .api_as_guest(
            "POST",
            "/api/bindings/%2F/e/orders/q/orders.eu",
            Some(r#"{"routing_key":"eu.de","arguments":{}}"#),
        )
        .await;
    assert_eq!(created.status, 201);
    let location = created
        .headers
        .iter()
        .find(|(name, _)| name == "location")
        .map(|(_, value)| value.clone())
        .expect("location header");
    assert_eq!(location, "/api/bindings/%2F/e/orders/q/orders.eu/eu.de");
    let listed = broker
        .api_as_guest("GET", "/api/bindings/%2F/e/orders/q/orders.eu", None)
        .await
        .json();
    assert_eq!(listed.as_array().unwrap().len(), 2);
    assert_eq!(
        broker.api_as_guest("DELETE", &location, None).await.status,
        204
    );
    assert_eq!(
        broker.api_as_guest("DELETE", &location, None).await.status,
        404
    );
    let missing_exchange = broker
        .api_as_guest(
            "POST",
            "/api/bindings/%2F/e/nope/q/orders.eu",
            Some(r#"{"routing_key":"k"}"#),
        )
        .await;
    assert_eq!(missing_exchange.status, 404);

    let requeued = broker
        .api_as_guest(
            "POST",
            "/api/queues/%2F/orders.eu/get",
            Some(r#"{"count":5,"ackmode":"ack_requeue_true","encoding":"auto"}"#),
        )
        .await
        .json();
    assert_eq!(requeued[0]["payload"], "order 1");
    assert_eq!(requeued[0]["payload_encoding"], "string");
    assert_eq!(requeued[0]["routing_key"], "eu.fr");
    assert_eq!(requeued[0]["exchange"], "orders");
    assert_eq!(requeued[0]["message_count"], 0);
    assert_eq!(requeued[0]["properties"]["delivery_mode"], 2);
    assert_eq!(requeued[0]["properties"]["headers"]["n"], 1);
    let taken = broker
        .api_as_guest(
            "POST",
            "/api/queues/%2F/orders.eu/get",
            Some(r#"{"count":1,"ackmode":"ack_requeue_false","encoding":"base64"}"#),
        )
        .await
        .json();
    assert_eq!(taken[0]["redelivered"], true);
    assert_eq!(taken[0]["payload"], "b3JkZXIgMQ==");
    assert_eq!(taken[0]["payload_encoding"], "base64");
    let empty = broker
        .api_as_guest(
            "POST",
            "/api/queues/%2F/orders.eu/get",
            Some(r#"{"count":1,"ackmode":"ack_requeue_false","encoding":"auto"}"#),
        )
        .await;
    assert_eq!(empty.json(), json!([]));
    let bad_mode = broker
        .api_as_guest(
            "POST",
            "/api/queues/%2F/orders.eu/get",
            Some(r#"{"count":1,"ackmode":"bogus"}"#),
        )
        .await;
    assert_eq!(bad_mode.status, 400);

    assert_eq!(
        broker
            .api_as_guest("DELETE", "/api/queues/%2F/orders.eu", None)
            .await
            .status,
        204
    );
    assert_eq!(
        broker
            .api_as_guest("GET", "/api/queues/%2F/orders.eu", None)
            .await
            .status,
        404
    );
    assert_eq!(
        broker
            .api_as_guest("DELETE", "/api/exchanges/%2F/orders", None)
            .await
            .status,
        204
    );
    assert_eq!(
        broker
            .api_as_guest("GET", "/api/aliveness-test/%2F", None)
            .await
            .json(),
        json!({"status": "ok"})
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policies_and_operator_policies_apply_and_list() {
    let broker = TestBroker::start().await;
    let created = broker
        .api_as_guest(
            "PUT",
            "/api/policies/%2F/limit",
            Some(r#"{"pattern":"^lim\\.","definition":{"max-length":2},"apply-to":"queues","priority":1}"#),
        )
        .await;
    assert_eq!(created.status, 201);
    let invalid = broker
        .api_as_guest(
            "PUT",
            "/api/policies/%2F/bad",
            Some(r#"{"pattern":"(","definition":{}}"#),
        )
        .await;
    assert_eq!(invalid.status, 400);
    let listed = broker
        .api_as_guest("GET", "/api/policies", None)
        .await
        .json();
    assert_eq!(
        listed,
        json!([{"vhost":"/","name":"limit","pattern":"^lim\\.","apply-to":"queues",
                "definition":{"max-length":2},"priority":1}])
    );
    let operator = broker
        .api_as_guest(
            "PUT",
            "/api/operator-policies/%2F/cap",
            Some(r#"{"pattern":".*","definition":{"max-length":5},"apply-to":"queues"}"#),
        )
        .await;
    assert_eq!(operator.status, 201);
    assert_eq!(
        broker
            .api_as_guest("GET", "/api/operator-policies/%2F", None)
            .await
            .json()[0]["name"],
        "cap"
    );
    broker
        .api_as_guest("PUT", "/api/queues/%2F/lim.a", Some("{}"))
        .await;
    let queue = broker.broker().vhost("/").unwrap().queue("lim.a").unwrap();
    assert_eq!(queue.limits().max_length, Some(2));
    assert_eq!(
        broker
            .api_as_guest("GET", "/api/queues/%2F/lim.a", None)
            .await
            .json()["policy"],
        "limit"
    );
    assert_eq!(
        broker
            .api_as_guest("DELETE", "/api/policies/%2F/limit", None)
            .await
            .status,
        204
    );
    assert_eq!(queue.limits().max_length, Some(5));
    assert_eq!(
        broker
            .api_as_guest("DELETE", "/api/policies/%2F/limit", None)
            .await
            .status,
        404
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overview_nodes_and_alarm_health_checks() {
    let broker = TestBroker::start().await;
    let overview = broker
        .api_as_guest("GET", "/api/overview", None)
        .await
        .json();
    assert_eq!(overview["product_name"], "Warren");
    assert!(overview["node"].as_str().unwrap().starts_with("warren@"));
    for key in [
        "connections",
        "channels",
        "exchanges",
        "queues",
        "consumers",
    ] {
        assert!(overview["object_totals"][key].is_number(), "{key}");
    }
    let listeners = overview["listeners"].as_array().unwrap();
    for (protocol, port) in [
        ("amqp", broker.addr().port()),
        ("mqtt", broker.mqtt_addr().port()),
        ("stomp", broker.stomp_addr().port()),
        ("stream", broker.stream_addr().port()),
    ] {
        assert!(
            listeners
                .iter()
                .any(|l| l["protocol"] == protocol && l["port"] == port),
            "{protocol} on {port} in {listeners:?}"
        );
    }
    let nodes = broker.api_as_guest("GET", "/api/nodes", None).await.json();
    assert_eq!(nodes[0]["running"], true);
    assert!(nodes[0]["mem_used"].as_u64().unwrap() > 0);
    assert_eq!(nodes[0]["mem_alarm"], false);

    for check in ["alarms", "local-alarms"] {
        let path = format!("/api/health/checks/{check}");
        let healthy = broker.api_as_guest("GET", &path, None).await;
        assert_eq!(
            (healthy.status, healthy.json()),
            (200, json!({"status": "ok"}))
        );
    }
    broker.broker().set_alarm(Alarm::Memory, true);
    let failing = broker
        .api_as_guest("GET", "/api/health/checks/alarms", None)
        .await;
    assert_eq!(failing.status, 503);
    assert_eq!(failing.json()["status"], "failed");
    assert_eq!(failing.json()["alarms"][0]["resource"], "memory");
    let local = broker
        .api_as_guest("GET", "/api/health/checks/local-alarms", None)
        .await;
    assert_eq!(local.status, 503);
    assert_eq!(
        local.json()["reason"],
        "There are alarms in effect on the node"
    );
    broker.broker().set_alarm(Alarm::Memory, false);
    assert_eq!(
        broker.api_as_guest("GET", "/api/nope", None).await.status,
        404
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_connections_channels_and_consumers_are_listed_and_closed() {
    let broker = TestBroker::start().await;
    let properties = ConnectionProperties::default().with_connection_name("billing-worker".into());
    let connection = Connection::connect(&broker.url(), properties)
        .await
        .expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    channel
        .queue_declare(
            "work".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declare");
    for body in [&b"one"[..], b"two", b"three"] {
        channel
            .basic_publish(
                "".into(),
                "work".into(),
                BasicPublishOptions::default(),
                body,
                BasicProperties::default(),
            )
            .await
            .expect("publish");
    }
    channel
        .basic_qos(5, BasicQosOptions::default())
        .await
        .expect("qos");
    let _consumer = channel
        .basic_consume(
            "work".into(),
            "ctag-1".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let second = connection.create_channel().await.expect("second channel");
    second
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm.select");

    assert!(
        wait_for(std::time::Duration::from_secs(5), || {
            broker.broker().connections().channel_count() == 2
        })
        .await
    );
    let connections = broker
        .api_as_guest("GET", "/api/connections", None)
        .await
        .json();
    let listed = &connections[0];
    assert_eq!(listed["protocol"], "AMQP 0-9-1");
    assert_eq!(listed["user"], "guest");
    assert_eq!(listed["vhost"], "/");
    assert_eq!(listed["channels"], 2);
    assert_eq!(listed["user_provided_name"], "billing-worker");
    assert_eq!(
        listed["client_properties"]["connection_name"],
        "billing-worker"
    );
    assert_eq!(listed["client_properties"]["product"], "lapin");
    assert_eq!(listed["port"], broker.addr().port());
    let name = listed["name"].as_str().unwrap().to_string();
    assert!(name.ends_with(&format!("-> {}", broker.addr())), "{name}");

    let channels = broker
        .api_as_guest("GET", "/api/channels", None)
        .await
        .json();
    assert_eq!(channels.as_array().unwrap().len(), 2);
    assert_eq!(channels[0]["connection_details"]["name"], name.as_str());
    // Each channel as the connection keeps it: the consumer's with its prefetch, its
    // consumer and the three deliveries it has not acknowledged; the other in confirm mode.
    let listed_channels = || async {
        broker
            .api_as_guest("GET", "/api/channels", None)
            .await
            .json()
    };
    let mut channels = listed_channels().await;
    for _ in 0..50 {
        if channels[0]["messages_unacknowledged"] == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        channels = listed_channels().await;
    }
    let first = channel.id();
    let (consuming, confirming) = if channels[0]["number"] == first {
        (&channels[0], &channels[1])
    } else {
        (&channels[1], &channels[0])
    };
    assert_eq!(consuming["number"], first, "{channels}");
    assert_eq!(consuming["prefetch_count"], 5, "{channels}");
    assert_eq!(consuming["global_prefetch_count"], 0, "{channels}");
    assert_eq!(consuming["consumer_count"], 1, "{channels}");
    assert_eq!(consuming["messages_unacknowledged"], 3, "{channels}");
    assert_eq!(consuming["confirm"], false, "{channels}");
    assert_eq!(confirming["number"], second.id(), "{channels}");
    assert_eq!(confirming["confirm"], true, "{channels}");
    assert_eq!(confirming["consumer_count"], 0, "{channels}");
    assert_eq!(confirming["messages_unacknowledged"], 0, "{channels}");
    let consumers = broker
        .api_as_guest("GET", "/api/consumers", None)
        .await
        .json();
    assert_eq!(consumers[0]["consumer_tag"], "ctag-1");
    assert_eq!(consumers[0]["queue"], json!({"name": "work", "vhost": "/"}));
    assert_eq!(consumers[0]["ack_required"], true);
    assert_eq!(
        consumers[0]["channel_details"]["connection_name"],
        name.as_str()
    );

    // Closing through the API: the client sees 320 with the reason given in X-Reason.
    let path = format!(
        "/api/connections/{}",
        warren_management::http::percent_encode(&name)
    );
    let one = broker.api_as_guest("GET", &path, None).await;
    assert_eq!(one.json()["name"], name.as_str());
    let closed = broker.api_as_guest("DELETE", &path, None).await;
    assert_eq!(closed.status, 204);
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
    assert_eq!(
        broker
            .api_as_guest("GET", "/api/connections", None)
            .await
            .json(),
        Value::Array(vec![])
    );
    assert_eq!(broker.broker().connections().closed_total(), 1);
    broker.shutdown().await;
}
