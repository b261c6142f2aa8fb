//! Exchanges of a vhost: declare (with RabbitMQ's equivalence and alternate-exchange
//! checks) and delete.

use super::*;

impl VHost {
    /// exchange.declare.
    pub fn declare_exchange(&self, actor: Actor<'_>, request: ExchangeDeclare) -> CoreResult<()> {
        if request.name.is_empty() {
            return Err(Self::default_exchange_refused());
        }
        if request.passive {
            self.exchange_or_404(&request.name)?;
            return Ok(());
        }
        if request.name.starts_with("amq.") {
            return Err(CoreError::access_refused(format!(
                "exchange name '{}' contains reserved prefix 'amq.*'",
                request.name
            )));
        }
        self.check(
            actor.user,
            Access::Configure,
            ResourceKind::Exchange,
            &request.name,
        )?;
        let plugin = self.exchange_types.read().get(&request.kind).cloned();
        let kind = match (ExchangeKind::from_name(&request.kind), &plugin) {
            (Some(kind), _) => kind,
            (None, Some(_)) => ExchangeKind::Plugin,
            // RabbitMQ 4.x (rabbit_exchange:check_type): a channel error, 406.
            (None, None) => {
                return Err(CoreError::new(
                    ErrorKind::PreconditionFailed,
                    format!("unknown exchange type '{}'", request.kind),
                ))
            }
        };
        if let Some(alternate) = request.arguments.get("alternate-exchange") {
            let Some(alternate) = alternate.as_str() else {
                return Err(CoreError::precondition_failed(format!(
                    "invalid arg 'alternate-exchange' for {}: expected a string",
                    self.describe("exchange", &request.name)
                )));
            };
            self.check(actor.user, Access::Write, ResourceKind::Exchange, alternate)?;
            self.check(
                actor.user,
                Access::Read,
                ResourceKind::Exchange,
                &request.name,
            )?;
        }
        if let Some(existing) = self.exchange(&request.name) {
            // A redeclaration changes nothing: answered here, not replicated.
            return self.check_exchange_equivalence(existing.config(), &request);
        }
        let _replicated = self
            .durability
            .replicate(|| TopologyChange::DeclareExchange {
                vhost: self.name.clone(),
                user: actor.user.to_string(),
                request: request.clone(),
            })?;
        let _topology = self.topology.lock();
        if let Some(existing) = self.exchange(&request.name) {
            return self.check_exchange_equivalence(existing.config(), &request);
        }
        let config = ExchangeConfig {
            name: request.name.clone(),
            kind,
            durable: request.durable,
            auto_delete: request.auto_delete,
            internal: request.internal,
            arguments: request.arguments,
            plugin,
        };
        let exchange = Exchange::new(config);
        let alternate = select(&self.policies.read(), |p| p.matches_exchange(&request.name))
            .and_then(Policy::alternate_exchange);
        exchange.set_policy_alternate(alternate);
        let durable = request.durable;
        self.exchanges.write().insert(request.name, exchange);
        if durable {
            self.durability.topology_changed();
        }
        Ok(())
    }

    pub(super) fn check_exchange_equivalence(
        &self,
        existing: &ExchangeConfig,
        request: &ExchangeDeclare,
    ) -> CoreResult<()> {
        let what = self.describe("exchange", &existing.name);
        let mismatch = |arg: &str,
                        received: &dyn std::fmt::Display,
                        current: &dyn std::fmt::Display| {
            CoreError::precondition_failed(format!(
                "inequivalent arg '{arg}' for {what}: received '{received}' but current is '{current}'"
            ))
        };
        if existing.type_name() != request.kind {
            return Err(mismatch("type", &request.kind, &existing.type_name()));
        }
        if existing.durable != request.durable {
            return Err(mismatch("durable", &request.durable, &existing.durable));
        }
        if existing.auto_delete != request.auto_delete {
            return Err(mismatch(
                "auto_delete",
                &request.auto_delete,
                &existing.auto_delete,
            ));
        }
        if existing.internal != request.internal {
            return Err(mismatch("internal", &request.internal, &existing.internal));
        }
        check_args_equivalence(
            &what,
            &["alternate-exchange"],
            &request.arguments,
            &existing.arguments,
        )
    }

    /// exchange.delete. Deleting a missing exchange succeeds, as in RabbitMQ.
    pub fn delete_exchange(&self, actor: Actor<'_>, name: &str, if_unused: bool) -> CoreResult<()> {
        if name.is_empty() {
            return Err(Self::default_exchange_refused());
        }
        if name.starts_with("amq.") {
            return Err(CoreError::access_refused(format!(
                "deletion of system {} not allowed",
                self.describe("exchange", name)
            )));
        }
        self.check(actor.user, Access::Configure, ResourceKind::Exchange, name)?;
        if self.exchange(name).is_none() {
            return Ok(());
        }
        let _replicated = self
            .durability
            .replicate(|| TopologyChange::DeleteExchange {
                vhost: self.name.clone(),
                user: actor.user.to_string(),
                name: name.to_string(),
                if_unused,
            })?;
        let _topology = self.topology.lock();
        let Some(exchange) = self.exchange(name) else {
            return Ok(());
        };
        let is_destination = self.is_exchange_destination(name);
        if if_unused && (exchange.has_bindings() || is_destination) {
            return Err(CoreError::precondition_failed(format!(
                "{} in use",
                self.describe("exchange", name)
            )));
        }
        self.remove_exchange_locked(name);
        Ok(())
    }

    pub(super) fn is_exchange_destination(&self, name: &str) -> bool {
        let destination = DestinationName::Exchange(name.to_string());
        self.exchanges
            .read()
            .values()
            .any(|x| x.has_bindings_to(&destination))
    }

    /// Removes an exchange and every binding to or from it. Caller holds the topology lock.
    pub(super) fn remove_exchange_locked(&self, name: &str) {
        let removed = self.exchanges.write().remove(name);
        self.remove_bindings_to_locked(&DestinationName::Exchange(name.to_string()));
        if removed.is_some_and(|x| x.config().durable) {
            self.durability.topology_changed();
        }
    }

    /// Removes every binding to `destination`, then deletes auto-delete exchanges that lost
    /// their last binding. Caller holds the topology lock.
    pub(super) fn remove_bindings_to_locked(&self, destination: &DestinationName) {
        let exchanges = self.exchanges();
        let mut emptied = Vec::new();
        for exchange in exchanges {
            if exchange.unbind_destination(destination) > 0
                && exchange.config().auto_delete
                && !exchange.has_bindings()
            {
                emptied.push(exchange.name().to_string());
            }
        }
        for name in emptied {
            self.remove_exchange_locked(&name);
        }
    }
}
