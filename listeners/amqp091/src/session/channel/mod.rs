//! Channel state and the channel-level methods, one file per method family: exchange,
//! queue, basic (consuming), publish, confirm and tx.

mod basic;
mod confirm;
mod exchange;
mod publish;
mod queue;
mod tx;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use warren_core::access::User;
use warren_core::connections::ChannelSummary;
use warren_core::queue::Settlement;
use warren_core::queue_type::QueueInstance;
use warren_core::vhost::{Actor, Publisher, VHost};

use super::Session;
use crate::codec::Method;
use crate::outbox::Unacked;
use crate::reply::{self, AmqpError};
use confirm::DurableWait;
use publish::PendingPublish;
use tx::TxPublish;

/// A consumer registered on a channel.
pub(super) struct ChannelConsumer {
    pub(super) queue: Arc<dyn QueueInstance>,
    pub(super) consumer_id: u64,
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

    /// What the management API lists of this channel from the reader's side.
    pub(super) fn facts(&self) -> ChannelSummary {
        ChannelSummary {
            prefetch: self.consumer_prefetch,
            consumers: u32::try_from(self.consumers.len()).unwrap_or(u32::MAX),
            confirm: self.mode == Mode::Confirm,
            transactional: self.mode == Mode::Transactional,
            ..ChannelSummary::default()
        }
    }

    pub(super) fn forget_consumer(&mut self, tag: &str) {
        self.consumers.remove(tag);
    }

    pub(super) fn take_consumers(&mut self) -> Vec<ChannelConsumer> {
        self.consumers.drain().map(|(_, c)| c).collect()
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

    /// Tells the outbox what the management API lists of channel `ch` (after its prefetch,
    /// consumers or mode changed).
    pub(super) fn report_channel(&self, ch: u16) {
        if let Some(channel) = self.channels.get(&ch) {
            self.outbox.set_channel_facts(ch, channel.facts());
        }
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

            method @ (Method::ExchangeDeclare { .. }
            | Method::ExchangeDelete { .. }
            | Method::ExchangeBind { .. }
            | Method::ExchangeUnbind { .. }) => self.exchange_method(ch, &vhost, actor, method)?,
            method @ (Method::QueueDeclare { .. }
            | Method::QueueBind { .. }
            | Method::QueueUnbind { .. }
            | Method::QueuePurge { .. }
            | Method::QueueDelete { .. }) => self.queue_method(ch, &vhost, actor, method)?,
            Method::BasicPublish {
                exchange,
                routing_key,
                mandatory,
                immediate,
            } => {
                self.basic_publish(ch, exchange, routing_key, mandatory, immediate)?;
            }
            method @ (Method::BasicQos { .. }
            | Method::BasicConsume { .. }
            | Method::BasicCancel { .. }
            | Method::BasicGet { .. }
            | Method::BasicAck { .. }
            | Method::BasicReject { .. }
            | Method::BasicNack { .. }
            | Method::BasicRecover { .. }
            | Method::BasicRecoverAsync { .. }) => self.basic_method(ch, &vhost, actor, method)?,
            Method::ConfirmSelect { no_wait } => self.confirm_select(ch, no_wait)?,
            method @ (Method::TxSelect | Method::TxCommit | Method::TxRollback) => {
                self.tx_method(ch, &vhost, method)?
            }
            method => return Err(not_a_client_method(&method)),
        }
        Ok(())
    }
}

/// The error for a method only the server sends.
fn not_a_client_method(method: &Method) -> AmqpError {
    AmqpError::new(
        reply::COMMAND_INVALID,
        format!("'{}' may not be sent by a client", method.name()),
    )
}
