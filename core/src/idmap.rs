//! Hash maps keyed by small integers (message ids, channel numbers) with a multiplicative hash
//! instead of SipHash: the keys come from the broker's own counters or a bounded channel
//! range, so hash flooding is not a concern, and these maps sit on the per-message path.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A hasher for integer keys: one multiplication (Fibonacci hashing).
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u16(&mut self, value: u16) {
        self.write_u64(u64::from(value));
    }

    fn write_u32(&mut self, value: u32) {
        self.write_u64(u64::from(value));
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0 ^ value).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn write_usize(&mut self, value: usize) {
        self.write_u64(value as u64);
    }
}

/// A `HashMap` keyed by integers, hashed with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_spread_and_round_trip() {
        let mut map: IdMap<u64, u64> = IdMap::default();
        for id in 0..10_000u64 {
            map.insert(id, id * 2);
        }
        assert_eq!(map.len(), 10_000);
        assert!((0..10_000u64).all(|id| map.get(&id) == Some(&(id * 2))));
        assert_eq!(map.remove(&5), Some(10));
    }
}
