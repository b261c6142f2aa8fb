//! Message rates as RabbitMQ's management API shows them (`message_stats.publish_details.rate`
//! and friends): the core's lifetime counters are sampled every `collect_statistics_interval`
//! (5 s by default) by a task of this plugin, and a rate is the counter's growth over the last
//! interval, per second. The message path pays nothing: it only bumps the counters it already
//! had.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value as Json};
use std::sync::Mutex;
use warren_core::counters::NodeTotals;
use warren_core::Broker;

/// The counters a rate is kept for, in RabbitMQ's `message_stats` names.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatCounters {
    /// `publish`: messages published (node, vhost) or enqueued (queue).
    pub publish: u64,
    /// `confirm`: publishes confirmed.
    pub confirm: u64,
    /// `return_unroutable`.
    pub return_unroutable: u64,
    /// `drop_unroutable`.
    pub drop_unroutable: u64,
    /// `deliver_get`: deliveries to consumers and basic.get.
    pub deliver_get: u64,
    /// `ack`.
    pub ack: u64,
}

impl StatCounters {
    fn from_totals(totals: &NodeTotals) -> StatCounters {
        StatCounters {
            publish: totals.messages.received,
            confirm: totals.messages.confirmed,
            return_unroutable: totals.messages.unroutable_returned,
            drop_unroutable: totals.messages.unroutable_dropped,
            deliver_get: totals.queues.delivered,
            ack: totals.queues.acknowledged,
        }
    }

    fn from_queue(stats: &warren_core::queue::QueueStats) -> StatCounters {
        StatCounters {
            publish: stats.published,
            deliver_get: stats.delivered,
            ack: stats.acknowledged,
            ..StatCounters::default()
        }
    }

    fn fields(&self) -> [(&'static str, u64); 6] {
        [
            ("publish", self.publish),
            ("confirm", self.confirm),
            ("return_unroutable", self.return_unroutable),
            ("drop_unroutable", self.drop_unroutable),
            ("deliver_get", self.deliver_get),
            ("ack", self.ack),
        ]
    }
}

/// Per-second rates of [`StatCounters`] over the last sample interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatRates([f64; 6]);

impl StatRates {
    fn between(before: &StatCounters, after: &StatCounters, seconds: f64) -> StatRates {
        let mut rates = [0.0; 6];
        for (slot, ((_, old), (_, new))) in rates
            .iter_mut()
            .zip(before.fields().iter().zip(after.fields().iter()))
        {
            // A counter that went down belongs to a queue deleted and declared again: no rate.
            *slot = new.saturating_sub(*old) as f64 / seconds;
        }
        StatRates(rates)
    }
}

/// `message_stats` as RabbitMQ writes it: every counter with its `<name>_details.rate`.
/// `keys` limits the counters shown (queues have no confirm or unroutable counts).
pub fn message_stats_json(counters: &StatCounters, rates: &StatRates, keys: &[&str]) -> Json {
    let mut stats = Map::new();
    for (index, (name, value)) in counters.fields().iter().enumerate() {
        if !keys.contains(name) {
            continue;
        }
        // Rounded to 0.1 as RabbitMQ shows them.
        let rate = (rates.0[index] * 10.0).round() / 10.0;
        stats.insert((*name).to_string(), json!(value));
        stats.insert(format!("{name}_details"), json!({ "rate": rate }));
    }
    Json::Object(stats)
}

/// The counters RabbitMQ shows on `/api/overview` and `/api/vhosts`.
pub const NODE_KEYS: [&str; 6] = [
    "publish",
    "confirm",
    "return_unroutable",
    "drop_unroutable",
    "deliver_get",
    "ack",
];

/// The counters shown on `/api/queues`.
pub const QUEUE_KEYS: [&str; 3] = ["publish", "deliver_get", "ack"];

#[derive(Default)]
struct Samples {
    taken_at: Option<Instant>,
    node: (StatCounters, StatRates),
    vhosts: HashMap<String, (StatCounters, StatRates)>,
    queues: HashMap<(String, String), (StatCounters, StatRates)>,
}

/// The last sample of every counter and the rates computed from the two last samples.
#[derive(Default)]
pub struct RateSampler {
    samples: Mutex<Samples>,
}

impl RateSampler {
    fn lock(&self) -> std::sync::MutexGuard<'_, Samples> {
        // A panic while sampling leaves plain numbers behind: still usable.
        self.samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Reads the broker's counters and updates the rates from the growth since the previous
    /// sample. Called by the sampling task; tests may call it directly.
    pub fn sample(&self, broker: &Broker) {
        let now = Instant::now();
        let node = StatCounters::from_totals(&broker.totals());
        let mut vhosts = HashMap::new();
        let mut queues = HashMap::new();
        for name in broker.vhost_names() {
            let Some(vhost) = broker.vhost(&name) else {
                continue;
            };
            vhosts.insert(name.clone(), StatCounters::from_totals(&vhost.totals()));
            for queue in vhost.queues() {
                let counters = StatCounters::from_queue(&queue.stats());
                // A queue nothing passed through yet (most of an MQTT fleet's subscription
                // queues) has no entry: it reads as zero counters and zero rates, and an
                // idle queue costs nothing here.
                if counters == StatCounters::default() {
                    continue;
                }
                queues.insert((name.clone(), queue.name().to_string()), counters);
            }
        }
        let mut samples = self.lock();
        let seconds = samples
            .taken_at
            .map(|at| now.duration_since(at).as_secs_f64())
            .filter(|s| *s > 0.0);
        // Without an earlier entry the object started from zero (new, or idle until now).
        let rate = |before: Option<&StatCounters>, after: &StatCounters| match seconds {
            Some(seconds) => {
                StatRates::between(before.unwrap_or(&StatCounters::default()), after, seconds)
            }
            None => StatRates::default(),
        };
        samples.node = (node, rate(Some(&samples.node.0), &node));
        let vhosts = vhosts
            .into_iter()
            .map(|(name, counters)| {
                let rates = rate(samples.vhosts.get(&name).map(|s| &s.0), &counters);
                (name, (counters, rates))
            })
            .collect();
        let queues = queues
            .into_iter()
            .map(|(key, counters)| {
                let rates = rate(samples.queues.get(&key).map(|s| &s.0), &counters);
                (key, (counters, rates))
            })
            .collect();
        samples.vhosts = vhosts;
        samples.queues = queues;
        samples.taken_at = Some(now);
    }

    /// The node's rates from the last sample.
    pub fn node_rates(&self) -> StatRates {
        self.lock().node.1
    }

    /// A vhost's rates from the last sample (zero before it was sampled).
    pub fn vhost_rates(&self, vhost: &str) -> StatRates {
        self.lock()
            .vhosts
            .get(vhost)
            .map(|s| s.1)
            .unwrap_or_default()
    }

    /// A queue's rates from the last sample (zero before it was sampled).
    pub fn queue_rates(&self, vhost: &str, queue: &str) -> StatRates {
        self.lock()
            .queues
            .get(&(vhost.to_string(), queue.to_string()))
            .map(|s| s.1)
            .unwrap_or_default()
    }
}

/// Node counters now (for `message_stats` values; rates come from the sampler).
pub fn node_counters(broker: &Broker) -> StatCounters {
    StatCounters::from_totals(&broker.totals())
}

/// A vhost's counters now.
pub fn vhost_counters(vhost: &warren_core::vhost::VHost) -> StatCounters {
    StatCounters::from_totals(&vhost.totals())
}

/// A queue's counters now.
pub fn queue_counters(stats: &warren_core::queue::QueueStats) -> StatCounters {
    StatCounters::from_queue(stats)
}

/// The default sampling interval, RabbitMQ's `collect_statistics_interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(5000);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_growth_per_second_and_never_negative() {
        let before = StatCounters {
            publish: 10,
            ack: 50,
            ..Default::default()
        };
        let after = StatCounters {
            publish: 30,
            ack: 40,
            ..Default::default()
        };
        let rates = StatRates::between(&before, &after, 2.0);
        let json = message_stats_json(&after, &rates, &QUEUE_KEYS);
        assert_eq!(json["publish"], 30);
        assert_eq!(json["publish_details"]["rate"], 10.0);
        assert_eq!(json["ack_details"]["rate"], 0.0);
        assert!(json.get("confirm").is_none());
    }
}
