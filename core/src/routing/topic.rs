//! Topic pattern matching, as RabbitMQ's topic exchange does it.
//!
//! A [`TopicTrie`] maps binding patterns (binding keys) to values, usually destination ids, and
//! answers "which values are bound by a pattern that matches this routing key?". It is the NATS
//! shape: one node per pattern word, with literal children in a hash map and the `*` and `#`
//! wildcards as two dedicated children, so matching a key costs one hash lookup per word per
//! live branch instead of one regex per binding.
//!
//! # Semantics (confirmed against RabbitMQ's source)
//!
//! From `deps/rabbit/src/rabbit_db_topic_exchange.erl` (`split_topic_key_binary/1`, `trie_match`)
//! and its test suite `deps/rabbit/test/rabbit_db_topic_exchange_SUITE.erl` (`ref_match/2`,
//! `topic_match_empty_routing_key`), in rabbitmq-server `main` (2026):
//!
//! - Keys and patterns are split on `.` with `binary:split(Key, <<".">>, [global])`, **except**
//!   that the empty string is special-cased to **zero** words (`split_topic_key_binary(<<>>) ->
//!   []`). So `""` has no words, `"."` has two empty words, `"a."` is `["a", ""]` and `"a..b"` has
//!   an empty middle word. Empty words are ordinary literal words.
//! - `*` matches exactly one word, which may be empty: `*` matches `"a"`, does **not** match the
//!   key `""` (zero words) nor `"."` (two empty words), and `*.*` matches `"."`.
//! - `#` matches zero or more words: `#` matches everything including `""`; `a.#` matches `a`.
//! - The empty pattern `""` (zero words) matches only the empty key `""`.
//! - A key word that happens to be `*` or `#` is just a word (RabbitMQ looks up the key's word as
//!   an edge label, but a literal `*`/`#` edge would match that word anyway).
//!
//! RabbitMQ's `main` branch has started rejecting binding keys with more than two `#` words
//! (`rabbit_exchange_type_topic:validate_binding/2`, not in a release as of 4.3.x); that is a
//! binding-validation policy for the exchange layer, not a matching rule, so this trie accepts any
//! pattern and stays polynomial on all of them (see [`TopicTrie::matches`]).

use std::collections::HashMap;

use super::target_set::TargetSet;

/// Topic bindings: binding patterns mapped to values, matched against routing keys.
///
/// `T` is the bound value, typically a destination id. It must be `Ord` because each node keeps
/// its values sorted (a [`TargetSet`]: no duplicates, O(log n) insert and remove) and because
/// [`matches`](Self::matches) deduplicates by sorting when several patterns match. `Ord` rather
/// than `Hash` so that deduplicating never allocates.
///
/// The trie's depth is the word count of its longest pattern, and insertion, removal, matching
/// and dropping recurse that deep; AMQP binding keys are short strings (at most 255 bytes, so at
/// most 256 words), which keeps that well within any thread's stack.
#[derive(Debug, Clone)]
pub struct TopicTrie<T> {
    root: Node<T>,
    bindings: usize,
}

#[derive(Debug, Clone)]
struct Node<T> {
    /// Values bound by the pattern that ends at this node; sorted, no duplicates.
    values: TargetSet<T>,
    /// Children for literal words, including the empty word.
    literals: Literals<T>,
    /// The child for the `*` word.
    star: Option<Box<Node<T>>>,
    /// The child for the `#` word.
    hash: Option<Box<Node<T>>>,
}

impl<T> Default for Node<T> {
    fn default() -> Self {
        Node {
            values: TargetSet::default(),
            literals: Literals::default(),
            star: None,
            hash: None,
        }
    }
}

/// Largest number of literal children kept in a list. Nearly every node has one child (an
/// MQTT device's own topic, `devices/42/commands`, is a chain of single children below the
/// shared `devices`), and a hash map costs at least four slots, ~440 bytes, for one child.
const FEW_LITERALS: usize = 8;

/// The literal children of a node: a list while there are few, a hash map beyond.
#[derive(Debug, Clone)]
enum Literals<T> {
    Few(Vec<(Box<str>, Node<T>)>),
    // Boxed so that the list, the common case, sets the enum's size (24 bytes, not 48).
    #[allow(clippy::box_collection)]
    Many(Box<HashMap<Box<str>, Node<T>>>),
}

impl<T> Default for Literals<T> {
    fn default() -> Self {
        Literals::Few(Vec::new())
    }
}

impl<T> Literals<T> {
    fn is_empty(&self) -> bool {
        match self {
            Literals::Few(few) => few.is_empty(),
            Literals::Many(many) => many.is_empty(),
        }
    }

    fn get(&self, word: &str) -> Option<&Node<T>> {
        match self {
            Literals::Few(few) => few.iter().find(|(w, _)| **w == *word).map(|(_, n)| n),
            Literals::Many(many) => many.get(word),
        }
    }

    fn get_mut(&mut self, word: &str) -> Option<&mut Node<T>> {
        match self {
            Literals::Few(few) => few.iter_mut().find(|(w, _)| **w == *word).map(|(_, n)| n),
            Literals::Many(many) => many.get_mut(word),
        }
    }

    fn get_or_insert(&mut self, word: &str) -> &mut Node<T> {
        if let Literals::Few(few) = self {
            if few.len() >= FEW_LITERALS && !few.iter().any(|(w, _)| **w == *word) {
                let many: HashMap<Box<str>, Node<T>> = std::mem::take(few).into_iter().collect();
                *self = Literals::Many(Box::new(many));
            }
        }
        match self {
            Literals::Few(few) => {
                let index = match few.iter().position(|(w, _)| **w == *word) {
                    Some(index) => index,
                    None => {
                        few.reserve_exact(1);
                        few.push((Box::from(word), Node::default()));
                        few.len() - 1
                    }
                };
                &mut few[index].1
            }
            Literals::Many(many) => many.entry(Box::from(word)).or_default(),
        }
    }

    fn remove(&mut self, word: &str) {
        match self {
            Literals::Few(few) => {
                if let Some(index) = few.iter().position(|(w, _)| **w == *word) {
                    few.swap_remove(index);
                }
            }
            Literals::Many(many) => {
                many.remove(word);
                if many.len() <= FEW_LITERALS / 2 {
                    *self = Literals::Few(std::mem::take(&mut **many).into_iter().collect());
                }
            }
        }
    }
}

impl<T> Node<T> {
    fn is_empty(&self) -> bool {
        self.values.is_empty()
            && self.literals.is_empty()
            && self.star.is_none()
            && self.hash.is_none()
    }
}

/// The words of a key or pattern still to be consumed: `None` when there are no more words,
/// `Some(text)` when `text.split('.')` are the remaining words (at least one, maybe empty).
///
/// Walking this by hand instead of holding a `Split` iterator keeps the hot path free of
/// allocation and gives every position a cheap identity (see [`position`]).
type Rest<'a> = Option<&'a str>;

/// Where a key or pattern of `text` starts: zero words for the empty string, as RabbitMQ's
/// `split_topic_key_binary(<<>>) -> []` says.
fn words(text: &str) -> Rest<'_> {
    if text.is_empty() {
        None
    } else {
        Some(text)
    }
}

/// Splits the first word off non-empty remaining words.
fn next_word(text: &str) -> (&str, Rest<'_>) {
    match text.find('.') {
        Some(dot) => (&text[..dot], Some(&text[dot + 1..])),
        None => (text, None),
    }
}

/// A number identifying a position in the routing key: larger means earlier. No words left is
/// 0; otherwise the remaining byte count plus one, so a single empty word (`Some("")`) is 1.
fn position(rest: Rest<'_>) -> usize {
    rest.map_or(0, |text| text.len() + 1)
}

impl<T> TopicTrie<T> {
    /// An empty trie.
    pub fn new() -> Self {
        TopicTrie {
            root: Node::default(),
            bindings: 0,
        }
    }

    /// Whether no bindings are stored.
    pub fn is_empty(&self) -> bool {
        self.bindings == 0
    }

    /// The number of distinct (pattern, value) bindings stored.
    pub fn len(&self) -> usize {
        self.bindings
    }
}

impl<T> Default for TopicTrie<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Clone + Ord> TopicTrie<T> {
    /// Binds `value` with `pattern`. Binding exactly the same (pattern, value) again changes
    /// nothing, since binding twice is not an error in AMQP.
    ///
    /// Patterns `#` and `#.#` match the same keys but are distinct bindings, as in RabbitMQ:
    /// each must be removed by its own text.
    pub fn insert(&mut self, pattern: &str, value: T) {
        let mut node = &mut self.root;
        let mut rest = words(pattern);
        while let Some(text) = rest {
            let (word, next) = next_word(text);
            node = match word {
                "*" => node.star.get_or_insert_with(Box::default),
                "#" => node.hash.get_or_insert_with(Box::default),
                literal => node.literals.get_or_insert(literal),
            };
            rest = next;
        }
        if node.values.insert(value) {
            self.bindings += 1;
        }
    }

    /// Unbinds `value` from `pattern`, pruning nodes left with neither values nor children so
    /// that churn (bind, unbind, repeat with new keys) does not grow the trie. Returns whether
    /// the binding existed.
    pub fn remove(&mut self, pattern: &str, value: &T) -> bool {
        let removed = remove_from(&mut self.root, words(pattern), value);
        if removed {
            self.bindings -= 1;
        }
        removed
    }

    /// Pushes onto `out` every value bound by a pattern that matches `routing_key`, each once.
    ///
    /// Values already in `out` before the call are left alone (and not deduplicated against), so
    /// a caller can collect from several exchanges into one buffer. When only one pattern
    /// matched, the values come out in sorted order straight from its node; when several did,
    /// the appended part is sorted and deduplicated in place. Either way nothing is allocated
    /// beyond `out`'s own growth, except as described next.
    ///
    /// Work is bounded by construction: every (trie node, key position) pair is expanded at most
    /// once, so a match costs O(nodes × words) at worst even for patterns like
    /// `#.#.#.#.#.#.#.#.#.#.x`. Patterns with at most one `#` need no bookkeeping for that (a
    /// node can then only be reached one way); once a walk has gone through two `#` nodes it
    /// records, per `#` node, the earliest key position from which it was entered, which needs
    /// a small map allocated lazily for that match. RabbitMQ's `trie_match` uses the same
    /// two-`#` threshold for its memo.
    pub fn matches(&self, routing_key: &str, out: &mut Vec<T>) {
        let start = out.len();
        let mut walk = Walk {
            out,
            contributing_nodes: 0,
            hash_entries: None,
        };
        walk.visit(&self.root, words(routing_key), 0);
        if walk.contributing_nodes > 1 {
            dedup_tail(out, start);
        }
    }
}

/// Removes `value` from the node that `rest` leads to, pruning emptied children on the way back.
fn remove_from<T: Ord>(node: &mut Node<T>, rest: Rest<'_>, value: &T) -> bool {
    let Some(text) = rest else {
        return node.values.remove(value);
    };
    let (word, next) = next_word(text);
    match word {
        "*" => remove_from_boxed(&mut node.star, next, value),
        "#" => remove_from_boxed(&mut node.hash, next, value),
        literal => {
            let Some(child) = node.literals.get_mut(literal) else {
                return false;
            };
            let removed = remove_from(child, next, value);
            if child.is_empty() {
                node.literals.remove(literal);
            }
            removed
        }
    }
}

fn remove_from_boxed<T: Ord>(slot: &mut Option<Box<Node<T>>>, rest: Rest<'_>, value: &T) -> bool {
    let Some(child) = slot else {
        return false;
    };
    let removed = remove_from(child, rest, value);
    if child.is_empty() {
        *slot = None;
    }
    removed
}

/// Sorts and deduplicates `out[start..]` in place, leaving `out[..start]` untouched.
fn dedup_tail<T: Ord>(out: &mut Vec<T>, start: usize) {
    out[start..].sort_unstable();
    let mut kept = start;
    for read in start..out.len() {
        if kept == start || out[read] != out[kept - 1] {
            out.swap(read, kept);
            kept += 1;
        }
    }
    out.truncate(kept);
}

/// The state of one [`TopicTrie::matches`] call.
struct Walk<'o, T> {
    out: &'o mut Vec<T>,
    /// How many nodes pushed values; with more than one, values may repeat.
    contributing_nodes: usize,
    /// For `#` nodes reached through another `#`: node address to the earliest key
    /// [`position`] (largest number) it has been entered from. Entering a `#` node at position
    /// p covers every later position too, so a later entry at or after the recorded one has
    /// nothing new to do. `None` until first needed, so simple matches allocate nothing.
    hash_entries: Option<HashMap<usize, usize>>,
}

impl<T: Clone + Ord> Walk<'_, T> {
    /// Matches the remaining key words `rest` from `node`. `hashes` counts the `#` nodes on
    /// the path to `node`.
    fn visit(&mut self, node: &Node<T>, rest: Rest<'_>, hashes: u32) {
        match rest {
            None => {
                if !node.values.is_empty() {
                    node.values.extend_into(self.out);
                    self.contributing_nodes += 1;
                }
            }
            Some(text) => {
                let (word, next) = next_word(text);
                if let Some(child) = node.literals.get(word) {
                    self.visit(child, next, hashes);
                }
                if let Some(child) = &node.star {
                    self.visit(child, next, hashes);
                }
            }
        }
        // `#` may match zero words, so it is tried with no words left as well.
        if let Some(child) = &node.hash {
            self.enter_hash(child, rest, hashes + 1);
        }
    }

    /// Lets the `#` node `hash_node` absorb zero or more words from `rest`, matching its
    /// children after each choice.
    fn enter_hash(&mut self, hash_node: &Node<T>, mut rest: Rest<'_>, hashes: u32) {
        // With fewer than two `#` on the path, this node is entered from exactly one
        // position, so there is nothing to remember.
        let stop_at = if hashes >= 2 {
            let entries = self.hash_entries.get_or_insert_with(HashMap::new);
            let key = hash_node as *const Node<T> as usize;
            let here = position(rest);
            match entries.get(&key).copied() {
                Some(done_from) if done_from >= here => return,
                done_from => {
                    entries.insert(key, here);
                    done_from
                }
            }
        } else {
            None
        };
        loop {
            if stop_at.is_some_and(|done_from| position(rest) <= done_from) {
                return;
            }
            self.visit(hash_node, rest, hashes);
            match rest {
                None => return,
                Some(text) => rest = next_word(text).1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn matched(trie: &TopicTrie<u32>, key: &str) -> Vec<u32> {
        let mut out = Vec::new();
        trie.matches(key, &mut out);
        out.sort_unstable();
        out
    }

    fn single_match(pattern: &str, key: &str) -> bool {
        let mut trie = TopicTrie::new();
        trie.insert(pattern, 1u32);
        !matched(&trie, key).is_empty()
    }

    /// A straightforward matcher over word lists, mirroring RabbitMQ's `ref_match/2` from
    /// rabbit_db_topic_exchange_SUITE.erl.
    fn reference_match(pattern: &[&str], key: &[&str]) -> bool {
        match (pattern.split_first(), key.split_first()) {
            (None, None) => true,
            (Some((&"#", rest)), _) => {
                (0..=key.len()).any(|skipped| reference_match(rest, &key[skipped..]))
            }
            (Some((&"*", rest)), Some((_, key_rest))) => reference_match(rest, key_rest),
            (Some((word, rest)), Some((key_word, key_rest))) => {
                word == key_word && reference_match(rest, key_rest)
            }
            _ => false,
        }
    }

    fn split(text: &str) -> Vec<&str> {
        if text.is_empty() {
            Vec::new()
        } else {
            text.split('.').collect()
        }
    }

    #[test]
    fn pattern_table_matches_rabbitmq_semantics() {
        let cases: &[(&str, &str, bool)] = &[
            // The tutorial's examples.
            ("*.orange.*", "quick.orange.rabbit", true),
            ("*.orange.*", "quick.orange.male.rabbit", false),
            ("*.orange.*", "orange", false),
            ("*.*.rabbit", "lazy.orange.rabbit", true),
            ("*.*.rabbit", "quick.brown.fox", false),
            ("*.*.rabbit", "lazy.rabbit", false),
            ("lazy.#", "lazy.orange.male.rabbit", true),
            ("lazy.#", "lazy", true),
            ("lazy.#", "lazyx", false),
            ("lazy.#", "quick.lazy", false),
            // `#` alone and doubled.
            ("#", "", true),
            ("#", "a", true),
            ("#", "a.b.c", true),
            ("#", ".", true),
            ("#.#", "", true),
            ("#.#", "a.b", true),
            // `#` in the middle and at the start.
            ("a.#.b", "a.b", true),
            ("a.#.b", "a.x.y.b", true),
            ("a.#.b", "a.b.c", false),
            ("a.#.b", "b", false),
            ("#.a", "a", true),
            ("#.a", "x.y.a", true),
            ("#.a", "a.x", false),
            ("#.a", "", false),
            // `*` before `#` needs at least one word.
            ("a.*.#", "a", false),
            ("a.*.#", "a.b", true),
            ("a.*.#", "a.b.c.d", true),
            ("#.*", "", false),
            ("#.*", "a", true),
            ("#.*.#", "a.b.c", true),
            // Empty words are ordinary words.
            ("a..b", "a..b", true),
            ("a.*.b", "a..b", true),
            ("a.b", "a..b", false),
            ("a.", "a.", true),
            ("a.", "a", false),
            ("a.*", "a.", true),
            ("*", ".", false),
            ("*.*", ".", true),
            (".", ".", true),
            ("#", "..", true),
            // The empty key has zero words (split_topic_key_binary(<<>>) -> []).
            ("*", "", false),
            ("", "", true),
            ("", "a", false),
            ("a", "", false),
            ("*", "a", true),
            // Key words that look like wildcards are literal words.
            ("a.*", "a.*", true),
            ("a.#", "a.#", true),
            ("a.b", "a.*", false),
            // Wildcards are whole words only.
            ("a*", "ab", false),
            ("a*", "a*", true),
            ("a#", "a.b", false),
        ];
        for &(pattern, key, expected) in cases {
            assert_eq!(
                single_match(pattern, key),
                expected,
                "pattern {pattern:?} against key {key:?}"
            );
            assert_eq!(
                reference_match(&split(pattern), &split(key)),
                expected,
                "reference: pattern {pattern:?} against key {key:?}"
            );
        }
    }

    #[test]
    fn insert_is_idempotent_and_len_counts_bindings() {
        let mut trie = TopicTrie::new();
        assert!(trie.is_empty());
        trie.insert("a.*", 1u32);
        trie.insert("a.*", 1);
        assert_eq!(trie.len(), 1);
        trie.insert("a.*", 2);
        trie.insert("#", 1);
        trie.insert("#.#", 1);
        assert_eq!(trie.len(), 4);
        assert_eq!(matched(&trie, "a.b"), vec![1, 2]);
        assert!(!trie.is_empty());
    }

    #[test]
    fn remove_unbinds_only_that_binding_and_prunes_empty_nodes() {
        let mut trie = TopicTrie::new();
        trie.insert("a.b.c", 1u32);
        trie.insert("a.*.#", 2);
        trie.insert("a.b", 3);
        assert!(!trie.remove("a.b.c", &9));
        assert!(!trie.remove("a.x.c", &1));
        assert!(!trie.remove("a.b", &1));
        assert!(trie.remove("a.b.c", &1));
        assert!(!trie.remove("a.b.c", &1));
        assert_eq!(matched(&trie, "a.b.c"), vec![2]);
        assert_eq!(matched(&trie, "a.b"), vec![2, 3]);

        let a = trie.root.literals.get("a").expect("a kept");
        let b = a.literals.get("b").expect("b kept");
        assert!(b.literals.is_empty(), "c pruned");

        assert!(trie.remove("a.b", &3));
        assert!(trie.remove("a.*.#", &2));
        assert!(trie.is_empty());
        assert!(trie.root.is_empty(), "every node pruned");
    }

    #[test]
    fn a_node_with_many_literal_children_moves_them_to_a_map_and_back() {
        let mut trie = TopicTrie::new();
        for i in 0..100u32 {
            trie.insert(&format!("devices.d{i}.commands"), i);
        }
        trie.insert("devices.*.commands", 1000);
        assert_eq!(matched(&trie, "devices.d42.commands"), vec![42, 1000]);
        let devices = trie.root.literals.get("devices").expect("kept");
        assert!(matches!(devices.literals, Literals::Many(_)));
        for i in 0..98u32 {
            assert!(trie.remove(&format!("devices.d{i}.commands"), &i));
        }
        let devices = trie.root.literals.get("devices").expect("kept");
        assert!(matches!(devices.literals, Literals::Few(_)));
        assert_eq!(matched(&trie, "devices.d99.commands"), vec![99, 1000]);
        assert_eq!(matched(&trie, "devices.d42.commands"), vec![1000]);
        for i in 98..100u32 {
            assert!(trie.remove(&format!("devices.d{i}.commands"), &i));
        }
        assert!(trie.remove("devices.*.commands", &1000));
        assert!(trie.root.is_empty());
    }

    #[test]
    fn hash_and_double_hash_are_separate_bindings() {
        let mut trie = TopicTrie::new();
        trie.insert("#", 1u32);
        trie.insert("#.#", 1);
        assert_eq!(matched(&trie, "x"), vec![1]);
        assert!(trie.remove("#", &1));
        assert_eq!(matched(&trie, "x"), vec![1]);
        assert!(trie.remove("#.#", &1));
        assert_eq!(matched(&trie, "x"), Vec::<u32>::new());
        assert!(trie.root.is_empty());
    }

    #[test]
    fn a_value_bound_by_several_matching_patterns_is_pushed_once() {
        let mut trie = TopicTrie::new();
        for pattern in ["a.b", "a.*", "#", "a.#", "#.b", "*.*"] {
            trie.insert(pattern, 7u32);
        }
        trie.insert("a.*", 3);
        trie.insert("x.y", 4);
        let mut out = vec![7, 7];
        trie.matches("a.b", &mut out);
        assert_eq!(&out[..2], &[7, 7], "earlier contents untouched");
        let mut appended = out[2..].to_vec();
        appended.sort_unstable();
        assert_eq!(appended, vec![3, 7]);
    }

    #[test]
    fn many_hashes_against_a_long_key_are_bounded() {
        let mut trie = TopicTrie::new();
        trie.insert("#.#.#.#.#.#.#.#.#.#.x", 1u32);
        trie.insert("#.a.#.a.#.a.#.a.#.a.#.y", 2);
        trie.insert("#.#.#.#.#.#.#.#.#.#", 3);
        let key = vec!["a"; 30].join(".");
        assert_eq!(matched(&trie, &key), vec![3]);
        let key_x = format!("{key}.x");
        assert_eq!(matched(&trie, &key_x), vec![1, 3]);
        let key_y = format!("{key}.y");
        assert_eq!(matched(&trie, &key_y), vec![2, 3]);
    }

    fn word() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("a"), Just("b"), Just("")]
    }

    fn pattern_word() -> impl Strategy<Value = &'static str> {
        prop_oneof![Just("a"), Just("b"), Just(""), Just("*"), Just("#")]
    }

    proptest! {
        #[test]
        fn trie_agrees_with_reference_matcher(
            patterns in prop::collection::vec(prop::collection::vec(pattern_word(), 0..6), 1..8),
            keys in prop::collection::vec(prop::collection::vec(word(), 0..7), 1..8),
        ) {
            let patterns: Vec<String> = patterns.iter().map(|words| words.join(".")).collect();
            let mut trie = TopicTrie::new();
            for (index, pattern) in patterns.iter().enumerate() {
                // Value = index / 2, so values are shared between patterns and dedup is exercised.
                trie.insert(pattern, index / 2);
            }
            for key in keys.iter().map(|words| words.join(".")) {
                let mut expected: Vec<usize> = patterns
                    .iter()
                    .enumerate()
                    .filter(|(_, pattern)| reference_match(&split(pattern), &split(&key)))
                    .map(|(index, _)| index / 2)
                    .collect();
                expected.sort_unstable();
                expected.dedup();
                let mut actual = Vec::new();
                trie.matches(&key, &mut actual);
                actual.sort_unstable();
                prop_assert_eq!(actual, expected, "key {:?} patterns {:?}", key, patterns);
            }
        }

        #[test]
        fn removing_every_binding_empties_the_trie(
            patterns in prop::collection::vec(prop::collection::vec(pattern_word(), 0..6), 1..8),
        ) {
            let patterns: Vec<String> = patterns.iter().map(|words| words.join(".")).collect();
            let mut trie = TopicTrie::new();
            for (index, pattern) in patterns.iter().enumerate() {
                trie.insert(pattern, index % 3);
            }
            for (index, pattern) in patterns.iter().enumerate() {
                trie.remove(pattern, &(index % 3));
            }
            prop_assert!(trie.is_empty());
            prop_assert!(trie.root.is_empty());
        }
    }
}
