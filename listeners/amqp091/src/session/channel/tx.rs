//! Transactions: tx.select, tx.commit and tx.rollback.

use std::sync::Arc;

use warren_core::message::Message;
use warren_core::vhost::VHost;

use super::{not_a_client_method, Mode};
use crate::codec::Method;
use crate::reply::{self, AmqpError};
use crate::session::{settle_grouped, Session};

/// A published message held until tx.commit.
pub(super) struct TxPublish {
    pub(super) mandatory: bool,
    pub(super) message: Arc<Message>,
}

impl Session {
    /// Handles one method of the tx class.
    pub(super) fn tx_method(
        &mut self,
        ch: u16,
        vhost: &Arc<VHost>,
        method: Method,
    ) -> Result<(), AmqpError> {
        match method {
            Method::TxSelect => {
                let channel = self.channel(ch);
                if channel.mode == Mode::Confirm {
                    return Err(AmqpError::new(
                        reply::PRECONDITION_FAILED,
                        "cannot switch from confirm to tx mode",
                    ));
                }
                channel.mode = Mode::Transactional;
                self.report_channel(ch);
                self.outbox.send_method(ch, &Method::TxSelectOk);
            }
            Method::TxCommit => self.tx_commit(ch, vhost)?,
            Method::TxRollback => {
                let channel = self.channel(ch);
                if channel.mode != Mode::Transactional {
                    return Err(AmqpError::new(
                        reply::PRECONDITION_FAILED,
                        "channel is not transactional",
                    ));
                }
                channel.tx_publishes.clear();
                let settlements = std::mem::take(&mut channel.tx_settlements);
                for (unacked, _) in settlements {
                    self.outbox.restore_unacked(ch, unacked);
                }
                self.outbox.send_method(ch, &Method::TxRollbackOk);
            }
            method => return Err(not_a_client_method(&method)),
        }
        Ok(())
    }

    fn tx_commit(&mut self, ch: u16, vhost: &Arc<VHost>) -> Result<(), AmqpError> {
        let channel = self.channel(ch);
        if channel.mode != Mode::Transactional {
            return Err(AmqpError::new(
                reply::PRECONDITION_FAILED,
                "channel is not transactional",
            ));
        }
        let publishes = std::mem::take(&mut channel.tx_publishes);
        let settlements = std::mem::take(&mut channel.tx_settlements);
        // The store sequence number the last persistent message of the transaction got.
        let mut durable_seq = 0;
        for publish in publishes {
            let outcome = self.route_and_enqueue(ch, vhost, publish.mandatory, publish.message)?;
            durable_seq = durable_seq.max(outcome.durable_seq().unwrap_or(0));
        }
        for (taken, settlement) in settlements {
            settle_grouped(taken, settlement);
        }
        self.kick_starved();
        // As with confirms: commit-ok says the messages are safe, so persistent messages in
        // durable queues must be on disk first (the store group-commits them).
        let on_disk = self
            .broker
            .message_store()
            .map_or(u64::MAX, |s| s.durable_seq());
        let channel = self.channel(ch);
        if durable_seq > on_disk || !channel.commit_waits.is_empty() {
            channel.commit_waits.push_back(durable_seq);
            if !self.pending_commits.contains(&ch) {
                self.pending_commits.push(ch);
            }
        } else {
            self.outbox.send_method(ch, &Method::TxCommitOk);
        }
        Ok(())
    }
}
