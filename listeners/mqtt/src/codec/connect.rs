//! CONNECT (section 3.1) and CONNACK (section 3.2).
//!
//! MQTT 3.1 ("MQIsdp", level 3) is accepted alongside 3.1.1, as RabbitMQ and Mosquitto do.
//! Where 3.1 was looser, the 3.1 rules apply to 3.1 clients, following Mosquitto: the
//! reserved flag bit is not checked, a password may come without a user name, and a user
//! name or password whose flag is set but whose bytes are missing is taken as absent (some
//! old 3.1 clients sent the flags alone). The 23-byte client identifier limit of 3.1 is not
//! enforced (see [`Connect`]).

use bytes::{BufMut, BytesMut};

use super::error::{DecodeError, EncodeError};
use super::packet::{ConnAck, Connect, ConnectReturnCode, LastWill, ProtocolLevel, QoS};
use super::wire::{field_size, write_field, Reader};

const FLAG_RESERVED: u8 = 0x01;
const FLAG_CLEAN_SESSION: u8 = 0x02;
const FLAG_WILL: u8 = 0x04;
const WILL_QOS_SHIFT: u8 = 3;
const FLAG_WILL_RETAIN: u8 = 0x20;
const FLAG_PASSWORD: u8 = 0x40;
const FLAG_USERNAME: u8 = 0x80;

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
    let is_3_1_1 = protocol == ProtocolLevel::V3_1_1;

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
    if is_3_1_1 && password_flag && !username_flag {
        return Err(DecodeError::malformed(
            "CONNECT password flag is set without the user name flag (MQTT-3.1.2-22)",
        ));
    }

    // 3.1.2.10 keep alive, then the payload in its fixed order (MQTT-3.1.3-1).
    let keep_alive = reader.u16("keep alive")?;
    let client_id = reader.string("client identifier")?;
    let last_will = if will_flag {
        Some(LastWill {
            topic: reader.string("will topic")?,
            message: reader.binary("will message")?,
            qos: will_qos,
            retain: will_retain,
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
    })
}

/// Parses a CONNACK body (exactly two bytes, checked from the fixed header).
pub(crate) fn decode_connack(reader: &mut Reader) -> Result<ConnAck, DecodeError> {
    let flags = reader.u8("acknowledge flags")?;
    // 3.2.2.1: bits 7-1 are reserved. (In 3.1 the whole byte was reserved and zero.)
    if flags & 0xFE != 0 {
        return Err(DecodeError::malformed(
            "CONNACK acknowledge flags have reserved bits set (section 3.2.2.1)",
        ));
    }
    let code = reader.u8("return code")?;
    let Some(code) = ConnectReturnCode::from_u8(code) else {
        return Err(DecodeError::malformed(
            "CONNACK return code is reserved (section 3.2.2.3)",
        ));
    };
    Ok(ConnAck {
        session_present: flags & 0x01 != 0,
        code,
    })
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
    let mut len = field_size("protocol name", connect.protocol.name().as_bytes())? + 1 + 1 + 2;
    len += field_size("client identifier", connect.client_id.as_bytes())?;
    if let Some(will) = &connect.last_will {
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
    write_field(out, connect.client_id.as_bytes());
    if let Some(will) = &connect.last_will {
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
