//! The bytes of quorum-queue RPCs between nodes (sans-IO): openraft's AppendEntries,
//! RequestVote and InstallSnapshot with their answers, and a follower's commands forwarded to
//! the leader with the leader's replies. Little-endian, entries in the WAL's entry encoding
//! (`record::put_entry`), so a message body crosses the wire as it lies on disk, with no JSON.
//!
//! Every request starts with the group id. Decoders take untrusted bytes: they return `None`
//! on anything short or malformed and never panic.

use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{SnapshotMeta, StoredMembership, Vote};
use warren_core::quorum::codec::{decode_command, decode_reply, encode_command, encode_reply};
use warren_core::quorum::{Command, Reply};

use crate::record::{put_entry, put_membership, put_opt_log_id, Reader};
use crate::{GroupId, NodeId, TypeConfig};

/// Transport methods of quorum-queue traffic (the metadata store uses those below 100).
pub mod methods {
    /// AppendEntries of one group.
    pub const APPEND: u16 = 100;
    /// RequestVote of one group.
    pub const VOTE: u16 = 101;
    /// InstallSnapshot (one chunk) of one group.
    pub const SNAPSHOT: u16 = 102;
    /// Commands a member forwards to its group's leader, answered once applied.
    pub const FORWARD: u16 = 103;
    /// Whether the node asked leads the group: `[1]` or `[0]`.
    pub const LEADS: u16 = 104;
    /// The asked node's member of the group, as `quorum_status` shows it
    /// ([`super::encode_status`]).
    pub const STATUS: u16 = 105;
    /// A membership change or a leadership transfer, carried out by the group's leader
    /// ([`super::encode_change`]), answered with [`super::encode_change_answer`].
    pub const CHANGE: u16 = 106;
    /// The leader hands over: the asked member starts an election now.
    pub const ELECT: u16 = 107;
}

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_vote(out: &mut Vec<u8>, vote: &Vote<NodeId>) {
    put_u64(out, vote.leader_id.term);
    put_u64(out, vote.leader_id.node_id);
    out.push(u8::from(vote.committed));
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, bytes.len() as u32);
    out.extend_from_slice(bytes);
}

impl Reader<'_> {
    fn vote(&mut self) -> Option<Vote<NodeId>> {
        let term = self.u64()?;
        let node = self.u64()?;
        let mut vote = Vote::new(term, node);
        vote.committed = match self.u8()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        Some(vote)
    }

    fn flag(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    fn bytes(&mut self) -> Option<&[u8]> {
        let length = self.u32()? as usize;
        self.take(length)
    }

    fn finished<T>(&self, value: T) -> Option<T> {
        self.0.is_empty().then_some(value)
    }
}

/// The group a request is for, and the rest of its bytes.
pub fn split_group(body: &[u8]) -> Option<(GroupId, &[u8])> {
    let mut r = Reader(body);
    let group = r.u64()?;
    Some((group, r.rest()))
}

fn with_group(group: GroupId) -> Vec<u8> {
    group.to_le_bytes().to_vec()
}

/// AppendEntries for `group`.
pub fn encode_append(group: GroupId, rpc: &AppendEntriesRequest<TypeConfig>) -> Vec<u8> {
    let mut out = with_group(group);
    put_vote(&mut out, &rpc.vote);
    put_opt_log_id(&mut out, rpc.prev_log_id.as_ref());
    put_opt_log_id(&mut out, rpc.leader_commit.as_ref());
    put_u32(&mut out, rpc.entries.len() as u32);
    let mut entry = Vec::new();
    for each in &rpc.entries {
        entry.clear();
        put_entry(&mut entry, each);
        put_bytes(&mut out, &entry);
    }
    out
}

/// The request of [`encode_append`], after its group.
pub fn decode_append(bytes: &[u8]) -> Option<AppendEntriesRequest<TypeConfig>> {
    let mut r = Reader(bytes);
    let vote = r.vote()?;
    let prev_log_id = r.opt_log_id()?;
    let leader_commit = r.opt_log_id()?;
    let count = r.count(4)?;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let length = r.u32()? as usize;
        entries.push(r.entry(length)?);
    }
    r.finished(AppendEntriesRequest {
        vote,
        prev_log_id,
        entries,
        leader_commit,
    })
}

/// An AppendEntries answer.
pub fn encode_append_response(response: &AppendEntriesResponse<NodeId>) -> Vec<u8> {
    let mut out = Vec::new();
    match response {
        AppendEntriesResponse::Success => out.push(0),
        AppendEntriesResponse::PartialSuccess(matching) => {
            out.push(1);
            put_opt_log_id(&mut out, matching.as_ref());
        }
        AppendEntriesResponse::Conflict => out.push(2),
        AppendEntriesResponse::HigherVote(vote) => {
            out.push(3);
            put_vote(&mut out, vote);
        }
    }
    out
}

/// The answer of [`encode_append_response`].
pub fn decode_append_response(bytes: &[u8]) -> Option<AppendEntriesResponse<NodeId>> {
    let mut r = Reader(bytes);
    let response = match r.u8()? {
        0 => AppendEntriesResponse::Success,
        1 => AppendEntriesResponse::PartialSuccess(r.opt_log_id()?),
        2 => AppendEntriesResponse::Conflict,
        3 => AppendEntriesResponse::HigherVote(r.vote()?),
        _ => return None,
    };
    r.finished(response)
}

/// RequestVote for `group`.
pub fn encode_vote(group: GroupId, rpc: &VoteRequest<NodeId>) -> Vec<u8> {
    let mut out = with_group(group);
    put_vote(&mut out, &rpc.vote);
    put_opt_log_id(&mut out, rpc.last_log_id.as_ref());
    out
}

/// The request of [`encode_vote`], after its group.
pub fn decode_vote(bytes: &[u8]) -> Option<VoteRequest<NodeId>> {
    let mut r = Reader(bytes);
    let vote = r.vote()?;
    let last_log_id = r.opt_log_id()?;
    r.finished(VoteRequest { vote, last_log_id })
}

/// A RequestVote answer.
pub fn encode_vote_response(response: &VoteResponse<NodeId>) -> Vec<u8> {
    let mut out = Vec::new();
    put_vote(&mut out, &response.vote);
    out.push(u8::from(response.vote_granted));
    put_opt_log_id(&mut out, response.last_log_id.as_ref());
    out
}

/// The answer of [`encode_vote_response`].
pub fn decode_vote_response(bytes: &[u8]) -> Option<VoteResponse<NodeId>> {
    let mut r = Reader(bytes);
    let vote = r.vote()?;
    let vote_granted = r.flag()?;
    let last_log_id = r.opt_log_id()?;
    r.finished(VoteResponse {
        vote,
        vote_granted,
        last_log_id,
    })
}

/// One InstallSnapshot chunk for `group`.
pub fn encode_snapshot(group: GroupId, rpc: &InstallSnapshotRequest<TypeConfig>) -> Vec<u8> {
    let mut out = with_group(group);
    put_vote(&mut out, &rpc.vote);
    put_opt_log_id(&mut out, rpc.meta.last_log_id.as_ref());
    put_opt_log_id(&mut out, rpc.meta.last_membership.log_id().as_ref());
    put_membership(&mut out, rpc.meta.last_membership.membership());
    put_bytes(&mut out, rpc.meta.snapshot_id.as_bytes());
    put_u64(&mut out, rpc.offset);
    out.push(u8::from(rpc.done));
    out.extend_from_slice(&rpc.data);
    out
}

/// The chunk of [`encode_snapshot`], after its group.
pub fn decode_snapshot(bytes: &[u8]) -> Option<InstallSnapshotRequest<TypeConfig>> {
    let mut r = Reader(bytes);
    let vote = r.vote()?;
    let last_log_id = r.opt_log_id()?;
    let membership_log_id = r.opt_log_id()?;
    let membership = r.membership()?;
    let snapshot_id = String::from_utf8(r.bytes()?.to_vec()).ok()?;
    let offset = r.u64()?;
    let done = r.flag()?;
    let data = r.rest().to_vec();
    Some(InstallSnapshotRequest {
        vote,
        meta: SnapshotMeta {
            last_log_id,
            last_membership: StoredMembership::new(membership_log_id, membership),
            snapshot_id,
        },
        offset,
        data,
        done,
    })
}

/// An InstallSnapshot answer.
pub fn encode_snapshot_response(response: &InstallSnapshotResponse<NodeId>) -> Vec<u8> {
    let mut out = Vec::new();
    put_vote(&mut out, &response.vote);
    out
}

/// The answer of [`encode_snapshot_response`].
pub fn decode_snapshot_response(bytes: &[u8]) -> Option<InstallSnapshotResponse<NodeId>> {
    let mut r = Reader(bytes);
    let vote = r.vote()?;
    r.finished(InstallSnapshotResponse { vote })
}

/// Commands forwarded to `group`'s leader, in the order they are to be proposed.
pub fn encode_forward(group: GroupId, commands: &[Command]) -> Vec<u8> {
    let mut out = with_group(group);
    put_u32(&mut out, commands.len() as u32);
    let mut command = Vec::new();
    for each in commands {
        command.clear();
        encode_command(&mut command, each);
        put_bytes(&mut out, &command);
    }
    out
}

/// The commands of [`encode_forward`], after its group.
pub fn decode_forward(bytes: &[u8]) -> Option<Vec<Command>> {
    let mut r = Reader(bytes);
    let count = r.count(4)?;
    let mut commands = Vec::with_capacity(count);
    for _ in 0..count {
        commands.push(decode_command(r.bytes()?).ok()?);
    }
    r.finished(commands)
}

/// The leader's replies to forwarded commands, one per command: `None` when it was not
/// applied (the leader lost its leadership, or no majority answered in time).
pub fn encode_forward_response(replies: &[Option<Reply>]) -> Vec<u8> {
    let mut out = Vec::new();
    put_u32(&mut out, replies.len() as u32);
    let mut reply = Vec::new();
    for each in replies {
        match each {
            None => out.push(0),
            Some(each) => {
                out.push(1);
                reply.clear();
                encode_reply(&mut reply, each);
                put_bytes(&mut out, &reply);
            }
        }
    }
    out
}

/// The replies of [`encode_forward_response`].
pub fn decode_forward_response(bytes: &[u8]) -> Option<Vec<Option<Reply>>> {
    let mut r = Reader(bytes);
    let count = r.count(1)?;
    let mut replies = Vec::with_capacity(count);
    for _ in 0..count {
        replies.push(match r.flag()? {
            false => None,
            true => Some(decode_reply(r.bytes()?).ok()?),
        });
    }
    r.finished(replies)
}

/// What a member reports of itself for `quorum_status` and the `rabbitmq_raft_*` metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// The member's node name (empty on a node that runs alone: the caller names it).
    pub node: String,
    /// Its Raft role: `leader`, `follower`, `candidate` or `learner`.
    pub state: String,
    /// Whether it votes (a learner only applies the log).
    pub voter: bool,
    /// Its current term.
    pub term: u64,
    /// The last index in its log (written to the WAL: entries are logged before they are
    /// acknowledged).
    pub last_log_index: u64,
    /// The last index applied to its state machine.
    pub last_applied: u64,
    /// The last index it knows to be committed.
    pub commit_index: u64,
    /// The last index its snapshot covers.
    pub snapshot_index: u64,
    /// The node it takes to lead, if any.
    pub leader: Option<String>,
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    put_bytes(out, text.as_bytes());
}

impl Reader<'_> {
    fn string(&mut self) -> Option<String> {
        String::from_utf8(self.bytes()?.to_vec()).ok()
    }
}

/// A member's status, as [`methods::STATUS`] answers.
pub fn encode_status(status: &MemberStatus) -> Vec<u8> {
    let mut out = Vec::new();
    put_str(&mut out, &status.node);
    put_str(&mut out, &status.state);
    out.push(u8::from(status.voter));
    for value in [
        status.term,
        status.last_log_index,
        status.last_applied,
        status.commit_index,
        status.snapshot_index,
    ] {
        put_u64(&mut out, value);
    }
    match &status.leader {
        None => out.push(0),
        Some(leader) => {
            out.push(1);
            put_str(&mut out, leader);
        }
    }
    out
}

/// The status of [`encode_status`].
pub fn decode_status(bytes: &[u8]) -> Option<MemberStatus> {
    let mut r = Reader(bytes);
    let node = r.string()?;
    let state = r.string()?;
    let voter = r.flag()?;
    let term = r.u64()?;
    let last_log_index = r.u64()?;
    let last_applied = r.u64()?;
    let commit_index = r.u64()?;
    let snapshot_index = r.u64()?;
    let leader = match r.flag()? {
        false => None,
        true => Some(r.string()?),
    };
    r.finished(MemberStatus {
        node,
        state,
        voter,
        term,
        last_log_index,
        last_applied,
        commit_index,
        snapshot_index,
        leader,
    })
}

/// A change the group's leader carries out ([`methods::CHANGE`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Makes the node a voter (`add_member`, `grow`).
    AddMember,
    /// Makes the node a non-voting learner again (`delete_member`, `shrink`).
    DeleteMember,
    /// Hands the leadership to the node (`transfer_leadership`, `rebalance`).
    TransferLeadership,
}

/// A change of `group` about `node`.
pub fn encode_change(group: GroupId, change: Change, node: &str) -> Vec<u8> {
    let mut out = with_group(group);
    out.push(match change {
        Change::AddMember => 1,
        Change::DeleteMember => 2,
        Change::TransferLeadership => 3,
    });
    put_str(&mut out, node);
    out
}

/// The change of [`encode_change`], after its group.
pub fn decode_change(bytes: &[u8]) -> Option<(Change, String)> {
    let mut r = Reader(bytes);
    let change = match r.u8()? {
        1 => Change::AddMember,
        2 => Change::DeleteMember,
        3 => Change::TransferLeadership,
        _ => return None,
    };
    let node = r.string()?;
    r.finished((change, node))
}

/// How the leader's side of a change ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeAnswer {
    /// Done and committed.
    Done,
    /// The asked node does not lead (any more): ask the leader, or again.
    NotLeader,
    /// Refused for a reason the operator can act on.
    Refused(String),
}

/// The answer of a change.
pub fn encode_change_answer(answer: &ChangeAnswer) -> Vec<u8> {
    let mut out = Vec::new();
    match answer {
        ChangeAnswer::Done => out.push(0),
        ChangeAnswer::NotLeader => out.push(1),
        ChangeAnswer::Refused(why) => {
            out.push(2);
            put_str(&mut out, why);
        }
    }
    out
}

/// The answer of [`encode_change_answer`].
pub fn decode_change_answer(bytes: &[u8]) -> Option<ChangeAnswer> {
    let mut r = Reader(bytes);
    let answer = match r.u8()? {
        0 => ChangeAnswer::Done,
        1 => ChangeAnswer::NotLeader,
        2 => ChangeAnswer::Refused(r.string()?),
        _ => return None,
    };
    r.finished(answer)
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
