//! Channel state and the channel-level methods: exchange, queue, basic, confirm and tx.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use base64::Engine;
use bytes::{Bytes, BytesMut};
use rand::RngCore;
use warren_core::access::{Access, User};
use warren_core::consumer::ConsumerSpec;
use warren_core::exchange::DestinationName;
use warren_core::message::parse_expiration;
use warren_core::message::{Message, Properties};
use warren_core::packed::pack_properties_and_body;
use warren_core::queue::Settlement;
use warren_core::queue_type::QueueInstance;
use warren_core::topic_access::TopicVariables;
use warren_core::vhost::{
    Actor, ExchangeDeclare, PublishOutcome, Publisher, QueueDeclare, VHost, DIRECT_REPLY_TO,
};

use super::{settle_grouped, Session};
use crate::codec::{
    decode_properties, encode_properties, Frame, Method, EMPTY_PROPERTIES, FRAME_BODY,
};
use crate::outbox::{ConsumerSink, SinkHandle, Unacked};
use crate::reply::{self, AmqpError};

/// Bodies up to this size are copied out of the read buffer so a queued message does not pin
/// the whole buffer chunk it arrived in.
const COPY_BODY_BELOW: usize = 4096;

/// A consumer registered on a channel.
pub(super) struct ChannelConsumer {
    pub(super) queue: Arc<dyn QueueInstance>,
    pub(super) consumer_id: u64,
}

/// A publish waiting for its content header and body frames.
struct PendingPublish {
    exchange: Arc<str>,
    routing_key: Arc<str>,
    mandatory: bool,
    /// Properties as decoded and as received, once the header arrived.
    header: Option<(Properties, Bytes)>,
    body_size: u64,
    body: BytesMut,
    /// The single body frame, kept without copying when the body came in one frame.
    single_body: Option<Bytes>,
}

/// A confirm waiting for the message store (or a nack queued behind such confirms).
#[derive(Debug, Clone, Copy)]
pub(super) struct DurableWait {
    publish_seq: u64,
    store_seq: u64,
    nack: bool,
}

/// A published message held until tx.commit.
struct TxPublish {
    mandatory: bool,
    message: Arc<Message>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Plain,
    Confirm,
    Transactional,
}

/// One channel's reader-side state.
pub(super) struct Channel {
    closing: bool,
    mode: Mode,
    pending: Option<PendingPublish>,
    consumers: HashMap<Arc<str>, ChannelConsumer>,
    /// basic.qos global=false: the prefetch given to consumers created from now on.
    consumer_prefetch: u16,
    /// basic.qos global=true with a non-zero prefetch is in effect (queue types without
    /// global QoS refuse consumers then).
    global_qos: bool,
    last_declared_queue: Option<String>,
    /// The queue behind this channel's direct reply-to consumer, if it has one.
    reply_queue: Option<String>,
    /// The core's publish state: exchanges this channel was allowed to publish to
    /// (RabbitMQ caches this too).
    publisher: Publisher,
    /// The exchange and routing key of the last publish: a publisher usually repeats them,
    /// and its messages then share one allocation of each instead of two per message.
    last_publish_names: Option<(Arc<str>, Arc<str>)>,
    /// Publisher confirms: the last sequence number assigned and the last one confirmed.
    publish_seq: u64,
    confirmed_seq: u64,
    /// Confirms held back for the message store, oldest first: a persistent message is
    /// confirmed once its store sequence number is on disk, and nothing after it before.
    durable_waits: VecDeque<DurableWait>,
    tx_publishes: Vec<TxPublish>,
    tx_settlements: Vec<(Vec<Unacked>, Settlement)>,
    /// tx.commit-oks held until the store has the committed persistent messages on disk:
    /// the store sequence number each waits for, oldest first.
    pub(super) commit_waits: VecDeque<u64>,
}

impl Channel {
    /// The shared names for a publish to `exchange` with `routing_key`: the last publish's
    /// when they are the same.
    fn intern_publish_names(
        &mut self,
        exchange: String,
        routing_key: String,
    ) -> (Arc<str>, Arc<str>) {
        let (exchange, routing_key) = match self.last_publish_names.take() {
            Some((last_exchange, last_key)) => (
                if *last_exchange == *exchange {
                    last_exchange
                } else {
                    Arc::from(exchange)
                },
                if *last_key == *routing_key {
                    last_key
                } else {
                    Arc::from(routing_key)
                },
            ),
            None => (Arc::from(exchange), Arc::from(routing_key)),
        };
        self.last_publish_names = Some((Arc::clone(&exchange), Arc::clone(&routing_key)));
        (exchange, routing_key)
    }

    pub(super) fn new() -> Channel {
        Channel {
            closing: false,
            mode: Mode::Plain,
            pending: None,
            consumers: HashMap::new(),
            consumer_prefetch: 0,
            global_qos: false,
            last_declared_queue: None,
            reply_queue: None,
            publisher: Publisher::new(),
            last_publish_names: None,
            publish_seq: 0,
            confirmed_seq: 0,
            durable_waits: VecDeque::new(),
            tx_publishes: Vec::new(),
            tx_settlements: Vec::new(),
            commit_waits: VecDeque::new(),
        }
    }

    pub(super) fn is_closing(&self) -> bool {
        self.closing
    }

    pub(super) fn mark_closing(&mut self) {
        self.closing = true;
        self.pending = None;
    }

    pub(super) fn expects_content(&self) -> bool {
        self.pending.is_some()
    }

    pub(super) fn forget_consumer(&mut self, tag: &str) {
        self.consumers.remove(tag);
    }

    pub(super) fn take_consumers(&mut self) -> Vec<ChannelConsumer> {
        self.consumers.drain().map(|(_, c)| c).collect()
    }

    /// The basic.ack covering every publish confirmed since the last one sent.
    /// Also returns how many publishes it confirms.
    /// The highest publish sequence number confirmed (acked or nacked) so far.
    pub(super) fn confirmed_seq(&self) -> u64 {
        self.confirmed_seq
    }

    pub(super) fn take_confirm(&mut self) -> Option<(Method, u64)> {
        if self.mode != Mode::Confirm || self.publish_seq == self.confirmed_seq {
            return None;
        }
        let confirmed = self.publish_seq - self.confirmed_seq;
        self.confirmed_seq = self.publish_seq;
        Some((
            Method::BasicAck {
                delivery_tag: self.publish_seq,
                multiple: confirmed > 1,
            },
            confirmed,
        ))
    }

    /// The confirms that can go now that the store has `durable` on disk: acks (coalesced
    /// with `multiple`) up to the first publish still waiting for the disk, and the nacks
    /// queued behind waiting publishes. Returns whether publishes are still unconfirmed.
    /// `failed` says whether the publish that waited for a store sequence number failed
    /// (a forwarded publish its queue's home node did not take): it is nacked.
    pub(super) fn take_confirms(
        &mut self,
        durable: u64,
        failed: &dyn Fn(u64) -> bool,
        out: &mut Vec<Method>,
    ) -> bool {
        if self.mode != Mode::Confirm {
            return false;
        }
        if self.durable_waits.is_empty() {
            out.extend(self.take_confirm().map(|(method, _)| method));
            return false;
        }
        loop {
            match self.durable_waits.front() {
                Some(wait) if wait.nack || wait.store_seq <= durable => {
                    let wait = *wait;
                    self.durable_waits.pop_front();
                    if wait.nack || failed(wait.store_seq) {
                        self.ack_up_to(wait.publish_seq - 1, out);
                        out.push(Method::BasicNack {
                            delivery_tag: wait.publish_seq,
                            multiple: false,
                            requeue: false,
                        });
                        self.confirmed_seq = wait.publish_seq;
                    }
                }
                Some(wait) => {
                    let limit = wait.publish_seq - 1;
                    self.ack_up_to(limit, out);
                    return true;
                }
                None => {
                    let limit = self.publish_seq;
                    self.ack_up_to(limit, out);
                    return false;
                }
            }
        }
    }

    fn ack_up_to(&mut self, limit: u64, out: &mut Vec<Method>) {
        if limit > self.confirmed_seq {
            out.push(Method::BasicAck {
                delivery_tag: limit,
                multiple: limit - self.confirmed_seq > 1,
            });
            self.confirmed_seq = limit;
        }
    }

    fn queue_name_or_last(&self, name: String) -> Result<String, AmqpError> {
        if !name.is_empty() {
            return Ok(name);
        }
        self.last_declared_queue
            .clone()
            .ok_or_else(|| AmqpError::new(reply::NOT_FOUND, "no previously declared queue"))
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

fn count(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

impl Session {
    /// The open vhost and the user, as cheap `Arc` clones (no allocation per method).
    fn vhost_and_user(&self) -> Result<(Arc<VHost>, Arc<User>), AmqpError> {
        match (&self.vhost, &self.user) {
            (Some(vhost), Some(user)) => Ok((Arc::clone(vhost), Arc::clone(user))),
            _ => Err(AmqpError::new(
                reply::COMMAND_INVALID,
                "connection is not open",
            )),
        }
    }

    fn channel(&mut self, id: u16) -> &mut Channel {
        // Callers looked the channel up before dispatching to a handler.
        self.channels
            .get_mut(&id)
            .expect("channel exists while its methods are handled")
    }

    fn reply(&self, channel: u16, no_wait: bool, method: Method) {
        if !no_wait {
            self.outbox.send_method(channel, &method);
        }
    }

    pub(super) fn dispatch_channel_method(
        &mut self,
        ch: u16,
        method: Method,
    ) -> Result<(), AmqpError> {
        let (vhost, user) = self.vhost_and_user()?;
        let user = user.name.as_str();
        let actor = Actor {
            user,
            connection_id: self.connection_id,
        };
        match method {
            Method::ChannelFlow { active: true } => {
                self.outbox
                    .send_method(ch, &Method::ChannelFlowOk { active: true });
            }
            Method::ChannelFlow { active: false } => {
                return Err(AmqpError::new(reply::NOT_IMPLEMENTED, "active=false"));
            }
            Method::ChannelFlowOk { .. } => {}

            Method::ExchangeDeclare {
                exchange,
                exchange_type,
                passive,
                durable,
                auto_delete,
                internal,
                no_wait,
                arguments,
            } => {
                vhost.declare_exchange(
                    actor,
                    ExchangeDeclare {
                        name: exchange,
                        kind: exchange_type,
                        passive,
                        durable,
                        auto_delete,
                        internal,
                        arguments,
                    },
                )?;
                self.reply(ch, no_wait, Method::ExchangeDeclareOk);
            }
            Method::ExchangeDelete {
                exchange,
                if_unused,
                no_wait,
            } => {
                vhost.delete_exchange(actor, &exchange, if_unused)?;
                self.reply(ch, no_wait, Method::ExchangeDeleteOk);
            }
            Method::ExchangeBind {
                destination,
                source,
                routing_key,
                no_wait,
                arguments,
            } => {
                vhost.bind(
                    actor,
                    &source,
                    DestinationName::Exchange(destination),
                    &routing_key,
                    arguments,
                )?;
                self.reply(ch, no_wait, Method::ExchangeBindOk);
            }
            Method::ExchangeUnbind {
                destination,
                source,
                routing_key,
                no_wait,
                arguments,
            } => {
                vhost.unbind(
                    actor,
                    &source,
                    DestinationName::Exchange(destination),
                    &routing_key,
                    arguments,
                )?;
                self.reply(ch, no_wait, Method::ExchangeUnbindOk);
            }

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
                    &vhost,
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
            Method::BasicPublish {
                exchange,
                routing_key,
                mandatory,
                immediate,
            } => {
                if immediate {
                    return Err(AmqpError::new(reply::NOT_IMPLEMENTED, "immediate=true"));
                }
                self.published = true;
                let channel = self.channel(ch);
                let (exchange, routing_key) = channel.intern_publish_names(exchange, routing_key);
                channel.pending = Some(PendingPublish {
                    exchange,
                    routing_key,
                    mandatory,
                    header: None,
                    body_size: 0,
                    body: BytesMut::new(),
                    single_body: None,
                });
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

            Method::ConfirmSelect { no_wait } => {
                let channel = self.channel(ch);
                if channel.mode == Mode::Transactional {
                    return Err(AmqpError::new(
                        reply::PRECONDITION_FAILED,
                        "cannot switch from tx to confirm mode",
                    ));
                }
                channel.mode = Mode::Confirm;
                self.reply(ch, no_wait, Method::ConfirmSelectOk);
            }
            Method::TxSelect => {
                let channel = self.channel(ch);
                if channel.mode == Mode::Confirm {
                    return Err(AmqpError::new(
                        reply::PRECONDITION_FAILED,
                        "cannot switch from confirm to tx mode",
                    ));
                }
                channel.mode = Mode::Transactional;
                self.outbox.send_method(ch, &Method::TxSelectOk);
            }
            Method::TxCommit => self.tx_commit(ch, &vhost)?,
            Method::TxRollback => {
                let channel = self.channel(ch);
                if channel.mode != Mode::Transactional {
                    return Err(AmqpError::new(
                        reply::PRECONDITION_FAILED,
                        "channel is not transactional",
                    ));
                }
                channel.tx_publishes.clear();
                let settlements = std::mem::take(&mut channel.tx_settlements);
                for (unacked, _) in settlements {
                    self.outbox.restore_unacked(ch, unacked);
                }
                self.outbox.send_method(ch, &Method::TxRollbackOk);
            }
            method => {
                return Err(AmqpError::new(
                    reply::COMMAND_INVALID,
                    format!("'{}' may not be sent by a client", method.name()),
                ))
            }
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
    fn kick_starved(&self) {
        for sink in self.outbox.take_starved() {
            sink.queue.dispatch();
        }
    }

    fn tx_commit(&mut self, ch: u16, vhost: &Arc<VHost>) -> Result<(), AmqpError> {
        let channel = self.channel(ch);
        if channel.mode != Mode::Transactional {
            return Err(AmqpError::new(
                reply::PRECONDITION_FAILED,
                "channel is not transactional",
            ));
        }
        let publishes = std::mem::take(&mut channel.tx_publishes);
        let settlements = std::mem::take(&mut channel.tx_settlements);
        // The store sequence number the last persistent message of the transaction got.
        let mut durable_seq = 0;
        for publish in publishes {
            let outcome = self.route_and_enqueue(ch, vhost, publish.mandatory, publish.message)?;
            durable_seq = durable_seq.max(outcome.durable_seq().unwrap_or(0));
        }
        for (taken, settlement) in settlements {
            settle_grouped(taken, settlement);
        }
        self.kick_starved();
        // As with confirms: commit-ok says the messages are safe, so persistent messages in
        // durable queues must be on disk first (the store group-commits them).
        let on_disk = self
            .broker
            .message_store()
            .map_or(u64::MAX, |s| s.durable_seq());
        let channel = self.channel(ch);
        if durable_seq > on_disk || !channel.commit_waits.is_empty() {
            channel.commit_waits.push_back(durable_seq);
            if !self.pending_commits.contains(&ch) {
                self.pending_commits.push(ch);
            }
        } else {
            self.outbox.send_method(ch, &Method::TxCommitOk);
        }
        Ok(())
    }

    /// A content header or body frame for the publish in progress on `ch`.
    pub(super) fn content_frame(&mut self, ch: u16, frame: Frame) -> Result<(), AmqpError> {
        let max_message_size = self.config.max_message_size;
        let channel = self.channel(ch);
        let Some(pending) = channel.pending.as_mut() else {
            return Err(AmqpError::new(
                reply::UNEXPECTED_FRAME,
                "expected method frame, got non method frame instead",
            ));
        };
        match (&pending.header, frame.frame_type) {
            (None, FRAME_BODY) => {
                return Err(AmqpError::new(
                    reply::UNEXPECTED_FRAME,
                    "expected content header for class 60, got non content header frame instead",
                ))
            }
            (None, _) => {
                let payload = &frame.payload;
                if payload.len() < 14 {
                    return Err(AmqpError::new(
                        reply::FRAME_ERROR,
                        "content header frame too short",
                    ));
                }
                let class_id = u16::from_be_bytes([payload[0], payload[1]]);
                if class_id != 60 {
                    return Err(AmqpError::new(
                        reply::UNEXPECTED_FRAME,
                        format!("content header for class {class_id} does not match class 60 of basic.publish"),
                    ));
                }
                let body_size = u64::from_be_bytes([
                    payload[4],
                    payload[5],
                    payload[6],
                    payload[7],
                    payload[8],
                    payload[9],
                    payload[10],
                    payload[11],
                ]);
                if body_size > max_message_size as u64 {
                    return Err(AmqpError::new(
                        reply::PRECONDITION_FAILED,
                        format!("message size {body_size} is larger than configured max size {max_message_size}"),
                    )
                    .on(60, 40));
                }
                let raw = payload.slice(12..);
                let properties = decode_properties(&raw).map_err(|e| {
                    AmqpError::new(reply::SYNTAX_ERROR, format!("content header: {e}"))
                })?;
                // Copied so the message does not pin the read buffer; most publishers send
                // no properties, which needs no allocation at all.
                let raw = if raw[..] == EMPTY_PROPERTIES[..] {
                    Bytes::from_static(&EMPTY_PROPERTIES)
                } else {
                    Bytes::copy_from_slice(&raw)
                };
                pending.header = Some((properties, raw));
                pending.body_size = body_size;
            }
            (Some(_), FRAME_BODY) => {
                let received = pending.body.len() as u64
                    + pending.single_body.as_ref().map_or(0, |b| b.len() as u64)
                    + frame.payload.len() as u64;
                if received > pending.body_size {
                    return Err(AmqpError::new(
                        reply::FRAME_ERROR,
                        format!(
                            "body frames carry {received} bytes, more than the {} the content header declared",
                            pending.body_size
                        ),
                    ));
                }
                if pending.single_body.is_none()
                    && pending.body.is_empty()
                    && received == pending.body_size
                {
                    pending.single_body = Some(frame.payload);
                } else {
                    if let Some(first) = pending.single_body.take() {
                        pending.body.extend_from_slice(&first);
                    }
                    pending.body.extend_from_slice(&frame.payload);
                }
            }
            (Some(_), _) => {
                return Err(AmqpError::new(
                    reply::UNEXPECTED_FRAME,
                    "expected content body, got non content body frame instead",
                ))
            }
        }
        let received =
            pending.body.len() as u64 + pending.single_body.as_ref().map_or(0, |b| b.len() as u64);
        if pending.header.is_some() && received == pending.body_size {
            let pending = channel
                .pending
                .take()
                .expect("pending publish checked above");
            self.complete_publish(ch, pending)?;
        }
        Ok(())
    }

    fn complete_publish(&mut self, ch: u16, pending: PendingPublish) -> Result<(), AmqpError> {
        let (vhost, user) = self.vhost_and_user()?;
        let user = user.name.as_str();
        let Some((properties, raw_properties)) = pending.header else {
            return Err(AmqpError::new(
                reply::INTERNAL_ERROR,
                "publish completed without a header",
            ));
        };
        let body = match pending.single_body {
            Some(body) => body,
            None => pending.body.freeze(),
        };
        let actor = Actor {
            user,
            connection_id: self.connection_id,
        };
        // Write permission (cached per channel), topic permission and user_id (RabbitMQ's
        // order): the core's checks, made here at basic.publish (a transaction routes at
        // tx.commit).
        vhost
            .authorize_publish(
                &mut self.channel(ch).publisher,
                actor,
                &pending.exchange,
                &pending.routing_key,
                properties.user_id.as_deref(),
                &TopicVariables::NONE,
            )
            .map_err(|e| AmqpError::from(e.error).on(60, 40))?;
        if let Some(expiration) = &properties.expiration {
            if let Err(problem) = parse_expiration(expiration) {
                return Err(AmqpError::new(reply::PRECONDITION_FAILED, problem).on(60, 40));
            }
        }
        let mut properties = properties;
        let mut raw_properties = raw_properties;
        if properties.reply_to.as_deref() == Some(DIRECT_REPLY_TO) {
            let Some(reply_queue) = self.channel(ch).reply_queue.clone() else {
                return Err(AmqpError::new(
                    reply::PRECONDITION_FAILED,
                    "fast reply consumer does not exist",
                )
                .on(60, 40));
            };
            properties.reply_to = Some(reply_queue);
            let mut encoded = BytesMut::new();
            encode_properties(&properties, &mut encoded).map_err(|e| {
                AmqpError::new(reply::SYNTAX_ERROR, format!("content header: {e}")).on(60, 40)
            })?;
            raw_properties = encoded.freeze();
        }
        // A small message is copied, properties and body into one allocation, so that it
        // does not pin the connection's read buffer and costs one free when it goes.
        let (raw_properties, body) = if body.len() < COPY_BODY_BELOW {
            pack_properties_and_body(&raw_properties, &body).unwrap_or_else(|| {
                (
                    Bytes::copy_from_slice(&raw_properties),
                    Bytes::copy_from_slice(&body),
                )
            })
        } else {
            (raw_properties, body)
        };
        let message = Arc::new(Message {
            exchange: pending.exchange,
            routing_key: pending.routing_key,
            properties,
            encoded_properties: Some(raw_properties),
            body,
        });
        let channel = self.channel(ch);
        match channel.mode {
            Mode::Transactional => {
                channel.tx_publishes.push(TxPublish {
                    mandatory: pending.mandatory,
                    message,
                });
                Ok(())
            }
            Mode::Confirm => {
                let outcome = self.route_and_enqueue(ch, &vhost, pending.mandatory, message)?;
                let channel = self.channel(ch);
                channel.publish_seq += 1;
                let seq = channel.publish_seq;
                if !outcome.accepted && !channel.durable_waits.is_empty() {
                    // Earlier publishes still wait for the disk: the nack waits behind them.
                    channel.durable_waits.push_back(DurableWait {
                        publish_seq: seq,
                        store_seq: 0,
                        nack: true,
                    });
                    return Ok(());
                }
                if let Some(store_seq) = outcome.durable_seq().filter(|_| outcome.accepted) {
                    channel.durable_waits.push_back(DurableWait {
                        publish_seq: seq,
                        store_seq,
                        nack: false,
                    });
                }
                if !outcome.accepted {
                    // A queue refused it (x-overflow reject-publish): confirm what came
                    // before, then nack this one.
                    let seq = channel.publish_seq;
                    channel.publish_seq -= 1;
                    let earlier = channel.take_confirm();
                    let channel = self.channel(ch);
                    channel.publish_seq = seq;
                    channel.confirmed_seq = seq;
                    if let Some((ack, confirmed)) = earlier {
                        vhost.counters().record_confirmed(confirmed);
                        self.outbox.send_method(ch, &ack);
                    }
                    self.outbox.send_method(
                        ch,
                        &Method::BasicNack {
                            delivery_tag: seq,
                            multiple: false,
                            requeue: false,
                        },
                    );
                    return Ok(());
                }
                if channel.publish_seq == channel.confirmed_seq + 1 {
                    self.pending_confirms.push(ch);
                }
                Ok(())
            }
            Mode::Plain => self
                .route_and_enqueue(ch, &vhost, pending.mandatory, message)
                .map(|_| ()),
        }
    }

    fn route_and_enqueue(
        &mut self,
        ch: u16,
        vhost: &Arc<VHost>,
        mandatory: bool,
        message: Arc<Message>,
    ) -> Result<PublishOutcome, AmqpError> {
        let outcome = vhost
            .publish_authorized(message, mandatory)
            .map_err(|e| AmqpError::from(e.error).on(60, 40))?;
        if let Some(returned) = &outcome.returned {
            // Confirms for earlier messages go first; this message's confirm follows its
            // return, as RabbitMQ orders them.
            self.flush_confirms();
            vhost.counters().record_returned();
            self.outbox.send_return(ch, 312, "NO_ROUTE", returned);
        }
        Ok(outcome)
    }
}
