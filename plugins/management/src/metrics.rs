//! Prometheus metrics in the text exposition format, with rabbitmq_prometheus' metric names
//! for what Warren has, so RabbitMQ's Grafana dashboards show Warren.
//!
//! `/metrics` is aggregated over the node (cheap with many queues: one pass, one lock per
//! queue); `/metrics/per-object` adds one sample per queue labelled `vhost` and `queue`,
//! and the `rabbitmq_raft_*` families of each quorum queue's member on this node.
//! Message counters come from the per-vhost counters (published, routed, unroutable,
//! confirmed) and the per-queue stats (delivered, acknowledged, dead-lettered); the latter are
//! sums over the queues that exist, so deleting a queue takes its share with it.

use std::fmt::Write as _;

use warren_core::broker::Alarm;
use warren_core::queue::QueueStats;

use crate::http::{Request, Response};
use crate::{Management, QuorumView, RaftFigures};

/// The content type Prometheus scrapes.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A per-queue metric family: name, type, help and how to read it from a queue's stats.
type QueueFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&QueueStats) -> u64,
);

/// Answers `/metrics` and `/metrics/per-object`.
pub fn handle(management: &Management, request: &Request) -> Response {
    if request.method != "GET" {
        return Response::empty(405);
    }
    match request.path.as_str() {
        "/metrics" => Response::text(200, CONTENT_TYPE, render(management, false)),
        "/metrics/per-object" => Response::text(200, CONTENT_TYPE, render(management, true)),
        _ => Response::text(404, "text/plain", "not found\n".to_string()),
    }
}

/// Writes metric families: `# HELP`, `# TYPE`, then samples.
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# TYPE {name} {kind}\n# HELP {name} {help}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: u64) {
        self.series(name, labels);
        let _ = writeln!(self.text, " {value}");
    }

    fn sample_f64(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.series(name, labels);
        let _ = writeln!(self.text, " {value}");
    }

    /// A sample's name and labels.
    fn series(&mut self, name: &str, labels: &[(&str, &str)]) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (index, (key, value)) in labels.iter().enumerate() {
                if index > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{key}=\"{}\"", escape(value));
            }
            self.text.push('}');
        }
    }

    fn single(&mut self, name: &str, kind: &str, help: &str, value: u64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

/// Escapes a label value (backslash, double quote, newline).
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders the exposition text.
pub fn render(management: &Management, per_object: bool) -> String {
    let broker = &management.broker;
    let mut out = Exposition {
        text: String::with_capacity(8 * 1024),
    };
    // Lifetime counters come from the core's node totals, which keep deleted queues' and
    // vhosts' counts (a sum over live queues would go backwards).
    let node = broker.totals();
    let counts = node.messages;
    let lifetime = node.queues;
    let mut totals = QueueStats::default();
    let mut queue_count = 0u64;
    let mut per_queue = Vec::new();
    let mut quorum_queues = Vec::new();
    for name in broker.vhost_names() {
        let Some(vhost) = broker.vhost(&name) else {
            continue;
        };
        // Every queue type but streams (quorum queues through the queue-type interface).
        for queue in vhost.queue_instances() {
            let stats = queue.info();
            queue_count += 1;
            totals.ready += stats.ready;
            totals.unacknowledged += stats.unacknowledged;
            totals.consumers += stats.consumers;
            if per_object {
                if queue.queue_type().name() == "quorum" {
                    quorum_queues.push((name.clone(), queue.name().to_string()));
                }
                per_queue.push((name.clone(), queue.name().to_string(), stats));
            }
        }
    }
    // Aggregated queue counters are lifetime totals too (per-object ones are per queue).
    totals.published = lifetime.published;
    totals.delivered = lifetime.delivered;
    totals.acknowledged = lifetime.acknowledged;
    let connections = broker.connections();
    let resources = (management.resources)();
    let alarms = broker.alarms();

    out.family(
        "rabbitmq_identity_info",
        "untyped",
        "RabbitMQ node & cluster identity info",
    );
    // As RabbitMQ labels it: the node, the cluster's current name (`set_cluster_name`
    // changes it) and an id that stays when the name changes (the cluster id when
    // clustered; a single node has only its configured name).
    let cluster_name = management.effective_cluster_name();
    let permanent_id = management
        .cluster
        .as_ref()
        .and_then(|cluster| cluster.cluster_id())
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| management.cluster_name.clone());
    out.sample(
        "rabbitmq_identity_info",
        &[
            ("rabbitmq_node", &management.node_name),
            ("rabbitmq_cluster", &cluster_name),
            ("rabbitmq_cluster_permanent_id", &permanent_id),
        ],
        1,
    );
    out.family(
        "rabbitmq_build_info",
        "untyped",
        "RabbitMQ & Erlang/OTP version info",
    );
    out.sample(
        "rabbitmq_build_info",
        &[
            ("rabbitmq_version", crate::api::RABBITMQ_COMPATIBLE_VERSION),
            ("product_version", env!("CARGO_PKG_VERSION")),
            ("product_name", "Warren"),
        ],
        1,
    );
    out.single(
        "rabbitmq_connections",
        "gauge",
        "Connections currently open",
        connections.count() as u64,
    );
    out.single(
        "rabbitmq_connections_opened_total",
        "counter",
        "Total number of connections opened",
        connections.opened_total(),
    );
    out.single(
        "rabbitmq_connections_closed_total",
        "counter",
        "Total number of connections closed or terminated",
        connections.closed_total(),
    );
    out.single(
        "rabbitmq_channels",
        "gauge",
        "Channels currently open",
        connections.channel_count(),
    );
    out.single(
        "rabbitmq_consumers",
        "gauge",
        "Consumers currently connected",
        totals.consumers,
    );
    out.single("rabbitmq_queues", "gauge", "Queues available", queue_count);

    let queue_families: [QueueFamily; 7] = [
        (
            "rabbitmq_queue_messages_ready",
            "gauge",
            "Messages ready to be delivered to consumers",
            |s| s.ready,
        ),
        (
            "rabbitmq_queue_messages_unacked",
            "gauge",
            "Messages delivered to consumers but not yet acknowledged",
            |s| s.unacknowledged,
        ),
        (
            "rabbitmq_queue_messages",
            "gauge",
            "Sum of ready and unacknowledged messages - total queue depth",
            |s| s.ready + s.unacknowledged,
        ),
        (
            "rabbitmq_queue_consumers",
            "gauge",
            "Consumers on a queue",
            |s| s.consumers,
        ),
        (
            "rabbitmq_queue_messages_published_total",
            "counter",
            "Total number of messages published to queues",
            |s| s.published,
        ),
        (
            "rabbitmq_queue_messages_delivered_total",
            "counter",
            "Total number of messages delivered to consumers",
            |s| s.delivered,
        ),
        (
            "rabbitmq_queue_messages_acked_total",
            "counter",
            "Total number of messages acknowledged by consumers",
            |s| s.acknowledged,
        ),
    ];
    for (name, kind, help, value) in queue_families {
        out.family(name, kind, help);
        if per_object {
            for (vhost, queue, stats) in &per_queue {
                out.sample(name, &[("vhost", vhost), ("queue", queue)], value(stats));
            }
        } else {
            out.sample(name, &[], value(&totals));
        }
    }

    let protocol = [("protocol", "amqp091")];
    let globals: [(&str, &str, u64); 7] = [
        (
            "rabbitmq_global_messages_received_total",
            "Total number of messages received from publishers",
            counts.received,
        ),
        (
            "rabbitmq_global_messages_routed_total",
            "Total number of messages routed to queues or streams",
            counts.routed,
        ),
        (
            "rabbitmq_global_messages_unroutable_dropped_total",
            "Total number of messages published as non-mandatory into an exchange and dropped as unroutable",
            counts.unroutable_dropped,
        ),
        (
            "rabbitmq_global_messages_unroutable_returned_total",
            "Total number of messages published as mandatory into an exchange and returned to the publisher as unroutable",
            counts.unroutable_returned,
        ),
        (
            "rabbitmq_global_messages_confirmed_total",
            "Total number of messages confirmed to publishers",
            counts.confirmed,
        ),
        (
            "rabbitmq_global_messages_delivered_total",
            "Total number of messages delivered to consumers",
            lifetime.delivered,
        ),
        (
            "rabbitmq_global_messages_acknowledged_total",
            "Total number of message acknowledgements received from consumers",
            lifetime.acknowledged,
        ),
    ];
    let streams = broker.stream_clients().totals();
    for (name, help, value) in globals {
        out.family(name, "counter", help);
        out.sample(name, &protocol, value);
        // The stream protocol's share, as rabbit_global_counters counts it for `stream`.
        match name {
            "rabbitmq_global_messages_received_total" => {
                out.sample(name, &STREAM_PROTOCOL, streams.received)
            }
            "rabbitmq_global_messages_confirmed_total" => {
                out.sample(name, &STREAM_PROTOCOL, streams.confirmed)
            }
            "rabbitmq_global_messages_delivered_total" => out.sample(
                name,
                &[
                    ("protocol", "stream"),
                    ("queue_type", "rabbit_stream_queue"),
                ],
                streams.delivered,
            ),
            _ => {}
        }
    }
    stream_families(&mut out, broker, per_object);
    let dead_lettered: [(&str, &str, u64); 3] = [
        (
            "rabbitmq_global_messages_dead_lettered_rejected_total",
            "Total number of messages dead-lettered due to basic.reject or basic.nack",
            lifetime.dead_lettered_rejected,
        ),
        (
            "rabbitmq_global_messages_dead_lettered_expired_total",
            "Total number of messages dead-lettered due to message TTL exceeded",
            lifetime.dead_lettered_expired,
        ),
        (
            "rabbitmq_global_messages_dead_lettered_maxlen_total",
            "Total number of messages dead-lettered due to overflow drop-head or reject-publish-dlx",
            lifetime.dead_lettered_maxlen,
        ),
    ];
    for (name, help, value) in dead_lettered {
        out.family(name, "counter", help);
        out.sample(
            name,
            &[
                ("queue_type", "rabbit_classic_queue"),
                ("dead_letter_strategy", "at_most_once"),
            ],
            value,
        );
    }

    out.single(
        "rabbitmq_alarms_memory_used_watermark",
        "gauge",
        "is 1 if VM memory watermark alarm is in effect",
        u64::from(alarms.contains(&Alarm::Memory)),
    );
    out.single(
        "rabbitmq_alarms_free_disk_space_watermark",
        "gauge",
        "is 1 if free disk space watermark alarm is in effect",
        u64::from(alarms.contains(&Alarm::Disk)),
    );
    out.single(
        "rabbitmq_alarms_file_descriptor_limit",
        "gauge",
        "is 1 if file descriptor limit alarm is in effect",
        0,
    );
    out.single(
        "rabbitmq_process_resident_memory_bytes",
        "gauge",
        "Memory used in bytes",
        resources.memory_used,
    );
    out.single(
        "rabbitmq_resident_memory_limit_bytes",
        "gauge",
        "Memory high watermark in bytes",
        resources.memory_limit,
    );
    out.single(
        "rabbitmq_disk_space_available_bytes",
        "gauge",
        "Disk space available in bytes",
        resources.disk_free,
    );
    out.single(
        "rabbitmq_disk_space_available_limit_bytes",
        "gauge",
        "Free disk space low watermark in bytes",
        resources.disk_free_limit,
    );
    if let Some(view) = &management.quorum {
        raft_families(&mut out, view.as_ref(), &quorum_queues);
    }
    if let Some(open) = open_file_descriptors() {
        out.single(
            "rabbitmq_process_open_fds",
            "gauge",
            "Open file descriptors",
            open,
        );
    }
    out.text
}

/// The label of the stream protocol's samples of the global counters.
const STREAM_PROTOCOL: [(&str, &str); 1] = [("protocol", "stream")];

/// The stream families of rabbitmq_prometheus: the stream protocol's publishers, consumers
/// and messages received expecting a confirm (every stream publish does), its error
/// responses by code (`rabbitmq_global_stream_error_*_total`), the highest
/// consumer offset lag (`rabbitmq_stream_consumer_max_offset_lag`) and the segment files
/// (`rabbitmq_stream_segments`); per stream (labels `vhost`, `queue`) on the per-object
/// endpoint, over the node otherwise.
fn stream_families(out: &mut Exposition, broker: &warren_core::Broker, per_object: bool) {
    let clients = broker.stream_clients();
    let totals = clients.totals();
    let gauges = [
        (
            "rabbitmq_global_messages_received_confirm_total",
            "counter",
            "Total number of messages received from publishers expecting confirmations",
            totals.received,
        ),
        (
            "rabbitmq_global_publishers",
            "gauge",
            "Current number of publishers",
            totals.publishers,
        ),
        (
            "rabbitmq_global_consumers",
            "gauge",
            "Current number of consumers",
            totals.consumers,
        ),
    ];
    for (name, kind, help, value) in gauges {
        out.family(name, kind, help);
        out.sample(name, &STREAM_PROTOCOL, value);
    }
    // Error responses by code, as rabbit_stream_metrics counts them.
    for (error, help, count) in clients.error_counts() {
        let name = format!("rabbitmq_global_stream_error_{error}_total");
        out.family(&name, "counter", help);
        out.sample(&name, &STREAM_PROTOCOL, count);
    }
    // Each stream's end, once, for the lags of its consumers.
    let mut streams: Vec<(String, std::sync::Arc<warren_core::stream_log::StreamLog>)> = Vec::new();
    for name in broker.vhost_names() {
        if let Some(vhost) = broker.vhost(&name) {
            for log in vhost.streams().list() {
                streams.push((name.clone(), log));
            }
        }
    }
    let mut lags: std::collections::HashMap<(String, String), u64> = Default::default();
    for consumer in clients.consumers() {
        let Some((_, log)) = streams.iter().find(|(vhost, log)| {
            *vhost == consumer.info.vhost && log.name() == consumer.info.stream
        }) else {
            continue;
        };
        let lag = log.stats().next_offset.saturating_sub(consumer.offset);
        let entry = lags
            .entry((consumer.info.vhost.clone(), consumer.info.stream.clone()))
            .or_insert(0);
        *entry = (*entry).max(lag);
    }
    let lag_name = "rabbitmq_stream_consumer_max_offset_lag";
    out.family(lag_name, "gauge", "Highest consumer offset lag");
    let segments_name = "rabbitmq_stream_segments";
    if per_object {
        for ((vhost, queue), lag) in &lags {
            out.sample(lag_name, &[("vhost", vhost), ("queue", queue)], *lag);
        }
        out.family(
            segments_name,
            "counter",
            "Total number of stream segment files",
        );
        for (vhost, log) in &streams {
            out.sample(
                segments_name,
                &[("vhost", vhost), ("queue", log.name())],
                log.stats().segments as u64,
            );
        }
    } else {
        out.sample(lag_name, &[], lags.values().copied().max().unwrap_or(0));
        out.family(
            segments_name,
            "counter",
            "Total number of stream segment files",
        );
        out.sample(
            segments_name,
            &[],
            streams
                .iter()
                .map(|(_, log)| log.stats().segments as u64)
                .sum(),
        );
    }
}

/// A `rabbitmq_raft_*` family: name, type, help and how to read it from a member.
type RaftFamily = (
    &'static str,
    &'static str,
    &'static str,
    fn(&RaftFigures) -> u64,
);

/// The `rabbitmq_raft_*` families of rabbitmq_prometheus' per-object endpoint, one sample
/// per quorum queue labelled `vhost` and `queue`, from this node's member of each group
/// (as RabbitMQ reports each node's Ra server).
fn raft_families(out: &mut Exposition, view: &dyn QuorumView, queues: &[(String, String)]) {
    if queues.is_empty() {
        return;
    }
    let members: Vec<(&str, &str, RaftFigures, Option<std::time::Duration>)> = queues
        .iter()
        .filter_map(|(vhost, queue)| {
            let (figures, latency) = view.local(vhost, queue)?;
            Some((vhost.as_str(), queue.as_str(), figures, latency))
        })
        .collect();
    let families: [RaftFamily; 5] = [
        (
            "rabbitmq_raft_term_total",
            "counter",
            "Current Raft term number",
            |f| f.term,
        ),
        (
            "rabbitmq_raft_log_snapshot_index",
            "gauge",
            "Raft log snapshot index",
            |f| f.snapshot_index,
        ),
        (
            "rabbitmq_raft_log_last_applied_index",
            "gauge",
            "Raft log last applied index",
            |f| f.last_applied,
        ),
        (
            "rabbitmq_raft_log_commit_index",
            "gauge",
            "Raft log commit index",
            |f| f.commit_index,
        ),
        (
            "rabbitmq_raft_log_last_written_index",
            "gauge",
            "Raft log last written index",
            |f| f.last_log_index,
        ),
    ];
    for (name, kind, help, value) in families {
        out.family(name, kind, help);
        for (vhost, queue, figures, _) in &members {
            out.sample(name, &[("vhost", vhost), ("queue", queue)], value(figures));
        }
    }
    let name = "rabbitmq_raft_entry_commit_latency_seconds";
    out.family(
        name,
        "gauge",
        "Time taken for a log entry to be committed (the last batch this node's member proposed as leader)",
    );
    for (vhost, queue, _, latency) in &members {
        if let Some(latency) = latency {
            out.sample_f64(
                name,
                &[("vhost", vhost), ("queue", queue)],
                latency.as_secs_f64(),
            );
        }
    }
}

/// Open file descriptors of this process (Linux: entries of /proc/self/fd).
fn open_file_descriptors() -> Option<u64> {
    std::fs::read_dir("/proc/self/fd")
        .ok()
        .map(|entries| entries.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut out = Exposition {
            text: String::new(),
        };
        out.sample("m", &[("queue", "a\"b\\c\nd")], 3);
        assert_eq!(out.text, "m{queue=\"a\\\"b\\\\c\\nd\"} 3\n");
    }
}
