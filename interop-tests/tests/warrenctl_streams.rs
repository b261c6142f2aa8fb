//! warrenctl's stream verbs, as rabbitmq-streams has them, against a broker driven by
//! `rabbitmq-stream-client`: `list_stream_connections`, `list_stream_publishers` and
//! `list_stream_consumers` show the client's connections, its producer (with its counts of
//! published and confirmed messages) and its consumer (consumed, offset, lag), from RabbitMQ's
//! `/api/stream/...` endpoints; `add_super_stream` (by partitions or binding keys) and
//! `delete_super_stream` make and remove super streams a client then routes through.

use std::time::Duration;

use futures_lite::StreamExt;
use rabbitmq_stream_client::types::{Message, OffsetSpecification};
use rabbitmq_stream_client::Environment;
use serde_json::Value;
use warren_interop_tests::{wait_for_async, TestBroker};
use warren_management::ctl;

const LIMIT: Duration = Duration::from_secs(10);

fn args(broker: &TestBroker, verb: &[&str]) -> Vec<String> {
    let port = broker
        .management_addr()
        .rsplit_once(':')
        .map(|(_, port)| port.to_string())
        .expect("port");
    let mut all: Vec<String> = vec!["--host".into(), "127.0.0.1".into(), "--port".into(), port];
    all.extend(verb.iter().map(|s| s.to_string()));
    all
}

async fn ok(broker: &TestBroker, verb: &[&str]) -> String {
    ctl::run(&args(broker, verb), None)
        .await
        .unwrap_or_else(|e| panic!("warrenctl {verb:?}: {e}"))
}

async fn json(broker: &TestBroker, verb: &[&str]) -> Vec<Value> {
    let mut all = vec!["--formatter", "json"];
    all.extend_from_slice(verb);
    let text = ok(broker, &all).await;
    serde_json::from_str::<Value>(&text)
        .expect("JSON output")
        .as_array()
        .cloned()
        .expect("an array")
}

async fn environment(broker: &TestBroker) -> Environment {
    let addr = broker.stream_addr();
    Environment::builder()
        .host(&addr.ip().to_string())
        .port(addr.port())
        .build()
        .await
        .expect("connects to the stream listener")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_connections_publishers_and_consumers_are_listed_with_their_counts() {
    let broker = TestBroker::start().await;
    let environment = environment(&broker).await;
    environment
        .stream_creator()
        .create("events")
        .await
        .expect("created");
    let mut producer = environment
        .producer()
        .name("billing")
        .build("events")
        .await
        .expect("producer");
    for body in ["e0", "e1", "e2"] {
        let status = producer
            .send_with_confirm(Message::builder().body(body.as_bytes().to_vec()).build())
            .await
            .expect("sent");
        assert!(status.confirmed());
    }
    let mut consumer = environment
        .consumer()
        .offset(OffsetSpecification::First)
        .build("events")
        .await
        .expect("consumer");
    for expected in 0..3u64 {
        let delivery = tokio::time::timeout(LIMIT, consumer.next())
            .await
            .expect("a delivery in time")
            .expect("open")
            .expect("delivered");
        assert_eq!(delivery.offset(), expected);
    }

    let publishers = json(&broker, &["list_stream_publishers"]).await;
    assert_eq!(publishers.len(), 1, "{publishers:?}");
    let publisher = &publishers[0];
    assert_eq!(publisher["stream"], "events");
    assert_eq!(publisher["reference"], "billing");
    assert_eq!(publisher["messages_published"], 3);
    assert_eq!(publisher["messages_confirmed"], 3);
    assert_eq!(publisher["messages_errored"], 0);

    // The consumer's figures move as the client reads; wait for the last chunk to count.
    let mut consumers = Vec::new();
    let deadline = tokio::time::Instant::now() + LIMIT;
    while tokio::time::Instant::now() < deadline {
        consumers = json(&broker, &["list_stream_consumers"]).await;
        if consumers.len() == 1 && consumers[0]["messages_consumed"] == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(consumers.len(), 1, "{consumers:?}");
    assert_eq!(consumers[0]["messages_consumed"], 3, "{consumers:?}");
    let listed = &consumers[0];
    assert_eq!(listed["stream"], "events");
    assert_eq!(listed["offset"], 3);
    assert_eq!(listed["offset_lag"], 0);
    assert_eq!(listed["active"], true);
    assert_eq!(listed["activity_status"], "up");

    // The stream's queue listing counts the subscriber.
    let queue = broker
        .api_as_guest("GET", "/api/queues/%2F/events", None)
        .await
        .json();
    assert_eq!(queue["consumers"], 1, "{queue}");

    // The connections of the producer and the consumer are stream connections of guest.
    let connections = json(
        &broker,
        &[
            "list_stream_connections",
            "conn_name",
            "user",
            "vhost",
            "subscriptions",
        ],
    )
    .await;
    let names: Vec<&str> = connections
        .iter()
        .filter_map(|c| c["conn_name"].as_str())
        .collect();
    assert!(names.contains(&publisher["conn_name"].as_str().expect("named")));
    assert!(names.contains(&listed["conn_name"].as_str().expect("named")));
    assert!(connections
        .iter()
        .all(|c| c["user"] == "guest" && c["vhost"] == "/"));
    assert_eq!(
        connections
            .iter()
            .map(|c| c["subscriptions"].as_u64().unwrap_or(0))
            .sum::<u64>(),
        1
    );

    // The table: rabbitmq-streams' banner and columns.
    let table = ok(
        &broker,
        &[
            "list_stream_publishers",
            "stream",
            "reference",
            "messages_confirmed",
        ],
    )
    .await;
    assert_eq!(
        table,
        "Listing stream publishers ...\nstream\treference\tmessages_confirmed\nevents\tbilling\t3\n"
    );
    let refused = ctl::run(&args(&broker, &["list_stream_consumers", "colour"]), None)
        .await
        .expect_err("an unknown column");
    assert_eq!(refused.exit_code, 64);

    // Per connection, as RabbitMQ's management: the producer's connection has it.
    let connection =
        warren_management::http::percent_encode(publisher["conn_name"].as_str().unwrap());
    let response = broker
        .api_as_guest(
            "GET",
            &format!("/api/stream/connections/%2F/{connection}/publishers"),
            None,
        )
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    let listed = response.json();
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["publisher_id"], publisher_json_id(&broker).await);
    assert_eq!(listed[0]["queue"]["name"], "events");

    // Closing them takes them out of the listings.
    producer.close().await.expect("closed");
    consumer.handle().close().await.expect("closed");
    assert!(
        wait_for_async(LIMIT, || async {
            json(&broker, &["list_stream_publishers"]).await.is_empty()
                && json(&broker, &["list_stream_consumers"]).await.is_empty()
        })
        .await
    );
}

/// The publisher id `/api/stream/publishers` shows.
async fn publisher_json_id(broker: &TestBroker) -> Value {
    broker
        .api_as_guest("GET", "/api/stream/publishers/%2F/events", None)
        .await
        .json()[0]["publisher_id"]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_and_delete_super_stream_make_partitions_a_client_routes_through() {
    let broker = TestBroker::start().await;
    assert_eq!(
        ok(
            &broker,
            &["add_super_stream", "invoices", "--partitions", "2"]
        )
        .await,
        "Adding a super stream...\n"
    );
    ok(
        &broker,
        &[
            "add_super_stream",
            "orders",
            "--routing-keys",
            "eu,us",
            "--max-length-bytes",
            "1mb",
            "--max-age",
            "PT1H",
        ],
    )
    .await;
    let environment = environment(&broker).await;
    // The partitions are streams with the retention asked for.
    let vhost = broker.broker().vhost("/").expect("default vhost");
    let orders = vhost.streams().super_streams().get("orders").expect("made");
    assert_eq!(orders.partition_names(), ["orders-eu", "orders-us"]);
    assert_eq!(orders.route("us"), ["orders-us"]);
    let settings = vhost
        .streams()
        .get("orders-eu")
        .expect("partition")
        .effective_settings();
    assert_eq!(settings.max_length_bytes, Some(1_000_000));
    assert!(settings.max_age.is_some());
    // A client asks the broker for the partitions of the other one.
    let producer = environment
        .producer()
        .build("invoices-1")
        .await
        .expect("partition invoices-1 exists");
    producer.close().await.expect("closed");
    assert_eq!(
        vhost
            .streams()
            .super_streams()
            .get("invoices")
            .expect("made")
            .partition_names(),
        ["invoices-0", "invoices-1"]
    );

    // Twice is refused with the API's reason.
    let refused = ctl::run(
        &args(
            &broker,
            &["add_super_stream", "invoices", "--partitions", "2"],
        ),
        None,
    )
    .await
    .expect_err("exists");
    assert_eq!(refused.exit_code, 70, "{refused}");
    let refused = ctl::run(
        &args(
            &broker,
            &[
                "add_super_stream",
                "x",
                "--partitions",
                "2",
                "--binding-keys",
                "a",
            ],
        ),
        None,
    )
    .await
    .expect_err("both");
    assert_eq!(refused.exit_code, 64);

    assert_eq!(
        ok(&broker, &["delete_super_stream", "invoices"]).await,
        "Deleting a super stream...\n"
    );
    assert!(vhost.streams().super_streams().get("invoices").is_none());
    assert!(
        environment.producer().build("invoices-0").await.is_err(),
        "partitions deleted with it"
    );
    let refused = ctl::run(&args(&broker, &["delete_super_stream", "invoices"]), None)
        .await
        .expect_err("gone");
    assert_eq!(refused.exit_code, 70);
}
