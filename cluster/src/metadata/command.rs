//! What the metadata log holds: [`MetadataCommand`]s, each a core [`TopologyChange`] (or a
//! cluster-level setting) with the node and ticket that proposed it, encoded as JSON. Field
//! values keep their exact AMQP type (`{"t": "I32", "v": 5}`), so a change applies on every
//! node with the arguments it had where it was made.

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value as Json};
use warren_core::exchange::DestinationName;
use warren_core::replication::TopologyChange;
use warren_core::value::{Table, Value};
use warren_core::vhost::{ExchangeDeclare, QueueDeclare};

/// One entry of the metadata log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetadataCommand {
    /// The node that proposed it (the home node of a declared queue).
    pub origin: String,
    /// The proposer's ticket: the proposer applies its own entry itself, in log order.
    pub ticket: u64,
    /// What changes.
    pub operation: Operation,
}

/// What a log entry changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Operation {
    /// A core topology change, as encoded by [`encode_change`].
    Topology(Json),
    /// The cluster's id, set once by the node that formed the cluster.
    ClusterId(String),
    /// Several changes of one proposer (the command's origin), applied in this order: what
    /// group commit gathered while the proposer's previous entry was in flight
    /// (`group_commit.rs`). The command's own ticket is unused; each change has its own.
    Batch(Vec<BatchedChange>),
}

/// One change of an [`Operation::Batch`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchedChange {
    /// The proposer's ticket for this change.
    pub ticket: u64,
    /// The change, as encoded by [`encode_change`].
    pub change: Json,
}

/// What applying an entry answered: empty, or why the change failed on the leader.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResponse {
    /// Why it failed, if it did.
    pub error: Option<String>,
}

/// Why an entry could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError(pub String);

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "undecodable metadata change: {}", self.0)
    }
}

impl std::error::Error for DecodeError {}

/// A table as JSON, keeping each value's type.
pub fn table_to_json(table: &Table) -> Json {
    Json::Array(
        table
            .iter()
            .map(|(key, value)| json!([key, value_to_json(value)]))
            .collect(),
    )
}

fn value_to_json(value: &Value) -> Json {
    let (tag, v) = match value {
        Value::Bool(b) => ("Bool", json!(b)),
        Value::I8(n) => ("I8", json!(n)),
        Value::U8(n) => ("U8", json!(n)),
        Value::I16(n) => ("I16", json!(n)),
        Value::U16(n) => ("U16", json!(n)),
        Value::I32(n) => ("I32", json!(n)),
        Value::U32(n) => ("U32", json!(n)),
        Value::I64(n) => ("I64", json!(n)),
        Value::F32(n) => ("F32", json!(n)),
        Value::F64(n) => ("F64", json!(n)),
        Value::Decimal { scale, value } => ("Decimal", json!([scale, value])),
        Value::LongString(bytes) => ("LongString", json!(bytes)),
        Value::Array(items) => (
            "Array",
            Json::Array(items.iter().map(value_to_json).collect()),
        ),
        Value::Timestamp(t) => ("Timestamp", json!(t)),
        Value::Table(table) => ("Table", table_to_json(table)),
        Value::Void => ("Void", Json::Null),
        Value::ByteArray(bytes) => ("ByteArray", json!(bytes)),
    };
    json!({"t": tag, "v": v})
}

fn bad(what: &str) -> DecodeError {
    DecodeError(what.to_string())
}

/// A table from [`table_to_json`]'s form.
pub fn json_to_table(json: &Json) -> Result<Table, DecodeError> {
    let entries = json.as_array().ok_or_else(|| bad("table"))?;
    let mut table = Table::new();
    for entry in entries {
        let pair = entry.as_array().filter(|p| p.len() == 2);
        let (Some(key), Some(value)) = (pair.and_then(|p| p[0].as_str()), pair.map(|p| &p[1]))
        else {
            return Err(bad("table entry"));
        };
        table.0.push((key.to_string(), json_to_value(value)?));
    }
    Ok(table)
}

fn json_to_value(json: &Json) -> Result<Value, DecodeError> {
    let tag = json
        .get("t")
        .and_then(Json::as_str)
        .ok_or_else(|| bad("value tag"))?;
    let v = json.get("v").ok_or_else(|| bad("value"))?;
    let int = |what| v.as_i64().ok_or_else(|| bad(what));
    let uint = |what| v.as_u64().ok_or_else(|| bad(what));
    let bytes = |what| -> Result<Vec<u8>, DecodeError> {
        serde_json::from_value(v.clone()).map_err(|_| bad(what))
    };
    Ok(match tag {
        "Bool" => Value::Bool(v.as_bool().ok_or_else(|| bad("bool"))?),
        "I8" => Value::I8(i8::try_from(int("i8")?).map_err(|_| bad("i8"))?),
        "U8" => Value::U8(u8::try_from(uint("u8")?).map_err(|_| bad("u8"))?),
        "I16" => Value::I16(i16::try_from(int("i16")?).map_err(|_| bad("i16"))?),
        "U16" => Value::U16(u16::try_from(uint("u16")?).map_err(|_| bad("u16"))?),
        "I32" => Value::I32(i32::try_from(int("i32")?).map_err(|_| bad("i32"))?),
        "U32" => Value::U32(u32::try_from(uint("u32")?).map_err(|_| bad("u32"))?),
        "I64" => Value::I64(int("i64")?),
        "F32" => Value::F32(v.as_f64().ok_or_else(|| bad("f32"))? as f32),
        "F64" => Value::F64(v.as_f64().ok_or_else(|| bad("f64"))?),
        "Decimal" => {
            let (scale, value): (u8, u32) =
                serde_json::from_value(v.clone()).map_err(|_| bad("decimal"))?;
            Value::Decimal { scale, value }
        }
        "LongString" => Value::LongString(bytes("long string")?),
        "Array" => Value::Array(
            v.as_array()
                .ok_or_else(|| bad("array"))?
                .iter()
                .map(json_to_value)
                .collect::<Result<_, _>>()?,
        ),
        "Timestamp" => Value::Timestamp(uint("timestamp")?),
        "Table" => Value::Table(json_to_table(v)?),
        "Void" => Value::Void,
        "ByteArray" => Value::ByteArray(bytes("byte array")?),
        _ => return Err(bad("value tag")),
    })
}

fn destination_to_json(destination: &DestinationName) -> Json {
    match destination {
        DestinationName::Queue(name) => json!({"queue": name}),
        DestinationName::Exchange(name) => json!({"exchange": name}),
    }
}

fn json_to_destination(json: &Json) -> Result<DestinationName, DecodeError> {
    if let Some(name) = json.get("queue").and_then(Json::as_str) {
        return Ok(DestinationName::Queue(name.to_string()));
    }
    if let Some(name) = json.get("exchange").and_then(Json::as_str) {
        return Ok(DestinationName::Exchange(name.to_string()));
    }
    Err(bad("destination"))
}

/// A core topology change as JSON.
pub fn encode_change(change: &TopologyChange) -> Json {
    match change {
        TopologyChange::AddVhost {
            name,
            default_queue_type,
        } => json!({"op": "add_vhost", "name": name, "default_queue_type": default_queue_type}),
        TopologyChange::DeleteVhost { name } => json!({"op": "delete_vhost", "name": name}),
        TopologyChange::PutUser {
            name,
            password,
            tags,
        } => json!({"op": "put_user", "name": name, "password": password, "tags": tags}),
        TopologyChange::DeleteUser { name } => json!({"op": "delete_user", "name": name}),
        TopologyChange::SetPermissions {
            vhost,
            user,
            patterns,
        } => json!({"op": "set_permissions", "vhost": vhost, "user": user,
                    "configure": patterns.0, "write": patterns.1, "read": patterns.2}),
        TopologyChange::ClearPermissions { vhost, user } => {
            json!({"op": "clear_permissions", "vhost": vhost, "user": user})
        }
        TopologyChange::SetTopicPermission {
            vhost,
            user,
            exchange,
            patterns,
        } => json!({"op": "set_topic_permission", "vhost": vhost, "user": user,
                    "exchange": exchange, "write": patterns.0, "read": patterns.1}),
        TopologyChange::ClearTopicPermissions {
            vhost,
            user,
            exchange,
        } => json!({"op": "clear_topic_permissions", "vhost": vhost, "user": user,
                    "exchange": exchange}),
        TopologyChange::SetPolicy {
            vhost,
            operator,
            name,
            pattern,
            apply_to,
            priority,
            definition,
        } => json!({"op": "set_policy", "vhost": vhost, "operator": operator, "name": name,
                    "pattern": pattern, "apply_to": apply_to, "priority": priority,
                    "definition": table_to_json(definition)}),
        TopologyChange::ClearPolicy {
            vhost,
            operator,
            name,
        } => json!({"op": "clear_policy", "vhost": vhost, "operator": operator, "name": name}),
        TopologyChange::DeclareExchange {
            vhost,
            user,
            request,
        } => json!({"op": "declare_exchange", "vhost": vhost, "user": user,
                    "name": request.name, "type": request.kind, "durable": request.durable,
                    "auto_delete": request.auto_delete, "internal": request.internal,
                    "arguments": table_to_json(&request.arguments)}),
        TopologyChange::DeleteExchange {
            vhost,
            user,
            name,
            if_unused,
        } => json!({"op": "delete_exchange", "vhost": vhost, "user": user, "name": name,
                    "if_unused": if_unused}),
        TopologyChange::DeclareQueue {
            vhost,
            user,
            request,
        } => json!({"op": "declare_queue", "vhost": vhost, "user": user,
                    "name": request.name, "durable": request.durable,
                    "exclusive": request.exclusive, "auto_delete": request.auto_delete,
                    "arguments": table_to_json(&request.arguments)}),
        TopologyChange::DeleteQueue {
            vhost,
            user,
            name,
            if_unused,
            if_empty,
        } => json!({"op": "delete_queue", "vhost": vhost, "user": user, "name": name,
                    "if_unused": if_unused, "if_empty": if_empty}),
        TopologyChange::DropQueue { vhost, name, home } => {
            json!({"op": "drop_queue", "vhost": vhost, "name": name, "home": home})
        }
        TopologyChange::StreamPlacement {
            vhost,
            name,
            placement,
        } => json!({"op": "stream_placement", "vhost": vhost, "name": name,
                    "placement": placement.encode()}),
        TopologyChange::GlobalParameter { name, value } => {
            json!({"op": "global_parameter", "name": name, "value": value})
        }
        TopologyChange::RuntimeParameter {
            vhost,
            component,
            name,
            value,
        } => json!({"op": "runtime_parameter", "vhost": vhost, "component": component,
                    "name": name, "value": value}),
        TopologyChange::Binding {
            bound,
            vhost,
            user,
            source,
            destination,
            routing_key,
            arguments,
        } => json!({"op": if *bound { "bind" } else { "unbind" }, "vhost": vhost,
                    "user": user, "source": source,
                    "destination": destination_to_json(destination),
                    "routing_key": routing_key, "arguments": table_to_json(arguments)}),
    }
}

/// A core topology change from [`encode_change`]'s JSON.
pub fn decode_change(json: &Json) -> Result<TopologyChange, DecodeError> {
    let object: &Map<String, Json> = json.as_object().ok_or_else(|| bad("change"))?;
    let text = |key: &str| -> Result<String, DecodeError> {
        object
            .get(key)
            .and_then(Json::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad(key))
    };
    let flag = |key: &str| -> Result<bool, DecodeError> {
        object
            .get(key)
            .and_then(Json::as_bool)
            .ok_or_else(|| bad(key))
    };
    let table = |key: &str| json_to_table(object.get(key).unwrap_or(&Json::Null));
    let op = text("op")?;
    Ok(match op.as_str() {
        "add_vhost" => TopologyChange::AddVhost {
            name: text("name")?,
            default_queue_type: object
                .get("default_queue_type")
                .and_then(Json::as_str)
                .map(str::to_string),
        },
        "delete_vhost" => TopologyChange::DeleteVhost {
            name: text("name")?,
        },
        "put_user" => TopologyChange::PutUser {
            name: text("name")?,
            password: serde_json::from_value(object.get("password").cloned().unwrap_or_default())
                .map_err(|_| bad("password"))?,
            tags: serde_json::from_value(object.get("tags").cloned().unwrap_or_default())
                .map_err(|_| bad("tags"))?,
        },
        "delete_user" => TopologyChange::DeleteUser {
            name: text("name")?,
        },
        "set_permissions" => TopologyChange::SetPermissions {
            vhost: text("vhost")?,
            user: text("user")?,
            patterns: (text("configure")?, text("write")?, text("read")?),
        },
        "clear_permissions" => TopologyChange::ClearPermissions {
            vhost: text("vhost")?,
            user: text("user")?,
        },
        "set_topic_permission" => TopologyChange::SetTopicPermission {
            vhost: text("vhost")?,
            user: text("user")?,
            exchange: text("exchange")?,
            patterns: (text("write")?, text("read")?),
        },
        "clear_topic_permissions" => TopologyChange::ClearTopicPermissions {
            vhost: text("vhost")?,
            user: text("user")?,
            exchange: object
                .get("exchange")
                .and_then(Json::as_str)
                .map(str::to_string),
        },
        "set_policy" => TopologyChange::SetPolicy {
            vhost: text("vhost")?,
            operator: flag("operator")?,
            name: text("name")?,
            pattern: text("pattern")?,
            apply_to: text("apply_to")?,
            priority: object
                .get("priority")
                .and_then(Json::as_i64)
                .and_then(|p| i32::try_from(p).ok())
                .ok_or_else(|| bad("priority"))?,
            definition: table("definition")?,
        },
        "clear_policy" => TopologyChange::ClearPolicy {
            vhost: text("vhost")?,
            operator: flag("operator")?,
            name: text("name")?,
        },
        "declare_exchange" => TopologyChange::DeclareExchange {
            vhost: text("vhost")?,
            user: text("user")?,
            request: ExchangeDeclare {
                name: text("name")?,
                kind: text("type")?,
                passive: false,
                durable: flag("durable")?,
                auto_delete: flag("auto_delete")?,
                internal: flag("internal")?,
                arguments: table("arguments")?,
            },
        },
        "delete_exchange" => TopologyChange::DeleteExchange {
            vhost: text("vhost")?,
            user: text("user")?,
            name: text("name")?,
            if_unused: flag("if_unused")?,
        },
        "declare_queue" => TopologyChange::DeclareQueue {
            vhost: text("vhost")?,
            user: text("user")?,
            request: QueueDeclare {
                name: text("name")?,
                passive: false,
                durable: flag("durable")?,
                // Absent in entries written before exclusive queues were replicated.
                exclusive: object
                    .get("exclusive")
                    .and_then(Json::as_bool)
                    .unwrap_or(false),
                auto_delete: flag("auto_delete")?,
                arguments: table("arguments")?,
            },
        },
        "delete_queue" => TopologyChange::DeleteQueue {
            vhost: text("vhost")?,
            user: text("user")?,
            name: text("name")?,
            if_unused: flag("if_unused")?,
            if_empty: flag("if_empty")?,
        },
        "drop_queue" => TopologyChange::DropQueue {
            vhost: text("vhost")?,
            name: text("name")?,
            home: text("home")?,
        },
        "stream_placement" => TopologyChange::StreamPlacement {
            vhost: text("vhost")?,
            name: text("name")?,
            placement: warren_core::stream_log::Placement::decode(&text("placement")?)
                .ok_or_else(|| bad("placement"))?,
        },
        "global_parameter" => TopologyChange::GlobalParameter {
            name: text("name")?,
            value: object
                .get("value")
                .and_then(Json::as_str)
                .map(str::to_string),
        },
        "runtime_parameter" => TopologyChange::RuntimeParameter {
            vhost: text("vhost")?,
            component: text("component")?,
            name: text("name")?,
            value: object
                .get("value")
                .and_then(Json::as_str)
                .map(str::to_string),
        },
        "bind" | "unbind" => TopologyChange::Binding {
            bound: op == "bind",
            vhost: text("vhost")?,
            user: text("user")?,
            source: text("source")?,
            destination: json_to_destination(object.get("destination").unwrap_or(&Json::Null))?,
            routing_key: text("routing_key")?,
            arguments: table("arguments")?,
        },
        other => return Err(DecodeError(format!("unknown operation '{other}'"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_survive_the_json_form_with_exact_argument_types() {
        let mut arguments = Table::new();
        arguments.insert("x-max-length", Value::I32(10));
        arguments.insert("x-message-ttl", Value::U16(5));
        arguments.insert("x-dead-letter-exchange", Value::LongString(b"dlx".to_vec()));
        let mut nested = Table::new();
        nested.insert("k", Value::Array(vec![Value::Bool(true), Value::Void]));
        arguments.insert("nested", Value::Table(nested));
        arguments.insert(
            "d",
            Value::Decimal {
                scale: 2,
                value: 314,
            },
        );
        let changes = [
            TopologyChange::StreamPlacement {
                vhost: "/".into(),
                name: "events".into(),
                placement: warren_core::stream_log::Placement::initial(
                    vec!["warren@a".into(), "warren@b".into(), "warren@c".into()],
                    "warren@a",
                    0,
                )
                .next_epoch("warren@c", 812),
            },
            TopologyChange::DeclareQueue {
                vhost: "/".into(),
                user: "guest".into(),
                request: QueueDeclare {
                    name: "q".into(),
                    passive: false,
                    durable: true,
                    exclusive: false,
                    auto_delete: false,
                    arguments: arguments.clone(),
                },
            },
            TopologyChange::Binding {
                bound: true,
                vhost: "v".into(),
                user: "u".into(),
                source: "x".into(),
                destination: DestinationName::Exchange("y".into()),
                routing_key: "a.b".into(),
                arguments: arguments.clone(),
            },
            TopologyChange::PutUser {
                name: "u".into(),
                password: Some(("rabbit_password_hashing_sha256".into(), "abc=".into())),
                tags: vec!["administrator".into()],
            },
            TopologyChange::SetPolicy {
                vhost: "/".into(),
                operator: false,
                name: "p".into(),
                pattern: "^q".into(),
                apply_to: "queues".into(),
                priority: -3,
                definition: arguments,
            },
            TopologyChange::RuntimeParameter {
                vhost: "/".into(),
                component: "vhost-limits".into(),
                name: "limits".into(),
                value: Some(r#"{"max-queues":1}"#.into()),
            },
            TopologyChange::RuntimeParameter {
                vhost: "/".into(),
                component: "vhost-limits".into(),
                name: "limits".into(),
                value: None,
            },
        ];
        for change in changes {
            let json = encode_change(&change);
            let text = serde_json::to_string(&json).unwrap();
            let decoded = decode_change(&serde_json::from_str(&text).unwrap()).unwrap();
            assert_eq!(format!("{decoded:?}"), format!("{change:?}"));
        }
        assert!(decode_change(&json!({"op": "explode"})).is_err());
        assert!(decode_change(&json!({"op": "delete_vhost"})).is_err());
        assert!(
            decode_change(&json!({"op": "stream_placement", "vhost": "/", "name": "s",
                                      "placement": "not a placement"}))
            .is_err()
        );
    }

    #[test]
    fn a_batch_command_keeps_its_changes_and_tickets_in_order_through_the_log_form() {
        let changes: Vec<BatchedChange> = ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(ticket, name)| BatchedChange {
                ticket: ticket as u64 + 7,
                change: encode_change(&TopologyChange::DeleteVhost {
                    name: name.to_string(),
                }),
            })
            .collect();
        let command = MetadataCommand {
            origin: "warren@127.0.0.2".into(),
            ticket: 0,
            operation: Operation::Batch(changes.clone()),
        };
        let text = serde_json::to_string(&command).unwrap();
        let decoded: MetadataCommand = serde_json::from_str(&text).unwrap();
        assert_eq!(decoded, command);
        let Operation::Batch(decoded_changes) = decoded.operation else {
            panic!("not a batch");
        };
        let names: Vec<(u64, String)> = decoded_changes
            .iter()
            .map(|c| match decode_change(&c.change).unwrap() {
                TopologyChange::DeleteVhost { name } => (c.ticket, name),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            [(7, "a".to_string()), (8, "b".into()), (9, "c".into())]
        );
        // An entry written before batches existed still reads.
        let single: MetadataCommand = serde_json::from_value(json!({
            "origin": "warren@127.0.0.1", "ticket": 3,
            "operation": {"Topology": {"op": "delete_vhost", "name": "v"}}
        }))
        .unwrap();
        assert!(matches!(single.operation, Operation::Topology(_)));
    }
}
