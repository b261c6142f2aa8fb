//! Random command sequences: applying them never panics, the indexes stay consistent, and a
//! member restored from a snapshot taken anywhere plus the rest of the log equals the live one.

use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;

use super::codec::{
    decode_command, decode_reply, decode_snapshot, encode_command, encode_reply, encode_snapshot,
};
use super::*;
use crate::message::{Message, Properties};
use crate::queue::Overflow;
use crate::value::{Table, Value};

fn arbitrary_message() -> impl Strategy<Value = Arc<Message>> {
    (
        0usize..20,
        prop::option::of(0u8..40),
        prop::option::of(0u64..3_000),
        prop::option::of(0u64..3_000),
    )
        .prop_map(|(length, priority, expiration, delay)| {
            let headers = delay.map(|delay| {
                let mut table = Table::new();
                table.insert(
                    DELIVERY_TIME_HEADER,
                    Value::I64(1_000_000 + delay as i64 * 3),
                );
                table
            });
            Arc::new(Message {
                exchange: Arc::from("x"),
                routing_key: Arc::from("k"),
                properties: Properties {
                    priority,
                    expiration: expiration.map(|e| e.to_string()),
                    headers,
                    ..Default::default()
                },
                encoded_properties: None,
                body: Bytes::from(vec![b'm'; length]),
            })
        })
}

fn arbitrary_outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        3 => Just(Outcome::Ack),
        2 => Just(Outcome::Requeue),
        1 => Just(Outcome::Release),
        1 => Just(Outcome::Reject),
        1 => (any::<bool>(), any::<bool>(), prop::option::of(0u64..4_000)).prop_map(|(delivery_failed, undeliverable_here, delay)| {
            let mut annotations = Table::new();
            annotations.insert("x-opt-note", Value::string("n"));
            if let Some(delay) = delay {
                annotations.insert(DELIVERY_TIME_HEADER, Value::I64(1_000_000 + delay as i64 * 5));
            }
            Outcome::Modify { delivery_failed, undeliverable_here, annotations }
        }),
    ]
}

fn arbitrary_command() -> impl Strategy<Value = Command> {
    let key = (1u64..8).prop_map(ConsumerKey);
    prop_oneof![
        6 => (prop::option::of((0u64..3, 0u64..30)), arbitrary_message()).prop_map(|(publish, message)| {
            Command::Enqueue {
                publish: publish.map(|(publisher, sequence)| PublishId { publisher, sequence }),
                message,
            }
        }),
        1 => (0u64..3).prop_map(|publisher| Command::PublisherDown { publisher }),
        2 => (0u64..4, 0u32..4, -1i32..3, any::<bool>(), any::<bool>(), prop::option::of(1u64..3_000)).prop_map(
            |(owner, window, priority, credited, auto_ack, timeout)| Command::Attach {
                owner,
                tag: format!("t{owner}"),
                mode: if credited { CreditMode::Credited } else { CreditMode::Prefetch(window) },
                priority,
                auto_ack,
                timeout,
            }
        ),
        2 => (key.clone(), 0u32..5, any::<bool>()).prop_map(|(consumer, credit, drain)| {
            Command::Credit { consumer, credit, drain }
        }),
        1 => key.clone().prop_map(|consumer| Command::Cancel { consumer }),
        5 => (key, prop::collection::vec(1u64..60, 0..4), arbitrary_outcome()).prop_map(
            |(consumer, ids, outcome)| Command::Settle { consumer, ids, outcome }
        ),
        1 => (0u64..4).prop_map(|owner| Command::Down { owner }),
        1 => (0u64..4, any::<bool>()).prop_map(|(owner, auto_ack)| Command::Dequeue { owner, auto_ack }),
        1 => prop::collection::vec(1u64..60, 0..4).prop_map(|ids| Command::DeadLetterSettled { ids }),
        1 => Just(Command::Purge),
        2 => Just(Command::Tick),
        1 => arbitrary_config().prop_map(Command::Configure),
    ]
}

fn arbitrary_config() -> impl Strategy<Value = QuorumConfig> {
    (
        prop::option::of(0u32..3),
        prop::option::of(0u64..2_000),
        prop::option::of(0u64..6),
        prop::option::of(0u64..60),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(1u64..5_000),
    )
        .prop_map(
            |(limit, ttl, max_length, max_bytes, reject, dlx, at_least_once, sac, timeout)| {
                let mut c = QuorumConfig::new("q");
                c.delivery_limit = limit;
                c.message_ttl = ttl;
                c.max_length = max_length;
                c.max_length_bytes = max_bytes;
                c.overflow = if reject {
                    Overflow::RejectPublish
                } else {
                    Overflow::DropHead
                };
                c.dead_letter_exchange = dlx.then(|| "dlx".to_string());
                c.dead_letter_strategy = if at_least_once {
                    DeadLetterStrategy::AtLeastOnce
                } else {
                    DeadLetterStrategy::AtMostOnce
                };
                c.single_active_consumer = sac;
                c.consumer_timeout = timeout;
                c
            },
        )
}

/// The indexes agree with the messages.
fn check_invariants(queue: &QuorumQueue) {
    let stats = queue.stats();
    assert_eq!(
        stats.ready + stats.delayed + stats.unacknowledged + stats.dead_letter_pending,
        queue.len() as u64
    );
    let held: usize = queue.consumers.values().map(|c| c.checked_out.len()).sum();
    assert_eq!(held as u64, stats.unacknowledged);
    for consumer in queue.consumers.values() {
        if let CreditMode::Prefetch(window) = consumer.mode {
            assert!(window <= MAX_PREFETCH);
            if !consumer.auto_ack {
                assert!(consumer.checked_out.len() as u32 <= window);
            }
        }
        assert!(consumer.credit <= MAX_PREFETCH);
    }
    if let Some(max) = queue.config().max_length {
        if queue.config().overflow == Overflow::DropHead {
            // Over the limit only with nothing left to drop (dead letters still waiting for
            // their confirm after a policy switched the queue to drop-head).
            let queued = stats.ready + stats.delayed + stats.dead_letter_pending;
            assert!(
                queued <= max || stats.ready + stats.delayed == 0,
                "{stats:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_commands_never_panic_and_a_snapshot_plus_replay_equals_the_live_state(
        config in arbitrary_config(),
        steps in prop::collection::vec((0u64..400, arbitrary_command()), 1..120),
        cut in any::<prop::sample::Index>(),
    ) {
        let cut = cut.index(steps.len());
        let mut live = QuorumQueue::new(config);
        let mut now = 1_000_000u64;
        let mut restored: Option<QuorumQueue> = None;
        for (index, (delta, command)) in steps.iter().enumerate() {
            if index == cut {
                restored = Some(decode_snapshot(&encode_snapshot(&live)).expect("snapshot decodes"));
            }
            now += delta;
            let mut bytes = Vec::new();
            encode_command(&mut bytes, command);
            let decoded = decode_command(&bytes).expect("command decodes");
            let applied = live.apply(now, decoded);
            if let Some(replica) = restored.as_mut() {
                let again = replica.apply(now, command.clone());
                prop_assert_eq!(format!("{:?}", again.reply), format!("{:?}", applied.reply));
                prop_assert_eq!(again.effects.len(), applied.effects.len());
            }
            check_invariants(&live);
        }
        let replica = restored.expect("cut is within the steps");
        prop_assert_eq!(encode_snapshot(&replica), encode_snapshot(&live));
        prop_assert_eq!(replica.stats(), live.stats());
    }

    #[test]
    fn a_batch_applies_as_its_commands_one_entry_each(
        config in arbitrary_config(),
        steps in prop::collection::vec((0u64..400, prop::collection::vec(arbitrary_command(), 1..8)), 1..40),
    ) {
        let mut single = QuorumQueue::new(config.clone());
        let mut batched = QuorumQueue::new(config);
        let mut now = 1_000_000u64;
        for (delta, commands) in steps {
            now += delta;
            let mut replies = Vec::new();
            let mut effects = Vec::new();
            for command in commands.clone() {
                let applied = single.apply(now, command);
                replies.push(applied.reply);
                effects.extend(applied.effects);
            }
            let mut bytes = Vec::new();
            encode_command(&mut bytes, &Command::Batch(commands));
            let applied = batched.apply(now, decode_command(&bytes).expect("batch decodes"));
            let mut reply_bytes = Vec::new();
            encode_reply(&mut reply_bytes, &applied.reply);
            let reply = decode_reply(&reply_bytes).expect("batch reply decodes");
            prop_assert_eq!(format!("{:?}", reply), format!("{:?}", Reply::Batch(replies)));
            prop_assert_eq!(format!("{:?}", applied.effects), format!("{:?}", effects));
            check_invariants(&batched);
        }
        prop_assert_eq!(encode_snapshot(&batched), encode_snapshot(&single));
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoders(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_command(&bytes);
        let _ = decode_reply(&bytes);
        let mut batch = vec![13u8];
        batch.extend_from_slice(&bytes);
        let _ = decode_command(&batch);
        let mut snapshot = b"WQQS\x01".to_vec();
        snapshot.extend_from_slice(&bytes);
        let _ = decode_snapshot(&snapshot);
    }
}
