//! Stream records as AMQP 1.0 messages, for the core's streams
//! ([`warren_core::stream_log::MessageFormat`]): what AMQP 0-9-1, STOMP and MQTT publish to a
//! stream is written as the AMQP 1.0 message an AMQP 1.0 consumer would receive (with the
//! `x-exchange` and `x-routing-key` annotations RabbitMQ writes), so stream protocol
//! clients read it as RabbitMQ's clients expect, and records written by stream clients are
//! delivered to the core's consumers through the same mapping ([`crate::mapping`]).

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::messaging::annotations::OwnedKey;
use fe2o3_amqp_types::messaging::MessageAnnotations;
use serde_amqp::Value as AmqpValue;
use warren_core::message::Message;
use warren_core::stream_log::MessageFormat;

use crate::codec::{described_code, skip_value};
use crate::mapping::{decode_message, encode_message};

const SECTION_MESSAGE_ANNOTATIONS: u64 = 0x72;

/// The AMQP 1.0 stream message format the server installs
/// ([`warren_core::Broker::set_stream_format`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct StreamFormat;

impl MessageFormat for StreamFormat {
    fn encode(&self, message: &Message) -> Bytes {
        let mut out = BytesMut::with_capacity(message.body.len() + 128);
        encode_message(message, false, 0, &mut out);
        out.freeze()
    }

    fn decode(&self, record: Bytes) -> Result<Message, String> {
        let mut message = decode_message(record.clone())
            .map_err(|error| error.0)?
            .message;
        // Where it was published, and the 0-9-1 properties AMQP 1.0 keeps in annotations.
        if let Some(annotations) = message_annotations(&record) {
            for (key, value) in annotations.0 {
                let (OwnedKey::Symbol(key), AmqpValue::String(text)) = (key, value) else {
                    continue;
                };
                match key.0.as_str() {
                    "x-exchange" => message.exchange = text.into(),
                    "x-routing-key" => message.routing_key = text.into(),
                    "x-basic-type" if message.properties.message_type.is_none() => {
                        message.properties.message_type = Some(text)
                    }
                    "x-basic-app-id" => message.properties.app_id = Some(text),
                    _ => {}
                }
            }
        }
        Ok(message)
    }
}

/// The message-annotations section of an encoded message, if it has one that decodes.
fn message_annotations(payload: &[u8]) -> Option<MessageAnnotations> {
    let mut offset = 0;
    while offset < payload.len() {
        let rest = &payload[offset..];
        let length = skip_value(rest, 0).ok()?;
        if described_code(&rest[..length]) == Some(SECTION_MESSAGE_ANNOTATIONS) {
            return serde_amqp::from_slice(&rest[..length]).ok();
        }
        offset += length;
    }
    None
}

#[cfg(test)]
mod tests {
    use warren_core::message::Properties;
    use warren_core::value::{Table, Value};

    use super::*;

    #[test]
    fn a_message_comes_back_from_its_record_with_where_it_was_published() {
        let mut headers = Table::new();
        headers.insert("x-stream-filter-value", Value::string("red"));
        headers.insert("count", Value::I32(3));
        let message = Message {
            exchange: "orders".into(),
            routing_key: "eu.new".into(),
            properties: Properties {
                content_type: Some("text/plain".into()),
                headers: Some(headers),
                delivery_mode: Some(2),
                priority: Some(7),
                correlation_id: Some("c-1".into()),
                reply_to: Some("replies".into()),
                message_id: Some("m-1".into()),
                timestamp: Some(1_700_000_000),
                message_type: Some("order.created".into()),
                app_id: Some("shop".into()),
                ..Properties::default()
            },
            encoded_properties: None,
            body: Bytes::from_static(b"payload"),
        };
        let back = StreamFormat
            .decode(StreamFormat.encode(&message))
            .expect("decodes");
        assert_eq!(&*back.exchange, "orders");
        assert_eq!(&*back.routing_key, "eu.new");
        assert_eq!(&back.body[..], b"payload");
        let p = &back.properties;
        assert_eq!(p.content_type.as_deref(), Some("text/plain"));
        assert_eq!(p.delivery_mode, Some(2));
        assert_eq!(p.priority, Some(7));
        assert_eq!(p.correlation_id.as_deref(), Some("c-1"));
        assert_eq!(p.reply_to.as_deref(), Some("replies"));
        assert_eq!(p.message_id.as_deref(), Some("m-1"));
        assert_eq!(p.timestamp, Some(1_700_000_000));
        assert_eq!(p.message_type.as_deref(), Some("order.created"));
        assert_eq!(p.app_id.as_deref(), Some("shop"));
        let headers = p.headers.as_ref().unwrap();
        assert_eq!(
            headers.get("x-stream-filter-value").and_then(Value::as_str),
            Some("red")
        );
        assert_eq!(headers.get("count").and_then(Value::as_i64), Some(3));
    }

    #[test]
    fn bytes_that_are_no_message_are_refused() {
        assert!(StreamFormat.decode(Bytes::from_static(b"raw")).is_err());
    }
}
