//! The AMQP 0-9-1 connection state machine: handshake, channel multiplexing, error scopes.
//!
//! Sans-IO: frames go in through [`Session::handle_frame`], replies and deliveries come out
//! as encoded frames in the connection's [`Outbox`]. The driver owns the socket and the clock.
//! Channel-level methods live in `channel/`, one file per method family; the connection
//! handshake in `handshake.rs`; end-of-batch work (confirms, commits) and the release of
//! channels and connections in `batch.rs`.

mod batch;
mod channel;
mod handshake;
#[cfg(test)]
mod session_tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use warren_core::access::User;
use warren_core::certificate::{login_name, LoginFrom};
use warren_core::connections::ConnectionHandle;
use warren_core::idmap::IdMap;
use warren_core::queue::Settlement;
use warren_core::value::Table;
use warren_core::vhost::VHost;
use warren_core::Broker;

use crate::codec::{
    Frame, FrameError, Method, MethodDecodeError, FRAME_BODY, FRAME_HEADER, FRAME_HEARTBEAT,
    FRAME_METHOD,
};
use crate::outbox::{Outbox, Unacked};
use crate::reply::{self, AmqpError};

use channel::Channel;

/// The smallest frame_max a peer may negotiate.
pub const FRAME_MIN_SIZE: u32 = 4096;

/// Limits the server proposes in connection.tune and enforces.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Heartbeat interval in seconds proposed to clients (0 = none).
    pub heartbeat: u16,
    /// Largest frame accepted and sent.
    pub frame_max: u32,
    /// Highest channel number a client may open.
    pub channel_max: u16,
    /// Largest message body accepted.
    pub max_message_size: usize,
    /// The product name advertised in connection.start.
    pub product: String,
    /// How long a delivery may stay unacknowledged before its channel is closed (406).
    pub consumer_timeout: Option<Duration>,
    /// The SASL mechanisms offered in connection.start, in order (`auth_mechanisms.N`);
    /// EXTERNAL only to clients that presented a verified TLS certificate.
    pub auth_mechanisms: Vec<String>,
    /// Which part of a client certificate names the user of an EXTERNAL login.
    pub cert_login_from: LoginFrom,
    /// Server properties (text) added to or overriding connection.start's
    /// (`server_properties.<name>`); `capabilities` is never taken from here.
    pub server_properties: Vec<(String, String)>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            heartbeat: 60,
            frame_max: 131_072,
            channel_max: 2047,
            max_message_size: 16 * 1024 * 1024,
            product: "Warren".to_string(),
            consumer_timeout: Some(Duration::from_secs(1800)),
            auth_mechanisms: vec!["PLAIN".to_string(), "AMQPLAIN".to_string()],
            cert_login_from: LoginFrom::DistinguishedName,
            server_properties: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitStartOk,
    AwaitTuneOk,
    AwaitOpen,
    Open,
    /// We sent connection.close and wait for close-ok; everything else is ignored.
    Closing,
    Closed,
}

/// What the driver should do after a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Keep reading.
    Continue,
    /// Flush what is buffered, then close the socket.
    Close,
    /// The client closed the connection and close-ok is on its way: ignore whatever the
    /// client still sends and keep the socket open until the client closes it or the
    /// closing timeout passes ([`Session::closing_timeout`]), as rabbit_reader's `closed`
    /// state. A client that queues frames per channel (amqplib) may send its
    /// connection.close before publishes it wrote earlier, and fails on a closed socket.
    AwaitSocketClose,
}

/// The longest the broker keeps a connection's socket open after it sent close-ok
/// (rabbit_reader's `?CLOSING_TIMEOUT`).
pub const CLOSING_TIMEOUT: Duration = Duration::from_secs(30);

/// One AMQP 0-9-1 connection's protocol state.
pub struct Session {
    broker: Arc<Broker>,
    config: SessionConfig,
    connection_id: u64,
    from_loopback: bool,
    phase: Phase,
    outbox: Arc<Outbox>,
    user: Option<Arc<User>>,
    vhost: Option<Arc<VHost>>,
    channel_max: u16,
    frame_max: u32,
    heartbeat: u16,
    channels: IdMap<u16, Channel>,
    /// Exclusive queues declared on this connection, deleted when it closes.
    exclusive_queues: Vec<String>,
    client_properties: Table,
    /// Channels with confirms to send at the end of the current batch of frames.
    pending_confirms: Vec<u16>,
    /// Channels with a tx.commit-ok waiting for the message store.
    pending_commits: Vec<u16>,
    /// Whether the client ever published: only publishers are blocked by resource alarms.
    published: bool,
    /// Whether the client understands connection.blocked/unblocked.
    blocked_capability: bool,
    /// Whether connection.blocked was sent and not yet followed by unblocked.
    blocked_sent: bool,
    /// The client's and the broker's socket addresses, for the connection registry.
    addresses: (SocketAddr, SocketAddr),
    /// This connection in the broker's registry, once open.
    registration: Option<ConnectionHandle>,
    /// Whether the connection runs over TLS (shown to operators).
    tls: bool,
    /// The mechanisms offered in connection.start.
    mechanisms: Vec<String>,
    /// The user the client's verified TLS certificate names, when it presented one (the
    /// inner `None`: the certificate names nobody), for SASL EXTERNAL.
    certificate_user: Option<Option<String>>,
}

impl Session {
    /// A session for a new connection; writes connection.start into the outbox.
    pub fn new(
        broker: Arc<Broker>,
        config: SessionConfig,
        outbox: Arc<Outbox>,
        from_loopback: bool,
    ) -> Session {
        Session::with_certificate(broker, config, outbox, from_loopback, None)
    }

    /// A session for a TLS connection whose client presented the verified DER certificate
    /// `certificate` (`None`: no certificate): SASL EXTERNAL is offered when configured.
    pub fn with_certificate(
        broker: Arc<Broker>,
        config: SessionConfig,
        outbox: Arc<Outbox>,
        from_loopback: bool,
        certificate: Option<&[u8]>,
    ) -> Session {
        let connection_id = broker.next_connection_id();
        let certificate_user = certificate.map(|der| login_name(der, config.cert_login_from));
        // As RabbitMQ's rabbit_auth_mechanism_ssl: EXTERNAL is offered only to a client with
        // a certificate.
        let mechanisms = config
            .auth_mechanisms
            .iter()
            .filter(|mechanism| *mechanism != "EXTERNAL" || certificate_user.is_some())
            .cloned()
            .collect();
        let session = Session {
            mechanisms,
            certificate_user,
            channel_max: config.channel_max,
            frame_max: config.frame_max,
            heartbeat: config.heartbeat,
            broker,
            config,
            connection_id,
            from_loopback,
            phase: Phase::AwaitStartOk,
            outbox,
            user: None,
            vhost: None,
            channels: IdMap::default(),
            exclusive_queues: Vec::new(),
            client_properties: Table::new(),
            pending_confirms: Vec::new(),
            pending_commits: Vec::new(),
            published: false,
            blocked_capability: false,
            blocked_sent: false,
            addresses: (UNKNOWN_ADDRESS, UNKNOWN_ADDRESS),
            registration: None,
            tls: false,
        };
        session.outbox.send_method(0, &session.connection_start());
        session
    }

    /// Records the client's and the broker's addresses (shown to operators).
    pub fn set_addresses(&mut self, peer: SocketAddr, local: SocketAddr) {
        self.addresses = (peer, local);
    }

    /// Records that the connection runs over TLS (shown to operators).
    pub fn set_tls(&mut self, tls: bool) {
        self.tls = tls;
    }

    /// The reason an operator gave when asking this connection to close, once asked
    /// (the driver is woken through the outbox's `reader_wake`).
    pub fn close_requested(&self) -> Option<String> {
        self.registration
            .as_ref()
            .and_then(ConnectionHandle::close_requested)
    }

    /// Closes the connection with 320 CONNECTION_FORCED and the operator's reason as the
    /// reply text, as `rabbitmqctl close_connection` and the management API do.
    pub fn close_by_operator(&mut self, reason: &str) -> Control {
        self.close_connection(AmqpError::new(reply::CONNECTION_FORCED, reason.to_string()))
    }

    /// The broker-wide id of this connection.
    pub fn connection_id(&self) -> u64 {
        self.connection_id
    }

    /// The negotiated heartbeat interval, once tuned; `None` when heartbeats are off.
    pub fn heartbeat(&self) -> Option<Duration> {
        match self.phase {
            // No heartbeats once close-ok was sent: the peer must hear nothing more.
            Phase::AwaitStartOk | Phase::AwaitTuneOk | Phase::Closed => None,
            _ if self.heartbeat == 0 => None,
            _ => Some(Duration::from_secs(u64::from(self.heartbeat))),
        }
    }

    /// Whether a resource alarm should stop reading this connection: it is open and has
    /// published, as RabbitMQ blocks publishing connections only.
    pub fn is_publisher(&self) -> bool {
        self.phase == Phase::Open && self.published
    }

    /// Tells the client it is blocked (with the alarm's reason) or unblocked, when it
    /// advertised the `connection.blocked` capability.
    pub fn set_blocked(&mut self, reason: Option<&str>) {
        // Nothing follows connection.close or close-ok.
        if !self.blocked_capability || matches!(self.phase, Phase::Closing | Phase::Closed) {
            return;
        }
        match reason {
            Some(reason) if !self.blocked_sent => {
                self.blocked_sent = true;
                self.outbox.send_method(
                    0,
                    &Method::ConnectionBlocked {
                        reason: reason.to_string(),
                    },
                );
            }
            None if self.blocked_sent => {
                self.blocked_sent = false;
                self.outbox.send_method(0, &Method::ConnectionUnblocked);
            }
            _ => {}
        }
    }

    /// When the consumer timeout next needs checking (`now_ms` clock), if it is enabled and a
    /// delivery is waiting for its ack.
    pub fn consumer_timeout_due(&self) -> Option<u64> {
        let timeout = self.config.consumer_timeout?;
        let (_, delivered_at) = self.outbox.oldest_unacked()?;
        Some(delivered_at.saturating_add(timeout.as_millis() as u64))
    }

    /// Closes (406) every channel whose oldest unacked delivery is older than the consumer
    /// timeout, as RabbitMQ does; its deliveries are requeued.
    pub fn check_consumer_timeout(&mut self, now: u64) {
        let Some(timeout) = self.config.consumer_timeout else {
            return;
        };
        let timeout_ms = timeout.as_millis() as u64;
        while let Some((channel, delivered_at)) = self.outbox.oldest_unacked() {
            if delivered_at.saturating_add(timeout_ms) > now {
                return;
            }
            let error = AmqpError::new(
                reply::PRECONDITION_FAILED,
                format!(
                    "delivery acknowledgement on channel {channel} timed out. Timeout value used: {timeout_ms} ms. This timeout value can be configured, see consumers doc guide to learn more"
                ),
            );
            self.close_channel_with_error(channel, error);
        }
    }

    /// Whether the broker sent connection.close and waits for close-ok.
    pub fn is_closing(&self) -> bool {
        self.phase == Phase::Closing
    }

    /// How long the socket stays open after close-ok while the client has not closed it:
    /// the negotiated heartbeat interval when shorter than `limit`, as rabbit_reader does.
    pub fn closing_timeout(&self, limit: Duration) -> Duration {
        match Duration::from_secs(u64::from(self.heartbeat)) {
            heartbeat if !heartbeat.is_zero() && heartbeat < limit => heartbeat,
            _ => limit,
        }
    }

    /// Whether the handshake finished (connection.open-ok sent).
    pub fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// The frame_max to parse incoming frames with.
    pub fn frame_max(&self) -> u32 {
        match self.phase {
            // Until tune-ok the client may only send frames of the minimum size.
            Phase::AwaitStartOk | Phase::AwaitTuneOk => self.config.frame_max.max(FRAME_MIN_SIZE),
            _ => self.frame_max,
        }
    }

    /// The client's properties from connection.start-ok.
    pub fn client_properties(&self) -> &Table {
        &self.client_properties
    }

    /// Handles one incoming frame.
    pub fn handle_frame(&mut self, frame: Frame) -> Control {
        match self.phase {
            // Only reached after the client's connection.close: its frames still in flight
            // are dropped (rabbit_reader's `closed` state).
            Phase::Closed => return Control::Continue,
            Phase::Closing => return self.handle_frame_while_closing(frame),
            _ => {}
        }
        let channel = frame.channel;
        let result = match frame.frame_type {
            FRAME_HEARTBEAT if channel == 0 => Ok(Control::Continue),
            FRAME_HEARTBEAT => Err(AmqpError::new(
                reply::FRAME_ERROR,
                format!("heartbeat frame on channel {channel}; heartbeats use channel 0"),
            )),
            FRAME_METHOD => self.handle_method_frame(channel, &frame.payload),
            FRAME_HEADER | FRAME_BODY => self.handle_content_frame(channel, frame),
            other => Err(AmqpError::new(
                reply::FRAME_ERROR,
                format!("unknown frame type {other}"),
            )),
        };
        match result {
            Ok(control) => control,
            // Every error on channel 0 closes the connection with its own code (a refused
            // login is 403 ACCESS_REFUSED, as in RabbitMQ, not a channel error).
            Err(error) if error.reply.connection_scope || channel == 0 => {
                self.close_connection(error)
            }
            Err(error) => self.close_channel_with_error(channel, error),
        }
    }

    /// Handles a frame the codec could not parse: 501 FRAME_ERROR, closing the connection.
    pub fn handle_frame_error(&mut self, error: FrameError) -> Control {
        self.close_connection(AmqpError::new(reply::FRAME_ERROR, error.to_string()))
    }

    /// Closes the connection with 320 CONNECTION_FORCED (broker shutdown).
    pub fn force_close(&mut self, reason: &str) -> Control {
        if matches!(self.phase, Phase::Closing | Phase::Closed) {
            return Control::Close;
        }
        self.close_connection(AmqpError::new(
            reply::CONNECTION_FORCED,
            format!("broker forced connection closure with reason '{reason}'"),
        ))
    }

    fn handle_frame_while_closing(&mut self, frame: Frame) -> Control {
        if frame.frame_type != FRAME_METHOD || frame.channel != 0 {
            return Control::Continue;
        }
        match Method::decode(&frame.payload) {
            Ok(Method::ConnectionCloseOk) => {
                self.phase = Phase::Closed;
                Control::Close
            }
            Ok(Method::ConnectionClose { .. }) => {
                self.outbox.send_method(0, &Method::ConnectionCloseOk);
                self.phase = Phase::Closed;
                Control::Close
            }
            _ => Control::Continue,
        }
    }

    fn handle_method_frame(&mut self, channel: u16, payload: &Bytes) -> Result<Control, AmqpError> {
        let method = match Method::decode(payload) {
            Ok(method) => method,
            Err(MethodDecodeError::UnknownMethod {
                class_id,
                method_id,
            }) => {
                return Err(AmqpError::new(
                    reply::NOT_IMPLEMENTED,
                    format!("unknown method: class {class_id}, method {method_id}"),
                )
                .on(class_id, method_id))
            }
            Err(MethodDecodeError::Syntax {
                class_id,
                method_id,
                message,
            }) => {
                return Err(AmqpError::new(reply::SYNTAX_ERROR, message).on(class_id, method_id));
            }
        };
        let (class_id, method_id) = method.ids();
        let on_method = |e: AmqpError| {
            if e.class_id == 0 {
                e.on(class_id, method_id)
            } else {
                e
            }
        };
        if channel == 0 {
            return self.handle_connection_method(method).map_err(on_method);
        }
        if self.phase != Phase::Open {
            return Err(AmqpError::new(
                reply::CHANNEL_ERROR,
                format!(
                    "'{}' on channel {channel} before the connection is open",
                    method.name()
                ),
            )
            .on(class_id, method_id));
        }
        self.handle_channel_method(channel, method)
            .map_err(on_method)
    }

    fn handle_connection_method(&mut self, method: Method) -> Result<Control, AmqpError> {
        match (self.phase, method) {
            (_, Method::ConnectionClose { .. }) => {
                // As RabbitMQ: channels are shut down (consumers cancelled, unacked messages
                // requeued) and exclusive queues deleted before close-ok. `terminate` skips
                // this once the phase is Closed, so it must happen here.
                self.release_all();
                self.outbox.send_method(0, &Method::ConnectionCloseOk);
                self.phase = Phase::Closed;
                // Closed for operators too, though the socket may linger.
                self.registration = None;
                Ok(Control::AwaitSocketClose)
            }
            (
                Phase::AwaitStartOk,
                Method::ConnectionStartOk {
                    client_properties,
                    mechanism,
                    response,
                    ..
                },
            ) => self.start_ok(client_properties, &mechanism, &response),
            (
                Phase::AwaitTuneOk,
                Method::ConnectionTuneOk {
                    channel_max,
                    frame_max,
                    heartbeat,
                },
            ) => self.tune_ok(channel_max, frame_max, heartbeat),
            (Phase::AwaitOpen, Method::ConnectionOpen { virtual_host }) => self.open(&virtual_host),
            (Phase::Open, Method::ConnectionUpdateSecret { .. }) => {
                self.outbox
                    .send_method(0, &Method::ConnectionUpdateSecretOk);
                Ok(Control::Continue)
            }
            (Phase::Open, Method::ConnectionCloseOk) => Ok(Control::Close),
            (_, method) => Err(AmqpError::new(
                reply::COMMAND_INVALID,
                format!("unexpected method on channel 0: '{}'", method.name()),
            )),
        }
    }

    fn handle_channel_method(
        &mut self,
        channel_id: u16,
        method: Method,
    ) -> Result<Control, AmqpError> {
        if let Method::ChannelOpen = method {
            if self.channels.contains_key(&channel_id) {
                return Err(AmqpError::new(
                    reply::CHANNEL_ERROR,
                    "second 'channel.open' seen",
                ));
            }
            // As RabbitMQ: the limit is on the number of open channels (a channel counts until
            // its close-ok), and 0 means no limit.
            let open = self.channels.len();
            if self.channel_max != 0 && open >= usize::from(self.channel_max) {
                return Err(AmqpError::new(
                    reply::NOT_ALLOWED,
                    format!(
                        "number of channels opened ({open}) has reached the negotiated channel_max ({})",
                        self.channel_max
                    ),
                ));
            }
            // The user's max-channels over all their connections on this node.
            if let Some(registration) = &self.registration {
                registration
                    .open_channel(u32::try_from(open).unwrap_or(u32::MAX))
                    .map_err(AmqpError::from)?;
            }
            self.channels.insert(channel_id, Channel::new());
            self.outbox.open_channel(channel_id);
            self.outbox.send_method(channel_id, &Method::ChannelOpenOk);
            return Ok(Control::Continue);
        }
        let Some(channel) = self.channels.get(&channel_id) else {
            return Err(AmqpError::new(
                reply::CHANNEL_ERROR,
                format!(
                    "expected 'channel.open' on channel {channel_id}, got '{}'",
                    method.name()
                ),
            ));
        };
        if channel.is_closing() {
            match method {
                Method::ChannelCloseOk => {
                    self.channels.remove(&channel_id);
                }
                Method::ChannelClose { .. } => {
                    self.outbox.send_method(channel_id, &Method::ChannelCloseOk);
                }
                _ => {}
            }
            return Ok(Control::Continue);
        }
        if channel.expects_content() {
            return Err(AmqpError::new(
                reply::UNEXPECTED_FRAME,
                format!(
                    "expected content header for class 60, got non content header frame instead ('{}')",
                    method.name()
                ),
            ));
        }
        match method {
            Method::ChannelClose { .. } => {
                self.release_channel(channel_id);
                // The channel is gone once close-ok is sent: it no longer counts against
                // channel_max and its number may be opened again.
                self.channels.remove(&channel_id);
                self.outbox.send_method(channel_id, &Method::ChannelCloseOk);
                Ok(Control::Continue)
            }
            Method::ChannelCloseOk => Ok(Control::Continue),
            method => {
                self.dispatch_channel_method(channel_id, method)?;
                Ok(Control::Continue)
            }
        }
    }

    fn handle_content_frame(
        &mut self,
        channel_id: u16,
        frame: Frame,
    ) -> Result<Control, AmqpError> {
        if channel_id == 0 || self.phase != Phase::Open {
            return Err(AmqpError::new(
                reply::UNEXPECTED_FRAME,
                format!("content frame on channel {channel_id} outside of a publish"),
            ));
        }
        let Some(channel) = self.channels.get(&channel_id) else {
            return Err(AmqpError::new(
                reply::CHANNEL_ERROR,
                format!("expected 'channel.open' on channel {channel_id}, got a content frame"),
            ));
        };
        if channel.is_closing() {
            return Ok(Control::Continue);
        }
        self.content_frame(channel_id, frame)?;
        Ok(Control::Continue)
    }

    /// Sends channel.close for a channel error and releases the channel's resources; the
    /// channel ignores everything but close/close-ok until the client answers.
    fn close_channel_with_error(&mut self, channel_id: u16, error: AmqpError) -> Control {
        if !self.channels.contains_key(&channel_id) {
            // A channel error on a channel that does not exist is a connection error.
            return self.close_connection(AmqpError {
                reply: reply::CHANNEL_ERROR,
                ..error
            });
        }
        tracing::debug!(channel = channel_id, error = %error.reply_text(), "closing channel");
        self.release_channel(channel_id);
        if let Some(channel) = self.channels.get_mut(&channel_id) {
            channel.mark_closing();
        }
        self.outbox.send_method(
            channel_id,
            &Method::ChannelClose {
                reply_code: error.reply.code,
                reply_text: error.reply_text(),
                class_id: error.class_id,
                method_id: error.method_id,
            },
        );
        Control::Continue
    }

    /// Sends connection.close and waits for close-ok (the driver enforces a timeout).
    fn close_connection(&mut self, error: AmqpError) -> Control {
        if matches!(self.phase, Phase::Closing | Phase::Closed) {
            return Control::Close;
        }
        tracing::info!(connection = self.connection_id, error = %error.reply_text(), "closing connection");
        let before_tune = self.phase == Phase::AwaitStartOk;
        // A refused login names no method: RabbitMQ's close carries class 0, method 0 there
        // (checked against RabbitMQ 3.10.8).
        let (class_id, method_id) = if before_tune && error.reply == reply::ACCESS_REFUSED {
            (0, 0)
        } else {
            (error.class_id, error.method_id)
        };
        self.flush_confirms();
        self.release_all();
        self.outbox.send_method(
            0,
            &Method::ConnectionClose {
                reply_code: error.reply.code,
                reply_text: error.reply_text(),
                class_id,
                method_id,
            },
        );
        if before_tune {
            // Before tuning there is no close handshake to wait for (authentication failure).
            self.phase = Phase::Closed;
            return Control::Close;
        }
        self.phase = Phase::Closing;
        Control::Continue
    }
}

/// The address shown before the driver tells the session its socket's addresses.
const UNKNOWN_ADDRESS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0);

/// Settles deliveries grouped by queue, one core call per run of the same queue.
fn settle_grouped(deliveries: Vec<Unacked>, settlement: Settlement) {
    let mut index = 0;
    while index < deliveries.len() {
        let queue = &deliveries[index].queue;
        let mut ids = Vec::new();
        let mut end = index;
        while end < deliveries.len() && Arc::ptr_eq(&deliveries[end].queue, queue) {
            ids.push(deliveries[end].id);
            end += 1;
        }
        queue.settle(&ids, settlement);
        index = end;
    }
}
