//! CONNECT (section 3.1) and CONNACK (section 3.2).
//!
//! MQTT 3.1 ("MQIsdp", level 3) is accepted alongside 3.1.1, as RabbitMQ and Mosquitto do.
//! Where 3.1 was looser, the 3.1 rules apply to 3.1 clients, following Mosquitto: the
//! reserved flag bit is not checked, a password may come without a user name, and a user
//! name or password whose flag is set but whose bytes are missing is taken as absent (some
//! old 3.1 clients sent the flags alone). The 23-byte client identifier limit of 3.1 is not
//! enforced (see [`Connect`]).
//!
//! MQTT 5 (level 5) keeps the 3.1.1 rules and adds properties after the keep-alive and
//! before the will topic; a password may come without a user name again (section 3.1.2.9
//! of MQTT 5).

use bytes::{BufMut, BytesMut};

use super::error::{DecodeError, EncodeError};
use super::packet::{
    ConnAck, Connect, ConnectReturnCode, LastWill, PacketType, ProtocolLevel, QoS,
};
use super::properties::{decode_properties, properties_size, write_properties, PropertyContext};
use super::wire::{field_size, write_field, Reader};

const FLAG_RESERVED: u8 = 0x01;
const FLAG_CLEAN_SESSION: u8 = 0x02;
const FLAG_WILL: u8 = 0x04;
const WILL_QOS_SHIFT: u8 = 3;
const FLAG_WILL_RETAIN: u8 = 0x20;
const FLAG_PASSWORD: u8 = 0x40;
const FLAG_USERNAME: u8 = 0x80;

/// The protocol a CONNECT at the start of `bytes` asks for, read from its first bytes
/// without decoding it: lets the server answer a CONNECT it cannot decode (too large,
/// malformed properties) in the client's own protocol, as MQTT 5 asks (section 4.13.1).
pub fn connect_protocol(bytes: &[u8]) -> Option<ProtocolLevel> {
    if bytes.first()? >> 4 != PacketType::Connect as u8 {
        return None;
    }
    let length_bytes = bytes[1..]
        .iter()
        .take(4)
        .position(|byte| byte & 0x80 == 0)?
        + 1;
    let rest = bytes.get(1 + length_bytes..)?;
    let name_len = usize::from(u16::from_be_bytes([*rest.first()?, *rest.get(1)?]));
    let name = rest.get(2..2 + name_len)?;
    let level = *rest.get(2 + name_len)?;
    ProtocolLevel::from_name_and_level(name, level)
}

/// Parses a CONNECT body.
pub(crate) fn decode_connect(reader: &mut Reader) -> Result<Connect, DecodeError> {
    // 3.1.2.1, 3.1.2.2: name and level together select the protocol. Anything we do not
    // speak is answered with CONNACK 0x01 (MQTT-3.1.2-2), so it gets its own error.
    let name = reader.binary("protocol name")?;
    let level = reader.u8("protocol level")?;
    let Some(protocol) = ProtocolLevel::from_name_and_level(&name, level) else {
        return Err(DecodeError::UnsupportedProtocol {
            level,
            name: String::from_utf8_lossy(&name).into_owned(),
        });
    };
    let v5 = protocol.is_v5();
    // The stricter rules of 3.1.1, which MQTT 5 keeps.
    let is_3_1_1 = protocol != ProtocolLevel::V3_1;

    // 3.1.2.3 connect flags.
    let flags = reader.u8("connect flags")?;
    if is_3_1_1 && flags & FLAG_RESERVED != 0 {
        return Err(DecodeError::malformed(
            "CONNECT flags reserved bit is set (MQTT-3.1.2-3)",
        ));
    }
    let will_flag = flags & FLAG_WILL != 0;
    let will_qos_bits = (flags >> WILL_QOS_SHIFT) & 0b11;
    let will_retain = flags & FLAG_WILL_RETAIN != 0;
    if !will_flag && will_qos_bits != 0 {
        return Err(DecodeError::malformed(
            "CONNECT will QoS is set without the will flag (MQTT-3.1.2-13)",
        ));
    }
    if !will_flag && will_retain {
        return Err(DecodeError::malformed(
            "CONNECT will retain is set without the will flag (MQTT-3.1.2-15)",
        ));
    }
    let Some(will_qos) = QoS::from_u8(will_qos_bits) else {
        return Err(DecodeError::malformed(
            "CONNECT will QoS is 3, which is reserved (MQTT-3.1.2-14)",
        ));
    };
    let username_flag = flags & FLAG_USERNAME != 0;
    let password_flag = flags & FLAG_PASSWORD != 0;
    if protocol == ProtocolLevel::V3_1_1 && password_flag && !username_flag {
        return Err(DecodeError::malformed(
            "CONNECT password flag is set without the user name flag (MQTT-3.1.2-22)",
        ));
    }

    // 3.1.2.10 keep alive, then the payload in its fixed order (MQTT-3.1.3-1).
    let keep_alive = reader.u16("keep alive")?;
    let properties = if v5 {
        decode_properties(reader, PropertyContext::Connect)?
    } else {
        None
    };
    if properties
        .as_deref()
        .is_some_and(|p| p.authentication_data.is_some() && p.authentication_method.is_none())
    {
        return Err(DecodeError::Protocol {
            code: super::reason::PROTOCOL_ERROR,
            message: "CONNECT has authentication data without an authentication method \
                      (section 3.1.2.11.10)"
                .into(),
        });
    }
    let client_id = reader.string("client identifier")?;
    let last_will = if will_flag {
        let will_properties = if v5 {
            decode_properties(reader, PropertyContext::Will)?
        } else {
            None
        };
        Some(LastWill {
            topic: reader.string("will topic")?,
            message: reader.binary("will message")?,
            qos: will_qos,
            retain: will_retain,
            properties: will_properties,
        })
    } else {
        None
    };
    let lenient = !is_3_1_1;
    let username = if username_flag && !(lenient && reader.remaining() == 0) {
        Some(reader.string("user name")?)
    } else {
        None
    };
    let password = if password_flag && !(lenient && reader.remaining() == 0) {
        Some(reader.binary("password")?)
    } else {
        None
    };

    Ok(Connect {
        protocol,
        keep_alive,
        client_id,
        clean_session: flags & FLAG_CLEAN_SESSION != 0,
        last_will,
        username,
        password,
        properties,
    })
}

/// Parses a CONNACK body: two bytes (checked from the fixed header) in 3.1.1, and
/// properties after them in MQTT 5.
pub(crate) fn decode_connack(reader: &mut Reader, v5: bool) -> Result<ConnAck, DecodeError> {
    let flags = reader.u8("acknowledge flags")?;
    // 3.2.2.1: bits 7-1 are reserved. (In 3.1 the whole byte was reserved and zero.)
    if flags & 0xFE != 0 {
        return Err(DecodeError::malformed(
            "CONNACK acknowledge flags have reserved bits set (section 3.2.2.1)",
        ));
    }
    if v5 {
        let reason_code = super::frame::read_reason_code(reader, PacketType::ConnAck)?;
        let properties = decode_properties(reader, PropertyContext::ConnAck)?;
        let code = ConnectReturnCode::from_reason_code(reason_code);
        return Ok(ConnAck {
            session_present: flags & 0x01 != 0,
            code,
            reason_code: (code.reason_code() != reason_code).then_some(reason_code),
            properties,
        });
    }
    let code = reader.u8("return code")?;
    let Some(code) = ConnectReturnCode::from_u8(code) else {
        return Err(DecodeError::malformed(
            "CONNACK return code is reserved (section 3.2.2.3)",
        ));
    };
    Ok(ConnAck::new(flags & 0x01 != 0, code))
}

/// The size of a CONNECT body, validating what a sender must get right.
pub(crate) fn connect_body_len(connect: &Connect) -> Result<usize, EncodeError> {
    if connect.protocol == ProtocolLevel::V3_1_1
        && connect.password.is_some()
        && connect.username.is_none()
    {
        return Err(EncodeError::Invalid(
            "MQTT 3.1.1 CONNECT with a password but no user name (MQTT-3.1.2-22)",
        ));
    }
    // Name, level, flags, keep alive.
    let v5 = connect.protocol.is_v5();
    let mut len = field_size("protocol name", connect.protocol.name().as_bytes())? + 1 + 1 + 2;
    if v5 {
        len += properties_size(connect.properties.as_deref())?;
    }
    len += field_size("client identifier", connect.client_id.as_bytes())?;
    if let Some(will) = &connect.last_will {
        if v5 {
            len += properties_size(will.properties.as_deref())?;
        }
        len += field_size("will topic", will.topic.as_bytes())?;
        len += field_size("will message", &will.message)?;
    }
    if let Some(username) = &connect.username {
        len += field_size("user name", username.as_bytes())?;
    }
    if let Some(password) = &connect.password {
        len += field_size("password", password)?;
    }
    Ok(len)
}

/// Writes a CONNECT body checked by [`connect_body_len`].
pub(crate) fn write_connect_body(connect: &Connect, out: &mut BytesMut) {
    write_field(out, connect.protocol.name().as_bytes());
    out.put_u8(connect.protocol.level());
    let mut flags = 0;
    if connect.clean_session {
        flags |= FLAG_CLEAN_SESSION;
    }
    if let Some(will) = &connect.last_will {
        flags |= FLAG_WILL | (will.qos.as_u8() << WILL_QOS_SHIFT);
        if will.retain {
            flags |= FLAG_WILL_RETAIN;
        }
    }
    if connect.username.is_some() {
        flags |= FLAG_USERNAME;
    }
    if connect.password.is_some() {
        flags |= FLAG_PASSWORD;
    }
    out.put_u8(flags);
    out.put_u16(connect.keep_alive);
    let v5 = connect.protocol.is_v5();
    if v5 {
        write_properties(out, connect.properties.as_deref());
    }
    write_field(out, connect.client_id.as_bytes());
    if let Some(will) = &connect.last_will {
        if v5 {
            write_properties(out, will.properties.as_deref());
        }
        write_field(out, will.topic.as_bytes());
        write_field(out, &will.message);
    }
    if let Some(username) = &connect.username {
        write_field(out, username.as_bytes());
    }
    if let Some(password) = &connect.password {
        write_field(out, password);
    }
}
