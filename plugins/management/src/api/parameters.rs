//! Topic permissions (`/api/topic-permissions`), runtime parameters (`/api/parameters`) and
//! global parameters (`/api/global-parameters`), with RabbitMQ's paths, bodies and answers.

use serde_json::{json, Value as Json};
use warren_core::parameters::RuntimeParameter;
use warren_core::topic_access::TopicPermission;
use warren_core::vhost::VHost;

use super::requests::{self, TopicPermissionBody, ValueBody};
use super::{bad_request, created_or_updated, not_authorized, not_found, Caller, Management, Role};
use crate::http::{Request, Response};

/// A value the core keeps as JSON text, back as JSON.
pub(crate) fn stored_json(text: &str) -> Json {
    serde_json::from_str(text).unwrap_or_else(|_| Json::String(text.to_string()))
}

/// Every topic permission of `vhost` as RabbitMQ lists them.
pub(crate) fn topic_permissions_json(vhost: &VHost) -> Vec<Json> {
    vhost
        .topic_permission_entries()
        .iter()
        .filter(|(user, _)| !user.starts_with('\u{0}'))
        .map(|(user, p)| {
            let (write, read) = p.patterns();
            json!({"user": user, "vhost": vhost.name(), "exchange": p.exchange(),
                   "write": write, "read": read})
        })
        .collect()
}

fn parameter_json(p: &RuntimeParameter) -> Json {
    json!({"vhost": p.vhost, "component": p.component, "name": p.name,
           "value": stored_json(&p.value)})
}

impl Management {
    /// Topic permissions of every vhost (or one), filtered to `user` when given.
    fn all_topic_permissions(&self, vhost: Option<&str>, user: Option<&str>) -> Vec<Json> {
        self.broker
            .vhost_names()
            .iter()
            .filter(|name| vhost.is_none_or(|v| v == name.as_str()))
            .filter_map(|name| self.broker.vhost(name))
            .flat_map(|v| topic_permissions_json(&v))
            .filter(|p| user.is_none_or(|u| p["user"] == u))
            .collect()
    }

    /// `/api/topic-permissions[/vhost/user[/exchange]]` (administrator). DELETE on a user
    /// removes all of their topic permissions in the vhost, as RabbitMQ; with an exchange
    /// segment (a Warren extension, used by `warrenctl clear_topic_permissions`) only that one.
    pub(crate) fn topic_permissions(&self, request: &Request, path: &[&str]) -> Response {
        match (request.method.as_str(), path) {
            ("GET", []) => {
                Response::json(200, &Json::Array(self.all_topic_permissions(None, None)))
            }
            ("GET", [vhost]) => match self.broker.vhost(vhost) {
                Some(found) => Response::json(200, &Json::Array(topic_permissions_json(&found))),
                None => not_found(),
            },
            ("GET", [vhost, user]) => {
                let list = self.all_topic_permissions(Some(vhost), Some(user));
                if list.is_empty() {
                    not_found()
                } else {
                    Response::json(200, &Json::Array(list))
                }
            }
            ("PUT", [vhost, user]) => {
                let body: TopicPermissionBody = match requests::parse(request) {
                    Ok(body) => body,
                    Err(response) => return response,
                };
                let (Some(found), Some(_)) = (self.broker.vhost(vhost), self.broker.user(user))
                else {
                    return bad_request("vhost_or_user_not_found");
                };
                match TopicPermission::new(user, vhost, &body.exchange, &body.write, &body.read) {
                    Ok(permission) => match found.try_set_topic_permission(user, permission) {
                        Ok(created) => created_or_updated(created),
                        Err(error) => super::core_error(error),
                    },
                    Err(e) => bad_request(e.message),
                }
            }
            ("DELETE", [vhost, user]) | ("DELETE", [vhost, user, _]) => {
                let exchange = path.get(2).copied();
                match self
                    .broker
                    .vhost(vhost)
                    .map(|found| found.try_clear_topic_permissions(user, exchange))
                {
                    Some(Ok(true)) => Response::empty(204),
                    Some(Err(error)) => super::core_error(error),
                    _ => not_found(),
                }
            }
            _ => not_found(),
        }
    }

    /// `/api/parameters[/component[/vhost[/name]]]`: listing needs policymaker (vhosts the
    /// caller sees); changing needs policymaker and access to the vhost.
    pub(crate) fn runtime_parameters(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
    ) -> Response {
        if !caller.is(Role::Policymaker) {
            return not_authorized("Not policymaker user");
        }
        match (request.method.as_str(), path) {
            ("GET", []) | ("GET", [_]) | ("GET", [_, _]) => {
                // `?vhost=` (a Warren extension, for `warrenctl list_parameters -p`) narrows
                // `/api/parameters` to one vhost without naming a component.
                let only_vhost = path
                    .get(1)
                    .map(|v| v.to_string())
                    .or_else(|| request.query_param("vhost"));
                let visible = match self.visible_vhosts(caller, only_vhost.as_deref()) {
                    Ok(vhosts) => vhosts,
                    Err(response) => return response,
                };
                let list: Vec<Json> = self
                    .broker
                    .parameters(path.first().copied(), only_vhost.as_deref())
                    .iter()
                    .filter(|p| visible.iter().any(|v| v.name() == p.vhost))
                    .map(parameter_json)
                    .collect();
                Response::json(200, &Json::Array(list))
            }
            ("GET", [component, vhost, name]) => {
                if let Err(response) = self.visible_vhosts(caller, Some(vhost)) {
                    return response;
                }
                match self
                    .broker
                    .parameters(Some(component), Some(vhost))
                    .iter()
                    .find(|p| p.name == *name)
                {
                    Some(p) => Response::json(200, &parameter_json(p)),
                    None => not_found(),
                }
            }
            ("PUT", [component, vhost, name]) => {
                if let Err(response) = self.usable_vhost(caller, vhost) {
                    return response;
                }
                let body: ValueBody = match requests::parse(request) {
                    Ok(body) => body,
                    Err(response) => return response,
                };
                let value = &body.value;
                let created = match self.broker.try_set_parameter(RuntimeParameter {
                    vhost: vhost.to_string(),
                    component: component.to_string(),
                    name: name.to_string(),
                    value: value.to_string(),
                }) {
                    Ok(created) => created,
                    Err(error) => return super::core_error(error),
                };
                if *component != warren_core::resource_limits::VHOST_LIMITS_COMPONENT {
                    tracing::warn!(
                        component = %component, vhost = %vhost, name = %name,
                        "runtime parameter kept but not applied (Warren does not implement that component)"
                    );
                }
                created_or_updated(created)
            }
            ("DELETE", [component, vhost, name]) => {
                if let Err(response) = self.usable_vhost(caller, vhost) {
                    return response;
                }
                if self
                    .broker
                    .parameters(Some(component), Some(vhost))
                    .iter()
                    .all(|p| p.name != *name)
                {
                    return not_found();
                }
                match self.broker.try_clear_parameter(vhost, component, name) {
                    Ok(_) => Response::empty(204),
                    Err(error) => super::core_error(error),
                }
            }
            _ => not_found(),
        }
    }

    /// The global parameters, with `cluster_name` from the node when none was set.
    pub(crate) fn global_parameters_json(&self) -> Vec<Json> {
        let mut list: Vec<Json> = self
            .broker
            .global_parameters()
            .iter()
            .map(|p| json!({"name": p.name, "value": stored_json(&p.value)}))
            .collect();
        if !list.iter().any(|p| p["name"] == "cluster_name") {
            list.insert(
                0,
                json!({"name": "cluster_name", "value": self.cluster_name}),
            );
        }
        list
    }

    /// The cluster name: the `cluster_name` global parameter when it is a string, else the
    /// node's configured name.
    pub(crate) fn effective_cluster_name(&self) -> String {
        self.broker
            .global_parameter("cluster_name")
            .and_then(|text| serde_json::from_str::<String>(&text).ok())
            .unwrap_or_else(|| self.cluster_name.clone())
    }

    /// `/api/global-parameters[/name]` (administrator).
    pub(crate) fn global_parameters(&self, request: &Request, path: &[&str]) -> Response {
        match (request.method.as_str(), path) {
            ("GET", []) => Response::json(200, &Json::Array(self.global_parameters_json())),
            ("GET", [name]) => match self
                .global_parameters_json()
                .into_iter()
                .find(|p| p["name"] == *name)
            {
                Some(p) => Response::json(200, &p),
                None => not_found(),
            },
            ("PUT", [name]) => {
                let body: ValueBody = match requests::parse(request) {
                    Ok(body) => body,
                    Err(response) => return response,
                };
                let value = &body.value;
                match self
                    .broker
                    .try_set_global_parameter(name, value.to_string())
                {
                    Ok(created) => created_or_updated(created),
                    Err(error) => super::core_error(error),
                }
            }
            ("DELETE", [name]) => match self.broker.try_clear_global_parameter(name) {
                Ok(true) => Response::empty(204),
                Ok(false) => not_found(),
                Err(error) => super::core_error(error),
            },
            _ => not_found(),
        }
    }
}
