//! Sans-IO STOMP 1.0/1.1/1.2 codec: bytes in, typed frames out, and back. No sockets, no
//! tokio, no broker state.
//!
//! Data flow on a connection:
//!
//! 1. The driver appends what it reads to a `BytesMut` and calls [`Decoder::decode`] until it
//!    returns `Ok(None)`. Each call yields a [`Decoded::Heartbeat`] (an EOL between frames) or
//!    a [`Decoded::Frame`], whose body is a zero-copy slice of that buffer.
//! 2. The first frame is CONNECT (or STOMP). The session settles the version with
//!    [`negotiate_version`] and heart-beats with [`negotiate_heartbeat`], then calls
//!    [`Decoder::set_version`], since header escaping depends on the version.
//! 3. Replies are written with [`encode`]; deliveries with [`encode_message`], which writes
//!    straight into the output buffer without building a [`Frame`]. [`HEARTBEAT`] is what to
//!    write when the connection has been quiet.
//!
//! Errors are [`FrameError`]s, every one fatal to the connection and worded for the ERROR
//! frame's `message` header. No input, however malformed, makes the codec panic.
//!
//! Where the spec and RabbitMQ's parser differ, the choice made is written down in the
//! `decode` module's documentation.

mod decode;
mod encode;
mod frame;
mod negotiate;

#[cfg(test)]
mod tests;

pub use decode::{Decoded, Decoder, Limits};
pub use encode::{encode, encode_message, HEARTBEAT};
pub use frame::{Command, Frame, FrameError, Limit, Version};
pub use negotiate::{negotiate_heartbeat, negotiate_version};
