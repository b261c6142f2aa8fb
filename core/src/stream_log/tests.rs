//! The stream log end to end on real files: appends, reads by every offset specification,
//! deduplication, offset tracking, retention, and recovery from a cut at any byte.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;

use super::*;

struct Dir(PathBuf);

impl Dir {
    fn new(label: &str) -> Dir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "warren-stream-{label}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        Dir(path)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn record(body: &str, publishing_id: u64) -> Record {
    Record {
        body: Bytes::from(body.to_owned()),
        publishing_id,
        filter: None,
    }
}

/// Publishes and waits for the confirm.
fn publish(log: &StreamLog, producer: Option<&str>, records: Vec<Record>) -> Written {
    let (done, confirmed) = mpsc::channel();
    log.publish(Publish {
        producer: producer.map(str::to_owned),
        records,
        on_written: Box::new(move |result| {
            let _ = done.send(result);
        }),
    });
    confirmed
        .recv_timeout(Duration::from_secs(10))
        .expect("confirmed")
        .expect("written")
}

/// Every record from `spec` on, with its offset.
fn read_all(log: &StreamLog, spec: OffsetSpec) -> Vec<(u64, Vec<u8>)> {
    let mut reader = log.reader(spec).unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = reader.next_chunk().unwrap() {
        for (i, body) in chunk.records().enumerate() {
            out.push((chunk.header.first_offset + i as u64, body.to_vec()));
        }
    }
    out
}

fn small_segments(max_segment_size: u64) -> StreamSettings {
    StreamSettings {
        max_segment_size,
        ..StreamSettings::default()
    }
}

fn open(dir: &Path, settings: StreamSettings) -> std::sync::Arc<StreamLog> {
    StreamLog::open("test", dir, settings).unwrap()
}

#[test]
fn records_are_read_back_from_every_offset_specification() {
    let dir = Dir::new("specs");
    let log = open(&dir.0, small_segments(300));
    for i in 0..10 {
        publish(
            &log,
            None,
            vec![record(&format!("m{i}"), i), record(&format!("n{i}"), i)],
        );
    }
    let all = read_all(&log, OffsetSpec::First);
    assert_eq!(all.len(), 20);
    assert!(all
        .iter()
        .enumerate()
        .all(|(i, (offset, _))| *offset == i as u64));
    assert!(log.stats().segments > 1, "{:?}", log.stats());
    assert_eq!(read_all(&log, OffsetSpec::Next), vec![]);
    let last = read_all(&log, OffsetSpec::Last);
    assert_eq!(last, vec![(18, b"m9".to_vec()), (19, b"n9".to_vec())]);
    let from_7 = read_all(&log, OffsetSpec::Offset(7));
    assert_eq!(
        from_7.first().map(|r| r.0),
        Some(6),
        "the whole chunk holding 7"
    );
    assert_eq!(from_7.len(), 14);
    assert_eq!(read_all(&log, OffsetSpec::Offset(1_000)), vec![]);
    assert_eq!(read_all(&log, OffsetSpec::Timestamp(0)).len(), 20);
    assert_eq!(read_all(&log, OffsetSpec::Timestamp(i64::MAX)), vec![]);
    assert_eq!(log.resolve(OffsetSpec::Last).unwrap(), 18);
    assert_eq!(log.resolve(OffsetSpec::Next).unwrap(), 20);
}

#[test]
fn a_named_producer_is_deduplicated_across_a_restart() {
    let dir = Dir::new("dedup");
    {
        let log = open(&dir.0, small_segments(200));
        let written = publish(&log, Some("p1"), vec![record("a", 1), record("b", 2)]);
        assert_eq!((written.confirmed, written.duplicates), (vec![1, 2], 0));
        let written = publish(&log, Some("p1"), vec![record("b", 2), record("c", 3)]);
        assert_eq!((written.confirmed, written.duplicates), (vec![2, 3], 1));
        // Unnamed producers are never deduplicated.
        publish(&log, None, vec![record("x", 1)]);
        assert_eq!(log.producer_sequence("p1"), 3);
        assert_eq!(log.producer_sequence("nobody"), 0);
    }
    let log = open(&dir.0, small_segments(200));
    assert_eq!(log.producer_sequence("p1"), 3);
    let written = publish(&log, Some("p1"), vec![record("c", 3), record("d", 4)]);
    assert_eq!(written.duplicates, 1);
    let bodies: Vec<Vec<u8>> = read_all(&log, OffsetSpec::First)
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(
        bodies,
        vec![
            b"a".to_vec(),
            b"b".to_vec(),
            b"c".to_vec(),
            b"x".to_vec(),
            b"d".to_vec()
        ]
    );
}

#[test]
fn stored_offsets_survive_a_restart_and_retention() {
    let dir = Dir::new("offsets");
    let settings = StreamSettings {
        max_segment_size: 200,
        max_length_bytes: Some(400),
        ..StreamSettings::default()
    };
    {
        let log = open(&dir.0, settings.clone());
        publish(&log, None, vec![record("first", 0)]);
        log.store_offset("app", 0);
        assert_eq!(log.query_offset("app"), Some(0));
        for i in 1..40 {
            publish(&log, Some("p"), vec![record(&format!("{i:040}"), i)]);
        }
        log.store_offset("app", 30);
        publish(&log, None, vec![record("last", 0)]);
        assert!(
            log.stats().first_offset > 0,
            "retention dropped old segments"
        );
        assert!(log.stats().bytes <= 400 + 200, "{:?}", log.stats());
    }
    let log = open(&dir.0, settings);
    assert_eq!(log.query_offset("app"), Some(30));
    assert_eq!(log.query_offset("other"), None);
    assert_eq!(log.producer_sequence("p"), 39);
    let all = read_all(&log, OffsetSpec::First);
    assert_eq!(all.last().map(|r| r.1.clone()), Some(b"last".to_vec()));
    assert_eq!(all.first().map(|r| r.0), Some(log.stats().first_offset));
}

#[test]
fn age_retention_deletes_old_segments_but_never_the_newest() {
    let dir = Dir::new("age");
    let log = open(
        &dir.0,
        StreamSettings {
            max_segment_size: 100,
            max_age: Some(Duration::from_millis(1)),
            ..StreamSettings::default()
        },
    );
    for i in 0..5 {
        publish(&log, None, vec![record(&format!("{i:060}"), i)]);
    }
    std::thread::sleep(Duration::from_millis(5));
    log.apply_retention();
    let stats = log.stats();
    assert_eq!(stats.segments, 1, "{stats:?}");
    assert_eq!(read_all(&log, OffsetSpec::First).len(), 1);
}

#[test]
fn filtered_readers_skip_chunks_without_their_values() {
    let dir = Dir::new("filter");
    let log = open(&dir.0, StreamSettings::default());
    let filtered = |value: &str, id| Record {
        filter: Some(value.to_owned()),
        ..record(value, id)
    };
    publish(&log, None, vec![filtered("eu", 0)]);
    publish(&log, None, vec![filtered("us", 1)]);
    publish(&log, None, vec![record("plain", 2)]);
    let read = |filter: ChunkFilter| {
        let mut reader = log
            .reader(OffsetSpec::First)
            .unwrap()
            .with_filter(Some(filter));
        let mut bodies = Vec::new();
        while let Some(chunk) = reader.next_chunk().unwrap() {
            bodies.extend(
                chunk
                    .records()
                    .map(|r| String::from_utf8_lossy(r).into_owned()),
            );
        }
        bodies
    };
    let eu = ChunkFilter {
        values: vec!["eu".into()],
        match_unfiltered: false,
    };
    assert_eq!(read(eu.clone()), vec!["eu"]);
    assert_eq!(
        read(ChunkFilter {
            match_unfiltered: true,
            ..eu
        }),
        vec!["eu", "plain"]
    );
}

#[test]
fn a_torn_tail_is_cut_and_writing_goes_on_after_it() {
    let dir = Dir::new("torn");
    {
        let log = open(&dir.0, StreamSettings::default());
        publish(&log, None, vec![record("kept", 0)]);
        publish(&log, None, vec![record("torn", 1)]);
    }
    let (segment, _) = segment::segment_paths(&dir.0, 0);
    let length = std::fs::metadata(&segment).unwrap().len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap();
    file.set_len(length - 3).unwrap();
    drop(file);
    let log = open(&dir.0, StreamSettings::default());
    assert_eq!(log.stats().next_offset, 1);
    publish(&log, None, vec![record("after", 1)]);
    let bodies: Vec<Vec<u8>> = read_all(&log, OffsetSpec::First)
        .into_iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(bodies, vec![b"kept".to_vec(), b"after".to_vec()]);
}

#[test]
fn a_deleted_stream_refuses_publishes_and_removes_its_files() {
    let dir = Dir::new("delete");
    let log = open(&dir.0, StreamSettings::default());
    publish(&log, None, vec![record("a", 0)]);
    log.delete().unwrap();
    assert!(!dir.0.exists());
    let (done, result) = mpsc::channel();
    log.publish(Publish {
        producer: None,
        records: vec![record("b", 1)],
        on_written: Box::new(move |r| {
            let _ = done.send(r);
        }),
    });
    assert!(result.recv().unwrap().is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Random batches, then a crash that cuts the newest segment at a random byte: every
    /// record that was confirmed before the cut point survives in order, nothing after a
    /// torn chunk is invented, and the stream accepts writes again.
    #[test]
    fn recovery_after_a_cut_keeps_a_prefix_of_what_was_confirmed(
        batches in proptest::collection::vec(proptest::collection::vec(0usize..40, 1..4), 1..12),
        segment_size in 120u64..600,
        cut in 0.0f64..1.0,
    ) {
        let dir = Dir::new("prop");
        let mut expected = Vec::new();
        {
            let log = open(&dir.0, small_segments(segment_size));
            for (b, batch) in batches.iter().enumerate() {
                let records: Vec<Record> = batch
                    .iter()
                    .enumerate()
                    .map(|(i, len)| record(&format!("{b}.{i}.{}", "x".repeat(*len)), 0))
                    .collect();
                expected.extend(records.iter().map(|r| r.body.to_vec()));
                publish(&log, None, records);
            }
            prop_assert_eq!(read_all(&log, OffsetSpec::First).into_iter().map(|r| r.1).collect::<Vec<_>>(), expected.clone());
        }
        let newest = *segment::list_segments(&dir.0).unwrap().last().unwrap();
        let (path, _) = segment::segment_paths(&dir.0, newest);
        let length = std::fs::metadata(&path).unwrap().len();
        let keep = ((length as f64) * cut) as u64;
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(keep).unwrap();
        let log = open(&dir.0, small_segments(segment_size));
        let read: Vec<Vec<u8>> = read_all(&log, OffsetSpec::First).into_iter().map(|r| r.1).collect();
        prop_assert!(read.len() <= expected.len());
        prop_assert_eq!(&read[..], &expected[..read.len()]);
        prop_assert_eq!(log.stats().next_offset, read.len() as u64);
        publish(&log, None, vec![record("again", 0)]);
        let again = read_all(&log, OffsetSpec::First);
        prop_assert_eq!(again.last().map(|r| (r.0, r.1.clone())), Some((read.len() as u64, b"again".to_vec())));
    }
}
