//! MQTT 5 message properties mapped onto the core's message, and back, as RabbitMQ 3.13+
//! maps them (see docs/protocol-mapping.md):
//!
//! | MQTT 5                     | core message (AMQP 0-9-1 terms)                        |
//! |----------------------------|--------------------------------------------------------|
//! | message expiry interval    | `expiration` (ms), and `x-mqtt-published-at` (Unix ms) |
//! | response topic             | `reply_to`, as a routing key (`/` → `.`)               |
//! | correlation data           | `correlation_id` if UTF-8 of at most 255 bytes, else   |
//! |                            | the `x-correlation-id` header (binary)                 |
//! | content type               | `content_type`                                         |
//! | payload format indicator   | `x-mqtt-payload-format-indicator` header               |
//! | user properties            | headers (string values); headers back, except `x-*`    |
//!
//! The expiry interval sent on delivery is what is left of it: the original interval less
//! the time since publishing, rounded up to whole seconds (MQTT-3.3.2-6).

use bytes::Bytes;
use warren_core::message::{Message, Properties as AmqpProperties};
use warren_core::value::{Table, Value};

use crate::codec::{mqtt_topic_to_routing_key, routing_key_to_mqtt_topic, Properties};

/// When an MQTT 5 message with an expiry interval was published, in Unix milliseconds.
pub const PUBLISHED_AT_HEADER: &str = "x-mqtt-published-at";
/// The payload format indicator of an MQTT 5 message (1: UTF-8 text).
pub const PAYLOAD_FORMAT_HEADER: &str = "x-mqtt-payload-format-indicator";
/// Correlation data that cannot be an AMQP 0-9-1 `correlation_id` (not UTF-8, or longer
/// than a short string).
pub const CORRELATION_HEADER: &str = "x-correlation-id";

/// The wall clock in Unix milliseconds.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}

/// Carries an MQTT 5 PUBLISH's (or will's) properties into the core message's properties
/// and headers.
pub fn to_core(
    properties: &Properties,
    amqp: &mut AmqpProperties,
    headers: &mut Table,
    now_ms: u64,
) {
    if let Some(seconds) = properties.message_expiry_interval {
        amqp.expiration = Some((u64::from(seconds) * 1000).to_string());
        headers.insert(PUBLISHED_AT_HEADER, Value::I64(now_ms as i64));
    }
    if let Some(topic) = &properties.response_topic {
        amqp.reply_to = Some(mqtt_topic_to_routing_key(topic).into_owned());
    }
    if let Some(data) = &properties.correlation_data {
        match std::str::from_utf8(data) {
            Ok(text) if text.len() <= 255 => amqp.correlation_id = Some(text.to_string()),
            _ => headers.insert(CORRELATION_HEADER, Value::ByteArray(data.to_vec())),
        }
    }
    if let Some(content_type) = &properties.content_type {
        amqp.content_type = Some(content_type.clone());
    }
    if let Some(indicator) = properties.payload_format_indicator {
        headers.insert(PAYLOAD_FORMAT_HEADER, Value::U8(indicator));
    }
    for (name, value) in &properties.user_properties {
        headers.insert(name.as_str(), Value::string(value.as_str()));
    }
}

/// What [`from_core`] found.
pub enum Outgoing {
    /// The properties to deliver with (`None`: none).
    Deliver(Option<Box<Properties>>),
    /// The message's expiry interval has passed: it must not be delivered (MQTT-3.3.2-5).
    Expired,
}

/// The MQTT 5 properties to deliver a core message with, whichever protocol published it.
pub fn from_core(message: &Message, now_ms: u64) -> Outgoing {
    let amqp = &message.properties;
    let mut properties = Properties::default();
    let headers = amqp.headers.as_ref();
    if let Some(ttl) = amqp.expiration_ms() {
        let published = headers
            .and_then(|headers| headers.get(PUBLISHED_AT_HEADER))
            .and_then(Value::as_i64)
            .map_or(now_ms, |at| at.max(0) as u64);
        let left = ttl.saturating_sub(now_ms.saturating_sub(published));
        if left == 0 {
            return Outgoing::Expired;
        }
        properties.message_expiry_interval =
            Some(left.div_ceil(1000).min(u64::from(u32::MAX)) as u32);
    }
    if let Some(reply_to) = &amqp.reply_to {
        // An AMQP 1.0 style address names the routing key after its prefix.
        let key = reply_to
            .strip_prefix("/topic/")
            .or_else(|| reply_to.strip_prefix("/exchange/amq.topic/"))
            .unwrap_or(reply_to);
        let topic = routing_key_to_mqtt_topic(key);
        if crate::codec::validate_topic_name(&topic).is_ok() {
            properties.response_topic = Some(topic.into_owned());
        }
    }
    if let Some(correlation_id) = &amqp.correlation_id {
        properties.correlation_data = Some(Bytes::copy_from_slice(correlation_id.as_bytes()));
    }
    if let Some(content_type) = &amqp.content_type {
        properties.content_type = Some(content_type.clone());
    }
    if let Some(headers) = headers {
        for (name, value) in headers.iter() {
            match (name, value) {
                (CORRELATION_HEADER, Value::ByteArray(data) | Value::LongString(data)) => {
                    if properties.correlation_data.is_none() {
                        properties.correlation_data = Some(Bytes::copy_from_slice(data));
                    }
                }
                (PAYLOAD_FORMAT_HEADER, value) => {
                    properties.payload_format_indicator =
                        value.as_i64().filter(|v| *v == 1).map(|_| 1);
                }
                _ if name.starts_with("x-") => {}
                (_, value) => {
                    if let Some(text) = header_text(value) {
                        properties.user_properties.push((name.to_string(), text));
                    }
                }
            }
        }
    }
    if properties == Properties::default() {
        Outgoing::Deliver(None)
    } else {
        Outgoing::Deliver(Some(Box::new(properties)))
    }
}

/// A header value as user property text: strings, numbers and booleans.
fn header_text(value: &Value) -> Option<String> {
    match value {
        Value::LongString(bytes) => std::str::from_utf8(bytes).ok().map(str::to_string),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::F32(number) => Some(number.to_string()),
        Value::F64(number) => Some(number.to_string()),
        other => other.as_i64().map(|number| number.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn message_from(properties: &Properties, now_ms: u64) -> Message {
        let mut amqp = AmqpProperties::default();
        let mut headers = Table::new();
        to_core(properties, &mut amqp, &mut headers, now_ms);
        amqp.headers = Some(headers);
        Message {
            exchange: Arc::from("amq.topic"),
            routing_key: Arc::from("a.b"),
            properties: amqp,
            encoded_properties: None,
            body: Bytes::new(),
        }
    }

    #[test]
    fn properties_survive_the_trip_through_the_core() {
        let sent = Properties {
            message_expiry_interval: Some(30),
            response_topic: Some("reply/here".into()),
            correlation_data: Some(Bytes::from_static(b"req-1")),
            content_type: Some("application/json".into()),
            payload_format_indicator: Some(1),
            user_properties: vec![("device".into(), "d1".into())],
            ..Properties::default()
        };
        let message = message_from(&sent, 1_000_000);
        assert_eq!(message.properties.reply_to.as_deref(), Some("reply.here"));
        assert_eq!(message.properties.correlation_id.as_deref(), Some("req-1"));
        assert_eq!(message.properties.expiration.as_deref(), Some("30000"));
        // 10.5 s later, 19.5 s are left: rounded up to 20.
        let Outgoing::Deliver(Some(back)) = from_core(&message, 1_010_500) else {
            panic!("expected properties");
        };
        assert_eq!(back.message_expiry_interval, Some(20));
        assert_eq!(back.response_topic.as_deref(), Some("reply/here"));
        assert_eq!(back.correlation_data, sent.correlation_data);
        assert_eq!(back.content_type, sent.content_type);
        assert_eq!(back.payload_format_indicator, Some(1));
        assert_eq!(back.user_properties, sent.user_properties);
        assert!(matches!(from_core(&message, 1_030_000), Outgoing::Expired));
    }

    #[test]
    fn binary_correlation_data_goes_to_a_header() {
        let sent = Properties {
            correlation_data: Some(Bytes::from_static(&[0xff, 0x00, 0x01])),
            ..Properties::default()
        };
        let message = message_from(&sent, 0);
        assert_eq!(message.properties.correlation_id, None);
        let Outgoing::Deliver(Some(back)) = from_core(&message, 0) else {
            panic!("expected properties");
        };
        assert_eq!(back.correlation_data, sent.correlation_data);
    }

    #[test]
    fn a_plain_message_has_no_properties() {
        let message = message_from(&Properties::default(), 0);
        assert!(matches!(from_core(&message, 0), Outgoing::Deliver(None)));
    }
}
