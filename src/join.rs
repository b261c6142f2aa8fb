//! `join_cluster` and `reset` in the server (docs/clustering.md, "Moving a node into a
//! cluster"): the checks made while the node still has its data, the marker, the restart,
//! and at the next start the reset (everything in `data_dir` but the secret goes) and, for
//! a join, the join.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use warren_cluster::join::{probe, JoinMarker, ProbeError, ResetMarker};
use warren_cluster::metadata::MetadataStore;
use warren_cluster::transport::TransportConfig;
use warren_config::{NodeAddress, Settings};
use warren_management::{JoinError, JoinOutcome};

use crate::StartError;

/// How long `join_cluster` waits for an authenticated link to the target.
const PROBE_LIMIT: Duration = Duration::from_secs(5);
/// How long the node waits after answering before it restarts, so the answer is written.
const RESTART_DELAY: Duration = Duration::from_millis(300);

/// What a running node needs to carry out `join_cluster`.
pub struct JoinContext {
    /// The node's `data_dir`, where the marker goes.
    pub data_dir: PathBuf,
    /// The transport settings (name, secret, TLS) the probe dials with.
    pub transport: TransportConfig,
    /// Told once the marker is written: the process restarts
    /// ([`crate::Server::restart_requested`]).
    pub restart: Arc<Notify>,
}

impl JoinContext {
    /// Checks, writes the marker and schedules the restart (see the module doc).
    pub(crate) async fn join(
        &self,
        metadata: &MetadataStore,
        target: &str,
    ) -> Result<JoinOutcome, JoinError> {
        let target = NodeAddress::parse(target).map_err(JoinError::BadTarget)?;
        let me = metadata.node().to_string();
        if target.name == me {
            return Err(JoinError::BadTarget(format!(
                "{me} cannot join itself: name a member of the cluster to join"
            )));
        }
        let others: Vec<String> = metadata
            .members()
            .into_iter()
            .map(|member| member.name)
            .filter(|name| *name != me)
            .collect();
        if others.contains(&target.name) {
            return Ok(JoinOutcome::AlreadyMember);
        }
        if !others.is_empty() {
            return Err(JoinError::AlreadyClustered {
                node: me,
                members: others,
            });
        }
        let answer = probe(
            self.transport.clone(),
            &target.name,
            &target.socket_addr_string(),
            PROBE_LIMIT,
        )
        .await
        .map_err(|error| match error {
            ProbeError::Unreachable(reason) => JoinError::Unreachable {
                node: target.name.clone(),
                reason,
            },
            ProbeError::NotMember => JoinError::TargetNotMember(target.name.clone()),
        })?;
        let marker = JoinMarker {
            node: target.name.clone(),
            address: target.socket_addr_string(),
        };
        marker
            .write(&self.data_dir)
            .map_err(|e| JoinError::Storage(format!("{}: {e}", self.data_dir.display())))?;
        tracing::warn!(
            node = %me,
            target = %target.name,
            cluster_id = %answer.cluster_id,
            "join_cluster: restarting to reset this node and join the cluster"
        );
        self.restart_soon();
        Ok(JoinOutcome::Restarting { node: target.name })
    }

    /// `reset`: leaves the cluster through the leader when there are other members (a
    /// node they already forgot is fine), writes the reset marker and schedules the
    /// restart; the next start empties `data_dir`.
    pub(crate) async fn reset(&self, metadata: &MetadataStore) -> Result<(), JoinError> {
        let me = metadata.node().to_string();
        let others = metadata.members().iter().any(|member| member.name != me);
        if others {
            if let Err(reason) = metadata.forget(&me).await {
                if !reason.contains("is not a member") {
                    return Err(JoinError::LeaveFailed { node: me, reason });
                }
            }
        }
        ResetMarker::write(&self.data_dir)
            .map_err(|e| JoinError::Storage(format!("{}: {e}", self.data_dir.display())))?;
        tracing::warn!(node = %me, left_cluster = others, "reset: restarting to empty this node's data");
        self.restart_soon();
        Ok(())
    }

    /// Restarts the process once the answer had time to go out.
    fn restart_soon(&self) {
        let restart = Arc::clone(&self.restart);
        tokio::spawn(async move {
            tokio::time::sleep(RESTART_DELAY).await;
            restart.notify_one();
        });
    }
}

/// At start-up: when `data_dir` holds a join marker, empties `data_dir` (all but the
/// marker and the secret file), and makes the marker's target the only seed. Returns the
/// marker, or `None` for an ordinary start.
pub(crate) fn reset_for_pending_join(
    settings: &mut Settings,
) -> Result<Option<JoinMarker>, StartError> {
    let data_dir = settings.data_dir.clone();
    let secret = settings
        .cluster
        .secret_file
        .clone()
        .unwrap_or_else(|| data_dir.join(crate::cluster::SECRET_FILE));
    if ResetMarker::exists(&data_dir) {
        // The marker goes last, so a crash half-way resets again.
        wipe(&data_dir, &[ResetMarker::path(&data_dir), secret.clone()])
            .and_then(|()| ResetMarker::remove(&data_dir).map_err(|e| e.to_string()))
            .map_err(|e| StartError::Storage(format!("reset: cannot empty {e}")))?;
        tracing::warn!("reset: this node's data was emptied; it starts blank");
        return Ok(None);
    }
    let marker = JoinMarker::read(&data_dir).map_err(|e| {
        StartError::Storage(format!(
            "cannot read {}: {e}",
            JoinMarker::path(&data_dir).display()
        ))
    })?;
    let Some(marker) = marker else {
        return Ok(None);
    };
    if !settings.cluster.enabled() {
        return Err(StartError::Cluster(format!(
            "{} asks this node to join {}, but clustering is not configured \
             (cluster.listeners.tcp.default); configure it or remove the file",
            JoinMarker::path(&data_dir).display(),
            marker.node
        )));
    }
    wipe(&data_dir, &[JoinMarker::path(&data_dir), secret])
        .map_err(|e| StartError::Storage(format!("join_cluster: cannot reset {e}")))?;
    let target = NodeAddress::parse(&format!("{}:{}", marker.node, port_of(&marker.address)))
        .map_err(|e| StartError::Cluster(format!("join_cluster marker: {e}")))?;
    // The marker's address wins (a host name in the node name may resolve elsewhere).
    let target = NodeAddress {
        host: host_of(&marker.address).unwrap_or(target.host),
        ..target
    };
    settings.cluster.seeds = vec![("join_cluster".to_string(), target)];
    tracing::warn!(
        target = %marker.node,
        "join_cluster: this node's data was reset; joining the cluster"
    );
    Ok(Some(marker))
}

/// Removes the marker once the node is a member of the target's cluster.
pub(crate) async fn finish_join(
    metadata: Arc<MetadataStore>,
    data_dir: PathBuf,
    marker: JoinMarker,
) {
    loop {
        if metadata.is_member() && !metadata.cluster_id().is_empty() {
            match JoinMarker::remove(&data_dir) {
                Ok(()) => tracing::info!(
                    node = %metadata.node(),
                    via = %marker.node,
                    "join_cluster: joined the cluster"
                ),
                Err(error) => tracing::warn!(%error, "join_cluster: cannot remove the marker"),
            }
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Removes every entry of `dir` but `keep`.
fn wipe(dir: &Path, keep: &[PathBuf]) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = entry.path();
        if keep.contains(&path) {
            continue;
        }
        let removed = match entry.file_type() {
            Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
            _ => std::fs::remove_file(&path),
        };
        removed.map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The port of `HOST:PORT` (25672 when it has none).
fn port_of(address: &str) -> u16 {
    address
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or(warren_config::CLUSTER_PORT)
}

/// The host of `HOST:PORT` (brackets of an IPv6 host removed).
fn host_of(address: &str) -> Option<String> {
    let (host, _) = address.rsplit_once(':')?;
    Some(host.trim_matches(|c| c == '[' || c == ']').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_join_empties_the_data_dir_but_the_secret_and_sets_the_only_seed() {
        let dir = std::env::temp_dir().join(format!("warren-join-reset-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("metadata")).expect("creates");
        std::fs::create_dir_all(dir.join("msg_store")).expect("creates");
        std::fs::write(dir.join("metadata/raft.log"), b"log").expect("writes");
        std::fs::write(dir.join("definitions.json"), b"{}").expect("writes");
        std::fs::write(dir.join("cluster.secret"), b"secret").expect("writes");
        let mut settings = Settings {
            data_dir: dir.clone(),
            ..Settings::default()
        };
        settings.cluster.listener = Some(warren_config::ListenAddr::new("127.0.0.4", 4000));
        assert!(reset_for_pending_join(&mut settings)
            .expect("no marker is fine")
            .is_none());
        assert!(dir.join("definitions.json").exists(), "nothing wiped");
        JoinMarker {
            node: "warren@127.0.0.1".into(),
            address: "127.0.0.1:4000".into(),
        }
        .write(&dir)
        .expect("writes the marker");
        let marker = reset_for_pending_join(&mut settings)
            .expect("resets")
            .expect("the marker");
        assert_eq!(marker.node, "warren@127.0.0.1");
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .expect("lists")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["cluster.secret", "join_cluster.json"]);
        let seeds: Vec<String> = settings
            .cluster
            .seed_nodes()
            .map(|n| format!("{} {}", n.name, n.socket_addr_string()))
            .collect();
        assert_eq!(seeds, ["warren@127.0.0.1 127.0.0.1:4000"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
