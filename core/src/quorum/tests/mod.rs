//! One test per rule of the quorum queue state machine, driven by commands and times: the
//! harness here, delivery rules in `delivery.rs`, time, limits and state in `time_and_limits.rs`.

use std::sync::Arc;

use bytes::Bytes;

use super::codec::{decode_command, decode_snapshot, encode_command, encode_snapshot};
use super::*;
use crate::message::{Message, Properties};
use crate::queue::{DeathReason, Overflow};
use crate::value::{Table, Value};

pub(super) fn message(body: &str) -> Arc<Message> {
    Arc::new(Message {
        exchange: Arc::from("orders"),
        routing_key: Arc::from("eu"),
        properties: Properties::default(),
        encoded_properties: None,
        body: Bytes::copy_from_slice(body.as_bytes()),
    })
}

pub(super) fn with_properties(body: &str, change: impl FnOnce(&mut Properties)) -> Arc<Message> {
    let mut m = Message::clone(&message(body));
    change(&mut m.properties);
    Arc::new(m)
}

pub(super) fn delayed(body: &str, at: u64) -> Arc<Message> {
    with_properties(body, |p| {
        let mut headers = Table::new();
        headers.insert(DELIVERY_TIME_HEADER, Value::I64(at as i64));
        p.headers = Some(headers);
    })
}

pub(super) fn body(delivered: &Delivered) -> String {
    String::from_utf8(delivered.message.body.to_vec()).unwrap()
}

/// A queue under test, remembering every effect so far.
pub(super) struct Harness {
    pub(super) queue: QuorumQueue,
    pub(super) now: u64,
    pub(super) effects: Vec<Effect>,
}

impl Harness {
    pub(super) fn new(config: QuorumConfig) -> Harness {
        Harness {
            queue: QuorumQueue::new(config),
            now: 1_000_000,
            effects: Vec::new(),
        }
    }

    pub(super) fn plain() -> Harness {
        Harness::new(QuorumConfig::new("q"))
    }

    pub(super) fn apply(&mut self, command: Command) -> Reply {
        // Every command goes through the log encoding, as it would in Raft.
        let mut bytes = Vec::new();
        encode_command(&mut bytes, &command);
        let command = decode_command(&bytes).expect("command round-trips");
        let applied = self.queue.apply(self.now, command);
        self.effects.extend(applied.effects);
        applied.reply
    }

    pub(super) fn publish(&mut self, message: Arc<Message>) -> Reply {
        self.apply(Command::Enqueue {
            publish: None,
            message,
        })
    }

    pub(super) fn publish_text(&mut self, text: &str) -> u64 {
        match self.publish(message(text)) {
            Reply::Enqueued { id } => id,
            other => panic!("publish of {text}: {other:?}"),
        }
    }

    pub(super) fn attach(&mut self, owner: u64, prefetch: u32, priority: i32) -> ConsumerKey {
        match self.apply(Command::Attach {
            owner,
            tag: format!("ctag-{owner}"),
            mode: CreditMode::Prefetch(prefetch),
            priority,
            auto_ack: false,
            timeout: None,
        }) {
            Reply::Attached { consumer, .. } => consumer,
            other => panic!("attach: {other:?}"),
        }
    }

    pub(super) fn settle(&mut self, consumer: ConsumerKey, ids: &[u64], outcome: Outcome) {
        let reply = self.apply(Command::Settle {
            consumer,
            ids: ids.to_vec(),
            outcome,
        });
        assert!(matches!(reply, Reply::Ok), "{reply:?}");
    }

    pub(super) fn tick(&mut self, to: u64) {
        self.now = to;
        self.apply(Command::Tick);
    }

    /// Deliveries made since the last call, as (consumer, delivered).
    pub(super) fn deliveries(&mut self) -> Vec<(ConsumerKey, Delivered)> {
        let mut out = Vec::new();
        self.effects.retain(|effect| match effect {
            Effect::Deliver {
                consumer,
                delivered,
                ..
            } => {
                out.push((*consumer, delivered.clone()));
                false
            }
            _ => true,
        });
        out
    }

    pub(super) fn bodies(&mut self) -> Vec<String> {
        self.deliveries().iter().map(|(_, d)| body(d)).collect()
    }

    /// Dead letters since the last call, as (body, reason, at_least_once).
    pub(super) fn dead_letters(&mut self) -> Vec<(String, DeathReason, bool, u64)> {
        let mut out = Vec::new();
        self.effects.retain(|effect| match effect {
            Effect::DeadLetter {
                id,
                message,
                reason,
                at_least_once,
                ..
            } => {
                out.push((
                    String::from_utf8(message.body.to_vec()).unwrap(),
                    *reason,
                    *at_least_once,
                    *id,
                ));
                false
            }
            _ => true,
        });
        out
    }

    pub(super) fn get(&mut self, owner: u64) -> Option<(Option<ConsumerKey>, Delivered)> {
        match self.apply(Command::Dequeue {
            owner,
            auto_ack: false,
        }) {
            Reply::Dequeued {
                consumer,
                delivered,
                ..
            } => Some((consumer, delivered)),
            Reply::Empty => None,
            other => panic!("dequeue: {other:?}"),
        }
    }

    /// The state after a snapshot round trip equals the live one.
    pub(super) fn assert_snapshot_round_trips(&self) {
        let bytes = encode_snapshot(&self.queue);
        let restored = decode_snapshot(&bytes).expect("snapshot decodes");
        assert_eq!(encode_snapshot(&restored), bytes);
        assert_eq!(restored.stats(), self.queue.stats());
    }
}

pub(super) fn config(change: impl FnOnce(&mut QuorumConfig)) -> QuorumConfig {
    let mut c = QuorumConfig::new("q");
    change(&mut c);
    c
}

pub(super) fn with_dlx(change: impl FnOnce(&mut QuorumConfig)) -> QuorumConfig {
    config(|c| {
        c.dead_letter_exchange = Some("dlx".into());
        change(c);
    })
}

mod delivery;
mod time_and_limits;
