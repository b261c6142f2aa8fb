//! Policies on a vhost: the one core entry point to set, clear and list them, and their
//! application to live queues and exchanges.

use std::sync::Arc;

use super::VHost;
use crate::error::{CoreError, CoreResult};
use crate::policy::{effective_queue_limits, select, Policy};
use crate::queue::Queue;
use crate::queue_type::QueueInstance;

impl VHost {
    /// Sets (adds or replaces by name) a policy or, with `operator`, an operator policy, and
    /// applies it to existing queues and exchanges at once. The one core entry point every
    /// front end (definitions, CLI, HTTP API) uses.
    pub fn set_policy(&self, policy: Policy, operator: bool) {
        {
            let mut policies = if operator {
                self.operator_policies.write()
            } else {
                self.policies.write()
            };
            policies.retain(|p| p.name != policy.name);
            policies.push(policy);
        }
        self.apply_policies();
        // Policies and operator policies are durable definitions.
        self.durability.topology_changed();
    }

    /// Clears a policy by name; a missing one is a 404 as in RabbitMQ.
    pub fn clear_policy(&self, name: &str, operator: bool) -> CoreResult<()> {
        let removed = {
            let mut policies = if operator {
                self.operator_policies.write()
            } else {
                self.policies.write()
            };
            let before = policies.len();
            policies.retain(|p| p.name != name);
            before != policies.len()
        };
        if !removed {
            return Err(CoreError::not_found(format!(
                "no {} '{name}' in vhost '{}'",
                if operator {
                    "operator policy"
                } else {
                    "policy"
                },
                self.name
            )));
        }
        self.apply_policies();
        // Policies and operator policies are durable definitions.
        self.durability.topology_changed();
        Ok(())
    }

    /// The policies (or operator policies), in the order they were set.
    pub fn policies(&self, operator: bool) -> Vec<Policy> {
        if operator {
            self.operator_policies.read().clone()
        } else {
            self.policies.read().clone()
        }
    }

    pub(super) fn apply_policies_to(&self, queue: &Arc<Queue>) {
        let policies = self.policies.read();
        let operator_policies = self.operator_policies.read();
        if policies.is_empty()
            && operator_policies.is_empty()
            && queue.limits() == *queue.argument_limits()
        {
            return;
        }
        let policy = select(&policies, |p| p.matches_queue(queue.name()));
        let operator = select(&operator_policies, |p| p.matches_queue(queue.name()));
        let limits = effective_queue_limits(
            queue.argument_limits(),
            &queue.config().arguments,
            policy,
            operator,
        );
        drop((policies, operator_policies));
        queue.set_limits(limits);
    }

    /// Hands a queue of another type (quorum queue, stream) the policy and operator policy
    /// that apply to it now.
    pub(super) fn apply_policies_to_typed(&self, queue: &Arc<dyn QueueInstance>) {
        let type_name = queue.queue_type().name();
        // Cloned so the queue applies them (a stream's retention deletes files) without
        // the policy locks held.
        let matches = |p: &Policy| p.matches_typed_queue(type_name, queue.name());
        let policy = select(&self.policies.read(), matches).map(|p| p.definition.clone());
        let operator =
            select(&self.operator_policies.read(), matches).map(|p| p.definition.clone());
        queue.apply_policies(policy.as_ref(), operator.as_ref());
    }

    /// Recomputes every queue's and exchange's effective settings after a policy change.
    fn apply_policies(&self) {
        for queue in self.queues() {
            self.apply_policies_to(&queue);
        }
        for queue in self.typed_queues() {
            self.apply_policies_to_typed(&queue);
        }
        let policies = self.policies.read().clone();
        for exchange in self.exchanges() {
            let alternate = select(&policies, |p| p.matches_exchange(exchange.name()))
                .and_then(Policy::alternate_exchange);
            exchange.set_policy_alternate(alternate);
        }
    }
}
