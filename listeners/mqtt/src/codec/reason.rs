//! MQTT 5 reason codes (section 2.4 of MQTT 5.0): one byte in CONNACK, PUBACK, PUBREC,
//! PUBREL, PUBCOMP, SUBACK, UNSUBACK, DISCONNECT and AUTH. Below 0x80 is success, 0x80 and
//! above is failure. Plain `u8` constants: the same value means different things in
//! different packets (0x00 is "granted QoS 0" in SUBACK and "normal disconnection" in
//! DISCONNECT), so one enum would have to name it twice.

/// Success; normal disconnection; granted QoS 0.
pub const SUCCESS: u8 = 0x00;
/// SUBACK: granted QoS 1.
pub const GRANTED_QOS_1: u8 = 0x01;
/// SUBACK: granted QoS 2.
pub const GRANTED_QOS_2: u8 = 0x02;
/// DISCONNECT from the client: publish the will anyway.
pub const DISCONNECT_WITH_WILL: u8 = 0x04;
/// PUBACK/PUBREC: accepted, but no subscriber matched.
pub const NO_MATCHING_SUBSCRIBERS: u8 = 0x10;
/// UNSUBACK: there was no such subscription.
pub const NO_SUBSCRIPTION_EXISTED: u8 = 0x11;
/// AUTH: continue authentication.
pub const CONTINUE_AUTHENTICATION: u8 = 0x18;
/// Unspecified error.
pub const UNSPECIFIED_ERROR: u8 = 0x80;
/// Malformed packet.
pub const MALFORMED_PACKET: u8 = 0x81;
/// Protocol error.
pub const PROTOCOL_ERROR: u8 = 0x82;
/// Implementation specific error.
pub const IMPLEMENTATION_SPECIFIC_ERROR: u8 = 0x83;
/// CONNACK: unsupported protocol version.
pub const UNSUPPORTED_PROTOCOL_VERSION: u8 = 0x84;
/// CONNACK: client identifier not valid.
pub const CLIENT_IDENTIFIER_NOT_VALID: u8 = 0x85;
/// CONNACK: bad user name or password.
pub const BAD_USER_NAME_OR_PASSWORD: u8 = 0x86;
/// Not authorized.
pub const NOT_AUTHORIZED: u8 = 0x87;
/// CONNACK: server unavailable.
pub const SERVER_UNAVAILABLE: u8 = 0x88;
/// Server busy.
pub const SERVER_BUSY: u8 = 0x89;
/// CONNACK: banned.
pub const BANNED: u8 = 0x8A;
/// DISCONNECT: server shutting down.
pub const SERVER_SHUTTING_DOWN: u8 = 0x8B;
/// Bad authentication method.
pub const BAD_AUTHENTICATION_METHOD: u8 = 0x8C;
/// DISCONNECT: keep-alive timeout.
pub const KEEP_ALIVE_TIMEOUT: u8 = 0x8D;
/// DISCONNECT: another connection took over the session.
pub const SESSION_TAKEN_OVER: u8 = 0x8E;
/// SUBACK/UNSUBACK: topic filter invalid.
pub const TOPIC_FILTER_INVALID: u8 = 0x8F;
/// PUBACK/PUBREC/DISCONNECT: topic name invalid.
pub const TOPIC_NAME_INVALID: u8 = 0x90;
/// Packet identifier in use.
pub const PACKET_IDENTIFIER_IN_USE: u8 = 0x91;
/// PUBREL/PUBCOMP: packet identifier not found.
pub const PACKET_IDENTIFIER_NOT_FOUND: u8 = 0x92;
/// DISCONNECT: the client sent more QoS 1/2 publishes than the receive maximum allows.
pub const RECEIVE_MAXIMUM_EXCEEDED: u8 = 0x93;
/// DISCONNECT: topic alias 0, or above the topic alias maximum.
pub const TOPIC_ALIAS_INVALID: u8 = 0x94;
/// Packet too large.
pub const PACKET_TOO_LARGE: u8 = 0x95;
/// Message rate too high.
pub const MESSAGE_RATE_TOO_HIGH: u8 = 0x96;
/// Quota exceeded.
pub const QUOTA_EXCEEDED: u8 = 0x97;
/// DISCONNECT: administrative action.
pub const ADMINISTRATIVE_ACTION: u8 = 0x98;
/// Payload format invalid (payload format indicator 1 with a payload that is not UTF-8).
pub const PAYLOAD_FORMAT_INVALID: u8 = 0x99;
/// Retain not supported.
pub const RETAIN_NOT_SUPPORTED: u8 = 0x9A;
/// QoS not supported.
pub const QOS_NOT_SUPPORTED: u8 = 0x9B;
/// Use another server.
pub const USE_ANOTHER_SERVER: u8 = 0x9C;
/// Server moved.
pub const SERVER_MOVED: u8 = 0x9D;
/// Shared subscriptions not supported.
pub const SHARED_SUBSCRIPTIONS_NOT_SUPPORTED: u8 = 0x9E;
/// Connection rate exceeded.
pub const CONNECTION_RATE_EXCEEDED: u8 = 0x9F;
/// Maximum connect time.
pub const MAXIMUM_CONNECT_TIME: u8 = 0xA0;
/// Subscription identifiers not supported.
pub const SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED: u8 = 0xA1;
/// Wildcard subscriptions not supported.
pub const WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED: u8 = 0xA2;

/// Whether `code` is a reason code MQTT 5 defines for `packet` (tables in sections 3.2.2.2,
/// 3.4.2.1 to 3.7.2.1, 3.9.3, 3.11.3, 3.14.2.1, 3.15.2.1). Decoding refuses the others as
/// malformed.
pub fn valid_for(packet: super::PacketType, code: u8) -> bool {
    use super::PacketType as T;
    match packet {
        T::ConnAck => {
            matches!(code, 0x00 | 0x80..=0x8A | 0x8C | 0x90 | 0x95 | 0x97 | 0x99..=0x9D | 0x9F)
        }
        T::PubAck | T::PubRec => {
            matches!(
                code,
                0x00 | 0x10 | 0x80 | 0x83 | 0x87 | 0x90 | 0x91 | 0x97 | 0x99
            )
        }
        T::PubRel | T::PubComp => matches!(code, 0x00 | 0x92),
        T::SubAck => matches!(
            code,
            0x00..=0x02 | 0x80 | 0x83 | 0x87 | 0x8F | 0x91 | 0x97 | 0x9E | 0xA1 | 0xA2
        ),
        T::UnsubAck => matches!(code, 0x00 | 0x11 | 0x80 | 0x83 | 0x87 | 0x8F | 0x91),
        T::Disconnect => matches!(
            code,
            0x00 | 0x04 | 0x80..=0x83 | 0x87 | 0x89 | 0x8B | 0x8D | 0x8E..=0x8F | 0x90
                | 0x93..=0x9A | 0x9B..=0xA2
        ),
        T::Auth => matches!(code, 0x00 | 0x18 | 0x19),
        _ => false,
    }
}
