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
use super::packet::{Packet, PacketType};
use super::wire::{
    check_remaining_length, read_remaining_length, remaining_length_size, write_remaining_length,
    Reader, RemainingLength,
};
use super::{connect, publish, subscribe};

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
pub fn decode(buf: &mut BytesMut, max_packet_size: usize) -> Result<Option<Packet>, DecodeError> {
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
    if let Some(expected) = packet_type.fixed_remaining_length() {
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
        PacketType::ConnAck => Packet::ConnAck(connect::decode_connack(&mut reader)?),
        // The payload is the rest of the body, so there is nothing left over to check.
        PacketType::Publish => {
            return publish::decode_publish(flags, reader).map(|p| Some(Packet::Publish(p)))
        }
        PacketType::PubAck => Packet::PubAck(super::PubAck {
            packet_id: reader.packet_id()?,
        }),
        PacketType::PubRec => Packet::PubRec(super::PubRec {
            packet_id: reader.packet_id()?,
        }),
        PacketType::PubRel => Packet::PubRel(super::PubRel {
            packet_id: reader.packet_id()?,
        }),
        PacketType::PubComp => Packet::PubComp(super::PubComp {
            packet_id: reader.packet_id()?,
        }),
        PacketType::Subscribe => Packet::Subscribe(subscribe::decode_subscribe(&mut reader)?),
        PacketType::SubAck => Packet::SubAck(subscribe::decode_suback(&mut reader)?),
        PacketType::Unsubscribe => Packet::Unsubscribe(subscribe::decode_unsubscribe(&mut reader)?),
        PacketType::UnsubAck => Packet::UnsubAck(super::UnsubAck {
            packet_id: reader.packet_id()?,
        }),
        PacketType::PingReq => Packet::PingReq,
        PacketType::PingResp => Packet::PingResp,
        PacketType::Disconnect => Packet::Disconnect,
    };
    // Every other body must be used up exactly, or the remaining length and the fields
    // disagree.
    reader.finish()?;
    Ok(Some(packet))
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
pub fn encode(packet: &Packet, out: &mut BytesMut) -> Result<(), EncodeError> {
    match packet {
        Packet::Connect(connect) => {
            let len = connect::connect_body_len(connect)?;
            write_fixed_header(out, PacketType::Connect, 0, len)?;
            connect::write_connect_body(connect, out);
        }
        Packet::ConnAck(connack) => {
            write_fixed_header(out, PacketType::ConnAck, 0, 2)?;
            out.put_u8(u8::from(connack.session_present));
            out.put_u8(connack.code as u8);
        }
        Packet::Publish(publish) => publish::encode_publish(
            out,
            &publish.topic,
            publish.qos,
            publish.packet_id,
            publish.retain,
            publish.dup,
            &publish.payload,
        )?,
        Packet::PubAck(ack) => write_ack(out, PacketType::PubAck, ack.packet_id)?,
        Packet::PubRec(ack) => write_ack(out, PacketType::PubRec, ack.packet_id)?,
        Packet::PubRel(ack) => write_ack(out, PacketType::PubRel, ack.packet_id)?,
        Packet::PubComp(ack) => write_ack(out, PacketType::PubComp, ack.packet_id)?,
        Packet::Subscribe(subscribe) => {
            let len = subscribe::subscribe_body_len(subscribe)?;
            write_fixed_header(out, PacketType::Subscribe, 0b0010, len)?;
            subscribe::write_subscribe_body(subscribe, out);
        }
        Packet::SubAck(suback) => {
            let len = subscribe::suback_body_len(suback)?;
            write_fixed_header(out, PacketType::SubAck, 0, len)?;
            subscribe::write_suback_body(suback, out);
        }
        Packet::Unsubscribe(unsubscribe) => {
            let len = subscribe::unsubscribe_body_len(unsubscribe)?;
            write_fixed_header(out, PacketType::Unsubscribe, 0b0010, len)?;
            subscribe::write_unsubscribe_body(unsubscribe, out);
        }
        Packet::UnsubAck(ack) => write_ack(out, PacketType::UnsubAck, ack.packet_id)?,
        Packet::PingReq => write_fixed_header(out, PacketType::PingReq, 0, 0)?,
        Packet::PingResp => write_fixed_header(out, PacketType::PingResp, 0, 0)?,
        Packet::Disconnect => write_fixed_header(out, PacketType::Disconnect, 0, 0)?,
    }
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

/// PUBACK, PUBREC, PUBREL, PUBCOMP and UNSUBACK: a packet identifier and nothing else.
fn write_ack(
    out: &mut BytesMut,
    packet_type: PacketType,
    packet_id: u16,
) -> Result<(), EncodeError> {
    if packet_id == 0 {
        return Err(EncodeError::Invalid("packet identifier 0 (MQTT-2.3.1-1)"));
    }
    let flags = packet_type.required_flags().unwrap_or(0);
    write_fixed_header(out, packet_type, flags, 2)?;
    out.put_u16(packet_id);
    Ok(())
}
