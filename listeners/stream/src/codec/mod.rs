//! The stream protocol's wire format (RabbitMQ's `deps/rabbitmq_stream/docs/PROTOCOL.adoc`),
//! sans-IO: [`split_frame`] cuts size-prefixed frames out of a buffer, [`decode`] turns a
//! frame into a [`Request`], and `encode` writes the server's frames.
//!
//! All integers are big-endian; a string is an `i16` length then UTF-8 (-1 is null); bytes
//! are an `i32` length then the bytes; an array is an `i32` count then its items.

mod decode;
pub mod encode;

pub use decode::{decode, DecodeError};

use bytes::{Buf, Bytes, BytesMut};

/// Command keys (a response has the top bit set).
pub mod key {
    #![allow(missing_docs)]
    pub const DECLARE_PUBLISHER: u16 = 0x0001;
    pub const PUBLISH: u16 = 0x0002;
    pub const PUBLISH_CONFIRM: u16 = 0x0003;
    pub const PUBLISH_ERROR: u16 = 0x0004;
    pub const QUERY_PUBLISHER_SEQUENCE: u16 = 0x0005;
    pub const DELETE_PUBLISHER: u16 = 0x0006;
    pub const SUBSCRIBE: u16 = 0x0007;
    pub const DELIVER: u16 = 0x0008;
    pub const CREDIT: u16 = 0x0009;
    pub const STORE_OFFSET: u16 = 0x000a;
    pub const QUERY_OFFSET: u16 = 0x000b;
    pub const UNSUBSCRIBE: u16 = 0x000c;
    pub const CREATE: u16 = 0x000d;
    pub const DELETE: u16 = 0x000e;
    pub const METADATA: u16 = 0x000f;
    pub const METADATA_UPDATE: u16 = 0x0010;
    pub const PEER_PROPERTIES: u16 = 0x0011;
    pub const SASL_HANDSHAKE: u16 = 0x0012;
    pub const SASL_AUTHENTICATE: u16 = 0x0013;
    pub const TUNE: u16 = 0x0014;
    pub const OPEN: u16 = 0x0015;
    pub const CLOSE: u16 = 0x0016;
    pub const HEARTBEAT: u16 = 0x0017;
    pub const ROUTE: u16 = 0x0018;
    pub const PARTITIONS: u16 = 0x0019;
    pub const CONSUMER_UPDATE: u16 = 0x001a;
    pub const EXCHANGE_COMMAND_VERSIONS: u16 = 0x001b;
    pub const STREAM_STATS: u16 = 0x001c;
    pub const CREATE_SUPER_STREAM: u16 = 0x001d;
    pub const DELETE_SUPER_STREAM: u16 = 0x001e;
    pub const RESOLVE_OFFSET_SPEC: u16 = 0x001f;
    /// The bit that marks a response.
    pub const RESPONSE: u16 = 0x8000;
}

/// Response codes.
pub mod code {
    #![allow(missing_docs)]
    pub const OK: u16 = 0x01;
    pub const STREAM_DOES_NOT_EXIST: u16 = 0x02;
    pub const SUBSCRIPTION_ID_ALREADY_EXISTS: u16 = 0x03;
    pub const SUBSCRIPTION_ID_DOES_NOT_EXIST: u16 = 0x04;
    pub const STREAM_ALREADY_EXISTS: u16 = 0x05;
    pub const STREAM_NOT_AVAILABLE: u16 = 0x06;
    pub const SASL_MECHANISM_NOT_SUPPORTED: u16 = 0x07;
    pub const AUTHENTICATION_FAILURE: u16 = 0x08;
    pub const SASL_ERROR: u16 = 0x09;
    pub const SASL_CHALLENGE: u16 = 0x0a;
    pub const AUTHENTICATION_FAILURE_LOOPBACK: u16 = 0x0b;
    pub const VIRTUAL_HOST_ACCESS_FAILURE: u16 = 0x0c;
    pub const UNKNOWN_FRAME: u16 = 0x0d;
    pub const FRAME_TOO_LARGE: u16 = 0x0e;
    pub const INTERNAL_ERROR: u16 = 0x0f;
    pub const ACCESS_REFUSED: u16 = 0x10;
    pub const PRECONDITION_FAILED: u16 = 0x11;
    pub const PUBLISHER_DOES_NOT_EXIST: u16 = 0x12;
    pub const NO_OFFSET: u16 = 0x13;
}

/// Where a subscription starts (`Subscribe`, `ResolveOffsetSpec`, `ConsumerUpdate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpecification {
    /// 1: the first record kept.
    First,
    /// 2: the newest chunk.
    Last,
    /// 3: what is published from now on.
    Next,
    /// 4: an offset.
    Offset(u64),
    /// 5: a timestamp (ms since the epoch).
    Timestamp(i64),
}

/// One message of a `Publish`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedMessage {
    /// The publisher's id for it.
    pub publishing_id: u64,
    /// Its filter value (version 2 only).
    pub filter_value: Option<String>,
    /// The message (an AMQP 1.0 message, kept as bytes).
    pub message: Bytes,
}

/// A frame from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Request {
    DeclarePublisher {
        correlation_id: u32,
        publisher_id: u8,
        reference: Option<String>,
        stream: String,
    },
    Publish {
        version: u16,
        publisher_id: u8,
        messages: Vec<PublishedMessage>,
    },
    QueryPublisherSequence {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    DeletePublisher {
        correlation_id: u32,
        publisher_id: u8,
    },
    Subscribe {
        correlation_id: u32,
        subscription_id: u8,
        stream: String,
        offset: OffsetSpecification,
        credit: u16,
        properties: Vec<(String, String)>,
    },
    Credit {
        subscription_id: u8,
        credit: u16,
    },
    StoreOffset {
        reference: String,
        stream: String,
        offset: u64,
    },
    QueryOffset {
        correlation_id: u32,
        reference: String,
        stream: String,
    },
    Unsubscribe {
        correlation_id: u32,
        subscription_id: u8,
    },
    Create {
        correlation_id: u32,
        stream: String,
        arguments: Vec<(String, String)>,
    },
    Delete {
        correlation_id: u32,
        stream: String,
    },
    Metadata {
        correlation_id: u32,
        streams: Vec<String>,
    },
    PeerProperties {
        correlation_id: u32,
        properties: Vec<(String, String)>,
    },
    SaslHandshake {
        correlation_id: u32,
    },
    SaslAuthenticate {
        correlation_id: u32,
        mechanism: String,
        data: Bytes,
    },
    /// The client's answer to the server's Tune.
    Tune {
        frame_max: u32,
        heartbeat: u32,
    },
    Open {
        correlation_id: u32,
        vhost: String,
    },
    Close {
        correlation_id: u32,
        code: u16,
        reason: String,
    },
    /// The client's answer to a Close the server sent.
    CloseResponse {
        correlation_id: u32,
        code: u16,
    },
    Heartbeat,
    Route {
        correlation_id: u32,
        routing_key: String,
        super_stream: String,
    },
    Partitions {
        correlation_id: u32,
        super_stream: String,
    },
    /// The client's answer to a ConsumerUpdate the server sent.
    ConsumerUpdateResponse {
        correlation_id: u32,
        code: u16,
        offset: Option<OffsetSpecification>,
    },
    ExchangeCommandVersions {
        correlation_id: u32,
        commands: Vec<(u16, u16, u16)>,
    },
    StreamStats {
        correlation_id: u32,
        stream: String,
    },
    CreateSuperStream {
        correlation_id: u32,
        name: String,
        partitions: Vec<String>,
        binding_keys: Vec<String>,
        arguments: Vec<(String, String)>,
    },
    DeleteSuperStream {
        correlation_id: u32,
        name: String,
    },
    ResolveOffsetSpec {
        correlation_id: u32,
        stream: String,
        offset: OffsetSpecification,
        properties: Vec<(String, String)>,
    },
    /// A command Warren does not know (answered with `UNKNOWN_FRAME` when it has a
    /// correlation id).
    Unknown {
        key: u16,
        version: u16,
    },
}

/// Why the byte stream cannot go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A frame's size is over the limit (or zero).
    TooLarge {
        /// The announced size.
        size: u32,
        /// The limit.
        limit: u32,
    },
}

/// Takes the next whole frame (without its size prefix) off `buffer`; `Ok(None)` until one
/// is complete. `frame_max` 0 means no limit.
pub fn split_frame(buffer: &mut BytesMut, frame_max: u32) -> Result<Option<Bytes>, FrameError> {
    if buffer.len() < 4 {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]);
    if size < 4 || (frame_max != 0 && size > frame_max) {
        return Err(FrameError::TooLarge {
            size,
            limit: frame_max,
        });
    }
    if buffer.len() < 4 + size as usize {
        buffer.reserve(4 + size as usize - buffer.len());
        return Ok(None);
    }
    buffer.advance(4);
    Ok(Some(buffer.split_to(size as usize).freeze()))
}

#[cfg(test)]
mod tests;
