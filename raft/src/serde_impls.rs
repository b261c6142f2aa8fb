//! `Serialize`/`Deserialize` for the log entry data and the apply result, as their binary
//! encodings. warren-raft itself enables no openraft serde support, but features unify across
//! the workspace: when another crate turns on openraft's `serde` feature, openraft requires
//! these traits of every `RaftTypeConfig`'s `D` and `R`.

use serde::de::{Error as _, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use warren_core::quorum::codec::{decode_command, decode_reply, encode_command, encode_reply};

use crate::{Response, Stamped};

impl Serialize for Stamped {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut bytes = self.at.to_le_bytes().to_vec();
        encode_command(&mut bytes, &self.command);
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for Stamped {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bytes = deserializer.deserialize_byte_buf(Bytes)?;
        if bytes.len() < 8 {
            return Err(D::Error::custom("a stamped command is at least 8 bytes"));
        }
        let (at, command) = bytes.split_at(8);
        let at = u64::from_le_bytes(at.try_into().map_err(D::Error::custom)?);
        let command = decode_command(command).map_err(D::Error::custom)?;
        Ok(Stamped { at, command })
    }
}

impl Serialize for Response {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut bytes = Vec::new();
        encode_reply(&mut bytes, &self.0);
        serializer.serialize_bytes(&bytes)
    }
}

impl<'de> Deserialize<'de> for Response {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let bytes = deserializer.deserialize_byte_buf(Bytes)?;
        decode_reply(&bytes).map(Response).map_err(D::Error::custom)
    }
}

/// Accepts bytes however the format carries them (raw, or a sequence of numbers as JSON does).
struct Bytes;

impl<'de> Visitor<'de> for Bytes {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("bytes")
    }

    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }

    fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(v)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(byte) = seq.next_element::<u8>()? {
            out.push(byte);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes as Body;
    use warren_core::message::{Message, Properties};
    use warren_core::quorum::{Command, PublishId, Reply};

    use crate::{Response, Stamped};

    #[test]
    fn entries_and_replies_survive_a_serde_round_trip() {
        let stamped = Stamped {
            at: 1_700_000_000_000,
            command: Command::Enqueue {
                publish: Some(PublishId {
                    publisher: 3,
                    sequence: 9,
                }),
                message: Arc::new(Message {
                    exchange: Arc::from("x"),
                    routing_key: Arc::from("k"),
                    properties: Properties::default(),
                    encoded_properties: None,
                    body: Body::from_static(b"body"),
                }),
            },
        };
        let json = serde_json::to_string(&stamped).unwrap();
        let back: Stamped = serde_json::from_str(&json).unwrap();
        assert_eq!(format!("{back:?}"), format!("{stamped:?}"));
        let response = Response(Reply::Enqueued { id: 4 });
        let json = serde_json::to_string(&response).unwrap();
        let back: Response = serde_json::from_str(&json).unwrap();
        assert_eq!(format!("{back:?}"), format!("{response:?}"));
        assert!(serde_json::from_str::<Stamped>("[1,2]").is_err());
    }
}
