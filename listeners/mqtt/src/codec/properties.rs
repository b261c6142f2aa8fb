//! MQTT 5 properties (section 2.2.2 of MQTT 5.0): a variable byte integer length, then
//! identifier-value pairs. One [`Properties`] type serves every packet; which identifiers a
//! packet may carry is checked on decode against [`PropertyContext`].
//!
//! Decoding is strict, with the reason code the spec names: an identifier that is unknown
//! or not allowed in the packet, or a list longer than its packet, is a malformed packet
//! (0x81); a property given twice (other than user properties, and subscription
//! identifiers in PUBLISH) or a value out of range is a protocol error (0x82); topic alias 0
//! is "topic alias invalid" (0x94).

use std::borrow::Cow;

use bytes::{BufMut, Bytes, BytesMut};

use super::error::{DecodeError, EncodeError};
use super::reason;
use super::wire::{
    field_size, remaining_length_size, write_field, write_variable_integer, Reader,
    MAX_REMAINING_LENGTH,
};

/// The properties of one MQTT 5 packet. Every field is optional; `Default` is an empty
/// list. Which ones a packet may carry is in the comment of each (section 2.2.2.2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Properties {
    /// 0x01, PUBLISH and will: 1 when the payload is UTF-8 text.
    pub payload_format_indicator: Option<u8>,
    /// 0x02, PUBLISH and will: seconds until the message expires.
    pub message_expiry_interval: Option<u32>,
    /// 0x03, PUBLISH and will: the payload's MIME type.
    pub content_type: Option<String>,
    /// 0x08, PUBLISH and will: the topic to answer on.
    pub response_topic: Option<String>,
    /// 0x09, PUBLISH and will: what the answer should carry to match the request.
    pub correlation_data: Option<Bytes>,
    /// 0x0B, PUBLISH (any number, to the client) and SUBSCRIBE (one): 1..=268435455.
    pub subscription_identifiers: Vec<u32>,
    /// 0x11, CONNECT, CONNACK, DISCONNECT: seconds the session outlives the connection.
    pub session_expiry_interval: Option<u32>,
    /// 0x12, CONNACK: the client identifier the server made up for an empty one.
    pub assigned_client_identifier: Option<String>,
    /// 0x13, CONNACK: the keep-alive the server wants instead of the client's.
    pub server_keep_alive: Option<u16>,
    /// 0x15, CONNECT, CONNACK, AUTH: the enhanced authentication method.
    pub authentication_method: Option<String>,
    /// 0x16, CONNECT, CONNACK, AUTH.
    pub authentication_data: Option<Bytes>,
    /// 0x17, CONNECT: 0 or 1.
    pub request_problem_information: Option<u8>,
    /// 0x18, will: seconds to wait before publishing the will.
    pub will_delay_interval: Option<u32>,
    /// 0x19, CONNECT: 0 or 1.
    pub request_response_information: Option<u8>,
    /// 0x1A, CONNACK.
    pub response_information: Option<String>,
    /// 0x1C, CONNACK, DISCONNECT.
    pub server_reference: Option<String>,
    /// 0x1F, CONNACK, the acknowledgements, DISCONNECT, AUTH: text for a human.
    pub reason_string: Option<String>,
    /// 0x21, CONNECT, CONNACK: most unacknowledged QoS 1/2 publishes the sender accepts.
    pub receive_maximum: Option<u16>,
    /// 0x22, CONNECT, CONNACK: the highest topic alias the sender accepts.
    pub topic_alias_maximum: Option<u16>,
    /// 0x23, PUBLISH: 1..=the receiver's topic alias maximum.
    pub topic_alias: Option<u16>,
    /// 0x24, CONNACK: 0 or 1.
    pub maximum_qos: Option<u8>,
    /// 0x25, CONNACK: 0 or 1.
    pub retain_available: Option<u8>,
    /// 0x26, every packet: name-value pairs, in order, repeats allowed.
    pub user_properties: Vec<(String, String)>,
    /// 0x27, CONNECT, CONNACK: the largest packet the sender accepts, in bytes.
    pub maximum_packet_size: Option<u32>,
    /// 0x28, CONNACK: 0 or 1.
    pub wildcard_subscription_available: Option<u8>,
    /// 0x29, CONNACK: 0 or 1.
    pub subscription_identifier_available: Option<u8>,
    /// 0x2A, CONNACK: 0 or 1.
    pub shared_subscription_available: Option<u8>,
}

/// Where a property list sits: decides which identifiers are allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropertyContext {
    /// CONNECT's own properties.
    Connect,
    /// The will properties in CONNECT's payload.
    Will,
    /// CONNACK.
    ConnAck,
    /// PUBLISH.
    Publish,
    /// PUBACK, PUBREC, PUBREL, PUBCOMP.
    Acknowledgement,
    /// SUBSCRIBE.
    Subscribe,
    /// SUBACK and UNSUBACK.
    SubscriptionAcknowledgement,
    /// UNSUBSCRIBE.
    Unsubscribe,
    /// DISCONNECT.
    Disconnect,
    /// AUTH.
    Auth,
}

const PAYLOAD_FORMAT_INDICATOR: u8 = 0x01;
const MESSAGE_EXPIRY_INTERVAL: u8 = 0x02;
const CONTENT_TYPE: u8 = 0x03;
const RESPONSE_TOPIC: u8 = 0x08;
const CORRELATION_DATA: u8 = 0x09;
const SUBSCRIPTION_IDENTIFIER: u8 = 0x0B;
const SESSION_EXPIRY_INTERVAL: u8 = 0x11;
const ASSIGNED_CLIENT_IDENTIFIER: u8 = 0x12;
const SERVER_KEEP_ALIVE: u8 = 0x13;
const AUTHENTICATION_METHOD: u8 = 0x15;
const AUTHENTICATION_DATA: u8 = 0x16;
const REQUEST_PROBLEM_INFORMATION: u8 = 0x17;
const WILL_DELAY_INTERVAL: u8 = 0x18;
const REQUEST_RESPONSE_INFORMATION: u8 = 0x19;
const RESPONSE_INFORMATION: u8 = 0x1A;
const SERVER_REFERENCE: u8 = 0x1C;
const REASON_STRING: u8 = 0x1F;
const RECEIVE_MAXIMUM: u8 = 0x21;
const TOPIC_ALIAS_MAXIMUM: u8 = 0x22;
const TOPIC_ALIAS: u8 = 0x23;
const MAXIMUM_QOS: u8 = 0x24;
const RETAIN_AVAILABLE: u8 = 0x25;
const USER_PROPERTY: u8 = 0x26;
const MAXIMUM_PACKET_SIZE: u8 = 0x27;
const WILDCARD_SUBSCRIPTION_AVAILABLE: u8 = 0x28;
const SUBSCRIPTION_IDENTIFIER_AVAILABLE: u8 = 0x29;
const SHARED_SUBSCRIPTION_AVAILABLE: u8 = 0x2A;

const fn bits(ids: &[u8]) -> u64 {
    let mut mask = 0u64;
    let mut index = 0;
    while index < ids.len() {
        mask |= 1 << ids[index];
        index += 1;
    }
    mask
}

impl PropertyContext {
    /// The identifiers allowed here, as a bit set (section 2.2.2.2, table 2-4).
    const fn allowed(self) -> u64 {
        match self {
            PropertyContext::Connect => bits(&[
                SESSION_EXPIRY_INTERVAL,
                AUTHENTICATION_METHOD,
                AUTHENTICATION_DATA,
                REQUEST_PROBLEM_INFORMATION,
                REQUEST_RESPONSE_INFORMATION,
                RECEIVE_MAXIMUM,
                TOPIC_ALIAS_MAXIMUM,
                USER_PROPERTY,
                MAXIMUM_PACKET_SIZE,
            ]),
            PropertyContext::Will => bits(&[
                PAYLOAD_FORMAT_INDICATOR,
                MESSAGE_EXPIRY_INTERVAL,
                CONTENT_TYPE,
                RESPONSE_TOPIC,
                CORRELATION_DATA,
                WILL_DELAY_INTERVAL,
                USER_PROPERTY,
            ]),
            PropertyContext::ConnAck => bits(&[
                SESSION_EXPIRY_INTERVAL,
                ASSIGNED_CLIENT_IDENTIFIER,
                SERVER_KEEP_ALIVE,
                AUTHENTICATION_METHOD,
                AUTHENTICATION_DATA,
                RESPONSE_INFORMATION,
                SERVER_REFERENCE,
                REASON_STRING,
                RECEIVE_MAXIMUM,
                TOPIC_ALIAS_MAXIMUM,
                MAXIMUM_QOS,
                RETAIN_AVAILABLE,
                USER_PROPERTY,
                MAXIMUM_PACKET_SIZE,
                WILDCARD_SUBSCRIPTION_AVAILABLE,
                SUBSCRIPTION_IDENTIFIER_AVAILABLE,
                SHARED_SUBSCRIPTION_AVAILABLE,
            ]),
            PropertyContext::Publish => bits(&[
                PAYLOAD_FORMAT_INDICATOR,
                MESSAGE_EXPIRY_INTERVAL,
                CONTENT_TYPE,
                RESPONSE_TOPIC,
                CORRELATION_DATA,
                SUBSCRIPTION_IDENTIFIER,
                TOPIC_ALIAS,
                USER_PROPERTY,
            ]),
            PropertyContext::Acknowledgement
            | PropertyContext::SubscriptionAcknowledgement
            | PropertyContext::Unsubscribe => bits(&[REASON_STRING, USER_PROPERTY]),
            PropertyContext::Subscribe => bits(&[SUBSCRIPTION_IDENTIFIER, USER_PROPERTY]),
            PropertyContext::Disconnect => bits(&[
                SESSION_EXPIRY_INTERVAL,
                SERVER_REFERENCE,
                REASON_STRING,
                USER_PROPERTY,
            ]),
            PropertyContext::Auth => bits(&[
                AUTHENTICATION_METHOD,
                AUTHENTICATION_DATA,
                REASON_STRING,
                USER_PROPERTY,
            ]),
        }
    }

    fn name(self) -> &'static str {
        match self {
            PropertyContext::Connect => "CONNECT",
            PropertyContext::Will => "will",
            PropertyContext::ConnAck => "CONNACK",
            PropertyContext::Publish => "PUBLISH",
            PropertyContext::Acknowledgement => "acknowledgement",
            PropertyContext::Subscribe => "SUBSCRIBE",
            PropertyContext::SubscriptionAcknowledgement => "SUBACK/UNSUBACK",
            PropertyContext::Unsubscribe => "UNSUBSCRIBE",
            PropertyContext::Disconnect => "DISCONNECT",
            PropertyContext::Auth => "AUTH",
        }
    }
}

fn protocol_error(message: String) -> DecodeError {
    DecodeError::Protocol {
        code: reason::PROTOCOL_ERROR,
        message: Cow::Owned(message),
    }
}

/// Sets a property that may appear once; a second one is a protocol error.
fn once<T>(slot: &mut Option<T>, value: T, name: &str) -> Result<(), DecodeError> {
    if slot.is_some() {
        return Err(protocol_error(format!(
            "property {name} appears more than once (section 2.2.2.2)"
        )));
    }
    *slot = Some(value);
    Ok(())
}

/// A byte property that must be 0 or 1.
fn flag(reader: &mut Reader, name: &'static str) -> Result<u8, DecodeError> {
    let value = reader.u8(name)?;
    if value > 1 {
        return Err(protocol_error(format!(
            "property {name} is {value}, must be 0 or 1"
        )));
    }
    Ok(value)
}

/// Reads a property list (its length, then the properties). `None` for an empty list, so a
/// packet without properties allocates nothing.
pub(crate) fn decode_properties(
    reader: &mut Reader,
    context: PropertyContext,
) -> Result<Option<Box<Properties>>, DecodeError> {
    let len = reader.variable_integer("property length")? as usize;
    if len == 0 {
        return Ok(None);
    }
    let mut list = reader.sub_reader(len, "properties")?;
    let mut properties = Properties::default();
    let allowed = context.allowed();
    while list.remaining() > 0 {
        let id = list.variable_integer("property identifier")?;
        if id >= 64 || allowed & (1 << id) == 0 {
            return Err(DecodeError::Malformed(Cow::Owned(format!(
                "property identifier {id:#04x} is not valid in {} properties (section 2.2.2.2)",
                context.name()
            ))));
        }
        let p = &mut properties;
        match id as u8 {
            PAYLOAD_FORMAT_INDICATOR => {
                let value = flag(&mut list, "payload format indicator")?;
                once(
                    &mut p.payload_format_indicator,
                    value,
                    "payload format indicator",
                )?;
            }
            MESSAGE_EXPIRY_INTERVAL => {
                let value = list.u32("message expiry interval")?;
                once(
                    &mut p.message_expiry_interval,
                    value,
                    "message expiry interval",
                )?;
            }
            CONTENT_TYPE => {
                let value = list.string("content type")?;
                once(&mut p.content_type, value, "content type")?;
            }
            RESPONSE_TOPIC => {
                let value = list.string("response topic")?;
                // MQTT-3.3.2-14: a topic name, so no wildcards.
                if value.is_empty() || value.contains(['+', '#']) {
                    return Err(protocol_error(format!(
                        "response topic {value:?} is not a valid topic name (MQTT-3.3.2-14)"
                    )));
                }
                once(&mut p.response_topic, value, "response topic")?;
            }
            CORRELATION_DATA => {
                let value = list.binary("correlation data")?;
                once(&mut p.correlation_data, value, "correlation data")?;
            }
            SUBSCRIPTION_IDENTIFIER => {
                let value = list.variable_integer("subscription identifier")?;
                if value == 0 {
                    return Err(protocol_error(
                        "subscription identifier 0 (MQTT-3.8.2.1.2)".to_string(),
                    ));
                }
                if context == PropertyContext::Subscribe && !p.subscription_identifiers.is_empty() {
                    return Err(protocol_error(
                        "SUBSCRIBE has more than one subscription identifier".to_string(),
                    ));
                }
                p.subscription_identifiers.push(value);
            }
            SESSION_EXPIRY_INTERVAL => {
                let value = list.u32("session expiry interval")?;
                once(
                    &mut p.session_expiry_interval,
                    value,
                    "session expiry interval",
                )?;
            }
            ASSIGNED_CLIENT_IDENTIFIER => {
                let value = list.string("assigned client identifier")?;
                once(
                    &mut p.assigned_client_identifier,
                    value,
                    "assigned client identifier",
                )?;
            }
            SERVER_KEEP_ALIVE => {
                let value = list.u16("server keep alive")?;
                once(&mut p.server_keep_alive, value, "server keep alive")?;
            }
            AUTHENTICATION_METHOD => {
                let value = list.string("authentication method")?;
                once(&mut p.authentication_method, value, "authentication method")?;
            }
            AUTHENTICATION_DATA => {
                let value = list.binary("authentication data")?;
                once(&mut p.authentication_data, value, "authentication data")?;
            }
            REQUEST_PROBLEM_INFORMATION => {
                let value = flag(&mut list, "request problem information")?;
                once(
                    &mut p.request_problem_information,
                    value,
                    "request problem information",
                )?;
            }
            WILL_DELAY_INTERVAL => {
                let value = list.u32("will delay interval")?;
                once(&mut p.will_delay_interval, value, "will delay interval")?;
            }
            REQUEST_RESPONSE_INFORMATION => {
                let value = flag(&mut list, "request response information")?;
                once(
                    &mut p.request_response_information,
                    value,
                    "request response information",
                )?;
            }
            RESPONSE_INFORMATION => {
                let value = list.string("response information")?;
                once(&mut p.response_information, value, "response information")?;
            }
            SERVER_REFERENCE => {
                let value = list.string("server reference")?;
                once(&mut p.server_reference, value, "server reference")?;
            }
            REASON_STRING => {
                let value = list.string("reason string")?;
                once(&mut p.reason_string, value, "reason string")?;
            }
            RECEIVE_MAXIMUM => {
                let value = list.u16("receive maximum")?;
                if value == 0 {
                    return Err(protocol_error(
                        "receive maximum 0 (section 3.1.2.11.3)".into(),
                    ));
                }
                once(&mut p.receive_maximum, value, "receive maximum")?;
            }
            TOPIC_ALIAS_MAXIMUM => {
                let value = list.u16("topic alias maximum")?;
                once(&mut p.topic_alias_maximum, value, "topic alias maximum")?;
            }
            TOPIC_ALIAS => {
                let value = list.u16("topic alias")?;
                if value == 0 {
                    return Err(DecodeError::Protocol {
                        code: reason::TOPIC_ALIAS_INVALID,
                        message: Cow::Borrowed("topic alias 0 (MQTT-3.3.2-8)"),
                    });
                }
                once(&mut p.topic_alias, value, "topic alias")?;
            }
            MAXIMUM_QOS => {
                let value = flag(&mut list, "maximum QoS")?;
                once(&mut p.maximum_qos, value, "maximum QoS")?;
            }
            RETAIN_AVAILABLE => {
                let value = flag(&mut list, "retain available")?;
                once(&mut p.retain_available, value, "retain available")?;
            }
            USER_PROPERTY => {
                let name = list.string("user property name")?;
                let value = list.string("user property value")?;
                p.user_properties.push((name, value));
            }
            MAXIMUM_PACKET_SIZE => {
                let value = list.u32("maximum packet size")?;
                if value == 0 {
                    return Err(protocol_error(
                        "maximum packet size 0 (section 3.1.2.11.4)".into(),
                    ));
                }
                once(&mut p.maximum_packet_size, value, "maximum packet size")?;
            }
            WILDCARD_SUBSCRIPTION_AVAILABLE => {
                let value = flag(&mut list, "wildcard subscription available")?;
                once(
                    &mut p.wildcard_subscription_available,
                    value,
                    "wildcard subscription available",
                )?;
            }
            SUBSCRIPTION_IDENTIFIER_AVAILABLE => {
                let value = flag(&mut list, "subscription identifier available")?;
                once(
                    &mut p.subscription_identifier_available,
                    value,
                    "subscription identifier available",
                )?;
            }
            SHARED_SUBSCRIPTION_AVAILABLE => {
                let value = flag(&mut list, "shared subscription available")?;
                once(
                    &mut p.shared_subscription_available,
                    value,
                    "shared subscription available",
                )?;
            }
            _ => unreachable_property(id)?,
        }
    }
    Ok(Some(Box::new(properties)))
}

/// The allowed-set check lets only known identifiers through; this keeps the match total
/// without a panic.
fn unreachable_property(id: u32) -> Result<(), DecodeError> {
    Err(DecodeError::Malformed(Cow::Owned(format!(
        "property identifier {id:#04x} is unknown"
    ))))
}

/// The encoded size of a property list's properties (without its length prefix).
fn body_len(properties: &Properties) -> Result<usize, EncodeError> {
    let p = properties;
    let mut len = 0;
    let byte = |v: &Option<u8>| if v.is_some() { 2 } else { 0 };
    let short = |v: &Option<u16>| if v.is_some() { 3 } else { 0 };
    let long = |v: &Option<u32>| if v.is_some() { 5 } else { 0 };
    let text = |name: &'static str, v: Option<&[u8]>| -> Result<usize, EncodeError> {
        match v {
            Some(v) => Ok(1 + field_size(name, v)?),
            None => Ok(0),
        }
    };
    len += byte(&p.payload_format_indicator)
        + long(&p.message_expiry_interval)
        + text("content type", p.content_type.as_deref().map(str::as_bytes))?
        + text(
            "response topic",
            p.response_topic.as_deref().map(str::as_bytes),
        )?
        + text("correlation data", p.correlation_data.as_deref())?;
    for id in &p.subscription_identifiers {
        len += 1 + remaining_length_size(*id as usize);
    }
    len += long(&p.session_expiry_interval)
        + text(
            "assigned client identifier",
            p.assigned_client_identifier.as_deref().map(str::as_bytes),
        )?
        + short(&p.server_keep_alive)
        + text(
            "authentication method",
            p.authentication_method.as_deref().map(str::as_bytes),
        )?
        + text("authentication data", p.authentication_data.as_deref())?
        + byte(&p.request_problem_information)
        + long(&p.will_delay_interval)
        + byte(&p.request_response_information)
        + text(
            "response information",
            p.response_information.as_deref().map(str::as_bytes),
        )?
        + text(
            "server reference",
            p.server_reference.as_deref().map(str::as_bytes),
        )?
        + text(
            "reason string",
            p.reason_string.as_deref().map(str::as_bytes),
        )?
        + short(&p.receive_maximum)
        + short(&p.topic_alias_maximum)
        + short(&p.topic_alias)
        + byte(&p.maximum_qos)
        + byte(&p.retain_available);
    for (name, value) in &p.user_properties {
        len += 1
            + field_size("user property", name.as_bytes())?
            + field_size("user property", value.as_bytes())?;
    }
    len += long(&p.maximum_packet_size)
        + byte(&p.wildcard_subscription_available)
        + byte(&p.subscription_identifier_available)
        + byte(&p.shared_subscription_available);
    if len > MAX_REMAINING_LENGTH {
        return Err(EncodeError::TooLarge { size: len });
    }
    Ok(len)
}

/// The encoded size of a property list, its length prefix included; checks every field.
pub(crate) fn properties_size(properties: Option<&Properties>) -> Result<usize, EncodeError> {
    let len = match properties {
        Some(properties) => body_len(properties)?,
        None => 0,
    };
    Ok(remaining_length_size(len) + len)
}

/// Writes a property list checked by [`properties_size`].
pub(crate) fn write_properties(out: &mut BytesMut, properties: Option<&Properties>) {
    let Some(p) = properties else {
        out.put_u8(0);
        return;
    };
    let len = body_len(p).unwrap_or(0);
    write_variable_integer(out, len as u32);
    let byte = |out: &mut BytesMut, id: u8, v: Option<u8>| {
        if let Some(v) = v {
            out.put_u8(id);
            out.put_u8(v);
        }
    };
    let short = |out: &mut BytesMut, id: u8, v: Option<u16>| {
        if let Some(v) = v {
            out.put_u8(id);
            out.put_u16(v);
        }
    };
    let long = |out: &mut BytesMut, id: u8, v: Option<u32>| {
        if let Some(v) = v {
            out.put_u8(id);
            out.put_u32(v);
        }
    };
    let text = |out: &mut BytesMut, id: u8, v: Option<&[u8]>| {
        if let Some(v) = v {
            out.put_u8(id);
            write_field(out, v);
        }
    };
    byte(out, PAYLOAD_FORMAT_INDICATOR, p.payload_format_indicator);
    long(out, MESSAGE_EXPIRY_INTERVAL, p.message_expiry_interval);
    text(
        out,
        CONTENT_TYPE,
        p.content_type.as_deref().map(str::as_bytes),
    );
    text(
        out,
        RESPONSE_TOPIC,
        p.response_topic.as_deref().map(str::as_bytes),
    );
    text(out, CORRELATION_DATA, p.correlation_data.as_deref());
    for id in &p.subscription_identifiers {
        out.put_u8(SUBSCRIPTION_IDENTIFIER);
        write_variable_integer(out, *id);
    }
    long(out, SESSION_EXPIRY_INTERVAL, p.session_expiry_interval);
    text(
        out,
        ASSIGNED_CLIENT_IDENTIFIER,
        p.assigned_client_identifier.as_deref().map(str::as_bytes),
    );
    short(out, SERVER_KEEP_ALIVE, p.server_keep_alive);
    text(
        out,
        AUTHENTICATION_METHOD,
        p.authentication_method.as_deref().map(str::as_bytes),
    );
    text(out, AUTHENTICATION_DATA, p.authentication_data.as_deref());
    byte(
        out,
        REQUEST_PROBLEM_INFORMATION,
        p.request_problem_information,
    );
    long(out, WILL_DELAY_INTERVAL, p.will_delay_interval);
    byte(
        out,
        REQUEST_RESPONSE_INFORMATION,
        p.request_response_information,
    );
    text(
        out,
        RESPONSE_INFORMATION,
        p.response_information.as_deref().map(str::as_bytes),
    );
    text(
        out,
        SERVER_REFERENCE,
        p.server_reference.as_deref().map(str::as_bytes),
    );
    text(
        out,
        REASON_STRING,
        p.reason_string.as_deref().map(str::as_bytes),
    );
    short(out, RECEIVE_MAXIMUM, p.receive_maximum);
    short(out, TOPIC_ALIAS_MAXIMUM, p.topic_alias_maximum);
    short(out, TOPIC_ALIAS, p.topic_alias);
    byte(out, MAXIMUM_QOS, p.maximum_qos);
    byte(out, RETAIN_AVAILABLE, p.retain_available);
    for (name, value) in &p.user_properties {
        out.put_u8(USER_PROPERTY);
        write_field(out, name.as_bytes());
        write_field(out, value.as_bytes());
    }
    long(out, MAXIMUM_PACKET_SIZE, p.maximum_packet_size);
    byte(
        out,
        WILDCARD_SUBSCRIPTION_AVAILABLE,
        p.wildcard_subscription_available,
    );
    byte(
        out,
        SUBSCRIPTION_IDENTIFIER_AVAILABLE,
        p.subscription_identifier_available,
    );
    byte(
        out,
        SHARED_SUBSCRIPTION_AVAILABLE,
        p.shared_subscription_available,
    );
}
