//! Exchanges, queues and bindings, publishing through the API and getting messages.

use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use serde_json::{json, Value as Json};
use warren_config::json_args_to_table;
use warren_core::access::Access;
use warren_core::exchange::{Binding, DestinationName};
use warren_core::message::{Message, Properties};
use warren_core::queue::Settlement;
use warren_core::queue_type::{QueueInstance, Replica};
use warren_core::value::Value;
use warren_core::vhost::{
    Actor, ExchangeDeclare, PublishError, PublishOptions, Publisher, QueueDeclare, VHost,
    BROKER_CONNECTION,
};
use warren_core::ErrorKind;

use super::json::table_to_json;
use super::requests::{
    self, AckMode, BindingBody, Encoding, ExchangeBody, GetBody, PayloadEncoding, PropertiesBody,
    PublishBody, QueueBody,
};
use super::{bad_request, core_error, created_or_updated, not_found, Caller, Management};
use crate::http::{percent_encode, Request, Response};
use crate::rates::Ranges;

fn actor(caller: &Caller) -> Actor<'_> {
    Actor {
        user: &caller.user.name,
        connection_id: BROKER_CONNECTION,
    }
}

/// RabbitMQ's `properties_key` for a binding: the escaped routing key (`~` for an empty one)
/// with a hash of the arguments when there are any.
fn properties_key(binding: &Binding) -> String {
    let key = if binding.routing_key.is_empty() {
        "~".to_string()
    } else {
        percent_encode(&binding.routing_key)
    };
    if binding.arguments.is_empty() {
        key
    } else {
        let text = table_to_json(&binding.arguments).to_string();
        let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("{key}~{hash:016x}")
    }
}

impl Management {
    pub(crate) fn exchange_json(
        &self,
        vhost: &str,
        exchange: &warren_core::exchange::Exchange,
        ranges: &Ranges,
    ) -> Json {
        let config = exchange.config();
        let message_stats = self.rates.exchange_json(
            vhost,
            exchange.name(),
            &crate::rates::exchange_values(&exchange.stats()),
            ranges,
        );
        json!({
            "name": config.name,
            "vhost": vhost,
            "type": config.type_name(),
            "durable": config.durable,
            "auto_delete": config.auto_delete,
            "internal": config.internal,
            "arguments": table_to_json(&config.arguments),
            "user_who_performed_action": "rmq-internal",
            "policy": Json::Null,
            "message_stats": message_stats,
        })
    }

    /// A queue of any type but streams ([`Management::stream_json`]), through the
    /// queue-type interface: its type, counters and, for a replicated queue, RabbitMQ's
    /// `leader`, `members` and `online`.
    pub(crate) fn queue_json(
        &self,
        vhost: &VHost,
        queue: &dyn QueueInstance,
        ranges: &Ranges,
    ) -> Json {
        let name = queue.name();
        let stats = queue.info();
        let queue_type = queue.queue_type().name();
        let quorum = queue_type == "quorum";
        let policy = vhost
            .policies(false)
            .iter()
            .filter(|p| {
                if quorum {
                    p.matches_quorum_queue(name)
                } else {
                    p.matches_queue(name)
                }
            })
            .max_by_key(|p| p.priority)
            .map(|p| Json::String(p.name.clone()))
            .unwrap_or(Json::Null);
        let (message_stats, lengths) = self.rates.queue_json(
            vhost.name(),
            name,
            &crate::rates::queue_values(&stats),
            ranges,
        );
        let mut json = json!({
            "name": name,
            "vhost": vhost.name(),
            "durable": queue.durable(),
            "auto_delete": queue.auto_delete(),
            "exclusive": queue.exclusive_owner().is_some(),
            "arguments": table_to_json(&queue.arguments()),
            "type": queue_type,
            "node": self.queue_node(vhost.name(), name),
            "state": "running",
            "policy": policy,
            "consumers": stats.consumers,
            "message_stats": message_stats,
        });
        if let Some(object) = json.as_object_mut() {
            object.extend(lengths);
            if let Some(replicas) = queue.replicas() {
                let node = |replica: &Replica| match replica {
                    Replica::ThisNode => self.node_name.clone(),
                    Replica::Node(name) => name.clone(),
                };
                let names = |list: &[Replica]| -> Json {
                    Json::Array(list.iter().map(|r| Json::String(node(r))).collect())
                };
                let leader = replicas.leader.as_ref().map(node);
                // RabbitMQ shows the leader's node as the queue's node.
                if let Some(leader) = &leader {
                    object.insert("node".into(), Json::String(leader.clone()));
                }
                object.insert("leader".into(), leader.map_or(Json::Null, Json::String));
                object.insert("members".into(), names(&replicas.members));
                object.insert("online".into(), names(&replicas.online));
            }
        }
        json
    }

    /// The node a queue lives on: its home node when the cluster's metadata log declared
    /// it, else this node.
    pub(crate) fn queue_node(&self, vhost: &str, queue: &str) -> String {
        self.cluster
            .as_ref()
            .and_then(|cluster| cluster.home_of(vhost, queue))
            .unwrap_or_else(|| self.node_name.clone())
    }

    pub(crate) fn binding_json(&self, vhost: &str, binding: &Binding) -> Json {
        let (destination_type, destination) = match &binding.destination {
            DestinationName::Queue(q) => ("queue", q),
            DestinationName::Exchange(x) => ("exchange", x),
        };
        json!({
            "source": binding.source,
            "vhost": vhost,
            "destination": destination,
            "destination_type": destination_type,
            "routing_key": binding.routing_key,
            "arguments": table_to_json(&binding.arguments),
            "properties_key": properties_key(binding),
        })
    }

    pub(crate) fn exchanges(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
        ranges: &Ranges,
    ) -> Response {
        match (request.method.as_str(), path) {
            ("GET", []) | ("GET", [_]) => self.list_per_vhost(caller, path.first().copied(), |v| {
                let mut exchanges = v.exchanges();
                exchanges.sort_by(|a, b| a.name().cmp(b.name()));
                exchanges
                    .iter()
                    .map(|e| self.exchange_json(v.name(), e, ranges))
                    .collect()
            }),
            ("GET", [vhost, name]) => self.show_in_vhost(caller, vhost, |v| {
                // RabbitMQ names the default exchange `amq.default` in paths.
                let name = if *name == "amq.default" { "" } else { name };
                v.exchange(name)
                    .map(|e| self.exchange_json(vhost, &e, ranges))
            }),
            ("GET", [vhost, name, "bindings", direction @ ("source" | "destination")]) => self
                .show_in_vhost(caller, vhost, |v| {
                    v.exchange(name)?;
                    let list = self
                        .all_bindings(v)
                        .into_iter()
                        .filter(|b| match *direction {
                            "source" => b.source == *name,
                            _ => b.destination == DestinationName::Exchange(name.to_string()),
                        })
                        .map(|b| self.binding_json(vhost, &b))
                        .collect();
                    Some(Json::Array(list))
                }),
            ("PUT", [vhost, name]) => self.act_in_vhost(caller, vhost, |target| {
                let body: ExchangeBody = match requests::parse(request) {
                    Ok(body) => body,
                    Err(response) => return response,
                };
                let created = target.exchange(name).is_none();
                let result = target.declare_exchange(
                    actor(caller),
                    ExchangeDeclare {
                        name: name.to_string(),
                        kind: body.kind,
                        passive: false,
                        durable: body.durable,
                        auto_delete: body.auto_delete,
                        internal: body.internal,
                        arguments: json_args_to_table(&body.arguments),
                    },
                );
                match result {
                    Ok(()) => created_or_updated(created),
                    Err(e) => core_error(e),
                }
            }),
            ("DELETE", [vhost, name]) => self.act_in_vhost(caller, vhost, |target| {
                if target.exchange(name).is_none() {
                    return not_found();
                }
                let if_unused = request.query_param("if-unused").as_deref() == Some("true");
                match target.delete_exchange(actor(caller), name, if_unused) {
                    Ok(()) => Response::empty(204),
                    Err(e) => core_error(e),
                }
            }),
            ("POST", [vhost, name, "publish"]) => self.publish(request, caller, vhost, name),
            _ => not_found(),
        }
    }

    pub(crate) fn queues(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
        ranges: &Ranges,
    ) -> Response {
        match (request.method.as_str(), path) {
            ("GET", []) | ("GET", [_]) => {
                // Each queue's JSON (lengths, rates, its policy) is built only if it is on the
                // page asked for.
                self.list_per_vhost_by_name(caller, path.first().copied(), |v| {
                    let mut listed: Vec<(String, Box<dyn FnOnce() -> Json + '_>)> = v
                        .queue_instances()
                        .into_iter()
                        .map(|q| {
                            let name = q.name().to_string();
                            let vhost = Arc::clone(v);
                            let build: Box<dyn FnOnce() -> Json + '_> =
                                Box::new(move || self.queue_json(&vhost, q.as_ref(), ranges));
                            (name, build)
                        })
                        .collect();
                    listed.extend(v.streams().list().into_iter().map(|log| {
                        let vhost = Arc::clone(v);
                        let name = log.name().to_string();
                        let build: Box<dyn FnOnce() -> Json + '_> =
                            Box::new(move || self.stream_json(&vhost, &log));
                        (name, build)
                    }));
                    listed.sort_by(|a, b| a.0.cmp(&b.0));
                    listed
                })
            }
            ("GET", [vhost, name]) => self.show_in_vhost(caller, vhost, |v| {
                // A stream is a queue instance too; its log has its offsets and segments.
                v.streams()
                    .get(name)
                    .map(|log| self.stream_json(v, &log))
                    .or_else(|| {
                        v.queue_instance(name)
                            .map(|q| self.queue_json(v, q.as_ref(), ranges))
                    })
            }),
            ("GET", [vhost, name, "bindings"]) => self.show_in_vhost(caller, vhost, |v| {
                if v.queue_instance(name).is_none() && v.streams().get(name).is_none() {
                    return None;
                }
                let list = self
                    .all_bindings(v)
                    .into_iter()
                    .filter(|b| b.destination == DestinationName::Queue(name.to_string()))
                    .map(|b| self.binding_json(vhost, &b))
                    .collect();
                Some(Json::Array(list))
            }),
            ("PUT", [vhost, name]) => self.act_in_vhost(caller, vhost, |target| {
                let body: QueueBody = match requests::parse(request) {
                    Ok(body) => body,
                    Err(response) => return response,
                };
                let mut arguments = json_args_to_table(&body.arguments);
                if let Some(kind) = body.kind.as_deref() {
                    if arguments.get("x-queue-type").is_none() && kind != "classic" {
                        arguments.insert("x-queue-type", Value::string(kind));
                    }
                }
                let created =
                    target.queue_instance(name).is_none() && target.streams().get(name).is_none();
                // The vhost's max-queues, as for a client's queue.declare.
                if let Err(e) = target.check_queue_limit(name) {
                    return core_error(e);
                }
                let result = target.declare_queue(
                    actor(caller),
                    QueueDeclare {
                        name: name.to_string(),
                        passive: false,
                        durable: body.durable,
                        exclusive: false,
                        auto_delete: body.auto_delete,
                        arguments,
                    },
                );
                match result {
                    Ok(_) => created_or_updated(created),
                    Err(e) => core_error(e),
                }
            }),
            ("DELETE", [vhost, name]) => self.act_in_vhost(caller, vhost, |target| {
                if target.queue_instance(name).is_none() && target.streams().get(name).is_none() {
                    return not_found();
                }
                let if_unused = request.query_param("if-unused").as_deref() == Some("true");
                let if_empty = request.query_param("if-empty").as_deref() == Some("true");
                match target.delete_queue(actor(caller), name, if_unused, if_empty) {
                    Ok(_) => Response::empty(204),
                    Err(e) => core_error(e),
                }
            }),
            ("DELETE", [vhost, name, "contents"]) => self.act_in_vhost(caller, vhost, |target| {
                match target.purge_queue(actor(caller), name) {
                    Ok(_) => Response::empty(204),
                    Err(e) => core_error(e),
                }
            }),
            ("POST", [vhost, name, "get"]) => self.get_messages(request, caller, vhost, name),
            ("GET", [vhost, name, "browse"]) => self.browse(request, caller, vhost, name),
            _ => not_found(),
        }
    }

    /// Every binding of a vhost, including the default exchange's implicit binding to each
    /// queue, as RabbitMQ lists them.
    pub(crate) fn all_bindings(&self, vhost: &VHost) -> Vec<Binding> {
        let mut names: Vec<String> = vhost
            .queue_instances()
            .iter()
            .map(|q| q.name().to_string())
            .chain(vhost.streams().list().iter().map(|s| s.name().to_string()))
            .collect();
        names.sort();
        let mut list: Vec<Binding> = names
            .into_iter()
            .map(|name| Binding {
                source: String::new(),
                destination: DestinationName::Queue(name.clone()),
                routing_key: name,
                arguments: Default::default(),
            })
            .collect();
        let mut exchanges = vhost.exchanges();
        exchanges.sort_by(|a, b| a.name().cmp(b.name()));
        for exchange in exchanges {
            if exchange.name().is_empty() {
                continue;
            }
            list.extend(exchange.bindings());
        }
        list
    }

    pub(crate) fn bindings(&self, path: &[&str], caller: &Caller) -> Response {
        let vhosts = match self.visible_vhosts(caller, path.first().copied()) {
            Ok(vhosts) => vhosts,
            Err(response) => return response,
        };
        let list: Vec<Json> = match path {
            [] | [_] => vhosts
                .iter()
                .flat_map(|v| {
                    self.all_bindings(v)
                        .iter()
                        .map(|b| self.binding_json(v.name(), b))
                        .collect::<Vec<_>>()
                })
                .collect(),
            [vhost, "e", source, kind @ ("q" | "e"), destination] => {
                let wanted = if *kind == "q" {
                    DestinationName::Queue(destination.to_string())
                } else {
                    DestinationName::Exchange(destination.to_string())
                };
                self.all_bindings(&vhosts[0])
                    .iter()
                    .filter(|b| b.source == *source && b.destination == wanted)
                    .map(|b| self.binding_json(vhost, b))
                    .collect()
            }
            _ => return not_found(),
        };
        Response::json(200, &Json::Array(list))
    }

    /// `POST /api/bindings/VHOST/e/SOURCE/q|e/DESTINATION` (body `{routing_key, arguments}`)
    /// creates a binding; `DELETE .../PROPERTIES_KEY` removes it.
    pub(crate) fn change_binding(
        &self,
        request: &Request,
        path: &[&str],
        caller: &Caller,
    ) -> Response {
        let (vhost, source, kind, destination, properties) = match path {
            [vhost, "e", source, kind @ ("q" | "e"), destination] => {
                (*vhost, *source, *kind, *destination, None)
            }
            [vhost, "e", source, kind @ ("q" | "e"), destination, props] => {
                (*vhost, *source, *kind, *destination, Some(*props))
            }
            _ => return not_found(),
        };
        let target = match self.usable_vhost(caller, vhost) {
            Ok(target) => target,
            Err(response) => return response,
        };
        let destination_name = if kind == "q" {
            DestinationName::Queue(destination.to_string())
        } else {
            DestinationName::Exchange(destination.to_string())
        };
        match (request.method.as_str(), properties) {
            ("POST", None) => {
                let body: BindingBody = match requests::parse(request) {
                    Ok(body) => body,
                    Err(response) => return response,
                };
                let routing_key = body.routing_key.as_str();
                let arguments = json_args_to_table(&body.arguments);
                let binding = Binding {
                    source: source.to_string(),
                    destination: destination_name.clone(),
                    routing_key: routing_key.to_string(),
                    arguments: arguments.clone(),
                };
                match target.bind(
                    actor(caller),
                    source,
                    destination_name,
                    routing_key,
                    arguments,
                ) {
                    Ok(()) => {
                        let mut response = Response::empty(201);
                        response.headers.push((
                            "location",
                            format!(
                                "/api/bindings/{}/e/{}/{kind}/{}/{}",
                                percent_encode(vhost),
                                percent_encode(source),
                                percent_encode(destination),
                                properties_key(&binding)
                            ),
                        ));
                        response
                    }
                    Err(e) => core_error(e),
                }
            }
            ("DELETE", Some(properties)) => {
                let Some(binding) = self.all_bindings(&target).into_iter().find(|b| {
                    !b.source.is_empty()
                        && b.source == source
                        && b.destination == destination_name
                        && (properties_key(b) == properties
                            || crate::http::percent_decode(&properties_key(b)).as_deref()
                                == Some(properties))
                }) else {
                    return not_found();
                };
                match target.unbind(
                    actor(caller),
                    source,
                    binding.destination,
                    &binding.routing_key,
                    binding.arguments,
                ) {
                    Ok(_) => Response::empty(204),
                    Err(e) => core_error(e),
                }
            }
            _ => super::error(405, "method_not_allowed", "Method Not Allowed"),
        }
    }

    fn publish(&self, request: &Request, caller: &Caller, vhost: &str, exchange: &str) -> Response {
        let target = match self.usable_vhost(caller, vhost) {
            Ok(target) => target,
            Err(response) => return response,
        };
        let body: PublishBody = match requests::parse(request) {
            Ok(body) => body,
            Err(response) => return response,
        };
        let payload = match body.payload_encoding {
            PayloadEncoding::String => body.payload.into_bytes(),
            PayloadEncoding::Base64 => {
                match base64::engine::general_purpose::STANDARD.decode(&body.payload) {
                    Ok(bytes) => bytes,
                    Err(e) => return bad_request(format!("payload: not base64: {e}")),
                }
            }
        };
        let exchange_name = if exchange == "amq.default" {
            ""
        } else {
            exchange
        };
        let message = Arc::new(Message {
            exchange: exchange_name.into(),
            routing_key: body.routing_key.into(),
            properties: properties_from_body(body.properties.unwrap_or_default()),
            encoded_properties: None,
            body: Bytes::from(payload),
        });
        // Through the core, as every listener publishes: write and topic permissions,
        // user_id, routing, and the store for a persistent message reaching a durable queue.
        let outcome = target.publish(
            &mut Publisher::new(),
            actor(caller),
            message,
            PublishOptions::default(),
        );
        match outcome {
            Ok(outcome) if !outcome.accepted => {
                // A queue refused it (x-overflow reject-publish): RabbitMQ's answer to the
                // nack its publish gets.
                bad_request("rejected Unable to publish message. Check queue limits.")
            }
            Ok(outcome) => {
                let mut response = Response::json(200, &json!({"routed": outcome.routed()}));
                // Answered once the message is safe, as RabbitMQ answers after its confirm.
                response.wait_for_store = outcome.durable_seq();
                response
            }
            Err(refused) => publish_refused(refused),
        }
    }

    fn get_messages(
        &self,
        request: &Request,
        caller: &Caller,
        vhost: &str,
        name: &str,
    ) -> Response {
        let target = match self.usable_vhost(caller, vhost) {
            Ok(target) => target,
            Err(response) => return response,
        };
        let body: GetBody = match requests::parse(request) {
            Ok(body) => body,
            Err(response) => return response,
        };
        let count = body.count;
        let settlement = match body.ackmode {
            // The UI's "Nack message requeue true": a nack with requeue, which RabbitMQ 4.3
            // does not count as a failed delivery (a quorum queue's delivery limit); a
            // reject with requeue counts.
            AckMode::AckRequeueTrue => Settlement::Release,
            AckMode::RejectRequeueTrue => Settlement::Requeue,
            AckMode::AckRequeueFalse => Settlement::Ack,
            AckMode::RejectRequeueFalse => Settlement::Reject,
        };
        let encoding = body.encoding;
        let truncate = body
            .truncate
            .map(|t| usize::try_from(t).unwrap_or(usize::MAX));
        if target.streams().get(name).is_some() {
            // As RabbitMQ: a stream is read by a consumer with an offset, never taken.
            return bad_request(format!(
                "{} is a stream: basic.get is not supported (browse it by offset instead)",
                warren_core::error::resource("queue", name, vhost)
            ));
        }
        // Any queue type but streams, through the queue-type interface.
        let queue = match target.queue_instance_for(actor(caller), name, Access::Read) {
            Ok(queue) => queue,
            Err(e) => return core_error(e),
        };
        let mut taken = Vec::new();
        let mut list = Vec::new();
        for _ in 0..count {
            let Some((delivery, remaining)) = queue.get(true) else {
                break;
            };
            let mut json = message_json(
                &delivery.message,
                delivery.redelivered,
                remaining,
                encoding,
                truncate,
            );
            if delivery.delivery_count > 0 {
                // As an AMQP 0-9-1 get shows it (RabbitMQ 4.x quorum queues): the failed
                // deliveries so far, in the `x-delivery-count` header.
                let properties = &mut json["properties"];
                if !properties["headers"].is_object() {
                    properties["headers"] = json!({});
                }
                properties["headers"]["x-delivery-count"] = Json::from(delivery.delivery_count);
            }
            list.push(json);
            taken.push(delivery.id);
        }
        if !taken.is_empty() {
            queue.settle(&taken, settlement);
        }
        Response::json(200, &Json::Array(list))
    }
}

/// One message as `/get` and `/browse` answer it (RabbitMQ's `/get` shape): payload as text
/// when it is UTF-8 and `auto` was asked, else base64, cut at `truncate` bytes.
pub(crate) fn message_json(
    message: &Message,
    redelivered: bool,
    message_count: u64,
    encoding: Encoding,
    truncate: Option<usize>,
) -> Json {
    let mut body_bytes: &[u8] = &message.body;
    if let Some(limit) = truncate {
        body_bytes = &body_bytes[..body_bytes.len().min(limit)];
    }
    let (payload, payload_encoding) = match std::str::from_utf8(body_bytes) {
        Ok(text) if encoding == Encoding::Auto => (text.to_string(), "string"),
        _ => (
            base64::engine::general_purpose::STANDARD.encode(body_bytes),
            "base64",
        ),
    };
    json!({
        "payload_bytes": message.body.len(),
        "redelivered": redelivered,
        "exchange": &*message.exchange,
        "routing_key": &*message.routing_key,
        "message_count": message_count,
        "properties": properties_to_json(&message.properties),
        "payload": payload,
        "payload_encoding": payload_encoding,
    })
}

fn properties_from_body(body: PropertiesBody) -> Properties {
    Properties {
        content_type: body.content_type,
        content_encoding: body.content_encoding,
        headers: body.headers.as_ref().map(json_args_to_table),
        delivery_mode: body.delivery_mode,
        priority: body.priority,
        correlation_id: body.correlation_id,
        reply_to: body.reply_to,
        expiration: body.expiration,
        message_id: body.message_id,
        timestamp: body.timestamp,
        message_type: body.message_type,
        user_id: body.user_id,
        app_id: body.app_id,
        cluster_id: body.cluster_id,
    }
}

fn properties_to_json(properties: &Properties) -> Json {
    let mut out = serde_json::Map::new();
    let mut put = |key: &str, value: Option<Json>| {
        if let Some(value) = value {
            out.insert(key.to_string(), value);
        }
    };
    put(
        "content_type",
        properties.content_type.clone().map(Json::String),
    );
    put(
        "content_encoding",
        properties.content_encoding.clone().map(Json::String),
    );
    put("headers", properties.headers.as_ref().map(table_to_json));
    put("delivery_mode", properties.delivery_mode.map(Json::from));
    put("priority", properties.priority.map(Json::from));
    put(
        "correlation_id",
        properties.correlation_id.clone().map(Json::String),
    );
    put("reply_to", properties.reply_to.clone().map(Json::String));
    put(
        "expiration",
        properties.expiration.clone().map(Json::String),
    );
    put(
        "message_id",
        properties.message_id.clone().map(Json::String),
    );
    put("timestamp", properties.timestamp.map(Json::from));
    put("type", properties.message_type.clone().map(Json::String));
    put("user_id", properties.user_id.clone().map(Json::String));
    put("app_id", properties.app_id.clone().map(Json::String));
    put(
        "cluster_id",
        properties.cluster_id.clone().map(Json::String),
    );
    Json::Object(out)
}

/// The answer to a publish the core refused. RabbitMQ publishes from the API on an AMQP
/// channel, so a refusal closes that channel and comes back as a 400 whose reason is the
/// channel's reply code and text (`403 ACCESS_REFUSED - ...`). A missing exchange is 404, as
/// RabbitMQ finds that before publishing.
fn publish_refused(refused: PublishError) -> Response {
    let error = refused.error;
    let (code, name) = match error.kind {
        ErrorKind::NotFound | ErrorKind::Unavailable => return core_error(error),
        ErrorKind::AccessRefused => (403, "ACCESS_REFUSED"),
        ErrorKind::PreconditionFailed => (406, "PRECONDITION_FAILED"),
        ErrorKind::ResourceLocked => (405, "RESOURCE_LOCKED"),
        ErrorKind::NotAllowed => (530, "NOT_ALLOWED"),
        ErrorKind::ResourceError => (506, "RESOURCE_ERROR"),
        ErrorKind::NotImplemented => (540, "NOT_IMPLEMENTED"),
        ErrorKind::CommandInvalid => (503, "COMMAND_INVALID"),
        ErrorKind::InternalError => (541, "INTERNAL_ERROR"),
    };
    bad_request(format!("{code} {name} - {}", error.message))
}
