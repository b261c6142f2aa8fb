//! The stream protocol's connection state machine: the handshake (PeerProperties, SASL,
//! Tune, Open), then stream management, publishing and subscriptions against the core's
//! stream log. No sockets and no clocks: the driver feeds [`Request`]s and collects output
//! bytes, confirms and subscription changes.
//!
//! Publishes go to the stream's writer thread; its confirm callbacks land in the
//! connection's [`ConfirmQueue`], which the driver drains into `PublishConfirm` frames.
//! Deliveries are pulled: [`Session::pump`] reads whole chunks for each subscription that
//! has credit (counted in chunks, as RabbitMQ counts it).

mod publish;
mod subscribe;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::sync::{watch, Notify};
use warren_core::certificate::{login_name, LoginFrom};
use warren_core::error::ErrorKind;
use warren_core::sasl::parse_plain;
use warren_core::stream_log::StreamCreated;
use warren_core::vhost::VHost;
use warren_core::{Broker, CoreError};

use crate::codec::{code, encode, key, Request};

pub use publish::ConfirmQueue;
use publish::Publisher;
use subscribe::Subscription;

/// What a connection may do and is offered.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The largest frame the server accepts and offers in Tune (`stream.frame_max`).
    pub frame_max: u32,
    /// The heartbeat offered in Tune, seconds (`stream.heartbeat`).
    pub heartbeat: u32,
    /// The largest frame accepted before Open succeeds (`stream.initial_frame_max`).
    pub initial_frame_max: u32,
    /// The host put in Metadata and Open answers (`stream.advertised_host`); the address
    /// the client connected to when unset.
    pub advertised_host: Option<String>,
    /// The port put in Metadata and Open answers (`stream.advertised_port`); the
    /// listener's port when unset.
    pub advertised_port: Option<u16>,
    /// The SASL mechanisms offered, in order (`auth_mechanisms.N`, of those the stream
    /// listener knows: `PLAIN`, `EXTERNAL`). EXTERNAL is offered only to a TLS client that
    /// presented a certificate, as RabbitMQ's `rabbit_auth_mechanism_ssl` decides.
    pub auth_mechanisms: Vec<String>,
    /// Which part of a client certificate names its user (`ssl_cert_login_from`).
    pub cert_login_from: LoginFrom,
}

impl Default for SessionConfig {
    fn default() -> SessionConfig {
        SessionConfig {
            frame_max: 1_048_576,
            heartbeat: 60,
            initial_frame_max: 8_192,
            advertised_host: None,
            advertised_port: None,
            auth_mechanisms: vec!["PLAIN".to_owned()],
            cert_login_from: LoginFrom::default(),
        }
    }
}

/// What the driver does after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Keep going.
    Continue,
    /// Write what is pending, then close the socket.
    Close,
}

/// A subscription started or ended: the driver watches the stream's committed end for
/// started ones, so a caught-up subscription wakes when something is written.
pub enum SubscriptionChange {
    /// Subscription `id` waits on this stream's commits.
    Started(u8, watch::Receiver<u64>),
    /// Subscription `id` is gone.
    Ended(u8),
}

/// Where the handshake is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// Before a successful SaslAuthenticate.
    Authenticating,
    /// Authenticated as this user; Open not yet done.
    Authenticated(String),
    /// In a vhost.
    Open(String),
}

/// One stream protocol connection.
pub struct Session {
    broker: Arc<Broker>,
    config: Arc<SessionConfig>,
    peer: SocketAddr,
    local: SocketAddr,
    /// The id the connection is registered under (its publishers and consumers too).
    connection_id: u64,
    stage: Stage,
    vhost: Option<Arc<VHost>>,
    /// The largest frame accepted now (the initial ceiling until Open).
    frame_max: u32,
    /// The frame size agreed in Tune, in force once Open succeeds.
    negotiated_frame_max: u32,
    heartbeat: u32,
    /// `Deliver` version the client understands (2 when it said so).
    deliver_version: u16,
    client_properties: Vec<(String, String)>,
    /// For a TLS client that presented a certificate, the user it names (`None` inside
    /// when it names nobody); `None` without a certificate.
    certificate_user: Option<Option<String>>,
    publishers: HashMap<u8, Publisher>,
    subscriptions: HashMap<u8, Subscription>,
    confirms: Arc<ConfirmQueue>,
    /// Wakes the connection's driver: confirms arrived, or a single active consumer of
    /// this connection became active.
    wake: Arc<Notify>,
    changes: Vec<SubscriptionChange>,
    next_correlation_id: u32,
    /// Frames to send.
    pub out: BytesMut,
}

/// `code`, counted in the node's stream error counters when it is an error RabbitMQ counts
/// (`rabbitmq_global_stream_error_*_total`).
pub(crate) fn counted(broker: &Broker, code: u16) -> u16 {
    broker.stream_clients().count_response(code);
    code
}

/// The stream protocol code for a core error.
pub fn error_code(error: &CoreError) -> u16 {
    match error.kind {
        ErrorKind::NotFound => code::STREAM_DOES_NOT_EXIST,
        ErrorKind::AccessRefused => code::ACCESS_REFUSED,
        ErrorKind::PreconditionFailed => code::PRECONDITION_FAILED,
        _ => code::INTERNAL_ERROR,
    }
}

/// The command versions Warren speaks (ExchangeCommandVersions).
const COMMAND_VERSIONS: &[(u16, u16, u16)] = &[
    (key::DECLARE_PUBLISHER, 1, 1),
    (key::PUBLISH, 1, 2),
    (key::QUERY_PUBLISHER_SEQUENCE, 1, 1),
    (key::DELETE_PUBLISHER, 1, 1),
    (key::SUBSCRIBE, 1, 1),
    (key::DELIVER, 1, 2),
    (key::CREDIT, 1, 1),
    (key::STORE_OFFSET, 1, 1),
    (key::QUERY_OFFSET, 1, 1),
    (key::UNSUBSCRIBE, 1, 1),
    (key::CREATE, 1, 1),
    (key::DELETE, 1, 1),
    (key::METADATA, 1, 1),
    (key::METADATA_UPDATE, 1, 1),
    (key::PEER_PROPERTIES, 1, 1),
    (key::SASL_HANDSHAKE, 1, 1),
    (key::SASL_AUTHENTICATE, 1, 1),
    (key::TUNE, 1, 1),
    (key::OPEN, 1, 1),
    (key::CLOSE, 1, 1),
    (key::HEARTBEAT, 1, 1),
    (key::EXCHANGE_COMMAND_VERSIONS, 1, 1),
    (key::STREAM_STATS, 1, 1),
    (key::RESOLVE_OFFSET_SPEC, 1, 1),
    (key::ROUTE, 1, 1),
    (key::PARTITIONS, 1, 1),
    (key::CREATE_SUPER_STREAM, 1, 1),
    (key::DELETE_SUPER_STREAM, 1, 1),
];

impl Session {
    /// A new connection from `peer` to `local`; `wake` is notified when confirms arrive.
    pub fn new(
        broker: Arc<Broker>,
        config: Arc<SessionConfig>,
        peer: SocketAddr,
        local: SocketAddr,
        wake: Arc<Notify>,
    ) -> Session {
        // 0 is "no limit": the initial ceiling still applies until Open.
        let frame_max = match config.frame_max {
            0 => config.initial_frame_max,
            limit => config.initial_frame_max.min(limit),
        };
        let negotiated_frame_max = config.frame_max;
        let connection_id = broker.next_connection_id();
        Session {
            broker,
            config,
            peer,
            local,
            connection_id,
            stage: Stage::Authenticating,
            vhost: None,
            frame_max,
            negotiated_frame_max,
            heartbeat: 0,
            deliver_version: 1,
            client_properties: Vec::new(),
            certificate_user: None,
            publishers: HashMap::new(),
            subscriptions: HashMap::new(),
            confirms: Arc::new(ConfirmQueue::new(Arc::clone(&wake))),
            wake,
            changes: Vec::new(),
            next_correlation_id: 1,
            out: BytesMut::new(),
        }
    }

    /// The verified DER certificate a TLS client presented: SASL EXTERNAL is offered when
    /// configured, and logs in as the user the certificate names.
    pub fn set_certificate(&mut self, certificate: &[u8]) {
        self.certificate_user = Some(login_name(certificate, self.config.cert_login_from));
    }

    /// The SASL mechanisms offered to this connection.
    fn mechanisms(&self) -> Vec<String> {
        self.config
            .auth_mechanisms
            .iter()
            .filter(|mechanism| match mechanism.as_str() {
                "PLAIN" => true,
                "EXTERNAL" => self.certificate_user.is_some(),
                _ => false,
            })
            .cloned()
            .collect()
    }

    /// The id to register the connection under.
    pub fn connection_id(&self) -> u64 {
        self.connection_id
    }

    /// The largest frame accepted now.
    pub fn frame_max(&self) -> u32 {
        self.frame_max
    }

    /// The negotiated heartbeat in seconds (0: none).
    pub fn heartbeat(&self) -> u32 {
        self.heartbeat
    }

    /// The user and vhost once Open succeeded.
    pub fn opened(&self) -> Option<(&str, &str)> {
        match (&self.stage, &self.vhost) {
            (Stage::Open(user), Some(vhost)) => Some((user, vhost.name())),
            _ => None,
        }
    }

    /// The client's peer properties.
    pub fn client_properties(&self) -> &[(String, String)] {
        &self.client_properties
    }

    /// Subscriptions started and ended since the last call.
    pub fn take_changes(&mut self) -> Vec<SubscriptionChange> {
        std::mem::take(&mut self.changes)
    }

    /// Starts closing the connection from the server side.
    pub fn close(&mut self, closing_code: u16, reason: &str) {
        let correlation_id = self.correlation_id();
        encode::close(
            &mut self.out,
            correlation_id,
            counted(&self.broker, closing_code),
            reason,
        );
    }

    fn correlation_id(&mut self) -> u32 {
        let id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        id
    }

    /// Handles one request.
    pub fn handle(&mut self, request: Request) -> Control {
        match (&self.stage, request) {
            (_, Request::Heartbeat) => Control::Continue,
            (_, Request::Close { correlation_id, .. }) => {
                encode::response(&mut self.out, key::CLOSE, correlation_id, code::OK);
                Control::Close
            }
            (_, Request::CloseResponse { .. }) => Control::Close,
            (
                _,
                Request::PeerProperties {
                    correlation_id,
                    properties,
                },
            ) => {
                self.client_properties = properties;
                let server = [
                    ("product", "Warren"),
                    ("version", env!("CARGO_PKG_VERSION")),
                    ("platform", "Rust"),
                    ("cluster_name", "warren"),
                    ("copyright", "Warren authors"),
                    ("information", "Licensed under the Apache 2.0 license"),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned()));
                encode::peer_properties(&mut self.out, correlation_id, &server);
                Control::Continue
            }
            (_, Request::SaslHandshake { correlation_id }) => {
                let mechanisms = self.mechanisms();
                encode::sasl_handshake(&mut self.out, correlation_id, &mechanisms);
                Control::Continue
            }
            (
                Stage::Authenticating,
                Request::SaslAuthenticate {
                    correlation_id,
                    mechanism,
                    data,
                },
            ) => self.authenticate(correlation_id, &mechanism, &data),
            (
                _,
                Request::Tune {
                    frame_max,
                    heartbeat,
                },
            ) => {
                let lower = |ours: u32, theirs: u32| match (ours, theirs) {
                    (0, n) | (n, 0) => n,
                    (a, b) => a.min(b),
                };
                self.heartbeat = lower(self.config.heartbeat, heartbeat);
                let negotiated = lower(self.config.frame_max, frame_max);
                if matches!(self.stage, Stage::Open(_)) {
                    self.frame_max = negotiated;
                }
                self.negotiated_frame_max = negotiated;
                Control::Continue
            }
            (
                Stage::Authenticated(user),
                Request::Open {
                    correlation_id,
                    vhost,
                },
            ) => {
                let user = user.clone();
                self.open(correlation_id, &user, &vhost)
            }
            (Stage::Open(_), request) => self.handle_open(request),
            (
                _,
                Request::ExchangeCommandVersions {
                    correlation_id,
                    commands,
                },
            ) => {
                self.exchange_versions(correlation_id, &commands);
                Control::Continue
            }
            (_, other) => {
                tracing::debug!(peer = %self.peer, request = ?other, "stream command before Open");
                self.close(
                    code::UNKNOWN_FRAME,
                    "command not allowed before the connection is open",
                );
                Control::Close
            }
        }
    }

    fn authenticate(&mut self, correlation_id: u32, mechanism: &str, data: &[u8]) -> Control {
        if !self.mechanisms().iter().any(|offered| offered == mechanism) {
            tracing::warn!(peer = %self.peer, mechanism, "stream connection: SASL mechanism not offered");
            encode::sasl_authenticate(
                &mut self.out,
                correlation_id,
                counted(&self.broker, code::SASL_MECHANISM_NOT_SUPPORTED),
            );
            return Control::Continue;
        }
        let from_loopback = self.peer.ip().is_loopback();
        let (user, login) = if mechanism == "EXTERNAL" {
            // The response is not looked at: the certificate is the credential.
            let Some(user) = self.certificate_user.clone().flatten() else {
                tracing::warn!(peer = %self.peer, "stream EXTERNAL login refused: no name found in the client certificate");
                encode::sasl_authenticate(
                    &mut self.out,
                    correlation_id,
                    counted(&self.broker, code::AUTHENTICATION_FAILURE),
                );
                return Control::Close;
            };
            let login = self.broker.authenticate_trusted(&user, from_loopback);
            (user, login)
        } else {
            let Some(credentials) = parse_plain(data) else {
                encode::sasl_authenticate(
                    &mut self.out,
                    correlation_id,
                    counted(&self.broker, code::SASL_ERROR),
                );
                return Control::Continue;
            };
            let login =
                self.broker
                    .authenticate(&credentials.user, &credentials.password, from_loopback);
            (credentials.user, login)
        };
        match login {
            Ok(_) => {
                encode::sasl_authenticate(&mut self.out, correlation_id, code::OK);
                encode::tune(&mut self.out, self.config.frame_max, self.config.heartbeat);
                self.stage = Stage::Authenticated(user);
                Control::Continue
            }
            Err(failure) => {
                let failure_code = match failure {
                    warren_core::broker::AuthFailure::LoopbackOnly => {
                        code::AUTHENTICATION_FAILURE_LOOPBACK
                    }
                    _ => code::AUTHENTICATION_FAILURE,
                };
                tracing::warn!(peer = %self.peer, %user, mechanism, reason = %failure, "stream connection refused: authentication failed");
                encode::sasl_authenticate(
                    &mut self.out,
                    correlation_id,
                    counted(&self.broker, failure_code),
                );
                Control::Close
            }
        }
    }

    fn open(&mut self, correlation_id: u32, user: &str, vhost: &str) -> Control {
        // The vhost's and the user's max-connections are checked with the vhost, before
        // the open is answered; the driver registers the connection once open.
        let opened = self.broker.open_vhost(user, vhost).and_then(|found| {
            self.broker
                .connections()
                .admits(vhost, user)
                .map_err(warren_core::CoreError::from)?;
            Ok(found)
        });
        match opened {
            Ok(found) => {
                self.vhost = Some(found);
                self.stage = Stage::Open(user.to_owned());
                self.frame_max = self.negotiated_frame_max;
                let (host, port) = self.advertised();
                let properties = [
                    ("advertised_host".to_owned(), host),
                    ("advertised_port".to_owned(), port.to_string()),
                ];
                encode::open(&mut self.out, correlation_id, code::OK, &properties);
                Control::Continue
            }
            Err(error) => {
                tracing::warn!(peer = %self.peer, %user, %vhost, %error, "stream connection refused");
                encode::open(
                    &mut self.out,
                    correlation_id,
                    counted(&self.broker, code::VIRTUAL_HOST_ACCESS_FAILURE),
                    &[],
                );
                Control::Close
            }
        }
    }

    /// The host and port clients are told to connect to.
    fn advertised(&self) -> (String, u16) {
        (
            self.config
                .advertised_host
                .clone()
                .unwrap_or_else(|| self.local.ip().to_string()),
            self.config.advertised_port.unwrap_or(self.local.port()),
        )
    }

    fn exchange_versions(&mut self, correlation_id: u32, commands: &[(u16, u16, u16)]) {
        if let Some((_, _, max)) = commands.iter().find(|(k, _, _)| *k == key::DELIVER) {
            self.deliver_version = (*max).clamp(1, 2);
        }
        encode::command_versions(&mut self.out, correlation_id, COMMAND_VERSIONS);
    }

    fn vhost(&self) -> (&Arc<VHost>, &str) {
        match (&self.vhost, &self.stage) {
            (Some(vhost), Stage::Open(user)) => (vhost, user),
            _ => unreachable!("only called once open"),
        }
    }

    fn handle_open(&mut self, request: Request) -> Control {
        match request {
            Request::ExchangeCommandVersions {
                correlation_id,
                commands,
            } => self.exchange_versions(correlation_id, &commands),
            Request::Create {
                correlation_id,
                stream,
                arguments,
            } => {
                let (vhost, user) = self.vhost();
                let answer = match vhost.create_stream(user, &stream, &arguments) {
                    Ok(StreamCreated::Created(_)) => code::OK,
                    Ok(StreamCreated::Existed(_)) => code::STREAM_ALREADY_EXISTS,
                    Err(error) => {
                        tracing::info!(%stream, %error, "stream not created");
                        if error.kind == ErrorKind::PreconditionFailed
                            && vhost.queue(&stream).is_some()
                        {
                            code::STREAM_ALREADY_EXISTS
                        } else {
                            error_code(&error)
                        }
                    }
                };
                encode::response(
                    &mut self.out,
                    key::CREATE,
                    correlation_id,
                    counted(&self.broker, answer),
                );
            }
            Request::Delete {
                correlation_id,
                stream,
            } => {
                let (vhost, user) = self.vhost();
                let answer = match vhost.delete_stream(user, &stream) {
                    Ok(()) => code::OK,
                    Err(error) => error_code(&error),
                };
                encode::response(
                    &mut self.out,
                    key::DELETE,
                    correlation_id,
                    counted(&self.broker, answer),
                );
            }
            Request::Metadata {
                correlation_id,
                streams,
            } => self.metadata(correlation_id, &streams),
            Request::StreamStats {
                correlation_id,
                stream,
            } => {
                let (vhost, user) = self.vhost();
                match vhost.stream_for(user, warren_core::access::Access::Read, &stream) {
                    Ok(log) => {
                        let stats = log.stats();
                        let first = if stats.next_offset > stats.first_offset {
                            stats.first_offset as i64
                        } else {
                            -1
                        };
                        let last = stats.last_chunk_offset.map_or(-1, |o| o as i64);
                        encode::stream_stats(
                            &mut self.out,
                            correlation_id,
                            code::OK,
                            &[
                                ("first_chunk_id", first),
                                ("last_chunk_id", last),
                                ("committed_chunk_id", last),
                            ],
                        );
                    }
                    Err(error) => encode::stream_stats(
                        &mut self.out,
                        correlation_id,
                        counted(&self.broker, error_code(&error)),
                        &[],
                    ),
                }
            }
            Request::Route {
                correlation_id,
                routing_key,
                super_stream,
            } => {
                let (vhost, user) = self.vhost();
                let (answer, streams) = match vhost.super_stream_for(
                    user,
                    warren_core::access::Access::Read,
                    &super_stream,
                ) {
                    Ok(found) => (code::OK, found.route(&routing_key)),
                    Err(error) => (error_code(&error), Vec::new()),
                };
                encode::response_streams(
                    &mut self.out,
                    key::ROUTE,
                    correlation_id,
                    counted(&self.broker, answer),
                    &streams,
                );
            }
            Request::Partitions {
                correlation_id,
                super_stream,
            } => {
                let (vhost, user) = self.vhost();
                let (answer, streams) = match vhost.super_stream_for(
                    user,
                    warren_core::access::Access::Read,
                    &super_stream,
                ) {
                    Ok(found) => (code::OK, found.partition_names()),
                    Err(error) => (error_code(&error), Vec::new()),
                };
                encode::response_streams(
                    &mut self.out,
                    key::PARTITIONS,
                    correlation_id,
                    counted(&self.broker, answer),
                    &streams,
                );
            }
            Request::CreateSuperStream {
                correlation_id,
                name,
                partitions,
                binding_keys,
                arguments,
            } => {
                let (vhost, user) = self.vhost();
                let answer = match vhost.create_super_stream(
                    user,
                    &name,
                    &partitions,
                    &binding_keys,
                    &arguments,
                ) {
                    Ok(()) => code::OK,
                    Err(error)
                        if error.kind == ErrorKind::PreconditionFailed
                            && vhost.streams().super_streams().get(&name).is_some() =>
                    {
                        code::STREAM_ALREADY_EXISTS
                    }
                    Err(error) => {
                        tracing::info!(super_stream = %name, %error, "super stream not created");
                        error_code(&error)
                    }
                };
                encode::response(
                    &mut self.out,
                    key::CREATE_SUPER_STREAM,
                    correlation_id,
                    counted(&self.broker, answer),
                );
            }
            Request::DeleteSuperStream {
                correlation_id,
                name,
            } => {
                let (vhost, user) = self.vhost();
                let answer = match vhost.delete_super_stream(user, &name) {
                    Ok(()) => code::OK,
                    Err(error) => error_code(&error),
                };
                encode::response(
                    &mut self.out,
                    key::DELETE_SUPER_STREAM,
                    correlation_id,
                    counted(&self.broker, answer),
                );
            }
            Request::ConsumerUpdateResponse {
                correlation_id,
                offset,
                ..
            } => self.consumer_update_response(correlation_id, offset),
            Request::Unknown { key, version } => {
                tracing::debug!(peer = %self.peer, key, version, "unknown stream command");
                self.close(
                    code::UNKNOWN_FRAME,
                    &format!("unknown command key {key:#06x}"),
                );
                return Control::Close;
            }
            other => return self.handle_stream_command(other),
        }
        Control::Continue
    }

    /// Metadata: each stream's leader and replicas. A stream replicated on a cluster names
    /// the nodes of its placement that run (replicas serve reads from their own copy); a
    /// stream whose leader is down is `STREAM_NOT_AVAILABLE` until a new one takes over. A
    /// single node names itself.
    fn metadata(&mut self, correlation_id: u32, streams: &[String]) {
        let (vhost, _) = self.vhost();
        let advertised = self.advertised();
        let durability = vhost.durability();
        let local = durability.local_node().unwrap_or_default().to_owned();
        let endpoint = |node: &str| -> Option<(String, u16)> {
            if node == local {
                Some(advertised.clone())
            } else {
                durability.stream_endpoint(node)
            }
        };
        // Brokers by node, each with its reference (its place in this list).
        let mut brokers: Vec<(String, (String, u16))> = Vec::new();
        let mut reference = |node: &str, at: (String, u16)| -> u16 {
            match brokers.iter().position(|(known, _)| known == node) {
                Some(found) => found as u16,
                None => {
                    brokers.push((node.to_owned(), at));
                    (brokers.len() - 1) as u16
                }
            }
        };
        let mut answers: Vec<(u16, u16, Vec<u16>)> = Vec::with_capacity(streams.len());
        for name in streams {
            let Some(log) = vhost.streams().get(name) else {
                answers.push((code::STREAM_DOES_NOT_EXIST, u16::MAX, Vec::new()));
                continue;
            };
            let Some(placement) = log.placement() else {
                answers.push((code::OK, reference(&local, advertised.clone()), Vec::new()));
                continue;
            };
            let replicas: Vec<u16> = placement
                .replicas()
                .filter_map(|node| endpoint(node).map(|at| reference(node, at)))
                .collect();
            match endpoint(&placement.leader) {
                Some(at) => answers.push((code::OK, reference(&placement.leader, at), replicas)),
                None => answers.push((code::STREAM_NOT_AVAILABLE, u16::MAX, replicas)),
            }
        }
        let entries: Vec<encode::StreamMetadata<'_>> = streams
            .iter()
            .zip(&answers)
            .map(|(name, (code, leader, replicas))| encode::StreamMetadata {
                name,
                code: *code,
                leader: *leader,
                replicas,
            })
            .collect();
        let brokers: Vec<(u16, &str, u32)> = brokers
            .iter()
            .enumerate()
            .map(|(at, (_, (host, port)))| (at as u16, host.as_str(), u32::from(*port)))
            .collect();
        encode::metadata(&mut self.out, correlation_id, &brokers, &entries);
    }
}
