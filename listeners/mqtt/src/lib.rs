//! # warren-mqtt
//!
//! The MQTT 3.1 / 3.1.1 / 5.0 listener, in three layers: [`codec`] (sans-IO packets), [`session`]
//! (the protocol state machine driving the core: CONNECT, subscriptions as queues, QoS 0/1/2,
//! wills, retained messages, persistent sessions) and [`driver`] (one tokio task per
//! connection). [`outbox`] is the seam between the core's queues and a connection's socket.

pub mod codec;
pub mod driver;
pub mod outbox;
pub mod session;

pub use driver::{serve, ListenerConfig};
pub use session::cluster::RegistryTakeover;
pub use session::registry::ClientRegistry;
pub use session::{MqttContext, SessionConfig};
