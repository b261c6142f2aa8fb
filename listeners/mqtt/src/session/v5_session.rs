//! The MQTT 5 parts of a session: what CONNECT asked for, CONNACK's properties, and the
//! checks an MQTT 5 PUBLISH goes through before the shared publish path (topic aliases,
//! receive maximum, payload format).

use super::shared::SharedSubscription;
use super::{Control, Session};
use crate::codec::{
    reason, Packet, Properties, PubAck, PubRec, Publish, QoS, MAX_REMAINING_LENGTH,
};
use crate::outbox::OutboundV5;

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
    /// Topic aliases the client set, by alias.
    pub(super) aliases: Vec<(u16, String)>,
    /// Shared subscriptions (`$share/GROUP/filter`) this member holds.
    pub(super) shared: Vec<SharedSubscription>,
    /// A DISCONNECT went out: nothing more is said to the client.
    pub(super) disconnect_sent: bool,
}

impl SessionV5 {
    /// The state for a CONNECT's properties.
    pub(super) fn from_connect(properties: Option<&Properties>) -> SessionV5 {
        SessionV5 {
            session_expiry: properties
                .and_then(|p| p.session_expiry_interval)
                .unwrap_or(0),
            ..SessionV5::default()
        }
    }
}

/// The client's limits on what the server sends, from its CONNECT: receive maximum
/// (65535 when absent), topic alias maximum (0) and maximum packet size (none).
pub(super) fn outbound_limits(properties: Option<&Properties>) -> (u16, OutboundV5) {
    let receive_maximum = properties
        .and_then(|p| p.receive_maximum)
        .unwrap_or(u16::MAX);
    let limits = OutboundV5::new(
        properties.and_then(|p| p.topic_alias_maximum).unwrap_or(0),
        properties.and_then(|p| p.maximum_packet_size),
    );
    (receive_maximum, limits)
}

/// CONNACK's properties: what the server accepts and offers (section 3.2.2.3 of MQTT 5).
pub(super) fn connack_properties(
    max_packet_size: usize,
    assigned_client_identifier: Option<&str>,
) -> Properties {
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
        ..Properties::default()
    }
}

impl Session {
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
                match v5.aliases.iter().find(|(known, _)| *known == alias) {
                    Some((_, topic)) => publish.topic.clone_from(topic),
                    None => {
                        return Err(self.violation(
                            reason::PROTOCOL_ERROR,
                            &format!("topic alias {alias} was never set (section 3.3.2.3.4)"),
                        ))
                    }
                }
            } else {
                v5.aliases.retain(|(known, _)| *known != alias);
                v5.aliases.push((alias, publish.topic.clone()));
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
        let properties = Some(Box::new(Properties {
            reason_string: Some(text.to_string()),
            ..Properties::default()
        }));
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

    /// QoS 1/2 publishes of the client not yet acknowledged: QoS 2 ones until PUBREL, and
    /// acknowledgements held for the disk.
    fn unacknowledged_inbound(&self) -> usize {
        let qos2 = self
            .connected
            .as_deref()
            .map_or(0, |connected| connected.inbound_qos2.len());
        qos2 + self.held_acks.as_deref().map_or(0, |held| held.len())
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
