//! Incoming links: the client sends, the broker receives and publishes into an exchange or
//! queue through the core, granting credit in batches and settling after routing.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{
    AmqpError, DeliveryNumber, Error, LinkError, ReceiverSettleMode, Role, SessionError,
};
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Rejected, Released, TargetArchetype};
use fe2o3_amqp_types::performatives::{Attach, Disposition, Performative, Transfer};
use warren_core::vhost::{Actor, PublishOptions, PublishStage};

use crate::address::{parse_target, TargetAddress};
use crate::codec::encode_amqp_frame;
use crate::mapping::{decode_message, IncomingMessage};
use crate::session::errors;

use super::{unattached, Context, Link, Session, INCOMING_WINDOW, PUBLISH_CREDIT};

pub(super) struct IncomingLink {
    pub(super) target: Option<TargetAddress>,
    pub(super) credit: u32,
    pub(super) delivery_count: u32,
    /// A multi-frame delivery in progress: its id, whether it was sent settled, its bytes.
    pub(super) partial: Option<(DeliveryNumber, bool, BytesMut)>,
}

fn accepted() -> DeliveryState {
    DeliveryState::Accepted(Accepted {})
}

fn released() -> DeliveryState {
    DeliveryState::Released(Released {})
}

fn rejected(error: Error) -> DeliveryState {
    DeliveryState::Rejected(Rejected { error: Some(error) })
}
impl Session {
    /// The client attaches a sender: the broker receives into an exchange or queue.
    pub(super) fn attach_incoming(
        &mut self,
        context: &mut Context<'_>,
        attach: Attach,
        out: &mut BytesMut,
    ) {
        let handle = attach.handle.0;
        let address = match attach.target.as_deref() {
            Some(TargetArchetype::Target(target)) => target.address.clone(),
            _ => None,
        };
        let resolved = match address.as_deref() {
            None => Ok(None),
            Some(address) => resolve_target(context, address).map(Some),
        };
        let mut reply = Attach {
            name: attach.name,
            handle: attach.handle,
            role: Role::Receiver,
            snd_settle_mode: attach.snd_settle_mode,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: attach.source,
            target: attach.target,
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: None,
            max_message_size: Some(context.max_message_size as u64),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        match resolved {
            Ok(target) => {
                encode_amqp_frame(out, self.channel, &Performative::Attach(reply), &[]);
                let delivery_count = attach.initial_delivery_count.unwrap_or(0);
                // While a resource alarm is raised a publisher gets no credit (RabbitMQ
                // 4.x blocks AMQP 1.0 publishers the same way); `unblock` grants it later.
                let credit = if context.blocked { 0 } else { PUBLISH_CREDIT };
                self.links.insert(
                    handle,
                    Link::Incoming(IncomingLink {
                        target,
                        credit,
                        delivery_count,
                        partial: None,
                    }),
                );
                if credit > 0 {
                    let flow =
                        self.flow_frame(Some(handle), Some(delivery_count), Some(credit), false);
                    encode_amqp_frame(out, self.channel, &flow, &[]);
                }
            }
            Err(error) => {
                // Refusing a link: attach with a null terminus, then detach with the error
                // (AMQP 1.0 2.6.3).
                reply.target = None;
                encode_amqp_frame(out, self.channel, &Performative::Attach(reply), &[]);
                self.send_detach(handle, Some(error), out);
            }
        }
    }

    /// A resource alarm cleared: tops up the credit of every publishing link that ran low.
    pub fn unblock(&mut self, out: &mut BytesMut) {
        let mut grants = Vec::new();
        for (&handle, link) in self.links.iter_mut() {
            if let Link::Incoming(link) = link {
                if link.credit <= PUBLISH_CREDIT / 2 {
                    link.credit = PUBLISH_CREDIT;
                    grants.push((handle, link.delivery_count));
                }
            }
        }
        for (handle, delivery_count) in grants {
            let frame = self.flow_frame(
                Some(handle),
                Some(delivery_count),
                Some(PUBLISH_CREDIT),
                false,
            );
            encode_amqp_frame(out, self.channel, &frame, &[]);
        }
    }

    /// Whether dispositions wait for the message store's fsync.
    pub fn awaits_durability(&self) -> bool {
        !self.durable_waits.is_empty()
    }

    /// Sends the dispositions whose messages the store now has on disk (`durable` is the
    /// store's durable sequence number).
    /// `failed` says whether the publish that waited for a store sequence number failed
    /// (a forwarded publish its queue's home node did not take): it is released, so the
    /// client may send it again.
    pub fn flush_durable(
        &mut self,
        durable: u64,
        failed: &dyn Fn(u64) -> bool,
        out: &mut BytesMut,
    ) {
        while let Some((seq, _, _)) = self.durable_waits.front() {
            if *seq > durable {
                break;
            }
            if let Some((seq, id, state)) = self.durable_waits.pop_front() {
                let state = if failed(seq) { released() } else { state };
                self.dispositions.push((id, state));
            }
        }
        self.flush_dispositions(out);
    }

    pub(super) fn handle_transfer(
        &mut self,
        context: &mut Context<'_>,
        transfer: Transfer,
        payload: Bytes,
        out: &mut BytesMut,
    ) -> Result<(), Error> {
        if self.incoming_window == 0 {
            return Err(errors::session(
                SessionError::WindowViolation,
                "transfer beyond the incoming window",
            ));
        }
        self.next_incoming_id = self.next_incoming_id.wrapping_add(1);
        self.incoming_window -= 1;
        if self.incoming_window < INCOMING_WINDOW / 2 {
            self.incoming_window = INCOMING_WINDOW;
            let frame = self.flow_frame(None, None, None, false);
            encode_amqp_frame(out, self.channel, &frame, &[]);
        }
        let handle = transfer.handle.0;
        let channel = self.channel;
        let link = match self.links.get_mut(&handle) {
            None => return Err(unattached(handle)),
            Some(Link::Outgoing(_)) => {
                return Err(errors::amqp(
                    AmqpError::IllegalState,
                    format!("transfer on link handle {handle}, on which the broker is the sender"),
                ))
            }
            Some(Link::Incoming(link)) => link,
        };
        if transfer.aborted {
            link.partial = None;
            return Ok(());
        }
        let (delivery_id, settled, message) = match link.partial.take() {
            Some((delivery_id, settled, mut bytes)) => {
                bytes.extend_from_slice(&payload);
                (delivery_id, settled, bytes)
            }
            None => {
                let Some(delivery_id) = transfer.delivery_id else {
                    return Err(errors::amqp(
                        AmqpError::InvalidField,
                        "the first transfer of a delivery needs a delivery-id",
                    ));
                };
                if link.credit == 0 {
                    let error = errors::link(
                        LinkError::TransferLimitExceeded,
                        "transfer without link credit",
                    );
                    self.links.remove(&handle);
                    self.send_detach(handle, Some(error), out);
                    return Ok(());
                }
                link.credit -= 1;
                link.delivery_count = link.delivery_count.wrapping_add(1);
                (
                    delivery_id,
                    transfer.settled.unwrap_or(false),
                    BytesMut::from(&payload[..]),
                )
            }
        };
        if message.len() > context.max_message_size {
            self.links.remove(&handle);
            let error = errors::link(
                LinkError::MessageSizeExceeded,
                format!(
                    "message size {} exceeds the maximum of {} bytes",
                    message.len(),
                    context.max_message_size
                ),
            );
            self.send_detach(handle, Some(error), out);
            return Ok(());
        }
        if transfer.more {
            link.partial = Some((delivery_id, settled, message));
            return Ok(());
        }
        let target = link.target.clone();
        if link.credit <= PUBLISH_CREDIT / 2 && !context.blocked {
            link.credit = PUBLISH_CREDIT;
            let (count, credit) = (link.delivery_count, link.credit);
            let frame = self.flow_frame(Some(handle), Some(count), Some(credit), false);
            encode_amqp_frame(out, channel, &frame, &[]);
        }
        let (state, durable_seq) = self.publish(context, target.as_ref(), message.freeze())?;
        if !settled {
            // A durable message in a durable queue is accepted once it is on disk.
            match durable_seq {
                Some(seq) => self.durable_waits.push_back((seq, delivery_id, state)),
                None => self.dispositions.push((delivery_id, state)),
            }
        }
        Ok(())
    }

    /// Routes one complete message and returns its outcome, with the store sequence number
    /// to wait for when a durable message reached a durable queue. An error ends the
    /// session: a routing key the user's topic permission does not allow writing to
    /// (`amqp:unauthorized-access`, as RabbitMQ 4.x's rabbit_amqp_session).
    fn publish(
        &mut self,
        context: &Context<'_>,
        target: Option<&TargetAddress>,
        bytes: Bytes,
    ) -> Result<(DeliveryState, Option<u64>), Error> {
        let incoming = match decode_message(bytes) {
            Ok(incoming) => incoming,
            Err(error) => {
                return Ok((
                    rejected(errors::amqp(AmqpError::DecodeError, error.0)),
                    None,
                ))
            }
        };
        let IncomingMessage {
            mut message,
            to,
            subject,
        } = incoming;
        let resolved;
        let target = match target {
            Some(target) => target,
            None => {
                let Some(to) = to.as_deref() else {
                    let error = errors::amqp(
                        AmqpError::PreconditionFailed,
                        "anonymous terminus requires 'to' address to be set",
                    );
                    return Ok((rejected(error), None));
                };
                match resolve_target(context, to) {
                    Ok(target) => {
                        resolved = target;
                        &resolved
                    }
                    // RabbitMQ 4.x: a `to` naming a missing queue is released (the message
                    // reached no queue); a bad address or a missing exchange is rejected.
                    Err(error) if is_missing_queue(&error) => return Ok((released(), None)),
                    Err(error) if error.condition == AmqpError::InvalidField.into() => {
                        let error = errors::amqp(
                            AmqpError::PreconditionFailed,
                            format!("bad 'to' address string: {to}"),
                        );
                        return Ok((rejected(error), None));
                    }
                    Err(error) => return Ok((rejected(error), None)),
                }
            }
        };
        let (exchange, routing_key) = match target {
            TargetAddress::Exchange {
                exchange,
                routing_key,
            } => (
                exchange.as_str(),
                routing_key.clone().or(subject).unwrap_or_default(),
            ),
            TargetAddress::Queue(queue) => ("", queue.clone()),
            TargetAddress::DefaultExchangeBySubject => ("", subject.unwrap_or_default()),
        };
        message.exchange = exchange.into();
        message.routing_key = routing_key.into();
        let actor = Actor {
            user: context.user,
            connection_id: context.connection_id,
        };
        // Through the core: write and topic permissions, user_id, routing, and the store for a
        // durable message reaching a durable queue (its disposition then waits for the fsync).
        let outcome = match context.vhost.publish(
            &mut self.publisher,
            actor,
            Arc::new(message),
            PublishOptions::default(),
        ) {
            Ok(outcome) => outcome,
            // A routing key the topic permission refuses ends the session.
            Err(refused) if refused.stage == PublishStage::Topic => {
                return Err(errors::from_core(&refused.error))
            }
            Err(refused) if refused.stage == PublishStage::UserId => {
                let error = errors::amqp(AmqpError::PreconditionFailed, refused.error.message);
                return Ok((rejected(error), None));
            }
            Err(refused) => return Ok((rejected(errors::from_core(&refused.error)), None)),
        };
        Ok(if !outcome.routed() {
            (released(), None)
        } else if outcome.accepted {
            (accepted(), outcome.durable_seq())
        } else {
            (DeliveryState::Rejected(Rejected { error: None }), None)
        })
    }

    /// Sends the dispositions of this batch, one frame per run of consecutive ids with the
    /// same outcome.
    pub(super) fn flush_dispositions(&mut self, out: &mut BytesMut) {
        if self.dispositions.is_empty() {
            return;
        }
        let dispositions = std::mem::take(&mut self.dispositions);
        let mut run: Option<(DeliveryNumber, DeliveryNumber, DeliveryState)> = None;
        for (id, state) in dispositions {
            run = match run {
                Some((first, last, run_state))
                    if last.wrapping_add(1) == id && same_outcome(&run_state, &state) =>
                {
                    Some((first, id, run_state))
                }
                Some((first, last, run_state)) => {
                    self.send_disposition(first, last, run_state, out);
                    Some((id, id, state))
                }
                None => Some((id, id, state)),
            };
        }
        if let Some((first, last, state)) = run {
            self.send_disposition(first, last, state, out);
        }
    }

    fn send_disposition(
        &self,
        first: DeliveryNumber,
        last: DeliveryNumber,
        state: DeliveryState,
        out: &mut BytesMut,
    ) {
        let disposition = Disposition {
            role: Role::Receiver,
            first,
            last: (last != first).then_some(last),
            settled: true,
            state: Some(state),
            batchable: false,
        };
        encode_amqp_frame(
            out,
            self.channel,
            &Performative::Disposition(disposition),
            &[],
        );
    }
}

fn same_outcome(a: &DeliveryState, b: &DeliveryState) -> bool {
    matches!(
        (a, b),
        (DeliveryState::Accepted(_), DeliveryState::Accepted(_))
            | (DeliveryState::Released(_), DeliveryState::Released(_))
    )
}

fn is_missing_queue(error: &Error) -> bool {
    error.condition == AmqpError::NotFound.into()
        && error
            .description
            .as_deref()
            .is_some_and(|text| text.starts_with("no queue "))
}

/// Resolves a target address against the vhost: the exchange or queue must exist and the
/// user must be allowed to publish there.
fn resolve_target(context: &Context<'_>, address: &str) -> Result<TargetAddress, Error> {
    let target = parse_target(address).map_err(|e| errors::amqp(AmqpError::InvalidField, e.0))?;
    let vhost = context.vhost;
    let exchange = match &target {
        TargetAddress::Exchange { exchange, .. } => {
            if vhost.exchange(exchange).is_none() {
                return Err(errors::amqp(
                    AmqpError::NotFound,
                    format!("no exchange '{exchange}' in vhost '{}'", vhost.name()),
                ));
            }
            exchange.as_str()
        }
        TargetAddress::Queue(queue) => {
            if vhost.queue_instance(queue).is_none() {
                return Err(errors::amqp(
                    AmqpError::NotFound,
                    format!("no queue '{queue}' in vhost '{}'", vhost.name()),
                ));
            }
            ""
        }
        TargetAddress::DefaultExchangeBySubject => "",
    };
    vhost
        .check_publish(context.user, exchange)
        .map_err(|e| errors::from_core(&e))?;
    Ok(target)
}
