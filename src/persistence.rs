//! Durable state in `data_dir`: the durable definitions (a RabbitMQ definitions.json, written
//! atomically by the message store's writer thread whenever durable topology changed) and the
//! message store itself (`msg_store/`, see docs/storage.md).
//!
//! Boot order: open the store (replaying it), attach it to the broker, create the default
//! vhost and user, apply the saved definitions, apply `load_definitions`, put recovered
//! messages back into their queues (releasing those of queues that no longer exist), and only
//! then install the definitions writer, so a half-restored broker is never written over the
//! saved file.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use serde_json::{json, Map, Value as Json};
use warren_core::exchange::DestinationName;
use warren_core::store::Recovered;
use warren_core::value::{Table, Value};
use warren_core::Broker;

/// The saved definitions, inside `data_dir`.
pub const DEFINITIONS_FILE: &str = "definitions.json";
/// The message store's directory, inside `data_dir`.
pub const STORE_DIR: &str = "msg_store";

/// The path of the saved definitions.
pub fn definitions_path(data_dir: &Path) -> PathBuf {
    data_dir.join(DEFINITIONS_FILE)
}

/// Installs the writer of the saved definitions on the broker's store.
pub fn install_definitions_writer(broker: &Arc<Broker>, data_dir: &Path) {
    let Some(store) = broker.message_store() else {
        return;
    };
    let weak: Weak<Broker> = Arc::downgrade(broker);
    let path = definitions_path(data_dir);
    store.set_definitions_writer(Box::new(move || match weak.upgrade() {
        Some(broker) => write_atomically(&path, &snapshot(&broker)),
        None => Ok(()),
    }));
}

/// Puts recovered messages back into their durable queues; messages of queues that are gone
/// (deleted, or no longer durable) are released in the store.
pub fn restore_messages(broker: &Broker, recovered: Recovered) {
    let Some(store) = broker.message_store() else {
        return;
    };
    let mut restored = 0usize;
    for (name, messages) in recovered.queues {
        let queue = broker
            .vhost(&name.vhost)
            .and_then(|vhost| vhost.queue(&name.name))
            .filter(|queue| queue.store_name().is_some());
        match queue {
            Some(queue) => {
                restored += messages.len();
                queue.restore(messages);
            }
            None => {
                let ids: Vec<u64> = messages.iter().map(|m| m.store_id).collect();
                tracing::warn!(
                    queue = %name.name,
                    vhost = %name.vhost,
                    messages = ids.len(),
                    "message store: messages of a queue that no longer exists were released"
                );
                store.remove(&name, &ids);
            }
        }
    }
    tracing::info!(
        messages = restored,
        "persistent messages restored to their queues"
    );
}

/// Writes `document` to `path` so that a crash leaves either the old or the new file: write
/// a temporary file, fsync it, rename it over, fsync the directory.
fn write_atomically(path: &Path, document: &Json) -> Result<(), String> {
    let temporary = path.with_extension("json.tmp");
    let text = serde_json::to_vec_pretty(document).map_err(|e| e.to_string())?;
    let result = (|| -> std::io::Result<()> {
        let mut file = File::create(&temporary)?;
        file.write_all(&text)?;
        file.sync_all()?;
        fs::rename(&temporary, path)?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    result.map_err(|e| format!("{}: {e}", path.display()))
}

/// The broker's durable definitions in RabbitMQ's definitions.json schema: users, vhosts,
/// permissions, topic permissions, runtime and global parameters, policies, durable exchanges, durable non-exclusive queues, and bindings
/// between durable things. Transient and exclusive things are left out, as RabbitMQ does.
pub fn snapshot(broker: &Broker) -> Json {
    let users = broker.users();
    let user_names: Vec<&str> = users.iter().map(|u| u.name.as_str()).collect();
    let mut vhosts = Vec::new();
    let mut permissions = Vec::new();
    let mut topic_permissions = Vec::new();
    let mut policies = Vec::new();
    let mut operator_policies = Vec::new();
    let mut exchanges = Vec::new();
    let mut queues = Vec::new();
    let mut bindings = Vec::new();
    for vhost_name in broker.vhost_names() {
        let Some(vhost) = broker.vhost(&vhost_name) else {
            continue;
        };
        let mut metadata = Map::new();
        if let Some(default) = vhost.default_queue_type() {
            metadata.insert("default_queue_type".into(), Json::String(default));
        }
        vhosts.push(json!({"name": vhost_name, "metadata": metadata}));
        for (user, granted) in vhost.permission_entries() {
            if !user_names.contains(&user.as_str()) {
                continue;
            }
            let (configure, write, read) = granted.patterns();
            permissions.push(json!({
                "user": user, "vhost": vhost_name,
                "configure": configure, "write": write, "read": read,
            }));
        }
        for (user, granted) in vhost.topic_permission_entries() {
            if !user_names.contains(&user.as_str()) {
                continue;
            }
            let (write, read) = granted.patterns();
            topic_permissions.push(json!({
                "user": user, "vhost": vhost_name, "exchange": granted.exchange(),
                "write": write, "read": read,
            }));
        }
        for (operator, list) in [(false, &mut policies), (true, &mut operator_policies)] {
            for policy in vhost.policies(operator) {
                list.push(json!({
                    "vhost": vhost_name,
                    "name": policy.name,
                    "pattern": policy.pattern,
                    "apply-to": policy.apply_to.name(),
                    "definition": table_to_json(&policy.definition),
                    "priority": policy.priority,
                }));
            }
        }
        // Sets: every binding looks its destination up (10,000 queues and 1,000 bindings
        // made a linear search here cost 10 million comparisons per write).
        let mut durable_exchanges: HashSet<String> = HashSet::new();
        let mut all_exchanges = vhost.exchanges();
        all_exchanges.sort_by(|a, b| a.name().cmp(b.name()));
        for exchange in &all_exchanges {
            let config = exchange.config();
            if !config.durable {
                continue;
            }
            durable_exchanges.insert(config.name.clone());
            if config.name.is_empty() || config.name.starts_with("amq.") {
                continue;
            }
            exchanges.push(json!({
                "name": config.name,
                "vhost": vhost_name,
                "type": config.type_name(),
                "durable": true,
                "auto_delete": config.auto_delete,
                "internal": config.internal,
                "arguments": table_to_json(&config.arguments),
            }));
        }
        let mut durable_queues: HashSet<String> = HashSet::new();
        let mut all_queues = vhost.queues();
        all_queues.sort_by(|a, b| a.name().cmp(b.name()));
        for queue in &all_queues {
            let config = queue.config();
            if !config.durable || config.exclusive_owner.is_some() || queue.is_deleted() {
                continue;
            }
            durable_queues.insert(config.name.clone());
            queues.push(json!({
                "name": config.name,
                "vhost": vhost_name,
                "durable": true,
                "auto_delete": config.auto_delete,
                "arguments": table_to_json(&config.arguments),
            }));
        }
        // Quorum queues: their declarations here, their messages in their Raft logs.
        // Classic queues homed on another node are typed queues here too (forwarding
        // stand-ins), and may be transient.
        for queue in vhost.typed_queues() {
            if !queue.durable() {
                continue;
            }
            durable_queues.insert(queue.name().to_string());
            queues.push(json!({
                "name": queue.name(),
                "vhost": vhost_name,
                "durable": true,
                "auto_delete": false,
                "arguments": table_to_json(&queue.arguments()),
            }));
        }
        for exchange in &all_exchanges {
            if !exchange.config().durable || exchange.name().is_empty() {
                continue;
            }
            for binding in exchange.bindings() {
                let (destination, kind) = match &binding.destination {
                    DestinationName::Queue(q) if durable_queues.contains(q) => (q, "queue"),
                    DestinationName::Exchange(x) if durable_exchanges.contains(x) => {
                        (x, "exchange")
                    }
                    _ => continue,
                };
                bindings.push(json!({
                    "source": binding.source,
                    "vhost": vhost_name,
                    "destination": destination,
                    "destination_type": kind,
                    "routing_key": binding.routing_key,
                    "arguments": table_to_json(&binding.arguments),
                }));
            }
        }
    }
    let users: Vec<Json> = users
        .iter()
        .map(|user| {
            let (hash, algorithm) = match &user.password {
                Some(hash) => (hash.to_base64(), hash.algorithm.rabbit_name()),
                None => (String::new(), "rabbit_password_hashing_sha256"),
            };
            json!({
                "name": user.name,
                "password_hash": hash,
                "hashing_algorithm": algorithm,
                "tags": user.tags,
            })
        })
        .collect();
    let parameters: Vec<Json> = broker
        .parameters(None, None)
        .into_iter()
        .map(|p| {
            json!({
                "vhost": p.vhost, "component": p.component, "name": p.name,
                "value": stored_json(&p.value),
            })
        })
        .collect();
    let global_parameters: Vec<Json> = broker
        .global_parameters()
        .into_iter()
        .map(|p| json!({"name": p.name, "value": stored_json(&p.value)}))
        .collect();
    json!({
        "product_name": "Warren",
        "users": users,
        "vhosts": vhosts,
        "permissions": permissions,
        "topic_permissions": topic_permissions,
        "parameters": parameters,
        "global_parameters": global_parameters,
        "policies": policies,
        "operator_policies": operator_policies,
        "exchanges": exchanges,
        "queues": queues,
        "bindings": bindings,
    })
}

/// A parameter value kept as JSON text; text that does not parse (never written by Warren)
/// is kept as a string rather than lost.
fn stored_json(text: &str) -> Json {
    serde_json::from_str(text).unwrap_or_else(|_| Json::String(text.to_string()))
}

/// A field table as JSON, the inverse of the definitions loader's conversion (integer
/// widths and the other AMQP-only types collapse to JSON's).
fn table_to_json(table: &Table) -> Json {
    Json::Object(
        table
            .iter()
            .map(|(key, value)| (key.to_string(), value_to_json(value)))
            .collect(),
    )
}

fn value_to_json(value: &Value) -> Json {
    match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::F32(f) => json!(f),
        Value::F64(f) => json!(f),
        Value::Decimal { scale, value } => json!(f64::from(*value) / 10f64.powi(i32::from(*scale))),
        Value::LongString(bytes) | Value::ByteArray(bytes) => {
            Json::String(String::from_utf8_lossy(bytes).into_owned())
        }
        Value::Array(items) => Json::Array(items.iter().map(value_to_json).collect()),
        Value::Table(table) => table_to_json(table),
        Value::Void => Json::Null,
        other => other.as_i64().map_or(Json::Null, |i| json!(i)),
    }
}
