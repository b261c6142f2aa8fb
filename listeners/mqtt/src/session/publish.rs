//! PUBLISH from the client (QoS 0, 1 and 2), PUBREL, and the will.

use std::sync::Arc;

use bytes::Bytes;
use warren_core::message::{Message, Properties};
use warren_core::retained::RetainedMessage;
use warren_core::topic_access::TopicVariables;
use warren_core::value::{Table, Value};
use warren_core::vhost::Actor;

use super::{Connected, Control, Session};
use crate::codec::{
    mqtt_topic_to_routing_key, reason, LastWill, Packet, PubAck, PubComp, PubRec, Publish, QoS,
};
use crate::outbox::{publish_qos_value, DUP_HEADER, PUBLISH_QOS_HEADER};

impl Session {
    pub(super) fn publish(&mut self, publish: Publish) -> Control {
        let Publish {
            dup,
            qos,
            retain,
            topic,
            packet_id,
            payload,
            properties,
        } = publish;
        let Some(connected) = self.connected.as_deref_mut() else {
            return Control::Close(super::End::Abnormal("PUBLISH before CONNECT".into()));
        };
        if qos == QoS::ExactlyOnce {
            // Method B of MQTT 4.3.3: route on the first PUBLISH, remember its identifier
            // until PUBREL, and answer a re-sent PUBLISH with PUBREC only.
            let packet_id = packet_id.unwrap_or(0);
            if connected.inbound_qos2.contains(&packet_id) {
                self.acknowledge_publish(None, 0, Packet::PubRec(PubRec::new(packet_id)));
                return Control::Continue;
            }
        }
        let message = (topic.as_str(), payload, properties.as_deref());
        let Routed { durable_seq, code } = match route_publish(
            &self.context,
            self.connection_id,
            connected,
            message,
            qos,
            retain,
            dup,
        ) {
            Ok(routed) => routed,
            Err(reason) => {
                let code = super::v5_session::publish_refusal_code(&reason);
                return self.violation(code, &reason);
            }
        };
        // MQTT 5 tells the publisher what became of the message (3.1.1 cannot): 0x10 no
        // queue took it, 0x97 a full queue refused it (x-overflow = reject-publish).
        let code = if self.protocol.is_v5() {
            code
        } else {
            reason::SUCCESS
        };
        if code >= 0x80 {
            if let Some(packet_id) = packet_id.filter(|_| qos != QoS::AtMostOnce) {
                // A refusing PUBREC ends the QoS 2 exchange: no PUBREL follows.
                let packet = match qos {
                    QoS::ExactlyOnce => Packet::PubRec(PubRec {
                        reason_code: code,
                        ..PubRec::new(packet_id)
                    }),
                    _ => Packet::PubAck(PubAck {
                        reason_code: code,
                        ..PubAck::new(packet_id)
                    }),
                };
                self.acknowledge_publish(None, 0, packet);
            }
            return Control::Continue;
        }
        // A retained publish (or clear) is acknowledged once the retained store has it on
        // disk too.
        let mut retained_seq = if retain {
            self.context.retained.last_change()
        } else {
            0
        };
        // The acknowledgement goes out once the message is in its queues and, when a
        // durable queue took it, once the store has it on disk (the driver waits).
        match (qos, packet_id) {
            (QoS::AtLeastOnce, Some(packet_id)) => {
                self.acknowledge_publish(
                    durable_seq,
                    retained_seq,
                    Packet::PubAck(PubAck {
                        reason_code: code,
                        ..PubAck::new(packet_id)
                    }),
                );
            }
            (QoS::ExactlyOnce, Some(packet_id)) => {
                if let Some(connected) = self.connected.as_deref_mut() {
                    connected.inbound_qos2.push(packet_id);
                    // A persistent session's identifier survives a restart: PUBREC waits
                    // for it to be on disk, so a PUBLISH re-sent after a crash is not routed
                    // twice.
                    if !connected.clean_session {
                        self.context.retained.qos2_received(
                            connected.vhost.name(),
                            &connected.client_id,
                            packet_id,
                        );
                        retained_seq = self.context.retained.last_change();
                    }
                }
                self.acknowledge_publish(
                    durable_seq,
                    retained_seq,
                    Packet::PubRec(PubRec {
                        reason_code: code,
                        ..PubRec::new(packet_id)
                    }),
                );
            }
            _ => {}
        }
        Control::Continue
    }

    /// PUBREL: the client releases a QoS 2 message; the identifier may be reused.
    pub(super) fn release(&mut self, packet_id: u16) -> Control {
        let mut retained_seq = 0;
        if let Some(connected) = self.connected.as_deref_mut() {
            let before = connected.inbound_qos2.len();
            connected.inbound_qos2.retain(|id| *id != packet_id);
            if !connected.clean_session && connected.inbound_qos2.len() < before {
                // PUBCOMP waits for the release to be on disk: after a crash, a recorded
                // identifier the client reuses for a new message would drop that message.
                self.context.retained.qos2_released(
                    connected.vhost.name(),
                    &connected.client_id,
                    packet_id,
                );
                retained_seq = self.context.retained.last_change();
            }
        }
        // Answered even for an unknown identifier (MQTT-4.3.3-2 lets the client finish).
        self.acknowledge_publish(None, retained_seq, Packet::PubComp(PubComp::new(packet_id)));
        Control::Continue
    }

    /// Publishes the will of a connection that ended abnormally. A refusal is logged.
    pub(super) fn publish_will(&self, connected: &mut Connected, will: LastWill) {
        let LastWill {
            topic,
            message,
            qos,
            retain,
            properties,
        } = will;
        let message = (topic.as_str(), message, properties.as_deref());
        if let Err(reason) = route_publish(
            &self.context,
            self.connection_id,
            connected,
            message,
            qos,
            retain,
            false,
        ) {
            tracing::warn!(
                connection = self.connection_id,
                client_id = %connected.client_id,
                "MQTT will not published: {reason}"
            );
        }
    }
}

/// What became of a routed MQTT message.
pub(super) struct Routed {
    /// The store sequence number to wait for when a durable queue took the (persistent)
    /// message.
    pub(super) durable_seq: Option<u64>,
    /// The MQTT 5 reason code for its PUBACK/PUBREC: 0x00, 0x10 no matching subscribers
    /// (no queue took it) or 0x97 quota exceeded (a full queue refused it).
    pub(super) code: u8,
}

/// Routes one MQTT message through the exchange, retaining it first if asked; says what
/// became of it ([`Routed`]).
/// Errors are the reason to close the connection (no permission, payload too large, no
/// exchange). The message is its topic, payload and MQTT 5 properties.
#[allow(clippy::too_many_arguments)]
pub(super) fn route_publish(
    context: &super::MqttContext,
    connection_id: u64,
    connected: &mut Connected,
    (topic, payload, v5_properties): (&str, Bytes, Option<&crate::codec::Properties>),
    qos: QoS,
    retain: bool,
    dup: bool,
) -> Result<Routed, String> {
    let config = &context.config;
    let routing_key = mqtt_topic_to_routing_key(topic).into_owned();
    // The core's checks (write permission, cached per connection; topic permission on the
    // AMQP routing key, as in RabbitMQ). A refusal closes the connection: MQTT 3.1.1 has no
    // way to refuse a PUBLISH.
    let actor = Actor {
        user: &connected.user,
        connection_id,
    };
    connected
        .vhost
        .authorize_publish(
            &mut connected.publisher,
            actor,
            &config.exchange,
            &routing_key,
            None,
            &TopicVariables::mqtt(&connected.client_id),
        )
        .map_err(|e| e.error.message)?;
    if payload.len() > config.max_message_size {
        return Err(format!(
            "message size {} is larger than configured max size {}",
            payload.len(),
            config.max_message_size
        ));
    }
    let mut headers = Table::new();
    headers.insert(PUBLISH_QOS_HEADER, publish_qos_value(qos));
    headers.insert(DUP_HEADER, Value::Bool(dup));
    crate::session::v5_session::mark_origin(connected, connection_id, retain, &mut headers);
    let mut properties = Properties {
        // RabbitMQ: QoS 0 is transient, QoS 1 and 2 are persistent.
        delivery_mode: Some(if qos == QoS::AtMostOnce { 1 } else { 2 }),
        ..Properties::default()
    };
    if let Some(v5_properties) = v5_properties {
        super::v5::to_core(
            v5_properties,
            &mut properties,
            &mut headers,
            super::v5::unix_ms(),
        );
    }
    properties.headers = Some(headers);
    let message = Arc::new(Message {
        exchange: Arc::from(config.exchange.as_str()),
        routing_key: Arc::from(routing_key),
        properties,
        encoded_properties: None,
        // Copied so a message waiting in a queue does not pin the connection's read buffer.
        body: Bytes::copy_from_slice(&payload),
    });
    if retain {
        let vhost = connected.vhost.name();
        if message.body.is_empty() {
            // An empty retained payload clears the topic (MQTT-3.3.1-10) and is still
            // delivered to current subscribers (MQTT-3.3.1-11 does not stop it).
            context.retained.clear(vhost, topic);
        } else {
            context.retained.retain(
                vhost,
                RetainedMessage {
                    topic: topic.to_string(),
                    message: Arc::clone(&message),
                    qos: qos.as_u8(),
                },
            );
        }
    }
    // Through the core, so a persistent (QoS 1/2) message reaching a durable queue is written
    // to the message store; its PUBACK/PUBREC waits for the returned sequence number.
    let outcome = connected
        .vhost
        .publish_authorized(message, false)
        .map_err(|e| e.error.message)?;
    let code = if !outcome.accepted {
        // x-overflow = reject-publish: MQTT 3.1.1 has no negative acknowledgement; MQTT 5
        // says quota exceeded.
        tracing::debug!("MQTT message refused by a full queue");
        reason::QUOTA_EXCEEDED
    } else if !outcome.routed() {
        reason::NO_MATCHING_SUBSCRIBERS
    } else {
        reason::SUCCESS
    };
    let durable_seq = outcome.durable_seq().filter(|_| outcome.accepted);
    Ok(Routed { durable_seq, code })
}
