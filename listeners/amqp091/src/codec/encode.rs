//! Writing frames: the hot path of every delivery.
//!
//! Everything here appends straight into the connection's output `BytesMut` so the driver can
//! send many frames per write. A delivery (`basic.deliver` + content header + body frames)
//! is written by [`write_deliver`] without building a [`Method`]: the sizes are known up
//! front, so it reserves once and copies each piece once. Properties go out as the raw bytes
//! the publisher sent, never re-encoded.
//!
//! Strings on these fast paths (consumer tags, exchange names, routing keys, reply texts) are
//! the broker's own or came in as short strings, so they fit; should one be longer than 255
//! bytes anyway, it is truncated at a character boundary (see `truncate_shortstr`) rather than
//! failing or panicking, so a delivery is never lost to an encoding error.

use bytes::{BufMut, BytesMut};

use super::frame::{
    FRAME_BODY, FRAME_END, FRAME_HEADER, FRAME_HEADER_SIZE, FRAME_METHOD, FRAME_OVERHEAD,
};
use super::method::{Method, CLASS_BASIC};
use super::primitives::{truncate_shortstr, EncodeError};
use super::properties::CONTENT_HEADER_PREFIX_SIZE;

/// Writes a method frame. The size field is reserved, the method encoded in place, and the
/// size patched afterwards, so nothing is encoded twice. On error (a field the wire cannot
/// carry, see [`Method::encode`]) `out` is left as it was.
pub fn write_method_frame(
    out: &mut BytesMut,
    channel: u16,
    method: &Method,
) -> Result<(), EncodeError> {
    let start = out.len();
    out.reserve(64);
    out.put_u8(FRAME_METHOD);
    out.put_u16(channel);
    out.put_u32(0);
    if let Err(error) = method.encode(out) {
        out.truncate(start);
        return Err(error);
    }
    let size = out.len() - start - FRAME_HEADER_SIZE;
    let Ok(size32) = u32::try_from(size) else {
        out.truncate(start);
        return Err(EncodeError::TooLong { len: size });
    };
    out[start + 3..start + 7].copy_from_slice(&size32.to_be_bytes());
    out.put_u8(FRAME_END);
    Ok(())
}

/// The most body octets one body frame may carry under `frame_max` (0 = unlimited, which
/// still means at most 2^32 - 1 per frame: the size field is 32 bits).
#[inline]
fn body_chunk_size(frame_max: u32) -> usize {
    match frame_max {
        0 => u32::MAX as usize,
        // Never 0, so that a nonsensical frame_max (under 9, below the 4096 minimum that
        // tuning enforces) cannot make the split loop forever.
        n => (n as usize).saturating_sub(FRAME_OVERHEAD).max(1),
    }
}

/// Bytes that a content header plus the body frames for `body_len` will take.
#[inline]
fn content_size(raw_properties: &[u8], body_len: usize, chunk: usize) -> usize {
    let header = FRAME_OVERHEAD + CONTENT_HEADER_PREFIX_SIZE + raw_properties.len();
    header + body_len + body_len.div_ceil(chunk) * FRAME_OVERHEAD
}

/// Writes a content header frame with the given property bytes (flags + list, as in
/// `RawContentHeader::raw_properties`). `raw_properties` must fit a frame, which properties
/// that arrived in one always do.
#[inline]
pub fn write_content_header(
    out: &mut BytesMut,
    channel: u16,
    class_id: u16,
    body_size: u64,
    raw_properties: &[u8],
) {
    out.put_u8(FRAME_HEADER);
    out.put_u16(channel);
    out.put_u32((CONTENT_HEADER_PREFIX_SIZE + raw_properties.len()) as u32);
    out.put_u16(class_id);
    out.put_u16(0); // weight: unused, must be zero
    out.put_u64(body_size);
    out.put_slice(raw_properties);
    out.put_u8(FRAME_END);
}

/// Writes body frames, each carrying at most `chunk` octets; nothing for an empty body.
#[inline]
fn put_body(out: &mut BytesMut, channel: u16, body: &[u8], chunk: usize) {
    for piece in body.chunks(chunk) {
        out.put_u8(FRAME_BODY);
        out.put_u16(channel);
        // chunk <= u32::MAX, so the length fits.
        out.put_u32(piece.len() as u32);
        out.put_slice(piece);
        out.put_u8(FRAME_END);
    }
}

/// Writes a content header frame carrying `raw_properties`, then the body split into body
/// frames of at most `frame_max` octets each, framing included (0 = unlimited). An empty
/// body gets no body frame.
pub fn write_content(
    out: &mut BytesMut,
    channel: u16,
    class_id: u16,
    raw_properties: &[u8],
    body: &[u8],
    frame_max: u32,
) {
    let chunk = body_chunk_size(frame_max);
    out.reserve(content_size(raw_properties, body.len(), chunk));
    write_content_header(out, channel, class_id, body.len() as u64, raw_properties);
    put_body(out, channel, body, chunk);
}

/// Starts a method frame whose payload size is known: type, channel, size, class and
/// method ids.
#[inline]
fn put_method_start(out: &mut BytesMut, channel: u16, payload_size: usize, method_id: u16) {
    out.put_u8(FRAME_METHOD);
    out.put_u16(channel);
    // Three short strings and a few integers: always far below 4 GiB.
    out.put_u32(payload_size as u32);
    out.put_u16(CLASS_BASIC);
    out.put_u16(method_id);
}

#[inline]
fn put_shortstr(out: &mut BytesMut, text: &str) {
    out.put_u8(text.len() as u8);
    out.put_slice(text.as_bytes());
}

/// Writes basic.deliver, its content header (with the publisher's property bytes) and the
/// body frames, in one pass with one reservation. Strings over 255 bytes are truncated (see
/// the module doc).
#[allow(clippy::too_many_arguments)] // The hot path takes the pieces as they lie in the broker.
pub fn write_deliver(
    out: &mut BytesMut,
    channel: u16,
    consumer_tag: &str,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
    raw_properties: &[u8],
    body: &[u8],
    frame_max: u32,
) {
    let consumer_tag = truncate_shortstr(consumer_tag);
    let exchange = truncate_shortstr(exchange);
    let routing_key = truncate_shortstr(routing_key);
    let payload_size =
        4 + 1 + consumer_tag.len() + 8 + 1 + 1 + exchange.len() + 1 + routing_key.len();
    let chunk = body_chunk_size(frame_max);
    out.reserve(payload_size + FRAME_OVERHEAD + content_size(raw_properties, body.len(), chunk));
    put_method_start(out, channel, payload_size, 60);
    put_shortstr(out, consumer_tag);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(redelivered));
    put_shortstr(out, exchange);
    put_shortstr(out, routing_key);
    out.put_u8(FRAME_END);
    write_content_header(out, channel, CLASS_BASIC, body.len() as u64, raw_properties);
    put_body(out, channel, body, chunk);
}

/// Writes basic.get-ok, its content header and body frames; like [`write_deliver`].
#[allow(clippy::too_many_arguments)] // The hot path takes the pieces as they lie in the broker.
pub fn write_get_ok(
    out: &mut BytesMut,
    channel: u16,
    delivery_tag: u64,
    redelivered: bool,
    exchange: &str,
    routing_key: &str,
    message_count: u32,
    raw_properties: &[u8],
    body: &[u8],
    frame_max: u32,
) {
    let exchange = truncate_shortstr(exchange);
    let routing_key = truncate_shortstr(routing_key);
    let payload_size = 4 + 8 + 1 + 1 + exchange.len() + 1 + routing_key.len() + 4;
    let chunk = body_chunk_size(frame_max);
    out.reserve(payload_size + FRAME_OVERHEAD + content_size(raw_properties, body.len(), chunk));
    put_method_start(out, channel, payload_size, 71);
    out.put_u64(delivery_tag);
    out.put_u8(u8::from(redelivered));
    put_shortstr(out, exchange);
    put_shortstr(out, routing_key);
    out.put_u32(message_count);
    out.put_u8(FRAME_END);
    write_content_header(out, channel, CLASS_BASIC, body.len() as u64, raw_properties);
    put_body(out, channel, body, chunk);
}

/// Writes basic.return (an unroutable mandatory message going back to its publisher), its
/// content header and body frames; like [`write_deliver`].
#[allow(clippy::too_many_arguments)] // The hot path takes the pieces as they lie in the broker.
pub fn write_return(
    out: &mut BytesMut,
    channel: u16,
    reply_code: u16,
    reply_text: &str,
    exchange: &str,
    routing_key: &str,
    raw_properties: &[u8],
    body: &[u8],
    frame_max: u32,
) {
    let reply_text = truncate_shortstr(reply_text);
    let exchange = truncate_shortstr(exchange);
    let routing_key = truncate_shortstr(routing_key);
    let payload_size = 4 + 2 + 1 + reply_text.len() + 1 + exchange.len() + 1 + routing_key.len();
    let chunk = body_chunk_size(frame_max);
    out.reserve(payload_size + FRAME_OVERHEAD + content_size(raw_properties, body.len(), chunk));
    put_method_start(out, channel, payload_size, 50);
    out.put_u16(reply_code);
    put_shortstr(out, reply_text);
    put_shortstr(out, exchange);
    put_shortstr(out, routing_key);
    out.put_u8(FRAME_END);
    write_content_header(out, channel, CLASS_BASIC, body.len() as u64, raw_properties);
    put_body(out, channel, body, chunk);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::frame::{decode_frame, Frame};
    use crate::codec::properties::{encode_properties, ContentHeader, EMPTY_PROPERTIES};
    use proptest::prelude::*;
    use warren_core::message::Properties;

    fn frames(mut buf: BytesMut) -> Vec<Frame> {
        let mut frames = Vec::new();
        while let Some(frame) = decode_frame(&mut buf, 0).expect("valid frames") {
            frames.push(frame);
        }
        assert!(buf.is_empty(), "trailing bytes");
        frames
    }

    fn persistent_properties() -> BytesMut {
        let mut raw = BytesMut::new();
        let p = Properties {
            delivery_mode: Some(2),
            content_type: Some("text/plain".into()),
            ..Properties::default()
        };
        encode_properties(&p, &mut raw).unwrap();
        raw
    }

    #[test]
    fn method_frame_has_patched_size_and_end() {
        let mut out = BytesMut::new();
        write_method_frame(&mut out, 5, &Method::BasicQosOk).unwrap();
        assert_eq!(&out[..], &[1, 0, 5, 0, 0, 0, 4, 0, 60, 0, 11, 0xCE]);
    }

    #[test]
    fn method_frame_encode_error_leaves_output_untouched() {
        let mut out = BytesMut::from(&b"earlier frames"[..]);
        let method = Method::QueueDeclareOk {
            queue: "q".repeat(256),
            message_count: 0,
            consumer_count: 0,
        };
        assert_eq!(
            write_method_frame(&mut out, 1, &method),
            Err(EncodeError::ShortStringTooLong { len: 256 })
        );
        assert_eq!(&out[..], b"earlier frames");
    }

    #[test]
    fn deliver_matches_the_generic_encoding() {
        let raw = persistent_properties();
        let body = b"hello world";
        let mut fast = BytesMut::new();
        write_deliver(
            &mut fast,
            3,
            "ctag-1",
            42,
            true,
            "amq.direct",
            "key",
            &raw,
            body,
            4096,
        );
        let mut slow = BytesMut::new();
        let deliver = Method::BasicDeliver {
            consumer_tag: "ctag-1".into(),
            delivery_tag: 42,
            redelivered: true,
            exchange: "amq.direct".into(),
            routing_key: "key".into(),
        };
        write_method_frame(&mut slow, 3, &deliver).unwrap();
        write_content(&mut slow, 3, 60, &raw, body, 4096);
        assert_eq!(fast, slow);

        let frames = frames(fast);
        assert_eq!(frames.len(), 3);
        assert_eq!(Method::decode(&frames[0].payload).unwrap(), deliver);
        let header = ContentHeader::decode(frames[1].payload.clone()).unwrap();
        assert_eq!((header.class_id, header.body_size), (60, 11));
        assert_eq!(header.properties.delivery_mode, Some(2));
        assert_eq!(&header.raw_properties[..], &raw[..]);
        assert_eq!(&frames[2].payload[..], body);
    }

    #[test]
    fn get_ok_and_return_match_the_generic_encoding() {
        let raw = EMPTY_PROPERTIES;
        let mut fast = BytesMut::new();
        write_get_ok(&mut fast, 1, 7, false, "ex", "rk", 99, &raw, b"body", 0);
        let mut slow = BytesMut::new();
        let get_ok = Method::BasicGetOk {
            delivery_tag: 7,
            redelivered: false,
            exchange: "ex".into(),
            routing_key: "rk".into(),
            message_count: 99,
        };
        write_method_frame(&mut slow, 1, &get_ok).unwrap();
        write_content(&mut slow, 1, 60, &raw, b"body", 0);
        assert_eq!(fast, slow);

        let mut fast = BytesMut::new();
        write_return(&mut fast, 1, 312, "NO_ROUTE", "ex", "rk", &raw, b"", 0);
        let mut slow = BytesMut::new();
        let ret = Method::BasicReturn {
            reply_code: 312,
            reply_text: "NO_ROUTE".into(),
            exchange: "ex".into(),
            routing_key: "rk".into(),
        };
        write_method_frame(&mut slow, 1, &ret).unwrap();
        write_content(&mut slow, 1, 60, &raw, b"", 0);
        assert_eq!(fast, slow);
        // An empty body: method and header, no body frame.
        assert_eq!(frames(fast).len(), 2);
    }

    #[test]
    fn body_larger_than_frame_max_is_split() {
        let body: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut out = BytesMut::new();
        write_content(&mut out, 9, 60, &EMPTY_PROPERTIES, &body, 4096);
        let frames = frames(out);
        // 4088 + 4088 + 1824.
        let sizes: Vec<usize> = frames[1..].iter().map(|f| f.payload.len()).collect();
        assert_eq!(sizes, vec![4088, 4088, 1824]);
        assert!(frames[1..]
            .iter()
            .all(|f| f.frame_type == FRAME_BODY && f.channel == 9));
        let joined: Vec<u8> = frames[1..]
            .iter()
            .flat_map(|f| f.payload.iter().copied())
            .collect();
        assert_eq!(joined, body);
        // Strictly within frame_max, framing included: no frame relies on RabbitMQ's
        // tolerance, so every payload is at most frame_max - 8.
        let mut out = BytesMut::new();
        write_content(&mut out, 9, 60, &EMPTY_PROPERTIES, &body, 4096);
        let mut count = 0;
        while decode_frame(&mut out, 4096 - 8).unwrap().is_some() {
            count += 1;
        }
        assert_eq!(count, 4);
    }

    #[test]
    fn overlong_broker_strings_are_truncated_not_panicking() {
        let long = "x".repeat(300);
        let mut out = BytesMut::new();
        write_deliver(
            &mut out,
            1,
            &long,
            1,
            false,
            &long,
            &long,
            &EMPTY_PROPERTIES,
            b"",
            0,
        );
        write_return(
            &mut out,
            1,
            312,
            &long,
            &long,
            &long,
            &EMPTY_PROPERTIES,
            b"",
            0,
        );
        write_get_ok(
            &mut out,
            1,
            1,
            false,
            &long,
            &long,
            0,
            &EMPTY_PROPERTIES,
            b"",
            0,
        );
        let frames = frames(out);
        match Method::decode(&frames[0].payload).unwrap() {
            Method::BasicDeliver {
                consumer_tag,
                exchange,
                routing_key,
                ..
            } => {
                assert_eq!(consumer_tag.len(), 255);
                assert_eq!(exchange.len(), 255);
                assert_eq!(routing_key.len(), 255);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(Method::decode(&frames[2].payload).is_ok());
        assert!(Method::decode(&frames[4].payload).is_ok());
    }

    #[test]
    fn degenerate_frame_max_does_not_loop_forever() {
        let mut out = BytesMut::new();
        write_content(&mut out, 1, 60, &EMPTY_PROPERTIES, b"abc", 5);
        assert_eq!(frames(out).len(), 4);
    }

    proptest! {
        #[test]
        fn content_split_reassembles(
            body in proptest::collection::vec(any::<u8>(), 0..3000),
            frame_max in prop_oneof![Just(0u32), 9u32..600],
        ) {
            let mut out = BytesMut::new();
            write_content(&mut out, 1, 60, &EMPTY_PROPERTIES, &body, frame_max);
            let frames = frames(out);
            let header = ContentHeader::decode(frames[0].payload.clone()).unwrap();
            prop_assert_eq!(header.body_size, body.len() as u64);
            let mut joined = Vec::new();
            for frame in &frames[1..] {
                prop_assert!(frame_max == 0 || frame.payload.len() + 8 <= frame_max as usize);
                prop_assert!(!frame.payload.is_empty());
                joined.extend_from_slice(&frame.payload);
            }
            prop_assert_eq!(joined, body);
        }
    }
}
