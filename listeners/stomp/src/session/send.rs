//! SEND: publishing through the core, the queues `/queue/` destinations declare, and the
//! private reply queues behind `/temp-queue/` reply-to headers.

use std::sync::Arc;

use bytes::Bytes;
use warren_core::access::Access;
use warren_core::consumer::ConsumerSpec;
use warren_core::message::Message;
use warren_core::topic_access::TopicVariables;
use warren_core::value::Table;
use warren_core::vhost::QueueDeclare;

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
        if let Some(user_id) = &properties.user_id {
            if *user_id != user.name {
                return Err(StompError::new(
                    "access_refused",
                    format!(
                        "user_id property set to '{user_id}' but authenticated user was '{}'",
                        user.name
                    ),
                ));
            }
        }
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
        if !self.publish_allowed.iter().any(|x| x == exchange) {
            vhost.check_publish(&user.name, exchange)?;
            if self.publish_allowed.len() >= 16 {
                self.publish_allowed.remove(0);
            }
            self.publish_allowed.push(exchange.to_string());
        }
        vhost.check_topic(
            &user.name,
            Access::Write,
            exchange,
            routing_key,
            &TopicVariables::NONE,
        )?;
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
        let mut routed = std::mem::take(&mut self.routed);
        routed.clear();
        let result = vhost.route(exchange, &message, &mut routed);
        if result.is_ok() && !routed.is_empty() {
            let message = match message.without_bcc() {
                Some(stripped) => Arc::new(stripped),
                None => message,
            };
            // Through the vhost, so a persistent message reaching a durable queue is written to
            // the message store; a RECEIPT for this frame then waits for its fsync.
            if let Some(seq) = vhost.enqueue_routed(message, &routed).durable_seq {
                self.last_durable_seq = self.last_durable_seq.max(seq);
            }
        }
        routed.clear();
        self.routed = routed;
        result.map_err(StompError::from)
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
        let queue = vhost.queue_for(actor, &declared.name, warren_core::access::Access::Read)?;
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
        let consumer_id = vhost.consume(
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
