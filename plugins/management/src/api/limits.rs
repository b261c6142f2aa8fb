//! Virtual host and user limits, RabbitMQ's `/api/vhost-limits` and `/api/user-limits`.
//!
//! Vhost limits are kept where RabbitMQ keeps them: the runtime parameter `limits` of the
//! `vhost-limits` component in that vhost (value `{"max-connections": N, "max-queues": N}`),
//! so definitions export and import carry them. User limits (`max-connections`,
//! `max-channels`) live in RabbitMQ's user record; Warren's core user has no such field yet,
//! so they are kept in the global parameter [`USER_LIMITS_PARAMETER`] (`{"user": {...}}`).
//!
//! The core enforces both as soon as they are set here ([`warren_core::resource_limits`]):
//! connections, channels and queues over a limit are refused with RabbitMQ's codes and texts.

use serde_json::{json, Map, Value as Json};
use warren_core::parameters::RuntimeParameter;
pub use warren_core::resource_limits::{
    USER_LIMITS_PARAMETER, VHOST_LIMITS_COMPONENT, VHOST_LIMITS_NAME,
};
use warren_core::Broker;

use super::requests::{self, LimitBody};
use super::{bad_request, not_authorized, not_found, Caller, Management, Role};
use crate::http::{Request, Response};

/// The limits a vhost can have.
pub const VHOST_LIMITS: &[&str] = &["max-connections", "max-queues"];
/// The limits a user can have.
pub const USER_LIMITS: &[&str] = &["max-connections", "max-channels"];

fn known(name: &str, allowed: &[&str], what: &str) -> Result<(), Response> {
    if allowed.contains(&name) {
        Ok(())
    } else {
        Err(bad_request(format!(
            "'{name}' is not a {what} limit; the {what} limits are {}",
            allowed.join(" and ")
        )))
    }
}

/// Every user's limits as kept (`{"user": {"max-connections": N}}`).
pub fn user_limits_of(broker: &Broker) -> Map<String, Json> {
    broker
        .global_parameter(USER_LIMITS_PARAMETER)
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

/// Sets the limits of the users named (a definitions import's `users[].limits`, RabbitMQ's
/// place for them), replacing what each of them had; other users' limits stay. A user given
/// empty limits has none afterwards.
pub fn import_user_limits(
    broker: &Broker,
    users: &[(String, Map<String, Json>)],
) -> warren_core::CoreResult<()> {
    if users.is_empty() {
        return Ok(());
    }
    let mut all = user_limits_of(broker);
    for (user, limits) in users {
        if limits.is_empty() {
            all.remove(user);
        } else {
            all.insert(user.clone(), Json::Object(limits.clone()));
        }
    }
    if all.is_empty() {
        broker
            .try_clear_global_parameter(USER_LIMITS_PARAMETER)
            .map(|_| ())
    } else {
        broker
            .try_set_global_parameter(USER_LIMITS_PARAMETER, Json::Object(all).to_string())
            .map(|_| ())
    }
}

impl Management {
    /// The limits of `vhost`, as an object (empty when none are set).
    fn vhost_limits(&self, vhost: &str) -> Map<String, Json> {
        self.broker
            .parameters(Some(VHOST_LIMITS_COMPONENT), Some(vhost))
            .into_iter()
            .find(|p| p.name == VHOST_LIMITS_NAME)
            .and_then(|p| serde_json::from_str::<Map<String, Json>>(&p.value).ok())
            .unwrap_or_default()
    }

    /// Every user's limits: `{"user": {"max-connections": N}}`.
    pub(crate) fn user_limits(&self) -> Map<String, Json> {
        user_limits_of(&self.broker)
    }

    /// Drops a deleted user's limits, as RabbitMQ deletes them with the user record (a user
    /// made again later starts without them).
    pub(crate) fn forget_user_limits(&self, user: &str) {
        let mut all = self.user_limits();
        if all.remove(user).is_none() {
            return;
        }
        let result = if all.is_empty() {
            self.broker
                .try_clear_global_parameter(USER_LIMITS_PARAMETER)
                .map(|_| ())
        } else {
            self.broker
                .try_set_global_parameter(USER_LIMITS_PARAMETER, Json::Object(all).to_string())
                .map(|_| ())
        };
        if let Err(error) = result {
            tracing::warn!(%user, %error, "the deleted user's limits were not removed");
        }
    }

    /// `/api/vhost-limits[/VHOST[/NAME]]`: listing for the vhosts the caller sees, changes
    /// for administrators.
    pub(crate) fn vhost_limits_api(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
    ) -> Response {
        match (request.method.as_str(), path) {
            ("GET", []) | ("GET", [_]) => {
                let vhosts = match self.visible_vhosts(caller, path.first().copied()) {
                    Ok(vhosts) => vhosts,
                    Err(response) => return response,
                };
                let list: Vec<Json> = vhosts
                    .iter()
                    .filter_map(|vhost| {
                        let limits = self.vhost_limits(vhost.name());
                        (!limits.is_empty())
                            .then(|| json!({"vhost": vhost.name(), "value": limits}))
                    })
                    .collect();
                Response::json(200, &Json::Array(list))
            }
            ("PUT", [vhost, name]) | ("DELETE", [vhost, name]) => {
                if !caller.is(Role::Administrator) {
                    return not_authorized("Not administrator user");
                }
                if self.broker.vhost(vhost).is_none() {
                    return not_found();
                }
                if let Err(response) = known(name, VHOST_LIMITS, "vhost") {
                    return response;
                }
                let mut limits = self.vhost_limits(vhost);
                if request.method == "PUT" {
                    let body: LimitBody = match requests::parse(request) {
                        Ok(body) => body,
                        Err(response) => return response,
                    };
                    limits.insert(name.to_string(), Json::from(body.value));
                } else if limits.remove(*name).is_none() {
                    return not_found();
                }
                // Committed through the cluster first, so every node enforces the limit.
                let changed = if limits.is_empty() {
                    self.broker.try_clear_parameter(
                        vhost,
                        VHOST_LIMITS_COMPONENT,
                        VHOST_LIMITS_NAME,
                    )
                } else {
                    self.broker.try_set_parameter(RuntimeParameter {
                        vhost: vhost.to_string(),
                        component: VHOST_LIMITS_COMPONENT.to_string(),
                        name: VHOST_LIMITS_NAME.to_string(),
                        value: Json::Object(limits).to_string(),
                    })
                };
                match changed {
                    Ok(_) => Response::empty(204),
                    Err(error) => super::core_error(error),
                }
            }
            _ => not_found(),
        }
    }

    /// `/api/user-limits[/USER[/NAME]]` (administrator).
    pub(crate) fn user_limits_api(&self, request: &Request, path: &[&str]) -> Response {
        let all = self.user_limits();
        match (request.method.as_str(), path) {
            ("GET", []) | ("GET", [_]) => {
                if let [user] = path {
                    if self.broker.user(user).is_none() {
                        return not_found();
                    }
                }
                let list: Vec<Json> = all
                    .iter()
                    .filter(|(user, limits)| {
                        path.first().is_none_or(|only| only == user)
                            && limits.as_object().is_some_and(|l| !l.is_empty())
                            && self.broker.user(user).is_some()
                    })
                    .map(|(user, limits)| json!({"user": user, "value": limits}))
                    .collect();
                Response::json(200, &Json::Array(list))
            }
            ("PUT", [user, name]) | ("DELETE", [user, name]) => {
                if self.broker.user(user).is_none() {
                    return not_found();
                }
                if let Err(response) = known(name, USER_LIMITS, "user") {
                    return response;
                }
                let mut all = all;
                let mut limits = all
                    .remove(*user)
                    .and_then(|limits| match limits {
                        Json::Object(map) => Some(map),
                        _ => None,
                    })
                    .unwrap_or_default();
                if request.method == "PUT" {
                    let body: LimitBody = match requests::parse(request) {
                        Ok(body) => body,
                        Err(response) => return response,
                    };
                    limits.insert(name.to_string(), Json::from(body.value));
                } else if limits.remove(*name).is_none() {
                    return not_found();
                }
                if !limits.is_empty() {
                    all.insert(user.to_string(), Json::Object(limits));
                }
                let result = if all.is_empty() {
                    self.broker
                        .try_clear_global_parameter(USER_LIMITS_PARAMETER)
                        .map(|_| ())
                } else {
                    self.broker
                        .try_set_global_parameter(
                            USER_LIMITS_PARAMETER,
                            Json::Object(all).to_string(),
                        )
                        .map(|_| ())
                };
                match result {
                    Ok(()) => Response::empty(204),
                    Err(error) => super::core_error(error),
                }
            }
            _ => not_found(),
        }
    }
}
