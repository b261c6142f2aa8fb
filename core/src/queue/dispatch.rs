//! Handing messages out: dispatch to consumers with credit (priorities, round-robin, single
//! active consumer), `basic.get`, settlement, and attaching and detaching consumers.

use super::*;

impl Queue {
    /// Hands ready messages to consumers while they have credit. Listeners call this when a
    /// consumer's credit frees up after [`DeliverySink::reserve`] refused.
    pub fn dispatch(self: &Arc<Self>) {
        let mut state = self.state.lock();
        state.consumers_starved = false;
        self.dispatch_locked(&mut state);
        self.finish(state);
    }

    pub(super) fn dispatch_locked(self: &Arc<Self>, state: &mut QueueState) {
        if state.consumers.is_empty() || state.consumers_starved {
            return;
        }
        let now = if state.expiring > 0 {
            self.clock.now_ms()
        } else {
            0
        };
        loop {
            self.expire_head(state, now);
            if state.ready.is_empty() || state.consumers.is_empty() {
                return;
            }
            // A paged-out head is read back before any consumer's credit is reserved for it.
            let paged_in = match state.ready.front() {
                Some(head) if head.paged => match self.page_in(head) {
                    Some(message) => Some(message),
                    None => {
                        if let Some(lost) = state.pop_ready() {
                            state.active().store_removed.push(lost.store_id);
                        }
                        continue;
                    }
                },
                _ => None,
            };
            if state.limits.single_active_consumer && !Self::promote_waiting_consumer(state) {
                // The active consumer keeps what it holds; no more until it settled all.
                return;
            }
            let Some(index) = self.next_consumer_with_credit(state) else {
                state.consumers_starved = true;
                return;
            };
            let Some(mut ready) = state.pop_ready() else {
                return;
            };
            if let Some(message) = paged_in {
                ready.message = message;
            }
            let consumer = &state.consumers[index];
            let needs_settlement = consumer.spec.needs_settlement;
            let sink = Arc::clone(&consumer.sink);
            if needs_settlement {
                state.unsettled.insert(
                    ready.id,
                    UnsettledMessage {
                        message: Arc::clone(&ready.message),
                        expires_at: ready.expires_at,
                        store_id: ready.store_id,
                        delivery_count: ready.delivery_count,
                    },
                );
            }
            state.note_delivered(ready.store_id, needs_settlement);
            state.active().stats.delivered += 1;
            if self.trace.load(Ordering::Relaxed) {
                state
                    .active()
                    .traced
                    .push((Arc::clone(&ready.message), ready.redelivered));
            }
            sink.deliver(Delivery {
                queue: Arc::clone(self) as Arc<dyn QueueInstance>,
                id: ready.id,
                message: ready.message,
                redelivered: ready.redelivered,
                delivery_count: u32::from(ready.delivery_count),
                needs_settlement,
            });
        }
    }

    /// With a single active consumer: a waiting consumer of higher priority than the active
    /// one takes over, once the active one has settled every delivery it holds so that
    /// processing order is kept (RabbitMQ 4.x; in a single-active queue every unsettled
    /// delivery is the active consumer's or a basic.get's). The old active one goes back to
    /// waiting at its priority. Returns false while the hand-over waits for settlements.
    pub(super) fn promote_waiting_consumer(state: &mut QueueState) -> bool {
        let (Some(active), Some(next)) = (state.consumers.first(), state.consumers.get(1)) else {
            return true;
        };
        if next.spec.priority <= active.spec.priority {
            return true;
        }
        if !state.unsettled.is_empty() {
            return false;
        }
        let previous = state.consumers.remove(0);
        let position =
            1 + state.consumers[1..].partition_point(|c| c.spec.priority >= previous.spec.priority);
        state.consumers.insert(position, previous);
        true
    }

    /// Picks the next consumer to deliver to: the highest priority group that has credit,
    /// round-robin within the group. Reserves credit on the chosen sink.
    pub(super) fn next_consumer_with_credit(&self, state: &mut QueueState) -> Option<usize> {
        if state.limits.single_active_consumer {
            // Only the active consumer (the first entry) receives.
            return state
                .consumers
                .first()
                .is_some_and(|c| c.sink.reserve())
                .then_some(0);
        }
        let count = state.consumers.len();
        let mut group_start = 0;
        while group_start < count {
            let priority = state.consumers[group_start].spec.priority;
            let group_end = state.consumers[group_start..]
                .iter()
                .position(|c| c.spec.priority != priority)
                .map_or(count, |offset| group_start + offset);
            let group_len = group_end - group_start;
            for step in 0..group_len {
                let index = group_start + (state.next_round_robin + step) % group_len;
                if state.consumers[index].sink.reserve() {
                    state.next_round_robin = state.next_round_robin.wrapping_add(step + 1);
                    return Some(index);
                }
            }
            group_start = group_end;
        }
        None
    }

    /// Takes the next ready message for a basic.get, with the number of ready messages left.
    pub fn get(self: &Arc<Self>, needs_settlement: bool) -> Option<(Delivery, u64)> {
        let mut state = self.state.lock();
        let now = self.clock.now_ms();
        state.last_used = now;
        self.expire_head(&mut state, now);
        let ready = loop {
            let Some(mut ready) = state.pop_ready() else {
                self.finish(state);
                return None;
            };
            if !ready.paged {
                break ready;
            }
            match self.page_in(&ready) {
                Some(message) => {
                    ready.message = message;
                    ready.paged = false;
                    break ready;
                }
                None => state.active().store_removed.push(ready.store_id),
            }
        };
        if needs_settlement {
            state.unsettled.insert(
                ready.id,
                UnsettledMessage {
                    message: Arc::clone(&ready.message),
                    expires_at: ready.expires_at,
                    store_id: ready.store_id,
                    delivery_count: ready.delivery_count,
                },
            );
        }
        state.note_delivered(ready.store_id, needs_settlement);
        state.active().stats.delivered += 1;
        if self.trace.load(Ordering::Relaxed) {
            state
                .active()
                .traced
                .push((Arc::clone(&ready.message), ready.redelivered));
        }
        let remaining = state.ready.len() as u64;
        let delivery = Delivery {
            queue: Arc::clone(self) as Arc<dyn QueueInstance>,
            id: ready.id,
            message: ready.message,
            redelivered: ready.redelivered,
            delivery_count: u32::from(ready.delivery_count),
            needs_settlement,
        };
        self.finish(state);
        Some((delivery, remaining))
    }

    /// Settles unsettled deliveries by id. Unknown ids (already settled, or the queue was
    /// purged or deleted meanwhile) are ignored: the listener validates its own tags.
    pub fn settle(self: &Arc<Self>, ids: &[u64], settlement: Settlement) {
        let settlement = settlement.for_classic();
        let mut state = self.state.lock();
        match settlement {
            Settlement::Ack => {
                for id in ids {
                    if let Some(unsettled) = state.unsettled.remove(id) {
                        state.active().stats.acknowledged += 1;
                        if unsettled.store_id != 0 {
                            state.active().store_removed.push(unsettled.store_id);
                        }
                    }
                }
            }
            Settlement::Reject => {
                for id in ids {
                    if let Some(unsettled) = state.unsettled.remove(id) {
                        self.discard(
                            &mut state,
                            unsettled.message,
                            unsettled.store_id,
                            DeathReason::Rejected,
                        );
                    }
                }
            }
            Settlement::Requeue | Settlement::Release | Settlement::Modify { .. } => {
                let failed = settlement == Settlement::Requeue;
                for &id in ids {
                    if let Some(unsettled) = state.unsettled.remove(&id) {
                        let delivery_count = if failed {
                            unsettled.delivery_count.saturating_add(1)
                        } else {
                            unsettled.delivery_count
                        };
                        if failed
                            && state
                                .limits
                                .delivery_limit
                                .is_some_and(|limit| u64::from(delivery_count) > limit)
                        {
                            self.discard(
                                &mut state,
                                unsettled.message,
                                unsettled.store_id,
                                DeathReason::DeliveryLimit,
                            );
                            continue;
                        }
                        let length = ReadyMessage::length_field(unsettled.message.body.len());
                        let ready = ReadyMessage {
                            id,
                            message: unsettled.message,
                            redelivered: true,
                            expires_at: unsettled.expires_at,
                            store_id: unsettled.store_id,
                            length,
                            paged: false,
                            delivery_count,
                        };
                        state.ready_bytes += ready.body_len();
                        state.resident_bytes += ready.resident_len();
                        state.expiring += usize::from(ready.expires_at.is_some());
                        if let Some(at) = ready.expires_at {
                            state.next_expiry = state.next_expiry.min(at);
                            // Swept again: the flag may have cleared while it was out.
                            self.want_sweep();
                        }
                        state.ready.insert_by_id(ready);
                    }
                }
                if !state.deleted {
                    self.dispatch_locked(&mut state);
                }
            }
        }
        // A single-active hand-over to a higher priority consumer waits for the active one
        // to settle everything; this settlement may have been the last.
        if state.limits.single_active_consumer
            && state.unsettled.is_empty()
            && state.consumers.len() > 1
            && !state.deleted
            && matches!(settlement, Settlement::Ack | Settlement::Reject)
        {
            state.consumers_starved = false;
            self.dispatch_locked(&mut state);
        }
        self.finish(state);
    }

    /// Attaches a consumer and starts delivering to it. Fails with 403 when an exclusive
    /// consumer holds the queue, or when an exclusive consumer is asked for a queue in use.
    pub fn add_consumer(
        self: &Arc<Self>,
        spec: ConsumerSpec,
        sink: Arc<dyn DeliverySink>,
    ) -> CoreResult<u64> {
        let mut state = self.state.lock();
        if state.deleted {
            return Err(CoreError::not_found(format!("no {}", self.describe())));
        }
        let exclusive_held = state.consumers.iter().any(|c| c.spec.exclusive);
        if exclusive_held || (spec.exclusive && !state.consumers.is_empty()) {
            return Err(CoreError::access_refused(format!(
                "{} in exclusive use",
                self.describe()
            )));
        }
        let id = NEXT_CONSUMER_ID.fetch_add(1, Ordering::Relaxed);
        // With a single active consumer the first entry is the active one and the others wait
        // in priority order (attach order among equals): the highest priority waiting
        // consumer is the next active one (RabbitMQ 4.x). `dispatch_locked` hands over to a
        // newcomer of higher priority.
        let position = if state.limits.single_active_consumer {
            if state.consumers.is_empty() {
                0
            } else {
                1 + state.consumers[1..].partition_point(|c| c.spec.priority >= spec.priority)
            }
        } else {
            state
                .consumers
                .partition_point(|c| c.spec.priority >= spec.priority)
        };
        // Most queues have one consumer (every MQTT subscription, for one): room for exactly
        // one instead of the four a first push reserves.
        state.consumers.reserve_exact(1);
        state
            .consumers
            .insert(position, AttachedConsumer { id, spec, sink });
        state.had_consumers = true;
        state.consumers_starved = false;
        self.dispatch_locked(&mut state);
        self.finish(state);
        Ok(id)
    }

    /// Detaches a consumer. Its unsettled deliveries stay unsettled (AMQP 0-9-1 lets a
    /// channel settle them after cancelling).
    pub fn remove_consumer(self: &Arc<Self>, consumer_id: u64) -> ConsumerRemoval {
        let mut state = self.state.lock();
        let Some(index) = state.consumers.iter().position(|c| c.id == consumer_id) else {
            return ConsumerRemoval::NotAttached;
        };
        state.consumers.remove(index);
        state.last_used = self.clock.now_ms();
        state.consumers_starved = false;
        // The next consumer may be able to take what this one could not (and with a single
        // active consumer, it becomes the active one now).
        self.dispatch_locked(&mut state);
        let removal =
            if state.consumers.is_empty() && self.config.auto_delete && state.had_consumers {
                ConsumerRemoval::LastOfAutoDelete
            } else {
                ConsumerRemoval::Removed
            };
        self.finish(state);
        removal
    }
}
