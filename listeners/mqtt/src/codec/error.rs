//! What can go wrong reading and writing MQTT packets.
//!
//! Every decode error ends the connection (MQTT-4.8.0-1: on a protocol violation the server
//! closes the network connection), except [`DecodeError::UnsupportedProtocol`], which the
//! server first answers with CONNACK return code 0x01 (MQTT-3.1.2-2). The variants are typed
//! so the session can tell these apart and log the message, which names the rule broken.

use std::borrow::Cow;
use std::fmt;

use super::packet::ConnectReturnCode;

/// What is wrong with a UTF-8 encoded string field (MQTT 3.1.1 section 1.5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StringProblem {
    /// The bytes are not well-formed UTF-8 (MQTT-1.5.3-1).
    NotUtf8,
    /// The string contains U+0000 (MQTT-1.5.3-2).
    ContainsNul,
}

/// A packet the peer should not have sent. After any of these the byte stream cannot be
/// trusted to be in sync any more, so the connection must be closed; what is left in the
/// read buffer is unspecified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes break the MQTT 3.1.1 grammar or one of its MUSTs; the message says which,
    /// with the spec's rule number. Static on every path where the text needs no values, so
    /// that most errors cost no allocation.
    Malformed(Cow<'static, str>),
    /// The packet's remaining length is larger than the configured maximum. Reported as soon
    /// as the fixed header is read, before the body is buffered.
    TooLarge {
        /// The remaining length the fixed header announced.
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A CONNECT for a protocol we do not speak: any protocol name and level other than
    /// "MQIsdp"/3, "MQTT"/4 and "MQTT"/5. Answer CONNACK 0x01 and close
    /// (MQTT-3.1.2-2).
    UnsupportedProtocol {
        /// The protocol level byte.
        level: u8,
        /// The protocol name, with invalid UTF-8 replaced, for the log.
        name: String,
    },
    /// An MQTT 5 rule broken that the spec answers with a reason code of its own rather than
    /// "malformed packet": a duplicate property or a value out of range (0x82 protocol
    /// error), topic alias 0 (0x94 topic alias invalid).
    Protocol {
        /// The MQTT 5 reason code to send in CONNACK or DISCONNECT.
        code: u8,
        /// What is wrong, for the log and the reason string.
        message: Cow<'static, str>,
    },
    /// A UTF-8 string field that is not valid UTF-8 or contains U+0000; the spec makes the
    /// receiver close the connection (MQTT-1.5.3-1, MQTT-1.5.3-2).
    InvalidUtf8 {
        /// Which field, e.g. "client identifier" or "topic name".
        field: &'static str,
        /// What is wrong with it.
        problem: StringProblem,
    },
}

impl DecodeError {
    /// A malformed-packet error with a fixed message.
    pub const fn malformed(message: &'static str) -> Self {
        DecodeError::Malformed(Cow::Borrowed(message))
    }

    /// The CONNACK return code to send before closing, if the error calls for one; `None`
    /// means close the connection without a reply.
    pub fn connack_code(&self) -> Option<ConnectReturnCode> {
        match self {
            DecodeError::UnsupportedProtocol { .. } => {
                Some(ConnectReturnCode::UnacceptableProtocolVersion)
            }
            _ => None,
        }
    }

    /// The MQTT 5 reason code for this error, for the CONNACK or DISCONNECT an MQTT 5 client
    /// is sent before the connection closes (section 4.13 of MQTT 5).
    pub fn reason_code(&self) -> u8 {
        match self {
            DecodeError::Malformed(_) | DecodeError::InvalidUtf8 { .. } => {
                super::reason::MALFORMED_PACKET
            }
            DecodeError::TooLarge { .. } => super::reason::PACKET_TOO_LARGE,
            DecodeError::UnsupportedProtocol { .. } => super::reason::UNSUPPORTED_PROTOCOL_VERSION,
            DecodeError::Protocol { code, .. } => *code,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Malformed(message) => write!(f, "malformed packet: {message}"),
            DecodeError::TooLarge { size, max } => write!(
                f,
                "packet too large: remaining length of {size} bytes exceeds the maximum of \
                 {max} bytes"
            ),
            DecodeError::UnsupportedProtocol { level, name } => write!(
                f,
                "unsupported protocol {name:?} level {level}: expected \"MQTT\" level 4 \
                 (MQTT 3.1.1), \"MQTT\" level 5 (MQTT 5.0) or \"MQIsdp\" level 3 (MQTT 3.1)"
            ),
            DecodeError::Protocol { code, message } => {
                write!(f, "protocol error (reason code {code:#04x}): {message}")
            }
            DecodeError::InvalidUtf8 {
                field,
                problem: StringProblem::NotUtf8,
            } => write!(f, "{field} is not valid UTF-8 (MQTT-1.5.3-1)"),
            DecodeError::InvalidUtf8 {
                field,
                problem: StringProblem::ContainsNul,
            } => write!(
                f,
                "{field} contains the null character U+0000 (MQTT-1.5.3-2)"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// A packet that cannot be written: a value the wire cannot carry, or a packet the spec
/// forbids sending. Nothing is written to the output buffer when this is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// A string or binary field longer than 65535 bytes, the most a 16-bit length prefix
    /// can announce.
    StringTooLong {
        /// Which field.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
    /// The packet's remaining length would exceed 268435455, the most four bytes of
    /// variable-length encoding can carry (section 2.2.3).
    TooLarge {
        /// The remaining length the packet would need.
        size: usize,
    },
    /// The packet breaks a rule of the spec, e.g. a packet identifier of 0.
    Invalid(&'static str),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::StringTooLong { field, len } => {
                write!(f, "{field} of {len} bytes is longer than 65535 bytes")
            }
            EncodeError::TooLarge { size } => write!(
                f,
                "packet remaining length of {size} bytes exceeds the protocol maximum of \
                 268435455 bytes"
            ),
            EncodeError::Invalid(message) => write!(f, "cannot encode packet: {message}"),
        }
    }
}

impl std::error::Error for EncodeError {}
