//! The inter-node frame codec, sans-IO: bytes in, [`Frame`]s out, and back.
//!
//! Every frame is `u32 length | u8 type | body`, the length counting the type and body.
//! Strings are `u16 length | UTF-8`; nonces and proofs are 32 raw bytes; request and
//! response bodies run to the end of the frame.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Bytes of a nonce or an HMAC proof.
pub const NONCE_LENGTH: usize = 32;

/// The largest frame accepted by default (snapshots travel in one frame on the bulk link).
pub const DEFAULT_MAX_FRAME: usize = 64 * 1024 * 1024;

/// The handshake's protocol version.
pub const PROTOCOL_VERSION: u8 = 1;

/// Which of a peer's two connections a link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkKind {
    /// Failure detection, votes and metadata: small and latency-sensitive.
    Control,
    /// Replication batches and snapshots (later: forwarded messages), so they never delay
    /// the control link.
    Bulk,
}

impl LinkKind {
    fn code(self) -> u8 {
        match self {
            LinkKind::Control => 0,
            LinkKind::Bulk => 1,
        }
    }

    fn from_code(code: u8) -> Option<LinkKind> {
        match code {
            0 => Some(LinkKind::Control),
            1 => Some(LinkKind::Bulk),
            _ => None,
        }
    }

    /// `control` or `bulk`, for logs.
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::Control => "control",
            LinkKind::Bulk => "bulk",
        }
    }
}

/// One inter-node frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Dialer to listener, first: who is calling, for which link, with a fresh nonce.
    Hello {
        /// [`PROTOCOL_VERSION`].
        version: u8,
        /// Which link this connection is.
        link: LinkKind,
        /// The dialer's node name.
        node: String,
        /// The cluster the dialer belongs to (empty while it belongs to none).
        cluster_id: String,
        /// The dialer's nonce.
        nonce: [u8; NONCE_LENGTH],
    },
    /// Listener to dialer: its name, cluster, nonce and proof that it holds the secret.
    Challenge {
        /// The listener's node name.
        node: String,
        /// The listener's cluster (empty while it belongs to none).
        cluster_id: String,
        /// The listener's nonce.
        nonce: [u8; NONCE_LENGTH],
        /// HMAC proving the listener holds the secret.
        proof: [u8; NONCE_LENGTH],
    },
    /// Dialer to listener: proof that the dialer holds the secret.
    Proof {
        /// HMAC proving the dialer holds the secret.
        proof: [u8; NONCE_LENGTH],
    },
    /// Listener to dialer: the link is open.
    Welcome,
    /// Either side: the handshake failed, and why.
    Refused {
        /// Why, for the other side's log.
        reason: String,
    },
    /// A failure-detector ping.
    Ping {
        /// Echoed in the pong.
        sequence: u64,
    },
    /// The answer to a ping.
    Pong {
        /// The ping's sequence.
        sequence: u64,
    },
    /// A request to the peer's handler.
    Request {
        /// Matches the response.
        id: u64,
        /// What is asked (see `transport::Method`).
        method: u16,
        /// The request's body.
        body: Bytes,
    },
    /// The answer to a request.
    Response {
        /// The request's id.
        id: u64,
        /// Whether the handler succeeded; the body is an error text otherwise.
        ok: bool,
        /// The answer's body.
        body: Bytes,
    },
}

/// Why bytes could not be decoded; the connection is closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// The length prefix exceeds the limit.
    TooLarge {
        /// The announced length.
        length: usize,
        /// The limit.
        max: usize,
    },
    /// An unknown frame type.
    UnknownType(u8),
    /// A frame whose body does not match its type.
    Malformed(&'static str),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::TooLarge { length, max } => {
                write!(f, "frame of {length} bytes exceeds the limit of {max}")
            }
            FrameError::UnknownType(kind) => write!(f, "unknown frame type {kind}"),
            FrameError::Malformed(what) => write!(f, "malformed frame: {what}"),
        }
    }
}

impl std::error::Error for FrameError {}

const HELLO: u8 = 1;
const CHALLENGE: u8 = 2;
const PROOF: u8 = 3;
const WELCOME: u8 = 4;
const REFUSED: u8 = 5;
const PING: u8 = 6;
const PONG: u8 = 7;
const REQUEST: u8 = 8;
const RESPONSE: u8 = 9;

fn put_string(out: &mut BytesMut, text: &str) {
    // Names and reasons are short; longer text is cut at a character boundary.
    let mut end = text.len().min(u16::MAX as usize);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    out.put_u16(end as u16);
    out.put_slice(&text.as_bytes()[..end]);
}

/// Appends `frame` to `out`.
pub fn encode(frame: &Frame, out: &mut BytesMut) {
    let start = out.len();
    out.put_u32(0);
    match frame {
        Frame::Hello {
            version,
            link,
            node,
            cluster_id,
            nonce,
        } => {
            out.put_u8(HELLO);
            out.put_u8(*version);
            out.put_u8(link.code());
            put_string(out, node);
            put_string(out, cluster_id);
            out.put_slice(nonce);
        }
        Frame::Challenge {
            node,
            cluster_id,
            nonce,
            proof,
        } => {
            out.put_u8(CHALLENGE);
            put_string(out, node);
            put_string(out, cluster_id);
            out.put_slice(nonce);
            out.put_slice(proof);
        }
        Frame::Proof { proof } => {
            out.put_u8(PROOF);
            out.put_slice(proof);
        }
        Frame::Welcome => out.put_u8(WELCOME),
        Frame::Refused { reason } => {
            out.put_u8(REFUSED);
            put_string(out, reason);
        }
        Frame::Ping { sequence } => {
            out.put_u8(PING);
            out.put_u64(*sequence);
        }
        Frame::Pong { sequence } => {
            out.put_u8(PONG);
            out.put_u64(*sequence);
        }
        Frame::Request { id, method, body } => {
            out.put_u8(REQUEST);
            out.put_u64(*id);
            out.put_u16(*method);
            out.put_slice(body);
        }
        Frame::Response { id, ok, body } => {
            out.put_u8(RESPONSE);
            out.put_u64(*id);
            out.put_u8(u8::from(*ok));
            out.put_slice(body);
        }
    }
    let length = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&length.to_be_bytes());
}

/// A reader over one frame's body that reports short bodies instead of panicking.
struct Body(Bytes);

impl Body {
    fn need(&self, n: usize, what: &'static str) -> Result<(), FrameError> {
        if self.0.remaining() < n {
            return Err(FrameError::Malformed(what));
        }
        Ok(())
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, FrameError> {
        self.need(1, what)?;
        Ok(self.0.get_u8())
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, FrameError> {
        self.need(2, what)?;
        Ok(self.0.get_u16())
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, FrameError> {
        self.need(8, what)?;
        Ok(self.0.get_u64())
    }

    fn string(&mut self, what: &'static str) -> Result<String, FrameError> {
        let length = self.u16(what)? as usize;
        self.need(length, what)?;
        let bytes = self.0.split_to(length);
        String::from_utf8(bytes.to_vec()).map_err(|_| FrameError::Malformed(what))
    }

    fn array(&mut self, what: &'static str) -> Result<[u8; NONCE_LENGTH], FrameError> {
        self.need(NONCE_LENGTH, what)?;
        let mut array = [0u8; NONCE_LENGTH];
        self.0.copy_to_slice(&mut array);
        Ok(array)
    }

    fn end(self, what: &'static str) -> Result<(), FrameError> {
        if self.0.has_remaining() {
            return Err(FrameError::Malformed(what));
        }
        Ok(())
    }
}

/// Takes one whole frame off the front of `buffer`: `Ok(None)` until one has arrived.
/// Frames longer than `max` are an error before their body is read.
pub fn decode(buffer: &mut BytesMut, max: usize) -> Result<Option<Frame>, FrameError> {
    if buffer.len() < 4 {
        return Ok(None);
    }
    let length = u32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]) as usize;
    if length > max {
        return Err(FrameError::TooLarge { length, max });
    }
    if length == 0 {
        return Err(FrameError::Malformed("empty frame"));
    }
    if buffer.len() < 4 + length {
        buffer.reserve(4 + length - buffer.len());
        return Ok(None);
    }
    buffer.advance(4);
    let mut frame = buffer.split_to(length).freeze();
    let kind = frame.get_u8();
    let mut body = Body(frame);
    let decoded = match kind {
        HELLO => {
            let version = body.u8("hello version")?;
            let link = LinkKind::from_code(body.u8("hello link")?)
                .ok_or(FrameError::Malformed("hello link"))?;
            let node = body.string("hello node")?;
            let cluster_id = body.string("hello cluster id")?;
            let nonce = body.array("hello nonce")?;
            body.end("hello")?;
            Frame::Hello {
                version,
                link,
                node,
                cluster_id,
                nonce,
            }
        }
        CHALLENGE => {
            let node = body.string("challenge node")?;
            let cluster_id = body.string("challenge cluster id")?;
            let nonce = body.array("challenge nonce")?;
            let proof = body.array("challenge proof")?;
            body.end("challenge")?;
            Frame::Challenge {
                node,
                cluster_id,
                nonce,
                proof,
            }
        }
        PROOF => {
            let proof = body.array("proof")?;
            body.end("proof")?;
            Frame::Proof { proof }
        }
        WELCOME => {
            body.end("welcome")?;
            Frame::Welcome
        }
        REFUSED => {
            let reason = body.string("refused reason")?;
            body.end("refused")?;
            Frame::Refused { reason }
        }
        PING => {
            let sequence = body.u64("ping")?;
            body.end("ping")?;
            Frame::Ping { sequence }
        }
        PONG => {
            let sequence = body.u64("pong")?;
            body.end("pong")?;
            Frame::Pong { sequence }
        }
        REQUEST => {
            let id = body.u64("request id")?;
            let method = body.u16("request method")?;
            Frame::Request {
                id,
                method,
                body: body.0,
            }
        }
        RESPONSE => {
            let id = body.u64("response id")?;
            let ok = match body.u8("response status")? {
                0 => false,
                1 => true,
                _ => return Err(FrameError::Malformed("response status")),
            };
            Frame::Response {
                id,
                ok,
                body: body.0,
            }
        }
        other => return Err(FrameError::UnknownType(other)),
    };
    Ok(Some(decoded))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frames() -> impl Strategy<Value = Frame> {
        let nonce = proptest::array::uniform32(any::<u8>());
        let body = proptest::collection::vec(any::<u8>(), 0..300).prop_map(Bytes::from);
        prop_oneof![
            (any::<u8>(), any::<bool>(), ".{0,40}", ".{0,40}", nonce).prop_map(
                |(version, bulk, node, cluster_id, nonce)| Frame::Hello {
                    version,
                    link: if bulk {
                        LinkKind::Bulk
                    } else {
                        LinkKind::Control
                    },
                    node,
                    cluster_id,
                    nonce,
                }
            ),
            (".{0,40}", ".{0,40}", nonce, nonce).prop_map(|(node, cluster_id, nonce, proof)| {
                Frame::Challenge {
                    node,
                    cluster_id,
                    nonce,
                    proof,
                }
            }),
            nonce.prop_map(|proof| Frame::Proof { proof }),
            Just(Frame::Welcome),
            ".{0,80}".prop_map(|reason| Frame::Refused { reason }),
            any::<u64>().prop_map(|sequence| Frame::Ping { sequence }),
            any::<u64>().prop_map(|sequence| Frame::Pong { sequence }),
            (any::<u64>(), any::<u16>(), body.clone())
                .prop_map(|(id, method, body)| Frame::Request { id, method, body }),
            (any::<u64>(), any::<bool>(), body).prop_map(|(id, ok, body)| Frame::Response {
                id,
                ok,
                body
            }),
        ]
    }

    proptest! {
        /// Any sequence of frames survives encoding, arriving in arbitrary pieces.
        #[test]
        fn frames_round_trip_whatever_the_read_sizes(
            sent in proptest::collection::vec(frames(), 1..8),
            chunk in 1usize..64,
        ) {
            let mut wire = BytesMut::new();
            for frame in &sent {
                encode(frame, &mut wire);
            }
            let mut buffer = BytesMut::new();
            let mut received = Vec::new();
            for piece in wire.chunks(chunk) {
                buffer.extend_from_slice(piece);
                while let Some(frame) = decode(&mut buffer, DEFAULT_MAX_FRAME).unwrap() {
                    received.push(frame);
                }
            }
            prop_assert!(buffer.is_empty());
            prop_assert_eq!(received, sent);
        }

        /// Arbitrary bytes never panic the decoder: they decode, wait for more, or fail.
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut buffer = BytesMut::from(&bytes[..]);
            for _ in 0..8 {
                match decode(&mut buffer, 1024) {
                    Ok(Some(_)) => continue,
                    Ok(None) | Err(_) => break,
                }
            }
        }
    }

    #[test]
    fn an_oversized_length_is_refused_before_the_body_arrives() {
        let mut buffer = BytesMut::from(&[0u8, 0x10, 0, 0, PING][..]);
        assert_eq!(
            decode(&mut buffer, 1024),
            Err(FrameError::TooLarge {
                length: 0x10_0000,
                max: 1024
            })
        );
    }
}
