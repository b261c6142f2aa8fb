//! # warren-amqp091
//!
//! The AMQP 0-9-1 listener, in three layers: [`codec`] (sans-IO frames and methods),
//! [`session`] (the connection and channel state machines driving the core) and [`driver`]
//! (the tokio tasks that own the socket and batch writes). [`outbox`] is the seam between
//! the core's queues and a connection's socket; [`reply`] is the table of reply codes.
//! Whether the socket is plain TCP or TLS is hidden by `warren_core::stream`.

pub mod codec;
pub mod driver;
pub mod outbox;
pub mod reply;
pub mod session;

pub use driver::{serve, HandoffFuture, ListenerConfig, ProtocolHandoff};
pub use session::SessionConfig;
