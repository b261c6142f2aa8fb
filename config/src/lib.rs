//! # warren-config
//!
//! What Warren reads before it starts serving: [`Settings`] in rabbitmq.conf's sysctl format
//! (`listeners.tcp.default = 5672`), and RabbitMQ `definitions.json` documents
//! ([`Definitions`]) that pre-declare users, vhosts, permissions and topology.
//!
//! Data flows in one direction and is checked before anything is applied:
//!
//! 1. [`Settings::from_args`] starts from Warren's defaults, applies the `--config` file and
//!    then each `--set KEY=VALUE`. An unknown key or a bad value is an error naming it.
//!    [`SETTINGS`] is the table of top-level keys (default, `--help` line, parser) that
//!    [`Settings::set`] and `--help` read and docs/configuration.md is checked against.
//! 2. If `load_definitions` is set, [`Definitions::from_file`] parses the file and
//!    [`Definitions::validate`] checks every cross-reference, pattern and hash, so a broken
//!    file stops start-up instead of being half-applied.
//! 3. The broker applies the validated definitions to `warren-core`, converting JSON
//!    arguments with [`json_args_to_table`].

#![warn(missing_docs)]

mod cli;
mod cluster;
mod definitions;
mod error;
mod listen_addr;
mod mqtt;
mod settings;
mod stomp;
mod stream;
mod web;

pub use cli::usage;
pub use cluster::{
    ClusterSettings, ClusterSsl, NodeAddress, CHANGE_TIMEOUT_LIMIT, CLUSTER_PORT, CLUSTER_SETTINGS,
};
pub use definitions::{
    json_args_to_table, json_to_value, BindingDefinition, Definitions, DefinitionsError,
    DestinationType, ExchangeDefinition, PermissionDefinition, PluginExchange, QueueDefinition,
    UnappliedCounts, UserDefinition, ValidationReport, VhostDefinition,
};
pub use error::ConfigError;
pub use listen_addr::ListenAddr;
pub use mqtt::{MqttSettings, MQTT_MAX_PACKET_SIZE_LIMIT, MQTT_SETTINGS};
pub use settings::{
    all_settings, CertLoginFrom, DiskFreeLimit, HttpLimits, LogLevel, MemoryHighWatermark,
    PeerVerification, Setting, Settings, SslOptions, AUTH_MECHANISMS, FRAME_MIN_SIZE,
    MAX_MESSAGE_SIZE_LIMIT, SETTINGS, TABLES,
};
pub use stomp::{StompSettings, STOMP_PORT, STOMP_SETTINGS};
pub use stream::{StreamProtocolSettings, STREAM_PORT, STREAM_SETTINGS};
pub use web::{
    WebSettings, WEB_AMQP_PORT, WEB_AMQP_SETTINGS, WEB_MQTT_PORT, WEB_MQTT_SETTINGS,
    WEB_STOMP_PORT, WEB_STOMP_SETTINGS,
};
