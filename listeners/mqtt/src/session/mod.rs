//! The MQTT session state machine: packets in, core calls and packets out. No sockets and
//! no clocks; the driver feeds it packets, reads [`Session::keep_alive`] and calls
//! [`Session::terminate`] with the reason the connection ended.
//!
//! How MQTT maps onto the core (RabbitMQ's MQTT plugin semantics):
//!
//! - CONNECT authenticates through `Broker::authenticate`; a `vhost:user` user name picks
//!   the vhost, otherwise `mqtt.vhost`; clients without credentials log in as
//!   `mqtt.default_user` when `mqtt.allow_anonymous` is on.
//! - PUBLISH routes through `mqtt.exchange` (a topic exchange, `amq.topic`) with the topic
//!   translated to a routing key (`codec::mqtt_topic_to_routing_key`).
//! - Each granted QoS level of a client has one queue, `mqtt-subscription-<client id>qos<n>`,
//!   bound to the exchange with each filter's binding key and consumed by this connection.
//!   A clean session's queues are exclusive and go with the connection; a persistent
//!   session's are durable and keep collecting messages while the client is away.
//! - Deliveries go out through the [`Outbox`]; QoS 1/2 deliveries count against the
//!   in-flight window (`mqtt.prefetch`), the core's consumer credit.
//!
//! Files: `connect.rs` (CONNECT, takeover, session resume), `subscribe.rs` (SUBSCRIBE,
//! UNSUBSCRIBE, retained messages on subscribe), `publish.rs` (PUBLISH in, QoS 2, wills),
//! `delivery.rs` (PUBREC and PUBCOMP: the end of QoS 2 deliveries, and what a persistent
//! session records of them).

pub mod cluster;
mod connect;
mod delivery;
mod publish;
pub mod recovery;
pub mod registry;
mod shared;
mod subscribe;
#[cfg(test)]
mod tests;
pub mod v5;
mod v5_session;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use warren_core::certificate::{login_name, LoginFrom};
use warren_core::connections::ConnectionHandle;
use warren_core::queue::Settlement;
use warren_core::queue_type::QueueInstance;
use warren_core::retained::RetainedStore;
use warren_core::vhost::VHost;
use warren_core::Broker;

use crate::codec::{reason, DecodeError, LastWill, Packet, ProtocolLevel, QoS, Reason};
use crate::outbox::Outbox;
use registry::{ClientRegistry, Takeover};

/// The largest packet accepted before CONNECT succeeded (RabbitMQ's
/// `mqtt.max_packet_size_unauthenticated` default).
pub const MAX_PACKET_SIZE_UNAUTHENTICATED: usize = 65_536;

/// Settings of MQTT sessions (the `mqtt.*` keys).
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The vhost of user names without a `vhost:` prefix.
    pub vhost: String,
    /// The user of clients without credentials.
    pub default_user: String,
    /// That user's password.
    pub default_pass: String,
    /// Whether clients without credentials may connect as `default_user`.
    pub allow_anonymous: bool,
    /// The topic exchange publishes go to and subscriptions bind to.
    pub exchange: String,
    /// The most QoS 1/2 deliveries in flight per connection.
    pub prefetch: u16,
    /// The largest packet accepted after CONNECT.
    pub max_packet_size: usize,
    /// The largest message payload accepted (the broker's `max_message_size`).
    pub max_message_size: usize,
    /// `mqtt.ssl_cert_login`: a TLS client that sends no credentials logs in as the user its
    /// verified certificate names, read as this says (`ssl_cert_login_from`); `None`: off.
    pub ssl_cert_login: Option<LoginFrom>,
    /// `mqtt.max_keep_alive`: the longest keep-alive a client may use, in seconds. An MQTT 5
    /// client asking for more (or for none) gets it as CONNACK's Server Keep Alive; an
    /// MQTT 3.1.1 client is refused (0x02), as Mosquitto's `max_keepalive` does.
    pub max_keep_alive: Option<u16>,
    /// `mqtt.durable_queue_type = quorum`: a persistent session's QoS 1 and 2 subscription
    /// queues are quorum queues (QoS 0 ones and clean sessions' stay classic, as RabbitMQ).
    pub durable_quorum_queues: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            vhost: "/".into(),
            default_user: "guest".into(),
            default_pass: "guest".into(),
            allow_anonymous: true,
            exchange: "amq.topic".into(),
            prefetch: 10,
            max_packet_size: 268_435_455,
            max_message_size: 16 * 1024 * 1024,
            ssl_cert_login: None,
            max_keep_alive: None,
            durable_quorum_queues: false,
        }
    }
}

/// What the broker-wide parts of MQTT a session needs: the core, the client registry and
/// the retained message store.
#[derive(Clone)]
pub struct MqttContext {
    /// The core.
    pub broker: Arc<Broker>,
    /// Client identifiers in use and stored persistent sessions.
    pub registry: Arc<ClientRegistry>,
    /// Retained messages.
    pub retained: Arc<dyn RetainedStore>,
    /// Session settings.
    pub config: Arc<SessionConfig>,
}

/// The "connection" that stored a session, or scheduled a delayed will, recovered at boot
/// ([`recovery::recover`]); no real connection has this identifier.
const SESSION_RECOVERED: u64 = u64::MAX - 1;

/// Why a connection ended; decides whether the will is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// The client sent DISCONNECT: the will is discarded.
    Disconnect,
    /// The server is shutting down: the will is not published now. An MQTT 5 will with a
    /// delay is kept in the retained store's log and published after the restart once its
    /// delay is over, unless the client is back first ([`recovery`]).
    Shutdown,
    /// Another connection took over the client identifier (on this node or another): the
    /// will is published when `send_will` (RabbitMQ's rule, `registry::Takeover::send_will`)
    /// and has no will delay (the client is back, MQTT 5 3.1.3.2.2).
    TakenOver {
        /// Whether the new connection lets the will be published.
        send_will: bool,
    },
    /// Anything else (keep-alive timeout, socket error, protocol error): the will is
    /// published. The text is for the log.
    Abnormal(String),
}

/// What the driver does after a packet.
#[must_use]
pub enum Control {
    /// Go on reading.
    Continue,
    /// Flush what is buffered and close the connection, then call [`Session::terminate`].
    Close(End),
    /// Another connection holds the client identifier: kick it, wait for it to end, then
    /// call [`Session::resume_connect`].
    AwaitTakeover(Takeover),
}

/// One subscription queue this connection consumes.
struct Subscription {
    /// The queue, of any type (a quorum queue with `mqtt.durable_queue_type = quorum`).
    queue: Arc<dyn QueueInstance>,
    consumer_id: u64,
}

/// The state of an accepted connection. Boxed, so a connection still in CONNECT costs
/// little.
struct Connected {
    vhost: Arc<VHost>,
    user: Box<str>,
    client_id: String,
    /// Whether the session ends with the connection: 3.1.1's clean session, or an MQTT 5
    /// session expiry interval of 0.
    clean_session: bool,
    /// Whether a stored session is discarded on connect: 3.1.1's clean session, MQTT 5's
    /// clean start.
    clean_start: bool,
    /// MQTT 5 session state: inline (24 bytes; its lists are boxed), so an MQTT 5
    /// connection makes no allocation a 3.1.1 one does not.
    v5: Option<v5_session::SessionV5>,
    protocol: ProtocolLevel,
    keep_alive: u16,
    /// Boxed: most clients set no will, and an idle connection should not carry room for one.
    will: Option<Box<LastWill>>,
    /// Topic filters with their granted QoS, in subscription order.
    filters: Vec<(String, QoS)>,
    /// The consumers of the qos0, qos1 and qos2 queues.
    consumers: [Option<Subscription>; 3],
    /// The core's publish state: whether the user may publish to the exchange, checked
    /// once per connection.
    publisher: warren_core::vhost::Publisher,
    /// QoS 2 packet identifiers routed but not yet released (MQTT 4.3.3, method B).
    inbound_qos2: Vec<u16>,
    /// Dropped when the session ends, which tells a connection taking over that it may go on.
    ended: Option<registry::EndSender>,
    /// Whether CONNACK was sent (the takeover wait is over).
    accepted: bool,
    session_present: bool,
}

impl Connected {
    /// The state a delayed will recovered at boot is published with: `user` in `vhost`
    /// as `client_id`, with no subscriptions.
    fn for_will(vhost: Arc<VHost>, user: String, client_id: String) -> Box<Connected> {
        Box::new(Connected {
            vhost,
            user: user.into_boxed_str(),
            client_id,
            clean_session: false,
            clean_start: false,
            v5: Some(v5_session::SessionV5::default()),
            protocol: ProtocolLevel::V5,
            keep_alive: 0,
            will: None,
            filters: Vec::new(),
            consumers: [None, None, None],
            publisher: Default::default(),
            inbound_qos2: Vec::new(),
            ended: None,
            accepted: true,
            session_present: false,
        })
    }
}

/// One MQTT connection's protocol state. It lives in the connection's task for as long as the
/// connection does, so what only some connections need is boxed.
pub struct Session {
    context: Arc<MqttContext>,
    outbox: Arc<Outbox>,
    connection_id: u64,
    from_loopback: bool,
    connected: Option<Box<Connected>>,
    closed: bool,
    /// Whether the client has published: only publishers are blocked by resource alarms.
    published: bool,
    /// What CONNECT needs from the socket, until CONNACK.
    handshake: Option<Box<Handshake>>,
    /// The entry in the core's connection registry, from CONNACK to the end.
    registration: Option<ConnectionHandle>,
    /// PUBACKs and PUBRECs in PUBLISH order (MQTT-4.6.0-2), each with the sequence numbers
    /// that must be on disk before it goes out.
    /// Boxed when first needed: only publishers to durable queues ever hold one, and an
    /// empty `VecDeque` inline would be 32 bytes in every connection's task.
    #[allow(clippy::box_collection)]
    held_acks: Option<Box<VecDeque<HeldAck>>>,
    /// Whether the connection runs over TLS (shown to operators).
    tls: bool,
    /// The protocol the client's CONNECT asked for (3.1.1 until then): how the driver
    /// decodes its packets.
    protocol: ProtocolLevel,
    /// `mqtt.max_connections` was reached when this connection came: CONNECT is refused.
    over_capacity: bool,
}

/// What CONNECT needs from the socket: boxed, and dropped once the connection is registered,
/// so an accepted connection does not carry it.
#[derive(Default)]
struct Handshake {
    /// The client's and the broker's addresses, for the connection registry.
    addresses: Option<(SocketAddr, SocketAddr)>,
    /// The user the client's verified certificate names, with `mqtt.ssl_cert_login` on.
    certificate_user: Option<String>,
}

/// A PUBACK, PUBREC, PUBCOMP or PUBREL waiting for the disk (0: nothing to wait for in
/// that store, held only to keep the order behind one that waits).
struct HeldAck {
    /// The message store's sequence number of the message.
    store_seq: u64,
    /// The retained store's sequence number of a retained publish or QoS 2 record.
    retained_seq: u64,
    /// A delivery to acknowledge to its queue when the packet goes out (a PUBREL's
    /// message, settled only once the PUBREL it owes is on disk).
    settle: Option<(Arc<dyn QueueInstance>, u64)>,
    packet: Packet,
}

impl Session {
    /// A session for a new connection; `from_loopback` tells whether the peer address is a
    /// loopback address (for loopback-only users).
    pub fn new(
        context: impl Into<Arc<MqttContext>>,
        outbox: Arc<Outbox>,
        from_loopback: bool,
    ) -> Session {
        let context = context.into();
        let connection_id = context.broker.next_connection_id();
        Session {
            context,
            outbox,
            connection_id,
            from_loopback,
            connected: None,
            closed: false,
            published: false,
            handshake: None,
            registration: None,
            held_acks: None,
            tls: false,
            protocol: ProtocolLevel::V3_1_1,
            over_capacity: false,
        }
    }

    /// Makes CONNECT answer "server unavailable" (`mqtt.max_connections` is reached).
    pub fn refuse_over_capacity(&mut self) {
        self.over_capacity = true;
    }

    /// The protocol the client speaks: decode its packets with it.
    pub fn protocol(&self) -> ProtocolLevel {
        self.protocol
    }

    /// Records the protocol of a CONNECT that could not be decoded, read from its first
    /// bytes, so the refusal is an MQTT 5 CONNACK with a reason code for an MQTT 5 client.
    pub fn note_connect_protocol(&mut self, protocol: ProtocolLevel) {
        if self.connected.is_none() {
            self.protocol = protocol;
            self.outbox.set_protocol(protocol);
        }
    }

    /// Tells an MQTT 5 client why the server closes the connection (DISCONNECT with a
    /// reason code, section 3.14 of MQTT 5); nothing for 3.1.1, which has no such packet.
    pub fn server_disconnect(&mut self, code: u8, reason_string: &str) {
        if !self.protocol.is_v5() {
            return;
        }
        if !self.is_connected() {
            // Before CONNACK the answer is a refusing CONNACK (MQTT-3.2.2-7 of MQTT 5).
            if self.connected.is_none() {
                let mut connack = crate::codec::ConnAck::new(
                    false,
                    crate::codec::ConnectReturnCode::ServerUnavailable,
                );
                connack.reason_code = Some(code);
                self.outbox.send(&Packet::ConnAck(connack));
            }
            return;
        }
        if let Some(connected) = self.connected.as_deref_mut() {
            if let Some(v5) = connected.v5.as_mut() {
                if v5.disconnect_sent {
                    return;
                }
                v5.disconnect_sent = true;
            }
        }
        self.outbox.send(&Packet::Disconnect(Reason::with_string(
            code,
            reason_string,
        )));
    }

    /// The handshake details, created when first set.
    fn handshake(&mut self) -> &mut Handshake {
        self.handshake.get_or_insert_with(Box::default)
    }

    /// The user the client's verified certificate names (`mqtt.ssl_cert_login`), if any.
    fn certificate_user(&self) -> Option<&str> {
        self.handshake.as_deref()?.certificate_user.as_deref()
    }

    /// The client's and the broker's addresses, taking the handshake details (called once
    /// the connection is registered; unspecified addresses when they were never set).
    fn take_addresses(&mut self) -> (SocketAddr, SocketAddr) {
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        self.handshake
            .take()
            .and_then(|handshake| handshake.addresses)
            .unwrap_or((unspecified, unspecified))
    }

    /// The connection's outbox.
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// Flow state for the driver of a connection that publishes.
    pub fn publisher_flow(&self) -> warren_core::flow::PublisherFlow {
        warren_core::flow::PublisherFlow::new(self.context.broker.message_store())
    }

    /// Records that the connection runs over TLS and, with `mqtt.ssl_cert_login` on, the
    /// client's verified DER certificate, whose user logs in when CONNECT has no credentials.
    pub fn set_tls(&mut self, certificate: Option<&[u8]>) {
        self.tls = true;
        if let (Some(from), Some(der)) = (self.context.config.ssl_cert_login, certificate) {
            let user = login_name(der, from);
            if user.is_some() {
                self.handshake().certificate_user = user;
            }
        }
    }

    /// Whether acknowledgements wait for the message store's disk writes: the driver then
    /// also wakes when the store's durable sequence number moves and calls
    /// [`Session::release_held_acks`].
    pub fn awaits_durability(&self) -> bool {
        self.held_acks
            .as_deref()
            .is_some_and(|held_acks| !held_acks.is_empty())
    }

    /// Follows the message store's durable sequence number (`None` without a store).
    pub fn subscribe_durable(&self) -> Option<watch::Receiver<u64>> {
        self.context
            .broker
            .message_store()
            .map(|store| store.subscribe_durable())
    }

    /// Follows the retained store's durable sequence number (`None` when retained
    /// messages are kept in memory only).
    pub fn subscribe_retained_durable(&self) -> Option<watch::Receiver<u64>> {
        self.context.retained.durable()
    }

    /// The durable sequence numbers of the message store and the retained store now.
    fn durable_now(&self) -> (u64, u64) {
        let store = self
            .context
            .broker
            .message_store()
            .map_or(u64::MAX, |store| store.durable_seq());
        let retained = self
            .context
            .retained
            .durable()
            .map_or(u64::MAX, |durable| *durable.borrow());
        (store, retained)
    }

    /// Sends the held PUBACKs and PUBRECs whose messages are now on disk, in order.
    pub fn release_held_acks(&mut self) {
        if !self.awaits_durability() {
            return;
        }
        let (durable, retained_durable) = self.durable_now();
        let Some(held_acks) = self.held_acks.as_deref_mut() else {
            return;
        };
        while let Some(held) = held_acks.front() {
            if held.store_seq > durable || held.retained_seq > retained_durable {
                break;
            }
            if let Some(mut held) = held_acks.pop_front() {
                if let Some((queue, id)) = held.settle {
                    queue.settle(&[id], Settlement::Ack);
                }
                let failed = held.store_seq != 0
                    && self
                        .context
                        .broker
                        .message_store()
                        .is_some_and(|store| store.take_failed(held.store_seq));
                if failed {
                    // A forwarded publish the queue's home node did not take: MQTT 5 says
                    // so; 3.1.1 has no negative acknowledgement, so none is sent and the
                    // client sends the message again when it reconnects.
                    tracing::warn!("MQTT publish not taken by its queue's home node");
                    match (&mut held.packet, self.protocol.is_v5()) {
                        (Packet::PubAck(ack), true) => ack.reason_code = reason::UNSPECIFIED_ERROR,
                        (Packet::PubRec(rec), true) => rec.reason_code = reason::UNSPECIFIED_ERROR,
                        _ => continue,
                    }
                }
                self.outbox.send(&held.packet);
            }
        }
    }

    /// Sends a PUBACK or PUBREC now, or holds it until the message store has `durable_seq`
    /// and the retained store `retained_seq` on disk (or behind an earlier one that is
    /// held).
    fn acknowledge_publish(&mut self, durable_seq: Option<u64>, retained_seq: u64, packet: Packet) {
        self.send_when_durable(durable_seq, retained_seq, None, packet);
    }

    /// Sends `packet` (after settling `settle` with its queue) now, or holds both until the
    /// stores have the sequence numbers on disk, in order with every other held packet.
    fn send_when_durable(
        &mut self,
        durable_seq: Option<u64>,
        retained_seq: u64,
        settle: Option<(Arc<dyn QueueInstance>, u64)>,
        packet: Packet,
    ) {
        let (durable, retained_durable) = self.durable_now();
        let store_seq = durable_seq.filter(|seq| *seq > durable).unwrap_or(0);
        let retained_seq = if retained_seq > retained_durable {
            retained_seq
        } else {
            0
        };
        if store_seq == 0 && retained_seq == 0 && !self.awaits_durability() {
            if let Some((queue, id)) = settle {
                queue.settle(&[id], Settlement::Ack);
            }
            self.outbox.send(&packet);
        } else {
            self.held_acks.get_or_insert_default().push_back(HeldAck {
                store_seq,
                retained_seq,
                settle,
                packet,
            });
        }
    }

    /// Records the client's and the broker's address (shown to operators).
    pub fn set_addresses(&mut self, peer: SocketAddr, local: SocketAddr) {
        self.handshake().addresses = Some((peer, local));
    }

    /// The reason an operator gave when asking this connection to close, once asked.
    pub fn close_requested(&self) -> Option<String> {
        self.registration
            .as_ref()
            .and_then(ConnectionHandle::close_requested)
    }

    /// The broker-wide connection id.
    pub fn connection_id(&self) -> u64 {
        self.connection_id
    }

    /// The client identifier, once connected.
    pub fn client_id(&self) -> Option<&str> {
        self.connected.as_deref().map(|c| c.client_id.as_str())
    }

    /// Whether CONNECT was accepted.
    pub fn is_connected(&self) -> bool {
        self.connected.as_deref().is_some_and(|c| c.accepted)
    }

    /// The keep-alive interval the client asked for, once connected (`None` when off).
    pub fn keep_alive(&self) -> Option<Duration> {
        let connected = self.connected.as_deref().filter(|c| c.accepted)?;
        (connected.keep_alive > 0).then(|| Duration::from_secs(u64::from(connected.keep_alive)))
    }

    /// Whether the client has published (resource alarms stop reading publishers only).
    pub fn is_publisher(&self) -> bool {
        self.published
    }

    /// The largest packet to accept now: small until CONNECT succeeded. (A remaining
    /// length, as the codec checks it; MQTT 5 clients are told the whole packet's size.)
    pub fn max_packet_size(&self) -> usize {
        if self.is_connected() {
            self.context.config.max_packet_size
        } else {
            MAX_PACKET_SIZE_UNAUTHENTICATED.min(self.context.config.max_packet_size)
        }
    }

    /// Handles one packet from the client.
    pub fn handle_packet(&mut self, packet: Packet) -> Control {
        let connected = self.is_connected();
        match packet {
            Packet::Connect(connect) if !connected && self.connected.is_none() => {
                self.connect(connect)
            }
            Packet::Connect(_) => self.protocol_error("second CONNECT (MQTT-3.1.0-2)"),
            Packet::Auth(_) => {
                // No enhanced authentication: CONNECT without an authentication method
                // makes any AUTH a protocol error (MQTT-4.12.0-6 of MQTT 5).
                self.violation(
                    reason::PROTOCOL_ERROR,
                    "AUTH without an authentication method in CONNECT (MQTT-4.12.0-6)",
                )
            }
            _ if !connected => self.protocol_error(&format!(
                "first packet is {}, not CONNECT (MQTT-3.1.0-1)",
                packet.packet_type().name()
            )),
            Packet::Publish(publish) if self.protocol.is_v5() => {
                self.published = true;
                match self.publish_v5(publish) {
                    Ok(publish) => self.publish(publish),
                    Err(control) => control,
                }
            }
            Packet::Publish(publish) => {
                self.published = true;
                self.publish(publish)
            }
            Packet::PubAck(ack) => {
                if let Some((queue, id)) = self.outbox.acknowledge(ack.packet_id) {
                    queue.settle(&[id], Settlement::Ack);
                }
                self.kick_starved();
                Control::Continue
            }
            Packet::PubRec(received) => self.delivery_received(received.packet_id),
            Packet::PubComp(complete) => self.delivery_completed(complete.packet_id),
            Packet::PubRel(release) => self.release(release.packet_id),
            Packet::Subscribe(subscribe) => self.subscribe(subscribe),
            Packet::Unsubscribe(unsubscribe) => self.unsubscribe(unsubscribe),
            Packet::PingReq => {
                self.outbox.send(&Packet::PingResp);
                Control::Continue
            }
            Packet::Disconnect(reason) => {
                // A clean DISCONNECT discards the will (MQTT-3.14.4-3), unless an MQTT 5
                // client asks for it with 0x04.
                if let Some(connected) = self.connected.as_deref_mut() {
                    if let Some(v5) = connected.v5.as_mut() {
                        if let Some(expiry) = reason
                            .properties
                            .as_deref()
                            .and_then(|p| p.session_expiry_interval)
                        {
                            // MQTT-3.14.2-2: a session that ended with its connection cannot
                            // be given a lifetime at the end.
                            if v5.session_expiry == 0 && expiry != 0 {
                                return self.violation(
                                    reason::PROTOCOL_ERROR,
                                    "DISCONNECT sets a session expiry interval after CONNECT \
                                     set 0 (MQTT-3.14.2-2)",
                                );
                            }
                            v5.session_expiry = expiry;
                            // An expiry of 0 at the end ends the session with the connection.
                            connected.clean_session = expiry == 0;
                        }
                    }
                    if reason.code == reason::DISCONNECT_WITH_WILL {
                        return Control::Close(End::Abnormal(
                            "client disconnected with the will (0x04)".into(),
                        ));
                    }
                    connected.will = None;
                }
                Control::Close(End::Disconnect)
            }
            Packet::ConnAck(_) | Packet::SubAck(_) | Packet::UnsubAck(_) | Packet::PingResp => {
                let name = packet.packet_type().name();
                self.protocol_error(&format!("{name} is sent by servers, not clients"))
            }
        }
    }

    /// Handles a packet that could not be decoded: an unsupported protocol in CONNECT gets
    /// CONNACK 0x01 (MQTT-3.1.2-2); everything else just closes.
    ///
    /// An MQTT 5 client is told why first: a CONNACK with the error's reason code while
    /// connecting, a DISCONNECT with it after (0x81 malformed, 0x82 protocol error, 0x94
    /// topic alias invalid, 0x95 packet too large, ...).
    pub fn handle_decode_error(&mut self, error: &DecodeError) -> Control {
        if self.connected.is_none() {
            if let Some(code) = error.connack_code() {
                tracing::warn!(connection = self.connection_id, %error, "MQTT connection refused");
                // The client's protocol is unknown: answer in 3.1.1's format, which is
                // what Mosquitto and RabbitMQ do.
                self.outbox.set_protocol(ProtocolLevel::V3_1_1);
                self.outbox
                    .send(&Packet::ConnAck(crate::codec::ConnAck::new(false, code)));
                return Control::Close(End::Abnormal(error.to_string()));
            }
        }
        self.violation(error.reason_code(), &error.to_string())
    }

    /// Closes the connection for a broken rule; an MQTT 5 client is told `code` first.
    fn violation(&mut self, code: u8, reason: &str) -> Control {
        self.server_disconnect(code, reason);
        self.close_abnormally(reason)
    }

    /// Closes the connection for a protocol violation (an MQTT 5 client gets DISCONNECT
    /// 0x82).
    fn protocol_error(&mut self, reason: &str) -> Control {
        self.violation(reason::PROTOCOL_ERROR, reason)
    }

    /// Logs why the connection closes and closes it.
    fn close_abnormally(&mut self, reason: &str) -> Control {
        tracing::warn!(
            connection = self.connection_id,
            client_id = self.client_id().unwrap_or(""),
            "closing MQTT connection: {reason}"
        );
        Control::Close(End::Abnormal(reason.to_string()))
    }

    /// Tells the outbox which filters may receive `$` topics (those starting with `$`).
    fn sync_dollar_filters(&self) {
        if let Some(connected) = self.connected.as_deref() {
            self.outbox
                .set_dollar_filters(dollar_filters(&connected.filters));
        }
    }

    /// Lets queues deliver again once the window has room.
    fn kick_starved(&self) {
        for queue in self.outbox.take_starved() {
            queue.dispatch();
        }
    }

    /// Ends the session: publishes the will on an abnormal end, requeues what was in
    /// flight, deletes a clean session's queues or stores a persistent session's state, and
    /// frees the client identifier. Safe to call more than once.
    pub fn terminate(&mut self, end: End) {
        if self.closed {
            return;
        }
        self.closed = true;
        // Unregistered whatever happens next: operators no longer see the connection.
        self.registration = None;
        let leftovers = self.outbox.close();
        let Some(mut connected) = self.connected.take() else {
            return;
        };
        let mut delayed_will = None;
        if !connected.accepted {
            // Refused or still waiting for a takeover: nothing was set up.
            if let Some(ended) = connected.ended.take() {
                drop(ended);
                self.context.registry.release(
                    &(
                        connected.vhost.name().to_string(),
                        connected.client_id.clone(),
                    ),
                    self.connection_id,
                );
            }
            return;
        }
        if let End::TakenOver { send_will } = end {
            tracing::info!(
                connection = self.connection_id,
                client_id = %connected.client_id,
                send_will,
                "MQTT connection taken over by another with its client identifier"
            );
            if let Some(will) = connected.will.take() {
                // A delayed will is not published: the client is back already.
                if send_will && v5_session::will_delay(&connected).is_none() {
                    self.publish_will(&mut connected, *will);
                }
            }
        }
        if let End::Abnormal(reason) = &end {
            tracing::info!(
                connection = self.connection_id,
                client_id = %connected.client_id,
                "MQTT connection ended abnormally: {reason}"
            );
            if let Some(will) = connected.will.take() {
                match v5_session::will_delay(&connected) {
                    // MQTT 5 will delay: published later unless the client is back by then
                    // (section 3.1.3.2.2); the session is stored first, below. Kept in
                    // the log too, so a broker stop does not lose it.
                    Some(delay) => {
                        v5_session::keep_will(&self.context, &connected, delay, &will);
                        delayed_will = Some((delay, will));
                    }
                    None => self.publish_will(&mut connected, *will),
                }
            }
        }
        if end == End::Shutdown {
            // The session outlives the broker's stop: a delayed will waits for its delay
            // in the log and is published after the restart (MQTT 5 section 3.1.2.5).
            if let Some(will) = connected.will.take() {
                if let Some(delay) = v5_session::will_delay(&connected) {
                    v5_session::keep_will(&self.context, &connected, delay, &will);
                }
            }
        }
        for subscription in connected.consumers.iter_mut().filter_map(Option::take) {
            connected
                .vhost
                .cancel_instance(&subscription.queue, subscription.consumer_id);
        }
        // A shared subscription's consumer goes first, so what this member had in flight
        // is requeued below to the group's other members.
        let mut shared_held = Vec::new();
        if let Some(v5) = connected.v5.as_mut() {
            for shared in v5.take_shared() {
                connected
                    .vhost
                    .cancel_instance(&shared.queue, shared.consumer_id);
                shared_held.push((shared.filter, shared.qos));
            }
        }
        settle_grouped(leftovers.to_ack, Settlement::Ack);
        // QoS 2 deliveries the client has (PUBREC) whose PUBREL was waiting for the disk:
        // the session owes their PUBREL (it is in `leftovers.released`), not the message.
        let received: Vec<(Arc<dyn QueueInstance>, u64)> = self
            .held_acks
            .take()
            .into_iter()
            .flat_map(|held_acks| held_acks.into_iter())
            .filter_map(|held| held.settle)
            .collect();
        settle_grouped(received, Settlement::Ack);
        // The core's rule for deliveries outstanding when a connection ends: sent ones are
        // requeued, never-sent ones released (no delivery counted).
        settle_grouped(leftovers.unacknowledged, Settlement::outstanding(true));
        settle_grouped(leftovers.never_sent, Settlement::outstanding(false));
        settle_grouped(self.outbox.take_orphaned(), Settlement::outstanding(false));
        let key = (
            connected.vhost.name().to_string(),
            connected.client_id.clone(),
        );
        if connected.clean_session {
            // The session ends here: it leaves its shared subscription groups.
            shared::leave_groups(
                &self.context,
                &connected.vhost,
                &connected.client_id,
                Some(&connected.user),
                &shared_held,
            );
            for qos in [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce] {
                let name = queue_name(&connected.client_id, qos);
                if let Some(queue) = connected.vhost.queue_instance(&name) {
                    // Also the durable queues of an MQTT 5 session that was resumed (or
                    // given expiry 0 at DISCONNECT) and now ends, unless another connection
                    // took the client identifier over.
                    let ours = queue.exclusive_owner() == Some(self.connection_id)
                        || (connected.v5.is_some()
                            && self.context.registry.is_held_by(&key, self.connection_id));
                    if ours {
                        connected.vhost.remove_queue_instance(&queue);
                    }
                }
            }
        } else {
            // An MQTT 5 session is kept for its expiry interval (a member of its groups
            // until then), then forgotten.
            let expiry = connected.v5.as_ref().map(|v5| v5.session_expiry);
            // The memberships' records, with the expiry the session ended with.
            for (filter, qos) in &shared_held {
                self.context.retained.session_put(
                    connected.vhost.name(),
                    &connected.client_id,
                    &recovery::shared_record_name(filter),
                    &recovery::shared_record_value(*qos, expiry.unwrap_or(0)),
                );
            }
            if let Some(seconds) =
                expiry.filter(|seconds| *seconds != v5_session::SESSION_NEVER_EXPIRES)
            {
                shared::expire_session_later(
                    &self.context,
                    Arc::clone(&connected.vhost),
                    key.clone(),
                    self.connection_id,
                    seconds,
                );
            }
            self.context.registry.store_session(
                key.clone(),
                registry::StoredSession {
                    subscriptions: std::mem::take(&mut connected.filters),
                    inbound_qos2: std::mem::take(&mut connected.inbound_qos2),
                    outbound_released: leftovers.released,
                    shared: shared_held,
                    stored_by: self.connection_id,
                    recovered: false,
                },
            );
        }
        self.context.registry.release(&key, self.connection_id);
        // Dropping the sender tells a connection taking over that this one is done.
        connected.ended = None;
        if let Some((delay, will)) = delayed_will {
            v5_session::publish_will_later(
                &self.context,
                self.connection_id,
                connected,
                delay,
                *will,
            );
        }
    }
}

/// The filters starting with `$`: the only ones a `$` topic may be delivered for.
fn dollar_filters(filters: &[(String, QoS)]) -> Vec<(String, QoS)> {
    filters
        .iter()
        .filter(|(filter, _)| filter.starts_with('$'))
        .cloned()
        .collect()
}

/// The queue of a client's subscriptions at one QoS, named as RabbitMQ names them.
pub fn queue_name(client_id: &str, qos: QoS) -> String {
    format!("mqtt-subscription-{client_id}qos{}", qos.as_u8())
}

/// Settles deliveries grouped by queue, one core call per run of the same queue.
fn settle_grouped(deliveries: Vec<(Arc<dyn QueueInstance>, u64)>, settlement: Settlement) {
    let mut index = 0;
    while index < deliveries.len() {
        let queue = &deliveries[index].0;
        let mut ids = Vec::new();
        let mut end = index;
        while end < deliveries.len() && Arc::ptr_eq(&deliveries[end].0, queue) {
            ids.push(deliveries[end].1);
            end += 1;
        }
        queue.settle(&ids, settlement);
        index = end;
    }
}

/// Settles deliveries the driver took from the outbox (QoS 0 copies of QoS 1 messages).
pub fn acknowledge_all(deliveries: Vec<(Arc<dyn QueueInstance>, u64)>) {
    settle_grouped(deliveries, Settlement::Ack);
}
