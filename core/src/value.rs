//! Field values and tables: the typed key/value model shared by message headers, queue and
//! exchange arguments, binding arguments and client properties.
//!
//! The variants are those RabbitMQ accepts on the wire in AMQP 0-9-1 (its dialect of the field
//! table grammar), which is a superset of what the other protocols need. Tables keep their
//! entries in wire order so that a table passed through the broker is re-encoded byte for byte.

/// One typed value in a field table or field array.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `t`
    Bool(bool),
    /// `b`
    I8(i8),
    /// `B`
    U8(u8),
    /// `s`
    I16(i16),
    /// `u`
    U16(u16),
    /// `I`
    I32(i32),
    /// `i`
    U32(u32),
    /// `l`
    I64(i64),
    /// `f`
    F32(f32),
    /// `d`
    F64(f64),
    /// `D`: a decimal with `scale` digits after the point.
    Decimal { scale: u8, value: u32 },
    /// `S`: a long string; arbitrary bytes, usually UTF-8.
    LongString(Vec<u8>),
    /// `A`
    Array(Vec<Value>),
    /// `T`: seconds since the Unix epoch.
    Timestamp(u64),
    /// `F`
    Table(Table),
    /// `V`
    Void,
    /// `x`
    ByteArray(Vec<u8>),
}

impl Value {
    /// The value as a signed integer, for any of the integer variants.
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            Value::I8(v) => v as i64,
            Value::U8(v) => v as i64,
            Value::I16(v) => v as i64,
            Value::U16(v) => v as i64,
            Value::I32(v) => v as i64,
            Value::U32(v) => v as i64,
            Value::I64(v) => v,
            Value::Timestamp(v) => i64::try_from(v).ok()?,
            _ => return None,
        })
    }

    /// The value as text, for long strings holding UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::LongString(bytes) => std::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }

    /// The value as a boolean.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// A long string value from text.
    pub fn string(text: impl Into<String>) -> Value {
        Value::LongString(text.into().into_bytes())
    }

    /// A name for the value's type, as RabbitMQ prints it in equivalence errors.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Bool(_) => "bool",
            Value::I8(_) => "byte",
            Value::U8(_) => "unsignedbyte",
            Value::I16(_) => "short",
            Value::U16(_) => "unsignedshort",
            Value::I32(_) => "signedint",
            Value::U32(_) => "unsignedint",
            Value::I64(_) => "long",
            Value::F32(_) => "float",
            Value::F64(_) => "double",
            Value::Decimal { .. } => "decimal",
            Value::LongString(_) => "longstr",
            Value::Array(_) => "array",
            Value::Timestamp(_) => "timestamp",
            Value::Table(_) => "table",
            Value::Void => "void",
            Value::ByteArray(_) => "binary",
        }
    }
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Value::Bool(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U8(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Decimal { scale, value } => write!(f, "{value}e-{scale}"),
            Value::LongString(v) => write!(f, "{}", String::from_utf8_lossy(v)),
            Value::Array(items) => {
                write!(f, "[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        write!(f, ",")?;
                    }
                    write!(f, "{item}")?;
                }
                write!(f, "]")
            }
            Value::Timestamp(v) => write!(f, "{v}"),
            Value::Table(t) => write!(f, "{t:?}"),
            Value::Void => write!(f, "void"),
            Value::ByteArray(v) => write!(f, "{v:?}"),
        }
    }
}

/// A field table: named values in wire order. Keys are short strings (at most 255 bytes).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table(pub Vec<(String, Value)>);

impl Table {
    /// An empty table.
    pub fn new() -> Self {
        Table(Vec::new())
    }

    /// The value stored under `key`, if any (the first one, if a client sent duplicates).
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key` to `value`, replacing an existing entry in place.
    pub fn insert(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.0.push((key, value)),
        }
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let index = self.0.iter().position(|(k, _)| k == key)?;
        Some(self.0.remove(index).1)
    }

    /// Whether the table has no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Iterates over the entries in wire order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }
}

impl FromIterator<(String, Value)> for Table {
    fn from_iter<I: IntoIterator<Item = (String, Value)>>(iter: I) -> Self {
        Table(iter.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_replaces_in_place_and_keeps_order() {
        let mut table = Table::new();
        table.insert("a", Value::I32(1));
        table.insert("b", Value::I32(2));
        table.insert("a", Value::I32(3));
        assert_eq!(
            table.0,
            vec![("a".into(), Value::I32(3)), ("b".into(), Value::I32(2))]
        );
        assert_eq!(table.remove("a"), Some(Value::I32(3)));
        assert_eq!(table.get("b").and_then(Value::as_i64), Some(2));
    }

    #[test]
    fn integer_views_cover_every_integer_variant() {
        for v in [
            Value::I8(-1),
            Value::I16(-1),
            Value::I32(-1),
            Value::I64(-1),
        ] {
            assert_eq!(v.as_i64(), Some(-1));
        }
        assert_eq!(Value::string("x").as_i64(), None);
        assert_eq!(Value::string("x").as_str(), Some("x"));
    }
}
