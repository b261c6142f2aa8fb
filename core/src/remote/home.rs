//! The home node's side of forwarding: requests from other nodes served with this node's
//! classic queues, consumers attached here on behalf of other nodes, and what those nodes
//! hold unsettled (returned to the queues when a node is lost).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use super::codec::{QueueRef, RemoteDelivery, Reply, Request};
use super::{Forwarding, LaneKind, Op};
use crate::consumer::{ConsumerSpec, Delivery, DeliverySink};
use crate::error::{CoreError, ErrorKind};
use crate::queue::{Queue, Settlement};
use crate::queue_type::QueueInstance;

/// Consumers and unsettled deliveries held for other nodes, by node.
#[derive(Default)]
pub(super) struct HomeState {
    nodes: Mutex<HashMap<String, NodeServed>>,
}

#[derive(Default)]
struct NodeServed {
    consumers: HashMap<u64, Served>,
    /// Deliveries the node holds unsettled (its consumers' and its gets'), by queue.
    held: HashMap<Arc<QueueRef>, HashSet<u64>>,
}

struct Served {
    queue: Arc<Queue>,
    queue_ref: Arc<QueueRef>,
    consumer_id: u64,
    sink: Arc<RemoteSink>,
}

/// A consumer of another node as this node's queue sees it: credit given by that node,
/// deliveries sent over the link.
struct RemoteSink {
    forwarding: Weak<Forwarding>,
    /// The ordered lane of deliveries to the consumer's node.
    lane: Arc<super::Lane>,
    node: String,
    proxy: u64,
    queue_ref: Arc<QueueRef>,
    credit: AtomicI64,
}

impl DeliverySink for RemoteSink {
    fn reserve(&self) -> bool {
        if self.credit.fetch_sub(1, Ordering::AcqRel) > 0 {
            true
        } else {
            self.credit.fetch_add(1, Ordering::AcqRel);
            false
        }
    }

    fn deliver(&self, delivery: Delivery) {
        let Some(forwarding) = self.forwarding.upgrade() else {
            return;
        };
        if delivery.needs_settlement {
            forwarding
                .home
                .hold(&self.node, &self.queue_ref, delivery.id);
        }
        forwarding.send_on(
            &self.lane,
            Op::Deliver {
                proxy: self.proxy,
                deliveries: vec![RemoteDelivery {
                    id: delivery.id,
                    redelivered: delivery.redelivered,
                    delivery_count: delivery.delivery_count,
                    needs_settlement: delivery.needs_settlement,
                    message: delivery.message,
                }],
            },
        );
    }

    fn cancelled(&self) {
        let Some(forwarding) = self.forwarding.upgrade() else {
            return;
        };
        forwarding.home.forget_consumer(&self.node, self.proxy);
        // On the delivery lane: after every delivery sent before it.
        forwarding.send_on(
            &self.lane,
            Op::Control(Request::Cancelled { proxy: self.proxy }),
        );
    }
}

impl HomeState {
    fn hold(&self, node: &str, queue: &Arc<QueueRef>, id: u64) {
        let mut nodes = self.nodes.lock();
        let served = nodes.entry(node.to_string()).or_default();
        served.held.entry(Arc::clone(queue)).or_default().insert(id);
    }

    fn forget_consumer(&self, node: &str, proxy: u64) -> Option<Served> {
        self.nodes.lock().get_mut(node)?.consumers.remove(&proxy)
    }

    /// Returns to their queues what the nodes that went away held, and drops their
    /// consumers.
    pub(super) fn sweep(&self, forwarding: &Forwarding) {
        let lost: Vec<(String, NodeServed)> = {
            let mut nodes = self.nodes.lock();
            let gone: Vec<String> = nodes
                .keys()
                .filter(|node| !forwarding.link.is_up(node))
                .cloned()
                .collect();
            gone.into_iter()
                .filter_map(|node| nodes.remove(&node).map(|served| (node, served)))
                .collect()
        };
        for (node, served) in lost {
            tracing::info!(%node, consumers = served.consumers.len(), "a node with consumers here went away: its deliveries go back to their queues");
            release_node(forwarding, served);
        }
    }
}

/// Cancels a lost node's consumers and returns what it held to the queues.
fn release_node(forwarding: &Forwarding, served: NodeServed) {
    for consumer in served.consumers.into_values() {
        consumer.queue.cancel(consumer.consumer_id);
    }
    for (queue_ref, ids) in served.held {
        if let Some(queue) = forwarding.local_queue(&queue_ref) {
            let ids: Vec<u64> = ids.into_iter().collect();
            queue.settle(&ids, Settlement::Requeue);
        }
    }
}

fn not_found(queue: &QueueRef) -> Reply {
    Reply::Error(
        ErrorKind::NotFound,
        format!(
            "no {}",
            crate::error::resource("queue", &queue.queue, &queue.vhost)
        ),
    )
}

fn error_reply(error: CoreError) -> Reply {
    Reply::Error(error.kind, error.message)
}

impl Forwarding {
    /// This node's classic queue `queue`.
    fn local_queue(&self, queue: &QueueRef) -> Option<Arc<Queue>> {
        self.broker
            .upgrade()?
            .vhost(&queue.vhost)?
            .queue(&queue.queue)
    }

    /// Serves a request from `from` aimed at this node's queues.
    /// Serves a request from `from` aimed at this node's queues (publishes go through
    /// [`Forwarding::publish_here`]).
    pub(super) fn serve_home(self: &Arc<Self>, from: &str, request: Request) -> Reply {
        match request {
            Request::Publish { .. } => Reply::Error(
                ErrorKind::InternalError,
                "publishes are served in order, not here".into(),
            ),
            Request::Consume {
                queue,
                proxy,
                window,
                spec,
            } => {
                let Some(local) = self.local_queue(&queue) else {
                    return not_found(&queue);
                };
                self.forget_earlier_runs(from, proxy);
                let queue_ref = Arc::new(queue);
                let sink = Arc::new(RemoteSink {
                    forwarding: Arc::downgrade(self),
                    lane: self.lane(from, LaneKind::Deliver),
                    node: from.to_string(),
                    proxy,
                    queue_ref: Arc::clone(&queue_ref),
                    credit: AtomicI64::new(i64::from(window.max(1))),
                });
                let spec = ConsumerSpec {
                    tag: Arc::from(spec.tag.as_str()),
                    connection_id: crate::vhost::BROKER_CONNECTION,
                    needs_settlement: spec.needs_settlement,
                    exclusive: spec.exclusive,
                    priority: spec.priority,
                    arguments: spec.arguments,
                };
                match local.consume(spec, Arc::clone(&sink) as Arc<dyn DeliverySink>) {
                    Ok(consumer_id) => {
                        self.home
                            .nodes
                            .lock()
                            .entry(from.to_string())
                            .or_default()
                            .consumers
                            .insert(
                                proxy,
                                Served {
                                    queue: local,
                                    queue_ref,
                                    consumer_id,
                                    sink,
                                },
                            );
                        Reply::Ok
                    }
                    Err(error) => error_reply(error),
                }
            }
            Request::Cancel { proxy } => {
                if let Some(served) = self.home.forget_consumer(from, proxy) {
                    served.queue.cancel(served.consumer_id);
                }
                Reply::Ok
            }
            Request::Credit { proxy, credit } => {
                let found = self.home.nodes.lock().get(from).and_then(|node| {
                    node.consumers
                        .get(&proxy)
                        .map(|served| (Arc::clone(&served.queue), Arc::clone(&served.sink)))
                });
                if let Some((queue, sink)) = found {
                    sink.credit.fetch_add(i64::from(credit), Ordering::AcqRel);
                    queue.dispatch();
                }
                Reply::Ok
            }
            Request::Settle {
                queue,
                ids,
                settlement,
            } => {
                if let Some(node) = self.home.nodes.lock().get_mut(from) {
                    if let Some(held) = node.held.get_mut(&queue) {
                        for id in &ids {
                            held.remove(id);
                        }
                    }
                }
                match self.local_queue(&queue) {
                    Some(local) => {
                        local.settle(&ids, settlement);
                        Reply::Ok
                    }
                    None => not_found(&queue),
                }
            }
            Request::Get {
                queue,
                needs_settlement,
            } => {
                let Some(local) = self.local_queue(&queue) else {
                    return not_found(&queue);
                };
                let got = local.get(needs_settlement);
                Reply::Got(got.map(|(delivery, remaining)| {
                    if delivery.needs_settlement {
                        self.home.hold(from, &Arc::new(queue.clone()), delivery.id);
                    }
                    (
                        RemoteDelivery {
                            id: delivery.id,
                            redelivered: delivery.redelivered,
                            delivery_count: delivery.delivery_count,
                            needs_settlement: delivery.needs_settlement,
                            message: delivery.message,
                        },
                        remaining,
                    )
                }))
            }
            Request::Purge { queue } => match self.local_queue(&queue) {
                Some(local) => Reply::Count(QueueInstance::purge(local.as_ref())),
                None => not_found(&queue),
            },
            Request::Browse { queue, limit } => match self.local_queue(&queue) {
                Some(local) => Reply::Messages(local.browse(limit as usize)),
                None => not_found(&queue),
            },
            Request::Info { queue } => match self.local_queue(&queue) {
                Some(local) => Reply::Stats(local.info()),
                None => not_found(&queue),
            },
            Request::InfoMany { vhost, queues } => {
                let here = self
                    .broker
                    .upgrade()
                    .and_then(|broker| broker.vhost(&vhost));
                Reply::StatsMany(
                    queues
                        .iter()
                        .map(|name| here.as_ref()?.queue(name).map(|local| local.info()))
                        .collect(),
                )
            }
            Request::Deliver { .. } | Request::Cancelled { .. } | Request::TakeOver { .. } => {
                Reply::Error(
                    ErrorKind::InternalError,
                    "not a request for a home node".into(),
                )
            }
        }
    }

    /// Enqueues forwarded messages here and answers once every persistent message that
    /// reached a durable queue is on disk.
    pub(super) fn publish_here(
        &self,
        messages: Vec<(Arc<QueueRef>, Arc<crate::message::Message>)>,
    ) -> impl std::future::Future<Output = Reply> + Send + 'static {
        let broker = self.broker.upgrade();
        let mut taken = Vec::with_capacity(messages.len());
        let mut wait_for = None;
        if let Some(broker) = &broker {
            // Batches are mostly runs to one queue: it is looked up once per run.
            type Found = Option<(Arc<crate::vhost::VHost>, Arc<Queue>)>;
            let mut last: Option<(Arc<QueueRef>, Found)> = None;
            for (queue, message) in messages {
                let found = match &last {
                    Some((at, found)) if Arc::ptr_eq(at, &queue) => found.clone(),
                    _ => {
                        let found = broker
                            .vhost(&queue.vhost)
                            .and_then(|vhost| vhost.queue(&queue.queue).map(|q| (vhost, q)));
                        last = Some((Arc::clone(&queue), found.clone()));
                        found
                    }
                };
                let Some((vhost, local)) = found else {
                    // Deleted meanwhile: dropped, as a message routed to a queue being
                    // deleted is (the publisher is not nacked for it).
                    taken.push(true);
                    continue;
                };
                let enqueued = vhost.enqueue_routed_all(message, std::slice::from_ref(&local), &[]);
                taken.push(enqueued.accepted);
                if let Some(seq) = enqueued.durable_seq {
                    wait_for = Some(wait_for.map_or(seq, |w: u64| w.max(seq)));
                }
            }
        } else {
            taken = vec![false; messages.len()];
        }
        let durable = wait_for.and_then(|seq| {
            broker
                .as_ref()
                .and_then(|b| b.message_store())
                .map(|store| (seq, store.subscribe_durable()))
        });
        async move {
            if let Some((seq, mut durable)) = durable {
                let reached =
                    tokio::time::timeout(super::CALL_TIMEOUT, durable.wait_for(|d| *d >= seq))
                        .await;
                if !matches!(reached, Ok(Ok(_))) {
                    return Reply::Published(vec![false; taken.len()]);
                }
            }
            Reply::Published(taken)
        }
    }

    /// A consumer attach from another run of `from` than the one that made its earlier
    /// consumers here: that node restarted, and what its old run held goes back.
    fn forget_earlier_runs(&self, from: &str, proxy: u64) {
        let run = proxy >> 32;
        let stale = {
            let mut nodes = self.home.nodes.lock();
            let Some(node) = nodes.get_mut(from) else {
                return;
            };
            if node.consumers.keys().all(|p| p >> 32 == run) {
                return;
            }
            nodes.remove(from)
        };
        if let Some(served) = stale {
            tracing::info!(node = %from, "a node restarted: its previous consumers here are dropped");
            release_node(self, served);
        }
    }

    /// Deliveries to consumer `proxy` of `node` did not arrive (the node is gone, or the
    /// consumer is): the consumer goes, and `undelivered` goes back to the queue.
    pub(super) fn home_consumer_lost(&self, node: &str, proxy: u64, undelivered: &[u64]) {
        let Some(served) = self.home.forget_consumer(node, proxy) else {
            return;
        };
        served.queue.cancel(served.consumer_id);
        if let Some(node) = self.home.nodes.lock().get_mut(node) {
            if let Some(held) = node.held.get_mut(&served.queue_ref) {
                for id in undelivered {
                    held.remove(id);
                }
            }
        }
        served.queue.settle(undelivered, Settlement::Release);
    }
}
