//! SUBSCRIBE and UNSUBSCRIBE: subscription queues, bindings, and retained messages for new
//! subscriptions.

use warren_core::access::Access;
use warren_core::exchange::DestinationName;
use warren_core::topic_access::TopicVariables;
use warren_core::value::Table;
use warren_core::vhost::{Actor, QueueDeclare};

use super::shared::parse_shared;
use super::{queue_name, Control, Session};
use crate::codec::{
    filter_matches, mqtt_filter_to_binding_key, reason, validate_topic_filter, Packet, QoS, SubAck,
    Subscribe, SubscribeReturnCode, UnsubAck, Unsubscribe,
};

impl Session {
    pub(super) fn subscribe(&mut self, subscribe: Subscribe) -> Control {
        let Subscribe {
            packet_id,
            filters,
            options,
            properties,
        } = subscribe;
        let v5 = self.protocol.is_v5();
        let identifier = properties
            .as_deref()
            .and_then(|p| p.subscription_identifiers.first().copied());
        let mut return_codes = Vec::with_capacity(filters.len());
        let mut granted = Vec::with_capacity(filters.len());
        for (index, (filter, requested)) in filters.into_iter().enumerate() {
            let option = options.get(index).copied().unwrap_or_default();
            let shared = if v5 { parse_shared(&filter) } else { None };
            let existed = self.connected.as_deref().is_some_and(|connected| {
                connected.filters.iter().any(|(known, _)| *known == filter)
            });
            let added = match &shared {
                Some(Ok(parts)) => self.add_shared_subscription(&filter, *parts, requested),
                Some(Err(refusal)) => Err(refusal.clone()),
                None => self.add_subscription(&filter, requested),
            };
            match added {
                Ok(qos) => {
                    return_codes.push(SubscribeReturnCode::Success(qos));
                    if v5 {
                        // A subscription identifier belongs to the subscription: a new
                        // SUBSCRIBE without one takes it away (MQTT-3.8.4-3 replaces it).
                        let inner = match &shared {
                            Some(Ok((_, inner))) => *inner,
                            _ => filter.as_str(),
                        };
                        self.outbox.set_subscription(
                            inner,
                            Some((identifier, option)),
                            self.connection_id,
                        );
                        if option.no_local {
                            self.note_no_local();
                        }
                    }
                    // Retained messages: never for a shared subscription (section 4.8.2),
                    // and as retain handling says (section 3.8.3.1).
                    let send = shared.is_none()
                        && match option.retain_handling {
                            0 => true,
                            1 => !existed,
                            _ => false,
                        };
                    granted.push((filter, qos, send));
                }
                Err((code, why)) => {
                    tracing::warn!(
                        connection = self.connection_id,
                        client_id = self.client_id().unwrap_or(""),
                        filter = %filter,
                        "MQTT subscription refused: {why}"
                    );
                    return_codes.push(if v5 {
                        SubscribeReturnCode::Refused(code)
                    } else {
                        SubscribeReturnCode::Failure
                    });
                }
            }
        }
        self.sync_dollar_filters();
        // SUBACK first, then deliveries from the new subscriptions.
        self.outbox.send(&Packet::SubAck(SubAck {
            packet_id,
            return_codes,
            properties: None,
        }));
        for (filter, qos, _) in &granted {
            if filter.starts_with("$share/") && v5 {
                continue;
            }
            if let Err(reason) = self.ensure_consumer(*qos) {
                tracing::warn!(connection = self.connection_id, "cannot consume: {reason}");
            }
        }
        for (filter, qos, send) in granted {
            if send {
                self.send_retained(&filter, qos);
            }
        }
        Control::Continue
    }

    /// Declares the queue of the granted QoS and binds it with the filter. Every refusal
    /// (invalid filter, missing permission) becomes a 0x80 return code (MQTT 5: 0x8F topic
    /// filter invalid, 0x87 not authorized, 0x80 for the rest).
    fn add_subscription(&mut self, filter: &str, requested: QoS) -> Result<QoS, (u8, String)> {
        // MQTT-4.7.1: `#` only as the whole last level, `+` only as a whole level. The spec
        // lets the server refuse a filter in SUBACK (0x80), which keeps the connection.
        validate_topic_filter(filter)
            .map_err(|problem| (reason::TOPIC_FILTER_INVALID, problem.to_string()))?;
        let not_authorized = |message: String| (reason::NOT_AUTHORIZED, message);
        let failed = |message: String| (reason::UNSPECIFIED_ERROR, message);
        let qos = requested;
        self.may_read_queue(qos).map_err(not_authorized)?;
        let connection_id = self.connection_id;
        let exchange = self.context.config.exchange.clone();
        let connected = self
            .connected
            .as_deref_mut()
            .ok_or_else(|| failed("not connected".into()))?;
        let actor = Actor {
            user: &connected.user,
            connection_id,
        };
        let name = queue_name(&connected.client_id, qos);
        let binding_key = mqtt_filter_to_binding_key(filter);
        // Refused before the queue is declared, so a refused filter leaves nothing behind.
        let variables = TopicVariables::mqtt(&connected.client_id);
        connected
            .vhost
            .check_topic(
                &connected.user,
                Access::Read,
                &exchange,
                &binding_key,
                &variables,
            )
            .map_err(|e| not_authorized(e.message))?;
        // An MQTT 5 session that expires takes its queues with it: `x-expires` deletes
        // them once unused for the session expiry interval, as RabbitMQ 3.13 does.
        let mut arguments = Table::new();
        let existing = connected.vhost.queue_instance(&name);
        let exists = existing.is_some();
        if let Some(existing) = &existing {
            // Redeclared as it was declared (its `x-expires` is the session expiry it was
            // made with, perhaps on another node by a connection that held the session
            // there), so the redeclaration is equivalent.
            let declared = existing.arguments();
            for key in ["x-expires", "x-queue-type"] {
                if let Some(value) = declared.get(key) {
                    arguments.insert(key, value.clone());
                }
            }
        }
        if let Some(v5) = connected.v5.as_ref() {
            let expiry = v5.session_expiry;
            if !connected.clean_session
                && expiry != super::v5_session::SESSION_NEVER_EXPIRES
                && !exists
            {
                let millis = (i64::from(expiry) * 1000).max(1);
                arguments.insert("x-expires", warren_core::value::Value::I64(millis));
            }
        }
        // `mqtt.durable_queue_type = quorum`: a persistent session's QoS 1 and 2 queues are
        // quorum queues, as RabbitMQ makes them (a quorum queue cannot be exclusive, so a
        // clean session's stay classic; QoS 0 gains nothing from replication). A queue that
        // exists keeps its type: redeclaring it with another would be refused.
        if self.context.config.durable_quorum_queues
            && !connected.clean_session
            && qos != QoS::AtMostOnce
            && !exists
        {
            arguments.insert("x-queue-type", warren_core::value::Value::string("quorum"));
        }
        connected
            .vhost
            .declare_queue(
                actor,
                QueueDeclare {
                    name: name.clone(),
                    passive: false,
                    durable: !connected.clean_session,
                    exclusive: connected.clean_session,
                    auto_delete: false,
                    arguments,
                },
            )
            .map_err(|e| failed(e.message))?;
        connected
            .vhost
            .bind_in_context(
                actor,
                &variables,
                &exchange,
                DestinationName::Queue(name),
                &binding_key,
                Table::new(),
            )
            .map_err(|e| failed(e.message))?;
        // Subscribing again with another QoS replaces the subscription (MQTT-3.8.4-3).
        match connected.filters.iter_mut().find(|(f, _)| f == filter) {
            Some(existing) if existing.1 != qos => {
                let old = queue_name(&connected.client_id, existing.1);
                existing.1 = qos;
                connected
                    .vhost
                    .unbind(
                        actor,
                        &exchange,
                        DestinationName::Queue(old),
                        &binding_key,
                        Table::new(),
                    )
                    .map_err(|e| failed(e.message))?;
            }
            Some(_) => {}
            None => {
                // Most clients hold one or two subscriptions for their whole life: grow
                // one at a time instead of reserving four.
                connected.filters.reserve_exact(1);
                connected.filters.push((filter.to_string(), qos));
            }
        }
        Ok(qos)
    }

    /// Sends the retained messages matching a new subscription, at the lower of the granted
    /// QoS and the QoS they were published with. Wildcard filters match too, as in
    /// Mosquitto.
    fn send_retained(&mut self, filter: &str, granted: QoS) {
        let Some(connected) = self.connected.as_deref() else {
            return;
        };
        let vhost = connected.vhost.name();
        let store = &self.context.retained;
        let mut found = Vec::new();
        if filter.contains(['+', '#']) {
            store.matching(vhost, &|topic| filter_matches(filter, topic), &mut found);
        } else if let Some(retained) = store.get(vhost, filter) {
            found.push(retained);
        }
        for retained in found {
            let qos = QoS::from_u8(retained.qos)
                .unwrap_or(QoS::AtMostOnce)
                .min(granted);
            self.outbox
                .send_retained(&retained.topic, &retained.message, qos);
        }
    }

    pub(super) fn unsubscribe(&mut self, unsubscribe: Unsubscribe) -> Control {
        let connection_id = self.connection_id;
        let exchange = self.context.config.exchange.clone();
        let v5 = self.protocol.is_v5();
        let mut reason_codes = Vec::new();
        for filter in &unsubscribe.topics {
            if v5 && filter.starts_with("$share/") {
                let removed = self.remove_shared_subscription(filter);
                if let Some(Ok((_, inner))) = parse_shared(filter) {
                    self.outbox.set_subscription(inner, None, connection_id);
                }
                reason_codes.push(if removed {
                    reason::SUCCESS
                } else {
                    reason::NO_SUBSCRIPTION_EXISTED
                });
                continue;
            }
            let Some(connected) = self.connected.as_deref_mut() else {
                break;
            };
            {
                let Some(position) = connected.filters.iter().position(|(f, _)| f == filter) else {
                    reason_codes.push(reason::NO_SUBSCRIPTION_EXISTED);
                    continue;
                };
                reason_codes.push(reason::SUCCESS);
                if v5 {
                    self.outbox.set_subscription(filter, None, connection_id);
                }
                let (_, qos) = connected.filters.remove(position);
                let actor = Actor {
                    user: &connected.user,
                    connection_id,
                };
                let result = connected.vhost.unbind(
                    actor,
                    &exchange,
                    DestinationName::Queue(queue_name(&connected.client_id, qos)),
                    &mqtt_filter_to_binding_key(filter),
                    Table::new(),
                );
                if let Err(error) = result {
                    tracing::warn!(
                        connection = connection_id,
                        filter = %filter,
                        "MQTT unsubscribe: {}",
                        error.message
                    );
                }
            }
        }
        self.sync_dollar_filters();
        self.outbox.send(&Packet::UnsubAck(UnsubAck {
            packet_id: unsubscribe.packet_id,
            reason_codes,
            properties: None,
        }));
        Control::Continue
    }
}
