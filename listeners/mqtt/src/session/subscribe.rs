//! SUBSCRIBE and UNSUBSCRIBE: subscription queues, bindings, and retained messages for new
//! subscriptions.

use warren_core::access::Access;
use warren_core::exchange::DestinationName;
use warren_core::topic_access::TopicVariables;
use warren_core::value::Table;
use warren_core::vhost::{Actor, QueueDeclare};

use super::{queue_name, Control, Session};
use crate::codec::{
    filter_matches, mqtt_filter_to_binding_key, validate_topic_filter, Packet, QoS, SubAck,
    Subscribe, SubscribeReturnCode, UnsubAck, Unsubscribe,
};

impl Session {
    pub(super) fn subscribe(&mut self, subscribe: Subscribe) -> Control {
        let mut return_codes = Vec::with_capacity(subscribe.filters.len());
        let mut granted = Vec::with_capacity(subscribe.filters.len());
        for (filter, requested) in subscribe.filters {
            match self.add_subscription(&filter, requested) {
                Ok(qos) => {
                    return_codes.push(SubscribeReturnCode::Success(qos));
                    granted.push((filter, qos));
                }
                Err(reason) => {
                    tracing::warn!(
                        connection = self.connection_id,
                        client_id = self.client_id().unwrap_or(""),
                        filter = %filter,
                        "MQTT subscription refused: {reason}"
                    );
                    return_codes.push(SubscribeReturnCode::Failure);
                }
            }
        }
        self.sync_dollar_filters();
        // SUBACK first, then deliveries from the new subscriptions.
        self.outbox.send(&Packet::SubAck(SubAck {
            packet_id: subscribe.packet_id,
            return_codes,
        }));
        for (_, qos) in &granted {
            if let Err(reason) = self.ensure_consumer(*qos) {
                tracing::warn!(connection = self.connection_id, "cannot consume: {reason}");
            }
        }
        for (filter, qos) in granted {
            self.send_retained(&filter, qos);
        }
        Control::Continue
    }

    /// Declares the queue of the granted QoS and binds it with the filter. Every refusal
    /// (invalid filter, missing permission) becomes a 0x80 return code.
    fn add_subscription(&mut self, filter: &str, requested: QoS) -> Result<QoS, String> {
        // MQTT-4.7.1: `#` only as the whole last level, `+` only as a whole level. The spec
        // lets the server refuse a filter in SUBACK (0x80), which keeps the connection.
        validate_topic_filter(filter).map_err(|problem| problem.to_string())?;
        let qos = requested;
        self.may_read_queue(qos)?;
        let connection_id = self.connection_id;
        let exchange = self.context.config.exchange.clone();
        let connected = self.connected.as_deref_mut().ok_or("not connected")?;
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
            .map_err(|e| e.message)?;
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
                    arguments: Table::new(),
                },
            )
            .map_err(|e| e.message)?;
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
            .map_err(|e| e.message)?;
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
                    .map_err(|e| e.message)?;
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
        if let Some(connected) = self.connected.as_deref_mut() {
            for filter in &unsubscribe.topics {
                let Some(position) = connected.filters.iter().position(|(f, _)| f == filter) else {
                    continue;
                };
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
        }));
        Control::Continue
    }
}
