//! What a stream remembers besides its records: consumer offsets stored by reference
//! (`StoreOffset`) and each named producer's last publishing id (deduplication).
//!
//! Both live in the log itself: a user chunk's trailer carries the last publishing id of
//! each producer that wrote to it, a tracking-delta chunk carries offsets stored since, and
//! every segment starts with a tracking-snapshot chunk of the whole state, so deleting old
//! segments (retention) loses nothing and recovery only replays the last segment.

use std::collections::HashMap;

use bytes::{Buf, BufMut, BytesMut};

/// Longest consumer or producer reference, as RabbitMQ bounds it.
pub const MAX_REFERENCE_LENGTH: usize = 256;

/// Consumer offsets and producer sequences.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tracking {
    /// Stored offset by consumer reference.
    pub offsets: HashMap<String, u64>,
    /// Last publishing id by producer reference.
    pub producers: HashMap<String, u64>,
}

fn put_string(out: &mut BytesMut, text: &str) {
    out.put_u16(text.len() as u16);
    out.extend_from_slice(text.as_bytes());
}

fn get_string(input: &mut &[u8]) -> Option<String> {
    if input.remaining() < 2 {
        return None;
    }
    let len = usize::from(input.get_u16());
    if input.remaining() < len {
        return None;
    }
    let text = std::str::from_utf8(&input[..len]).ok()?.to_owned();
    input.advance(len);
    Some(text)
}

/// Encodes `(reference, value)` pairs: a `u32` count, then each as a string and a `u64`.
pub fn encode_pairs<'a>(pairs: impl ExactSizeIterator<Item = (&'a String, &'a u64)>) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_u32(pairs.len() as u32);
    for (reference, value) in pairs {
        put_string(&mut out, reference);
        out.put_u64(*value);
    }
    out
}

/// `(reference, value)` pairs as [`encode_pairs`] writes them.
pub type Pairs = Vec<(String, u64)>;

/// Decodes what [`encode_pairs`] wrote, and the bytes after it; `None` when malformed.
pub fn decode_pairs(mut input: &[u8]) -> Option<(Pairs, &[u8])> {
    if input.remaining() < 4 {
        return None;
    }
    let count = input.get_u32() as usize;
    let mut pairs = Vec::with_capacity(count.min(4096));
    for _ in 0..count {
        let reference = get_string(&mut input)?;
        if input.remaining() < 8 {
            return None;
        }
        pairs.push((reference, input.get_u64()));
    }
    Some((pairs, input))
}

impl Tracking {
    /// The data of a tracking-snapshot chunk: offsets, then producers.
    pub fn encode_snapshot(&self) -> BytesMut {
        let mut out = encode_pairs(self.offsets.iter());
        out.extend_from_slice(&encode_pairs(self.producers.iter()));
        out
    }

    /// Replaces the state with a snapshot's.
    pub fn apply_snapshot(&mut self, data: &[u8]) -> Option<()> {
        let (offsets, rest) = decode_pairs(data)?;
        let (producers, _) = decode_pairs(rest)?;
        self.offsets = offsets.into_iter().collect();
        self.producers = producers.into_iter().collect();
        Some(())
    }

    /// Applies a tracking-delta chunk's data (stored offsets).
    pub fn apply_offsets(&mut self, data: &[u8]) -> Option<()> {
        let (offsets, _) = decode_pairs(data)?;
        self.offsets.extend(offsets);
        Some(())
    }

    /// Applies a user chunk's trailer (producer sequences).
    pub fn apply_producers(&mut self, trailer: &[u8]) -> Option<()> {
        if trailer.is_empty() {
            return Some(());
        }
        let (producers, _) = decode_pairs(trailer)?;
        for (reference, sequence) in producers {
            let entry = self.producers.entry(reference).or_insert(sequence);
            *entry = (*entry).max(sequence);
        }
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_then_deltas_rebuild_the_state() {
        let mut state = Tracking::default();
        state.offsets.insert("app".into(), 7);
        state.producers.insert("producer-1".into(), 41);
        let snapshot = state.encode_snapshot();
        let mut rebuilt = Tracking::default();
        rebuilt.apply_snapshot(&snapshot).unwrap();
        assert_eq!(rebuilt, state);
        let delta = encode_pairs([(&"app".to_string(), &9u64)].into_iter());
        rebuilt.apply_offsets(&delta).unwrap();
        let trailer = encode_pairs([(&"producer-1".to_string(), &50u64)].into_iter());
        rebuilt.apply_producers(&trailer).unwrap();
        assert_eq!(rebuilt.offsets["app"], 9);
        assert_eq!(rebuilt.producers["producer-1"], 50);
        assert!(rebuilt
            .apply_snapshot(&snapshot[..snapshot.len() - 1])
            .is_none());
    }
}
