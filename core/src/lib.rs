//! # warren-core
//!
//! The protocol-free broker model every Warren listener maps onto: virtual hosts, users and
//! permissions, exchanges and bindings, queues, consumers and settlement.
//!
//! Data flows one way on the publish path: a listener builds a [`message::Message`], asks the
//! vhost to route it through an exchange to a set of queues (no global lock: routing tables are
//! read-mostly and each queue guards its own state), and each queue either hands it straight to
//! a consumer's sink or keeps it ready. Listeners settle deliveries (ack, requeue, reject) with
//! one core call per queue, whatever their wire protocol calls it.

pub mod accept;
pub mod access;
pub mod binding;
mod binding_table;
pub mod broker;
pub mod certificate;
pub mod clock;
pub mod connections;
pub mod consumer;
pub mod counters;
pub mod dead_letter;
pub mod delivery_window;
pub mod durability;
pub mod error;
pub mod exchange;
pub mod flow;
pub mod idmap;
pub mod message;
pub mod packed;
pub mod parameters;
pub mod password;
pub mod policy;
pub mod queue;
pub mod queue_type;
pub mod quorum;
pub mod remote;
pub mod replication;
pub mod resource_limits;
pub mod retained;
pub mod retained_file;
pub mod routing;
pub mod sasl;
pub mod store;
pub mod stream;
pub mod stream_clients;
pub mod stream_log;
pub mod topic_access;
pub mod value;
pub mod vhost;
pub mod websocket;

pub use broker::Broker;
pub use error::{CoreError, CoreResult, ErrorKind};
