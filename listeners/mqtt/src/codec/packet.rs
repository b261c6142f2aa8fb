//! The MQTT 3.1 / 3.1.1 / 5.0 control packets as typed values.
//!
//! Modelled on mqttbytes' v4 types, with two differences that matter to a broker: the
//! protocol level is kept (3.1 and 3.1.1 clients differ in small ways the session must
//! honour) and a PUBLISH packet identifier is an `Option`, present exactly when QoS > 0, so
//! a QoS 0 message cannot carry a stale identifier by mistake.
//!
//! MQTT 5 shares the packets: its reason codes and [`Properties`] are extra fields, which a
//! 3.1/3.1.1 encoding ignores and a 3.1/3.1.1 decoding leaves at their defaults (reason code
//! 0, no properties). Properties are boxed and `None` when empty, so a packet without them
//! costs one pointer.

use bytes::Bytes;

pub use super::properties::Properties;

/// The protocol a client asked for in CONNECT (section 3.1.2.1 and 3.1.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProtocolLevel {
    /// MQTT 3.1: protocol name "MQIsdp", level 3.
    V3_1,
    /// MQTT 3.1.1: protocol name "MQTT", level 4.
    V3_1_1,
    /// MQTT 5.0: protocol name "MQTT", level 5.
    V5,
}

impl ProtocolLevel {
    /// The protocol level byte.
    pub const fn level(self) -> u8 {
        match self {
            ProtocolLevel::V3_1 => 3,
            ProtocolLevel::V3_1_1 => 4,
            ProtocolLevel::V5 => 5,
        }
    }

    /// The protocol name CONNECT carries for this level.
    pub const fn name(self) -> &'static str {
        match self {
            ProtocolLevel::V3_1 => "MQIsdp",
            ProtocolLevel::V3_1_1 | ProtocolLevel::V5 => "MQTT",
        }
    }

    /// Whether this is MQTT 5, whose packets carry reason codes and properties.
    pub const fn is_v5(self) -> bool {
        matches!(self, ProtocolLevel::V5)
    }

    /// The level for a protocol name and level byte, if we speak it. A mismatched pair
    /// ("MQTT" with 3) is refused, as Mosquitto and RabbitMQ do.
    pub fn from_name_and_level(name: &[u8], level: u8) -> Option<Self> {
        match (name, level) {
            (b"MQIsdp", 3) => Some(ProtocolLevel::V3_1),
            (b"MQTT", 4) => Some(ProtocolLevel::V3_1_1),
            (b"MQTT", 5) => Some(ProtocolLevel::V5),
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
    /// Client or (MQTT 5) server is disconnecting.
    Disconnect = 14,
    /// MQTT 5 enhanced authentication exchange (reserved in 3.1.1).
    Auth = 15,
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
            15 => PacketType::Auth,
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
            PacketType::Auth => "AUTH",
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
    /// Client or server is disconnecting (section 3.14); MQTT 5 adds a reason.
    Disconnect(Reason),
    /// MQTT 5 authentication exchange (section 3.15 of MQTT 5).
    Auth(Reason),
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
            Packet::Disconnect(_) => PacketType::Disconnect,
            Packet::Auth(_) => PacketType::Auth,
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
    /// In MQTT 5 this bit is "clean start": the session starts afresh, and how long it
    /// outlives the connection is the session expiry interval property.
    pub clean_session: bool,
    /// The message to publish if the connection ends without a DISCONNECT.
    pub last_will: Option<LastWill>,
    /// User name, if the user name flag was set.
    pub username: Option<String>,
    /// Password, if the password flag was set. Binary data, not a string (section 3.1.3.5).
    /// In 3.1 and 5 a password may come without a user name; in 3.1.1 that is malformed.
    pub password: Option<Bytes>,
    /// MQTT 5 CONNECT properties.
    pub properties: Option<Box<Properties>>,
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
    /// MQTT 5 will properties (will delay, message expiry, content type, ...).
    pub properties: Option<Box<Properties>>,
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
    /// The MQTT 5 reason code that means the same (section 3.2.2.2 of MQTT 5).
    pub const fn reason_code(self) -> u8 {
        use super::reason;
        match self {
            ConnectReturnCode::Accepted => reason::SUCCESS,
            ConnectReturnCode::UnacceptableProtocolVersion => reason::UNSUPPORTED_PROTOCOL_VERSION,
            ConnectReturnCode::IdentifierRejected => reason::CLIENT_IDENTIFIER_NOT_VALID,
            ConnectReturnCode::ServerUnavailable => reason::SERVER_UNAVAILABLE,
            ConnectReturnCode::BadUserNamePassword => reason::BAD_USER_NAME_OR_PASSWORD,
            ConnectReturnCode::NotAuthorized => reason::NOT_AUTHORIZED,
        }
    }

    /// The 3.1.1 return code closest to an MQTT 5 reason code, for decoding a v5 CONNACK.
    pub const fn from_reason_code(code: u8) -> Self {
        use super::reason;
        match code {
            reason::SUCCESS => ConnectReturnCode::Accepted,
            reason::UNSUPPORTED_PROTOCOL_VERSION => ConnectReturnCode::UnacceptableProtocolVersion,
            reason::CLIENT_IDENTIFIER_NOT_VALID => ConnectReturnCode::IdentifierRejected,
            reason::BAD_USER_NAME_OR_PASSWORD | reason::BAD_AUTHENTICATION_METHOD => {
                ConnectReturnCode::BadUserNamePassword
            }
            reason::NOT_AUTHORIZED | reason::BANNED => ConnectReturnCode::NotAuthorized,
            _ => ConnectReturnCode::ServerUnavailable,
        }
    }
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnAck {
    /// Whether the server resumed a stored session (3.1.1 only; MQTT 3.1 has no such bit
    /// and a 3.1 client must be sent `false`).
    pub session_present: bool,
    /// Accepted, or why not.
    pub code: ConnectReturnCode,
    /// MQTT 5: the reason code to send instead of `code`'s, for reasons 3.1.1 has no code
    /// for (0x95 packet too large, 0x81 malformed packet, ...). `None`: `code`'s.
    pub reason_code: Option<u8>,
    /// MQTT 5 CONNACK properties.
    pub properties: Option<Box<Properties>>,
}

impl ConnAck {
    /// A CONNACK with `code` and no MQTT 5 extras.
    pub fn new(session_present: bool, code: ConnectReturnCode) -> ConnAck {
        ConnAck {
            session_present,
            code,
            reason_code: None,
            properties: None,
        }
    }

    /// The MQTT 5 reason code this CONNACK carries.
    pub fn v5_reason_code(&self) -> u8 {
        self.reason_code.unwrap_or(self.code.reason_code())
    }
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
    /// MQTT 5 PUBLISH properties. A decoded MQTT 5 PUBLISH may have an empty `topic` when
    /// these carry a topic alias; the session resolves it.
    pub properties: Option<Box<Properties>>,
}

/// PUBACK (section 3.4): QoS 1 acknowledgment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubAck {
    /// The packet identifier of the exchange.
    pub packet_id: u16,
    /// MQTT 5 reason code (0: success); 3.1.1 has none.
    pub reason_code: u8,
    /// MQTT 5 properties (reason string, user properties).
    pub properties: Option<Box<Properties>>,
}

impl PubAck {
    /// A successful PUBACK for `packet_id`, without MQTT 5 extras.
    pub const fn new(packet_id: u16) -> PubAck {
        PubAck {
            packet_id,
            reason_code: 0,
            properties: None,
        }
    }
}

/// PUBREC (section 3.5): QoS 2, first acknowledgment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubRec {
    /// The packet identifier of the exchange.
    pub packet_id: u16,
    /// MQTT 5 reason code (0: success); 3.1.1 has none.
    pub reason_code: u8,
    /// MQTT 5 properties (reason string, user properties).
    pub properties: Option<Box<Properties>>,
}

impl PubRec {
    /// A successful PUBREC for `packet_id`, without MQTT 5 extras.
    pub const fn new(packet_id: u16) -> PubRec {
        PubRec {
            packet_id,
            reason_code: 0,
            properties: None,
        }
    }
}

/// PUBREL (section 3.6): QoS 2, release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubRel {
    /// The packet identifier of the exchange.
    pub packet_id: u16,
    /// MQTT 5 reason code (0: success); 3.1.1 has none.
    pub reason_code: u8,
    /// MQTT 5 properties (reason string, user properties).
    pub properties: Option<Box<Properties>>,
}

impl PubRel {
    /// A successful PUBREL for `packet_id`, without MQTT 5 extras.
    pub const fn new(packet_id: u16) -> PubRel {
        PubRel {
            packet_id,
            reason_code: 0,
            properties: None,
        }
    }
}

/// PUBCOMP (section 3.7): QoS 2, completion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PubComp {
    /// The packet identifier of the exchange.
    pub packet_id: u16,
    /// MQTT 5 reason code (0: success); 3.1.1 has none.
    pub reason_code: u8,
    /// MQTT 5 properties (reason string, user properties).
    pub properties: Option<Box<Properties>>,
}

impl PubComp {
    /// A successful PUBCOMP for `packet_id`, without MQTT 5 extras.
    pub const fn new(packet_id: u16) -> PubComp {
        PubComp {
            packet_id,
            reason_code: 0,
            properties: None,
        }
    }
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
    /// MQTT 5 subscription options, one per filter in `filters`' order; empty for 3.1.1.
    pub options: Vec<SubscriptionOptions>,
    /// MQTT 5 properties (subscription identifier, user properties).
    pub properties: Option<Box<Properties>>,
}

/// The MQTT 5 subscription options besides the QoS (section 3.8.3.1 of MQTT 5).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SubscriptionOptions {
    /// Do not deliver the client's own publishes to it.
    pub no_local: bool,
    /// Deliver with the RETAIN flag as published, not cleared.
    pub retain_as_published: bool,
    /// 0: send retained messages on subscribe; 1: only if the subscription is new; 2: never.
    pub retain_handling: u8,
}

/// One SUBACK return code (section 3.9.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubscribeReturnCode {
    /// Subscribed with this maximum QoS (0x00, 0x01, 0x02).
    Success(QoS),
    /// The subscription was refused (0x80).
    Failure,
    /// MQTT 5: refused for a reason with its own code (0x87 not authorized, 0x8F topic
    /// filter invalid, 0x9E, 0xA1, 0xA2, ...). A 3.1.1 SUBACK writes it as 0x80.
    Refused(u8),
}

impl SubscribeReturnCode {
    /// The wire value.
    pub const fn as_u8(self) -> u8 {
        match self {
            SubscribeReturnCode::Success(qos) => qos as u8,
            SubscribeReturnCode::Failure => 0x80,
            SubscribeReturnCode::Refused(code) => code,
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
    /// MQTT 5 properties (reason string, user properties).
    pub properties: Option<Box<Properties>>,
}

/// UNSUBSCRIBE (section 3.10).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsubscribe {
    /// Non-zero packet identifier, echoed in UNSUBACK.
    pub packet_id: u16,
    /// At least one topic filter to remove.
    pub topics: Vec<String>,
    /// MQTT 5 properties (user properties).
    pub properties: Option<Box<Properties>>,
}

/// UNSUBACK (section 3.11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnsubAck {
    /// The UNSUBSCRIBE's packet identifier.
    pub packet_id: u16,
    /// MQTT 5: one reason code per filter, in the UNSUBSCRIBE's order; empty for 3.1.1.
    pub reason_codes: Vec<u8>,
    /// MQTT 5 properties (reason string, user properties).
    pub properties: Option<Box<Properties>>,
}

impl UnsubAck {
    /// An UNSUBACK without MQTT 5 extras.
    pub const fn new(packet_id: u16) -> UnsubAck {
        UnsubAck {
            packet_id,
            reason_codes: Vec::new(),
            properties: None,
        }
    }
}

/// The reason and properties of an MQTT 5 DISCONNECT or AUTH. `Default` is a normal
/// disconnection without properties, the only DISCONNECT 3.1.1 has.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reason {
    /// The reason code (0: normal disconnection / success).
    pub code: u8,
    /// Properties (reason string, session expiry interval, server reference, ...).
    pub properties: Option<Box<Properties>>,
}

impl Reason {
    /// A reason code with a reason string.
    pub fn with_string(code: u8, reason_string: impl Into<String>) -> Reason {
        Reason {
            code,
            properties: Some(Box::new(Properties {
                reason_string: Some(reason_string.into()),
                ..Properties::default()
            })),
        }
    }
}
