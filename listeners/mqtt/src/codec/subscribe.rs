//! SUBSCRIBE (section 3.8), SUBACK (3.9), UNSUBSCRIBE (3.10), UNSUBACK (3.11). A 3.1.1
//! UNSUBACK carries only a packet identifier and is written in `frame.rs`.
//!
//! Topic filters are checked to be valid strings here, but their wildcard syntax is left to
//! the session ([`validate_topic_filter`](super::validate_topic_filter)), which may answer a
//! bad filter with SUBACK 0x80 instead of closing the connection.
//!
//! MQTT 5 adds properties after the packet identifier of all four, subscription options in
//! the upper bits of each SUBSCRIBE filter's QoS byte, and reason codes in UNSUBACK.

use std::borrow::Cow;

use bytes::{BufMut, BytesMut};

use super::error::{DecodeError, EncodeError};
use super::packet::{
    PacketType, QoS, SubAck, Subscribe, SubscribeReturnCode, SubscriptionOptions, UnsubAck,
    Unsubscribe,
};
use super::properties::{decode_properties, properties_size, write_properties, PropertyContext};
use super::wire::{field_size, write_field, Reader};

const NO_LOCAL: u8 = 0b0000_0100;
const RETAIN_AS_PUBLISHED: u8 = 0b0000_1000;
const RETAIN_HANDLING_SHIFT: u8 = 4;

/// Parses a SUBSCRIBE body.
pub(crate) fn decode_subscribe(reader: &mut Reader, v5: bool) -> Result<Subscribe, DecodeError> {
    let packet_id = reader.packet_id()?;
    let properties = if v5 {
        decode_properties(reader, PropertyContext::Subscribe)?
    } else {
        None
    };
    let mut filters = Vec::new();
    let mut options = Vec::new();
    while reader.remaining() > 0 {
        let filter = reader.string("topic filter")?;
        let requested = reader.u8("requested QoS")?;
        // 3.8.3.1: the upper six bits are reserved in 3.1.1 and the upper two in MQTT 5
        // (MQTT-3.8.3-5 of MQTT 5), and QoS 3 does not exist.
        let reserved = if v5 { 0b1100_0000 } else { 0b1111_1100 };
        if requested & reserved != 0 {
            return Err(DecodeError::Malformed(Cow::Owned(format!(
                "SUBSCRIBE requested QoS byte {requested:#04x} has reserved bits set \
                 (MQTT-3.8.3-4)"
            ))));
        }
        let Some(qos) = QoS::from_u8(requested & 0b11) else {
            return Err(DecodeError::malformed(
                "SUBSCRIBE requested QoS is 3, which is reserved (MQTT-3.8.3-4)",
            ));
        };
        if v5 {
            let option = SubscriptionOptions {
                no_local: requested & NO_LOCAL != 0,
                retain_as_published: requested & RETAIN_AS_PUBLISHED != 0,
                retain_handling: requested >> RETAIN_HANDLING_SHIFT & 0b11,
            };
            if option.retain_handling == 3 {
                return Err(DecodeError::Protocol {
                    code: super::reason::PROTOCOL_ERROR,
                    message: Cow::Borrowed(
                        "SUBSCRIBE retain handling is 3, which is reserved (section 3.8.3.1)",
                    ),
                });
            }
            if option.no_local && filter.starts_with("$share/") {
                return Err(DecodeError::Protocol {
                    code: super::reason::PROTOCOL_ERROR,
                    message: Cow::Borrowed(
                        "SUBSCRIBE sets no local on a shared subscription (MQTT-3.8.3-4)",
                    ),
                });
            }
            options.push(option);
        }
        filters.push((filter, qos));
    }
    if filters.is_empty() {
        return Err(DecodeError::malformed(
            "SUBSCRIBE has no topic filters, a protocol violation (MQTT-3.8.3-3)",
        ));
    }
    Ok(Subscribe {
        packet_id,
        filters,
        options,
        properties,
    })
}

/// Parses a SUBACK body.
pub(crate) fn decode_suback(reader: &mut Reader, v5: bool) -> Result<SubAck, DecodeError> {
    let packet_id = reader.packet_id()?;
    let properties = if v5 {
        decode_properties(reader, PropertyContext::SubscriptionAcknowledgement)?
    } else {
        None
    };
    let mut return_codes = Vec::with_capacity(reader.remaining());
    while reader.remaining() > 0 {
        let code = if v5 {
            let code = super::frame::read_reason_code(reader, PacketType::SubAck)?;
            match SubscribeReturnCode::from_u8(code) {
                Some(known) => known,
                None => SubscribeReturnCode::Refused(code),
            }
        } else {
            let code = reader.u8("return code")?;
            let Some(code) = SubscribeReturnCode::from_u8(code) else {
                return Err(DecodeError::Malformed(Cow::Owned(format!(
                    "SUBACK return code {code:#04x} is reserved (MQTT-3.9.3-2)"
                ))));
            };
            code
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
        properties,
    })
}

/// Parses an UNSUBSCRIBE body.
pub(crate) fn decode_unsubscribe(
    reader: &mut Reader,
    v5: bool,
) -> Result<Unsubscribe, DecodeError> {
    let packet_id = reader.packet_id()?;
    let properties = if v5 {
        decode_properties(reader, PropertyContext::Unsubscribe)?
    } else {
        None
    };
    let mut topics = Vec::new();
    while reader.remaining() > 0 {
        topics.push(reader.string("topic filter")?);
    }
    if topics.is_empty() {
        return Err(DecodeError::malformed(
            "UNSUBSCRIBE has no topic filters, a protocol violation (MQTT-3.10.3-2)",
        ));
    }
    Ok(Unsubscribe {
        packet_id,
        topics,
        properties,
    })
}

/// Parses an UNSUBACK body: the packet identifier, and in MQTT 5 properties and one reason
/// code per filter.
pub(crate) fn decode_unsuback(reader: &mut Reader, v5: bool) -> Result<UnsubAck, DecodeError> {
    let packet_id = reader.packet_id()?;
    if !v5 {
        return Ok(UnsubAck::new(packet_id));
    }
    let properties = decode_properties(reader, PropertyContext::SubscriptionAcknowledgement)?;
    let mut reason_codes = Vec::with_capacity(reader.remaining());
    while reader.remaining() > 0 {
        reason_codes.push(super::frame::read_reason_code(
            reader,
            PacketType::UnsubAck,
        )?);
    }
    if reason_codes.is_empty() {
        return Err(DecodeError::malformed(
            "UNSUBACK has no reason codes (section 3.11.3 of MQTT 5)",
        ));
    }
    Ok(UnsubAck {
        packet_id,
        reason_codes,
        properties,
    })
}

fn check_packet_id(packet_id: u16) -> Result<(), EncodeError> {
    if packet_id == 0 {
        Err(EncodeError::Invalid("packet identifier 0 (MQTT-2.3.1-1)"))
    } else {
        Ok(())
    }
}

/// The size of a property list in an MQTT 5 packet, 0 in 3.1.1.
fn v5_properties_size(
    properties: Option<&super::Properties>,
    v5: bool,
) -> Result<usize, EncodeError> {
    if v5 {
        properties_size(properties)
    } else {
        Ok(0)
    }
}

/// The size of a SUBSCRIBE body, validating what a sender must get right.
pub(crate) fn subscribe_body_len(subscribe: &Subscribe, v5: bool) -> Result<usize, EncodeError> {
    check_packet_id(subscribe.packet_id)?;
    if subscribe.filters.is_empty() {
        return Err(EncodeError::Invalid(
            "SUBSCRIBE without topic filters (MQTT-3.8.3-3)",
        ));
    }
    if v5 && !subscribe.options.is_empty() && subscribe.options.len() != subscribe.filters.len() {
        return Err(EncodeError::Invalid(
            "SUBSCRIBE with subscription options for some filters only",
        ));
    }
    let mut len = 2 + v5_properties_size(subscribe.properties.as_deref(), v5)?;
    for (filter, _) in &subscribe.filters {
        len += field_size("topic filter", filter.as_bytes())? + 1;
    }
    Ok(len)
}

/// Writes a SUBSCRIBE body checked by [`subscribe_body_len`].
pub(crate) fn write_subscribe_body(subscribe: &Subscribe, out: &mut BytesMut, v5: bool) {
    out.put_u16(subscribe.packet_id);
    if v5 {
        write_properties(out, subscribe.properties.as_deref());
    }
    for (index, (filter, qos)) in subscribe.filters.iter().enumerate() {
        write_field(out, filter.as_bytes());
        let mut byte = qos.as_u8();
        if let Some(option) = subscribe.options.get(index).filter(|_| v5) {
            if option.no_local {
                byte |= NO_LOCAL;
            }
            if option.retain_as_published {
                byte |= RETAIN_AS_PUBLISHED;
            }
            byte |= (option.retain_handling & 0b11) << RETAIN_HANDLING_SHIFT;
        }
        out.put_u8(byte);
    }
}

/// The size of a SUBACK body, validating what a sender must get right.
pub(crate) fn suback_body_len(suback: &SubAck, v5: bool) -> Result<usize, EncodeError> {
    check_packet_id(suback.packet_id)?;
    if suback.return_codes.is_empty() {
        return Err(EncodeError::Invalid(
            "SUBACK without return codes (MQTT-3.9.3-1)",
        ));
    }
    Ok(2 + v5_properties_size(suback.properties.as_deref(), v5)? + suback.return_codes.len())
}

/// Writes a SUBACK body checked by [`suback_body_len`].
pub(crate) fn write_suback_body(suback: &SubAck, out: &mut BytesMut, v5: bool) {
    out.put_u16(suback.packet_id);
    if v5 {
        write_properties(out, suback.properties.as_deref());
    }
    for code in &suback.return_codes {
        out.put_u8(match code {
            // 3.1.1 has one failure code.
            SubscribeReturnCode::Refused(_) if !v5 => 0x80,
            code => code.as_u8(),
        });
    }
}

/// The size of an UNSUBSCRIBE body, validating what a sender must get right.
pub(crate) fn unsubscribe_body_len(
    unsubscribe: &Unsubscribe,
    v5: bool,
) -> Result<usize, EncodeError> {
    check_packet_id(unsubscribe.packet_id)?;
    if unsubscribe.topics.is_empty() {
        return Err(EncodeError::Invalid(
            "UNSUBSCRIBE without topic filters (MQTT-3.10.3-2)",
        ));
    }
    let mut len = 2 + v5_properties_size(unsubscribe.properties.as_deref(), v5)?;
    for topic in &unsubscribe.topics {
        len += field_size("topic filter", topic.as_bytes())?;
    }
    Ok(len)
}

/// Writes an UNSUBSCRIBE body checked by [`unsubscribe_body_len`].
pub(crate) fn write_unsubscribe_body(unsubscribe: &Unsubscribe, out: &mut BytesMut, v5: bool) {
    out.put_u16(unsubscribe.packet_id);
    if v5 {
        write_properties(out, unsubscribe.properties.as_deref());
    }
    for topic in &unsubscribe.topics {
        write_field(out, topic.as_bytes());
    }
}

/// The size of an MQTT 5 UNSUBACK body, validating what a sender must get right.
pub(crate) fn unsuback_body_len(unsuback: &UnsubAck) -> Result<usize, EncodeError> {
    check_packet_id(unsuback.packet_id)?;
    if unsuback.reason_codes.is_empty() {
        return Err(EncodeError::Invalid(
            "MQTT 5 UNSUBACK without reason codes (section 3.11.3)",
        ));
    }
    Ok(2 + properties_size(unsuback.properties.as_deref())? + unsuback.reason_codes.len())
}

/// Writes an MQTT 5 UNSUBACK body checked by [`unsuback_body_len`].
pub(crate) fn write_unsuback_body(unsuback: &UnsubAck, out: &mut BytesMut) {
    out.put_u16(unsuback.packet_id);
    write_properties(out, unsuback.properties.as_deref());
    out.put_slice(&unsuback.reason_codes);
}
