//! JSON arguments to field values, the way RabbitMQ converts them when it loads definitions.

use serde_json::{Map, Value as Json};
use warren_core::value::{Table, Value};

/// Converts one JSON value: integer to `I64`, other number to `F64`, string to `LongString`,
/// bool to `Bool`, array to `Array`, object to `Table`, null to `Void`.
///
/// An integer above `i64::MAX` cannot be a 64-bit signed field value; it becomes `F64` here, and
/// [`crate::Definitions::validate`] reports it before anything is applied.
pub fn json_to_value(json: &Json) -> Value {
    match json {
        Json::Null => Value::Void,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(number) => match number.as_i64() {
            Some(integer) => Value::I64(integer),
            None => Value::F64(number.as_f64().unwrap_or(f64::NAN)),
        },
        Json::String(text) => Value::string(text.as_str()),
        Json::Array(items) => Value::Array(items.iter().map(json_to_value).collect()),
        Json::Object(object) => Value::Table(json_args_to_table(object)),
    }
}

/// Converts a JSON `arguments` object to a field table, entry by entry.
pub fn json_args_to_table(object: &Map<String, Json>) -> Table {
    object
        .iter()
        .map(|(key, value)| (key.clone(), json_to_value(value)))
        .collect()
}

/// Paths (`x-args.limit[2]`) of integers that do not fit a signed 64-bit field value.
pub(crate) fn oversized_integers(object: &Map<String, Json>) -> Vec<String> {
    fn walk(json: &Json, path: String, found: &mut Vec<String>) {
        match json {
            Json::Number(number) if number.is_u64() && number.as_i64().is_none() => {
                found.push(path)
            }
            Json::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    walk(item, format!("{path}[{index}]"), found);
                }
            }
            Json::Object(object) => {
                for (key, value) in object {
                    walk(value, format!("{path}.{key}"), found);
                }
            }
            _ => {}
        }
    }
    let mut found = Vec::new();
    for (key, value) in object {
        walk(value, key.clone(), &mut found);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_json_type_maps_like_rabbitmq() {
        let json = json!({
            "x-message-ttl": 60000,
            "x-negative": -5,
            "x-ratio": 0.5,
            "x-queue-type": "quorum",
            "x-single-active-consumer": true,
            "x-list": [1, "two", null],
            "x-nested": {"inner": false},
            "x-nothing": null
        });
        let table = json_args_to_table(json.as_object().expect("object"));
        assert_eq!(table.get("x-message-ttl"), Some(&Value::I64(60000)));
        assert_eq!(table.get("x-negative"), Some(&Value::I64(-5)));
        assert_eq!(table.get("x-ratio"), Some(&Value::F64(0.5)));
        assert_eq!(table.get("x-queue-type"), Some(&Value::string("quorum")));
        assert_eq!(
            table.get("x-single-active-consumer"),
            Some(&Value::Bool(true))
        );
        assert_eq!(
            table.get("x-list"),
            Some(&Value::Array(vec![
                Value::I64(1),
                Value::string("two"),
                Value::Void
            ]))
        );
        assert_eq!(
            table.get("x-nested"),
            Some(&Value::Table(Table(vec![(
                "inner".into(),
                Value::Bool(false)
            )])))
        );
        assert_eq!(table.get("x-nothing"), Some(&Value::Void));
        assert_eq!(table.len(), 8);
    }

    #[test]
    fn integers_beyond_i64_are_found() {
        let json = json!({"ok": 1, "big": 18446744073709551615u64, "deep": {"list": [0, 9223372036854775808u64]}});
        let object = json.as_object().expect("object");
        let mut found = oversized_integers(object);
        found.sort();
        assert_eq!(found, ["big", "deep.list[1]"]);
        assert_eq!(
            json_to_value(&json["big"]),
            Value::F64(18446744073709551615.0)
        );
    }
}
