//! Dead-lettering: the copy of a message that leaves its queue through the queue's
//! dead-letter exchange, with the `x-death` history RabbitMQ 4.x writes.

use std::sync::Arc;

use crate::message::{Message, Properties};
use crate::queue::DeathReason;
use crate::value::{Table, Value};

pub(crate) fn death_field<'a>(entry: &'a Value, key: &str) -> Option<&'a str> {
    match entry {
        Value::Table(table) => table.get(key).and_then(Value::as_str),
        _ => None,
    }
}

/// The dead-lettered copy of `message`: published to `dlx` with `routing_key` (or its own),
/// with an `x-death` entry for (queue, reason) counted up and moved first, and the
/// `x-first-death-*` / `x-last-death-*` headers, as RabbitMQ 4.x writes them.
pub(crate) fn with_death(
    message: &Message,
    queue: &str,
    reason: DeathReason,
    dlx: &str,
    routing_key: Option<&str>,
) -> Message {
    let mut properties: Properties = message.properties.clone();
    let mut headers = properties.headers.take().unwrap_or_default();
    let mut deaths = match headers.remove("x-death") {
        Some(Value::Array(entries)) => entries,
        _ => Vec::new(),
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let existing = deaths.iter().position(|entry| {
        death_field(entry, "queue") == Some(queue)
            && death_field(entry, "reason") == Some(reason.name())
    });
    let entry = match existing {
        Some(index) => {
            let mut entry = match deaths.remove(index) {
                Value::Table(table) => table,
                _ => Table::new(),
            };
            let count = entry.get("count").and_then(Value::as_i64).unwrap_or(0);
            entry.insert("count", Value::I64(count + 1));
            entry.insert("time", Value::Timestamp(now));
            entry
        }
        None => {
            let mut entry = Table::new();
            entry.insert("count", Value::I64(1));
            entry.insert("reason", Value::string(reason.name()));
            entry.insert("queue", Value::string(queue));
            entry.insert("time", Value::Timestamp(now));
            entry.insert("exchange", Value::string(message.exchange.to_string()));
            entry.insert(
                "routing-keys",
                Value::Array(vec![Value::string(message.routing_key.to_string())]),
            );
            if reason == DeathReason::Expired {
                if let Some(expiration) = &properties.expiration {
                    entry.insert("original-expiration", Value::string(expiration.clone()));
                }
            }
            entry
        }
    };
    deaths.insert(0, Value::Table(entry));
    if headers.get("x-first-death-reason").is_none() {
        headers.insert("x-first-death-reason", Value::string(reason.name()));
        headers.insert("x-first-death-queue", Value::string(queue));
        headers.insert(
            "x-first-death-exchange",
            Value::string(message.exchange.to_string()),
        );
    }
    headers.insert("x-last-death-reason", Value::string(reason.name()));
    headers.insert("x-last-death-queue", Value::string(queue));
    headers.insert(
        "x-last-death-exchange",
        Value::string(message.exchange.to_string()),
    );
    headers.insert("x-death", Value::Array(deaths));
    properties.headers = Some(headers);
    if reason == DeathReason::Expired {
        // The copy must not expire again on its way through the dead-letter queue.
        properties.expiration = None;
    }
    Message {
        exchange: Arc::from(dlx),
        routing_key: routing_key.map_or_else(|| Arc::clone(&message.routing_key), Arc::from),
        properties,
        encoded_properties: None,
        body: message.body.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(expiration: Option<&str>) -> Message {
        Message {
            exchange: "orders".into(),
            routing_key: "eu.paris".into(),
            properties: Properties {
                expiration: expiration.map(str::to_string),
                ..Default::default()
            },
            encoded_properties: None,
            body: Bytes::from_static(b"x"),
        }
    }

    fn deaths(message: &Message) -> Vec<Table> {
        match message
            .properties
            .headers
            .as_ref()
            .and_then(|h| h.get("x-death"))
        {
            Some(Value::Array(entries)) => entries
                .iter()
                .map(|e| match e {
                    Value::Table(t) => t.clone(),
                    other => panic!("entry {other:?}"),
                })
                .collect(),
            other => panic!("x-death {other:?}"),
        }
    }

    #[test]
    fn first_death_records_queue_reason_exchange_keys_and_original_expiration() {
        let dead = with_death(
            &message(Some("500")),
            "work",
            DeathReason::Expired,
            "dlx",
            Some("retry"),
        );
        assert_eq!((&*dead.exchange, &*dead.routing_key), ("dlx", "retry"));
        assert_eq!(dead.properties.expiration, None);
        let entry = &deaths(&dead)[0];
        assert_eq!(entry.get("count"), Some(&Value::I64(1)));
        assert_eq!(entry.get("reason").and_then(Value::as_str), Some("expired"));
        assert_eq!(entry.get("queue").and_then(Value::as_str), Some("work"));
        assert_eq!(
            entry.get("exchange").and_then(Value::as_str),
            Some("orders")
        );
        assert_eq!(
            entry.get("routing-keys"),
            Some(&Value::Array(vec![Value::string("eu.paris")]))
        );
        assert_eq!(
            entry.get("original-expiration").and_then(Value::as_str),
            Some("500")
        );
        let headers = dead.properties.headers.as_ref().unwrap();
        assert_eq!(
            headers.get("x-first-death-reason").and_then(Value::as_str),
            Some("expired")
        );
        assert_eq!(
            headers.get("x-last-death-exchange").and_then(Value::as_str),
            Some("orders")
        );
    }

    #[test]
    fn repeated_deaths_count_up_and_move_first() {
        let once = with_death(&message(None), "a", DeathReason::Rejected, "", None);
        let twice = with_death(&once, "b", DeathReason::Rejected, "", None);
        let thrice = with_death(&twice, "a", DeathReason::Rejected, "", None);
        let entries = deaths(&thrice);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].get("queue").and_then(Value::as_str), Some("a"));
        assert_eq!(entries[0].get("count"), Some(&Value::I64(2)));
        assert_eq!(entries[1].get("queue").and_then(Value::as_str), Some("b"));
        let headers = thrice.properties.headers.as_ref().unwrap();
        assert_eq!(
            headers.get("x-first-death-queue").and_then(Value::as_str),
            Some("a")
        );
        assert_eq!(
            headers.get("x-last-death-queue").and_then(Value::as_str),
            Some("a")
        );
        // Rejection keeps the expiration: only expiry removes it.
        let kept = with_death(&message(Some("100")), "a", DeathReason::Rejected, "", None);
        assert_eq!(kept.properties.expiration.as_deref(), Some("100"));
    }
}
