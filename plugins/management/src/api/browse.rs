//! Browsing a queue without consuming it: `GET /api/queues/VHOST/NAME/browse`. RabbitMQ's
//! open-source UI can only get (take and requeue) messages; this reads them in place.
//!
//! - A classic or quorum queue (or one homed on another node) is read by position, through
//!   the queue-type interface ([`warren_core::queue_type::QueueInstance::peek`]): `?position=P&count=N` answers up to N ready
//!   messages from the P-th (1 is the head, as `rabbitmq-queues peek` counts), in delivery
//!   order. Unacknowledged messages are not ready and are not shown.
//! - A stream is read by offset: `?offset=O&count=N` answers up to N records from offset O
//!   (default: the first kept). Each record's body is its AMQP 1.0 data (or amqp-value)
//!   section when it has one, else the whole encoded record.
//!
//! `encoding` (`auto`, `base64`) and `truncate` work as in `/get`. Reading needs the read
//! permission on the queue, as `/get` does.

use serde_json::Value as Json;
use warren_core::access::{Access, ResourceKind};
use warren_core::message::{Message, Properties};
use warren_core::stream_log::{OffsetSpec, StreamLog};
use warren_core::vhost::{Actor, BROKER_CONNECTION};

use super::requests::Encoding;
use super::topology::message_json;
use super::{bad_request, core_error, Caller, Management};
use crate::http::{Request, Response};

/// The most messages one browse request answers.
pub const BROWSE_MAX: u64 = 1000;

/// The query of a browse request.
struct BrowseQuery {
    count: usize,
    encoding: Encoding,
    truncate: Option<usize>,
}

fn number(request: &Request, name: &str) -> Result<Option<u64>, Response> {
    match request.query_param(name) {
        None => Ok(None),
        Some(text) => text.trim().parse::<u64>().map(Some).map_err(|_| {
            bad_request(format!(
                "{name}: expected a whole number of 0 or more, got '{text}'"
            ))
        }),
    }
}

impl BrowseQuery {
    fn from_request(request: &Request) -> Result<BrowseQuery, Response> {
        let count = number(request, "count")?.unwrap_or(1);
        if count == 0 || count > BROWSE_MAX {
            return Err(bad_request(format!(
                "count: expected 1 to {BROWSE_MAX}, got {count}"
            )));
        }
        let encoding = Encoding::from_query(request.query_param("encoding").as_deref())
            .map_err(bad_request)?;
        let truncate =
            number(request, "truncate")?.map(|t| usize::try_from(t).unwrap_or(usize::MAX));
        Ok(BrowseQuery {
            count: count as usize,
            encoding,
            truncate,
        })
    }
}

impl Management {
    /// `GET /api/queues/VHOST/NAME/browse`.
    pub(crate) fn browse(
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
        let query = match BrowseQuery::from_request(request) {
            Ok(query) => query,
            Err(response) => return response,
        };
        let actor = Actor {
            user: &caller.user.name,
            connection_id: BROKER_CONNECTION,
        };
        if let Some(log) = target.streams().get(name) {
            if let Err(error) = target.check(actor.user, Access::Read, ResourceKind::Queue, name) {
                return core_error(error);
            }
            return self.browse_stream(request, &log, &query);
        }
        let queue = match target.queue_instance_for(actor, name, Access::Read) {
            Ok(queue) => queue,
            Err(error) => return core_error(error),
        };
        let position = match number(request, "position") {
            Ok(position) => position.unwrap_or(1),
            Err(response) => return response,
        };
        if position == 0 {
            return bad_request("position: the head of the queue is position 1");
        }
        let skip = usize::try_from(position - 1).unwrap_or(usize::MAX);
        let ready = queue.info().ready;
        // Every type through the queue-type interface: a classic queue reads from the
        // position and knows each message's redelivered flag; a quorum queue (or a stand-in
        // for a queue on another node) reads from the head.
        let messages = queue.peek(skip, query.count);
        let list: Vec<Json> = messages
            .iter()
            .zip(position..)
            .map(|((message, redelivered), at)| {
                let mut json =
                    message_json(message, *redelivered, ready, query.encoding, query.truncate);
                json["position"] = Json::from(at);
                json
            })
            .collect();
        Response::json(200, &Json::Array(list))
    }

    fn browse_stream(&self, request: &Request, log: &StreamLog, query: &BrowseQuery) -> Response {
        let stats = log.stats();
        let from = match number(request, "offset") {
            Ok(offset) => offset.unwrap_or(stats.first_offset).max(stats.first_offset),
            Err(response) => return response,
        };
        let mut reader = match log.reader(OffsetSpec::Offset(from)) {
            Ok(reader) => reader,
            Err(error) => {
                return super::error(
                    500,
                    "internal_error",
                    format!("reading the stream: {error}"),
                )
            }
        };
        let messages = stats.next_offset.saturating_sub(stats.first_offset);
        let mut list = Vec::new();
        while list.len() < query.count {
            let chunk = match reader.next_chunk() {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(error) => {
                    return super::error(
                        500,
                        "internal_error",
                        format!("reading the stream: {error}"),
                    )
                }
            };
            for (offset, record) in (chunk.header.first_offset..).zip(chunk.records()) {
                if offset < from {
                    continue;
                }
                if list.len() == query.count {
                    break;
                }
                let body = amqp10_body(record).unwrap_or(record);
                let message = Message {
                    exchange: "".into(),
                    routing_key: log.name().into(),
                    properties: Properties::default(),
                    encoded_properties: None,
                    body: bytes::Bytes::copy_from_slice(body),
                };
                let mut json =
                    message_json(&message, false, messages, query.encoding, query.truncate);
                json["offset"] = Json::from(offset);
                json["timestamp"] = Json::from(chunk.header.timestamp);
                list.push(json);
            }
        }
        Response::json(200, &Json::Array(list))
    }
}

/// The application data of an AMQP 1.0 message as a stream record holds it: the first `data`
/// section's bytes, or an `amqp-value` that is a string or binary. `None` when the record is
/// not such a message (it is then shown whole).
pub(crate) fn amqp10_body(record: &[u8]) -> Option<&[u8]> {
    let mut rest = record;
    while !rest.is_empty() {
        // Every section is a described type: 0x00, a descriptor, then its value.
        let (&constructor, after) = rest.split_first()?;
        if constructor != 0x00 {
            return None;
        }
        let (code, after) = descriptor(after)?;
        let (value_type, _) = after.split_first()?;
        let (value, next) = value(after)?;
        match (code, *value_type) {
            (0x75, 0xa0 | 0xb0) | (0x77, 0xa0 | 0xb0 | 0xa1 | 0xb1) => return Some(value),
            (0x70..=0x78, _) => rest = next,
            _ => return None,
        }
    }
    None
}

/// A section descriptor: `smallulong` (0x53 code) or `ulong` (0x80, 8 bytes).
fn descriptor(bytes: &[u8]) -> Option<(u64, &[u8])> {
    match bytes.split_first()? {
        (0x53, rest) => Some((u64::from(*rest.first()?), rest.get(1..)?)),
        (0x80, rest) => {
            let code = u64::from_be_bytes(rest.get(..8)?.try_into().ok()?);
            Some((code, rest.get(8..)?))
        }
        _ => None,
    }
}

/// One encoded value: its payload (for variable-width types, the bytes after the size) and
/// what follows it. Only the types a section's value starts with need be known: sections
/// are lists, maps, binaries, strings or symbols, or a fixed-width value.
fn value(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&code, rest) = bytes.split_first()?;
    let fixed = |width: usize| Some((rest.get(..width)?, rest.get(width..)?));
    match code {
        0x40..=0x45 => fixed(0),
        0x50..=0x56 => fixed(1),
        0x60..=0x61 => fixed(2),
        0x70..=0x73 => fixed(4),
        0x80..=0x84 => fixed(8),
        0x94 | 0x98 => fixed(16),
        // Variable width with a one-byte size: vbin8, str8, sym8, list8, map8, array8.
        0xa0 | 0xa1 | 0xa3 | 0xc0 | 0xc1 | 0xe0 => {
            let (&size, rest) = rest.split_first()?;
            let size = usize::from(size);
            Some((rest.get(..size)?, rest.get(size..)?))
        }
        // ... and with a four-byte size.
        0xb0 | 0xb1 | 0xb3 | 0xd0 | 0xd1 | 0xf0 => {
            let size = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let rest = rest.get(4..)?;
            Some((rest.get(..size)?, rest.get(size..)?))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_data_section_is_found_after_header_and_properties() {
        // header (list8 of one boolean), properties (list0), data "hi".
        let record = [
            0x00, 0x53, 0x70, 0xc0, 0x02, 0x01, 0x41, //
            0x00, 0x53, 0x73, 0x45, //
            0x00, 0x53, 0x75, 0xa0, 0x02, b'h', b'i',
        ];
        assert_eq!(amqp10_body(&record), Some(&b"hi"[..]));
        // amqp-value str8 with a ulong descriptor.
        let value = [0x00, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x77, 0xa1, 0x01, b'x'];
        assert_eq!(amqp10_body(&value), Some(&b"x"[..]));
        assert_eq!(amqp10_body(b"plain text"), None);
        assert_eq!(amqp10_body(&[0x00, 0x53, 0x75, 0xa0, 0x09, b'a']), None);
    }

    proptest! {
        /// Any bytes are answered without a panic, and a found body lies inside the record.
        #[test]
        fn arbitrary_records_never_panic(record in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Some(body) = amqp10_body(&record) {
                prop_assert!(body.len() <= record.len());
            }
        }
    }
}
