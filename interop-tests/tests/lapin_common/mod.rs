//! Helpers shared by the lapin tests (a subdirectory module, so cargo does not build it as a
//! test of its own): connecting, queue-argument tables, declaring and publishing, and reading
//! the headers and counters tests assert on. Each test file uses a part of them.
#![allow(dead_code)]

use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ErrorKind};
use warren_interop_tests::TestBroker;

/// The reply code and text of a broker-sent close carried by a lapin error.
pub fn amqp_error(error: &lapin::Error) -> (u16, String) {
    match error.kind() {
        ErrorKind::ProtocolError(e) => (e.get_id(), e.get_message().as_str().to_string()),
        other => panic!("expected an AMQP error from the broker, got {other:?}"),
    }
}

/// A connection to the test broker as guest, and a channel on it.
pub async fn connect(broker: &TestBroker) -> (Connection, Channel) {
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects");
    let channel = connection.create_channel().await.expect("channel");
    (connection, channel)
}

/// A field table (queue or consumer arguments) from `(key, value)` pairs.
pub fn args(entries: &[(&str, AMQPValue)]) -> FieldTable {
    let mut table = FieldTable::default();
    for (key, value) in entries {
        table.insert(ShortString::from(*key), value.clone());
    }
    table
}

/// A long-string field value.
pub fn text(value: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(value))
}

/// Declares a (non-durable) queue with `arguments`; panics with the broker's refusal.
pub async fn declare(channel: &Channel, name: &str, arguments: FieldTable) {
    channel
        .queue_declare(name.into(), QueueDeclareOptions::default(), arguments)
        .await
        .unwrap_or_else(|e| panic!("declare {name}: {e}"));
}

/// Publishes `body` to `queue` through the default exchange.
pub async fn publish(channel: &Channel, queue: &str, body: &[u8], properties: BasicProperties) {
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            body,
            properties,
        )
        .await
        .expect("publish");
}

/// The counters of `queue` in vhost `/` (all zero when there is no such queue).
pub fn stats(broker: &TestBroker, queue: &str) -> warren_core::queue::QueueStats {
    broker
        .broker()
        .vhost("/")
        .and_then(|v| v.queue(queue))
        .map(|q| q.stats())
        .unwrap_or_default()
}

/// The x-death entries of a message, as (queue, reason, count) in header order.
pub fn deaths(properties: &BasicProperties) -> Vec<(String, String, i64)> {
    let headers = properties.headers().as_ref().expect("headers");
    let Some(AMQPValue::FieldArray(entries)) = headers.inner().get("x-death") else {
        panic!("x-death array expected in {headers:?}");
    };
    entries
        .as_slice()
        .iter()
        .map(|entry| {
            let AMQPValue::FieldTable(entry) = entry else {
                panic!("x-death entry is a table")
            };
            let field = |key: &str| match entry.inner().get(key) {
                Some(AMQPValue::LongString(s)) => s.to_string(),
                other => panic!("{key}: {other:?}"),
            };
            let count = match entry.inner().get("count") {
                Some(AMQPValue::LongLongInt(n)) => *n,
                other => panic!("count: {other:?}"),
            };
            (field("queue"), field("reason"), count)
        })
        .collect()
}

/// A long-string header's text; None when it is absent or not a long string.
pub fn header_text(properties: &BasicProperties, key: &str) -> Option<String> {
    match properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get(key))
    {
        Some(AMQPValue::LongString(s)) => Some(s.to_string()),
        _ => None,
    }
}
