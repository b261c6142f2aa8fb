//! # warren-mqtt
//!
//! The MQTT listener. Today: the sans-IO `codec`. The session (mapping MQTT onto the core's
//! exchanges and queues) and the tokio driver follow.

pub mod codec;
