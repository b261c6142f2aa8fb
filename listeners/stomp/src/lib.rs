//! # warren-stomp
//!
//! The STOMP listener. Today: the sans-IO `codec`. The session (mapping STOMP destinations
//! onto the core) and the tokio driver follow.

pub mod codec;
