//! Streams in `/api/queues`: each stream of a vhost is listed as a queue of type `stream`
//! with its first and last offset, segment count and bytes on disk.

use serde_json::{json, Value as Json};
use warren_core::policy::select;
use warren_core::stream_log::StreamLog;
use warren_core::vhost::VHost;

use super::Management;

impl Management {
    pub(crate) fn stream_json(&self, vhost: &VHost, log: &StreamLog) -> Json {
        let stats = log.stats();
        let settings = log.settings();
        let arguments: serde_json::Map<String, Json> = settings
            .arguments
            .iter()
            .map(|(key, value)| (key.clone(), Json::String(value.clone())))
            .collect();
        let messages = stats.next_offset.saturating_sub(stats.first_offset);
        let mut json = json!({
            "name": log.name(),
            "vhost": vhost.name(),
            "durable": true,
            "auto_delete": false,
            "exclusive": false,
            "arguments": arguments,
            "type": "stream",
            "node": self.node_name,
            "state": "running",
            // The policy that applies to the stream (its retention wins over arguments).
            "policy": select(&vhost.policies(false), |p| p.matches_stream(log.name()))
                .map(|p| p.name.clone()),
            // Consumers over AMQP 0-9-1, AMQP 1.0 and STOMP, and stream protocol subscribers.
            "consumers": vhost.queue_instance(log.name()).map_or(0, |queue| queue.info().consumers)
                + self.broker.stream_clients().consumers_of(vhost.name(), log.name()) as u64,
            "messages": messages,
            "messages_ready": messages,
            "messages_unacknowledged": 0,
            "first_offset": stats.first_offset,
            "last_offset": stats.next_offset.checked_sub(1),
            "committed_offset": stats.last_chunk_offset,
            "segments": stats.segments,
            "disk_bytes": stats.bytes,
            // A stream with neither a length nor an age limit (by argument or policy)
            // grows forever.
            "retention_unbounded": log.effective_settings().unbounded(),
        });
        // Replicated on a cluster: its placement, RabbitMQ's fields for a stream's leader
        // and members (the leader's node is the queue's node), and the leader's epoch.
        if let (Some(placement), Some(object)) = (log.placement(), json.as_object_mut()) {
            object.insert("node".into(), Json::String(placement.leader.clone()));
            object.insert("leader".into(), Json::String(placement.leader.clone()));
            object.insert("members".into(), json!(placement.members));
            object.insert(
                "replicas".into(),
                json!(placement.replicas().collect::<Vec<_>>()),
            );
            object.insert("epoch".into(), json!(placement.epoch));
        }
        json
    }
}
