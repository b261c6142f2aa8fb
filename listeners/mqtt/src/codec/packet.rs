//! The MQTT 3.1 / 3.1.1 control packets as typed values.
//!
//! Modelled on mqttbytes' v4 types, with two differences that matter to a broker: the
//! protocol level is kept (3.1 and 3.1.1 clients differ in small ways the session must
//! honour) and a PUBLISH packet identifier is an `Option`, present exactly when QoS > 0, so
//! a QoS 0 message cannot carry a stale identifier by mistake. MQTT 5 would add a level and
//! property fields; the enums here leave room for both.

use bytes::Bytes;

/// The protocol a client asked for in CONNECT (section 3.1.2.1 and 3.1.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolLevel {
    /// MQTT 3.1: protocol name "MQIsdp", level 3.
    V3_1,
    /// MQTT 3.1.1: protocol name "MQTT", level 4.
    V3_1_1,
}

impl ProtocolLevel {
    /// The protocol level byte.
    pub const fn level(self) -> u8 {
        match self {
            ProtocolLevel::V3_1 => 3,
            ProtocolLevel::V3_1_1 => 4,
        }
    }

    /// The protocol name CONNECT carries for this level.
    pub const fn name(self) -> &'static str {
        match self {
            ProtocolLevel::V3_1 => "MQIsdp",
            ProtocolLevel::V3_1_1 => "MQTT",
        }
    }

    /// The level for a protocol name and level byte, if we speak it. A mismatched pair
    /// ("MQTT" with 3) is refused, as Mosquitto and RabbitMQ do.
    pub fn from_name_and_level(name: &[u8], level: u8) -> Option<Self> {
        match (name, level) {
            (b"MQIsdp", 3) => Some(ProtocolLevel::V3_1),
            (b"MQTT", 4) => Some(ProtocolLevel::V3_1_1),
            _ => None,
        }
    }
}

/// Quality of service of a message (section 4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QoS {
    /// At most once: fire and forget.
    AtMostOnce = 0,
    /// At least once: PUBLISH, PUBACK.
    AtLeastOnce = 1,
    /// Exactly once: PUBLISH, PUBREC, PUBREL, PUBCOMP.
    ExactlyOnce = 2,
}

impl QoS {
    /// The QoS for its two-bit value; 3 is reserved and yields `None`.
    pub const fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(QoS::AtMostOnce),
            1 => Some(QoS::AtLeastOnce),
            2 => Some(QoS::ExactlyOnce),
            _ => None,
        }
    }

    /// The wire value.
    pub const fn as_u8(self) -> u8 {
        self as u8
    }
}

/// The kind of a control packet: the upper four bits of the first byte (section 2.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PacketType {
    /// Client request to connect.
    Connect = 1,
    /// Connect acknowledgment.
    ConnAck = 2,
    /// Publish message.
    Publish = 3,
    /// Publish acknowledgment (QoS 1).
    PubAck = 4,
    /// Publish received (QoS 2, part 1).
    PubRec = 5,
    /// Publish release (QoS 2, part 2).
    PubRel = 6,
    /// Publish complete (QoS 2, part 3).
    PubComp = 7,
    /// Subscribe request.
    Subscribe = 8,
    /// Subscribe acknowledgment.
    SubAck = 9,
    /// Unsubscribe request.
    Unsubscribe = 10,
    /// Unsubscribe acknowledgment.
    UnsubAck = 11,
    /// Ping request.
    PingReq = 12,
    /// Ping response.
    PingResp = 13,
    /// Client is disconnecting.
    Disconnect = 14,
}

impl PacketType {
    /// The type for the upper nibble of a first byte; 0 and 15 are reserved.
    pub const fn from_nibble(value: u8) -> Option<Self> {
        Some(match value {
            1 => PacketType::Connect,
            2 => PacketType::ConnAck,
            3 => PacketType::Publish,
            4 => PacketType::PubAck,
            5 => PacketType::PubRec,
            6 => PacketType::PubRel,
            7 => PacketType::PubComp,
            8 => PacketType::Subscribe,
            9 => PacketType::SubAck,
            10 => PacketType::Unsubscribe,
            11 => PacketType::UnsubAck,
            12 => PacketType::PingReq,
            13 => PacketType::PingResp,
            14 => PacketType::Disconnect,
            _ => return None,
        })
    }

    /// The packet's name as the spec writes it, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            PacketType::Connect => "CONNECT",
            PacketType::ConnAck => "CONNACK",
            PacketType::Publish => "PUBLISH",
            PacketType::PubAck => "PUBACK",
            PacketType::PubRec => "PUBREC",
            PacketType::PubRel => "PUBREL",
            PacketType::PubComp => "PUBCOMP",
            PacketType::Subscribe => "SUBSCRIBE",
            PacketType::SubAck => "SUBACK",
            PacketType::Unsubscribe => "UNSUBSCRIBE",
            PacketType::UnsubAck => "UNSUBACK",
            PacketType::PingReq => "PINGREQ",
            PacketType::PingResp => "PINGRESP",
            PacketType::Disconnect => "DISCONNECT",
        }
    }

    /// The fixed-header flags every packet but PUBLISH must carry (section 2.2.2, table
    /// 2.2): 0b0010 for PUBREL, SUBSCRIBE and UNSUBSCRIBE, 0 for the rest. `None` for
    /// PUBLISH, whose flags are DUP, QoS and RETAIN.
    pub const fn required_flags(self) -> Option<u8> {
        match self {
            PacketType::Publish => None,
            PacketType::PubRel | PacketType::Subscribe | PacketType::Unsubscribe => Some(0b0010),
            _ => Some(0),
        }
    }

    /// The remaining length of packets that have only one possible size: 2 for those that
    /// carry just a packet identifier (or CONNACK's two bytes), 0 for the empty ones.
    pub const fn fixed_remaining_length(self) -> Option<usize> {
        match self {
            PacketType::ConnAck
            | PacketType::PubAck
            | PacketType::PubRec
            | PacketType::PubRel
            | PacketType::PubComp
            | PacketType::UnsubAck => Some(2),
            PacketType::PingReq | PacketType::PingResp | PacketType::Disconnect => Some(0),
            _ => None,
        }
    }
}

/// One MQTT control packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// Client request to connect (section 3.1).
    Connect(Connect),
    /// Connect acknowledgment (section 3.2).
    ConnAck(ConnAck),
    /// Publish message (section 3.3).
    Publish(Publish),
    /// Publish acknowledgment (section 3.4).
    PubAck(PubAck),
    /// Publish received (section 3.5).
    PubRec(PubRec),
    /// Publish release (section 3.6).
    PubRel(PubRel),
    /// Publish complete (section 3.7).
    PubComp(PubComp),
    /// Subscribe request (section 3.8).
    Subscribe(Subscribe),
    /// Subscribe acknowledgment (section 3.9).
    SubAck(SubAck),
    /// Unsubscribe request (section 3.10).
    Unsubscribe(Unsubscribe),
    /// Unsubscribe acknowledgment (section 3.11).
    UnsubAck(UnsubAck),
    /// Ping request (section 3.12).
    PingReq,
    /// Ping response (section 3.13).
    PingResp,
    /// Client is disconnecting (section 3.14).
    Disconnect,
}

impl Packet {
    /// The packet's type.
    pub fn packet_type(&self) -> PacketType {
        match self {
            Packet::Connect(_) => PacketType::Connect,
            Packet::ConnAck(_) => PacketType::ConnAck,
            Packet::Publish(_) => PacketType::Publish,
            Packet::PubAck(_) => PacketType::PubAck,
            Packet::PubRec(_) => PacketType::PubRec,
            Packet::PubRel(_) => PacketType::PubRel,
            Packet::PubComp(_) => PacketType::PubComp,
            Packet::Subscribe(_) => PacketType::Subscribe,
            Packet::SubAck(_) => PacketType::SubAck,
            Packet::Unsubscribe(_) => PacketType::Unsubscribe,
            Packet::UnsubAck(_) => PacketType::UnsubAck,
            Packet::PingReq => PacketType::PingReq,
            Packet::PingResp => PacketType::PingResp,
            Packet::Disconnect => PacketType::Disconnect,
        }
    }
}

/// CONNECT (section 3.1).
///
/// MQTT 3.1 limited client identifiers to 23 bytes; that limit is not enforced, because
/// RabbitMQ and Mosquitto accept longer ones from 3.1 clients too. An empty client
/// identifier with `clean_session == false` is well-formed but must be refused by the
/// session with CONNACK 0x02 (MQTT-3.1.3-8), so the codec leaves it to the session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connect {
    /// MQTT 3.1 or 3.1.1.
    pub protocol: ProtocolLevel,
    /// Keep-alive interval in seconds; 0 turns the mechanism off (section 3.1.2.10).
    pub keep_alive: u16,
    /// The client identifier (section 3.1.3.1); may be empty in 3.1.1.
    pub client_id: String,
    /// Whether the session starts afresh and ends with the connection (section 3.1.2.4).
    pub clean_session: bool,
    /// The message to publish if the connection ends without a DISCONNECT.
    pub last_will: Option<LastWill>,
    /// User name, if the user name flag was set.
    pub username: Option<String>,
    /// Password, if the password flag was set. Binary data, not a string (section 3.1.3.5).
    /// In 3.1 a password may come without a user name; in 3.1.1 that is malformed.
    pub password: Option<Bytes>,
}

/// The will message of a CONNECT (section 3.1.2.5 to 3.1.2.7, 3.1.3.2, 3.1.3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastWill {
    /// The topic to publish the will to. Not validated by the codec: the session checks it
    /// with [`validate_topic_name`](super::validate_topic_name) and decides the reply.
    pub topic: String,
    /// The will payload, a zero-copy slice of the read buffer.
    pub message: Bytes,
    /// QoS of the will publication.
    pub qos: QoS,
    /// Whether the will is published retained.
    pub retain: bool,
}

/// CONNACK return codes (section 3.2.2.3, table 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectReturnCode {
    /// 0x00 Connection accepted.
    Accepted = 0,
    /// 0x01 The server does not support the protocol level the client asked for.
    UnacceptableProtocolVersion = 1,
    /// 0x02 The client identifier is well-formed UTF-8 but not allowed.
    IdentifierRejected = 2,
    /// 0x03 The network connection is up but the MQTT service is not.
    ServerUnavailable = 3,
    /// 0x04 The user name or password is malformed or wrong.
    BadUserNamePassword = 4,
    /// 0x05 The client is not authorized to connect.
    NotAuthorized = 5,
}

impl ConnectReturnCode {
    /// The return code for its wire value; 6..=255 are reserved.
    pub const fn from_u8(value: u8) -> Option<Self> {
        Some(match value {
            0 => ConnectReturnCode::Accepted,
            1 => ConnectReturnCode::UnacceptableProtocolVersion,
            2 => ConnectReturnCode::IdentifierRejected,
            3 => ConnectReturnCode::ServerUnavailable,
            4 => ConnectReturnCode::BadUserNamePassword,
            5 => ConnectReturnCode::NotAuthorized,
            _ => return None,
        })
    }
}

/// CONNACK (section 3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnAck {
    /// Whether the server resumed a stored session (3.1.1 only; MQTT 3.1 has no such bit
    /// and a 3.1 client must be sent `false`).
    pub session_present: bool,
    /// Accepted, or why not.
    pub code: ConnectReturnCode,
}

/// PUBLISH (section 3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// Set on a re-delivery of a QoS > 0 message (section 3.3.1.1).
    pub dup: bool,
    /// Quality of service.
    pub qos: QoS,
    /// Whether the server should keep the message as the topic's retained message.
    pub retain: bool,
    /// The topic name; decoding guarantees it is non-empty and has no wildcards.
    pub topic: String,
    /// The packet identifier: `Some` (and non-zero) exactly when `qos` is above 0.
    pub packet_id: Option<u16>,
    /// The application message, a zero-copy slice of the read buffer.
    pub payload: Bytes,
}

/// PUBACK (section 3.4): QoS 1 acknowledgment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PubAck {
    /// The identifier of the PUBLISH being acknowledged.
    pub packet_id: u16,
}

/// PUBREC (section 3.5): QoS 2, first acknowledgment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PubRec {
    /// The identifier of the PUBLISH being acknowledged.
    pub packet_id: u16,
}

/// PUBREL (section 3.6): QoS 2, release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PubRel {
    /// The identifier of the PUBLISH being released.
    pub packet_id: u16,
}

/// PUBCOMP (section 3.7): QoS 2, completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PubComp {
    /// The identifier of the PUBLISH being completed.
    pub packet_id: u16,
}

/// SUBSCRIBE (section 3.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscribe {
    /// Non-zero packet identifier, echoed in SUBACK.
    pub packet_id: u16,
    /// At least one topic filter with its requested QoS. Filters are valid UTF-8 but not
    /// otherwise checked: the session validates them with
    /// [`validate_topic_filter`](super::validate_topic_filter) and answers a bad one with
    /// a failure return code or by closing the connection.
    pub filters: Vec<(String, QoS)>,
}

/// One SUBACK return code (section 3.9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubscribeReturnCode {
    /// Subscribed with this maximum QoS (0x00, 0x01, 0x02).
    Success(QoS),
    /// The subscription was refused (0x80).
    Failure,
}

impl SubscribeReturnCode {
    /// The wire value.
    pub const fn as_u8(self) -> u8 {
        match self {
            SubscribeReturnCode::Success(qos) => qos as u8,
            SubscribeReturnCode::Failure => 0x80,
        }
    }

    /// The return code for its wire value; anything but 0, 1, 2 and 0x80 is reserved.
    pub const fn from_u8(value: u8) -> Option<Self> {
        match value {
            0x80 => Some(SubscribeReturnCode::Failure),
            _ => match QoS::from_u8(value) {
                Some(qos) => Some(SubscribeReturnCode::Success(qos)),
                None => None,
            },
        }
    }
}

/// SUBACK (section 3.9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubAck {
    /// The SUBSCRIBE's packet identifier.
    pub packet_id: u16,
    /// One return code per filter, in the SUBSCRIBE's order (MQTT-3.9.3-1).
    pub return_codes: Vec<SubscribeReturnCode>,
}

/// UNSUBSCRIBE (section 3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    /// Non-zero packet identifier, echoed in UNSUBACK.
    pub packet_id: u16,
    /// At least one topic filter to remove.
    pub topics: Vec<String>,
}

/// UNSUBACK (section 3.11).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnsubAck {
    /// The UNSUBSCRIBE's packet identifier.
    pub packet_id: u16,
}
