//! Outgoing links: the client receives, the broker sends from a queue. Each is a core
//! consumer whose credit is the link credit ([`LinkSink`]); deliveries arrive through the
//! connection's mailbox and become transfers under the session's window.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::BytesMut;
use fe2o3_amqp_types::definitions::{
    AmqpError, DeliveryNumber, Error, Handle, ReceiverSettleMode, Role, SenderSettleMode,
};
use fe2o3_amqp_types::messaging::{DeliveryState, Modified};
use fe2o3_amqp_types::performatives::{Attach, Disposition, Performative, Transfer};
use fe2o3_amqp_types::primitives::Binary;
use warren_core::access::Access;
use warren_core::consumer::{ConsumerSpec, Delivery};
use warren_core::delivery_window::Tagged;
use warren_core::queue::Settlement;
use warren_core::queue_type::QueueInstance;
use warren_core::value::Table;
use warren_core::vhost::{Actor, VHost};

use crate::address::parse_source;
use crate::codec::{encode_amqp_frame, performative_size, FRAME_HEADER_SIZE};
use crate::mapping::encode_message;
use crate::session::errors;
use crate::session::sink::{LinkSink, MailboxEntry};
use crate::stream_filters::stream_filters;

use super::{Context, Link, Session};

pub(super) struct OutgoingLink {
    pub(super) link_id: u64,
    pub(super) vhost: Arc<VHost>,
    pub(super) queue: Arc<dyn QueueInstance>,
    pub(super) consumer_id: u64,
    pub(super) sink: Arc<LinkSink>,
}
pub(super) struct UnsettledTransfer {
    pub(super) delivery_id: DeliveryNumber,
    pub(super) queue: Arc<dyn QueueInstance>,
    pub(super) message_id: u64,
    pub(super) link_id: u64,
}

/// A delivery waiting for the client's incoming window.
pub(super) struct Pending {
    pub(super) handle: u32,
    pub(super) delivery: Delivery,
}

impl Tagged for UnsettledTransfer {
    type Tag = DeliveryNumber;

    fn tag(&self) -> DeliveryNumber {
        self.delivery_id
    }
}

impl Session {
    /// The client attaches a receiver: the broker sends from a queue.
    pub(super) fn attach_outgoing(
        &mut self,
        context: &mut Context<'_>,
        attach: Attach,
        out: &mut BytesMut,
    ) {
        let handle = attach.handle.0;
        let address = attach
            .source
            .as_ref()
            .and_then(|source| source.address.clone());
        let pre_settled = attach.snd_settle_mode == SenderSettleMode::Settled;
        let queue = match address.as_deref() {
            None => Err(errors::amqp(
                AmqpError::InvalidField,
                "a receiving link needs a source address such as /queues/:queue",
            )),
            Some(address) => parse_source(address)
                .map_err(|e| errors::amqp(AmqpError::InvalidField, e.0))
                .and_then(|name| {
                    let actor = Actor {
                        user: context.user,
                        connection_id: context.connection_id,
                    };
                    context
                        .vhost
                        .queue_instance_for(actor, &name, Access::Read)
                        .map_err(|e| errors::from_core(&e))
                }),
        };
        let mut reply = Attach {
            name: attach.name.clone(),
            handle: attach.handle,
            role: Role::Sender,
            snd_settle_mode: if pre_settled {
                SenderSettleMode::Settled
            } else {
                SenderSettleMode::Unsettled
            },
            rcv_settle_mode: ReceiverSettleMode::First,
            source: attach.source,
            target: attach.target,
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: Some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        let queue = match queue {
            Ok(queue) => queue,
            Err(error) => {
                reply.source = None;
                encode_amqp_frame(out, self.channel, &Performative::Attach(reply), &[]);
                self.send_detach(handle, Some(error), out);
                return;
            }
        };
        // A stream reads its consumer's filters (where to start, which values) and the
        // reply's source echoes those it took; other queue types take none.
        let arguments = if queue.queue_type().capabilities().consumers_need_offset {
            match stream_filters(reply.source.as_ref().and_then(|s| s.filter.as_ref())) {
                Ok(filters) => {
                    if let Some(source) = reply.source.as_mut() {
                        source.filter = Some(filters.accepted).filter(|f| !f.is_empty());
                    }
                    filters.arguments
                }
                Err(reason) => {
                    reply.source = None;
                    encode_amqp_frame(out, self.channel, &Performative::Attach(reply), &[]);
                    self.send_detach(
                        handle,
                        Some(errors::amqp(AmqpError::InvalidField, reason)),
                        out,
                    );
                    return;
                }
            }
        } else {
            Table::new()
        };
        let link_id = *context.next_link_id;
        *context.next_link_id += 1;
        let sink = LinkSink::new(self.channel, link_id, Arc::clone(context.mailbox));
        let spec = ConsumerSpec {
            tag: Arc::from(attach.name.as_str()),
            connection_id: context.connection_id,
            needs_settlement: !pre_settled,
            exclusive: false,
            priority: 0,
            arguments,
        };
        match context
            .vhost
            .consume_instance(&queue, spec, Arc::clone(&sink) as _)
        {
            Ok(consumer_id) => {
                encode_amqp_frame(out, self.channel, &Performative::Attach(reply), &[]);
                self.outgoing_handles.insert(link_id, handle);
                self.links.insert(
                    handle,
                    Link::Outgoing(OutgoingLink {
                        link_id,
                        vhost: Arc::clone(context.vhost),
                        queue,
                        consumer_id,
                        sink,
                    }),
                );
            }
            Err(error) => {
                reply.source = None;
                encode_amqp_frame(out, self.channel, &Performative::Attach(reply), &[]);
                self.send_detach(handle, Some(errors::from_core(&error)), out);
            }
        }
    }

    /// Cancels an outgoing link's consumer and requeues what it left unsettled.
    pub(super) fn release_link(&mut self, link: Link) {
        let Link::Outgoing(link) = link else {
            return;
        };
        link.sink.close();
        // Through the vhost, so an auto-delete queue losing its last consumer is deleted.
        link.vhost.cancel_instance(&link.queue, link.consumer_id);
        self.outgoing_handles.remove(&link.link_id);
        let mut returned: Vec<u64> = self
            .unsettled
            .take_where(|unsettled| unsettled.link_id == link.link_id)
            .into_iter()
            .map(|unsettled| unsettled.message_id)
            .collect();
        // Queued for the link but never sent: returned without counting a failed delivery.
        let mut never_sent = Vec::new();
        let mut kept = VecDeque::new();
        for pending in self.pending.drain(..) {
            if self.links.contains_key(&pending.handle) {
                kept.push_back(pending);
            } else if pending.delivery.needs_settlement {
                never_sent.push(pending.delivery.id);
            }
        }
        self.pending = kept;
        if !returned.is_empty() {
            returned.sort_unstable();
            link.queue.settle(&returned, Settlement::Requeue);
        }
        if !never_sent.is_empty() {
            never_sent.sort_unstable();
            link.queue.settle(&never_sent, Settlement::Release);
        }
    }

    /// Whether flows wait for [`Session::finish_flows`] (after the mailbox was processed).
    pub fn has_flows_to_answer(&self) -> bool {
        !self.answer_flows.is_empty()
    }

    /// Answers drain and echo requests on outgoing links, once the deliveries the queue
    /// handed over were turned into transfers: a drain spends the remaining credit.
    pub fn finish_flows(&mut self, out: &mut BytesMut) {
        for (handle, drain, echo) in std::mem::take(&mut self.answer_flows) {
            let Some(Link::Outgoing(link)) = self.links.get(&handle) else {
                continue;
            };
            let sink = Arc::clone(&link.sink);
            if drain {
                let credit = sink.drain();
                let frame =
                    self.flow_frame(Some(handle), Some(credit.delivery_count), Some(0), true);
                encode_amqp_frame(out, self.channel, &frame, &[]);
            } else if echo {
                let credit = sink.credit();
                let frame = self.flow_frame(
                    Some(handle),
                    Some(credit.delivery_count),
                    Some(credit.link_credit),
                    false,
                );
                encode_amqp_frame(out, self.channel, &frame, &[]);
            }
        }
    }

    /// Takes one mailbox entry that belongs to this session.
    pub fn take_entry(
        &mut self,
        entry: MailboxEntry,
        remote_max_frame_size: u32,
        out: &mut BytesMut,
    ) {
        match entry {
            MailboxEntry::Delivery {
                link_id, delivery, ..
            } => {
                let Some(&handle) = self.outgoing_handles.get(&link_id) else {
                    return_delivery(delivery);
                    return;
                };
                self.pending.push_back(Pending { handle, delivery });
                self.send_pending(remote_max_frame_size, out);
            }
            MailboxEntry::Drained { link_id, .. } => {
                let Some(&handle) = self.outgoing_handles.get(&link_id) else {
                    return;
                };
                let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.drains_waiting)
                    .into_iter()
                    .partition(|(h, _)| *h == handle);
                self.drains_waiting = waiting;
                for (handle, echo) in ready {
                    self.answer_flows.push((handle, true, echo));
                }
            }
            MailboxEntry::Cancelled { link_id, .. } => {
                let Some(handle) = self.outgoing_handles.get(&link_id).copied() else {
                    return;
                };
                if let Some(link) = self.links.remove(&handle) {
                    self.release_link(link);
                }
                self.send_detach(
                    handle,
                    Some(errors::amqp(
                        AmqpError::ResourceDeleted,
                        "the queue was deleted",
                    )),
                    out,
                );
            }
        }
    }

    /// Sends waiting deliveries while the client's incoming window allows.
    pub(super) fn send_pending(&mut self, remote_max_frame_size: u32, out: &mut BytesMut) {
        while self.remote_incoming_window > 0 {
            let Some(pending) = self.pending.pop_front() else {
                return;
            };
            self.send_delivery(pending, remote_max_frame_size, out);
        }
    }

    fn send_delivery(&mut self, pending: Pending, remote_max_frame_size: u32, out: &mut BytesMut) {
        let Pending { handle, delivery } = pending;
        let Some(Link::Outgoing(link)) = self.links.get(&handle) else {
            return_delivery(delivery);
            return;
        };
        let link_id = link.link_id;
        let delivery_id = self.unsettled.next_tag();
        self.scratch.clear();
        encode_message(
            &delivery.message,
            delivery.redelivered,
            delivery.delivery_count,
            &mut self.scratch,
        );
        let message = self.scratch.split().freeze();
        let first = Transfer {
            handle: Handle(handle),
            delivery_id: Some(delivery_id),
            delivery_tag: Some(Binary::from(delivery_id.to_be_bytes().to_vec())),
            message_format: Some(0),
            settled: Some(!delivery.needs_settlement),
            more: false,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
        let frame_room = remote_max_frame_size as usize - FRAME_HEADER_SIZE;
        let mut transfer = first;
        let mut offset = 0;
        loop {
            let overhead = performative_size(&Performative::Transfer(transfer.clone()));
            let room = frame_room.saturating_sub(overhead + 16).max(1);
            let end = (offset + room).min(message.len());
            transfer.more = end < message.len();
            encode_amqp_frame(
                out,
                self.channel,
                &Performative::Transfer(transfer.clone()),
                &message[offset..end],
            );
            self.next_outgoing_id = self.next_outgoing_id.wrapping_add(1);
            self.remote_incoming_window = self.remote_incoming_window.saturating_sub(1);
            offset = end;
            if offset >= message.len() {
                break;
            }
            transfer = Transfer {
                handle: Handle(handle),
                delivery_id: None,
                delivery_tag: None,
                message_format: None,
                settled: None,
                more: true,
                rcv_settle_mode: None,
                state: None,
                resume: false,
                aborted: false,
                batchable: false,
            };
        }
        if delivery.needs_settlement {
            self.unsettled.push(UnsettledTransfer {
                delivery_id,
                queue: delivery.queue,
                message_id: delivery.id,
                link_id,
            });
        }
    }

    pub(super) fn handle_disposition(
        &mut self,
        disposition: Disposition,
        out: &mut BytesMut,
    ) -> Result<(), Error> {
        if disposition.role == Role::Sender {
            // The client settling its own transfers: the broker already settled them.
            return Ok(());
        }
        let first = disposition.first;
        let last = disposition.last.unwrap_or(first);
        let settlement = match &disposition.state {
            Some(DeliveryState::Accepted(_)) => Settlement::Ack,
            Some(DeliveryState::Rejected(_)) => Settlement::Reject,
            // The queue's type decides what `modified` means (a classic queue: rejected when
            // undeliverable-here; delivery-failed counts the attempt, so the header's
            // delivery-count goes up and x-delivery-limit applies; otherwise released, as
            // in RabbitMQ 4.x).
            Some(DeliveryState::Modified(Modified {
                delivery_failed,
                undeliverable_here,
                ..
            })) => Settlement::Modify {
                delivery_failed: delivery_failed.unwrap_or(false),
                undeliverable_here: undeliverable_here.unwrap_or(false),
            },
            Some(DeliveryState::Released(_)) => Settlement::Release,
            // A non-terminal state: nothing to settle yet.
            Some(_) if !disposition.settled => return Ok(()),
            // Settled without an outcome: the default outcome, released.
            _ => Settlement::Release,
        };
        let mut batch: Vec<u64> = Vec::new();
        let mut batch_queue: Option<Arc<dyn QueueInstance>> = None;
        for unsettled in self.unsettled.take_range(first, last) {
            if let Some(queue) = &batch_queue {
                if !Arc::ptr_eq(queue, &unsettled.queue) {
                    queue.settle(&batch, settlement);
                    batch.clear();
                    batch_queue = None;
                }
            }
            batch.push(unsettled.message_id);
            batch_queue.get_or_insert(unsettled.queue);
        }
        if let Some(queue) = batch_queue {
            queue.settle(&batch, settlement);
        }
        if !disposition.settled {
            // The receiver settles second (rcv-settle-mode second): confirm.
            let reply = Disposition {
                role: Role::Sender,
                first,
                last: disposition.last,
                settled: true,
                state: disposition.state,
                batchable: false,
            };
            encode_amqp_frame(out, self.channel, &Performative::Disposition(reply), &[]);
        }
        Ok(())
    }
}

/// Gives a delivery that can no longer be sent back to its queue; it never reached the
/// client, so it does not count as a failed delivery.
pub(super) fn return_delivery(delivery: Delivery) {
    if delivery.needs_settlement {
        delivery.queue.settle(&[delivery.id], Settlement::Release);
    }
}

/// Returns a mailbox entry whose session is gone.
pub fn return_entry(entry: MailboxEntry) {
    if let MailboxEntry::Delivery { delivery, .. } = entry {
        return_delivery(delivery);
    }
}
