//! The WAL on its own: group commit, compaction, recovery and torn tails.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use bytes::Bytes;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};
use warren_core::message::{Message, Properties};
use warren_core::quorum::Command;

use super::*;
use crate::log_store::GroupLogStore;
use crate::Stamped;

fn log_id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(Stamped {
            at: index,
            command: Command::Enqueue {
                publish: None,
                message: Arc::new(Message {
                    exchange: Arc::from(""),
                    routing_key: Arc::from("q"),
                    properties: Properties::default(),
                    encoded_properties: None,
                    body: Bytes::from(format!("message {index} {}", "x".repeat(64))),
                }),
            },
        }),
    }
}

/// Appends and waits until durable.
fn append(store: &GroupLogStore, entries: Vec<Entry<TypeConfig>>) {
    let (sender, receiver) = mpsc::channel();
    store.append_entries(entries, move |result| {
        let _ = sender.send(result);
    });
    receiver.recv().unwrap().unwrap();
}

fn indexes(wal: &Wal, group: GroupId) -> Vec<u64> {
    wal.group(group).lock().entries.keys().copied().collect()
}

#[test]
fn entries_votes_and_purges_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    let store = GroupLogStore::new(&wal, 7);
    append(&store, (1..=10).map(|i| entry(1, i)).collect());
    store.purge_to(log_id(1, 3));
    wal.submit(
        7,
        &[Op::Vote(Vote::new_committed(2, 1)), Op::Truncate(9)],
        None,
    );
    append(&store, vec![entry(2, 9)]);
    wal.close();

    let (wal, report) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    assert!(report.cut.is_empty());
    assert_eq!(indexes(&wal, 7), (4..=9).collect::<Vec<_>>());
    let state = wal.group(7);
    let state = state.lock();
    assert_eq!(state.purged, Some(log_id(1, 3)));
    assert_eq!(state.vote, Some(Vote::new_committed(2, 1)));
    assert_eq!(state.entries[&9].log_id, log_id(2, 9));
    drop(state);
    wal.close();
}

#[test]
fn many_groups_share_one_fdatasync_per_batch() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    let before = wal.syncs();
    let flushed = Arc::new(AtomicU64::new(0));
    let stores: Vec<GroupLogStore> = (0..10).map(|g| GroupLogStore::new(&wal, g)).collect();
    let (sender, receiver) = mpsc::channel();
    for index in 1..=100 {
        for store in &stores {
            let flushed = Arc::clone(&flushed);
            let sender = sender.clone();
            store.append_entries(vec![entry(1, index)], move |result| {
                result.unwrap();
                flushed.fetch_add(1, Ordering::Relaxed);
                let _ = sender.send(());
            });
        }
    }
    for _ in 0..1_000 {
        receiver.recv().unwrap();
    }
    assert_eq!(flushed.load(Ordering::Relaxed), 1_000);
    let syncs = wal.syncs() - before;
    assert!(
        syncs < 500,
        "1,000 appends of 10 groups took {syncs} fdatasyncs: they were not batched"
    );
    wal.close();
}

#[test]
fn a_hundred_thousand_entries_appended_and_compacted_leave_only_a_few_segment_files() {
    let dir = tempfile::tempdir().unwrap();
    let options = WalOptions {
        max_wal_bytes: 512 * 1024,
    };
    let (wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
    let groups: Vec<GroupLogStore> = (1..=3).map(|g| GroupLogStore::new(&wal, g)).collect();
    // An idle group whose one entry stays live: it must not pin the other groups' files.
    let idle = GroupLogStore::new(&wal, 99);
    append(&idle, vec![entry(1, 1)]);
    let total = 100_000u64;
    let per_group = total / groups.len() as u64;
    let batch = 500;
    let mut index = 0;
    while index < per_group {
        let end = (index + batch).min(per_group);
        for store in &groups {
            append(store, ((index + 1)..=end).map(|i| entry(1, i)).collect());
            // As openraft does after a snapshot: keep a tail, purge the rest.
            if end > 1_000 {
                store.purge_to(log_id(1, end - 1_000));
            }
        }
        index = end;
    }
    append(&groups[0], vec![entry(1, per_group + 1)]);
    wal.wait_for_segments();
    let usage = wal.disk_use().unwrap();
    eprintln!(
        "disk after {total} entries: {usage:?}, {} fdatasyncs",
        wal.syncs()
    );
    assert!(
        usage.segment_files + usage.wal_files <= 12,
        "{usage:?} after {total} entries"
    );
    assert!(usage.bytes < 4 * 1024 * 1024, "{usage:?}");
    wal.close();

    let (wal, report) = Wal::open(dir.path(), options).unwrap();
    assert!(report.cut.is_empty());
    assert_eq!(indexes(&wal, 99), vec![1]);
    for g in 1..=3 {
        let live = indexes(&wal, g);
        assert!(live.len() <= 1_001, "group {g} kept {}", live.len());
        assert_eq!(
            live.last().copied(),
            Some(if g == 1 { per_group + 1 } else { per_group })
        );
        assert!(live.windows(2).all(|w| w[1] == w[0] + 1), "no gaps");
    }
    wal.close();
}

#[test]
fn a_torn_tail_is_cut_on_reopen_and_the_log_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    let store = GroupLogStore::new(&wal, 1);
    append(&store, (1..=10).map(|i| entry(1, i)).collect());
    wal.close();
    // A crash in the middle of the next write: half a record at the end of the file.
    let (_, path) = numbered(&dir.path().join("wal"), "wal")
        .unwrap()
        .pop()
        .unwrap();
    let mut torn = Vec::new();
    record::encode(&mut torn, 1, &Op::Entry(entry(1, 11)));
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
    file.write_all(&torn[..torn.len() / 2]).unwrap();
    drop(file);

    let (wal, report) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    assert_eq!(report.cut.len(), 1, "{report:?}");
    assert_eq!(report.cut[0].1, (torn.len() / 2) as u64);
    assert_eq!(indexes(&wal, 1), (1..=10).collect::<Vec<_>>());
    let store = GroupLogStore::new(&wal, 1);
    append(&store, vec![entry(1, 11)]);
    wal.close();

    let (wal, report) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    assert!(report.cut.is_empty(), "{report:?}");
    assert_eq!(indexes(&wal, 1), (1..=11).collect::<Vec<_>>());
    wal.close();
}

#[test]
fn a_corrupted_last_record_is_cut_like_a_torn_one() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    let store = GroupLogStore::new(&wal, 1);
    for i in 1..=3 {
        append(&store, vec![entry(1, i)]);
    }
    wal.close();
    let (_, path) = numbered(&dir.path().join("wal"), "wal")
        .unwrap()
        .pop()
        .unwrap();
    let mut bytes = fs::read(&path).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0xFF;
    fs::write(&path, &bytes).unwrap();
    let (wal, report) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    assert_eq!(report.cut.len(), 1);
    assert_eq!(indexes(&wal, 1), vec![1, 2]);
    wal.close();
}

#[test]
fn a_wal_file_whose_split_was_interrupted_replays_to_the_same_log() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    let store = GroupLogStore::new(&wal, 5);
    append(&store, (1..=5).map(|i| entry(1, i)).collect());
    wal.submit(5, &[Op::Truncate(4)], None);
    append(&store, vec![entry(2, 4)]);
    wal.close();
    // Keep a copy of the WAL file: reopening splits it into a segment and deletes it; putting
    // it back is a crash between the two.
    let (seq, path) = numbered(&dir.path().join("wal"), "wal")
        .unwrap()
        .pop()
        .unwrap();
    let copy = fs::read(&path).unwrap();
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    wal.close();
    fs::write(dir.path().join("wal").join(file_name(seq, "wal")), copy).unwrap();
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    assert_eq!(indexes(&wal, 5), vec![1, 2, 3, 4]);
    assert_eq!(wal.group(5).lock().entries[&4].log_id, log_id(2, 4));
    wal.close();
}

/// The child process of [`a_wal_killed_with_sigkill_recovers_every_flushed_entry`]: appends
/// until it is killed, printing how far the log is durable after each flush.
#[test]
#[ignore = "run as a child process by a_wal_killed_with_sigkill_recovers_every_flushed_entry"]
fn sigkill_child_writer() {
    let Some(dir) = std::env::var_os("WARREN_RAFT_WAL_CHILD") else {
        return;
    };
    let options = WalOptions {
        max_wal_bytes: 64 * 1024,
    };
    let (wal, _) = Wal::open(PathBuf::from(dir), options).unwrap();
    let store = GroupLogStore::new(&wal, 1);
    let mut index = 0;
    loop {
        append(
            &store,
            ((index + 1)..=(index + 50)).map(|i| entry(1, i)).collect(),
        );
        index += 50;
        println!("durable {index}");
    }
}

#[test]
fn a_wal_killed_with_sigkill_recovers_every_flushed_entry() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command as Process, Stdio};

    let dir = tempfile::tempdir().unwrap();
    let mut child = Process::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "wal::tests::sigkill_child_writer",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("WARREN_RAFT_WAL_CHILD", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut durable = 0u64;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(line) = line else { break };
        if let Some(count) = line.strip_prefix("durable ") {
            durable = count.parse().unwrap();
            if durable >= 5_000 {
                break;
            }
        }
    }
    // std's kill is SIGKILL on Unix: no destructor, no flush, possibly in mid-write.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(durable >= 5_000, "the child stopped early at {durable}");

    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    let live = indexes(&wal, 1);
    assert_eq!(live.first(), Some(&1));
    assert!(live.windows(2).all(|w| w[1] == w[0] + 1), "no gaps");
    assert!(
        live.len() as u64 >= durable,
        "{} entries recovered, {durable} were reported durable",
        live.len()
    );
    wal.close();
}

#[test]
fn a_removed_group_leaves_no_files_and_does_not_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let options = WalOptions {
        max_wal_bytes: 16 * 1024,
    };
    let (wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
    let doomed = GroupLogStore::new(&wal, 5);
    let kept = GroupLogStore::new(&wal, 6);
    // Enough to roll the WAL over: group 5 gets segment files.
    append(&doomed, (1..=300).map(|i| entry(1, i)).collect());
    append(&kept, vec![entry(1, 1)]);
    wal.wait_for_segments();
    assert!(wal.group_dir(5).exists());
    let (sender, receiver) = mpsc::channel();
    wal.remove_group(
        5,
        Some(Box::new(move |result| {
            let _ = sender.send(result);
        })),
    );
    receiver.recv().unwrap().unwrap();
    assert!(!wal.group_dir(5).exists());
    // The removal is still in the current WAL file: a reopen must not bring the group back.
    append(&kept, vec![entry(1, 2)]);
    wal.close();
    let (wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
    assert_eq!(wal.groups(), vec![6]);
    assert_eq!(indexes(&wal, 6), vec![1, 2]);
    wal.close();
    let (wal, _) = Wal::open(dir.path(), options).unwrap();
    assert_eq!(wal.groups(), vec![6]);
    assert!(!wal.group_dir(5).exists());
    wal.close();
}

#[test]
fn an_append_after_close_is_answered_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), WalOptions::default()).unwrap();
    let store = GroupLogStore::new(&wal, 1);
    wal.close();
    let (sender, receiver) = mpsc::channel();
    store.append_entries(vec![entry(1, 1)], move |result| {
        let _ = sender.send(result);
    });
    assert!(receiver.recv().unwrap().is_err());
}
