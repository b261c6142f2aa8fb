//! AMQP 0-9-1 server properties: `product: Warren` by default, `server_properties.<name>`
//! settings to present what a picky client expects (RabbitMQ's `server_properties`), and
//! capabilities that are always exactly RabbitMQ's, seen by amqprs and by a raw client.

mod amqprs_common;
mod raw_common;

use raw_common::Raw;
use warren_amqp091::codec::Method;
use warren_core::value::{Table, Value};
use warren_interop_tests::TestBroker;

/// RabbitMQ 4.x's AMQP 0-9-1 capabilities, in its order (rabbit_reader:server_capabilities).
const RABBITMQ_CAPABILITIES: [&str; 9] = [
    "publisher_confirms",
    "exchange_exchange_bindings",
    "basic.nack",
    "consumer_cancel_notify",
    "connection.blocked",
    "consumer_priorities",
    "authentication_failure_close",
    "per_consumer_qos",
    "direct_reply_to",
];

/// The server properties of connection.start, read by a raw client.
async fn server_properties(broker: &TestBroker) -> Table {
    let mut raw = Raw::connect(broker.addr()).await;
    match raw.handshake("PLAIN", b"\0guest\0guest".to_vec()).await {
        Method::ConnectionStart {
            server_properties, ..
        } => server_properties,
        other => panic!("expected connection.start, got {other:?}"),
    }
}

fn assert_rabbitmq_capabilities(properties: &Table) {
    let Some(Value::Table(capabilities)) = properties.get("capabilities") else {
        panic!("capabilities table missing: {properties:?}");
    };
    let expected: Vec<(String, Value)> = RABBITMQ_CAPABILITIES
        .iter()
        .map(|name| (name.to_string(), Value::Bool(true)))
        .collect();
    assert_eq!(capabilities.0, expected, "exactly RabbitMQ's capabilities");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_identity_is_warren_with_rabbitmqs_capabilities() {
    let broker = TestBroker::start().await;
    let properties = server_properties(&broker).await;
    assert_eq!(
        properties.get("product").and_then(Value::as_str),
        Some("Warren")
    );
    assert_rabbitmq_capabilities(&properties);
    let keys: Vec<&str> = properties.0.iter().map(|(key, _)| key.as_str()).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "sorted by key, as RabbitMQ sends them");
    let amqprs = amqprs_common::connect(&broker).await;
    assert_eq!(amqprs.connection.server_properties().product(), "Warren");
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_properties_settings_override_and_add_properties() {
    let broker = TestBroker::start_with(&[
        ("server_properties.product", "RabbitMQ"),
        ("server_properties.version", "4.1.0"),
        ("server_properties.x-deployment", "staging"),
    ])
    .await;
    let properties = server_properties(&broker).await;
    assert_eq!(
        properties.get("product").and_then(Value::as_str),
        Some("RabbitMQ")
    );
    assert_eq!(
        properties.get("version").and_then(Value::as_str),
        Some("4.1.0")
    );
    assert_eq!(
        properties.get("x-deployment").and_then(Value::as_str),
        Some("staging")
    );
    assert_eq!(
        properties.get("platform").and_then(Value::as_str),
        Some("Rust"),
        "the others stay"
    );
    assert_rabbitmq_capabilities(&properties);
    // What a client library sees.
    let amqprs = amqprs_common::connect(&broker).await;
    let seen = amqprs.connection.server_properties();
    assert_eq!(seen.product(), "RabbitMQ");
    assert_eq!(seen.version(), "4.1.0");
    assert!(seen.capabilities().publisher_confirms());
    broker.shutdown().await;
}
