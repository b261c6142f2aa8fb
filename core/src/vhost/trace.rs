//! Firehose tracing (`rabbitmqctl trace_on`): while a vhost traces, every message published
//! into one of its exchanges and every delivery from one of its queues is copied to the
//! `amq.rabbitmq.trace` exchange with routing key `publish.<exchange>` or `deliver.<queue>`
//! and RabbitMQ's trace headers. When tracing is off the cost is one relaxed load per publish
//! and per delivery.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use super::VHost;
use crate::message::{Message, Properties};
use crate::queue::Queue;
use crate::value::{Table, Value};

/// The exchange trace copies are published to.
pub const TRACE_EXCHANGE: &str = "amq.rabbitmq.trace";

/// A vhost's tracing switch, shared with its queues.
pub type TraceFlag = Arc<AtomicBool>;

impl VHost {
    /// Turns firehose tracing on or off for this vhost.
    pub fn set_tracing(&self, on: bool) {
        self.trace.store(on, Ordering::Relaxed);
    }

    /// Whether this vhost traces.
    pub fn is_tracing(&self) -> bool {
        self.trace.load(Ordering::Relaxed)
    }

    /// The switch queues read on every delivery.
    pub(crate) fn trace_flag(&self) -> TraceFlag {
        Arc::clone(&self.trace)
    }

    /// Publishes the `publish.<exchange>` copy of a message routed to `routed`.
    pub(super) fn trace_publish(&self, exchange: &str, message: &Message, routed: &[Arc<Queue>]) {
        if exchange == TRACE_EXCHANGE {
            return;
        }
        let mut headers = trace_headers(exchange, message, false);
        headers.insert(
            "routed_queues",
            Value::Array(
                routed
                    .iter()
                    .map(|q| Value::string(q.name().to_string()))
                    .collect(),
            ),
        );
        headers.insert("vhost", Value::string(self.name.clone()));
        self.publish_trace(format!("publish.{exchange}"), headers, message.body.clone());
    }

    /// Publishes the `deliver.<queue>` copies of deliveries from `queue`.
    pub(crate) fn trace_deliveries(&self, queue: &str, deliveries: Vec<(Arc<Message>, bool)>) {
        for (message, redelivered) in deliveries {
            if &*message.exchange == TRACE_EXCHANGE {
                continue;
            }
            let mut headers = trace_headers(&message.exchange, &message, redelivered);
            headers.insert("vhost", Value::string(self.name.clone()));
            self.publish_trace(format!("deliver.{queue}"), headers, message.body.clone());
        }
    }

    fn publish_trace(&self, routing_key: String, headers: Table, body: Bytes) {
        let Some(exchange) = self.exchange(TRACE_EXCHANGE) else {
            return;
        };
        let copy = Message {
            exchange: TRACE_EXCHANGE.into(),
            routing_key: routing_key.as_str().into(),
            properties: Properties {
                headers: Some(headers),
                ..Properties::default()
            },
            encoded_properties: None,
            body,
        };
        let (mut targets, mut visited, mut out) = (Vec::new(), Vec::new(), Vec::new());
        let mut typed = Vec::new();
        self.route_through(
            &exchange,
            &routing_key,
            &copy,
            &mut targets,
            &mut visited,
            &mut out,
            &mut typed,
        );
        let copy = Arc::new(copy);
        for queue in out {
            queue.enqueue(Arc::clone(&copy));
        }
        for queue in typed {
            queue.publish(Arc::clone(&copy));
        }
    }
}

/// RabbitMQ's trace headers: `exchange_name`, `routing_keys`, `properties`, `redelivered`.
fn trace_headers(exchange: &str, message: &Message, redelivered: bool) -> Table {
    let mut routing_keys = vec![Value::string(message.routing_key.to_string())];
    if let Some(headers) = &message.properties.headers {
        for name in ["CC", "BCC"] {
            match headers.get(name) {
                Some(Value::Array(keys)) => routing_keys.extend(keys.iter().cloned()),
                Some(key @ Value::LongString(_)) => routing_keys.push(key.clone()),
                _ => {}
            }
        }
    }
    let mut headers = Table::new();
    headers.insert("exchange_name", Value::string(exchange.to_string()));
    headers.insert("routing_keys", Value::Array(routing_keys));
    headers.insert(
        "properties",
        Value::Table(properties_table(&message.properties)),
    );
    headers.insert("redelivered", Value::I32(i32::from(redelivered)));
    headers
}

/// A message's properties as a field table, with AMQP 0-9-1's property names.
fn properties_table(properties: &Properties) -> Table {
    let mut table = Table::new();
    let mut text = |name: &str, value: &Option<String>| {
        if let Some(value) = value {
            table.insert(name, Value::string(value.clone()));
        }
    };
    text("content_type", &properties.content_type);
    text("content_encoding", &properties.content_encoding);
    text("correlation_id", &properties.correlation_id);
    text("reply_to", &properties.reply_to);
    text("expiration", &properties.expiration);
    text("message_id", &properties.message_id);
    text("type", &properties.message_type);
    text("user_id", &properties.user_id);
    text("app_id", &properties.app_id);
    text("cluster_id", &properties.cluster_id);
    if let Some(headers) = &properties.headers {
        table.insert("headers", Value::Table(headers.clone()));
    }
    if let Some(mode) = properties.delivery_mode {
        table.insert("delivery_mode", Value::U8(mode));
    }
    if let Some(priority) = properties.priority {
        table.insert("priority", Value::U8(priority));
    }
    if let Some(timestamp) = properties.timestamp {
        table.insert("timestamp", Value::Timestamp(timestamp));
    }
    table
}
