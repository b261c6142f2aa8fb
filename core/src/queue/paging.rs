//! A classic queue and the message store: linking a durable queue to it, restoring what it
//! kept after a restart, and paging bodies out beyond the in-memory limits and back in.

use super::*;

impl Queue {
    /// Keeps this queue's persistent messages in `store` from now on.
    pub(crate) fn link_store(&self, store: Arc<MessageStore>) {
        let name = QueueName {
            vhost: self.config.vhost.clone(),
            name: self.config.name.clone(),
        };
        let _ = self.store.set(Box::new(StoreLink { store, name }));
    }

    /// The store and this queue's name in it, for a durable queue of a broker with a store.
    pub fn store_name(&self) -> Option<(&Arc<MessageStore>, &QueueName)> {
        self.store.get().map(|link| (&link.store, &link.name))
    }

    /// Puts messages recovered from the store back, in order, before any client can reach
    /// the queue.
    pub fn restore(self: &Arc<Self>, messages: Vec<RecoveredMessage>) {
        let mut state = self.state.lock();
        let now = self.clock.now_ms();
        for recovered in messages {
            let ttl = match (state.limits.message_ttl, recovered.expiration_ms) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let id = state.next_message_id;
            state.next_message_id += 1;
            let (message, paged) = match recovered.message {
                Some(message) => (message, false),
                None => (paged_placeholder(recovered.priority), true),
            };
            let length = if paged {
                recovered.body_len
            } else {
                ReadyMessage::length_field(message.body.len())
            };
            let ready = ReadyMessage {
                id,
                message,
                redelivered: recovered.redelivered,
                expires_at: ttl.map(|ttl| now.saturating_add(ttl)),
                store_id: recovered.store_id,
                length,
                paged,
                // The store does not keep the count: it starts again after a restart.
                delivery_count: 0,
            };
            if ttl.is_some() {
                self.want_sweep();
            }
            let ready = self.page_out_if_over(&state, ready);
            state.push_ready(ready);
        }
        self.finish(state);
    }

    /// Beyond the store's per-queue limit of ready messages in memory, a stored message keeps
    /// only its index entry; the body is read back from disk when it is delivered.
    pub(super) fn page_out_if_over(&self, state: &QueueState, ready: ReadyMessage) -> ReadyMessage {
        let Some(link) = self.store.get() else {
            return ready;
        };
        let resident = state.ready.len() - state.paged_out() as usize;
        let over_bytes =
            state.resident_bytes + ready.message.body.len() as u64 > self.memory_limits.bytes();
        if ready.store_id == 0
            || ready.paged
            || (resident < link.store.queue_max_in_memory() && !over_bytes)
            || ready.message.body.len() > u32::MAX as usize
        {
            return ready;
        }
        link.store
            .hold_until_written(ready.store_id, &ready.message);
        ReadyMessage {
            paged: true,
            length: ready.message.body.len() as u32,
            message: paged_placeholder(ready.message.properties.priority),
            ..ready
        }
    }

    /// Up to `limit` ready messages from the head, in delivery order, without taking them.
    /// A paged-out body is read back from the store (outside the queue's lock).
    pub fn browse(&self, limit: usize) -> Vec<Arc<Message>> {
        let entries: Vec<ReadyMessage> = {
            let state = self.state.lock();
            state.ready.iter().take(limit).cloned().collect()
        };
        entries
            .iter()
            .filter_map(|ready| self.page_in(ready))
            .collect()
    }

    /// Up to `limit` ready messages starting `skip` messages after the head, in delivery
    /// order, without taking them: the management API's browse by position. Each comes with
    /// whether it was delivered before. Only the entries asked for are copied out of the
    /// lock; a paged-out body is read back from the store after it is released.
    pub fn peek(&self, skip: usize, limit: usize) -> Vec<(Arc<Message>, bool)> {
        let entries: Vec<ReadyMessage> = {
            let state = self.state.lock();
            state.ready.iter().skip(skip).take(limit).cloned().collect()
        };
        entries
            .iter()
            .filter_map(|ready| Some((self.page_in(ready)?, ready.redelivered)))
            .collect()
    }

    /// The message of a ready message, read back from the store if it was paged out. `None`
    /// (logged) if the store cannot give it back.
    pub(super) fn page_in(&self, ready: &ReadyMessage) -> Option<Arc<Message>> {
        if !ready.paged {
            return Some(Arc::clone(&ready.message));
        }
        let link = self.store.get()?;
        match link.store.read(ready.store_id) {
            Ok(message) => Some(message),
            Err(error) => {
                tracing::error!(
                    queue = %self.config.name,
                    vhost = %self.config.vhost,
                    %error,
                    "a paged-out message cannot be read back from the message store; it is dropped"
                );
                None
            }
        }
    }

    /// Discards a ready message: the body is read back only when it is dead-lettered.
    pub(super) fn discard_ready(
        &self,
        state: &mut QueueState,
        ready: ReadyMessage,
        reason: DeathReason,
    ) {
        let message = if ready.paged && state.limits.dead_letter_exchange.is_some() {
            self.page_in(&ready)
                .unwrap_or_else(|| Arc::clone(&ready.message))
        } else {
            Arc::clone(&ready.message)
        };
        self.discard(state, message, ready.store_id, reason);
    }

    /// Records in the store what left the queue and what was delivered; called with the
    /// queue lock released.
    pub(super) fn flush_store(&self, removed: Vec<u64>, delivered: Vec<u64>) {
        if let Some(link) = self.store.get() {
            link.store.mark_delivered(&link.name, &delivered);
            link.store.remove(&link.name, &removed);
        }
    }
}
