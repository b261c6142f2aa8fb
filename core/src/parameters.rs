//! Runtime parameters (per vhost, by component: `shovel`, `federation-upstream`, ...) and
//! global parameters (`cluster_name`, ...), as RabbitMQ keeps them. The core reads one
//! component, `vhost-limits`, and one global parameter, the users' limits (see
//! [`crate::resource_limits`]); the others are kept so definitions round-trip (import then
//! export unchanged), listed in the management API and saved with the durable definitions.
//! Values are JSON text.

use std::collections::BTreeMap;

use parking_lot::RwLock;

use crate::Broker;

/// One runtime parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeParameter {
    /// The vhost it belongs to.
    pub vhost: String,
    /// The component that reads it (`shovel`, `federation-upstream`, `vhost-limits`, ...).
    pub component: String,
    /// The parameter's name.
    pub name: String,
    /// The value, as JSON text.
    pub value: String,
}

/// One global parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalParameter {
    /// The parameter's name, such as `cluster_name`.
    pub name: String,
    /// The value, as JSON text.
    pub value: String,
}

/// The broker's runtime and global parameters, sorted by key.
#[derive(Debug, Default)]
pub struct ParameterStore {
    runtime: RwLock<BTreeMap<(String, String, String), String>>,
    global: RwLock<BTreeMap<String, String>>,
}

impl Broker {
    /// Sets a runtime parameter (value as JSON text); true if it is new.
    pub fn set_parameter(&self, parameter: RuntimeParameter) -> bool {
        self.durability.resource_limits().runtime_parameter_changed(
            &parameter.vhost,
            &parameter.component,
            &parameter.name,
            Some(&parameter.value),
        );
        let key = (parameter.vhost, parameter.component, parameter.name);
        let created = self
            .parameters
            .runtime
            .write()
            .insert(key, parameter.value)
            .is_none();
        self.durability.topology_changed();
        created
    }

    /// Removes a runtime parameter; true if it existed.
    pub fn clear_parameter(&self, vhost: &str, component: &str, name: &str) -> bool {
        let key = (vhost.to_string(), component.to_string(), name.to_string());
        let removed = self.parameters.runtime.write().remove(&key).is_some();
        self.durability
            .resource_limits()
            .runtime_parameter_changed(vhost, component, name, None);
        if removed {
            self.durability.topology_changed();
        }
        removed
    }

    /// Removes every runtime parameter of `vhost` (the vhost is being deleted).
    pub(crate) fn clear_vhost_parameters(&self, vhost: &str) {
        self.durability.resource_limits().vhost_deleted(vhost);
        self.parameters
            .runtime
            .write()
            .retain(|(v, _, _), _| v != vhost);
    }

    /// Runtime parameters, sorted by vhost, component and name; filtered by `component` and
    /// `vhost` when given.
    pub fn parameters(
        &self,
        component: Option<&str>,
        vhost: Option<&str>,
    ) -> Vec<RuntimeParameter> {
        self.parameters
            .runtime
            .read()
            .iter()
            .filter(|((v, c, _), _)| {
                component.is_none_or(|x| x == c) && vhost.is_none_or(|x| x == v)
            })
            .map(|((vhost, component, name), value)| RuntimeParameter {
                vhost: vhost.clone(),
                component: component.clone(),
                name: name.clone(),
                value: value.clone(),
            })
            .collect()
    }

    /// Sets a global parameter (value as JSON text); true if it is new.
    pub fn set_global_parameter(&self, name: &str, value: String) -> bool {
        self.durability
            .resource_limits()
            .global_parameter_changed(name, Some(&value));
        let created = self
            .parameters
            .global
            .write()
            .insert(name.to_string(), value)
            .is_none();
        self.durability.topology_changed();
        created
    }

    /// Removes a global parameter; true if it existed.
    pub fn clear_global_parameter(&self, name: &str) -> bool {
        let removed = self.parameters.global.write().remove(name).is_some();
        self.durability
            .resource_limits()
            .global_parameter_changed(name, None);
        if removed {
            self.durability.topology_changed();
        }
        removed
    }

    /// The global parameter called `name`, as JSON text.
    pub fn global_parameter(&self, name: &str) -> Option<String> {
        self.parameters.global.read().get(name).cloned()
    }

    /// Every global parameter, sorted by name.
    pub fn global_parameters(&self) -> Vec<GlobalParameter> {
        self.parameters
            .global
            .read()
            .iter()
            .map(|(name, value)| GlobalParameter {
                name: name.clone(),
                value: value.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Limits;

    #[test]
    fn parameters_are_kept_sorted_filtered_and_dropped_with_their_vhost() {
        let broker = Broker::new(Limits::default());
        let p = |vhost: &str, component: &str, name: &str| RuntimeParameter {
            vhost: vhost.into(),
            component: component.into(),
            name: name.into(),
            value: "{\"uri\":\"amqp://\"}".into(),
        };
        assert!(broker.set_parameter(p("b", "shovel", "s1")));
        assert!(broker.set_parameter(p("a", "federation-upstream", "u1")));
        assert!(!broker.set_parameter(p("a", "federation-upstream", "u1")));
        let all = broker.parameters(None, None);
        assert_eq!(all[0].vhost, "a");
        assert_eq!(broker.parameters(Some("shovel"), None).len(), 1);
        assert_eq!(broker.parameters(None, Some("a")).len(), 1);
        broker.add_vhost("b");
        broker.delete_vhost("b");
        assert!(broker.parameters(None, Some("b")).is_empty());
        assert!(broker.clear_parameter("a", "federation-upstream", "u1"));
        assert!(!broker.clear_parameter("a", "federation-upstream", "u1"));
        assert!(broker.set_global_parameter("cluster_name", "\"c\"".into()));
        assert_eq!(
            broker.global_parameter("cluster_name").as_deref(),
            Some("\"c\"")
        );
        assert_eq!(broker.global_parameters().len(), 1);
        assert!(broker.clear_global_parameter("cluster_name"));
    }
}
