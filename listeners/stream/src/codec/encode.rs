//! The server's frames, written into one output buffer (each with its size prefix), and
//! [`request`], the client side of every request (tests, the perf tool).

use bytes::{BufMut, Bytes, BytesMut};

use super::{key, OffsetSpecification, Request};

/// Writes a frame: reserves the size prefix, lets `body` write, then fills the size in.
fn frame(out: &mut BytesMut, key: u16, version: u16, body: impl FnOnce(&mut BytesMut)) {
    let start = out.len();
    out.put_u32(0);
    out.put_u16(key);
    out.put_u16(version);
    body(out);
    let size = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

fn put_string(out: &mut BytesMut, text: &str) {
    let text = &text.as_bytes()[..text.len().min(i16::MAX as usize)];
    out.put_i16(text.len() as i16);
    out.extend_from_slice(text);
}

fn put_nullable_string(out: &mut BytesMut, text: Option<&str>) {
    match text {
        Some(text) => put_string(out, text),
        None => out.put_i16(-1),
    }
}

fn put_bytes(out: &mut BytesMut, bytes: &[u8]) {
    out.put_i32(bytes.len() as i32);
    out.extend_from_slice(bytes);
}

fn put_pairs(out: &mut BytesMut, pairs: &[(String, String)]) {
    out.put_i32(pairs.len() as i32);
    for (key, value) in pairs {
        put_string(out, key);
        put_string(out, value);
    }
}

fn put_strings(out: &mut BytesMut, strings: &[String]) {
    out.put_i32(strings.len() as i32);
    for text in strings {
        put_string(out, text);
    }
}

fn put_offset(out: &mut BytesMut, offset: OffsetSpecification) {
    match offset {
        OffsetSpecification::First => out.put_u16(1),
        OffsetSpecification::Last => out.put_u16(2),
        OffsetSpecification::Next => out.put_u16(3),
        OffsetSpecification::Offset(offset) => {
            out.put_u16(4);
            out.put_u64(offset);
        }
        OffsetSpecification::Timestamp(timestamp) => {
            out.put_u16(5);
            out.put_i64(timestamp);
        }
    }
}

/// A response with only a code.
pub fn response(out: &mut BytesMut, request_key: u16, correlation_id: u32, code: u16) {
    frame(out, request_key | key::RESPONSE, 1, |out| {
        out.put_u32(correlation_id);
        out.put_u16(code);
    });
}

/// A response with a code then `tail`.
pub fn response_with(
    out: &mut BytesMut,
    request_key: u16,
    correlation_id: u32,
    code: u16,
    tail: impl FnOnce(&mut BytesMut),
) {
    frame(out, request_key | key::RESPONSE, 1, |out| {
        out.put_u32(correlation_id);
        out.put_u16(code);
        tail(out);
    });
}

/// PeerProperties response.
pub fn peer_properties(out: &mut BytesMut, correlation_id: u32, properties: &[(String, String)]) {
    response_with(
        out,
        key::PEER_PROPERTIES,
        correlation_id,
        super::code::OK,
        |out| put_pairs(out, properties),
    );
}

/// SaslHandshake response.
pub fn sasl_handshake(out: &mut BytesMut, correlation_id: u32, mechanisms: &[String]) {
    response_with(
        out,
        key::SASL_HANDSHAKE,
        correlation_id,
        super::code::OK,
        |out| put_strings(out, mechanisms),
    );
}

/// SaslAuthenticate response (no challenge data).
pub fn sasl_authenticate(out: &mut BytesMut, correlation_id: u32, code: u16) {
    response(out, key::SASL_AUTHENTICATE, correlation_id, code);
}

/// The server's Tune.
pub fn tune(out: &mut BytesMut, frame_max: u32, heartbeat: u32) {
    frame(out, key::TUNE, 1, |out| {
        out.put_u32(frame_max);
        out.put_u32(heartbeat);
    });
}

/// Open response.
pub fn open(out: &mut BytesMut, correlation_id: u32, code: u16, properties: &[(String, String)]) {
    response_with(out, key::OPEN, correlation_id, code, |out| {
        if code == super::code::OK {
            put_pairs(out, properties)
        }
    });
}

/// A Close the server starts.
pub fn close(out: &mut BytesMut, correlation_id: u32, code: u16, reason: &str) {
    frame(out, key::CLOSE, 1, |out| {
        out.put_u32(correlation_id);
        out.put_u16(code);
        put_string(out, reason);
    });
}

/// Heartbeat.
pub fn heartbeat(out: &mut BytesMut) {
    frame(out, key::HEARTBEAT, 1, |_| {});
}

/// PublishConfirm.
pub fn publish_confirm(out: &mut BytesMut, publisher_id: u8, ids: &[u64]) {
    frame(out, key::PUBLISH_CONFIRM, 1, |out| {
        out.put_u8(publisher_id);
        out.put_i32(ids.len() as i32);
        for id in ids {
            out.put_u64(*id);
        }
    });
}

/// PublishError: one code for each of `ids`.
pub fn publish_error(out: &mut BytesMut, publisher_id: u8, ids: &[u64], code: u16) {
    frame(out, key::PUBLISH_ERROR, 1, |out| {
        out.put_u8(publisher_id);
        out.put_i32(ids.len() as i32);
        for id in ids {
            out.put_u64(*id);
            out.put_u16(code);
        }
    });
}

/// Deliver of one chunk (`chunk` as [`warren_core::stream_log::chunk::Chunk::wire_bytes`]
/// gives it); version 2 adds the committed chunk id.
pub fn deliver(
    out: &mut BytesMut,
    version: u16,
    subscription_id: u8,
    committed: u64,
    chunk: &[u8],
) {
    frame(out, key::DELIVER, version, |out| {
        out.put_u8(subscription_id);
        if version >= 2 {
            out.put_u64(committed);
        }
        out.extend_from_slice(chunk);
    });
}

/// Deliver of a chunk read from a stream, written straight into `out`.
pub fn deliver_chunk(
    out: &mut BytesMut,
    version: u16,
    subscription_id: u8,
    committed: u64,
    chunk: &warren_core::stream_log::chunk::Chunk,
) {
    frame(out, key::DELIVER, version, |out| {
        out.put_u8(subscription_id);
        if version >= 2 {
            out.put_u64(committed);
        }
        chunk.write_wire(out);
    });
}

/// Credit response (only sent for an unknown subscription).
pub fn credit_response(out: &mut BytesMut, code: u16, subscription_id: u8) {
    frame(out, key::CREDIT | key::RESPONSE, 1, |out| {
        out.put_u16(code);
        out.put_u8(subscription_id);
    });
}

/// MetadataUpdate (the stream went away).
pub fn metadata_update(out: &mut BytesMut, code: u16, stream: &str) {
    frame(out, key::METADATA_UPDATE, 1, |out| {
        out.put_u16(code);
        put_string(out, stream);
    });
}

/// One stream of a Metadata response.
pub struct StreamMetadata<'a> {
    /// The stream.
    pub name: &'a str,
    /// OK or STREAM_DOES_NOT_EXIST.
    pub code: u16,
    /// The leader's broker reference.
    pub leader: u16,
    /// The replicas' broker references.
    pub replicas: &'a [u16],
}

/// Metadata response.
pub fn metadata(
    out: &mut BytesMut,
    correlation_id: u32,
    brokers: &[(u16, &str, u32)],
    streams: &[StreamMetadata<'_>],
) {
    frame(out, key::METADATA | key::RESPONSE, 1, |out| {
        out.put_u32(correlation_id);
        out.put_i32(brokers.len() as i32);
        for (reference, host, port) in brokers {
            out.put_u16(*reference);
            put_string(out, host);
            out.put_u32(*port);
        }
        out.put_i32(streams.len() as i32);
        for stream in streams {
            put_string(out, stream.name);
            out.put_u16(stream.code);
            out.put_u16(stream.leader);
            out.put_i32(stream.replicas.len() as i32);
            for replica in stream.replicas {
                out.put_u16(*replica);
            }
        }
    });
}

/// A `u64` after the code (QueryPublisherSequence, QueryOffset).
pub fn response_u64(
    out: &mut BytesMut,
    request_key: u16,
    correlation_id: u32,
    code: u16,
    value: u64,
) {
    response_with(out, request_key, correlation_id, code, |out| {
        out.put_u64(value)
    });
}

/// ExchangeCommandVersions response.
pub fn command_versions(out: &mut BytesMut, correlation_id: u32, commands: &[(u16, u16, u16)]) {
    response_with(
        out,
        key::EXCHANGE_COMMAND_VERSIONS,
        correlation_id,
        super::code::OK,
        |out| {
            out.put_i32(commands.len() as i32);
            for (command, min, max) in commands {
                out.put_u16(*command);
                out.put_u16(*min);
                out.put_u16(*max);
            }
        },
    );
}

/// StreamStats response.
pub fn stream_stats(out: &mut BytesMut, correlation_id: u32, code: u16, stats: &[(&str, i64)]) {
    response_with(out, key::STREAM_STATS, correlation_id, code, |out| {
        out.put_i32(stats.len() as i32);
        for (name, value) in stats {
            put_string(out, name);
            out.put_i64(*value);
        }
    });
}

/// A list of streams after the code (Route, Partitions).
pub fn response_streams(
    out: &mut BytesMut,
    request_key: u16,
    correlation_id: u32,
    code: u16,
    streams: &[String],
) {
    response_with(out, request_key, correlation_id, code, |out| {
        put_strings(out, streams)
    });
}

/// ResolveOffsetSpec response: always an offset (type 4).
pub fn resolved_offset(out: &mut BytesMut, correlation_id: u32, code: u16, offset: u64) {
    response_with(out, key::RESOLVE_OFFSET_SPEC, correlation_id, code, |out| {
        out.put_u16(4);
        out.put_u64(offset);
    });
}

/// ConsumerUpdate: the server tells a single-active consumer whether it is active.
pub fn consumer_update(out: &mut BytesMut, correlation_id: u32, subscription_id: u8, active: bool) {
    frame(out, key::CONSUMER_UPDATE, 1, |out| {
        out.put_u32(correlation_id);
        out.put_u8(subscription_id);
        out.put_u8(u8::from(active));
    });
}

/// Encodes a request as a client sends it (with its size prefix).
pub fn request(out: &mut BytesMut, request: &Request) {
    match request {
        Request::DeclarePublisher {
            correlation_id,
            publisher_id,
            reference,
            stream,
        } => frame(out, key::DECLARE_PUBLISHER, 1, |out| {
            out.put_u32(*correlation_id);
            out.put_u8(*publisher_id);
            put_nullable_string(out, reference.as_deref());
            put_string(out, stream);
        }),
        Request::Publish {
            version,
            publisher_id,
            messages,
        } => frame(out, key::PUBLISH, *version, |out| {
            out.put_u8(*publisher_id);
            out.put_i32(messages.len() as i32);
            for message in messages {
                out.put_u64(message.publishing_id);
                if *version >= 2 {
                    put_nullable_string(out, message.filter_value.as_deref());
                }
                put_bytes(out, &message.message);
            }
        }),
        Request::QueryPublisherSequence {
            correlation_id,
            reference,
            stream,
        } => frame(out, key::QUERY_PUBLISHER_SEQUENCE, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, reference);
            put_string(out, stream);
        }),
        Request::DeletePublisher {
            correlation_id,
            publisher_id,
        } => frame(out, key::DELETE_PUBLISHER, 1, |out| {
            out.put_u32(*correlation_id);
            out.put_u8(*publisher_id);
        }),
        Request::Subscribe {
            correlation_id,
            subscription_id,
            stream,
            offset,
            credit,
            properties,
        } => frame(out, key::SUBSCRIBE, 1, |out| {
            out.put_u32(*correlation_id);
            out.put_u8(*subscription_id);
            put_string(out, stream);
            put_offset(out, *offset);
            out.put_u16(*credit);
            put_pairs(out, properties);
        }),
        Request::Credit {
            subscription_id,
            credit,
        } => frame(out, key::CREDIT, 1, |out| {
            out.put_u8(*subscription_id);
            out.put_u16(*credit);
        }),
        Request::StoreOffset {
            reference,
            stream,
            offset,
        } => frame(out, key::STORE_OFFSET, 1, |out| {
            put_string(out, reference);
            put_string(out, stream);
            out.put_u64(*offset);
        }),
        Request::QueryOffset {
            correlation_id,
            reference,
            stream,
        } => frame(out, key::QUERY_OFFSET, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, reference);
            put_string(out, stream);
        }),
        Request::Unsubscribe {
            correlation_id,
            subscription_id,
        } => frame(out, key::UNSUBSCRIBE, 1, |out| {
            out.put_u32(*correlation_id);
            out.put_u8(*subscription_id);
        }),
        Request::Create {
            correlation_id,
            stream,
            arguments,
        } => frame(out, key::CREATE, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, stream);
            put_pairs(out, arguments);
        }),
        Request::Delete {
            correlation_id,
            stream,
        } => frame(out, key::DELETE, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, stream);
        }),
        Request::Metadata {
            correlation_id,
            streams,
        } => frame(out, key::METADATA, 1, |out| {
            out.put_u32(*correlation_id);
            put_strings(out, streams);
        }),
        Request::PeerProperties {
            correlation_id,
            properties,
        } => frame(out, key::PEER_PROPERTIES, 1, |out| {
            out.put_u32(*correlation_id);
            put_pairs(out, properties);
        }),
        Request::SaslHandshake { correlation_id } => frame(out, key::SASL_HANDSHAKE, 1, |out| {
            out.put_u32(*correlation_id)
        }),
        Request::SaslAuthenticate {
            correlation_id,
            mechanism,
            data,
        } => frame(out, key::SASL_AUTHENTICATE, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, mechanism);
            put_bytes(out, data);
        }),
        Request::Tune {
            frame_max,
            heartbeat,
        } => tune(out, *frame_max, *heartbeat),
        Request::Open {
            correlation_id,
            vhost,
        } => frame(out, key::OPEN, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, vhost);
        }),
        Request::Close {
            correlation_id,
            code,
            reason,
        } => close(out, *correlation_id, *code, reason),
        Request::CloseResponse {
            correlation_id,
            code,
        } => response(out, key::CLOSE, *correlation_id, *code),
        Request::Heartbeat => heartbeat(out),
        Request::Route {
            correlation_id,
            routing_key,
            super_stream,
        } => frame(out, key::ROUTE, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, routing_key);
            put_string(out, super_stream);
        }),
        Request::Partitions {
            correlation_id,
            super_stream,
        } => frame(out, key::PARTITIONS, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, super_stream);
        }),
        Request::ConsumerUpdateResponse {
            correlation_id,
            code,
            offset,
        } => response_with(
            out,
            key::CONSUMER_UPDATE,
            *correlation_id,
            *code,
            |out| match offset {
                Some(offset) => put_offset(out, *offset),
                None => out.put_u16(0),
            },
        ),
        Request::ExchangeCommandVersions {
            correlation_id,
            commands,
        } => frame(out, key::EXCHANGE_COMMAND_VERSIONS, 1, |out| {
            out.put_u32(*correlation_id);
            out.put_i32(commands.len() as i32);
            for (command, min, max) in commands {
                out.put_u16(*command);
                out.put_u16(*min);
                out.put_u16(*max);
            }
        }),
        Request::StreamStats {
            correlation_id,
            stream,
        } => frame(out, key::STREAM_STATS, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, stream);
        }),
        Request::CreateSuperStream {
            correlation_id,
            name,
            partitions,
            binding_keys,
            arguments,
        } => frame(out, key::CREATE_SUPER_STREAM, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, name);
            put_strings(out, partitions);
            put_strings(out, binding_keys);
            put_pairs(out, arguments);
        }),
        Request::DeleteSuperStream {
            correlation_id,
            name,
        } => frame(out, key::DELETE_SUPER_STREAM, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, name);
        }),
        Request::ResolveOffsetSpec {
            correlation_id,
            stream,
            offset,
            properties,
        } => frame(out, key::RESOLVE_OFFSET_SPEC, 1, |out| {
            out.put_u32(*correlation_id);
            put_string(out, stream);
            put_offset(out, *offset);
            put_pairs(out, properties);
        }),
        Request::Unknown { key, version } => frame(out, *key, *version, |_| {}),
    }
}

/// Bytes of a frame body (tests).
pub fn to_bytes(write: impl FnOnce(&mut BytesMut)) -> Bytes {
    let mut out = BytesMut::new();
    write(&mut out);
    out.freeze()
}
