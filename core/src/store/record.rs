//! The on-disk record format of the message store (see docs/storage.md).
//!
//! Every record is framed as `magic u32 | length u32 | crc32 u32 | payload[length]`, all
//! little-endian, where the CRC covers the payload. The magic lets recovery find the next
//! record after a damaged one; the CRC tells a torn or corrupted record from a good one.
//! Payloads start with a type byte:
//!
//! - `1` publish: `store_id u64 | queue count u16 | (vhost, queue)* | message`
//! - `2` remove:  `vhost | queue | count u32 | store_id u64 *` (ack, reject, expiry, purge,
//!   deletion: the message left that queue for good)
//! - `3` delivered: same shape as remove (the message was handed out unsettled; after a
//!   restart it comes back with `redelivered` set)
//!
//! Strings are `u16` length-prefixed UTF-8 (names) or `u32` length-prefixed bytes (bodies,
//! header values). Decoding never panics: a payload that does not parse is reported like a
//! checksum failure.

use bytes::Bytes;

use crate::message::{Message, Properties};
use crate::value::{Table, Value};

/// Marks the start of every record ("WRNR").
pub const MAGIC: u32 = 0x574E_5252;
/// Bytes before the payload: magic, length, crc.
pub const HEADER_LEN: usize = 12;
/// Payloads larger than this are taken as damage, not as a record to read.
pub const MAX_PAYLOAD: u32 = 512 * 1024 * 1024;

const PUBLISH: u8 = 1;
const REMOVE: u8 = 2;
const DELIVERED: u8 = 3;

/// A queue as the store names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct QueueName {
    /// The vhost.
    pub vhost: String,
    /// The queue.
    pub name: String,
}

/// One decoded record.
// Records are decoded and consumed one at a time, never stored in bulk: boxing the message
// would only add an allocation per record during recovery.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
#[cfg_attr(test, derive(PartialEq))]
pub enum Record {
    /// A persistent message routed to these durable queues.
    Publish {
        /// The store's id for the message.
        store_id: u64,
        /// The durable queues it went to.
        queues: Vec<QueueName>,
        /// The message.
        message: Message,
    },
    /// The messages left the queue for good.
    Remove {
        /// The queue.
        queue: QueueName,
        /// Store ids.
        ids: Vec<u64>,
    },
    /// The messages were delivered and not yet settled.
    Delivered {
        /// The queue.
        queue: QueueName,
        /// Store ids.
        ids: Vec<u64>,
    },
}

#[cfg(test)]
impl PartialEq for Message {
    fn eq(&self, other: &Self) -> bool {
        self.exchange == other.exchange
            && self.routing_key == other.routing_key
            && self.properties == other.properties
            && self.body == other.body
    }
}

/// Appends one framed record whose payload `write_payload` produces.
fn framed(out: &mut Vec<u8>, write_payload: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&[0; 8]);
    write_payload(out);
    let payload = &out[start + HEADER_LEN..];
    let length = payload.len() as u32;
    let crc = crc32fast::hash(payload);
    out[start + 4..start + 8].copy_from_slice(&length.to_le_bytes());
    out[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
}

/// Appends a publish record.
pub fn encode_publish(out: &mut Vec<u8>, store_id: u64, queues: &[&QueueName], message: &Message) {
    framed(out, |out| {
        out.push(PUBLISH);
        out.extend_from_slice(&store_id.to_le_bytes());
        out.extend_from_slice(&(queues.len() as u16).to_le_bytes());
        for queue in queues {
            put_short(out, queue.vhost.as_bytes());
            put_short(out, queue.name.as_bytes());
        }
        put_short(out, message.exchange.as_bytes());
        put_short(out, message.routing_key.as_bytes());
        put_properties(out, &message.properties);
        put_long(out, &message.body);
    });
}

/// Appends a remove or delivered record for `ids` of one queue.
pub fn encode_ids(out: &mut Vec<u8>, delivered: bool, queue: &QueueName, ids: &[u64]) {
    framed(out, |out| {
        out.push(if delivered { DELIVERED } else { REMOVE });
        put_short(out, queue.vhost.as_bytes());
        put_short(out, queue.name.as_bytes());
        out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
        for id in ids {
            out.extend_from_slice(&id.to_le_bytes());
        }
    });
}

/// What reading one record at an offset found.
#[allow(clippy::large_enum_variant)] // see `Record`
#[derive(Debug)]
pub enum Read {
    /// A good record and the total bytes it took.
    Record(Record, usize),
    /// Fewer bytes left than a whole record needs (a torn write if this is the tail).
    Incomplete,
    /// Bad magic, impossible length, checksum mismatch or unparsable payload.
    Damaged,
}

/// Reads the record at the start of `bytes`.
pub fn read_record(bytes: &[u8]) -> Read {
    read_record_in(bytes, None)
}

/// Reads the record at `offset` of a whole segment; message bodies share the segment's
/// buffer instead of being copied (recovery reads hundreds of megabytes this way).
pub fn read_record_at(segment: &Bytes, offset: usize) -> Read {
    read_record_in(&segment[offset..], Some((segment, offset)))
}

fn read_record_in(bytes: &[u8], shared: Option<(&Bytes, usize)>) -> Read {
    if bytes.len() < HEADER_LEN {
        return Read::Incomplete;
    }
    let word =
        |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    if word(0) != MAGIC {
        return Read::Damaged;
    }
    let length = word(4);
    if length > MAX_PAYLOAD || length == 0 {
        return Read::Damaged;
    }
    let end = HEADER_LEN + length as usize;
    if bytes.len() < end {
        return Read::Incomplete;
    }
    let payload = &bytes[HEADER_LEN..end];
    if crc32fast::hash(payload) != word(8) {
        return Read::Damaged;
    }
    let shared = shared.map(|(segment, offset)| (segment, offset + HEADER_LEN));
    match decode_payload_in(payload, shared) {
        Some(record) => Read::Record(record, end),
        None => Read::Damaged,
    }
}

#[cfg(test)]
fn decode_payload(payload: &[u8]) -> Option<Record> {
    decode_payload_in(payload, None)
}

/// Decodes a payload; with `shared` (the segment and the payload's offset in it) the body is
/// a slice of the segment.
fn decode_payload_in(payload: &[u8], shared: Option<(&Bytes, usize)>) -> Option<Record> {
    let mut cursor = Cursor(payload);
    let record = match cursor.u8()? {
        PUBLISH => {
            let store_id = cursor.u64()?;
            let count = cursor.u16()?;
            let mut queues = Vec::with_capacity(usize::from(count));
            for _ in 0..count {
                queues.push(cursor.queue()?);
            }
            let exchange = cursor.short_str()?;
            let routing_key = cursor.short_str()?;
            let properties = cursor.properties()?;
            let body_bytes = cursor.long()?;
            let body = match shared {
                Some((segment, payload_offset)) => {
                    let start =
                        payload_offset + (body_bytes.as_ptr() as usize - payload.as_ptr() as usize);
                    segment.slice(start..start + body_bytes.len())
                }
                None => Bytes::copy_from_slice(body_bytes),
            };
            Record::Publish {
                store_id,
                queues,
                message: Message {
                    exchange: exchange.into(),
                    routing_key: routing_key.into(),
                    properties,
                    encoded_properties: None,
                    body,
                },
            }
        }
        kind @ (REMOVE | DELIVERED) => {
            let queue = cursor.queue()?;
            let count = cursor.u32()? as usize;
            if count > cursor.0.len() / 8 {
                return None;
            }
            let ids = (0..count)
                .map(|_| cursor.u64())
                .collect::<Option<Vec<_>>>()?;
            if kind == REMOVE {
                Record::Remove { queue, ids }
            } else {
                Record::Delivered { queue, ids }
            }
        }
        _ => return None,
    };
    cursor.0.is_empty().then_some(record)
}

fn put_short(out: &mut Vec<u8>, bytes: &[u8]) {
    let length = bytes.len().min(u16::MAX as usize);
    out.extend_from_slice(&(length as u16).to_le_bytes());
    out.extend_from_slice(&bytes[..length]);
}

fn put_long(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn put_opt_str(out: &mut Vec<u8>, flags: &mut u16, bit: u16, value: &Option<String>) {
    if let Some(value) = value {
        *flags |= bit;
        put_long(out, value.as_bytes());
    }
}

fn put_properties(out: &mut Vec<u8>, p: &Properties) {
    let flags_at = out.len();
    out.extend_from_slice(&[0, 0]);
    let mut flags = 0u16;
    put_opt_str(out, &mut flags, 1, &p.content_type);
    put_opt_str(out, &mut flags, 1 << 1, &p.content_encoding);
    if let Some(headers) = &p.headers {
        flags |= 1 << 2;
        put_table(out, headers);
    }
    if let Some(mode) = p.delivery_mode {
        flags |= 1 << 3;
        out.push(mode);
    }
    if let Some(priority) = p.priority {
        flags |= 1 << 4;
        out.push(priority);
    }
    put_opt_str(out, &mut flags, 1 << 5, &p.correlation_id);
    put_opt_str(out, &mut flags, 1 << 6, &p.reply_to);
    put_opt_str(out, &mut flags, 1 << 7, &p.expiration);
    put_opt_str(out, &mut flags, 1 << 8, &p.message_id);
    if let Some(timestamp) = p.timestamp {
        flags |= 1 << 9;
        out.extend_from_slice(&timestamp.to_le_bytes());
    }
    put_opt_str(out, &mut flags, 1 << 10, &p.message_type);
    put_opt_str(out, &mut flags, 1 << 11, &p.user_id);
    put_opt_str(out, &mut flags, 1 << 12, &p.app_id);
    put_opt_str(out, &mut flags, 1 << 13, &p.cluster_id);
    out[flags_at..flags_at + 2].copy_from_slice(&flags.to_le_bytes());
}

fn put_table(out: &mut Vec<u8>, table: &Table) {
    out.extend_from_slice(&(table.len() as u32).to_le_bytes());
    for (key, value) in table.iter() {
        put_short(out, key.as_bytes());
        put_value(out, value);
    }
}

fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(v) => {
            out.push(b't');
            out.push(u8::from(*v));
        }
        Value::I8(v) => out.extend_from_slice(&[b'b', *v as u8]),
        Value::U8(v) => out.extend_from_slice(&[b'B', *v]),
        Value::I16(v) => {
            out.push(b's');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::U16(v) => {
            out.push(b'u');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::I32(v) => {
            out.push(b'I');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::U32(v) => {
            out.push(b'i');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::I64(v) => {
            out.push(b'l');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::F32(v) => {
            out.push(b'f');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::F64(v) => {
            out.push(b'd');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::Decimal { scale, value } => {
            out.push(b'D');
            out.push(*scale);
            out.extend_from_slice(&value.to_le_bytes());
        }
        Value::LongString(v) => {
            out.push(b'S');
            put_long(out, v);
        }
        Value::Array(items) => {
            out.push(b'A');
            out.extend_from_slice(&(items.len() as u32).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
        Value::Timestamp(v) => {
            out.push(b'T');
            out.extend_from_slice(&v.to_le_bytes());
        }
        Value::Table(table) => {
            out.push(b'F');
            put_table(out, table);
        }
        Value::Void => out.push(b'V'),
        Value::ByteArray(v) => {
            out.push(b'x');
            put_long(out, v);
        }
    }
}

/// A bounds-checked reader over a payload.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Some(head)
    }

    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }

    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }

    fn short_str(&mut self) -> Option<String> {
        let length = usize::from(self.u16()?);
        String::from_utf8(self.take(length)?.to_vec()).ok()
    }

    fn long(&mut self) -> Option<&'a [u8]> {
        let length = self.u32()? as usize;
        self.take(length)
    }

    fn long_str(&mut self) -> Option<String> {
        String::from_utf8(self.long()?.to_vec()).ok()
    }

    fn queue(&mut self) -> Option<QueueName> {
        Some(QueueName {
            vhost: self.short_str()?,
            name: self.short_str()?,
        })
    }

    fn properties(&mut self) -> Option<Properties> {
        let flags = self.u16()?;
        let opt_str = |cursor: &mut Self, bit: u16| -> Option<Option<String>> {
            if flags & bit == 0 {
                Some(None)
            } else {
                cursor.long_str().map(Some)
            }
        };
        let content_type = opt_str(self, 1)?;
        let content_encoding = opt_str(self, 1 << 1)?;
        let headers = if flags & (1 << 2) != 0 {
            Some(self.table(0)?)
        } else {
            None
        };
        let delivery_mode = if flags & (1 << 3) != 0 {
            Some(self.u8()?)
        } else {
            None
        };
        let priority = if flags & (1 << 4) != 0 {
            Some(self.u8()?)
        } else {
            None
        };
        let correlation_id = opt_str(self, 1 << 5)?;
        let reply_to = opt_str(self, 1 << 6)?;
        let expiration = opt_str(self, 1 << 7)?;
        let message_id = opt_str(self, 1 << 8)?;
        let timestamp = if flags & (1 << 9) != 0 {
            Some(self.u64()?)
        } else {
            None
        };
        Some(Properties {
            content_type,
            content_encoding,
            headers,
            delivery_mode,
            priority,
            correlation_id,
            reply_to,
            expiration,
            message_id,
            timestamp,
            message_type: opt_str(self, 1 << 10)?,
            user_id: opt_str(self, 1 << 11)?,
            app_id: opt_str(self, 1 << 12)?,
            cluster_id: opt_str(self, 1 << 13)?,
        })
    }

    fn table(&mut self, depth: usize) -> Option<Table> {
        if depth > 64 {
            return None;
        }
        let count = self.u32()? as usize;
        if count > self.0.len() {
            return None;
        }
        let mut table = Table(Vec::with_capacity(count));
        for _ in 0..count {
            let key = self.short_str()?;
            let value = self.value(depth + 1)?;
            table.0.push((key, value));
        }
        Some(table)
    }

    fn value(&mut self, depth: usize) -> Option<Value> {
        if depth > 64 {
            return None;
        }
        Some(match self.u8()? {
            b't' => Value::Bool(self.u8()? != 0),
            b'b' => Value::I8(self.u8()? as i8),
            b'B' => Value::U8(self.u8()?),
            b's' => Value::I16(self.array().map(i16::from_le_bytes)?),
            b'u' => Value::U16(self.u16()?),
            b'I' => Value::I32(self.array().map(i32::from_le_bytes)?),
            b'i' => Value::U32(self.u32()?),
            b'l' => Value::I64(self.array().map(i64::from_le_bytes)?),
            b'f' => Value::F32(self.array().map(f32::from_le_bytes)?),
            b'd' => Value::F64(self.array().map(f64::from_le_bytes)?),
            b'D' => Value::Decimal {
                scale: self.u8()?,
                value: self.u32()?,
            },
            b'S' => Value::LongString(self.long()?.to_vec()),
            b'A' => {
                let count = self.u32()? as usize;
                if count > self.0.len() {
                    return None;
                }
                let mut items = Vec::with_capacity(count);
                for _ in 0..count {
                    items.push(self.value(depth + 1)?);
                }
                Value::Array(items)
            }
            b'T' => Value::Timestamp(self.u64()?),
            b'F' => Value::Table(self.table(depth + 1)?),
            b'V' => Value::Void,
            b'x' => Value::ByteArray(self.long()?.to_vec()),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn queue(name: &str) -> QueueName {
        QueueName {
            vhost: "/".into(),
            name: name.into(),
        }
    }

    fn sample_message() -> Message {
        let mut headers = Table::new();
        headers.insert("n", Value::I32(-7));
        headers.insert(
            "nested",
            Value::Array(vec![
                Value::string("a"),
                Value::Table(Table::new()),
                Value::Void,
            ]),
        );
        Message {
            exchange: "ex".into(),
            routing_key: "rk".into(),
            properties: Properties {
                content_type: Some("text/plain".into()),
                headers: Some(headers),
                delivery_mode: Some(2),
                priority: Some(3),
                timestamp: Some(42),
                expiration: Some("1000".into()),
                ..Properties::default()
            },
            encoded_properties: None,
            body: Bytes::from_static(b"hello"),
        }
    }

    #[test]
    fn records_round_trip() {
        let mut out = Vec::new();
        let (a, b) = (queue("a"), queue("b"));
        encode_publish(&mut out, 9, &[&a, &b], &sample_message());
        encode_ids(&mut out, false, &a, &[9, 10]);
        encode_ids(&mut out, true, &b, &[9]);
        let mut offset = 0;
        let mut records = Vec::new();
        let segment = Bytes::from(out.clone());
        while offset < out.len() {
            match (
                read_record(&out[offset..]),
                read_record_at(&segment, offset),
            ) {
                (Read::Record(record, used), Read::Record(shared, shared_used)) => {
                    assert_eq!(record, shared);
                    assert_eq!(used, shared_used);
                    records.push(record);
                    offset += used;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(
            records,
            vec![
                Record::Publish {
                    store_id: 9,
                    queues: vec![a.clone(), b.clone()],
                    message: sample_message()
                },
                Record::Remove {
                    queue: a,
                    ids: vec![9, 10]
                },
                Record::Delivered {
                    queue: b,
                    ids: vec![9]
                },
            ]
        );
    }

    #[test]
    fn a_flipped_bit_fails_the_checksum_and_a_cut_record_is_incomplete() {
        let mut out = Vec::new();
        encode_publish(&mut out, 1, &[&queue("q")], &sample_message());
        let mut flipped = out.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x40;
        assert!(matches!(read_record(&flipped), Read::Damaged));
        assert!(matches!(
            read_record(&out[..out.len() - 3]),
            Read::Incomplete
        ));
        assert!(matches!(read_record(&out[..5]), Read::Incomplete));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = read_record(&bytes);
            let _ = decode_payload(&bytes);
        }

        #[test]
        fn bodies_and_names_round_trip(
            body in proptest::collection::vec(any::<u8>(), 0..512),
            name in "[a-z.]{0,40}",
            id in any::<u64>(),
        ) {
            let message = Message {
                exchange: "".into(),
                routing_key: name.as_str().into(),
                properties: Properties { delivery_mode: Some(2), ..Properties::default() },
                encoded_properties: None,
                body: Bytes::from(body),
            };
            let mut out = Vec::new();
            let q = queue(&name);
            encode_publish(&mut out, id, &[&q], &message);
            match read_record(&out) {
                Read::Record(Record::Publish { store_id, queues, message: back }, used) => {
                    prop_assert_eq!(used, out.len());
                    prop_assert_eq!(store_id, id);
                    prop_assert_eq!(queues, vec![q]);
                    prop_assert_eq!(back, message);
                }
                other => prop_assert!(false, "unexpected {:?}", other),
            }
        }
    }
}
