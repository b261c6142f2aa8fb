//! Work done once per batch of frames and when channels or the connection end: coalesced
//! publisher confirms and tx.commit-oks, server-cancelled consumers, released deliveries.

use warren_core::queue::Settlement;

use crate::codec::Method;

use super::{settle_grouped, Phase, Session};

impl Session {
    /// Work done once per batch of frames read together: coalesced publisher confirms,
    /// consumers the server cancelled, deliveries orphaned by a closed channel.
    pub fn end_of_batch(&mut self) {
        self.flush_confirms();
        self.flush_commits();
        if let Some(registration) = &self.registration {
            registration.set_channels(self.channels.len() as u32);
        }
        for (channel_id, tag) in self.outbox.take_server_cancelled() {
            if let Some(channel) = self.channels.get_mut(&channel_id) {
                channel.forget_consumer(&tag);
            }
            self.report_channel(channel_id);
        }
        let orphaned = self.outbox.take_orphaned();
        settle_grouped(orphaned, Settlement::Release);
    }

    pub(super) fn flush_confirms(&mut self) {
        if self.pending_confirms.is_empty() {
            return;
        }
        let store = self.broker.message_store().cloned();
        let durable = store.as_ref().map_or(0, |s| s.durable_seq());
        let failed = |seq: u64| store.as_ref().is_some_and(|s| s.take_failed(seq));
        let mut methods = Vec::new();
        let mut waiting = Vec::new();
        for channel_id in std::mem::take(&mut self.pending_confirms) {
            if let Some(channel) = self.channels.get_mut(&channel_id) {
                let before = channel.confirmed_seq();
                if channel.take_confirms(durable, &failed, &mut methods) {
                    waiting.push(channel_id);
                }
                let confirmed = channel.confirmed_seq() - before;
                if confirmed > 0 {
                    if let Some(vhost) = &self.vhost {
                        vhost.counters().record_confirmed(confirmed);
                    }
                }
                for method in methods.drain(..) {
                    self.outbox.send_method(channel_id, &method);
                }
            }
        }
        self.pending_confirms = waiting;
    }

    /// Sends the tx.commit-oks whose persistent messages the store now has on disk, in
    /// commit order per channel.
    pub(super) fn flush_commits(&mut self) {
        if self.pending_commits.is_empty() {
            return;
        }
        let durable = self
            .broker
            .message_store()
            .map_or(u64::MAX, |s| s.durable_seq());
        let mut waiting = Vec::new();
        for channel_id in std::mem::take(&mut self.pending_commits) {
            let Some(channel) = self.channels.get_mut(&channel_id) else {
                continue;
            };
            let mut ready = 0;
            while channel
                .commit_waits
                .front()
                .is_some_and(|&seq| seq <= durable)
            {
                channel.commit_waits.pop_front();
                ready += 1;
            }
            if !channel.commit_waits.is_empty() {
                waiting.push(channel_id);
            }
            for _ in 0..ready {
                self.outbox.send_method(channel_id, &Method::TxCommitOk);
            }
        }
        self.pending_commits = waiting;
    }

    /// Whether publisher confirms or tx.commit-oks wait for the message store; the driver
    /// then calls [`Session::end_of_batch`] again when the store's durable sequence number
    /// moves.
    pub fn awaits_durability(&self) -> bool {
        !self.pending_confirms.is_empty() || !self.pending_commits.is_empty()
    }

    /// Releases a channel's consumers and requeues its unacked deliveries.
    pub(super) fn release_channel(&mut self, channel_id: u16) {
        let Some(channel) = self.channels.get_mut(&channel_id) else {
            return;
        };
        let consumers = channel.take_consumers();
        if let Some(vhost) = &self.vhost {
            for consumer in consumers {
                vhost.cancel_instance(&consumer.queue, consumer.consumer_id);
            }
        }
        let unacked = self.outbox.close_channel(channel_id);
        settle_grouped(unacked, Settlement::Requeue);
    }

    pub(super) fn release_all(&mut self) {
        // Detach every consumer before requeueing anything: otherwise a message requeued by
        // one channel is delivered to a consumer on another channel of this connection that
        // is about to go, and goes out after the client sent connection.close.
        if let Some(vhost) = &self.vhost {
            for channel in self.channels.values_mut() {
                for consumer in channel.take_consumers() {
                    vhost.cancel_instance(&consumer.queue, consumer.consumer_id);
                }
            }
        }
        let ids: Vec<u16> = self.channels.keys().copied().collect();
        for id in ids {
            self.release_channel(id);
        }
        self.channels.clear();
        if let Some(vhost) = &self.vhost {
            vhost.remove_exclusive_queues(self.connection_id, &self.exclusive_queues);
        }
        self.exclusive_queues.clear();
    }

    /// The socket is gone: release every channel, consumer and exclusive queue.
    pub fn terminate(&mut self) {
        if self.phase != Phase::Closed {
            self.release_all();
            self.phase = Phase::Closed;
        }
        self.registration = None;
        self.outbox.close();
        let orphaned = self.outbox.take_orphaned();
        settle_grouped(orphaned, Settlement::Release);
    }
}
