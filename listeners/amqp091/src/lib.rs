//! # warren-amqp091
//!
//! The AMQP 0-9-1 listener, in three layers: `codec` (sans-IO frames and methods), `session`
//! (the connection and channel state machines driving the core) and `driver` (the tokio task
//! that owns the socket and batches writes).

pub mod codec;
