//! SEND: publishing through the core, the queues `/queue/` destinations declare, and the
//! private reply queues behind `/temp-queue/` reply-to headers.

use std::sync::Arc;

use bytes::Bytes;
use warren_core::consumer::ConsumerSpec;
use warren_core::message::Message;
use warren_core::value::Table;
use warren_core::vhost::{Actor, PublishOptions, PublishStage, QueueDeclare};

use super::subscribe::{queue_declare, ActiveSubscription, QueueKind};
use super::{generated_name, Session};
use crate::codec::Frame;
use crate::destination::Destination;
use crate::error::StompError;
use crate::headers::properties_from_send;
use crate::outbox::{AckMode, SinkHandle, Subscription};

/// Bodies up to this size are copied out of the read buffer so a queued message does not pin
/// the whole buffer chunk it arrived in.
const COPY_BODY_BELOW: usize = 4096;

impl Session {
    pub(super) fn send(&mut self, frame: &Frame) -> Result<(), StompError> {
        let (vhost, user) = self.open()?;
        self.published = true;
        let destination_text = frame
            .header("destination")
            .ok_or_else(|| StompError::missing_destination("SEND"))?;
        if frame.header("message-id").is_some() {
            return Err(StompError::header_not_allowed("message-id", "SEND"));
        }
        let destination = Destination::parse(destination_text)?;
        match &destination {
            Destination::Queue(name) => self.ensure_queue(name, frame)?,
            Destination::TempQueue(_) => {
                return Err(StompError::destination_not_allowed(
                    destination_text,
                    "SEND",
                ))
            }
            _ => {}
        }
        let reply_to = match frame.header("reply-to") {
            None => None,
            Some(text) => match Destination::parse(text) {
                Ok(Destination::TempQueue(name)) => Some(self.ensure_reply_queue(&name)?),
                _ => Some(text.to_string()),
            },
        };
        let properties = properties_from_send(frame, reply_to)?;
        let max = self.config.max_message_size;
        if frame.body.len() > max {
            return Err(StompError::new(
                "Message too large",
                format!(
                    "message size {} is larger than configured max size {max}",
                    frame.body.len()
                ),
            ));
        }
        let (exchange, routing_key) = destination.routing();
        let body = if frame.body.len() < COPY_BODY_BELOW {
            Bytes::copy_from_slice(&frame.body)
        } else {
            frame.body.clone()
        };
        let message = Arc::new(Message {
            exchange: Arc::from(exchange),
            routing_key: Arc::from(routing_key),
            properties,
            encoded_properties: None,
            body,
        });
        let actor = Actor {
            user: &user.name,
            connection_id: self.connection_id,
        };
        // Through the core: write and topic permissions, user-id, routing, and the store for
        // a persistent message reaching a durable queue (a RECEIPT for this frame then waits
        // for its fsync).
        let outcome = vhost
            .publish(
                &mut self.publisher,
                actor,
                message,
                PublishOptions::default(),
            )
            .map_err(|refused| match refused.stage {
                // RabbitMQ's STOMP adapter names a user-id mismatch access_refused.
                PublishStage::UserId => StompError::new("access_refused", refused.error.message),
                _ => StompError::from(refused.error),
            })?;
        if let Some(seq) = outcome.durable_seq() {
            self.last_durable_seq = self.last_durable_seq.max(seq);
        }
        Ok(())
    }

    /// Declares a `/queue/` destination's queue once per connection (again if it was
    /// deleted meanwhile), with the arguments its headers ask for.
    pub(super) fn ensure_queue(&mut self, name: &str, frame: &Frame) -> Result<(), StompError> {
        let (vhost, user) = self.open()?;
        // Declared before and still there (another client may have deleted it since).
        if self.declared_queues.contains(name) && vhost.queue(name).is_some() {
            return Ok(());
        }
        // On SEND `persistent` is the message's delivery mode, not the queue's durability.
        let declare = queue_declare(
            name.to_string(),
            QueueKind::Named,
            frame,
            frame.command != crate::codec::Command::Send,
        )?;
        let exclusive = declare.exclusive;
        vhost.declare_queue(self.actor(&user), declare)?;
        if exclusive {
            self.exclusive_queues.push(name.to_string());
        }
        self.declared_queues.insert(name.to_string());
        Ok(())
    }

    /// The queue replies to `/temp-queue/<name>` go to: created on first use, exclusive to
    /// this connection, consumed with auto-ack on subscription `/temp-queue/<name>`.
    fn ensure_reply_queue(&mut self, name: &str) -> Result<String, StompError> {
        if let Some(queue) = self.reply_queues.get(name) {
            return Ok(queue.clone());
        }
        let (vhost, user) = self.open()?;
        let actor = self.actor(&user);
        let declared = vhost.declare_queue(
            actor,
            QueueDeclare {
                name: generated_name("stomp.gen-"),
                passive: false,
                durable: false,
                exclusive: true,
                auto_delete: true,
                arguments: Table::new(),
            },
        )?;
        self.exclusive_queues.push(declared.name.clone());
        let queue =
            vhost.queue_instance_for(actor, &declared.name, warren_core::access::Access::Read)?;
        let id: Arc<str> = Arc::from(format!("/temp-queue/{name}"));
        let subscription = Subscription::new(
            Arc::clone(&self.outbox),
            Arc::clone(&id),
            Arc::clone(&queue),
            AckMode::Auto,
            0,
        );
        let spec = ConsumerSpec {
            tag: Arc::clone(&id),
            connection_id: self.connection_id,
            needs_settlement: false,
            exclusive: false,
            priority: 0,
            arguments: Table::new(),
        };
        let consumer_id = vhost.consume_instance(
            &queue,
            spec,
            Arc::new(SinkHandle(Arc::clone(&subscription))),
        )?;
        self.subscriptions.insert(
            id,
            ActiveSubscription {
                subscription: Arc::clone(&subscription),
                consumer_id,
                destination: Destination::TempQueue(name.to_string()),
            },
        );
        subscription.start();
        self.reply_queues
            .insert(name.to_string(), declared.name.clone());
        Ok(declared.name)
    }
}
