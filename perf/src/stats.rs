//! Counters, a log-linear latency histogram and the publisher-confirm tracker.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use tokio::sync::watch;

/// The process-wide epoch that latency timestamps count from.
pub fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since [`epoch`].
#[inline]
pub fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// Sub-buckets per power of two: 64 gives a relative error under 1.6%.
const SUB_BITS: u32 = 6;
const SUB: u64 = 1 << SUB_BITS;
/// Values below this are counted exactly.
const LINEAR: u64 = 2 * SUB;
const BUCKETS: usize = ((64 - SUB_BITS as usize) * SUB as usize) + SUB as usize;

/// A histogram of u64 values (nanoseconds here) with ~1.6% precision, fixed size, no
/// allocation per sample.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            total: 0,
            max: 0,
        }
    }
}

#[inline]
fn bucket_of(value: u64) -> usize {
    if value < LINEAR {
        return value as usize;
    }
    let msb = 63 - value.leading_zeros();
    let shift = msb - SUB_BITS;
    let mantissa = value >> shift; // in SUB..2*SUB
    (shift as u64 * SUB + mantissa) as usize
}

/// The highest value that falls in `bucket`.
fn bucket_high(bucket: usize) -> u64 {
    let bucket = bucket as u64;
    if bucket < LINEAR {
        return bucket;
    }
    let shift = bucket / SUB - 1;
    let mantissa = bucket % SUB + SUB;
    // The top bucket ends at u64::MAX: compute in u128 so its bound does not overflow.
    ((((mantissa + 1) as u128) << shift) - 1).min(u64::MAX as u128) as u64
}

impl Histogram {
    pub fn record(&mut self, value: u64) {
        self.counts[bucket_of(value)] += 1;
        self.total += 1;
        self.max = self.max.max(value);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    #[cfg(test)]
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at percentile `p` (0..=100): the smallest bucket bound such that at least
    /// p% of the samples are at or below it (capped at the exact maximum). 0 when empty.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((p / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (bucket, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return bucket_high(bucket).min(self.max);
            }
        }
        self.max
    }

    pub fn clear(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.total = 0;
        self.max = 0;
    }

    /// `p50 .. us, p75 .., p95 .., p99 .., max ..` in microseconds.
    pub fn summary(&self, percentiles: &[f64]) -> String {
        let mut out = String::new();
        for &p in percentiles {
            out.push_str(&format!("p{p} {} us, ", us(self.percentile(p))));
        }
        out.push_str(&format!("max {} us", us(self.max)));
        out
    }
}

/// Nanoseconds to microseconds, as text with one decimal under 100 us.
pub fn us(ns: u64) -> String {
    if ns < 100_000 {
        format!("{:.1}", ns as f64 / 1000.0)
    } else {
        format!("{}", ns / 1000)
    }
}

/// The interval (per-second) and whole-run latency histograms.
#[derive(Default)]
pub struct Latencies {
    pub interval: Histogram,
    pub total: Histogram,
}

impl Latencies {
    pub fn record(&mut self, ns: u64) {
        self.interval.record(ns);
        self.total.record(ns);
    }
}

/// What every task shares: counters, latencies, the stop signal and the first fatal error.
pub struct Shared {
    pub sent: AtomicU64,
    pub received: AtomicU64,
    pub confirmed: AtomicU64,
    pub nacked: AtomicU64,
    pub returned: AtomicU64,
    pub latency: Mutex<Latencies>,
    pub stopping: AtomicBool,
    pub stop_tx: watch::Sender<bool>,
    pub error: Mutex<Option<String>>,
}

impl Shared {
    pub fn new() -> Shared {
        Shared {
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            confirmed: AtomicU64::new(0),
            nacked: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            latency: Mutex::new(Latencies::default()),
            stopping: AtomicBool::new(false),
            stop_tx: watch::channel(false).0,
            error: Mutex::new(None),
        }
    }

    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.stop_tx.send_replace(true);
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// Records the first fatal error and stops the run.
    pub fn fail(&self, message: String) {
        {
            let mut error = self.error.lock().unwrap_or_else(|e| e.into_inner());
            if error.is_none() {
                *error = Some(message);
            }
        }
        self.stop();
    }

    pub fn take_error(&self) -> Option<String> {
        self.error.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// Records a batch of send timestamps (ns since the epoch) received at `now`.
    pub fn record_latencies(&self, now: u64, timestamps: &[u64]) {
        if timestamps.is_empty() {
            return;
        }
        let mut latency = self.latency.lock().unwrap_or_else(|e| e.into_inner());
        for &ts in timestamps {
            latency.record(now.saturating_sub(ts));
        }
    }
}

/// Tracks which publish sequence numbers (delivery tags, from 1) are still unconfirmed, for
/// basic.ack / basic.nack with or without `multiple`, in any order.
pub struct ConfirmTracker {
    /// The lowest tag not yet confirmed.
    base: u64,
    /// `done[i]`: whether tag `base + i` has been confirmed (only ever false at the front).
    done: VecDeque<bool>,
}

impl Default for ConfirmTracker {
    fn default() -> Self {
        ConfirmTracker {
            base: 1,
            done: VecDeque::new(),
        }
    }
}

impl ConfirmTracker {
    /// Marks `tag` (and, with `multiple`, every tag below it) confirmed; returns how many
    /// messages this newly confirmed.
    pub fn confirm(&mut self, tag: u64, multiple: bool) -> u64 {
        if tag < self.base {
            return 0;
        }
        let index = (tag - self.base) as usize;
        while self.done.len() <= index {
            self.done.push_back(false);
        }
        let newly = if multiple {
            let newly = self.done.iter().take(index + 1).filter(|d| !**d).count() as u64;
            self.done.drain(..=index);
            self.base = tag + 1;
            newly
        } else if self.done[index] {
            0
        } else {
            self.done[index] = true;
            1
        };
        while self.done.front() == Some(&true) {
            self.done.pop_front();
            self.base += 1;
        }
        newly
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_percentiles_for_small_values() {
        let mut h = Histogram::default();
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.percentile(50.0), 50);
        assert_eq!(h.percentile(75.0), 75);
        assert_eq!(h.percentile(95.0), 95);
        assert_eq!(h.percentile(99.0), 99);
        assert_eq!(h.percentile(100.0), 100);
        assert_eq!(h.percentile(0.0), 1);
        assert_eq!(h.max(), 100);
    }

    #[test]
    fn empty_histogram_is_zero() {
        let h = Histogram::default();
        assert_eq!(h.percentile(50.0), 0);
        assert_eq!(h.max(), 0);
    }

    #[test]
    fn large_values_within_precision() {
        let mut h = Histogram::default();
        // 1000 samples: 990 at 1 ms, 10 at 1 s.
        for _ in 0..990 {
            h.record(1_000_000);
        }
        for _ in 0..10 {
            h.record(1_000_000_000);
        }
        let p50 = h.percentile(50.0) as f64;
        assert!((p50 - 1e6).abs() / 1e6 < 0.02, "{p50}");
        let p99 = h.percentile(99.0) as f64;
        assert!((p99 - 1e6).abs() / 1e6 < 0.02, "{p99}");
        assert_eq!(h.percentile(99.9), 1_000_000_000);
        assert_eq!(h.max(), 1_000_000_000);
        h.clear();
        assert_eq!(h.count(), 0);
    }

    #[test]
    fn buckets_are_contiguous_and_monotonic() {
        let mut previous = 0;
        for v in (0..1_000_000u64).step_by(7).chain([u64::MAX / 2, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b >= previous);
            assert!(b < BUCKETS);
            assert!(bucket_high(b) >= v, "{v} in bucket {b}");
            previous = b;
        }
        for b in 1..BUCKETS {
            assert_eq!(bucket_of(bucket_high(b - 1) + 1), b);
        }
    }

    #[test]
    fn percentile_rank_rounds_up() {
        let mut h = Histogram::default();
        for v in [10, 20, 30] {
            h.record(v);
        }
        assert_eq!(h.percentile(50.0), 20);
        assert_eq!(h.percentile(34.0), 20);
        assert_eq!(h.percentile(33.0), 10);
        assert_eq!(h.percentile(99.0), 30);
    }

    #[test]
    fn confirms_single_multiple_and_out_of_order() {
        let mut t = ConfirmTracker::default();
        assert_eq!(t.confirm(2, false), 1);
        assert_eq!(t.confirm(2, false), 0);
        assert_eq!(t.confirm(3, true), 2); // 1 and 3; 2 was done
        assert_eq!(t.confirm(3, true), 0);
        assert_eq!(t.confirm(1, false), 0);
        assert_eq!(t.confirm(4, false), 1);
        assert_eq!(t.confirm(10, true), 6);
        assert_eq!(t.confirm(11, false), 1);
        assert_eq!(t.base, 12);
        assert!(t.done.is_empty());
    }
}
