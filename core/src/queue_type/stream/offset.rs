//! What a stream consumer asks for in its arguments, as RabbitMQ reads them: where to start
//! (`x-stream-offset`) and which messages it wants (`x-stream-filter`,
//! `x-stream-match-unfiltered`).

use crate::stream_log::{parse_max_age, ChunkFilter, OffsetSpec};
use crate::value::{Table, Value};

/// A consumer's filter: the chunks to read (by their Bloom filters) and, within them, the
/// messages to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerFilter {
    /// The values asked for, and whether messages without a value are wanted too.
    pub chunks: ChunkFilter,
}

impl ConsumerFilter {
    /// Whether a message whose `x-stream-filter-value` is `value` is delivered. A message
    /// without the header is wanted with `match-unfiltered`, and also when its chunk holds
    /// no unfiltered record at all: its value was then given apart from the message (a
    /// stream protocol publisher's filter value extractor), and only the chunk's Bloom
    /// filter knows it, so it is delivered as RabbitMQ delivers it.
    pub fn wants(&self, value: Option<&str>, chunk_holds_unfiltered: bool) -> bool {
        match value {
            Some(value) => self.chunks.values.iter().any(|wanted| wanted == value),
            None => self.chunks.match_unfiltered || !chunk_holds_unfiltered,
        }
    }
}

fn invalid(value: &Value) -> String {
    format!(
        "invalid x-stream-offset {value}: expected first, last, next, an offset, a timestamp or an interval such as 7D (units Y, M, D, h, m, s)"
    )
}

/// Where a consumer with `arguments` starts (`x-stream-offset`), as RabbitMQ parses it:
/// `first`, `last`, `next` (also when absent), a numeric offset, an AMQP timestamp
/// (seconds), or an interval string (`7D`, `1h`: that long before `now_ms`).
pub fn offset_spec(arguments: &Table, now_ms: i64) -> Result<OffsetSpec, String> {
    let Some(value) = arguments.get("x-stream-offset") else {
        return Ok(OffsetSpec::Next);
    };
    match value {
        Value::LongString(_) => match value.as_str() {
            Some("first") => Ok(OffsetSpec::First),
            Some("last") => Ok(OffsetSpec::Last),
            Some("next") => Ok(OffsetSpec::Next),
            Some(interval) => match parse_max_age(interval) {
                Ok(age) => Ok(OffsetSpec::Timestamp(
                    now_ms.saturating_sub(i64::try_from(age.as_millis()).unwrap_or(i64::MAX)),
                )),
                Err(_) => Err(invalid(value)),
            },
            None => Err(invalid(value)),
        },
        Value::Timestamp(seconds) => Ok(OffsetSpec::Timestamp(
            i64::try_from(*seconds)
                .unwrap_or(i64::MAX)
                .saturating_mul(1000),
        )),
        other => match other.as_i64() {
            Some(offset) if offset >= 0 => Ok(OffsetSpec::Offset(offset as u64)),
            _ => Err(invalid(value)),
        },
    }
}

/// The filter a consumer with `arguments` asks for (`x-stream-filter`: a string or an array
/// of strings; `x-stream-match-unfiltered`: a boolean, false when absent), or `None` when it
/// gives no filter values.
pub fn consumer_filter(arguments: &Table) -> Option<ConsumerFilter> {
    let values: Vec<String> = match arguments.get("x-stream-filter")? {
        Value::Array(items) => items
            .iter()
            .filter_map(|item| item.as_str().map(str::to_owned))
            .collect(),
        single => vec![single.as_str()?.to_owned()],
    };
    let match_unfiltered = arguments
        .get("x-stream-match-unfiltered")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Some(ConsumerFilter {
        chunks: ChunkFilter {
            values,
            match_unfiltered,
        },
    })
}
