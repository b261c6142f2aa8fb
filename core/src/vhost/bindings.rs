//! Bindings of a vhost: bind and unbind queues and exchanges, with the permission, topic
//! permission and exchange-type checks RabbitMQ makes.

use super::*;

impl VHost {
    /// queue.bind and exchange.bind, for a connection with no topic permission variables
    /// beyond user and vhost (see [`VHost::bind_in_context`]).
    pub fn bind(
        &self,
        actor: Actor<'_>,
        source: &str,
        destination: DestinationName,
        routing_key: &str,
        arguments: Table,
    ) -> CoreResult<()> {
        self.bind_in_context(
            actor,
            &crate::topic_access::TopicVariables::NONE,
            source,
            destination,
            routing_key,
            arguments,
        )
    }

    /// queue.bind and exchange.bind. Binding to a topic exchange also checks the binding key
    /// against the actor's topic `read` permission, expanding `variables` (MQTT passes its
    /// client id).
    pub fn bind_in_context(
        &self,
        actor: Actor<'_>,
        variables: &crate::topic_access::TopicVariables<'_>,
        source: &str,
        destination: DestinationName,
        routing_key: &str,
        arguments: Table,
    ) -> CoreResult<()> {
        let (binding, target, exchange) =
            self.resolve_binding(actor, source, destination, routing_key, arguments)?;
        self.check_topic_on(&exchange, actor.user, Access::Read, routing_key, variables)?;
        if let Some(plugin) = &exchange.config().plugin {
            plugin
                .validate_binding(&binding.routing_key, &binding.arguments)
                .map_err(CoreError::precondition_failed)?;
        }
        if exchange.config().kind == ExchangeKind::Headers {
            validate_x_match(&binding.arguments).map_err(CoreError::precondition_failed)?;
        }
        let _replicated = self.replicate_binding(true, actor, &binding, &target)?;
        let _topology = self.topology.lock();
        // Re-check under the topology lock: the destination may have been deleted meanwhile.
        let still_there = match &target {
            Target::Queue(q) if q.forward().is_some() => self
                .stand_ins
                .read()
                .get(q.name())
                .is_some_and(|c| Arc::ptr_eq(c, q)),
            Target::Queue(q) => self.queue(q.name()).is_some_and(|c| Arc::ptr_eq(&c, q)),
            Target::Exchange(x) => self.exchange(x).is_some(),
        };
        let source_there = self
            .exchange(source)
            .is_some_and(|c| Arc::ptr_eq(&c, &exchange));
        if !still_there || !source_there {
            return Err(CoreError::not_found(format!(
                "no {}",
                match &binding.destination {
                    DestinationName::Queue(q) => self.describe("queue", q),
                    DestinationName::Exchange(x) => self.describe("exchange", x),
                }
            )));
        }
        let durable = exchange.config().durable
            && match &target {
                Target::Queue(q) => q.config().durable && q.config().exclusive_owner.is_none(),
                Target::Exchange(_) => true,
            };
        exchange.bind(binding, target);
        if durable {
            self.durability.topology_changed();
        }
        Ok(())
    }

    /// queue.unbind and exchange.unbind. Removing a missing binding succeeds.
    pub fn unbind(
        &self,
        actor: Actor<'_>,
        source: &str,
        destination: DestinationName,
        routing_key: &str,
        arguments: Table,
    ) -> CoreResult<()> {
        let (binding, target, exchange) =
            self.resolve_binding(actor, source, destination, routing_key, arguments)?;
        let _replicated = self.replicate_binding(false, actor, &binding, &target)?;
        let _topology = self.topology.lock();
        let unbound = exchange.unbind(&binding);
        if unbound && exchange.config().auto_delete && !exchange.has_bindings() {
            self.remove_exchange_locked(exchange.name());
        }
        if unbound && exchange.config().durable {
            self.durability.topology_changed();
        }
        Ok(())
    }

    /// Replicates a bind or unbind (to exclusive and auto-delete queues too: other nodes
    /// route to them), unless its destination is a direct reply-to queue, which only this
    /// node knows.
    fn replicate_binding(
        &self,
        bound: bool,
        actor: Actor<'_>,
        binding: &Binding,
        target: &Target,
    ) -> CoreResult<crate::replication::ReplicationPermit> {
        if let Target::Queue(queue) = target {
            if queue.name().starts_with(DIRECT_REPLY_TO) {
                return Ok(crate::replication::ReplicationPermit::none());
            }
        }
        self.durability.replicate(|| TopologyChange::Binding {
            bound,
            vhost: self.name.clone(),
            user: actor.user.to_string(),
            source: binding.source.clone(),
            destination: binding.destination.clone(),
            routing_key: binding.routing_key.clone(),
            arguments: binding.arguments.clone(),
        })
    }

    pub(super) fn resolve_binding(
        &self,
        actor: Actor<'_>,
        source: &str,
        destination: DestinationName,
        routing_key: &str,
        arguments: Table,
    ) -> CoreResult<(Binding, Target, Arc<Exchange>)> {
        if source.is_empty() {
            return Err(Self::default_exchange_refused());
        }
        let target = match &destination {
            DestinationName::Queue(name) => {
                self.check(actor.user, Access::Write, ResourceKind::Queue, name)?;
                match self.stand_ins.read().get(name).cloned() {
                    Some(stand_in) => {
                        if let Some(queue) = stand_in.forward() {
                            queue.check_exclusive_access(actor.connection_id)?;
                        }
                        Target::Queue(stand_in)
                    }
                    None => {
                        let queue = self.queue_or_404(name)?;
                        queue.check_exclusive_access(actor.connection_id)?;
                        Target::Queue(queue)
                    }
                }
            }
            DestinationName::Exchange(name) => {
                if name.is_empty() {
                    return Err(Self::default_exchange_refused());
                }
                self.check(actor.user, Access::Write, ResourceKind::Exchange, name)?;
                self.exchange_or_404(name)?;
                Target::Exchange(Arc::from(name.as_str()))
            }
        };
        self.check(actor.user, Access::Read, ResourceKind::Exchange, source)?;
        let exchange = self.exchange_or_404(source)?;
        let binding = Binding {
            source: source.to_string(),
            destination,
            routing_key: routing_key.to_string(),
            arguments,
        };
        Ok((binding, target, exchange))
    }
}
