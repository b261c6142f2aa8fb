//! Classic queues on a cluster: a classic queue lives on its home node (the node that
//! declared it, as in RabbitMQ), and every other node holds a [`RemoteQueue`] in its place
//! that forwards publishes, consumers, settlements, gets, purges and counters to the home
//! node over the cluster's bulk link. The home node serves them ([`Forwarding::serve`])
//! with its own queue, so a classic queue's rules are written once.
//!
//! - **Publishes** are sent in order, batched per home node; the publisher's confirm waits
//!   on a held store sequence number ([`crate::store::MessageStore::hold`]) released once
//!   the home node has the message (on its disk, for a persistent message in a durable
//!   queue), or failed ([`crate::store::MessageStore::fail`]: a nack) when the home node
//!   refuses it or cannot be reached.
//! - **Consumers** are attached at the home node with a credit window: the home node sends
//!   at most `window` deliveries ahead of what this node handed to its listener, so a slow
//!   consumer holds nothing back but its own window.
//! - **Failure**: a consumer whose home node goes away is cancelled (as RabbitMQ cancels
//!   consumers of a queue whose node is down); the home node returns to the queue whatever
//!   a lost node's consumers held unsettled.
//!
//! The server provides the transport ([`RemoteLink`]); this module is the logic.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;

use crate::broker::Broker;
use crate::message::Message;

pub mod codec;
mod home;
mod queue;
mod takeover;

pub use queue::{RemoteQueue, StandInProperties, REMOTE_OWNER};
pub use takeover::{ClientTakeover, SessionFuture, TAKEOVER_TIMEOUT};

use codec::{QueueRef, RemoteDelivery, Reply, Request};

/// How long a forwarded request may take before it counts as failed.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How many requests one lane keeps in flight.
const PIPELINE: usize = 4;
/// The most messages one forwarded publish request carries.
const PUBLISH_BATCH: usize = 1024;
/// The most queues one bulk counters request ([`Request::InfoMany`]) asks about.
pub const INFO_BATCH: usize = 2048;

/// A future of a forwarded call's answer.
pub type CallFuture = Pin<Box<dyn Future<Output = Result<Vec<u8>, String>> + Send>>;

/// What forwarding needs of the cluster: implemented by the server over its transport.
pub trait RemoteLink: Send + Sync {
    /// This node's name.
    fn local(&self) -> &str;
    /// The home node of a queue, from the metadata log.
    fn home_of(&self, vhost: &str, queue: &str) -> Option<String>;
    /// Whether `node` is reachable now (the failure detector).
    fn is_up(&self, node: &str) -> bool;
    /// Sends one encoded [`Request`] to `node`'s forwarding service; the answer is an
    /// encoded [`Reply`].
    fn call(&self, node: &str, body: Vec<u8>, timeout: Duration) -> CallFuture;
    /// The other members of the cluster that run now.
    fn peers(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The node's forwarding: the remote queues' side (proxy consumers, outgoing lanes) and
/// the home side (consumers served for other nodes).
pub struct Forwarding {
    link: Arc<dyn RemoteLink>,
    broker: Weak<Broker>,
    runtime: tokio::runtime::Handle,
    /// This run's id, in the high bits of proxy ids: a restarted node's old consumers are
    /// recognised at the home node.
    run: u64,
    next_proxy: AtomicU64,
    proxies: Mutex<HashMap<u64, Arc<queue::ProxyConsumer>>>,
    lanes: Mutex<HashMap<(String, LaneKind), Arc<Lane>>>,
    home: home::HomeState,
    /// How often [`Forwarding::maintain`] ran.
    maintained: AtomicU64,
    /// Since when each node the failure detector calls down has been down: the transient
    /// queues of a node down for [`GONE_AFTER`] are dropped.
    down_since: Mutex<HashMap<String, std::time::Instant>>,
    /// A task commits transient queue drops now (one at a time).
    dropping: std::sync::atomic::AtomicBool,
}

/// How long a node is down before the survivors drop its exclusive and auto-delete queues
/// (their owners died with it or cannot reach the cluster): long enough that a blip of
/// the link does not end every subscription of a live node.
pub const GONE_AFTER: Duration = Duration::from_secs(3);

/// How many of the first maintenance passes (about a second apart) look for classic queues
/// made at boot that another node is home to.
const REHOME_PASSES: u64 = 120;

/// The kinds of ordered outgoing traffic to one node, each its own lane so that deliveries
/// and acks never wait behind a publish batch's disk write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum LaneKind {
    Publish,
    Control,
    Deliver,
}

/// One outgoing item.
enum Op {
    Publish {
        queue: Arc<QueueRef>,
        message: Arc<Message>,
        hold: Option<u64>,
    },
    Deliver {
        proxy: u64,
        deliveries: Vec<RemoteDelivery>,
    },
    Control(Request),
}

#[derive(Default)]
struct LaneState {
    ops: VecDeque<Op>,
    running: bool,
    /// Ops ever queued on the lane.
    queued: u64,
}

/// Ordered requests to one node: up to [`PIPELINE`] in flight, everything queued meanwhile
/// sent in the next ones (publishes batched).
struct Lane {
    node: String,
    state: Mutex<LaneState>,
    /// Rung when an op is queued while the lane's sender runs.
    more: tokio::sync::Notify,
    /// Ops handed to the link so far (they reach the home node before anything handed
    /// after them).
    handed: AtomicU64,
    /// Rung when `handed` grows.
    handed_more: tokio::sync::Notify,
}

impl Lane {
    /// Waits until every op queued on the lane so far is handed to the link, so that a
    /// call made next reaches the home node after them (a channel's `basic.get` after its
    /// publishes sees them, as RabbitMQ's ordering between two processes promises).
    async fn flushed(&self) {
        let target = self.state.lock().queued;
        loop {
            let notified = self.handed_more.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.handed.load(Ordering::Acquire) >= target {
                return;
            }
            notified.await;
        }
    }
}

impl Forwarding {
    /// Forwarding for `broker` over `link`, run on `runtime`. Install it with
    /// [`crate::Broker::set_forwarding`], then call [`Forwarding::maintain`] about once a
    /// second.
    pub fn new(
        broker: &Arc<Broker>,
        link: Arc<dyn RemoteLink>,
        runtime: tokio::runtime::Handle,
    ) -> Arc<Forwarding> {
        Arc::new(Forwarding {
            link,
            broker: Arc::downgrade(broker),
            runtime,
            run: (rand::random::<u32>() as u64) << 32,
            next_proxy: AtomicU64::new(1),
            proxies: Mutex::new(HashMap::new()),
            lanes: Mutex::new(HashMap::new()),
            home: home::HomeState::default(),
            maintained: AtomicU64::new(0),
            down_since: Mutex::new(HashMap::new()),
            dropping: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The queue's home node when it is another node than this one.
    pub fn remote_home(&self, vhost: &str, queue: &str) -> Option<String> {
        self.link
            .home_of(vhost, queue)
            .filter(|home| home != self.link.local())
    }

    /// This node's name.
    pub fn local(&self) -> &str {
        self.link.local()
    }

    /// The queue's home node from the metadata log, this node included.
    pub fn link_home_of(&self, vhost: &str, queue: &str) -> Option<String> {
        self.link.home_of(vhost, queue)
    }

    /// The lane of `kind` to `node` (users keep it: looking it up costs a key).
    fn lane(self: &Arc<Self>, node: &str, kind: LaneKind) -> Arc<Lane> {
        Arc::clone(
            self.lanes
                .lock()
                .entry((node.to_string(), kind))
                .or_insert_with(|| {
                    Arc::new(Lane {
                        node: node.to_string(),
                        state: Mutex::default(),
                        more: tokio::sync::Notify::new(),
                        handed: AtomicU64::new(0),
                        handed_more: tokio::sync::Notify::new(),
                    })
                }),
        )
    }

    /// Queues `op` on `lane` and starts its sender if it is idle.
    fn send_on(self: &Arc<Self>, lane: &Arc<Lane>, op: Op) {
        let lane = Arc::clone(lane);
        let start = {
            let mut state = lane.state.lock();
            state.ops.push_back(op);
            state.queued += 1;
            !std::mem::replace(&mut state.running, true)
        };
        if start {
            let me = Arc::clone(self);
            self.runtime.spawn(async move { me.run_lane(lane).await });
        } else {
            lane.more.notify_one();
        }
    }

    /// Sends a lane's requests, up to [`PIPELINE`] in flight, each handed to the link in
    /// lane order (the home node then takes them in that order: the transport runs each
    /// request's synchronous part as it arrives, see [`Forwarding::serve_in_order`]).
    async fn run_lane(self: Arc<Self>, lane: Arc<Lane>) {
        let mut in_flight = tokio::task::JoinSet::new();
        loop {
            while in_flight.len() < PIPELINE {
                let (batch, taken) = {
                    let mut state = lane.state.lock();
                    let before = state.ops.len();
                    let batch = take_batch(&mut state.ops);
                    (batch, (before - state.ops.len()) as u64)
                };
                let Some(batch) = batch else { break };
                let me = Arc::clone(&self);
                let node = lane.node.clone();
                let mut sending: Pin<Box<dyn Future<Output = ()> + Send>> =
                    Box::pin(async move { me.send_batch(&node, batch).await });
                // The first poll hands the request to the link, so requests leave in order.
                let done = std::future::poll_fn(|cx| {
                    std::task::Poll::Ready(sending.as_mut().poll(cx).is_ready())
                })
                .await;
                lane.handed.fetch_add(taken, Ordering::Release);
                lane.handed_more.notify_waiters();
                if !done {
                    in_flight.spawn(sending);
                }
            }
            if in_flight.is_empty() {
                let mut state = lane.state.lock();
                if state.ops.is_empty() {
                    state.running = false;
                    return;
                }
                continue;
            }
            tokio::select! {
                _ = in_flight.join_next() => {}
                _ = lane.more.notified(), if in_flight.len() < PIPELINE => {}
            }
        }
    }

    async fn send_batch(&self, node: &str, batch: Batch) {
        match batch {
            Batch::Publish { messages, holds } => {
                let request = Request::Publish { messages };
                let taken = match self.call(node, &request).await {
                    Ok(Reply::Published(taken)) => taken,
                    Ok(other) => {
                        tracing::warn!(node, reply = ?other, "forwarded publishes refused");
                        Vec::new()
                    }
                    Err(error) => {
                        tracing::warn!(node, %error, "forwarded publishes failed");
                        Vec::new()
                    }
                };
                if let Some(store) = self.store() {
                    for (index, hold) in holds.into_iter().enumerate() {
                        let Some(hold) = hold else { continue };
                        match taken.get(index) {
                            Some(true) => store.release(hold),
                            _ => store.fail(hold),
                        }
                    }
                }
            }
            Batch::Deliver { proxy, deliveries } => {
                let ids: Vec<u64> = deliveries.iter().map(|d| d.id).collect();
                let request = Request::Deliver { proxy, deliveries };
                match self.call(node, &request).await {
                    Ok(Reply::Ok) => {}
                    outcome => {
                        tracing::debug!(
                            node,
                            proxy,
                            ?outcome,
                            "deliveries to a remote consumer failed"
                        );
                        self.home_consumer_lost(node, proxy, &ids);
                    }
                }
            }
            Batch::Control(request) => {
                if let Err(error) = self.call(node, &request).await {
                    tracing::debug!(node, %error, "forwarded request failed");
                }
            }
        }
    }

    /// Sends `request` to `node` and decodes the answer.
    async fn call(&self, node: &str, request: &Request) -> Result<Reply, String> {
        let bytes = self
            .link
            .call(node, codec::encode_request(request), CALL_TIMEOUT)
            .await?;
        codec::decode_reply(&bytes).map_err(|error| error.0)
    }

    /// [`Forwarding::call`] from a synchronous caller on a tokio worker (consume, get,
    /// purge, browse, counters): waits on this thread, bounded by `timeout`.
    /// The call leaves after everything queued on `after` so far (see [`Lane::flushed`]).
    fn call_blocking(
        &self,
        node: &str,
        request: Request,
        timeout: Duration,
        after: &[&Arc<Lane>],
    ) -> Result<Reply, String> {
        let bytes = codec::encode_request(&request);
        let link = Arc::clone(&self.link);
        let node_name = node.to_string();
        let after: Vec<Arc<Lane>> = after.iter().map(|lane| Arc::clone(lane)).collect();
        let call = async move {
            for lane in &after {
                lane.flushed().await;
            }
            link.call(&node_name, bytes, timeout).await
        };
        let wait = async move {
            match tokio::time::timeout(timeout, call).await {
                Ok(result) => result,
                Err(_) => Err(format!("{node} did not answer within {timeout:?}")),
            }
        };
        let answer = match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| handle.block_on(wait))
            }
            Ok(_) => return Err("forwarding needs the multi-threaded runtime".into()),
            Err(_) => self.runtime.block_on(wait),
        }?;
        codec::decode_reply(&answer).map_err(|error| error.0)
    }

    /// The counters of `queues` (of `vhost`) on their home node `home`, in one request per
    /// [`INFO_BATCH`] queues; `None` for a queue it does not have. Empty when `home` is down
    /// or does not answer within `timeout`.
    pub fn fetch_stats(
        &self,
        home: &str,
        vhost: &str,
        queues: &[String],
        timeout: Duration,
    ) -> Vec<(String, crate::queue::QueueStats)> {
        let mut fetched = Vec::with_capacity(queues.len());
        if !self.link.is_up(home) {
            return fetched;
        }
        for chunk in queues.chunks(INFO_BATCH) {
            let request = Request::InfoMany {
                vhost: vhost.to_string(),
                queues: chunk.to_vec(),
            };
            // Counters for the API: no order with this node's own requests is promised.
            match self.call_blocking(home, request, timeout, &[]) {
                Ok(Reply::StatsMany(all)) if all.len() == chunk.len() => {
                    fetched.extend(
                        chunk
                            .iter()
                            .zip(all)
                            .filter_map(|(name, stats)| Some((name.clone(), stats?))),
                    );
                }
                Ok(other) => {
                    tracing::debug!(%home, reply = ?other, "unexpected answer to a bulk counters request");
                    break;
                }
                Err(error) => {
                    tracing::debug!(%home, %error, "bulk counters request failed");
                    break;
                }
            }
        }
        fetched
    }

    fn store(&self) -> Option<Arc<crate::store::MessageStore>> {
        self.broker.upgrade()?.message_store().cloned()
    }

    /// What the node's failure detector says of `node`.
    pub fn is_up(&self, node: &str) -> bool {
        self.link.is_up(node)
    }

    /// Periodic work (about once a second): consumers of queues whose home node went away
    /// are cancelled; what the consumers of a lost node held goes back to its queues; and
    /// classic queues this node made before it knew their home (at boot, from its saved
    /// definitions) become remote queues when they are empty.
    pub fn maintain(self: &Arc<Self>) {
        let lost: Vec<Arc<queue::ProxyConsumer>> = self
            .proxies
            .lock()
            .values()
            .filter(|proxy| !self.link.is_up(proxy.home()))
            .cloned()
            .collect();
        for proxy in lost {
            tracing::info!(queue = %proxy.queue_name(), home = %proxy.home(), "cancelling a consumer: the queue's home node is down");
            self.proxies.lock().remove(&proxy.id());
            proxy.home_lost();
        }
        self.home.sweep(self);
        self.drop_transient_queues();
        // Only a node that has just started holds classic queues made before it knew their
        // homes; later passes would only look at every local queue again, every second.
        if self.maintained.fetch_add(1, Ordering::Relaxed) >= REHOME_PASSES {
            return;
        }
        if let Some(broker) = self.broker.upgrade() {
            for name in broker.vhost_names() {
                if let Some(vhost) = broker.vhost(&name) {
                    vhost.rehome_classic_queues(self);
                }
            }
        }
    }

    /// Drops cluster-wide the exclusive and auto-delete queues whose owners are gone: this
    /// node's own (from before a restart, or whose drop failed) and those of nodes down for
    /// [`GONE_AFTER`]. The commits run on a blocking task, one batch at a time.
    fn drop_transient_queues(self: &Arc<Self>) {
        if self.dropping.load(Ordering::Acquire) {
            return;
        }
        let Some(broker) = self.broker.upgrade() else {
            return;
        };
        let now = std::time::Instant::now();
        let is_gone = |node: &str| -> bool {
            let mut down = self.down_since.lock();
            if self.link.is_up(node) {
                down.remove(node);
                return false;
            }
            let since = *down.entry(node.to_string()).or_insert(now);
            now.duration_since(since) >= GONE_AFTER
        };
        let mut drops = Vec::new();
        for name in broker.vhost_names() {
            if let Some(vhost) = broker.vhost(&name) {
                for (queue, home) in vhost.transient_maintenance(self, &is_gone) {
                    drops.push((Arc::clone(&vhost), queue, home));
                }
            }
        }
        // Nodes back up are forgotten above only when a stand-in asks; forget the rest.
        self.down_since
            .lock()
            .retain(|node, _| !self.link.is_up(node));
        if drops.is_empty() {
            return;
        }
        self.dropping.store(true, Ordering::Release);
        let me = Arc::clone(self);
        let local = self.link.local().to_string();
        self.runtime.spawn_blocking(move || {
            for (vhost, queue, home) in drops {
                match vhost.commit_transient_drop(&queue, &home) {
                    Ok(()) => {
                        tracing::info!(%queue, vhost = %vhost.name(), %home, "dropped an exclusive or auto-delete queue whose owner is gone");
                    }
                    Err(error) => {
                        tracing::debug!(%queue, %home, %error, "could not drop a transient queue yet");
                        if home == local {
                            vhost.owe_transient_drop(&queue);
                        }
                    }
                }
            }
            me.dropping.store(false, Ordering::Release);
        });
    }

    /// Answers a request from `from`.
    pub async fn serve(self: &Arc<Self>, from: &str, body: &[u8]) -> Vec<u8> {
        self.serve_in_order(from, body).await
    }

    /// Answers a request from `from` (the transport's handler for the forwarding method).
    /// Everything but the wait for the disk happens now, before the returned future is
    /// first polled: the transport calls this in the order requests arrive on a link, so a
    /// node's publishes, deliveries and settlements are applied in the order it sent them
    /// although several are in flight.
    pub fn serve_in_order(
        self: &Arc<Self>,
        from: &str,
        body: &[u8],
    ) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send>> {
        let reply = match codec::decode_request(body) {
            Ok(Request::Publish { messages }) => {
                let published = self.publish_here(messages);
                return Box::pin(async move { codec::encode_reply(&published.await) });
            }
            Ok(Request::TakeOver {
                vhost,
                client_id,
                send_will,
            }) => {
                // Waits for a connection to end: only the returned future waits.
                let answered = self.serve_takeover(&vhost, &client_id, send_will);
                return Box::pin(async move { codec::encode_reply(&answered.await) });
            }
            Ok(request) => self.handle(from, request),
            Err(error) => Reply::Error(
                crate::error::ErrorKind::InternalError,
                format!("damaged forwarding request: {}", error.0),
            ),
        };
        let bytes = codec::encode_reply(&reply);
        Box::pin(std::future::ready(bytes))
    }

    fn handle(self: &Arc<Self>, from: &str, request: Request) -> Reply {
        match request {
            Request::Deliver { proxy, deliveries } => self.delivered(proxy, deliveries),
            Request::Cancelled { proxy } => {
                if let Some(proxy) = self.proxies.lock().remove(&proxy) {
                    proxy.cancelled_by_home();
                }
                Reply::Ok
            }
            home => self.serve_home(from, home),
        }
    }

    /// Deliveries from a home node for one of this node's proxy consumers.
    fn delivered(self: &Arc<Self>, proxy: u64, deliveries: Vec<RemoteDelivery>) -> Reply {
        let found = self.proxies.lock().get(&proxy).cloned();
        match found {
            Some(consumer) => {
                consumer.push(deliveries);
                consumer.drain(self);
                Reply::Ok
            }
            None => Reply::Error(
                crate::error::ErrorKind::NotFound,
                format!("no consumer {proxy} on this node"),
            ),
        }
    }

    fn new_proxy_id(&self) -> u64 {
        self.run | (self.next_proxy.fetch_add(1, Ordering::Relaxed) & 0xFFFF_FFFF)
    }
}

/// What one lane sends next.
enum Batch {
    Publish {
        messages: Vec<(Arc<QueueRef>, Arc<Message>)>,
        holds: Vec<Option<u64>>,
    },
    Deliver {
        proxy: u64,
        deliveries: Vec<RemoteDelivery>,
    },
    Control(Request),
}

/// The next request of a lane: consecutive publishes in one, consecutive deliveries to one
/// consumer in one, anything else alone.
fn take_batch(ops: &mut VecDeque<Op>) -> Option<Batch> {
    match ops.pop_front()? {
        Op::Publish {
            queue,
            message,
            hold,
        } => {
            let mut messages = vec![(queue, message)];
            let mut holds = vec![hold];
            while messages.len() < PUBLISH_BATCH {
                match ops.front() {
                    Some(Op::Publish { .. }) => {
                        if let Some(Op::Publish {
                            queue,
                            message,
                            hold,
                        }) = ops.pop_front()
                        {
                            messages.push((queue, message));
                            holds.push(hold);
                        }
                    }
                    _ => break,
                }
            }
            Some(Batch::Publish { messages, holds })
        }
        Op::Deliver {
            proxy,
            mut deliveries,
        } => {
            while let Some(Op::Deliver { proxy: next, .. }) = ops.front() {
                if *next != proxy || deliveries.len() >= PUBLISH_BATCH {
                    break;
                }
                if let Some(Op::Deliver {
                    deliveries: more, ..
                }) = ops.pop_front()
                {
                    deliveries.extend(more);
                }
            }
            Some(Batch::Deliver { proxy, deliveries })
        }
        Op::Control(request) => Some(Batch::Control(request)),
    }
}

#[cfg(test)]
mod tests;
