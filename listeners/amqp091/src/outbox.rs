//! The connection's outgoing side shared between its reader task and the queues that deliver
//! to its consumers: one buffer of encoded frames, the per-channel delivery tags and unacked
//! deliveries, and the prefetch accounting.
//!
//! The delivery bookkeeping is the core's [`DeliveryWindow`] (admission, high-water mark,
//! starved consumers, orphans) with each channel's [`Unsettled`] deliveries and basic.qos
//! global credit, and each consumer's [`ConsumerCredit`]; this file keeps the 0-9-1
//! encoding and the writer hand-over.
//!
//! Everything here is guarded by one mutex. Queues call [`ConsumerSink::reserve`] and
//! [`ConsumerSink::deliver`] with their own lock held, so the lock order is always
//! queue, then outbox; code holding the outbox lock never calls into a queue.
//! Frames are encoded straight into the shared buffer, so the writer task sends everything
//! that accumulated in one write.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Notify;
use warren_core::connections::{ChannelSummary, ChannelView};
use warren_core::consumer::{Delivery, DeliverySink};
use warren_core::delivery_window::{
    Admission, ConsumerCredit, Credit, DeliveryWindow, Tagged, Unsettled,
};
use warren_core::idmap::IdMap;
use warren_core::message::Message;
use warren_core::queue::now_ms;
use warren_core::queue_type::QueueInstance;
use warren_core::value::{Table, Value};

use crate::codec::{self, Method};

/// Above this many buffered bytes consumers stop receiving until the writer drains the buffer,
/// so a slow socket holds deliveries in their queues instead of in memory here.
pub const OUTBOX_HIGH_WATER: usize = 512 * 1024;

/// Above this many unsent bytes the connection's own requests are no longer read: a client
/// that sends requests without reading the replies is held back by TCP instead of growing the
/// broker's memory.
pub const READ_PAUSE_BYTES: usize = 2 * 1024 * 1024;

/// At the end of a read batch the reader writes up to this many buffered bytes itself when
/// the writer task is idle: a request/response round trip then costs no writer wake-up.
/// Larger batches go to the writer task, so the reader gets back to reading.
pub const INLINE_WRITE_MAX: usize = 4 * 1024;

/// One delivery waiting for its acknowledgement.
pub struct Unacked {
    /// The channel-scoped delivery tag.
    pub tag: u64,
    /// The queue to settle with.
    pub queue: Arc<dyn QueueInstance>,
    /// The queue's id of the message.
    pub id: u64,
    /// The consumer whose prefetch it counts against (none for basic.get).
    pub consumer: Option<Arc<ConsumerSink>>,
    /// When it was delivered (`warren_core::queue::now_ms` clock), for `consumer_timeout`.
    pub delivered_at: u64,
}

impl Tagged for Unacked {
    type Tag = u64;

    fn tag(&self) -> u64 {
        self.tag
    }
}

struct ChannelDeliveries {
    /// The channel's delivery tags, and its unacked deliveries in tag order.
    unacked: Unsettled<Unacked>,
    /// basic.qos global=true: the channel-wide limit (0 = none) and deliveries counted on it.
    global: Credit,
    /// What the reader last told of the channel (prefetch, consumers, mode), for listings.
    facts: ChannelSummary,
}

struct OutboxState {
    buffer: BytesMut,
    channels: IdMap<u16, ChannelDeliveries>,
    frame_max: u32,
    /// Open or closed, consumers refused for lack of room or credit (to kick when it frees
    /// up), deliveries whose channel closed between reserve and deliver (to release).
    window: DeliveryWindow<Arc<ConsumerSink>>,
    /// Consumers the server cancelled (queue deleted) for the reader to forget.
    server_cancelled: Vec<(u16, Arc<str>)>,
    /// The writer task or the reader (inline) is writing to the socket: only one may.
    writer_busy: bool,
    /// The connection's reader is handling a read batch and flushes at its end, so frames
    /// buffered meanwhile need not wake the writer.
    batch_open: bool,
}

/// The shared outgoing side of one connection.
pub struct Outbox {
    state: Mutex<OutboxState>,
    /// Wakes the writer task.
    pub notify: Notify,
    /// Wakes the reader task when a channel gets its first unacked delivery, so it can arm
    /// the consumer timeout.
    pub reader_wake: Notify,
    /// Wakes the reader after the writer finished a write (it may resume reading).
    pub drained: Notify,
    /// Bytes the writer took and is still writing.
    writing: AtomicUsize,
    consumer_cancel_notify: AtomicBool,
}

impl ChannelView for Outbox {
    fn channels(&self) -> Vec<ChannelSummary> {
        let state = self.state.lock();
        let mut channels: Vec<ChannelSummary> = state
            .channels
            .iter()
            .map(|(number, c)| ChannelSummary {
                number: *number,
                global_prefetch: c.global.limit(),
                unacknowledged: u32::try_from(c.unacked.len()).unwrap_or(u32::MAX),
                ..c.facts.clone()
            })
            .collect();
        channels.sort_by_key(|c| c.number);
        channels
    }
}

/// What the writer task took from the outbox.
pub struct Drained {
    /// Encoded frames to write.
    pub bytes: Bytes,
    /// Consumers to kick because room freed up.
    pub starved: Vec<Arc<ConsumerSink>>,
}

impl Outbox {
    /// A new, empty outbox.
    pub fn new(frame_max: u32) -> Arc<Outbox> {
        Arc::new(Outbox {
            state: Mutex::new(OutboxState {
                buffer: BytesMut::new(),
                channels: IdMap::default(),
                frame_max,
                window: DeliveryWindow::new(OUTBOX_HIGH_WATER),
                server_cancelled: Vec::new(),
                writer_busy: false,
                batch_open: false,
            }),
            notify: Notify::new(),
            reader_wake: Notify::new(),
            drained: Notify::new(),
            writing: AtomicUsize::new(0),
            consumer_cancel_notify: AtomicBool::new(false),
        })
    }

    /// Records whether the client understands server-sent basic.cancel.
    pub fn set_consumer_cancel_notify(&self, enabled: bool) {
        self.consumer_cancel_notify
            .store(enabled, Ordering::Relaxed);
    }

    /// Sets the negotiated frame_max used to split bodies.
    pub fn set_frame_max(&self, frame_max: u32) {
        self.state.lock().frame_max = frame_max;
    }

    /// Starts delivery bookkeeping for a newly opened channel.
    pub fn open_channel(&self, channel: u16) {
        self.state.lock().channels.insert(
            channel,
            ChannelDeliveries {
                unacked: Unsettled::new(1),
                global: Credit::default(),
                facts: ChannelSummary::default(),
            },
        );
    }

    /// Records what the reader knows of `channel` (its prefetch, consumers and mode) for the
    /// management API's channel listing; called when one of them changes.
    pub fn set_channel_facts(&self, channel: u16, facts: ChannelSummary) {
        if let Some(c) = self.state.lock().channels.get_mut(&channel) {
            c.facts = facts;
        }
    }

    /// Stops deliveries to `channel` and returns its unacked deliveries in tag order.
    pub fn close_channel(&self, channel: u16) -> Vec<Unacked> {
        let mut state = self.state.lock();
        state.window.retain_starved(|c| c.channel != channel);
        state
            .channels
            .remove(&channel)
            .map(|mut c| c.unacked.take_all())
            .unwrap_or_default()
    }

    /// Sets basic.qos global=true for a channel.
    pub fn set_global_prefetch(&self, channel: u16, prefetch: u32) -> Vec<Arc<ConsumerSink>> {
        let mut state = self.state.lock();
        if let Some(c) = state.channels.get_mut(&channel) {
            c.global.set_limit(prefetch);
        }
        state.window.take_starved()
    }

    /// Marks the connection closed: nothing more is buffered and consumers get no room.
    pub fn close(&self) {
        let mut state = self.state.lock();
        state.window.close();
        drop(state);
        self.notify.notify_one();
    }

    /// Encodes a method frame into the buffer.
    pub fn send_method(&self, channel: u16, method: &Method) {
        let mut state = self.state.lock();
        if state.window.is_closed() {
            return;
        }
        let wake = state.buffer.is_empty() && !state.batch_open;
        if let Err(error) = codec::write_method_frame(&mut state.buffer, channel, method) {
            // Only a broker bug can produce a method the wire cannot carry.
            tracing::error!(method = method.name(), %error, "could not encode method");
        }
        drop(state);
        if wake {
            self.notify.notify_one();
        }
    }

    /// Encodes a heartbeat frame into the buffer.
    pub fn send_heartbeat(&self) {
        let mut state = self.state.lock();
        codec::write_heartbeat(&mut state.buffer);
    }

    /// Encodes a basic.return with the returned message.
    pub fn send_return(&self, channel: u16, reply_code: u16, reply_text: &str, message: &Message) {
        let mut state = self.state.lock();
        if state.window.is_closed() {
            return;
        }
        let frame_max = state.frame_max;
        let properties = raw_properties(message);
        codec::write_return(
            &mut state.buffer,
            channel,
            reply_code,
            reply_text,
            &message.exchange,
            &message.routing_key,
            &properties,
            &message.body,
            frame_max,
        );
        let wake = !state.batch_open;
        drop(state);
        if wake {
            self.notify.notify_one();
        }
    }

    /// Encodes a basic.get-ok for `delivery`, assigning its delivery tag and recording it as
    /// unacked when it needs an ack.
    pub fn send_get_ok(&self, channel: u16, delivery: Delivery, message_count: u64) {
        let mut state = self.state.lock();
        let frame_max = state.frame_max;
        let OutboxState {
            buffer, channels, ..
        } = &mut *state;
        let Some(deliveries) = channels.get_mut(&channel) else {
            return;
        };
        let tag = deliveries.unacked.next_tag();
        let message = &delivery.message;
        codec::write_get_ok(
            buffer,
            channel,
            tag,
            delivery.redelivered,
            &message.exchange,
            &message.routing_key,
            u32::try_from(message_count).unwrap_or(u32::MAX),
            &delivery_properties(message, delivery.delivery_count),
            &message.body,
            frame_max,
        );
        let first_unacked = delivery.needs_settlement && deliveries.unacked.is_empty();
        if delivery.needs_settlement {
            deliveries.unacked.push(Unacked {
                tag,
                queue: delivery.queue,
                id: delivery.id,
                consumer: None,
                delivered_at: now_ms(),
            });
        }
        let wake = !state.batch_open;
        drop(state);
        if wake {
            self.notify.notify_one();
        }
        if first_unacked {
            self.reader_wake.notify_one();
        }
    }

    /// Removes unacked deliveries for an ack, nack or reject. `multiple` takes every tag up
    /// to `tag` (0 with multiple = all). Returns None when a tag is unknown (406 in the
    /// caller), else the removed deliveries, and releases their prefetch credit.
    pub fn take_unacked(&self, channel: u16, tag: u64, multiple: bool) -> Option<Vec<Unacked>> {
        let mut state = self.state.lock();
        let deliveries = state.channels.get_mut(&channel)?;
        let taken: Vec<Unacked> = if multiple && tag == 0 {
            deliveries.unacked.take_all()
        } else if multiple {
            let taken = deliveries.unacked.take_through(tag);
            if taken.is_empty() {
                return None;
            }
            taken
        } else {
            vec![deliveries.unacked.take(tag)?]
        };
        release_credit(deliveries, &taken);
        Some(taken)
    }

    /// Takes every unacked delivery of a channel (basic.recover, channel close).
    pub fn take_all_unacked(&self, channel: u16) -> Vec<Unacked> {
        self.take_unacked(channel, 0, true).unwrap_or_default()
    }

    /// The channel whose oldest unacked delivery is the oldest of the connection, with its
    /// delivery time, for the consumer timeout.
    pub fn oldest_unacked(&self) -> Option<(u16, u64)> {
        let state = self.state.lock();
        state
            .channels
            .iter()
            .filter_map(|(channel, d)| d.unacked.oldest().map(|u| (*channel, u.delivered_at)))
            .min_by_key(|(_, at)| *at)
    }

    /// Takes the consumers waiting for room, to kick their queues (outside the lock).
    pub fn take_starved(&self) -> Vec<Arc<ConsumerSink>> {
        self.state.lock().window.take_starved()
    }

    /// Takes deliveries that arrived for channels already closed, to release.
    pub fn take_orphaned(&self) -> Vec<Unacked> {
        let orphaned = self.state.lock().window.take_orphaned();
        orphaned
            .into_iter()
            .map(|(queue, id)| Unacked {
                tag: 0,
                queue,
                id,
                consumer: None,
                delivered_at: 0,
            })
            .collect()
    }

    /// Puts deliveries back as unacked (tx.rollback of acks), re-counting their credit.
    pub fn restore_unacked(&self, channel: u16, restored: Vec<Unacked>) {
        let mut state = self.state.lock();
        let Some(deliveries) = state.channels.get_mut(&channel) else {
            return;
        };
        for unacked in restored {
            if let Some(consumer) = &unacked.consumer {
                consumer.credit.take();
                deliveries.global.take();
            }
            deliveries.unacked.restore(unacked);
        }
    }

    /// Takes the consumers the server cancelled since the last call.
    pub fn take_server_cancelled(&self) -> Vec<(u16, Arc<str>)> {
        std::mem::take(&mut self.state.lock().server_cancelled)
    }

    /// Takes everything buffered for writing, with the consumers to kick now that the buffer
    /// is empty again, and makes the caller the socket's only writer until
    /// [`Outbox::write_done`]. None when nothing is buffered or someone else is writing.
    pub fn take_for_write(&self) -> Option<Drained> {
        let mut state = self.state.lock();
        Self::take_locked(&mut state)
    }

    fn take_locked(state: &mut OutboxState) -> Option<Drained> {
        if state.buffer.is_empty() || state.writer_busy {
            return None;
        }
        state.writer_busy = true;
        // Take the allocation along: an idle connection keeps no write buffer.
        let bytes = std::mem::take(&mut state.buffer).freeze();
        let starved = state.window.take_starved();
        Some(Drained { bytes, starved })
    }

    /// The writer of a [`Outbox::take_for_write`] batch is done; `unwritten` is what the socket
    /// did not take, sent before anything buffered since. Wakes the writer task when more is
    /// buffered.
    pub fn write_done(&self, unwritten: &[u8]) {
        let mut state = self.state.lock();
        state.writer_busy = false;
        if !unwritten.is_empty() {
            let mut buffer = BytesMut::with_capacity(unwritten.len() + state.buffer.len());
            buffer.extend_from_slice(unwritten);
            buffer.extend_from_slice(&state.buffer);
            state.buffer = buffer;
        }
        let more = !state.buffer.is_empty();
        drop(state);
        if more {
            self.notify.notify_one();
        }
    }

    /// The reader starts handling a read batch: replies and deliveries buffered until
    /// [`Outbox::end_batch`] do not wake the writer task.
    pub fn begin_batch(&self) {
        self.state.lock().batch_open = true;
    }

    /// The reader finished its batch. A small buffer is handed back for the reader to write
    /// itself (the writer task is idle then, and stays so until [`Outbox::write_done`]);
    /// anything larger wakes the writer task.
    pub fn end_batch(&self) -> Option<Drained> {
        let mut state = self.state.lock();
        state.batch_open = false;
        if state.buffer.is_empty() {
            return None;
        }
        if state.buffer.len() <= INLINE_WRITE_MAX && !state.window.is_closed() {
            if let Some(drained) = Self::take_locked(&mut state) {
                return Some(drained);
            }
        }
        drop(state);
        self.notify.notify_one();
        None
    }

    /// Whether the connection was closed (the writer exits once the buffer is flushed).
    pub fn is_closed(&self) -> bool {
        self.state.lock().window.is_closed()
    }

    /// Bytes buffered or being written: the reader stops reading a client that does not
    /// read its replies once this passes [`READ_PAUSE_BYTES`].
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

fn release_credit(deliveries: &mut ChannelDeliveries, taken: &[Unacked]) {
    for unacked in taken {
        if let Some(consumer) = &unacked.consumer {
            consumer.credit.give_back();
            deliveries.global.give_back();
        }
    }
}

/// The message's properties in 0-9-1 wire form: the bytes it arrived with, or encoded now
/// for a message from another protocol.
/// The encoded properties of a delivery: a message returned after failed deliveries carries
/// their number in the `x-delivery-count` header (a long), as RabbitMQ 4.x quorum queues
/// write it; a first delivery is sent with the properties exactly as published.
fn delivery_properties(message: &Message, delivery_count: u32) -> Bytes {
    if delivery_count == 0 {
        return raw_properties(message);
    }
    let mut properties = message.properties.clone();
    properties
        .headers
        .get_or_insert_with(Table::new)
        .insert("x-delivery-count", Value::I64(i64::from(delivery_count)));
    let mut out = BytesMut::new();
    if codec::encode_properties(&properties, &mut out).is_err() {
        return raw_properties(message);
    }
    out.freeze()
}

fn raw_properties(message: &Message) -> Bytes {
    match &message.encoded_properties {
        Some(raw) => raw.clone(),
        None => {
            let mut out = BytesMut::new();
            if codec::encode_properties(&message.properties, &mut out).is_err() {
                // A property too long for 0-9-1 (only possible from another protocol):
                // deliver with no properties rather than not at all.
                out.clear();
                out.extend_from_slice(&[0, 0]);
            }
            out.freeze()
        }
    }
}

/// One AMQP 0-9-1 consumer as a core delivery sink.
pub struct ConsumerSink {
    outbox: Arc<Outbox>,
    /// The channel the consumer lives on.
    pub channel: u16,
    /// The consumer tag.
    pub tag: Arc<str>,
    /// The queue it consumes from, of whatever type.
    pub queue: Arc<dyn QueueInstance>,
    needs_ack: bool,
    /// basic.qos global=false at consume time (0 = unlimited) and the deliveries counted
    /// against it; changed only under the outbox lock.
    credit: ConsumerCredit,
    /// False until basic.consume-ok is in the buffer: no delivery may overtake it.
    started: AtomicBool,
}

impl ConsumerSink {
    /// A sink for a consumer on `channel`.
    pub fn new(
        outbox: Arc<Outbox>,
        channel: u16,
        tag: Arc<str>,
        queue: Arc<dyn QueueInstance>,
        needs_ack: bool,
        prefetch: u32,
    ) -> Arc<ConsumerSink> {
        Arc::new(ConsumerSink {
            outbox,
            channel,
            tag,
            queue,
            needs_ack,
            credit: ConsumerCredit::new(prefetch),
            started: AtomicBool::new(false),
        })
    }

    /// Lets deliveries flow once consume-ok was sent; the caller then kicks the queue.
    pub fn start(&self) {
        self.started.store(true, Ordering::Release);
    }
}

/// The core calls the sink through `Arc<ConsumerSink>`; the newtype carries the `Arc` so the
/// sink can register itself as starved.
pub struct SinkHandle(pub Arc<ConsumerSink>);

impl DeliverySink for SinkHandle {
    fn prefetch(&self) -> Option<u32> {
        let prefetch = self.0.credit.limit();
        (self.0.needs_ack && prefetch != 0).then_some(prefetch)
    }

    fn reserve(&self) -> bool {
        let sink = &self.0;
        let mut state = sink.outbox.state.lock();
        if state.window.is_closed() || !sink.started.load(Ordering::Acquire) {
            return false;
        }
        let buffered = state.buffer.len();
        let OutboxState {
            window, channels, ..
        } = &mut *state;
        if window.admit(buffered, sink) != Admission::Open {
            return false;
        }
        if !sink.needs_ack {
            return true;
        }
        let Some(deliveries) = channels.get_mut(&sink.channel) else {
            return false;
        };
        window.charge(sink, Some(&sink.credit), Some(&mut deliveries.global))
    }

    fn deliver(&self, delivery: Delivery) {
        let sink = &self.0;
        let mut state = sink.outbox.state.lock();
        let frame_max = state.frame_max;
        let wake = state.buffer.is_empty() && !state.batch_open;
        let OutboxState {
            buffer,
            channels,
            window,
            ..
        } = &mut *state;
        let Some(deliveries) = channels.get_mut(&sink.channel) else {
            // The channel closed between reserve and deliver. The queue's lock is held here,
            // so the reader releases the message later instead of settling it now.
            if delivery.needs_settlement {
                window.orphan(delivery.queue, delivery.id);
            }
            return;
        };
        let tag = deliveries.unacked.next_tag();
        let message = &delivery.message;
        let properties = delivery_properties(message, delivery.delivery_count);
        codec::write_deliver(
            buffer,
            sink.channel,
            &sink.tag,
            tag,
            delivery.redelivered,
            &message.exchange,
            &message.routing_key,
            &properties,
            &message.body,
            frame_max,
        );
        let first_unacked = delivery.needs_settlement && deliveries.unacked.is_empty();
        if delivery.needs_settlement {
            deliveries.unacked.push(Unacked {
                tag,
                queue: delivery.queue,
                id: delivery.id,
                consumer: Some(Arc::clone(sink)),
                delivered_at: now_ms(),
            });
        }
        drop(state);
        if wake {
            sink.outbox.notify.notify_one();
        }
        if first_unacked {
            sink.outbox.reader_wake.notify_one();
        }
    }

    fn cancelled(&self) {
        let sink = &self.0;
        let mut state = sink.outbox.state.lock();
        if state.window.is_closed() {
            return;
        }
        state
            .server_cancelled
            .push((sink.channel, Arc::clone(&sink.tag)));
        if sink.outbox.consumer_cancel_notify.load(Ordering::Relaxed) {
            let cancel = Method::BasicCancel {
                consumer_tag: sink.tag.to_string(),
                no_wait: true,
            };
            if let Err(error) = codec::write_method_frame(&mut state.buffer, sink.channel, &cancel)
            {
                tracing::error!(%error, "could not encode basic.cancel");
            }
        }
        drop(state);
        sink.outbox.notify.notify_one();
    }
}
