//! Sans-IO MQTT 3.1 / 3.1.1 / 5.0 codec: bytes in, typed packets out, and back. No sockets, no
//! tokio, no broker state.
//!
//! Data flow on a connection:
//!
//! 1. The driver appends what it reads to a `BytesMut` and calls [`decode`] until it returns
//!    `Ok(None)`. Each [`Packet`] is split off the buffer; PUBLISH payloads, will messages and
//!    passwords share the buffer's memory.
//! 2. The first packet must be a [`Connect`]; its [`ProtocolLevel`] tells MQTT 3.1
//!    ("MQIsdp", level 3) from 3.1.1 ("MQTT", level 4). MQTT 5 and anything else fails with
//!    [`DecodeError::UnsupportedProtocol`], which the session answers with CONNACK 0x01.
//! 3. The session checks topics with [`validate_topic_name`] / [`validate_topic_filter`],
//!    matches them with [`filter_matches`], and maps them onto the topic exchange with
//!    [`mqtt_topic_to_routing_key`], [`mqtt_filter_to_binding_key`] and back with
//!    [`routing_key_to_mqtt_topic`], as RabbitMQ does.
//! 4. Replies go out with [`encode`]; deliveries with [`encode_publish`], which writes a
//!    PUBLISH from borrowed parts.
//!
//! Validation follows the MQTT 3.1.1 spec strictly; each check cites its rule number
//! (`MQTT-x.y.z-n`) in a comment and in the error message. Errors are typed so the session
//! picks its reaction: [`DecodeError::UnsupportedProtocol`] gets a CONNACK, everything else
//! closes the connection. No input, however malformed, makes the codec panic; encoders
//! return [`EncodeError`] for packets the wire cannot carry or the spec forbids sending.

mod connect;
mod error;
mod frame;
mod packet;
mod properties;
mod publish;
pub mod reason;
mod subscribe;
mod topic;
mod wire;

pub use connect::connect_protocol;
pub use error::{DecodeError, EncodeError, StringProblem};
pub use frame::{decode, decode_with, encode, encode_with};
pub use packet::{
    ConnAck, Connect, ConnectReturnCode, LastWill, Packet, PacketType, ProtocolLevel, PubAck,
    PubComp, PubRec, PubRel, Publish, QoS, Reason, SubAck, Subscribe, SubscribeReturnCode,
    SubscriptionOptions, UnsubAck, Unsubscribe,
};
pub use properties::{Properties, PropertyContext};
pub use publish::{encode_publish, encode_publish_v5, publish_v5_size};
pub use topic::{
    binding_key_to_mqtt_filter, filter_matches, mqtt_filter_to_binding_key,
    mqtt_topic_to_routing_key, routing_key_to_mqtt_topic, validate_topic_filter,
    validate_topic_name, TopicError,
};
pub use wire::MAX_REMAINING_LENGTH;

#[cfg(test)]
mod oracle_tests;
#[cfg(test)]
pub(crate) mod prop_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod v5_tests;
