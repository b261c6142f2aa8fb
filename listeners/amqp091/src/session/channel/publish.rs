//! basic.publish with its content header and body frames, routed through the core.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use warren_core::message::parse_expiration;
use warren_core::message::{Message, Properties};
use warren_core::packed::pack_properties_and_body;
use warren_core::topic_access::TopicVariables;
use warren_core::vhost::{Actor, PublishOutcome, VHost, DIRECT_REPLY_TO};

use super::confirm::DurableWait;
use super::tx::TxPublish;
use super::{Channel, Mode};
use crate::codec::{
    decode_properties, encode_properties, Frame, Method, EMPTY_PROPERTIES, FRAME_BODY,
};
use crate::reply::{self, AmqpError};
use crate::session::Session;

/// Bodies up to this size are copied out of the read buffer so a queued message does not pin
/// the whole buffer chunk it arrived in.
const COPY_BODY_BELOW: usize = 4096;

/// A publish waiting for its content header and body frames.
pub(super) struct PendingPublish {
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
}

impl Session {
    /// basic.publish: the content header and body frames follow.
    pub(super) fn basic_publish(
        &mut self,
        ch: u16,
        exchange: String,
        routing_key: String,
        mandatory: bool,
        immediate: bool,
    ) -> Result<(), AmqpError> {
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
        Ok(())
    }

    /// A content header or body frame for the publish in progress on `ch`.
    pub(in crate::session) fn content_frame(
        &mut self,
        ch: u16,
        frame: Frame,
    ) -> Result<(), AmqpError> {
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

    pub(super) fn route_and_enqueue(
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
