//! What of a persistent MQTT 5 session outlives the broker process beyond its queues: its
//! shared subscription group memberships and its delayed will. Both are session records in
//! the retained store's log ([`RetainedStore::session_put`]), opaque to the core; this file
//! encodes them and, at boot, [`recover`] brings them back.
//!
//! - A membership (`shared:$share/GROUP/filter`: granted QoS, session expiry interval) is
//!   put when a persistent session joins a group and again when its connection ends (with
//!   the expiry it ended with), and removed when the session leaves the group. At boot each
//!   session with memberships is stored in the registry as it would be after a disconnect:
//!   a member of its groups (so the group's queue is not deleted while it is away), resumed
//!   with them when the client comes back with clean start 0, and expired after its
//!   session expiry interval, counted from the boot, as its own queues' `x-expires` is.
//! - A delayed will (`will`: when it is due in Unix milliseconds, the user it is
//!   published as, the will as an MQTT 5 CONNECT carrying it) is put when a connection
//!   ends with a will delay, also when the broker stops (the session is not over, so the
//!   will waits, MQTT 5 section 3.1.2.5), and removed when it is published or the client
//!   came back first. At boot each one is scheduled for its due time (at once if it passed
//!   while the broker was down).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use warren_core::retained::SessionRecord;

use super::registry::{ClientKey, StoredSession};
use super::{MqttContext, SESSION_RECOVERED};
use crate::codec::{Connect, LastWill, Packet, ProtocolLevel, QoS};

/// The prefix of a membership record's name; the filter follows.
const SHARED_PREFIX: &str = "shared:";
/// The name of a delayed will's record.
pub(super) const WILL_RECORD: &str = "will";

/// The record name of a membership of `filter` (`$share/GROUP/filter`).
pub(super) fn shared_record_name(filter: &str) -> String {
    format!("{SHARED_PREFIX}{filter}")
}

/// A membership record's value: granted QoS, then the session expiry interval (u32 LE).
pub(super) fn shared_record_value(qos: QoS, session_expiry: u32) -> [u8; 5] {
    let expiry = session_expiry.to_le_bytes();
    [qos.as_u8(), expiry[0], expiry[1], expiry[2], expiry[3]]
}

fn decode_shared(value: &[u8]) -> Option<(QoS, u32)> {
    let [qos, a, b, c, d] = value else {
        return None;
    };
    Some((QoS::from_u8(*qos)?, u32::from_le_bytes([*a, *b, *c, *d])))
}

/// Now, in Unix milliseconds.
fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// A delayed will's record value: due time (u64 LE Unix ms), user (u32 LE length and
/// UTF-8), then an MQTT 5 CONNECT of `client_id` carrying the will, as the codec writes it.
pub(super) fn will_record_value(
    delay: Duration,
    user: &str,
    client_id: &str,
    will: &LastWill,
) -> Option<Vec<u8>> {
    let due = now_millis().saturating_add(delay.as_millis() as u64);
    let connect = Packet::Connect(Connect {
        protocol: ProtocolLevel::V5,
        keep_alive: 0,
        client_id: client_id.to_string(),
        clean_session: false,
        last_will: Some(will.clone()),
        username: None,
        password: None,
        properties: None,
    });
    let mut packet = BytesMut::new();
    crate::codec::encode(&connect, &mut packet).ok()?;
    let mut out = Vec::with_capacity(12 + user.len() + packet.len());
    out.extend_from_slice(&due.to_le_bytes());
    out.extend_from_slice(&(user.len() as u32).to_le_bytes());
    out.extend_from_slice(user.as_bytes());
    out.extend_from_slice(&packet);
    Some(out)
}

/// A decoded delayed will record.
struct DelayedWill {
    due_millis: u64,
    user: String,
    will: LastWill,
}

fn decode_will(value: &[u8]) -> Option<DelayedWill> {
    let due_millis = u64::from_le_bytes(value.get(..8)?.try_into().ok()?);
    let length = u32::from_le_bytes(value.get(8..12)?.try_into().ok()?) as usize;
    let user = std::str::from_utf8(value.get(12..12 + length)?).ok()?;
    let mut packet = BytesMut::from(value.get(12 + length..)?);
    match crate::codec::decode(&mut packet, usize::MAX).ok()?? {
        Packet::Connect(connect) if packet.is_empty() => Some(DelayedWill {
            due_millis,
            user: user.to_string(),
            will: connect.last_will?,
        }),
        _ => None,
    }
}

/// A session with memberships found at boot: its key, its shared subscriptions, its
/// session expiry interval.
type RecoveredSession = (ClientKey, Vec<(String, QoS)>, u32);

/// Brings back, at boot, the persistent sessions' shared subscription memberships and
/// delayed wills the retained store's log kept (see the module doc). Call once, before the
/// listeners accept connections.
pub fn recover(context: &Arc<MqttContext>) {
    let mut sessions: Vec<RecoveredSession> = Vec::new();
    let mut wills = 0usize;
    for SessionRecord {
        vhost,
        client_id,
        name,
        value,
    } in context.retained.session_records()
    {
        let Some(vhost_state) = context.broker.vhost(&vhost) else {
            // The vhost is gone, and the session with it.
            context.retained.forget_session(&vhost, &client_id);
            continue;
        };
        if let Some(filter) = name.strip_prefix(SHARED_PREFIX) {
            let Some((qos, expiry)) = decode_shared(&value) else {
                tracing::warn!(%client_id, %name, "unreadable MQTT session record skipped");
                continue;
            };
            let key = (vhost.clone(), client_id.clone());
            context.registry.join_group(
                (
                    vhost.clone(),
                    match super::shared::parse_shared(filter) {
                        Some(Ok((group, inner))) => super::shared::shared_queue_name(group, inner),
                        _ => continue,
                    },
                ),
                &client_id,
            );
            match sessions
                .iter_mut()
                .find(|(existing, _, _)| *existing == key)
            {
                Some((_, shared, _)) => shared.push((filter.to_string(), qos)),
                None => sessions.push((key, vec![(filter.to_string(), qos)], expiry)),
            }
        } else if name == WILL_RECORD {
            let Some(delayed) = decode_will(&value) else {
                tracing::warn!(%client_id, "unreadable MQTT delayed will skipped");
                context
                    .retained
                    .session_remove(&vhost, &client_id, WILL_RECORD);
                continue;
            };
            let delay = Duration::from_millis(delayed.due_millis.saturating_sub(now_millis()));
            let connected = super::Connected::for_will(vhost_state, delayed.user, client_id);
            super::v5_session::publish_will_later(
                context,
                SESSION_RECOVERED,
                connected,
                delay,
                delayed.will,
            );
            wills += 1;
        }
    }
    for (key, shared, expiry) in &sessions {
        if let Some(vhost) = context.broker.vhost(&key.0) {
            if *expiry != super::v5_session::SESSION_NEVER_EXPIRES {
                super::shared::expire_session_later(
                    context,
                    vhost,
                    key.clone(),
                    SESSION_RECOVERED,
                    *expiry,
                );
            }
        }
        context.registry.store_session(
            key.clone(),
            StoredSession {
                shared: shared.clone(),
                stored_by: SESSION_RECOVERED,
                recovered: true,
                ..StoredSession::default()
            },
        );
    }
    if !sessions.is_empty() || wills > 0 {
        tracing::info!(
            sessions = sessions.len(),
            delayed_wills = wills,
            "MQTT shared subscription memberships and delayed wills recovered"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Properties;
    use bytes::Bytes;

    #[test]
    fn a_will_record_reads_back_with_its_properties() {
        let will = LastWill {
            topic: "devices/pump-7/status".into(),
            message: Bytes::from_static(b"offline"),
            qos: QoS::AtLeastOnce,
            retain: true,
            properties: Some(Box::new(Properties {
                will_delay_interval: Some(30),
                content_type: Some("text/plain".into()),
                ..Properties::default()
            })),
        };
        let value =
            will_record_value(Duration::from_secs(30), "guest", "pump-7", &will).expect("encodes");
        let back = decode_will(&value).expect("decodes");
        assert_eq!(back.user, "guest");
        assert_eq!(back.will, will);
        let left = back.due_millis.saturating_sub(now_millis());
        assert!((29_000..=30_000).contains(&left), "{left}");
        assert!(decode_will(&value[..value.len() - 1]).is_none());
    }

    #[test]
    fn a_membership_record_reads_back() {
        let value = shared_record_value(QoS::ExactlyOnce, 3600);
        assert_eq!(decode_shared(&value), Some((QoS::ExactlyOnce, 3600)));
        assert_eq!(decode_shared(&[3, 0, 0, 0, 0]), None);
        assert_eq!(decode_shared(&[1]), None);
    }
}
