//! One AMQP 1.0 session (`Session`): its flow-control windows and its links, keyed by handle.
//!
//! A link the client sends on (the broker is the receiver) publishes into an exchange or
//! queue; the broker grants it credit in batches and settles each unsettled transfer after
//! routing. A link the client receives on (the broker is the sender) is a core consumer whose
//! credit is the link credit ([`LinkSink`]). Links are keyed by handle, so a sender and a
//! receiver may share a name.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{
    AmqpError, DeliveryNumber, Error, Handle, LinkError, ReceiverSettleMode, Role,
    SenderSettleMode, SessionError,
};
use fe2o3_amqp_types::messaging::{
    Accepted, DeliveryState, Modified, Rejected, Released, TargetArchetype,
};
use fe2o3_amqp_types::performatives::{
    Attach, Begin, Detach, Disposition, Flow, Performative, Transfer,
};
use fe2o3_amqp_types::primitives::Binary;
use warren_core::access::Access;
use warren_core::consumer::{ConsumerSpec, Delivery};
use warren_core::queue::Settlement;
use warren_core::queue_type::QueueInstance;
use warren_core::value::Table;
use warren_core::vhost::{Actor, PublishOptions, PublishStage, Publisher, VHost};

use super::errors;
use super::sink::{LinkSink, Mailbox, MailboxEntry};
use crate::address::{parse_source, parse_target, TargetAddress};
use crate::codec::{encode_amqp_frame, performative_size, FRAME_HEADER_SIZE};
use crate::mapping::{decode_message, encode_message, IncomingMessage};
use crate::stream_filters::stream_filters;

/// The incoming window the broker announces and tops up.
const INCOMING_WINDOW: u32 = 1 << 16;
/// The outgoing window the broker announces (it is informational in AMQP 1.0).
const OUTGOING_WINDOW: u32 = u32::MAX;
/// The most link handles a client may use per session.
const HANDLE_MAX: u32 = 1023;
/// Credit granted to publishing links, topped up when half is spent (RabbitMQ grants 128).
const PUBLISH_CREDIT: u32 = 128;

/// What a session needs from its connection to handle one performative.
pub struct Context<'a> {
    pub vhost: &'a Arc<VHost>,
    pub user: &'a str,
    pub connection_id: u64,
    pub mailbox: &'a Arc<Mailbox>,
    pub remote_max_frame_size: u32,
    pub max_message_size: usize,
    pub next_link_id: &'a mut u64,
    /// A resource alarm is raised: publishing links get no more credit.
    pub blocked: bool,
}

struct IncomingLink {
    target: Option<TargetAddress>,
    credit: u32,
    delivery_count: u32,
    /// A multi-frame delivery in progress: its id, whether it was sent settled, its bytes.
    partial: Option<(DeliveryNumber, bool, BytesMut)>,
}

struct OutgoingLink {
    link_id: u64,
    vhost: Arc<VHost>,
    queue: Arc<dyn QueueInstance>,
    consumer_id: u64,
    sink: Arc<LinkSink>,
}

enum Link {
    /// The client sends, the broker receives.
    Incoming(IncomingLink),
    /// The broker sends, the client receives.
    Outgoing(OutgoingLink),
}

struct Unsettled {
    queue: Arc<dyn QueueInstance>,
    message_id: u64,
    link_id: u64,
}

/// A delivery waiting for the client's incoming window.
struct Pending {
    handle: u32,
    delivery: Delivery,
}

/// One session's state.
pub struct Session {
    channel: u16,
    next_incoming_id: u32,
    incoming_window: u32,
    next_outgoing_id: u32,
    remote_incoming_window: u32,
    next_delivery_id: u32,
    links: HashMap<u32, Link>,
    /// Handles of links the broker refused (attach then detach with an error), until the
    /// client's answering detach arrives.
    refused: HashSet<u32>,
    outgoing_handles: HashMap<u64, u32>,
    unsettled: HashMap<DeliveryNumber, Unsettled>,
    pending: VecDeque<Pending>,
    /// Dispositions for incoming transfers, sent together at the end of a batch.
    dispositions: Vec<(DeliveryNumber, DeliveryState)>,
    /// Dispositions of unsettled transfers whose durable messages the store has not fsynced
    /// yet: (store sequence number, delivery id, outcome), in publish order (the store's
    /// sequence numbers grow in that order).
    durable_waits: VecDeque<(u64, DeliveryNumber, DeliveryState)>,
    /// Outgoing links whose flow asked for drain or echo: (handle, drain, echo).
    answer_flows: Vec<(u32, bool, bool)>,
    /// Drains of stream links waiting for the stream's consumer task: (handle, echo).
    drains_waiting: Vec<(u32, bool)>,
    scratch: BytesMut,
    /// The core's publish state: exchanges this session's user was allowed to write to.
    publisher: Publisher,
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
    /// A session for the client's begin on `channel`.
    pub fn new(channel: u16, begin: &Begin) -> Session {
        Session {
            channel,
            next_incoming_id: begin.next_outgoing_id,
            incoming_window: INCOMING_WINDOW,
            next_outgoing_id: 0,
            remote_incoming_window: begin.incoming_window,
            next_delivery_id: 0,
            links: HashMap::new(),
            refused: HashSet::new(),
            outgoing_handles: HashMap::new(),
            unsettled: HashMap::new(),
            pending: VecDeque::new(),
            dispositions: Vec::new(),
            durable_waits: VecDeque::new(),
            answer_flows: Vec::new(),
            drains_waiting: Vec::new(),
            scratch: BytesMut::new(),
            publisher: Publisher::new(),
        }
    }

    /// The broker's begin in answer.
    pub fn begin_reply(&self) -> Begin {
        Begin {
            remote_channel: Some(self.channel),
            next_outgoing_id: self.next_outgoing_id,
            incoming_window: self.incoming_window,
            outgoing_window: OUTGOING_WINDOW,
            handle_max: Handle(HANDLE_MAX),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }
    }

    /// Handles one performative for this session. An error ends the session.
    pub fn handle(
        &mut self,
        mut context: Context<'_>,
        performative: Performative,
        payload: Bytes,
        out: &mut BytesMut,
    ) -> Result<(), Error> {
        let result = match performative {
            Performative::Attach(attach) => self.handle_attach(&mut context, attach, out),
            Performative::Detach(detach) => self.handle_detach(detach, out),
            Performative::Flow(flow) => self.handle_flow(&context, flow, out),
            Performative::Transfer(transfer) => {
                self.handle_transfer(&mut context, transfer, payload, out)
            }
            Performative::Disposition(disposition) => self.handle_disposition(disposition, out),
            // Open, begin, end and close are the connection's.
            _ => Ok(()),
        };
        self.flush_dispositions(out);
        result
    }

    fn flow_frame(
        &self,
        handle: Option<u32>,
        delivery_count: Option<u32>,
        link_credit: Option<u32>,
        drain: bool,
    ) -> Performative {
        Performative::Flow(Flow {
            next_incoming_id: Some(self.next_incoming_id),
            incoming_window: self.incoming_window,
            next_outgoing_id: self.next_outgoing_id,
            outgoing_window: OUTGOING_WINDOW,
            handle: handle.map(Handle),
            delivery_count,
            link_credit,
            available: None,
            drain,
            echo: false,
            properties: None,
        })
    }

    // ---- attach / detach ----------------------------------------------------------------

    fn handle_attach(
        &mut self,
        context: &mut Context<'_>,
        attach: Attach,
        out: &mut BytesMut,
    ) -> Result<(), Error> {
        let handle = attach.handle.0;
        if handle > HANDLE_MAX {
            return Err(errors::amqp(
                AmqpError::ResourceLimitExceeded,
                format!("link handle {handle} exceeds handle-max {HANDLE_MAX}"),
            ));
        }
        self.refused.remove(&handle);
        if self.links.contains_key(&handle) {
            return Err(errors::session(
                SessionError::HandleInUse,
                format!("link handle {handle} is already attached"),
            ));
        }
        match attach.role {
            Role::Sender => self.attach_incoming(context, attach, out),
            Role::Receiver => self.attach_outgoing(context, attach, out),
        }
        Ok(())
    }

    /// The client attaches a sender: the broker receives into an exchange or queue.
    fn attach_incoming(&mut self, context: &mut Context<'_>, attach: Attach, out: &mut BytesMut) {
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

    /// The client attaches a receiver: the broker sends from a queue.
    fn attach_outgoing(&mut self, context: &mut Context<'_>, attach: Attach, out: &mut BytesMut) {
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

    fn send_detach(&mut self, handle: u32, error: Option<Error>, out: &mut BytesMut) {
        self.refused.insert(handle);
        let detach = Detach {
            handle: Handle(handle),
            closed: true,
            error,
        };
        encode_amqp_frame(out, self.channel, &Performative::Detach(detach), &[]);
    }

    fn handle_detach(&mut self, detach: Detach, out: &mut BytesMut) -> Result<(), Error> {
        let handle = detach.handle.0;
        let Some(link) = self.links.remove(&handle) else {
            if self.refused.remove(&handle) {
                // The client answering a detach the broker sent: the link is gone already.
                return Ok(());
            }
            return Err(unattached(handle));
        };
        self.release_link(link);
        let reply = Detach {
            handle: detach.handle,
            closed: detach.closed,
            error: None,
        };
        encode_amqp_frame(out, self.channel, &Performative::Detach(reply), &[]);
        Ok(())
    }

    /// Cancels an outgoing link's consumer and requeues what it left unsettled.
    fn release_link(&mut self, link: Link) {
        let Link::Outgoing(link) = link else {
            return;
        };
        link.sink.close();
        // Through the vhost, so an auto-delete queue losing its last consumer is deleted.
        link.vhost.cancel_instance(&link.queue, link.consumer_id);
        self.outgoing_handles.remove(&link.link_id);
        let ids: Vec<DeliveryNumber> = self
            .unsettled
            .iter()
            .filter(|(_, u)| u.link_id == link.link_id)
            .map(|(&id, _)| id)
            .collect();
        let mut returned = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(unsettled) = self.unsettled.remove(&id) {
                returned.push(unsettled.message_id);
            }
        }
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

    /// Ends the session: every link is released.
    pub fn terminate(&mut self) {
        let handles: Vec<u32> = self.links.keys().copied().collect();
        for handle in handles {
            if let Some(link) = self.links.remove(&handle) {
                self.release_link(link);
            }
        }
        for (_, unsettled) in self.unsettled.drain() {
            unsettled
                .queue
                .settle(&[unsettled.message_id], Settlement::Requeue);
        }
        for pending in self.pending.drain(..) {
            return_delivery(pending.delivery);
        }
    }

    // ---- flow ---------------------------------------------------------------------------

    fn handle_flow(
        &mut self,
        context: &Context<'_>,
        flow: Flow,
        out: &mut BytesMut,
    ) -> Result<(), Error> {
        self.remote_incoming_window = flow
            .next_incoming_id
            .unwrap_or(0)
            .wrapping_add(flow.incoming_window)
            .wrapping_sub(self.next_outgoing_id);
        self.send_pending(context.remote_max_frame_size, out);
        let Some(handle) = flow.handle else {
            if flow.echo {
                let frame = self.flow_frame(None, None, None, false);
                encode_amqp_frame(out, self.channel, &frame, &[]);
            }
            return Ok(());
        };
        let handle = handle.0;
        match self.links.get(&handle) {
            None => Err(unattached(handle)),
            Some(Link::Incoming(link)) => {
                if flow.echo {
                    let frame = self.flow_frame(
                        Some(handle),
                        Some(link.delivery_count),
                        Some(link.credit),
                        false,
                    );
                    encode_amqp_frame(out, self.channel, &frame, &[]);
                }
                Ok(())
            }
            Some(Link::Outgoing(link)) => {
                let sink = Arc::clone(&link.sink);
                let queue = Arc::clone(&link.queue);
                let (delivery_count, link_credit) = (
                    flow.delivery_count.unwrap_or(0),
                    flow.link_credit.unwrap_or(0),
                );
                // A stream delivers from a task of its own: a drain is answered once that
                // task handed over what it had (MailboxEntry::Drained), not right after
                // dispatch, which only wakes it.
                if flow.drain && queue.queue_type().capabilities().consumers_need_offset {
                    if sink.grant_draining(delivery_count, link_credit) {
                        self.drains_waiting.push((handle, flow.echo));
                        queue.dispatch();
                        return Ok(());
                    }
                } else {
                    sink.grant(delivery_count, link_credit);
                }
                // The queue hands over what it has now: the deliveries land in the mailbox
                // synchronously, and the connection sends them before calling
                // finish_flows, so a drain's answering flow follows its transfers.
                queue.dispatch();
                if flow.drain || flow.echo {
                    self.answer_flows.push((handle, flow.drain, flow.echo));
                }
                Ok(())
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

    /// Whether flows wait for [`Session::finish_flows`] (after the mailbox was processed).
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

    // ---- outgoing transfers -------------------------------------------------------------

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
    fn send_pending(&mut self, remote_max_frame_size: u32, out: &mut BytesMut) {
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
        let delivery_id = self.next_delivery_id;
        self.next_delivery_id = self.next_delivery_id.wrapping_add(1);
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
            self.unsettled.insert(
                delivery_id,
                Unsettled {
                    queue: delivery.queue,
                    message_id: delivery.id,
                    link_id,
                },
            );
        }
    }

    fn handle_disposition(
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
        let span = last.wrapping_sub(first) as usize;
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
        let mut ids: Vec<DeliveryNumber> = if span < self.unsettled.len() {
            (0..=span as u32).map(|i| first.wrapping_add(i)).collect()
        } else {
            self.unsettled
                .keys()
                .copied()
                .filter(|id| id.wrapping_sub(first) as usize <= span)
                .collect()
        };
        ids.sort_unstable_by_key(|id| id.wrapping_sub(first));
        let mut batch: Vec<u64> = Vec::new();
        let mut batch_queue: Option<Arc<dyn QueueInstance>> = None;
        for id in ids {
            let Some(unsettled) = self.unsettled.remove(&id) else {
                continue;
            };
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

    // ---- incoming transfers -------------------------------------------------------------

    fn handle_transfer(
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
    fn flush_dispositions(&mut self, out: &mut BytesMut) {
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

fn unattached(handle: u32) -> Error {
    errors::session(
        SessionError::UnattachedHandle,
        format!("link handle {handle} is not attached"),
    )
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

/// Gives a delivery that can no longer be sent back to its queue; it never reached the
/// client, so it does not count as a failed delivery.
fn return_delivery(delivery: Delivery) {
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
