//! The stream protocol's objects, at RabbitMQ's `rabbitmq_stream_management` paths:
//!
//! - `GET /api/stream/connections[/VHOST[/NAME]]`: connections of the stream protocol, in
//!   `/api/connections`' shape plus `subscriptions` and `publishers` (their counts);
//!   `GET /api/stream/connections/VHOST/NAME/publishers` and `.../consumers`: one
//!   connection's.
//! - `GET /api/stream/publishers[/VHOST[/STREAM]]`: `queue` (`name`, `vhost`),
//!   `connection_details`, `publisher_id`, `reference`, `published`, `confirmed`, `errored`.
//! - `GET /api/stream/consumers[/VHOST]`: `queue`, `connection_details`, `subscription_id`,
//!   `credits`, `consumed`, `offset`, `offset_lag`, `active`, `activity_status`,
//!   `properties`.
//! - `PUT /api/stream/super-streams/VHOST/NAME` with `partitions` (N: partitions `NAME-0` ..
//!   `NAME-(N-1)`, binding keys `0` .. `N-1`) or `binding-keys` (`"a,b"`: partitions
//!   `NAME-a`, `NAME-b`), and `arguments` for the partition streams; as RabbitMQ, at most
//!   1000 partitions. `DELETE` on the same path deletes it with its partitions (Warren's;
//!   RabbitMQ's CLI deletes over its own channel).
//!
//! A caller sees its own connections' publishers and consumers; a monitoring user sees
//! all, as for `/api/connections`.

use std::collections::HashMap;
use std::net::SocketAddr;

use serde_json::{json, Map, Value as Json};
use warren_core::connections::ConnectionSnapshot;
use warren_core::stream_clients::{StreamConsumerSnapshot, StreamPublisherSnapshot};

use super::{bad_request, core_error, not_found, requests, Caller, Management};
use crate::http::{Request, Response};
use crate::octets::ConnectionOctets;

/// The protocol name stream connections are registered with.
const STREAM_PROTOCOL: &str = "RabbitMQ Stream";

/// The most partitions a super stream may have (RabbitMQ's `max_super_stream_partitions`).
const MAX_SUPER_STREAM_PARTITIONS: usize = 1000;

impl Management {
    /// Answers `/api/stream/...`; `None` for other paths.
    pub(crate) fn stream_protocol_api(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
    ) -> Option<Response> {
        let ["stream", rest @ ..] = path else {
            return None;
        };
        Some(match (request.method.as_str(), rest) {
            ("GET", ["connections"]) => self.stream_connections(caller, None),
            ("GET", ["connections", vhost]) => self.stream_connections(caller, Some(vhost)),
            ("GET", ["connections", vhost, name]) => {
                match self.stream_connection(caller, vhost, name) {
                    Some(connection) => {
                        let octets = self.connection_octets(std::slice::from_ref(&connection));
                        Response::json(200, &self.stream_connection_json(&connection, &octets))
                    }
                    None => not_found(),
                }
            }
            ("GET", ["connections", vhost, name, "publishers"]) => {
                match self.stream_connection(caller, vhost, name) {
                    Some(connection) => {
                        self.stream_publishers(caller, |p| p.info.connection == connection.info.id)
                    }
                    None => not_found(),
                }
            }
            ("GET", ["connections", vhost, name, "consumers"]) => {
                match self.stream_connection(caller, vhost, name) {
                    Some(connection) => {
                        self.stream_consumers(caller, |c| c.info.connection == connection.info.id)
                    }
                    None => not_found(),
                }
            }
            ("GET", ["publishers"]) => self.stream_publishers(caller, |_| true),
            ("GET", ["publishers", vhost]) => self.in_visible_vhost(caller, vhost, || {
                self.stream_publishers(caller, |p| p.info.vhost == *vhost)
            }),
            ("GET", ["publishers", vhost, stream]) => self.in_visible_vhost(caller, vhost, || {
                self.stream_publishers(caller, |p| {
                    p.info.vhost == *vhost && p.info.stream == *stream
                })
            }),
            ("GET", ["consumers"]) => self.stream_consumers(caller, |_| true),
            ("GET", ["consumers", vhost]) => self.in_visible_vhost(caller, vhost, || {
                self.stream_consumers(caller, |c| c.info.vhost == *vhost)
            }),
            ("PUT", ["super-streams", vhost, name]) => {
                self.put_super_stream(request, caller, vhost, name)
            }
            ("DELETE", ["super-streams", vhost, name]) => {
                self.act_in_vhost(caller, vhost, |target| {
                    match target.delete_super_stream(&caller.user.name, name) {
                        Ok(()) => Response::empty(204),
                        Err(error) => core_error(error),
                    }
                })
            }
            _ => not_found(),
        })
    }

    /// `respond` when the caller sees `vhost`, its refusal otherwise.
    fn in_visible_vhost(
        &self,
        caller: &Caller,
        vhost: &str,
        respond: impl FnOnce() -> Response,
    ) -> Response {
        match self.visible_vhosts(caller, Some(vhost)) {
            Ok(_) => respond(),
            Err(refusal) => refusal,
        }
    }

    /// The stream protocol connections the caller sees.
    fn visible_stream_connections(&self, caller: &Caller) -> Vec<ConnectionSnapshot> {
        self.visible_connections(caller)
            .into_iter()
            .filter(|c| c.info.protocol == STREAM_PROTOCOL)
            .collect()
    }

    fn stream_connection(
        &self,
        caller: &Caller,
        vhost: &str,
        name: &str,
    ) -> Option<ConnectionSnapshot> {
        self.visible_stream_connections(caller)
            .into_iter()
            .find(|c| c.info.vhost == vhost && c.info.name() == name)
    }

    fn stream_connections(&self, caller: &Caller, vhost: Option<&str>) -> Response {
        if let Some(vhost) = vhost {
            if let Err(refusal) = self.visible_vhosts(caller, Some(vhost)) {
                return refusal;
            }
        }
        let connections: Vec<ConnectionSnapshot> = self
            .visible_stream_connections(caller)
            .into_iter()
            .filter(|c| vhost.is_none_or(|v| c.info.vhost == v))
            .collect();
        let octets = self.connection_octets(&connections);
        let list: Vec<Json> = connections
            .iter()
            .map(|c| self.stream_connection_json(c, &octets))
            .collect();
        self.listing(caller, list)
    }

    /// A stream connection as `/api/connections` shows it, with its subscription and
    /// publisher counts.
    fn stream_connection_json(
        &self,
        connection: &ConnectionSnapshot,
        octets: &HashMap<(SocketAddr, SocketAddr), ConnectionOctets>,
    ) -> Json {
        let clients = self.broker.stream_clients();
        let id = connection.info.id;
        let mut json = self.connection_json(connection, octets);
        json["subscriptions"] = json!(clients
            .consumers()
            .iter()
            .filter(|c| c.info.connection == id)
            .count());
        json["publishers"] = json!(clients
            .publishers()
            .iter()
            .filter(|p| p.info.connection == id)
            .count());
        json
    }

    /// The whole list, or the page of it the caller asked for.
    fn listing(&self, caller: &Caller, list: Vec<Json>) -> Response {
        match &caller.paging {
            None => Response::json(200, &Json::Array(list)),
            Some(paging) => match paging.apply(list) {
                Ok(page) => Response::json(200, &page),
                Err(refusal) => refusal,
            },
        }
    }

    /// RabbitMQ's `connection_details` of the connections the caller sees, by id.
    fn connection_details(&self, caller: &Caller) -> HashMap<u64, Json> {
        self.visible_stream_connections(caller)
            .iter()
            .map(|c| {
                (
                    c.info.id,
                    json!({
                        "name": c.info.name(),
                        "user": c.info.user,
                        "node": self.node_name,
                        "peer_host": c.info.peer.ip().to_string(),
                        "peer_port": c.info.peer.port(),
                    }),
                )
            })
            .collect()
    }

    fn stream_publishers(
        &self,
        caller: &Caller,
        keep: impl Fn(&StreamPublisherSnapshot) -> bool,
    ) -> Response {
        let details = self.connection_details(caller);
        let list: Vec<Json> = self
            .broker
            .stream_clients()
            .publishers()
            .into_iter()
            .filter(|p| keep(p))
            .filter_map(|p| {
                let connection = details.get(&p.info.connection)?;
                Some(json!({
                    "queue": {"name": p.info.stream, "vhost": p.info.vhost},
                    "connection_details": connection,
                    "node": self.node_name,
                    "publisher_id": p.info.publisher_id,
                    "reference": p.info.reference,
                    "published": p.published,
                    "confirmed": p.confirmed,
                    "errored": p.errored,
                }))
            })
            .collect();
        self.listing(caller, list)
    }

    fn stream_consumers(
        &self,
        caller: &Caller,
        keep: impl Fn(&StreamConsumerSnapshot) -> bool,
    ) -> Response {
        let details = self.connection_details(caller);
        let list: Vec<Json> = self
            .broker
            .stream_clients()
            .consumers()
            .into_iter()
            .filter(|c| keep(c))
            .filter_map(|c| {
                let connection = details.get(&c.info.connection)?;
                // How far behind the stream's end the consumer is, in messages.
                let end = self
                    .broker
                    .vhost(&c.info.vhost)
                    .and_then(|vhost| vhost.streams().get(&c.info.stream))
                    .map_or(c.offset, |log| log.stats().next_offset);
                let properties: Map<String, Json> = c
                    .info
                    .properties
                    .iter()
                    .map(|(k, v)| (k.clone(), Json::String(v.clone())))
                    .collect();
                // rabbit_stream_utils:consumer_activity_status/2.
                let activity_status = match (c.info.single_active, c.active) {
                    (false, _) => "up",
                    (true, true) => "single_active",
                    (true, false) => "waiting",
                };
                Some(json!({
                    "queue": {"name": c.info.stream, "vhost": c.info.vhost},
                    "connection_details": connection,
                    "node": self.node_name,
                    "subscription_id": c.info.subscription_id,
                    "credits": c.credits,
                    "consumed": c.consumed,
                    "offset": c.offset,
                    "offset_lag": end.saturating_sub(c.offset),
                    "active": c.active,
                    "activity_status": activity_status,
                    "properties": properties,
                }))
            })
            .collect();
        self.listing(caller, list)
    }

    /// `PUT /api/stream/super-streams/VHOST/NAME`.
    fn put_super_stream(
        &self,
        request: &Request,
        caller: &Caller,
        vhost: &str,
        name: &str,
    ) -> Response {
        let body: Map<String, Json> = match requests::parse(request) {
            Ok(body) => body,
            Err(refusal) => return refusal,
        };
        let (partitions, binding_keys) = match super_stream_layout(name, &body) {
            Ok(layout) => layout,
            Err(reason) => return bad_request(reason),
        };
        let arguments: Vec<(String, String)> = match body.get("arguments") {
            None | Some(Json::Null) => Vec::new(),
            Some(Json::Object(arguments)) => arguments
                .iter()
                .map(|(key, value)| {
                    let value = match value {
                        Json::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    (key.clone(), value)
                })
                .collect(),
            Some(_) => return bad_request("arguments: expected an object"),
        };
        self.act_in_vhost(caller, vhost, |target| {
            match target.create_super_stream(
                &caller.user.name,
                name,
                &partitions,
                &binding_keys,
                &arguments,
            ) {
                Ok(()) => Response::empty(201),
                Err(error) => core_error(error),
            }
        })
    }
}

/// The partition streams and binding keys a super stream body asks for, as RabbitMQ's
/// `rabbit_stream_super_stream_mgmt` reads it.
fn super_stream_layout(
    name: &str,
    body: &Map<String, Json>,
) -> Result<(Vec<String>, Vec<String>), String> {
    let partitions = body.get("partitions").filter(|v| !v.is_null());
    let binding_keys = body.get("binding-keys").filter(|v| !v.is_null());
    match (partitions, binding_keys) {
        (None, None) => Err("Must specify partitions or binding keys".into()),
        (Some(_), Some(_)) => Err("Specify partitions or binding keys, not both".into()),
        (Some(partitions), None) => {
            let count = match partitions {
                Json::Number(n) => n.as_i64(),
                Json::String(text) => text.trim().parse().ok(),
                _ => None,
            }
            .ok_or("The partitions must be a number")?;
            if count < 1 {
                return Err("The partition number must be greater than 0".into());
            }
            if count as u64 > MAX_SUPER_STREAM_PARTITIONS as u64 {
                return Err(format!(
                    "The partition number must not exceed {MAX_SUPER_STREAM_PARTITIONS}"
                ));
            }
            let keys: Vec<String> = (0..count).map(|k| k.to_string()).collect();
            Ok((keys.iter().map(|k| format!("{name}-{k}")).collect(), keys))
        }
        (None, Some(keys)) => {
            let Json::String(keys) = keys else {
                return Err("binding-keys: expected a comma-separated string".into());
            };
            let keys: Vec<String> = keys
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .collect();
            if keys.is_empty() {
                return Err("The number of binding keys must be greater than 0".into());
            }
            if keys.len() > MAX_SUPER_STREAM_PARTITIONS {
                return Err(format!(
                    "The number of binding keys must not exceed {MAX_SUPER_STREAM_PARTITIONS}"
                ));
            }
            Ok((keys.iter().map(|k| format!("{name}-{k}")).collect(), keys))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: Json) -> Map<String, Json> {
        json.as_object().cloned().unwrap()
    }

    #[test]
    fn super_stream_layouts_follow_rabbitmq() {
        let (streams, keys) = super_stream_layout("s", &body(json!({"partitions": 3}))).unwrap();
        assert_eq!(streams, ["s-0", "s-1", "s-2"]);
        assert_eq!(keys, ["0", "1", "2"]);
        let (streams, keys) =
            super_stream_layout("s", &body(json!({"binding-keys": "a, b,,c"}))).unwrap();
        assert_eq!(streams, ["s-a", "s-b", "s-c"]);
        assert_eq!(keys, ["a", "b", "c"]);
        assert!(super_stream_layout("s", &body(json!({}))).is_err());
        assert!(super_stream_layout("s", &body(json!({"partitions": 0}))).is_err());
        assert!(super_stream_layout("s", &body(json!({"partitions": 1001}))).is_err());
        assert!(
            super_stream_layout("s", &body(json!({"partitions": 2, "binding-keys": "a"}))).is_err()
        );
    }
}
