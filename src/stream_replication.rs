//! Streams replicated on the cluster (docs/streams.md, "Replication"): the thin runtime
//! around `warren_core::stream_log::replication`'s rules, over warren-cluster's transport.
//!
//! - **Placement**: the home node of a stream without a placement commits one through the
//!   metadata store (itself leading epoch 1, plus up to `x-initial-cluster-size - 1` other
//!   running nodes, 3 members by default).
//! - **Shipping**: each replica runs a follower task that asks the leader for the chunks
//!   after its own durable tail ([`FETCH_METHOD`], on the bulk link); the request is also
//!   its acknowledgement, from which the leader confirms what a majority has. The leader
//!   answers at once when it has chunks past the tail, or waits up to [`LONG_POLL`] for one.
//!   The same loop catches a lagging or restarted replica up.
//! - **Failover**: when the failure detector calls a stream's leader down, the metadata
//!   leader asks the other members for their tails ([`TAIL_METHOD`], which also stops them
//!   following the old epoch), and commits the member with the longest log as leader of the
//!   next epoch, once a majority of the members answered. A member whose log goes past the
//!   new epoch's start with older chunks cuts them off before it follows.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::sync::watch;
use warren_cluster::codec::LinkKind;
use warren_cluster::detector::NodeStatus;
use warren_cluster::metadata::MetadataStore;
use warren_cluster::transport::Transport;
use warren_core::stream_log::replication::{choose_leader, choose_members, truncation_point};
use warren_core::stream_log::{Placement, ReplicaTail, Role, StreamLog};
use warren_core::Broker;

/// A replica's fetch: "send me the chunks after my tail" (and "I have this much").
pub const FETCH_METHOD: u16 = 130;
/// The metadata leader's question to a member before a failover: "how long is your log?"
pub const TAIL_METHOD: u16 = 131;
/// How long the leader holds a fetch that has nothing to send yet.
const LONG_POLL: Duration = Duration::from_millis(1000);
/// How long a replica waits for a fetch's answer.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the metadata leader waits for a member's tail.
const TAIL_TIMEOUT: Duration = Duration::from_secs(1);
/// How often placements, followers and failovers are checked.
const TICK: Duration = Duration::from_millis(200);
/// About how many bytes of chunks one fetch answer carries.
const FETCH_BYTES: usize = 1 << 20;
/// How long after a placement or failover attempt another may be made for the stream.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Members of a stream declared without `x-initial-cluster-size`.
const DEFAULT_CLUSTER_SIZE: usize = 3;

type StreamKey = (String, String);

/// The node's side of stream replication.
pub struct StreamReplication {
    broker: Arc<Broker>,
    metadata: Arc<MetadataStore>,
    transport: Arc<Transport>,
    /// Follower tasks by stream: the epoch each follows.
    followers: Mutex<HashMap<StreamKey, (u64, tokio::task::JoinHandle<()>)>>,
    /// The newest epoch each stream's member was told is over (by [`TAIL_METHOD`]):
    /// its follower stops fetching from that epoch's leader.
    fenced: Mutex<HashMap<StreamKey, u64>>,
    /// When each stream's placement or failover was last tried: a try that failed (no
    /// majority) is not repeated on every tick, since each can wait for the change timeout.
    tried: Mutex<HashMap<StreamKey, std::time::Instant>>,
}

impl StreamReplication {
    /// The node's stream replication over `transport`.
    pub fn new(
        broker: Arc<Broker>,
        metadata: Arc<MetadataStore>,
        transport: Arc<Transport>,
    ) -> Arc<StreamReplication> {
        Arc::new(StreamReplication {
            broker,
            metadata,
            transport,
            followers: Mutex::default(),
            fenced: Mutex::default(),
            tried: Mutex::default(),
        })
    }

    /// Whether a placement or failover of `key` may be tried now (at most once per
    /// [`RETRY_AFTER`]).
    fn due(&self, key: &StreamKey) -> bool {
        let now = std::time::Instant::now();
        let mut tried = self.tried.lock();
        match tried.get(key) {
            Some(last) if now.duration_since(*last) < RETRY_AFTER => false,
            _ => {
                tried.insert(key.clone(), now);
                true
            }
        }
    }

    fn local(&self) -> &str {
        self.transport.node()
    }

    fn log(&self, vhost: &str, name: &str) -> Option<Arc<StreamLog>> {
        self.broker.vhost(vhost)?.streams().get(name)
    }

    /// Serves a peer's request with one of this module's methods; `None` for other methods.
    pub fn serve(
        self: &Arc<Self>,
        from: String,
        method: u16,
        body: Bytes,
    ) -> Option<warren_cluster::transport::HandlerFuture> {
        let me = Arc::clone(self);
        match method {
            FETCH_METHOD => Some(Box::pin(async move { me.serve_fetch(&from, body).await })),
            TAIL_METHOD => Some(Box::pin(async move { me.serve_tail(body) })),
            _ => None,
        }
    }

    async fn serve_fetch(&self, from: &str, body: Bytes) -> Result<Bytes, String> {
        let request = FetchRequest::decode(body).ok_or("a malformed stream fetch")?;
        let log = self
            .log(&request.vhost, &request.name)
            .ok_or_else(|| format!("no stream '{}' here", request.name))?;
        if log.role()
            != (Role::Leader {
                epoch: request.epoch,
            })
        {
            return Err(format!(
                "this node does not lead stream '{}' in epoch {}",
                request.name, request.epoch
            ));
        }
        log.replica_written(from, request.tail.next_offset);
        if let Some(first) = log.restart_point(request.tail) {
            return Ok(encode_answer(log.committed_offset(), Some(first), &[]));
        }
        let mut changed = log.subscribe();
        let deadline = tokio::time::Instant::now() + LONG_POLL;
        loop {
            let chunks = log
                .read_for_replica(request.tail, FETCH_BYTES)
                .map_err(|e| e.to_string())?;
            // The commit offset moving is news too: the replica's readers wait for it.
            let committed = log.committed_offset();
            if !chunks.is_empty() || log.is_deleted() || committed > request.known_committed {
                return Ok(encode_answer(committed, None, &chunks));
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Ok(encode_answer(committed, None, &[])),
            }
        }
    }

    fn serve_tail(&self, body: Bytes) -> Result<Bytes, String> {
        let request = FetchRequest::decode(body).ok_or("a malformed stream tail request")?;
        let log = self
            .log(&request.vhost, &request.name)
            .ok_or_else(|| format!("no stream '{}' here", request.name))?;
        // Stop following the epoch being replaced: the tail answered stays the tail.
        let key = (request.vhost.clone(), request.name.clone());
        let mut fenced = self.fenced.lock();
        let known = fenced.entry(key).or_insert(0);
        *known = (*known).max(request.epoch);
        drop(fenced);
        let mut out = BytesMut::with_capacity(8);
        out.put_u64(log.replica_tail().next_offset);
        Ok(out.freeze())
    }

    /// Checks every stream of every vhost until `shutdown`: placements to commit,
    /// followers to start or stop, leaders to replace.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.check().await,
                _ = shutdown.changed() => break,
            }
        }
        for (_, (_, task)) in self.followers.lock().drain() {
            task.abort();
        }
    }

    async fn check(self: &Arc<Self>) {
        if !self.metadata.is_member() {
            return;
        }
        self.refresh_endpoints();
        let mut seen = std::collections::HashSet::new();
        for vhost in self.broker.vhost_names() {
            let Some(host) = self.broker.vhost(&vhost) else {
                continue;
            };
            for log in host.streams().list() {
                let key = (vhost.clone(), log.name().to_owned());
                seen.insert(key.clone());
                match log.placement() {
                    None => self.place(&vhost, &log).await,
                    Some(placement) => {
                        self.follow(&key, &log, &placement);
                        self.fail_over(&vhost, &log, &placement).await;
                    }
                }
            }
        }
        self.tried.lock().retain(|key, _| seen.contains(key));
        self.fenced.lock().retain(|key, _| seen.contains(key));
        self.followers.lock().retain(|key, (_, task)| {
            let keep = seen.contains(key) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
    }

    /// Where stream protocol clients reach each running peer: its node name's host (the
    /// address peers and clients use) and the port of its `stream` listener, from the
    /// `/api/nodes` entries peers send.
    fn refresh_endpoints(&self) {
        let running: Vec<String> = self
            .metadata
            .members()
            .into_iter()
            .filter(|member| member.running)
            .map(|member| member.name)
            .collect();
        let mut endpoints = HashMap::new();
        for (node, info) in self.metadata.peer_info() {
            if !running.contains(&node) {
                continue;
            }
            let host = node.split_once('@').map_or(node.as_str(), |(_, host)| host);
            let port = info["listeners"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|listener| listener["protocol"] == "stream")
                .and_then(|listener| listener["port"].as_u64())
                .and_then(|port| u16::try_from(port).ok());
            if let Some(port) = port {
                endpoints.insert(node.clone(), (host.to_owned(), port));
            }
        }
        self.broker.set_stream_endpoints(endpoints);
    }

    /// The home node commits a new stream's first placement.
    async fn place(&self, vhost: &str, log: &Arc<StreamLog>) {
        if self.metadata.home_of(vhost, log.name()).as_deref() != Some(self.local())
            || !self.due(&(vhost.to_owned(), log.name().to_owned()))
        {
            return;
        }
        let size = log
            .settings()
            .arguments
            .iter()
            .find(|(key, _)| key == "x-initial-cluster-size")
            .and_then(|(_, value)| value.parse::<usize>().ok())
            .filter(|size| *size > 0)
            .unwrap_or(DEFAULT_CLUSTER_SIZE);
        let running: Vec<String> = self
            .metadata
            .members()
            .into_iter()
            .filter(|member| member.running)
            .map(|member| member.name)
            .collect();
        let members = choose_members(self.local(), &running, size);
        let placement = Placement::initial(members, self.local(), log.replica_tail().next_offset);
        if let Err(error) = self.broker.try_place_stream(vhost, log.name(), placement) {
            tracing::warn!(stream = %log.name(), %error, "cannot commit the stream's placement yet");
        }
    }

    /// Starts (or restarts, for a new epoch) this replica's follower task.
    fn follow(self: &Arc<Self>, key: &StreamKey, log: &Arc<StreamLog>, placement: &Placement) {
        let Role::Replica { epoch } = log.role() else {
            return;
        };
        let mut followers = self.followers.lock();
        if let Some((following, task)) = followers.get(key) {
            if *following == epoch && !task.is_finished() {
                return;
            }
            task.abort();
        }
        let me = Arc::clone(self);
        let task = tokio::spawn(me.follower(key.clone(), Arc::clone(log), placement.clone()));
        followers.insert(key.clone(), (epoch, task));
    }

    async fn follower(self: Arc<Self>, key: StreamKey, log: Arc<StreamLog>, placement: Placement) {
        let epoch = placement.epoch;
        let tail = log.replica_tail();
        if let Some(point) = truncation_point(tail.next_offset, tail.last_epoch, &placement.epochs)
        {
            let (sender, receiver) = tokio::sync::oneshot::channel();
            log.truncate(
                point,
                Box::new(move |result| {
                    let _ = sender.send(result);
                }),
            );
            match receiver.await {
                Ok(Ok(_)) => {}
                outcome => {
                    tracing::error!(stream = %key.1, ?outcome, "cannot cut the stream's tail off");
                    return;
                }
            }
        }
        tracing::info!(stream = %key.1, leader = %placement.leader, epoch, "following the stream's leader");
        let mut known_committed = 0;
        loop {
            if log.is_deleted() || log.role() != (Role::Replica { epoch }) {
                return;
            }
            if self
                .fenced
                .lock()
                .get(&key)
                .is_some_and(|fenced| *fenced >= epoch)
            {
                tokio::time::sleep(TICK).await;
                continue;
            }
            let request = FetchRequest {
                vhost: key.0.clone(),
                name: key.1.clone(),
                epoch,
                tail: log.replica_tail(),
                known_committed,
            };
            let answer = self
                .transport
                .call(
                    &placement.leader,
                    LinkKind::Bulk,
                    FETCH_METHOD,
                    request.encode(),
                    FETCH_TIMEOUT,
                )
                .await;
            let (committed, restart, chunks) = match answer.map(decode_answer) {
                Ok(Some(answer)) => answer,
                Ok(None) => {
                    tracing::warn!(stream = %key.1, "a malformed fetch answer");
                    tokio::time::sleep(TICK).await;
                    continue;
                }
                Err(error) => {
                    tracing::debug!(stream = %key.1, %error, "stream fetch failed");
                    tokio::time::sleep(TICK).await;
                    continue;
                }
            };
            known_committed = known_committed.max(committed);
            if let Some(first) = restart {
                let (sender, receiver) = tokio::sync::oneshot::channel();
                log.restart_at(
                    first,
                    Box::new(move |result| {
                        let _ = sender.send(result);
                    }),
                );
                if !matches!(receiver.await, Ok(Ok(_))) {
                    tracing::error!(stream = %key.1, first, "cannot start the stream's copy again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                continue;
            }
            if chunks.is_empty() {
                log.leader_committed(committed);
                continue;
            }
            let (sender, receiver) = tokio::sync::oneshot::channel();
            log.append_replicated(
                chunks,
                Box::new(move |result| {
                    let _ = sender.send(result);
                }),
            );
            match receiver.await {
                Ok(Ok(_)) => log.leader_committed(committed),
                outcome => {
                    tracing::warn!(stream = %key.1, ?outcome, "cannot append the leader's chunks");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// On the metadata leader: replaces a stream leader the failure detector calls down.
    async fn fail_over(&self, vhost: &str, log: &Arc<StreamLog>, placement: &Placement) {
        if placement.leader == self.local()
            || !self.metadata.is_leader()
            || self.transport.detector().status(&placement.leader) != NodeStatus::Down
            || !self.due(&(vhost.to_owned(), log.name().to_owned()))
        {
            return;
        }
        let request = FetchRequest {
            vhost: vhost.to_owned(),
            name: log.name().to_owned(),
            epoch: placement.epoch,
            tail: log.replica_tail(),
            known_committed: 0,
        };
        let mut answers = Vec::new();
        for member in placement.replicas() {
            if member == self.local() {
                let _ = self.serve_tail(request.encode());
                answers.push((member.to_owned(), log.replica_tail().next_offset));
                continue;
            }
            if self.transport.detector().status(member) == NodeStatus::Down {
                continue;
            }
            let answer = self
                .transport
                .call(
                    member,
                    LinkKind::Control,
                    TAIL_METHOD,
                    request.encode(),
                    TAIL_TIMEOUT,
                )
                .await;
            if let Ok(mut body) = answer {
                if body.len() == 8 {
                    answers.push((member.to_owned(), body.get_u64()));
                }
            }
        }
        let Some((leader, tail)) = choose_leader(placement, &answers) else {
            tracing::warn!(stream = %log.name(), down = %placement.leader, ?answers,
                "the stream's leader is down and no majority of its members answered");
            return;
        };
        let next = placement.next_epoch(&leader, tail);
        tracing::info!(stream = %log.name(), old = %placement.leader, new = %leader,
            epoch = next.epoch, tail, "the stream's leader is down: a new leader takes over");
        if let Err(error) = self.broker.try_place_stream(vhost, log.name(), next) {
            tracing::warn!(stream = %log.name(), %error, "cannot commit the stream's new leader");
        }
    }
}

/// A replica's fetch (and the metadata leader's tail request, which uses its names and
/// epoch).
struct FetchRequest {
    vhost: String,
    name: String,
    epoch: u64,
    tail: ReplicaTail,
    /// The leader's commit offset as the replica last heard it: a fetch is answered at
    /// once when it moved, even with no chunk to send.
    known_committed: u64,
}

impl FetchRequest {
    fn encode(&self) -> Bytes {
        let mut out = BytesMut::with_capacity(40 + self.vhost.len() + self.name.len());
        for text in [&self.vhost, &self.name] {
            out.put_u16(text.len() as u16);
            out.put_slice(text.as_bytes());
        }
        out.put_u64(self.epoch);
        out.put_u64(self.tail.next_offset);
        out.put_u64(self.tail.tail_zero_chunks);
        out.put_u64(self.tail.last_epoch);
        out.put_u64(self.known_committed);
        out.freeze()
    }

    fn decode(mut body: Bytes) -> Option<FetchRequest> {
        let text = |body: &mut Bytes| -> Option<String> {
            if body.remaining() < 2 {
                return None;
            }
            let length = usize::from(body.get_u16());
            if body.remaining() < length {
                return None;
            }
            String::from_utf8(body.split_to(length).to_vec()).ok()
        };
        let vhost = text(&mut body)?;
        let name = text(&mut body)?;
        if body.remaining() != 40 {
            return None;
        }
        Some(FetchRequest {
            vhost,
            name,
            epoch: body.get_u64(),
            tail: ReplicaTail {
                next_offset: body.get_u64(),
                tail_zero_chunks: body.get_u64(),
                last_epoch: body.get_u64(),
            },
            known_committed: body.get_u64(),
        })
    }
}

/// A fetch's answer: the leader's commit offset, where the replica must start its copy
/// again (`u64::MAX`: nowhere; else the leader's first offset, its retention having removed
/// the replica's tail), then each chunk with its length.
fn encode_answer(committed: u64, restart: Option<u64>, chunks: &[Bytes]) -> Bytes {
    let mut out = BytesMut::with_capacity(8 + chunks.iter().map(|c| c.len() + 4).sum::<usize>());
    out.put_u64(committed);
    out.put_u64(restart.unwrap_or(u64::MAX));
    for chunk in chunks {
        out.put_u32(chunk.len() as u32);
        out.put_slice(chunk);
    }
    out.freeze()
}

fn decode_answer(mut body: Bytes) -> Option<(u64, Option<u64>, Vec<Bytes>)> {
    if body.remaining() < 16 {
        return None;
    }
    let committed = body.get_u64();
    let restart = Some(body.get_u64()).filter(|at| *at != u64::MAX);
    let mut chunks = Vec::new();
    while body.has_remaining() {
        if body.remaining() < 4 {
            return None;
        }
        let length = body.get_u32() as usize;
        if body.remaining() < length {
            return None;
        }
        chunks.push(body.split_to(length));
    }
    Some((committed, restart, chunks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_requests_and_answers_survive_their_encoding() {
        let request = FetchRequest {
            vhost: "/".into(),
            name: "orders".into(),
            epoch: 3,
            tail: ReplicaTail {
                next_offset: 77,
                tail_zero_chunks: 2,
                last_epoch: 2,
            },
            known_committed: 70,
        };
        let decoded = FetchRequest::decode(request.encode()).expect("decodes");
        assert_eq!(
            (decoded.vhost.as_str(), decoded.name.as_str()),
            ("/", "orders")
        );
        assert_eq!((decoded.epoch, decoded.tail), (3, request.tail));
        assert_eq!(decoded.known_committed, 70);
        assert!(FetchRequest::decode(Bytes::from_static(b"\x00\x05ab")).is_none());
        let chunks = vec![Bytes::from_static(b"one"), Bytes::from_static(b"")];
        assert_eq!(
            decode_answer(encode_answer(9, None, &chunks)),
            Some((9, None, chunks))
        );
        assert_eq!(
            decode_answer(encode_answer(1, Some(40), &[])),
            Some((1, Some(40), vec![]))
        );
        assert_eq!(
            decode_answer(Bytes::from_static(
                b"\0\0\0\0\0\0\0\x01\xff\xff\xff\xff\xff\xff\xff\xff\0\0\0\x09ab"
            )),
            None
        );
    }

    proptest::proptest! {
        /// Whatever a peer sends, the decoders answer `None` or a value: never a panic.
        #[test]
        fn fetch_decoders_take_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = FetchRequest::decode(Bytes::from(bytes.clone()));
            let _ = decode_answer(Bytes::from(bytes));
        }

        /// Every request and answer comes back as it was encoded.
        #[test]
        fn fetch_encodings_round_trip(
            vhost in "[a-z/]{0,12}",
            name in "[a-z.]{0,12}",
            numbers in proptest::prelude::any::<[u64; 5]>(),
            committed in proptest::prelude::any::<u64>(),
            restart in proptest::option::of(0..u64::MAX),
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0..4),
        ) {
            let request = FetchRequest {
                vhost: vhost.clone(),
                name: name.clone(),
                epoch: numbers[0],
                tail: ReplicaTail {
                    next_offset: numbers[1],
                    tail_zero_chunks: numbers[2],
                    last_epoch: numbers[3],
                },
                known_committed: numbers[4],
            };
            let decoded = FetchRequest::decode(request.encode()).expect("decodes");
            proptest::prop_assert_eq!((decoded.vhost, decoded.name), (vhost, name));
            proptest::prop_assert_eq!((decoded.epoch, decoded.tail, decoded.known_committed), (request.epoch, request.tail, request.known_committed));
            let chunks: Vec<Bytes> = chunks.into_iter().map(Bytes::from).collect();
            proptest::prop_assert_eq!(decode_answer(encode_answer(committed, restart, &chunks)), Some((committed, restart, chunks)));
        }
    }
}
