//! The forwarding protocol between a node that has a classic queue's stand-in and the
//! queue's home node, as plain data with a little-endian encoding (messages in the message
//! store's record format). Sans-IO: the server carries the bytes over the cluster's bulk
//! link as one transport method.

use std::sync::Arc;

use crate::consumer::ConsumerSpec;
use crate::error::ErrorKind;
use crate::message::Message;
use crate::queue::{QueueStats, Settlement};
use crate::quorum::codec::{CodecError, Reader, Writer};

/// A queue, by vhost and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueRef {
    /// The vhost.
    pub vhost: String,
    /// The queue's name.
    pub queue: String,
}

/// A consumer attached at the home node for a consumer on another node.
#[derive(Debug, Clone)]
pub struct RemoteConsumerSpec {
    /// The consumer tag.
    pub tag: String,
    /// Deliveries must be settled (false: auto-ack).
    pub needs_settlement: bool,
    /// An exclusive consumer.
    pub exclusive: bool,
    /// Consumer priority.
    pub priority: i32,
    /// Consumer arguments as the client sent them.
    pub arguments: crate::value::Table,
}

impl RemoteConsumerSpec {
    /// The spec a listener gave, as it travels.
    pub fn from_spec(spec: &ConsumerSpec) -> RemoteConsumerSpec {
        RemoteConsumerSpec {
            tag: spec.tag.to_string(),
            needs_settlement: spec.needs_settlement,
            exclusive: spec.exclusive,
            priority: spec.priority,
            arguments: spec.arguments.clone(),
        }
    }
}

/// One delivery sent from the home node to the consumer's node.
#[derive(Debug, Clone)]
pub struct RemoteDelivery {
    /// The home queue's id for it, settled through [`Request::Settle`].
    pub id: u64,
    /// Delivered before.
    pub redelivered: bool,
    /// Failed deliveries so far.
    pub delivery_count: u32,
    /// The home queue waits for a settlement.
    pub needs_settlement: bool,
    /// The message.
    pub message: Arc<Message>,
}

/// A request between nodes.
#[derive(Debug, Clone)]
pub enum Request {
    /// Enqueue messages at the home node (in order); answered once they are safe there
    /// (on disk for persistent messages in durable queues).
    Publish {
        /// Each message with the queue it goes to.
        messages: Vec<(Arc<QueueRef>, Arc<Message>)>,
    },
    /// Attach a consumer at the home node on behalf of consumer `proxy` of the caller.
    Consume {
        /// The queue.
        queue: QueueRef,
        /// The caller's id for the consumer.
        proxy: u64,
        /// How many deliveries may be in flight to the caller before it gives credit back.
        window: u32,
        /// The consumer.
        spec: RemoteConsumerSpec,
    },
    /// Detach consumer `proxy`; its unsettled deliveries go back to the queue.
    Cancel {
        /// The caller's id for the consumer.
        proxy: u64,
    },
    /// More room for consumer `proxy`'s deliveries.
    Credit {
        /// The caller's id for the consumer.
        proxy: u64,
        /// How many more deliveries may be sent.
        credit: u32,
    },
    /// Settle deliveries of a queue.
    Settle {
        /// The queue.
        queue: QueueRef,
        /// Its ids for the deliveries.
        ids: Vec<u64>,
        /// How.
        settlement: Settlement,
    },
    /// `basic.get`.
    Get {
        /// The queue.
        queue: QueueRef,
        /// False takes it acknowledged.
        needs_settlement: bool,
    },
    /// Drop every ready message.
    Purge {
        /// The queue.
        queue: QueueRef,
    },
    /// Peek at ready messages.
    Browse {
        /// The queue.
        queue: QueueRef,
        /// At most this many.
        limit: u32,
    },
    /// The queue's counters.
    Info {
        /// The queue.
        queue: QueueRef,
    },
    /// The counters of many queues of one vhost at once (every stand-in's, for the rate
    /// sampler and the node's totals), answered with [`Reply::StatsMany`] in this order.
    InfoMany {
        /// The vhost.
        vhost: String,
        /// The queues' names.
        queues: Vec<String>,
    },
    /// From the home node: deliveries for consumer `proxy` of the receiving node.
    Deliver {
        /// The receiving node's id for the consumer.
        proxy: u64,
        /// The deliveries, in order.
        deliveries: Vec<RemoteDelivery>,
    },
    /// From the home node: consumer `proxy` was cancelled by the server (queue deleted).
    Cancelled {
        /// The receiving node's id for the consumer.
        proxy: u64,
    },
    /// An MQTT client connected to the caller with `client_id` in `vhost`: close this
    /// node's connection with that client identifier, if any, and answer once it ended.
    TakeOver {
        /// The vhost.
        vhost: String,
        /// The MQTT client identifier.
        client_id: String,
        /// Whether the closed connection publishes its will (as RabbitMQ decides it from
        /// the new connection's CONNECT).
        send_will: bool,
    },
}

/// An answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Done.
    Ok,
    /// Refused, with the error to hand to the client.
    Error(ErrorKind, String),
    /// For [`Request::Publish`]: whether each message was taken (false: reject-publish).
    Published(Vec<bool>),
    /// For [`Request::Get`]: the delivery and the messages still ready.
    Got(Option<(RemoteDelivery, u64)>),
    /// A count (purge).
    Count(u64),
    /// For [`Request::Browse`].
    Messages(Vec<Arc<Message>>),
    /// For [`Request::Info`].
    Stats(QueueStats),
    /// For [`Request::InfoMany`]: each queue's counters, `None` for a queue the home node
    /// does not have.
    StatsMany(Vec<Option<QueueStats>>),
    /// For [`Request::TakeOver`]: the persistent session the node held for the client
    /// identifier, encoded by the MQTT listener (opaque here), now the caller's.
    Session(Option<Vec<u8>>),
}

fn settlement_code(settlement: Settlement) -> u8 {
    match settlement {
        Settlement::Ack => 0,
        Settlement::Requeue => 1,
        Settlement::Release => 2,
        Settlement::Reject => 3,
        Settlement::Modify {
            delivery_failed,
            undeliverable_here,
        } => 4 | (u8::from(delivery_failed) << 3) | (u8::from(undeliverable_here) << 4),
    }
}

fn settlement_of(code: u8) -> Result<Settlement, CodecError> {
    Ok(match code & 7 {
        0 => Settlement::Ack,
        1 => Settlement::Requeue,
        2 => Settlement::Release,
        3 => Settlement::Reject,
        4 => Settlement::Modify {
            delivery_failed: code & 8 != 0,
            undeliverable_here: code & 16 != 0,
        },
        _ => return Err(CodecError(format!("unknown settlement {code}"))),
    })
}

const KINDS: &[ErrorKind] = &[
    ErrorKind::NotFound,
    ErrorKind::AccessRefused,
    ErrorKind::PreconditionFailed,
    ErrorKind::ResourceLocked,
    ErrorKind::InternalError,
    ErrorKind::NotAllowed,
    ErrorKind::ResourceError,
    ErrorKind::NotImplemented,
    ErrorKind::CommandInvalid,
    ErrorKind::Unavailable,
];

fn kind_code(kind: ErrorKind) -> u8 {
    KINDS
        .iter()
        .position(|k| *k == kind)
        .map_or(4, |position| position as u8)
}

impl Writer<'_> {
    fn queue_ref(&mut self, queue: &QueueRef) {
        self.str(&queue.vhost);
        self.str(&queue.queue);
    }
    fn delivery(&mut self, delivery: &RemoteDelivery) {
        self.u64(delivery.id);
        self.bool(delivery.redelivered);
        self.u32(delivery.delivery_count);
        self.bool(delivery.needs_settlement);
        self.message(&delivery.message);
    }
}

impl Reader<'_> {
    fn queue_ref(&mut self) -> Result<QueueRef, CodecError> {
        Ok(QueueRef {
            vhost: self.str()?,
            queue: self.str()?,
        })
    }
    fn delivery(&mut self) -> Result<RemoteDelivery, CodecError> {
        Ok(RemoteDelivery {
            id: self.u64()?,
            redelivered: self.bool()?,
            delivery_count: self.u32()?,
            needs_settlement: self.bool()?,
            message: Arc::new(self.message()?),
        })
    }
}

/// Encodes a request.
pub fn encode_request(request: &Request) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    let mut w = Writer(&mut out);
    match request {
        Request::Publish { messages } => {
            w.u8(1);
            w.u32(messages.len() as u32);
            for (queue, message) in messages {
                w.queue_ref(queue);
                w.message(message);
            }
        }
        Request::Consume {
            queue,
            proxy,
            window,
            spec,
        } => {
            w.u8(2);
            w.queue_ref(queue);
            w.u64(*proxy);
            w.u32(*window);
            w.str(&spec.tag);
            w.bool(spec.needs_settlement);
            w.bool(spec.exclusive);
            w.u32(spec.priority as u32);
            w.table(&spec.arguments);
        }
        Request::Cancel { proxy } => {
            w.u8(3);
            w.u64(*proxy);
        }
        Request::Credit { proxy, credit } => {
            w.u8(4);
            w.u64(*proxy);
            w.u32(*credit);
        }
        Request::Settle {
            queue,
            ids,
            settlement,
        } => {
            w.u8(5);
            w.queue_ref(queue);
            w.ids(ids);
            w.u8(settlement_code(*settlement));
        }
        Request::Get {
            queue,
            needs_settlement,
        } => {
            w.u8(6);
            w.queue_ref(queue);
            w.bool(*needs_settlement);
        }
        Request::Purge { queue } => {
            w.u8(7);
            w.queue_ref(queue);
        }
        Request::Browse { queue, limit } => {
            w.u8(8);
            w.queue_ref(queue);
            w.u32(*limit);
        }
        Request::Info { queue } => {
            w.u8(9);
            w.queue_ref(queue);
        }
        Request::Deliver { proxy, deliveries } => {
            w.u8(10);
            w.u64(*proxy);
            w.u32(deliveries.len() as u32);
            for delivery in deliveries {
                w.delivery(delivery);
            }
        }
        Request::Cancelled { proxy } => {
            w.u8(11);
            w.u64(*proxy);
        }
        Request::TakeOver {
            vhost,
            client_id,
            send_will,
        } => {
            w.u8(12);
            w.str(vhost);
            w.str(client_id);
            w.bool(*send_will);
        }
        Request::InfoMany { vhost, queues } => {
            w.u8(13);
            w.str(vhost);
            w.u32(queues.len() as u32);
            for queue in queues {
                w.str(queue);
            }
        }
    }
    out
}

/// Decodes a request; damaged or truncated input is an error, never a panic.
pub fn decode_request(bytes: &[u8]) -> Result<Request, CodecError> {
    let mut r = Reader(bytes);
    let request = match r.u8()? {
        1 => {
            let count = r.count(12)?;
            let mut messages: Vec<(Arc<QueueRef>, Arc<Message>)> = Vec::with_capacity(count);
            for _ in 0..count {
                let queue = r.queue_ref()?;
                // Runs of messages to one queue share its name.
                let queue = match messages.last() {
                    Some((last, _)) if **last == queue => Arc::clone(last),
                    _ => Arc::new(queue),
                };
                messages.push((queue, Arc::new(r.message()?)));
            }
            Request::Publish { messages }
        }
        2 => Request::Consume {
            queue: r.queue_ref()?,
            proxy: r.u64()?,
            window: r.u32()?,
            spec: RemoteConsumerSpec {
                tag: r.str()?,
                needs_settlement: r.bool()?,
                exclusive: r.bool()?,
                priority: r.u32()? as i32,
                arguments: r.table()?,
            },
        },
        3 => Request::Cancel { proxy: r.u64()? },
        4 => Request::Credit {
            proxy: r.u64()?,
            credit: r.u32()?,
        },
        5 => Request::Settle {
            queue: r.queue_ref()?,
            ids: r.ids()?,
            settlement: settlement_of(r.u8()?)?,
        },
        6 => Request::Get {
            queue: r.queue_ref()?,
            needs_settlement: r.bool()?,
        },
        7 => Request::Purge {
            queue: r.queue_ref()?,
        },
        8 => Request::Browse {
            queue: r.queue_ref()?,
            limit: r.u32()?,
        },
        9 => Request::Info {
            queue: r.queue_ref()?,
        },
        10 => {
            let proxy = r.u64()?;
            let count = r.count(18)?;
            let mut deliveries = Vec::with_capacity(count);
            for _ in 0..count {
                deliveries.push(r.delivery()?);
            }
            Request::Deliver { proxy, deliveries }
        }
        11 => Request::Cancelled { proxy: r.u64()? },
        12 => Request::TakeOver {
            vhost: r.str()?,
            client_id: r.str()?,
            send_will: r.bool()?,
        },
        13 => {
            let vhost = r.str()?;
            // Each name takes at least its length prefix.
            let count = r.count(4)?;
            let queues = (0..count).map(|_| r.str()).collect::<Result<_, _>>()?;
            Request::InfoMany { vhost, queues }
        }
        other => return Err(CodecError(format!("unknown forwarding request {other}"))),
    };
    r.end()?;
    Ok(request)
}

const STATS_FIELDS: usize = 16;

fn stats_fields(stats: &QueueStats) -> [u64; STATS_FIELDS] {
    [
        stats.ready,
        stats.unacknowledged,
        stats.consumers,
        stats.published,
        stats.delivered,
        stats.acknowledged,
        stats.dropped,
        stats.expired,
        stats.dead_lettered_rejected,
        stats.dead_lettered_expired,
        stats.dead_lettered_maxlen,
        stats.dropped_maxlen,
        stats.rejected_publishes,
        stats.paged_out,
        stats.dead_lettered_delivery_limit,
        stats.dropped_delivery_limit,
    ]
}

fn stats_from(fields: [u64; STATS_FIELDS]) -> QueueStats {
    let [ready, unacknowledged, consumers, published, delivered, acknowledged, dropped, expired, dead_lettered_rejected, dead_lettered_expired, dead_lettered_maxlen, dropped_maxlen, rejected_publishes, paged_out, dead_lettered_delivery_limit, dropped_delivery_limit] =
        fields;
    QueueStats {
        ready,
        unacknowledged,
        consumers,
        published,
        delivered,
        acknowledged,
        dropped,
        expired,
        dead_lettered_rejected,
        dead_lettered_expired,
        dead_lettered_maxlen,
        dropped_maxlen,
        rejected_publishes,
        paged_out,
        dead_lettered_delivery_limit,
        dropped_delivery_limit,
    }
}

/// Encodes a reply.
pub fn encode_reply(reply: &Reply) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    let mut w = Writer(&mut out);
    match reply {
        Reply::Ok => w.u8(1),
        Reply::Error(kind, text) => {
            w.u8(2);
            w.u8(kind_code(*kind));
            w.str(text);
        }
        Reply::Published(taken) => {
            w.u8(3);
            w.u32(taken.len() as u32);
            for taken in taken {
                w.bool(*taken);
            }
        }
        Reply::Got(got) => {
            w.u8(4);
            match got {
                Some((delivery, remaining)) => {
                    w.bool(true);
                    w.delivery(delivery);
                    w.u64(*remaining);
                }
                None => w.bool(false),
            }
        }
        Reply::Count(count) => {
            w.u8(5);
            w.u64(*count);
        }
        Reply::Messages(messages) => {
            w.u8(6);
            w.u32(messages.len() as u32);
            for message in messages {
                w.message(message);
            }
        }
        Reply::Stats(stats) => {
            w.u8(7);
            for field in stats_fields(stats) {
                w.u64(field);
            }
        }
        Reply::StatsMany(all) => {
            w.u8(9);
            w.u32(all.len() as u32);
            for stats in all {
                match stats {
                    Some(stats) => {
                        w.bool(true);
                        for field in stats_fields(stats) {
                            w.u64(field);
                        }
                    }
                    None => w.bool(false),
                }
            }
        }
        Reply::Session(session) => {
            w.u8(8);
            match session {
                Some(session) => {
                    w.bool(true);
                    w.bytes(session);
                }
                None => w.bool(false),
            }
        }
    }
    out
}

/// Decodes a reply.
pub fn decode_reply(bytes: &[u8]) -> Result<Reply, CodecError> {
    let mut r = Reader(bytes);
    let reply = match r.u8()? {
        1 => Reply::Ok,
        2 => {
            let code = r.u8()? as usize;
            let kind = *KINDS
                .get(code)
                .ok_or_else(|| CodecError(format!("unknown error kind {code}")))?;
            Reply::Error(kind, r.str()?)
        }
        3 => {
            let count = r.count(1)?;
            Reply::Published((0..count).map(|_| r.bool()).collect::<Result<_, _>>()?)
        }
        4 => Reply::Got(match r.bool()? {
            true => {
                let delivery = r.delivery()?;
                Some((delivery, r.u64()?))
            }
            false => None,
        }),
        5 => Reply::Count(r.u64()?),
        6 => {
            let count = r.count(4)?;
            let mut messages = Vec::with_capacity(count);
            for _ in 0..count {
                messages.push(Arc::new(r.message()?));
            }
            Reply::Messages(messages)
        }
        7 => {
            let mut fields = [0u64; STATS_FIELDS];
            for field in &mut fields {
                *field = r.u64()?;
            }
            Reply::Stats(stats_from(fields))
        }
        8 => Reply::Session(match r.bool()? {
            true => Some(r.bytes()?.to_vec()),
            false => None,
        }),
        9 => {
            let count = r.count(1)?;
            let mut all = Vec::with_capacity(count);
            for _ in 0..count {
                all.push(match r.bool()? {
                    true => {
                        let mut fields = [0u64; STATS_FIELDS];
                        for field in &mut fields {
                            *field = r.u64()?;
                        }
                        Some(stats_from(fields))
                    }
                    false => None,
                });
            }
            Reply::StatsMany(all)
        }
        other => return Err(CodecError(format!("unknown forwarding reply {other}"))),
    };
    r.end()?;
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{Table, Value};
    use proptest::prelude::*;

    fn message(body: &[u8]) -> Arc<Message> {
        let mut headers = Table::new();
        headers.insert("k", Value::string("v"));
        Arc::new(Message {
            exchange: Arc::from("x"),
            routing_key: Arc::from("rk"),
            properties: crate::message::Properties {
                headers: Some(headers),
                delivery_mode: Some(2),
                ..Default::default()
            },
            encoded_properties: None,
            body: bytes::Bytes::copy_from_slice(body),
        })
    }

    fn queue() -> QueueRef {
        QueueRef {
            vhost: "/".into(),
            queue: "q".into(),
        }
    }

    #[test]
    fn requests_round_trip() {
        let requests = vec![
            Request::Publish {
                messages: vec![
                    (Arc::new(queue()), message(b"a")),
                    (Arc::new(queue()), message(b"")),
                ],
            },
            Request::Consume {
                queue: queue(),
                proxy: 7,
                window: 200,
                spec: RemoteConsumerSpec {
                    tag: "ctag".into(),
                    needs_settlement: true,
                    exclusive: false,
                    priority: -3,
                    arguments: Table::new(),
                },
            },
            Request::Cancel { proxy: 9 },
            Request::Credit {
                proxy: 9,
                credit: 3,
            },
            Request::Settle {
                queue: queue(),
                ids: vec![1, 2, 3],
                settlement: Settlement::Modify {
                    delivery_failed: true,
                    undeliverable_here: false,
                },
            },
            Request::Get {
                queue: queue(),
                needs_settlement: true,
            },
            Request::Purge { queue: queue() },
            Request::Browse {
                queue: queue(),
                limit: 5,
            },
            Request::Info { queue: queue() },
            Request::InfoMany {
                vhost: "/".into(),
                queues: vec!["a".into(), "".into(), "c".into()],
            },
            Request::InfoMany {
                vhost: "v".into(),
                queues: Vec::new(),
            },
            Request::Deliver {
                proxy: 1,
                deliveries: vec![RemoteDelivery {
                    id: 4,
                    redelivered: true,
                    delivery_count: 2,
                    needs_settlement: true,
                    message: message(b"body"),
                }],
            },
            Request::Cancelled { proxy: 2 },
            Request::TakeOver {
                vhost: "/".into(),
                client_id: "sensor-1".into(),
                send_will: false,
            },
        ];
        for request in requests {
            let bytes = encode_request(&request);
            let decoded = decode_request(&bytes).unwrap();
            assert_eq!(encode_request(&decoded), bytes, "{request:?}");
        }
    }

    #[test]
    fn replies_round_trip() {
        let stats = QueueStats {
            ready: 3,
            consumers: 1,
            dropped_delivery_limit: 99,
            ..QueueStats::default()
        };
        let replies = vec![
            Reply::Ok,
            Reply::Error(ErrorKind::ResourceLocked, "locked".into()),
            Reply::Published(vec![true, false]),
            Reply::Got(None),
            Reply::Count(12),
            Reply::Messages(vec![message(b"m")]),
            Reply::Stats(stats),
            Reply::StatsMany(vec![Some(stats), None, Some(QueueStats::default())]),
            Reply::StatsMany(Vec::new()),
            Reply::Session(None),
            Reply::Session(Some(b"session".to_vec())),
        ];
        for reply in replies {
            let bytes = encode_reply(&reply);
            let decoded = decode_reply(&bytes).unwrap();
            assert_eq!(encode_reply(&decoded), bytes, "{reply:?}");
        }
        match decode_reply(&encode_reply(&Reply::Stats(stats))).unwrap() {
            Reply::Stats(back) => {
                assert_eq!(
                    (back.ready, back.consumers, back.dropped_delivery_limit),
                    (3, 1, 99)
                )
            }
            other => panic!("{other:?}"),
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_request(&bytes);
            let _ = decode_reply(&bytes);
        }

        #[test]
        fn every_cut_of_a_request_is_refused(cut in 0usize..200) {
            let bytes = encode_request(&Request::Deliver {
                proxy: 1,
                deliveries: vec![RemoteDelivery {
                    id: 4,
                    redelivered: false,
                    delivery_count: 0,
                    needs_settlement: true,
                    message: message(b"0123456789"),
                }],
            });
            let cut = cut.min(bytes.len() - 1);
            prop_assert!(decode_request(&bytes[..cut]).is_err());
        }
    }
}
