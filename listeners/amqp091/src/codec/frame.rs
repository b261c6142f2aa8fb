//! The frame layer: the 8-byte protocol header a connection opens with, then frames of
//! `type:u8 channel:u16 size:u32 payload[size] 0xCE`.
//!
//! [`decode_frame`] is check-then-parse: it looks at the bytes already buffered and either
//! returns a complete frame, split off the buffer without copying its payload, or `Ok(None)`
//! without touching (or allocating) anything, so the driver reads more and calls again.

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// A method frame: one method, possibly followed by content.
pub const FRAME_METHOD: u8 = 1;
/// A content header frame: class, body size and properties.
pub const FRAME_HEADER: u8 = 2;
/// A content body frame: a slice of the message body.
pub const FRAME_BODY: u8 = 3;
/// A heartbeat frame: empty payload, channel 0.
pub const FRAME_HEARTBEAT: u8 = 8;
/// The octet every frame ends with.
pub const FRAME_END: u8 = 0xCE;
/// The smallest frame_max a peer may negotiate; frames up to this size are always allowed,
/// even before tuning.
pub const FRAME_MIN_SIZE: u32 = 4096;
/// Type, channel and size: the octets before the payload.
pub const FRAME_HEADER_SIZE: usize = 7;
/// Header plus end octet: what a frame costs on top of its payload.
pub const FRAME_OVERHEAD: usize = FRAME_HEADER_SIZE + 1;
/// How far past frame_max RabbitMQ lets a frame go. frame_max bounds the whole frame
/// (payload + 8), but many clients forget the 8 octets of framing, so RabbitMQ only rejects a
/// payload larger than frame_max itself (rabbit_reader's `FRAME_SIZE_FUDGE`). We do the same.
pub const FRAME_SIZE_FUDGE: u32 = FRAME_OVERHEAD as u32;

/// The protocol header of AMQP 0-9-1; also what the broker answers to an unsupported header
/// before closing the socket.
pub const PROTOCOL_HEADER_091: [u8; 8] = *b"AMQP\x00\x00\x09\x01";

/// A heartbeat frame, ready to write.
pub const HEARTBEAT_FRAME: [u8; 8] = [FRAME_HEARTBEAT, 0, 0, 0, 0, 0, 0, FRAME_END];

/// One frame as received: its payload shares the read buffer's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// One of [`FRAME_METHOD`], [`FRAME_HEADER`], [`FRAME_BODY`], [`FRAME_HEARTBEAT`].
    pub frame_type: u8,
    /// The channel number; 0 is the connection itself.
    pub channel: u16,
    /// The payload, without the header and the end octet.
    pub payload: Bytes,
}

/// A frame the peer should not have sent; the connection cannot continue, because the byte
/// stream can no longer be trusted to be in sync. Answered with 501 FRAME_ERROR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The octet after the payload was not 0xCE.
    InvalidFrameEnd {
        frame_type: u8,
        channel: u16,
        found: u8,
    },
    /// The payload is larger than frame_max allows (see [`FRAME_SIZE_FUDGE`]).
    TooLarge {
        frame_type: u8,
        channel: u16,
        payload_size: u32,
        frame_max: u32,
    },
    /// A frame type other than 1, 2, 3 or 8.
    UnknownFrameType { frame_type: u8, channel: u16 },
}

impl FrameError {
    /// The channel the bad frame named.
    pub fn channel(&self) -> u16 {
        match *self {
            FrameError::InvalidFrameEnd { channel, .. }
            | FrameError::TooLarge { channel, .. }
            | FrameError::UnknownFrameType { channel, .. } => channel,
        }
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FrameError::InvalidFrameEnd { found, .. } => {
                write!(f, "frame_end byte 0x{found:02X} is invalid, expected 0xCE")
            }
            FrameError::TooLarge {
                frame_type,
                payload_size,
                frame_max,
                ..
            } => write!(
                f,
                "frame of type {frame_type} too large: payload of {payload_size} octets \
                 exceeds the negotiated frame_max {frame_max} (at most {} octets of payload)",
                frame_max.saturating_sub(FRAME_OVERHEAD as u32)
            ),
            FrameError::UnknownFrameType { frame_type, .. } => {
                write!(f, "unknown frame type {frame_type}")
            }
        }
    }
}

impl std::error::Error for FrameError {}

/// Takes one complete frame off the front of `buf`.
///
/// Returns `Ok(None)` when `buf` does not yet hold a whole frame; nothing is consumed or
/// allocated then. On success the frame's bytes are split off `buf` and the payload shares
/// their memory (no copy). `frame_max` is the negotiated limit on the whole frame (0 means
/// none); as in RabbitMQ, a payload up to `frame_max` octets is tolerated (see
/// [`FRAME_SIZE_FUDGE`]). The size and the type are checked as soon as the 7-byte header is
/// there, so an oversized or garbage frame fails without waiting for its payload; the end
/// octet is checked once the frame is complete.
pub fn decode_frame(buf: &mut BytesMut, frame_max: u32) -> Result<Option<Frame>, FrameError> {
    let Some(header) = buf.get(..FRAME_HEADER_SIZE) else {
        return Ok(None);
    };
    let frame_type = header[0];
    let channel = u16::from_be_bytes([header[1], header[2]]);
    let payload_size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]);
    if frame_max != 0 && payload_size > frame_max {
        return Err(FrameError::TooLarge {
            frame_type,
            channel,
            payload_size,
            frame_max,
        });
    }
    if !matches!(
        frame_type,
        FRAME_METHOD | FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT
    ) {
        return Err(FrameError::UnknownFrameType {
            frame_type,
            channel,
        });
    }
    // u32 + 8 fits in usize on every 64-bit target; on 32-bit a frame this large could not
    // be buffered anyway, so saturating keeps us waiting instead of overflowing.
    let total = (payload_size as usize).saturating_add(FRAME_OVERHEAD);
    let Some(&end) = buf.get(total - 1) else {
        return Ok(None);
    };
    if end != FRAME_END {
        return Err(FrameError::InvalidFrameEnd {
            frame_type,
            channel,
            found: end,
        });
    }
    let mut frame = buf.split_to(total);
    frame.truncate(total - 1);
    frame.advance(FRAME_HEADER_SIZE);
    let payload = frame.freeze();
    Ok(Some(Frame {
        frame_type,
        channel,
        payload,
    }))
}

/// Writes a frame with the given payload.
pub fn write_frame(out: &mut BytesMut, frame_type: u8, channel: u16, payload: &[u8]) {
    out.reserve(payload.len() + FRAME_OVERHEAD);
    out.put_u8(frame_type);
    out.put_u16(channel);
    // A payload over 4 GiB cannot be framed at all; callers split bodies by frame_max.
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.put_u8(FRAME_END);
}

/// Writes a heartbeat frame.
#[inline]
pub fn write_heartbeat(out: &mut BytesMut) {
    out.put_slice(&HEARTBEAT_FRAME);
}

/// What the first 8 bytes of a connection asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolHeader {
    /// AMQP 0-9-1, `AMQP\0\0\x09\x01`; also AMQP 0-9 (`AMQP\x01\x01\x00\x09`), which RabbitMQ
    /// treats as 0-9-1 (the two differ in nothing a broker sends).
    Amqp091,
    /// AMQP 1.0, `AMQP id 1 0 0`: protocol id 0 is plain AMQP, 2 TLS, 3 SASL. RabbitMQ
    /// requires SASL and answers anything else with the SASL header before closing.
    Amqp10 { protocol_id: u8 },
    /// Anything else: not AMQP, or a version we do not speak. Answer [`PROTOCOL_HEADER_091`]
    /// and close, as the spec asks.
    Other,
}

/// Tells the protocols sharing port 5672 apart by their 8-byte header.
pub fn parse_protocol_header(bytes: &[u8; 8]) -> ProtocolHeader {
    match *bytes {
        [b'A', b'M', b'Q', b'P', 0, 0, 9, 1] | [b'A', b'M', b'Q', b'P', 1, 1, 0, 9] => {
            ProtocolHeader::Amqp091
        }
        [b'A', b'M', b'Q', b'P', protocol_id, 1, 0, 0] => ProtocolHeader::Amqp10 { protocol_id },
        _ => ProtocolHeader::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame_bytes(frame_type: u8, channel: u16, payload: &[u8]) -> BytesMut {
        let mut out = BytesMut::new();
        write_frame(&mut out, frame_type, channel, payload);
        out
    }

    #[test]
    fn decodes_a_frame_and_leaves_the_rest() {
        let mut buf = frame_bytes(FRAME_BODY, 7, b"hello");
        buf.extend_from_slice(&HEARTBEAT_FRAME);
        buf.extend_from_slice(&[1, 0]);
        let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
        assert_eq!(
            frame,
            Frame {
                frame_type: FRAME_BODY,
                channel: 7,
                payload: Bytes::from_static(b"hello")
            }
        );
        let heartbeat = decode_frame(&mut buf, 0).unwrap().unwrap();
        assert_eq!(heartbeat.frame_type, FRAME_HEARTBEAT);
        assert!(heartbeat.payload.is_empty());
        assert_eq!(decode_frame(&mut buf, 0), Ok(None));
        assert_eq!(&buf[..], &[1, 0]);
    }

    #[test]
    fn every_prefix_of_a_frame_needs_more_bytes() {
        let full = frame_bytes(FRAME_METHOD, 1, &[0, 10, 0, 11, 1, 2, 3]);
        for cut in 0..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert_eq!(decode_frame(&mut buf, 4096), Ok(None), "cut at {cut}");
            assert_eq!(buf.len(), cut);
        }
    }

    #[test]
    fn payload_shares_the_read_buffer() {
        let mut buf = frame_bytes(FRAME_BODY, 1, &[42; 100]);
        let start = buf.as_ptr() as usize;
        let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
        assert_eq!(frame.payload.as_ptr() as usize, start + FRAME_HEADER_SIZE);
    }

    #[test]
    fn bad_frame_end_is_a_frame_error() {
        let mut buf = frame_bytes(FRAME_METHOD, 3, b"abc");
        let last = buf.len() - 1;
        buf[last] = 0;
        let error = decode_frame(&mut buf, 0).unwrap_err();
        assert_eq!(
            error,
            FrameError::InvalidFrameEnd {
                frame_type: 1,
                channel: 3,
                found: 0
            }
        );
        assert_eq!(
            error.to_string(),
            "frame_end byte 0x00 is invalid, expected 0xCE"
        );
        assert_eq!(error.channel(), 3);
    }

    #[test]
    fn frame_max_bounds_the_payload_with_rabbitmqs_tolerance() {
        // Exactly frame_max - 8 of payload: a whole frame of frame_max octets.
        let mut buf = frame_bytes(FRAME_BODY, 1, &vec![0; 4096 - 8]);
        assert!(decode_frame(&mut buf, 4096).unwrap().is_some());
        // Up to frame_max of payload is tolerated, as RabbitMQ does.
        let mut buf = frame_bytes(FRAME_BODY, 1, &vec![0; 4096]);
        assert!(decode_frame(&mut buf, 4096).unwrap().is_some());
        // One more is refused as soon as the header is seen, before the payload arrives.
        let mut buf = frame_bytes(FRAME_BODY, 1, &vec![0; 4097]);
        buf.truncate(FRAME_HEADER_SIZE);
        let error = decode_frame(&mut buf, 4096).unwrap_err();
        assert_eq!(
            error,
            FrameError::TooLarge {
                frame_type: FRAME_BODY,
                channel: 1,
                payload_size: 4097,
                frame_max: 4096
            }
        );
        assert!(error.to_string().contains("at most 4088 octets"), "{error}");
        // frame_max 0: no limit.
        let mut buf = frame_bytes(FRAME_BODY, 1, &vec![0; 100_000]);
        assert!(decode_frame(&mut buf, 0).unwrap().is_some());
    }

    #[test]
    fn unknown_frame_type_is_a_frame_error() {
        let mut buf = frame_bytes(4, 0, b"");
        assert_eq!(
            decode_frame(&mut buf, 0).unwrap_err(),
            FrameError::UnknownFrameType {
                frame_type: 4,
                channel: 0
            }
        );
        assert_eq!(
            FrameError::UnknownFrameType {
                frame_type: 4,
                channel: 0
            }
            .to_string(),
            "unknown frame type 4"
        );
    }

    #[test]
    fn protocol_headers() {
        assert_eq!(
            parse_protocol_header(&PROTOCOL_HEADER_091),
            ProtocolHeader::Amqp091
        );
        assert_eq!(
            parse_protocol_header(b"AMQP\x01\x01\x00\x09"),
            ProtocolHeader::Amqp091
        );
        assert_eq!(
            parse_protocol_header(b"AMQP\x00\x01\x00\x00"),
            ProtocolHeader::Amqp10 { protocol_id: 0 }
        );
        assert_eq!(
            parse_protocol_header(b"AMQP\x03\x01\x00\x00"),
            ProtocolHeader::Amqp10 { protocol_id: 3 }
        );
        assert_eq!(
            parse_protocol_header(b"AMQP\x00\x00\x08\x00"),
            ProtocolHeader::Other
        );
        assert_eq!(parse_protocol_header(b"GET / HT"), ProtocolHeader::Other);
    }

    #[test]
    fn heartbeat_encoding() {
        let mut out = BytesMut::new();
        write_heartbeat(&mut out);
        assert_eq!(&out[..], &[8, 0, 0, 0, 0, 0, 0, 0xCE]);
        let frame = decode_frame(&mut out, FRAME_MIN_SIZE).unwrap().unwrap();
        assert_eq!(
            (frame.frame_type, frame.channel, frame.payload.len()),
            (FRAME_HEARTBEAT, 0, 0)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_decode_frame(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
            frame_max in prop_oneof![Just(0u32), Just(4096u32), any::<u32>()],
        ) {
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(_)) = decode_frame(&mut buf, frame_max) {}
        }

        #[test]
        fn frames_round_trip(
            frame_type in prop_oneof![Just(1u8), Just(2), Just(3), Just(8)],
            channel in any::<u16>(),
            payload in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let mut buf = frame_bytes(frame_type, channel, &payload);
            let frame = decode_frame(&mut buf, 0).unwrap().unwrap();
            prop_assert_eq!(frame.frame_type, frame_type);
            prop_assert_eq!(frame.channel, channel);
            prop_assert_eq!(&frame.payload[..], &payload[..]);
            prop_assert!(buf.is_empty());
        }
    }
}
