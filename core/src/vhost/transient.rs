//! Exclusive and auto-delete queues on a cluster (docs/clustering.md, "Any node"): they are
//! in the metadata log with their home node like any classic queue, so other nodes route to
//! them through stand-ins, but only their home node decides when they go (the owner
//! connection closed, the last consumer left) and then drops them cluster-wide with a
//! [`TopologyChange::DropQueue`]. When a home node goes down its transient queues are
//! dropped by the survivors ([`crate::remote::Forwarding::maintain`]), and a home node that
//! restarts drops those its log still declares (their owners died with the old process).

use std::collections::HashSet;

use super::*;
use crate::remote::{Forwarding, RemoteQueue, StandInProperties};

/// What a vhost still has to settle with the cluster about transient queues.
#[derive(Default)]
pub(super) struct TransientPending {
    /// Transient queues this node is home to whose owners are gone (declared by a replayed
    /// log entry, or whose drop could not be committed): dropped cluster-wide at the next
    /// maintenance pass.
    drops: HashSet<String>,
    /// Transient queues made from the log before forwarding was ready (at boot): held as
    /// ownerless local queues until their home is known, then turned into stand-ins (or
    /// dropped, when this node is their home).
    replayed: HashSet<String>,
}

impl VHost {
    /// Whether a declaration of a transient queue is a log entry applied here for a queue
    /// whose owner is not a connection of this node (another node's queue, or this node's
    /// from before a restart).
    pub(super) fn is_replayed_transient(&self, actor: Actor<'_>, request: &QueueDeclare) -> bool {
        (request.exclusive || request.auto_delete)
            && actor.connection_id == BROKER_CONNECTION
            && crate::replication::applying()
            && self.durability.is_replicated()
    }

    /// A replayed transient declaration homed on this node or not known yet (see
    /// [`VHost::is_replayed_transient`]); the caller made stand-ins for other nodes' queues
    /// already. Returns whether to make the queue here (ownerless, until maintenance
    /// settles it: forwarding is not ready, so its home is not known yet).
    pub(super) fn replayed_transient(
        &self,
        name: &str,
        forwarding: Option<&Arc<Forwarding>>,
    ) -> bool {
        let mut pending = self.transient.lock();
        match forwarding {
            // This node's own queue from before a restart: its owner is gone.
            Some(_) => {
                pending.drops.insert(name.to_string());
                false
            }
            None => {
                pending.replayed.insert(name.to_string());
                true
            }
        }
    }

    /// Records that this node still owes the cluster the drop of its transient queue `name`.
    pub fn owe_transient_drop(&self, name: &str) {
        self.transient.lock().drops.insert(name.to_string());
    }

    /// Applies a committed [`TopologyChange::DropQueue`]: removes this node's copy of
    /// queue `name` if it is the one homed on `home` (a stand-in pointing there, or this
    /// node's own transient queue when `home` is this node).
    pub fn drop_transient_queue(&self, name: &str, home: &str) {
        let _topology = self.topology.lock();
        {
            let mut pending = self.transient.lock();
            pending.replayed.remove(name);
        }
        if let Some(typed) = self.typed_queue(name) {
            if typed.home_node() == Some(home) {
                self.remove_typed_queue_locked(name);
            }
            return;
        }
        if let Some(queue) = self.queue(name) {
            // This node's own queue (transient, or durable and expired by x-expires); with
            // no name known yet, only a transient one (no other node has a local copy).
            let here = match self.durability.local_node() {
                Some(local) => local == home,
                None => queue.is_node_local(),
            };
            if here {
                self.remove_queue_locked(&queue);
            }
        }
    }

    /// Commits the drop of transient queue `name` homed on `home` through the cluster and
    /// applies it here (this node proposes it, so it applies it itself).
    pub fn commit_transient_drop(&self, name: &str, home: &str) -> CoreResult<()> {
        let _replicated = self.durability.replicate(|| TopologyChange::DropQueue {
            vhost: self.name.clone(),
            name: name.to_string(),
            home: home.to_string(),
        })?;
        self.drop_transient_queue(name, home);
        Ok(())
    }

    /// Before the broker removes `queue` by itself (owner gone, last consumer gone): on a
    /// cluster, commits its drop so that every node removes its stand-in. A drop that cannot
    /// be committed now is retried by maintenance.
    pub(super) fn replicate_transient_drop(
        &self,
        queue: &Queue,
    ) -> crate::replication::ReplicationPermit {
        if !queue.is_node_local() {
            return crate::replication::ReplicationPermit::none();
        }
        self.replicate_broker_drop(queue)
    }

    /// Before the broker removes `queue` of this node by itself (transient and its owner or
    /// last consumer gone, or unused past its `x-expires`): on a cluster, commits its drop
    /// so that every node removes its stand-in. A drop that cannot be committed now is
    /// retried by maintenance.
    pub(super) fn replicate_broker_drop(
        &self,
        queue: &Queue,
    ) -> crate::replication::ReplicationPermit {
        let none = crate::replication::ReplicationPermit::none;
        if !self.durability.is_replicated()
            || crate::replication::applying()
            || queue.name().starts_with(DIRECT_REPLY_TO)
        {
            return none();
        }
        let Some(forwarding) = self.durability.forwarding() else {
            return none();
        };
        let home = forwarding.local().to_string();
        match self.durability.replicate(|| TopologyChange::DropQueue {
            vhost: self.name.clone(),
            name: queue.name().to_string(),
            home: home.clone(),
        }) {
            Ok(permit) => permit,
            Err(error) => {
                tracing::warn!(queue = %queue.name(), vhost = %self.name, %error, "could not drop a transient queue cluster-wide; retrying later");
                self.transient.lock().drops.insert(queue.name().to_string());
                none()
            }
        }
    }

    /// Maintenance (about once a second): the drops this node owes the cluster, as
    /// `(queue, home)`: its own transient queues whose owners are gone, and the stand-ins of
    /// transient queues whose home node `is_gone` says is down. Replayed transient queues
    /// of other nodes become stand-ins.
    pub fn transient_maintenance(
        &self,
        forwarding: &Arc<Forwarding>,
        is_gone: &dyn Fn(&str) -> bool,
    ) -> Vec<(String, String)> {
        let local = forwarding.local().to_string();
        let mut drops = Vec::new();
        let (owed, replayed) = {
            let mut pending = self.transient.lock();
            (
                std::mem::take(&mut pending.drops),
                std::mem::take(&mut pending.replayed),
            )
        };
        for name in owed {
            // Declared again since by a live connection here: nothing to drop.
            let redeclared = self
                .queue(&name)
                .is_some_and(|q| q.config().exclusive_owner != Some(crate::remote::REMOTE_OWNER));
            if !redeclared {
                drops.push((name, local.clone()));
            }
        }
        for name in replayed {
            let _topology = self.topology.lock();
            let Some(queue) = self.queue(&name) else {
                continue;
            };
            if queue.config().exclusive_owner.is_some()
                && queue.config().exclusive_owner != Some(crate::remote::REMOTE_OWNER)
            {
                continue;
            }
            match forwarding.remote_home(&self.name, &name) {
                Some(home) => {
                    let destination = DestinationName::Queue(name.clone());
                    let bindings: Vec<(Arc<Exchange>, Binding)> = self
                        .exchanges()
                        .into_iter()
                        .flat_map(|exchange| {
                            exchange
                                .bindings_to(&destination)
                                .into_iter()
                                .map(move |binding| (Arc::clone(&exchange), binding))
                        })
                        .collect();
                    self.remove_queue_locked(&queue);
                    let remote = RemoteQueue::new(
                        forwarding,
                        &self.name,
                        &name,
                        home,
                        StandInProperties {
                            durable: queue.config().durable,
                            exclusive: queue.config().exclusive_owner.is_some(),
                            auto_delete: queue.config().auto_delete,
                        },
                        queue.config().arguments.clone(),
                    );
                    self.insert_typed_queue_locked(remote);
                    if let Some(stand_in) = self.stand_ins.read().get(&name).cloned() {
                        for (exchange, binding) in bindings {
                            exchange.bind(binding, Target::Queue(Arc::clone(&stand_in)));
                        }
                    }
                }
                None => {
                    self.remove_queue_locked(&queue);
                    if forwarding.link_home_of(&self.name, &name).as_deref() == Some(&local) {
                        drops.push((name, local.clone()));
                    }
                }
            }
        }
        for queue in self.typed_queues() {
            if let Some(home) = queue.home_node() {
                let transient = queue.auto_delete() || queue.exclusive_owner().is_some();
                if transient && is_gone(home) {
                    drops.push((queue.name().to_string(), home.to_string()));
                }
            }
        }
        drops
    }
}
