//! Dispatch: which consumer gets the next ready message, single active consumer, and
//! handing a message out.

use std::sync::Arc;

use super::machine::{Consumer, Place, QuorumQueue};
use super::{ConsumerKey, CreditMode, Delivered, Effect};
use crate::queue::DeathReason;

impl QuorumQueue {
    // ----- dispatch -----

    /// Hands ready messages to consumers with credit: highest consumer priority first,
    /// round-robin among equals; with single active consumer, only to the active one.
    pub(super) fn dispatch(&mut self, now: u64, effects: &mut Vec<Effect>) {
        while !self.ready.is_empty() {
            let Some(key) = self.next_consumer_with_credit() else {
                break;
            };
            let Some(id) = self.take_next(now, effects) else {
                break;
            };
            if let Some(delivered) = self.hand_out(id, Some(key), now) {
                let owner = self.consumers.get(&key).map_or(0, |c| c.owner);
                effects.push(Effect::Deliver {
                    consumer: key,
                    owner,
                    delivered,
                });
            }
        }
    }

    pub(super) fn next_consumer_with_credit(&self) -> Option<ConsumerKey> {
        if self.config.single_active_consumer {
            let key = self.active?;
            let consumer = self.consumers.get(&key)?;
            let fading = self
                .best_standby()
                .and_then(|best| self.consumers.get(&best))
                .is_some_and(|best| best.priority > consumer.priority);
            return (consumer.receives() && !fading && consumer.available_credit() > 0)
                .then_some(key);
        }
        self.consumers
            .iter()
            .filter(|(_, c)| c.receives() && c.available_credit() > 0)
            .max_by(|(ka, a), (kb, b)| {
                a.priority
                    .cmp(&b.priority)
                    .then(b.last_served.cmp(&a.last_served))
                    .then(kb.cmp(ka))
            })
            .map(|(key, _)| *key)
    }

    /// The consumer that should be the single active one: highest priority, then earliest
    /// attached.
    pub(super) fn best_standby(&self) -> Option<ConsumerKey> {
        self.consumers
            .iter()
            .filter(|(_, c)| c.receives())
            .max_by(|(ka, a), (kb, b)| a.priority.cmp(&b.priority).then(kb.cmp(ka)))
            .map(|(key, _)| *key)
    }

    /// Keeps the single active consumer right: a new one when the active one left, and a
    /// higher-priority one once the active one has nothing unsettled (RabbitMQ 4.x lets the
    /// active consumer finish its deliveries before switching).
    pub(super) fn settle_active_consumer(&mut self, effects: &mut Vec<Effect>) {
        if !self.config.single_active_consumer {
            return;
        }
        if let Some(active) = self.active {
            if !self.consumers.get(&active).is_some_and(Consumer::receives) {
                self.active = None;
            }
        }
        let Some(best) = self.best_standby() else {
            return;
        };
        match self.active {
            None => {
                self.active = Some(best);
                effects.push(Effect::ActiveChanged {
                    consumer: best,
                    active: true,
                });
            }
            Some(active) if active != best => {
                let switch = self.consumers.get(&active).is_some_and(|a| {
                    a.checked_out.is_empty()
                        && self
                            .consumers
                            .get(&best)
                            .is_some_and(|b| b.priority > a.priority)
                });
                if switch {
                    effects.push(Effect::ActiveChanged {
                        consumer: active,
                        active: false,
                    });
                    self.active = Some(best);
                    effects.push(Effect::ActiveChanged {
                        consumer: best,
                        active: true,
                    });
                }
            }
            Some(_) => {}
        }
    }

    /// The next ready message in delivery order, taken out of the ready index; expired ones
    /// met on the way are expired. A message expiring right now may still go (TTL 0 means
    /// "deliver only if a consumer takes it at once").
    pub(super) fn take_next(&mut self, now: u64, effects: &mut Vec<Effect>) -> Option<u64> {
        loop {
            let &(_, _, id) = self.ready.first()?;
            self.unqueue(id);
            let expired = self
                .messages
                .get(&id)
                .is_some_and(|e| e.expires_at.is_some_and(|at| at < now));
            if expired {
                self.counters.expired += 1;
                self.dead_letter(id, DeathReason::Expired, effects);
                continue;
            }
            return Some(id);
        }
    }

    /// Delivers a message taken with [`QuorumQueue::take_next`], checking it out to
    /// `consumer` unless that consumer (or a basic.get without one) settles on delivery.
    pub(super) fn hand_out(
        &mut self,
        id: u64,
        consumer: Option<ConsumerKey>,
        now: u64,
    ) -> Option<Delivered> {
        let entry = self.messages.get_mut(&id)?;
        let delivered = Delivered {
            id,
            message: Arc::clone(&entry.message),
            redelivered: entry.acquired > 0,
            delivery_count: entry.delivery_count,
            settled: true,
        };
        entry.acquired = entry.acquired.saturating_add(1);
        self.counters.delivered += 1;
        self.serve_counter += 1;
        let default_timeout = self.config.consumer_timeout;
        let mut deadline = u64::MAX;
        let settled = match consumer.and_then(|key| self.consumers.get_mut(&key)) {
            Some(c) => {
                if let Some(timeout) = c.timeout.or(default_timeout) {
                    deadline = now.saturating_add(timeout);
                }
                c.last_served = self.serve_counter;
                if c.auto_ack || !matches!(c.mode, CreditMode::Prefetch(_)) {
                    c.credit = c.credit.saturating_sub(1);
                }
                if !c.auto_ack {
                    c.checked_out.insert(id);
                }
                c.auto_ack
            }
            None => true,
        };
        if settled {
            self.messages.remove(&id);
        } else if let (Some(key), Some(entry)) = (consumer, self.messages.get_mut(&id)) {
            entry.place = Place::CheckedOut(key);
            entry.deadline = deadline;
            self.checkouts.insert((deadline, id));
        }
        Some(Delivered {
            settled,
            ..delivered
        })
    }
}
