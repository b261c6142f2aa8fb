//! Headers exchange matching, as RabbitMQ 4.x's headers exchange does it.
//!
//! # Semantics (confirmed against RabbitMQ's source)
//!
//! From rabbitmq-server `main` (2026): `deps/rabbit/src/rabbit_exchange_type_headers.erl`
//! (`route/3`, `match/2`, `match_x/2`, `match_all/3`, `match_any/3`, `validate_binding/2`),
//! `deps/rabbit/src/mc_amqpl.erl` (`routing_headers/2`, `routing_value/2`) and
//! `deps/rabbit/test/exchanges_SUITE.erl` (`headers_exchange_key_presence_only`):
//!
//! - The mode is the binding's `x-match` argument, looked up as the first entry of that name.
//!   Only a long string `all`, `any`, `all-with-x` or `any-with-x` selects a mode; anything
//!   else (absent, another string, another type) routes as `all`. Invalid values are refused
//!   earlier, when binding, by [`validate_x_match`].
//! - `all`/`any` skip every binding key starting with `x-`; `all-with-x`/`any-with-x` skip only
//!   `x-match` itself and compare the other `x-` keys like any key.
//! - A binding value of type void matches if the message has the key, whatever its value.
//! - Otherwise the message must have the key with an equal value. RabbitMQ compares the
//!   untyped Erlang values with `=:=`, dropping the type tag at the top level, so:
//!   every integer type compares by number (`I32(1)` equals `I64(1)` and `U8(1)`); `F32` and
//!   `F64` compare as doubles; a long string equals a byte array with the same bytes; an integer
//!   never equals a float (`1 =:= 1.0` is false). Inside arrays and tables the type tags are
//!   kept, so nested values must have the same type and value.
//! - A message timestamp header is converted to milliseconds before comparison
//!   (`routing_value(timestamp, V) -> V * 1000`) while binding values are not, so a timestamp
//!   header `T` equals a binding integer (or timestamp) `T * 1000`, not a binding timestamp `T`.
//!   Warren follows this for compatibility.
//! - `all` is true when no compared key fails, so a binding with nothing to compare matches
//!   every message, even one without headers. `any` is true when some compared key matches, so
//!   a binding with nothing to compare matches nothing.
//! - A message with no headers behaves as one with an empty table.
//! - Message headers are read as a map in which a later duplicate key overrides an earlier one.

use crate::value::{Table, Value};

/// The four `x-match` modes of a headers binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    All,
    Any,
    AllWithX,
    AnyWithX,
}

impl Mode {
    fn of(binding_arguments: &Table) -> Mode {
        match binding_arguments.get("x-match") {
            Some(Value::LongString(text)) => match text.as_slice() {
                b"any" => Mode::Any,
                b"all-with-x" => Mode::AllWithX,
                b"any-with-x" => Mode::AnyWithX,
                // `all`, and every invalid value that slipped past validation.
                _ => Mode::All,
            },
            _ => Mode::All,
        }
    }

    /// Whether a binding key takes part in matching under this mode.
    fn compares(self, key: &str) -> bool {
        match self {
            Mode::All | Mode::Any => !key.starts_with("x-"),
            Mode::AllWithX | Mode::AnyWithX => key != "x-match",
        }
    }
}

/// Whether a message with `message_headers` (`None` for a message without headers) matches a
/// headers-exchange binding with `binding_arguments`.
///
/// `message_headers` should be what RabbitMQ calls the routing headers: the message's
/// application headers, with `x-` annotations the broker added (dead-lettering's
/// `x-first-death-*`, AMQP 1.0 message annotations) merged in, as `mc:routing_headers/2` does.
/// See the module documentation for the exact rules.
pub fn headers_match(binding_arguments: &Table, message_headers: Option<&Table>) -> bool {
    let mode = Mode::of(binding_arguments);
    let mut compared = binding_arguments
        .iter()
        .filter(|(key, _)| mode.compares(key))
        .map(|(key, expected)| {
            let actual = message_headers.and_then(|headers| last_value(headers, key));
            match (expected, actual) {
                (_, None) => false,
                (Value::Void, Some(_)) => true,
                (expected, Some(actual)) => routing_value_equal(expected, actual),
            }
        });
    match mode {
        Mode::All | Mode::AllWithX => compared.all(|matched| matched),
        Mode::Any | Mode::AnyWithX => compared.any(|matched| matched),
    }
}

/// The value of the last entry named `key`: RabbitMQ folds headers into a map, so a later
/// duplicate overrides an earlier one.
fn last_value<'t>(table: &'t Table, key: &str) -> Option<&'t Value> {
    table.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// A top-level value as RabbitMQ compares it: the Erlang term with its AMQP type tag dropped.
#[derive(Debug, PartialEq)]
enum Term<'v> {
    Integer(i128),
    Float(f64),
    Binary(&'v [u8]),
    Bool(bool),
    Decimal(u8, u32),
    /// Arrays and tables keep their elements' type tags, so they compare as typed values.
    Nested(&'v Value),
    Undefined,
}

/// `header_side` applies `mc_amqpl:routing_value/2`, which turns a message's timestamp (in
/// seconds) into milliseconds; binding arguments are compared as stored.
fn term(value: &Value, header_side: bool) -> Term<'_> {
    match *value {
        Value::Bool(b) => Term::Bool(b),
        Value::I8(v) => Term::Integer(v.into()),
        Value::U8(v) => Term::Integer(v.into()),
        Value::I16(v) => Term::Integer(v.into()),
        Value::U16(v) => Term::Integer(v.into()),
        Value::I32(v) => Term::Integer(v.into()),
        Value::U32(v) => Term::Integer(v.into()),
        Value::I64(v) => Term::Integer(v.into()),
        Value::Timestamp(seconds) if header_side => Term::Integer(i128::from(seconds) * 1000),
        Value::Timestamp(seconds) => Term::Integer(seconds.into()),
        Value::F32(v) => Term::Float(v.into()),
        Value::F64(v) => Term::Float(v),
        Value::Decimal { scale, value } => Term::Decimal(scale, value),
        Value::LongString(ref bytes) | Value::ByteArray(ref bytes) => Term::Binary(bytes),
        Value::Array(_) | Value::Table(_) => Term::Nested(value),
        Value::Void => Term::Undefined,
    }
}

fn routing_value_equal(binding: &Value, header: &Value) -> bool {
    match (term(binding, false), term(header, true)) {
        // Derived `PartialEq` on values compares variant and content, as Erlang compares
        // `{Type, Value}` pairs inside arrays and `{Key, Type, Value}` triples inside tables.
        (Term::Nested(a), Term::Nested(b)) => {
            matches!(
                (a, b),
                (Value::Array(_), Value::Array(_)) | (Value::Table(_), Value::Table(_))
            ) && a == b
        }
        (a, b) => a == b,
    }
}

/// Checks a headers binding's `x-match` argument, as RabbitMQ does when binding. The error is
/// RabbitMQ's text, which it sends with a 406 PRECONDITION_FAILED channel close (the listener
/// adds the `PRECONDITION_FAILED - ` prefix).
///
/// Erlang formats the offending value with `~tp`; values are rendered the same way on one
/// line (Erlang would wrap a very long value, and prints some floats differently).
pub fn validate_x_match(binding_arguments: &Table) -> Result<(), String> {
    match binding_arguments.get("x-match") {
        None => Ok(()),
        Some(Value::LongString(text))
            if matches!(
                text.as_slice(),
                b"all" | b"any" | b"all-with-x" | b"any-with-x"
            ) =>
        {
            Ok(())
        }
        Some(Value::LongString(text)) => Err(format!(
            "Invalid x-match field value {}; expected all, any, all-with-x, or any-with-x",
            erlang_binary(text)
        )),
        Some(other) => Err(format!(
            "Invalid x-match field type {} (value {}); expected longstr",
            other.type_name(),
            erlang_term(other)
        )),
    }
}

/// A field value as Erlang's `~tp` prints the term RabbitMQ holds for it.
fn erlang_term(value: &Value) -> String {
    match value {
        Value::Bool(b) => b.to_string(),
        Value::I8(_)
        | Value::U8(_)
        | Value::I16(_)
        | Value::U16(_)
        | Value::I32(_)
        | Value::U32(_)
        | Value::I64(_)
        | Value::Timestamp(_) => value.to_string(),
        Value::F32(v) => erlang_float(f64::from(*v)),
        Value::F64(v) => erlang_float(*v),
        Value::Decimal { scale, value } => format!("{{{scale},{value}}}"),
        Value::LongString(bytes) | Value::ByteArray(bytes) => erlang_binary(bytes),
        Value::Array(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|item| format!("{{{},{}}}", item.type_name(), erlang_term(item)))
                .collect();
            format!("[{}]", items.join(","))
        }
        Value::Table(table) => {
            let entries: Vec<String> = table
                .iter()
                .map(|(key, item)| {
                    format!(
                        "{{{},{},{}}}",
                        erlang_binary(key.as_bytes()),
                        item.type_name(),
                        erlang_term(item)
                    )
                })
                .collect();
            format!("[{}]", entries.join(","))
        }
        Value::Void => "undefined".to_owned(),
    }
}

/// Erlang's shortest float form: always a `.`, exponent written `e`, e.g. `1.5`, `1.0e20`.
fn erlang_float(v: f64) -> String {
    let text = format!("{v:?}");
    match text.split_once('e') {
        Some((mantissa, exponent)) if !mantissa.contains('.') => {
            format!("{mantissa}.0e{exponent}")
        }
        _ => text,
    }
}

/// A binary as `~tp` prints it: `<<"text">>` when printable, `<<"tëxt"/utf8>>` when printable
/// only as UTF-8, otherwise its bytes `<<1,2,3>>`. "Printable" is Erlang's default latin1
/// printable range.
fn erlang_binary(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "<<>>".to_owned();
    }
    if let Ok(text) = std::str::from_utf8(bytes) {
        if text.chars().all(printable) {
            let suffix = if text.is_ascii() { "" } else { "/utf8" };
            return format!("<<\"{}\"{suffix}>>", escape(text.chars()));
        }
    }
    let latin1 = bytes.iter().map(|&byte| char::from(byte));
    if latin1.clone().all(printable) {
        return format!("<<\"{}\">>", escape(latin1));
    }
    let numbers: Vec<String> = bytes.iter().map(u8::to_string).collect();
    format!("<<{}>>", numbers.join(","))
}

fn printable(c: char) -> bool {
    matches!(c, ' '..='~' | '\u{a0}'..='\u{ff}' | '\u{8}'..='\u{d}' | '\u{1b}')
}

fn escape(chars: impl Iterator<Item = char>) -> String {
    let mut out = String::new();
    for c in chars {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{1b}' => out.push_str("\\e"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, Value)]) -> Table {
        entries
            .iter()
            .map(|(key, value)| (key.to_string(), value.clone()))
            .collect()
    }

    /// Table entries written inline: (key, value) in wire order.
    type Entries = Vec<(&'static str, Value)>;

    fn s(text: &str) -> Value {
        Value::string(text)
    }

    #[test]
    fn match_table() {
        let no_headers: Option<Entries> = None;
        let cases: Vec<(&str, Entries, Option<Entries>, bool)> = vec![
            // all (explicit and default).
            (
                "all: every key equal",
                vec![("x-match", s("all")), ("a", s("1")), ("b", s("2"))],
                Some(vec![("a", s("1")), ("b", s("2")), ("c", s("3"))]),
                true,
            ),
            (
                "all: one key differs",
                vec![("x-match", s("all")), ("a", s("1")), ("b", s("2"))],
                Some(vec![("a", s("1")), ("b", s("x"))]),
                false,
            ),
            (
                "all: one key missing",
                vec![("a", s("1")), ("b", s("2"))],
                Some(vec![("a", s("1"))]),
                false,
            ),
            (
                "all is the default",
                vec![("a", s("1"))],
                Some(vec![("a", s("1"))]),
                true,
            ),
            (
                "all: empty binding matches a message without headers",
                vec![],
                no_headers.clone(),
                true,
            ),
            (
                "all: only x- keys means nothing to compare",
                vec![("x-match", s("all")), ("x-foo", s("bar"))],
                Some(vec![]),
                true,
            ),
            (
                "all: keys but no headers",
                vec![("a", s("1"))],
                no_headers.clone(),
                false,
            ),
            // any.
            (
                "any: one key equal",
                vec![("x-match", s("any")), ("a", s("1")), ("b", s("2"))],
                Some(vec![("b", s("2"))]),
                true,
            ),
            (
                "any: no key equal",
                vec![("x-match", s("any")), ("a", s("1")), ("b", s("2"))],
                Some(vec![("a", s("2")), ("b", s("1"))]),
                false,
            ),
            (
                "any: nothing to compare matches nothing",
                vec![("x-match", s("any"))],
                Some(vec![("a", s("1"))]),
                false,
            ),
            (
                "any: x- keys are not compared",
                vec![("x-match", s("any")), ("x-foo", s("bar"))],
                Some(vec![("x-foo", s("bar"))]),
                false,
            ),
            (
                "any: no headers",
                vec![("x-match", s("any")), ("a", s("1"))],
                no_headers.clone(),
                false,
            ),
            // all-with-x and any-with-x.
            (
                "all-with-x: x- key compared and equal",
                vec![
                    ("x-match", s("all-with-x")),
                    ("x-first-death-reason", s("expired")),
                ],
                Some(vec![("x-first-death-reason", s("expired"))]),
                true,
            ),
            (
                "all-with-x: x- key compared and different",
                vec![
                    ("x-match", s("all-with-x")),
                    ("x-first-death-reason", s("expired")),
                    ("a", s("1")),
                ],
                Some(vec![("x-first-death-reason", s("rejected")), ("a", s("1"))]),
                false,
            ),
            (
                "all: the same x- key ignored",
                vec![
                    ("x-match", s("all")),
                    ("x-first-death-reason", s("expired")),
                    ("a", s("1")),
                ],
                Some(vec![("x-first-death-reason", s("rejected")), ("a", s("1"))]),
                true,
            ),
            (
                "all-with-x: x-match itself is never compared",
                vec![("x-match", s("all-with-x"))],
                Some(vec![]),
                true,
            ),
            (
                "any-with-x: x- key equal",
                vec![
                    ("x-match", s("any-with-x")),
                    ("x-foo", s("bar")),
                    ("a", s("1")),
                ],
                Some(vec![("x-foo", s("bar"))]),
                true,
            ),
            (
                "any-with-x: nothing equal",
                vec![("x-match", s("any-with-x")), ("x-foo", s("bar"))],
                Some(vec![("x-foo", s("baz"))]),
                false,
            ),
            // Void binding values: presence only (exchanges_SUITE headers_exchange_key_presence_only).
            (
                "void: present with any value",
                vec![
                    ("x-match", s("all-with-x")),
                    ("foo", Value::Void),
                    ("x-foo", Value::Void),
                ],
                Some(vec![("foo", s("anything")), ("x-foo", Value::I64(42))]),
                true,
            ),
            (
                "void: all-with-x with one key missing",
                vec![
                    ("x-match", s("all-with-x")),
                    ("foo", Value::Void),
                    ("x-foo", Value::Void),
                ],
                Some(vec![("foo", s("whatever"))]),
                false,
            ),
            (
                "void: any-with-x with only the x- key",
                vec![
                    ("x-match", s("any-with-x")),
                    ("foo", Value::Void),
                    ("x-foo", Value::Void),
                ],
                Some(vec![("x-foo", s("something"))]),
                true,
            ),
            (
                "void: absent",
                vec![
                    ("x-match", s("any-with-x")),
                    ("foo", Value::Void),
                    ("x-foo", Value::Void),
                ],
                Some(vec![("other", s("value"))]),
                false,
            ),
            (
                "void: header value void is present",
                vec![("foo", Value::Void)],
                Some(vec![("foo", Value::Void)]),
                true,
            ),
            (
                "void header does not equal a non-void binding value",
                vec![("foo", s(""))],
                Some(vec![("foo", Value::Void)]),
                false,
            ),
            // Value comparison across types.
            (
                "integers compare by number across widths",
                vec![
                    ("n", Value::I32(1)),
                    ("m", Value::U8(200)),
                    ("k", Value::I16(-3)),
                ],
                Some(vec![
                    ("n", Value::I64(1)),
                    ("m", Value::U32(200)),
                    ("k", Value::I8(-3)),
                ]),
                true,
            ),
            (
                "an integer never equals a float",
                vec![("n", Value::I32(1))],
                Some(vec![("n", Value::F64(1.0))]),
                false,
            ),
            (
                "float and double compare as doubles",
                vec![("f", Value::F32(1.5))],
                Some(vec![("f", Value::F64(1.5))]),
                true,
            ),
            (
                "a string never equals a number",
                vec![("n", s("1"))],
                Some(vec![("n", Value::I32(1))]),
                false,
            ),
            (
                "long string equals byte array with the same bytes",
                vec![("b", s("abc"))],
                Some(vec![("b", Value::ByteArray(b"abc".to_vec()))]),
                true,
            ),
            (
                "bool equals bool only",
                vec![("t", Value::Bool(true))],
                Some(vec![("t", Value::I8(1))]),
                false,
            ),
            (
                "header timestamp is compared in milliseconds",
                vec![("t", Value::I64(5000))],
                Some(vec![("t", Value::Timestamp(5))]),
                true,
            ),
            (
                "so equal timestamps do not match",
                vec![("t", Value::Timestamp(5))],
                Some(vec![("t", Value::Timestamp(5))]),
                false,
            ),
            (
                "a binding timestamp compares as its raw seconds",
                vec![("t", Value::Timestamp(5))],
                Some(vec![("t", Value::I32(5))]),
                true,
            ),
            (
                "arrays compare element types too",
                vec![("a", Value::Array(vec![Value::I32(1)]))],
                Some(vec![("a", Value::Array(vec![Value::I64(1)]))]),
                false,
            ),
            (
                "equal arrays",
                vec![("a", Value::Array(vec![Value::I32(1), s("x")]))],
                Some(vec![("a", Value::Array(vec![Value::I32(1), s("x")]))]),
                true,
            ),
            (
                "equal tables",
                vec![("t", Value::Table(table(&[("k", s("v"))])))],
                Some(vec![("t", Value::Table(table(&[("k", s("v"))])))]),
                true,
            ),
            (
                "decimals compare scale and digits",
                vec![(
                    "d",
                    Value::Decimal {
                        scale: 2,
                        value: 100,
                    },
                )],
                Some(vec![(
                    "d",
                    Value::Decimal {
                        scale: 1,
                        value: 10,
                    },
                )]),
                false,
            ),
            (
                "a later duplicate header wins",
                vec![("a", s("2"))],
                Some(vec![("a", s("1")), ("a", s("2"))]),
                true,
            ),
            // Invalid x-match values route as all.
            (
                "unknown x-match routes as all",
                vec![("x-match", s("foo")), ("a", s("1"))],
                Some(vec![("a", s("1"))]),
                true,
            ),
            (
                "non-string x-match routes as all",
                vec![
                    ("x-match", Value::ByteArray(b"any".to_vec())),
                    ("a", s("1")),
                    ("b", s("2")),
                ],
                Some(vec![("a", s("1"))]),
                false,
            ),
        ];
        for (name, binding, headers, expected) in cases {
            let binding = table(&binding);
            let headers = headers.map(|entries| table(&entries));
            assert_eq!(
                headers_match(&binding, headers.as_ref()),
                expected,
                "{name}"
            );
        }
    }

    #[test]
    fn valid_x_match_values_are_accepted() {
        for mode in ["all", "any", "all-with-x", "any-with-x"] {
            assert_eq!(validate_x_match(&table(&[("x-match", s(mode))])), Ok(()));
        }
        assert_eq!(validate_x_match(&table(&[("a", s("b"))])), Ok(()));
    }

    #[test]
    fn invalid_x_match_value_gets_rabbitmq_text() {
        assert_eq!(
            validate_x_match(&table(&[("x-match", s("foo"))])),
            Err("Invalid x-match field value <<\"foo\">>; \
                 expected all, any, all-with-x, or any-with-x"
                .to_owned())
        );
        assert_eq!(
            validate_x_match(&table(&[("x-match", s("ALL"))])),
            Err("Invalid x-match field value <<\"ALL\">>; \
                 expected all, any, all-with-x, or any-with-x"
                .to_owned())
        );
        assert_eq!(
            validate_x_match(&table(&[("x-match", s(""))])),
            Err("Invalid x-match field value <<>>; \
                 expected all, any, all-with-x, or any-with-x"
                .to_owned())
        );
    }

    #[test]
    fn invalid_x_match_type_gets_rabbitmq_text() {
        assert_eq!(
            validate_x_match(&table(&[("x-match", Value::I32(1))])),
            Err("Invalid x-match field type signedint (value 1); expected longstr".to_owned())
        );
        assert_eq!(
            validate_x_match(&table(&[("x-match", Value::ByteArray(b"any".to_vec()))])),
            Err(
                "Invalid x-match field type binary (value <<\"any\">>); expected longstr"
                    .to_owned()
            )
        );
        assert_eq!(
            validate_x_match(&table(&[("x-match", Value::Void)])),
            Err("Invalid x-match field type void (value undefined); expected longstr".to_owned())
        );
    }

    #[test]
    fn erlang_rendering_of_odd_values() {
        assert_eq!(erlang_binary(b"a\"b"), "<<\"a\\\"b\">>");
        assert_eq!(erlang_binary("é".as_bytes()), "<<\"é\"/utf8>>");
        assert_eq!(erlang_binary(&[0, 1, 255]), "<<0,1,255>>");
        assert_eq!(erlang_float(1.5), "1.5");
        assert_eq!(erlang_float(1e20), "1.0e20");
        assert_eq!(
            erlang_term(&Value::Array(vec![s("a"), Value::I32(1)])),
            "[{longstr,<<\"a\">>},{signedint,1}]"
        );
    }
}
