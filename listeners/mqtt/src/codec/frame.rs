//! The fixed header (section 2.2) and the entry points [`decode`] and [`encode`].
//!
//! Every packet starts with one byte of type and flags and a remaining length of one to four
//! bytes. [`decode`] is check-then-parse: it validates what the fixed header alone can tell
//! (type, flags, size) as soon as those bytes are there, waits without consuming or
//! allocating anything until the whole packet is buffered, then splits it off and hands the
//! body to the packet family's parser.

use std::borrow::Cow;

use bytes::{Buf, BufMut, BytesMut};

use super::error::{DecodeError, EncodeError};
use super::packet::{Packet, PacketType, Properties, ProtocolLevel, Reason};
use super::properties::{decode_properties, properties_size, write_properties, PropertyContext};
use super::wire::{
    check_remaining_length, read_remaining_length, remaining_length_size, write_remaining_length,
    Reader, RemainingLength,
};
use super::{connect, publish, reason, subscribe};

/// Takes one complete packet off the front of `buf`.
///
/// Returns `Ok(None)` when `buf` does not hold a whole packet yet; nothing is consumed or
/// allocated then, so the driver reads more and calls again. On success the packet's bytes
/// are split off `buf`, and binary fields (PUBLISH payload, will message, password) share
/// their memory without copying.
///
/// `max_packet_size` bounds the remaining length (the packet minus its 2-5 byte fixed
/// header), as RabbitMQ's `max_packet_size_*` settings and mqttbytes do. It is checked as
/// soon as the remaining length is readable, so an oversized packet fails with
/// [`DecodeError::TooLarge`] before its body is buffered. Pass
/// [`MAX_REMAINING_LENGTH`](super::MAX_REMAINING_LENGTH) for no limit beyond the protocol's.
///
/// After an error the connection must be closed; `buf` is left in an unspecified state.
///
/// Packets are read as MQTT 3.1.1 (and 3.1) packets; [`decode_with`] reads those of an
/// MQTT 5 connection. CONNECT, which says which protocol the connection speaks, is read
/// whole by both.
pub fn decode(buf: &mut BytesMut, max_packet_size: usize) -> Result<Option<Packet>, DecodeError> {
    decode_with(buf, max_packet_size, ProtocolLevel::V3_1_1)
}

/// [`decode`] for a connection speaking `protocol`: with [`ProtocolLevel::V5`], packets
/// carry reason codes and properties and AUTH exists.
pub fn decode_with(
    buf: &mut BytesMut,
    max_packet_size: usize,
    protocol: ProtocolLevel,
) -> Result<Option<Packet>, DecodeError> {
    let v5 = protocol.is_v5();
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let nibble = first >> 4;
    let flags = first & 0x0F;
    let Some(packet_type) = PacketType::from_nibble(nibble) else {
        return Err(DecodeError::Malformed(Cow::Owned(format!(
            "packet type {nibble} is reserved (section 2.2.1)"
        ))));
    };
    if packet_type == PacketType::Auth && !v5 {
        return Err(DecodeError::malformed(
            "packet type 15 is reserved in MQTT 3.1.1 (section 2.2.1)",
        ));
    }
    check_flags(packet_type, flags)?;

    let (remaining_length, length_bytes) = match read_remaining_length(&buf[1..])? {
        RemainingLength::Complete { value, bytes } => (value, bytes),
        RemainingLength::Incomplete => return Ok(None),
    };
    if remaining_length > max_packet_size {
        return Err(DecodeError::TooLarge {
            size: remaining_length,
            max: max_packet_size,
        });
    }
    let fixed = if v5 {
        // MQTT 5 acknowledgements may add a reason code and properties; only the pings
        // are still empty.
        match packet_type {
            PacketType::PingReq | PacketType::PingResp => Some(0),
            _ => None,
        }
    } else {
        packet_type.fixed_remaining_length()
    };
    if let Some(expected) = fixed {
        if remaining_length != expected {
            return Err(DecodeError::Malformed(Cow::Owned(format!(
                "{} remaining length is {remaining_length}, expected {expected}",
                packet_type.name()
            ))));
        }
    }

    let header_size = 1 + length_bytes;
    let total = header_size + remaining_length;
    if buf.len() < total {
        return Ok(None);
    }
    let mut body = buf.split_to(total).freeze();
    body.advance(header_size);
    let mut reader = Reader::new(body, packet_type.name());

    let packet = match packet_type {
        PacketType::Connect => Packet::Connect(connect::decode_connect(&mut reader)?),
        PacketType::ConnAck => Packet::ConnAck(connect::decode_connack(&mut reader, v5)?),
        // The payload is the rest of the body, so there is nothing left over to check.
        PacketType::Publish => {
            return publish::decode_publish(flags, reader, v5).map(|p| Some(Packet::Publish(p)))
        }
        PacketType::PubAck => {
            let (packet_id, reason_code, properties) = decode_ack(&mut reader, packet_type, v5)?;
            Packet::PubAck(super::PubAck {
                packet_id,
                reason_code,
                properties,
            })
        }
        PacketType::PubRec => {
            let (packet_id, reason_code, properties) = decode_ack(&mut reader, packet_type, v5)?;
            Packet::PubRec(super::PubRec {
                packet_id,
                reason_code,
                properties,
            })
        }
        PacketType::PubRel => {
            let (packet_id, reason_code, properties) = decode_ack(&mut reader, packet_type, v5)?;
            Packet::PubRel(super::PubRel {
                packet_id,
                reason_code,
                properties,
            })
        }
        PacketType::PubComp => {
            let (packet_id, reason_code, properties) = decode_ack(&mut reader, packet_type, v5)?;
            Packet::PubComp(super::PubComp {
                packet_id,
                reason_code,
                properties,
            })
        }
        PacketType::Subscribe => Packet::Subscribe(subscribe::decode_subscribe(&mut reader, v5)?),
        PacketType::SubAck => Packet::SubAck(subscribe::decode_suback(&mut reader, v5)?),
        PacketType::Unsubscribe => {
            Packet::Unsubscribe(subscribe::decode_unsubscribe(&mut reader, v5)?)
        }
        PacketType::UnsubAck => Packet::UnsubAck(subscribe::decode_unsuback(&mut reader, v5)?),
        PacketType::PingReq => Packet::PingReq,
        PacketType::PingResp => Packet::PingResp,
        PacketType::Disconnect => Packet::Disconnect(decode_reason(
            &mut reader,
            packet_type,
            PropertyContext::Disconnect,
        )?),
        PacketType::Auth => Packet::Auth(decode_reason(
            &mut reader,
            packet_type,
            PropertyContext::Auth,
        )?),
    };
    // Every other body must be used up exactly, or the remaining length and the fields
    // disagree.
    reader.finish()?;
    Ok(Some(packet))
}

/// An MQTT 5 reason code, refused as malformed unless the spec defines it for `packet`.
pub(crate) fn read_reason_code(reader: &mut Reader, packet: PacketType) -> Result<u8, DecodeError> {
    let code = reader.u8("reason code")?;
    if !reason::valid_for(packet, code) {
        return Err(DecodeError::Malformed(Cow::Owned(format!(
            "{} reason code {code:#04x} is not defined for it",
            packet.name()
        ))));
    }
    Ok(code)
}

/// PUBACK, PUBREC, PUBREL, PUBCOMP: a packet identifier, then in MQTT 5 an optional reason
/// code and optional properties (sections 3.4.2 to 3.7.2 of MQTT 5).
fn decode_ack(
    reader: &mut Reader,
    packet: PacketType,
    v5: bool,
) -> Result<(u16, u8, Option<Box<Properties>>), DecodeError> {
    let packet_id = reader.packet_id()?;
    if !v5 || reader.remaining() == 0 {
        return Ok((packet_id, 0, None));
    }
    let code = read_reason_code(reader, packet)?;
    let properties = if reader.remaining() > 0 {
        decode_properties(reader, PropertyContext::Acknowledgement)?
    } else {
        None
    };
    Ok((packet_id, code, properties))
}

/// DISCONNECT and AUTH: empty (reason 0), or a reason code and optional properties. A 3.1.1
/// DISCONNECT is empty, which the fixed remaining length has checked.
fn decode_reason(
    reader: &mut Reader,
    packet: PacketType,
    context: PropertyContext,
) -> Result<Reason, DecodeError> {
    if reader.remaining() == 0 {
        return Ok(Reason::default());
    }
    let code = read_reason_code(reader, packet)?;
    let properties = if reader.remaining() > 0 {
        decode_properties(reader, context)?
    } else {
        None
    };
    Ok(Reason { code, properties })
}

/// Fixed-header flags: fixed values for all packets but PUBLISH (MQTT-2.2.2-1,
/// MQTT-2.2.2-2), and no QoS 3 for PUBLISH (MQTT-3.3.1-4).
///
/// MQTT 3.1 clients also send 0b0010 for PUBREL, SUBSCRIBE and UNSUBSCRIBE (3.1 called it
/// QoS 1), so one rule serves both levels; only a 3.1 client that set DUP on a resent
/// PUBREL or SUBSCRIBE would be refused, which the 3.1.1 rule requires anyway.
fn check_flags(packet_type: PacketType, flags: u8) -> Result<(), DecodeError> {
    match packet_type.required_flags() {
        Some(required) if flags != required => {
            let rule = match packet_type {
                PacketType::PubRel => "MQTT-3.6.1-1",
                PacketType::Subscribe => "MQTT-3.8.1-1",
                PacketType::Unsubscribe => "MQTT-3.10.1-1",
                _ => "MQTT-2.2.2-1",
            };
            Err(DecodeError::Malformed(Cow::Owned(format!(
                "{} fixed header flags are {flags:#06b}, must be {required:#06b} ({rule})",
                packet_type.name()
            ))))
        }
        Some(_) => Ok(()),
        None if (flags >> 1) & 0b11 == 0b11 => Err(DecodeError::malformed(
            "PUBLISH QoS is 3, which is reserved (MQTT-3.3.1-4)",
        )),
        None => Ok(()),
    }
}

/// Appends one packet to `out`.
///
/// Fails without writing anything if the packet cannot be carried by the wire (strings over
/// 65535 bytes, packets over 268435455) or breaks a rule a sender must keep (packet
/// identifier 0, a PUBLISH identifier that does not match its QoS, an empty SUBSCRIBE).
/// Topic names and filters are not validated: the session owns those rules.
///
/// Packets are written as MQTT 3.1.1 packets (MQTT 5 reason codes and properties are left
/// out); [`encode_with`] writes those of an MQTT 5 connection. A CONNECT is written for
/// its own protocol level by both.
pub fn encode(packet: &Packet, out: &mut BytesMut) -> Result<(), EncodeError> {
    encode_with(packet, out, ProtocolLevel::V3_1_1)
}

/// [`encode`] for a connection speaking `protocol`.
pub fn encode_with(
    packet: &Packet,
    out: &mut BytesMut,
    protocol: ProtocolLevel,
) -> Result<(), EncodeError> {
    let v5 = protocol.is_v5();
    match packet {
        Packet::Connect(connect) => {
            let len = connect::connect_body_len(connect)?;
            write_fixed_header(out, PacketType::Connect, 0, len)?;
            connect::write_connect_body(connect, out);
        }
        Packet::ConnAck(connack) if v5 => {
            let properties = connack.properties.as_deref();
            let len = 2 + properties_size(properties)?;
            write_fixed_header(out, PacketType::ConnAck, 0, len)?;
            out.put_u8(u8::from(connack.session_present));
            out.put_u8(connack.v5_reason_code());
            write_properties(out, properties);
        }
        Packet::ConnAck(connack) => {
            write_fixed_header(out, PacketType::ConnAck, 0, 2)?;
            out.put_u8(u8::from(connack.session_present));
            out.put_u8(connack.code as u8);
        }
        Packet::Publish(publish) if v5 => publish::encode_publish_v5(
            out,
            &publish.topic,
            publish.qos,
            publish.packet_id,
            (publish.retain, publish.dup),
            &publish.payload,
            publish.properties.as_deref(),
        )?,
        Packet::Publish(publish) => publish::encode_publish(
            out,
            &publish.topic,
            publish.qos,
            publish.packet_id,
            publish.retain,
            publish.dup,
            &publish.payload,
        )?,
        Packet::PubAck(ack) => write_ack(
            out,
            PacketType::PubAck,
            ack.packet_id,
            v5.then_some((ack.reason_code, ack.properties.as_deref())),
        )?,
        Packet::PubRec(ack) => write_ack(
            out,
            PacketType::PubRec,
            ack.packet_id,
            v5.then_some((ack.reason_code, ack.properties.as_deref())),
        )?,
        Packet::PubRel(ack) => write_ack(
            out,
            PacketType::PubRel,
            ack.packet_id,
            v5.then_some((ack.reason_code, ack.properties.as_deref())),
        )?,
        Packet::PubComp(ack) => write_ack(
            out,
            PacketType::PubComp,
            ack.packet_id,
            v5.then_some((ack.reason_code, ack.properties.as_deref())),
        )?,
        Packet::Subscribe(subscribe) => {
            let len = subscribe::subscribe_body_len(subscribe, v5)?;
            write_fixed_header(out, PacketType::Subscribe, 0b0010, len)?;
            subscribe::write_subscribe_body(subscribe, out, v5);
        }
        Packet::SubAck(suback) => {
            let len = subscribe::suback_body_len(suback, v5)?;
            write_fixed_header(out, PacketType::SubAck, 0, len)?;
            subscribe::write_suback_body(suback, out, v5);
        }
        Packet::Unsubscribe(unsubscribe) => {
            let len = subscribe::unsubscribe_body_len(unsubscribe, v5)?;
            write_fixed_header(out, PacketType::Unsubscribe, 0b0010, len)?;
            subscribe::write_unsubscribe_body(unsubscribe, out, v5);
        }
        Packet::UnsubAck(ack) if v5 => {
            let len = subscribe::unsuback_body_len(ack)?;
            write_fixed_header(out, PacketType::UnsubAck, 0, len)?;
            subscribe::write_unsuback_body(ack, out);
        }
        Packet::UnsubAck(ack) => write_ack(out, PacketType::UnsubAck, ack.packet_id, None)?,
        Packet::PingReq => write_fixed_header(out, PacketType::PingReq, 0, 0)?,
        Packet::PingResp => write_fixed_header(out, PacketType::PingResp, 0, 0)?,
        Packet::Disconnect(reason) if v5 => write_reason(out, PacketType::Disconnect, reason)?,
        Packet::Disconnect(_) => write_fixed_header(out, PacketType::Disconnect, 0, 0)?,
        Packet::Auth(reason) if v5 => write_reason(out, PacketType::Auth, reason)?,
        Packet::Auth(_) => return Err(EncodeError::Invalid("AUTH does not exist in MQTT 3.1.1")),
    }
    Ok(())
}

/// DISCONNECT and AUTH in MQTT 5: nothing for reason 0 without properties, else the reason
/// code and the properties.
fn write_reason(
    out: &mut BytesMut,
    packet: PacketType,
    reason: &Reason,
) -> Result<(), EncodeError> {
    let properties = reason.properties.as_deref();
    if reason.code == 0 && properties.is_none() {
        return write_fixed_header(out, packet, 0, 0);
    }
    let len = 1 + properties_size(properties)?;
    write_fixed_header(out, packet, 0, len)?;
    out.put_u8(reason.code);
    write_properties(out, properties);
    Ok(())
}

/// Writes the fixed header for a body of `len` bytes and reserves room for the body, so the
/// caller's writes do not reallocate.
pub(crate) fn write_fixed_header(
    out: &mut BytesMut,
    packet_type: PacketType,
    flags: u8,
    len: usize,
) -> Result<(), EncodeError> {
    check_remaining_length(len)?;
    out.reserve(1 + remaining_length_size(len) + len);
    out.put_u8(((packet_type as u8) << 4) | flags);
    write_remaining_length(out, len);
    Ok(())
}

/// PUBACK, PUBREC, PUBREL, PUBCOMP and (3.1.1) UNSUBACK: a packet identifier and, in MQTT
/// 5 (`v5` is `Some`), a reason code and properties, both left out when 0 and empty (section
/// 3.4.2.1 of MQTT 5).
fn write_ack(
    out: &mut BytesMut,
    packet_type: PacketType,
    packet_id: u16,
    v5: Option<(u8, Option<&Properties>)>,
) -> Result<(), EncodeError> {
    if packet_id == 0 {
        return Err(EncodeError::Invalid("packet identifier 0 (MQTT-2.3.1-1)"));
    }
    let flags = packet_type.required_flags().unwrap_or(0);
    match v5 {
        None | Some((0, None)) => {
            write_fixed_header(out, packet_type, flags, 2)?;
            out.put_u16(packet_id);
        }
        Some((code, properties)) => {
            let len = 3 + properties_size(properties)?;
            write_fixed_header(out, packet_type, flags, len)?;
            out.put_u16(packet_id);
            out.put_u8(code);
            write_properties(out, properties);
        }
    }
    Ok(())
}
