//! Cluster formation from the seed list (`cluster_formation.classic_config.nodes.N`).
//!
//! A node with a log of its own is a former member: openraft restarts it from its log and
//! membership, and it rejoins its last-known peers by itself. A blank node asks each seed
//! whether it is a member; it joins the first member it reaches (through that member, which
//! forwards to the leader). While no seed is a member, the seed with the smallest name
//! forms the cluster alone and the others join it, so nodes started together form one
//! cluster. A blank node whose smallest seed never answers forms the cluster itself after
//! 10 s, if it is the smallest of the blank nodes it reaches. A node completing
//! `join_cluster` (`join_only`) only ever joins.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value as Json};

use super::{basic_node, methods, node_id, MetadataCommand, MetadataStore, Operation};
use crate::codec::LinkKind;

/// How long a blank node waits for the smallest seed before forming the cluster itself.
const FORM_ALONE_AFTER: Duration = Duration::from_secs(10);

pub(super) async fn form(store: Arc<MetadataStore>, blank: bool) {
    if !blank {
        tracing::info!(node = %store.config.node, "rejoining the cluster from the local metadata log");
        return;
    }
    let me = store.config.node.clone();
    let seeds: Vec<(String, String)> = store
        .config
        .seeds
        .iter()
        .filter(|(name, _)| *name != me)
        .cloned()
        .collect();
    let smallest = seeds
        .iter()
        .map(|(name, _)| name.as_str())
        .chain([me.as_str()])
        .min()
        .unwrap_or(me.as_str())
        .to_string();
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if store.is_member() {
            return;
        }
        let mut blank_peers = Vec::new();
        for (name, _) in &seeds {
            let info = store
                .transport
                .call(
                    name,
                    LinkKind::Control,
                    methods::INFO,
                    Bytes::new(),
                    Duration::from_millis(500),
                )
                .await;
            let Some(info) = info
                .ok()
                .and_then(|b| serde_json::from_slice::<Json>(&b).ok())
            else {
                continue;
            };
            if info.get("member").and_then(Json::as_bool) != Some(true) {
                blank_peers.push(name.clone());
                continue;
            }
            let request = json!({"name": me, "address": store.config.address});
            let joined = store
                .transport
                .call(
                    name,
                    LinkKind::Control,
                    methods::JOIN,
                    Bytes::from(request.to_string()),
                    Duration::from_secs(12),
                )
                .await;
            match joined {
                Ok(_) => {
                    tracing::info!(node = %me, via = %name, "joined the cluster");
                    return;
                }
                Err(error) => {
                    tracing::info!(node = %me, via = %name, %error, "could not join the cluster yet");
                }
            }
        }
        if store.config.join_only {
            // join_cluster: the target's cluster or none.
            continue;
        }
        let alone_for_long =
            started.elapsed() >= FORM_ALONE_AFTER && blank_peers.iter().all(|peer| me < *peer);
        if me == smallest || alone_for_long {
            initialize(&store).await;
            return;
        }
    }
}

/// Forms a new cluster of this node alone and records a fresh cluster id in its log.
async fn initialize(store: &Arc<MetadataStore>) {
    let me = store.config.node.clone();
    let members = BTreeMap::from([(node_id(&me), basic_node(&me, &store.config.address))]);
    if let Err(error) = store.raft.initialize(members).await {
        tracing::warn!(%error, "metadata group: initialize refused");
        return;
    }
    let cluster_id = format!(
        "{:016x}{:016x}",
        rand::random::<u64>(),
        rand::random::<u64>()
    );
    tracing::info!(node = %me, %cluster_id, "formed a new cluster");
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if store.is_leader() {
            let command = MetadataCommand {
                origin: me.clone(),
                ticket: 0,
                operation: Operation::ClusterId(cluster_id.clone()),
            };
            match store.raft.client_write(command).await {
                Ok(_) => return,
                Err(error) => tracing::debug!(%error, "cluster id not recorded yet"),
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tracing::warn!("the cluster id could not be recorded");
}
