//! The connection's outgoing side, shared between its reader task and the queues that deliver
//! to its subscriptions: one buffer of encoded frames, the deliveries waiting for an ACK, and
//! each subscription's prefetch accounting.
//!
//! The delivery bookkeeping is the core's [`DeliveryWindow`] (admission, high-water mark,
//! starved subscriptions, orphans, which deliveries were sent) and [`Unsettled`] (the
//! deliveries waiting for an ACK, by tag); this file keeps the STOMP encoding.
//!
//! Everything here is guarded by one mutex. Queues call [`SinkHandle::reserve`] and
//! [`SinkHandle::deliver`] with their own lock held, so the lock order is always queue, then
//! outbox; code holding the outbox lock never calls into a queue (settlements and kicks
//! happen after it is released). Frames are encoded straight into the shared buffer, so the
//! writer task sends everything that accumulated in one write.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Notify;
use warren_core::consumer::{Delivery, DeliverySink};
use warren_core::delivery_window::{
    Admission, ConsumerCredit, DeliveryWindow, Orphan, Tagged, Unsettled,
};
use warren_core::queue_type::QueueInstance;

use crate::codec::{encode, encode_message, Command, Frame, Version, HEARTBEAT};
use crate::destination::format_destination;
use crate::headers::message_headers;

/// Above this many buffered bytes subscriptions stop receiving until the writer drains the
/// buffer, so a slow socket holds messages in their queues instead of in memory here.
pub const OUTBOX_HIGH_WATER: usize = 512 * 1024;

/// Above this many unsent bytes the connection's own frames are no longer read: a client
/// that sends without reading replies is held back by TCP instead of growing broker memory.
pub const READ_PAUSE_BYTES: usize = 2 * 1024 * 1024;

/// How a subscription acknowledges (the SUBSCRIBE `ack` header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckMode {
    /// `auto`: delivered means settled.
    Auto,
    /// `client`: an ACK settles that message and every earlier one of the subscription.
    Client,
    /// `client-individual`: an ACK settles that message only.
    ClientIndividual,
}

impl AckMode {
    /// Parses the `ack` header (absent means `auto`).
    pub fn parse(header: Option<&str>) -> Option<AckMode> {
        match header {
            None | Some("auto") => Some(AckMode::Auto),
            Some("client") => Some(AckMode::Client),
            Some("client-individual") => Some(AckMode::ClientIndividual),
            Some(_) => None,
        }
    }
}

/// One delivery waiting for its ACK or NACK.
pub struct Unacked {
    /// The connection-wide delivery tag, the last part of the `message-id`.
    pub tag: u64,
    /// The subscription it was delivered to.
    pub subscription: Arc<Subscription>,
    /// The queue's id of the message.
    pub id: u64,
    /// The window's stamp when it was encoded: tells whether the writer took it (sent).
    stamp: u32,
}

impl Tagged for Unacked {
    type Tag = u64;

    fn tag(&self) -> u64 {
        self.tag
    }
}

struct OutboxState {
    buffer: BytesMut,
    version: Version,
    session: Arc<str>,
    /// Open or closed, starved subscriptions, orphans, sent or still buffered.
    window: DeliveryWindow<Arc<Subscription>>,
    /// Connection-wide delivery tags; the deliveries waiting for an ACK, in tag order.
    unacked: Unsettled<Unacked>,
    /// Subscriptions whose queue was deleted, for the reader to forget.
    server_cancelled: Vec<Arc<str>>,
}

/// The shared outgoing side of one connection.
pub struct Outbox {
    state: Mutex<OutboxState>,
    /// Wakes the writer task.
    pub notify: Notify,
    /// Wakes the reader after the writer finished a write (it may resume reading).
    pub drained: Notify,
    /// Bytes the writer took and is still writing.
    writing: AtomicUsize,
}

/// What the writer task took from the outbox.
pub struct Drained {
    /// Encoded frames to write.
    pub bytes: Bytes,
    /// Subscriptions to kick because room freed up.
    pub starved: Vec<Arc<Subscription>>,
}

impl Outbox {
    /// A new, empty outbox; frames are encoded for STOMP 1.0 until the session says otherwise.
    pub fn new() -> Arc<Outbox> {
        Arc::new(Outbox {
            state: Mutex::new(OutboxState {
                buffer: BytesMut::new(),
                version: Version::V1_0,
                session: Arc::from(""),
                window: DeliveryWindow::new(OUTBOX_HIGH_WATER),
                unacked: Unsettled::new(1),
                server_cancelled: Vec::new(),
            }),
            notify: Notify::new(),
            drained: Notify::new(),
            writing: AtomicUsize::new(0),
        })
    }

    /// Sets the negotiated version (header escaping) and the session id used in message ids.
    pub fn set_session(&self, version: Version, session: &str) {
        let mut state = self.state.lock();
        state.version = version;
        state.session = Arc::from(session);
    }

    /// Encodes a frame into the buffer.
    pub fn send_frame(&self, frame: &Frame) {
        let mut state = self.state.lock();
        if state.window.is_closed() {
            return;
        }
        let version = state.version;
        encode(frame, version, &mut state.buffer);
        drop(state);
        self.notify.notify_one();
    }

    /// Writes a heart-beat (one EOL).
    pub fn send_heartbeat(&self) {
        let mut state = self.state.lock();
        state.buffer.extend_from_slice(HEARTBEAT);
    }

    /// Marks the connection closed: nothing more is buffered and subscriptions get no room.
    pub fn close(&self) {
        let mut state = self.state.lock();
        state.window.close();
        drop(state);
        self.notify.notify_one();
    }

    /// Whether the connection was closed.
    pub fn is_closed(&self) -> bool {
        self.state.lock().window.is_closed()
    }

    /// Takes the unacked deliveries an ACK or NACK of `tag` settles, releasing their
    /// prefetch credit. `subscription` is the id the message-id named; `None` when the
    /// tag is unknown or belongs to another subscription. For a `client` subscription every
    /// earlier delivery of the same subscription is taken too.
    pub fn take_unacked(&self, subscription: &str, tag: u64) -> Option<Vec<Unacked>> {
        let mut state = self.state.lock();
        let owner = Arc::clone(&state.unacked.get(tag)?.subscription);
        if *owner.id != *subscription {
            return None;
        }
        let taken: Vec<Unacked> = if owner.ack == AckMode::Client {
            state
                .unacked
                .take_through_where(tag, |unacked| Arc::ptr_eq(&unacked.subscription, &owner))
        } else {
            state.unacked.take(tag).into_iter().collect()
        };
        for unacked in &taken {
            unacked.subscription.credit.give_back();
        }
        Some(taken)
    }

    /// Takes every unacked delivery (the connection is going away): those the writer took
    /// (sent to the client), then those still in the buffer (never sent), each in tag order.
    pub fn take_all_unacked(&self) -> (Vec<Unacked>, Vec<Unacked>) {
        let mut state = self.state.lock();
        let OutboxState {
            window, unacked, ..
        } = &mut *state;
        unacked
            .take_all()
            .into_iter()
            .partition(|unacked| window.was_sent(unacked.stamp))
    }

    /// Takes the subscriptions waiting for credit or room, to kick their queues.
    pub fn take_starved(&self) -> Vec<Arc<Subscription>> {
        self.state.lock().window.take_starved()
    }

    /// Takes the subscriptions the server cancelled since the last call.
    pub fn take_server_cancelled(&self) -> Vec<Arc<str>> {
        std::mem::take(&mut self.state.lock().server_cancelled)
    }

    /// Takes deliveries that arrived after the connection closed, to requeue.
    pub fn take_orphaned(&self) -> Vec<Orphan> {
        self.state.lock().window.take_orphaned()
    }

    /// Takes everything buffered for the writer, with the subscriptions to kick now that the
    /// buffer is empty again.
    pub fn drain(&self) -> Option<Drained> {
        let mut state = self.state.lock();
        if state.buffer.is_empty() {
            return None;
        }
        // Take the allocation along: an idle connection keeps no write buffer.
        let bytes = std::mem::take(&mut state.buffer).freeze();
        let starved = state.window.take_starved();
        state.window.handed_over();
        Some(Drained { bytes, starved })
    }

    /// Bytes buffered or being written.
    pub fn pending_bytes(&self) -> usize {
        self.state.lock().buffer.len() + self.writing.load(Ordering::Acquire)
    }

    /// The writer took `bytes` and is writing them (0 when done).
    pub fn set_writing(&self, bytes: usize) {
        self.writing.store(bytes, Ordering::Release);
        if bytes == 0 {
            self.drained.notify_one();
        }
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.state.lock().buffer.is_empty()
    }
}

/// One SUBSCRIBE as the core sees it: a consumer with its ack mode and prefetch.
pub struct Subscription {
    outbox: Arc<Outbox>,
    /// The subscription id (the SUBSCRIBE `id`, or its destination when it had none).
    pub id: Arc<str>,
    /// The queue it consumes from, of whatever type.
    pub queue: Arc<dyn QueueInstance>,
    /// How deliveries are acknowledged.
    pub ack: AckMode,
    /// `prefetch-count` (0 = unlimited) and the deliveries counted against it; only
    /// acknowledged modes count. Changed only under the outbox lock.
    credit: ConsumerCredit,
    /// False until the subscription is recorded: no delivery may race its set-up.
    started: AtomicBool,
}

impl Subscription {
    /// A subscription delivering into `outbox`.
    pub fn new(
        outbox: Arc<Outbox>,
        id: Arc<str>,
        queue: Arc<dyn QueueInstance>,
        ack: AckMode,
        prefetch: u32,
    ) -> Arc<Subscription> {
        Arc::new(Subscription {
            outbox,
            id,
            queue,
            ack,
            credit: ConsumerCredit::new(prefetch),
            started: AtomicBool::new(false),
        })
    }

    /// Lets deliveries flow; the caller then kicks the queue.
    pub fn start(&self) {
        self.started.store(true, Ordering::Release);
    }
}

/// The core calls the sink through an `Arc`; the newtype carries the `Arc<Subscription>` so
/// the subscription can register itself as starved.
pub struct SinkHandle(pub Arc<Subscription>);

impl DeliverySink for SinkHandle {
    fn prefetch(&self) -> Option<u32> {
        let subscription = &self.0;
        let prefetch = subscription.credit.limit();
        (subscription.ack != AckMode::Auto && prefetch != 0).then_some(prefetch)
    }

    fn reserve(&self) -> bool {
        let subscription = &self.0;
        let mut state = subscription.outbox.state.lock();
        if state.window.is_closed() || !subscription.started.load(Ordering::Acquire) {
            return false;
        }
        let buffered = state.buffer.len();
        if state.window.admit(buffered, subscription) != Admission::Open {
            return false;
        }
        subscription.ack == AckMode::Auto
            || state
                .window
                .charge(subscription, Some(&subscription.credit), None)
    }

    fn deliver(&self, delivery: Delivery) {
        let subscription = &self.0;
        let mut state = subscription.outbox.state.lock();
        if state.window.is_closed() {
            // The queue's lock is held here: the reader requeues it later.
            if delivery.needs_settlement {
                state.window.orphan(delivery.queue, delivery.id);
            }
            return;
        }
        let was_empty = state.buffer.is_empty();
        let tag = state.unacked.next_tag();
        let version = state.version;
        let message = &delivery.message;
        let mut message_id =
            String::with_capacity(subscription.id.len() + state.session.len() + 24);
        let _ = write!(
            message_id,
            "T_{}@@{}@@{tag}",
            subscription.id, state.session
        );
        let destination = format_destination(&message.exchange, &message.routing_key);
        let properties = message_headers(&message.properties);
        let mut extra: Vec<(&str, &str)> = Vec::with_capacity(properties.len() + 1);
        extra.push((
            "redelivered",
            if delivery.redelivered {
                "true"
            } else {
                "false"
            },
        ));
        extra.extend(
            properties
                .iter()
                .map(|(name, value)| (*name, value.as_ref())),
        );
        let ack = (version == Version::V1_2 && subscription.ack != AckMode::Auto)
            .then_some(message_id.as_str());
        encode_message(
            &mut state.buffer,
            version,
            &destination,
            &message_id,
            &subscription.id,
            ack,
            &extra,
            &message.body,
        );
        if delivery.needs_settlement {
            let stamp = state.window.stamp();
            state.unacked.push(Unacked {
                tag,
                subscription: Arc::clone(subscription),
                id: delivery.id,
                stamp,
            });
        }
        drop(state);
        if was_empty {
            subscription.outbox.notify.notify_one();
        }
    }

    fn cancelled(&self) {
        let subscription = &self.0;
        let mut state = subscription.outbox.state.lock();
        if state.window.is_closed() {
            return;
        }
        state.server_cancelled.push(Arc::clone(&subscription.id));
        let frame = Frame::new(Command::Error)
            .with_header("message", "Server cancelled subscription")
            .with_header("subscription", subscription.id.to_string())
            .with_header("content-type", "text/plain")
            .with_body(format!(
                "The server has canceled a subscription.\nNo more messages will be delivered for id='{}'.\n",
                subscription.id
            ));
        let version = state.version;
        encode(&frame, version, &mut state.buffer);
        drop(state);
        subscription.outbox.notify.notify_one();
    }
}
