//! # warren-stomp
//!
//! The STOMP 1.0/1.1/1.2 listener, in three layers: [`codec`] (sans-IO frames),
//! [`session`] (the connection state machine mapping RabbitMQ's STOMP destinations onto the
//! core) and [`driver`] (the tokio tasks that own the socket and batch writes). [`outbox`] is
//! the seam between the core's queues and a connection's socket; [`destination`] and
//! [`headers`] are the two mappings (destinations to exchanges and queues, headers to
//! properties), and [`error`] the table of ERROR frames.

pub mod codec;
pub mod destination;
pub mod driver;
pub mod error;
pub mod headers;
pub mod outbox;
pub mod session;

pub use driver::{serve, ListenerConfig};
pub use session::SessionConfig;
