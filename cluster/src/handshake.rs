//! The HMAC challenge both sides of a new link answer: each proves it holds the cluster
//! secret by an HMAC-SHA256 over both node names, both cluster ids, both nonces and the link
//! kind, keyed by the secret. Neither side sends the secret, and a proof is good for one
//! connection only (both nonces are fresh).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::codec::{LinkKind, NONCE_LENGTH};
use crate::secret::Secret;

/// What both sides of one handshake know; the proofs are computed over it.
#[derive(Debug, Clone)]
pub struct Transcript<'a> {
    /// The dialer's node name.
    pub client_node: &'a str,
    /// The listener's node name.
    pub server_node: &'a str,
    /// The dialer's cluster id (empty when it has none).
    pub client_cluster: &'a str,
    /// The listener's cluster id.
    pub server_cluster: &'a str,
    /// The dialer's nonce.
    pub client_nonce: &'a [u8; NONCE_LENGTH],
    /// The listener's nonce.
    pub server_nonce: &'a [u8; NONCE_LENGTH],
    /// Which link.
    pub link: LinkKind,
}

/// Which side a proof is for, so one side's proof is never valid as the other's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The dialer.
    Client,
    /// The listener.
    Server,
}

impl Transcript<'_> {
    /// The proof `role` sends.
    pub fn proof(&self, secret: &Secret, role: Role) -> [u8; NONCE_LENGTH] {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(secret.bytes()).expect("HMAC takes any key");
        mac.update(b"warren-cluster-v1");
        mac.update(match role {
            Role::Client => b"C",
            Role::Server => b"S",
        });
        for part in [
            self.client_node,
            self.server_node,
            self.client_cluster,
            self.server_cluster,
        ] {
            mac.update(&(part.len() as u32).to_be_bytes());
            mac.update(part.as_bytes());
        }
        mac.update(self.client_nonce);
        mac.update(self.server_nonce);
        mac.update(self.link.name().as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Whether `proof` is `role`'s proof, compared in constant time.
    pub fn verify(&self, secret: &Secret, role: Role, proof: &[u8; NONCE_LENGTH]) -> bool {
        let expected = self.proof(secret, role);
        expected
            .iter()
            .zip(proof.iter())
            .fold(0u8, |difference, (a, b)| difference | (a ^ b))
            == 0
    }
}

/// Why two nodes of different clusters may not link, if they may not: both know a cluster
/// and the clusters differ.
pub fn cluster_mismatch(ours: &str, theirs: &str) -> Option<String> {
    (!ours.is_empty() && !theirs.is_empty() && ours != theirs)
        .then(|| format!("the peer belongs to cluster {theirs}, this node to cluster {ours}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_depend_on_secret_role_and_every_field() {
        let secret = Secret::from_bytes(b"one secret".to_vec());
        let other = Secret::from_bytes(b"another secret".to_vec());
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let transcript = Transcript {
            client_node: "warren@127.0.0.1",
            server_node: "warren@127.0.0.2",
            client_cluster: "",
            server_cluster: "c1",
            client_nonce: &a,
            server_nonce: &b,
            link: LinkKind::Control,
        };
        let proof = transcript.proof(&secret, Role::Client);
        assert!(transcript.verify(&secret, Role::Client, &proof));
        assert!(!transcript.verify(&secret, Role::Server, &proof));
        assert!(!transcript.verify(&other, Role::Client, &proof));
        let swapped = Transcript {
            client_nonce: &b,
            server_nonce: &a,
            ..transcript.clone()
        };
        assert!(!swapped.verify(&secret, Role::Client, &proof));
        let bulk = Transcript {
            link: LinkKind::Bulk,
            ..transcript
        };
        assert!(!bulk.verify(&secret, Role::Client, &proof));
    }

    #[test]
    fn only_two_known_and_different_clusters_mismatch() {
        assert!(cluster_mismatch("", "c1").is_none());
        assert!(cluster_mismatch("c1", "c1").is_none());
        assert!(cluster_mismatch("c1", "c2").is_some());
    }
}
