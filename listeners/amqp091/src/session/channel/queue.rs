//! queue.declare, queue.bind, queue.unbind, queue.purge and queue.delete.

use std::sync::Arc;

use warren_core::exchange::DestinationName;
use warren_core::vhost::{Actor, QueueDeclare, VHost};

use super::not_a_client_method;
use crate::codec::Method;
use crate::reply::AmqpError;
use crate::session::Session;

impl Session {
    /// Handles one method of the queue class.
    pub(super) fn queue_method(
        &mut self,
        ch: u16,
        vhost: &Arc<VHost>,
        actor: Actor<'_>,
        method: Method,
    ) -> Result<(), AmqpError> {
        match method {
            Method::QueueDeclare {
                queue,
                passive,
                durable,
                exclusive,
                auto_delete,
                no_wait,
                arguments,
            } => {
                let declared = vhost.declare_queue(
                    actor,
                    QueueDeclare {
                        name: queue,
                        passive,
                        durable,
                        exclusive,
                        auto_delete,
                        arguments,
                    },
                )?;
                if exclusive && !passive && !self.exclusive_queues.contains(&declared.name) {
                    self.exclusive_queues.push(declared.name.clone());
                }
                self.channel(ch).last_declared_queue = Some(declared.name.clone());
                self.reply(
                    ch,
                    no_wait,
                    Method::QueueDeclareOk {
                        queue: declared.name,
                        message_count: count(declared.message_count),
                        consumer_count: count(declared.consumer_count),
                    },
                );
            }
            Method::QueueBind {
                queue,
                exchange,
                routing_key,
                no_wait,
                arguments,
            } => {
                let routing_key_was_empty = routing_key.is_empty() && queue.is_empty();
                let queue = self.channel(ch).queue_name_or_last(queue)?;
                let routing_key = if routing_key_was_empty {
                    queue.clone()
                } else {
                    routing_key
                };
                vhost.bind(
                    actor,
                    &exchange,
                    DestinationName::Queue(queue),
                    &routing_key,
                    arguments,
                )?;
                self.reply(ch, no_wait, Method::QueueBindOk);
            }
            Method::QueueUnbind {
                queue,
                exchange,
                routing_key,
                arguments,
            } => {
                let queue = self.channel(ch).queue_name_or_last(queue)?;
                vhost.unbind(
                    actor,
                    &exchange,
                    DestinationName::Queue(queue),
                    &routing_key,
                    arguments,
                )?;
                self.outbox.send_method(ch, &Method::QueueUnbindOk);
            }
            Method::QueuePurge { queue, no_wait } => {
                let queue = self.channel(ch).queue_name_or_last(queue)?;
                let purged = vhost.purge_queue(actor, &queue)?;
                self.reply(
                    ch,
                    no_wait,
                    Method::QueuePurgeOk {
                        message_count: count(purged),
                    },
                );
            }
            Method::QueueDelete {
                queue,
                if_unused,
                if_empty,
                no_wait,
            } => {
                let queue = self.channel(ch).queue_name_or_last(queue)?;
                let deleted = vhost.delete_queue(actor, &queue, if_unused, if_empty)?;
                self.exclusive_queues.retain(|q| *q != queue);
                self.reply(
                    ch,
                    no_wait,
                    Method::QueueDeleteOk {
                        message_count: count(deleted),
                    },
                );
            }
            method => return Err(not_a_client_method(&method)),
        }
        Ok(())
    }
}

fn count(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}
