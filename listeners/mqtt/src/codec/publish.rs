//! PUBLISH (section 3.3). Its acknowledgments (PUBACK, PUBREC, PUBREL, PUBCOMP) carry only
//! a packet identifier and are handled in `frame.rs`.
//!
//! PUBLISH is the hot path both ways: decoding shares the payload with the read buffer, and
//! [`encode_publish`] writes a delivery straight from borrowed parts, without building a
//! [`Publish`](super::Publish) first.

use std::borrow::Cow;

use bytes::{BufMut, BytesMut};

use super::error::{DecodeError, EncodeError};
use super::packet::{PacketType, Properties, Publish, QoS};
use super::properties::{decode_properties, properties_size, write_properties, PropertyContext};
use super::topic::validate_topic_name;
use super::wire::{field_size, write_field, Reader};

const FLAG_DUP: u8 = 0b1000;
const FLAG_RETAIN: u8 = 0b0001;

/// Parses a PUBLISH body; `flags` are the fixed header's, whose QoS is already known not
/// to be 3. In MQTT 5 (`v5`) properties follow the packet identifier, and the topic may be
/// empty when they carry a topic alias (section 3.3.2.3.4 of MQTT 5).
pub(crate) fn decode_publish(
    flags: u8,
    mut reader: Reader,
    v5: bool,
) -> Result<Publish, DecodeError> {
    let qos = QoS::from_u8((flags >> 1) & 0b11).ok_or(DecodeError::malformed(
        "PUBLISH QoS is 3, which is reserved (MQTT-3.3.1-4)",
    ))?;
    let topic = reader.string("topic name")?;
    if !v5 {
        check_topic(&topic, false)?;
    }
    let packet_id = if qos == QoS::AtMostOnce {
        None
    } else {
        Some(reader.packet_id()?)
    };
    let properties = if v5 {
        decode_properties(&mut reader, PropertyContext::Publish)?
    } else {
        None
    };
    let aliased = properties
        .as_deref()
        .is_some_and(|p| p.topic_alias.is_some());
    if v5 && !(aliased && topic.is_empty()) {
        check_topic(&topic, true)?;
    }
    Ok(Publish {
        // MQTT-3.3.1-2 says a sender must not set DUP on QoS 0, but gives the receiver no
        // duty to refuse it; like Mosquitto and RabbitMQ we accept it as sent.
        dup: flags & FLAG_DUP != 0,
        qos,
        retain: flags & FLAG_RETAIN != 0,
        topic,
        packet_id,
        payload: reader.rest(),
        properties,
    })
}

/// A topic name must be non-empty (MQTT-4.7.3-1), unless an MQTT 5 topic alias stands in
/// for it, and free of wildcards (MQTT-3.3.2-2). A PUBLISH cannot be refused with a reply in
/// 3.1.1, so the only answer is to close, and the codec can decide that as well as the
/// session; MQTT 5 names the reason, 0x90 topic name invalid.
fn check_topic(topic: &str, v5: bool) -> Result<(), DecodeError> {
    let Err(problem) = validate_topic_name(topic) else {
        return Ok(());
    };
    let message = Cow::Owned(format!("PUBLISH topic name {topic:?}: {problem}"));
    Err(if v5 {
        DecodeError::Protocol {
            code: super::reason::TOPIC_NAME_INVALID,
            message,
        }
    } else {
        DecodeError::Malformed(message)
    })
}

/// Appends a PUBLISH packet to `out`: the delivery hot path, with no intermediate
/// [`Publish`](super::Publish) value.
///
/// `packet_id` must be `Some` non-zero exactly when `qos` is above 0 (MQTT-2.3.1-1,
/// MQTT-2.3.1-5), and `dup` must be false for QoS 0 (MQTT-3.3.1-2). The topic is written as
/// given: it is not checked for wildcards, because the session produces delivery topics
/// from routing keys and decides what to do with odd ones. Nothing is written on error.
pub fn encode_publish(
    out: &mut BytesMut,
    topic: &str,
    qos: QoS,
    packet_id: Option<u16>,
    retain: bool,
    dup: bool,
    payload: &[u8],
) -> Result<(), EncodeError> {
    write_publish(out, topic, qos, packet_id, (retain, dup), payload, None)
}

/// [`encode_publish`] for an MQTT 5 connection: the same, with a property list (which may
/// be empty) after the packet identifier. `flags` are RETAIN and DUP. The topic may be
/// empty when `properties` carry a topic alias the client knows.
pub fn encode_publish_v5(
    out: &mut BytesMut,
    topic: &str,
    qos: QoS,
    packet_id: Option<u16>,
    flags: (bool, bool),
    payload: &[u8],
    properties: Option<&Properties>,
) -> Result<(), EncodeError> {
    write_publish(out, topic, qos, packet_id, flags, payload, Some(properties))
}

/// The size of a PUBLISH packet as [`encode_publish_v5`] would write it, fixed header
/// included: checked against a client's maximum packet size before it is written.
pub fn publish_v5_size(
    topic: &str,
    qos: QoS,
    payload_len: usize,
    properties: Option<&Properties>,
) -> Result<usize, EncodeError> {
    let id_len = if qos == QoS::AtMostOnce { 0 } else { 2 };
    let len = field_size("topic name", topic.as_bytes())?
        + id_len
        + properties_size(properties)?
        + payload_len;
    Ok(1 + super::wire::remaining_length_size(len) + len)
}

/// Writes a PUBLISH; `properties` is `Some` for MQTT 5 (the inner `None`: an empty list).
fn write_publish(
    out: &mut BytesMut,
    topic: &str,
    qos: QoS,
    packet_id: Option<u16>,
    (retain, dup): (bool, bool),
    payload: &[u8],
    properties: Option<Option<&Properties>>,
) -> Result<(), EncodeError> {
    let id_len = match (qos, packet_id) {
        (QoS::AtMostOnce, None) => 0,
        (QoS::AtMostOnce, Some(_)) => {
            return Err(EncodeError::Invalid(
                "QoS 0 PUBLISH with a packet identifier (MQTT-2.3.1-5)",
            ))
        }
        (_, None) => {
            return Err(EncodeError::Invalid(
                "QoS 1 or 2 PUBLISH without a packet identifier (MQTT-2.3.1-1)",
            ))
        }
        (_, Some(0)) => return Err(EncodeError::Invalid("packet identifier 0 (MQTT-2.3.1-1)")),
        (_, Some(_)) => 2,
    };
    if dup && qos == QoS::AtMostOnce {
        return Err(EncodeError::Invalid(
            "DUP set on a QoS 0 PUBLISH (MQTT-3.3.1-2)",
        ));
    }
    let properties_len = match properties {
        Some(properties) => properties_size(properties)?,
        None => 0,
    };
    let len = field_size("topic name", topic.as_bytes())? + id_len + properties_len + payload.len();
    let mut flags = qos.as_u8() << 1;
    if dup {
        flags |= FLAG_DUP;
    }
    if retain {
        flags |= FLAG_RETAIN;
    }
    super::frame::write_fixed_header(out, PacketType::Publish, flags, len)?;
    write_field(out, topic.as_bytes());
    if let Some(id) = packet_id {
        out.put_u16(id);
    }
    if let Some(properties) = properties {
        write_properties(out, properties);
    }
    out.put_slice(payload);
    Ok(())
}
