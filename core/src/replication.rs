//! The core's one hook into clustering: before a topology change is applied, the core hands
//! it to a [`TopologyReplicator`] (implemented by the cluster crate), which commits it through
//! the cluster's metadata log and returns a [`ReplicationPermit`]. The change is applied
//! locally while the permit is held; dropping the permit tells the replicator the local apply
//! is over, so every node applies the log in the same order. Other nodes apply the committed
//! change with [`apply`].
//!
//! A single node installs no replicator: [`crate::durability::Durability::replicate`] is then one
//! `OnceLock` load and the change is applied as it always was.
//!
//! Nested changes (deleting a vhost deletes its queues) run inside the outer change's permit
//! and are not replicated again: every node replays the outer change, which does the same.

use std::cell::Cell;

use crate::access::{Permissions, User};
use crate::error::{CoreError, CoreResult, ErrorKind};
use crate::exchange::DestinationName;
use crate::password::PasswordHash;
use crate::policy::Policy;
use crate::topic_access::TopicPermission;
use crate::value::Table;
use crate::vhost::{Actor, ExchangeDeclare, QueueDeclare, BROKER_CONNECTION};
use crate::Broker;

/// One replicated metadata change, as plain data (the cluster crate encodes it).
#[derive(Debug, Clone)]
pub enum TopologyChange {
    /// Create a vhost (with its default queue type).
    AddVhost {
        /// The vhost.
        name: String,
        /// Its `default_queue_type` metadata.
        default_queue_type: Option<String>,
    },
    /// Delete a vhost and everything in it.
    DeleteVhost {
        /// The vhost.
        name: String,
    },
    /// Add or replace a user.
    PutUser {
        /// The user name.
        name: String,
        /// `(hashing algorithm as RabbitMQ names it, base64 salted hash)`; `None` for a user
        /// without a password.
        password: Option<(String, String)>,
        /// Tags.
        tags: Vec<String>,
    },
    /// Delete a user and their permissions.
    DeleteUser {
        /// The user name.
        name: String,
    },
    /// Grant permissions.
    SetPermissions {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// Configure, write and read patterns.
        patterns: (String, String, String),
    },
    /// Remove a user's permissions in a vhost.
    ClearPermissions {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
    },
    /// Set a topic permission.
    SetTopicPermission {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// The exchange it restricts.
        exchange: String,
        /// Write and read patterns, as written.
        patterns: (String, String),
    },
    /// Clear a user's topic permissions (on one exchange, or all).
    ClearTopicPermissions {
        /// The vhost.
        vhost: String,
        /// The user.
        user: String,
        /// The exchange, or every exchange.
        exchange: Option<String>,
    },
    /// Set a policy or operator policy.
    SetPolicy {
        /// The vhost.
        vhost: String,
        /// Operator policy rather than policy.
        operator: bool,
        /// Name.
        name: String,
        /// Pattern as written.
        pattern: String,
        /// `apply-to` as RabbitMQ names it.
        apply_to: String,
        /// Priority.
        priority: i32,
        /// The definition.
        definition: Table,
    },
    /// Clear a policy.
    ClearPolicy {
        /// The vhost.
        vhost: String,
        /// Operator policy rather than policy.
        operator: bool,
        /// Name.
        name: String,
    },
    /// exchange.declare (not passive).
    DeclareExchange {
        /// The vhost.
        vhost: String,
        /// Who declared it (checked again on every node).
        user: String,
        /// The request.
        request: ExchangeDeclare,
    },
    /// exchange.delete.
    DeleteExchange {
        /// The vhost.
        vhost: String,
        /// Who asked.
        user: String,
        /// The exchange.
        name: String,
        /// Only if unused.
        if_unused: bool,
    },
    /// queue.declare of a non-exclusive queue (with its name resolved).
    DeclareQueue {
        /// The vhost.
        vhost: String,
        /// Who declared it.
        user: String,
        /// The request.
        request: QueueDeclare,
    },
    /// queue.delete.
    DeleteQueue {
        /// The vhost.
        vhost: String,
        /// Who asked.
        user: String,
        /// The queue.
        name: String,
        /// Only if it has no consumers.
        if_unused: bool,
        /// Only if it is empty.
        if_empty: bool,
    },
    /// The broker dropped an exclusive or auto-delete queue homed on `home` (its owner
    /// connection closed, its last consumer went, or `home` went down): every node removes
    /// its copy, unless the queue it holds under that name is homed elsewhere now (the name
    /// was declared again on another node meanwhile).
    DropQueue {
        /// The vhost.
        vhost: String,
        /// The queue.
        name: String,
        /// The node the dropped queue lived on.
        home: String,
    },
    /// Set (`Some`, JSON text) or clear (`None`) a global parameter such as `cluster_name`.
    GlobalParameter {
        /// The parameter.
        name: String,
        /// Its value as JSON text, or `None` to clear it.
        value: Option<String>,
    },
    /// Set (`Some`, JSON text) or clear (`None`) a runtime parameter of a vhost, such as
    /// its `vhost-limits`.
    RuntimeParameter {
        /// The vhost.
        vhost: String,
        /// The component (`vhost-limits`, `shovel`, ...).
        component: String,
        /// The parameter.
        name: String,
        /// Its value as JSON text, or `None` to clear it.
        value: Option<String>,
    },
    /// Where a stream lives: its members, leader and epoch (docs/streams.md,
    /// "Replication"). Committed by the stream's home node after its declaration, and by the
    /// metadata leader when a new leader takes over; each node applies it to its copy.
    StreamPlacement {
        /// The vhost.
        vhost: String,
        /// The stream.
        name: String,
        /// The placement.
        placement: crate::stream_log::Placement,
    },
    /// queue.bind / exchange.bind (`bound = true`), queue.unbind / exchange.unbind.
    Binding {
        /// Bind rather than unbind.
        bound: bool,
        /// The vhost.
        vhost: String,
        /// Who asked.
        user: String,
        /// Source exchange.
        source: String,
        /// Destination queue or exchange.
        destination: DestinationName,
        /// Routing key.
        routing_key: String,
        /// Arguments.
        arguments: Table,
    },
}

impl TopologyChange {
    /// A short description for logs: `declare exchange 'x' in vhost '/'`.
    pub fn describe(&self) -> String {
        match self {
            TopologyChange::AddVhost { name, .. } => format!("add vhost '{name}'"),
            TopologyChange::DeleteVhost { name } => format!("delete vhost '{name}'"),
            TopologyChange::PutUser { name, .. } => format!("put user '{name}'"),
            TopologyChange::DeleteUser { name } => format!("delete user '{name}'"),
            TopologyChange::SetPermissions { vhost, user, .. } => {
                format!("set permissions of '{user}' in vhost '{vhost}'")
            }
            TopologyChange::ClearPermissions { vhost, user } => {
                format!("clear permissions of '{user}' in vhost '{vhost}'")
            }
            TopologyChange::SetTopicPermission { vhost, user, .. } => {
                format!("set topic permission of '{user}' in vhost '{vhost}'")
            }
            TopologyChange::ClearTopicPermissions { vhost, user, .. } => {
                format!("clear topic permissions of '{user}' in vhost '{vhost}'")
            }
            TopologyChange::SetPolicy { vhost, name, .. } => {
                format!("set policy '{name}' in vhost '{vhost}'")
            }
            TopologyChange::ClearPolicy { vhost, name, .. } => {
                format!("clear policy '{name}' in vhost '{vhost}'")
            }
            TopologyChange::DeclareExchange { vhost, request, .. } => {
                format!("declare exchange '{}' in vhost '{vhost}'", request.name)
            }
            TopologyChange::DeleteExchange { vhost, name, .. } => {
                format!("delete exchange '{name}' in vhost '{vhost}'")
            }
            TopologyChange::DeclareQueue { vhost, request, .. } => {
                format!("declare queue '{}' in vhost '{vhost}'", request.name)
            }
            TopologyChange::DeleteQueue { vhost, name, .. } => {
                format!("delete queue '{name}' in vhost '{vhost}'")
            }
            TopologyChange::DropQueue { vhost, name, home } => {
                format!("drop queue '{name}' of node '{home}' in vhost '{vhost}'")
            }
            TopologyChange::StreamPlacement {
                vhost,
                name,
                placement,
            } => format!(
                "place stream '{name}' in vhost '{vhost}' (leader '{}', epoch {})",
                placement.leader, placement.epoch
            ),
            TopologyChange::GlobalParameter { name, value } => format!(
                "{} global parameter '{name}'",
                if value.is_some() { "set" } else { "clear" }
            ),
            TopologyChange::RuntimeParameter {
                vhost,
                component,
                name,
                value,
            } => format!(
                "{} parameter '{name}' of component '{component}' in vhost '{vhost}'",
                if value.is_some() { "set" } else { "clear" }
            ),
            TopologyChange::Binding {
                bound,
                vhost,
                source,
                ..
            } => format!(
                "{} from exchange '{source}' in vhost '{vhost}'",
                if *bound { "bind" } else { "unbind" }
            ),
        }
    }
}

/// The error every protocol reports when the cluster cannot commit a change: 0-9-1 506
/// RESOURCE_ERROR (a connection error), AMQP 1.0 `amqp:resource-limit-exceeded`, a STOMP
/// ERROR frame, HTTP 503.
pub fn no_majority(what: &str) -> CoreError {
    CoreError::new(
        ErrorKind::Unavailable,
        format!(
            "cannot {what}: the cluster has no majority (a majority of its nodes is not reachable from this node); the change was not made"
        ),
    )
}

/// Commits topology changes through the cluster before the core applies them.
pub trait TopologyReplicator: Send + Sync {
    /// Commits `change` through the cluster's metadata log, or refuses it (with
    /// [`no_majority`] when no majority answered in time). The core applies the change
    /// while the returned permit is held.
    fn replicate(&self, change: TopologyChange) -> CoreResult<ReplicationPermit>;
}

thread_local! {
    /// Set while this thread applies a change that was (or needs no) replication: nested
    /// changes are part of it.
    static APPLYING: Cell<bool> = const { Cell::new(false) };
}

/// Whether the current thread is inside a replicated change.
pub(crate) fn applying() -> bool {
    APPLYING.with(Cell::get)
}

/// Held while a committed change is applied locally; dropping it ends the local apply.
#[must_use = "the change is applied while the permit is held"]
pub struct ReplicationPermit {
    done: Option<Box<dyn FnOnce() + Send>>,
    /// Whether this permit set the thread's applying flag (and so must clear it).
    outermost: bool,
}

impl ReplicationPermit {
    /// A permit with nothing to report (single node, nested change).
    pub fn none() -> ReplicationPermit {
        ReplicationPermit {
            done: None,
            outermost: false,
        }
    }

    /// A permit that calls `done` once the local apply is over.
    pub fn new(done: impl FnOnce() + Send + 'static) -> ReplicationPermit {
        let outermost = !applying();
        APPLYING.with(|flag| flag.set(true));
        ReplicationPermit {
            done: Some(Box::new(done)),
            outermost,
        }
    }
}

impl Drop for ReplicationPermit {
    fn drop(&mut self) {
        if self.outermost {
            APPLYING.with(|flag| flag.set(false));
        }
        if let Some(done) = self.done.take() {
            done();
        }
    }
}

/// Runs `f` as the apply of a committed change: changes it makes are not replicated again.
pub fn applying_replicated<R>(f: impl FnOnce() -> R) -> R {
    let outer = APPLYING.with(|flag| flag.replace(true));
    let result = f();
    APPLYING.with(|flag| flag.set(outer));
    result
}

/// Applies a committed change from the metadata log to this node's core, as the originating
/// node applied it (topology as the user who asked, checked again here).
pub fn apply(broker: &Broker, change: &TopologyChange) -> CoreResult<()> {
    applying_replicated(|| apply_unreplicated(broker, change))
}

fn vhost_or_404(broker: &Broker, vhost: &str) -> CoreResult<std::sync::Arc<crate::vhost::VHost>> {
    broker
        .vhost(vhost)
        .ok_or_else(|| CoreError::not_found(format!("no vhost '{vhost}'")))
}

fn actor(user: &str) -> Actor<'_> {
    Actor {
        user,
        connection_id: BROKER_CONNECTION,
    }
}

fn apply_unreplicated(broker: &Broker, change: &TopologyChange) -> CoreResult<()> {
    match change {
        TopologyChange::AddVhost {
            name,
            default_queue_type,
        } => {
            let vhost = broker.add_vhost(name);
            if vhost.default_queue_type() != *default_queue_type {
                vhost.set_default_queue_type(default_queue_type.clone());
            }
        }
        TopologyChange::DeleteVhost { name } => {
            broker.delete_vhost(name);
        }
        TopologyChange::PutUser {
            name,
            password,
            tags,
        } => {
            let password = match password {
                Some((algorithm, hash)) => Some(
                    PasswordHash::from_rabbit(algorithm, hash)
                        .map_err(|e| CoreError::precondition_failed(e.to_string()))?,
                ),
                None => None,
            };
            broker.put_user(User {
                name: name.clone(),
                password,
                tags: tags.clone(),
            });
        }
        TopologyChange::DeleteUser { name } => {
            broker.delete_user(name);
        }
        TopologyChange::SetPermissions {
            vhost,
            user,
            patterns,
        } => {
            let granted = Permissions::new(&patterns.0, &patterns.1, &patterns.2)?;
            vhost_or_404(broker, vhost)?.set_permissions(user, granted);
        }
        TopologyChange::ClearPermissions { vhost, user } => {
            vhost_or_404(broker, vhost)?.clear_permissions(user);
        }
        TopologyChange::SetTopicPermission {
            vhost,
            user,
            exchange,
            patterns,
        } => {
            let permission = TopicPermission::new(user, vhost, exchange, &patterns.0, &patterns.1)?;
            vhost_or_404(broker, vhost)?.set_topic_permission(user, permission);
        }
        TopologyChange::ClearTopicPermissions {
            vhost,
            user,
            exchange,
        } => {
            vhost_or_404(broker, vhost)?.clear_topic_permissions(user, exchange.as_deref());
        }
        TopologyChange::SetPolicy {
            vhost,
            operator,
            name,
            pattern,
            apply_to,
            priority,
            definition,
        } => {
            let policy = Policy::new(
                name,
                pattern,
                apply_to,
                *priority,
                definition.clone(),
                *operator,
            )?;
            vhost_or_404(broker, vhost)?.set_policy(policy, *operator);
        }
        TopologyChange::ClearPolicy {
            vhost,
            operator,
            name,
        } => {
            vhost_or_404(broker, vhost)?.clear_policy(name, *operator)?;
        }
        TopologyChange::DeclareExchange {
            vhost,
            user,
            request,
        } => {
            vhost_or_404(broker, vhost)?.declare_exchange(actor(user), request.clone())?;
        }
        TopologyChange::DeleteExchange {
            vhost,
            user,
            name,
            if_unused,
        } => {
            vhost_or_404(broker, vhost)?.delete_exchange(actor(user), name, *if_unused)?;
        }
        TopologyChange::DeclareQueue {
            vhost,
            user,
            request,
        } => {
            vhost_or_404(broker, vhost)?.declare_queue(actor(user), request.clone())?;
        }
        TopologyChange::DeleteQueue {
            vhost,
            user,
            name,
            if_unused,
            if_empty,
        } => {
            vhost_or_404(broker, vhost)?.delete_queue(actor(user), name, *if_unused, *if_empty)?;
        }
        TopologyChange::DropQueue { vhost, name, home } => {
            if let Some(vhost) = broker.vhost(vhost) {
                vhost.drop_transient_queue(name, home);
            }
        }
        TopologyChange::StreamPlacement {
            vhost,
            name,
            placement,
        } => {
            let local = broker
                .durability
                .local_node()
                .unwrap_or_default()
                .to_owned();
            if let Some(log) = broker.vhost(vhost).and_then(|v| v.streams().get(name)) {
                log.set_placement(placement, &local);
            }
        }
        TopologyChange::GlobalParameter { name, value } => match value {
            Some(value) => {
                broker.set_global_parameter(name, value.clone());
            }
            None => {
                broker.clear_global_parameter(name);
            }
        },
        TopologyChange::RuntimeParameter {
            vhost,
            component,
            name,
            value,
        } => match value {
            Some(value) => {
                broker.set_parameter(crate::parameters::RuntimeParameter {
                    vhost: vhost.clone(),
                    component: component.clone(),
                    name: name.clone(),
                    value: value.clone(),
                });
            }
            None => {
                broker.clear_parameter(vhost, component, name);
            }
        },
        TopologyChange::Binding {
            bound,
            vhost,
            user,
            source,
            destination,
            routing_key,
            arguments,
        } => {
            let vhost = vhost_or_404(broker, vhost)?;
            if *bound {
                vhost.bind(
                    actor(user),
                    source,
                    destination.clone(),
                    routing_key,
                    arguments.clone(),
                )?;
            } else {
                vhost.unbind(
                    actor(user),
                    source,
                    destination.clone(),
                    routing_key,
                    arguments.clone(),
                )?;
            }
        }
    }
    Ok(())
}

impl crate::queue::Queue {
    /// Whether the queue belongs to a connection or to its consumers: exclusive queues (one
    /// connection's) and auto-delete queues (deleted when their consumers go). On a cluster
    /// they are replicated like any queue, but only their home node deletes them (with
    /// [`TopologyChange::DropQueue`]).
    pub fn is_node_local(&self) -> bool {
        let config = self.config();
        config.exclusive_owner.is_some() || config.auto_delete
    }
}

/// The replicated forms of the changes whose plain forms cannot fail (boot-time set-up and
/// tests keep those): each commits through the cluster first when the node runs clustered,
/// then applies as the plain form does. Front ends (the HTTP API, warrenctl) use these.
impl Broker {
    /// Names this node in its cluster, before its metadata log is replayed (a replayed drop
    /// tells this node's own queues from other nodes' by it). False if it was named already.
    pub fn set_local_node(&self, name: &str) -> bool {
        self.durability.set_local_node(name)
    }

    /// Replaces where stream protocol clients reach each running peer (`host`, stream
    /// port): the stream listener's `Metadata` names them.
    pub fn set_stream_endpoints(
        &self,
        endpoints: std::collections::HashMap<String, (String, u16)>,
    ) {
        self.durability.set_stream_endpoints(endpoints);
    }

    /// Installs the cluster's replicator: from now on topology changes are committed through
    /// it before they apply. False if one was installed already.
    pub fn set_replicator(&self, replicator: std::sync::Arc<dyn TopologyReplicator>) -> bool {
        self.durability.set_replicator(replicator)
    }

    /// Creates a vhost with `default_queue_type` (or returns the existing one, updating its
    /// default type); true when it was created.
    pub fn try_add_vhost(
        &self,
        name: &str,
        default_queue_type: Option<String>,
    ) -> CoreResult<(std::sync::Arc<crate::vhost::VHost>, bool)> {
        let unchanged = self.vhost(name).filter(|existing| {
            default_queue_type.is_none() || existing.default_queue_type() == default_queue_type
        });
        if let Some(existing) = unchanged {
            return Ok((existing, false));
        }
        let _replicated = self.durability.replicate(|| TopologyChange::AddVhost {
            name: name.to_string(),
            default_queue_type: default_queue_type.clone(),
        })?;
        let created = self.vhost(name).is_none();
        let vhost = self.add_vhost(name);
        if default_queue_type.is_some() {
            vhost.set_default_queue_type(default_queue_type);
        }
        Ok((vhost, created))
    }

    /// Deletes a vhost and everything in it; false if there was none.
    pub fn try_delete_vhost(&self, name: &str) -> CoreResult<bool> {
        if self.vhost(name).is_none() {
            return Ok(false);
        }
        let _replicated = self.durability.replicate(|| TopologyChange::DeleteVhost {
            name: name.to_string(),
        })?;
        Ok(self.delete_vhost(name))
    }

    /// Adds or replaces a user.
    pub fn try_put_user(&self, user: User) -> CoreResult<()> {
        let _replicated = self.durability.replicate(|| TopologyChange::PutUser {
            name: user.name.clone(),
            password: user
                .password
                .as_ref()
                .map(|hash| (hash.algorithm.rabbit_name().to_string(), hash.to_base64())),
            tags: user.tags.clone(),
        })?;
        self.put_user(user);
        Ok(())
    }

    /// Sets a global parameter (value as JSON text); true if it is new.
    pub fn try_set_global_parameter(&self, name: &str, value: String) -> CoreResult<bool> {
        let _replicated = self
            .durability
            .replicate(|| TopologyChange::GlobalParameter {
                name: name.to_string(),
                value: Some(value.clone()),
            })?;
        Ok(self.set_global_parameter(name, value))
    }

    /// Clears a global parameter; true if it existed.
    pub fn try_clear_global_parameter(&self, name: &str) -> CoreResult<bool> {
        if self.global_parameter(name).is_none() {
            return Ok(false);
        }
        let _replicated = self
            .durability
            .replicate(|| TopologyChange::GlobalParameter {
                name: name.to_string(),
                value: None,
            })?;
        Ok(self.clear_global_parameter(name))
    }

    /// Sets a runtime parameter (value as JSON text) on every node; true if it is new.
    pub fn try_set_parameter(
        &self,
        parameter: crate::parameters::RuntimeParameter,
    ) -> CoreResult<bool> {
        let _replicated = self
            .durability
            .replicate(|| TopologyChange::RuntimeParameter {
                vhost: parameter.vhost.clone(),
                component: parameter.component.clone(),
                name: parameter.name.clone(),
                value: Some(parameter.value.clone()),
            })?;
        Ok(self.set_parameter(parameter))
    }

    /// Clears a runtime parameter on every node; true if it existed.
    pub fn try_clear_parameter(
        &self,
        vhost: &str,
        component: &str,
        name: &str,
    ) -> CoreResult<bool> {
        let _replicated = self
            .durability
            .replicate(|| TopologyChange::RuntimeParameter {
                vhost: vhost.to_string(),
                component: component.to_string(),
                name: name.to_string(),
                value: None,
            })?;
        Ok(self.clear_parameter(vhost, component, name))
    }

    /// Deletes a user and their permissions; false if there was none.
    pub fn try_delete_user(&self, name: &str) -> CoreResult<bool> {
        if self.user(name).is_none() {
            return Ok(false);
        }
        let _replicated = self.durability.replicate(|| TopologyChange::DeleteUser {
            name: name.to_string(),
        })?;
        Ok(self.delete_user(name))
    }
}

impl crate::vhost::VHost {
    /// Grants `user` permissions here, replacing earlier ones.
    pub fn try_set_permissions(&self, user: &str, permissions: Permissions) -> CoreResult<()> {
        let _replicated = self.durability().replicate(|| {
            let (configure, write, read) = permissions.patterns();
            TopologyChange::SetPermissions {
                vhost: self.name().to_string(),
                user: user.to_string(),
                patterns: (configure.to_string(), write.to_string(), read.to_string()),
            }
        })?;
        self.set_permissions(user, permissions);
        Ok(())
    }

    /// Removes `user`'s permissions here.
    pub fn try_clear_permissions(&self, user: &str) -> CoreResult<()> {
        let _replicated = self
            .durability()
            .replicate(|| TopologyChange::ClearPermissions {
                vhost: self.name().to_string(),
                user: user.to_string(),
            })?;
        self.clear_permissions(user);
        Ok(())
    }

    /// Sets a topic permission; true when it was new.
    pub fn try_set_topic_permission(
        &self,
        user: &str,
        permission: TopicPermission,
    ) -> CoreResult<bool> {
        let _replicated = self.durability().replicate(|| {
            let (write, read) = permission.patterns();
            TopologyChange::SetTopicPermission {
                vhost: self.name().to_string(),
                user: user.to_string(),
                exchange: permission.exchange().to_string(),
                patterns: (write.to_string(), read.to_string()),
            }
        })?;
        Ok(self.set_topic_permission(user, permission))
    }

    /// Clears `user`'s topic permissions (on one exchange, or all); true if any was removed.
    pub fn try_clear_topic_permissions(
        &self,
        user: &str,
        exchange: Option<&str>,
    ) -> CoreResult<bool> {
        let _replicated =
            self.durability()
                .replicate(|| TopologyChange::ClearTopicPermissions {
                    vhost: self.name().to_string(),
                    user: user.to_string(),
                    exchange: exchange.map(str::to_string),
                })?;
        Ok(self.clear_topic_permissions(user, exchange))
    }

    /// Sets a policy (or operator policy) and applies it.
    pub fn try_set_policy(&self, policy: Policy, operator: bool) -> CoreResult<()> {
        let _replicated = self.durability().replicate(|| TopologyChange::SetPolicy {
            vhost: self.name().to_string(),
            operator,
            name: policy.name.clone(),
            pattern: policy.pattern.clone(),
            apply_to: policy.apply_to.name().to_string(),
            priority: policy.priority,
            definition: policy.definition.clone(),
        })?;
        self.set_policy(policy, operator);
        Ok(())
    }

    /// Clears a policy by name; a missing one is a 404.
    pub fn try_clear_policy(&self, name: &str, operator: bool) -> CoreResult<()> {
        if !self.policies(operator).iter().any(|p| p.name == name) {
            return self.clear_policy(name, operator);
        }
        let _replicated = self
            .durability()
            .replicate(|| TopologyChange::ClearPolicy {
                vhost: self.name().to_string(),
                operator,
                name: name.to_string(),
            })?;
        self.clear_policy(name, operator)
    }
}

impl Broker {
    /// Commits where stream `name` lives (its members, leader and epoch) through the
    /// cluster, then applies it here.
    pub fn try_place_stream(
        &self,
        vhost: &str,
        name: &str,
        placement: crate::stream_log::Placement,
    ) -> CoreResult<()> {
        let change = TopologyChange::StreamPlacement {
            vhost: vhost.to_string(),
            name: name.to_string(),
            placement,
        };
        let _replicated = self.durability.replicate(|| change.clone())?;
        apply_unreplicated(self, &change)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::Limits;
    use parking_lot::Mutex;
    use std::sync::Arc;

    /// Records what it is asked to replicate; refuses everything while `refuse` is set.
    #[derive(Default)]
    struct Recorder {
        seen: Mutex<Vec<String>>,
        refuse: std::sync::atomic::AtomicBool,
    }

    impl TopologyReplicator for Recorder {
        fn replicate(&self, change: TopologyChange) -> CoreResult<ReplicationPermit> {
            if self.refuse.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(no_majority(&change.describe()));
            }
            self.seen.lock().push(change.describe());
            Ok(ReplicationPermit::new(|| {}))
        }
    }

    fn exchange(name: &str) -> ExchangeDeclare {
        ExchangeDeclare {
            name: name.to_string(),
            kind: "direct".to_string(),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: Table::new(),
        }
    }

    fn queue(name: &str, exclusive: bool) -> QueueDeclare {
        QueueDeclare {
            name: name.to_string(),
            passive: false,
            durable: !exclusive,
            exclusive,
            auto_delete: false,
            arguments: Table::new(),
        }
    }

    #[test]
    fn changes_are_replicated_once_and_nested_ones_not_at_all() {
        let broker = Broker::new(Limits::default());
        let vhost = broker.add_vhost("v");
        vhost.set_permissions("admin", Permissions::full());
        let recorder = Arc::new(Recorder::default());
        assert!(broker.durability.set_replicator(recorder.clone()));
        let admin = Actor {
            user: "admin",
            connection_id: 7,
        };
        vhost.declare_exchange(admin, exchange("x")).unwrap();
        vhost.declare_exchange(admin, exchange("x")).unwrap(); // redeclared: not replicated
        vhost.declare_queue(admin, queue("q", false)).unwrap();
        // Exclusive and auto-delete queues too: other nodes route to them.
        vhost.declare_queue(admin, queue("mine", true)).unwrap();
        let temporary = QueueDeclare {
            auto_delete: true,
            ..queue("temporary", false)
        };
        vhost.declare_queue(admin, temporary).unwrap();
        vhost
            .bind(
                admin,
                "x",
                DestinationName::Queue("temporary".into()),
                "k",
                Table::new(),
            )
            .unwrap();
        vhost
            .bind(
                admin,
                "x",
                DestinationName::Queue("q".into()),
                "k",
                Table::new(),
            )
            .unwrap();
        broker.try_delete_vhost("v").unwrap(); // its queues go with it, in one change
        assert_eq!(
            *recorder.seen.lock(),
            [
                "declare exchange 'x' in vhost 'v'",
                "declare queue 'q' in vhost 'v'",
                "declare queue 'mine' in vhost 'v'",
                "declare queue 'temporary' in vhost 'v'",
                "bind from exchange 'x' in vhost 'v'",
                "bind from exchange 'x' in vhost 'v'",
                "delete vhost 'v'",
            ]
        );
        assert!(!applying(), "the permit cleared the thread's flag");
    }

    #[test]
    fn a_refused_change_is_not_applied_and_says_the_cluster_has_no_majority() {
        let broker = Broker::new(Limits::default());
        let vhost = broker.add_vhost("v");
        vhost.set_permissions("admin", Permissions::full());
        let recorder = Arc::new(Recorder::default());
        recorder
            .refuse
            .store(true, std::sync::atomic::Ordering::Relaxed);
        broker.durability.set_replicator(recorder);
        let admin = Actor {
            user: "admin",
            connection_id: 7,
        };
        let error = vhost.declare_exchange(admin, exchange("x")).unwrap_err();
        assert_eq!(error.kind, ErrorKind::Unavailable);
        assert!(error.message.contains("the cluster has no majority"));
        assert!(vhost.exchange("x").is_none());
        assert!(broker.try_add_vhost("w", None).is_err());
        assert!(broker.vhost("w").is_none());
    }

    #[test]
    fn a_committed_change_applies_on_another_node() {
        let origin = Broker::new(Limits::default());
        let replica = Broker::new(Limits::default());
        for broker in [&origin, &replica] {
            broker
                .add_vhost("v")
                .set_permissions("admin", Permissions::full());
        }
        let change = TopologyChange::DeclareQueue {
            vhost: "v".into(),
            user: "admin".into(),
            request: queue("q", false),
        };
        apply(&replica, &change).unwrap();
        assert!(replica.vhost("v").unwrap().queue("q").is_some());
        let user = TopologyChange::PutUser {
            name: "u".into(),
            password: Some((
                "rabbit_password_hashing_sha256".into(),
                PasswordHash::new("pw").to_base64(),
            )),
            tags: vec!["management".into()],
        };
        apply(&replica, &user).unwrap();
        assert!(replica.authenticate("u", "pw", true).is_ok());
    }
}
