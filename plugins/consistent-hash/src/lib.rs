//! # warren-consistent-hash
//!
//! The `x-consistent-hash` exchange type (RabbitMQ's rabbitmq_consistent_hash_exchange
//! semantics): each binding's key is its integer weight; a message goes to exactly one bound
//! destination, chosen by hashing its routing key, or the header named by the exchange's
//! `hash-header` argument, or the property named by `hash-property`.
//!
//! Destinations own `weight` consecutive buckets and a message's bucket is chosen with jump
//! consistent hashing (Lamping & Veach), as RabbitMQ does: the spread follows the weights
//! exactly, and adding a binding only moves keys onto the new binding's buckets.

use std::sync::Arc;

use warren_core::exchange::{ExchangeRouter, ExchangeType, Target};
use warren_core::message::Message;
use warren_core::value::{Table, Value};

/// The exchange type's name.
pub const TYPE_NAME: &str = "x-consistent-hash";

/// The `x-consistent-hash` exchange type, registered with `Broker::register_exchange_type`.
#[derive(Debug, Default)]
pub struct ConsistentHashExchange;

impl ConsistentHashExchange {
    /// The type, ready to register.
    pub fn new() -> Arc<ConsistentHashExchange> {
        Arc::new(ConsistentHashExchange)
    }
}

/// Where the hashed value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HashSource {
    RoutingKey,
    Header(String),
    Property(String),
}

impl ExchangeType for ConsistentHashExchange {
    fn name(&self) -> &str {
        TYPE_NAME
    }

    fn validate_binding(&self, routing_key: &str, _arguments: &Table) -> Result<(), String> {
        match routing_key.trim().parse::<u32>() {
            Ok(weight) if weight > 0 => Ok(()),
            _ => Err(format!(
                "The binding key must be an integer greater than zero (the binding's weight), got '{routing_key}'"
            )),
        }
    }

    fn router(&self, exchange_arguments: &Table) -> Box<dyn ExchangeRouter> {
        let text = |key: &str| {
            exchange_arguments
                .get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let source = match (text("hash-header"), text("hash-property")) {
            (Some(header), _) => HashSource::Header(header),
            (None, Some(property)) => HashSource::Property(property),
            (None, None) => HashSource::RoutingKey,
        };
        Box::new(HashRing {
            source,
            buckets: Vec::new(),
        })
    }
}

/// The buckets of one exchange: bucket i belongs to `buckets[i]`.
struct HashRing {
    source: HashSource,
    buckets: Vec<Target>,
}

impl HashRing {
    fn weight(routing_key: &str) -> usize {
        routing_key.trim().parse::<usize>().unwrap_or(1).max(1)
    }

    fn hashed_value(&self, routing_key: &str, message: &Message) -> Option<String> {
        match &self.source {
            HashSource::RoutingKey => Some(routing_key.to_string()),
            HashSource::Header(name) => {
                let value = message.properties.headers.as_ref()?.get(name)?;
                Some(match value {
                    Value::LongString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    other => other.to_string(),
                })
            }
            HashSource::Property(name) => {
                let p = &message.properties;
                match name.as_str() {
                    "message_id" => p.message_id.clone(),
                    "correlation_id" => p.correlation_id.clone(),
                    "timestamp" => p.timestamp.map(|t| t.to_string()),
                    "app_id" => p.app_id.clone(),
                    "user_id" => p.user_id.clone(),
                    "type" => p.message_type.clone(),
                    "reply_to" => p.reply_to.clone(),
                    "content_type" => p.content_type.clone(),
                    _ => None,
                }
            }
        }
    }
}

impl ExchangeRouter for HashRing {
    fn bind(&mut self, routing_key: &str, _arguments: &Table, target: &Target) {
        // New buckets go at the end, so jump hashing only moves keys onto them.
        for _ in 0..Self::weight(routing_key) {
            self.buckets.push(target.clone());
        }
    }

    fn unbind(&mut self, routing_key: &str, _arguments: &Table, target: &Target) {
        let mut to_remove = Self::weight(routing_key);
        self.buckets.retain(|t| {
            if to_remove > 0 && t == target {
                to_remove -= 1;
                false
            } else {
                true
            }
        });
    }

    fn route(&self, routing_key: &str, message: &Message, out: &mut Vec<Target>) {
        if self.buckets.is_empty() {
            return;
        }
        // A message without the header or property it is hashed on goes nowhere, as in
        // RabbitMQ.
        let Some(value) = self.hashed_value(routing_key, message) else {
            return;
        };
        let bucket = jump_consistent_hash(stable_hash(value.as_bytes()), self.buckets.len());
        let target = &self.buckets[bucket];
        if !out.contains(target) {
            out.push(target.clone());
        }
    }
}

/// FNV-1a, 64 bits: stable across runs and platforms, so a key keeps its destination across
/// restarts.
fn stable_hash(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    // FNV's low bits are weak for short keys; a final mix spreads them (splitmix64).
    hash ^= hash >> 30;
    hash = hash.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash ^= hash >> 27;
    hash = hash.wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// Jump consistent hash (Lamping & Veach, 2014): a bucket in `0..buckets`.
fn jump_consistent_hash(mut key: u64, buckets: usize) -> usize {
    let mut bucket: i64 = -1;
    let mut next: i64 = 0;
    while next < buckets as i64 {
        bucket = next;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        next = ((bucket + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    bucket.max(0) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_core::message::Properties;

    fn message(key: &str) -> Message {
        Message {
            exchange: "hash".into(),
            routing_key: key.into(),
            properties: Properties::default(),
            encoded_properties: None,
            body: Default::default(),
        }
    }

    fn targets(names: &[&str]) -> Vec<Target> {
        names
            .iter()
            .map(|n| Target::Exchange(Arc::from(*n)))
            .collect()
    }

    fn counts(ring: &HashRing, keys: usize, of: &[Target]) -> Vec<usize> {
        let mut counts = vec![0; of.len()];
        let mut out = Vec::new();
        for i in 0..keys {
            out.clear();
            let key = format!("key-{i}");
            ring.route(&key, &message(&key), &mut out);
            let index = of
                .iter()
                .position(|t| *t == out[0])
                .expect("a known target");
            counts[index] += 1;
        }
        counts
    }

    #[test]
    fn distribution_follows_weights_within_a_few_percent_over_100000_keys() {
        let mut ring = HashRing {
            source: HashSource::RoutingKey,
            buckets: Vec::new(),
        };
        let all = targets(&["a", "b", "c"]);
        for (target, weight) in all.iter().zip(["1", "2", "5"]) {
            ring.bind(weight, &Table::new(), target);
        }
        let counts = counts(&ring, 100_000, &all);
        for (count, weight) in counts.iter().zip([1.0, 2.0, 5.0]) {
            let expected = 100_000.0 * weight / 8.0;
            let deviation = (*count as f64 - expected).abs() / expected;
            assert!(
                deviation < 0.03,
                "{counts:?}: {deviation} off for weight {weight}"
            );
        }
    }

    #[test]
    fn adding_an_unrelated_binding_only_moves_keys_to_it() {
        let mut ring = HashRing {
            source: HashSource::RoutingKey,
            buckets: Vec::new(),
        };
        let all = targets(&["a", "b", "c"]);
        ring.bind("1", &Table::new(), &all[0]);
        ring.bind("1", &Table::new(), &all[1]);
        let mut before = Vec::new();
        for i in 0..10_000 {
            let key = format!("k{i}");
            let mut out = Vec::new();
            ring.route(&key, &message(&key), &mut out);
            before.push(out[0].clone());
        }
        ring.bind("1", &Table::new(), &all[2]);
        for (i, old) in before.iter().enumerate() {
            let key = format!("k{i}");
            let mut out = Vec::new();
            ring.route(&key, &message(&key), &mut out);
            assert!(
                out[0] == *old || out[0] == all[2],
                "key {key} moved between old bindings"
            );
        }
        ring.unbind("1", &Table::new(), &all[2]);
        assert_eq!(ring.buckets.len(), 2);
    }

    #[test]
    fn binding_keys_must_be_positive_integers() {
        let exchange = ConsistentHashExchange;
        assert!(exchange.validate_binding("10", &Table::new()).is_ok());
        for bad in ["0", "-1", "ten", ""] {
            assert!(
                exchange.validate_binding(bad, &Table::new()).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn hash_header_and_property_choose_what_is_hashed() {
        let mut arguments = Table::new();
        arguments.insert("hash-header", Value::string("user"));
        let exchange = ConsistentHashExchange;
        let mut router = exchange.router(&arguments);
        let all = targets(&["a", "b"]);
        router.bind("1", &Table::new(), &all[0]);
        router.bind("1", &Table::new(), &all[1]);
        let mut with_header = message("ignored");
        let mut headers = Table::new();
        headers.insert("user", Value::string("alice"));
        with_header.properties.headers = Some(headers);
        let mut first = Vec::new();
        router.route("one", &with_header, &mut first);
        let mut second = Vec::new();
        router.route("two", &with_header, &mut second);
        assert_eq!(
            first, second,
            "the routing key is ignored when hashing a header"
        );
        let mut none = Vec::new();
        router.route("one", &message("one"), &mut none);
        assert!(none.is_empty(), "no header, no route");
    }
}
