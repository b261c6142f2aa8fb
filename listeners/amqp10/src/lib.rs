//! # warren-amqp10
//!
//! The AMQP 1.0 listener. [`codec`] turns bytes into frames (sans-IO);
//! [`session`] is the connection, session and link state machine driving the core.
pub mod address;
pub mod codec;
pub mod mapping;
