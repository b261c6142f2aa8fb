//! The WAL record and snapshot file parsers: round trips, and arbitrary bytes never panic.

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use warren_core::message::{Message, Properties};
use warren_core::quorum::{Command, ConsumerKey, Outcome};

use super::*;

fn arbitrary_op() -> impl Strategy<Value = Op> {
    let log_id = (0u64..1_000, 0u64..10, 0u64..5)
        .prop_map(|(index, term, node)| LogId::new(CommittedLeaderId::new(term, node), index));
    prop_oneof![
        (
            log_id.clone(),
            prop::collection::vec(any::<u8>(), 0..40),
            any::<u64>()
        )
            .prop_map(|(log_id, body, at)| Op::Entry(Entry {
                log_id,
                payload: EntryPayload::Normal(Stamped {
                    at,
                    command: Command::Enqueue {
                        publish: None,
                        message: Arc::new(Message {
                            exchange: Arc::from("x"),
                            routing_key: Arc::from("k"),
                            properties: Properties::default(),
                            encoded_properties: None,
                            body: Bytes::from(body),
                        }),
                    },
                }),
            })),
        (log_id.clone(), prop::collection::vec(0u64..9, 0..4)).prop_map(|(log_id, ids)| {
            Op::Entry(Entry {
                log_id,
                payload: EntryPayload::Normal(Stamped {
                    at: 1,
                    command: Command::Settle {
                        consumer: ConsumerKey(3),
                        ids,
                        outcome: Outcome::Requeue,
                    },
                }),
            })
        }),
        log_id.clone().prop_map(|log_id| Op::Entry(Entry {
            log_id,
            payload: EntryPayload::Blank
        })),
        (log_id.clone(), prop::collection::btree_set(0u64..7, 1..4)).prop_map(|(log_id, ids)| {
            let nodes: BTreeMap<u64, BasicNode> = ids
                .iter()
                .map(|id| {
                    (
                        *id,
                        BasicNode {
                            addr: format!("n{id}"),
                        },
                    )
                })
                .collect();
            Op::Entry(Entry {
                log_id,
                payload: EntryPayload::Membership(Membership::new(vec![ids], nodes)),
            })
        }),
        (0u64..10, 0u64..5, any::<bool>()).prop_map(|(term, node, committed)| {
            let mut vote = Vote::new(term, node);
            vote.committed = committed;
            Op::Vote(vote)
        }),
        (0u64..1_000).prop_map(Op::Truncate),
        log_id.clone().prop_map(Op::Purge),
        prop::option::of(log_id).prop_map(Op::Committed),
        Just(Op::Remove),
    ]
}

proptest! {
    #[test]
    fn records_round_trip_in_sequence(ops in prop::collection::vec((0u64..4, arbitrary_op()), 0..20)) {
        let mut bytes = Vec::new();
        for (group, op) in &ops {
            encode(&mut bytes, *group, op);
        }
        let mut offset = 0;
        for (group, op) in &ops {
            match read(&bytes[offset..]) {
                Read::Record(read_group, read_op, used) => {
                    prop_assert_eq!(read_group, *group);
                    prop_assert_eq!(format!("{read_op:?}"), format!("{op:?}"));
                    offset += used;
                }
                _ => prop_assert!(false, "record at {} does not read", offset),
            }
        }
        prop_assert!(matches!(read(&bytes[offset..]), Read::End));
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_record_reader(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = read(&bytes);
        // Also behind a valid header, so the payload decoder sees them.
        let mut framed = Vec::new();
        framed.extend_from_slice(&MAGIC.to_le_bytes());
        framed.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        framed.extend_from_slice(&crc32fast::hash(&bytes).to_le_bytes());
        framed.extend_from_slice(&bytes);
        let _ = read(&framed);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_snapshot_parser(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        let _ = crate::state_machine::parse_snapshot(&bytes);
        let mut framed = b"WQSN".to_vec();
        framed.extend_from_slice(&bytes);
        let crc = crc32fast::hash(&framed);
        framed.extend_from_slice(&crc.to_le_bytes());
        let _ = crate::state_machine::parse_snapshot(&framed);
    }
}

#[test]
fn a_torn_record_reads_as_torn_at_every_cut() {
    let mut bytes = Vec::new();
    encode(&mut bytes, 1, &Op::Truncate(5));
    for cut in 1..bytes.len() {
        assert!(matches!(read(&bytes[..cut]), Read::Torn), "cut at {cut}");
    }
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert!(matches!(read(&flipped), Read::Torn));
}
