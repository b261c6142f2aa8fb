//! A sorted set of routing targets that stays small when it holds few and stays fast when it
//! holds many: the values of one topic-trie node or one direct-exchange routing key.
//!
//! Nearly every such set holds one target (every MQTT subscription has its own queue), so the
//! few case is a sorted `Vec` grown one slot at a time. A set can also hold a million targets
//! (a whole device fleet subscribed to one broadcast filter); a sorted `Vec` would then cost a
//! memmove of the whole set per bind or unbind, so past [`FEW_AT_MOST`] the set moves into a
//! B-tree with O(log n) inserts and removes.

use std::collections::BTreeSet;

/// Largest set kept as a sorted `Vec`.
const FEW_AT_MOST: usize = 32;

/// A set kept back in a `Vec` once it shrinks to this size (below [`FEW_AT_MOST`], so a set
/// near the threshold does not convert back and forth on every bind and unbind).
const BACK_TO_FEW_AT: usize = FEW_AT_MOST / 2;

/// A set of `T`, iterated in sorted order.
#[derive(Debug, Clone)]
pub enum TargetSet<T> {
    /// Up to [`FEW_AT_MOST`] values, sorted, without duplicates.
    Few(Vec<T>),
    /// More values.
    Many(Box<BTreeSet<T>>),
}

impl<T> Default for TargetSet<T> {
    fn default() -> Self {
        TargetSet::Few(Vec::new())
    }
}

impl<T> TargetSet<T> {
    /// Whether the set holds nothing.
    pub fn is_empty(&self) -> bool {
        match self {
            TargetSet::Few(values) => values.is_empty(),
            TargetSet::Many(values) => values.is_empty(),
        }
    }

    /// How many values the set holds.
    pub fn len(&self) -> usize {
        match self {
            TargetSet::Few(values) => values.len(),
            TargetSet::Many(values) => values.len(),
        }
    }
}

impl<T: Ord> TargetSet<T> {
    /// Adds `value`; false when it was there already.
    pub fn insert(&mut self, value: T) -> bool {
        match self {
            TargetSet::Few(values) => match values.binary_search(&value) {
                Ok(_) => false,
                Err(index) if values.len() < FEW_AT_MOST => {
                    // Most sets hold one value: grow one at a time instead of reserving four.
                    values.reserve_exact(1);
                    values.insert(index, value);
                    true
                }
                Err(_) => {
                    let mut many: BTreeSet<T> = std::mem::take(values).into_iter().collect();
                    many.insert(value);
                    *self = TargetSet::Many(Box::new(many));
                    true
                }
            },
            TargetSet::Many(values) => values.insert(value),
        }
    }

    /// Removes `value`; false when it was not there.
    pub fn remove(&mut self, value: &T) -> bool {
        match self {
            TargetSet::Few(values) => match values.binary_search(value) {
                Ok(index) => {
                    values.remove(index);
                    true
                }
                Err(_) => false,
            },
            TargetSet::Many(values) => {
                let removed = values.remove(value);
                if values.len() <= BACK_TO_FEW_AT {
                    let few: Vec<T> = std::mem::take(&mut **values).into_iter().collect();
                    *self = TargetSet::Few(few);
                }
                removed
            }
        }
    }

    /// The values, in sorted order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        let (few, many) = match self {
            TargetSet::Few(values) => (Some(values.iter()), None),
            TargetSet::Many(values) => (None, Some(values.iter())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }
}

impl<T: Ord + Clone> TargetSet<T> {
    /// Appends every value to `out`, in sorted order.
    pub fn extend_into(&self, out: &mut Vec<T>) {
        match self {
            TargetSet::Few(values) => out.extend_from_slice(values),
            TargetSet::Many(values) => out.extend(values.iter().cloned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_set_is_no_larger_than_a_vec() {
        assert_eq!(
            std::mem::size_of::<TargetSet<crate::binding::Target>>(),
            std::mem::size_of::<Vec<crate::binding::Target>>()
        );
    }

    #[test]
    fn grows_into_a_tree_and_shrinks_back() {
        let mut set = TargetSet::default();
        for value in (0..100u32).rev() {
            assert!(set.insert(value));
            assert!(!set.insert(value));
        }
        assert!(matches!(set, TargetSet::Many(_)));
        assert_eq!(set.len(), 100);
        for value in 0..90u32 {
            assert!(set.remove(&value));
            assert!(!set.remove(&value));
        }
        assert!(matches!(set, TargetSet::Few(_)));
        let mut out = vec![7];
        set.extend_into(&mut out);
        assert_eq!(out, [7, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99]);
    }

    proptest! {
        #[test]
        fn behaves_as_a_btree_set(operations in prop::collection::vec((any::<bool>(), 0..80u8), 0..400)) {
            let mut set = TargetSet::default();
            let mut reference = BTreeSet::new();
            for (insert, value) in operations {
                if insert {
                    prop_assert_eq!(set.insert(value), reference.insert(value));
                } else {
                    prop_assert_eq!(set.remove(&value), reference.remove(&value));
                }
                prop_assert_eq!(set.len(), reference.len());
                prop_assert_eq!(set.is_empty(), reference.is_empty());
            }
            let mut out = Vec::new();
            set.extend_into(&mut out);
            prop_assert_eq!(out, reference.into_iter().collect::<Vec<_>>());
        }
    }
}
