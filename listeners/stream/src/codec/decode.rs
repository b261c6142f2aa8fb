//! Client frames to [`Request`]s: check-then-read over a cursor; nothing a client sends can
//! panic or allocate beyond the frame's own size.

use bytes::{Buf, Bytes};

use super::{key, OffsetSpecification, PublishedMessage, Request};

/// Why a frame is not a valid request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The frame ended inside a field.
    Truncated(&'static str),
    /// A field has a value the protocol does not allow.
    Invalid(&'static str),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated(what) => write!(f, "frame ends inside {what}"),
            DecodeError::Invalid(what) => write!(f, "invalid {what}"),
        }
    }
}

struct Cursor {
    bytes: Bytes,
}

impl Cursor {
    fn need(&self, n: usize, what: &'static str) -> Result<(), DecodeError> {
        if self.bytes.remaining() < n {
            Err(DecodeError::Truncated(what))
        } else {
            Ok(())
        }
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        self.need(1, what)?;
        Ok(self.bytes.get_u8())
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        self.need(2, what)?;
        Ok(self.bytes.get_u16())
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.need(4, what)?;
        Ok(self.bytes.get_u32())
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, DecodeError> {
        self.need(8, what)?;
        Ok(self.bytes.get_u64())
    }

    /// A string; `None` for the null string (-1).
    fn nullable_string(&mut self, what: &'static str) -> Result<Option<String>, DecodeError> {
        let len = self.u16(what)? as i16;
        if len < 0 {
            return Ok(None);
        }
        let len = len as usize;
        self.need(len, what)?;
        let raw = self.bytes.split_to(len);
        String::from_utf8(raw.to_vec())
            .map(Some)
            .map_err(|_| DecodeError::Invalid(what))
    }

    fn string(&mut self, what: &'static str) -> Result<String, DecodeError> {
        Ok(self.nullable_string(what)?.unwrap_or_default())
    }

    fn bytes(&mut self, what: &'static str) -> Result<Bytes, DecodeError> {
        let len = self.u32(what)? as i32;
        if len < 0 {
            return Ok(Bytes::new());
        }
        let len = len as usize;
        self.need(len, what)?;
        Ok(self.bytes.split_to(len))
    }

    /// An array's count, checked against the bytes left (each item takes at least
    /// `min_item` bytes), so a huge count cannot make us allocate.
    fn count(&mut self, min_item: usize, what: &'static str) -> Result<usize, DecodeError> {
        let count = self.u32(what)? as i32;
        if count < 0 {
            return Ok(0);
        }
        let count = count as usize;
        if count.saturating_mul(min_item) > self.bytes.remaining() {
            return Err(DecodeError::Truncated(what));
        }
        Ok(count)
    }

    fn strings(&mut self, what: &'static str) -> Result<Vec<String>, DecodeError> {
        let count = self.count(2, what)?;
        (0..count).map(|_| self.string(what)).collect()
    }

    fn pairs(&mut self, what: &'static str) -> Result<Vec<(String, String)>, DecodeError> {
        let count = self.count(4, what)?;
        (0..count)
            .map(|_| Ok((self.string(what)?, self.string(what)?)))
            .collect()
    }

    fn offset(&mut self) -> Result<OffsetSpecification, DecodeError> {
        Ok(match self.u16("offset type")? {
            1 => OffsetSpecification::First,
            2 => OffsetSpecification::Last,
            3 => OffsetSpecification::Next,
            4 => OffsetSpecification::Offset(self.u64("offset")?),
            5 => OffsetSpecification::Timestamp(self.u64("timestamp")? as i64),
            _ => return Err(DecodeError::Invalid("offset type")),
        })
    }
}

/// Decodes one frame (without its size prefix).
pub fn decode(frame: Bytes) -> Result<Request, DecodeError> {
    let mut c = Cursor { bytes: frame };
    let key = c.u16("key")?;
    let version = c.u16("version")?;
    let request = match key {
        key::DECLARE_PUBLISHER => Request::DeclarePublisher {
            correlation_id: c.u32("correlation id")?,
            publisher_id: c.u8("publisher id")?,
            reference: c
                .nullable_string("publisher reference")?
                .filter(|r| !r.is_empty()),
            stream: c.string("stream")?,
        },
        key::PUBLISH => {
            let publisher_id = c.u8("publisher id")?;
            let count = c.count(12, "published messages")?;
            let mut messages = Vec::with_capacity(count);
            for _ in 0..count {
                let publishing_id = c.u64("publishing id")?;
                let filter_value = if version >= 2 {
                    c.nullable_string("filter value")?
                } else {
                    None
                };
                messages.push(PublishedMessage {
                    publishing_id,
                    filter_value,
                    message: c.bytes("message")?,
                });
            }
            Request::Publish {
                version,
                publisher_id,
                messages,
            }
        }
        key::QUERY_PUBLISHER_SEQUENCE => Request::QueryPublisherSequence {
            correlation_id: c.u32("correlation id")?,
            reference: c.string("publisher reference")?,
            stream: c.string("stream")?,
        },
        key::DELETE_PUBLISHER => Request::DeletePublisher {
            correlation_id: c.u32("correlation id")?,
            publisher_id: c.u8("publisher id")?,
        },
        key::SUBSCRIBE => Request::Subscribe {
            correlation_id: c.u32("correlation id")?,
            subscription_id: c.u8("subscription id")?,
            stream: c.string("stream")?,
            offset: c.offset()?,
            credit: c.u16("credit")?,
            properties: if c.bytes.has_remaining() {
                c.pairs("properties")?
            } else {
                Vec::new()
            },
        },
        key::CREDIT => Request::Credit {
            subscription_id: c.u8("subscription id")?,
            credit: c.u16("credit")?,
        },
        key::STORE_OFFSET => Request::StoreOffset {
            reference: c.string("reference")?,
            stream: c.string("stream")?,
            offset: c.u64("offset")?,
        },
        key::QUERY_OFFSET => Request::QueryOffset {
            correlation_id: c.u32("correlation id")?,
            reference: c.string("reference")?,
            stream: c.string("stream")?,
        },
        key::UNSUBSCRIBE => Request::Unsubscribe {
            correlation_id: c.u32("correlation id")?,
            subscription_id: c.u8("subscription id")?,
        },
        key::CREATE => Request::Create {
            correlation_id: c.u32("correlation id")?,
            stream: c.string("stream")?,
            arguments: c.pairs("arguments")?,
        },
        key::DELETE => Request::Delete {
            correlation_id: c.u32("correlation id")?,
            stream: c.string("stream")?,
        },
        key::METADATA => Request::Metadata {
            correlation_id: c.u32("correlation id")?,
            streams: c.strings("streams")?,
        },
        key::PEER_PROPERTIES => Request::PeerProperties {
            correlation_id: c.u32("correlation id")?,
            properties: c.pairs("peer properties")?,
        },
        key::SASL_HANDSHAKE => Request::SaslHandshake {
            correlation_id: c.u32("correlation id")?,
        },
        key::SASL_AUTHENTICATE => Request::SaslAuthenticate {
            correlation_id: c.u32("correlation id")?,
            mechanism: c.string("mechanism")?,
            data: c.bytes("SASL data")?,
        },
        // Clients answer the server's Tune with the same key, with or without the
        // response bit.
        key::TUNE | 0x8014 => Request::Tune {
            frame_max: c.u32("frame max")?,
            heartbeat: c.u32("heartbeat")?,
        },
        key::OPEN => Request::Open {
            correlation_id: c.u32("correlation id")?,
            vhost: c.string("virtual host")?,
        },
        key::CLOSE => Request::Close {
            correlation_id: c.u32("correlation id")?,
            code: c.u16("closing code")?,
            reason: c.string("closing reason")?,
        },
        0x8016 => Request::CloseResponse {
            correlation_id: c.u32("correlation id")?,
            code: c.u16("response code")?,
        },
        key::HEARTBEAT => Request::Heartbeat,
        key::ROUTE => Request::Route {
            correlation_id: c.u32("correlation id")?,
            routing_key: c.string("routing key")?,
            super_stream: c.string("super stream")?,
        },
        key::PARTITIONS => Request::Partitions {
            correlation_id: c.u32("correlation id")?,
            super_stream: c.string("super stream")?,
        },
        0x801a => {
            let correlation_id = c.u32("correlation id")?;
            let code = c.u16("response code")?;
            let offset = match c.bytes.remaining() {
                0 => None,
                _ if c.bytes[..2] == [0, 0] => None,
                _ => Some(c.offset()?),
            };
            Request::ConsumerUpdateResponse {
                correlation_id,
                code,
                offset,
            }
        }
        key::EXCHANGE_COMMAND_VERSIONS => {
            let correlation_id = c.u32("correlation id")?;
            let count = c.count(6, "commands")?;
            let commands = (0..count)
                .map(|_| Ok((c.u16("key")?, c.u16("min version")?, c.u16("max version")?)))
                .collect::<Result<_, DecodeError>>()?;
            Request::ExchangeCommandVersions {
                correlation_id,
                commands,
            }
        }
        key::STREAM_STATS => Request::StreamStats {
            correlation_id: c.u32("correlation id")?,
            stream: c.string("stream")?,
        },
        key::CREATE_SUPER_STREAM => Request::CreateSuperStream {
            correlation_id: c.u32("correlation id")?,
            name: c.string("super stream")?,
            partitions: c.strings("partitions")?,
            binding_keys: c.strings("binding keys")?,
            arguments: c.pairs("arguments")?,
        },
        key::DELETE_SUPER_STREAM => Request::DeleteSuperStream {
            correlation_id: c.u32("correlation id")?,
            name: c.string("super stream")?,
        },
        key::RESOLVE_OFFSET_SPEC => Request::ResolveOffsetSpec {
            correlation_id: c.u32("correlation id")?,
            stream: c.string("stream")?,
            offset: c.offset()?,
            properties: if c.bytes.has_remaining() {
                c.pairs("properties")?
            } else {
                Vec::new()
            },
        },
        _ => Request::Unknown { key, version },
    };
    Ok(request)
}
