//! Streams as queues of their vhost: the permission-checked entry points every listener
//! and the management API use (configure to create and delete, write to publish, read to
//! consume, as RabbitMQ checks them on streams).
//!
//! Until the core has one queue-type interface, streams are kept in the vhost's
//! [`StreamRegistry`](super::StreamRegistry) beside its classic queues; a name is either a
//! classic queue or a stream, never both.

use std::sync::Arc;

use crate::access::{Access, ResourceKind};
use crate::error::{CoreError, CoreResult};
use crate::value::{Table, Value};
use crate::vhost::{QueueDeclare, QueueDeclared, VHost};

use super::log::StreamLog;
use super::registry::StreamCreated;

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
        if self.queue(name).is_some() {
            return Err(CoreError::precondition_failed(format!(
                "queue '{name}' in vhost '{}' exists and is not a stream",
                self.name()
            )));
        }
        self.streams().create(name, arguments).map_err(|problem| {
            CoreError::precondition_failed(format!(
                "{problem} (stream '{name}' in vhost '{}')",
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
        if self.streams().delete(name) {
            Ok(())
        } else {
            Err(CoreError::not_found(format!(
                "no stream '{name}' in vhost '{}'",
                self.name()
            )))
        }
    }

    /// queue.declare of a stream (`x-queue-type: stream`, or a passive declare of a
    /// stream's name), so AMQP clients and the management API see streams as queues.
    /// Streams are always durable, never exclusive or auto-delete (406 otherwise).
    pub(crate) fn declare_stream_queue(
        &self,
        user: &str,
        request: &QueueDeclare,
    ) -> CoreResult<QueueDeclared> {
        let declared = |log: &StreamLog| {
            let stats = log.stats();
            QueueDeclared {
                name: request.name.clone(),
                message_count: stats.next_offset.saturating_sub(stats.first_offset),
                consumer_count: 0,
            }
        };
        if request.passive {
            let log = self
                .stream_for(user, Access::Configure, &request.name)
                .or_else(|_| {
                    self.streams().get(&request.name).ok_or_else(|| {
                        CoreError::not_found(format!(
                            "no queue '{}' in vhost '{}'",
                            request.name,
                            self.name()
                        ))
                    })
                })?;
            return Ok(declared(&log));
        }
        if !request.durable || request.exclusive || request.auto_delete {
            return Err(CoreError::precondition_failed(format!(
                "invalid property '{}' for queue '{}' in vhost '{}': streams are durable, not exclusive, not auto-delete",
                if !request.durable { "non-durable" } else if request.exclusive { "exclusive" } else { "auto-delete" },
                request.name,
                self.name()
            )));
        }
        let arguments = table_to_arguments(&request.arguments);
        let log = match self.create_stream(user, &request.name, &arguments)? {
            StreamCreated::Created(log) | StreamCreated::Existed(log) => log,
        };
        Ok(declared(&log))
    }
}
