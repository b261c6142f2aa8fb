//! Sans-IO AMQP 0-9-1 codec: bytes in, typed frames and methods out, and back. No sockets, no
//! tokio, no broker state.
//!
//! Data flow on a connection:
//!
//! 1. The first 8 bytes go to [`parse_protocol_header`], which tells AMQP 0-9-1 from AMQP 1.0
//!    (both share port 5672).
//! 2. The driver appends what it reads to a `BytesMut` and calls [`decode_frame`] until it
//!    returns `Ok(None)`. Each [`Frame`]'s payload is a zero-copy slice of that buffer.
//! 3. The session decodes method frames with [`Method::decode`] (or, for basic.publish, the
//!    allocation-free [`BasicPublishRef::peek`]) and content headers with
//!    [`RawContentHeader::decode`] (properties kept as raw bytes, as the broker forwards them)
//!    or [`ContentHeader::decode`] (properties decoded); body frames are used as they are.
//! 4. Replies are written with [`write_method_frame`]; deliveries with [`write_deliver`],
//!    [`write_get_ok`] and [`write_return`], which copy the publisher's property bytes and
//!    split the body by frame_max, straight into the output buffer.
//!
//! Errors say what the peer did wrong in words a user can act on, and are typed so that the
//! session picks the reply code: [`FrameError`] (501 FRAME_ERROR, connection-fatal),
//! [`MethodDecodeError`] (unknown method, or a [`SyntaxError`] for 502 SYNTAX_ERROR). No
//! input, however malformed, makes the codec panic; encoders return [`EncodeError`] for values
//! the wire cannot carry instead of panicking.

mod encode;
mod frame;
mod method;
mod primitives;
mod properties;

#[cfg(test)]
mod bench_tests;
#[cfg(test)]
mod oracle_tests;

pub use encode::{
    write_content, write_content_header, write_deliver, write_get_ok, write_method_frame,
    write_return,
};
pub use frame::{
    decode_frame, parse_protocol_header, write_frame, write_heartbeat, Frame, FrameError,
    ProtocolHeader, FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEADER_SIZE, FRAME_HEARTBEAT,
    FRAME_METHOD, FRAME_MIN_SIZE, FRAME_OVERHEAD, FRAME_SIZE_FUDGE, HEARTBEAT_FRAME,
    PROTOCOL_HEADER_091,
};
pub use method::{
    method_name, BasicPublishRef, Method, MethodDecodeError, CLASS_BASIC, CLASS_CHANNEL,
    CLASS_CONFIRM, CLASS_CONNECTION, CLASS_EXCHANGE, CLASS_QUEUE, CLASS_TX,
};
pub use primitives::{
    decode_table, truncate_shortstr, write_array, write_longstr, write_shortstr,
    write_shortstr_truncated, write_table, write_value, EncodeError, Reader, SyntaxError, Writer,
    MAX_NESTING_DEPTH, SHORTSTR_MAX,
};
pub use properties::{
    decode_properties, encode_properties, ContentHeader, RawContentHeader,
    CONTENT_HEADER_PREFIX_SIZE, EMPTY_PROPERTIES,
};
