//! PUBREC and PUBCOMP from the client: the second half of a QoS 2 delivery to it.
//!
//! PUBREC means the client has the message: it is settled with its queue and PUBREL goes
//! out; the packet identifier stays in use until PUBCOMP. A persistent session (clean
//! session 0) also records the identifier in the retained store's log, which keeps it
//! across a broker restart, so a reconnecting client gets its PUBREL again
//! (MQTT-4.4.0-1). Its message is settled, and its PUBREL sent, only once that record is on
//! disk: a crash before then leaves the message in its queue (redelivered with DUP), a
//! crash after leaves the PUBREL owed, and never is the message gone with nothing owed.

use warren_core::queue::Settlement;

use super::{Control, Session};
use crate::codec::{Packet, PubRel};
use crate::outbox::Received;

impl Session {
    /// PUBREC: the client received QoS 2 delivery `packet_id`.
    pub(super) fn delivery_received(&mut self, packet_id: u16) -> Control {
        let pubrel = Packet::PubRel(PubRel::new(packet_id));
        let settle = match self.outbox.received(packet_id) {
            Received::Released(settle) => settle,
            Received::Again => {
                // Behind a first PUBREL still waiting for the disk, if there is one.
                self.acknowledge_publish(None, 0, pubrel);
                return Control::Continue;
            }
        };
        let persistent = self
            .connected
            .as_deref()
            .filter(|connected| !connected.clean_session);
        match persistent {
            Some(connected) => {
                let retained = &self.context.retained;
                retained.outbound_qos2_released(
                    connected.vhost.name(),
                    &connected.client_id,
                    packet_id,
                );
                let retained_seq = retained.last_change();
                self.send_when_durable(None, retained_seq, settle, pubrel);
            }
            None => {
                if let Some((queue, id)) = settle {
                    queue.settle(&[id], Settlement::Ack);
                }
                self.outbox.send(&pubrel);
            }
        }
        Control::Continue
    }

    /// PUBCOMP: QoS 2 delivery `packet_id` is complete; its identifier is free again.
    pub(super) fn delivery_completed(&mut self, packet_id: u16) -> Control {
        if self.outbox.complete(packet_id) {
            if let Some(connected) = self
                .connected
                .as_deref()
                .filter(|connected| !connected.clean_session)
            {
                // Not waited for: if a crash loses this record, the PUBREL sent again after
                // the restart only gets another PUBCOMP (MQTT-4.3.3-2 on the client's side).
                self.context.retained.outbound_qos2_completed(
                    connected.vhost.name(),
                    &connected.client_id,
                    packet_id,
                );
            }
        }
        self.kick_starved();
        Control::Continue
    }
}
