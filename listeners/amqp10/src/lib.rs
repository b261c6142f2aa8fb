//! # warren-amqp10
//!
//! The AMQP 1.0 listener, in three layers: [`codec`] turns bytes into frames (sans-IO);
//! [`session`] is the connection, session and link state machine driving the core
//! ([`session::sink`] is the seam where the core's queues hand deliveries to links); and
//! [`driver`] is the tokio task that owns the socket. [`mapping`] converts messages between
//! AMQP 1.0 sections and the core message; [`address`] parses RabbitMQ 4.x link addresses;
//! [`stream_format`] is how the core's streams keep messages (as AMQP 1.0 messages);
//! [`stream_filters`] reads a stream receiver's source filters.
//!
//! AMQP 1.0 shares its port with AMQP 0-9-1: that listener's accept loop reads the protocol
//! header and hands AMQP 1.0 connections to [`driver::run_connection`]. Over WebSocket
//! (`web_amqp.*`) the connection reaches [`driver::run_websocket_connection`] as a tunnel
//! (`warren_core::websocket`) and is served by the same driver.

pub mod address;
pub mod codec;
pub mod driver;
pub mod mapping;
pub mod session;
pub mod stream_filters;
pub mod stream_format;

pub use driver::{run_connection, run_websocket_connection};
pub use session::Amqp10Config;
pub use stream_format::StreamFormat;
