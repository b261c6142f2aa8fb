use super::*;
use crate::message::Properties;
use bytes::Bytes;
use std::fs::OpenOptions;
use std::io::Write;
use std::sync::atomic::AtomicUsize;

/// A fresh directory for one test, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "warren-store-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&path);
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn queue(name: &str) -> QueueName {
    QueueName {
        vhost: "/".into(),
        name: name.into(),
    }
}

fn message(body: &str) -> Message {
    Message {
        exchange: "".into(),
        routing_key: "q".into(),
        properties: Properties {
            delivery_mode: Some(2),
            ..Properties::default()
        },
        encoded_properties: None,
        body: Bytes::copy_from_slice(body.as_bytes()),
    }
}

fn open(dir: &TempDir) -> (Arc<MessageStore>, Recovered) {
    let mut config = StoreConfig::new(&dir.0);
    config.segment_size = 4096;
    MessageStore::open(config).expect("store opens")
}

fn bodies(recovered: &Recovered, name: &str) -> Vec<(String, bool)> {
    recovered
        .queues
        .get(&queue(name))
        .map(|list| {
            list.iter()
                .map(|m| {
                    (
                        String::from_utf8_lossy(&m.message.as_ref().expect("in memory").body)
                            .into_owned(),
                        m.redelivered,
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (bounded) until everything submitted so far is on disk.
fn flush(store: &MessageStore, seq: u64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.durable_seq() < seq {
        assert!(std::time::Instant::now() < deadline, "writer stuck");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn acked_messages_stay_gone_and_delivered_ones_come_back_redelivered() {
    let dir = TempDir::new("basic");
    let (a, b) = (queue("a"), queue("b"));
    {
        let (store, recovered) = open(&dir);
        assert!(recovered.queues.is_empty());
        let (id1, _) = store.publish(&message("one"), &[&a, &b]);
        let (id2, _) = store.publish(&message("two"), &[&a]);
        let (id3, _) = store.publish(&message("three"), &[&a]);
        store.remove(&a, &[id1]);
        store.mark_delivered(&a, &[id2]);
        store.mark_delivered(&b, &[id1]);
        let (_, seq) = store.publish(&message("four"), &[&b]);
        store.remove(&a, &[id3]);
        flush(&store, seq);
        store.close();
    }
    let (_store, recovered) = open(&dir);
    assert_eq!(bodies(&recovered, "a"), vec![("two".to_string(), true)]);
    assert_eq!(
        bodies(&recovered, "b"),
        vec![("one".to_string(), true), ("four".to_string(), false)]
    );
    assert!(recovered.report.damaged.is_empty());
    assert_eq!(recovered.report.torn_tail, None);
}

#[test]
fn a_torn_tail_is_cut_off_and_everything_before_it_recovers() {
    let dir = TempDir::new("torn");
    let q = queue("q");
    {
        let (store, _) = open(&dir);
        let mut seq = 0;
        for i in 0..5 {
            seq = store.publish(&message(&format!("m{i}")), &[&q]).1;
        }
        flush(&store, seq);
        store.close();
    }
    let files = recovery::segment_files(&dir.0).unwrap();
    let (_, newest) = files.last().unwrap();
    let length = fs::metadata(newest).unwrap().len();
    // Half a record at the end, as a crash in the middle of a write leaves it.
    let mut torn = Vec::new();
    record::encode_publish(&mut torn, 99, &[&q], &message("never confirmed"));
    let mut file = OpenOptions::new().append(true).open(newest).unwrap();
    file.write_all(&torn[..torn.len() / 2]).unwrap();
    drop(file);
    let (store, recovered) = open(&dir);
    assert_eq!(
        bodies(&recovered, "q")
            .iter()
            .map(|(b, _)| b.as_str())
            .collect::<Vec<_>>(),
        vec!["m0", "m1", "m2", "m3", "m4"]
    );
    assert_eq!(recovered.report.torn_tail, Some((newest.clone(), length)));
    assert!(recovered.report.damaged.is_empty());
    assert_eq!(fs::metadata(newest).unwrap().len(), length);
    drop(store);
}

#[test]
fn corruption_in_the_middle_is_reported_with_file_and_offset_and_the_rest_is_kept() {
    let dir = TempDir::new("corrupt");
    let q = queue("q");
    let mut offsets = Vec::new();
    {
        let (store, _) = open(&dir);
        let mut seq = 0;
        for i in 0..5 {
            let mut one = Vec::new();
            record::encode_publish(&mut one, 0, &[&q], &message(&format!("m{i}")));
            offsets.push(one.len());
            seq = store.publish(&message(&format!("m{i}")), &[&q]).1;
            flush(&store, seq);
        }
        flush(&store, seq);
        store.close();
    }
    let files = recovery::segment_files(&dir.0).unwrap();
    let (_, segment) = files.last().unwrap();
    let mut bytes = fs::read(segment).unwrap();
    // Flip a byte inside the body of the third record.
    let third = offsets[0] + offsets[1];
    let inside = third + offsets[2] - 2;
    bytes[inside] ^= 0xff;
    fs::write(segment, &bytes).unwrap();
    let (_store, recovered) = open(&dir);
    assert_eq!(
        bodies(&recovered, "q")
            .iter()
            .map(|(b, _)| b.as_str())
            .collect::<Vec<_>>(),
        vec!["m0", "m1", "m3", "m4"]
    );
    assert_eq!(
        recovered.report.damaged,
        vec![Damage {
            file: segment.clone(),
            offset: third as u64,
            skipped: offsets[2] as u64,
        }]
    );
    assert_eq!(recovered.report.torn_tail, None);
}

#[test]
fn segments_whose_messages_are_all_removed_are_deleted() {
    let dir = TempDir::new("gc");
    let q = queue("q");
    let (store, _) = open(&dir);
    let body = "x".repeat(1000);
    let mut ids = Vec::new();
    // About 1 KB per record, 4 KB segments: a new segment every few messages.
    for _ in 0..40 {
        let (id, seq) = store.publish(&message(&body), &[&q]);
        ids.push(id);
        flush(&store, seq);
    }
    let before = store.segment_count();
    assert!(before >= 8, "expected many segments, found {before}");
    // Keep the last message; everything before it is acked.
    store.remove(&q, &ids[..39]);
    // One more write so the writer runs a pass after the removal.
    let (_, seq) = store.publish(&message("tail"), &[&queue("other")]);
    flush(&store, seq);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.segment_count() > 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "segments not collected: {}",
            store.segment_count()
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    store.close();
    drop(store);
    let (_store, recovered) = open(&dir);
    assert_eq!(bodies(&recovered, "q"), vec![(body.clone(), false)]);
    assert_eq!(
        bodies(&recovered, "other"),
        vec![("tail".to_string(), false)]
    );
}

#[test]
fn a_writer_that_falls_behind_raises_the_flow_signal_until_it_catches_up() {
    let dir = TempDir::new("flow");
    let mut config = StoreConfig::new(&dir.0);
    config.max_unwritten_bytes = 10_000;
    let (store, _) = MessageStore::open(config).unwrap();
    let q = queue("q");
    let body = "y".repeat(2000);
    // Stall the writer: it needs this lock to write definitions after a topology change.
    let stall = store.shared.definitions.lock();
    store.topology_generation().fetch_add(1, Ordering::Release);
    store.wake();
    let mut seq = 0;
    for _ in 0..4 {
        seq = store.publish(&message(&body), &[&q]).1;
    }
    assert!(!store.flow_blocked(), "8 KB is under the limit");
    for _ in 0..4 {
        seq = store.publish(&message(&body), &[&q]).1;
    }
    assert!(store.flow_blocked(), "16 KB is over the limit");
    drop(stall);
    flush(&store, seq);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while store.flow_blocked() {
        assert!(
            std::time::Instant::now() < deadline,
            "flow signal never cleared"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

#[test]
fn a_backlog_beyond_the_in_memory_limit_is_paged_out_and_read_back_in_order() {
    use crate::access::Permissions;
    use crate::broker::{Broker, Limits};
    use crate::vhost::{Actor, QueueDeclare};

    let dir = TempDir::new("paging");
    let mut config = StoreConfig::new(&dir.0);
    config.queue_max_in_memory = 3;
    let (store, _) = MessageStore::open(config).unwrap();
    let broker = Broker::new(Limits::default());
    assert!(broker.attach_store(Arc::clone(&store)));
    let vhost = broker.add_vhost("/");
    vhost.set_permissions("u", Permissions::full());
    let actor = Actor {
        user: "u",
        connection_id: 1,
    };
    vhost
        .declare_queue(
            actor,
            QueueDeclare {
                name: "q".into(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: crate::value::Table::new(),
            },
        )
        .unwrap();
    let queue = vhost.queue("q").unwrap();
    let mut last_seq = 0;
    for i in 0..10 {
        let outcome =
            vhost.enqueue_routed(Arc::new(message(&format!("m{i}"))), &[Arc::clone(&queue)]);
        last_seq = outcome
            .durable_seq
            .expect("persistent message in a durable queue is stored");
    }
    // A transient message is never paged: it is not on disk.
    let mut transient = message("transient");
    transient.properties.delivery_mode = None;
    vhost.enqueue_routed(Arc::new(transient), &[Arc::clone(&queue)]);
    let stats = queue.stats();
    assert_eq!((stats.ready, stats.paged_out), (11, 7));
    let mut bodies = Vec::new();
    // Some reads may find records not written yet (held by the store until they are).
    for _ in 0..4 {
        let (delivery, _) = queue.get(false).unwrap();
        bodies.push(String::from_utf8_lossy(&delivery.message.body).into_owned());
    }
    flush(&store, last_seq);
    while let Some((delivery, _)) = queue.get(false) {
        bodies.push(String::from_utf8_lossy(&delivery.message.body).into_owned());
    }
    let mut expected: Vec<String> = (0..10).map(|i| format!("m{i}")).collect();
    expected.push("transient".into());
    assert_eq!(bodies, expected);
    assert_eq!(queue.stats().paged_out, 0);
}

#[test]
fn recovery_reads_only_the_first_messages_of_a_queue_into_memory() {
    let dir = TempDir::new("recover-paged");
    let q = queue("q");
    {
        let (store, _) = open(&dir);
        let mut seq = 0;
        for i in 0..5 {
            let mut m = message(&format!("body-{i}"));
            m.properties.priority = Some(i);
            seq = store.publish(&m, &[&q]).1;
        }
        flush(&store, seq);
        store.close();
    }
    let mut config = StoreConfig::new(&dir.0);
    config.queue_max_in_memory = 2;
    let (store, recovered) = MessageStore::open(config).unwrap();
    let list = &recovered.queues[&q];
    assert_eq!(list.len(), 5);
    assert!(list[..2].iter().all(|m| m.message.is_some()));
    assert!(list[2..].iter().all(|m| m.message.is_none()));
    assert_eq!(
        list.iter()
            .map(|m| (m.priority, m.body_len))
            .collect::<Vec<_>>(),
        (0..5).map(|i| (Some(i), 6)).collect::<Vec<_>>()
    );
    // The ones left on disk read back by store id.
    let back = store.read(list[4].store_id).unwrap();
    assert_eq!(&back.body[..], b"body-4");
}

#[test]
fn one_long_unacked_message_does_not_keep_the_segments_after_it() {
    let dir = TempDir::new("pinned");
    let q = queue("q");
    let (store, _) = open(&dir);
    let body = "z".repeat(1000);
    // The first message stays unacknowledged (delivered) for the whole test.
    let (held, seq) = store.publish(&message("held"), &[&q]);
    store.mark_delivered(&q, &[held]);
    flush(&store, seq);
    let mut previous = None;
    for _ in 0..80 {
        let (id, seq) = store.publish(&message(&body), &[&q]);
        // Each message is acked after the next one is published, so most removals land in
        // a later segment than their message: without compaction the segments form a chain
        // pinned by the held message.
        if let Some(previous) = previous.replace(id) {
            store.remove(&q, &[previous]);
        }
        flush(&store, seq);
    }
    if let Some(last) = previous {
        store.remove(&q, &[last]);
    }
    let (_, seq) = store.publish(&message("tail"), &[&queue("other")]);
    flush(&store, seq);
    let segments = store.segment_count();
    assert!(
        segments <= 8,
        "80 KB in 4 KB segments, one message held: {segments} segments kept"
    );
    store.close();
    drop(store);
    let (_store, recovered) = open(&dir);
    assert_eq!(bodies(&recovered, "q"), vec![("held".to_string(), true)]);
    assert_eq!(
        bodies(&recovered, "other"),
        vec![("tail".to_string(), false)]
    );
}

#[test]
fn the_core_publish_stores_persistent_messages_of_durable_queues_and_says_what_to_await() {
    use crate::access::Permissions;
    use crate::broker::{Broker, Limits};
    use crate::vhost::{Actor, AwaitSettlement, PublishOptions, Publisher, QueueDeclare};

    let dir = TempDir::new("core-publish");
    let (store, _) = open(&dir);
    let broker = Broker::new(Limits::default());
    assert!(broker.attach_store(Arc::clone(&store)));
    let vhost = broker.add_vhost("/");
    vhost.set_permissions("u", Permissions::full());
    let actor = Actor {
        user: "u",
        connection_id: 1,
    };
    for (name, durable) in [("q", true), ("transient-queue", false)] {
        vhost
            .declare_queue(
                actor,
                QueueDeclare {
                    name: name.into(),
                    passive: false,
                    durable,
                    exclusive: false,
                    auto_delete: false,
                    arguments: crate::value::Table::new(),
                },
            )
            .unwrap();
    }
    let mut publisher = Publisher::new();
    let mut publish = |message: Message| {
        vhost
            .publish(
                &mut publisher,
                actor,
                Arc::new(message),
                PublishOptions::default(),
            )
            .unwrap()
    };
    let stored = publish(message("kept"));
    let AwaitSettlement::Disk(seq) = stored.settlement else {
        panic!("a persistent message in a durable queue waits for the disk");
    };
    let mut transient = message("transient");
    transient.properties.delivery_mode = None;
    assert_eq!(publish(transient).settlement, AwaitSettlement::Nothing);
    let mut elsewhere = message("non-durable queue");
    elsewhere.routing_key = "transient-queue".into();
    assert_eq!(publish(elsewhere).settlement, AwaitSettlement::Nothing);
    flush(&store, seq);
    drop(broker);
    store.close();
    let (_, recovered) = open(&dir);
    assert_eq!(bodies(&recovered, "q"), [("kept".to_string(), false)]);
}

#[test]
fn a_burst_of_topology_changes_is_gathered_into_few_definitions_writes_and_a_confirm_waits_for_the_last(
) {
    let dir = TempDir::new("definitions-gap");
    let (store, _) = open(&dir);
    let writes = Arc::new(AtomicUsize::new(0));
    let written_generation = Arc::new(AtomicU64::new(0));
    {
        let (writes, written, generation) = (
            Arc::clone(&writes),
            Arc::clone(&written_generation),
            Arc::clone(store.topology_generation()),
        );
        // A writer as slow as a large definitions file: 5 ms a write.
        store.set_definitions_writer(Box::new(move || {
            let seen = generation.load(Ordering::Acquire);
            std::thread::sleep(std::time::Duration::from_millis(5));
            written.store(seen, Ordering::Release);
            writes.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }));
    }
    let changes = 200;
    let started = std::time::Instant::now();
    for _ in 0..changes {
        store.topology_generation().fetch_add(1, Ordering::Release);
        store.wake();
        std::thread::sleep(std::time::Duration::from_micros(500));
    }
    let last = store.topology_generation().load(Ordering::Acquire);
    // A message now: its confirm comes only after the definitions of the last change.
    let seq = store.publish(&message("after"), &[&queue("q")]).1;
    flush(&store, seq);
    assert!(
        written_generation.load(Ordering::Acquire) >= last,
        "confirmed before the definitions of the last change were written"
    );
    // Each write (5 ms) is followed by a gap of 4 times its duration: at most one write per
    // 25 ms of the burst, where back-to-back rewrites would make one per 5 ms.
    let elapsed_ms = started.elapsed().as_millis() as usize;
    let writes = writes.load(Ordering::Relaxed);
    assert!(
        writes <= elapsed_ms / 20 + 2,
        "{writes} definitions writes for {changes} changes in {elapsed_ms} ms"
    );
}

#[test]
fn a_held_sequence_number_keeps_the_durable_one_below_it_until_released() {
    let dir = TempDir::new("hold");
    let (store, _) = open(&dir);
    let (_, first) = store.publish(&message("a"), &[&queue("q")]);
    flush(&store, first);
    let held = store.hold();
    assert!(held > first);
    // A write after the hold is made durable, but the durable number stays below the hold.
    let (_, after) = store.publish(&message("b"), &[&queue("q")]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while store.durable_seq() < held - 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(store.durable_seq(), held - 1);
    store.release(held);
    flush(&store, after);
    assert!(store.durable_seq() >= after);
    // A hold with nothing unwritten is durable as soon as it is released.
    let alone = store.hold();
    assert!(store.durable_seq() < alone);
    store.release(alone);
    assert_eq!(store.durable_seq(), alone);
}

#[test]
fn a_hold_taken_right_after_a_topology_change_is_durable_only_once_the_definitions_are() {
    let dir = TempDir::new("hold-definitions");
    let (store, _) = open(&dir);
    let written_generation = Arc::new(AtomicU64::new(0));
    {
        let (written, generation) = (
            Arc::clone(&written_generation),
            Arc::clone(store.topology_generation()),
        );
        store.set_definitions_writer(Box::new(move || {
            let seen = generation.load(Ordering::Acquire);
            std::thread::sleep(std::time::Duration::from_millis(20));
            written.store(seen, Ordering::Release);
            Ok(())
        }));
    }
    let (_, first) = store.publish(&message("a"), &[&queue("q")]);
    flush(&store, first);
    for _ in 0..5 {
        // A quorum queue declared, then a publish to it (a hold) released at once, as a
        // commit faster than the definitions write would.
        store.topology_generation().fetch_add(1, Ordering::Release);
        store.wake();
        let changed = store.topology_generation().load(Ordering::Acquire);
        let held = store.hold();
        store.release(held);
        assert!(
            store.durable_seq() < held || written_generation.load(Ordering::Acquire) >= changed,
            "a hold was durable before the definitions of its queue"
        );
        flush(&store, held);
        assert!(
            written_generation.load(Ordering::Acquire) >= changed,
            "confirmed before the definitions of the change were written"
        );
    }
}
