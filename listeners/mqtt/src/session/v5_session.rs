//! The MQTT 5 parts of a session: what CONNECT asked for, CONNACK's properties, and the
//! checks an MQTT 5 PUBLISH goes through before the shared publish path (topic aliases,
//! receive maximum, payload format).

use super::shared::SharedSubscription;
use super::{Control, Session};
use crate::codec::{
    reason, Packet, Properties, PubAck, PubRec, Publish, QoS, MAX_REMAINING_LENGTH,
};
use crate::outbox::OutboundV5;
use warren_core::value::{Table, Value};

/// The highest topic alias a client may use towards the server (RabbitMQ's default
/// `mqtt.topic_alias_maximum`).
pub const TOPIC_ALIAS_MAXIMUM: u16 = 16;

/// The most QoS 1/2 publishes a client may have unacknowledged towards the server. Above
/// it the client is disconnected with 0x93 (MQTT-3.3.4-9).
pub const RECEIVE_MAXIMUM: u16 = 1024;

/// A session expiry interval meaning "never" (section 3.1.2.11.2).
pub const SESSION_NEVER_EXPIRES: u32 = u32::MAX;

/// What an MQTT 5 session keeps beside the 3.1.1 state.
#[derive(Default)]
pub(super) struct SessionV5 {
    /// Seconds the session outlives the connection (0: it ends with it).
    pub(super) session_expiry: u32,
    /// Whether the server made up the client identifier (sent back in CONNACK).
    pub(super) assigned_client_identifier: bool,
    /// Topic aliases and shared subscriptions, allocated on first use: an idle subscriber
    /// with neither carries one pointer, not two empty vectors.
    lists: Option<Box<SessionV5Lists>>,
    /// A DISCONNECT went out: nothing more is said to the client.
    pub(super) disconnect_sent: bool,
    /// Set once the client holds a "no local" subscription: its publishes then carry the
    /// connection's id, so its own deliveries can tell them apart.
    pub(super) no_local: bool,
    /// The will delay interval in seconds (0: publish the will at once).
    pub(super) will_delay: u32,
    /// The client asked for Response Information (Request Response Information 1).
    pub(super) response_information: bool,
    /// The keep-alive was replaced by `mqtt.max_keep_alive`: CONNACK says so in Server
    /// Keep Alive.
    pub(super) server_keep_alive: bool,
    /// The client asked for no reason strings on acknowledgements (Request Problem
    /// Information 0, MQTT-3.1.2-29): only CONNACK, PUBLISH and DISCONNECT carry them.
    pub(super) no_problem_information: bool,
}

/// The lists of [`SessionV5`] most sessions never fill.
#[derive(Default)]
pub(super) struct SessionV5Lists {
    /// Topic aliases the client set, by alias.
    pub(super) aliases: Vec<(u16, String)>,
    /// Shared subscriptions (`$share/GROUP/filter`) this member holds.
    pub(super) shared: Vec<SharedSubscription>,
}

impl SessionV5 {
    /// The shared subscriptions this member holds.
    pub(super) fn shared(&self) -> &[SharedSubscription] {
        self.lists.as_deref().map_or(&[], |lists| &lists.shared)
    }

    /// The topic aliases the client set.
    pub(super) fn aliases(&self) -> &[(u16, String)] {
        self.lists.as_deref().map_or(&[], |lists| &lists.aliases)
    }

    /// The lists, allocated on first use.
    pub(super) fn lists_mut(&mut self) -> &mut SessionV5Lists {
        self.lists.get_or_insert_default()
    }

    /// Takes the shared subscriptions (the session ends).
    pub(super) fn take_shared(&mut self) -> Vec<SharedSubscription> {
        self.lists
            .as_deref_mut()
            .map(|lists| std::mem::take(&mut lists.shared))
            .unwrap_or_default()
    }

    /// The state for a CONNECT's properties.
    pub(super) fn from_connect(properties: Option<&Properties>) -> SessionV5 {
        SessionV5 {
            session_expiry: properties
                .and_then(|p| p.session_expiry_interval)
                .unwrap_or(0),
            response_information: properties.and_then(|p| p.request_response_information)
                == Some(1),
            no_problem_information: properties.and_then(|p| p.request_problem_information)
                == Some(0),
            ..SessionV5::default()
        }
    }
}

/// The client's limits on what the server sends, from its CONNECT: receive maximum
/// (65535 when absent), topic alias maximum (0) and maximum packet size (none).
pub(super) fn outbound_limits(
    properties: Option<&Properties>,
    connection_id: u64,
) -> (u16, OutboundV5) {
    let receive_maximum = properties
        .and_then(|p| p.receive_maximum)
        .unwrap_or(u16::MAX);
    let limits = OutboundV5::new(
        properties.and_then(|p| p.topic_alias_maximum).unwrap_or(0),
        properties.and_then(|p| p.maximum_packet_size),
        connection_id,
    );
    (receive_maximum, limits)
}

/// The topic prefix a client that asks for Response Information is given (section
/// 3.2.2.3.15): its own branch under `responses/`, to build response topics from.
pub fn response_information(client_id: &str) -> String {
    format!("responses/{client_id}")
}

/// What CONNACK tells an MQTT 5 client about its own session beside the server's limits.
pub(super) struct ConnAckFacts<'a> {
    /// The client identifier the server made up, if it did.
    pub(super) assigned_client_identifier: Option<&'a str>,
    /// The keep-alive the server holds the client to, when it is not the client's.
    pub(super) server_keep_alive: Option<u16>,
    /// The response information, when the client asked for it.
    pub(super) response_information: Option<String>,
}

/// CONNACK's properties: what the server accepts and offers (section 3.2.2.3 of MQTT 5).
pub(super) fn connack_properties(max_packet_size: usize, facts: ConnAckFacts<'_>) -> Properties {
    let ConnAckFacts {
        assigned_client_identifier,
        server_keep_alive,
        response_information,
    } = facts;
    Properties {
        receive_maximum: Some(RECEIVE_MAXIMUM),
        topic_alias_maximum: Some(TOPIC_ALIAS_MAXIMUM),
        // The codec bounds the remaining length; a client counts the whole packet, fixed
        // header (at most 5 bytes) included.
        maximum_packet_size: (max_packet_size < MAX_REMAINING_LENGTH)
            .then(|| u32::try_from(max_packet_size + 5).unwrap_or(u32::MAX)),
        retain_available: Some(1),
        wildcard_subscription_available: Some(1),
        subscription_identifier_available: Some(1),
        shared_subscription_available: Some(1),
        assigned_client_identifier: assigned_client_identifier.map(str::to_string),
        server_keep_alive,
        response_information,
        ..Properties::default()
    }
}

impl Session {
    /// Records that the client holds a "no local" subscription.
    pub(super) fn note_no_local(&mut self) {
        let connection_id = self.connection_id;
        let Some(connected) = self.connected.as_deref_mut() else {
            return;
        };
        let Some(v5) = connected.v5.as_mut() else {
            return;
        };
        if v5.no_local {
            return;
        }
        v5.no_local = true;
        // The outbox kept only subscriptions with an identifier or options so far; the
        // others now matter too (they let this connection's own messages through).
        let filters = connected
            .filters
            .iter()
            .map(|(filter, _)| filter.as_str())
            .chain(v5.shared().iter().filter_map(|shared| {
                super::shared::parse_shared(&shared.filter)
                    .and_then(Result::ok)
                    .map(|(_, inner)| inner)
            }));
        self.outbox.record_all_subscriptions(filters, connection_id);
    }

    /// The MQTT 5 checks of an incoming PUBLISH, and its topic alias resolved. `Err` is
    /// what to do instead of publishing: the client was answered (a refusing PUBACK/PUBREC)
    /// or is disconnected with the reason code.
    pub(super) fn publish_v5(&mut self, mut publish: Publish) -> Result<Publish, Control> {
        let unacknowledged = self.unacknowledged_inbound();
        let Some(connected) = self.connected.as_deref_mut() else {
            return Err(Control::Close(super::End::Abnormal(
                "PUBLISH before CONNECT".into(),
            )));
        };
        let properties = publish.properties.as_deref();
        if properties.is_some_and(|p| !p.subscription_identifiers.is_empty()) {
            return Err(self.violation(
                reason::PROTOCOL_ERROR,
                "PUBLISH from a client carries a subscription identifier (MQTT-3.3.4-6)",
            ));
        }
        if let Some(alias) = properties.and_then(|p| p.topic_alias) {
            if alias > TOPIC_ALIAS_MAXIMUM {
                return Err(self.violation(
                    reason::TOPIC_ALIAS_INVALID,
                    &format!(
                        "topic alias {alias} is above the topic alias maximum \
                         {TOPIC_ALIAS_MAXIMUM} (MQTT-3.3.2-9)"
                    ),
                ));
            }
            let v5 = connected.v5.get_or_insert_default();
            if publish.topic.is_empty() {
                match v5.aliases().iter().find(|(known, _)| *known == alias) {
                    Some((_, topic)) => publish.topic.clone_from(topic),
                    None => {
                        return Err(self.violation(
                            reason::PROTOCOL_ERROR,
                            &format!("topic alias {alias} was never set (section 3.3.2.3.4)"),
                        ))
                    }
                }
            } else {
                let aliases = &mut v5.lists_mut().aliases;
                aliases.retain(|(known, _)| *known != alias);
                aliases.push((alias, publish.topic.clone()));
            }
        }
        let fresh = match (publish.qos, publish.packet_id) {
            (QoS::AtMostOnce, _) | (_, None) => false,
            (QoS::AtLeastOnce, Some(_)) => true,
            (QoS::ExactlyOnce, Some(id)) => !connected.inbound_qos2.contains(&id),
        };
        if fresh && unacknowledged >= usize::from(RECEIVE_MAXIMUM) {
            return Err(self.violation(
                reason::RECEIVE_MAXIMUM_EXCEEDED,
                &format!(
                    "more than the receive maximum of {RECEIVE_MAXIMUM} QoS 1/2 publishes \
                     unacknowledged (MQTT-3.3.4-9)"
                ),
            ));
        }
        let properties = publish.properties.as_deref();
        if properties.and_then(|p| p.payload_format_indicator) == Some(1)
            && std::str::from_utf8(&publish.payload).is_err()
        {
            let text = "payload format indicator says UTF-8, the payload is not (MQTT-3.3.2-4)";
            return Err(self.refuse_publish(&publish, reason::PAYLOAD_FORMAT_INVALID, text));
        }
        Ok(publish)
    }

    /// Answers a PUBLISH the server will not take: PUBACK or PUBREC with `code` for QoS 1
    /// and 2, DISCONNECT for QoS 0, which has no acknowledgement to carry it.
    pub(super) fn refuse_publish(&mut self, publish: &Publish, code: u8, text: &str) -> Control {
        tracing::warn!(
            connection = self.connection_id,
            client_id = self.client_id().unwrap_or(""),
            topic = %publish.topic,
            "MQTT publish refused: {text}"
        );
        let quiet = self
            .connected
            .as_deref()
            .and_then(|connected| connected.v5.as_ref())
            .is_some_and(|v5| v5.no_problem_information);
        // MQTT-3.1.2-29: a client that asked for no problem information gets the reason
        // code alone.
        let properties = (!quiet).then(|| {
            Box::new(Properties {
                reason_string: Some(text.to_string()),
                ..Properties::default()
            })
        });
        match (publish.qos, publish.packet_id) {
            (QoS::AtLeastOnce, Some(packet_id)) => {
                self.acknowledge_publish(
                    None,
                    0,
                    Packet::PubAck(PubAck {
                        packet_id,
                        reason_code: code,
                        properties,
                    }),
                );
                Control::Continue
            }
            (QoS::ExactlyOnce, Some(packet_id)) => {
                self.acknowledge_publish(
                    None,
                    0,
                    Packet::PubRec(PubRec {
                        packet_id,
                        reason_code: code,
                        properties,
                    }),
                );
                Control::Continue
            }
            _ => self.violation(code, text),
        }
    }

    /// QoS 1/2 publishes of the client not yet acknowledged, each counted once: QoS 2 ones
    /// until PUBREL (their PUBREC may be held for the disk too), and the PUBACKs and
    /// PUBCOMPs held for the disk. Held PUBRECs are already among the QoS 2 identifiers, and
    /// held PUBRELs belong to the broker's own deliveries.
    fn unacknowledged_inbound(&self) -> usize {
        let qos2 = self
            .connected
            .as_deref()
            .map_or(0, |connected| connected.inbound_qos2.len());
        let held = self.held_acks.as_deref().map_or(0, |held| {
            held.iter()
                .filter(|held| matches!(held.packet, Packet::PubAck(_) | Packet::PubComp(_)))
                .count()
        });
        qos2 + held
    }
}

/// How long an MQTT 5 will waits after the connection ended: the will delay interval, or
/// the session expiry interval when that is shorter (MQTT-3.1.3-9). `None`: at once.
pub(super) fn will_delay(connected: &super::Connected) -> Option<std::time::Duration> {
    let v5 = connected.v5.as_ref()?;
    let seconds = v5.will_delay.min(v5.session_expiry);
    // Without a runtime (unit tests) there is no timer: at once.
    (seconds > 0 && tokio::runtime::Handle::try_current().is_ok())
        .then(|| std::time::Duration::from_secs(u64::from(seconds)))
}

/// Keeps a delayed will in the retained store's log until it is published or the client
/// is back, so it survives a broker stop ([`super::recovery`]).
pub(super) fn keep_will(
    context: &super::MqttContext,
    connected: &super::Connected,
    delay: std::time::Duration,
    will: &crate::codec::LastWill,
) {
    match super::recovery::will_record_value(delay, &connected.user, &connected.client_id, will) {
        Some(value) => context.retained.session_put(
            connected.vhost.name(),
            &connected.client_id,
            super::recovery::WILL_RECORD,
            &value,
        ),
        None => tracing::warn!(
            client_id = %connected.client_id,
            "MQTT delayed will cannot be kept across a restart: it does not encode"
        ),
    }
}

/// Publishes a delayed will after `delay`, unless the client came back by then (MQTT
/// 3.1.3.2.2: its CONNECT cancels the will, [`super::registry::ClientRegistry::cancel_will`])
/// or a connection holds the client identifier. Runs as a task of its own: the ended
/// session's state goes with it. The will's record in the log goes once it is published.
pub(super) fn publish_will_later(
    context: &std::sync::Arc<super::MqttContext>,
    connection_id: u64,
    mut connected: Box<super::Connected>,
    delay: std::time::Duration,
    will: crate::codec::LastWill,
) {
    let key = (
        connected.vhost.name().to_string(),
        connected.client_id.clone(),
    );
    context.registry.schedule_will(key.clone(), connection_id);
    let context = std::sync::Arc::clone(context);
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        if !context.registry.take_will(&key, connection_id) {
            tracing::debug!(client_id = %key.1, "MQTT will not published: the client came back");
            return;
        }
        context
            .retained
            .session_remove(&key.0, &key.1, super::recovery::WILL_RECORD);
        if context.registry.is_held(&key) {
            tracing::debug!(client_id = %key.1, "MQTT will not published: the client is back");
            return;
        }
        let crate::codec::LastWill {
            topic,
            message,
            qos,
            retain,
            properties,
        } = will;
        let message = (topic.as_str(), message, properties.as_deref());
        let published = super::publish::route_publish(
            &context,
            connection_id,
            &mut connected,
            message,
            qos,
            retain,
            false,
        );
        if let Err(reason) = published {
            tracing::warn!(client_id = %key.1, "MQTT delayed will not published: {reason}");
        }
    });
}

/// Marks a published message for MQTT 5 subscription options: RETAIN (for "retain as
/// published"), and the publishing connection when it holds a "no local" subscription.
pub(super) fn mark_origin(
    connected: &super::Connected,
    connection_id: u64,
    retain: bool,
    headers: &mut Table,
) {
    if retain {
        headers.insert(crate::outbox::RETAIN_HEADER, Value::Bool(true));
    }
    if connected.v5.as_ref().is_some_and(|v5| v5.no_local) {
        headers.insert(
            crate::outbox::NO_LOCAL_HEADER,
            Value::I64(connection_id as i64),
        );
    }
}

/// The MQTT 5 reason code for a publish the core refused, from its message (permission
/// refusals say "refused", size refusals "larger than").
pub(super) fn publish_refusal_code(reason: &str) -> u8 {
    if reason.contains("larger than configured max size") {
        reason::PACKET_TOO_LARGE
    } else if reason.contains("refused") {
        reason::NOT_AUTHORIZED
    } else {
        reason::UNSPECIFIED_ERROR
    }
}

#[cfg(test)]
mod size_tests {
    /// `SessionV5` is inline in every connection's state, 3.1.1 ones too: keep it small
    /// (what grows belongs in its boxed lists).
    #[test]
    fn session_v5_stays_small() {
        assert!(std::mem::size_of::<Option<super::SessionV5>>() <= 24);
    }
}
