//! The connection's outgoing side, shared between its driver task and the queues that
//! deliver to its subscriptions: one buffer of encoded packets, the in-flight QoS 1 and 2
//! deliveries by packet identifier, and the in-flight window (`mqtt.prefetch`).
//!
//! The core's [`DeliveryWindow`] keeps admission, the high-water mark, the queues waiting
//! for room, orphans and which deliveries were sent; a [`Credit`] is the in-flight window.
//! The in-flight deliveries stay here, by packet identifier: identifiers are reused and
//! allocated around those still in flight, so they are not in delivery order.
//!
//! One mutex guards it all. Queues call [`DeliverySink::reserve`] and
//! [`DeliverySink::deliver`] with their own lock held, so the lock order is queue, then
//! outbox; code holding the outbox lock never calls into a queue. Settlements a delivery
//! needs at once (a QoS 0 delivery from a QoS 1 queue) are collected here and carried out by
//! the driver after it takes the buffer.
//!
//! An idle connection holds no buffer: the driver takes the allocation along with the bytes.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::Notify;
use warren_core::consumer::{Delivery, DeliverySink};
use warren_core::delivery_window::{Credit, DeliveryWindow, Orphan};
use warren_core::idmap::IdMap;
use warren_core::message::Message;
use warren_core::queue_type::QueueInstance;
use warren_core::value::Value;

use crate::codec::{
    self, encode_publish, encode_publish_v5, filter_matches, publish_v5_size,
    routing_key_to_mqtt_topic, Packet, ProtocolLevel, PubRel, QoS, SubscriptionOptions,
};
use crate::session::v5::{from_core, unix_ms, Outgoing};

/// Above this many buffered bytes queues stop delivering until the driver drains the buffer,
/// so a slow socket leaves messages in their queues instead of in memory here.
pub const OUTBOX_HIGH_WATER: usize = 512 * 1024;

/// The header a message published over MQTT carries its QoS in (RabbitMQ's name).
pub const PUBLISH_QOS_HEADER: &str = "x-mqtt-publish-qos";

/// The header telling AMQP consumers an MQTT publish was a re-send (RabbitMQ's name).
pub const DUP_HEADER: &str = "x-mqtt-dup";

/// One QoS 1 or 2 delivery the client has not finished acknowledging.
#[derive(Debug)]
pub struct InFlight {
    /// The queue to settle with; `None` for a retained message sent on subscribe.
    pub queue: Option<Arc<dyn QueueInstance>>,
    /// The queue's id of the message.
    pub id: u64,
    /// The QoS it was sent with.
    pub qos: QoS,
    /// QoS 2: PUBREC arrived, the queue was settled and PUBREL sent; waiting for PUBCOMP.
    pub released: bool,
    /// Whether it counts against the in-flight window.
    counted: bool,
    /// The window's stamp when it was encoded ([`DeliveryWindow::stamp`]): until the
    /// driver takes the buffer its bytes are still there and the client never got it.
    buffered_at: u32,
}

struct OutboxState {
    buffer: BytesMut,
    /// Open or closed, queues waiting for room, orphans, sent or still buffered.
    window: DeliveryWindow<Arc<dyn QueueInstance>>,
    in_flight: IdMap<u16, InFlight>,
    next_packet_id: u16,
    /// The in-flight window (`mqtt.prefetch`, narrowed by an MQTT 5 receive maximum) and
    /// the deliveries counted against it: reserved, or in flight and counted.
    credit: Credit,
    /// Allocated the first time one of its lists is needed: an idle subscriber never does.
    lists: Option<Box<Lists>>,
    /// The protocol packets are encoded for: 3.1.1 until an MQTT 5 CONNECT says otherwise.
    protocol: ProtocolLevel,
    /// What MQTT 5 deliveries need beyond the defaults; boxed and allocated only once the
    /// client set a limit, a topic alias is taken, or a subscription has an identifier or
    /// options: an idle MQTT 5 subscriber with defaults carries one null pointer, as a 3.1.1
    /// one does.
    v5: Option<Box<OutboundV5>>,
}

/// The client's MQTT 5 limits and the state of outgoing topic aliases.
#[derive(Default)]
pub struct OutboundV5 {
    /// The highest topic alias the client accepts (0: none).
    pub topic_alias_maximum: u16,
    /// The largest packet the client accepts; larger deliveries are dropped (MQTT-3.1.2-25).
    pub maximum_packet_size: Option<u32>,
    /// Topics with the alias the client was told, in assignment order.
    aliases: Vec<(String, u16)>,
    /// The client's subscriptions with their MQTT 5 identifier and options, by filter (the
    /// shared subscription's own filter for `$share/...`): every matching identifier is sent
    /// with a delivery (MQTT-3.3.4-3), and the options decide no local and retain as
    /// published. Only subscriptions with an identifier or options are recorded until one
    /// is "no local" (`all_recorded`): a subscription with neither changes no delivery
    /// except a "no local" one's own messages, which it lets through.
    subscriptions: Vec<OutboundSubscription>,
    /// Every subscription is recorded, defaults included (set by
    /// [`Outbox::record_all_subscriptions`] when the first "no local" one is made).
    all_recorded: bool,
    /// The connection's id: a message carrying it in [`NO_LOCAL_HEADER`] was published by
    /// this connection.
    connection_id: u64,
}

/// What a delivery needs to know of one MQTT 5 subscription.
struct OutboundSubscription {
    filter: String,
    identifier: Option<u32>,
    options: SubscriptionOptions,
}

/// The header a message published over MQTT with RETAIN set carries (for subscriptions with
/// "retain as published").
pub const RETAIN_HEADER: &str = "x-mqtt-retain";

/// The header naming the connection that published a message, set only by an MQTT 5
/// connection holding a "no local" subscription (the only case that reads it).
pub const NO_LOCAL_HEADER: &str = "x-mqtt-publisher-connection";

impl OutboundV5 {
    /// The client's limits, before any alias or subscription identifier.
    pub fn new(
        topic_alias_maximum: u16,
        maximum_packet_size: Option<u32>,
        connection_id: u64,
    ) -> OutboundV5 {
        OutboundV5 {
            topic_alias_maximum,
            maximum_packet_size,
            connection_id,
            ..OutboundV5::default()
        }
    }

    /// The alias for `topic`, and whether the client knows it already. A new alias is taken
    /// while there are free ones; after that topics go out in full.
    fn alias(&mut self, topic: &str) -> Option<(u16, bool)> {
        if let Some((_, alias)) = self.aliases.iter().find(|(known, _)| known == topic) {
            return Some((*alias, true));
        }
        let next = u16::try_from(self.aliases.len() + 1).ok()?;
        if next > self.topic_alias_maximum {
            return None;
        }
        self.aliases.push((topic.to_string(), next));
        Some((next, false))
    }

    /// What the subscriptions matching a delivery of `message` to `topic` say: their
    /// identifiers, whether it may go out (not when it is the connection's own and every
    /// matching subscription is "no local"), and whether RETAIN stays set (a matching
    /// subscription is "retain as published" and the message was published retained).
    fn shape(&self, topic: &str, message: &Message) -> Option<(Vec<u32>, bool)> {
        let headers = message.properties.headers.as_ref();
        let own = headers
            .and_then(|headers| headers.get(NO_LOCAL_HEADER))
            .and_then(Value::as_i64)
            .is_some_and(|origin| origin == self.connection_id as i64);
        let retained = headers
            .and_then(|headers| headers.get(RETAIN_HEADER))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let mut identifiers = Vec::new();
        let mut matched = false;
        let mut deliver = !own;
        let mut retain = false;
        for subscription in &self.subscriptions {
            if !filter_matches(&subscription.filter, topic) {
                continue;
            }
            matched = true;
            deliver |= !subscription.options.no_local;
            retain |= retained && subscription.options.retain_as_published;
            identifiers.extend(subscription.identifier);
        }
        // No subscription of this session matches (a queue bound by an operator): deliver
        // as 3.1.1 would.
        (deliver || !matched).then_some((identifiers, retain))
    }
}

/// The outbox's lists, which most connections never fill: boxed together, so an idle
/// connection's outbox carries one pointer instead of two empty vectors.
#[derive(Default)]
struct Lists {
    /// Deliveries to acknowledge to their queue at once (sent as QoS 0).
    to_ack: Vec<(Arc<dyn QueueInstance>, u64)>,
    /// The subscriptions whose filter starts with `$`, with their QoS: the only ones a
    /// `$` topic may be delivered for (MQTT-4.7.2-1). Empty for most clients.
    dollar_filters: Vec<(String, QoS)>,
}

/// The shared outgoing side of one MQTT connection.
pub struct Outbox {
    state: Mutex<OutboxState>,
    /// Wakes the driver when the buffer gets its first bytes or a [`Signal`] is raised. One
    /// waker for everything keeps an idle connection's task small: each future the driver
    /// waits on lives in the task for as long as the connection does.
    pub notify: Notify,
    /// Raised [`Signal`]s, as bits, until the driver takes them.
    signals: AtomicU8,
    /// The session has ended: a connection taking over its client identifier may go on
    /// (see `registry::EndSender`).
    ended: AtomicBool,
}

/// Something other than bytes to write that the driver must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Signal {
    /// Another connection takes over this client identifier.
    Kick = 1,
    /// An operator asked the connection to close (management API, warrenctl).
    OperatorClose = 2,
    /// The listener is shutting down.
    Shutdown = 4,
    /// A resource alarm was raised or cleared.
    AlarmChanged = 8,
    /// Another connection takes over this client identifier, and this connection's will
    /// is not published (see `registry::Takeover::send_will`).
    KickWithoutWill = 16,
}

/// The signals [`Outbox::take_signals`] returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signals(u8);

impl Signals {
    /// Whether `signal` is among them.
    pub fn contains(self, signal: Signal) -> bool {
        self.0 & signal as u8 != 0
    }

    /// Whether there are none.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// What the driver took from the outbox.
pub struct Drained {
    /// Encoded packets to write.
    pub bytes: Bytes,
    /// Queues to kick because room freed up.
    pub starved: Vec<Arc<dyn QueueInstance>>,
    /// Deliveries to acknowledge to their queues.
    pub to_ack: Vec<(Arc<dyn QueueInstance>, u64)>,
}

/// What a PUBREC did to a QoS 2 delivery.
#[derive(Debug)]
pub enum Received {
    /// The first PUBREC of a delivery in flight: it is released now (PUBREL owed until
    /// PUBCOMP); the message to settle with its queue, unless it came from no queue.
    Released(Option<(Arc<dyn QueueInstance>, u64)>),
    /// A repeated PUBREC, or one for an identifier not in flight: only PUBREL again.
    Again,
}

/// What was left when the connection closed.
pub struct Leftovers {
    /// Deliveries sent but never (fully) acknowledged, to requeue.
    pub unacknowledged: Vec<(Arc<dyn QueueInstance>, u64)>,
    /// Deliveries that never reached the client (still in the buffer, or arriving after
    /// the close), to release.
    pub never_sent: Vec<(Arc<dyn QueueInstance>, u64)>,
    /// QoS 2 deliveries released (PUBREL sent) but not completed: a persistent session sends
    /// PUBREL for them again on reconnect (MQTT-4.4.0-1).
    pub released: Vec<u16>,
    /// Deliveries to acknowledge.
    pub to_ack: Vec<(Arc<dyn QueueInstance>, u64)>,
}

impl Outbox {
    /// A new, empty outbox with an in-flight window of `prefetch` deliveries.
    pub fn new(prefetch: u16) -> Arc<Outbox> {
        Arc::new(Outbox {
            state: Mutex::new(OutboxState {
                buffer: BytesMut::new(),
                window: DeliveryWindow::new(OUTBOX_HIGH_WATER),
                in_flight: IdMap::default(),
                next_packet_id: 1,
                credit: Credit::new(u32::from(prefetch.max(1))),
                lists: None,
                protocol: ProtocolLevel::V3_1_1,
                v5: None,
            }),
            notify: Notify::new(),
            signals: AtomicU8::new(0),
            ended: AtomicBool::new(false),
        })
    }

    /// Encodes packets for `protocol` from now on (set as soon as CONNECT is read, so even a
    /// refusing CONNACK has the client's format).
    pub fn set_protocol(&self, protocol: ProtocolLevel) {
        self.state.lock().protocol = protocol;
    }

    /// Applies an MQTT 5 client's limits: its receive maximum narrows the in-flight window,
    /// its topic alias maximum and maximum packet size shape deliveries (kept only when they
    /// are not the defaults).
    pub fn configure_v5(&self, receive_maximum: u16, limits: OutboundV5) {
        let mut state = self.state.lock();
        let prefetch = state.credit.limit().min(u32::from(receive_maximum.max(1)));
        state.credit.set_limit(prefetch);
        let defaults = limits.topic_alias_maximum == 0 && limits.maximum_packet_size.is_none();
        state.v5 = (!defaults).then(|| Box::new(limits));
    }

    /// Records an MQTT 5 subscription's identifier and options for `filter`, or forgets the
    /// subscription (`None`). `connection_id` is this connection's (for "no local").
    pub fn set_subscription(
        &self,
        filter: &str,
        subscription: Option<(Option<u32>, SubscriptionOptions)>,
        connection_id: u64,
    ) {
        let mut state = self.state.lock();
        if let Some(v5) = state.v5.as_deref_mut() {
            v5.subscriptions.retain(|known| known.filter != filter);
        }
        let Some((identifier, options)) = subscription else {
            return;
        };
        let plain = identifier.is_none() && options == SubscriptionOptions::default();
        if plain && !state.v5.as_deref().is_some_and(|v5| v5.all_recorded) {
            return;
        }
        state
            .v5_mut(connection_id)
            .subscriptions
            .push(OutboundSubscription {
                filter: filter.to_string(),
                identifier,
                options,
            });
    }

    /// Records every subscription from now on, and `filters` (the connection's current
    /// ones) with default options where they are not recorded yet: called when the first
    /// "no local" subscription is made, whose own messages the others let through.
    pub fn record_all_subscriptions<'a>(
        &self,
        filters: impl IntoIterator<Item = &'a str>,
        connection_id: u64,
    ) {
        let mut state = self.state.lock();
        let v5 = state.v5_mut(connection_id);
        v5.all_recorded = true;
        for filter in filters {
            if !v5.subscriptions.iter().any(|known| known.filter == filter) {
                v5.subscriptions.push(OutboundSubscription {
                    filter: filter.to_string(),
                    identifier: None,
                    options: SubscriptionOptions::default(),
                });
            }
        }
    }

    /// The largest packet the client accepts, if it said.
    pub fn client_maximum_packet_size(&self) -> Option<u32> {
        self.state.lock().v5.as_deref()?.maximum_packet_size
    }

    /// Records that the session has ended (its client identifier may be taken over).
    pub fn mark_ended(&self) {
        self.ended.store(true, Ordering::Release);
    }

    /// Whether the session has ended.
    pub fn has_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Raises `signal` and wakes the driver.
    pub fn signal(&self, signal: Signal) {
        self.signals.fetch_or(signal as u8, Ordering::AcqRel);
        self.notify.notify_one();
    }

    /// Takes the raised signals (a cheap atomic load when there are none; the driver calls
    /// it on every wake-up).
    pub fn take_signals(&self) -> Signals {
        if self.signals.load(Ordering::Acquire) == 0 {
            return Signals(0);
        }
        Signals(self.signals.swap(0, Ordering::AcqRel))
    }

    /// Encodes a packet into the buffer.
    pub fn send(&self, packet: &Packet) {
        let mut state = self.state.lock();
        if state.window.is_closed() {
            return;
        }
        let was_empty = state.buffer.is_empty();
        let protocol = state.protocol;
        if let Err(error) = codec::encode_with(packet, &mut state.buffer, protocol) {
            // Only a broker bug can produce a packet the wire cannot carry.
            tracing::error!(packet = packet.packet_type().name(), %error, "could not encode packet");
        }
        drop(state);
        if was_empty {
            self.notify.notify_one();
        }
    }

    /// Sends a retained message to a new subscriber, with the RETAIN flag set. QoS 1 and 2
    /// take a packet identifier but no queue and no room in the window: they come from the
    /// retained store, not from a queue.
    pub fn send_retained(&self, topic: &str, message: &Message, qos: QoS) {
        let mut state = self.state.lock();
        if state.window.is_closed() {
            return;
        }
        let was_empty = state.buffer.is_empty();
        let packet_id = (qos != QoS::AtMostOnce).then(|| state.allocate_packet_id());
        match state.encode_delivery(topic, qos, packet_id, (true, false), message) {
            Ok(true) => {
                let in_flight = &mut state.in_flight;
                if let Some(packet_id) = packet_id {
                    in_flight.insert(
                        packet_id,
                        InFlight {
                            queue: None,
                            id: 0,
                            qos,
                            released: false,
                            counted: false,
                            buffered_at: 0,
                        },
                    );
                }
            }
            Ok(false) => {}
            Err(error) => tracing::warn!(topic, %error, "retained message not sent"),
        }
        drop(state);
        if was_empty {
            self.notify.notify_one();
        }
    }

    /// PUBACK: ends a QoS 1 delivery. Returns the queue and id to settle, if the packet
    /// identifier was in flight at QoS 1 and came from a queue.
    pub fn acknowledge(&self, packet_id: u16) -> Option<(Arc<dyn QueueInstance>, u64)> {
        let mut state = self.state.lock();
        match state.in_flight.get(&packet_id) {
            Some(entry) if entry.qos == QoS::AtLeastOnce => {}
            _ => return None,
        }
        let entry = state.in_flight.remove(&packet_id)?;
        state.uncount(&entry);
        entry.queue.map(|queue| (queue, entry.id))
    }

    /// PUBREC: the client has a QoS 2 delivery. The caller sends PUBREL (MQTT-4.3.3-1);
    /// the first PUBREC of a delivery in flight also hands back the message to settle.
    pub fn received(&self, packet_id: u16) -> Received {
        let mut state = self.state.lock();
        match state.in_flight.get_mut(&packet_id) {
            Some(entry) if entry.qos == QoS::ExactlyOnce && !entry.released => {
                entry.released = true;
                Received::Released(entry.queue.take().map(|queue| (queue, entry.id)))
            }
            // A repeated PUBREC, or an unknown identifier: PUBREL lets the client finish
            // its side, as Mosquitto does.
            _ => Received::Again,
        }
    }

    /// PUBCOMP: ends a QoS 2 delivery. Returns whether it was known.
    pub fn complete(&self, packet_id: u16) -> bool {
        let mut state = self.state.lock();
        match state.in_flight.get(&packet_id) {
            Some(entry) if entry.qos == QoS::ExactlyOnce && entry.released => {}
            _ => return false,
        }
        if let Some(entry) = state.in_flight.remove(&packet_id) {
            state.uncount(&entry);
        }
        true
    }

    /// Resumes QoS 2 deliveries a previous connection of the session had released: sends
    /// PUBREL again and waits for PUBCOMP (MQTT-4.4.0-1). Their messages were settled
    /// already, so they take no room in the window.
    pub fn resume_released(&self, packet_ids: &[u16]) {
        let mut state = self.state.lock();
        for &packet_id in packet_ids {
            state.in_flight.insert(
                packet_id,
                InFlight {
                    queue: None,
                    id: 0,
                    qos: QoS::ExactlyOnce,
                    released: true,
                    counted: false,
                    buffered_at: 0,
                },
            );
        }
        drop(state);
        for &packet_id in packet_ids {
            self.send(&Packet::PubRel(PubRel::new(packet_id)));
        }
    }

    /// Records the session's filters that start with `$` (see [`SubscriptionSink`]).
    pub fn set_dollar_filters(&self, filters: Vec<(String, QoS)>) {
        let mut state = self.state.lock();
        if !filters.is_empty() || state.lists.is_some() {
            state.lists().dollar_filters = filters;
        }
    }

    /// Deliveries in flight (QoS 1 and 2 not yet completed).
    pub fn in_flight_count(&self) -> usize {
        self.state.lock().in_flight.len()
    }

    /// Takes the queues waiting for room, to kick (outside the lock).
    pub fn take_starved(&self) -> Vec<Arc<dyn QueueInstance>> {
        self.state.lock().window.take_starved()
    }

    /// Takes everything buffered for the driver to write.
    pub fn drain(&self) -> Option<Drained> {
        let mut state = self.state.lock();
        let no_acks = state
            .lists
            .as_deref()
            .is_none_or(|lists| lists.to_ack.is_empty());
        if state.buffer.is_empty() && no_acks {
            return None;
        }
        // Take the allocation along: an idle connection keeps no write buffer.
        let bytes = std::mem::take(&mut state.buffer).freeze();
        state.window.handed_over();
        let starved = state.window.take_starved();
        let to_ack = state
            .lists
            .as_deref_mut()
            .map(|lists| std::mem::take(&mut lists.to_ack))
            .unwrap_or_default();
        Some(Drained {
            bytes,
            starved,
            to_ack,
        })
    }

    /// Closes the outbox: queues get no more room, and what was in flight is returned for
    /// the session to requeue. Buffered bytes stay for a last flush.
    pub fn close(&self) -> Leftovers {
        let mut state = self.state.lock();
        state.window.close();
        let orphaned = state.window.take_orphaned();
        let to_ack = state
            .lists
            .as_deref_mut()
            .map(|lists| std::mem::take(&mut lists.to_ack))
            .unwrap_or_default();
        let mut released: Vec<u16> = state
            .in_flight
            .iter()
            .filter(|(_, entry)| entry.released)
            .map(|(packet_id, _)| *packet_id)
            .collect();
        released.sort_unstable();
        let OutboxState {
            window, in_flight, ..
        } = &mut *state;
        let mut unacknowledged = Vec::new();
        let mut never_sent = orphaned;
        for (_, entry) in in_flight.drain() {
            if let Some(queue) = entry.queue {
                if !window.was_sent(entry.buffered_at) {
                    never_sent.push((queue, entry.id));
                } else {
                    unacknowledged.push((queue, entry.id));
                }
            }
        }
        // Returned in delivery order so a resumed session sees its messages in order.
        unacknowledged.sort_by_key(|(_, id)| *id);
        never_sent.sort_by_key(|(_, id)| *id);
        state.credit.reset();
        drop(state);
        self.notify.notify_one();
        Leftovers {
            unacknowledged,
            never_sent,
            released,
            to_ack,
        }
    }

    /// Takes deliveries that arrived after [`Outbox::close`], to requeue.
    pub fn take_orphaned(&self) -> Vec<Orphan> {
        self.state.lock().window.take_orphaned()
    }

    /// Bytes waiting to be written.
    pub fn pending_bytes(&self) -> usize {
        self.state.lock().buffer.len()
    }
}

impl OutboxState {
    /// The next free packet identifier: never 0, never one still in flight (MQTT-2.3.1-4).
    /// The window is at most 65535 - 1 deliveries, so a free one always exists.
    fn allocate_packet_id(&mut self) -> u16 {
        loop {
            let id = self.next_packet_id;
            self.next_packet_id = self.next_packet_id.checked_add(1).unwrap_or(1);
            if id != 0 && !self.in_flight.contains_key(&id) {
                return id;
            }
        }
    }

    fn uncount(&mut self, entry: &InFlight) {
        if entry.counted {
            self.credit.give_back();
        }
    }

    /// Writes one delivery: an MQTT 3.1.1 PUBLISH, or an MQTT 5 one with the message's
    /// properties, a topic alias when the client accepts them, and the matching subscription
    /// identifiers. `Ok(false)`: not sent, because the message expired or the packet is
    /// larger than the client accepts (both are dropped, MQTT-3.3.2-5 and MQTT-3.1.2-25).
    fn encode_delivery(
        &mut self,
        topic: &str,
        qos: QoS,
        packet_id: Option<u16>,
        flags: (bool, bool),
        message: &Message,
    ) -> Result<bool, codec::EncodeError> {
        if !self.protocol.is_v5() {
            encode_publish(
                &mut self.buffer,
                topic,
                qos,
                packet_id,
                flags.0,
                flags.1,
                &message.body,
            )?;
            return Ok(true);
        };
        let mut properties = match from_core(message, unix_ms()) {
            Outgoing::Deliver(properties) => properties,
            Outgoing::Expired => return Ok(false),
        };
        let v5 = self.v5.as_deref_mut();
        // No record: no limits, aliases or subscription options, so nothing to shape.
        let shaped = match v5.as_deref() {
            Some(v5) => v5.shape(topic, message),
            None => Some((Vec::new(), false)),
        };
        let Some((identifiers, retain_as_published)) = shaped else {
            return Ok(false);
        };
        let flags = (flags.0 || retain_as_published, flags.1);
        if !identifiers.is_empty() {
            properties.get_or_insert_default().subscription_identifiers = identifiers;
        }
        let size = publish_v5_size(topic, qos, message.body.len(), properties.as_deref())?;
        if v5
            .as_deref()
            .and_then(|v5| v5.maximum_packet_size)
            .is_some_and(|maximum| size > maximum as usize)
        {
            return Ok(false);
        }
        let mut sent_topic = topic;
        if let Some((alias, known)) = v5.and_then(|v5| v5.alias(topic)) {
            properties.get_or_insert_default().topic_alias = Some(alias);
            if known {
                sent_topic = "";
            }
        }
        encode_publish_v5(
            &mut self.buffer,
            sent_topic,
            qos,
            packet_id,
            flags,
            &message.body,
            properties.as_deref(),
        )?;
        Ok(true)
    }

    /// The lists, allocated on first use.
    fn lists(&mut self) -> &mut Lists {
        self.lists.get_or_insert_default()
    }

    /// The MQTT 5 record, allocated on first use (with no limits: a client that set some
    /// has one from [`Outbox::configure_v5`]).
    fn v5_mut(&mut self, connection_id: u64) -> &mut OutboundV5 {
        self.v5
            .get_or_insert_with(|| Box::new(OutboundV5::new(0, None, connection_id)))
    }
}

/// The QoS an MQTT publisher gave a message (RabbitMQ's `x-mqtt-publish-qos` header), if it
/// came over MQTT.
pub fn publish_qos(message: &Message) -> Option<QoS> {
    let value = message
        .properties
        .headers
        .as_ref()?
        .get(PUBLISH_QOS_HEADER)?
        .as_i64()?;
    QoS::from_u8(u8::try_from(value).ok()?)
}

/// One subscription queue of a connection (`mqtt-subscription-<client id>qos<n>`) as a core
/// delivery sink.
pub struct SubscriptionSink {
    outbox: Arc<Outbox>,
    /// The queue, of any type (a persistent session's may be a quorum queue).
    queue: Arc<dyn QueueInstance>,
    /// The QoS the queue's subscriptions were granted: the most a delivery gets.
    qos: QoS,
}

impl SubscriptionSink {
    /// A sink delivering `queue`'s messages at up to `qos`.
    pub fn new(
        outbox: Arc<Outbox>,
        queue: Arc<dyn QueueInstance>,
        qos: QoS,
    ) -> Arc<SubscriptionSink> {
        Arc::new(SubscriptionSink { outbox, queue, qos })
    }
}

impl DeliverySink for SubscriptionSink {
    fn reserve(&self) -> bool {
        let mut state = self.outbox.state.lock();
        let buffered = state.buffer.len();
        let OutboxState { window, credit, .. } = &mut *state;
        window.reserve(buffered, &self.queue, self.qos != QoS::AtMostOnce, credit)
    }

    fn deliver(&self, delivery: Delivery) {
        let mut state = self.outbox.state.lock();
        let counted = self.qos != QoS::AtMostOnce;
        if state.window.is_closed() {
            // The connection closed between reserve and deliver; the queue's lock is held
            // here, so the session releases it later instead of settling it now.
            if delivery.needs_settlement {
                state.window.orphan(delivery.queue, delivery.id);
            }
            return;
        }
        let was_empty = state.buffer.is_empty();
        let message = &delivery.message;
        // A message keeps the QoS it was published with when that is lower (RabbitMQ).
        let qos = publish_qos(message).map_or(self.qos, |published| published.min(self.qos));
        let topic = routing_key_to_mqtt_topic(&message.routing_key);
        // The topic exchange routes `$SYS.x` to a `#` binding, but a filter starting with a
        // wildcard must not match a `$` topic (MQTT-4.7.2-1): deliver it only for a filter
        // of this QoS that starts with `$` and matches, else settle it unseen.
        if topic.starts_with('$')
            && !state.lists.as_deref().is_some_and(|lists| {
                lists
                    .dollar_filters
                    .iter()
                    .any(|(filter, qos)| *qos == self.qos && filter_matches(filter, &topic))
            })
        {
            if counted {
                state.credit.give_back();
            }
            if delivery.needs_settlement {
                state.lists().to_ack.push((delivery.queue, delivery.id));
            }
            return;
        }
        let packet_id = (qos != QoS::AtMostOnce).then(|| state.allocate_packet_id());
        let dup = delivery.redelivered && qos != QoS::AtMostOnce;
        let encoded = state.encode_delivery(&topic, qos, packet_id, (false, dup), message);
        if let Err(error) = &encoded {
            // A routing key longer than a topic can be: the message cannot reach MQTT.
            tracing::warn!(routing_key = %message.routing_key, %error, "delivery to MQTT dropped");
        }
        match packet_id {
            Some(packet_id) if matches!(encoded, Ok(true)) => {
                let buffered_at = state.window.stamp();
                state.in_flight.insert(
                    packet_id,
                    InFlight {
                        queue: Some(delivery.queue),
                        id: delivery.id,
                        qos,
                        released: false,
                        counted,
                        buffered_at,
                    },
                );
            }
            _ => {
                if counted {
                    state.credit.give_back();
                }
                if delivery.needs_settlement {
                    state.lists().to_ack.push((delivery.queue, delivery.id));
                }
            }
        }
        drop(state);
        if was_empty {
            self.outbox.notify.notify_one();
        }
    }

    fn cancelled(&self) {
        // The subscription queue was deleted (by an operator): the subscription is gone,
        // which MQTT 3.1.1 cannot tell the client about.
        tracing::info!(queue = self.queue.name(), "MQTT subscription queue deleted");
    }
}

/// The `x-mqtt-publish-qos` header value for a QoS.
pub fn publish_qos_value(qos: QoS) -> Value {
    Value::I8(qos.as_u8() as i8)
}
