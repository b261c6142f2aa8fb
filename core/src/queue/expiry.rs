//! Expiry of a classic queue: message TTL (at the head on every operation, anywhere in the
//! queue on the server's sweep) and `x-expires` for a queue left unused.

use super::*;

impl Queue {
    /// Records a use of the queue (a redeclaration) for `x-expires`.
    pub fn touch(&self) {
        self.state.lock().last_used = self.clock.now_ms();
    }

    /// Whether `x-expires` says the queue should be deleted: unused (no consumers, no get,
    /// no redeclaration) for longer than the limit.
    pub fn idle_expired(&self, now: u64) -> bool {
        let state = self.state.lock();
        let Some(expires) = state.limits.expires else {
            return false;
        };
        state.consumers.is_empty()
            && !state.deleted
            && now.saturating_sub(state.last_used) >= expires
    }

    /// Removes expired messages at the head, where dispatch and get look.
    pub(super) fn expire_head(&self, state: &mut QueueState, now: u64) {
        while state.expiring > 0 {
            match state.ready.front() {
                Some(head) if head.expires_at.is_some_and(|at| at < now) => {
                    if let Some(expired) = state.pop_ready() {
                        self.discard_ready(state, expired, DeathReason::Expired);
                    }
                }
                _ => return,
            }
        }
    }

    /// Removes every expired ready message, wherever it is in the queue, so expired messages
    /// stop counting toward depth and limits within one sweep (RabbitMQ only drops them at
    /// the head). Returns how many expired.
    pub fn expire(self: &Arc<Self>, now: u64) -> usize {
        let mut state = self.state.lock();
        // A full pass at most every SWEEP_INTERVAL_MS keeps the cost of large backlogs with
        // mixed TTLs bounded, while every expired message still goes within a second.
        if now.saturating_sub(state.last_sweep) < SWEEP_INTERVAL_MS {
            return 0;
        }
        // What publishers did not free since the last pass is freed here, outside the lock.
        let leftover = state
            .activity
            .as_deref_mut()
            .map(|activity| std::mem::take(&mut activity.expired_garbage))
            .unwrap_or_default();
        if state.expiring == 0 || now <= state.next_expiry {
            if !leftover.is_empty() {
                state.last_sweep = now;
            } else if state.expiring == 0 && state.limits.expires.is_none() {
                // Nothing left to expire: later sweeps skip the queue until a message with a
                // TTL arrives (the flag is set under this same lock).
                self.sweep_wanted.store(false, Ordering::Relaxed);
            }
            drop(state);
            drop(leftover);
            return 0;
        }
        state.last_sweep = now;
        // Messages that arrive or are requeued during the pass lower this again.
        state.next_expiry = u64::MAX;
        let mut cursor = Some(SweepCursor::default());
        let mut expired = 0;
        while let Some(at) = cursor {
            let mut next_expiry = u64::MAX;
            let dead_lettering = state.limits.dead_letter_exchange.is_some();
            // Messages that only need freeing (not stored, not dead-lettered) leave as bare
            // references; the others go through discard.
            let mut garbage: Vec<Arc<Message>> = Vec::new();
            let mut to_discard: Vec<ReadyMessage> = Vec::new();
            let (mut bytes, mut paged) = (0u64, 0u64);
            cursor = state.ready.sweep_step(
                at,
                SWEEP_STEP,
                |m| match m.expires_at {
                    Some(at) if at < now => true,
                    Some(at) => {
                        next_expiry = next_expiry.min(at);
                        false
                    }
                    None => false,
                },
                |ready| {
                    bytes += ready.body_len();
                    paged += u64::from(ready.paged);
                    if dead_lettering || ready.store_id != 0 {
                        to_discard.push(ready);
                    } else {
                        garbage.push(ready.message);
                    }
                },
            );
            let removed = garbage.len() + to_discard.len();
            expired += removed;
            state.next_expiry = state.next_expiry.min(next_expiry);
            // Every removed message carried an expiry.
            state.expiring -= removed;
            state.ready_bytes -= bytes;
            let activity = state.active();
            activity.stats.paged_out -= paged;
            activity.stats.expired += garbage.len() as u64;
            // The expired messages are freed by the next enqueues, a few each, on the
            // publishing thread: freeing hundreds of thousands of messages here, on another
            // thread, made every free contend with the publisher's allocations in the same
            // malloc arena and halved the publish rate of a large queue with mixed TTLs. The
            // next pass frees whatever is left.
            activity.expired_garbage.append(&mut garbage);
            for ready in to_discard {
                self.discard_ready(&mut state, ready, DeathReason::Expired);
            }
            if cursor.is_some() {
                // Publishers and consumers get the queue between steps: a pass over millions
                // of messages holds the lock for a step at a time, not for the whole pass.
                self.finish(state);
                state = self.state.lock();
                if state.deleted {
                    break;
                }
            }
        }
        self.finish(state);
        drop(leftover);
        expired
    }
}
