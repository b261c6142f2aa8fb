//! A classic queue whose home is another node, as this node's listeners and vhost see it:
//! every operation is forwarded to the home node ([`super::Forwarding`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::codec::{QueueRef, RemoteConsumerSpec, RemoteDelivery, Reply, Request};
use super::{Forwarding, LaneKind, Op};
use crate::consumer::{ConsumerSpec, Delivery, DeliverySink};
use crate::error::{CoreError, CoreResult};
use crate::message::Message;
use crate::queue::{ConsumerRemoval, EnqueueOutcome, QueueStats, Settlement};
use crate::queue_type::{Published, QueueInstance, QueueType, CLASSIC};
use crate::store::MessageStore;
use crate::value::Table;

/// The deliveries a home node may send ahead of a consumer without a prefetch window.
const DEFAULT_WINDOW: u32 = 256;
/// The most deliveries sent ahead of any consumer.
const MAX_WINDOW: u32 = 1000;
/// How long counters fetched from the home node are shown before they are fetched again.
const STATS_FRESH: Duration = Duration::from_millis(500);
/// How long a synchronous forwarded operation (consume, get, purge, ...) may wait.
const SYNC_TIMEOUT: Duration = Duration::from_secs(5);
/// Counters wait less: listings of many queues must stay usable with a home node down.
const STATS_TIMEOUT: Duration = Duration::from_millis(500);

/// The owner [`QueueInstance::exclusive_owner`] reports for the stand-in of an exclusive
/// queue: no connection of this node has this id.
pub const REMOTE_OWNER: u64 = u64::MAX;

/// What a stand-in keeps of its queue's declaration.
#[derive(Debug, Clone, Copy)]
pub struct StandInProperties {
    /// Survives a restart of its home node.
    pub durable: bool,
    /// Belongs to one connection of the home node.
    pub exclusive: bool,
    /// Deleted by the home node when its last consumer goes.
    pub auto_delete: bool,
}

/// A classic queue that lives on another node.
pub struct RemoteQueue {
    me: Weak<RemoteQueue>,
    queue_ref: Arc<QueueRef>,
    /// The ordered lanes to the home node, for publishes and for everything else.
    publish_lane: Arc<super::Lane>,
    control_lane: Arc<super::Lane>,
    home: String,
    forwarding: Weak<Forwarding>,
    store: Option<Arc<MessageStore>>,
    durable: bool,
    /// An exclusive queue: its owner connection is on the home node, so every connection
    /// of this node is refused (405 RESOURCE_LOCKED) but may publish to it.
    exclusive: bool,
    /// An auto-delete queue: the home node deletes it when its last consumer goes.
    auto_delete: bool,
    arguments: Table,
    /// This queue's proxy consumers.
    consumers: Mutex<Vec<u64>>,
    stats: Mutex<Option<(Instant, QueueStats)>>,
}

impl RemoteQueue {
    /// This queue's proxy consumers, in attach order.
    fn proxies(&self, forwarding: &Forwarding) -> Vec<Arc<ProxyConsumer>> {
        let ids = self.consumers.lock().clone();
        let proxies = forwarding.proxies.lock();
        ids.iter()
            .filter_map(|id| proxies.get(id).cloned())
            .collect()
    }

    /// The stand-in for queue `name` of `vhost`, homed on `home`, with the declaration's
    /// properties.
    pub(crate) fn new(
        forwarding: &Arc<Forwarding>,
        vhost: &str,
        name: &str,
        home: String,
        properties: StandInProperties,
        arguments: Table,
    ) -> Arc<RemoteQueue> {
        Arc::new_cyclic(|me| RemoteQueue {
            me: me.clone(),
            queue_ref: Arc::new(QueueRef {
                vhost: vhost.to_string(),
                queue: name.to_string(),
            }),
            publish_lane: forwarding.lane(&home, LaneKind::Publish),
            control_lane: forwarding.lane(&home, LaneKind::Control),
            home,
            forwarding: Arc::downgrade(forwarding),
            store: forwarding.store(),
            durable: properties.durable,
            exclusive: properties.exclusive,
            auto_delete: properties.auto_delete,
            arguments,
            consumers: Mutex::new(Vec::new()),
            stats: Mutex::new(None),
        })
    }

    /// The queue's home node.
    pub fn home(&self) -> &str {
        &self.home
    }

    /// Whether the home node deletes the queue by itself (exclusive or auto-delete): such a
    /// stand-in is dropped cluster-wide when its home node goes down.
    pub fn is_transient(&self) -> bool {
        self.exclusive || self.auto_delete
    }

    fn forwarding(&self) -> Option<Arc<Forwarding>> {
        self.forwarding.upgrade()
    }

    /// RabbitMQ's answer for a queue whose home node is down (404 NOT_FOUND).
    fn home_down(&self) -> CoreError {
        CoreError::not_found(format!(
            "home node '{}' of durable {} is down or inaccessible",
            self.home,
            crate::error::resource("queue", &self.queue_ref.queue, &self.queue_ref.vhost)
        ))
    }

    fn call(&self, request: Request, timeout: Duration) -> CoreResult<Reply> {
        let forwarding = self.forwarding().ok_or_else(|| self.home_down())?;
        if !forwarding.is_up(&self.home) {
            return Err(self.home_down());
        }
        let after = [&self.publish_lane, &self.control_lane];
        match forwarding.call_blocking(&self.home, request, timeout, &after) {
            Ok(Reply::Error(kind, text)) => Err(CoreError::new(kind, text)),
            Ok(reply) => Ok(reply),
            Err(error) => {
                tracing::debug!(queue = %self.queue_ref.queue, home = %self.home, %error, "forwarded call failed");
                Err(self.home_down())
            }
        }
    }

    fn delivery(&self, delivery: RemoteDelivery) -> Option<Delivery> {
        let queue = self.me.upgrade()? as Arc<dyn QueueInstance>;
        Some(Delivery {
            queue,
            id: delivery.id,
            message: delivery.message,
            redelivered: delivery.redelivered,
            delivery_count: delivery.delivery_count,
            needs_settlement: delivery.needs_settlement,
        })
    }

    fn control(&self, request: Request) {
        if let Some(forwarding) = self.forwarding() {
            forwarding.send_on(&self.control_lane, Op::Control(request));
        }
    }
}

impl QueueInstance for RemoteQueue {
    fn name(&self) -> &str {
        &self.queue_ref.queue
    }

    fn queue_type(&self) -> &'static dyn QueueType {
        &CLASSIC
    }

    fn enqueue(&self, message: Arc<Message>, _store_id: u64) -> EnqueueOutcome {
        self.publish(message).outcome
    }

    fn publish(&self, message: Arc<Message>) -> Published {
        let rejected = Published {
            outcome: EnqueueOutcome::Rejected,
            durable_seq: None,
        };
        let Some(forwarding) = self.forwarding() else {
            return rejected;
        };
        if !forwarding.is_up(&self.home) {
            // The home node is down: nacked now rather than held.
            return rejected;
        }
        let hold = self.store.as_ref().map(|store| store.hold());
        forwarding.send_on(
            &self.publish_lane,
            Op::Publish {
                queue: Arc::clone(&self.queue_ref),
                message,
                hold,
            },
        );
        Published {
            outcome: EnqueueOutcome::Enqueued,
            durable_seq: hold,
        }
    }

    fn consume(&self, spec: ConsumerSpec, sink: Arc<dyn DeliverySink>) -> CoreResult<u64> {
        let forwarding = self.forwarding().ok_or_else(|| self.home_down())?;
        let window = sink
            .prefetch()
            .filter(|window| *window > 0)
            .unwrap_or(DEFAULT_WINDOW)
            .min(MAX_WINDOW);
        let proxy = forwarding.new_proxy_id();
        let consumer = Arc::new(ProxyConsumer {
            id: proxy,
            home: self.home.clone(),
            queue: self.me.clone(),
            sink,
            pending: Mutex::new(VecDeque::new()),
            draining: Mutex::new(()),
            again: AtomicBool::new(false),
            spec: spec.clone(),
        });
        // Known before the home node can send its first delivery.
        forwarding.proxies.lock().insert(proxy, consumer);
        let request = Request::Consume {
            queue: QueueRef::clone(&self.queue_ref),
            proxy,
            window,
            spec: RemoteConsumerSpec::from_spec(&spec),
        };
        match self.call(request, SYNC_TIMEOUT) {
            Ok(_) => {
                self.consumers.lock().push(proxy);
                Ok(proxy)
            }
            Err(error) => {
                forwarding.proxies.lock().remove(&proxy);
                Err(error)
            }
        }
    }

    fn cancel(&self, consumer_id: u64) -> ConsumerRemoval {
        let removed = {
            let mut consumers = self.consumers.lock();
            let before = consumers.len();
            consumers.retain(|id| *id != consumer_id);
            before != consumers.len()
        };
        let Some(forwarding) = self.forwarding() else {
            return ConsumerRemoval::NotAttached;
        };
        let proxy = forwarding.proxies.lock().remove(&consumer_id);
        if let Some(proxy) = proxy {
            // What reached this node but not the client goes back unharmed.
            let undelivered: Vec<u64> = proxy.pending.lock().drain(..).map(|d| d.id).collect();
            if !undelivered.is_empty() {
                self.control(Request::Settle {
                    queue: QueueRef::clone(&self.queue_ref),
                    ids: undelivered,
                    settlement: Settlement::Release,
                });
            }
        }
        if !removed {
            return ConsumerRemoval::NotAttached;
        }
        self.control(Request::Cancel { proxy: consumer_id });
        ConsumerRemoval::Removed
    }

    fn settle(&self, ids: &[u64], settlement: Settlement) {
        if ids.is_empty() {
            return;
        }
        self.control(Request::Settle {
            queue: QueueRef::clone(&self.queue_ref),
            ids: ids.to_vec(),
            settlement,
        });
    }

    fn dispatch(&self) {
        let Some(forwarding) = self.forwarding() else {
            return;
        };
        for consumer in self.proxies(&forwarding) {
            consumer.drain(&forwarding);
        }
    }

    fn local_consumers(&self) -> Vec<(ConsumerSpec, bool)> {
        // The home node knows which one a single-active-consumer queue serves; here each
        // is shown active.
        self.forwarding().map_or_else(Vec::new, |forwarding| {
            self.proxies(&forwarding)
                .iter()
                .map(|consumer| (consumer.spec.clone(), true))
                .collect()
        })
    }

    fn get(&self, needs_settlement: bool) -> Option<(Delivery, u64)> {
        let request = Request::Get {
            queue: QueueRef::clone(&self.queue_ref),
            needs_settlement,
        };
        match self.call(request, SYNC_TIMEOUT) {
            Ok(Reply::Got(Some((delivery, remaining)))) => {
                Some((self.delivery(delivery)?, remaining))
            }
            _ => None,
        }
    }

    fn browse(&self, limit: usize) -> Vec<Arc<Message>> {
        let request = Request::Browse {
            queue: QueueRef::clone(&self.queue_ref),
            limit: u32::try_from(limit).unwrap_or(u32::MAX),
        };
        match self.call(request, SYNC_TIMEOUT) {
            Ok(Reply::Messages(messages)) => messages,
            _ => Vec::new(),
        }
    }

    fn purge(&self) -> u64 {
        let request = Request::Purge {
            queue: QueueRef::clone(&self.queue_ref),
        };
        match self.call(request, SYNC_TIMEOUT) {
            Ok(Reply::Count(count)) => count,
            _ => 0,
        }
    }

    fn check_purge(&self) -> CoreResult<()> {
        match self.forwarding() {
            Some(forwarding) if forwarding.is_up(&self.home) => Ok(()),
            _ => Err(self.home_down()),
        }
    }

    fn info(&self) -> QueueStats {
        if let Some((at, stats)) = *self.stats.lock() {
            if at.elapsed() < STATS_FRESH {
                return stats;
            }
        }
        let request = Request::Info {
            queue: QueueRef::clone(&self.queue_ref),
        };
        match self.call(request, STATS_TIMEOUT) {
            Ok(Reply::Stats(stats)) => {
                *self.stats.lock() = Some((Instant::now(), stats));
                stats
            }
            // The home node is away: the last counters it gave.
            _ => self
                .stats
                .lock()
                .map(|(_, stats)| stats)
                .unwrap_or_default(),
        }
    }

    fn arguments(&self) -> Table {
        self.arguments.clone()
    }

    fn durable(&self) -> bool {
        self.durable
    }

    fn auto_delete(&self) -> bool {
        self.auto_delete
    }

    fn exclusive_owner(&self) -> Option<u64> {
        // No connection of this node owns it: the owner is on the home node.
        self.exclusive.then_some(REMOTE_OWNER)
    }

    fn check_exclusive_access(&self, connection_id: u64) -> CoreResult<()> {
        if self.exclusive && connection_id != crate::vhost::BROKER_CONNECTION {
            return Err(CoreError::resource_locked(format!(
                "cannot obtain exclusive access to locked {}. It could be originally declared on \
                 another connection or the exclusive property value does not match that of the \
                 original declaration.",
                crate::error::resource("queue", &self.queue_ref.queue, &self.queue_ref.vhost)
            )));
        }
        Ok(())
    }

    fn home_node(&self) -> Option<&str> {
        Some(&self.home)
    }

    fn remember_info(&self, stats: QueueStats) {
        *self.stats.lock() = Some((Instant::now(), stats));
    }

    fn delete(&self) -> u64 {
        let ids: Vec<u64> = std::mem::take(&mut *self.consumers.lock());
        if let Some(forwarding) = self.forwarding() {
            for id in ids {
                let proxy = forwarding.proxies.lock().remove(&id);
                if let Some(proxy) = proxy {
                    proxy.sink.cancelled();
                }
            }
        }
        0
    }
}

/// A consumer of this node attached to a queue on another node: deliveries arrive from the
/// home node and wait here until the listener's sink has room.
pub(super) struct ProxyConsumer {
    id: u64,
    home: String,
    queue: Weak<RemoteQueue>,
    sink: Arc<dyn DeliverySink>,
    pending: Mutex<VecDeque<RemoteDelivery>>,
    /// One drain at a time, so deliveries reach the sink in order.
    draining: Mutex<()>,
    /// A drain was asked for while one ran: it runs again.
    again: AtomicBool,
    /// What the local channel or link asked for (for `/api/consumers` on this node).
    spec: ConsumerSpec,
}

impl ProxyConsumer {
    pub(super) fn id(&self) -> u64 {
        self.id
    }

    pub(super) fn home(&self) -> &str {
        &self.home
    }

    pub(super) fn queue_name(&self) -> String {
        self.queue
            .upgrade()
            .map(|q| q.queue_ref.queue.clone())
            .unwrap_or_default()
    }

    pub(super) fn push(&self, deliveries: Vec<RemoteDelivery>) {
        self.pending.lock().extend(deliveries);
    }

    /// Hands waiting deliveries to the sink while it has room, and gives the home node as
    /// much credit back as was handed over.
    pub(super) fn drain(&self, forwarding: &Arc<Forwarding>) {
        let Some(queue) = self.queue.upgrade() else {
            return;
        };
        loop {
            let Some(_turn) = self.draining.try_lock() else {
                self.again.store(true, Ordering::Release);
                return;
            };
            self.again.store(false, Ordering::Release);
            let mut handed = 0u32;
            loop {
                let next = {
                    let mut pending = self.pending.lock();
                    if pending.is_empty() || !self.sink.reserve() {
                        None
                    } else {
                        pending.pop_front()
                    }
                };
                let Some(delivery) = next else { break };
                if let Some(delivery) = queue.delivery(delivery) {
                    self.sink.deliver(delivery);
                    handed += 1;
                }
            }
            if handed > 0 {
                forwarding.send_on(
                    &queue.control_lane,
                    Op::Control(Request::Credit {
                        proxy: self.id,
                        credit: handed,
                    }),
                );
            }
            drop(_turn);
            if !self.again.load(Ordering::Acquire) {
                return;
            }
        }
    }

    /// The home node went away: the client's consumer is cancelled.
    pub(super) fn home_lost(&self) {
        self.pending.lock().clear();
        if let Some(queue) = self.queue.upgrade() {
            queue.consumers.lock().retain(|id| *id != self.id);
        }
        self.sink.cancelled();
    }

    /// The home node cancelled the consumer (its queue was deleted there).
    pub(super) fn cancelled_by_home(&self) {
        self.home_lost();
    }
}

impl std::fmt::Debug for RemoteQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteQueue")
            .field("queue", &self.queue_ref)
            .field("home", &self.home)
            .finish()
    }
}
