//! Content headers and the basic class's fourteen properties.
//!
//! A content header payload is `class-id:u16 weight:u16 body-size:u64` followed by property
//! flags and the property list. The flags and list are kept as received ([`ContentHeader::
//! raw_properties`], a slice of the frame's payload) so that a message published by an AMQP
//! 0-9-1 client is delivered to AMQP 0-9-1 consumers with the same bytes, without re-encoding;
//! [`decode_properties`] turns them into [`Properties`] when the broker needs to look inside.

use bytes::{BufMut, Bytes, BytesMut};
use warren_core::message::Properties;

use super::primitives::{write_shortstr, write_table, EncodeError, Reader, SyntaxError};

const CONTENT_TYPE: u16 = 1 << 15;
const CONTENT_ENCODING: u16 = 1 << 14;
const HEADERS: u16 = 1 << 13;
const DELIVERY_MODE: u16 = 1 << 12;
const PRIORITY: u16 = 1 << 11;
const CORRELATION_ID: u16 = 1 << 10;
const REPLY_TO: u16 = 1 << 9;
const EXPIRATION: u16 = 1 << 8;
const MESSAGE_ID: u16 = 1 << 7;
const TIMESTAMP: u16 = 1 << 6;
const TYPE: u16 = 1 << 5;
const USER_ID: u16 = 1 << 4;
const APP_ID: u16 = 1 << 3;
const CLUSTER_ID: u16 = 1 << 2;
/// Set when another 16-bit flags word follows.
const CONTINUATION: u16 = 1;

/// Octets before the property flags in a content header payload.
pub const CONTENT_HEADER_PREFIX_SIZE: usize = 12;

/// The empty property list: flags 0, no properties.
pub const EMPTY_PROPERTIES: [u8; 2] = [0, 0];

/// A decoded content header.
#[derive(Debug, Clone, PartialEq)]
pub struct ContentHeader {
    /// The class of the method the content belongs to (60, basic).
    pub class_id: u16,
    /// How many body octets the body frames that follow will carry in total.
    pub body_size: u64,
    /// The decoded properties.
    pub properties: Properties,
    /// Property flags and list exactly as received: a zero-copy slice of the frame payload.
    pub raw_properties: Bytes,
}

/// A content header whose properties have not been decoded: enough to assemble a message
/// and forward it. Decoding the properties can wait until the broker needs one of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawContentHeader {
    /// The class of the method the content belongs to (60, basic).
    pub class_id: u16,
    /// How many body octets follow.
    pub body_size: u64,
    /// Property flags and list exactly as received.
    pub raw_properties: Bytes,
}

impl RawContentHeader {
    /// Reads the fixed part of a content header payload; the properties stay raw. The weight
    /// field is unused since 0-9-1 (spec: "must be zero") and, as RabbitMQ does, not checked.
    pub fn decode(payload: &Bytes) -> Result<RawContentHeader, SyntaxError> {
        let mut reader = Reader::new(payload);
        let (Ok(class_id), Ok(_weight), Ok(body_size)) =
            (reader.short(), reader.short(), reader.longlong())
        else {
            return Err(SyntaxError::new("content header shorter than 14 octets"));
        };
        if reader.remaining().len() < 2 {
            return Err(SyntaxError::new("content header shorter than 14 octets"));
        }
        Ok(RawContentHeader {
            class_id,
            body_size,
            raw_properties: payload.slice(CONTENT_HEADER_PREFIX_SIZE..),
        })
    }
}

impl ContentHeader {
    /// Decodes a content header frame payload, properties included.
    pub fn decode(payload: Bytes) -> Result<ContentHeader, SyntaxError> {
        let raw = RawContentHeader::decode(&payload)?;
        let properties = decode_properties(&raw.raw_properties)?;
        Ok(ContentHeader {
            class_id: raw.class_id,
            body_size: raw.body_size,
            properties,
            raw_properties: raw.raw_properties,
        })
    }
}

/// Decodes property flags and the property list of the basic class.
///
/// Flag words continue while their lowest bit is set; the basic class has only fourteen
/// properties, so any flag set in a continuation word names a property we cannot know the
/// type of, and is a syntax error. Bit 1 of the first word is reserved and ignored, as
/// RabbitMQ ignores it. Octets left after the last property are a syntax error.
pub fn decode_properties(bytes: &[u8]) -> Result<Properties, SyntaxError> {
    let mut reader = Reader::new(bytes);
    let flags = reader
        .short()
        .map_err(|_| SyntaxError::new("content header: truncated property flags"))?;
    let mut word = flags;
    while word & CONTINUATION != 0 {
        word = reader
            .short()
            .map_err(|_| SyntaxError::new("content header: truncated property flags"))?;
        if word & !CONTINUATION != 0 {
            return Err(SyntaxError::new(
                "content header: property flag set beyond the basic class's 14 properties",
            ));
        }
    }
    let mut p = Properties::default();
    if flags & CONTENT_TYPE != 0 {
        p.content_type = Some(
            reader
                .shortstr_owned()
                .map_err(|e| in_property("content-type", e))?,
        );
    }
    if flags & CONTENT_ENCODING != 0 {
        p.content_encoding = Some(
            reader
                .shortstr_owned()
                .map_err(|e| in_property("content-encoding", e))?,
        );
    }
    if flags & HEADERS != 0 {
        p.headers = Some(reader.table().map_err(|e| in_property("headers", e))?);
    }
    if flags & DELIVERY_MODE != 0 {
        p.delivery_mode = Some(
            reader
                .octet()
                .map_err(|e| in_property("delivery-mode", e))?,
        );
    }
    if flags & PRIORITY != 0 {
        p.priority = Some(reader.octet().map_err(|e| in_property("priority", e))?);
    }
    if flags & CORRELATION_ID != 0 {
        p.correlation_id = Some(
            reader
                .shortstr_owned()
                .map_err(|e| in_property("correlation-id", e))?,
        );
    }
    if flags & REPLY_TO != 0 {
        p.reply_to = Some(
            reader
                .shortstr_owned()
                .map_err(|e| in_property("reply-to", e))?,
        );
    }
    if flags & EXPIRATION != 0 {
        p.expiration = Some(
            reader
                .shortstr_owned()
                .map_err(|e| in_property("expiration", e))?,
        );
    }
    if flags & MESSAGE_ID != 0 {
        p.message_id = Some(
            reader
                .shortstr_owned()
                .map_err(|e| in_property("message-id", e))?,
        );
    }
    if flags & TIMESTAMP != 0 {
        p.timestamp = Some(
            reader
                .timestamp()
                .map_err(|e| in_property("timestamp", e))?,
        );
    }
    if flags & TYPE != 0 {
        p.message_type = Some(
            reader
                .shortstr_owned()
                .map_err(|e| in_property("type", e))?,
        );
    }
    if flags & USER_ID != 0 {
        p.user_id = Some(
            reader
                .shortstr_owned()
                .map_err(|e| in_property("user-id", e))?,
        );
    }
    if flags & APP_ID != 0 {
        p.app_id = Some(
            reader
                .shortstr_owned()
                .map_err(|e| in_property("app-id", e))?,
        );
    }
    if flags & CLUSTER_ID != 0 {
        p.cluster_id = Some(
            reader
                .shortstr_owned()
                .map_err(|e| in_property("cluster-id", e))?,
        );
    }
    if !reader.is_empty() {
        return Err(SyntaxError {
            message: format!(
                "content header: {} unexpected octets after the properties",
                reader.remaining().len()
            )
            .into(),
        });
    }
    Ok(p)
}

fn in_property(name: &str, error: SyntaxError) -> SyntaxError {
    SyntaxError {
        message: format!("content header: property {name}: {error}").into(),
    }
}

/// Encodes property flags and the property list. A string longer than 255 bytes (possible
/// for properties that came from another protocol) is an error, and leaves `out` as it was.
pub fn encode_properties(p: &Properties, out: &mut BytesMut) -> Result<(), EncodeError> {
    let start = out.len();
    let result = encode_properties_inner(p, out);
    if result.is_err() {
        out.truncate(start);
    }
    result
}

fn encode_properties_inner(p: &Properties, out: &mut BytesMut) -> Result<(), EncodeError> {
    let mut flags = 0u16;
    let mut flag = |present: bool, bit: u16| {
        if present {
            flags |= bit;
        }
    };
    flag(p.content_type.is_some(), CONTENT_TYPE);
    flag(p.content_encoding.is_some(), CONTENT_ENCODING);
    flag(p.headers.is_some(), HEADERS);
    flag(p.delivery_mode.is_some(), DELIVERY_MODE);
    flag(p.priority.is_some(), PRIORITY);
    flag(p.correlation_id.is_some(), CORRELATION_ID);
    flag(p.reply_to.is_some(), REPLY_TO);
    flag(p.expiration.is_some(), EXPIRATION);
    flag(p.message_id.is_some(), MESSAGE_ID);
    flag(p.timestamp.is_some(), TIMESTAMP);
    flag(p.message_type.is_some(), TYPE);
    flag(p.user_id.is_some(), USER_ID);
    flag(p.app_id.is_some(), APP_ID);
    flag(p.cluster_id.is_some(), CLUSTER_ID);
    out.put_u16(flags);
    let shortstr = |out: &mut BytesMut, v: &Option<String>| match v {
        Some(v) => write_shortstr(out, v),
        None => Ok(()),
    };
    shortstr(out, &p.content_type)?;
    shortstr(out, &p.content_encoding)?;
    if let Some(headers) = &p.headers {
        write_table(out, headers)?;
    }
    if let Some(v) = p.delivery_mode {
        out.put_u8(v);
    }
    if let Some(v) = p.priority {
        out.put_u8(v);
    }
    shortstr(out, &p.correlation_id)?;
    shortstr(out, &p.reply_to)?;
    shortstr(out, &p.expiration)?;
    shortstr(out, &p.message_id)?;
    if let Some(v) = p.timestamp {
        out.put_u64(v);
    }
    shortstr(out, &p.message_type)?;
    shortstr(out, &p.user_id)?;
    shortstr(out, &p.app_id)?;
    shortstr(out, &p.cluster_id)?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::codec::primitives::tests::arb_table;
    use proptest::prelude::*;
    use warren_core::value::{Table, Value};

    /// A content header of the shape pika sends for `BasicProperties(content_type="text/plain",
    /// headers={"x-retry": 3}, delivery_mode=2)` and an 11-byte body (an `l` integer header).
    const PIKA_HEADER: &[u8] = b"\x00\x3c\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0b\
        \xb0\x00\
        \x0atext/plain\
        \x00\x00\x00\x11\x07x-retryl\x00\x00\x00\x00\x00\x00\x00\x03\
        \x02";

    #[test]
    fn decodes_a_content_header_with_headers_table() {
        let payload = Bytes::from_static(PIKA_HEADER);
        let header = ContentHeader::decode(payload.clone()).unwrap();
        assert_eq!(header.class_id, 60);
        assert_eq!(header.body_size, 11);
        assert_eq!(
            header.properties.content_type.as_deref(),
            Some("text/plain")
        );
        assert_eq!(
            header.properties.headers,
            Some(Table(vec![("x-retry".into(), Value::I64(3))]))
        );
        assert_eq!(header.properties.delivery_mode, Some(2));
        assert!(header.properties.is_persistent());
        assert_eq!(&header.raw_properties[..], &PIKA_HEADER[12..]);
        // Zero-copy: the raw properties point into the payload.
        assert_eq!(header.raw_properties.as_ptr(), payload[12..].as_ptr());
        // Re-encoding gives the same bytes.
        let mut out = BytesMut::new();
        encode_properties(&header.properties, &mut out).unwrap();
        assert_eq!(&out[..], &PIKA_HEADER[12..]);
    }

    #[test]
    fn every_property_round_trips_in_spec_order() {
        let p = Properties {
            content_type: Some("application/json".into()),
            content_encoding: Some("gzip".into()),
            headers: Some(Table(vec![("a".into(), Value::string("b"))])),
            delivery_mode: Some(1),
            priority: Some(9),
            correlation_id: Some("corr".into()),
            reply_to: Some("amq.rabbitmq.reply-to".into()),
            expiration: Some("60000".into()),
            message_id: Some("id-1".into()),
            timestamp: Some(1_700_000_000),
            message_type: Some("created".into()),
            user_id: Some("guest".into()),
            app_id: Some("app".into()),
            cluster_id: Some("c".into()),
        };
        let mut out = BytesMut::new();
        encode_properties(&p, &mut out).unwrap();
        assert_eq!(&out[..2], &[0xFF, 0xFC]);
        assert_eq!(decode_properties(&out).unwrap(), p);
    }

    #[test]
    fn property_errors() {
        assert_eq!(
            decode_properties(&[0x80]).unwrap_err().message,
            "content header: truncated property flags"
        );
        assert_eq!(
            decode_properties(&[0x80, 0x00, 0x05, b'a'])
                .unwrap_err()
                .message,
            "content header: property content-type: truncated short string"
        );
        assert_eq!(
            decode_properties(&[0x80, 0x00, 0x01, 0xFF])
                .unwrap_err()
                .message,
            "content header: property content-type: short string is not valid UTF-8"
        );
        assert_eq!(
            decode_properties(&[0x20, 0x00, 0, 0, 0, 3, 1, b'k', b'?'])
                .unwrap_err()
                .message,
            "content header: property headers: unknown field type '?' in field table"
        );
        assert_eq!(
            decode_properties(&[0x00, 0x00, 0x01]).unwrap_err().message,
            "content header: 1 unexpected octets after the properties"
        );
        // A continuation word is accepted when it names no property, refused otherwise.
        assert_eq!(
            decode_properties(&[0x10, 0x01, 0x00, 0x00, 0x02])
                .unwrap()
                .delivery_mode,
            Some(2)
        );
        assert!(decode_properties(&[0x00, 0x01, 0x80, 0x00]).is_err());
        assert!(decode_properties(&[0x00, 0x01]).is_err());
        assert!(RawContentHeader::decode(&Bytes::from_static(&PIKA_HEADER[..13])).is_err());
    }

    #[test]
    fn overlong_property_is_an_encode_error_and_writes_nothing() {
        let p = Properties {
            message_id: Some("m".repeat(300)),
            ..Properties::default()
        };
        let mut out = BytesMut::from(&b"keep"[..]);
        assert_eq!(
            encode_properties(&p, &mut out),
            Err(EncodeError::ShortStringTooLong { len: 300 })
        );
        assert_eq!(&out[..], b"keep");
    }

    pub(crate) fn arb_properties() -> impl Strategy<Value = Properties> {
        let s = || proptest::option::of("[ -~]{0,40}");
        (
            (
                s(),
                s(),
                proptest::option::of(arb_table()),
                any::<Option<u8>>(),
                any::<Option<u8>>(),
            ),
            (s(), s(), s(), s(), any::<Option<u64>>()),
            (s(), s(), s(), s()),
        )
            .prop_map(
                |(
                    (content_type, content_encoding, headers, delivery_mode, priority),
                    (correlation_id, reply_to, expiration, message_id, timestamp),
                    (message_type, user_id, app_id, cluster_id),
                )| Properties {
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
                    message_type,
                    user_id,
                    app_id,
                    cluster_id,
                },
            )
    }

    proptest! {
        #[test]
        fn properties_round_trip(p in arb_properties()) {
            let mut out = BytesMut::new();
            encode_properties(&p, &mut out).unwrap();
            prop_assert_eq!(decode_properties(&out).unwrap(), p);
        }

        #[test]
        fn arbitrary_bytes_never_panic_decode_properties(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode_properties(&bytes);
            let _ = ContentHeader::decode(Bytes::from(bytes));
        }

        #[test]
        fn flags_with_arbitrary_tails_never_panic(flags in any::<u16>(), tail in proptest::collection::vec(any::<u8>(), 0..100)) {
            let mut bytes = flags.to_be_bytes().to_vec();
            bytes.extend_from_slice(&tail);
            let _ = decode_properties(&bytes);
        }
    }
}
