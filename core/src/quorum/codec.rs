//! Binary encodings of quorum-queue commands (Raft log entries) and of the whole state
//! (snapshots). Little-endian; messages in the message store's record format (one framed,
//! checksummed record each, see `crate::store::record`). Decoding never panics: bytes that do
//! not parse are a [`CodecError`].
//!
//! A snapshot holds the settings, counters, consumers, deduplication table and every message
//! still in the queue with its place; the indexes (ready order, TTLs, the delayed-delivery
//! timer index, checkout times, byte counts) are rebuilt from them on decode, so a snapshot
//! cannot disagree with itself.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;

use crate::message::{Message, Properties};
use crate::queue::{DeathReason, Overflow};
use crate::store::record::{encode_publish, read_record, Read, Record};
use crate::value::Table;

use super::machine::{Consumer, Counters, Entry, Place, QuorumQueue};
use super::{
    Command, ConsumerKey, CreditMode, DeadLetterStrategy, Delivered, Outcome, PublishId,
    QuorumConfig, Reply, PRIORITY_LEVELS,
};

/// Bytes that are not a command or snapshot this version wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodecError(pub String);

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "quorum queue data does not decode: {}", self.0)
    }
}

impl std::error::Error for CodecError {}

const SNAPSHOT_MAGIC: &[u8; 4] = b"WQQS";
const SNAPSHOT_VERSION: u8 = 1;

/// Appends `command`'s encoding to `out`.
pub fn encode_command(out: &mut Vec<u8>, command: &Command) {
    let mut w = Writer(out);
    match command {
        Command::Enqueue { publish, message } => {
            w.u8(1);
            match publish {
                Some(p) => {
                    w.u8(1);
                    w.u64(p.publisher);
                    w.u64(p.sequence);
                }
                None => w.u8(0),
            }
            w.message(message);
        }
        Command::PublisherDown { publisher } => {
            w.u8(2);
            w.u64(*publisher);
        }
        Command::Attach {
            owner,
            tag,
            mode,
            priority,
            auto_ack,
            timeout,
        } => {
            w.u8(3);
            w.u64(*owner);
            w.str(tag);
            w.mode(*mode);
            w.u32(*priority as u32);
            w.bool(*auto_ack);
            w.opt(*timeout);
        }
        Command::Credit {
            consumer,
            credit,
            drain,
        } => {
            w.u8(4);
            w.u64(consumer.0);
            w.u32(*credit);
            w.bool(*drain);
        }
        Command::Cancel { consumer } => {
            w.u8(5);
            w.u64(consumer.0);
        }
        Command::Settle {
            consumer,
            ids,
            outcome,
        } => {
            w.u8(6);
            w.u64(consumer.0);
            w.ids(ids);
            match outcome {
                Outcome::Ack => w.u8(0),
                Outcome::Requeue => w.u8(1),
                Outcome::Release => w.u8(2),
                Outcome::Reject => w.u8(3),
                Outcome::Modify {
                    delivery_failed,
                    undeliverable_here,
                    annotations,
                } => {
                    w.u8(4);
                    w.bool(*delivery_failed);
                    w.bool(*undeliverable_here);
                    w.table(annotations);
                }
            }
        }
        Command::Down { owner } => {
            w.u8(7);
            w.u64(*owner);
        }
        Command::Dequeue { owner, auto_ack } => {
            w.u8(8);
            w.u64(*owner);
            w.bool(*auto_ack);
        }
        Command::DeadLetterSettled { ids } => {
            w.u8(9);
            w.ids(ids);
        }
        Command::Purge => w.u8(10),
        Command::Tick => w.u8(11),
        Command::Configure(config) => {
            w.u8(12);
            w.config(config);
        }
        Command::Batch(commands) => {
            w.u8(13);
            w.u32(commands.len() as u32);
            for command in commands {
                let at = w.0.len();
                w.u32(0);
                encode_command(w.0, command);
                let length = (w.0.len() - at - 4) as u32;
                w.0[at..at + 4].copy_from_slice(&length.to_le_bytes());
            }
        }
    }
}

/// Decodes one command that [`encode_command`] wrote (the whole of `bytes`).
pub fn decode_command(bytes: &[u8]) -> Result<Command, CodecError> {
    let mut r = Reader(bytes);
    let command = match r.u8()? {
        1 => {
            let publish = match r.u8()? {
                0 => None,
                _ => Some(PublishId {
                    publisher: r.u64()?,
                    sequence: r.u64()?,
                }),
            };
            Command::Enqueue {
                publish,
                message: Arc::new(r.message()?),
            }
        }
        2 => Command::PublisherDown {
            publisher: r.u64()?,
        },
        3 => Command::Attach {
            owner: r.u64()?,
            tag: r.str()?,
            mode: r.mode()?,
            priority: r.u32()? as i32,
            auto_ack: r.bool()?,
            timeout: r.opt()?,
        },
        4 => Command::Credit {
            consumer: ConsumerKey(r.u64()?),
            credit: r.u32()?,
            drain: r.bool()?,
        },
        5 => Command::Cancel {
            consumer: ConsumerKey(r.u64()?),
        },
        6 => {
            let consumer = ConsumerKey(r.u64()?);
            let ids = r.ids()?;
            let outcome = match r.u8()? {
                0 => Outcome::Ack,
                1 => Outcome::Requeue,
                2 => Outcome::Release,
                3 => Outcome::Reject,
                4 => Outcome::Modify {
                    delivery_failed: r.bool()?,
                    undeliverable_here: r.bool()?,
                    annotations: r.table()?,
                },
                other => return Err(CodecError(format!("unknown outcome {other}"))),
            };
            Command::Settle {
                consumer,
                ids,
                outcome,
            }
        }
        7 => Command::Down { owner: r.u64()? },
        8 => Command::Dequeue {
            owner: r.u64()?,
            auto_ack: r.bool()?,
        },
        9 => Command::DeadLetterSettled { ids: r.ids()? },
        10 => Command::Purge,
        11 => Command::Tick,
        12 => Command::Configure(r.config()?),
        13 => {
            // Each command is at least its length and its tag.
            let count = r.count(5)?;
            let mut commands = Vec::with_capacity(count);
            for _ in 0..count {
                let bytes = r.bytes()?;
                // One level only: a batch never holds a batch (bounded recursion).
                if bytes.first() == Some(&13) {
                    return Err(CodecError("a batch inside a batch".into()));
                }
                commands.push(decode_command(bytes)?);
            }
            Command::Batch(commands)
        }
        other => return Err(CodecError(format!("unknown command {other}"))),
    };
    r.end()?;
    Ok(command)
}

/// Appends a reply's encoding to `out` (for a Raft layer that must be able to serialize
/// what an applied entry returns).
pub fn encode_reply(out: &mut Vec<u8>, reply: &Reply) {
    let mut w = Writer(out);
    match reply {
        Reply::Ok => w.u8(0),
        Reply::Enqueued { id } => {
            w.u8(1);
            w.u64(*id);
        }
        Reply::Duplicate => w.u8(2),
        Reply::Rejected => w.u8(3),
        Reply::Attached { consumer, active } => {
            w.u8(4);
            w.u64(consumer.0);
            w.bool(*active);
        }
        Reply::Dequeued {
            consumer,
            delivered,
            remaining,
        } => {
            w.u8(5);
            w.opt(consumer.map(|c| c.0));
            w.u64(delivered.id);
            w.bool(delivered.redelivered);
            w.u32(delivered.delivery_count);
            w.bool(delivered.settled);
            w.u64(*remaining);
            w.message(&delivered.message);
        }
        Reply::Empty => w.u8(6),
        Reply::Purged { count } => {
            w.u8(7);
            w.u64(*count);
        }
        Reply::UnknownConsumer => w.u8(8),
        Reply::Batch(replies) => {
            w.u8(9);
            w.u32(replies.len() as u32);
            for reply in replies {
                let at = w.0.len();
                w.u32(0);
                encode_reply(w.0, reply);
                let length = (w.0.len() - at - 4) as u32;
                w.0[at..at + 4].copy_from_slice(&length.to_le_bytes());
            }
        }
    }
}

/// Decodes one reply that [`encode_reply`] wrote (the whole of `bytes`).
pub fn decode_reply(bytes: &[u8]) -> Result<Reply, CodecError> {
    let mut r = Reader(bytes);
    let reply = match r.u8()? {
        0 => Reply::Ok,
        1 => Reply::Enqueued { id: r.u64()? },
        2 => Reply::Duplicate,
        3 => Reply::Rejected,
        4 => Reply::Attached {
            consumer: ConsumerKey(r.u64()?),
            active: r.bool()?,
        },
        5 => {
            let consumer = r.opt()?.map(ConsumerKey);
            let id = r.u64()?;
            let redelivered = r.bool()?;
            let delivery_count = r.u32()?;
            let settled = r.bool()?;
            let remaining = r.u64()?;
            let message = Arc::new(r.message()?);
            Reply::Dequeued {
                consumer,
                delivered: Delivered {
                    id,
                    message,
                    redelivered,
                    delivery_count,
                    settled,
                },
                remaining,
            }
        }
        6 => Reply::Empty,
        7 => Reply::Purged { count: r.u64()? },
        8 => Reply::UnknownConsumer,
        9 => {
            let count = r.count(5)?;
            let mut replies = Vec::with_capacity(count);
            for _ in 0..count {
                let bytes = r.bytes()?;
                if bytes.first() == Some(&9) {
                    return Err(CodecError("a batch reply inside a batch reply".into()));
                }
                replies.push(decode_reply(bytes)?);
            }
            Reply::Batch(replies)
        }
        other => return Err(CodecError(format!("unknown reply {other}"))),
    };
    r.end()?;
    Ok(reply)
}

/// The whole state, for a Raft snapshot. Deterministic: equal states encode to equal bytes.
pub fn encode_snapshot(queue: &QuorumQueue) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 + queue.messages.len() * 64);
    let mut w = Writer(&mut out);
    w.0.extend_from_slice(SNAPSHOT_MAGIC);
    w.u8(SNAPSHOT_VERSION);
    w.config(&queue.config);
    w.u64(queue.next_id);
    w.u64(queue.next_consumer);
    w.u64(queue.serve_counter);
    w.opt(queue.active.map(|k| k.0));
    w.bool(queue.rejecting);
    let n = &queue.counters;
    for value in [
        n.enqueued,
        n.duplicates,
        n.rejected_publishes,
        n.delivered,
        n.acknowledged,
        n.returned,
        n.expired,
        n.dead_lettered,
        n.dropped,
        n.delivery_limit_reached,
    ] {
        w.u64(value);
    }
    w.u32(queue.publishers.len() as u32);
    for (publisher, sequence) in &queue.publishers {
        w.u64(*publisher);
        w.u64(*sequence);
    }
    w.u32(queue.consumers.len() as u32);
    for (key, consumer) in &queue.consumers {
        w.u64(key.0);
        w.u64(consumer.owner);
        w.str(&consumer.tag);
        w.mode(consumer.mode);
        w.u32(consumer.priority as u32);
        w.bool(consumer.auto_ack);
        w.u32(consumer.credit);
        w.bool(consumer.cancelled);
        w.bool(consumer.get_only);
        w.u64(consumer.last_served);
        w.opt(consumer.timeout);
        let ids: Vec<u64> = consumer.checked_out.iter().copied().collect();
        w.ids(&ids);
        let ids: Vec<u64> = consumer.timed_out.iter().copied().collect();
        w.ids(&ids);
    }
    w.u32(queue.messages.len() as u32);
    for (id, entry) in &queue.messages {
        w.u64(*id);
        w.u8(entry.priority);
        w.u64(entry.order);
        w.u32(entry.delivery_count);
        w.u32(entry.acquired);
        w.opt(entry.expires_at);
        w.opt(entry.ttl);
        w.opt(entry.deliver_at);
        match entry.place {
            Place::Ready => w.u8(0),
            Place::Delayed => w.u8(1),
            Place::CheckedOut(key) => {
                w.u8(2);
                w.u64(key.0);
            }
            Place::DeadLettering(reason) => {
                w.u8(3);
                w.u8(reason_code(reason));
            }
        }
        w.u64(entry.deadline);
        w.message(&entry.message);
    }
    out
}

/// Restores a state from [`encode_snapshot`]'s bytes, rebuilding its indexes.
pub fn decode_snapshot(bytes: &[u8]) -> Result<QuorumQueue, CodecError> {
    let mut r = Reader(bytes);
    if r.take(4)? != SNAPSHOT_MAGIC {
        return Err(CodecError("not a quorum queue snapshot".into()));
    }
    let version = r.u8()?;
    if version != SNAPSHOT_VERSION {
        return Err(CodecError(format!("snapshot version {version} is unknown")));
    }
    let config = r.config()?;
    let mut queue = QuorumQueue::new(config);
    queue.next_id = r.u64()?;
    queue.next_consumer = r.u64()?;
    queue.serve_counter = r.u64()?;
    queue.active = r.opt()?.map(ConsumerKey);
    queue.rejecting = r.bool()?;
    queue.counters = Counters {
        enqueued: r.u64()?,
        duplicates: r.u64()?,
        rejected_publishes: r.u64()?,
        delivered: r.u64()?,
        acknowledged: r.u64()?,
        returned: r.u64()?,
        expired: r.u64()?,
        dead_lettered: r.u64()?,
        dropped: r.u64()?,
        delivery_limit_reached: r.u64()?,
    };
    let publishers = r.count(16)?;
    for _ in 0..publishers {
        let publisher = r.u64()?;
        queue.publishers.insert(publisher, r.u64()?);
    }
    let consumers = r.count(40)?;
    for _ in 0..consumers {
        let key = ConsumerKey(r.u64()?);
        let consumer = Consumer {
            owner: r.u64()?,
            tag: r.str()?,
            mode: r.mode()?,
            priority: r.u32()? as i32,
            auto_ack: r.bool()?,
            credit: r.u32()?,
            cancelled: r.bool()?,
            get_only: r.bool()?,
            last_served: r.u64()?,
            timeout: r.opt()?,
            checked_out: r.ids()?.into_iter().collect::<BTreeSet<u64>>(),
            timed_out: r.ids()?.into_iter().collect::<BTreeSet<u64>>(),
        };
        queue.consumers.insert(key, consumer);
    }
    let messages = r.count(40)?;
    let mut entries = BTreeMap::new();
    for _ in 0..messages {
        let id = r.u64()?;
        let priority = r.u8()?;
        if priority >= PRIORITY_LEVELS {
            return Err(CodecError(format!("message {id} has priority {priority}")));
        }
        let order = r.u64()?;
        let delivery_count = r.u32()?;
        let acquired = r.u32()?;
        let expires_at = r.opt()?;
        let ttl = r.opt()?;
        let deliver_at = r.opt()?;
        let place = match r.u8()? {
            0 => Place::Ready,
            1 => Place::Delayed,
            2 => Place::CheckedOut(ConsumerKey(r.u64()?)),
            3 => Place::DeadLettering(reason_from(r.u8()?)?),
            other => return Err(CodecError(format!("unknown place {other}"))),
        };
        let deadline = r.u64()?;
        let message = Arc::new(r.message()?);
        entries.insert(
            id,
            Entry {
                length: message.body.len() as u64,
                message,
                priority,
                order,
                delivery_count,
                acquired,
                expires_at,
                ttl,
                deliver_at,
                place,
                deadline,
            },
        );
    }
    r.end()?;
    for (&id, entry) in &entries {
        match entry.place {
            Place::Ready => {
                queue
                    .ready
                    .insert((PRIORITY_LEVELS - 1 - entry.priority, entry.order, id));
                if let Some(at) = entry.expires_at {
                    queue.expiring.insert((at, id));
                }
                queue.queued_bytes += entry.length;
            }
            Place::Delayed => {
                let at = entry
                    .deliver_at
                    .ok_or_else(|| CodecError(format!("delayed message {id} has no time")))?;
                queue.delayed.insert((at, id));
                queue.queued_bytes += entry.length;
            }
            Place::CheckedOut(key) => {
                if !queue
                    .consumers
                    .get(&key)
                    .is_some_and(|c| c.checked_out.contains(&id))
                {
                    return Err(CodecError(format!(
                        "message {id} is checked out to consumer {} that does not hold it",
                        key.0
                    )));
                }
                queue.checkouts.insert((entry.deadline, id));
            }
            Place::DeadLettering(_) => {
                queue.dead_lettering += 1;
                queue.queued_bytes += entry.length;
            }
        }
    }
    for (key, consumer) in &queue.consumers {
        if let Some(id) = consumer
            .checked_out
            .iter()
            .find(|id| entries.get(id).map(|e| e.place) != Some(Place::CheckedOut(*key)))
        {
            return Err(CodecError(format!(
                "consumer {} holds message {id} that is not checked out to it",
                key.0
            )));
        }
    }
    queue.messages = entries;
    Ok(queue)
}

fn reason_code(reason: DeathReason) -> u8 {
    match reason {
        DeathReason::Rejected => 0,
        DeathReason::Expired => 1,
        DeathReason::MaxLen => 2,
        DeathReason::DeliveryLimit => 3,
    }
}

fn reason_from(code: u8) -> Result<DeathReason, CodecError> {
    Ok(match code {
        0 => DeathReason::Rejected,
        1 => DeathReason::Expired,
        2 => DeathReason::MaxLen,
        3 => DeathReason::DeliveryLimit,
        other => return Err(CodecError(format!("unknown dead-letter reason {other}"))),
    })
}

/// Little-endian writer shared by the quorum and forwarding codecs.
pub(crate) struct Writer<'a>(pub(crate) &'a mut Vec<u8>);

impl Writer<'_> {
    pub(crate) fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub(crate) fn bool(&mut self, v: bool) {
        self.0.push(u8::from(v));
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn opt(&mut self, v: Option<u64>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
            None => self.u8(0),
        }
    }
    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
    pub(crate) fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    pub(crate) fn opt_str(&mut self, v: Option<&str>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.str(v);
            }
            None => self.u8(0),
        }
    }
    pub(crate) fn ids(&mut self, ids: &[u64]) {
        self.u32(ids.len() as u32);
        for id in ids {
            self.u64(*id);
        }
    }
    fn config(&mut self, c: &QuorumConfig) {
        self.str(&c.name);
        self.opt(c.delivery_limit.map(u64::from));
        self.opt(c.message_ttl);
        self.opt(c.max_length);
        self.opt(c.max_length_bytes);
        self.u8(match c.overflow {
            Overflow::DropHead => 0,
            Overflow::RejectPublish => 1,
            Overflow::RejectPublishDlx => 2,
        });
        self.opt_str(c.dead_letter_exchange.as_deref());
        self.opt_str(c.dead_letter_routing_key.as_deref());
        self.u8(match c.dead_letter_strategy {
            DeadLetterStrategy::AtMostOnce => 0,
            DeadLetterStrategy::AtLeastOnce => 1,
        });
        self.bool(c.single_active_consumer);
        self.opt(c.consumer_timeout);
    }
    fn mode(&mut self, mode: CreditMode) {
        match mode {
            CreditMode::Prefetch(window) => {
                self.u8(0);
                self.u32(window);
            }
            CreditMode::Credited => self.u8(1),
        }
    }
    /// A message as one message-store record, length-prefixed.
    pub(crate) fn message(&mut self, message: &Message) {
        let at = self.0.len();
        self.u32(0);
        encode_publish(self.0, 0, &[], message);
        let length = (self.0.len() - at - 4) as u32;
        self.0[at..at + 4].copy_from_slice(&length.to_le_bytes());
    }
    /// A table, carried as the headers of an empty message so that it shares the message
    /// store's value encoding.
    pub(crate) fn table(&mut self, table: &Table) {
        self.message(&Message {
            exchange: Arc::from(""),
            routing_key: Arc::from(""),
            properties: Properties {
                headers: Some(table.clone()),
                ..Default::default()
            },
            encoded_properties: None,
            body: Bytes::new(),
        });
    }
}

/// Reader of what [`Writer`] wrote, refusing truncated or damaged input.
pub(crate) struct Reader<'a>(pub(crate) &'a [u8]);

impl<'a> Reader<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if self.0.len() < n {
            return Err(CodecError("truncated".into()));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    pub(crate) fn end(&self) -> Result<(), CodecError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(CodecError(format!("{} bytes left over", self.0.len())))
        }
    }
    pub(crate) fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn bool(&mut self) -> Result<bool, CodecError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(CodecError(format!("{other} is not a boolean"))),
        }
    }
    pub(crate) fn u32(&mut self) -> Result<u32, CodecError> {
        let bytes: [u8; 4] = self
            .take(4)?
            .try_into()
            .map_err(|_| CodecError("u32".into()))?;
        Ok(u32::from_le_bytes(bytes))
    }
    pub(crate) fn u64(&mut self) -> Result<u64, CodecError> {
        let bytes: [u8; 8] = self
            .take(8)?
            .try_into()
            .map_err(|_| CodecError("u64".into()))?;
        Ok(u64::from_le_bytes(bytes))
    }
    pub(crate) fn opt(&mut self) -> Result<Option<u64>, CodecError> {
        match self.bool()? {
            true => self.u64().map(Some),
            false => Ok(None),
        }
    }
    pub(crate) fn bytes(&mut self) -> Result<&'a [u8], CodecError> {
        let length = self.u32()? as usize;
        self.take(length)
    }
    pub(crate) fn str(&mut self) -> Result<String, CodecError> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| CodecError("not UTF-8".into()))
    }
    pub(crate) fn opt_str(&mut self) -> Result<Option<String>, CodecError> {
        match self.bool()? {
            true => self.str().map(Some),
            false => Ok(None),
        }
    }
    /// A count of items at least `item_size` bytes each, refused when the rest cannot hold
    /// that many (so a damaged count cannot make decoding allocate without bound).
    pub(crate) fn count(&mut self, item_size: usize) -> Result<usize, CodecError> {
        let count = self.u32()? as usize;
        if count > self.0.len() / item_size.max(1) {
            return Err(CodecError(format!("count {count} exceeds the data")));
        }
        Ok(count)
    }
    pub(crate) fn ids(&mut self) -> Result<Vec<u64>, CodecError> {
        let count = self.count(8)?;
        (0..count).map(|_| self.u64()).collect()
    }
    fn config(&mut self) -> Result<QuorumConfig, CodecError> {
        let mut config = QuorumConfig::new(self.str()?);
        config.delivery_limit = self
            .opt()?
            .map(|v| u32::try_from(v).map_err(|_| CodecError("delivery limit".into())))
            .transpose()?;
        config.message_ttl = self.opt()?;
        config.max_length = self.opt()?;
        config.max_length_bytes = self.opt()?;
        config.overflow = match self.u8()? {
            0 => Overflow::DropHead,
            1 => Overflow::RejectPublish,
            2 => Overflow::RejectPublishDlx,
            other => return Err(CodecError(format!("unknown overflow {other}"))),
        };
        config.dead_letter_exchange = self.opt_str()?;
        config.dead_letter_routing_key = self.opt_str()?;
        config.dead_letter_strategy = match self.u8()? {
            0 => DeadLetterStrategy::AtMostOnce,
            1 => DeadLetterStrategy::AtLeastOnce,
            other => return Err(CodecError(format!("unknown strategy {other}"))),
        };
        config.single_active_consumer = self.bool()?;
        config.consumer_timeout = self.opt()?;
        Ok(config)
    }
    fn mode(&mut self) -> Result<CreditMode, CodecError> {
        match self.u8()? {
            0 => Ok(CreditMode::Prefetch(self.u32()?)),
            1 => Ok(CreditMode::Credited),
            other => Err(CodecError(format!("unknown credit mode {other}"))),
        }
    }
    pub(crate) fn message(&mut self) -> Result<Message, CodecError> {
        let record = self.bytes()?;
        match read_record(record) {
            Read::Record(Record::Publish { message, .. }, used) if used == record.len() => {
                Ok(message)
            }
            _ => Err(CodecError("damaged message".into())),
        }
    }
    pub(crate) fn table(&mut self) -> Result<Table, CodecError> {
        Ok(self.message()?.properties.headers.unwrap_or_default())
    }
}
