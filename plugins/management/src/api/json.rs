//! Field values to JSON, as RabbitMQ's management API renders arguments, headers and client
//! properties.

use base64::Engine;
use serde_json::{Map, Value as Json};
use warren_core::value::{Table, Value};

/// One field value as JSON: numbers as numbers, strings as strings (bytes that are not UTF-8
/// as base64), tables as objects, arrays as arrays, void as null.
pub fn value_to_json(value: &Value) -> Json {
    match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I8(v) => Json::from(*v),
        Value::U8(v) => Json::from(*v),
        Value::I16(v) => Json::from(*v),
        Value::U16(v) => Json::from(*v),
        Value::I32(v) => Json::from(*v),
        Value::U32(v) => Json::from(*v),
        Value::I64(v) => Json::from(*v),
        Value::F32(v) => Json::from(f64::from(*v)),
        Value::F64(v) => Json::from(*v),
        Value::Decimal { scale, value } => {
            Json::from(f64::from(*value) / 10f64.powi(i32::from(*scale)))
        }
        Value::LongString(bytes) | Value::ByteArray(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => Json::String(text.to_string()),
            Err(_) => Json::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
        },
        Value::Array(items) => Json::Array(items.iter().map(value_to_json).collect()),
        Value::Timestamp(t) => Json::from(*t),
        Value::Table(table) => table_to_json(table),
        Value::Void => Json::Null,
    }
}

/// A field table as a JSON object.
pub fn table_to_json(table: &Table) -> Json {
    Json::Object(
        table
            .iter()
            .map(|(k, v)| (k.to_string(), value_to_json(v)))
            .collect::<Map<String, Json>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_tables_and_non_utf8_bytes_render() {
        let mut inner = Table::new();
        inner.insert("publisher_confirms", Value::Bool(true));
        let mut table = Table::new();
        table.insert("capabilities", Value::Table(inner));
        table.insert("x-max-length", Value::I32(10));
        table.insert("raw", Value::LongString(vec![0xff, 0x00]));
        let json = table_to_json(&table);
        assert_eq!(json["capabilities"]["publisher_confirms"], true);
        assert_eq!(json["x-max-length"], 10);
        assert_eq!(json["raw"], "/wA=");
    }
}
