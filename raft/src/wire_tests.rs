//! The RPC encodings: round trips of every request and answer, and arbitrary or cut bytes
//! decode to `None` without panicking.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::Bytes;
use openraft::{BasicNode, CommittedLeaderId, Entry, EntryPayload, LogId, Membership};
use proptest::prelude::*;
use warren_core::message::{Message, Properties};
use warren_core::quorum::{ConsumerKey, Delivered, Outcome, PublishId};

use super::*;
use crate::Stamped;

fn log_id(index: u64, term: u64, node: u64) -> LogId<NodeId> {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

fn message(body: Vec<u8>) -> Arc<Message> {
    Arc::new(Message {
        exchange: Arc::from("amq.topic"),
        routing_key: Arc::from("a.b"),
        properties: Properties::default(),
        encoded_properties: None,
        body: Bytes::from(body),
    })
}

fn membership() -> Membership<NodeId, BasicNode> {
    let voters: BTreeSet<NodeId> = [7, 8, 9].into_iter().collect();
    let nodes: BTreeMap<NodeId, BasicNode> = [7, 8, 9, 10]
        .into_iter()
        .map(|id| {
            (
                id,
                BasicNode {
                    addr: format!("warren@127.0.0.{id}"),
                },
            )
        })
        .collect();
    Membership::new(vec![voters], nodes)
}

fn append(body: Vec<u8>) -> AppendEntriesRequest<TypeConfig> {
    let mut vote = Vote::new(3, 7);
    vote.committed = true;
    AppendEntriesRequest {
        vote,
        prev_log_id: Some(log_id(4, 2, 7)),
        leader_commit: Some(log_id(4, 2, 7)),
        entries: vec![
            Entry {
                log_id: log_id(5, 3, 7),
                payload: EntryPayload::Blank,
            },
            Entry {
                log_id: log_id(6, 3, 7),
                payload: EntryPayload::Normal(Stamped {
                    at: 1_700_000_000_123,
                    command: Command::Enqueue {
                        publish: Some(PublishId {
                            publisher: 11,
                            sequence: 12,
                        }),
                        message: message(body),
                    },
                }),
            },
            Entry {
                log_id: log_id(7, 3, 7),
                payload: EntryPayload::Membership(membership()),
            },
        ],
    }
}

fn snapshot(data: Vec<u8>) -> InstallSnapshotRequest<TypeConfig> {
    InstallSnapshotRequest {
        vote: Vote::new(4, 8),
        meta: SnapshotMeta {
            last_log_id: Some(log_id(90, 4, 8)),
            last_membership: StoredMembership::new(Some(log_id(1, 1, 7)), membership()),
            snapshot_id: "4-8-90-1".into(),
        },
        offset: 1024,
        data,
        done: true,
    }
}

#[test]
fn every_request_and_answer_survives_a_round_trip() {
    let rpc = append(b"payload".to_vec());
    let bytes = encode_append(42, &rpc);
    let (group, rest) = split_group(&bytes).unwrap();
    assert_eq!(group, 42);
    assert_eq!(
        format!("{:?}", decode_append(rest).unwrap()),
        format!("{rpc:?}")
    );

    for response in [
        AppendEntriesResponse::Success,
        AppendEntriesResponse::PartialSuccess(Some(log_id(6, 3, 7))),
        AppendEntriesResponse::PartialSuccess(None),
        AppendEntriesResponse::Conflict,
        AppendEntriesResponse::HigherVote(Vote::new(9, 8)),
    ] {
        let back = decode_append_response(&encode_append_response(&response)).unwrap();
        assert_eq!(back, response);
    }

    let vote = VoteRequest {
        vote: Vote::new(5, 9),
        last_log_id: Some(log_id(10, 4, 8)),
    };
    let bytes = encode_vote(1, &vote);
    assert_eq!(decode_vote(split_group(&bytes).unwrap().1).unwrap(), vote);
    let answer = VoteResponse {
        vote: Vote::new(5, 9),
        vote_granted: true,
        last_log_id: None,
    };
    assert_eq!(
        decode_vote_response(&encode_vote_response(&answer)).unwrap(),
        answer
    );

    let chunk = snapshot(vec![1, 2, 3, 4]);
    let bytes = encode_snapshot(2, &chunk);
    let back = decode_snapshot(split_group(&bytes).unwrap().1).unwrap();
    assert_eq!(format!("{back:?}"), format!("{chunk:?}"));
    let answer = InstallSnapshotResponse {
        vote: Vote::new(4, 8),
    };
    assert_eq!(
        decode_snapshot_response(&encode_snapshot_response(&answer)).unwrap(),
        answer
    );

    let commands = vec![
        Command::Enqueue {
            publish: None,
            message: message(b"m".to_vec()),
        },
        Command::Settle {
            consumer: ConsumerKey(3),
            ids: vec![1, 2, 3],
            outcome: Outcome::Ack,
        },
        Command::Down { owner: 77 },
    ];
    let bytes = encode_forward(5, &commands);
    let back = decode_forward(split_group(&bytes).unwrap().1).unwrap();
    assert_eq!(format!("{back:?}"), format!("{commands:?}"));
    let replies = vec![
        Some(Reply::Enqueued { id: 4 }),
        None,
        Some(Reply::Dequeued {
            consumer: Some(ConsumerKey(1)),
            delivered: Delivered {
                id: 4,
                message: message(b"x".to_vec()),
                redelivered: true,
                delivery_count: 2,
                settled: false,
            },
            remaining: 9,
        }),
    ];
    let back = decode_forward_response(&encode_forward_response(&replies)).unwrap();
    assert_eq!(format!("{back:?}"), format!("{replies:?}"));
}

#[test]
fn a_cut_request_is_refused_not_misread() {
    let bytes = encode_append(42, &append(vec![9; 100]));
    let rest = split_group(&bytes).unwrap().1;
    for end in 0..rest.len() {
        assert!(decode_append(&rest[..end]).is_none(), "cut at {end}");
    }
    let mut longer = rest.to_vec();
    longer.push(0);
    assert!(decode_append(&longer).is_none());
    let bytes = encode_forward(1, &[Command::Down { owner: 1 }]);
    let rest = split_group(&bytes).unwrap().1;
    for end in 0..rest.len() {
        assert!(decode_forward(&rest[..end]).is_none(), "cut at {end}");
    }
}

#[test]
fn operator_requests_round_trip_and_refuse_cut_bytes() {
    let status = MemberStatus {
        node: "warren@127.0.0.2".into(),
        state: "follower".into(),
        voter: true,
        term: 7,
        last_log_index: 120,
        last_applied: 119,
        commit_index: 119,
        snapshot_index: 100,
        leader: Some("warren@127.0.0.1".into()),
    };
    let bytes = encode_status(&status);
    assert_eq!(decode_status(&bytes), Some(status));
    for end in 0..bytes.len() {
        assert!(decode_status(&bytes[..end]).is_none(), "cut at {end}");
    }
    for change in [
        Change::AddMember,
        Change::DeleteMember,
        Change::TransferLeadership,
    ] {
        let bytes = encode_change(9, change, "warren@b");
        let (group, rest) = split_group(&bytes).unwrap();
        assert_eq!(group, 9);
        assert_eq!(decode_change(rest), Some((change, "warren@b".to_string())));
        assert!(decode_change(&rest[..rest.len() - 1]).is_none());
    }
    for answer in [
        ChangeAnswer::Done,
        ChangeAnswer::NotLeader,
        ChangeAnswer::Refused("not a member".into()),
    ] {
        let bytes = encode_change_answer(&answer);
        assert_eq!(decode_change_answer(&bytes), Some(answer));
    }
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = split_group(&bytes);
        let _ = decode_append(&bytes);
        let _ = decode_append_response(&bytes);
        let _ = decode_vote(&bytes);
        let _ = decode_vote_response(&bytes);
        let _ = decode_snapshot(&bytes);
        let _ = decode_snapshot_response(&bytes);
        let _ = decode_forward(&bytes);
        let _ = decode_forward_response(&bytes);
        let _ = decode_status(&bytes);
        let _ = decode_change(&bytes);
        let _ = decode_change_answer(&bytes);
    }

    #[test]
    fn appends_with_any_body_round_trip(body in prop::collection::vec(any::<u8>(), 0..200)) {
        let rpc = append(body);
        let bytes = encode_append(3, &rpc);
        let back = decode_append(split_group(&bytes).unwrap().1).unwrap();
        prop_assert_eq!(format!("{back:?}"), format!("{rpc:?}"));
    }
}
