//! The delivery window every listener's outgoing side keeps: how much credit its consumers
//! have, which deliveries wait for a settlement and under which tag, which consumers were
//! refused and must be kicked once room frees up, and which deliveries arrived too late to
//! be sent.
//!
//! AMQP 0-9-1 prefetch (per consumer and per channel), STOMP prefetch, the MQTT in-flight
//! window and AMQP 1.0 link credit all answer [`DeliverySink::reserve`] the same way:
//!
//! 1. a closed connection takes nothing;
//! 2. a connection with more than its high-water mark of encoded bytes unsent takes nothing,
//!    and the consumer is recorded as starved (the writer kicks it after the next write);
//! 3. a delivery that needs no settlement (auto-ack, QoS 0) takes no credit;
//! 4. otherwise each credit that applies (the consumer's, its channel's or connection's)
//!    must have room; if one has none the consumer is starved, else each is charged one.
//!
//! Sans-IO and lock-free by itself: the listener keeps these values under the one mutex of
//! its outbox, next to its encoded bytes, so a delivery costs one lock and no allocation
//! (the starved and orphaned lists are allocated the first time one is needed). Only
//! [`ConsumerCredit`] is atomic, so that a consumer's own sink can carry it; it is changed
//! only under that same mutex. Each protocol keeps its encoder and its own tags: 0-9-1
//! delivery tags per channel, STOMP message ids per connection, MQTT packet identifiers
//! (reused, so kept in a map by the listener), AMQP 1.0 delivery ids (wrapping).
//!
//! [`DeliverySink::reserve`]: crate::consumer::DeliverySink::reserve

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::queue_type::QueueInstance;

/// A delivery that reached a connection after it (or its channel) closed: its queue and the
/// queue's id of the message, to give back (released: it never reached the client).
pub type Orphan = (Arc<dyn QueueInstance>, u64);

/// A count of unsettled deliveries against a limit: a channel's or connection's window.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Credit {
    /// The most deliveries allowed (0: no limit).
    limit: u32,
    /// Deliveries counted against it.
    used: u32,
}

impl Credit {
    /// A window of `limit` deliveries (0: no limit).
    pub fn new(limit: u32) -> Credit {
        Credit { limit, used: 0 }
    }

    /// The limit (0: none).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Changes the limit; deliveries counted so far stay counted.
    pub fn set_limit(&mut self, limit: u32) {
        self.limit = limit;
    }

    /// Deliveries counted against the limit.
    pub fn used(&self) -> u32 {
        self.used
    }

    /// Whether one more delivery fits.
    pub fn has_room(&self) -> bool {
        self.limit == 0 || self.used < self.limit
    }

    /// Counts one delivery.
    pub fn take(&mut self) {
        self.used = self.used.saturating_add(1);
    }

    /// Gives one delivery's credit back (settled, or not sent after all).
    pub fn give_back(&mut self) {
        self.used = self.used.saturating_sub(1);
    }

    /// Forgets every counted delivery (the connection closed).
    pub fn reset(&mut self) {
        self.used = 0;
    }
}

/// One consumer's credit, carried by the consumer's sink so that `reserve` needs no lookup.
///
/// Atomic only so that the sink can be shared: it is read and changed only under the lock
/// that guards the [`DeliveryWindow`] it belongs to, so plain loads and stores suffice.
#[derive(Debug, Default)]
pub struct ConsumerCredit {
    /// The most unsettled deliveries (0: no limit).
    limit: u32,
    used: AtomicU32,
}

impl ConsumerCredit {
    /// A consumer's window of `limit` unsettled deliveries (0: no limit).
    pub fn new(limit: u32) -> ConsumerCredit {
        ConsumerCredit {
            limit,
            used: AtomicU32::new(0),
        }
    }

    /// The limit (0: none).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Deliveries counted against the limit.
    pub fn used(&self) -> u32 {
        self.used.load(Ordering::Relaxed)
    }

    /// Whether one more delivery fits.
    pub fn has_room(&self) -> bool {
        self.limit == 0 || self.used() < self.limit
    }

    /// Counts one delivery (under the window's lock).
    pub fn take(&self) {
        self.used
            .store(self.used().saturating_add(1), Ordering::Relaxed);
    }

    /// Gives one delivery's credit back (under the window's lock).
    pub fn give_back(&self) {
        self.used
            .store(self.used().saturating_sub(1), Ordering::Relaxed);
    }
}

/// Tells two waiters apart: the same consumer is recorded as starved once.
pub trait Waiter: Clone {
    /// Whether `self` and `other` are the same consumer.
    fn is_same(&self, other: &Self) -> bool;
}

impl<T: ?Sized> Waiter for Arc<T> {
    fn is_same(&self, other: &Self) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(self), Arc::as_ptr(other))
    }
}

/// What [`DeliveryWindow::admit`] decided before any credit is looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// The connection may take a delivery; credit decides next.
    Open,
    /// The connection is closed: nothing is taken (and nobody waits).
    Closed,
    /// Over the high-water mark: the consumer was recorded as starved.
    Starved,
}

/// The lists most connections never fill, allocated on first use.
struct Lists<W> {
    starved: Vec<W>,
    orphaned: Vec<Orphan>,
}

/// One connection's delivery window: open or closed, the high-water mark of unsent bytes,
/// the consumers waiting for room, the deliveries that arrived after a close, and how often
/// the writer took the encoded bytes (to tell deliveries sent from those still buffered).
///
/// `W` is what the listener kicks when room frees up: a consumer's sink, or a queue.
pub struct DeliveryWindow<W> {
    high_water: usize,
    closed: bool,
    /// How many times the writer took the buffer (wrapping): see [`DeliveryWindow::stamp`].
    handed: u32,
    lists: Option<Box<Lists<W>>>,
}

impl<W: Waiter> DeliveryWindow<W> {
    /// An open window that refuses deliveries while `high_water` bytes or more wait to be
    /// written.
    pub fn new(high_water: usize) -> DeliveryWindow<W> {
        DeliveryWindow {
            high_water,
            closed: false,
            handed: 0,
            lists: None,
        }
    }

    /// Steps 1 and 2 of a reservation: closed, or over the high-water mark with `buffered`
    /// bytes unsent (then `waiter` is recorded as starved).
    pub fn admit(&mut self, buffered: usize, waiter: &W) -> Admission {
        if self.closed {
            return Admission::Closed;
        }
        if buffered >= self.high_water {
            self.starve(waiter);
            return Admission::Starved;
        }
        Admission::Open
    }

    /// Step 4 of a reservation: charges the consumer's credit and the shared one (either
    /// may be absent) when both have room, else records `waiter` as starved and returns
    /// false.
    pub fn charge(
        &mut self,
        waiter: &W,
        consumer: Option<&ConsumerCredit>,
        shared: Option<&mut Credit>,
    ) -> bool {
        let consumer_full = consumer.is_some_and(|credit| !credit.has_room());
        let shared_full = shared.as_ref().is_some_and(|credit| !credit.has_room());
        if consumer_full || shared_full {
            self.starve(waiter);
            return false;
        }
        if let Some(credit) = shared {
            credit.take();
        }
        if let Some(credit) = consumer {
            credit.take();
        }
        true
    }

    /// A whole reservation for a connection with one shared credit and no per-consumer
    /// one: admitted, then charged when the delivery is `counted` (needs a settlement).
    pub fn reserve(
        &mut self,
        buffered: usize,
        waiter: &W,
        counted: bool,
        shared: &mut Credit,
    ) -> bool {
        if self.admit(buffered, waiter) != Admission::Open {
            return false;
        }
        !counted || self.charge(waiter, None, Some(shared))
    }

    /// Records `waiter` as waiting for room (once).
    pub fn starve(&mut self, waiter: &W) {
        let starved = &mut self.lists().starved;
        if !starved.iter().any(|known| known.is_same(waiter)) {
            starved.push(waiter.clone());
        }
    }

    /// Takes the waiters to kick now that room may have freed up.
    pub fn take_starved(&mut self) -> Vec<W> {
        self.lists
            .as_deref_mut()
            .map(|lists| std::mem::take(&mut lists.starved))
            .unwrap_or_default()
    }

    /// Forgets the waiters `keep` says no (their channel closed).
    pub fn retain_starved(&mut self, keep: impl FnMut(&W) -> bool) {
        if let Some(lists) = self.lists.as_deref_mut() {
            lists.starved.retain(keep);
        }
    }

    /// Records a delivery that arrived after the close (of the connection or its channel),
    /// for the listener to give back once it no longer holds the queue's lock.
    pub fn orphan(&mut self, queue: Arc<dyn QueueInstance>, id: u64) {
        self.lists().orphaned.push((queue, id));
    }

    /// Takes the orphaned deliveries.
    pub fn take_orphaned(&mut self) -> Vec<Orphan> {
        self.lists
            .as_deref_mut()
            .map(|lists| std::mem::take(&mut lists.orphaned))
            .unwrap_or_default()
    }

    /// Closes the window: nothing more is admitted and nobody waits for room.
    pub fn close(&mut self) {
        self.closed = true;
        if let Some(lists) = self.lists.as_deref_mut() {
            lists.starved.clear();
        }
    }

    /// Whether the window was closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The writer took every byte encoded so far: deliveries stamped before are sent.
    pub fn handed_over(&mut self) {
        self.handed = self.handed.wrapping_add(1);
    }

    /// The stamp of a delivery encoded now, for [`DeliveryWindow::was_sent`].
    pub fn stamp(&self) -> u32 {
        self.handed
    }

    /// Whether a delivery stamped `stamp` was handed to the writer (else its bytes are
    /// still buffered and the client never got it).
    pub fn was_sent(&self, stamp: u32) -> bool {
        stamp != self.handed
    }

    fn lists(&mut self) -> &mut Lists<W> {
        self.lists.get_or_insert_with(|| {
            Box::new(Lists {
                starved: Vec::new(),
                orphaned: Vec::new(),
            })
        })
    }
}

/// A protocol's delivery tag: allocated in delivery order, one after the other, possibly
/// wrapping (AMQP 1.0 delivery ids).
pub trait DeliveryTag: Copy + Eq {
    /// The tag after this one.
    fn next(self) -> Self;
    /// How many tags after `earlier` this one is, in delivery order.
    fn distance_from(self, earlier: Self) -> u64;
}

impl DeliveryTag for u64 {
    fn next(self) -> u64 {
        self.wrapping_add(1)
    }

    fn distance_from(self, earlier: u64) -> u64 {
        self.wrapping_sub(earlier)
    }
}

impl DeliveryTag for u32 {
    fn next(self) -> u32 {
        self.wrapping_add(1)
    }

    fn distance_from(self, earlier: u32) -> u64 {
        u64::from(self.wrapping_sub(earlier))
    }
}

/// A delivery waiting for its settlement, as the listener records it.
pub trait Tagged {
    /// The tag type.
    type Tag: DeliveryTag;
    /// The tag it was sent with.
    fn tag(&self) -> Self::Tag;
}

/// Deliveries waiting for a settlement, in tag order, with the next tag to give out.
///
/// Tags grow by one per delivery (deliveries that need no settlement take a tag too, so
/// there are gaps), which makes a lookup a binary search and a cumulative settlement
/// (0-9-1 `multiple`, STOMP `client` mode, an AMQP 1.0 disposition range) a prefix.
pub struct Unsettled<E: Tagged> {
    next_tag: E::Tag,
    entries: VecDeque<E>,
}

impl<E: Tagged> Unsettled<E> {
    /// No deliveries yet; the first gets `first_tag`.
    pub fn new(first_tag: E::Tag) -> Unsettled<E> {
        Unsettled {
            next_tag: first_tag,
            entries: VecDeque::new(),
        }
    }

    /// Gives out the next tag.
    pub fn next_tag(&mut self) -> E::Tag {
        let tag = self.next_tag;
        self.next_tag = tag.next();
        tag
    }

    /// The tag the next delivery will get.
    pub fn peek_tag(&self) -> E::Tag {
        self.next_tag
    }

    /// Records a delivery sent with the last tag given out.
    pub fn push(&mut self, entry: E) {
        self.entries.push_back(entry);
    }

    /// How many deliveries wait.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The oldest delivery waiting.
    pub fn oldest(&self) -> Option<&E> {
        self.entries.front()
    }

    /// The deliveries waiting, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &E> {
        self.entries.iter()
    }

    /// Where `tag` sits in delivery order: the number of waiting deliveries with an
    /// earlier tag. A tag outside the span given out so far sorts before every waiting one
    /// or after them all, whichever end it is nearer to.
    fn position(&self, tag: E::Tag) -> usize {
        let Some(front) = self.entries.front().map(Tagged::tag) else {
            return 0;
        };
        let span = self.next_tag.distance_from(front);
        let distance = tag.distance_from(front);
        if distance >= span {
            let after = tag.distance_from(self.next_tag);
            let before = front.distance_from(tag);
            return if after < before {
                self.entries.len()
            } else {
                0
            };
        }
        self.entries
            .partition_point(|entry| entry.tag().distance_from(front) < distance)
    }

    /// The number of waiting deliveries with a tag up to and including `tag`.
    fn end_through(&self, tag: E::Tag) -> usize {
        let end = self.position(tag);
        match self.entries.get(end) {
            Some(entry) if entry.tag() == tag => end + 1,
            _ => end,
        }
    }

    /// The delivery sent with `tag`, if it waits.
    pub fn get(&self, tag: E::Tag) -> Option<&E> {
        self.entries
            .get(self.position(tag))
            .filter(|entry| entry.tag() == tag)
    }

    /// Takes the delivery sent with `tag`, if it waits.
    pub fn take(&mut self, tag: E::Tag) -> Option<E> {
        let index = self.position(tag);
        if self.entries.get(index)?.tag() != tag {
            return None;
        }
        self.entries.remove(index)
    }

    /// Takes every delivery up to and including `tag`, oldest first (empty when none
    /// waits at or before it).
    pub fn take_through(&mut self, tag: E::Tag) -> Vec<E> {
        let end = self.end_through(tag);
        self.entries.drain(..end).collect()
    }

    /// Takes the deliveries up to and including `tag` that `select` picks, oldest first;
    /// the others stay where they were.
    pub fn take_through_where(
        &mut self,
        tag: E::Tag,
        mut select: impl FnMut(&E) -> bool,
    ) -> Vec<E> {
        let end = self.end_through(tag);
        let mut taken = Vec::new();
        let mut kept = Vec::new();
        for entry in self.entries.drain(..end) {
            if select(&entry) {
                taken.push(entry);
            } else {
                kept.push(entry);
            }
        }
        for entry in kept.into_iter().rev() {
            self.entries.push_front(entry);
        }
        taken
    }

    /// Takes the deliveries whose tags lie from `first` through `last`, counting on from
    /// `first` and wrapping (as an AMQP 1.0 disposition names a range), in that order.
    pub fn take_range(&mut self, first: E::Tag, last: E::Tag) -> Vec<E> {
        let Some(front) = self.entries.front().map(Tagged::tag) else {
            return Vec::new();
        };
        let live = self.next_tag.distance_from(front);
        let (from, to) = (first.distance_from(front), last.distance_from(front));
        if from <= to && to < live {
            // Inside the tags given out, in delivery order: one run of entries.
            let start = self.position(first);
            let end = self.end_through(last);
            return self.entries.drain(start..end).collect();
        }
        let span = last.distance_from(first);
        let mut taken = self.take_where(|entry| entry.tag().distance_from(first) <= span);
        taken.sort_by_key(|entry| entry.tag().distance_from(first));
        taken
    }

    /// Takes every delivery, oldest first.
    pub fn take_all(&mut self) -> Vec<E> {
        self.entries.drain(..).collect()
    }

    /// Takes the deliveries `select` picks, oldest first; the others stay in order.
    pub fn take_where(&mut self, mut select: impl FnMut(&E) -> bool) -> Vec<E> {
        let end = self.entries.len();
        let mut taken = Vec::new();
        for _ in 0..end {
            let Some(entry) = self.entries.pop_front() else {
                break;
            };
            if select(&entry) {
                taken.push(entry);
            } else {
                self.entries.push_back(entry);
            }
        }
        taken
    }

    /// Puts a delivery back where its tag belongs (a rolled-back settlement).
    pub fn restore(&mut self, entry: E) {
        let index = self.position(entry.tag());
        self.entries.insert(index, entry);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Entry<T> {
        tag: T,
        owner: u8,
    }

    impl<T: DeliveryTag> Tagged for Entry<T> {
        type Tag = T;
        fn tag(&self) -> T {
            self.tag
        }
    }

    fn tags<T: DeliveryTag>(entries: &[Entry<T>]) -> Vec<T> {
        entries.iter().map(|entry| entry.tag).collect()
    }

    /// A waiter that is itself: ids compare by value.
    #[derive(Debug, Clone, PartialEq, Eq)]
    struct Consumer(u32);

    impl Waiter for Consumer {
        fn is_same(&self, other: &Self) -> bool {
            self == other
        }
    }

    #[test]
    fn a_closed_window_admits_nothing_and_nobody_waits() {
        let mut window = DeliveryWindow::new(100);
        assert_eq!(window.admit(0, &Consumer(1)), Admission::Open);
        window.close();
        assert_eq!(window.admit(0, &Consumer(1)), Admission::Closed);
        assert!(window.take_starved().is_empty());
        assert!(window.is_closed());
    }

    #[test]
    fn over_the_high_water_mark_a_consumer_starves_once() {
        let mut window = DeliveryWindow::new(100);
        assert_eq!(window.admit(99, &Consumer(1)), Admission::Open);
        assert_eq!(window.admit(100, &Consumer(1)), Admission::Starved);
        assert_eq!(window.admit(500, &Consumer(1)), Admission::Starved);
        assert_eq!(window.admit(500, &Consumer(2)), Admission::Starved);
        assert_eq!(window.take_starved(), vec![Consumer(1), Consumer(2)]);
        assert!(window.take_starved().is_empty());
    }

    #[test]
    fn a_charge_needs_room_in_both_credits_and_takes_from_both() {
        let mut window = DeliveryWindow::new(100);
        let consumer = ConsumerCredit::new(2);
        let mut channel = Credit::new(3);
        assert!(window.charge(&Consumer(1), Some(&consumer), Some(&mut channel)));
        assert!(window.charge(&Consumer(1), Some(&consumer), Some(&mut channel)));
        // The consumer's own window is full: nothing is charged, it starves.
        assert!(!window.charge(&Consumer(1), Some(&consumer), Some(&mut channel)));
        assert_eq!((consumer.used(), channel.used()), (2, 2));
        // Another consumer on the channel takes the channel's last delivery.
        assert!(window.charge(&Consumer(2), None, Some(&mut channel)));
        assert!(!window.charge(&Consumer(2), None, Some(&mut channel)));
        assert_eq!(window.take_starved(), vec![Consumer(1), Consumer(2)]);
        consumer.give_back();
        channel.give_back();
        assert!(window.charge(&Consumer(1), Some(&consumer), Some(&mut channel)));
    }

    #[test]
    fn a_zero_limit_is_no_limit_and_credit_never_goes_below_zero() {
        let mut credit = Credit::new(0);
        for _ in 0..1000 {
            assert!(credit.has_room());
            credit.take();
        }
        credit.reset();
        credit.give_back();
        assert_eq!(credit.used(), 0);
        let consumer = ConsumerCredit::new(0);
        consumer.give_back();
        assert!(consumer.has_room());
        assert_eq!(consumer.used(), 0);
    }

    #[test]
    fn reserve_charges_only_counted_deliveries() {
        let mut window = DeliveryWindow::new(100);
        let mut credit = Credit::new(1);
        assert!(window.reserve(0, &Consumer(1), false, &mut credit));
        assert_eq!(credit.used(), 0);
        assert!(window.reserve(0, &Consumer(1), true, &mut credit));
        assert!(!window.reserve(0, &Consumer(1), true, &mut credit));
        // Auto-ack still flows while the window is full, but not over the high-water mark.
        assert!(window.reserve(0, &Consumer(1), false, &mut credit));
        assert!(!window.reserve(100, &Consumer(1), false, &mut credit));
    }

    #[test]
    fn stamps_tell_sent_deliveries_from_buffered_ones() {
        let mut window: DeliveryWindow<Consumer> = DeliveryWindow::new(100);
        let first = window.stamp();
        assert!(!window.was_sent(first));
        window.handed_over();
        let second = window.stamp();
        assert!(window.was_sent(first));
        assert!(!window.was_sent(second));
    }

    #[test]
    fn starved_waiters_of_a_closed_channel_are_forgotten() {
        let mut window = DeliveryWindow::new(0);
        window.starve(&Consumer(1));
        window.starve(&Consumer(2));
        window.retain_starved(|consumer| consumer.0 != 1);
        assert_eq!(window.take_starved(), vec![Consumer(2)]);
    }

    #[test]
    fn arcs_are_the_same_waiter_only_when_they_point_at_one_value() {
        let a = Arc::new(1);
        let b = Arc::new(1);
        assert!(a.is_same(&Arc::clone(&a)));
        assert!(!a.is_same(&b));
    }

    fn deliver<T: DeliveryTag>(unsettled: &mut Unsettled<Entry<T>>, owner: u8) -> T {
        let tag = unsettled.next_tag();
        unsettled.push(Entry { tag, owner });
        tag
    }

    #[test]
    fn tags_settle_singly_cumulatively_and_by_owner() {
        let mut unsettled = Unsettled::new(1u64);
        for owner in [1, 2, 1, 2, 1] {
            deliver(&mut unsettled, owner);
        }
        assert_eq!(unsettled.take(3).map(|e| e.tag), Some(3));
        assert!(unsettled.take(3).is_none());
        assert!(unsettled.take(9).is_none());
        assert_eq!(tags(&unsettled.take_through(2)), vec![1, 2]);
        assert_eq!(
            tags(&unsettled.take_through_where(5, |e| e.owner == 1)),
            vec![5]
        );
        assert_eq!(tags(&unsettled.take_all()), vec![4]);
        assert!(unsettled.take_through(4).is_empty());
        assert_eq!(unsettled.peek_tag(), 6);
    }

    #[test]
    fn a_range_settles_the_tags_it_names_even_across_the_wrap() {
        let mut unsettled = Unsettled::new(u32::MAX - 2);
        for _ in 0..6 {
            deliver(&mut unsettled, 0);
        }
        // Given out: MAX-2, MAX-1, MAX, 0, 1, 2.
        assert_eq!(tags(&unsettled.take_range(u32::MAX, 0)), vec![u32::MAX, 0]);
        assert_eq!(tags(&unsettled.take_range(1, 1)), vec![1]);
        assert!(unsettled.take_range(1, 1).is_empty());
        // A range from a tag settled already runs on into the waiting ones.
        assert_eq!(
            tags(&unsettled.take_range(u32::MAX - 3, u32::MAX - 1)),
            vec![u32::MAX - 2, u32::MAX - 1]
        );
        assert_eq!(tags(&unsettled.take_all()), vec![2]);
    }

    #[test]
    fn a_tag_beyond_those_given_out_covers_every_waiting_delivery() {
        let mut unsettled = Unsettled::new(1u64);
        deliver(&mut unsettled, 0);
        deliver(&mut unsettled, 0);
        assert_eq!(tags(&unsettled.take_through(1_000)), vec![1, 2]);
    }

    #[test]
    fn wrapping_tags_keep_their_delivery_order() {
        let mut unsettled = Unsettled::new(u32::MAX - 1);
        let given: Vec<u32> = (0..4).map(|_| deliver(&mut unsettled, 0)).collect();
        assert_eq!(given, vec![u32::MAX - 1, u32::MAX, 0, 1]);
        assert_eq!(unsettled.get(0).map(|e| e.tag), Some(0));
        assert_eq!(
            tags(&unsettled.take_through(u32::MAX)),
            vec![u32::MAX - 1, u32::MAX]
        );
        let restored = Entry {
            tag: u32::MAX,
            owner: 0,
        };
        unsettled.restore(restored);
        assert_eq!(tags(&unsettled.take_all()), vec![u32::MAX, 0, 1]);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Deliver { owner: u8, skip: bool },
        Take(u8),
        TakeThrough(u8),
        TakeThroughOwned(u8, u8),
        TakeOwned(u8),
        TakeRange(u8, u8),
        RestoreLast,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..3, any::<bool>()).prop_map(|(owner, skip)| Op::Deliver { owner, skip }),
            2 => any::<u8>().prop_map(Op::Take),
            1 => any::<u8>().prop_map(Op::TakeThrough),
            1 => (any::<u8>(), 0u8..3).prop_map(|(tag, owner)| Op::TakeThroughOwned(tag, owner)),
            1 => (0u8..3).prop_map(Op::TakeOwned),
            2 => (any::<u8>(), any::<u8>()).prop_map(|(first, last)| Op::TakeRange(first, last)),
            1 => Just(Op::RestoreLast),
        ]
    }

    /// Runs `ops` against [`Unsettled`] and against a sorted map keyed by the delivery's
    /// position in delivery order, for tags starting at `first` (near the wrap for u32).
    fn check_against_model<T: DeliveryTag + std::fmt::Debug>(first: T, ops: &[Op]) {
        let mut unsettled = Unsettled::<Entry<T>>::new(first);
        // position in delivery order -> entry
        let mut model: BTreeMap<u64, Entry<T>> = BTreeMap::new();
        let mut given: Vec<T> = Vec::new();
        let mut last_taken: Option<(u64, Entry<T>)> = None;
        let order = |tag: T| tag.distance_from(first);
        for op in ops {
            match op.clone() {
                Op::Deliver { owner, skip } => {
                    let tag = unsettled.next_tag();
                    given.push(tag);
                    // A delivery that needs no settlement takes a tag but is not recorded.
                    if !skip {
                        unsettled.push(Entry { tag, owner });
                        model.insert(order(tag), Entry { tag, owner });
                    }
                }
                Op::Take(pick) => {
                    let Some(&tag) = given.get(pick as usize % given.len().max(1)) else {
                        continue;
                    };
                    let expected = model.remove(&order(tag));
                    let got = unsettled.take(tag);
                    assert_eq!(got, expected);
                    if let Some(entry) = got {
                        last_taken = Some((order(tag), entry));
                    }
                }
                Op::TakeThrough(pick) => {
                    let Some(&tag) = given.get(pick as usize % given.len().max(1)) else {
                        continue;
                    };
                    let rest = model.split_off(&(order(tag) + 1));
                    let expected: Vec<_> =
                        std::mem::replace(&mut model, rest).into_values().collect();
                    assert_eq!(unsettled.take_through(tag), expected);
                }
                Op::TakeThroughOwned(pick, owner) => {
                    let Some(&tag) = given.get(pick as usize % given.len().max(1)) else {
                        continue;
                    };
                    let keys: Vec<u64> = model
                        .range(..=order(tag))
                        .filter(|(_, e)| e.owner == owner)
                        .map(|(k, _)| *k)
                        .collect();
                    let expected: Vec<_> = keys.iter().filter_map(|k| model.remove(k)).collect();
                    assert_eq!(
                        unsettled.take_through_where(tag, |e| e.owner == owner),
                        expected
                    );
                }
                Op::TakeOwned(owner) => {
                    let keys: Vec<u64> = model
                        .iter()
                        .filter(|(_, e)| e.owner == owner)
                        .map(|(k, _)| *k)
                        .collect();
                    let expected: Vec<_> = keys.iter().filter_map(|k| model.remove(k)).collect();
                    assert_eq!(unsettled.take_where(|e| e.owner == owner), expected);
                }
                Op::TakeRange(first_pick, last_pick) => {
                    let (Some(&first_tag), Some(&last_tag)) = (
                        given.get(first_pick as usize % given.len().max(1)),
                        given.get(last_pick as usize % given.len().max(1)),
                    ) else {
                        continue;
                    };
                    let span = last_tag.distance_from(first_tag);
                    let mut keys: Vec<u64> = model
                        .iter()
                        .filter(|(_, e)| e.tag.distance_from(first_tag) <= span)
                        .map(|(k, _)| *k)
                        .collect();
                    keys.sort_by_key(|k| model[k].tag.distance_from(first_tag));
                    let expected: Vec<_> = keys.iter().filter_map(|k| model.remove(k)).collect();
                    assert_eq!(unsettled.take_range(first_tag, last_tag), expected);
                }
                Op::RestoreLast => {
                    if let Some((key, entry)) = last_taken.take() {
                        model.insert(key, entry.clone());
                        unsettled.restore(entry);
                    }
                }
            }
            let expected: Vec<T> = model.values().map(|e| e.tag).collect();
            assert_eq!(
                unsettled.iter().map(|e| e.tag).collect::<Vec<_>>(),
                expected
            );
            assert_eq!(unsettled.len(), model.len());
            assert_eq!(unsettled.oldest().map(|e| e.tag), expected.first().copied());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn unsettled_matches_a_sorted_map(ops in proptest::collection::vec(op(), 1..80)) {
            check_against_model(1u64, &ops);
        }

        #[test]
        fn unsettled_matches_a_sorted_map_across_the_wrap(
            ops in proptest::collection::vec(op(), 1..80),
            back in 0u32..40,
        ) {
            check_against_model(u32::MAX - back, &ops);
        }

        /// However reservations and settlements interleave, a credit never goes over its
        /// limit, and a refused reservation charges nothing and leaves one starved entry.
        #[test]
        fn credit_never_exceeds_its_limits(
            limits in (0u32..4, 0u32..4),
            steps in proptest::collection::vec((0u32..3, any::<bool>(), 0usize..3), 1..100),
        ) {
            let mut window = DeliveryWindow::new(2);
            let consumers: Vec<ConsumerCredit> =
                (0..3).map(|_| ConsumerCredit::new(limits.0)).collect();
            let mut shared = Credit::new(limits.1);
            for (consumer, settle, buffered) in steps {
                let credit = &consumers[consumer as usize];
                if settle {
                    if credit.used() > 0 {
                        credit.give_back();
                        shared.give_back();
                    }
                    continue;
                }
                let before = (credit.used(), shared.used());
                let admitted = window.admit(buffered, &Consumer(consumer)) == Admission::Open;
                let charged =
                    admitted && window.charge(&Consumer(consumer), Some(credit), Some(&mut shared));
                if charged {
                    prop_assert_eq!((credit.used(), shared.used()), (before.0 + 1, before.1 + 1));
                } else {
                    prop_assert_eq!((credit.used(), shared.used()), before);
                }
                prop_assert!(limits.0 == 0 || credit.used() <= limits.0);
                prop_assert!(limits.1 == 0 || shared.used() <= limits.1);
                let starved = window.take_starved();
                prop_assert_eq!(starved.len(), usize::from(!charged));
            }
        }
    }
}
