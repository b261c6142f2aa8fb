//! MQTT client identifiers across the cluster (MQTT-3.1.4-2, as RabbitMQ does it across its
//! nodes): a client connecting on one node with an identifier a connection of another node
//! holds makes that node close its connection first. The connecting node asks every other
//! running node ([`Forwarding::take_over_elsewhere`]); each answers once its connection
//! ended (its persistent session stored away, its clean session's queues dropped), or at
//! once when it holds none. The MQTT listener does the closing ([`ClientTakeover`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::codec::{self, Reply, Request};
use super::Forwarding;

/// Closes this node's MQTT connection holding a client identifier, for a connection with
/// the same identifier on another node. Installed by the MQTT listener with
/// [`crate::Broker::set_client_takeover`].
pub trait ClientTakeover: Send + Sync {
    /// Closes the connection holding `client_id` in `vhost`, if any (publishing its will
    /// when `send_will`); resolves once it ended (its clean session's queues dropped) with
    /// the persistent session this node kept for the client, encoded, which it gives up:
    /// the caller's connection resumes it.
    fn take_over(&self, vhost: &str, client_id: &str, send_will: bool) -> SessionFuture;
}

/// What [`ClientTakeover::take_over`] resolves to: the persistent session, encoded.
pub type SessionFuture = Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send>>;

/// How long a node waits for its peers to close a connection it takes over.
pub const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(5);

impl Forwarding {
    /// Whether this node has running peers to ask about client identifiers.
    pub fn has_peers(&self) -> bool {
        !self.link.peers().is_empty()
    }

    /// Asks every other running node to close its MQTT connection holding `client_id` in
    /// `vhost` (a client connecting here takes it over), all at once, and waits until they
    /// did or [`TAKEOVER_TIMEOUT`] passed. Resolves with the persistent session a node
    /// held for the client (encoded by the MQTT listener), which that node gave up.
    pub async fn take_over_elsewhere(
        self: Arc<Self>,
        vhost: String,
        client_id: String,
        send_will: bool,
    ) -> Option<Vec<u8>> {
        let body = codec::encode_request(&Request::TakeOver {
            vhost,
            client_id,
            send_will,
        });
        let calls = self
            .link
            .peers()
            .into_iter()
            .filter(|peer| peer != self.link.local() && self.link.is_up(peer))
            .map(|peer| {
                let call = self.link.call(&peer, body.clone(), TAKEOVER_TIMEOUT);
                async move {
                    match call.await.map(|reply| codec::decode_reply(&reply)) {
                        Ok(Ok(Reply::Session(session))) => return session,
                        Ok(Ok(Reply::Error(_, text))) => {
                            tracing::debug!(%peer, %text, "an MQTT takeover was refused");
                        }
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => {
                            tracing::debug!(%peer, error = %error.0, "a damaged MQTT takeover answer");
                        }
                        Err(error) => {
                            tracing::debug!(%peer, %error, "an MQTT takeover request failed");
                        }
                    }
                    None
                }
            });
        // One node at most held the client (a second only after a race of two connects):
        // the first session found is the one resumed.
        futures_util::future::join_all(calls)
            .await
            .into_iter()
            .flatten()
            .next()
    }

    /// Serves another node's [`Request::TakeOver`]: closes this node's connection holding
    /// the client identifier now, and answers once it ended, with the persistent session
    /// this node held for the client.
    pub(super) fn serve_takeover(
        &self,
        vhost: &str,
        client_id: &str,
        send_will: bool,
    ) -> Pin<Box<dyn Future<Output = Reply> + Send>> {
        let handler = self
            .broker
            .upgrade()
            .and_then(|broker| broker.client_takeover().cloned());
        match handler {
            Some(handler) => {
                let session = handler.take_over(vhost, client_id, send_will);
                Box::pin(async move { Reply::Session(session.await) })
            }
            None => Box::pin(std::future::ready(Reply::Session(None))),
        }
    }
}
