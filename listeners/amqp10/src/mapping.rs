//! Message mapping between AMQP 1.0 sections and the core [`Message`] (see
//! docs/protocol-mapping.md for the table).
//!
//! Incoming: the bare message is split into its sections without decoding the body. A body
//! of exactly one `data` section becomes the core body as a slice of the frame bytes (no
//! copy); any other body (`amqp-value`, `amqp-sequence`, several `data` sections) is kept as
//! its encoded sections, marked with the 0-9-1 `type` property `amqp-1.0` as RabbitMQ does,
//! and handed back verbatim to AMQP 1.0 consumers. Fields AMQP 0-9-1 has no property for
//! travel in `x-amqp-1.0-*` headers so a 1.0 consumer gets them back.

use bytes::{BufMut, Bytes, BytesMut};
use fe2o3_amqp_types::messaging::annotations::OwnedKey;
use fe2o3_amqp_types::messaging::{
    ApplicationProperties, Header, MessageAnnotations, MessageId, Priority, Properties,
};
use fe2o3_amqp_types::primitives::{Binary, OrderedMap, SimpleValue, Symbol, Timestamp};
use serde::Serialize;
use serde_amqp::Value as AmqpValue;
use warren_core::message::{Message, Properties as CoreProperties};
use warren_core::value::{Table, Value};

use crate::codec::{described_code, skip_value};

/// The 0-9-1 `type` that marks a body holding encoded AMQP 1.0 body sections.
pub const AMQP10_BODY_TYPE: &str = "amqp-1.0";
/// Header carrying the 1.0 `to` property.
pub const HEADER_TO: &str = "x-amqp-1.0-to";
/// Header carrying the 1.0 `subject` property.
pub const HEADER_SUBJECT: &str = "x-amqp-1.0-subject";
/// Header carrying the 1.0 `group-id` property.
pub const HEADER_GROUP_ID: &str = "x-amqp-1.0-group-id";
/// Header carrying the 1.0 `absolute-expiry-time` property (ms since the epoch).
pub const HEADER_ABSOLUTE_EXPIRY: &str = "x-amqp-1.0-absolute-expiry-time";
/// Header carrying the exact 1.0 `creation-time` (ms); `timestamp` holds it in seconds.
pub const HEADER_CREATION_TIME: &str = "x-amqp-1.0-creation-time";

/// Headers that AMQP 1.0 carries as message annotations rather than application
/// properties, as RabbitMQ does: a stream delivery's offset and a stream message's filter
/// value.
const ANNOTATION_HEADERS: &[&str] = &["x-stream-offset", "x-stream-filter-value"];

/// A 1.0 `reply-to` as the core (and AMQP 0-9-1, STOMP) keeps it: the v2 queue address
/// `/queues/Q` becomes the queue name `Q`, as RabbitMQ 4.x's mc_amqpl does; any other
/// address (or one that does not decode) is kept as written.
pub fn reply_to_from_address(reply_to: String) -> String {
    match reply_to
        .strip_prefix("/queues/")
        .and_then(crate::address::percent_decode)
    {
        Some(queue) => queue,
        None => reply_to,
    }
}

/// The core's `reply_to` as a 1.0 `reply-to`: a queue name (what AMQP 0-9-1 clients set)
/// becomes the v2 address `/queues/Q`, percent-encoded (mc_amqpl); a value that already is an
/// address (starts with `/`) is passed on unchanged, so a 1.0 publisher's address survives.
pub fn reply_to_address(reply_to: &str) -> String {
    if reply_to.starts_with('/') {
        reply_to.to_string()
    } else {
        format!("/queues/{}", crate::address::percent_encode(reply_to))
    }
}

const SECTION_HEADER: u64 = 0x70;
const SECTION_DELIVERY_ANNOTATIONS: u64 = 0x71;
const SECTION_MESSAGE_ANNOTATIONS: u64 = 0x72;
const SECTION_PROPERTIES: u64 = 0x73;
const SECTION_APPLICATION_PROPERTIES: u64 = 0x74;
const SECTION_DATA: u64 = 0x75;
const SECTION_SEQUENCE: u64 = 0x76;
const SECTION_VALUE: u64 = 0x77;
const SECTION_FOOTER: u64 = 0x78;

/// A message received over AMQP 1.0, mapped onto the core.
#[derive(Debug)]
pub struct IncomingMessage {
    /// Properties and body; exchange and routing key are filled in by the link's target.
    pub message: Message,
    /// The `to` property (the address of a null-target link).
    pub to: Option<String>,
    /// The `subject` property (the routing key of `/exchanges/:exchange` targets).
    pub subject: Option<String>,
}

/// Why a message could not be mapped. Answered with the `rejected` outcome and
/// `amqp:decode-error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageDecodeError(pub String);

fn decode_error(message: impl Into<String>) -> MessageDecodeError {
    MessageDecodeError(message.into())
}

/// Maps the bytes of a bare (or annotated) message onto a core message.
pub fn decode_message(payload: Bytes) -> Result<IncomingMessage, MessageDecodeError> {
    let mut header: Option<Header> = None;
    let mut properties: Option<Properties> = None;
    let mut application_properties: Option<ApplicationProperties> = None;
    let mut annotations: Option<MessageAnnotations> = None;
    let mut body_start: Option<usize> = None;
    let mut body_end = payload.len();
    let mut data_sections = Vec::new();
    let mut other_body = false;
    let mut offset = 0;
    while offset < payload.len() {
        let rest = &payload[offset..];
        let length = skip_value(rest, 0).map_err(|e| decode_error(e.to_string()))?;
        let section = &rest[..length];
        let code = described_code(section)
            .ok_or_else(|| decode_error("message section without a known descriptor"))?;
        match code {
            SECTION_HEADER => header = Some(decode_section(section, "header")?),
            SECTION_DELIVERY_ANNOTATIONS => {}
            SECTION_MESSAGE_ANNOTATIONS => {
                annotations = Some(decode_section::<MessageAnnotations>(
                    section,
                    "message-annotations",
                )?)
            }
            SECTION_PROPERTIES => properties = Some(decode_section(section, "properties")?),
            SECTION_APPLICATION_PROPERTIES => {
                application_properties = Some(decode_section(section, "application-properties")?)
            }
            SECTION_DATA => {
                body_start.get_or_insert(offset);
                data_sections.push(data_payload(&payload, offset, length)?);
            }
            SECTION_SEQUENCE | SECTION_VALUE => {
                body_start.get_or_insert(offset);
                other_body = true;
            }
            SECTION_FOOTER => {
                body_end = body_end.min(offset);
            }
            other => return Err(decode_error(format!("unknown message section 0x{other:x}"))),
        }
        offset += length;
    }
    let body_start = body_start.ok_or_else(|| decode_error("message without a body section"))?;
    let mut core = CoreProperties::default();
    let mut headers = Table::new();
    let (body, raw_sections) = if !other_body && data_sections.len() == 1 {
        (data_sections.pop().unwrap_or_default(), false)
    } else {
        (payload.slice(body_start..body_end.max(body_start)), true)
    };
    if raw_sections {
        core.message_type = Some(AMQP10_BODY_TYPE.to_string());
    }
    if let Some(header) = header {
        core.delivery_mode = Some(if header.durable { 2 } else { 1 });
        let priority: u8 = header.priority.into();
        if priority != 4 {
            core.priority = Some(priority);
        }
        core.expiration = header.ttl.map(|ttl| ttl.to_string());
    }
    let mut to = None;
    let mut subject = None;
    if let Some(properties) = properties {
        core.message_id = properties.message_id.map(message_id_text);
        core.correlation_id = properties.correlation_id.map(message_id_text);
        // Checked against the authenticated user by the core's publish.
        core.user_id = properties
            .user_id
            .map(|id| String::from_utf8_lossy(&id).into_owned());
        core.reply_to = properties.reply_to;
        core.content_type = properties.content_type.map(|s| s.0);
        core.content_encoding = properties.content_encoding.map(|s| s.0);
        if let Some(time) = properties.creation_time {
            let ms = time.milliseconds();
            core.timestamp = u64::try_from(ms / 1000).ok();
            headers.insert(HEADER_CREATION_TIME, Value::I64(ms));
        }
        if let Some(time) = properties.absolute_expiry_time {
            headers.insert(HEADER_ABSOLUTE_EXPIRY, Value::I64(time.milliseconds()));
        }
        if let Some(group) = properties.group_id {
            headers.insert(HEADER_GROUP_ID, Value::string(group));
        }
        if let Some(value) = &properties.to {
            headers.insert(HEADER_TO, Value::string(value.clone()));
        }
        if let Some(value) = &properties.subject {
            headers.insert(HEADER_SUBJECT, Value::string(value.clone()));
        }
        to = properties.to;
        subject = properties.subject;
    }
    if let Some(application_properties) = application_properties {
        for (key, value) in application_properties.0 {
            if let Some(value) = simple_to_core(value) {
                headers.insert(key, value);
            }
        }
    }
    // A stream message's filter value (RabbitMQ reads it from this annotation only; the
    // core, and AMQP 0-9-1 and STOMP, keep it as a header).
    if let Some(annotations) = annotations {
        for (key, value) in annotations.0 {
            let OwnedKey::Symbol(key) = key else {
                continue;
            };
            if key.0 == "x-stream-filter-value" {
                if let AmqpValue::String(text) = value {
                    headers.insert(key.0, Value::string(text));
                }
            }
        }
    }
    if !headers.is_empty() {
        core.headers = Some(headers);
    }
    core.reply_to = core.reply_to.take().map(reply_to_from_address);
    Ok(IncomingMessage {
        message: Message {
            exchange: "".into(),
            routing_key: "".into(),
            properties: core,
            encoded_properties: None,
            body,
        },
        to,
        subject,
    })
}

fn decode_section<'de, T: serde::Deserialize<'de>>(
    bytes: &'de [u8],
    name: &str,
) -> Result<T, MessageDecodeError> {
    serde_amqp::from_slice(bytes).map_err(|error| decode_error(format!("invalid {name}: {error}")))
}

/// The bytes inside a `data` section at `offset`, as a slice of `payload`.
fn data_payload(
    payload: &Bytes,
    offset: usize,
    length: usize,
) -> Result<Bytes, MessageDecodeError> {
    let section = &payload[offset..offset + length];
    // 0x00, the descriptor (0x53 0x75 or a longer form), then vbin8 or vbin32.
    let descriptor = skip_value(&section[1..], 1).map_err(|e| decode_error(e.to_string()))?;
    let value = 1 + descriptor;
    let (start, size) = match section.get(value) {
        Some(0xa0) => (
            value + 2,
            usize::from(*section.get(value + 1).unwrap_or(&0)),
        ),
        Some(0xb0) => {
            let raw = section
                .get(value + 1..value + 5)
                .ok_or_else(|| decode_error("truncated data section"))?;
            (
                value + 5,
                u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize,
            )
        }
        _ => return Err(decode_error("data section is not binary")),
    };
    if start + size > section.len() {
        return Err(decode_error("truncated data section"));
    }
    Ok(payload.slice(offset + start..offset + start + size))
}

fn message_id_text(id: MessageId) -> String {
    match id {
        MessageId::String(text) => text,
        MessageId::Ulong(number) => number.to_string(),
        MessageId::Uuid(uuid) => uuid_text(uuid.as_inner()),
        MessageId::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
    }
}

fn uuid_text(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

fn simple_to_core(value: SimpleValue) -> Option<Value> {
    Some(match value {
        SimpleValue::Null => Value::Void,
        SimpleValue::Bool(b) => Value::Bool(b),
        SimpleValue::Ubyte(v) => Value::U8(v),
        SimpleValue::Ushort(v) => Value::U16(v),
        SimpleValue::Uint(v) => Value::U32(v),
        SimpleValue::Ulong(v) => match i64::try_from(v) {
            Ok(v) => Value::I64(v),
            Err(_) => Value::string(v.to_string()),
        },
        SimpleValue::Byte(v) => Value::I8(v),
        SimpleValue::Short(v) => Value::I16(v),
        SimpleValue::Int(v) => Value::I32(v),
        SimpleValue::Long(v) => Value::I64(v),
        SimpleValue::Float(v) => Value::F32(v.into_inner()),
        SimpleValue::Double(v) => Value::F64(v.into_inner()),
        SimpleValue::Char(c) => Value::string(c.to_string()),
        SimpleValue::Timestamp(t) => Value::Timestamp(u64::try_from(t.milliseconds() / 1000).ok()?),
        SimpleValue::Uuid(uuid) => Value::string(uuid_text(uuid.as_inner())),
        SimpleValue::Binary(bytes) => Value::ByteArray(bytes.into_vec()),
        SimpleValue::String(text) => Value::string(text),
        SimpleValue::Symbol(symbol) => Value::string(symbol.0),
        // Decimals and described values have no field-table equivalent worth guessing.
        _ => return None,
    })
}

fn core_to_simple(value: &Value) -> Option<SimpleValue> {
    Some(match value {
        Value::Bool(b) => SimpleValue::Bool(*b),
        Value::I8(v) => SimpleValue::Byte(*v),
        Value::U8(v) => SimpleValue::Ubyte(*v),
        Value::I16(v) => SimpleValue::Short(*v),
        Value::U16(v) => SimpleValue::Ushort(*v),
        Value::I32(v) => SimpleValue::Int(*v),
        Value::U32(v) => SimpleValue::Uint(*v),
        Value::I64(v) => SimpleValue::Long(*v),
        Value::F32(v) => SimpleValue::Float((*v).into()),
        Value::F64(v) => SimpleValue::Double((*v).into()),
        Value::Decimal { scale, value } => {
            SimpleValue::String(format!("{}", *value as f64 / 10f64.powi(i32::from(*scale))))
        }
        Value::LongString(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => SimpleValue::String(text.to_string()),
            Err(_) => SimpleValue::Binary(Binary::from(bytes.clone())),
        },
        Value::Timestamp(seconds) => SimpleValue::Timestamp(Timestamp::from_milliseconds(
            (*seconds as i64).saturating_mul(1000),
        )),
        Value::Void => SimpleValue::Null,
        Value::ByteArray(bytes) => SimpleValue::Binary(Binary::from(bytes.clone())),
        // Application properties hold simple values only (AMQP 1.0 3.2.5).
        Value::Array(_) | Value::Table(_) => return None,
    })
}

fn header_text(headers: Option<&Table>, key: &str) -> Option<String> {
    headers?.get(key)?.as_str().map(str::to_string)
}

fn header_i64(headers: Option<&Table>, key: &str) -> Option<i64> {
    headers?.get(key)?.as_i64()
}

/// Encodes `message` as the sections of an AMQP 1.0 message into `out`. The header's
/// delivery-count is the queue's count of failed deliveries (requeues and `modified` with
/// delivery-failed, not `released`), as RabbitMQ 4.x sets it; first-acquirer is false once
/// the message was delivered before.
pub fn encode_message(
    message: &Message,
    redelivered: bool,
    delivery_count: u32,
    out: &mut BytesMut,
) {
    let core = &message.properties;
    let headers = core.headers.as_ref();
    let ttl = core.expiration_ms().and_then(|ttl| u32::try_from(ttl).ok());
    let header = Header {
        durable: core.is_persistent(),
        priority: Priority(core.priority.unwrap_or(4)),
        ttl,
        first_acquirer: !redelivered,
        delivery_count,
    };
    serialize_into(out, &header);

    let mut annotations = OrderedMap::new();
    annotations.insert(
        OwnedKey::Symbol(Symbol::from("x-exchange")),
        AmqpValue::String(message.exchange.to_string()),
    );
    annotations.insert(
        OwnedKey::Symbol(Symbol::from("x-routing-key")),
        AmqpValue::String(message.routing_key.to_string()),
    );
    if let Some(kind) = core
        .message_type
        .as_ref()
        .filter(|kind| kind.as_str() != AMQP10_BODY_TYPE)
    {
        annotations.insert(
            OwnedKey::Symbol(Symbol::from("x-basic-type")),
            AmqpValue::String(kind.clone()),
        );
    }
    if let Some(app_id) = &core.app_id {
        annotations.insert(
            OwnedKey::Symbol(Symbol::from("x-basic-app-id")),
            AmqpValue::String(app_id.clone()),
        );
    }
    for &key in ANNOTATION_HEADERS {
        let value = headers
            .and_then(|h| h.get(key))
            .and_then(|value| match value {
                Value::LongString(_) => value.as_str().map(|text| AmqpValue::String(text.into())),
                other => other.as_i64().map(AmqpValue::Long),
            });
        if let Some(value) = value {
            annotations.insert(OwnedKey::Symbol(Symbol::from(key)), value);
        }
    }
    serialize_into(out, &MessageAnnotations(annotations));

    let creation_time = header_i64(headers, HEADER_CREATION_TIME).or_else(|| {
        core.timestamp
            .map(|seconds| (seconds as i64).saturating_mul(1000))
    });
    let properties = Properties {
        message_id: core.message_id.clone().map(MessageId::String),
        user_id: core
            .user_id
            .as_ref()
            .map(|id| Binary::from(id.as_bytes().to_vec())),
        to: header_text(headers, HEADER_TO),
        subject: header_text(headers, HEADER_SUBJECT),
        reply_to: core.reply_to.as_deref().map(reply_to_address),
        correlation_id: core.correlation_id.clone().map(MessageId::String),
        content_type: core.content_type.clone().map(Symbol::from),
        content_encoding: core.content_encoding.clone().map(Symbol::from),
        absolute_expiry_time: header_i64(headers, HEADER_ABSOLUTE_EXPIRY)
            .map(Timestamp::from_milliseconds),
        creation_time: creation_time.map(Timestamp::from_milliseconds),
        group_id: header_text(headers, HEADER_GROUP_ID),
        group_sequence: None,
        reply_to_group_id: None,
    };
    serialize_into(out, &properties);

    if let Some(headers) = headers {
        let mut map = OrderedMap::new();
        for (key, value) in headers.iter() {
            if key.starts_with("x-amqp-1.0-") || ANNOTATION_HEADERS.contains(&key) {
                continue;
            }
            if let Some(value) = core_to_simple(value) {
                map.insert(key.to_string(), value);
            }
        }
        if !map.is_empty() {
            serialize_into(out, &ApplicationProperties(map));
        }
    }

    let raw_sections = core.message_type.as_deref() == Some(AMQP10_BODY_TYPE)
        && matches!(
            described_code(&message.body),
            Some(SECTION_DATA | SECTION_SEQUENCE | SECTION_VALUE)
        );
    if raw_sections {
        out.put_slice(&message.body);
    } else {
        out.put_slice(&[0x00, 0x53, 0x75, 0xb0]);
        out.put_u32(message.body.len() as u32);
        out.put_slice(&message.body);
    }
}

fn serialize_into<T: Serialize>(out: &mut BytesMut, value: &T) {
    let mut serializer = serde_amqp::ser::Serializer::new(out.writer());
    if let Err(error) = value.serialize(&mut serializer) {
        tracing::error!(%error, "failed to encode an AMQP 1.0 message section");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp_types::messaging::message::__private::Serializable;
    use fe2o3_amqp_types::messaging::{AmqpValue as ValueSection, Data, Message as AmqpMessage};
    use proptest::prelude::*;

    fn encode<T: Serialize>(message: AmqpMessage<T>) -> Bytes
    where
        Serializable<AmqpMessage<T>>: Serialize,
    {
        Bytes::from(serde_amqp::to_vec(&Serializable(message)).unwrap())
    }

    #[test]
    fn a_data_body_and_properties_map_onto_the_core() {
        let message = AmqpMessage::builder()
            .header(Header {
                durable: true,
                priority: Priority(7),
                ttl: Some(5000),
                first_acquirer: false,
                delivery_count: 0,
            })
            .properties(
                Properties::builder()
                    .message_id(String::from("id-1"))
                    .correlation_id(42u64)
                    .content_type("text/plain")
                    .reply_to("/queues/replies")
                    .subject("key")
                    .to("/exchanges/x")
                    .creation_time(Timestamp::from_milliseconds(1_700_000_000_123))
                    .group_id("g".to_string())
                    .build(),
            )
            .application_properties(
                ApplicationProperties::builder()
                    .insert("color", "red")
                    .insert("count", 3i32)
                    .build(),
            )
            .data(Data(Binary::from(b"hello".to_vec())))
            .build();
        let incoming = decode_message(encode(message)).unwrap();
        let core = &incoming.message.properties;
        assert_eq!(&incoming.message.body[..], b"hello");
        assert_eq!(core.delivery_mode, Some(2));
        assert_eq!(core.priority, Some(7));
        assert_eq!(core.expiration.as_deref(), Some("5000"));
        assert_eq!(core.message_id.as_deref(), Some("id-1"));
        assert_eq!(core.correlation_id.as_deref(), Some("42"));
        assert_eq!(core.content_type.as_deref(), Some("text/plain"));
        assert_eq!(
            core.reply_to.as_deref(),
            Some("replies"),
            "mc_amqpl's mapping"
        );
        assert_eq!(core.timestamp, Some(1_700_000_000));
        assert_eq!(incoming.subject.as_deref(), Some("key"));
        assert_eq!(incoming.to.as_deref(), Some("/exchanges/x"));
        let headers = core.headers.as_ref().unwrap();
        assert_eq!(headers.get("color").and_then(Value::as_str), Some("red"));
        assert_eq!(headers.get("count"), Some(&Value::I32(3)));

        // And back: what a 1.0 consumer receives carries the same fields.
        let mut out = BytesMut::new();
        encode_message(&incoming.message, false, 0, &mut out);
        let back: fe2o3_amqp_types::messaging::message::__private::Deserializable<
            AmqpMessage<fe2o3_amqp_types::messaging::Body<AmqpValue>>,
        > = serde_amqp::from_slice(&out).unwrap();
        let back = back.0;
        let properties = back.properties.unwrap();
        assert_eq!(properties.subject.as_deref(), Some("key"));
        assert_eq!(properties.reply_to.as_deref(), Some("/queues/replies"));
        assert_eq!(properties.group_id.as_deref(), Some("g"));
        assert_eq!(
            properties.creation_time.map(|t| t.milliseconds()),
            Some(1_700_000_000_123)
        );
        assert_eq!(back.header.unwrap().priority, Priority(7));
        let app = back.application_properties.unwrap();
        assert_eq!(app.0.get("color"), Some(&SimpleValue::String("red".into())));
        assert!(back.body.is_data());
    }

    #[test]
    fn an_amqp_value_body_travels_as_its_encoded_section() {
        let message = AmqpMessage::builder()
            .body(ValueSection("text".to_string()))
            .build();
        let incoming = decode_message(encode(message)).unwrap();
        assert_eq!(
            incoming.message.properties.message_type.as_deref(),
            Some(AMQP10_BODY_TYPE)
        );
        let mut out = BytesMut::new();
        encode_message(&incoming.message, false, 0, &mut out);
        let back: fe2o3_amqp_types::messaging::message::__private::Deserializable<
            AmqpMessage<ValueSection<String>>,
        > = serde_amqp::from_slice(&out).unwrap();
        assert_eq!(back.0.body.0, "text");
    }

    #[test]
    fn reply_to_crosses_between_queue_names_and_v2_addresses() {
        for (name, address) in [
            ("replies", "/queues/replies"),
            (
                "amq.rabbitmq.reply-to.g1h2",
                "/queues/amq.rabbitmq.reply-to.g1h2",
            ),
            ("with space/and slash", "/queues/with%20space%2Fand%20slash"),
        ] {
            assert_eq!(reply_to_address(name), address);
            assert_eq!(reply_to_from_address(address.to_string()), name);
        }
        // Other addresses are left alone both ways.
        for address in ["/exchanges/x/k", "/queues/bad%zz", "/queue/v1"] {
            assert_eq!(reply_to_from_address(address.to_string()), address);
            assert_eq!(reply_to_address(address), address);
        }
    }

    #[test]
    fn a_message_without_a_body_is_refused() {
        let header_only = serde_amqp::to_vec(&Header::default()).unwrap();
        assert!(decode_message(Bytes::from(header_only)).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_payloads_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_message(Bytes::from(bytes));
        }

        #[test]
        fn data_sections_of_any_content_round_trip(body in proptest::collection::vec(any::<u8>(), 0..600)) {
            let message = AmqpMessage::builder().data(Data(Binary::from(body.clone()))).build();
            let incoming = decode_message(encode(message)).unwrap();
            prop_assert_eq!(&incoming.message.body[..], &body[..]);
        }
    }
}
