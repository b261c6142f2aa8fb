//! The AMQP 0-9-1 wire primitives: integers, short and long strings, packed bits and field
//! tables/arrays in RabbitMQ's dialect of the field type letters.
//!
//! Decoding goes through [`Reader`], a cursor over a borrowed slice that never panics: every
//! read checks the remaining length first and reports a [`SyntaxError`] naming what was cut
//! short. Encoding writes straight into a `BytesMut`; paths that may carry client data (short
//! strings, tables) return an [`EncodeError`] instead of panicking on oversized values.
//!
//! Field type letters follow RabbitMQ (rabbit_binary_parser / rabbit_binary_generator), not
//! the 0-9-1 spec's table, which RabbitMQ documents as wrong in its errata:
//!
//! | letter | type | [`Value`] |
//! | --- | --- | --- |
//! | `t` | boolean (any non-zero octet is true) | `Bool` |
//! | `b` / `B` | signed / unsigned octet | `I8` / `U8` |
//! | `s` / `u` | signed / unsigned 16-bit | `I16` / `U16` |
//! | `I` / `i` | signed / unsigned 32-bit | `I32` / `U32` |
//! | `l` | signed 64-bit | `I64` |
//! | `f` / `d` | IEEE 754 single / double | `F32` / `F64` |
//! | `D` | decimal: scale octet + unsigned 32-bit value | `Decimal` |
//! | `S` | long string | `LongString` |
//! | `A` | field array | `Array` |
//! | `T` | timestamp (unsigned 64-bit seconds) | `Timestamp` |
//! | `F` | nested field table | `Table` |
//! | `V` | void (no payload) | `Void` |
//! | `x` | byte array (long-string framed) | `ByteArray` |

use std::borrow::Cow;
use std::fmt;

use bytes::{BufMut, BytesMut};
use warren_core::value::{Table, Value};

/// How deeply tables and arrays may nest inside each other before decoding gives up.
/// Bounds the recursion so a hostile frame of nested `F`/`A` headers cannot exhaust the stack.
pub const MAX_NESTING_DEPTH: usize = 64;

/// The longest short string the wire format can carry (its length is one octet).
pub const SHORTSTR_MAX: usize = 255;

/// Malformed input: the bytes do not follow the AMQP 0-9-1 grammar. A session answers it with
/// 502 SYNTAX_ERROR (or 501 FRAME_ERROR, as RabbitMQ does for undecodable method fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// What was wrong, e.g. "truncated field table". Static on every common path so that
    /// reporting an error costs no allocation.
    pub message: Cow<'static, str>,
}

impl SyntaxError {
    /// An error with a fixed message.
    pub const fn new(message: &'static str) -> Self {
        SyntaxError {
            message: Cow::Borrowed(message),
        }
    }
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for SyntaxError {}

/// A value that the wire format cannot represent, found while encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// A short string (a name, a table key, a property) longer than 255 bytes.
    ShortStringTooLong { len: usize },
    /// A long string, table or array longer than 2^32 - 1 bytes.
    TooLong { len: usize },
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::ShortStringTooLong { len } => {
                write!(f, "short string of {len} bytes is longer than 255 bytes")
            }
            EncodeError::TooLong { len } => {
                write!(f, "value of {len} bytes is longer than 4294967295 bytes")
            }
        }
    }
}

impl std::error::Error for EncodeError {}

const TRUNCATED_OCTET: SyntaxError = SyntaxError::new("truncated octet");
const TRUNCATED_SHORT: SyntaxError = SyntaxError::new("truncated short integer");
const TRUNCATED_LONG: SyntaxError = SyntaxError::new("truncated long integer");
const TRUNCATED_LONGLONG: SyntaxError = SyntaxError::new("truncated long-long integer");
const TRUNCATED_SHORTSTR: SyntaxError = SyntaxError::new("truncated short string");
const TRUNCATED_LONGSTR: SyntaxError = SyntaxError::new("truncated long string");
const INVALID_UTF8: SyntaxError = SyntaxError::new("short string is not valid UTF-8");
const TRUNCATED_TABLE: SyntaxError = SyntaxError::new("truncated field table");
const TRUNCATED_ARRAY: SyntaxError = SyntaxError::new("truncated field array");
const INVALID_UTF8_KEY: SyntaxError = SyntaxError::new("field table key is not valid UTF-8");
const TOO_DEEP: SyntaxError = SyntaxError::new("field tables/arrays nested deeper than 64 levels");

/// A cursor over received bytes. Every read checks the remaining length, so no input can make
/// it panic. Consecutive bit reads share one octet, as the spec packs them; any other read
/// ends the current bit octet.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
    /// The octet bits are currently being taken from.
    bits: u8,
    /// Index of the next bit in `bits`; 8 means "read a new octet for the next bit".
    bit_index: u8,
}

impl<'a> Reader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader {
            rest: bytes,
            bits: 0,
            bit_index: 8,
        }
    }

    /// The bytes not yet read.
    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }

    /// Whether every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    #[inline]
    fn take(&mut self, n: usize, error: &SyntaxError) -> Result<&'a [u8], SyntaxError> {
        self.bit_index = 8;
        if self.rest.len() < n {
            return Err(error.clone());
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    #[inline]
    fn array<const N: usize>(&mut self, error: &SyntaxError) -> Result<[u8; N], SyntaxError> {
        let bytes = self.take(N, error)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// An octet.
    #[inline]
    pub fn octet(&mut self) -> Result<u8, SyntaxError> {
        Ok(self.array::<1>(&TRUNCATED_OCTET)?[0])
    }

    /// A 16-bit unsigned integer, network order.
    #[inline]
    pub fn short(&mut self) -> Result<u16, SyntaxError> {
        Ok(u16::from_be_bytes(self.array(&TRUNCATED_SHORT)?))
    }

    /// A 32-bit unsigned integer, network order.
    #[inline]
    pub fn long(&mut self) -> Result<u32, SyntaxError> {
        Ok(u32::from_be_bytes(self.array(&TRUNCATED_LONG)?))
    }

    /// A 64-bit unsigned integer, network order.
    #[inline]
    pub fn longlong(&mut self) -> Result<u64, SyntaxError> {
        Ok(u64::from_be_bytes(self.array(&TRUNCATED_LONGLONG)?))
    }

    /// A timestamp: seconds since the epoch as a 64-bit unsigned integer.
    #[inline]
    pub fn timestamp(&mut self) -> Result<u64, SyntaxError> {
        self.longlong()
    }

    /// One bit. The first bit of a run reads an octet; the next seven come from it.
    #[inline]
    pub fn bit(&mut self) -> Result<bool, SyntaxError> {
        if self.bit_index >= 8 {
            self.bits = self.octet()?;
            self.bit_index = 0;
        }
        let bit = self.bits & (1 << self.bit_index) != 0;
        self.bit_index += 1;
        Ok(bit)
    }

    /// A short string as borrowed UTF-8.
    #[inline]
    pub fn shortstr(&mut self) -> Result<&'a str, SyntaxError> {
        let len = self.array::<1>(&TRUNCATED_SHORTSTR)?[0] as usize;
        let bytes = self.take(len, &TRUNCATED_SHORTSTR)?;
        std::str::from_utf8(bytes).map_err(|_| INVALID_UTF8)
    }

    /// A short string as an owned `String`.
    #[inline]
    pub fn shortstr_owned(&mut self) -> Result<String, SyntaxError> {
        self.shortstr().map(str::to_owned)
    }

    /// A long string's bytes, borrowed.
    #[inline]
    pub fn longstr(&mut self) -> Result<&'a [u8], SyntaxError> {
        let len = u32::from_be_bytes(self.array(&TRUNCATED_LONGSTR)?) as usize;
        self.take(len, &TRUNCATED_LONGSTR)
    }

    /// A long string's bytes, owned.
    #[inline]
    pub fn longstr_owned(&mut self) -> Result<Vec<u8>, SyntaxError> {
        self.longstr().map(<[u8]>::to_vec)
    }

    /// A field table.
    pub fn table(&mut self) -> Result<Table, SyntaxError> {
        let len = u32::from_be_bytes(self.array(&TRUNCATED_TABLE)?) as usize;
        let body = self.take(len, &TRUNCATED_TABLE)?;
        parse_table_body(body, 0)
    }
}

/// Decodes a field table, length prefix included, requiring that it fills `bytes` exactly.
pub fn decode_table(bytes: &[u8]) -> Result<Table, SyntaxError> {
    let mut reader = Reader::new(bytes);
    let table = reader.table()?;
    if !reader.is_empty() {
        return Err(SyntaxError::new("unexpected octets after field table"));
    }
    Ok(table)
}

fn parse_table_body(mut body: &[u8], depth: usize) -> Result<Table, SyntaxError> {
    if depth >= MAX_NESTING_DEPTH {
        return Err(TOO_DEEP);
    }
    let mut entries = Vec::new();
    while let Some((&key_len, rest)) = body.split_first() {
        let key_len = key_len as usize;
        if rest.len() < key_len {
            return Err(TRUNCATED_TABLE);
        }
        let (key, rest) = rest.split_at(key_len);
        let key = std::str::from_utf8(key).map_err(|_| INVALID_UTF8_KEY)?;
        let (value, rest) = parse_value(rest, depth, TRUNCATED_TABLE)?;
        entries.push((key.to_owned(), value));
        body = rest;
    }
    Ok(Table(entries))
}

fn parse_array_body(mut body: &[u8], depth: usize) -> Result<Vec<Value>, SyntaxError> {
    if depth >= MAX_NESTING_DEPTH {
        return Err(TOO_DEEP);
    }
    let mut values = Vec::new();
    while !body.is_empty() {
        let (value, rest) = parse_value(body, depth, TRUNCATED_ARRAY)?;
        values.push(value);
        body = rest;
    }
    Ok(values)
}

#[inline]
fn split<'a, const N: usize>(
    bytes: &'a [u8],
    truncated: &SyntaxError,
) -> Result<([u8; N], &'a [u8]), SyntaxError> {
    if bytes.len() < N {
        return Err(truncated.clone());
    }
    let (head, tail) = bytes.split_at(N);
    let mut out = [0u8; N];
    out.copy_from_slice(head);
    Ok((out, tail))
}

/// Splits a 32-bit length-prefixed block off `bytes`.
#[inline]
fn split_block<'a>(
    bytes: &'a [u8],
    truncated: &SyntaxError,
) -> Result<(&'a [u8], &'a [u8]), SyntaxError> {
    let (len, rest) = split::<4>(bytes, truncated)?;
    let len = u32::from_be_bytes(len) as usize;
    if rest.len() < len {
        return Err(truncated.clone());
    }
    Ok(rest.split_at(len))
}

/// Parses one type letter and its value; `truncated` names the enclosing container so that the
/// error says "truncated field table" or "truncated field array".
fn parse_value(
    bytes: &[u8],
    depth: usize,
    truncated: SyntaxError,
) -> Result<(Value, &[u8]), SyntaxError> {
    let (&letter, rest) = bytes.split_first().ok_or_else(|| truncated.clone())?;
    let t = &truncated;
    Ok(match letter {
        b't' => {
            let ([v], rest) = split::<1>(rest, t)?;
            (Value::Bool(v != 0), rest)
        }
        b'b' => {
            let (v, rest) = split::<1>(rest, t)?;
            (Value::I8(i8::from_be_bytes(v)), rest)
        }
        b'B' => {
            let ([v], rest) = split::<1>(rest, t)?;
            (Value::U8(v), rest)
        }
        b's' => {
            let (v, rest) = split(rest, t)?;
            (Value::I16(i16::from_be_bytes(v)), rest)
        }
        b'u' => {
            let (v, rest) = split(rest, t)?;
            (Value::U16(u16::from_be_bytes(v)), rest)
        }
        b'I' => {
            let (v, rest) = split(rest, t)?;
            (Value::I32(i32::from_be_bytes(v)), rest)
        }
        b'i' => {
            let (v, rest) = split(rest, t)?;
            (Value::U32(u32::from_be_bytes(v)), rest)
        }
        b'l' => {
            let (v, rest) = split(rest, t)?;
            (Value::I64(i64::from_be_bytes(v)), rest)
        }
        b'f' => {
            let (v, rest) = split(rest, t)?;
            (Value::F32(f32::from_be_bytes(v)), rest)
        }
        b'd' => {
            let (v, rest) = split(rest, t)?;
            (Value::F64(f64::from_be_bytes(v)), rest)
        }
        b'D' => {
            let ([scale], rest) = split::<1>(rest, t)?;
            let (v, rest) = split(rest, t)?;
            (
                Value::Decimal {
                    scale,
                    value: u32::from_be_bytes(v),
                },
                rest,
            )
        }
        b'T' => {
            let (v, rest) = split(rest, t)?;
            (Value::Timestamp(u64::from_be_bytes(v)), rest)
        }
        b'V' => (Value::Void, rest),
        b'S' => {
            let (block, rest) = split_block(rest, t)?;
            (Value::LongString(block.to_vec()), rest)
        }
        b'x' => {
            let (block, rest) = split_block(rest, t)?;
            (Value::ByteArray(block.to_vec()), rest)
        }
        b'F' => {
            let (block, rest) = split_block(rest, t)?;
            (Value::Table(parse_table_body(block, depth + 1)?), rest)
        }
        b'A' => {
            let (block, rest) = split_block(rest, t)?;
            (Value::Array(parse_array_body(block, depth + 1)?), rest)
        }
        other => {
            let container = if truncated == TRUNCATED_ARRAY {
                "field array"
            } else {
                "field table"
            };
            return Err(SyntaxError {
                message: Cow::Owned(format!(
                    "unknown field type {} in {container}",
                    describe_letter(other)
                )),
            });
        }
    })
}

fn describe_letter(letter: u8) -> String {
    if letter.is_ascii_graphic() {
        format!("'{}'", letter as char)
    } else {
        format!("0x{letter:02X}")
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------------

/// Cuts `text` to at most 255 bytes at a character boundary, for broker-generated short
/// strings (reply texts, names echoed back) that must never fail to encode.
#[inline]
pub fn truncate_shortstr(text: &str) -> &str {
    if text.len() <= SHORTSTR_MAX {
        return text;
    }
    let mut end = SHORTSTR_MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Writes a short string, refusing one longer than 255 bytes.
#[inline]
pub fn write_shortstr(out: &mut BytesMut, text: &str) -> Result<(), EncodeError> {
    let len = u8::try_from(text.len())
        .map_err(|_| EncodeError::ShortStringTooLong { len: text.len() })?;
    out.put_u8(len);
    out.put_slice(text.as_bytes());
    Ok(())
}

/// Writes a short string cut to 255 bytes (see [`truncate_shortstr`]); never fails.
#[inline]
pub fn write_shortstr_truncated(out: &mut BytesMut, text: &str) {
    let text = truncate_shortstr(text);
    // The length fits: truncate_shortstr returns at most 255 bytes.
    out.put_u8(text.len() as u8);
    out.put_slice(text.as_bytes());
}

/// Writes a long string.
#[inline]
pub fn write_longstr(out: &mut BytesMut, bytes: &[u8]) -> Result<(), EncodeError> {
    let len = u32::try_from(bytes.len()).map_err(|_| EncodeError::TooLong { len: bytes.len() })?;
    out.put_u32(len);
    out.put_slice(bytes);
    Ok(())
}

/// Writes a field table with its 32-bit length prefix. On error `out` may hold a partial
/// table; callers that must leave `out` untouched truncate it back (see `Method::encode`).
pub fn write_table(out: &mut BytesMut, table: &Table) -> Result<(), EncodeError> {
    let start = out.len();
    out.put_u32(0);
    for (key, value) in &table.0 {
        write_shortstr(out, key)?;
        write_value(out, value)?;
    }
    patch_length(out, start)
}

/// Writes a field array with its 32-bit length prefix.
pub fn write_array(out: &mut BytesMut, values: &[Value]) -> Result<(), EncodeError> {
    let start = out.len();
    out.put_u32(0);
    for value in values {
        write_value(out, value)?;
    }
    patch_length(out, start)
}

/// Fills in the 32-bit length placeholder at `start` with the number of bytes written after it.
fn patch_length(out: &mut BytesMut, start: usize) -> Result<(), EncodeError> {
    let len = out.len() - start - 4;
    let len32 = u32::try_from(len).map_err(|_| EncodeError::TooLong { len })?;
    out[start..start + 4].copy_from_slice(&len32.to_be_bytes());
    Ok(())
}

/// Writes one value with its type letter.
pub fn write_value(out: &mut BytesMut, value: &Value) -> Result<(), EncodeError> {
    match value {
        Value::Bool(v) => {
            out.put_u8(b't');
            out.put_u8(u8::from(*v));
        }
        Value::I8(v) => {
            out.put_u8(b'b');
            out.put_i8(*v);
        }
        Value::U8(v) => {
            out.put_u8(b'B');
            out.put_u8(*v);
        }
        Value::I16(v) => {
            out.put_u8(b's');
            out.put_i16(*v);
        }
        Value::U16(v) => {
            out.put_u8(b'u');
            out.put_u16(*v);
        }
        Value::I32(v) => {
            out.put_u8(b'I');
            out.put_i32(*v);
        }
        Value::U32(v) => {
            out.put_u8(b'i');
            out.put_u32(*v);
        }
        Value::I64(v) => {
            out.put_u8(b'l');
            out.put_i64(*v);
        }
        Value::F32(v) => {
            out.put_u8(b'f');
            out.put_f32(*v);
        }
        Value::F64(v) => {
            out.put_u8(b'd');
            out.put_f64(*v);
        }
        Value::Decimal { scale, value } => {
            out.put_u8(b'D');
            out.put_u8(*scale);
            out.put_u32(*value);
        }
        Value::LongString(bytes) => {
            out.put_u8(b'S');
            write_longstr(out, bytes)?;
        }
        Value::Array(values) => {
            out.put_u8(b'A');
            write_array(out, values)?;
        }
        Value::Timestamp(v) => {
            out.put_u8(b'T');
            out.put_u64(*v);
        }
        Value::Table(table) => {
            out.put_u8(b'F');
            write_table(out, table)?;
        }
        Value::Void => out.put_u8(b'V'),
        Value::ByteArray(bytes) => {
            out.put_u8(b'x');
            write_longstr(out, bytes)?;
        }
    }
    Ok(())
}

/// Writes fields in order, packing runs of consecutive bits into octets as the spec requires.
pub struct Writer<'a> {
    out: &'a mut BytesMut,
    /// Position of the octet the current bit run writes into, and the next bit's index.
    bit_octet: Option<(usize, u8)>,
}

impl<'a> Writer<'a> {
    /// A writer appending to `out`.
    pub fn new(out: &'a mut BytesMut) -> Self {
        Writer {
            out,
            bit_octet: None,
        }
    }

    /// The buffer being written, ending any bit run.
    #[inline]
    fn plain(&mut self) -> &mut BytesMut {
        self.bit_octet = None;
        self.out
    }

    /// An octet.
    #[inline]
    pub fn octet(&mut self, v: u8) {
        self.plain().put_u8(v);
    }

    /// A 16-bit integer.
    #[inline]
    pub fn short(&mut self, v: u16) {
        self.plain().put_u16(v);
    }

    /// A 32-bit integer.
    #[inline]
    pub fn long(&mut self, v: u32) {
        self.plain().put_u32(v);
    }

    /// A 64-bit integer.
    #[inline]
    pub fn longlong(&mut self, v: u64) {
        self.plain().put_u64(v);
    }

    /// One bit; up to eight consecutive bits share an octet.
    #[inline]
    pub fn bit(&mut self, v: bool) {
        match self.bit_octet {
            Some((pos, index)) if index < 8 => {
                if v {
                    self.out[pos] |= 1 << index;
                }
                self.bit_octet = Some((pos, index + 1));
            }
            _ => {
                let pos = self.out.len();
                self.out.put_u8(u8::from(v));
                self.bit_octet = Some((pos, 1));
            }
        }
    }

    /// A short string (at most 255 bytes).
    #[inline]
    pub fn shortstr(&mut self, v: &str) -> Result<(), EncodeError> {
        write_shortstr(self.plain(), v)
    }

    /// A long string.
    #[inline]
    pub fn longstr(&mut self, v: &[u8]) -> Result<(), EncodeError> {
        write_longstr(self.plain(), v)
    }

    /// A field table.
    #[inline]
    pub fn table(&mut self, v: &Table) -> Result<(), EncodeError> {
        write_table(self.plain(), v)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn encoded(table: &Table) -> Vec<u8> {
        let mut out = BytesMut::new();
        write_table(&mut out, table).expect("encodable");
        out.to_vec()
    }

    #[test]
    fn every_field_type_letter_decodes_as_rabbitmq_reads_it() {
        let mut body = Vec::new();
        for (key, letter, payload) in [
            ("t", b't', vec![2]),
            ("b", b'b', vec![0xFF]),
            ("B", b'B', vec![0xFF]),
            ("s", b's', vec![0xFF, 0xFE]),
            ("u", b'u', vec![0xFF, 0xFE]),
            ("I", b'I', vec![0xFF, 0xFF, 0xFF, 0xFE]),
            ("i", b'i', vec![0xFF, 0xFF, 0xFF, 0xFE]),
            ("l", b'l', (-3i64).to_be_bytes().to_vec()),
            ("f", b'f', 1.5f32.to_be_bytes().to_vec()),
            ("d", b'd', 2.25f64.to_be_bytes().to_vec()),
            ("D", b'D', vec![2, 0, 0, 0x30, 0x39]),
            ("S", b'S', vec![0, 0, 0, 2, b'h', b'i']),
            ("A", b'A', vec![0, 0, 0, 3, b'b', 1, b'V']),
            ("T", b'T', 1_700_000_000u64.to_be_bytes().to_vec()),
            ("F", b'F', vec![0, 0, 0, 3, 1, b'k', b'V']),
            ("V", b'V', vec![]),
            ("x", b'x', vec![0, 0, 0, 1, 0xAB]),
        ] {
            body.push(key.len() as u8);
            body.extend_from_slice(key.as_bytes());
            body.push(letter);
            body.extend_from_slice(&payload);
        }
        let mut bytes = (body.len() as u32).to_be_bytes().to_vec();
        bytes.extend_from_slice(&body);
        let table = decode_table(&bytes).expect("valid table");
        let expected = Table(vec![
            ("t".into(), Value::Bool(true)),
            ("b".into(), Value::I8(-1)),
            ("B".into(), Value::U8(255)),
            ("s".into(), Value::I16(-2)),
            ("u".into(), Value::U16(0xFFFE)),
            ("I".into(), Value::I32(-2)),
            ("i".into(), Value::U32(0xFFFF_FFFE)),
            ("l".into(), Value::I64(-3)),
            ("f".into(), Value::F32(1.5)),
            ("d".into(), Value::F64(2.25)),
            (
                "D".into(),
                Value::Decimal {
                    scale: 2,
                    value: 12345,
                },
            ),
            ("S".into(), Value::LongString(b"hi".to_vec())),
            ("A".into(), Value::Array(vec![Value::I8(1), Value::Void])),
            ("T".into(), Value::Timestamp(1_700_000_000)),
            (
                "F".into(),
                Value::Table(Table(vec![("k".into(), Value::Void)])),
            ),
            ("V".into(), Value::Void),
            ("x".into(), Value::ByteArray(vec![0xAB])),
        ]);
        assert_eq!(table, expected);
        // Re-encoding gives the same bytes except the boolean, which we normalise to 1.
        let mut normalised = bytes.clone();
        normalised[4 + 3] = 1;
        assert_eq!(encoded(&table), normalised);
    }

    #[test]
    fn unknown_type_letter_is_a_syntax_error_naming_the_letter() {
        let bytes = [0, 0, 0, 3, 1, b'k', b'Z'];
        let error = decode_table(&bytes).unwrap_err();
        assert_eq!(error.message, "unknown field type 'Z' in field table");
        let bytes = [0, 0, 0, 8, 1, b'k', b'A', 0, 0, 0, 1, 0];
        let error = decode_table(&bytes).unwrap_err();
        assert_eq!(error.message, "unknown field type 0x00 in field array");
    }

    #[test]
    fn truncated_tables_are_syntax_errors() {
        let full = encoded(&Table(vec![
            ("key".into(), Value::LongString(b"value".to_vec())),
            ("n".into(), Value::I64(7)),
        ]));
        for cut in 0..full.len() {
            assert!(decode_table(&full[..cut]).is_err(), "cut at {cut}");
        }
        // A table length that overruns its entries' real size.
        let bytes = [0, 0, 0, 4, 1, b'k', b'I', 0];
        assert_eq!(
            decode_table(&bytes).unwrap_err().message,
            "truncated field table"
        );
        // A nested long string claiming more than its table holds.
        let bytes = [0, 0, 0, 7, 1, b'k', b'S', 0, 0, 0, 9];
        assert_eq!(
            decode_table(&bytes).unwrap_err().message,
            "truncated field table"
        );
    }

    #[test]
    fn invalid_utf8_key_is_a_syntax_error() {
        let bytes = [0, 0, 0, 3, 1, 0xFF, b'V'];
        assert_eq!(
            decode_table(&bytes).unwrap_err().message,
            "field table key is not valid UTF-8"
        );
    }

    #[test]
    fn nesting_is_bounded() {
        fn nested(depth: usize) -> Vec<u8> {
            // Innermost: empty table; each level wraps it in an array holding one table value.
            let mut table = vec![0, 0, 0, 0];
            for _ in 0..depth {
                let mut body = vec![1, b'k', b'F'];
                body.extend_from_slice(&table);
                table = (body.len() as u32).to_be_bytes().to_vec();
                table.extend_from_slice(&body);
            }
            table
        }
        assert!(decode_table(&nested(MAX_NESTING_DEPTH - 1)).is_ok());
        assert_eq!(
            decode_table(&nested(MAX_NESTING_DEPTH)).unwrap_err(),
            TOO_DEEP
        );
        // Deep enough to overflow the stack if recursion were unbounded.
        assert!(decode_table(&nested(100_000)).is_err());
    }

    #[test]
    fn bits_pack_eight_to_an_octet_and_restart_after_other_fields() {
        let mut out = BytesMut::new();
        let mut writer = Writer::new(&mut out);
        for i in 0..9 {
            writer.bit(i % 2 == 0);
        }
        writer.short(0x0102);
        writer.bit(true);
        assert_eq!(&out[..], &[0b0101_0101, 0b0000_0001, 1, 2, 1]);
        let mut reader = Reader::new(&out);
        for i in 0..9 {
            assert_eq!(reader.bit().unwrap(), i % 2 == 0);
        }
        assert_eq!(reader.short().unwrap(), 0x0102);
        assert!(reader.bit().unwrap());
        assert!(reader.is_empty());
        // The rest of the last bit octet is still readable; past it nothing is.
        assert!(!reader.bit().unwrap());
        assert!(reader.octet().is_err());
    }

    #[test]
    fn shortstr_limits() {
        let mut out = BytesMut::new();
        let long = "é".repeat(200); // 400 bytes
        assert_eq!(
            write_shortstr(&mut out, &long),
            Err(EncodeError::ShortStringTooLong { len: 400 })
        );
        assert!(out.is_empty());
        write_shortstr_truncated(&mut out, &long);
        // 255 is in the middle of a two-byte character, so 254 bytes are kept.
        assert_eq!(out[0], 254);
        assert_eq!(Reader::new(&out).shortstr().unwrap(), "é".repeat(127));
        let mut out = BytesMut::new();
        write_shortstr(&mut out, &"a".repeat(255)).unwrap();
        assert_eq!(out.len(), 256);
        assert_eq!(Reader::new(&[2, 0xC3, 0x28]).shortstr(), Err(INVALID_UTF8));
        assert_eq!(Reader::new(&[3, b'a']).shortstr(), Err(TRUNCATED_SHORTSTR));
    }

    #[test]
    fn overlong_table_key_is_an_encode_error() {
        let table = Table(vec![("k".repeat(256), Value::Void)]);
        let mut out = BytesMut::new();
        assert_eq!(
            write_table(&mut out, &table),
            Err(EncodeError::ShortStringTooLong { len: 256 })
        );
    }

    /// Arbitrary values with every variant, nesting a few levels. Floats exclude NaN so that
    /// round trips can compare with `==`.
    pub(crate) fn arb_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            any::<bool>().prop_map(Value::Bool),
            any::<i8>().prop_map(Value::I8),
            any::<u8>().prop_map(Value::U8),
            any::<i16>().prop_map(Value::I16),
            any::<u16>().prop_map(Value::U16),
            any::<i32>().prop_map(Value::I32),
            any::<u32>().prop_map(Value::U32),
            any::<i64>().prop_map(Value::I64),
            (-1e30f32..1e30f32).prop_map(Value::F32),
            (-1e300f64..1e300f64).prop_map(Value::F64),
            (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| Value::Decimal { scale, value }),
            proptest::collection::vec(any::<u8>(), 0..20).prop_map(Value::LongString),
            any::<u64>().prop_map(Value::Timestamp),
            Just(Value::Void),
            proptest::collection::vec(any::<u8>(), 0..20).prop_map(Value::ByteArray),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::vec(("[a-z-]{0,12}", inner), 0..4)
                    .prop_map(|entries| Value::Table(Table(entries))),
            ]
        })
    }

    pub(crate) fn arb_table() -> impl Strategy<Value = Table> {
        proptest::collection::vec(("[a-zA-Z0-9_.-]{0,20}", arb_value()), 0..6).prop_map(Table)
    }

    proptest! {
        #[test]
        fn tables_round_trip(table in arb_table()) {
            let bytes = encoded(&table);
            prop_assert_eq!(decode_table(&bytes).unwrap(), table);
        }

        #[test]
        fn arbitrary_bytes_never_panic_table_decoding(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_table(&bytes);
            let mut with_length = (bytes.len() as u32).to_be_bytes().to_vec();
            with_length.extend_from_slice(&bytes);
            let _ = decode_table(&with_length);
        }
    }
}
