//! One AMQP 1.0 session (`Session`): its flow-control windows and its links, keyed by handle.
//!
//! A link the client sends on (the broker is the receiver) publishes into an exchange or
//! queue; the broker grants it credit in batches and settles each unsettled transfer after
//! routing. A link the client receives on (the broker is the sender) is a core consumer whose
//! credit is the link credit ([`LinkSink`](super::sink::LinkSink)). Links are keyed by handle,
//! so a sender and a receiver may share a name.
//!
//! This file holds the session and what both kinds of link share (attach and detach, flow,
//! the session's end); `incoming.rs` the links the broker receives on (transfers in,
//! publishing, dispositions), `outgoing.rs` those it sends on (deliveries out, the client's
//! dispositions).

mod incoming;
mod outgoing;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{AmqpError, DeliveryNumber, Error, Handle, Role, SessionError};
use fe2o3_amqp_types::messaging::DeliveryState;
use fe2o3_amqp_types::performatives::{Attach, Begin, Detach, Flow, Performative};
use warren_core::delivery_window::Unsettled;
use warren_core::queue::Settlement;
use warren_core::vhost::{Publisher, VHost};

use super::errors;
use super::sink::Mailbox;
use crate::codec::encode_amqp_frame;

use incoming::IncomingLink;
use outgoing::return_delivery;
pub use outgoing::return_entry;
use outgoing::{OutgoingLink, Pending, UnsettledTransfer};

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
enum Link {
    /// The client sends, the broker receives.
    Incoming(IncomingLink),
    /// The broker sends, the client receives.
    Outgoing(OutgoingLink),
}
/// One session's state.
pub struct Session {
    channel: u16,
    next_incoming_id: u32,
    incoming_window: u32,
    next_outgoing_id: u32,
    remote_incoming_window: u32,
    links: HashMap<u32, Link>,
    /// Handles of links the broker refused (attach then detach with an error), until the
    /// client's answering detach arrives.
    refused: HashSet<u32>,
    outgoing_handles: HashMap<u64, u32>,
    /// Transfers sent unsettled, by delivery id (the core's [`Unsettled`], which also gives
    /// out the session's delivery ids).
    unsettled: Unsettled<UnsettledTransfer>,
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
impl Session {
    /// A session for the client's begin on `channel`.
    pub fn new(channel: u16, begin: &Begin) -> Session {
        Session {
            channel,
            next_incoming_id: begin.next_outgoing_id,
            incoming_window: INCOMING_WINDOW,
            next_outgoing_id: 0,
            remote_incoming_window: begin.incoming_window,
            links: HashMap::new(),
            refused: HashSet::new(),
            outgoing_handles: HashMap::new(),
            unsettled: Unsettled::new(0),
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
    /// Ends the session: every link is released.
    pub fn terminate(&mut self) {
        let handles: Vec<u32> = self.links.keys().copied().collect();
        for handle in handles {
            if let Some(link) = self.links.remove(&handle) {
                self.release_link(link);
            }
        }
        for unsettled in self.unsettled.take_all() {
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
}

fn unattached(handle: u32) -> Error {
    errors::session(
        SessionError::UnattachedHandle,
        format!("link handle {handle} is not attached"),
    )
}
