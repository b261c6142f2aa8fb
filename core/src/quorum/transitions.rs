//! How a message moves between the queue's indexes (ready, delayed, checked out, dead
//! lettering) and the length limits.

use std::sync::Arc;

use super::machine::{Place, QuorumQueue};
use super::{ConsumerKey, DeadLetterStrategy, Effect, PRIORITY_LEVELS};
use crate::queue::{DeathReason, Overflow};

impl QuorumQueue {
    // ----- message transitions -----

    pub(super) fn draw_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Puts a message (in no index) into the ready index.
    pub(super) fn make_ready(&mut self, id: u64) {
        if let Some(entry) = self.messages.get_mut(&id) {
            entry.place = Place::Ready;
            self.ready
                .insert((PRIORITY_LEVELS - 1 - entry.priority, entry.order, id));
            if let Some(at) = entry.expires_at {
                self.expiring.insert((at, id));
            }
            self.queued_bytes += entry.length;
        }
    }

    /// Takes a ready or delayed message out of its index (it stays in `messages`).
    pub(super) fn unqueue(&mut self, id: u64) {
        let Some(entry) = self.messages.get(&id) else {
            return;
        };
        match entry.place {
            Place::Ready => {
                self.ready
                    .remove(&(PRIORITY_LEVELS - 1 - entry.priority, entry.order, id));
                if let Some(at) = entry.expires_at {
                    self.expiring.remove(&(at, id));
                }
            }
            Place::Delayed => {
                if let Some(at) = entry.deliver_at {
                    self.delayed.remove(&(at, id));
                }
            }
            _ => return,
        }
        self.queued_bytes -= entry.length;
    }

    /// Takes a checked-out message off the consumer-timeout index (the consumer's own set is
    /// the caller's).
    pub(super) fn check_in(&mut self, id: u64) {
        if let Some(entry) = self.messages.get(&id) {
            self.checkouts.remove(&(entry.deadline, id));
        }
    }

    /// Removes a message for good.
    pub(super) fn forget(&mut self, id: u64) {
        if let Some(entry) = self.messages.remove(&id) {
            if matches!(entry.place, Place::DeadLettering(_)) {
                self.queued_bytes -= entry.length;
            }
        }
    }

    /// A checked-out message comes back: counted as a failed delivery when `failed`, and
    /// dead-lettered with reason `delivery_limit` once it failed more often than the limit.
    pub(super) fn give_back(&mut self, id: u64, failed: bool, effects: &mut Vec<Effect>) {
        self.give_back_at(id, failed, None, effects);
    }

    /// [`QuorumQueue::give_back`], held in the timer index until `delay` when there is one
    /// (AMQP 1.0 `modified` with an `x-opt-delivery-time` annotation, as RabbitMQ 4.3 does).
    pub(super) fn give_back_at(
        &mut self,
        id: u64,
        failed: bool,
        delay: Option<u64>,
        effects: &mut Vec<Effect>,
    ) {
        let limit = self.config.delivery_limit;
        let Some(entry) = self.messages.get_mut(&id) else {
            return;
        };
        self.counters.returned += 1;
        if failed {
            entry.delivery_count = entry.delivery_count.saturating_add(1);
        }
        if limit.is_some_and(|limit| entry.delivery_count > limit) {
            self.counters.delivery_limit_reached += 1;
            self.dead_letter(id, DeathReason::DeliveryLimit, effects);
        } else if let Some(at) = delay {
            entry.place = Place::Delayed;
            entry.deliver_at = Some(at);
            self.queued_bytes += entry.length;
            self.delayed.insert((at, id));
        } else {
            self.make_ready(id);
        }
    }

    /// A message (in no index) leaves through the dead-letter exchange, or is dropped when
    /// the queue has none.
    pub(super) fn dead_letter(&mut self, id: u64, reason: DeathReason, effects: &mut Vec<Effect>) {
        let Some(exchange) = self.config.dead_letter_exchange.clone() else {
            self.counters.dropped += 1;
            self.messages.remove(&id);
            return;
        };
        let at_least_once = self.config.effective_strategy() == DeadLetterStrategy::AtLeastOnce;
        let message = if at_least_once {
            let Some(entry) = self.messages.get_mut(&id) else {
                return;
            };
            entry.place = Place::DeadLettering(reason);
            self.queued_bytes += entry.length;
            self.dead_lettering += 1;
            Arc::clone(&entry.message)
        } else {
            let Some(entry) = self.messages.remove(&id) else {
                return;
            };
            entry.message
        };
        self.counters.dead_lettered += 1;
        effects.push(Effect::DeadLetter {
            id,
            message,
            reason,
            exchange,
            routing_key: self.config.dead_letter_routing_key.clone(),
            at_least_once,
        });
    }

    /// A consumer's deliveries past their deadline go back to the queue, redelivered and not
    /// counted as failed, and the consumer is suspended until it settles them (RabbitMQ 4.3).
    pub(super) fn time_out(&mut self, key: ConsumerKey, now: u64, effects: &mut Vec<Effect>) {
        let Some(consumer) = self.consumers.get(&key) else {
            return;
        };
        let ids: Vec<u64> = consumer
            .checked_out
            .iter()
            .copied()
            .filter(|id| self.messages.get(id).is_some_and(|e| e.deadline <= now))
            .collect();
        let (owner, tag) = (consumer.owner, consumer.tag.clone());
        if let Some(consumer) = self.consumers.get_mut(&key) {
            for id in &ids {
                consumer.checked_out.remove(id);
            }
            consumer.timed_out.extend(ids.iter().copied());
        }
        for &id in &ids {
            self.check_in(id);
            self.give_back(id, false, effects);
        }
        effects.push(Effect::ConsumerTimedOut {
            consumer: key,
            owner,
            tag,
            ids,
        });
        if self
            .consumers
            .get(&key)
            .is_some_and(|c| c.cancelled && c.checked_out.is_empty())
        {
            self.consumers.remove(&key);
        }
    }

    /// Removes a consumer; its unsettled messages return, redelivered and counted as failed
    /// (the consumer may have died of them).
    pub(super) fn remove_consumer(&mut self, key: ConsumerKey, effects: &mut Vec<Effect>) {
        let Some(consumer) = self.consumers.remove(&key) else {
            return;
        };
        for id in consumer.checked_out {
            self.check_in(id);
            self.give_back(id, true, effects);
        }
    }

    // ----- limits -----

    pub(super) fn queued_count(&self) -> u64 {
        (self.ready.len() + self.delayed.len()) as u64 + self.dead_lettering
    }

    /// At or below 80% of every limit: where reject-publish starts accepting again.
    pub(super) fn below_soft_limit(&self) -> bool {
        let below = |limit: Option<u64>, value: u64| {
            limit.is_none_or(|max| value <= max.saturating_mul(4) / 5)
        };
        below(self.config.max_length, self.queued_count())
            && below(self.config.max_length_bytes, self.queued_bytes)
    }

    /// reject-publish as RabbitMQ 4.3 does it: once the queue is over a limit it refuses
    /// publishes until it is back at or below 80% of it (so it can overshoot by the publish
    /// that crossed the limit).
    pub(super) fn update_reject_publish(&mut self) {
        if self.config.overflow != Overflow::RejectPublish {
            self.rejecting = false;
        } else if self.over_limit() {
            self.rejecting = true;
        } else if self.rejecting && self.below_soft_limit() {
            self.rejecting = false;
        }
    }

    pub(super) fn over_limit(&self) -> bool {
        self.config
            .max_length
            .is_some_and(|max| self.queued_count() > max)
            || self
                .config
                .max_length_bytes
                .is_some_and(|max| self.queued_bytes > max)
    }

    /// drop-head: while over a limit, the message that would be delivered next (then the
    /// delayed message due first) is dead-lettered with reason `maxlen`.
    pub(super) fn enforce_drop_head(&mut self, effects: &mut Vec<Effect>) {
        if self.config.overflow != Overflow::DropHead {
            return;
        }
        while self.over_limit() {
            let next = self
                .ready
                .first()
                .map(|&(_, _, id)| id)
                .or_else(|| self.delayed.first().map(|&(_, id)| id));
            let Some(id) = next else {
                break;
            };
            self.unqueue(id);
            self.dead_letter(id, DeathReason::MaxLen, effects);
        }
    }
}
