//! The AMQP 1.0 connection state machine: SASL, open/close, and frame dispatch to the
//! sessions ([`links`]) that own links. Sans-IO: bytes go in through
//! [`Connection::handle_input`], frames come out in [`Connection::out`], and the driver
//! passes time in (idle timeouts) and wakes it for deliveries ([`Connection::process_mailbox`]).

mod errors;
mod links;
pub mod sink;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use fe2o3_amqp_types::definitions::{AmqpError, ConnectionError, Error};
use fe2o3_amqp_types::performatives::{
    Begin, ChannelMax, Close, End, MaxFrameSize, Open, Performative,
};
use fe2o3_amqp_types::primitives::{Array, OrderedMap, Symbol};
use fe2o3_amqp_types::sasl::{SaslCode, SaslInit, SaslMechanisms, SaslOutcome};
use warren_core::certificate::{login_name, LoginFrom};
use warren_core::connections::{ConnectionHandle, ConnectionInfo};
use warren_core::value::{Table, Value};
use warren_core::vhost::VHost;
use warren_core::Broker;

use crate::codec::{
    decode_frame, encode_amqp_frame, encode_sasl_frame, Frame, FrameBody, FrameError, SaslFrame,
    MIN_MAX_FRAME_SIZE, PROTOCOL_HEADER_AMQP, PROTOCOL_HEADER_SASL,
};
use links::Session;
use sink::{Mailbox, MailboxEntry};

/// Settings of the AMQP 1.0 listener.
#[derive(Debug, Clone)]
pub struct Amqp10Config {
    /// The max-frame-size this side announces (incoming frames are limited to it).
    pub max_frame_size: u32,
    /// The highest channel number (session) allowed.
    pub channel_max: u16,
    /// The idle-time-out announced to clients; a client silent for this long is closed.
    pub idle_timeout: Option<Duration>,
    /// User and password ANONYMOUS logins act as; ANONYMOUS is offered only when set.
    pub anonymous_login: Option<(String, String)>,
    /// The vhost for an open frame whose hostname names no vhost.
    pub default_vhost: String,
    /// The largest message accepted, in bytes.
    pub max_message_size: usize,
    /// How long a client has from connecting to its open frame.
    pub handshake_timeout: Duration,
    /// How long to wait for the client's close after the broker closed.
    pub close_timeout: Duration,
    /// SASL EXTERNAL (`auth_mechanisms.N = EXTERNAL`): offered to TLS clients that presented
    /// a verified certificate, which names the user this way (`ssl_cert_login_from`).
    /// `None`: not offered.
    pub external_login: Option<LoginFrom>,
}

impl Default for Amqp10Config {
    fn default() -> Self {
        Amqp10Config {
            max_frame_size: 131_072,
            channel_max: 2047,
            idle_timeout: Some(Duration::from_secs(60)),
            anonymous_login: None,
            default_vhost: "/".to_string(),
            max_message_size: 16 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(10),
            close_timeout: Duration::from_secs(3),
            external_login: None,
        }
    }
}

/// The longest the socket stays open after the client's close was answered
/// (rabbit_amqp_reader's `?CLOSING_TIMEOUT`).
pub const CLOSING_TIMEOUT: Duration = Duration::from_secs(30);

/// What the driver should do after the connection handled input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Keep going.
    Continue,
    /// Flush [`Connection::out`] and close the socket.
    Close,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for sasl-init.
    Sasl,
    /// SASL succeeded; waiting for the AMQP protocol header.
    AmqpHeader,
    /// Waiting for the client's open.
    AwaitOpen,
    /// Open in both directions.
    Open,
    /// We sent close and wait for the client's.
    Closing,
    /// The client closed and our close is sent: whatever the client still sends is dropped
    /// until it closes the socket or the closing timeout passes (rabbit_amqp_reader's
    /// `closed` state).
    Closed,
}

/// One AMQP 1.0 connection.
pub struct Connection {
    broker: Arc<Broker>,
    config: Arc<Amqp10Config>,
    connection_id: u64,
    from_loopback: bool,
    phase: Phase,
    user: Option<String>,
    vhost: Option<Arc<VHost>>,
    remote_max_frame_size: u32,
    channel_max: u16,
    remote_idle_timeout: Option<Duration>,
    sessions: HashMap<u16, Session>,
    /// Channels whose session we ended with an error, until the client's end arrives.
    ending: HashSet<u16>,
    mailbox: Arc<Mailbox>,
    next_link_id: u64,
    /// A resource alarm is raised: publishing links get no more credit.
    blocked: bool,
    /// The client's and the broker's addresses (shown to operators).
    addresses: Option<(SocketAddr, SocketAddr)>,
    /// This connection in the broker's connection registry, once open.
    registration: Option<ConnectionHandle>,
    /// Whether the connection runs over TLS (shown to operators).
    tls: bool,
    /// The user the client's verified TLS certificate names, when it presented one (the
    /// inner `None`: the certificate names nobody), for SASL EXTERNAL.
    certificate_user: Option<Option<String>>,
    /// Encoded frames waiting to be written.
    pub out: BytesMut,
}

impl Connection {
    /// A connection that has not seen its protocol header yet.
    pub fn new(broker: Arc<Broker>, config: Arc<Amqp10Config>, from_loopback: bool) -> Self {
        let connection_id = broker.next_connection_id();
        Connection {
            broker,
            config,
            connection_id,
            from_loopback,
            phase: Phase::Sasl,
            user: None,
            vhost: None,
            remote_max_frame_size: MIN_MAX_FRAME_SIZE,
            channel_max: 0,
            remote_idle_timeout: None,
            sessions: HashMap::new(),
            ending: HashSet::new(),
            mailbox: Arc::new(Mailbox::default()),
            next_link_id: 1,
            blocked: false,
            addresses: None,
            registration: None,
            tls: false,
            certificate_user: None,
            out: BytesMut::new(),
        }
    }

    /// Records the client's and the broker's addresses (shown to operators).
    pub fn set_addresses(&mut self, peer: SocketAddr, local: SocketAddr) {
        self.addresses = Some((peer, local));
    }

    /// Marks the connection as TLS, with the client's verified DER certificate if it
    /// presented one: SASL EXTERNAL is then offered when configured.
    pub fn set_tls(&mut self, certificate: Option<&[u8]>) {
        self.tls = true;
        if let Some(from) = self.config.external_login {
            self.certificate_user = certificate.map(|der| login_name(der, from));
        }
    }

    /// The reason an operator gave when asking this connection to close, once asked (the
    /// driver is woken through the mailbox's `notify`).
    pub fn close_requested(&self) -> Option<String> {
        self.registration
            .as_ref()
            .and_then(ConnectionHandle::close_requested)
    }

    /// Closes because an operator asked: close with `amqp:connection:forced` and the reason.
    pub fn close_by_operator(&mut self, reason: &str) -> Control {
        self.close_with(errors::connection(
            ConnectionError::ConnectionForced,
            reason,
        ))
    }

    /// Enters this connection in the broker's connection registry once it is open; refused
    /// over the vhost's or the user's `max-connections`.
    fn register(
        &mut self,
        vhost: &str,
        open: &Open,
    ) -> Result<(), warren_core::resource_limits::ConnectionLimitReached> {
        let Some((peer, local)) = self.addresses else {
            return Ok(());
        };
        let client_properties = client_properties(open);
        let mailbox = Arc::clone(&self.mailbox);
        let handle = self.broker.register_connection(
            ConnectionInfo {
                id: self.connection_id,
                protocol: "AMQP 1.0".to_string(),
                user: self.user.clone().unwrap_or_default(),
                vhost: vhost.to_string(),
                peer,
                local,
                connection_name: ConnectionInfo::connection_name_from(&client_properties),
                client_properties,
                tls: self.tls,
                frame_max: self.remote_max_frame_size.min(self.config.max_frame_size),
                channel_max: self.channel_max,
                heartbeat: self
                    .config
                    .idle_timeout
                    .map_or(0, |t| u16::try_from(t.as_secs()).unwrap_or(u16::MAX)),
                connected_at: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            },
            Box::new(move || mailbox.notify.notify_one()),
        )?;
        self.registration = Some(handle);
        Ok(())
    }

    /// Whether dispositions wait for the message store; the driver then calls
    /// [`Connection::flush_durable`] whenever the store's durable sequence number moves.
    pub fn awaits_durability(&self) -> bool {
        self.sessions
            .values()
            .any(links::Session::awaits_durability)
    }

    /// Sends the dispositions whose durable messages the store now has on disk.
    pub fn flush_durable(&mut self) {
        let store = self.broker.message_store().cloned();
        let durable = store.as_ref().map_or(u64::MAX, |store| store.durable_seq());
        let failed = |seq: u64| store.as_ref().is_some_and(|s| s.take_failed(seq));
        for session in self.sessions.values_mut() {
            if session.awaits_durability() {
                session.flush_durable(durable, &failed, &mut self.out);
            }
        }
    }

    /// Tells the registry how many sessions are open.
    fn count_sessions(&self) {
        if let Some(registration) = &self.registration {
            registration.set_channels(u32::try_from(self.sessions.len()).unwrap_or(u32::MAX));
        }
    }

    /// The broker-wide connection id.
    pub fn connection_id(&self) -> u64 {
        self.connection_id
    }

    /// Where the core's queues leave deliveries; the driver waits on its `notify`.
    pub fn mailbox(&self) -> &Arc<Mailbox> {
        &self.mailbox
    }

    /// The idle timeout the client announced: send something at least every half of it.
    pub fn remote_idle_timeout(&self) -> Option<Duration> {
        self.remote_idle_timeout
    }

    /// Whether the open handshake finished.
    pub fn is_open(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Whether the broker sent close and waits for the client's.
    pub fn is_closing(&self) -> bool {
        self.phase == Phase::Closing
    }

    /// Whether the client closed the connection and our close was sent: the driver keeps
    /// the socket open (dropping input) until the client closes it or
    /// [`Connection::closing_timeout`] passes.
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// How long the socket stays open once closed: the broker's idle timeout when shorter
    /// than [`CLOSING_TIMEOUT`], as rabbit_amqp_reader does.
    pub fn closing_timeout(&self) -> Duration {
        match self.config.idle_timeout {
            Some(idle) if !idle.is_zero() && idle < CLOSING_TIMEOUT => idle,
            _ => CLOSING_TIMEOUT,
        }
    }

    /// Handles the 8-byte protocol header the client started with.
    pub fn start(&mut self, header: [u8; 8]) -> Control {
        if header == PROTOCOL_HEADER_SASL {
            self.out.put_slice(&PROTOCOL_HEADER_SASL);
            let mut mechanisms = vec![Symbol::from("PLAIN")];
            if self.config.anonymous_login.is_some() {
                mechanisms.push(Symbol::from("ANONYMOUS"));
            }
            // As RabbitMQ's rabbit_auth_mechanism_ssl: only to a client with a certificate.
            if self.certificate_user.is_some() {
                mechanisms.push(Symbol::from("EXTERNAL"));
            }
            encode_sasl_frame(
                &mut self.out,
                &SaslMechanisms {
                    sasl_server_mechanisms: Array::from(mechanisms),
                },
            );
            self.phase = Phase::Sasl;
            return Control::Continue;
        }
        if header == PROTOCOL_HEADER_AMQP {
            // Without SASL only the anonymous user may connect, when it is configured.
            if let Some((user, password)) = self.config.anonymous_login.clone() {
                if self.login(&user, &password) {
                    self.out.put_slice(&PROTOCOL_HEADER_AMQP);
                    self.phase = Phase::AwaitOpen;
                    return Control::Continue;
                }
            }
        }
        // RabbitMQ answers an unsupported header with the one it wants, then closes.
        self.out.put_slice(&PROTOCOL_HEADER_SASL);
        Control::Close
    }

    /// SASL EXTERNAL: the certificate is the credential, the user's password is not checked.
    fn login_external(&mut self) -> bool {
        let Some(Some(user)) = self.certificate_user.clone() else {
            tracing::warn!(
                connection = self.connection_id,
                "AMQP 1.0 EXTERNAL login refused: no client certificate, or no name found in it"
            );
            return false;
        };
        match self.broker.authenticate_trusted(&user, self.from_loopback) {
            Ok(found) => {
                self.user = Some(found.name.clone());
                true
            }
            Err(reason) => {
                tracing::warn!(
                    connection = self.connection_id,
                    user,
                    %reason,
                    "AMQP 1.0 EXTERNAL login refused"
                );
                false
            }
        }
    }

    fn login(&mut self, user: &str, password: &str) -> bool {
        match self.broker.authenticate(user, password, self.from_loopback) {
            Ok(found) => {
                self.user = Some(found.name.clone());
                true
            }
            Err(reason) => {
                tracing::warn!(
                    connection = self.connection_id,
                    user,
                    %reason,
                    "AMQP 1.0 login refused"
                );
                false
            }
        }
    }

    /// Consumes whole frames (and the post-SASL protocol header) from `buffer`.
    pub fn handle_input(&mut self, buffer: &mut BytesMut) -> Control {
        loop {
            if self.phase == Phase::AmqpHeader {
                if buffer.len() < 8 {
                    return Control::Continue;
                }
                let header = buffer.split_to(8);
                if header[..] != PROTOCOL_HEADER_AMQP {
                    self.out.put_slice(&PROTOCOL_HEADER_AMQP);
                    return Control::Close;
                }
                self.out.put_slice(&PROTOCOL_HEADER_AMQP);
                self.phase = Phase::AwaitOpen;
                continue;
            }
            match decode_frame(buffer, self.config.max_frame_size) {
                Ok(Some(frame)) => {
                    if self.handle_frame(frame) == Control::Close {
                        return Control::Close;
                    }
                }
                Ok(None) => return Control::Continue,
                Err(error) => {
                    buffer.clear();
                    if matches!(self.phase, Phase::Sasl | Phase::AmqpHeader) {
                        return Control::Close;
                    }
                    let error = match error {
                        FrameError::Framing(text) => {
                            errors::connection(ConnectionError::FramingError, text)
                        }
                        FrameError::Decode(text) => errors::amqp(AmqpError::DecodeError, text),
                    };
                    return self.close_with(error);
                }
            }
        }
    }

    fn handle_frame(&mut self, frame: Frame) -> Control {
        match (self.phase, frame.body) {
            (Phase::Sasl, FrameBody::Sasl(SaslFrame::Init(init))) => self.handle_sasl_init(init),
            (Phase::Sasl, _) => Control::Close,
            (Phase::Closed, _) => Control::Continue,
            (Phase::Closing, FrameBody::Amqp { performative, .. }) => {
                if matches!(performative, Performative::Close(_)) {
                    Control::Close
                } else {
                    Control::Continue
                }
            }
            (_, FrameBody::Empty) => Control::Continue,
            (_, FrameBody::Sasl(_)) => self.close_with(errors::connection(
                ConnectionError::FramingError,
                "SASL frame after the SASL exchange",
            )),
            (Phase::AwaitOpen, FrameBody::Amqp { performative, .. }) => match performative {
                Performative::Open(open) => self.handle_open(open),
                _ => self.close_with(errors::amqp(
                    AmqpError::IllegalState,
                    "expected an open frame",
                )),
            },
            (
                Phase::Open,
                FrameBody::Amqp {
                    performative,
                    payload,
                },
            ) => self.handle_performative(frame.channel, performative, payload),
            (Phase::AmqpHeader, _) => Control::Close,
        }
    }

    fn handle_sasl_init(&mut self, init: SaslInit) -> Control {
        let accepted = match init.mechanism.as_str() {
            "PLAIN" => {
                let response = init
                    .initial_response
                    .map(|b| b.into_vec())
                    .unwrap_or_default();
                // The core's one strict parser (shared with AMQP 0-9-1): a response that is
                // not `[authzid] NUL user NUL password` in UTF-8 is refused.
                match warren_core::sasl::parse_plain(&response) {
                    Some(plain) => self.login(&plain.user, &plain.password),
                    None => false,
                }
            }
            "ANONYMOUS" => match self.config.anonymous_login.clone() {
                Some((user, password)) => self.login(&user, &password),
                None => false,
            },
            "EXTERNAL" => self.login_external(),
            _ => false,
        };
        let code = if accepted {
            SaslCode::Ok
        } else {
            SaslCode::Auth
        };
        encode_sasl_frame(
            &mut self.out,
            &SaslOutcome {
                code,
                additional_data: None,
            },
        );
        if accepted {
            self.phase = Phase::AmqpHeader;
            Control::Continue
        } else {
            Control::Close
        }
    }

    fn handle_open(&mut self, open: Open) -> Control {
        self.remote_max_frame_size = open.max_frame_size.0.max(MIN_MAX_FRAME_SIZE);
        self.channel_max = open.channel_max.0.min(self.config.channel_max);
        self.remote_idle_timeout = open
            .idle_time_out
            .filter(|&ms| ms > 0)
            .map(|ms| Duration::from_millis(u64::from(ms)));
        let mut properties = OrderedMap::new();
        properties.insert(
            Symbol::from("product"),
            serde_amqp::Value::String("Warren".to_string()),
        );
        properties.insert(
            Symbol::from("version"),
            serde_amqp::Value::String(env!("CARGO_PKG_VERSION").to_string()),
        );
        let reply = Open {
            container_id: format!("warren-{}", self.connection_id),
            hostname: None,
            max_frame_size: MaxFrameSize(self.config.max_frame_size),
            channel_max: ChannelMax(self.channel_max),
            idle_time_out: self
                .config
                .idle_timeout
                .map(|timeout| timeout.as_millis().min(u128::from(u32::MAX)) as u32),
            outgoing_locales: None,
            incoming_locales: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: Some(properties),
        };
        encode_amqp_frame(&mut self.out, 0, &Performative::Open(reply), &[]);
        self.phase = Phase::Open;
        let name = self.vhost_name(open.hostname.as_deref());
        let user = self.user.clone().unwrap_or_default();
        match self.broker.open_vhost(&user, &name) {
            Ok(vhost) => match self.register(&name, &open) {
                Ok(()) => {
                    self.vhost = Some(vhost);
                    Control::Continue
                }
                // As RabbitMQ 4.x: the open is answered, then closed with
                // amqp:resource-limit-exceeded.
                Err(refusal) => self.close_with(errors::amqp(
                    AmqpError::ResourceLimitExceeded,
                    refusal.text_amqp10(),
                )),
            },
            Err(error) => self.close_with(errors::from_core(&error)),
        }
    }

    /// The vhost an open frame's hostname selects: `vhost:NAME` names it; a plain hostname
    /// is used when such a vhost exists; otherwise the default vhost (as RabbitMQ does).
    fn vhost_name(&self, hostname: Option<&str>) -> String {
        match hostname {
            Some(host) => match host.strip_prefix("vhost:") {
                Some(name) => name.to_string(),
                None if self.broker.vhost(host).is_some() => host.to_string(),
                None => self.config.default_vhost.clone(),
            },
            None => self.config.default_vhost.clone(),
        }
    }

    fn handle_performative(
        &mut self,
        channel: u16,
        performative: Performative,
        payload: bytes::Bytes,
    ) -> Control {
        match performative {
            Performative::Open(_) => {
                self.close_with(errors::amqp(AmqpError::IllegalState, "open received twice"))
            }
            Performative::Close(close) => {
                if let Some(error) = &close.error {
                    tracing::debug!(
                        connection = self.connection_id,
                        ?error,
                        "client closed with an error"
                    );
                }
                self.terminate();
                encode_amqp_frame(
                    &mut self.out,
                    0,
                    &Performative::Close(Close { error: None }),
                    &[],
                );
                // The socket stays open for frames the client sent before its close; the
                // driver closes it when the client does or after the closing timeout.
                self.phase = Phase::Closed;
                // Closed for operators too, though the socket may linger.
                self.registration = None;
                Control::Continue
            }
            Performative::Begin(begin) => self.handle_begin(channel, begin),
            Performative::End(_) if self.ending.remove(&channel) => Control::Continue,
            _ if self.ending.contains(&channel) => Control::Continue,
            Performative::End(end) => {
                if let Some(error) = &end.error {
                    tracing::debug!(
                        connection = self.connection_id,
                        channel,
                        ?error,
                        "client ended a session with an error"
                    );
                }
                if let Some(mut session) = self.sessions.remove(&channel) {
                    session.terminate();
                    self.count_sessions();
                    encode_amqp_frame(
                        &mut self.out,
                        channel,
                        &Performative::End(End { error: None }),
                        &[],
                    );
                    Control::Continue
                } else {
                    self.unknown_channel(channel)
                }
            }
            other => {
                let Some(vhost) = self.vhost.clone() else {
                    return Control::Close;
                };
                let user = self.user.clone().unwrap_or_default();
                let Some(session) = self.sessions.get_mut(&channel) else {
                    return self.unknown_channel(channel);
                };
                let context = links::Context {
                    vhost: &vhost,
                    user: &user,
                    connection_id: self.connection_id,
                    mailbox: &self.mailbox,
                    remote_max_frame_size: self.remote_max_frame_size,
                    max_message_size: self.config.max_message_size,
                    next_link_id: &mut self.next_link_id,
                    blocked: self.blocked,
                };
                let result = session.handle(context, other, payload, &mut self.out);
                let answer_flows = session.has_flows_to_answer();
                if let Err(error) = result {
                    self.end_session_with(channel, error);
                } else if answer_flows {
                    self.process_mailbox();
                    if let Some(session) = self.sessions.get_mut(&channel) {
                        session.finish_flows(&mut self.out);
                    }
                }
                Control::Continue
            }
        }
    }

    fn handle_begin(&mut self, channel: u16, begin: Begin) -> Control {
        if channel > self.channel_max {
            return self.close_with(errors::connection(
                ConnectionError::FramingError,
                format!("channel {channel} exceeds channel-max {}", self.channel_max),
            ));
        }
        if begin.remote_channel.is_some() {
            return self.close_with(errors::amqp(
                AmqpError::NotImplemented,
                "sessions begun by the broker are not supported",
            ));
        }
        if self.sessions.contains_key(&channel) || self.ending.contains(&channel) {
            return self.close_with(errors::connection(
                ConnectionError::FramingError,
                format!("channel {channel} already has a session"),
            ));
        }
        let session = Session::new(channel, &begin);
        let reply = session.begin_reply();
        encode_amqp_frame(&mut self.out, channel, &Performative::Begin(reply), &[]);
        self.sessions.insert(channel, session);
        self.count_sessions();
        Control::Continue
    }

    fn unknown_channel(&mut self, channel: u16) -> Control {
        self.close_with(errors::connection(
            ConnectionError::FramingError,
            format!("frame on channel {channel}, which has no session"),
        ))
    }

    /// Ends a session with `error` (its links are detached and their deliveries requeued).
    fn end_session_with(&mut self, channel: u16, error: Error) {
        tracing::debug!(
            connection = self.connection_id,
            channel,
            ?error,
            "ending session"
        );
        if let Some(mut session) = self.sessions.remove(&channel) {
            session.terminate();
        }
        self.count_sessions();
        self.ending.insert(channel);
        encode_amqp_frame(
            &mut self.out,
            channel,
            &Performative::End(End { error: Some(error) }),
            &[],
        );
    }

    /// Closes the connection with `error`, waiting for the client's close.
    pub fn close_with(&mut self, error: Error) -> Control {
        match self.phase {
            Phase::Closing => return Control::Continue,
            // Nothing may follow our close: a stream that no longer frames just ends.
            Phase::Closed => return Control::Close,
            _ => {}
        }
        tracing::debug!(
            connection = self.connection_id,
            ?error,
            "closing AMQP 1.0 connection"
        );
        self.terminate();
        if matches!(self.phase, Phase::Sasl | Phase::AmqpHeader) {
            return Control::Close;
        }
        if self.phase == Phase::AwaitOpen {
            // A close must follow an open (AMQP 1.0 2.4.5).
            let open = Open {
                container_id: format!("warren-{}", self.connection_id),
                hostname: None,
                max_frame_size: MaxFrameSize(self.config.max_frame_size),
                channel_max: ChannelMax(0),
                idle_time_out: None,
                outgoing_locales: None,
                incoming_locales: None,
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            };
            encode_amqp_frame(&mut self.out, 0, &Performative::Open(open), &[]);
        }
        encode_amqp_frame(
            &mut self.out,
            0,
            &Performative::Close(Close { error: Some(error) }),
            &[],
        );
        self.phase = Phase::Closing;
        Control::Continue
    }

    /// Closes because the broker shuts down (`amqp:connection:forced`).
    pub fn force_close(&mut self, reason: &str) -> Control {
        if !matches!(self.phase, Phase::Open | Phase::AwaitOpen) {
            return Control::Close;
        }
        self.close_with(errors::connection(
            ConnectionError::ConnectionForced,
            reason,
        ))
    }

    /// Raises or clears the resource-alarm block: while blocked, publishing links are given
    /// no more credit (they stop once they spent what they have); clearing tops them up.
    pub fn set_blocked(&mut self, blocked: bool) {
        if self.blocked == blocked {
            return;
        }
        self.blocked = blocked;
        if !blocked && self.phase == Phase::Open {
            for session in self.sessions.values_mut() {
                session.unblock(&mut self.out);
            }
        }
    }

    /// The client was silent for longer than the idle timeout.
    pub fn idle_timeout_expired(&mut self) -> Control {
        self.close_with(errors::amqp(
            AmqpError::ResourceLimitExceeded,
            "local-idle-timeout expired",
        ))
    }

    /// Turns deliveries the core left in the mailbox into transfer frames.
    pub fn process_mailbox(&mut self) {
        let entries = self.mailbox.take();
        if entries.is_empty() {
            return;
        }
        for entry in entries {
            let channel = match &entry {
                MailboxEntry::Delivery { channel, .. }
                | MailboxEntry::Drained { channel, .. }
                | MailboxEntry::Cancelled { channel, .. } => *channel,
            };
            match self.sessions.get_mut(&channel) {
                Some(session) => {
                    session.take_entry(entry, self.remote_max_frame_size, &mut self.out)
                }
                None => links::return_entry(entry),
            }
        }
        // Drains a queue's task finished (a stream's), answered after their transfers.
        for session in self.sessions.values_mut() {
            if session.has_flows_to_answer() {
                session.finish_flows(&mut self.out);
            }
        }
    }

    /// Releases everything the connection holds in the core: consumers are cancelled and
    /// unsettled deliveries requeued. Idempotent.
    pub fn terminate(&mut self) {
        for (_, mut session) in self.sessions.drain() {
            session.terminate();
        }
        for entry in self.mailbox.take() {
            links::return_entry(entry);
        }
    }
}

/// The open frame's properties as client properties for operators (text and booleans; other
/// values are shown as their debug text), with the container id as `container_id`.
fn client_properties(open: &Open) -> Table {
    let mut table = Table::new();
    table.0.push((
        "container_id".to_string(),
        Value::string(&open.container_id),
    ));
    if let Some(properties) = &open.properties {
        for (key, value) in properties.iter() {
            let value = match value {
                serde_amqp::Value::String(text) => Value::string(text.as_str()),
                serde_amqp::Value::Symbol(symbol) => Value::string(symbol.as_str()),
                serde_amqp::Value::Bool(flag) => Value::Bool(*flag),
                other => Value::string(format!("{other:?}")),
            };
            table.0.push((key.as_str().to_string(), value));
        }
    }
    table
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.terminate();
    }
}

#[cfg(test)]
mod tests;
