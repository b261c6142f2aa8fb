//! A receiver's source filters on a stream, as RabbitMQ 4.x reads them
//! (`rabbit_amqp_session`): each entry of the source's filter-set is a described value whose
//! descriptor names the filter, whatever key the client filed it under.
//!
//! - `rabbitmq:stream-offset-spec`: where to start: the symbol or string `first`, `last`,
//!   `next` or an interval (`7D`, `1h`), an integer offset, or a timestamp (milliseconds;
//!   read to the second, as RabbitMQ reads it);
//! - `rabbitmq:stream-filter`: a string or a list (or array) of strings, the filter values
//!   wanted;
//! - `rabbitmq:stream-match-unfiltered`: a boolean, whether messages without a filter value
//!   are wanted too.
//!
//! They become the consumer arguments AMQP 0-9-1 gives (`x-stream-offset`,
//! `x-stream-filter`, `x-stream-match-unfiltered`), so the core's stream consumer reads
//! them once for every protocol. The filters taken are echoed in the attach reply's source,
//! which tells the client they are in force (AMQP 1.0 3.5.8); others are left out.

use fe2o3_amqp_types::messaging::FilterSet;
use fe2o3_amqp_types::primitives::Symbol;
use serde_amqp::descriptor::Descriptor;
use serde_amqp::Value as AmqpValue;
use warren_core::value::{Table, Value};

/// The descriptor of the offset specification filter.
pub const OFFSET_SPEC: &str = "rabbitmq:stream-offset-spec";
/// The descriptor of the filter values filter.
pub const FILTER: &str = "rabbitmq:stream-filter";
/// The descriptor of the match-unfiltered filter.
pub const MATCH_UNFILTERED: &str = "rabbitmq:stream-match-unfiltered";

/// What a stream receiver's filters ask for.
#[derive(Debug, Default)]
pub struct StreamFilters {
    /// The consumer arguments for the core.
    pub arguments: Table,
    /// The entries of the filter-set that were taken, to echo in the attach reply.
    pub accepted: FilterSet,
}

/// Reads the stream filters of a receiver's source. An entry with a value of the wrong type
/// is refused (the error says which); entries of other filters are ignored (not echoed).
pub fn stream_filters(filter: Option<&FilterSet>) -> Result<StreamFilters, String> {
    let mut out = StreamFilters::default();
    let Some(filter) = filter else {
        return Ok(out);
    };
    for (key, entry) in filter.iter() {
        let (name, value) = match entry {
            AmqpValue::Described(described) => match &described.descriptor {
                Descriptor::Name(symbol) => (symbol.0.as_str(), &described.value),
                Descriptor::Code(_) => continue,
            },
            // The legacy form some clients send: the key names the filter.
            other => (key.0.as_str(), other),
        };
        let argument = match name {
            OFFSET_SPEC => ("x-stream-offset", offset_spec(value)?),
            FILTER => ("x-stream-filter", filter_values(value)?),
            MATCH_UNFILTERED => match value {
                AmqpValue::Bool(b) => ("x-stream-match-unfiltered", Value::Bool(*b)),
                other => {
                    return Err(format!(
                        "{MATCH_UNFILTERED} must be a boolean, got {other:?}"
                    ))
                }
            },
            _ => continue,
        };
        out.arguments.insert(argument.0, argument.1);
        out.accepted
            .insert(Symbol::from(key.0.as_str()), entry.clone());
    }
    Ok(out)
}

fn offset_spec(value: &AmqpValue) -> Result<Value, String> {
    Ok(match value {
        AmqpValue::Symbol(text) => Value::string(text.0.clone()),
        AmqpValue::String(text) => Value::string(text.clone()),
        // AMQP 0-9-1 timestamps are seconds: the core reads them as such.
        AmqpValue::Timestamp(ms) => {
            Value::Timestamp(u64::try_from(ms.milliseconds().max(0) / 1000).unwrap_or(0))
        }
        AmqpValue::Ulong(n) => Value::I64(i64::try_from(*n).unwrap_or(i64::MAX)),
        AmqpValue::Uint(n) => Value::I64(i64::from(*n)),
        AmqpValue::Ushort(n) => Value::I64(i64::from(*n)),
        AmqpValue::Ubyte(n) => Value::I64(i64::from(*n)),
        AmqpValue::Long(n) => Value::I64(*n),
        AmqpValue::Int(n) => Value::I64(i64::from(*n)),
        AmqpValue::Short(n) => Value::I64(i64::from(*n)),
        AmqpValue::Byte(n) => Value::I64(i64::from(*n)),
        other => {
            return Err(format!(
                "{OFFSET_SPEC} must be first, last, next, an offset, a timestamp or an interval, got {other:?}"
            ))
        }
    })
}

fn filter_value(value: &AmqpValue) -> Result<Value, String> {
    match value {
        AmqpValue::Symbol(text) => Ok(Value::string(text.0.clone())),
        AmqpValue::String(text) => Ok(Value::string(text.clone())),
        other => Err(format!("{FILTER} values must be strings, got {other:?}")),
    }
}

fn filter_values(value: &AmqpValue) -> Result<Value, String> {
    let items: Vec<&AmqpValue> = match value {
        AmqpValue::List(items) => items.iter().collect(),
        AmqpValue::Array(items) => items.0.iter().collect(),
        single => vec![single],
    };
    items
        .into_iter()
        .map(filter_value)
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

#[cfg(test)]
mod tests {
    use fe2o3_amqp_types::primitives::Timestamp;
    use serde_amqp::described::Described;

    use super::*;

    fn described(name: &str, value: AmqpValue) -> AmqpValue {
        AmqpValue::Described(Box::new(Described {
            descriptor: Descriptor::Name(Symbol::from(name)),
            value,
        }))
    }

    #[test]
    fn the_three_filters_become_consumer_arguments_and_are_echoed() {
        let mut set = FilterSet::new();
        set.insert(
            Symbol::from("from"),
            described(OFFSET_SPEC, AmqpValue::Symbol(Symbol::from("first"))),
        );
        set.insert(
            Symbol::from(FILTER),
            described(
                FILTER,
                AmqpValue::List(vec![
                    AmqpValue::String("eu".into()),
                    AmqpValue::Symbol(Symbol::from("us")),
                ]),
            ),
        );
        set.insert(
            Symbol::from(MATCH_UNFILTERED),
            described(MATCH_UNFILTERED, AmqpValue::Bool(true)),
        );
        set.insert(
            Symbol::from("other"),
            described("amqp:selector-filter", AmqpValue::String("a = 1".into())),
        );
        let filters = stream_filters(Some(&set)).expect("valid");
        let a = &filters.arguments;
        assert_eq!(
            a.get("x-stream-offset").and_then(Value::as_str),
            Some("first")
        );
        assert_eq!(
            a.get("x-stream-filter"),
            Some(&Value::Array(vec![
                Value::string("eu"),
                Value::string("us")
            ]))
        );
        assert_eq!(a.get("x-stream-match-unfiltered"), Some(&Value::Bool(true)));
        assert_eq!(filters.accepted.len(), 3, "the selector is not echoed");
        assert!(filters.accepted.get(&Symbol::from("from")).is_some());
    }

    #[test]
    fn offsets_and_timestamps_map_as_rabbitmq_maps_them() {
        let one = |value| {
            let mut set = FilterSet::new();
            set.insert(Symbol::from("o"), described(OFFSET_SPEC, value));
            stream_filters(Some(&set)).map(|f| f.arguments.get("x-stream-offset").cloned())
        };
        assert_eq!(one(AmqpValue::Ulong(7)), Ok(Some(Value::I64(7))));
        assert_eq!(
            one(AmqpValue::Timestamp(Timestamp::from_milliseconds(5_999))),
            Ok(Some(Value::Timestamp(5)))
        );
        assert!(one(AmqpValue::Bool(true)).is_err());
        let mut set = FilterSet::new();
        set.insert(
            Symbol::from("f"),
            described(FILTER, AmqpValue::String("eu".into())),
        );
        assert_eq!(
            stream_filters(Some(&set))
                .unwrap()
                .arguments
                .get("x-stream-filter"),
            Some(&Value::Array(vec![Value::string("eu")]))
        );
    }
}
