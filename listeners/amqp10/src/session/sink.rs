//! The seam between the core's queues and a connection: each outgoing link is a
//! [`DeliverySink`] whose credit is the AMQP 1.0 link credit.
//!
//! The queue calls [`LinkSink::reserve`] and [`LinkSink::deliver`] with its lock held, from
//! whichever thread enqueued or settled. Neither touches the connection state: a delivery is
//! put in the connection's [`Mailbox`] and the connection's task turns it into transfer
//! frames (assigning delivery ids under the session's flow control). Lock order: queue, then
//! sink credit, then mailbox; the connection never holds the mailbox while calling a queue.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;
use warren_core::consumer::{Delivery, DeliverySink};

/// Something the core handed to one of the connection's links.
pub enum MailboxEntry {
    /// A delivery for the outgoing link `link_id` on session `channel`.
    Delivery {
        /// The session's channel.
        channel: u16,
        /// The connection-wide id of the link.
        link_id: u64,
        /// The delivery.
        delivery: Delivery,
    },
    /// A drain of the outgoing link can be answered: the queue handed over what it had, or
    /// the credit is spent.
    Drained {
        /// The session's channel.
        channel: u16,
        /// The connection-wide id of the link.
        link_id: u64,
    },
    /// The queue behind the link was deleted.
    Cancelled {
        /// The session's channel.
        channel: u16,
        /// The connection-wide id of the link.
        link_id: u64,
    },
}

/// Deliveries waiting for the connection task.
#[derive(Default)]
pub struct Mailbox {
    entries: Mutex<Vec<MailboxEntry>>,
    /// Notified when an entry is added.
    pub notify: Notify,
}

impl Mailbox {
    /// Takes every waiting entry.
    pub fn take(&self) -> Vec<MailboxEntry> {
        std::mem::take(&mut *self.entries.lock())
    }

    fn push(&self, entry: MailboxEntry) {
        let was_empty = {
            let mut entries = self.entries.lock();
            entries.push(entry);
            entries.len() == 1
        };
        if was_empty {
            self.notify.notify_one();
        }
    }
}

/// Credit state of an outgoing link, as the AMQP 1.0 sender keeps it.
#[derive(Debug, Default, Clone, Copy)]
pub struct Credit {
    /// Transfers the receiver still allows.
    pub link_credit: u32,
    /// The sender's delivery-count: deliveries reserved so far (reserved deliveries are
    /// counted as sent; their transfers follow in order).
    pub delivery_count: u32,
    /// Set once the link is detached: nothing more is reserved.
    pub closed: bool,
    /// A drain waits for the queue to hand over what it has (a queue delivering from a
    /// task of its own: a stream): [`MailboxEntry::Drained`] is posted once it has, or once
    /// the credit is spent.
    pub draining: bool,
}

/// An outgoing link as the core sees it.
pub struct LinkSink {
    channel: u16,
    link_id: u64,
    mailbox: Arc<Mailbox>,
    credit: Mutex<Credit>,
}

impl LinkSink {
    /// A sink for link `link_id` on session `channel`, with no credit yet.
    pub fn new(channel: u16, link_id: u64, mailbox: Arc<Mailbox>) -> Arc<LinkSink> {
        Arc::new(LinkSink {
            channel,
            link_id,
            mailbox,
            credit: Mutex::new(Credit::default()),
        })
    }

    /// Applies a flow from the receiver: link-credit = its delivery-count + its link-credit
    /// minus ours (AMQP 1.0 2.6.7). Returns the new state.
    pub fn grant(&self, receiver_delivery_count: u32, receiver_link_credit: u32) -> Credit {
        let mut credit = self.credit.lock();
        Self::apply_grant(&mut credit, receiver_delivery_count, receiver_link_credit);
        *credit
    }

    fn apply_grant(credit: &mut Credit, receiver_delivery_count: u32, receiver_link_credit: u32) {
        credit.link_credit = receiver_delivery_count
            .wrapping_add(receiver_link_credit)
            .wrapping_sub(credit.delivery_count);
        // A receiver that counts ahead of us would wrap to an enormous credit: clamp.
        if credit.link_credit > receiver_link_credit {
            credit.link_credit = receiver_link_credit;
        }
    }

    /// Applies a flow asking for drain on a link whose queue delivers from a task of its
    /// own: as [`LinkSink::grant`], and the drain is answered once
    /// [`MailboxEntry::Drained`] arrives. Returns whether it must wait (false: no credit,
    /// answer now).
    pub fn grant_draining(&self, receiver_delivery_count: u32, receiver_link_credit: u32) -> bool {
        // One lock: the queue's task sees the credit and the drain together.
        let mut credit = self.credit.lock();
        Self::apply_grant(&mut credit, receiver_delivery_count, receiver_link_credit);
        credit.draining = credit.link_credit > 0;
        credit.draining
    }

    /// Drain: spends the remaining credit by advancing the delivery count. Returns the state.
    pub fn drain(&self) -> Credit {
        let mut credit = self.credit.lock();
        credit.delivery_count = credit.delivery_count.wrapping_add(credit.link_credit);
        credit.link_credit = 0;
        credit.draining = false;
        *credit
    }

    fn post_drained(&self) {
        self.mailbox.push(MailboxEntry::Drained {
            channel: self.channel,
            link_id: self.link_id,
        });
    }

    /// The current credit state.
    pub fn credit(&self) -> Credit {
        *self.credit.lock()
    }

    /// Stops reservations (the link is going away).
    pub fn close(&self) {
        self.credit.lock().closed = true;
    }
}

impl DeliverySink for LinkSink {
    fn reserve(&self) -> bool {
        let mut credit = self.credit.lock();
        if credit.closed || credit.link_credit == 0 {
            return false;
        }
        credit.link_credit -= 1;
        credit.delivery_count = credit.delivery_count.wrapping_add(1);
        true
    }

    fn deliver(&self, delivery: Delivery) {
        self.mailbox.push(MailboxEntry::Delivery {
            channel: self.channel,
            link_id: self.link_id,
            delivery,
        });
        // The last delivery a drain allowed: after it in the mailbox, the drain's answer.
        let spent = {
            let mut credit = self.credit.lock();
            let spent = credit.draining && credit.link_credit == 0;
            if spent {
                credit.draining = false;
            }
            spent
        };
        if spent {
            self.post_drained();
        }
    }

    fn idle(&self) {
        let waiting = std::mem::take(&mut self.credit.lock().draining);
        if waiting {
            self.post_drained();
        }
    }

    fn cancelled(&self) {
        self.mailbox.push(MailboxEntry::Cancelled {
            channel: self.channel,
            link_id: self.link_id,
        });
    }

    fn credited(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_follows_the_receivers_flow_and_drain_spends_it() {
        let sink = LinkSink::new(0, 1, Arc::new(Mailbox::default()));
        assert!(!sink.reserve());
        sink.grant(0, 2);
        assert!(sink.reserve());
        assert!(sink.reserve());
        assert!(!sink.reserve());
        // The receiver saw 1 of the 2 transfers and asks for 3 more from its count.
        let state = sink.grant(1, 3);
        assert_eq!(state.link_credit, 2);
        let drained = sink.drain();
        assert_eq!((drained.link_credit, drained.delivery_count), (0, 4));
        sink.grant(4, 1);
        sink.close();
        assert!(!sink.reserve());
    }
}
