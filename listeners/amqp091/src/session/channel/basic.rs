//! The consuming side of the basic class: basic.qos, basic.consume, basic.cancel, basic.get,
//! basic.ack, basic.reject, basic.nack and basic.recover.

use std::sync::Arc;

use base64::Engine;
use rand::RngCore;
use warren_core::access::Access;
use warren_core::consumer::ConsumerSpec;
use warren_core::queue::Settlement;
use warren_core::queue_type::QueueInstance;
use warren_core::vhost::{Actor, VHost, DIRECT_REPLY_TO};

use super::{not_a_client_method, ChannelConsumer, Mode};
use crate::codec::Method;
use crate::outbox::{ConsumerSink, SinkHandle};
use crate::reply::{self, AmqpError};
use crate::session::{settle_grouped, Session};

impl Session {
    /// Handles one consuming method of the basic class.
    pub(super) fn basic_method(
        &mut self,
        ch: u16,
        vhost: &Arc<VHost>,
        actor: Actor<'_>,
        method: Method,
    ) -> Result<(), AmqpError> {
        match method {
            Method::BasicQos {
                prefetch_size,
                prefetch_count,
                global,
            } => {
                if prefetch_size != 0 {
                    return Err(AmqpError::new(
                        reply::NOT_IMPLEMENTED,
                        format!("prefetch_size!=0 ({prefetch_size})"),
                    ));
                }
                if global {
                    self.channel(ch).global_qos = prefetch_count != 0;
                    let starved = self
                        .outbox
                        .set_global_prefetch(ch, u32::from(prefetch_count));
                    self.outbox.send_method(ch, &Method::BasicQosOk);
                    for sink in starved {
                        sink.queue.dispatch();
                    }
                } else {
                    self.channel(ch).consumer_prefetch = prefetch_count;
                    self.report_channel(ch);
                    self.outbox.send_method(ch, &Method::BasicQosOk);
                }
            }
            Method::BasicConsume {
                queue,
                consumer_tag,
                no_local: _,
                no_ack,
                exclusive,
                no_wait,
                arguments,
            } => {
                self.basic_consume(
                    ch,
                    vhost,
                    actor,
                    queue,
                    consumer_tag,
                    no_ack,
                    exclusive,
                    no_wait,
                    arguments,
                )?;
            }
            Method::BasicCancel {
                consumer_tag,
                no_wait,
            } => {
                let channel = self.channel(ch);
                if let Some(consumer) = channel.consumers.remove(consumer_tag.as_str()) {
                    if channel.reply_queue.as_deref() == Some(consumer.queue.name()) {
                        channel.reply_queue = None;
                    }
                    vhost.cancel_instance(&consumer.queue, consumer.consumer_id);
                }
                self.report_channel(ch);
                self.reply(ch, no_wait, Method::BasicCancelOk { consumer_tag });
            }
            Method::BasicGet { queue, no_ack } => {
                let queue = self.channel(ch).queue_name_or_last(queue)?;
                let queue = vhost.queue_instance_for(actor, &queue, Access::Read)?;
                queue.check_get()?;
                match queue.get(!no_ack) {
                    Some((delivery, remaining)) => self.outbox.send_get_ok(ch, delivery, remaining),
                    None => self.outbox.send_method(ch, &Method::BasicGetEmpty),
                }
            }
            Method::BasicAck {
                delivery_tag,
                multiple,
            } => {
                self.settle(ch, delivery_tag, multiple, Settlement::Ack)?;
            }
            Method::BasicReject {
                delivery_tag,
                requeue,
            } => {
                let settlement = if requeue {
                    Settlement::Requeue
                } else {
                    Settlement::Reject
                };
                self.settle(ch, delivery_tag, false, settlement)?;
            }
            Method::BasicNack {
                delivery_tag,
                multiple,
                requeue,
            } => {
                let settlement = if requeue {
                    Settlement::Requeue
                } else {
                    Settlement::Reject
                };
                self.settle(ch, delivery_tag, multiple, settlement)?;
            }
            Method::BasicRecover { requeue } | Method::BasicRecoverAsync { requeue } => {
                if !requeue {
                    return Err(AmqpError::new(reply::NOT_IMPLEMENTED, "requeue=false"));
                }
                let unacked = self.outbox.take_all_unacked(ch);
                settle_grouped(unacked, Settlement::Requeue);
                self.kick_starved();
                self.outbox.send_method(ch, &Method::BasicRecoverOk);
            }
            method => return Err(not_a_client_method(&method)),
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn basic_consume(
        &mut self,
        ch: u16,
        vhost: &Arc<VHost>,
        actor: Actor<'_>,
        queue: String,
        consumer_tag: String,
        no_ack: bool,
        exclusive: bool,
        no_wait: bool,
        arguments: warren_core::value::Table,
    ) -> Result<(), AmqpError> {
        let queue_name = self.channel(ch).queue_name_or_last(queue)?;
        let direct_reply = queue_name == DIRECT_REPLY_TO;
        if direct_reply {
            if !no_ack {
                return Err(AmqpError::new(
                    reply::PRECONDITION_FAILED,
                    "reply consumer cannot acknowledge",
                ));
            }
            if self.channel(ch).reply_queue.is_some() {
                return Err(AmqpError::new(
                    reply::PRECONDITION_FAILED,
                    "reply consumer already set",
                ));
            }
        }
        let tag: Arc<str> = if consumer_tag.is_empty() {
            Arc::from(generated_consumer_tag())
        } else {
            Arc::from(consumer_tag)
        };
        if self.channel(ch).consumers.contains_key(&tag) {
            return Err(AmqpError::new(
                reply::NOT_ALLOWED,
                format!("attempt to reuse consumer tag '{tag}'"),
            ));
        }
        let priority = match arguments.get("x-priority") {
            None => 0,
            Some(value) => value
                .as_i64()
                .and_then(|p| i32::try_from(p).ok())
                .ok_or_else(|| {
                    AmqpError::new(
                        reply::PRECONDITION_FAILED,
                        format!("invalid arg 'x-priority': expected an integer, got {value}"),
                    )
                })?,
        };
        let queue: Arc<dyn QueueInstance> = if direct_reply {
            let queue = vhost.declare_reply_queue(actor.connection_id);
            self.exclusive_queues.push(queue.name().to_string());
            self.channel(ch).reply_queue = Some(queue.name().to_string());
            queue
        } else {
            vhost.queue_instance_for(actor, &queue_name, Access::Read)?
        };
        let capabilities = queue.queue_type().capabilities();
        if self.channel(ch).global_qos && !capabilities.global_qos {
            // RabbitMQ's answer for a quorum queue under basic.qos global=true.
            return Err(AmqpError::new(
                reply::NOT_IMPLEMENTED,
                format!(
                    "queue '{}' in vhost '{}' does not support global qos",
                    queue.name(),
                    vhost.name()
                ),
            ));
        }
        let mut prefetch = u32::from(self.channel(ch).consumer_prefetch);
        if let Some(cap) = capabilities.prefetch_cap {
            // A capped type (quorum: 2,000) treats 0 (unlimited) and more as its cap.
            if prefetch == 0 || prefetch > u32::from(cap) {
                prefetch = u32::from(cap);
            }
        }
        let sink = ConsumerSink::new(
            Arc::clone(&self.outbox),
            ch,
            Arc::clone(&tag),
            Arc::clone(&queue),
            !no_ack,
            prefetch,
        );
        let spec = ConsumerSpec {
            tag: Arc::clone(&tag),
            connection_id: actor.connection_id,
            needs_settlement: !no_ack,
            exclusive,
            priority,
            arguments,
        };
        let consumer_id =
            vhost.consume_instance(&queue, spec, Arc::new(SinkHandle(Arc::clone(&sink))))?;
        self.channel(ch).consumers.insert(
            Arc::clone(&tag),
            ChannelConsumer {
                queue: Arc::clone(&queue),
                consumer_id,
            },
        );
        self.report_channel(ch);
        self.reply(
            ch,
            no_wait,
            Method::BasicConsumeOk {
                consumer_tag: tag.to_string(),
            },
        );
        // Only now may deliveries follow consume-ok.
        sink.start();
        queue.dispatch();
        Ok(())
    }

    fn settle(
        &mut self,
        ch: u16,
        tag: u64,
        multiple: bool,
        settlement: Settlement,
    ) -> Result<(), AmqpError> {
        let Some(taken) = self.outbox.take_unacked(ch, tag, multiple) else {
            return Err(AmqpError::new(
                reply::PRECONDITION_FAILED,
                format!("unknown delivery tag {tag}"),
            ));
        };
        if self.channel(ch).mode == Mode::Transactional {
            self.channel(ch).tx_settlements.push((taken, settlement));
            return Ok(());
        }
        settle_grouped(taken, settlement);
        self.kick_starved();
        Ok(())
    }

    /// Lets queues deliver again to consumers that ran out of credit.
    pub(super) fn kick_starved(&self) {
        for sink in self.outbox.take_starved() {
            sink.queue.dispatch();
        }
    }
}

fn generated_consumer_tag() -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!(
        "amq.ctag-{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}
