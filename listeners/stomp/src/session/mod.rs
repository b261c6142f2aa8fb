//! The STOMP connection state machine: CONNECT, then frames mapped onto core calls.
//!
//! Sans-IO: the driver hands over the bytes it read ([`Session::decode`]) and each decoded
//! frame ([`Session::handle_frame`]); replies and deliveries come out as encoded frames in
//! the connection's [`Outbox`]. The driver owns the socket and the clock; the session only
//! says which heart-beat intervals were agreed.
//!
//! Every error ends the connection: an ERROR frame with a `message` header (and `receipt-id`
//! when the offending frame asked for a receipt) and a body explaining it, then the close
//! the STOMP spec requires. Subscriptions are cancelled and unacknowledged messages requeued
//! first, so nothing else is affected. Frame families live in their own files: `send.rs`
//! (SEND and the queues it declares), `subscribe.rs` (SUBSCRIBE, UNSUBSCRIBE, ACK, NACK).

mod send;
mod subscribe;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use base64::Engine;
use bytes::BytesMut;
use rand::RngCore;
use tokio::sync::Notify;
use warren_core::access::User;
use warren_core::broker::AuthFailure;
use warren_core::certificate::{login_name, LoginFrom};
use warren_core::connections::{ConnectionHandle, ConnectionInfo};
use warren_core::queue::Settlement;
use warren_core::vhost::{Actor, Publisher, VHost};
use warren_core::Broker;

use crate::codec::{
    negotiate_heartbeat, negotiate_version, Command, Decoded, Decoder, Frame, FrameError, Limits,
    Version,
};
use crate::error::StompError;
use crate::outbox::{Outbox, Subscription, Unacked};

pub use subscribe::ActiveSubscription;

/// Most transactions open at once on one connection (RabbitMQ's limit).
pub const MAX_TRANSACTIONS: usize = 16;
/// Most frames one transaction may hold before COMMIT (RabbitMQ's limit).
pub const MAX_TRANSACTION_ACTIONS: usize = 1024;

/// What a STOMP connection is allowed and given.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// Login used when CONNECT has no `login` header (`stomp.default_user`).
    pub default_user: Option<String>,
    /// Passcode used with the default login (`stomp.default_pass`).
    pub default_pass: Option<String>,
    /// Vhost used when CONNECT has no `host` header (`stomp.default_vhost`).
    pub default_vhost: String,
    /// Whether a first frame other than CONNECT logs in with the defaults
    /// (`stomp.implicit_connect`).
    pub implicit_connect: bool,
    /// Frame limits once logged in (`stomp.max_frame_size`, `stomp.max_headers`,
    /// `stomp.max_header_length`).
    pub limits: Limits,
    /// The largest body accepted before login (`stomp.max_frame_size_unauthenticated`).
    pub unauthenticated_max_frame_size: usize,
    /// Whether a NACK without a `requeue` header requeues (`stomp.default_nack_requeue`).
    pub default_nack_requeue: bool,
    /// The broker's largest message body.
    pub max_message_size: usize,
    /// The shortest heart-beat interval the broker sends or expects, in milliseconds.
    pub heartbeat_min_ms: u32,
    /// `stomp.ssl_cert_login`: a TLS client with a verified certificate and no `login`
    /// header logs in as the user the certificate names, read this way
    /// (`ssl_cert_login_from`). `None`: off.
    pub ssl_cert_login: Option<LoginFrom>,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            default_user: Some("guest".to_string()),
            default_pass: Some("guest".to_string()),
            default_vhost: "/".to_string(),
            implicit_connect: false,
            limits: Limits {
                max_header_count: 100,
                ..Limits::default()
            },
            unauthenticated_max_frame_size: 64 * 1024,
            default_nack_requeue: true,
            max_message_size: 16 * 1024 * 1024,
            heartbeat_min_ms: 1000,
            ssl_cert_login: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    AwaitConnect,
    Open,
    Closed,
}

/// What the driver should do after a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Keep reading.
    Continue,
    /// Flush what is buffered, then close the socket.
    Close,
}

/// What a handled frame asks for.
enum Outcome {
    Continue,
    Disconnect,
}

/// One STOMP connection's protocol state.
pub struct Session {
    broker: Arc<Broker>,
    config: SessionConfig,
    connection_id: u64,
    from_loopback: bool,
    phase: Phase,
    decoder: Decoder,
    outbox: Arc<Outbox>,
    version: Version,
    user: Option<Arc<User>>,
    vhost: Option<Arc<VHost>>,
    /// (send, expect) heart-beat intervals in milliseconds; 0 = off.
    heartbeat: (u32, u32),
    subscriptions: HashMap<Arc<str>, ActiveSubscription>,
    /// Queues this connection declared through `/queue/`, so a SEND declares once.
    declared_queues: HashSet<String>,
    /// `/temp-queue/` names to the queue created for them.
    reply_queues: HashMap<String, String>,
    /// Exclusive queues this connection declared, deleted when it closes.
    exclusive_queues: Vec<String>,
    transactions: HashMap<String, Vec<Frame>>,
    /// The core's publish state: exchanges this connection was allowed to publish to.
    publisher: Publisher,
    /// Whether the client ever sent: only publishers are blocked by resource alarms.
    published: bool,
    /// Subscriptions made by the frame being handled, started after its RECEIPT.
    starting: Vec<Arc<Subscription>>,
    /// The client's and the broker's addresses (shown to operators).
    addresses: Option<(SocketAddr, SocketAddr)>,
    /// Whether the connection runs over TLS (shown to operators).
    tls: bool,
    /// The user the client's verified TLS certificate names, with `stomp.ssl_cert_login`.
    certificate_user: Option<String>,
    /// This connection in the broker's connection registry, once logged in.
    registration: Option<ConnectionHandle>,
    /// Notified when an operator asks this connection to close.
    operator_wake: Arc<Notify>,
    /// The highest store sequence number of any persistent message this connection sent to
    /// a durable queue: a RECEIPT (for any frame) waits until the store has it on disk, so
    /// a RECEIPT means every earlier SEND is safe, as a DISCONNECT receipt promises.
    last_durable_seq: u64,
    /// RECEIPTs waiting for the message store, in the order their frames came: (store
    /// sequence number to wait for, 0 for none; receipt id). A receipt never overtakes an
    /// earlier one, so a RECEIPT still means every earlier frame was handled.
    pending_receipts: VecDeque<(u64, String)>,
    /// `stomp.max_connections` was reached when this connection came: CONNECT is refused.
    over_capacity: bool,
}

impl Session {
    /// A session for a new connection from a loopback address or not.
    pub fn new(
        broker: Arc<Broker>,
        config: SessionConfig,
        outbox: Arc<Outbox>,
        from_loopback: bool,
    ) -> Session {
        let connection_id = broker.next_connection_id();
        let decoder = Decoder::new(Limits {
            max_frame_size: config
                .unauthenticated_max_frame_size
                .min(config.limits.max_frame_size),
            ..config.limits
        });
        Session {
            broker,
            config,
            connection_id,
            from_loopback,
            phase: Phase::AwaitConnect,
            decoder,
            outbox,
            version: Version::V1_0,
            user: None,
            vhost: None,
            heartbeat: (0, 0),
            subscriptions: HashMap::new(),
            declared_queues: HashSet::new(),
            reply_queues: HashMap::new(),
            exclusive_queues: Vec::new(),
            transactions: HashMap::new(),
            publisher: Publisher::new(),
            published: false,
            starting: Vec::new(),
            addresses: None,
            tls: false,
            certificate_user: None,
            registration: None,
            operator_wake: Arc::new(Notify::new()),
            last_durable_seq: 0,
            pending_receipts: VecDeque::new(),
            over_capacity: false,
        }
    }

    /// Whether RECEIPTs wait for the message store; the driver then calls
    /// [`Session::flush_receipts`] whenever the store's durable sequence number moves.
    pub fn awaits_durability(&self) -> bool {
        !self.pending_receipts.is_empty()
    }

    /// Sends the RECEIPTs whose messages the store now has on disk.
    pub fn flush_receipts(&mut self) {
        if self.pending_receipts.is_empty() {
            return;
        }
        let durable = self
            .broker
            .message_store()
            .map_or(u64::MAX, |store| store.durable_seq());
        while let Some((seq, _)) = self.pending_receipts.front() {
            if *seq > durable {
                break;
            }
            if let Some((seq, receipt)) = self.pending_receipts.pop_front() {
                let failed = self
                    .broker
                    .message_store()
                    .is_some_and(|store| store.take_failed(seq));
                if failed {
                    // A forwarded SEND its queue's home node did not take: the client is
                    // told with an ERROR (which ends the connection) instead of a RECEIPT.
                    self.fail(
                        StompError::new(
                            "message not taken",
                            "the queue's home node did not take the message; send it again",
                        ),
                        Some(receipt),
                    );
                    self.pending_receipts.clear();
                    return;
                }
                self.send_receipt(receipt);
            }
        }
    }

    /// Sends a RECEIPT now, or once the store has every persistent message this connection
    /// sent to a durable queue on disk (as RabbitMQ's STOMP plugin receipts through
    /// publisher confirms); never before an earlier RECEIPT.
    fn receipt_when_durable(&mut self, receipt: String) {
        if self.last_durable_seq == 0 && self.pending_receipts.is_empty() {
            self.send_receipt(receipt);
        } else {
            self.pending_receipts
                .push_back((self.last_durable_seq, receipt));
            self.flush_receipts();
        }
    }

    fn send_receipt(&self, receipt: String) {
        self.outbox
            .send_frame(&Frame::new(Command::Receipt).with_header("receipt-id", receipt));
    }

    /// Records the client's and the broker's addresses (shown to operators).
    pub fn set_addresses(&mut self, peer: SocketAddr, local: SocketAddr) {
        self.addresses = Some((peer, local));
    }

    /// Records that the connection runs over TLS (shown to operators).
    pub fn set_tls(&mut self, tls: bool) {
        self.tls = tls;
    }

    /// The client's verified DER certificate: with `stomp.ssl_cert_login`, a CONNECT
    /// without a `login` header logs in as the user it names (RabbitMQ's STOMP plugin; a
    /// certificate naming nobody leaves the default login in place).
    pub fn set_certificate(&mut self, certificate: &[u8]) {
        if let Some(from) = self.config.ssl_cert_login {
            self.certificate_user = login_name(certificate, from);
        }
    }

    /// Notified when an operator asks this connection to close; the driver then calls
    /// [`Session::close_requested`] and [`Session::force_close`].
    pub fn operator_wake(&self) -> Arc<Notify> {
        Arc::clone(&self.operator_wake)
    }

    /// The reason an operator gave when asking this connection to close, once asked.
    pub fn close_requested(&self) -> Option<String> {
        self.registration
            .as_ref()
            .and_then(ConnectionHandle::close_requested)
    }

    /// The broker-wide id of this connection.
    pub fn connection_id(&self) -> u64 {
        self.connection_id
    }

    /// Whether CONNECT succeeded.
    pub fn is_connected(&self) -> bool {
        self.phase == Phase::Open
    }

    /// Whether the connection is done (after an ERROR or DISCONNECT).
    pub fn is_closed(&self) -> bool {
        self.phase == Phase::Closed
    }

    /// Whether a resource alarm should stop reading this connection: it is connected and has
    /// sent messages, as RabbitMQ blocks publishing connections only.
    pub fn is_publisher(&self) -> bool {
        self.phase == Phase::Open && self.published
    }

    /// The agreed heart-beats in milliseconds: how often the broker sends one, and how often
    /// it must hear from the client (0 = off).
    pub fn heartbeat(&self) -> (u32, u32) {
        self.heartbeat
    }

    /// The negotiated protocol version (1.0 until CONNECT).
    pub fn version(&self) -> Version {
        self.version
    }

    /// Takes the next heart-beat or frame off the read buffer.
    pub fn decode(&mut self, buffer: &mut BytesMut) -> Result<Option<Decoded>, FrameError> {
        self.decoder.decode(buffer)
    }

    /// The open vhost and the user, as cheap `Arc` clones.
    fn open(&self) -> Result<(Arc<VHost>, Arc<User>), StompError> {
        match (&self.vhost, &self.user) {
            (Some(vhost), Some(user)) => Ok((Arc::clone(vhost), Arc::clone(user))),
            _ => Err(StompError::not_logged_in()),
        }
    }

    fn actor<'a>(&self, user: &'a User) -> Actor<'a> {
        Actor {
            user: &user.name,
            connection_id: self.connection_id,
        }
    }

    /// Handles one frame from the client.
    pub fn handle_frame(&mut self, frame: Frame) -> Control {
        for id in self.outbox.take_server_cancelled() {
            self.subscriptions.remove(&id);
        }
        let frame = if self.version == Version::V1_0 && self.phase == Phase::Open {
            trim_header_values(frame)
        } else {
            frame
        };
        let receipt = frame.header("receipt").map(str::to_string);
        let command = frame.command;
        // A SEND inside a transaction is receipted once COMMIT sent it and the message is
        // confirmed (RabbitMQ receipts a SEND on its publisher confirm); the held frame keeps
        // its `receipt` header for that.
        let held_send = self.phase == Phase::Open
            && command == Command::Send
            && frame.header("transaction").is_some();
        let result = match self.phase {
            Phase::Closed => return Control::Close,
            Phase::AwaitConnect => match frame.command {
                Command::Connect | Command::Stomp => self.connect(frame, false),
                _ if self.config.implicit_connect => self
                    .connect(Frame::new(Command::Connect), true)
                    .and_then(|_| self.handle_open(frame)),
                _ => Err(StompError::not_logged_in()),
            },
            Phase::Open => self.handle_open(frame),
        };
        match result {
            Ok(outcome) => {
                let connect = matches!(command, Command::Connect | Command::Stomp);
                if let Some(receipt) =
                    receipt.filter(|_| self.phase == Phase::Open && !connect && !held_send)
                {
                    self.receipt_when_durable(receipt);
                }
                for subscription in self.starting.drain(..) {
                    subscription.start();
                    subscription.queue.dispatch();
                }
                match outcome {
                    // A forwarded SEND found failed while its receipt was flushed.
                    _ if self.phase == Phase::Closed => Control::Close,
                    Outcome::Continue => Control::Continue,
                    Outcome::Disconnect => {
                        self.release_all();
                        self.phase = Phase::Closed;
                        Control::Close
                    }
                }
            }
            Err(error) => {
                self.starting.clear();
                self.fail(error, receipt)
            }
        }
    }

    /// Handles bytes the codec could not frame: an ERROR, then close.
    pub fn handle_frame_error(&mut self, error: FrameError) -> Control {
        let error = match &error {
            FrameError::TooLarge { .. } => StompError::frame_too_large(error.to_string()),
            // RabbitMQ's parser takes any command and refuses it afterwards.
            FrameError::UnknownCommand(command) => StompError::bad_command(command),
            _ => StompError::malformed(&error),
        };
        self.fail(error, None)
    }

    /// Ends the connection because the broker is shutting down or an operator closed it:
    /// an ERROR frame (`connection_forced`) carrying the reason, then the close.
    pub fn force_close(&mut self, reason: &str) -> Control {
        if self.phase == Phase::Closed {
            return Control::Close;
        }
        self.fail(StompError::connection_forced(reason), None)
    }

    /// Sends an ERROR frame for `error` and ends the session.
    fn fail(&mut self, error: StompError, receipt: Option<String>) -> Control {
        if self.phase == Phase::Closed {
            return Control::Close;
        }
        tracing::info!(
            connection = self.connection_id,
            message = %error.message,
            detail = %error.detail,
            "STOMP error frame sent; closing"
        );
        let mut frame = Frame::new(Command::Error)
            .with_header("message", error.message)
            .with_header("content-type", "text/plain")
            .with_header("version", "1.0,1.1,1.2");
        if let Some(receipt) = receipt {
            frame = frame.with_header("receipt-id", receipt);
        }
        self.outbox.send_frame(&frame.with_body(error.detail));
        self.release_all();
        self.phase = Phase::Closed;
        Control::Close
    }

    /// Makes CONNECT answer an ERROR frame (`stomp.max_connections` is reached).
    pub fn refuse_over_capacity(&mut self) {
        self.over_capacity = true;
    }

    fn connect(&mut self, frame: Frame, implicit: bool) -> Result<Outcome, StompError> {
        if self.over_capacity {
            return Err(StompError::new(
                "Bad CONNECT",
                "stomp.max_connections is reached: too many STOMP connections",
            ));
        }
        let version = negotiate_version(frame.header("accept-version"), &Version::ALL)
            .map_err(|text| StompError::version_mismatch(&text))?;
        let frame = if version == Version::V1_0 {
            trim_header_values(frame)
        } else {
            frame
        };
        let minimum = self.config.heartbeat_min_ms;
        let heartbeat = negotiate_heartbeat(frame.header("heart-beat"), minimum, minimum)
            .map_err(StompError::bad_connect)?;
        let vhost_name = frame
            .header("host")
            .unwrap_or(&self.config.default_vhost)
            .to_string();
        let certificate_user = match frame.header("login") {
            Some(_) => None,
            None => self.certificate_user.clone(),
        };
        let login = match certificate_user {
            // The certificate is the credential: no passcode is checked.
            Some(name) => {
                let login = self.broker.authenticate_trusted(&name, self.from_loopback);
                (name, login)
            }
            None => {
                let (login, passcode) = match frame.header("login") {
                    Some(login) => (
                        login.to_string(),
                        frame.header("passcode").unwrap_or("").to_string(),
                    ),
                    None => match &self.config.default_user {
                        Some(user) => (
                            user.clone(),
                            self.config.default_pass.clone().unwrap_or_default(),
                        ),
                        None => return Err(StompError::bad_connect(
                            "CONNECT has no 'login' header and no stomp.default_user is configured",
                        )),
                    },
                };
                let result = self
                    .broker
                    .authenticate(&login, &passcode, self.from_loopback);
                (login, result)
            }
        };
        let user = match login {
            (_, Ok(user)) => user,
            (login, Err(failure)) => {
                tracing::warn!(user = %login, reason = %failure, "STOMP login refused");
                return Err(match failure {
                    AuthFailure::LoopbackOnly => {
                        StompError::bad_connect("non-loopback access denied")
                    }
                    _ => StompError::bad_connect(format!("Access refused for user '{login}'")),
                });
            }
        };
        let vhost = self
            .broker
            .open_vhost(&user.name, &vhost_name)
            .map_err(|_| {
                StompError::bad_connect(format!("Virtual host '{vhost_name}' access denied"))
            })?;
        let session_id = generated_name("session-");
        self.version = version;
        self.heartbeat = heartbeat;
        self.user = Some(user);
        // The vhost's and the user's max-connections: an ERROR frame (Bad CONNECT) with
        // RabbitMQ's AMQP 0-9-1 text, then the connection closes.
        self.register(&vhost_name)
            .map_err(|refusal| StompError::bad_connect(refusal.text()))?;
        self.vhost = Some(vhost);
        self.phase = Phase::Open;
        self.decoder.set_version(version);
        self.decoder.set_limits(self.config.limits);
        self.outbox.set_session(version, &session_id);
        if !implicit {
            self.outbox.send_frame(
                &Frame::new(Command::Connected)
                    .with_header("server", concat!("Warren/", env!("CARGO_PKG_VERSION")))
                    .with_header("session", session_id)
                    .with_header("heart-beat", format!("{},{}", heartbeat.0, heartbeat.1))
                    .with_header("version", version.as_str()),
            );
        }
        Ok(Outcome::Continue)
    }

    /// Enters this connection in the broker's connection registry (the management API lists
    /// it; an operator's close wakes the driver through `operator_wake`); refused over the
    /// vhost's or the user's `max-connections`.
    fn register(
        &mut self,
        vhost_name: &str,
    ) -> Result<(), warren_core::resource_limits::ConnectionLimitReached> {
        let Some((peer, local)) = self.addresses else {
            return Ok(());
        };
        let user = self
            .user
            .as_ref()
            .map(|u| u.name.clone())
            .unwrap_or_default();
        let wake = Arc::clone(&self.operator_wake);
        let handle = self.broker.register_connection(
            ConnectionInfo {
                id: self.connection_id,
                protocol: format!("STOMP {}", self.version.as_str()),
                user,
                vhost: vhost_name.to_string(),
                peer,
                local,
                client_properties: warren_core::value::Table::new(),
                connection_name: None,
                tls: self.tls,
                frame_max: u32::try_from(self.config.limits.max_frame_size).unwrap_or(u32::MAX),
                channel_max: 0,
                heartbeat: u16::try_from(self.heartbeat.0.max(self.heartbeat.1) / 1000)
                    .unwrap_or(u16::MAX),
                connected_at: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64),
            },
            Box::new(move || wake.notify_one()),
        )?;
        handle.set_channels(1);
        self.registration = Some(handle);
        Ok(())
    }

    fn handle_open(&mut self, frame: Frame) -> Result<Outcome, StompError> {
        match frame.command {
            Command::Connect | Command::Stomp => Err(StompError::bad_connect(
                "this connection is already logged in",
            )),
            Command::Send | Command::Ack | Command::Nack => {
                match frame.header("transaction").map(str::to_string) {
                    Some(transaction) => self.add_to_transaction(&transaction, frame),
                    None => self.transactable(&frame),
                }?;
                Ok(Outcome::Continue)
            }
            Command::Subscribe => self.subscribe(&frame).map(|_| Outcome::Continue),
            Command::Unsubscribe => self.unsubscribe(&frame).map(|_| Outcome::Continue),
            Command::Begin => {
                let transaction = transaction_header(&frame, "BEGIN")?;
                if self.transactions.contains_key(transaction) {
                    return Err(StompError::transaction_already_open(transaction));
                }
                if self.transactions.len() >= MAX_TRANSACTIONS {
                    return Err(StompError::transaction_limit(MAX_TRANSACTIONS));
                }
                self.transactions
                    .insert(transaction.to_string(), Vec::new());
                Ok(Outcome::Continue)
            }
            Command::Commit => {
                let transaction = transaction_header(&frame, "COMMIT")?;
                let frames = self
                    .transactions
                    .remove(transaction)
                    .ok_or_else(|| unknown_transaction(transaction))?;
                for frame in &frames {
                    self.transactable(frame)?;
                    if frame.command == Command::Send {
                        if let Some(receipt) = frame.header("receipt") {
                            self.receipt_when_durable(receipt.to_string());
                        }
                    }
                }
                Ok(Outcome::Continue)
            }
            Command::Abort => {
                let transaction = transaction_header(&frame, "ABORT")?;
                self.transactions
                    .remove(transaction)
                    .ok_or_else(|| unknown_transaction(transaction))?;
                Ok(Outcome::Continue)
            }
            Command::Disconnect => Ok(Outcome::Disconnect),
            Command::Connected | Command::Message | Command::Receipt | Command::Error => {
                Err(StompError::bad_command(frame.command.as_str()))
            }
        }
    }

    /// SEND, ACK or NACK, now or at COMMIT.
    fn transactable(&mut self, frame: &Frame) -> Result<(), StompError> {
        match frame.command {
            Command::Send => self.send(frame),
            Command::Ack => self.acknowledge(frame, None),
            Command::Nack => {
                let requeue = match frame.header("requeue") {
                    None => self.config.default_nack_requeue,
                    Some(value) => value == "true" || value == "True",
                };
                let settlement = if requeue {
                    Settlement::Requeue
                } else {
                    Settlement::Reject
                };
                self.acknowledge(frame, Some(settlement))
            }
            _ => Ok(()),
        }
    }

    fn add_to_transaction(&mut self, transaction: &str, frame: Frame) -> Result<(), StompError> {
        let frames = self
            .transactions
            .get_mut(transaction)
            .ok_or_else(|| unknown_transaction(transaction))?;
        if frames.len() >= MAX_TRANSACTION_ACTIONS {
            return Err(StompError::transaction_too_large(MAX_TRANSACTION_ACTIONS));
        }
        if frame.command == Command::Send {
            self.published = true;
        }
        // Copied so a held SEND does not pin the read buffer it arrived in.
        let body = bytes::Bytes::copy_from_slice(&frame.body);
        frames.push(Frame { body, ..frame });
        Ok(())
    }

    /// Cancels every subscription, returns unacknowledged messages and deletes the
    /// connection's exclusive queues.
    fn release_all(&mut self) {
        if let Some(vhost) = &self.vhost {
            // Detach every consumer before requeueing, so nothing requeued is delivered
            // back to a subscription of this closing connection.
            for (_, active) in self.subscriptions.drain() {
                vhost.cancel_instance(&active.subscription.queue, active.consumer_id);
            }
            // The core's rule for deliveries outstanding when a connection ends: sent ones
            // are requeued, never-sent ones released (no delivery counted).
            let (sent, never_sent) = self.outbox.take_all_unacked();
            settle_grouped(sent, Settlement::outstanding(true));
            settle_grouped(never_sent, Settlement::outstanding(false));
            vhost.remove_exclusive_queues(self.connection_id, &self.exclusive_queues);
        }
        self.exclusive_queues.clear();
        self.transactions.clear();
    }

    /// The socket is gone: release everything the connection held.
    pub fn terminate(&mut self) {
        if self.phase != Phase::Closed {
            self.release_all();
            self.phase = Phase::Closed;
        }
        self.registration = None;
        self.outbox.close();
        for (queue, id) in self.outbox.take_orphaned() {
            queue.settle(&[id], Settlement::outstanding(false));
        }
    }

    /// Lets queues deliver again to subscriptions that ran out of credit.
    fn kick_starved(&self) {
        for subscription in self.outbox.take_starved() {
            subscription.queue.dispatch();
        }
    }
}

fn transaction_header<'a>(frame: &'a Frame, command: &str) -> Result<&'a str, StompError> {
    frame
        .header("transaction")
        .ok_or_else(|| StompError::missing_transaction(command))
}

fn unknown_transaction(transaction: &str) -> StompError {
    StompError::unknown_transaction(transaction)
}

/// STOMP 1.0 clients pad header values (`destination: /queue/a`); RabbitMQ strips the
/// leading whitespace of 1.0 header values, and so do we.
fn trim_header_values(mut frame: Frame) -> Frame {
    for (_, value) in &mut frame.headers {
        let trimmed = value.trim_start();
        if trimmed.len() != value.len() {
            *value = trimmed.to_string();
        }
    }
    frame
}

/// `prefix` followed by 22 URL-safe base64 characters of 16 random bytes.
pub(crate) fn generated_name(prefix: &str) -> String {
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!(
        "{prefix}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    )
}

/// Settles deliveries grouped by queue, one core call per run of the same queue.
fn settle_grouped(deliveries: Vec<Unacked>, settlement: Settlement) {
    let mut index = 0;
    while index < deliveries.len() {
        let queue = &deliveries[index].subscription.queue;
        let mut ids = Vec::new();
        let mut end = index;
        while end < deliveries.len() && Arc::ptr_eq(&deliveries[end].subscription.queue, queue) {
            ids.push(deliveries[end].id);
            end += 1;
        }
        queue.settle(&ids, settlement);
        index = end;
    }
}
