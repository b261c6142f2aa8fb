//! Applies a RabbitMQ definitions.json to the core at boot. Everything is validated before
//! anything is applied, so a bad file leaves the broker as it was.

use std::path::Path;
use std::sync::Arc;

use warren_config::{json_args_to_table, Definitions, DestinationType, Settings};
use warren_core::access::{Permissions, User};
use warren_core::exchange::DestinationName;
use warren_core::parameters::RuntimeParameter;
use warren_core::policy::Policy;
use warren_core::topic_access::TopicPermission;
use warren_core::vhost::{Actor, ExchangeDeclare, QueueDeclare, BROKER_CONNECTION};
use warren_core::Broker;

/// Loads `path` and applies it. The error names the path and the problem.
pub fn apply_definitions(
    broker: &Arc<Broker>,
    path: &Path,
    settings: &Settings,
) -> Result<(), String> {
    let definitions = Definitions::from_file(path).map_err(|e| e.to_string())?;
    apply_parsed(broker, &definitions, settings, &path.display().to_string())?;
    tracing::info!(path = %path.display(), "definitions loaded");
    Ok(())
}

/// Applies the definitions this node saved in its data directory (`persistence.rs`): as
/// [`apply_definitions`]; its quorum queues reopen from their Raft logs.
pub fn apply_saved_definitions(
    broker: &Arc<Broker>,
    path: &Path,
    settings: &Settings,
) -> Result<(), String> {
    let definitions = Definitions::from_file(path).map_err(|e| e.to_string())?;
    apply_parsed(broker, &definitions, settings, &path.display().to_string())?;
    tracing::info!(path = %path.display(), "saved definitions loaded");
    Ok(())
}

/// Parses and applies a definitions document given as JSON text (the management API's
/// import). Errors start with `source` and name the problem; nothing is applied when the
/// document is invalid.
pub fn import_definitions(
    broker: &Arc<Broker>,
    json: &[u8],
    settings: &Settings,
    source: &str,
) -> Result<(), String> {
    let text = std::str::from_utf8(json).map_err(|_| format!("{source}: not UTF-8 text"))?;
    let definitions = Definitions::from_json_str(text).map_err(|e| format!("{source}: {e}"))?;
    apply_parsed(broker, &definitions, settings, source)?;
    tracing::info!(source, "definitions imported");
    Ok(())
}

fn apply_parsed(
    broker: &Arc<Broker>,
    definitions: &Definitions,
    settings: &Settings,
    path: &str,
) -> Result<(), String> {
    // Vhosts and users that exist already may be named without being declared (the
    // default ones at boot, everything when importing into a running broker).
    let mut vhost_names = vec![settings.default_vhost.clone()];
    vhost_names.extend(
        broker
            .vhost_names()
            .into_iter()
            .filter(|name| *name != settings.default_vhost),
    );
    let vhost_names: Vec<&str> = vhost_names.iter().map(String::as_str).collect();
    let existing_users = broker.users();
    let mut user_names = vec![settings.default_user.as_str()];
    user_names.extend(existing_users.iter().map(|u| u.name.as_str()));
    let report = definitions
        .validate_with(&vhost_names, &user_names)
        .map_err(|e| e.to_string())?;
    let mut users = Vec::new();
    for user in &definitions.users {
        let password = user
            .credentials()
            .map_err(|e| format!("{}: user '{}': {e}", path, user.name))?;
        users.push(User {
            name: user.name.clone(),
            password: Some(password),
            tags: user.tags.clone(),
        });
    }
    let mut policies = Vec::new();
    for entry in &definitions.policies {
        policies.push(policy_from_json(entry, false).map_err(|e| format!("{}: {e}", path))?);
    }
    let mut operator_policies = Vec::new();
    for entry in &definitions.operator_policies {
        operator_policies
            .push(policy_from_json(entry, true).map_err(|e| format!("{}: {e}", path))?);
    }
    let mut permissions = Vec::new();
    for p in &definitions.permissions {
        let granted = Permissions::new(&p.configure, &p.write, &p.read).map_err(|e| {
            format!(
                "{}: permissions of '{}' in '{}': {e}",
                path, p.user, p.vhost
            )
        })?;
        permissions.push((p, granted));
    }
    let topic_permissions =
        parse_topic_permissions(definitions).map_err(|e| format!("{path}: {e}"))?;
    let parameters = parse_parameters(definitions).map_err(|e| format!("{path}: {e}"))?;
    let global_parameters =
        parse_global_parameters(definitions).map_err(|e| format!("{path}: {e}"))?;
    check_queue_types(definitions, QUEUE_TYPES).map_err(|e| format!("{path}: {e}"))?;
    let known_vhost = |name: &str| {
        vhost_names.contains(&name) || definitions.vhosts.iter().any(|v| v.name == name)
    };
    for (vhost, user, _) in &topic_permissions {
        if !known_vhost(vhost) {
            return Err(format!(
                "{path}: topic permission of '{user}' names vhost '{vhost}', which is not declared"
            ));
        }
    }
    for parameter in &parameters {
        if !known_vhost(&parameter.vhost) {
            return Err(format!(
                "{path}: parameter '{}' of component '{}' names vhost '{}', which is not declared",
                parameter.name, parameter.component, parameter.vhost
            ));
        }
    }

    // Validation passed: from here on, apply. The `try_` forms commit each change through
    // the cluster when the node runs clustered (an import through the HTTP API); at boot
    // and for a metadata snapshot they apply locally.
    let failed = |e: warren_core::CoreError| format!("{path}: {e}");
    for vhost in &definitions.vhosts {
        let queue_type = vhost.effective_default_queue_type().map(str::to_string);
        let (added, _) = broker
            .try_add_vhost(&vhost.name, queue_type.clone())
            .map_err(failed)?;
        if queue_type.is_none() && added.default_queue_type().is_some() {
            added.set_default_queue_type(None);
        }
    }
    for user in users {
        broker.try_put_user(user).map_err(failed)?;
    }
    // Users' `limits` (RabbitMQ keeps them in the user record; Warren in a global parameter,
    // see docs/operations.md).
    let user_limits: Vec<(String, serde_json::Map<String, serde_json::Value>)> = definitions
        .users
        .iter()
        .filter_map(|user| Some((user.name.clone(), user.limits.as_object()?.clone())))
        .collect();
    warren_management::api::import_user_limits(broker, &user_limits).map_err(failed)?;
    for (p, granted) in permissions {
        broker
            .vhost(&p.vhost)
            .ok_or_else(|| format!("{}: no vhost '{}'", path, p.vhost))?
            .try_set_permissions(&p.user, granted)
            .map_err(failed)?;
    }
    // Topology is declared as the broker itself (connection 0), bypassing permissions.
    const LOADER: &str = "\u{0}definitions-loader";
    let declare_as_loader = |vhost: &str| -> Result<_, String> {
        let vhost = broker
            .vhost(vhost)
            .ok_or_else(|| format!("{}: no vhost '{vhost}'", path))?;
        if vhost.permissions(LOADER).is_none() {
            vhost
                .try_set_permissions(LOADER, Permissions::full())
                .map_err(|e| format!("{path}: {e}"))?;
        }
        Ok(vhost)
    };
    let actor = Actor {
        user: LOADER,
        connection_id: BROKER_CONNECTION,
    };
    let mut touched = Vec::new();
    for exchange in &definitions.exchanges {
        if !broker.has_exchange_type(&exchange.exchange_type)
            && report
                .plugin_exchanges
                .iter()
                .any(|p| p.name == exchange.name && p.vhost == exchange.vhost)
        {
            continue;
        }
        let vhost = declare_as_loader(&exchange.vhost)?;
        vhost
            .declare_exchange(
                actor,
                ExchangeDeclare {
                    name: exchange.name.clone(),
                    kind: exchange.exchange_type.clone(),
                    passive: false,
                    durable: exchange.durable,
                    auto_delete: exchange.auto_delete,
                    internal: exchange.internal,
                    arguments: json_args_to_table(&exchange.arguments),
                },
            )
            .map_err(|e| format!("{}: exchange '{}': {e}", path, exchange.name))?;
        touched.push(vhost);
    }
    for queue in &definitions.queues {
        let vhost = declare_as_loader(&queue.vhost)?;
        let mut arguments = json_args_to_table(&queue.arguments);
        // The type travels as `x-queue-type`, as the management API's queue PUT does it (a
        // classic queue without the argument stays without it, so the export matches).
        if let Some(queue_type) = declared_queue_type(queue) {
            if arguments.get("x-queue-type").is_none() && queue_type != "classic" {
                arguments.insert(
                    "x-queue-type",
                    warren_core::value::Value::string(queue_type),
                );
            }
        }
        vhost
            .declare_queue(
                actor,
                QueueDeclare {
                    name: queue.name.clone(),
                    passive: false,
                    durable: queue.durable,
                    exclusive: false,
                    auto_delete: queue.auto_delete,
                    arguments,
                },
            )
            .map_err(|e| format!("{}: queue '{}': {e}", path, queue.name))?;
        touched.push(vhost);
    }
    for binding in &definitions.bindings {
        let vhost = declare_as_loader(&binding.vhost)?;
        let destination = match binding.destination_type {
            DestinationType::Queue => DestinationName::Queue(binding.destination.clone()),
            DestinationType::Exchange => DestinationName::Exchange(binding.destination.clone()),
        };
        vhost
            .bind(
                actor,
                &binding.source,
                destination,
                &binding.routing_key,
                json_args_to_table(&binding.arguments),
            )
            .map_err(|e| {
                format!(
                    "{}: binding '{}' -> '{}': {e}",
                    path, binding.source, binding.destination
                )
            })?;
        touched.push(vhost);
    }
    for vhost in touched {
        if vhost.permissions(LOADER).is_some() {
            vhost.try_clear_permissions(LOADER).map_err(failed)?;
        }
    }
    for (vhost, policy) in policies {
        let target = broker
            .vhost(&vhost)
            .ok_or_else(|| format!("{}: policy '{}': no vhost '{vhost}'", path, policy.name))?;
        target.try_set_policy(policy, false).map_err(failed)?;
    }
    for (vhost, policy) in operator_policies {
        let target = broker.vhost(&vhost).ok_or_else(|| {
            format!(
                "{}: operator policy '{}': no vhost '{vhost}'",
                path, policy.name
            )
        })?;
        target.try_set_policy(policy, true).map_err(failed)?;
    }
    for plugin in &report.plugin_exchanges {
        if broker.has_exchange_type(&plugin.exchange_type) {
            continue;
        }
        tracing::warn!(
            "definitions: exchange '{}' in vhost '{}' has plugin type '{}', which is not enabled; skipped",
            plugin.name,
            plugin.vhost,
            plugin.exchange_type
        );
    }
    for (vhost, user, permission) in topic_permissions {
        let target = broker
            .vhost(&vhost)
            .ok_or_else(|| format!("{path}: topic permission of '{user}': no vhost '{vhost}'"))?;
        target
            .try_set_topic_permission(&user, permission)
            .map_err(failed)?;
    }
    for parameter in parameters {
        if !APPLIED_COMPONENTS.contains(&parameter.component.as_str()) {
            tracing::warn!(
                "definitions: parameter '{}' of component '{}' in vhost '{}' is kept but not applied (Warren does not implement that component)",
                parameter.name,
                parameter.component,
                parameter.vhost
            );
        }
        broker.try_set_parameter(parameter).map_err(failed)?;
    }
    for (name, value) in global_parameters {
        if !APPLIED_GLOBAL_PARAMETERS.contains(&name.as_str()) {
            tracing::warn!(
                "definitions: global parameter '{name}' is kept but not applied (Warren does not use it)"
            );
        }
        broker
            .try_set_global_parameter(&name, value)
            .map_err(failed)?;
    }
    let _ = &report.unapplied;
    Ok(())
}

/// Runtime parameter components Warren acts on (`vhost-limits`, enforced by the core); every
/// other parameter is kept for export and listed, and the log says it is not applied.
const APPLIED_COMPONENTS: [&str; 1] = [warren_core::resource_limits::VHOST_LIMITS_COMPONENT];

/// Global parameters Warren acts on: `cluster_name` is shown by the management API.
const APPLIED_GLOBAL_PARAMETERS: [&str; 1] = ["cluster_name"];

/// The queue types definitions may declare: classic queues, quorum queues and streams, each
/// through `VHost::declare_queue` with its `x-queue-type` (a quorum queue becomes a Raft
/// group on this node; an import of RabbitMQ's definitions brings no messages). A type not
/// listed here is refused whole, naming the queue and the type, rather than serving a
/// classic queue under the name (which would then export differently from what was
/// imported). This list and [`check_queue_types`] are the one place that decides.
const QUEUE_TYPES: &[&str] = &["classic", "quorum", "stream"];

/// The type a definitions entry gives its queue: the `x-queue-type` argument, else `type`.
fn declared_queue_type(queue: &warren_config::QueueDefinition) -> Option<String> {
    queue
        .arguments
        .get("x-queue-type")
        .and_then(|value| value.as_str())
        .map(str::to_string)
        .or_else(|| queue.queue_type.clone())
}

/// Refuses definitions with a queue of a type Warren cannot create yet.
fn check_queue_types(definitions: &Definitions, allowed: &[&str]) -> Result<(), String> {
    for queue in &definitions.queues {
        if let Some(queue_type) = declared_queue_type(queue) {
            if !allowed.contains(&queue_type.as_str()) {
                return Err(format!(
                    "queue '{}' in vhost '{}' has type '{queue_type}', which Warren does not support yet (only {}); nothing was imported",
                    queue.name,
                    queue.vhost,
                    allowed.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// `topic_permissions` entries: `{user, vhost, exchange, write, read}`, compiled (so a bad
/// pattern is refused before anything is applied).
fn parse_topic_permissions(
    definitions: &Definitions,
) -> Result<Vec<(String, String, TopicPermission)>, String> {
    let mut parsed = Vec::new();
    for entry in &definitions.topic_permissions {
        let field = |key: &str| entry.get(key).and_then(serde_json::Value::as_str);
        let user = field("user").ok_or("a topic permission without a user")?;
        let vhost = field("vhost").unwrap_or("/");
        let exchange = field("exchange")
            .ok_or_else(|| format!("topic permission of '{user}' has no exchange"))?;
        let write = field("write").unwrap_or("");
        let read = field("read").unwrap_or("");
        let permission = TopicPermission::new(user, vhost, exchange, write, read).map_err(|e| {
            format!("topic permission of '{user}' in '{vhost}' on '{exchange}': {e}")
        })?;
        parsed.push((vhost.to_string(), user.to_string(), permission));
    }
    Ok(parsed)
}

/// `parameters` entries: `{vhost, component, name, value}`; the value is kept as JSON text.
fn parse_parameters(definitions: &Definitions) -> Result<Vec<RuntimeParameter>, String> {
    let mut parsed = Vec::new();
    for entry in &definitions.parameters {
        let field = |key: &str| entry.get(key).and_then(serde_json::Value::as_str);
        let name = field("name").ok_or("a parameter without a name")?;
        let component =
            field("component").ok_or_else(|| format!("parameter '{name}' has no component"))?;
        let value = entry
            .get("value")
            .ok_or_else(|| format!("parameter '{name}' has no value"))?;
        parsed.push(RuntimeParameter {
            vhost: field("vhost").unwrap_or("/").to_string(),
            component: component.to_string(),
            name: name.to_string(),
            value: value.to_string(),
        });
    }
    Ok(parsed)
}

/// `global_parameters` entries: `{name, value}`; the value is kept as JSON text.
fn parse_global_parameters(definitions: &Definitions) -> Result<Vec<(String, String)>, String> {
    let mut parsed = Vec::new();
    for entry in &definitions.global_parameters {
        let name = entry
            .get("name")
            .and_then(serde_json::Value::as_str)
            .ok_or("a global parameter without a name")?;
        let value = entry
            .get("value")
            .ok_or_else(|| format!("global parameter '{name}' has no value"))?;
        parsed.push((name.to_string(), value.to_string()));
    }
    Ok(parsed)
}

/// A policy entry of definitions.json: `{vhost, name, pattern, apply-to, definition, priority}`
/// (an operator policy with `operator`).
fn policy_from_json(entry: &serde_json::Value, operator: bool) -> Result<(String, Policy), String> {
    let field = |key: &str| entry.get(key).and_then(serde_json::Value::as_str);
    let name = field("name").ok_or("a policy without a name")?;
    let vhost = field("vhost").unwrap_or("/");
    let pattern = field("pattern").ok_or_else(|| format!("policy '{name}' has no pattern"))?;
    let apply_to = field("apply-to").unwrap_or("all");
    let priority = entry
        .get("priority")
        .and_then(serde_json::Value::as_i64)
        .unwrap_or(0);
    let priority = i32::try_from(priority)
        .map_err(|_| format!("policy '{name}': priority {priority} is out of range"))?;
    let definition = match entry.get("definition") {
        Some(serde_json::Value::Object(map)) => json_args_to_table(map),
        _ => return Err(format!("policy '{name}' has no definition object")),
    };
    let policy = Policy::new(name, pattern, apply_to, priority, definition, operator)
        .map_err(|e| format!("policy '{name}' in vhost '{vhost}': {e}"))?;
    Ok((vhost.to_string(), policy))
}
