//! # warren-config
//!
//! Settings in rabbitmq.conf's sysctl format and RabbitMQ definitions.json documents.
