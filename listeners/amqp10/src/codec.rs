//! The sans-IO AMQP 1.0 frame layer: 8-byte frame headers, AMQP and SASL frame bodies.
//!
//! A frame is `size(4) doff(1) type(1) channel(2)`, extended header up to `doff * 4`, then
//! the body: for an AMQP frame a performative (decoded with `fe2o3-amqp-types`) followed by
//! the transfer payload, for a SASL frame one SASL performative, and nothing for an empty
//! (heartbeat) frame. [`decode_frame`] is check-then-parse: it returns `Ok(None)` until a
//! whole frame is buffered and never reads past the frame it decodes. The payload of a
//! transfer is handed out as a slice of the read buffer (no copy).

use bytes::{BufMut, Bytes, BytesMut};
use fe2o3_amqp_types::performatives::Performative;
use fe2o3_amqp_types::sasl::{SaslInit, SaslResponse};
use serde::Serialize;

/// The header a client sends to start plain AMQP 1.0.
pub const PROTOCOL_HEADER_AMQP: [u8; 8] = *b"AMQP\x00\x01\x00\x00";
/// The header a client sends to start the SASL layer.
pub const PROTOCOL_HEADER_SASL: [u8; 8] = *b"AMQP\x03\x01\x00\x00";
/// The smallest max-frame-size a peer may announce (MIN-MAX-FRAME-SIZE).
pub const MIN_MAX_FRAME_SIZE: u32 = 512;
/// Size of the fixed frame header.
pub const FRAME_HEADER_SIZE: usize = 8;

const FRAME_TYPE_AMQP: u8 = 0;
const FRAME_TYPE_SASL: u8 = 1;

/// One decoded frame.
#[derive(Debug)]
pub struct Frame {
    /// The channel (session) the frame belongs to; 0 for SASL frames.
    pub channel: u16,
    /// What the frame carried.
    pub body: FrameBody,
}

/// The body of a frame.
// A frame is decoded, handled and dropped one at a time: boxing the performative would cost
// an allocation per frame for nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum FrameBody {
    /// An empty AMQP frame: a heartbeat.
    Empty,
    /// An AMQP performative and, for a transfer, the payload after it.
    Amqp {
        /// The performative.
        performative: Performative,
        /// Bytes after the performative (the message bytes of a transfer).
        payload: Bytes,
    },
    /// A SASL frame a client may send.
    Sasl(SaslFrame),
}

/// SASL performatives a client sends.
#[derive(Debug)]
pub enum SaslFrame {
    /// sasl-init: the chosen mechanism and its initial response.
    Init(SaslInit),
    /// sasl-response to a challenge (Warren sends no challenges).
    Response(SaslResponse),
}

/// Why bytes could not be decoded as a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The frame header itself is wrong (size, data offset, type): the byte stream can no
    /// longer be framed. The connection ends with `amqp:connection:framing-error`.
    Framing(String),
    /// The frame was delimited correctly but its body is not a valid performative. The
    /// connection ends with `amqp:decode-error`.
    Decode(String),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Framing(message) | FrameError::Decode(message) => f.write_str(message),
        }
    }
}

/// Decodes one frame from the front of `buffer`, removing its bytes. `Ok(None)` means more
/// bytes are needed. `max_frame_size` is the limit this side announced.
pub fn decode_frame(
    buffer: &mut BytesMut,
    max_frame_size: u32,
) -> Result<Option<Frame>, FrameError> {
    if buffer.len() < FRAME_HEADER_SIZE {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]);
    let data_offset = buffer[4];
    let frame_type = buffer[5];
    let channel = u16::from_be_bytes([buffer[6], buffer[7]]);
    if (size as usize) < FRAME_HEADER_SIZE {
        return Err(FrameError::Framing(format!(
            "frame size {size} is smaller than the 8-byte frame header"
        )));
    }
    if size > max_frame_size.max(MIN_MAX_FRAME_SIZE) {
        return Err(FrameError::Framing(format!(
            "frame size {size} exceeds the negotiated max-frame-size {max_frame_size}"
        )));
    }
    let body_start = usize::from(data_offset) * 4;
    if body_start < FRAME_HEADER_SIZE || body_start > size as usize {
        return Err(FrameError::Framing(format!(
            "invalid data offset {data_offset} for a frame of {size} bytes"
        )));
    }
    if frame_type != FRAME_TYPE_AMQP && frame_type != FRAME_TYPE_SASL {
        return Err(FrameError::Framing(format!(
            "unknown frame type {frame_type}"
        )));
    }
    if buffer.len() < size as usize {
        return Ok(None);
    }
    let frame = buffer.split_to(size as usize).freeze();
    let body = frame.slice(body_start..);
    if body.is_empty() {
        if frame_type == FRAME_TYPE_SASL {
            return Err(FrameError::Decode("empty SASL frame".to_string()));
        }
        return Ok(Some(Frame {
            channel,
            body: FrameBody::Empty,
        }));
    }
    let performative_len = skip_value(&body, 0)?;
    let performative_bytes = &body[..performative_len];
    if frame_type == FRAME_TYPE_SASL {
        let sasl = decode_sasl(performative_bytes)?;
        return Ok(Some(Frame {
            channel,
            body: FrameBody::Sasl(sasl),
        }));
    }
    let performative: Performative = serde_amqp::from_slice(performative_bytes)
        .map_err(|error| FrameError::Decode(format!("invalid performative: {error}")))?;
    Ok(Some(Frame {
        channel,
        body: FrameBody::Amqp {
            performative,
            payload: body.slice(performative_len..),
        },
    }))
}

fn decode_sasl(bytes: &[u8]) -> Result<SaslFrame, FrameError> {
    match described_code(bytes) {
        Some(0x41) => serde_amqp::from_slice(bytes)
            .map(SaslFrame::Init)
            .map_err(|error| FrameError::Decode(format!("invalid sasl-init: {error}"))),
        Some(0x43) => serde_amqp::from_slice(bytes)
            .map(SaslFrame::Response)
            .map_err(|error| FrameError::Decode(format!("invalid sasl-response: {error}"))),
        _ => Err(FrameError::Decode(
            "unexpected SASL frame from a client".to_string(),
        )),
    }
}

/// How deeply described types may nest inside descriptors before the input is refused.
const MAX_DESCRIPTOR_DEPTH: usize = 8;

/// The length of the one encoded AMQP value at the start of `bytes`, without decoding it.
/// Used to find where a performative ends and where each message section starts.
pub fn skip_value(bytes: &[u8], depth: usize) -> Result<usize, FrameError> {
    let truncated = || FrameError::Decode("truncated AMQP value".to_string());
    let code = *bytes.first().ok_or_else(truncated)?;
    if code == 0x00 {
        if depth >= MAX_DESCRIPTOR_DEPTH {
            return Err(FrameError::Decode(
                "descriptors nested too deeply".to_string(),
            ));
        }
        let descriptor = skip_value(&bytes[1..], depth + 1)?;
        let value = skip_value(&bytes[1 + descriptor..], depth + 1)?;
        return Ok(1 + descriptor + value);
    }
    let length = match code >> 4 {
        0x4 => 1,
        0x5 => 2,
        0x6 => 3,
        0x7 => 5,
        0x8 => 9,
        0x9 => 17,
        0xa | 0xc | 0xe => 2 + usize::from(*bytes.get(1).ok_or_else(truncated)?),
        0xb | 0xd | 0xf => {
            let size = bytes.get(1..5).ok_or_else(truncated)?;
            let size = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize;
            size.checked_add(5).ok_or_else(truncated)?
        }
        _ => {
            return Err(FrameError::Decode(format!(
                "invalid format code 0x{code:02x}"
            )))
        }
    };
    if length > bytes.len() {
        return Err(truncated());
    }
    Ok(length)
}

/// The numeric descriptor of a described value (`0x00 0x53 code` or `0x00 0x80 u64`), or the
/// numeric code of a well-known symbolic descriptor.
pub fn described_code(bytes: &[u8]) -> Option<u64> {
    if bytes.first() != Some(&0x00) {
        return None;
    }
    match *bytes.get(1)? {
        0x53 => bytes.get(2).map(|&code| u64::from(code)),
        0x80 => {
            let raw = bytes.get(2..10)?;
            Some(u64::from_be_bytes(raw.try_into().ok()?))
        }
        0xa3 => {
            let length = usize::from(*bytes.get(2)?);
            let name = bytes.get(3..3 + length)?;
            symbolic_code(name)
        }
        0xb3 => {
            let raw = bytes.get(2..6)?;
            let length = u32::from_be_bytes(raw.try_into().ok()?) as usize;
            let name = bytes.get(6..6usize.checked_add(length)?)?;
            symbolic_code(name)
        }
        _ => None,
    }
}

fn symbolic_code(name: &[u8]) -> Option<u64> {
    Some(match name {
        b"amqp:sasl-init:list" => 0x41,
        b"amqp:sasl-response:list" => 0x43,
        b"amqp:header:list" => 0x70,
        b"amqp:delivery-annotations:map" => 0x71,
        b"amqp:message-annotations:map" => 0x72,
        b"amqp:properties:list" => 0x73,
        b"amqp:application-properties:map" => 0x74,
        b"amqp:data:binary" => 0x75,
        b"amqp:amqp-sequence:list" => 0x76,
        b"amqp:amqp-value:*" => 0x77,
        b"amqp:footer:map" => 0x78,
        _ => return None,
    })
}

/// Appends an AMQP frame carrying `performative` and `payload` on `channel`.
pub fn encode_amqp_frame(
    out: &mut BytesMut,
    channel: u16,
    performative: &Performative,
    payload: &[u8],
) {
    let start = out.len();
    out.put_slice(&[0, 0, 0, 0, 2, FRAME_TYPE_AMQP]);
    out.put_u16(channel);
    serialize_into(out, performative);
    out.put_slice(payload);
    patch_size(out, start);
}

/// Appends a SASL frame carrying `value` (a SASL performative).
pub fn encode_sasl_frame<T: Serialize>(out: &mut BytesMut, value: &T) {
    let start = out.len();
    out.put_slice(&[0, 0, 0, 0, 2, FRAME_TYPE_SASL, 0, 0]);
    serialize_into(out, value);
    patch_size(out, start);
}

/// Appends an empty frame (a heartbeat).
pub fn encode_empty_frame(out: &mut BytesMut) {
    out.put_slice(&[0, 0, 0, 8, 2, FRAME_TYPE_AMQP, 0, 0]);
}

/// Encoded size of a performative, to decide how much payload fits in a frame.
pub fn performative_size(performative: &Performative) -> usize {
    let mut scratch = BytesMut::new();
    serialize_into(&mut scratch, performative);
    scratch.len()
}

fn serialize_into<T: Serialize>(out: &mut BytesMut, value: &T) {
    let mut serializer = serde_amqp::ser::Serializer::new(out.writer());
    // Serializing our own well-formed values into memory cannot fail; a failure would be a
    // bug in the type definitions, logged rather than sent half-written.
    if let Err(error) = value.serialize(&mut serializer) {
        tracing::error!(%error, "failed to encode an AMQP 1.0 value");
    }
}

fn patch_size(out: &mut BytesMut, start: usize) {
    let size = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp_types::definitions::Handle;
    use fe2o3_amqp_types::performatives::{Begin, Close, Flow};
    use proptest::prelude::*;

    fn begin() -> Performative {
        Performative::Begin(Begin {
            remote_channel: None,
            next_outgoing_id: 1,
            incoming_window: 100,
            outgoing_window: 100,
            handle_max: Handle(255),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        })
    }

    #[test]
    fn frames_round_trip_with_their_payload() {
        let mut out = BytesMut::new();
        encode_amqp_frame(&mut out, 7, &begin(), b"payload");
        encode_empty_frame(&mut out);
        let first = decode_frame(&mut out, 65536).unwrap().unwrap();
        assert_eq!(first.channel, 7);
        match first.body {
            FrameBody::Amqp {
                performative: Performative::Begin(begin),
                payload,
            } => {
                assert_eq!(begin.next_outgoing_id, 1);
                assert_eq!(&payload[..], b"payload");
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(
            decode_frame(&mut out, 65536).unwrap().unwrap().body,
            FrameBody::Empty
        ));
        assert!(decode_frame(&mut out, 65536).unwrap().is_none());
    }

    #[test]
    fn partial_frames_wait_for_more_bytes() {
        let mut out = BytesMut::new();
        encode_amqp_frame(
            &mut out,
            0,
            &Performative::Close(Close { error: None }),
            &[],
        );
        let whole = out.clone();
        let mut partial = BytesMut::from(&whole[..whole.len() - 1]);
        assert!(decode_frame(&mut partial, 512).unwrap().is_none());
        assert_eq!(partial.len(), whole.len() - 1);
    }

    #[test]
    fn bad_headers_are_framing_errors() {
        let mut small = BytesMut::from(&[0u8, 0, 0, 4, 2, 0, 0, 0][..]);
        assert!(matches!(
            decode_frame(&mut small, 512),
            Err(FrameError::Framing(_))
        ));
        let mut big = BytesMut::from(&[0u8, 1, 0, 0, 2, 0, 0, 0][..]);
        assert!(matches!(
            decode_frame(&mut big, 512),
            Err(FrameError::Framing(_))
        ));
        let mut offset = BytesMut::from(&[0u8, 0, 0, 8, 1, 0, 0, 0][..]);
        assert!(matches!(
            decode_frame(&mut offset, 512),
            Err(FrameError::Framing(_))
        ));
        let mut kind = BytesMut::from(&[0u8, 0, 0, 8, 2, 9, 0, 0][..]);
        assert!(matches!(
            decode_frame(&mut kind, 512),
            Err(FrameError::Framing(_))
        ));
    }

    #[test]
    fn a_garbled_performative_is_a_decode_error() {
        let mut bytes = BytesMut::from(&[0u8, 0, 0, 12, 2, 0, 0, 0, 0x00, 0x53, 0x13, 0x45][..]);
        assert!(matches!(
            decode_frame(&mut bytes, 512),
            Err(FrameError::Decode(_))
        ));
    }

    #[test]
    fn flow_with_drain_survives_encoding() {
        let flow = Performative::Flow(Flow {
            next_incoming_id: Some(3),
            incoming_window: 10,
            next_outgoing_id: 4,
            outgoing_window: 10,
            handle: Some(Handle(2)),
            delivery_count: Some(5),
            link_credit: Some(9),
            available: None,
            drain: true,
            echo: false,
            properties: None,
        });
        let mut out = BytesMut::new();
        encode_amqp_frame(&mut out, 1, &flow, &[]);
        match decode_frame(&mut out, 512).unwrap().unwrap().body {
            FrameBody::Amqp {
                performative: Performative::Flow(flow),
                ..
            } => {
                assert!(flow.drain);
                assert_eq!(flow.link_credit, Some(9));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut buffer = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = decode_frame(&mut buffer, 4096) {}
        }

        #[test]
        fn arbitrary_frame_bodies_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..256),
            sasl in any::<bool>(),
        ) {
            let mut buffer = BytesMut::new();
            buffer.put_u32(8 + body.len() as u32);
            buffer.put_slice(&[2, u8::from(sasl), 0, 0]);
            buffer.put_slice(&body);
            let _ = decode_frame(&mut buffer, 4096);
        }

        #[test]
        fn described_performative_prefixes_never_panic(
            code in 0x10u8..0x19,
            body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut buffer = BytesMut::new();
            buffer.put_u32(8 + 3 + body.len() as u32);
            buffer.put_slice(&[2, 0, 0, 0, 0x00, 0x53, code]);
            buffer.put_slice(&body);
            let _ = decode_frame(&mut buffer, 4096);
        }
    }
}
