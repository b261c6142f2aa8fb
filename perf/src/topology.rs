//! Queues, the exchange, bindings, and what each producer publishes (pre-encoded publish
//! templates: basic.publish method frame + content header frame, built once).

use bytes::BytesMut;
use warren_amqp091::codec::{
    encode_properties, write_content_header, write_method_frame, Method, CLASS_BASIC,
};
use warren_core::message::Properties;
use warren_core::value::{Table, Value};

use crate::args::{Config, ExchangeType};
use crate::client::{unexpected, AmqpError, Conn, CH};

/// The queues and exchange of a run.
pub struct Topology {
    pub queues: Vec<String>,
    /// "" is the default exchange.
    pub exchange: String,
    pub exchange_type: Option<ExchangeType>,
    /// Whether we declare the exchange (not for "" and amq.*).
    declare_exchange: bool,
    /// Whether to delete it at the end (only the auto-named warren-perf-TYPE).
    delete_exchange: bool,
}

impl Topology {
    pub fn new(config: &Config) -> Topology {
        let queues = if config.queues == 1 {
            vec![config.queue.clone()]
        } else {
            (1..=config.queues)
                .map(|i| format!("{}-{i}", config.queue))
                .collect()
        };
        let (exchange, auto_named) = match (&config.exchange, config.exchange_type) {
            (Some(name), _) => (name.clone(), false),
            (None, Some(kind)) => (format!("warren-perf-{}", kind.as_str()), true),
            (None, None) => (String::new(), false),
        };
        let exchange_type = match (&config.exchange, config.exchange_type) {
            (Some(name), None) if !name.is_empty() => Some(ExchangeType::Direct),
            (_, kind) => kind,
        };
        Topology {
            queues,
            declare_exchange: !exchange.is_empty(),
            delete_exchange: auto_named,
            exchange,
            exchange_type,
        }
    }

    /// The queue consumer or producer `index` works with.
    pub fn queue_for(&self, index: usize) -> &str {
        &self.queues[index % self.queues.len()]
    }

    /// Binding keys (and arguments) for queue number `q`.
    fn bindings(&self, config: &Config, q: usize) -> Vec<(String, Table)> {
        let name = &self.queues[q];
        match self.exchange_type {
            None => Vec::new(),
            Some(ExchangeType::Direct) => {
                vec![(
                    config.routing_key.clone().unwrap_or(name.clone()),
                    Table::new(),
                )]
            }
            Some(ExchangeType::Fanout) => {
                vec![(config.routing_key.clone().unwrap_or_default(), Table::new())]
            }
            Some(ExchangeType::Topic) => match &config.routing_key {
                Some(key) => vec![(key.clone(), Table::new())],
                None => (0..config.topic_bindings)
                    .map(|i| (topic_pattern(q, i), Table::new()))
                    .collect(),
            },
            Some(ExchangeType::Headers) => {
                let mut arguments = Table::new();
                arguments.insert("x-match", Value::string("all"));
                arguments.insert("queue", Value::string(name.as_str()));
                vec![(String::new(), arguments)]
            }
        }
    }

    /// Declares the exchange and queues (purging leftovers) and binds them. Bindings are
    /// pipelined: many queue.bind per write, then their bind-oks.
    pub async fn declare(&self, conn: &mut Conn, config: &Config) -> Result<(), AmqpError> {
        if self.declare_exchange {
            let kind = self.exchange_type.unwrap_or(ExchangeType::Direct);
            let method = Method::ExchangeDeclare {
                exchange: self.exchange.clone(),
                exchange_type: kind.as_str().into(),
                // amq.* exchanges exist already and are durable: only check them.
                passive: self.exchange.starts_with("amq."),
                durable: false,
                auto_delete: false,
                internal: false,
                no_wait: false,
                arguments: Table::new(),
            };
            match conn.call(CH, &method).await? {
                Method::ExchangeDeclareOk => {}
                other => return Err(unexpected("exchange.declare-ok", &other)),
            }
        }
        for queue in &self.queues {
            let declare = Method::QueueDeclare {
                queue: queue.clone(),
                passive: false,
                durable: config.durable,
                exclusive: false,
                auto_delete: false,
                no_wait: false,
                arguments: queue_arguments(&config.queue_args),
            };
            match conn.call(CH, &declare).await? {
                Method::QueueDeclareOk { .. } => {}
                other => return Err(unexpected("queue.declare-ok", &other)),
            }
            if config.keep {
                continue;
            }
            let purge = Method::QueuePurge {
                queue: queue.clone(),
                no_wait: false,
            };
            match conn.call(CH, &purge).await? {
                Method::QueuePurgeOk { .. } => {}
                other => return Err(unexpected("queue.purge-ok", &other)),
            }
        }
        if self.exchange.is_empty() {
            return Ok(());
        }
        let mut pending = Vec::new();
        for (q, queue) in self.queues.iter().enumerate() {
            for (key, arguments) in self.bindings(config, q) {
                pending.push(Method::QueueBind {
                    queue: queue.clone(),
                    exchange: self.exchange.clone(),
                    routing_key: key,
                    no_wait: false,
                    arguments,
                });
            }
        }
        for chunk in pending.chunks(256) {
            for bind in chunk {
                conn.send(CH, bind)?;
            }
            conn.flush().await?;
            for _ in chunk {
                match conn.recv_method(CH, "queue.bind-ok").await? {
                    Method::QueueBindOk => {}
                    other => return Err(unexpected("queue.bind-ok", &other)),
                }
            }
        }
        Ok(())
    }

    /// Deletes the queues (and the auto-named exchange).
    pub async fn delete(&self, conn: &mut Conn) -> Result<(), AmqpError> {
        for queue in &self.queues {
            let delete = Method::QueueDelete {
                queue: queue.clone(),
                if_unused: false,
                if_empty: false,
                no_wait: false,
            };
            match conn.call(CH, &delete).await? {
                Method::QueueDeleteOk { .. } => {}
                other => return Err(unexpected("queue.delete-ok", &other)),
            }
        }
        if self.delete_exchange {
            let delete = Method::ExchangeDelete {
                exchange: self.exchange.clone(),
                if_unused: false,
                no_wait: false,
            };
            match conn.call(CH, &delete).await? {
                Method::ExchangeDeleteOk => {}
                other => return Err(unexpected("exchange.delete-ok", &other)),
            }
        }
        Ok(())
    }

    /// The publish templates of producer `p`, used in turn: basic.publish + content header
    /// for a body of `config.size` octets. Producer p targets queue p % queues.
    pub fn templates(&self, config: &Config, p: usize, body_size: usize) -> Vec<Vec<u8>> {
        let q = p % self.queues.len();
        let queue = &self.queues[q];
        let mut properties = Properties::default();
        if config.persistent {
            properties.delivery_mode = Some(2);
        }
        let keys: Vec<String> = match self.exchange_type {
            None | Some(ExchangeType::Direct) => {
                vec![config.routing_key.clone().unwrap_or(queue.clone())]
            }
            Some(ExchangeType::Fanout) => vec![config.routing_key.clone().unwrap_or_default()],
            Some(ExchangeType::Topic) => match &config.routing_key {
                Some(key) => vec![key.clone()],
                None => (0..config.topic_bindings)
                    .map(|i| topic_routing_key(q, i))
                    .collect(),
            },
            Some(ExchangeType::Headers) => {
                let mut headers = Table::new();
                headers.insert("queue", Value::string(queue.as_str()));
                properties.headers = Some(headers);
                vec![config.routing_key.clone().unwrap_or_default()]
            }
        };
        let levels: Vec<Option<u8>> = if config.priorities == 0 {
            vec![None]
        } else {
            (0..config.priorities).map(Some).collect()
        };
        let expirations: Vec<Option<String>> = if config.expirations.is_empty() {
            vec![None]
        } else {
            config
                .expirations
                .iter()
                .map(|ms| Some(ms.to_string()))
                .collect()
        };
        // One template per (priority, expiration) pair, cycled through by the producer.
        let mut encoded: Vec<BytesMut> = Vec::new();
        for priority in &levels {
            for expiration in &expirations {
                let mut raw = BytesMut::new();
                let properties = Properties {
                    priority: *priority,
                    expiration: expiration.clone(),
                    ..properties.clone()
                };
                encode_properties(&properties, &mut raw).expect("small properties encode");
                encoded.push(raw);
            }
        }
        keys.into_iter()
            .flat_map(|routing_key| encoded.iter().map(move |raw| (routing_key.clone(), raw)))
            .map(|(routing_key, raw_properties)| {
                let mut out = BytesMut::new();
                let publish = Method::BasicPublish {
                    exchange: self.exchange.clone(),
                    routing_key,
                    mandatory: false,
                    immediate: false,
                };
                write_method_frame(&mut out, CH, &publish).expect("short strings encode");
                write_content_header(&mut out, CH, CLASS_BASIC, body_size as u64, raw_properties);
                out.to_vec()
            })
            .collect()
    }
}

/// Binding pattern `i` of queue `q` for topic exchanges: alternately `*` and `#` forms.
pub fn topic_pattern(q: usize, i: usize) -> String {
    if i & 1 == 0 {
        format!("perf.q{q}.b{i}.*")
    } else {
        format!("perf.q{q}.b{i}.#")
    }
}

/// A routing key that matches [`topic_pattern`]`(q, i)` (and no other pattern).
pub fn topic_routing_key(q: usize, i: usize) -> String {
    format!("perf.q{q}.b{i}.x")
}

/// Queue arguments from `--queue-arg KEY=VALUE`: integers as longs, `true`/`false` as
/// booleans, anything else as a string.
pub fn queue_arguments(args: &[(String, String)]) -> Table {
    let mut table = Table::new();
    for (key, value) in args {
        let value = if let Ok(n) = value.parse::<i64>() {
            Value::I64(n)
        } else if let Ok(b) = value.parse::<bool>() {
            Value::Bool(b)
        } else {
            Value::string(value.as_str())
        };
        table.insert(key.as_str(), value);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::parse_args;

    #[test]
    fn queue_arguments_are_typed() {
        let args = queue_arguments(&[
            ("x-message-ttl".into(), "60000".into()),
            ("x-single-active-consumer".into(), "true".into()),
            ("x-dead-letter-exchange".into(), "dlx".into()),
        ]);
        assert_eq!(args.get("x-message-ttl"), Some(&Value::I64(60000)));
        assert_eq!(
            args.get("x-single-active-consumer"),
            Some(&Value::Bool(true))
        );
        assert_eq!(
            args.get("x-dead-letter-exchange").and_then(Value::as_str),
            Some("dlx")
        );
    }

    #[test]
    fn names_and_keys() {
        let config = parse_args(["--queues", "3", "-t", "fanout"]).unwrap();
        let t = Topology::new(&config);
        assert_eq!(t.queues, ["perf-test-1", "perf-test-2", "perf-test-3"]);
        assert_eq!(t.exchange, "warren-perf-fanout");
        assert_eq!(t.queue_for(4), "perf-test-2");
        let config = parse_args(["-e", "ex"]).unwrap();
        let t = Topology::new(&config);
        assert_eq!(t.exchange_type, Some(ExchangeType::Direct));
        assert_eq!(t.queues, ["perf-test"]);
        let config = parse_args(["-t", "topic", "--topic-bindings", "4"]).unwrap();
        let t = Topology::new(&config);
        assert_eq!(t.bindings(&config, 0).len(), 4);
        assert_eq!(t.templates(&config, 0, 16).len(), 4);
        assert_eq!(topic_pattern(0, 1), "perf.q0.b1.#");
        assert_eq!(topic_routing_key(0, 1), "perf.q0.b1.x");
    }
}
