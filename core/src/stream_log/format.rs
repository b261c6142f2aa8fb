//! How a stream keeps the messages published to it through the core (AMQP 0-9-1, STOMP,
//! MQTT, the HTTP API) and hands them back to the core's consumers.
//!
//! A stream's records are AMQP 1.0 messages, as stream protocol clients write and read them,
//! so a record reads the same whichever protocol wrote it. The core knows no protocol: the
//! encoding is the AMQP 1.0 listener's message mapping, which the server installs with
//! [`crate::store::Durability::set_stream_format`].

use bytes::Bytes;

use crate::message::Message;

/// Encodes core messages as stream records and decodes records back.
pub trait MessageFormat: Send + Sync {
    /// The record for `message` (its exchange and routing key included, so a consumer sees
    /// where it was published).
    fn encode(&self, message: &Message) -> Bytes;

    /// The message a record holds; an error when the record is not a message of the format
    /// (a stream client may write any bytes).
    fn decode(&self, record: Bytes) -> Result<Message, String>;
}
