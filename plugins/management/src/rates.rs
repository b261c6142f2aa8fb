//! Message rates and length history as RabbitMQ's management API shows them
//! (`message_stats.publish_details.rate`, `messages_details.samples` and friends).
//!
//! The core keeps lifetime counters (node, vhost, queue, exchange) and queue lengths; a task
//! of this plugin samples them every `collect_statistics_interval` (5 s by default) with
//! [`RateSampler::sample`]. A rate is a value's change over the last interval, per second.
//! The message path pays nothing here: it only bumps the counters it already had.
//!
//! History for `?msg_rates_age=..&msg_rates_incr=..` and `?lengths_age=..&lengths_incr=..`
//! is kept per object as a ring of *change points* (a sample is stored only when a value
//! differs from the previous one), pruned to `management.sample_retention_seconds` (600 s,
//! RabbitMQ's first `basic` retention tier). An object that never changed (most of an MQTT
//! fleet's subscription queues) has no entry at all, and an object that stayed flat for the
//! whole retention window drops its ring: its history is its current value.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value as Json};
use warren_core::counters::NodeTotals;
use warren_core::exchange::ExchangeStats;
use warren_core::queue::QueueStats;
use warren_core::Broker;

/// The default sampling interval, RabbitMQ's `collect_statistics_interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(5000);

/// The default history retention (`management.sample_retention_seconds`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(600);

/// At most this many change points are kept per object, whatever the retention and interval.
pub const MAX_POINTS: usize = 1024;

/// RabbitMQ's limit on `age / incr`: more samples than this in one answer is a 400.
pub const MAX_RANGE_SAMPLES: i64 = 500;

/// How a value's rate is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A lifetime counter: its growth per second, never negative (a counter that went down
    /// belongs to an object deleted and declared again).
    Counter,
    /// A queue length: its change per second, negative while it shrinks.
    Length,
}

/// The values kept for the node and for each vhost: `message_stats` counters, then
/// `queue_totals` lengths.
const NODE_FIELDS: [(&str, Kind); 9] = [
    ("publish", Kind::Counter),
    ("confirm", Kind::Counter),
    ("return_unroutable", Kind::Counter),
    ("drop_unroutable", Kind::Counter),
    ("deliver_get", Kind::Counter),
    ("ack", Kind::Counter),
    ("messages", Kind::Length),
    ("messages_ready", Kind::Length),
    ("messages_unacknowledged", Kind::Length),
];

/// The values kept for each queue.
const QUEUE_FIELDS: [(&str, Kind); 6] = [
    ("publish", Kind::Counter),
    ("deliver_get", Kind::Counter),
    ("ack", Kind::Counter),
    ("messages", Kind::Length),
    ("messages_ready", Kind::Length),
    ("messages_unacknowledged", Kind::Length),
];

/// The values kept for each exchange.
const EXCHANGE_FIELDS: [(&str, Kind); 2] = [
    ("publish_in", Kind::Counter),
    ("publish_out", Kind::Counter),
];

/// Node or vhost values in [`NODE_FIELDS`] order.
pub type NodeValues = [u64; 9];
/// Queue values in [`QUEUE_FIELDS`] order.
pub type QueueValues = [u64; 6];
/// Exchange values in [`EXCHANGE_FIELDS`] order.
pub type ExchangeValues = [u64; 2];

/// Node or vhost values from the core's totals and the summed lengths of their queues.
pub fn node_values(totals: &NodeTotals, ready: u64, unacknowledged: u64) -> NodeValues {
    [
        totals.messages.received,
        totals.messages.confirmed,
        totals.messages.unroutable_returned,
        totals.messages.unroutable_dropped,
        totals.queues.delivered,
        totals.queues.acknowledged,
        ready + unacknowledged,
        ready,
        unacknowledged,
    ]
}

/// A queue's values.
pub fn queue_values(stats: &QueueStats) -> QueueValues {
    [
        stats.published,
        stats.delivered,
        stats.acknowledged,
        stats.ready + stats.unacknowledged,
        stats.ready,
        stats.unacknowledged,
    ]
}

/// An exchange's values.
pub fn exchange_values(stats: &ExchangeStats) -> ExchangeValues {
    [stats.published_in, stats.published_out]
}

/// A history window asked for with `<prefix>_age` and `<prefix>_incr` (seconds in the query,
/// milliseconds here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// How far back the samples go.
    pub age_ms: u64,
    /// The spacing of the samples.
    pub incr_ms: u64,
}

/// The history windows of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ranges {
    /// `msg_rates_age` / `msg_rates_incr`: counters (`message_stats`).
    pub msg_rates: Option<Range>,
    /// `lengths_age` / `lengths_incr`: queue lengths.
    pub lengths: Option<Range>,
}

impl Ranges {
    /// Reads the range parameters as RabbitMQ does: a pair with a missing or non-integer
    /// member is ignored; integers must satisfy `age > 0`, `incr > 0` and
    /// `age / incr <= 500`, else the request is refused with RabbitMQ's reason.
    /// `data_rates` and `node_stats` are validated the same way, though Warren keeps no such
    /// history.
    pub fn from_query(param: impl Fn(&str) -> Option<String>) -> Result<Ranges, String> {
        let range = |prefix: &str| -> Result<Option<Range>, String> {
            let int = |name: String| param(&name).and_then(|v| v.parse::<i64>().ok());
            let (Some(age), Some(incr)) =
                (int(format!("{prefix}_age")), int(format!("{prefix}_incr")))
            else {
                return Ok(None);
            };
            if age > 0 && incr > 0 && age / incr <= MAX_RANGE_SAMPLES {
                // Both are at most ~9.2e18 / 1000 in practice: saturate instead of wrapping.
                Ok(Some(Range {
                    age_ms: (age as u64).saturating_mul(1000),
                    incr_ms: (incr as u64).saturating_mul(1000),
                }))
            } else {
                Err(format!("Invalid range parameters: age {age}, incr {incr}"))
            }
        };
        range("data_rates")?;
        range("node_stats")?;
        Ok(Ranges {
            msg_rates: range("msg_rates")?,
            lengths: range("lengths")?,
        })
    }
}

/// One change point: the values from `at_ms` until the next point.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point<const N: usize> {
    at_ms: u64,
    values: [u64; N],
}

/// What the sampler keeps for one object.
#[derive(Debug, Clone)]
struct History<const N: usize> {
    /// The values at the last sample.
    values: [u64; N],
    /// Change per second over the last interval.
    rates: [f64; N],
    /// Change points within the retention window, oldest first; `None` while the object
    /// has been flat for the whole window. Boxed: most entries hold `None`, and a box keeps
    /// them at 8 bytes where an inline `VecDeque` takes 32.
    #[allow(clippy::box_collection)]
    points: Option<Box<VecDeque<Point<N>>>>,
}

/// Sampling parameters shared by every object.
#[derive(Debug, Clone, Copy)]
struct Tick {
    now_ms: u64,
    /// When the previous sample was taken, if any.
    previous_ms: Option<u64>,
    retention_ms: u64,
}

impl<const N: usize> History<N> {
    /// The object's history after a sample of `values`; `previous` is its history before
    /// (`None`: new, or idle since it was created).
    fn advance(
        previous: Option<History<N>>,
        values: [u64; N],
        fields: &[(&str, Kind); N],
        tick: Tick,
    ) -> History<N> {
        let (old, mut points) = match previous {
            Some(history) => (history.values, history.points),
            None => ([0; N], None),
        };
        let seconds = tick
            .previous_ms
            .map(|at| tick.now_ms.saturating_sub(at) as f64 / 1000.0)
            .filter(|s| *s > 0.0);
        let mut rates = [0.0; N];
        if let Some(seconds) = seconds {
            for (index, (_, kind)) in fields.iter().enumerate() {
                rates[index] = match kind {
                    Kind::Counter => values[index].saturating_sub(old[index]) as f64 / seconds,
                    Kind::Length => (values[index] as f64 - old[index] as f64) / seconds,
                };
            }
        }
        if tick.retention_ms > 0 {
            let changed = points
                .as_ref()
                .and_then(|p| p.back())
                .map_or(old, |p| p.values)
                != values;
            if changed {
                let list = points.get_or_insert_with(|| {
                    // The value before this change, from the previous sample on.
                    let mut list = VecDeque::new();
                    if let Some(at_ms) = tick.previous_ms {
                        list.push_back(Point { at_ms, values: old });
                    }
                    Box::new(list)
                });
                list.push_back(Point {
                    at_ms: tick.now_ms,
                    values,
                });
            }
            if let Some(list) = points.as_mut() {
                let horizon = tick.now_ms.saturating_sub(tick.retention_ms);
                // The first point stays while it is the value in force at the horizon.
                while list.len() > MAX_POINTS || (list.len() >= 2 && list[1].at_ms <= horizon) {
                    list.pop_front();
                }
                if list.len() == 1 && list[0].at_ms <= horizon {
                    points = None;
                }
            }
        }
        History {
            values,
            rates,
            points,
        }
    }

    /// Several objects' histories added up: values and rates summed, and a change point
    /// wherever one of them changed.
    fn sum(histories: &[&History<N>]) -> History<N> {
        let mut values = [0; N];
        let mut rates = [0.0; N];
        for history in histories {
            for index in 0..N {
                values[index] += history.values[index];
                rates[index] += history.rates[index];
            }
        }
        let mut times: Vec<u64> = histories
            .iter()
            .flat_map(|h| {
                h.points
                    .iter()
                    .flat_map(|p| p.iter().map(|point| point.at_ms))
            })
            .collect();
        times.sort_unstable();
        times.dedup();
        let points = (!times.is_empty()).then(|| {
            let list = times
                .iter()
                .map(|&at_ms| {
                    let mut sum = [0; N];
                    for history in histories {
                        let at = history.at(at_ms, &history.values);
                        for index in 0..N {
                            sum[index] += at[index];
                        }
                    }
                    Point { at_ms, values: sum }
                })
                .collect();
            Box::new(list)
        });
        History {
            values,
            rates,
            points,
        }
    }

    /// The values in force at `at_ms`: the last change point at or before it; before the
    /// first point, the first point's (the object was flat before its history starts);
    /// without history, `current`.
    fn at(&self, at_ms: u64, current: &[u64; N]) -> [u64; N] {
        match &self.points {
            None => *current,
            Some(points) => points
                .iter()
                .rev()
                .find(|p| p.at_ms <= at_ms)
                .or_else(|| points.front())
                .map_or(*current, |p| p.values),
        }
    }
}

/// The sample timestamps of `range` at `now_ms`, newest first: multiples of `incr` from the
/// last one at or before now (counters, as RabbitMQ's `floor`) or at or after now (lengths,
/// RabbitMQ's `ceil`, so the newest length sample is the live value), back `age`.
fn sample_times(range: Range, now_ms: u64, ceil: bool) -> Vec<u64> {
    let incr = range.incr_ms.max(1);
    let mut last = now_ms / incr * incr;
    if ceil && last < now_ms {
        last += incr;
    }
    let count = range.age_ms / incr;
    (0..=count)
        .map_while(|k| last.checked_sub(k * incr))
        .collect()
}

/// `<name>_details` for value `index` of an object.
fn details<const N: usize>(
    history: Option<&History<N>>,
    current: &[u64; N],
    index: usize,
    range: Option<Range>,
    now_ms: u64,
    ceil: bool,
) -> Json {
    // Rounded to 0.1 as RabbitMQ shows them.
    let rate = history.map_or(0.0, |h| (h.rates[index] * 10.0).round() / 10.0);
    let mut out = Map::new();
    out.insert("rate".into(), json!(rate));
    if let Some(range) = range {
        let times = sample_times(range, now_ms, ceil);
        let value_at = |at: u64| -> u64 {
            if at >= now_ms {
                return current[index];
            }
            history.map_or(current[index], |h| h.at(at, current)[index])
        };
        let samples: Vec<(u64, u64)> = times.iter().map(|&t| (t, value_at(t))).collect();
        out.insert(
            "samples".into(),
            Json::Array(
                samples
                    .iter()
                    .map(|(t, v)| json!({"sample": v, "timestamp": t}))
                    .collect(),
            ),
        );
        if let (Some(newest), Some(oldest)) = (samples.first(), samples.last()) {
            if samples.len() > 1 {
                let span = (newest.0 - oldest.0) as f64;
                let avg_rate = (newest.1 as f64 - oldest.1 as f64) * 1000.0 / span;
                let avg =
                    samples.iter().map(|(_, v)| *v as f64).sum::<f64>() / samples.len() as f64;
                out.insert("avg_rate".into(), json!(avg_rate));
                out.insert("avg".into(), json!(avg));
            }
        }
    }
    Json::Object(out)
}

/// Renders the values of `fields` selected by `wanted` as `name` and `name_details`.
fn render<const N: usize>(
    out: &mut Map<String, Json>,
    fields: &[(&str, Kind); N],
    wanted: impl Fn(&str, Kind) -> bool,
    current: &[u64; N],
    history: Option<&History<N>>,
    ranges: &Ranges,
    now_ms: u64,
) {
    for (index, (name, kind)) in fields.iter().enumerate() {
        if !wanted(name, *kind) {
            continue;
        }
        let (range, ceil) = match kind {
            Kind::Counter => (ranges.msg_rates, false),
            Kind::Length => (ranges.lengths, true),
        };
        out.insert((*name).to_string(), json!(current[index]));
        out.insert(
            format!("{name}_details"),
            details(history, current, index, range, now_ms, ceil),
        );
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[derive(Default)]
struct Samples {
    taken_at_ms: Option<u64>,
    node: Option<History<9>>,
    vhosts: HashMap<String, History<9>>,
    queues: HashMap<(String, String), History<6>>,
    exchanges: HashMap<(String, String), History<2>>,
}

/// The last sample of every value, the rates over the last interval and each active object's
/// history.
pub struct RateSampler {
    samples: Mutex<Samples>,
    retention: Duration,
}

impl Default for RateSampler {
    fn default() -> Self {
        RateSampler::new(DEFAULT_RETENTION)
    }
}

/// A node or vhost's `message_stats` and its length fields (`messages`,
/// `messages_details`, ... for `queue_totals` or the vhost object).
pub struct NodeJson {
    /// `message_stats`.
    pub message_stats: Json,
    /// `messages`, `messages_ready`, `messages_unacknowledged` and their `_details`.
    pub lengths: Map<String, Json>,
}

impl RateSampler {
    /// A sampler keeping history for `retention` (zero: rates only, no history).
    pub fn new(retention: Duration) -> RateSampler {
        RateSampler {
            samples: Mutex::default(),
            retention,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Samples> {
        // A panic while sampling leaves plain numbers behind: still usable.
        self.samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the broker's counters and lengths and updates rates and history. Called by the
    /// sampling task every `collect_statistics_interval`; tests may call it directly.
    pub fn sample(&self, broker: &Broker) {
        self.sample_at(broker, now_ms());
    }

    fn sample_at(&self, broker: &Broker, now_ms: u64) {
        let (mut node_ready, mut node_unacked) = (0, 0);
        let mut vhosts = Vec::new();
        let mut queues = Vec::new();
        let mut exchanges = Vec::new();
        for name in broker.vhost_names() {
            let Some(vhost) = broker.vhost(&name) else {
                continue;
            };
            let (mut ready, mut unacked) = (0, 0);
            // Stand-ins of queues homed elsewhere: one request per home node, not per queue.
            vhost.fetch_remote_info();
            for queue in vhost.queue_instances() {
                let stats = queue.info();
                ready += stats.ready;
                unacked += stats.unacknowledged;
                let values = queue_values(&stats);
                // Lifetime counters never return to zero: all zeros is a queue nothing ever
                // passed through (most of an MQTT fleet's), which gets no entry and costs no
                // allocation here.
                if values != [0; 6] {
                    queues.push(((name.clone(), queue.name().to_string()), values));
                }
            }
            for exchange in vhost.exchanges() {
                let values = exchange_values(&exchange.stats());
                if values != [0; 2] {
                    exchanges.push(((name.clone(), exchange.name().to_string()), values));
                }
            }
            node_ready += ready;
            node_unacked += unacked;
            vhosts.push((name, node_values(&vhost.totals(), ready, unacked)));
        }
        let node = node_values(&broker.totals(), node_ready, node_unacked);

        let mut samples = self.lock();
        let tick = Tick {
            now_ms,
            previous_ms: samples.taken_at_ms,
            retention_ms: self.retention.as_millis() as u64,
        };
        samples.node = Some(History::advance(
            samples.node.take(),
            node,
            &NODE_FIELDS,
            tick,
        ));
        samples.vhosts = advance_all(&mut samples.vhosts, vhosts, &NODE_FIELDS, tick, false);
        samples.queues = advance_all(&mut samples.queues, queues, &QUEUE_FIELDS, tick, true);
        samples.exchanges = advance_all(
            &mut samples.exchanges,
            exchanges,
            &EXCHANGE_FIELDS,
            tick,
            true,
        );
        samples.taken_at_ms = Some(now_ms);
    }

    /// The node's `message_stats` and `queue_totals` (`current` read now by the caller).
    pub fn node_json(&self, current: &NodeValues, ranges: &Ranges) -> NodeJson {
        let samples = self.lock();
        node_json(samples.node.as_ref(), current, ranges)
    }

    /// A vhost's `message_stats` and length fields.
    pub fn vhost_json(&self, vhost: &str, current: &NodeValues, ranges: &Ranges) -> NodeJson {
        let samples = self.lock();
        node_json(samples.vhosts.get(vhost), current, ranges)
    }

    /// The `message_stats` and length fields of several vhosts together (the overview of a
    /// user who sees only some vhosts): rates, values and history summed over them.
    pub fn vhosts_json(&self, vhosts: &[&str], current: &NodeValues, ranges: &Ranges) -> NodeJson {
        let samples = self.lock();
        let histories: Vec<&History<9>> = vhosts
            .iter()
            .filter_map(|name| samples.vhosts.get(*name))
            .collect();
        let combined = History::sum(&histories);
        node_json(Some(&combined), current, ranges)
    }

    /// A queue's `message_stats` (publish, deliver_get, ack) and its length fields
    /// (`messages`, `messages_ready`, `messages_unacknowledged` and their `_details`).
    pub fn queue_json(
        &self,
        vhost: &str,
        queue: &str,
        current: &QueueValues,
        ranges: &Ranges,
    ) -> (Json, Map<String, Json>) {
        let samples = self.lock();
        let history = samples.queues.get(&(vhost.to_string(), queue.to_string()));
        let (stats, lengths) = render_split(&QUEUE_FIELDS, current, history, ranges);
        (Json::Object(stats), lengths)
    }

    /// An exchange's `message_stats` (`publish_in`, `publish_out`).
    pub fn exchange_json(
        &self,
        vhost: &str,
        exchange: &str,
        current: &ExchangeValues,
        ranges: &Ranges,
    ) -> Json {
        let samples = self.lock();
        let history = samples
            .exchanges
            .get(&(vhost.to_string(), exchange.to_string()));
        let mut stats = Map::new();
        render(
            &mut stats,
            &EXCHANGE_FIELDS,
            |_, _| true,
            current,
            history,
            ranges,
            now_ms(),
        );
        Json::Object(stats)
    }

    /// How many objects hold a history ring now (for tests and memory accounting).
    pub fn histories(&self) -> usize {
        let samples = self.lock();
        usize::from(samples.node.as_ref().is_some_and(|h| h.points.is_some()))
            + samples
                .vhosts
                .values()
                .filter(|h| h.points.is_some())
                .count()
            + samples
                .queues
                .values()
                .filter(|h| h.points.is_some())
                .count()
            + samples
                .exchanges
                .values()
                .filter(|h| h.points.is_some())
                .count()
    }
}

fn node_json(history: Option<&History<9>>, current: &NodeValues, ranges: &Ranges) -> NodeJson {
    let (stats, lengths) = render_split(&NODE_FIELDS, current, history, ranges);
    NodeJson {
        message_stats: Json::Object(stats),
        lengths,
    }
}

/// The counters (for `message_stats`) and the lengths (fields beside it) of one object.
fn render_split<const N: usize>(
    fields: &[(&str, Kind); N],
    current: &[u64; N],
    history: Option<&History<N>>,
    ranges: &Ranges,
) -> (Map<String, Json>, Map<String, Json>) {
    let now = now_ms();
    let [mut counters, mut lengths] = [Map::new(), Map::new()];
    for (out, wanted) in [(&mut counters, Kind::Counter), (&mut lengths, Kind::Length)] {
        render(
            out,
            fields,
            |_, k| k == wanted,
            current,
            history,
            ranges,
            now,
        );
    }
    (counters, lengths)
}

/// Advances every object of one kind; objects gone from the broker are dropped. With
/// `skip_idle`, an object never sampled whose values are all zero gets no entry.
fn advance_all<K: std::hash::Hash + Eq, const N: usize>(
    previous: &mut HashMap<K, History<N>>,
    current: Vec<(K, [u64; N])>,
    fields: &[(&str, Kind); N],
    tick: Tick,
    skip_idle: bool,
) -> HashMap<K, History<N>> {
    let mut next = HashMap::with_capacity(previous.len());
    for (key, values) in current {
        let before = previous.remove(&key);
        if before.is_none() && skip_idle && values == [0; N] {
            continue;
        }
        next.insert(key, History::advance(before, values, fields, tick));
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    const QUEUE_ONLY: [(&str, Kind); 2] = [("publish", Kind::Counter), ("messages", Kind::Length)];

    fn tick(now_ms: u64, previous_ms: Option<u64>) -> Tick {
        Tick {
            now_ms,
            previous_ms,
            retention_ms: 60_000,
        }
    }

    #[test]
    fn counter_rates_never_go_negative_and_length_rates_do() {
        let before = History::advance(None, [10, 50], &QUEUE_ONLY, tick(1_000, None));
        let after = History::advance(
            Some(before),
            [30, 40],
            &QUEUE_ONLY,
            tick(3_000, Some(1_000)),
        );
        assert_eq!(after.rates, [10.0, -5.0]);
        let reset = History::advance(Some(after), [5, 40], &QUEUE_ONLY, tick(4_000, Some(3_000)));
        assert_eq!(reset.rates[0], 0.0);
    }

    #[test]
    fn history_keeps_change_points_only_and_drops_a_flat_window() {
        let mut history = None;
        let mut at = 0;
        for values in [[1, 1], [2, 2], [2, 2], [2, 2]] {
            at += 5_000;
            let previous = (at > 5_000).then_some(at - 5_000);
            history = Some(History::advance(
                history,
                values,
                &QUEUE_ONLY,
                tick(at, previous),
            ));
        }
        let history = history.unwrap();
        let points = history.points.as_ref().unwrap();
        // The two changes; the flat samples add nothing.
        assert_eq!(
            points
                .iter()
                .map(|p| (p.at_ms, p.values))
                .collect::<Vec<_>>(),
            vec![(5_000, [1, 1]), (10_000, [2, 2])]
        );
        assert_eq!(history.at(12_000, &[9, 9]), [2, 2]);
        assert_eq!(history.at(7_000, &[9, 9]), [1, 1]);
        // A minute later with no change the window is flat: the ring goes.
        let later = History::advance(
            Some(history),
            [2, 2],
            &QUEUE_ONLY,
            tick(80_000, Some(20_000)),
        );
        assert!(later.points.is_none());
        assert_eq!(later.at(70_000, &[2, 2]), [2, 2]);
    }

    #[test]
    fn samples_are_newest_first_on_incr_multiples_with_rabbitmq_averages() {
        let mut history = None;
        for (at, value) in [(10_000, 0), (15_000, 10), (20_000, 30), (25_000, 60)] {
            let previous = (at > 10_000).then_some(at - 5_000);
            history = Some(History::advance(
                history,
                [value, 0],
                &QUEUE_ONLY,
                tick(at, previous),
            ));
        }
        let range = Range {
            age_ms: 10_000,
            incr_ms: 5_000,
        };
        let json = details(history.as_ref(), &[60, 0], 0, Some(range), 27_500, false);
        let samples: Vec<(u64, u64)> = json["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["timestamp"].as_u64().unwrap(),
                    s["sample"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(samples, vec![(25_000, 60), (20_000, 30), (15_000, 10)]);
        assert_eq!(json["avg_rate"], 5.0);
        assert_eq!(json["avg"], 100.0 / 3.0);
        assert_eq!(json["rate"], 6.0);
        // Lengths round the newest sample up to the live value.
        let json = details(history.as_ref(), &[60, 7], 1, Some(range), 27_500, true);
        assert_eq!(json["samples"][0]["timestamp"], 30_000);
        assert_eq!(json["samples"][0]["sample"], 7);
    }

    #[test]
    fn summed_histories_add_values_rates_and_change_points() {
        let a = History::advance(None, [1, 0], &QUEUE_ONLY, tick(1_000, None));
        let a = History::advance(Some(a), [3, 0], &QUEUE_ONLY, tick(2_000, Some(1_000)));
        let b = History::advance(None, [10, 5], &QUEUE_ONLY, tick(1_000, None));
        let b = History::advance(Some(b), [10, 5], &QUEUE_ONLY, tick(2_000, Some(1_000)));
        let b = History::advance(Some(b), [20, 5], &QUEUE_ONLY, tick(3_000, Some(2_000)));
        let sum = History::sum(&[&a, &b]);
        assert_eq!(sum.values, [23, 5]);
        assert_eq!(sum.rates, [2.0 + 10.0, 0.0]);
        assert_eq!(sum.at(1_500, &[0, 0]), [11, 5]);
        assert_eq!(sum.at(2_500, &[0, 0]), [13, 5]);
        assert_eq!(sum.at(3_000, &[0, 0]), [23, 5]);
    }

    #[test]
    fn ranges_follow_rabbitmq_validation() {
        let query = |pairs: &'static [(&'static str, &'static str)]| {
            Ranges::from_query(move |name| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            })
        };
        assert_eq!(
            query(&[("msg_rates_age", "60"), ("msg_rates_incr", "5")])
                .unwrap()
                .msg_rates,
            Some(Range {
                age_ms: 60_000,
                incr_ms: 5_000
            })
        );
        // Missing or non-integer members: no range, no error.
        assert_eq!(query(&[("msg_rates_age", "60")]), Ok(Ranges::default()));
        assert_eq!(
            query(&[("lengths_age", "x"), ("lengths_incr", "5")]),
            Ok(Ranges::default())
        );
        for (age, incr) in [("0", "5"), ("60", "0"), ("-5", "5"), ("1000", "1")] {
            let pairs: &'static [(&str, &str)] =
                Box::leak(Box::new([("lengths_age", age), ("lengths_incr", incr)]));
            assert_eq!(
                query(pairs),
                Err(format!("Invalid range parameters: age {age}, incr {incr}"))
            );
        }
        assert!(query(&[("data_rates_age", "0"), ("data_rates_incr", "5")]).is_err());
    }

    #[test]
    fn idle_objects_keep_no_history_and_busy_ones_do() {
        use std::sync::Arc;
        use warren_core::access::Permissions;
        use warren_core::message::{Message, Properties};
        use warren_core::vhost::{Actor, QueueDeclare};

        let broker = Broker::new(Default::default());
        let vhost = broker.add_vhost("/");
        vhost.set_permissions("admin", Permissions::full());
        let actor = Actor {
            user: "admin",
            connection_id: 1,
        };
        for index in 0..100 {
            vhost
                .declare_queue(
                    actor,
                    QueueDeclare {
                        name: format!("idle-{index}"),
                        passive: false,
                        durable: false,
                        exclusive: false,
                        auto_delete: false,
                        arguments: Default::default(),
                    },
                )
                .unwrap();
        }
        let sampler = RateSampler::default();
        sampler.sample_at(&broker, 5_000);
        sampler.sample_at(&broker, 10_000);
        assert_eq!(sampler.histories(), 0, "nothing moved: no history anywhere");
        assert!(sampler.lock().queues.is_empty());

        // One publish through the default exchange to one queue.
        let message = Message {
            exchange: "".into(),
            routing_key: "idle-7".into(),
            properties: Properties::default(),
            encoded_properties: None,
            body: bytes::Bytes::from_static(b"m"),
        };
        vhost.publish_authorized(Arc::new(message), false).unwrap();
        sampler.sample_at(&broker, 15_000);
        // The node, the vhost, the queue and the default exchange; 99 queues stay idle.
        assert_eq!(sampler.histories(), 4);
        assert_eq!(sampler.lock().queues.len(), 1);
        let values = exchange_values(&vhost.exchange("").unwrap().stats());
        assert_eq!(values, [1, 1]);
        let json = sampler.exchange_json("/", "", &values, &Ranges::default());
        assert_eq!(json["publish_in_details"]["rate"], 0.2);
    }

    proptest::proptest! {
        #[test]
        fn range_parsing_never_panics(age in ".{0,12}", incr in ".{0,12}") {
            let _ = Ranges::from_query(|name| match name {
                "msg_rates_age" => Some(age.clone()),
                "msg_rates_incr" => Some(incr.clone()),
                _ => None,
            });
        }

        #[test]
        fn sample_times_are_bounded_and_descending(age in 1u64..100_000, incr in 1u64..10_000,
                                                   now in 0u64..10_000_000) {
            let range = Range { age_ms: age * 1000, incr_ms: incr * 1000 };
            let times = sample_times(range, now, false);
            proptest::prop_assert!(times.len() as u64 <= age / incr + 1);
            proptest::prop_assert!(times.windows(2).all(|w| w[0] > w[1]));
        }
    }
}
