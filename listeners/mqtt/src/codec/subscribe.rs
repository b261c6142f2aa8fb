//! SUBSCRIBE (section 3.8), SUBACK (3.9), UNSUBSCRIBE (3.10). UNSUBACK carries only a
//! packet identifier and is handled in `frame.rs`.
//!
//! Topic filters are checked to be valid strings here, but their wildcard syntax is left to
//! the session ([`validate_topic_filter`](super::validate_topic_filter)), which may answer a
//! bad filter with SUBACK 0x80 instead of closing the connection.

use std::borrow::Cow;

use bytes::{BufMut, BytesMut};

use super::error::{DecodeError, EncodeError};
use super::packet::{QoS, SubAck, Subscribe, SubscribeReturnCode, Unsubscribe};
use super::wire::{field_size, write_field, Reader};

/// Parses a SUBSCRIBE body.
pub(crate) fn decode_subscribe(reader: &mut Reader) -> Result<Subscribe, DecodeError> {
    let packet_id = reader.packet_id()?;
    let mut filters = Vec::new();
    while reader.remaining() > 0 {
        let filter = reader.string("topic filter")?;
        let requested = reader.u8("requested QoS")?;
        // 3.8.3.1: the upper six bits are reserved and QoS 3 does not exist.
        if requested & 0b1111_1100 != 0 {
            return Err(DecodeError::Malformed(Cow::Owned(format!(
                "SUBSCRIBE requested QoS byte {requested:#04x} has reserved bits set \
                 (MQTT-3.8.3-4)"
            ))));
        }
        let Some(qos) = QoS::from_u8(requested) else {
            return Err(DecodeError::malformed(
                "SUBSCRIBE requested QoS is 3, which is reserved (MQTT-3.8.3-4)",
            ));
        };
        filters.push((filter, qos));
    }
    if filters.is_empty() {
        return Err(DecodeError::malformed(
            "SUBSCRIBE has no topic filters, a protocol violation (MQTT-3.8.3-3)",
        ));
    }
    Ok(Subscribe { packet_id, filters })
}

/// Parses a SUBACK body.
pub(crate) fn decode_suback(reader: &mut Reader) -> Result<SubAck, DecodeError> {
    let packet_id = reader.packet_id()?;
    let mut return_codes = Vec::with_capacity(reader.remaining());
    while reader.remaining() > 0 {
        let code = reader.u8("return code")?;
        let Some(code) = SubscribeReturnCode::from_u8(code) else {
            return Err(DecodeError::Malformed(Cow::Owned(format!(
                "SUBACK return code {code:#04x} is reserved (MQTT-3.9.3-2)"
            ))));
        };
        return_codes.push(code);
    }
    // One code per filter (MQTT-3.9.3-1), and a SUBSCRIBE has at least one filter.
    if return_codes.is_empty() {
        return Err(DecodeError::malformed(
            "SUBACK has no return codes (MQTT-3.9.3-1)",
        ));
    }
    Ok(SubAck {
        packet_id,
        return_codes,
    })
}

/// Parses an UNSUBSCRIBE body.
pub(crate) fn decode_unsubscribe(reader: &mut Reader) -> Result<Unsubscribe, DecodeError> {
    let packet_id = reader.packet_id()?;
    let mut topics = Vec::new();
    while reader.remaining() > 0 {
        topics.push(reader.string("topic filter")?);
    }
    if topics.is_empty() {
        return Err(DecodeError::malformed(
            "UNSUBSCRIBE has no topic filters, a protocol violation (MQTT-3.10.3-2)",
        ));
    }
    Ok(Unsubscribe { packet_id, topics })
}

fn check_packet_id(packet_id: u16) -> Result<(), EncodeError> {
    if packet_id == 0 {
        Err(EncodeError::Invalid("packet identifier 0 (MQTT-2.3.1-1)"))
    } else {
        Ok(())
    }
}

/// The size of a SUBSCRIBE body, validating what a sender must get right.
pub(crate) fn subscribe_body_len(subscribe: &Subscribe) -> Result<usize, EncodeError> {
    check_packet_id(subscribe.packet_id)?;
    if subscribe.filters.is_empty() {
        return Err(EncodeError::Invalid(
            "SUBSCRIBE without topic filters (MQTT-3.8.3-3)",
        ));
    }
    let mut len = 2;
    for (filter, _) in &subscribe.filters {
        len += field_size("topic filter", filter.as_bytes())? + 1;
    }
    Ok(len)
}

/// Writes a SUBSCRIBE body checked by [`subscribe_body_len`].
pub(crate) fn write_subscribe_body(subscribe: &Subscribe, out: &mut BytesMut) {
    out.put_u16(subscribe.packet_id);
    for (filter, qos) in &subscribe.filters {
        write_field(out, filter.as_bytes());
        out.put_u8(qos.as_u8());
    }
}

/// The size of a SUBACK body, validating what a sender must get right.
pub(crate) fn suback_body_len(suback: &SubAck) -> Result<usize, EncodeError> {
    check_packet_id(suback.packet_id)?;
    if suback.return_codes.is_empty() {
        return Err(EncodeError::Invalid(
            "SUBACK without return codes (MQTT-3.9.3-1)",
        ));
    }
    Ok(2 + suback.return_codes.len())
}

/// Writes a SUBACK body checked by [`suback_body_len`].
pub(crate) fn write_suback_body(suback: &SubAck, out: &mut BytesMut) {
    out.put_u16(suback.packet_id);
    for code in &suback.return_codes {
        out.put_u8(code.as_u8());
    }
}

/// The size of an UNSUBSCRIBE body, validating what a sender must get right.
pub(crate) fn unsubscribe_body_len(unsubscribe: &Unsubscribe) -> Result<usize, EncodeError> {
    check_packet_id(unsubscribe.packet_id)?;
    if unsubscribe.topics.is_empty() {
        return Err(EncodeError::Invalid(
            "UNSUBSCRIBE without topic filters (MQTT-3.10.3-2)",
        ));
    }
    let mut len = 2;
    for topic in &unsubscribe.topics {
        len += field_size("topic filter", topic.as_bytes())?;
    }
    Ok(len)
}

/// Writes an UNSUBSCRIBE body checked by [`unsubscribe_body_len`].
pub(crate) fn write_unsubscribe_body(unsubscribe: &Unsubscribe, out: &mut BytesMut) {
    out.put_u16(unsubscribe.packet_id);
    for topic in &unsubscribe.topics {
        write_field(out, topic.as_bytes());
    }
}
