//! CONNECT: client identifier rules, authentication and vhost, takeover of a client
//! identifier held by another connection, and resuming or discarding a stored session.

use std::sync::Arc;

use rand::Rng;
use warren_core::access::Access;
use warren_core::access::ResourceKind;
use warren_core::broker::AuthFailure;
use warren_core::consumer::ConsumerSpec;
use warren_core::queue_type::QueueInstance;
use warren_core::value::{Table, Value};
use warren_core::ErrorKind;

use super::{queue_name, Connected, Control, End, Session, Subscription};
use crate::codec::{
    binding_key_to_mqtt_filter, validate_topic_name, ConnAck, Connect, ConnectReturnCode, Packet,
    QoS,
};
use crate::outbox::SubscriptionSink;
use warren_core::exchange::DestinationName;

impl Session {
    pub(super) fn connect(&mut self, connect: Connect) -> Control {
        let Connect {
            protocol,
            keep_alive,
            client_id,
            clean_session,
            last_will,
            username,
            password,
            properties,
        } = connect;
        let mut v5 = protocol.is_v5().then(|| {
            // From here on the client's packets are read, and ours written, as MQTT 5.
            self.protocol = protocol;
            self.outbox.set_protocol(protocol);
            super::v5_session::SessionV5::from_connect(properties.as_deref())
        });
        if self.over_capacity {
            return self.refuse(
                ConnectReturnCode::ServerUnavailable,
                "mqtt.max_connections is reached",
            );
        }
        if let Some(method) = properties
            .as_deref()
            .and_then(|p| p.authentication_method.as_deref())
        {
            // No enhanced authentication (section 4.12 of MQTT 5).
            return self.refuse_with(
                ConnectReturnCode::BadUserNamePassword,
                crate::codec::reason::BAD_AUTHENTICATION_METHOD,
                &format!("authentication method {method:?} is not supported"),
            );
        }
        // `mqtt.max_keep_alive`, as Mosquitto's `max_keepalive`: an MQTT 5 client asking for
        // more (or for none) is told the maximum in Server Keep Alive and held to it; MQTT
        // 3.1.1 has no way to say so, and is refused.
        let mut keep_alive = keep_alive;
        if let Some(max) = self.context.config.max_keep_alive {
            if keep_alive == 0 || keep_alive > max {
                match v5.as_mut() {
                    Some(v5) => {
                        v5.server_keep_alive = true;
                        keep_alive = max;
                    }
                    None => {
                        return self.refuse(
                            ConnectReturnCode::IdentifierRejected,
                            &format!(
                                "keep-alive {keep_alive} s is off or above mqtt.max_keep_alive \
                                 {max} s"
                            ),
                        )
                    }
                }
            }
        }
        // MQTT 5: clean start discards a stored session, and the session expiry interval
        // says whether the session outlives the connection; 3.1.1's clean session is both.
        let clean_start = clean_session;
        let clean_session = match &v5 {
            Some(v5) => v5.session_expiry == 0,
            None => clean_session,
        };
        if let Some(will) = &last_will {
            if let Err(problem) = validate_topic_name(&will.topic) {
                let text = format!("will topic {:?}: {problem}", will.topic);
                return self.refuse_with(
                    ConnectReturnCode::ServerUnavailable,
                    crate::codec::reason::TOPIC_NAME_INVALID,
                    &text,
                );
            }
        }
        // The will lives as long as the connection: copy it out of the read buffer, which
        // it would otherwise keep allocated for the connection's whole life.
        let last_will = last_will.map(|will| crate::codec::LastWill {
            message: bytes::Bytes::copy_from_slice(&will.message),
            ..will
        });
        if let Some(v5) = v5.as_mut() {
            v5.will_delay = last_will
                .as_ref()
                .and_then(|will| will.properties.as_deref())
                .and_then(|p| p.will_delay_interval)
                .unwrap_or(0);
        }
        let client_id = if client_id.is_empty() {
            if let Some(v5) = v5.as_mut() {
                // MQTT 5 lets the server assign one whatever the session (section 3.1.3.1).
                v5.assigned_client_identifier = true;
            } else if !clean_session {
                // MQTT-3.1.3-8: a persistent session needs an identifier to resume by.
                return self.refuse(
                    ConnectReturnCode::IdentifierRejected,
                    "empty client identifier with clean session = 0",
                );
            }
            generated_client_id()
        } else {
            client_id
        };

        let config = Arc::clone(&self.context.config);
        // As RabbitMQ: credentials first, then the certificate (`mqtt.ssl_cert_login`), then
        // the anonymous user. `None` for the password: a trusted login, none is checked.
        let (vhost_name, user, password) = match (username, password) {
            (None, None) if self.certificate_user().is_some() => (
                config.vhost.clone(),
                self.certificate_user().unwrap_or_default().to_string(),
                None,
            ),
            (None, None) if config.allow_anonymous => (
                config.vhost.clone(),
                config.default_user.clone(),
                Some(config.default_pass.clone()),
            ),
            (None, None) => {
                return self.refuse(
                    ConnectReturnCode::BadUserNamePassword,
                    "no credentials provided and mqtt.allow_anonymous is false",
                )
            }
            (Some(username), Some(password)) => {
                let Ok(password) = String::from_utf8(password.to_vec()) else {
                    return self.refuse(
                        ConnectReturnCode::BadUserNamePassword,
                        "password is not valid UTF-8",
                    );
                };
                match username.split_once(':') {
                    Some((vhost, user)) => (vhost.to_string(), user.to_string(), Some(password)),
                    None => (config.vhost.clone(), username, Some(password)),
                }
            }
            (Some(_), None) | (None, Some(_)) => {
                return self.refuse(
                    ConnectReturnCode::BadUserNamePassword,
                    "a user name without a password or a password without a user name",
                )
            }
        };
        let login = match &password {
            Some(password) => self
                .context
                .broker
                .authenticate(&user, password, self.from_loopback),
            None => self
                .context
                .broker
                .authenticate_trusted(&user, self.from_loopback),
        };
        if let Err(failure) = login {
            let code = match failure {
                AuthFailure::LoopbackOnly => ConnectReturnCode::NotAuthorized,
                AuthFailure::UnknownUser | AuthFailure::BadPassword => {
                    ConnectReturnCode::BadUserNamePassword
                }
            };
            return self.refuse(code, &format!("login of user '{user}' failed: {failure}"));
        }
        let vhost = match self.context.broker.open_vhost(&user, &vhost_name) {
            Ok(vhost) => vhost,
            Err(error) => {
                // An unknown vhost reads like a bad user name ("vhost:user"), as in RabbitMQ;
                // a user without permissions there is not authorized.
                let code = if self.context.broker.vhost(&vhost_name).is_none() {
                    ConnectReturnCode::BadUserNamePassword
                } else {
                    ConnectReturnCode::NotAuthorized
                };
                debug_assert!(error.kind == ErrorKind::NotAllowed);
                return self.refuse(code, &error.message);
            }
        };
        // The vhost's and the user's max-connections, before anything changes (a client
        // identifier held elsewhere is not taken over): CONNACK 5 (MQTT 5: 0x97 quota
        // exceeded), as RabbitMQ.
        if let Err(refusal) = self
            .context
            .broker
            .connections()
            .admits(vhost.name(), &user)
        {
            return self.refuse_over_limit(&refusal);
        }
        if vhost.exchange(&config.exchange).is_none() {
            // The vhost cannot carry MQTT traffic: the service is up but not usable there.
            return self.refuse(
                ConnectReturnCode::ServerUnavailable,
                &format!(
                    "exchange '{}' (mqtt.exchange) does not exist in vhost '{}'",
                    config.exchange,
                    vhost.name()
                ),
            );
        }
        let ended = super::registry::EndSender::new(Arc::clone(&self.outbox));
        let key = (vhost.name().to_string(), client_id.clone());
        // RabbitMQ's rule for the will of the connection taken over: published, unless this
        // connection resumes the session and has a will delay of its own.
        let send_will = clean_start || v5.as_ref().is_none_or(|v5| v5.will_delay == 0);
        let takeover = self
            .context
            .registry
            .claim(key, self.connection_id, Arc::clone(&self.outbox))
            .or_else(|| {
                // On a cluster another node may hold the identifier: it is asked to close
                // that connection first (as RabbitMQ does across its nodes).
                super::cluster::takeover_elsewhere(&self.context, &vhost, &client_id, send_will)
            })
            .map(|takeover| takeover.send_will(send_will));
        self.connected = Some(Box::new(Connected {
            vhost,
            user: user.into_boxed_str(),
            client_id,
            clean_session,
            clean_start,
            v5,
            protocol,
            keep_alive,
            will: last_will.map(Box::new),
            filters: Vec::new(),
            consumers: [None, None, None],
            publisher: Default::default(),
            inbound_qos2: Vec::new(),
            ended: Some(ended),
            accepted: false,
            session_present: false,
        }));
        if protocol.is_v5() {
            let (receive_maximum, limits) =
                super::v5_session::outbound_limits(properties.as_deref(), self.connection_id);
            self.outbox.configure_v5(receive_maximum, limits);
        }
        match takeover {
            Some(takeover) if takeover.is_elsewhere() => Control::AwaitTakeover(takeover),
            Some(takeover) => {
                tracing::info!(
                    connection = self.connection_id,
                    client_id = self.client_id().unwrap_or(""),
                    "MQTT client identifier in use: taking over the existing connection"
                );
                Control::AwaitTakeover(takeover)
            }
            None => self.resume_connect(),
        }
    }

    /// Finishes CONNECT once no other connection holds the client identifier: resumes or
    /// discards the stored session, answers CONNACK and starts consuming.
    pub fn resume_connect(&mut self) -> Control {
        let connection_id = self.connection_id;
        let addresses = self.take_addresses();
        let Some(connected) = self.connected.as_deref_mut() else {
            return Control::Close(End::Abnormal("CONNECT state lost".into()));
        };
        let key = (
            connected.vhost.name().to_string(),
            connected.client_id.clone(),
        );
        let stored = self.context.registry.take_session(&key);
        // The client is back: a delayed will of its previous connection is not published
        // (MQTT 5 section 3.1.3.2.2), nor kept for after a restart.
        if self.context.registry.cancel_will(&key) {
            self.context
                .retained
                .session_remove(&key.0, &key.1, super::recovery::WILL_RECORD);
        }
        let mut resume_released = Vec::new();
        let existing_queues: Vec<(QoS, Arc<dyn QueueInstance>)> =
            [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce]
                .into_iter()
                .filter_map(|qos| {
                    connected
                        .vhost
                        .queue_instance(&queue_name(&connected.client_id, qos))
                        .map(|queue| (qos, queue))
                })
                .collect();
        let retained = &self.context.retained;
        let mut resume_shared = Vec::new();
        if connected.clean_start {
            // A clean session starts afresh: whatever a previous session left goes
            // (MQTT-3.1.2-6), its shared subscription groups too.
            for (_, queue) in &existing_queues {
                connected.vhost.remove_queue_instance(queue);
            }
            if let Some(stored) = &stored {
                super::shared::leave_groups(
                    &self.context,
                    &connected.vhost,
                    &connected.client_id,
                    Some(&connected.user),
                    &stored.shared,
                );
            }
            let (vhost, client_id) = (connected.vhost.name(), &connected.client_id);
            if !retained.qos2_pending(vhost, client_id).is_empty()
                || !retained.outbound_qos2_pending(vhost, client_id).is_empty()
            {
                retained.forget_session(vhost, client_id);
            }
        } else {
            // PUBREL owed for QoS 2 deliveries the client received, in PUBREC order: after a
            // restart only the retained store's log knows them.
            resume_released =
                retained.outbound_qos2_pending(connected.vhost.name(), &connected.client_id);
            connected.session_present =
                stored.is_some() || !existing_queues.is_empty() || !resume_released.is_empty();
            match stored {
                // Recovered at boot with only its shared subscriptions: the rest comes
                // from the bindings and the log, as for a session without stored state.
                Some(stored) if stored.recovered => {
                    connected.filters = subscriptions_from_bindings(
                        &connected.vhost,
                        &self.context.config.exchange,
                        &connected.client_id,
                    );
                    connected.inbound_qos2 =
                        retained.qos2_pending(connected.vhost.name(), &connected.client_id);
                    resume_shared = stored.shared;
                }
                Some(stored) => {
                    connected.filters = stored.subscriptions;
                    connected.inbound_qos2 = stored.inbound_qos2;
                    resume_shared = stored.shared;
                    // The same set when the log keeps it; the only one when it does not.
                    for packet_id in stored.outbound_released {
                        if !resume_released.contains(&packet_id) {
                            resume_released.push(packet_id);
                        }
                    }
                }
                // Queues without stored state (the broker restarted, and the disk store kept
                // durable queues and bindings): the subscriptions are the bindings.
                None if !existing_queues.is_empty() => {
                    connected.filters = subscriptions_from_bindings(
                        &connected.vhost,
                        &self.context.config.exchange,
                        &connected.client_id,
                    );
                    connected.inbound_qos2 =
                        retained.qos2_pending(connected.vhost.name(), &connected.client_id);
                }
                // A publish-only persistent session has no queues; after a restart its
                // unreleased QoS 2 identifiers are all that is left of it.
                None => {
                    connected.inbound_qos2 =
                        retained.qos2_pending(connected.vhost.name(), &connected.client_id);
                    connected.session_present |= !connected.inbound_qos2.is_empty();
                }
            }
        }
        let registration = register_connection(
            &self.context.broker,
            connection_id,
            connected,
            (addresses, self.tls),
            &self.outbox,
        );
        let registration = match registration {
            Ok(registration) => registration,
            // Another connection took the last place since CONNECT was checked.
            Err(refusal) => return self.refuse_over_limit(&refusal),
        };
        let Some(connected) = self.connected.as_deref_mut() else {
            return Control::Close(End::Abnormal("CONNECT state lost".into()));
        };
        connected.accepted = true;
        self.registration = Some(registration);
        // MQTT 3.1 has no session-present flag; its byte must be 0.
        let session_present =
            connected.session_present && connected.protocol != crate::codec::ProtocolLevel::V3_1;
        let mut connack = ConnAck::new(session_present, ConnectReturnCode::Accepted);
        if let Some(v5) = connected.v5.as_ref() {
            let facts = super::v5_session::ConnAckFacts {
                assigned_client_identifier: v5
                    .assigned_client_identifier
                    .then_some(connected.client_id.as_str()),
                server_keep_alive: v5.server_keep_alive.then_some(connected.keep_alive),
                response_information: v5
                    .response_information
                    .then(|| super::v5_session::response_information(&connected.client_id)),
            };
            connack.properties = Some(Box::new(super::v5_session::connack_properties(
                self.context.config.max_packet_size,
                facts,
            )));
        }
        self.outbox.send(&Packet::ConnAck(connack));
        tracing::debug!(
            connection = connection_id,
            client_id = %connected.client_id,
            user = %connected.user,
            vhost = connected.vhost.name(),
            session_present,
            "MQTT connection accepted"
        );
        self.outbox
            .set_dollar_filters(super::dollar_filters(&connected.filters));
        // PUBREL again for QoS 2 deliveries released before the client went away, before
        // any new delivery.
        self.outbox.resume_released(&resume_released);
        if !connected.clean_start {
            for (qos, _) in existing_queues {
                if let Err(reason) = self.ensure_consumer(qos) {
                    tracing::warn!(
                        connection = connection_id,
                        "cannot resume MQTT subscription queue: {reason}"
                    );
                }
            }
            self.resume_shared(resume_shared);
        }
        Control::Continue
    }

    /// Refuses CONNECT over a `max-connections` limit as RabbitMQ 4.x does: 3.1 and 3.1.1
    /// CONNACK 5 (not authorized), MQTT 5 reason code 0x97 (quota exceeded).
    fn refuse_over_limit(
        &mut self,
        refusal: &warren_core::resource_limits::ConnectionLimitReached,
    ) -> Control {
        const QUOTA_EXCEEDED: u8 = 0x97;
        self.refuse_with(
            ConnectReturnCode::NotAuthorized,
            QUOTA_EXCEEDED,
            &refusal.text(),
        )
    }

    /// Refuses CONNECT with a return code and closes (MQTT-3.2.2-5).
    fn refuse(&mut self, code: ConnectReturnCode, reason: &str) -> Control {
        self.refuse_with(code, code.reason_code(), reason)
    }

    /// Refuses CONNECT with `code` (3.1.1) or `reason_code` (MQTT 5, with the reason as its
    /// reason string) and closes.
    fn refuse_with(&mut self, code: ConnectReturnCode, reason_code: u8, reason: &str) -> Control {
        tracing::warn!(
            connection = self.connection_id,
            code = code as u8,
            reason_code,
            "MQTT connection refused: {reason}"
        );
        let mut connack = ConnAck::new(false, code);
        if self.protocol.is_v5() {
            connack.reason_code = Some(reason_code);
            connack.properties = Some(Box::new(crate::codec::Properties {
                reason_string: Some(reason.to_string()),
                ..crate::codec::Properties::default()
            }));
        }
        self.outbox.send(&Packet::ConnAck(connack));
        Control::Close(End::Abnormal(reason.to_string()))
    }

    /// Starts consuming the subscription queue of `qos` unless this connection already does.
    pub(super) fn ensure_consumer(&mut self, qos: QoS) -> Result<(), String> {
        let connection_id = self.connection_id;
        let Some(connected) = self.connected.as_deref_mut() else {
            return Err("not connected".into());
        };
        let slot = usize::from(qos.as_u8());
        if connected.consumers[slot].is_some() {
            return Ok(());
        }
        let name = queue_name(&connected.client_id, qos);
        let actor = warren_core::vhost::Actor {
            user: &connected.user,
            connection_id,
        };
        let queue = connected
            .vhost
            .queue_instance_for(actor, &name, Access::Read)
            .map_err(|e| e.message)?;
        let sink = SubscriptionSink::new(Arc::clone(&self.outbox), Arc::clone(&queue), qos);
        let spec = ConsumerSpec {
            tag: Arc::from(connected.client_id.as_str()),
            connection_id,
            needs_settlement: qos != QoS::AtMostOnce,
            exclusive: false,
            priority: 0,
            arguments: Table::new(),
        };
        let consumer_id = connected
            .vhost
            .consume_instance(&queue, spec, sink)
            .map_err(|e| e.message)?;
        connected.consumers[slot] = Some(Subscription { queue, consumer_id });
        Ok(())
    }

    /// Whether the connected user may read the subscription queue of `qos` (checked before
    /// granting a subscription, as RabbitMQ checks configure, write and read).
    pub(super) fn may_read_queue(&self, qos: QoS) -> Result<(), String> {
        let connected = self.connected.as_deref().ok_or("not connected")?;
        connected
            .vhost
            .check(
                &connected.user,
                Access::Read,
                ResourceKind::Queue,
                &queue_name(&connected.client_id, qos),
            )
            .map_err(|e| e.message)
    }
}

/// The subscriptions of a client as its queues' bindings from the MQTT exchange say: each
/// binding key translated back to a filter, with the QoS of the queue it binds.
fn subscriptions_from_bindings(
    vhost: &warren_core::vhost::VHost,
    exchange: &str,
    client_id: &str,
) -> Vec<(String, QoS)> {
    let Some(exchange) = vhost.exchange(exchange) else {
        return Vec::new();
    };
    // Only this client's queues' bindings: a broker restarted under a million persistent
    // sessions must not list every binding for each client that comes back.
    [QoS::AtMostOnce, QoS::AtLeastOnce, QoS::ExactlyOnce]
        .into_iter()
        .flat_map(|qos| {
            exchange
                .bindings_to(&DestinationName::Queue(queue_name(client_id, qos)))
                .into_iter()
                .map(move |binding| {
                    (
                        binding_key_to_mqtt_filter(&binding.routing_key).into_owned(),
                        qos,
                    )
                })
        })
        .collect()
}

/// Registers an accepted connection for operators (management API, warrenctl). The client
/// identifier is the user-provided connection name and the `client_id` client property, as
/// RabbitMQ shows MQTT connections; an operator's close wakes the driver.
fn register_connection(
    broker: &warren_core::Broker,
    connection_id: u64,
    connected: &super::Connected,
    ((peer, local), tls): ((std::net::SocketAddr, std::net::SocketAddr), bool),
    outbox: &Arc<crate::outbox::Outbox>,
) -> Result<
    warren_core::connections::ConnectionHandle,
    warren_core::resource_limits::ConnectionLimitReached,
> {
    // Built at its exact size: every idle connection keeps this table.
    let client_properties = Table(vec![(
        "client_id".to_string(),
        Value::string(&connected.client_id),
    )]);
    let outbox = Arc::clone(outbox);
    let handle = broker.register_connection(
        warren_core::connections::ConnectionInfo {
            id: connection_id,
            protocol: match connected.protocol {
                crate::codec::ProtocolLevel::V3_1 => "MQTT 3.1",
                crate::codec::ProtocolLevel::V3_1_1 => "MQTT 3.1.1",
                crate::codec::ProtocolLevel::V5 => "MQTT 5.0",
            }
            .to_string(),
            user: connected.user.to_string(),
            vhost: connected.vhost.name().to_string(),
            peer,
            local,
            client_properties,
            connection_name: Some(connected.client_id.clone()),
            tls,
            frame_max: 0,
            channel_max: 0,
            heartbeat: connected.keep_alive,
            connected_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        },
        Box::new(move || outbox.signal(crate::outbox::Signal::OperatorClose)),
    )?;
    handle.set_channels(1);
    Ok(handle)
}

/// A client identifier for a client that sent none: `warren-` and 22 random characters.
fn generated_client_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    let mut id = String::with_capacity(29);
    id.push_str("warren-");
    for _ in 0..22 {
        id.push(char::from(ALPHABET[rng.gen_range(0..ALPHABET.len())]));
    }
    id
}
