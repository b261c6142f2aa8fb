//! # warren-stream
//!
//! The RabbitMQ stream protocol listener (port 5552), which RabbitMQ's stream client
//! libraries speak. Three layers, as every Warren listener: [`codec`] (sans-IO frames),
//! [`session`] (the connection state machine, calling the core's streams:
//! `warren_core::stream_log`) and [`driver`] (the tokio task per connection on the core's
//! shared accept loop).
//!
//! Publishing: `Publish` frames go to the stream's writer thread, which group-commits
//! chunks and calls back once they are on disk; the session turns that into
//! `PublishConfirm`. Consuming: each subscription reads whole chunks from the stream's
//! segment files while it has credit (in chunks) and sends them as `Deliver` frames.

pub mod codec;
pub mod driver;
pub mod session;

pub use driver::{serve, ListenerConfig};
pub use session::{Session, SessionConfig};
