//! What is running: overview, nodes, health checks, connections, channels and consumers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{json, Value as Json};
use warren_core::broker::Alarm;
use warren_core::connections::ConnectionSnapshot;
use warren_core::message::Message;
use warren_core::vhost::{Actor, PublishOptions, Publisher, QueueDeclare, BROKER_CONNECTION};

use super::json::table_to_json;
use super::{core_error, not_authorized, not_found, Caller, Management, Role};
use crate::http::{Request, Response};
use crate::octets::ConnectionOctets;

impl Management {
    pub(crate) fn overview(&self, caller: &Caller, ranges: &crate::rates::Ranges) -> Response {
        let vhosts = self.visible_vhosts(caller, None).unwrap_or_default();
        let (mut ready, mut unacked, mut queues, mut exchanges, mut consumers) = (0, 0, 0, 0, 0);
        for vhost in &vhosts {
            exchanges += vhost.exchanges().len();
            for queue in vhost.queue_instances() {
                let stats = queue.info();
                queues += 1;
                ready += stats.ready;
                unacked += stats.unacknowledged;
                consumers += stats.consumers;
            }
        }
        // Lifetime counters and rates: node-wide for monitoring users (deleted queues and
        // vhosts included, so they never go backwards), else the caller's vhosts.
        let (stats, queue_publish) = if caller.is(Role::Monitoring) {
            let totals = self.broker.totals();
            let values = crate::rates::node_values(&totals, ready, unacked);
            (
                self.rates.node_json(&values, ranges),
                totals.queues.published,
            )
        } else {
            let mut totals = warren_core::counters::NodeTotals::default();
            for vhost in &vhosts {
                totals.add(&vhost.totals());
            }
            let values = crate::rates::node_values(&totals, ready, unacked);
            let names: Vec<&str> = vhosts.iter().map(|v| v.name()).collect();
            let stats = match names.as_slice() {
                [only] => self.rates.vhost_json(only, &values, ranges),
                _ => self.rates.vhosts_json(&names, &values, ranges),
            };
            (stats, totals.queues.published)
        };
        let mut message_stats = stats.message_stats;
        if let Some(stats) = message_stats.as_object_mut() {
            stats.insert("queue_publish".into(), json!(queue_publish));
        }
        let connections = self.visible_connections(caller);
        let channels: u64 = connections.iter().map(|c| u64::from(c.channels)).sum();
        let listeners: Vec<Json> = self
            .listeners
            .iter()
            .map(|l| {
                json!({"node": self.node_name, "protocol": l.protocol,
                       "ip_address": l.addr.ip().to_string(), "port": l.addr.port()})
            })
            .collect();
        Response::json(
            200,
            &json!({
                "management_version": super::RABBITMQ_COMPATIBLE_VERSION,
                "rates_mode": "basic",
                "product_name": "Warren",
                "product_version": env!("CARGO_PKG_VERSION"),
                "rabbitmq_version": super::RABBITMQ_COMPATIBLE_VERSION,
                "erlang_version": "n/a",
                "cluster_name": self.effective_cluster_name(),
                "node": self.node_name,
                "exchange_types": [
                    {"name": "direct"}, {"name": "fanout"}, {"name": "topic"}, {"name": "headers"}
                ],
                "object_totals": {
                    "connections": connections.len(),
                    "channels": channels,
                    "exchanges": exchanges,
                    "queues": queues,
                    "consumers": consumers,
                },
                "queue_totals": Json::Object(stats.lengths),
                "message_stats": message_stats,
                "listeners": listeners,
                "contexts": [],
            }),
        )
    }

    /// This node's `/api/nodes` entry (also sent to peers for theirs).
    pub fn node_entry(&self) -> Json {
        self.node_json()
    }

    /// Every node of the cluster (this one first), or this node alone.
    pub(crate) fn nodes_json(&self) -> Vec<Json> {
        let mut nodes = vec![self.node_json()];
        if let Some(cluster) = &self.cluster {
            nodes.extend(cluster.peer_nodes());
        }
        nodes
    }

    /// `cluster_status`: the cluster's view, or a single node's.
    pub(crate) fn cluster_status(&self) -> Json {
        match &self.cluster {
            Some(cluster) => {
                let mut status = cluster.status();
                if let Some(object) = status.as_object_mut() {
                    object.insert("cluster_name".into(), json!(self.effective_cluster_name()));
                }
                status
            }
            None => json!({
                "node": self.node_name,
                "cluster_name": self.effective_cluster_name(),
                "cluster_id": "",
                "leader": self.node_name,
                "members": [{"name": self.node_name, "type": "voter", "running": true}],
            }),
        }
    }

    /// `POST /api/join-cluster` `{"node": "warren@HOST[:PORT]"}`: 202 while the node
    /// restarts to join, 200 when it is a member already, or the typed refusal.
    pub(crate) fn join_cluster(&self, request: &Request) -> Response {
        let Some(cluster) = &self.cluster else {
            return super::bad_request(
                "this node does not run clustered: set cluster.listeners.tcp.default (and the \
                 cluster's secret) and restart it before it can join a cluster",
            );
        };
        let body: Json = match super::requests::parse(request) {
            Ok(body) => body,
            Err(refusal) => return refusal,
        };
        let Some(node) = body["node"].as_str() else {
            return super::bad_request("the body needs \"node\": the node to join");
        };
        match cluster.join(node) {
            Ok(super::JoinOutcome::Restarting { node }) => Response::json(
                202,
                &json!({"node": self.node_name, "joining": node, "restarting": true}),
            ),
            Ok(super::JoinOutcome::AlreadyMember) => Response::json(
                200,
                &json!({"node": self.node_name, "joining": node, "already_member": true}),
            ),
            Err(refusal) => super::error(refusal.status(), refusal.name(), refusal.to_string()),
        }
    }

    /// `POST /api/reset`: 202 while the node leaves its cluster and restarts blank.
    pub(crate) fn reset_node(&self) -> Response {
        let Some(cluster) = &self.cluster else {
            return super::bad_request(
                "this node does not run clustered: stop it and empty its data_dir to reset it",
            );
        };
        match cluster.reset() {
            Ok(()) => Response::json(202, &json!({"node": self.node_name, "restarting": true})),
            Err(refusal) => super::error(refusal.status(), refusal.name(), refusal.to_string()),
        }
    }

    pub(crate) fn node_json(&self) -> Json {
        let resources = (self.resources)();
        let alarms = self.broker.alarms();
        let listeners: Vec<Json> = self
            .listeners
            .iter()
            .map(|l| {
                json!({"protocol": l.protocol, "ip_address": l.addr.ip().to_string(),
                       "port": l.addr.port()})
            })
            .collect();
        json!({
            "name": self.node_name,
            "listeners": listeners,
            "type": "disc",
            "running": true,
            "being_drained": false,
            "os_pid": std::process::id().to_string(),
            "mem_used": resources.memory_used,
            "mem_limit": resources.memory_limit,
            "mem_alarm": alarms.contains(&Alarm::Memory),
            "disk_free": resources.disk_free,
            "disk_free_limit": resources.disk_free_limit,
            "disk_free_alarm": alarms.contains(&Alarm::Disk),
            "uptime": self.started.elapsed().as_millis() as u64,
            "processors": std::thread::available_parallelism().map_or(1, |n| n.get()),
            "partitions": [],
            "applications": [],
            "enabled_plugins": ["rabbitmq_management", "rabbitmq_prometheus"],
        })
    }

    /// `/api/health/checks/alarms` and `local-alarms`: 200 when no alarm is in effect, else
    /// 503 with the alarms (a single node: both checks agree).
    pub(crate) fn alarms_check(&self, which: &str) -> Response {
        let alarms = self.broker.alarms();
        if alarms.is_empty() {
            return Response::json(200, &json!({"status": "ok"}));
        }
        let reason = if which == "alarms" {
            "There are alarms in effect in the cluster"
        } else {
            "There are alarms in effect on the node"
        };
        let list: Vec<Json> = alarms
            .iter()
            .map(|a| {
                let resource = match a {
                    Alarm::Memory => "memory",
                    Alarm::Disk => "disk",
                };
                json!({"node": self.node_name, "resource": resource})
            })
            .collect();
        Response::json(
            503,
            &json!({"status": "failed", "reason": reason, "alarms": list}),
        )
    }

    /// Declares `aliveness-test` in the vhost, publishes a message to it and gets it back.
    pub(crate) fn aliveness_test(&self, caller: &Caller, vhost: &str) -> Response {
        let target = match self.usable_vhost(caller, vhost) {
            Ok(target) => target,
            Err(response) => return response,
        };
        let actor = Actor {
            user: &caller.user.name,
            connection_id: BROKER_CONNECTION,
        };
        let declared = target.declare_queue(
            actor,
            QueueDeclare {
                name: "aliveness-test".to_string(),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                arguments: Default::default(),
            },
        );
        if let Err(e) = declared {
            return core_error(e);
        }
        let Some(queue) = target.queue("aliveness-test") else {
            return Response::json(
                503,
                &json!({"status": "failed", "reason": "queue vanished"}),
            );
        };
        // Published as any client publishes, through the default exchange.
        let published = target.publish(
            &mut Publisher::new(),
            actor,
            Arc::new(Message {
                exchange: "".into(),
                routing_key: "aliveness-test".into(),
                properties: Default::default(),
                encoded_properties: None,
                body: bytes::Bytes::from_static(b"test_message"),
            }),
            PublishOptions::default(),
        );
        if let Err(refused) = published {
            return core_error(refused.error);
        }
        let mut found = false;
        while let Some((delivery, _)) = queue.get(false) {
            found |= &delivery.message.body[..] == b"test_message";
        }
        if found {
            Response::json(200, &json!({"status": "ok"}))
        } else {
            Response::json(
                503,
                &json!({"status": "failed", "reason": "message did not come back"}),
            )
        }
    }

    /// The connections a caller sees: all for monitoring users, otherwise their own.
    pub(crate) fn visible_connections(&self, caller: &Caller) -> Vec<ConnectionSnapshot> {
        self.broker
            .connections()
            .list()
            .into_iter()
            .filter(|c| caller.is(Role::Monitoring) || c.info.user == caller.user.name)
            .collect()
    }

    /// The socket byte counts and rates of `connections`, by `(local, peer)` address.
    pub(crate) fn connection_octets(
        &self,
        connections: &[ConnectionSnapshot],
    ) -> HashMap<(SocketAddr, SocketAddr), ConnectionOctets> {
        let keys: Vec<(SocketAddr, SocketAddr)> = connections
            .iter()
            .map(|c| (c.info.local, c.info.peer))
            .collect();
        self.octets.read(&keys)
    }

    /// A connection as RabbitMQ lists it; with its socket's byte counts and rates
    /// (`recv_oct`, `send_oct` and their `_details`) when `octets` has them.
    pub(crate) fn connection_json(
        &self,
        connection: &ConnectionSnapshot,
        octets: &HashMap<(SocketAddr, SocketAddr), ConnectionOctets>,
    ) -> Json {
        let info = &connection.info;
        let mut json = json!({
            "name": info.name(),
            "node": self.node_name,
            "type": "network",
            "state": "running",
            "protocol": info.protocol,
            "user": info.user,
            "vhost": info.vhost,
            "host": info.local.ip().to_string(),
            "port": info.local.port(),
            "peer_host": info.peer.ip().to_string(),
            "peer_port": info.peer.port(),
            "ssl": info.tls,
            "channels": connection.channels,
            "channel_max": info.channel_max,
            "frame_max": info.frame_max,
            "timeout": info.heartbeat,
            "connected_at": info.connected_at,
            "client_properties": table_to_json(&info.client_properties),
            "user_provided_name": info.connection_name,
            "connection_name": info.connection_name,
            "auth_mechanism": "PLAIN",
        });
        if let Some(octets) = octets.get(&(info.local, info.peer)) {
            json["recv_oct"] = json!(octets.received);
            json["send_oct"] = json!(octets.sent);
            json["recv_oct_details"] = json!({"rate": octets.received_rate});
            json["send_oct_details"] = json!({"rate": octets.sent_rate});
        }
        json
    }

    pub(crate) fn connections(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
    ) -> Response {
        let connections = self.visible_connections(caller);
        match (request.method.as_str(), path) {
            ("GET", []) => {
                let octets = self.connection_octets(&connections);
                let mut list: Vec<Json> = connections
                    .iter()
                    .map(|c| self.connection_json(c, &octets))
                    .collect();
                list.extend(self.peer_objects(caller, super::ListingKind::Connections));
                Response::json(200, &Json::Array(list))
            }
            ("GET", [name]) => match connections.iter().find(|c| c.info.name() == *name) {
                Some(c) => {
                    let octets = self.connection_octets(std::slice::from_ref(c));
                    Response::json(200, &self.connection_json(c, &octets))
                }
                None => match self
                    .peer_objects(caller, super::ListingKind::Connections)
                    .into_iter()
                    .find(|c| c["name"] == *name)
                {
                    Some(found) => Response::json(200, &found),
                    None => not_found(),
                },
            },
            ("GET", [name, "channels"]) => {
                match connections.iter().find(|c| c.info.name() == *name) {
                    Some(c) => Response::json(200, &Json::Array(self.channels_of(c))),
                    None => not_found(),
                }
            }
            ("DELETE", [name]) => {
                let Some(found) = self
                    .broker
                    .connections()
                    .list()
                    .into_iter()
                    .find(|c| c.info.name() == *name)
                else {
                    // Another node's connection: closed there.
                    let owner = self
                        .peer_objects(caller, super::ListingKind::Connections)
                        .into_iter()
                        .find(|c| c["name"] == *name);
                    let Some(owner) = owner else {
                        return not_found();
                    };
                    if !(caller.is(Role::Administrator) || owner["user"] == caller.user.name) {
                        return not_authorized("Not administrator user");
                    }
                    let reason = request
                        .header("x-reason")
                        .unwrap_or("Closed via management plugin");
                    return match self
                        .cluster
                        .as_ref()
                        .is_some_and(|cluster| cluster.close_peer_connection(name, reason))
                    {
                        true => Response::empty(204),
                        false => not_found(),
                    };
                };
                if !(caller.is(Role::Administrator) || found.info.user == caller.user.name) {
                    return not_authorized("Not administrator user");
                }
                let reason = request
                    .header("x-reason")
                    .unwrap_or("Closed via management plugin");
                self.broker.close_connection(found.info.id, reason);
                Response::empty(204)
            }
            _ => not_found(),
        }
    }

    /// The channels of a connection. The registry keeps a count, not the channel numbers,
    /// so channels are listed as numbers 1..=count.
    pub(crate) fn channels_of(&self, connection: &ConnectionSnapshot) -> Vec<Json> {
        let info = &connection.info;
        (1..=connection.channels)
            .map(|number| {
                json!({
                    "name": format!("{} ({number})", info.name()),
                    "number": number,
                    "node": self.node_name,
                    "user": info.user,
                    "vhost": info.vhost,
                    "state": "running",
                    "connection_details": {
                        "name": info.name(),
                        "peer_host": info.peer.ip().to_string(),
                        "peer_port": info.peer.port(),
                    },
                })
            })
            .collect()
    }

    pub(crate) fn channels(&self, caller: &Caller, vhost: Option<&str>) -> Response {
        let mut list: Vec<Json> = self
            .visible_connections(caller)
            .iter()
            .filter(|c| vhost.is_none_or(|v| c.info.vhost == v))
            .flat_map(|c| self.channels_of(c))
            .collect();
        list.extend(
            self.peer_objects(caller, super::ListingKind::Channels)
                .into_iter()
                .filter(|c| vhost.is_none_or(|v| c["vhost"] == v)),
        );
        Response::json(200, &Json::Array(list))
    }

    /// The other nodes' connections or channels this caller may see (their own, unless
    /// monitoring), on a cluster.
    fn peer_objects(&self, caller: &Caller, kind: super::ListingKind) -> Vec<Json> {
        let Some(cluster) = &self.cluster else {
            return Vec::new();
        };
        cluster
            .peer_listing(kind)
            .into_iter()
            .filter(|object| caller.is(Role::Monitoring) || object["user"] == caller.user.name)
            .collect()
    }

    /// `/api/consumers`: this node's consumers and, on a cluster, every other node's, each
    /// listed by the node its channel or link is on (as RabbitMQ does).
    pub(crate) fn consumers(&self, caller: &Caller, vhost: Option<&str>) -> Response {
        let vhosts = match self.visible_vhosts(caller, vhost) {
            Ok(vhosts) => vhosts,
            Err(response) => return response,
        };
        let visible = |object: &Json| {
            caller.is(Role::Monitoring) || object["channel_details"]["user"] == caller.user.name
        };
        let mut list: Vec<Json> = vhosts
            .iter()
            .flat_map(|vhost| self.local_consumers_of(vhost))
            .filter(|object| visible(object))
            .collect();
        if let Some(cluster) = &self.cluster {
            list.extend(
                cluster
                    .peer_listing(super::ListingKind::Consumers)
                    .into_iter()
                    .filter(|object| {
                        visible(object)
                            && vhosts.iter().any(|v| object["queue"]["vhost"] == v.name())
                    }),
            );
        }
        Response::json(200, &Json::Array(list))
    }

    /// The consumers of `vhost`'s queues whose channel or link is on this node, by queue
    /// name.
    pub(crate) fn local_consumers_of(&self, vhost: &warren_core::vhost::VHost) -> Vec<Json> {
        let connections = self.broker.connections().list();
        let mut queues = vhost.queue_instances();
        // Streams' consumers over AMQP (the stream protocol's subscribers are not listed).
        queues.extend(
            vhost
                .streams()
                .list()
                .iter()
                .filter_map(|log| vhost.queue_instance(log.name())),
        );
        queues.sort_by(|a, b| a.name().cmp(b.name()));
        let mut list = Vec::new();
        for queue in queues {
            for (spec, active) in queue.local_consumers() {
                let connection = connections.iter().find(|c| c.info.id == spec.connection_id);
                let channel_details = connection.map_or(Json::Null, |c| {
                    json!({
                        "connection_name": c.info.name(),
                        "node": self.node_name,
                        "peer_host": c.info.peer.ip().to_string(),
                        "peer_port": c.info.peer.port(),
                        "user": c.info.user,
                    })
                });
                list.push(json!({
                    "consumer_tag": &*spec.tag,
                    "queue": {"name": queue.name(), "vhost": vhost.name()},
                    "channel_details": channel_details,
                    "ack_required": spec.needs_settlement,
                    "exclusive": spec.exclusive,
                    "priority": spec.priority,
                    "arguments": table_to_json(&spec.arguments),
                    "active": active,
                    "activity_status": if active { "up" } else { "waiting" },
                }));
            }
        }
        list
    }
}
