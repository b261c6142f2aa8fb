//! Streams as queues of their vhost: the permission-checked entry points every listener
//! and the management API use (configure to create and delete, write to publish, read to
//! consume, as RabbitMQ checks them on streams).
//!
//! A stream's log is kept in the vhost's [`StreamRegistry`](super::StreamRegistry) and the
//! stream is a queue of the vhost through the queue-type interface
//! ([`crate::queue_type::stream::StreamQueue`]); a name is one queue of one type, never two.

use std::sync::Arc;

use crate::access::{Access, ResourceKind};
use crate::error::{CoreError, CoreResult};
use crate::value::{Table, Value};
use crate::vhost::VHost;

use super::log::StreamLog;
use super::registry::StreamCreated;
use super::super_streams::SuperStream;

/// The longest stream name RabbitMQ accepts.
pub const MAX_STREAM_NAME_LENGTH: usize = 255;

/// Queue arguments as the stream's text arguments (`x-max-length-bytes = 1000` becomes
/// `("x-max-length-bytes", "1000")`).
pub fn table_to_arguments(arguments: &Table) -> Vec<(String, String)> {
    arguments
        .iter()
        .filter(|(key, _)| *key != "x-queue-type")
        .map(|(key, value)| {
            let text = match value {
                Value::LongString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                other => match other.as_i64() {
                    Some(n) => n.to_string(),
                    None => other
                        .as_str()
                        .map_or_else(|| format!("{other:?}"), str::to_owned),
                },
            };
            (key.to_owned(), text)
        })
        .collect()
}

impl VHost {
    /// Creates stream `name` for `user` (configure permission), or finds it.
    pub fn create_stream(
        &self,
        user: &str,
        name: &str,
        arguments: &[(String, String)],
    ) -> CoreResult<StreamCreated> {
        if name.is_empty() || name.len() > MAX_STREAM_NAME_LENGTH {
            return Err(CoreError::precondition_failed(format!(
                "invalid stream name '{name}': 1 to {MAX_STREAM_NAME_LENGTH} bytes"
            )));
        }
        if name.starts_with("amq.") {
            return Err(CoreError::access_refused(format!(
                "queue name '{name}' contains reserved prefix 'amq.*'"
            )));
        }
        self.check(user, Access::Configure, ResourceKind::Queue, name)?;
        let other_type = self
            .typed_queue(name)
            .is_some_and(|queue| !queue.queue_type().capabilities().consumers_need_offset);
        if self.queue(name).is_some() || other_type {
            return Err(CoreError::precondition_failed(format!(
                "queue '{name}' in vhost '{}' exists and is not a stream",
                self.name()
            )));
        }
        if self.durability().local_node().is_some() {
            return self.create_replicated_stream(user, name, arguments);
        }
        let created = self.streams().create(name, arguments).map_err(|problem| {
            CoreError::precondition_failed(format!(
                "{problem} (stream '{name}' in vhost '{}')",
                self.name()
            ))
        })?;
        if let StreamCreated::Created(log) = &created {
            self.add_stream_queue(Arc::clone(log), true);
        }
        Ok(created)
    }

    /// On a cluster a stream is made as `queue.declare` makes one, through the metadata
    /// store, so every node has it and its home node places its members (docs/streams.md,
    /// "Replication"). The stream protocol's argument names (`max-length-bytes`) are the
    /// `x-` arguments of a declaration.
    fn create_replicated_stream(
        &self,
        user: &str,
        name: &str,
        arguments: &[(String, String)],
    ) -> CoreResult<StreamCreated> {
        if let Some(existing) = self.streams().get(name) {
            return Ok(StreamCreated::Existed(existing));
        }
        let mut table = Table::new();
        table.insert("x-queue-type", Value::string("stream"));
        for (key, value) in arguments {
            let key = match key.starts_with("x-") {
                true => key.clone(),
                false => format!("x-{key}"),
            };
            let value = match value.parse::<i64>() {
                Ok(number) => Value::I64(number),
                Err(_) => Value::string(value.clone()),
            };
            table.insert(key, value);
        }
        let actor = crate::vhost::Actor {
            user,
            connection_id: crate::vhost::BROKER_CONNECTION,
        };
        self.declare_queue(
            actor,
            crate::vhost::QueueDeclare {
                name: name.to_owned(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: table,
            },
        )?;
        self.streams()
            .get(name)
            .map(StreamCreated::Created)
            .ok_or_else(|| {
                CoreError::precondition_failed(format!(
                    "stream '{name}' in vhost '{}' was not created",
                    self.name()
                ))
            })
    }

    /// Stream `name`, after checking `user`'s `access` to it.
    pub fn stream_for(&self, user: &str, access: Access, name: &str) -> CoreResult<Arc<StreamLog>> {
        self.check(user, access, ResourceKind::Queue, name)?;
        self.streams().get(name).ok_or_else(|| {
            CoreError::not_found(format!("no stream '{name}' in vhost '{}'", self.name()))
        })
    }

    /// Deletes stream `name` for `user` (configure permission).
    pub fn delete_stream(&self, user: &str, name: &str) -> CoreResult<()> {
        self.check(user, Access::Configure, ResourceKind::Queue, name)?;
        if self.durability().local_node().is_some() && self.streams().get(name).is_some() {
            // On a cluster, as queue.delete: every member deletes its copy.
            let actor = crate::vhost::Actor {
                user,
                connection_id: crate::vhost::BROKER_CONNECTION,
            };
            return self.delete_queue(actor, name, false, false).map(|_| ());
        }
        if self.streams().get(name).is_some() && self.remove_typed_queue(name).is_some() {
            Ok(())
        } else {
            Err(CoreError::not_found(format!(
                "no stream '{name}' in vhost '{}'",
                self.name()
            )))
        }
    }

    /// Creates super stream `name` routing to new partition streams (one per binding key,
    /// in order), as RabbitMQ's CreateSuperStream: configure on the super stream (an
    /// exchange in RabbitMQ) and on every partition.
    pub fn create_super_stream(
        &self,
        user: &str,
        name: &str,
        partitions: &[String],
        binding_keys: &[String],
        arguments: &[(String, String)],
    ) -> CoreResult<()> {
        if partitions.is_empty() || partitions.len() != binding_keys.len() {
            return Err(CoreError::precondition_failed(format!(
                "super stream '{name}' needs as many binding keys as partitions, and at least one"
            )));
        }
        self.check(user, Access::Configure, ResourceKind::Exchange, name)?;
        for partition in partitions {
            self.check(user, Access::Configure, ResourceKind::Queue, partition)?;
            if self.streams().get(partition).is_some() || self.queue(partition).is_some() {
                return Err(CoreError::precondition_failed(format!(
                    "partition '{partition}' of super stream '{name}' already exists"
                )));
            }
        }
        if self.streams().super_streams().get(name).is_some() || self.exchange(name).is_some() {
            return Err(CoreError::precondition_failed(format!(
                "super stream '{name}' already exists in vhost '{}'",
                self.name()
            )));
        }
        for partition in partitions {
            self.create_stream(user, partition, arguments)?;
        }
        let super_stream = SuperStream {
            partitions: partitions
                .iter()
                .cloned()
                .zip(binding_keys.iter().cloned())
                .collect(),
        };
        match self.streams().super_streams().insert(name, super_stream) {
            Ok(true) => Ok(()),
            Ok(false) => Err(CoreError::precondition_failed(format!(
                "super stream '{name}' already exists in vhost '{}'",
                self.name()
            ))),
            Err(error) => Err(CoreError::new(
                crate::error::ErrorKind::InternalError,
                format!("cannot save super stream '{name}': {error}"),
            )),
        }
    }

    /// Super stream `name`, after checking `user`'s `access` to it.
    pub fn super_stream_for(
        &self,
        user: &str,
        access: Access,
        name: &str,
    ) -> CoreResult<SuperStream> {
        self.check(user, access, ResourceKind::Exchange, name)?;
        self.streams().super_streams().get(name).ok_or_else(|| {
            CoreError::not_found(format!(
                "no super stream '{name}' in vhost '{}'",
                self.name()
            ))
        })
    }

    /// Deletes super stream `name` and its partition streams (configure permission).
    pub fn delete_super_stream(&self, user: &str, name: &str) -> CoreResult<()> {
        let super_stream = self.super_stream_for(user, Access::Configure, name)?;
        for (partition, _) in &super_stream.partitions {
            self.check(user, Access::Configure, ResourceKind::Queue, partition)?;
        }
        self.streams()
            .super_streams()
            .remove(name)
            .map_err(|error| {
                CoreError::new(
                    crate::error::ErrorKind::InternalError,
                    format!("cannot save super streams: {error}"),
                )
            })?;
        for (partition, _) in &super_stream.partitions {
            if self.streams().get(partition).is_some() {
                self.remove_typed_queue(partition);
            }
        }
        Ok(())
    }
}
