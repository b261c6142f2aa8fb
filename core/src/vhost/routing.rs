//! Publishing: routing a message through exchanges (with exchange-to-exchange bindings,
//! alternate exchanges and CC/BCC keys), dead-lettering and message expiry.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::VHost;
use crate::access::{Access, ResourceKind};
use crate::dead_letter::{death_field, with_death};
use crate::error::{CoreError, CoreResult};
use crate::exchange::{Exchange, Target};
use crate::message::Message;
use crate::queue::{DeathReason, EnqueueOutcome, Queue};
use crate::queue_type::QueueInstance;
use crate::store::QueueName;
use crate::value::Value;

/// Up to this many queues reached, a message's queues are kept unique by scanning them;
/// beyond, by one hashing pass at the end (see [`VHost::route_through`]).
const DEDUP_BY_SCAN: usize = 32;

/// What [`VHost::enqueue_routed`] did with a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// Every queue took it (false: a queue refused it with `x-overflow = reject-publish`;
    /// the publisher gets a nack).
    pub accepted: bool,
    /// For a persistent message written to the store: the store sequence number that must
    /// be durable before the publisher may be told the message is safe.
    pub durable_seq: Option<u64>,
}

impl VHost {
    /// Removes expired messages from every queue (called about every 250 ms by the server).
    pub fn expire_messages(&self, now: u64) -> usize {
        let mut expired = 0;
        let candidates: Vec<Arc<Queue>> = self
            .queues
            .read()
            .values()
            .filter(|queue| queue.wants_sweep())
            .cloned()
            .collect();
        for queue in candidates {
            expired += queue.expire(now);
            if queue.idle_expired(now) {
                tracing::debug!(
                    queue = queue.name(),
                    "queue unused for longer than x-expires; deleted"
                );
                let _replicated = self.replicate_broker_drop(&queue);
                let _topology = self.topology.lock();
                self.remove_queue_locked(&queue);
            }
        }
        expired
    }

    /// Dead letters dropped because their dead-letter exchange did not exist.
    pub fn dead_letters_dropped(&self) -> u64 {
        self.dead_letters_dropped.load(Ordering::Relaxed)
    }

    /// Republishes messages that left `queue` through its dead-letter exchange, with the
    /// `x-death` history RabbitMQ 4.x writes. A message is not delivered back into a queue it
    /// already died in unless a rejection is part of its history, which breaks automatic
    /// cycles (expiry or length limits) as RabbitMQ does.
    pub(crate) fn dead_letter(&self, queue: &Queue, letters: Vec<(Arc<Message>, DeathReason)>) {
        let limits = queue.limits();
        let Some(dlx) = limits.dead_letter_exchange.as_deref() else {
            return;
        };
        let exchange = if dlx.is_empty() {
            None
        } else {
            self.exchange(dlx)
        };
        if !dlx.is_empty() && exchange.is_none() {
            self.dead_letters_dropped
                .fetch_add(letters.len() as u64, Ordering::Relaxed);
            return;
        }
        self.dead_letter_through(
            queue.name(),
            dlx,
            exchange.as_ref(),
            limits.dead_letter_routing_key.as_deref(),
            letters,
        );
    }

    /// Dead-letters messages of the queue `queue_name` (of any type) through the exchange
    /// `dlx` (empty: the default exchange) with `x-death` as RabbitMQ 4.x writes it. Returns
    /// how many reached a queue. Quorum queues call it for their `DeadLetter` effects.
    pub fn dead_letter_from(
        &self,
        queue_name: &str,
        dlx: &str,
        routing_key: Option<&str>,
        letters: Vec<(Arc<Message>, DeathReason)>,
    ) -> usize {
        let exchange = if dlx.is_empty() {
            None
        } else {
            self.exchange(dlx)
        };
        if !dlx.is_empty() && exchange.is_none() {
            self.dead_letters_dropped
                .fetch_add(letters.len() as u64, Ordering::Relaxed);
            return 0;
        }
        self.dead_letter_through(queue_name, dlx, exchange.as_ref(), routing_key, letters)
    }

    fn dead_letter_through(
        &self,
        queue_name: &str,
        dlx: &str,
        exchange: Option<&Arc<Exchange>>,
        dead_letter_routing_key: Option<&str>,
        letters: Vec<(Arc<Message>, DeathReason)>,
    ) -> usize {
        let mut reached = 0;
        let mut routed = Vec::new();
        let mut typed: Vec<Arc<dyn QueueInstance>> = Vec::new();
        for (message, reason) in letters {
            let dead = with_death(&message, queue_name, reason, dlx, dead_letter_routing_key);
            routed.clear();
            typed.clear();
            match exchange {
                None => {
                    if let Some(target) = self.queue(&dead.routing_key) {
                        routed.push(target);
                    } else if let Some(target) = self.typed_queue(&dead.routing_key) {
                        typed.push(target);
                    }
                }
                Some(exchange) => {
                    let mut visited = Vec::new();
                    let mut targets = Vec::new();
                    self.route_through(
                        exchange,
                        &dead.routing_key,
                        &dead,
                        &mut targets,
                        &mut visited,
                        &mut routed,
                        &mut typed,
                    );
                }
            }
            let deaths = dead
                .properties
                .headers
                .as_ref()
                .and_then(|h| match h.get("x-death") {
                    Some(Value::Array(entries)) => Some(entries.clone()),
                    _ => None,
                });
            let rejected_in_history = deaths
                .iter()
                .flatten()
                .any(|entry| death_field(entry, "reason") == Some("rejected"));
            let dead = Arc::new(dead);
            routed.retain(|target| {
                let cycles = !rejected_in_history
                    && deaths
                        .iter()
                        .flatten()
                        .any(|entry| death_field(entry, "queue") == Some(target.name()));
                if cycles {
                    tracing::debug!(
                        queue = target.name(),
                        "dead-letter cycle detected; message dropped"
                    );
                }
                !cycles
            });
            typed.retain(|target| {
                rejected_in_history
                    || !deaths
                        .iter()
                        .flatten()
                        .any(|entry| death_field(entry, "queue") == Some(target.name()))
            });
            reached += usize::from(!routed.is_empty() || !typed.is_empty());
            self.enqueue_routed_all(dead, &routed, &typed);
        }
        reached
    }

    /// Enqueues a routed message in `queues` (from [`VHost::route`]). A persistent message
    /// that reaches a durable queue is written to the message store once, shared by every
    /// durable queue it reached; the returned `durable_seq` is what a listener waits for (see
    /// [`crate::store::MessageStore::subscribe_durable`]) before confirming it.
    #[cfg(test)]
    pub(crate) fn enqueue_routed(&self, message: Arc<Message>, queues: &[Arc<Queue>]) -> Enqueued {
        self.enqueue_routed_all(message, queues, &[])
    }

    /// [`VHost::enqueue_routed`] for classic queues and queues of other types.
    pub(crate) fn enqueue_routed_all(
        &self,
        message: Arc<Message>,
        queues: &[Arc<Queue>],
        typed: &[Arc<dyn QueueInstance>],
    ) -> Enqueued {
        let mut store_id = 0;
        let mut durable_seq = None;
        if message.properties.is_persistent() {
            if let Some(store) = self.durability.store() {
                let names: Vec<&QueueName> = queues
                    .iter()
                    .filter_map(|q| q.store_name().map(|(_, name)| name))
                    .collect();
                if !names.is_empty() {
                    let (id, seq) = store.publish(&message, &names);
                    store_id = id;
                    durable_seq = Some(seq);
                }
            }
        }
        let mut accepted = true;
        for queue in queues {
            let id = if store_id != 0 && queue.store_name().is_some() {
                store_id
            } else {
                0
            };
            accepted &= queue.enqueue_stored(Arc::clone(&message), id) == EnqueueOutcome::Enqueued;
        }
        let mut holds: Vec<u64> = Vec::new();
        for queue in typed {
            // Replicated types keep the message in their own log, and forwarded classic
            // queues on their home node; what the publisher waits for is a held store
            // sequence number, released at commit (or once the home node has it).
            let published = queue.publish(Arc::clone(&message));
            accepted &= published.outcome == EnqueueOutcome::Enqueued;
            if let Some(seq) = published.durable_seq {
                holds.push(seq);
                durable_seq = Some(durable_seq.map_or(seq, |s: u64| s.max(seq)));
            }
        }
        if let (true, Some(last), Some(store)) =
            (holds.len() > 1, durable_seq, self.durability.store())
        {
            // The publisher waits for the last hold only: a failure of any other fails it.
            for hold in holds {
                store.link_holds(hold, last);
            }
        }
        Enqueued {
            accepted,
            durable_seq,
        }
    }

    /// Checks that `user` may publish to `exchange`. Listeners cache the answer per channel.
    pub fn check_publish(&self, user: &str, exchange: &str) -> CoreResult<()> {
        self.check(user, Access::Write, ResourceKind::Exchange, exchange)
    }

    /// Routes `message` from `exchange_name` to the queues it reaches, each at most once,
    /// following exchange-to-exchange bindings (cycles are safe) and alternate exchanges.
    /// Fails with 404 for a missing exchange and 403 for an internal one.
    pub fn route(
        &self,
        exchange_name: &str,
        message: &Message,
        out: &mut Vec<Arc<Queue>>,
    ) -> CoreResult<()> {
        self.route_all(exchange_name, message, out, &mut Vec::new())
    }

    /// [`VHost::route`], with the queues of other types (quorum) reached put in `typed`.
    pub fn route_all(
        &self,
        exchange_name: &str,
        message: &Message,
        out: &mut Vec<Arc<Queue>>,
        typed: &mut Vec<Arc<dyn QueueInstance>>,
    ) -> CoreResult<()> {
        let before_classic = out.len();
        let before = before_classic + typed.len();
        let exchange = self.route_uncounted(exchange_name, message, out, typed)?;
        let reached = out.len() + typed.len() - before;
        self.counters.record_publish(reached > 0);
        exchange
            .as_deref()
            .unwrap_or(&self.default_exchange)
            .record_publish(reached);
        if self.is_tracing() {
            self.trace_publish(exchange_name, message, &out[before_classic..]);
        }
        Ok(())
    }

    /// Routes as [`VHost::route`] without counting; returns the exchange routed through, or
    /// `None` for the default exchange (which needs no lookup).
    fn route_uncounted(
        &self,
        exchange_name: &str,
        message: &Message,
        out: &mut Vec<Arc<Queue>>,
        typed: &mut Vec<Arc<dyn QueueInstance>>,
    ) -> CoreResult<Option<Arc<Exchange>>> {
        if exchange_name.is_empty() {
            let queues = self.queues.read();
            for key in routing_keys(message) {
                if let Some(queue) = queues.get(key) {
                    if !out.iter().any(|q| Arc::ptr_eq(q, queue)) {
                        out.push(Arc::clone(queue));
                    }
                }
            }
            drop(queues);
            if self.typed_count.load(Ordering::Relaxed) > 0 {
                let others = self.typed.read();
                for key in routing_keys(message) {
                    if let Some(queue) = others.get(key) {
                        if !typed.iter().any(|q| same_instance(q, queue)) {
                            typed.push(Arc::clone(queue));
                        }
                    }
                }
            }
            return Ok(None);
        }
        let exchange = self.exchange_or_404(exchange_name)?;
        if exchange.config().internal {
            return Err(CoreError::access_refused(format!(
                "cannot publish to internal {}",
                self.describe("exchange", exchange_name)
            )));
        }
        let mut visited: Vec<Arc<str>> = Vec::new();
        let mut targets = Vec::new();
        for key in routing_keys(message) {
            visited.clear();
            targets.clear();
            self.route_through(
                &exchange,
                key,
                message,
                &mut targets,
                &mut visited,
                out,
                typed,
            );
        }
        Ok(Some(exchange))
    }

    /// Appends to `out` the queues `exchange` routes `key` to, following exchange-to-exchange
    /// bindings and alternate exchanges, each queue once.
    // The routing scratch lists travel separately so the publish path reuses each.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn route_through(
        &self,
        exchange: &Arc<Exchange>,
        key: &str,
        message: &Message,
        targets: &mut Vec<Target>,
        visited: &mut Vec<Arc<str>>,
        out: &mut Vec<Arc<Queue>>,
        typed: &mut Vec<Arc<dyn QueueInstance>>,
    ) {
        self.route_through_exchange(exchange, key, message, targets, visited, out, typed);
        // Past DEDUP_BY_SCAN queues, duplicates were let in and go here, in one pass (the
        // first of each stays): a scan per queue would make a fan-out to n queues, such as
        // one MQTT topic with thousands of subscribers, cost n^2.
        if out.len() > DEDUP_BY_SCAN {
            let mut seen = std::collections::HashSet::with_capacity(out.len());
            out.retain(|queue| seen.insert(Arc::as_ptr(queue)));
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn route_through_exchange(
        &self,
        exchange: &Arc<Exchange>,
        key: &str,
        message: &Message,
        targets: &mut Vec<Target>,
        visited: &mut Vec<Arc<str>>,
        out: &mut Vec<Arc<Queue>>,
        typed: &mut Vec<Arc<dyn QueueInstance>>,
    ) {
        visited.push(Arc::from(exchange.name()));
        let start = targets.len();
        exchange.route(key, message, targets);
        let routed_here = targets.len() > start;
        let mut index = start;
        while index < targets.len() {
            match targets[index].clone() {
                Target::Queue(queue) => {
                    if let Some(forward) = queue.forward() {
                        // A quorum queue's stand-in.
                        if !typed.iter().any(|q| same_instance(q, forward)) {
                            typed.push(Arc::clone(forward));
                        }
                    } else if out.len() >= DEDUP_BY_SCAN
                        || !out.iter().any(|q| Arc::ptr_eq(q, &queue))
                    {
                        out.push(queue);
                    }
                }
                Target::Exchange(name) => {
                    if !visited.contains(&name) {
                        if let Some(next) = self.exchange(&name) {
                            self.route_through_exchange(
                                &next, key, message, targets, visited, out, typed,
                            );
                        }
                    }
                }
            }
            index += 1;
        }
        if !routed_here {
            if let Some(alternate) = exchange.alternate_exchange() {
                if !visited.iter().any(|v| **v == *alternate) {
                    if let Some(next) = self.exchange(&alternate) {
                        self.route_through_exchange(
                            &next, key, message, targets, visited, out, typed,
                        );
                    }
                }
            }
        }
    }
}

/// Whether two handles name the same queue.
fn same_instance(a: &Arc<dyn QueueInstance>, b: &Arc<dyn QueueInstance>) -> bool {
    std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
}

/// The routing key and the sender-selected `CC` and `BCC` keys of a message.
fn routing_keys(message: &Message) -> impl Iterator<Item = &str> {
    let extra = message
        .properties
        .headers
        .as_ref()
        .into_iter()
        .flat_map(|headers| {
            ["CC", "BCC"]
                .into_iter()
                .flat_map(move |name| match headers.get(name) {
                    Some(Value::Array(keys)) => {
                        keys.iter().filter_map(Value::as_str).collect::<Vec<_>>()
                    }
                    Some(value) => value.as_str().into_iter().collect(),
                    None => Vec::new(),
                })
        });
    std::iter::once(&*message.routing_key).chain(extra)
}
