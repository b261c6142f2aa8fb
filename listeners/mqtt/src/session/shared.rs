//! MQTT 5 shared subscriptions, `$share/GROUP/filter` (section 4.8.2 of MQTT 5).
//!
//! Each group and filter has one queue, `mqtt-shared-GROUP-filter`, bound to the MQTT
//! exchange with the filter's binding key. Every member consumes it, so the core's
//! round-robin spreads the group's messages across its members, each message to one. A
//! member that leaves cancels its consumer first and then requeues what it had in flight,
//! which the queue hands to the remaining members. Retained messages are not sent on
//! subscribe (MQTT 4.8.2).
//!
//! A shared subscription lives as long as a session holds it (section 4.8.2), not a
//! connection: the queue is durable, and the [`ClientRegistry`](super::registry) counts
//! the sessions that are members, connected or stored. A persistent session that goes
//! away stays a member, so the queue keeps collecting the group's messages while every
//! member is away, and the session consumes it again when it resumes. The queue is deleted
//! when its last member session ends: a clean session's connection ending, UNSUBSCRIBE,
//! clean start discarding a stored session, or a stored session's expiry interval passing.
//! A persistent session's memberships are also kept in the retained store's log, so they
//! survive a restart ([`super::recovery`]); on a cluster they move with the session when
//! its client identifier is taken over on another node ([`super::cluster`]).
//!
//! On a cluster the members of one group may be connected to (or stored on) different
//! nodes, so no node's registry knows them all. There each membership is also a runtime
//! parameter of the vhost (component [`MEMBER_COMPONENT`]), set before the member consumes
//! and cleared when it leaves, replicated through the metadata group: the node whose member
//! leaves deletes the group's queue only when no membership parameter of the group is left
//! anywhere. A membership moving with a session taken over on another node keeps its
//! parameter (the client identifier is the same).

use std::sync::Arc;

use warren_core::access::{Access, ResourceKind};
use warren_core::consumer::ConsumerSpec;
use warren_core::exchange::DestinationName;
use warren_core::parameters::RuntimeParameter;
use warren_core::queue_type::QueueInstance;
use warren_core::topic_access::TopicVariables;
use warren_core::value::Table;
use warren_core::vhost::{Actor, QueueDeclare};

use super::registry::ClientKey;
use super::{MqttContext, Session};
use crate::codec::{mqtt_filter_to_binding_key, reason, validate_topic_filter, QoS};
use crate::outbox::SubscriptionSink;
use warren_core::vhost::VHost;

/// One shared subscription a member holds.
pub(super) struct SharedSubscription {
    /// The filter as subscribed, `$share/GROUP/filter`.
    pub(super) filter: String,
    /// The group's queue (a stand-in when it is homed on another node of a cluster).
    pub(super) queue: Arc<dyn QueueInstance>,
    /// This member's consumer of it.
    pub(super) consumer_id: u64,
    /// The QoS granted, kept with a stored session to consume again at.
    pub(super) qos: QoS,
}

/// Why a subscription is refused: an MQTT 5 reason code and the text for the log.
pub(super) type Refusal = (u8, String);

/// The share name and the filter of `$share/GROUP/filter`; `None` for other filters, an
/// error (reason code and text) for a malformed shared filter (MQTT-4.8.2-1, MQTT-4.8.2-2).
pub(super) fn parse_shared(filter: &str) -> Option<Result<(&str, &str), Refusal>> {
    let rest = filter.strip_prefix("$share/")?;
    let Some((group, inner)) = rest.split_once('/') else {
        return Some(Err((
            reason::TOPIC_FILTER_INVALID,
            format!("shared subscription {filter:?} has no topic filter after its share name"),
        )));
    };
    if group.is_empty() || group.contains(['+', '#']) {
        return Some(Err((
            reason::TOPIC_FILTER_INVALID,
            format!("share name {group:?} is empty or has a wildcard (MQTT-4.8.2-2)"),
        )));
    }
    if let Err(problem) = validate_topic_filter(inner) {
        return Some(Err((reason::TOPIC_FILTER_INVALID, problem.to_string())));
    }
    Some(Ok((group, inner)))
}

/// The queue of a shared subscription group's filter.
pub fn shared_queue_name(group: &str, filter: &str) -> String {
    format!("mqtt-shared-{group}-{filter}")
}

/// The runtime parameter component recording, on a cluster, which sessions are members of
/// which shared subscription group, for every node to see.
pub const MEMBER_COMPONENT: &str = "mqtt-shared-member";

/// The start of the membership parameters' names of the group whose queue is `queue`: its
/// length first, so no queue name is a prefix of another's.
fn member_prefix(queue: &str) -> String {
    format!("{}:{queue}:", queue.len())
}

/// The name of the parameter recording that `client_id`'s session is a member of the group
/// whose queue is `queue`.
pub fn member_parameter(queue: &str, client_id: &str) -> String {
    format!("{}{client_id}", member_prefix(queue))
}

/// Whether memberships are counted cluster-wide (the broker is a node of a cluster).
fn clustered(context: &MqttContext) -> bool {
    context.broker.forwarding().is_some()
}

/// Whether any node records a member of the group whose queue is `queue` in `vhost`.
fn group_has_members(context: &MqttContext, vhost: &str, queue: &str) -> bool {
    let prefix = member_prefix(queue);
    context
        .broker
        .parameters(Some(MEMBER_COMPONENT), Some(vhost))
        .iter()
        .any(|parameter| parameter.name.starts_with(&prefix))
}

/// Records (on a cluster) that `client_id`'s session is a member of the group whose queue
/// is `queue`, before it consumes: a member leaving on another node from then on sees it.
fn record_membership(
    context: &MqttContext,
    vhost: &str,
    queue: &str,
    client_id: &str,
) -> Result<(), String> {
    if !clustered(context) {
        return Ok(());
    }
    let name = member_parameter(queue, client_id);
    let recorded = context
        .broker
        .parameters(Some(MEMBER_COMPONENT), Some(vhost))
        .iter()
        .any(|parameter| parameter.name == name);
    if recorded {
        return Ok(());
    }
    context
        .broker
        .try_set_parameter(RuntimeParameter {
            vhost: vhost.to_string(),
            component: MEMBER_COMPONENT.to_string(),
            name,
            value: "{}".to_string(),
        })
        .map(|_| ())
        .map_err(|e| e.message)
}

impl Session {
    /// Joins the group of `$share/GROUP/inner`, declaring and binding its queue if this is
    /// the group's first member.
    pub(super) fn add_shared_subscription(
        &mut self,
        filter: &str,
        (group, inner): (&str, &str),
        qos: QoS,
    ) -> Result<QoS, (u8, String)> {
        let connection_id = self.connection_id;
        let exchange = self.context.config.exchange.clone();
        let outbox = Arc::clone(&self.outbox);
        let connected = self
            .connected
            .as_deref_mut()
            .ok_or((reason::UNSPECIFIED_ERROR, "not connected".to_string()))?;
        let not_authorized = |message: String| (reason::NOT_AUTHORIZED, message);
        let name = shared_queue_name(group, inner);
        let binding_key = mqtt_filter_to_binding_key(inner);
        let variables = TopicVariables::mqtt(&connected.client_id);
        connected
            .vhost
            .check(&connected.user, Access::Read, ResourceKind::Queue, &name)
            .map_err(|e| not_authorized(e.message))?;
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
        let v5 = connected.v5.get_or_insert_default();
        if v5.shared().iter().any(|shared| shared.filter == filter) {
            return Ok(qos);
        }
        let actor = Actor {
            user: &connected.user,
            connection_id,
        };
        let failed = |message: String| (reason::UNSPECIFIED_ERROR, message);
        record_membership(
            &self.context,
            connected.vhost.name(),
            &name,
            &connected.client_id,
        )
        .map_err(failed)?;
        connected
            .vhost
            .declare_queue(
                actor,
                QueueDeclare {
                    name: name.clone(),
                    passive: false,
                    // Kept while any member session is, across its connections.
                    durable: true,
                    exclusive: false,
                    auto_delete: false,
                    arguments: Table::new(),
                },
            )
            .map_err(|e| failed(e.message))?;
        connected
            .vhost
            .bind_in_context(
                actor,
                &variables,
                &exchange,
                DestinationName::Queue(name.clone()),
                &binding_key,
                Table::new(),
            )
            .map_err(|e| failed(e.message))?;
        // Through the queue-type interface: on a cluster the group's queue may live on
        // another node, consumed here through its stand-in.
        let queue = connected
            .vhost
            .queue_instance_for(actor, &name, Access::Read)
            .map_err(|e| failed(e.message))?;
        let sink = SubscriptionSink::new(outbox, Arc::clone(&queue), qos);
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
            .map_err(|e| failed(e.message))?;
        self.context.registry.join_group(
            (connected.vhost.name().to_string(), name),
            &connected.client_id,
        );
        if !connected.clean_session {
            // A persistent session's membership outlives the process too.
            let expiry = connected.v5.as_ref().map_or(0, |v5| v5.session_expiry);
            self.context.retained.session_put(
                connected.vhost.name(),
                &connected.client_id,
                &super::recovery::shared_record_name(filter),
                &super::recovery::shared_record_value(qos, expiry),
            );
        }
        if let Some(v5) = connected.v5.as_mut() {
            v5.lists_mut().shared.push(SharedSubscription {
                filter: filter.to_string(),
                queue,
                consumer_id,
                qos,
            });
        }
        Ok(qos)
    }

    /// Consumes the groups' queues again for the shared subscriptions a resumed session
    /// held (it stayed a member while away).
    pub(super) fn resume_shared(&mut self, shared: Vec<(String, QoS)>) {
        for (filter, qos) in shared {
            let Some(Ok(parts)) = parse_shared(&filter) else {
                continue;
            };
            let (group, inner) = (parts.0.to_string(), parts.1.to_string());
            if let Err((_, why)) =
                self.add_shared_subscription(&filter, (group.as_str(), inner.as_str()), qos)
            {
                tracing::warn!(
                    connection = self.connection_id,
                    filter = %filter,
                    "cannot resume MQTT shared subscription: {why}"
                );
                // Not a member any more: the group may go without it.
                if let Some(connected) = self.connected.as_deref() {
                    leave_groups(
                        &self.context,
                        &connected.vhost,
                        &connected.client_id,
                        Some(&connected.user),
                        &[(filter, qos)],
                    );
                }
            }
        }
    }

    /// Leaves a shared subscription; whether this member held it.
    pub(super) fn remove_shared_subscription(&mut self, filter: &str) -> bool {
        let Some(connected) = self.connected.as_deref_mut() else {
            return false;
        };
        let Some(v5) = connected.v5.as_mut() else {
            return false;
        };
        let Some(position) = v5
            .shared()
            .iter()
            .position(|shared| shared.filter == filter)
        else {
            return false;
        };
        let shared = v5.lists_mut().shared.remove(position);
        connected
            .vhost
            .cancel_instance(&shared.queue, shared.consumer_id);
        leave_groups(
            &self.context,
            &connected.vhost,
            &connected.client_id,
            Some(&connected.user),
            &[(shared.filter, shared.qos)],
        );
        true
    }
}

/// Takes `client_id`'s session out of the groups of `shared` (`$share/GROUP/filter` with
/// their QoS), deleting each group's queue once no member session is left (on a cluster, on
/// any node: its membership parameter is cleared, and the queue deleted only when no other
/// is left; a parameter that cannot be cleared, on a minority, keeps the queue). With the
/// session's `user` the deletion is the core's `queue.delete` on the user's behalf (it
/// declared the queue), which on a cluster reaches every node wherever the queue lives;
/// without one (a stored session expiring) the broker removes it from this node.
pub(super) fn leave_groups(
    context: &MqttContext,
    vhost: &VHost,
    client_id: &str,
    user: Option<&str>,
    shared: &[(String, QoS)],
) {
    for (filter, _) in shared {
        let Some(Ok((group, inner))) = parse_shared(filter) else {
            continue;
        };
        let name = shared_queue_name(group, inner);
        let key = (vhost.name().to_string(), name);
        context.retained.session_remove(
            vhost.name(),
            client_id,
            &super::recovery::shared_record_name(filter),
        );
        let no_member_here = context.registry.leave_group(&key, client_id);
        let no_member = if clustered(context) {
            let parameter = member_parameter(&key.1, client_id);
            if let Err(error) =
                context
                    .broker
                    .try_clear_parameter(vhost.name(), MEMBER_COMPONENT, &parameter)
            {
                tracing::warn!(
                    client_id,
                    queue = %key.1,
                    "cannot record that an MQTT session left its shared subscription group: {}",
                    error.message
                );
            }
            !group_has_members(context, vhost.name(), &key.1)
        } else {
            no_member_here
        };
        if no_member {
            let deleted = user.is_some_and(|user| {
                let actor = Actor {
                    user,
                    connection_id: warren_core::vhost::BROKER_CONNECTION,
                };
                vhost.delete_queue(actor, &key.1, false, false).is_ok()
            });
            if !deleted {
                if let Some(queue) = vhost.queue_instance(&key.1) {
                    vhost.remove_queue_instance(&queue);
                }
            }
        }
    }
}

/// Ends a stored MQTT 5 session once its expiry interval has passed, unless the client is
/// back by then or a later connection stored the session again: the registry forgets it
/// (a later CONNECT finds no session present), it leaves its shared subscription groups,
/// and the retained store forgets its QoS 2 state. (Its own classic queues go by their
/// `x-expires`; quorum ones are deleted here.) Runs as a task; without a runtime (unit tests) there is no timer.
pub(super) fn expire_session_later(
    context: &Arc<MqttContext>,
    vhost: Arc<VHost>,
    key: ClientKey,
    stored_by: u64,
    seconds: u32,
) {
    if tokio::runtime::Handle::try_current().is_err() {
        return;
    }
    let context = Arc::clone(context);
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(u64::from(seconds))).await;
        if let Some(expired) = context.registry.expire_session(&key, stored_by) {
            tracing::debug!(client_id = %key.1, "MQTT session expired");
            leave_groups(&context, &vhost, &key.1, None, &expired.shared);
            context.retained.forget_session(vhost.name(), &key.1);
            // Classic subscription queues go by their `x-expires`; quorum queues have no
            // queue expiry, so the session's go here.
            for qos in [QoS::AtLeastOnce, QoS::ExactlyOnce] {
                if let Some(queue) = vhost.typed_queue(&super::queue_name(&key.1, qos)) {
                    vhost.remove_queue_instance(&queue);
                }
            }
        }
    });
}
