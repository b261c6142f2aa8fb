//! # warren-cluster
//!
//! Warren nodes forming one cluster (docs/clustering.md):
//!
//! - [`secret`]: the shared secret (`cluster.secret_file`), RabbitMQ's Erlang cookie;
//! - [`codec`] (sans-IO) and [`handshake`]: the inter-node frames and the HMAC challenge
//!   over the secret and the cluster id;
//! - [`transport`]: per peer a control link and a bulk link, reconnecting with backoff,
//!   with bounded queues;
//! - [`detector`]: the node-level failure detector fed by the control links' pings;
//! - [`join`]: `join_cluster`, a node leaving its own (one-node) cluster for another;
//! - [`metadata`]: the replicated metadata store on openraft 0.9, which commits every
//!   topology change before each node's core applies it (the core's
//!   [`warren_core::replication`] hook).
//!
//! Data flows: a client's change reaches the core, the core hands it to
//! [`metadata::MetadataStore`] (a [`warren_core::replication::TopologyReplicator`]), which
//! proposes it to the Raft leader over the control link; once committed, every node's state
//! machine applies it to its own core in log order.

#![warn(missing_docs)]

pub mod codec;
pub mod detector;
pub mod handshake;
pub mod join;
pub mod metadata;
pub mod secret;
pub mod transport;
