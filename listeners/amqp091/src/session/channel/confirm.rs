//! Publisher confirms: confirm.select, and the acks and nacks owed to a publisher, held back
//! for the message store when its messages must be on disk first.

use super::{Channel, Mode};
use crate::codec::Method;
use crate::reply::{self, AmqpError};
use crate::session::Session;

/// A confirm waiting for the message store (or a nack queued behind such confirms).
#[derive(Debug, Clone, Copy)]
pub(super) struct DurableWait {
    pub(super) publish_seq: u64,
    pub(super) store_seq: u64,
    pub(super) nack: bool,
}

impl Channel {
    /// The basic.ack covering every publish confirmed since the last one sent.
    /// Also returns how many publishes it confirms.
    /// The highest publish sequence number confirmed (acked or nacked) so far.
    pub(in crate::session) fn confirmed_seq(&self) -> u64 {
        self.confirmed_seq
    }

    pub(in crate::session) fn take_confirm(&mut self) -> Option<(Method, u64)> {
        if self.mode != Mode::Confirm || self.publish_seq == self.confirmed_seq {
            return None;
        }
        let confirmed = self.publish_seq - self.confirmed_seq;
        self.confirmed_seq = self.publish_seq;
        Some((
            Method::BasicAck {
                delivery_tag: self.publish_seq,
                multiple: confirmed > 1,
            },
            confirmed,
        ))
    }

    /// The confirms that can go now that the store has `durable` on disk: acks (coalesced
    /// with `multiple`) up to the first publish still waiting for the disk, and the nacks
    /// queued behind waiting publishes. Returns whether publishes are still unconfirmed.
    /// `failed` says whether the publish that waited for a store sequence number failed
    /// (a forwarded publish its queue's home node did not take): it is nacked.
    pub(in crate::session) fn take_confirms(
        &mut self,
        durable: u64,
        failed: &dyn Fn(u64) -> bool,
        out: &mut Vec<Method>,
    ) -> bool {
        if self.mode != Mode::Confirm {
            return false;
        }
        if self.durable_waits.is_empty() {
            out.extend(self.take_confirm().map(|(method, _)| method));
            return false;
        }
        loop {
            match self.durable_waits.front() {
                Some(wait) if wait.nack || wait.store_seq <= durable => {
                    let wait = *wait;
                    self.durable_waits.pop_front();
                    if wait.nack || failed(wait.store_seq) {
                        self.ack_up_to(wait.publish_seq - 1, out);
                        out.push(Method::BasicNack {
                            delivery_tag: wait.publish_seq,
                            multiple: false,
                            requeue: false,
                        });
                        self.confirmed_seq = wait.publish_seq;
                    }
                }
                Some(wait) => {
                    let limit = wait.publish_seq - 1;
                    self.ack_up_to(limit, out);
                    return true;
                }
                None => {
                    let limit = self.publish_seq;
                    self.ack_up_to(limit, out);
                    return false;
                }
            }
        }
    }

    fn ack_up_to(&mut self, limit: u64, out: &mut Vec<Method>) {
        if limit > self.confirmed_seq {
            out.push(Method::BasicAck {
                delivery_tag: limit,
                multiple: limit - self.confirmed_seq > 1,
            });
            self.confirmed_seq = limit;
        }
    }
}

impl Session {
    /// confirm.select: publishes on the channel are confirmed from now on.
    pub(super) fn confirm_select(&mut self, ch: u16, no_wait: bool) -> Result<(), AmqpError> {
        let channel = self.channel(ch);
        if channel.mode == Mode::Transactional {
            return Err(AmqpError::new(
                reply::PRECONDITION_FAILED,
                "cannot switch from tx to confirm mode",
            ));
        }
        channel.mode = Mode::Confirm;
        self.report_channel(ch);
        self.reply(ch, no_wait, Method::ConfirmSelectOk);
        Ok(())
    }
}
