//! Vhosts, users, permissions, policies and definitions.

use std::sync::Arc;

use serde_json::{json, Map, Value as Json};
use warren_config::json_args_to_table;
use warren_core::access::{Permissions, User};
use warren_core::password::{HashingAlgorithm, PasswordHash};
use warren_core::policy::Policy;
use warren_core::vhost::VHost;

use super::json::table_to_json;
use super::requests::{self, PermissionBody, PolicyBody, UserBody, VhostBody};
use super::{bad_request, core_error, created_or_updated, not_found, Caller, Management, Role};
use crate::http::{Request, Response};

/// Tags as RabbitMQ accepts them: an array, or a comma-separated string.
impl Management {
    pub(crate) fn vhost_json(&self, vhost: &VHost, ranges: &crate::rates::Ranges) -> Json {
        let (mut ready, mut unacked) = (0, 0);
        for queue in vhost.queue_instances() {
            let stats = queue.info();
            ready += stats.ready;
            unacked += stats.unacknowledged;
        }
        let default_queue_type = vhost
            .default_queue_type()
            .unwrap_or_else(|| "classic".to_string());
        let stats = self.rates.vhost_json(
            vhost.name(),
            &crate::rates::node_values(&vhost.totals(), ready, unacked),
            ranges,
        );
        let mut json = json!({
            "name": vhost.name(),
            "description": "",
            "tags": [],
            "default_queue_type": default_queue_type,
            "metadata": {"description": "", "tags": [], "default_queue_type": default_queue_type},
            "tracing": vhost.is_tracing(),
            "cluster_state": {self.node_name.clone(): "running"},
            "message_stats": stats.message_stats,
        });
        if let Some(object) = json.as_object_mut() {
            object.extend(stats.lengths);
        }
        json
    }

    pub(crate) fn vhosts(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
        ranges: &crate::rates::Ranges,
    ) -> Response {
        match (request.method.as_str(), path) {
            ("GET", []) => match self.visible_vhosts(caller, None) {
                Ok(vhosts) => Response::json(
                    200,
                    &Json::Array(vhosts.iter().map(|v| self.vhost_json(v, ranges)).collect()),
                ),
                Err(response) => response,
            },
            ("GET", [name]) => match self.visible_vhosts(caller, Some(name)) {
                Ok(vhosts) => Response::json(200, &self.vhost_json(&vhosts[0], ranges)),
                Err(response) => response,
            },
            ("GET", [name, "permissions"]) => {
                if !caller.is(Role::Administrator) {
                    return super::not_authorized("Not administrator user");
                }
                match self.broker.vhost(name) {
                    Some(vhost) => Response::json(200, &Json::Array(permissions_json(&vhost))),
                    None => not_found(),
                }
            }
            ("GET", [name, "topic-permissions"]) => {
                if !caller.is(Role::Administrator) {
                    return super::not_authorized("Not administrator user");
                }
                match self.broker.vhost(name) {
                    Some(vhost) => Response::json(
                        200,
                        &Json::Array(super::parameters::topic_permissions_json(&vhost)),
                    ),
                    None => not_found(),
                }
            }
            ("PUT", [name]) => {
                if !caller.is(Role::Administrator) {
                    return super::not_authorized("Not administrator user");
                }
                let body: VhostBody = match requests::parse(request) {
                    Ok(body) => body,
                    Err(response) => return response,
                };
                let (vhost, created) =
                    match self.broker.try_add_vhost(name, body.default_queue_type) {
                        Ok(added) => added,
                        Err(error) => return super::core_error(error),
                    };
                if let Some(tracing) = body.tracing {
                    vhost.set_tracing(tracing);
                }
                if created {
                    // As RabbitMQ: the user who created a vhost through the API may use it.
                    if let Err(error) =
                        vhost.try_set_permissions(&caller.user.name, Permissions::full())
                    {
                        return super::core_error(error);
                    }
                }
                created_or_updated(created)
            }
            ("DELETE", [name]) => {
                if !caller.is(Role::Administrator) {
                    return super::not_authorized("Not administrator user");
                }
                let deleted = match self.broker.try_delete_vhost(name) {
                    Ok(deleted) => deleted,
                    Err(error) => return super::core_error(error),
                };
                if deleted {
                    for connection in self.broker.connections().list() {
                        if connection.info.vhost == *name {
                            self.broker
                                .close_connection(connection.info.id, "vhost is deleted");
                        }
                    }
                    Response::empty(204)
                } else {
                    not_found()
                }
            }
            _ => super::error(405, "method_not_allowed", "Method Not Allowed"),
        }
    }

    fn user_json(&self, user: &User) -> Json {
        let (hash, algorithm) = match &user.password {
            Some(hash) => (hash.to_base64(), hash.algorithm.rabbit_name()),
            None => (String::new(), HashingAlgorithm::Sha256.rabbit_name()),
        };
        json!({
            "name": user.name,
            "password_hash": hash,
            "hashing_algorithm": algorithm,
            "tags": user.tags,
            // RabbitMQ's place for a user's limits (max-connections, max-channels).
            "limits": self.user_limits().remove(&user.name).unwrap_or_else(|| json!({})),
        })
    }

    pub(crate) fn users(&self, request: &Request, path: &[&str]) -> Response {
        match (request.method.as_str(), path) {
            ("GET", []) => Response::json(
                200,
                &Json::Array(
                    self.broker
                        .users()
                        .iter()
                        .map(|u| self.user_json(u))
                        .collect(),
                ),
            ),
            ("GET", ["without-permissions"]) => {
                let vhosts: Vec<Arc<VHost>> = self
                    .broker
                    .vhost_names()
                    .iter()
                    .filter_map(|n| self.broker.vhost(n))
                    .collect();
                let users = self
                    .broker
                    .users()
                    .iter()
                    .filter(|u| vhosts.iter().all(|v| v.permissions(&u.name).is_none()))
                    .map(|u| self.user_json(u))
                    .collect();
                Response::json(200, &Json::Array(users))
            }
            ("GET", [name]) => match self.broker.user(name) {
                Some(user) => Response::json(200, &self.user_json(&user)),
                None => not_found(),
            },
            ("GET", [name, "permissions"]) => {
                if self.broker.user(name).is_none() {
                    return not_found();
                }
                let list: Vec<Json> = self
                    .broker
                    .vhost_names()
                    .iter()
                    .filter_map(|v| self.broker.vhost(v))
                    .flat_map(|v| permissions_json(&v))
                    .filter(|p| p["user"] == *name)
                    .collect();
                Response::json(200, &Json::Array(list))
            }
            ("GET", [name, "topic-permissions"]) => {
                if self.broker.user(name).is_none() {
                    return not_found();
                }
                let list: Vec<Json> = self
                    .broker
                    .vhost_names()
                    .iter()
                    .filter_map(|v| self.broker.vhost(v))
                    .flat_map(|v| super::parameters::topic_permissions_json(&v))
                    .filter(|p| p["user"] == *name)
                    .collect();
                Response::json(200, &Json::Array(list))
            }
            ("PUT", [name]) => {
                let body: UserBody = match requests::parse(request) {
                    Ok(body) => body,
                    Err(response) => return response,
                };
                let existing = self.broker.user(name);
                let password = match (&body.password, &body.password_hash) {
                    (Some(password), _) => Some(PasswordHash::new(password)),
                    (_, Some(hash)) if hash.is_empty() => Some(PasswordHash::no_password()),
                    (_, Some(hash)) => {
                        let algorithm = body
                            .hashing_algorithm
                            .as_deref()
                            .unwrap_or(HashingAlgorithm::Sha256.rabbit_name());
                        match PasswordHash::from_rabbit(algorithm, hash) {
                            Ok(hash) => Some(hash),
                            Err(e) => return bad_request(format!("password_hash: {e}")),
                        }
                    }
                    (None, None) => existing.as_ref().and_then(|u| u.password.clone()),
                };
                if existing.is_none() && password.is_none() {
                    return bad_request("Must provide a password_hash or password");
                }
                let user = User {
                    name: name.to_string(),
                    password,
                    tags: body.tags.0,
                };
                if let Err(error) = self.broker.try_put_user(user) {
                    return super::core_error(error);
                }
                created_or_updated(existing.is_none())
            }
            ("DELETE", [name]) => {
                let deleted = match self.broker.try_delete_user(name) {
                    Ok(deleted) => deleted,
                    Err(error) => return super::core_error(error),
                };
                if deleted {
                    self.forget_user_limits(name);
                    for connection in self.broker.connections().list() {
                        if connection.info.user == *name {
                            self.broker
                                .close_connection(connection.info.id, "user was deleted");
                        }
                    }
                    Response::empty(204)
                } else {
                    not_found()
                }
            }
            _ => super::error(405, "method_not_allowed", "Method Not Allowed"),
        }
    }

    pub(crate) fn permissions(&self, request: &Request, path: &[&str]) -> Response {
        match (request.method.as_str(), path) {
            ("GET", []) => {
                let list: Vec<Json> = self
                    .broker
                    .vhost_names()
                    .iter()
                    .filter_map(|v| self.broker.vhost(v))
                    .flat_map(|v| permissions_json(&v))
                    .collect();
                Response::json(200, &Json::Array(list))
            }
            ("GET", [vhost, user]) => match self.broker.vhost(vhost) {
                Some(found) => match found.permissions(user) {
                    Some(p) => Response::json(200, &permission_json(vhost, user, &p)),
                    None => not_found(),
                },
                None => not_found(),
            },
            ("PUT", [vhost, user]) => {
                let body: PermissionBody = match requests::parse(request) {
                    Ok(body) => body,
                    Err(response) => return response,
                };
                let (Some(found), Some(_)) = (self.broker.vhost(vhost), self.broker.user(user))
                else {
                    return bad_request("vhost_or_user_not_found");
                };
                match Permissions::new(&body.configure, &body.write, &body.read) {
                    Ok(permissions) => {
                        let created = found.permissions(user).is_none();
                        match found.try_set_permissions(user, permissions) {
                            Ok(()) => created_or_updated(created),
                            Err(error) => super::core_error(error),
                        }
                    }
                    Err(e) => bad_request(e.message),
                }
            }
            ("DELETE", [vhost, user]) => match self.broker.vhost(vhost) {
                Some(found) if found.permissions(user).is_some() => {
                    match found.try_clear_permissions(user) {
                        Ok(()) => Response::empty(204),
                        Err(error) => super::core_error(error),
                    }
                }
                _ => not_found(),
            },
            _ => not_found(),
        }
    }

    pub(crate) fn policies(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
        operator: bool,
    ) -> Response {
        match (request.method.as_str(), path) {
            ("GET", []) | ("GET", [_]) => {
                let vhosts = match self.visible_vhosts(caller, path.first().copied()) {
                    Ok(vhosts) => vhosts,
                    Err(response) => return response,
                };
                let list: Vec<Json> = vhosts
                    .iter()
                    .flat_map(|v| {
                        v.policies(operator)
                            .iter()
                            .map(|p| policy_json(v.name(), p))
                            .collect::<Vec<_>>()
                    })
                    .collect();
                Response::json(200, &Json::Array(list))
            }
            ("GET", [vhost, name]) => match self.visible_vhosts(caller, Some(vhost)) {
                Ok(vhosts) => match vhosts[0]
                    .policies(operator)
                    .iter()
                    .find(|p| p.name == *name)
                {
                    Some(policy) => Response::json(200, &policy_json(vhost, policy)),
                    None => not_found(),
                },
                Err(response) => response,
            },
            ("PUT", [vhost, name]) => {
                if !caller.is(Role::Policymaker) {
                    return super::not_authorized("Not policymaker user");
                }
                let target = match self.usable_vhost(caller, vhost) {
                    Ok(target) => target,
                    Err(response) => return response,
                };
                let body: PolicyBody = match requests::parse(request) {
                    Ok(body) => body,
                    Err(response) => return response,
                };
                match policy_from_body(name, body, operator) {
                    Ok(policy) => {
                        let created = !target.policies(operator).iter().any(|p| p.name == *name);
                        match target.try_set_policy(policy, operator) {
                            Ok(()) => created_or_updated(created),
                            Err(error) => super::core_error(error),
                        }
                    }
                    Err(response) => response,
                }
            }
            ("DELETE", [vhost, name]) => {
                if !caller.is(Role::Policymaker) {
                    return super::not_authorized("Not policymaker user");
                }
                let target = match self.usable_vhost(caller, vhost) {
                    Ok(target) => target,
                    Err(response) => return response,
                };
                match target.try_clear_policy(name, operator) {
                    Ok(()) => Response::empty(204),
                    Err(error) if error.kind == warren_core::ErrorKind::Unavailable => {
                        super::core_error(error)
                    }
                    Err(_) => not_found(),
                }
            }
            _ => not_found(),
        }
    }

    pub(crate) fn definitions(&self, request: &Request, path: &[&str]) -> Response {
        match (request.method.as_str(), path) {
            ("GET", []) => Response::json(200, &self.export_definitions(None)),
            ("GET", [vhost]) => {
                if self.broker.vhost(vhost).is_none() {
                    return not_found();
                }
                Response::json(200, &self.export_definitions(Some(vhost)))
            }
            ("POST", []) => match (self.import_definitions)(&request.body) {
                Ok(()) => Response::empty(204),
                Err(reason) => bad_request(reason),
            },
            _ => not_found(),
        }
    }

    /// The definitions document RabbitMQ exports (`rabbitmqctl export_definitions`), for the
    /// whole broker or one vhost (then without users, vhosts and permissions, as RabbitMQ).
    pub fn export_definitions(&self, only: Option<&str>) -> Json {
        let vhosts: Vec<Arc<VHost>> = self
            .broker
            .vhost_names()
            .iter()
            .filter(|n| only.is_none_or(|o| o == n.as_str()))
            .filter_map(|n| self.broker.vhost(n))
            .collect();
        let mut policies = Vec::new();
        let mut operator_policies = Vec::new();
        let mut queues = Vec::new();
        let mut exchanges = Vec::new();
        let mut bindings = Vec::new();
        for vhost in &vhosts {
            let name = vhost.name();
            policies.extend(vhost.policies(false).iter().map(|p| policy_json(name, p)));
            operator_policies.extend(vhost.policies(true).iter().map(|p| policy_json(name, p)));
            let mut vhost_queues = vhost.queues();
            vhost_queues.sort_by(|a, b| a.name().cmp(b.name()));
            for queue in vhost_queues {
                let config = queue.config();
                if config.exclusive_owner.is_some() {
                    continue;
                }
                queues.push(json!({
                    "name": config.name,
                    "vhost": name,
                    "durable": config.durable,
                    "auto_delete": config.auto_delete,
                    "arguments": table_to_json(&config.arguments),
                    "type": "classic",
                }));
            }
            // Quorum queues: always durable, their type also in `x-queue-type`, as RabbitMQ
            // exports them.
            for queue in vhost.typed_queues() {
                queues.push(json!({
                    "name": queue.name(),
                    "vhost": name,
                    "durable": queue.durable(),
                    "auto_delete": queue.auto_delete(),
                    "arguments": table_to_json(&queue.arguments()),
                    "type": queue.queue_type().name(),
                }));
            }
            for stream in vhost.streams().list() {
                queues.push(exported_stream(name, &stream));
            }
            let mut vhost_exchanges = vhost.exchanges();
            vhost_exchanges.sort_by(|a, b| a.name().cmp(b.name()));
            for exchange in vhost_exchanges {
                let config = exchange.config();
                if config.name.is_empty() {
                    continue;
                }
                // Bindings from built-in exchanges are exported; the exchanges themselves are not.
                if config.name.starts_with("amq.") {
                    for binding in exchange.bindings() {
                        bindings.push(self.exported_binding(name, &binding));
                    }
                    continue;
                }
                exchanges.push(json!({
                    "name": config.name,
                    "vhost": name,
                    "type": config.type_name(),
                    "durable": config.durable,
                    "auto_delete": config.auto_delete,
                    "internal": config.internal,
                    "arguments": table_to_json(&config.arguments),
                }));
                for binding in exchange.bindings() {
                    bindings.push(self.exported_binding(name, &binding));
                }
            }
        }
        let mut document = Map::new();
        document.insert(
            "rabbit_version".into(),
            json!(super::RABBITMQ_COMPATIBLE_VERSION),
        );
        document.insert(
            "rabbitmq_version".into(),
            json!(super::RABBITMQ_COMPATIBLE_VERSION),
        );
        document.insert("product_name".into(), json!("Warren"));
        document.insert("product_version".into(), json!(env!("CARGO_PKG_VERSION")));
        if only.is_none() {
            document.insert(
                "users".into(),
                Json::Array(
                    self.broker
                        .users()
                        .iter()
                        .filter(|u| !u.name.starts_with('\u{0}'))
                        .map(|u| self.user_json(u))
                        .collect(),
                ),
            );
            document.insert(
                "vhosts".into(),
                Json::Array(
                    vhosts
                        .iter()
                        .map(|v| {
                            let default_queue_type = v
                                .default_queue_type()
                                .unwrap_or_else(|| "classic".to_string());
                            json!({"name": v.name(), "limits": [], "metadata": {
                                "description": "", "tags": [],
                                "default_queue_type": default_queue_type}})
                        })
                        .collect(),
                ),
            );
            document.insert(
                "permissions".into(),
                Json::Array(vhosts.iter().flat_map(|v| permissions_json(v)).collect()),
            );
            document.insert(
                "topic_permissions".into(),
                Json::Array(
                    vhosts
                        .iter()
                        .flat_map(|v| super::parameters::topic_permissions_json(v))
                        .collect(),
                ),
            );
            document.insert(
                "global_parameters".into(),
                Json::Array(self.global_parameters_json()),
            );
        }
        let parameters: Vec<Json> = self
            .broker
            .parameters(None, only)
            .iter()
            .map(|p| {
                json!({"vhost": p.vhost, "component": p.component, "name": p.name,
                       "value": super::parameters::stored_json(&p.value)})
            })
            .collect();
        document.insert("parameters".into(), Json::Array(parameters));
        document.insert("policies".into(), Json::Array(policies));
        // Not in RabbitMQ's schema: a Warren addition that `load_definitions` and
        // `POST /api/definitions` read back (RabbitMQ ignores unknown sections).
        document.insert("operator_policies".into(), Json::Array(operator_policies));
        document.insert("queues".into(), Json::Array(queues));
        document.insert("exchanges".into(), Json::Array(exchanges));
        document.insert("bindings".into(), Json::Array(bindings));
        Json::Object(document)
    }
}

impl Management {
    /// A binding as definitions list it (without the API's `properties_key`).
    fn exported_binding(&self, vhost: &str, binding: &warren_core::exchange::Binding) -> Json {
        let mut json = self.binding_json(vhost, binding);
        if let Some(object) = json.as_object_mut() {
            object.remove("properties_key");
        }
        json
    }
}

fn permission_json(vhost: &str, user: &str, p: &Permissions) -> Json {
    let (configure, write, read) = p.patterns();
    json!({"user": user, "vhost": vhost, "configure": configure, "write": write, "read": read})
}

fn permissions_json(vhost: &VHost) -> Vec<Json> {
    vhost
        .all_permissions()
        .iter()
        .filter(|(user, _)| !user.starts_with('\u{0}'))
        .map(|(user, p)| permission_json(vhost.name(), user, p))
        .collect()
}

pub(crate) fn policy_json(vhost: &str, policy: &Policy) -> Json {
    json!({
        "vhost": vhost,
        "name": policy.name,
        "pattern": policy.pattern,
        "apply-to": policy.apply_to.name(),
        "definition": table_to_json(&policy.definition),
        "priority": policy.priority,
    })
}

/// A policy from the body of `PUT /api/policies/VHOST/NAME`.
fn policy_from_body(name: &str, body: PolicyBody, operator: bool) -> Result<Policy, Response> {
    let priority =
        i32::try_from(body.priority).map_err(|_| bad_request("priority: out of range"))?;
    let definition = json_args_to_table(&body.definition);
    let apply_to = if operator && body.apply_to == "all" {
        "queues"
    } else {
        body.apply_to.as_str()
    };
    Policy::new(
        name,
        &body.pattern,
        apply_to,
        priority,
        definition,
        operator,
    )
    .map_err(core_error)
}

/// A stream as RabbitMQ exports it: a durable queue of type `stream` whose arguments carry
/// `x-queue-type` and the retention it was declared with (byte counts as numbers, as they
/// were given), so that importing the export declares the same stream.
fn exported_stream(vhost: &str, stream: &warren_core::stream_log::StreamLog) -> Json {
    let mut arguments = serde_json::Map::new();
    arguments.insert("x-queue-type".to_string(), Json::from("stream"));
    for (key, value) in &stream.settings().arguments {
        let value = match value.parse::<i64>() {
            Ok(number) if key != "x-max-age" => Json::from(number),
            _ => Json::from(value.as_str()),
        };
        arguments.insert(key.clone(), value);
    }
    json!({
        "name": stream.name(),
        "vhost": vhost,
        "durable": true,
        "auto_delete": false,
        "arguments": arguments,
        "type": "stream",
    })
}
