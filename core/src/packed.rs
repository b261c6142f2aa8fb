//! One allocation for the encoded properties and the body of a small message.
//!
//! A small message would otherwise cost one allocation for its body copy and keep the
//! connection's whole read buffer alive through a slice for its encoded properties. Packing
//! both into one exact-class allocation halves the allocations a queued message holds, frees
//! the read buffer, and makes dropping an expired message one `free` instead of two.

use bytes::Bytes;

/// Largest properties-plus-body size packed; larger messages keep their own buffers.
pub const PACK_AT_MOST: usize = 4064;

/// Properties and body bytes inline, in a size class of `N` bytes.
struct Packed<const N: usize> {
    len: usize,
    bytes: [u8; N],
}

impl<const N: usize> AsRef<[u8]> for Packed<N> {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

fn pack_into<const N: usize>(first: &[u8], second: &[u8]) -> Bytes {
    let mut packed = Packed {
        len: first.len() + second.len(),
        bytes: [0; N],
    };
    packed.bytes[..first.len()].copy_from_slice(first);
    packed.bytes[first.len()..packed.len].copy_from_slice(second);
    // `from_owner` boxes the owner with its reference count: one allocation in all.
    Bytes::from_owner(packed)
}

/// Copies `properties` and `body` into one shared allocation and returns the two views of it,
/// or `None` when together they are larger than [`PACK_AT_MOST`].
pub fn pack_properties_and_body(properties: &[u8], body: &[u8]) -> Option<(Bytes, Bytes)> {
    let total = properties.len() + body.len();
    // Size classes of 2^k - 16 bytes keep the allocation near a malloc bin with little slack.
    let joint = match total {
        0..=48 => pack_into::<48>(properties, body),
        49..=112 => pack_into::<112>(properties, body),
        113..=240 => pack_into::<240>(properties, body),
        241..=496 => pack_into::<496>(properties, body),
        497..=1008 => pack_into::<1008>(properties, body),
        1009..=2032 => pack_into::<2032>(properties, body),
        2033..=PACK_AT_MOST => pack_into::<PACK_AT_MOST>(properties, body),
        _ => return None,
    };
    Some((
        joint.slice(..properties.len()),
        joint.slice(properties.len()..),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn packed_views_equal_their_sources(
            properties in proptest::collection::vec(any::<u8>(), 0..300),
            body in proptest::collection::vec(any::<u8>(), 0..4000),
        ) {
            match pack_properties_and_body(&properties, &body) {
                Some((p, b)) => {
                    prop_assert_eq!(&p[..], &properties[..]);
                    prop_assert_eq!(&b[..], &body[..]);
                    // The views outlive each other independently.
                    drop(p);
                    prop_assert_eq!(&b[..], &body[..]);
                }
                None => prop_assert!(properties.len() + body.len() > PACK_AT_MOST),
            }
        }
    }
}
