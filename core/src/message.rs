//! The one message type every listener produces and consumes.
//!
//! A message is routed once and stored once: fan-out to N queues shares one `Arc<Message>`
//! whose body is a reference-counted `Bytes`. Properties are the AMQP 0-9-1 basic properties
//! (the superset the other protocols map onto; see docs/protocol-mapping.md). The AMQP 0-9-1
//! listener also keeps the properties exactly as they arrived on the wire, so that a delivery
//! to an AMQP 0-9-1 consumer copies those bytes instead of re-encoding them.

use std::sync::Arc;

use bytes::Bytes;

use crate::value::Table;

/// The fourteen AMQP basic properties. Every field is optional, as on the wire.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Properties {
    pub content_type: Option<String>,
    pub content_encoding: Option<String>,
    pub headers: Option<Table>,
    /// 1 = transient, 2 = persistent.
    pub delivery_mode: Option<u8>,
    pub priority: Option<u8>,
    pub correlation_id: Option<String>,
    pub reply_to: Option<String>,
    /// Per-message TTL in milliseconds, as a decimal string.
    pub expiration: Option<String>,
    pub message_id: Option<String>,
    /// Seconds since the Unix epoch.
    pub timestamp: Option<u64>,
    /// The `type` property.
    pub message_type: Option<String>,
    pub user_id: Option<String>,
    pub app_id: Option<String>,
    pub cluster_id: Option<String>,
}

impl Properties {
    /// Whether the publisher asked for the message to survive a broker restart.
    pub fn is_persistent(&self) -> bool {
        self.delivery_mode == Some(2)
    }

    /// The per-message TTL from `expiration`, if it is a valid one.
    pub fn expiration_ms(&self) -> Option<u64> {
        self.expiration
            .as_deref()
            .and_then(|e| parse_expiration(e).ok())
    }
}

/// Parses an `expiration` property: milliseconds as a non-negative decimal integer. The error
/// is the text RabbitMQ puts after "invalid expiration".
pub fn parse_expiration(text: &str) -> Result<u64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "invalid expiration '{text}': expected a non-negative integer of milliseconds"
        ));
    }
    text.parse::<u64>()
        .map_err(|_| format!("invalid expiration '{text}': too large"))
}

/// A published message: where it was published to, its properties and its body.
#[derive(Debug, Clone)]
pub struct Message {
    /// The exchange the message was published to (empty for the default exchange). Shared:
    /// a listener hands every message of a publisher the same allocation while the name
    /// does not change.
    pub exchange: Arc<str>,
    /// The routing key it was published with; shared like `exchange`.
    pub routing_key: Arc<str>,
    /// Decoded properties.
    pub properties: Properties,
    /// The properties as an AMQP 0-9-1 content header carried them (property flags and
    /// property list), when they are known to equal `properties`. Lets the 0-9-1 listener
    /// deliver without re-encoding. `None` when the message came from another protocol.
    pub encoded_properties: Option<Bytes>,
    /// The body; shared, never copied, across every queue the message is routed to.
    pub body: Bytes,
}

impl Message {
    /// A copy without the `BCC` header, when the message has one: BCC keys route the
    /// message but are never delivered.
    pub fn without_bcc(&self) -> Option<Message> {
        let headers = self.properties.headers.as_ref()?;
        headers.get("BCC")?;
        let mut copy = self.clone();
        if let Some(headers) = copy.properties.headers.as_mut() {
            headers.remove("BCC");
        }
        copy.encoded_properties = None;
        Some(copy)
    }
}
