//! A leader and its replicas as three logs in one process, no sockets: the replica copies
//! what `read_for_replica` gives it, confirms wait for a majority, a replica that starts
//! late catches up from its tail, and a former leader cuts off the tail a new epoch does
//! not have.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::replication::{truncation_point, Placement, Role};
use super::*;

struct Dir(PathBuf);

impl Dir {
    fn new(label: &str) -> Dir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "warren-replica-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        Dir(path)
    }

    fn member(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn small(max_segment_size: u64) -> StreamSettings {
    StreamSettings {
        max_segment_size,
        ..StreamSettings::default()
    }
}

fn open(dir: &Path) -> Arc<StreamLog> {
    StreamLog::open("s", dir, small(400)).unwrap()
}

/// Publishes `bodies` as one batch; the receiver gets its outcome once confirmed.
fn publish(log: &StreamLog, bodies: &[&str]) -> mpsc::Receiver<Result<Written, String>> {
    use std::sync::atomic::{AtomicU64, Ordering};
    // Publishing ids only grow, across logs and tests (a repeated one is a duplicate).
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    let (done, outcome) = mpsc::channel();
    log.publish(Publish {
        producer: Some("p".into()),
        records: bodies
            .iter()
            .map(|body| Record {
                body: Bytes::from(body.to_string()),
                publishing_id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                filter: None,
            })
            .collect(),
        on_written: Box::new(move |result| {
            let _ = done.send(result);
        }),
    });
    outcome
}

/// One fetch of the replica from the leader, as the follower task does it: the leader
/// learns the replica's tail, the replica appends what it got. Returns the chunks copied.
fn fetch(leader: &StreamLog, replica: &StreamLog, name: &str) -> usize {
    let tail = replica.replica_tail();
    leader.replica_written(name, tail.next_offset);
    let chunks = leader.read_for_replica(tail, 1 << 20).unwrap();
    let count = chunks.len();
    if count > 0 {
        let (done, appended) = mpsc::channel();
        replica.append_replicated(
            chunks,
            Box::new(move |result| {
                let _ = done.send(result);
            }),
        );
        appended
            .recv_timeout(Duration::from_secs(10))
            .unwrap()
            .unwrap();
    }
    // The answer carries the leader's commit offset: the replica's readers read that far.
    replica.leader_committed(leader.committed_offset());
    count
}

/// Fetches until the replica has everything, then once more (its acknowledgement).
fn catch_up(leader: &StreamLog, replica: &StreamLog, name: &str) {
    while fetch(leader, replica, name) > 0 {}
}

/// Fetches until `confirm` comes (the leader's writer may not have written yet).
fn fetch_until_confirmed(
    leader: &StreamLog,
    replica: &StreamLog,
    name: &str,
    confirm: &mpsc::Receiver<Result<Written, String>>,
) -> Written {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        fetch(leader, replica, name);
        if let Ok(outcome) = confirm.recv_timeout(Duration::from_millis(10)) {
            return outcome.unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "confirmed in time");
    }
}

fn bodies(log: &StreamLog) -> Vec<String> {
    let mut reader = log.reader(OffsetSpec::First).unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        out.extend(
            chunk
                .records()
                .map(|r| String::from_utf8_lossy(r).into_owned()),
        );
    }
    out
}

fn members() -> Vec<String> {
    vec!["a".into(), "b".into(), "c".into()]
}

#[test]
fn a_publish_is_confirmed_once_a_replica_has_it_and_the_copy_is_the_same_log() {
    let dir = Dir::new("confirm");
    let (a, b) = (open(&dir.member("a")), open(&dir.member("b")));
    let placement = Placement::initial(members(), "a", 0);
    a.set_placement(&placement, "a");
    b.set_placement(&placement, "b");
    assert_eq!(a.role(), Role::Leader { epoch: 1 });
    assert_eq!(b.role(), Role::Replica { epoch: 1 });

    let waiting = publish(&a, &["one", "two"]);
    a.store_offset("consumer", 1);
    assert!(
        waiting.recv_timeout(Duration::from_millis(300)).is_err(),
        "the leader alone is no majority"
    );
    assert!(
        bodies(&a).is_empty(),
        "the leader's readers wait until a majority has the chunk"
    );
    let written = fetch_until_confirmed(&a, &b, "b", &waiting);
    assert_eq!(bodies(&a), vec!["one", "two"]);
    catch_up(&a, &b, "b");
    assert_eq!(written.confirmed.len(), 2);
    assert_eq!(bodies(&b), vec!["one", "two"]);
    assert_eq!(
        b.replica_tail(),
        a.replica_tail(),
        "same end, same trailing chunks"
    );
    assert_eq!(
        b.query_offset("consumer"),
        Some(1),
        "offsets travel in tracking chunks"
    );
    assert_eq!(
        b.producer_sequence("p"),
        a.producer_sequence("p"),
        "so do producer sequences"
    );
    assert_eq!(b.replica_tail().last_epoch, 1);

    // A replica refuses publishes.
    let refused = publish(&b, &["x"]);
    let outcome = refused.recv_timeout(Duration::from_secs(5)).unwrap();
    assert!(outcome.unwrap_err().contains("led by node 'a'"));
}

#[test]
fn a_replica_that_starts_late_catches_up_over_segment_rolls() {
    let dir = Dir::new("late");
    let (a, c) = (open(&dir.member("a")), open(&dir.member("c")));
    let placement = Placement::initial(members(), "a", 0);
    a.set_placement(&placement, "a");
    let b = open(&dir.member("b"));
    b.set_placement(&placement, "b");
    for i in 0..30 {
        let confirm = publish(&a, &[&format!("m{i}-with-some-length")]);
        fetch_until_confirmed(&a, &b, "b", &confirm);
    }
    catch_up(&a, &b, "b");
    assert!(a.stats().segments > 2, "the leader rolled: {:?}", a.stats());
    // c joins late and copies it all, rolling where the leader rolled.
    c.set_placement(&placement, "c");
    catch_up(&a, &c, "c");
    assert_eq!(bodies(&c), bodies(&a));
    assert_eq!(c.stats().segments, a.stats().segments);
    assert_eq!(c.replica_tail(), a.replica_tail());
    // Restarted, it recovers the same tail and goes on from it.
    drop(c);
    let c = open(&dir.member("c"));
    assert_eq!(
        c.role(),
        Role::Replica { epoch: 1 },
        "its placement was saved"
    );
    assert_eq!(c.replica_tail(), a.replica_tail());
    let last = publish(&a, &["after"]);
    fetch_until_confirmed(&a, &c, "c", &last);
    assert_eq!(bodies(&c).last().map(String::as_str), Some("after"));
}

#[test]
fn a_former_leader_cuts_off_what_the_new_leader_never_had() {
    let dir = Dir::new("cut");
    let (a, b) = (open(&dir.member("a")), open(&dir.member("b")));
    let first = Placement::initial(members(), "a", 0);
    a.set_placement(&first, "a");
    b.set_placement(&first, "b");
    let confirmed = publish(&a, &["kept-1", "kept-2"]);
    fetch_until_confirmed(&a, &b, "b", &confirmed);
    catch_up(&a, &b, "b");
    // Written on the leader only, never confirmed; then the leader is lost.
    let lost = publish(&a, &["lost"]);
    assert!(lost.recv_timeout(Duration::from_millis(200)).is_err());
    let tail = b.replica_tail().next_offset;
    let second = first.next_epoch("b", tail);
    b.set_placement(&second, "b");
    a.set_placement(&second, "a");
    assert!(
        lost.recv_timeout(Duration::from_secs(5)).unwrap().is_err(),
        "a leader that stops leading fails what it held"
    );
    let in_epoch_2 = publish(&b, &["new"]);
    // The metadata log replayed after a restart applies the first placement again, and a
    // second proposal for epoch 2 loses to the first: neither changes anything.
    a.set_placement(&first, "a");
    a.set_placement(&first.next_epoch("a", 0), "a");
    assert_eq!(a.role(), Role::Replica { epoch: 2 });
    assert_eq!(a.placement(), Some(second.clone()));

    // The old leader's log goes past the new epoch's start with an epoch-1 chunk.
    let at = a.replica_tail();
    let point = truncation_point(at.next_offset, at.last_epoch, &second.epochs);
    assert_eq!(point, Some(tail));
    let (done, cut) = mpsc::channel();
    a.truncate(
        tail,
        Box::new(move |result| {
            let _ = done.send(result);
        }),
    );
    assert_eq!(cut.recv_timeout(Duration::from_secs(5)).unwrap(), Ok(tail));
    assert_eq!(bodies(&a), vec!["kept-1", "kept-2"]);
    fetch_until_confirmed(&b, &a, "a", &in_epoch_2);
    catch_up(&b, &a, "a");
    assert_eq!(bodies(&a), vec!["kept-1", "kept-2", "new"]);
    assert_eq!(a.replica_tail(), b.replica_tail());
    assert_eq!(a.replica_tail().last_epoch, 2);
}

#[test]
fn a_replica_behind_the_leaders_retention_starts_again_at_the_leaders_oldest_chunk() {
    let dir = Dir::new("retention");
    let settings = StreamSettings {
        max_segment_size: 400,
        max_length_bytes: Some(900),
        ..StreamSettings::default()
    };
    let a = StreamLog::open("s", &dir.member("a"), settings).unwrap();
    let b = open(&dir.member("b"));
    let placement = Placement::initial(members(), "a", 0);
    a.set_placement(&placement, "a");
    b.set_placement(&placement, "b");
    for i in 0..40 {
        let confirm = publish(&a, &[&format!("m{i}-with-some-length")]);
        fetch_until_confirmed(&a, &b, "b", &confirm);
    }
    let first = a.stats().first_offset;
    assert!(
        first > 0,
        "retention removed the oldest segments: {:?}",
        a.stats()
    );

    // c was never there: its tail (0) is gone from the leader.
    let c = open(&dir.member("c"));
    c.set_placement(&placement, "c");
    assert_eq!(a.restart_point(c.replica_tail()), Some(first));
    let (done, restarted) = mpsc::channel();
    c.restart_at(
        first,
        Box::new(move |result| {
            let _ = done.send(result);
        }),
    );
    assert_eq!(
        restarted.recv_timeout(Duration::from_secs(5)).unwrap(),
        Ok(first)
    );
    assert_eq!(a.restart_point(c.replica_tail()), None);
    catch_up(&a, &c, "c");
    assert_eq!(bodies(&c), bodies(&a));
    assert_eq!(c.replica_tail(), a.replica_tail());
    assert_eq!(c.stats().first_offset, first);
    assert_eq!(c.producer_sequence("p"), a.producer_sequence("p"));
}
