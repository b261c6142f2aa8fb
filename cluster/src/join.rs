//! `join_cluster`: moving a standalone (or blank) node into another cluster.
//!
//! A node asked to join writes a [`JoinMarker`] naming the target into its `data_dir` and
//! restarts. At start-up a node that finds the marker wipes its own data (its metadata
//! log, definitions, messages, quorum and stream data), takes the target as its only seed
//! and joins it as a blank node does, never forming a cluster of its own
//! ([`crate::metadata::MetadataConfig::join_only`]); the marker is removed once the node is
//! a member. A crash in between finds the marker again and starts over, which is safe: the
//! node's own data is already gone.
//!
//! `reset` is the same without a target: the node leaves its cluster (through the leader),
//! writes a [`ResetMarker`] and restarts; the next start empties `data_dir` and goes on
//! as a blank node with its configured seeds.
//!
//! Before anything is written, [`probe`] checks that the target can be reached with this
//! node's secret (and certificate) and is a member of a cluster, so a mistyped name or a
//! missing secret is reported while the node still has its data.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use tokio::sync::watch;

use crate::codec::LinkKind;
use crate::metadata::methods;
use crate::transport::{Transport, TransportConfig};

/// The marker's file name inside `data_dir`.
pub const MARKER_FILE: &str = "join_cluster.json";

/// A pending `join_cluster`: the node to join and where it listens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JoinMarker {
    /// The target's node name, `warren@HOST`.
    pub node: String,
    /// The target's cluster address, `HOST:PORT`.
    pub address: String,
}

impl JoinMarker {
    /// The marker's path in `data_dir`.
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(MARKER_FILE)
    }

    /// Reads the marker of `data_dir`: `Ok(None)` when there is none.
    pub fn read(data_dir: &Path) -> std::io::Result<Option<JoinMarker>> {
        match std::fs::read(Self::path(data_dir)) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Writes the marker into `data_dir` durably (written to a temporary file, fsynced,
    /// renamed, and the directory fsynced), so a restart right after finds it whole.
    pub fn write(&self, data_dir: &Path) -> std::io::Result<()> {
        use std::io::Write;
        let path = Self::path(data_dir);
        let temporary = data_dir.join(format!("{MARKER_FILE}.tmp"));
        let bytes = serde_json::to_vec(self)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &path)?;
        std::fs::File::open(data_dir)?.sync_all()
    }

    /// Removes the marker of `data_dir` (none is fine).
    pub fn remove(data_dir: &Path) -> std::io::Result<()> {
        match std::fs::remove_file(Self::path(data_dir)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }
}

/// The marker's file name of a pending `reset`.
pub const RESET_MARKER_FILE: &str = "reset_pending";

/// A pending `reset`: the node left its cluster; the next start empties `data_dir`.
pub struct ResetMarker;

impl ResetMarker {
    /// The marker's path in `data_dir`.
    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(RESET_MARKER_FILE)
    }

    /// Whether `data_dir` has one.
    pub fn exists(data_dir: &Path) -> bool {
        Self::path(data_dir).exists()
    }

    /// Writes the marker durably (the file and the directory fsynced).
    pub fn write(data_dir: &Path) -> std::io::Result<()> {
        std::fs::File::create(Self::path(data_dir))?.sync_all()?;
        std::fs::File::open(data_dir)?.sync_all()
    }

    /// Removes the marker (none is fine).
    pub fn remove(data_dir: &Path) -> std::io::Result<()> {
        match std::fs::remove_file(Self::path(data_dir)) {
            Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }
}

/// What the target answered to [`probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeAnswer {
    /// The target's cluster id.
    pub cluster_id: String,
    /// The leader it knows, if any.
    pub leader: Option<String>,
}

/// Why [`probe`] found the target unfit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeError {
    /// No authenticated link within the time given (wrong address, node down, another
    /// secret or certificate): the transport's last reason.
    Unreachable(String),
    /// It answers but is not a member of any cluster yet.
    NotMember,
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Unreachable(why) => f.write_str(why),
            ProbeError::NotMember => f.write_str("it is not a member of a cluster"),
        }
    }
}

/// Dials `target` at `address` with a transport of its own that has no cluster id (as a
/// blank node's), so this node's current cluster id does not get it refused, and asks
/// whether the target is a member. Waits at most `limit` for the link.
pub async fn probe(
    config: TransportConfig,
    target: &str,
    address: &str,
    limit: Duration,
) -> Result<ProbeAnswer, ProbeError> {
    let (stop, stopped) = watch::channel(false);
    let transport = Transport::new(config, Arc::new(RwLock::new(String::new())), stopped);
    transport.add_seed(target, address);
    let deadline = Instant::now() + limit;
    let outcome = loop {
        let answer = transport
            .call(
                target,
                LinkKind::Control,
                methods::INFO,
                Bytes::new(),
                Duration::from_millis(500),
            )
            .await;
        match answer {
            Ok(body) => {
                let info: Json = serde_json::from_slice(&body).unwrap_or(Json::Null);
                if info.get("member").and_then(Json::as_bool) != Some(true) {
                    break Err(ProbeError::NotMember);
                }
                break Ok(ProbeAnswer {
                    cluster_id: info
                        .get("cluster_id")
                        .and_then(Json::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    leader: info
                        .get("leader")
                        .and_then(Json::as_str)
                        .map(str::to_string),
                });
            }
            Err(error) if Instant::now() >= deadline => {
                break Err(ProbeError::Unreachable(error.to_string()))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let _ = stop.send(true);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_written_read_back_and_removed() {
        let dir = std::env::temp_dir().join(format!("warren-join-marker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creates the directory");
        assert_eq!(JoinMarker::read(&dir).expect("reads"), None);
        let marker = JoinMarker {
            node: "warren@127.0.0.1".into(),
            address: "127.0.0.1:25672".into(),
        };
        marker.write(&dir).expect("writes");
        assert_eq!(JoinMarker::read(&dir).expect("reads"), Some(marker));
        JoinMarker::remove(&dir).expect("removes");
        JoinMarker::remove(&dir).expect("removing twice is fine");
        assert_eq!(JoinMarker::read(&dir).expect("reads"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
