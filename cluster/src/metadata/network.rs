//! openraft's RPCs over the transport: votes and appends on the control link, snapshots on
//! the bulk link, JSON bodies.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{node_name_of, TypeConfig};
use crate::codec::LinkKind;
use crate::transport::{CallError, Transport};

/// Methods of the transport's requests that carry Raft RPCs.
pub mod methods {
    /// AppendEntries.
    pub const APPEND: u16 = 1;
    /// RequestVote.
    pub const VOTE: u16 = 2;
    /// InstallSnapshot (a chunk).
    pub const SNAPSHOT: u16 = 3;
}

/// Makes one client per peer.
pub struct Network {
    /// The transport.
    pub transport: Arc<Transport>,
}

/// One peer's RPC client.
pub struct PeerClient {
    transport: Arc<Transport>,
    target: u64,
    name: String,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: u64, node: &BasicNode) -> PeerClient {
        PeerClient {
            transport: Arc::clone(&self.transport),
            target,
            name: node_name_of(node).to_string(),
        }
    }
}

impl PeerClient {
    async fn send<Request, Response, E>(
        &self,
        link: LinkKind,
        method: u16,
        request: &Request,
        timeout: Duration,
    ) -> Result<Response, RPCError<u64, BasicNode, RaftError<u64, E>>>
    where
        Request: Serialize,
        Response: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let body =
            serde_json::to_vec(request).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let answer = self
            .transport
            .call(&self.name, link, method, Bytes::from(body), timeout)
            .await
            .map_err(|error| match error {
                CallError::Remote(_) => RPCError::Network(NetworkError::new(&error)),
                CallError::Unreachable(_) | CallError::Timeout => {
                    RPCError::Unreachable(Unreachable::new(&error))
                }
            })?;
        let result: Result<Response, RaftError<u64, E>> = serde_json::from_slice(&answer)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|error| RPCError::RemoteError(RemoteError::new(self.target, error)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.send(LinkKind::Control, methods::APPEND, &rpc, option.hard_ttl())
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.send(LinkKind::Bulk, methods::SNAPSHOT, &rpc, option.hard_ttl())
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        option: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.send(LinkKind::Control, methods::VOTE, &rpc, option.hard_ttl())
            .await
    }
}
