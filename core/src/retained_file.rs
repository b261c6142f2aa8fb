//! Retained messages that survive a restart: [`FileRetained`] keeps every vhost's retained
//! messages in memory (reads never touch the disk) and appends each change to one log file,
//! `data_dir/retained.log`, from a writer thread with group commit.
//!
//! The publish path only encodes the change into a shared buffer; the writer thread writes
//! and fsyncs whatever accumulated and then moves [`RetainedStore::durable`]'s sequence
//! number, which an MQTT listener waits for before it acknowledges a retained publish (so a
//! PUBACK means the retained message survives a SIGKILL). At open the log is read up to the
//! first damaged record (a torn tail after a crash) and rewritten compacted; the writer
//! compacts it again whenever it holds several times more records than there are retained
//! messages. The same log carries persistent MQTT sessions' QoS 2 packet identifiers in
//! mid-exchange: inbound ones received but not yet released (so a PUBLISH re-sent after a
//! restart is not routed twice) and outbound ones whose PUBREC arrived but not their PUBCOMP
//! (so the PUBREL is sent again after a restart), and named per-session records the listener
//! keeps opaque to the store (MQTT 5 shared subscription memberships and delayed wills). The
//! format is in docs/storage.md.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use crate::message::{Message, Properties};
use crate::retained::{InMemoryRetained, RetainedMessage, RetainedStore, SessionRecord};

/// The log's file name inside `data_dir`.
pub const RETAINED_LOG: &str = "retained.log";

const MAGIC: &[u8; 4] = b"WRRT";
const RECORD_RETAIN: u8 = 1;
const RECORD_CLEAR: u8 = 2;
const RECORD_QOS2_RECEIVED: u8 = 3;
const RECORD_QOS2_RELEASED: u8 = 4;
const RECORD_FORGET_SESSION: u8 = 5;
const RECORD_OUTBOUND_QOS2_RELEASED: u8 = 6;
const RECORD_OUTBOUND_QOS2_COMPLETED: u8 = 7;
const RECORD_SESSION_PUT: u8 = 8;
const RECORD_SESSION_REMOVE: u8 = 9;
/// Compact once the log holds this many records more than there are retained messages.
const COMPACT_SLACK: u64 = 10_000;

/// One persistent session's QoS 2 packet identifiers in mid-exchange.
#[derive(Debug, Clone, Default)]
struct SessionQos2 {
    /// Inbound: received and routed, PUBREL awaited.
    inbound: Vec<u16>,
    /// Outbound: PUBREC received and PUBREL owed, PUBCOMP awaited; in PUBREC order.
    outbound: Vec<u16>,
    /// The listener's own named records ([`RetainedStore::session_put`]), in the order
    /// first put.
    records: Vec<(String, Vec<u8>)>,
}

impl SessionQos2 {
    fn is_empty(&self) -> bool {
        self.inbound.is_empty() && self.outbound.is_empty() && self.records.is_empty()
    }
}

/// QoS 2 packet identifiers in mid-exchange by (vhost, client id).
type Qos2Pending = HashMap<(String, String), SessionQos2>;

/// Changes not yet handed to the writer thread.
#[derive(Default)]
struct Pending {
    /// Persistent sessions' QoS 2 packet identifiers in mid-exchange (kept here, under the
    /// same lock as the log's order).
    qos2: Qos2Pending,
    records: Vec<u8>,
    /// Sequence number of the last change.
    sequence: u64,
    /// Compact before writing `records`.
    compact: bool,
    closed: bool,
}

struct Shared {
    memory: Arc<InMemoryRetained>,
    pending: Mutex<Pending>,
    wake: Condvar,
    durable: watch::Sender<u64>,
}

/// Retained messages in memory, logged to `data_dir/retained.log`.
pub struct FileRetained {
    shared: Arc<Shared>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl FileRetained {
    /// Opens (or creates) the log in `data_dir`, loads every retained message it holds,
    /// rewrites it compacted and starts the writer thread.
    pub fn open(data_dir: &Path) -> io::Result<Arc<FileRetained>> {
        fs::create_dir_all(data_dir)?;
        let path = data_dir.join(RETAINED_LOG);
        let memory = InMemoryRetained::new();
        let mut qos2 = Qos2Pending::new();
        let mut records = 0u64;
        if let Ok(mut file) = File::open(&path) {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)?;
            let (applied, damaged_at) = replay(&bytes, &memory, &mut qos2);
            records = applied;
            if let Some(offset) = damaged_at {
                tracing::warn!(
                    path = %path.display(),
                    offset,
                    "retained message log ends in a damaged record (a crash mid-write?); \
                     the changes before it are kept"
                );
            }
        }
        let count = total_count(&memory);
        let file = rewrite(&path, &memory, &qos2)?;
        tracing::info!(
            retained = count,
            replayed = records,
            "retained messages loaded"
        );
        let (durable, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            memory,
            pending: Mutex::new(Pending {
                qos2,
                ..Pending::default()
            }),
            wake: Condvar::new(),
            durable,
        });
        let writer_shared = Arc::clone(&shared);
        let writer = std::thread::Builder::new()
            .name("warren-retained-writer".into())
            .spawn(move || run_writer(&writer_shared, path, file, count as u64))?;
        Ok(Arc::new(FileRetained {
            shared,
            writer: Mutex::new(Some(writer)),
        }))
    }

    /// Writes what is pending and stops the writer thread (at shutdown; changes after it
    /// are kept in memory only).
    pub fn close(&self) {
        self.shared.pending.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(writer) = self.writer.lock().take() {
            let _ = writer.join();
        }
    }

    fn log(&self, record: &[u8], apply: impl FnOnce(&InMemoryRetained, &mut Qos2Pending)) {
        let mut pending = self.shared.pending.lock();
        // Applied under the pending lock, so the order of the log is the order of the map.
        apply(&self.shared.memory, &mut pending.qos2);
        frame(&mut pending.records, record);
        pending.sequence += 1;
        drop(pending);
        self.shared.wake.notify_one();
    }
}

impl Drop for FileRetained {
    fn drop(&mut self) {
        self.close();
    }
}

impl RetainedStore for FileRetained {
    fn retain(&self, vhost: &str, retained: RetainedMessage) {
        let record = encode_retain(vhost, &retained);
        self.log(&record, |memory, _| memory.retain(vhost, retained));
    }

    fn clear(&self, vhost: &str, topic: &str) {
        let record = encode_clear(vhost, topic);
        self.log(&record, |memory, _| memory.clear(vhost, topic));
    }

    fn matching(
        &self,
        vhost: &str,
        matches: &dyn Fn(&str) -> bool,
        out: &mut Vec<RetainedMessage>,
    ) {
        self.shared.memory.matching(vhost, matches, out);
    }

    fn get(&self, vhost: &str, topic: &str) -> Option<RetainedMessage> {
        self.shared.memory.get(vhost, topic)
    }

    fn count(&self, vhost: &str) -> usize {
        self.shared.memory.count(vhost)
    }

    fn last_change(&self) -> u64 {
        self.shared.pending.lock().sequence
    }

    fn durable(&self) -> Option<watch::Receiver<u64>> {
        Some(self.shared.durable.subscribe())
    }

    fn qos2_received(&self, vhost: &str, client_id: &str, packet_id: u16) {
        self.log_qos2(RECORD_QOS2_RECEIVED, vhost, client_id, packet_id);
    }

    fn qos2_released(&self, vhost: &str, client_id: &str, packet_id: u16) {
        self.log_qos2(RECORD_QOS2_RELEASED, vhost, client_id, packet_id);
    }

    fn forget_session(&self, vhost: &str, client_id: &str) {
        self.log_qos2(RECORD_FORGET_SESSION, vhost, client_id, 0);
    }

    fn qos2_pending(&self, vhost: &str, client_id: &str) -> Vec<u16> {
        self.session_qos2(vhost, client_id, |session| session.inbound.clone())
    }

    fn outbound_qos2_released(&self, vhost: &str, client_id: &str, packet_id: u16) {
        self.log_qos2(RECORD_OUTBOUND_QOS2_RELEASED, vhost, client_id, packet_id);
    }

    fn outbound_qos2_completed(&self, vhost: &str, client_id: &str, packet_id: u16) {
        self.log_qos2(RECORD_OUTBOUND_QOS2_COMPLETED, vhost, client_id, packet_id);
    }

    fn outbound_qos2_pending(&self, vhost: &str, client_id: &str) -> Vec<u16> {
        self.session_qos2(vhost, client_id, |session| session.outbound.clone())
    }

    fn session_put(&self, vhost: &str, client_id: &str, name: &str, value: &[u8]) {
        let record = encode_session_record(vhost, client_id, name, Some(value));
        self.log(&record, |_, qos2| {
            session_record_apply(qos2, vhost, client_id, name, Some(value))
        });
    }

    fn session_remove(&self, vhost: &str, client_id: &str, name: &str) {
        let record = encode_session_record(vhost, client_id, name, None);
        self.log(&record, |_, qos2| {
            session_record_apply(qos2, vhost, client_id, name, None)
        });
    }

    fn session_records(&self) -> Vec<SessionRecord> {
        let pending = self.shared.pending.lock();
        let mut all = Vec::new();
        for ((vhost, client_id), session) in &pending.qos2 {
            for (name, value) in &session.records {
                all.push(SessionRecord {
                    vhost: vhost.clone(),
                    client_id: client_id.clone(),
                    name: name.clone(),
                    value: value.clone(),
                });
            }
        }
        all
    }
}

impl FileRetained {
    fn session_qos2(
        &self,
        vhost: &str,
        client_id: &str,
        read: impl FnOnce(&SessionQos2) -> Vec<u16>,
    ) -> Vec<u16> {
        self.shared
            .pending
            .lock()
            .qos2
            .get(&(vhost.to_string(), client_id.to_string()))
            .map(read)
            .unwrap_or_default()
    }

    fn log_qos2(&self, kind: u8, vhost: &str, client_id: &str, packet_id: u16) {
        let record = encode_qos2(kind, vhost, client_id, packet_id);
        self.log(&record, |_, qos2| {
            qos2_apply(qos2, kind, vhost, client_id, packet_id)
        });
    }
}

/// Applies one QoS 2 record to the map of packet identifiers in mid-exchange.
fn qos2_apply(qos2: &mut Qos2Pending, kind: u8, vhost: &str, client_id: &str, packet_id: u16) {
    let key = (vhost.to_string(), client_id.to_string());
    let (add, ids_of): (bool, fn(&mut SessionQos2) -> &mut Vec<u16>) = match kind {
        RECORD_QOS2_RECEIVED => (true, |session| &mut session.inbound),
        RECORD_QOS2_RELEASED => (false, |session| &mut session.inbound),
        RECORD_OUTBOUND_QOS2_RELEASED => (true, |session| &mut session.outbound),
        RECORD_OUTBOUND_QOS2_COMPLETED => (false, |session| &mut session.outbound),
        _ => {
            qos2.remove(&key);
            return;
        }
    };
    if add {
        let ids = ids_of(qos2.entry(key).or_default());
        if !ids.contains(&packet_id) {
            ids.push(packet_id);
        }
    } else if let Some(session) = qos2.get_mut(&key) {
        ids_of(session).retain(|id| *id != packet_id);
        if session.is_empty() {
            qos2.remove(&key);
        }
    }
}

/// Applies one session record put (`Some(value)`) or removal (`None`).
fn session_record_apply(
    qos2: &mut Qos2Pending,
    vhost: &str,
    client_id: &str,
    name: &str,
    value: Option<&[u8]>,
) {
    let key = (vhost.to_string(), client_id.to_string());
    match value {
        Some(value) => {
            let records = &mut qos2.entry(key).or_default().records;
            match records.iter_mut().find(|(existing, _)| existing == name) {
                Some((_, old)) => *old = value.to_vec(),
                None => records.push((name.to_string(), value.to_vec())),
            }
        }
        None => {
            if let Some(session) = qos2.get_mut(&key) {
                session.records.retain(|(existing, _)| existing != name);
                if session.is_empty() {
                    qos2.remove(&key);
                }
            }
        }
    }
}

fn encode_session_record(
    vhost: &str,
    client_id: &str,
    name: &str,
    value: Option<&[u8]>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(
        17 + vhost.len() + client_id.len() + name.len() + value.map_or(0, <[u8]>::len),
    );
    out.push(if value.is_some() {
        RECORD_SESSION_PUT
    } else {
        RECORD_SESSION_REMOVE
    });
    put_str(&mut out, vhost);
    put_str(&mut out, client_id);
    put_str(&mut out, name);
    if let Some(value) = value {
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
    out
}

fn encode_qos2(kind: u8, vhost: &str, client_id: &str, packet_id: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(11 + vhost.len() + client_id.len());
    out.push(kind);
    put_str(&mut out, vhost);
    put_str(&mut out, client_id);
    out.extend_from_slice(&packet_id.to_le_bytes());
    out
}

fn run_writer(shared: &Shared, path: PathBuf, mut file: File, mut live: u64) {
    let mut logged = live;
    loop {
        let (records, sequence, compact, closed) = {
            let mut pending = shared.pending.lock();
            while pending.records.is_empty() && !pending.closed {
                shared.wake.wait(&mut pending);
            }
            let compact = std::mem::take(&mut pending.compact).then(|| {
                // Everything up to now is in the maps: the snapshot replaces the pending
                // records. Changes after this point are logged after the snapshot, and
                // replaying one twice is harmless (each record sets a final state).
                pending.records.clear();
                pending.qos2.clone()
            });
            (
                std::mem::take(&mut pending.records),
                pending.sequence,
                compact,
                pending.closed,
            )
        };
        let result = if let Some(qos2) = compact {
            live = total_count(&shared.memory) as u64;
            logged = live;
            rewrite(&path, &shared.memory, &qos2).map(|rewritten| file = rewritten)
        } else {
            logged += count_records(&records);
            file.write_all(&records).and_then(|()| file.sync_data())
        };
        match result {
            Ok(()) => {
                shared.durable.send_replace(sequence);
            }
            // Acknowledgements stay held (the sequence does not move) until a write works.
            Err(error) => {
                tracing::error!(path = %path.display(), %error, "cannot write retained messages")
            }
        }
        if closed {
            return;
        }
        live = total_count(&shared.memory) as u64;
        if logged > live.saturating_mul(2) + COMPACT_SLACK {
            let mut pending = shared.pending.lock();
            pending.compact = true;
            // A non-empty buffer wakes the loop; the record is dropped by the compaction.
            frame(&mut pending.records, &[]);
        }
    }
}

fn total_count(memory: &InMemoryRetained) -> usize {
    memory.vhost_names().iter().map(|v| memory.count(v)).sum()
}

fn count_records(framed: &[u8]) -> u64 {
    let mut count = 0;
    let mut at = 0;
    while let Some(length) = framed
        .get(at + 4..at + 8)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    {
        at += 12 + length;
        count += 1;
    }
    count
}

/// Writes every retained message to a new log and renames it over the old one (fsyncing
/// the file and the directory); returns the new log, open for appending.
fn rewrite(path: &Path, memory: &InMemoryRetained, qos2: &Qos2Pending) -> io::Result<File> {
    let temporary = path.with_extension("log.tmp");
    let mut bytes = Vec::new();
    for vhost in memory.vhost_names() {
        let mut all = Vec::new();
        memory.matching(&vhost, &|_| true, &mut all);
        for retained in &all {
            frame(&mut bytes, &encode_retain(&vhost, retained));
        }
    }
    for ((vhost, client_id), session) in qos2 {
        for id in &session.inbound {
            let record = encode_qos2(RECORD_QOS2_RECEIVED, vhost, client_id, *id);
            frame(&mut bytes, &record);
        }
        // In PUBREC order: the order PUBREL is sent again in.
        for id in &session.outbound {
            let record = encode_qos2(RECORD_OUTBOUND_QOS2_RELEASED, vhost, client_id, *id);
            frame(&mut bytes, &record);
        }
        for (name, value) in &session.records {
            let record = encode_session_record(vhost, client_id, name, Some(value));
            frame(&mut bytes, &record);
        }
    }
    let mut file = File::create(&temporary)?;
    file.write_all(&bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temporary, path)?;
    if let Some(dir) = path.parent() {
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
    }
    OpenOptions::new().append(true).open(path)
}

/// `magic | length u32 | crc32 u32 | payload`, little-endian.
fn frame(out: &mut Vec<u8>, payload: &[u8]) {
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

fn put_str(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(text.as_bytes());
}

fn encode_retain(vhost: &str, retained: &RetainedMessage) -> Vec<u8> {
    let message = &retained.message;
    let mut out = Vec::with_capacity(32 + retained.topic.len() + message.body.len());
    out.push(RECORD_RETAIN);
    put_str(&mut out, vhost);
    put_str(&mut out, &retained.topic);
    out.push(retained.qos);
    put_str(&mut out, &message.exchange);
    put_str(&mut out, &message.routing_key);
    out.extend_from_slice(&(message.body.len() as u32).to_le_bytes());
    out.extend_from_slice(&message.body);
    out
}

fn encode_clear(vhost: &str, topic: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + vhost.len() + topic.len());
    out.push(RECORD_CLEAR);
    put_str(&mut out, vhost);
    put_str(&mut out, topic);
    out
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let length = self.u32()? as usize;
        self.take(length)
    }

    fn string(&mut self) -> Option<String> {
        std::str::from_utf8(self.bytes()?).ok().map(str::to_string)
    }
}

/// Applies every intact record of `log` to `memory`; returns how many were applied and the
/// offset of the first damaged record, if any.
fn replay(log: &[u8], memory: &InMemoryRetained, qos2: &mut Qos2Pending) -> (u64, Option<usize>) {
    let mut cursor = Cursor(log);
    let mut applied = 0;
    while !cursor.0.is_empty() {
        let offset = log.len() - cursor.0.len();
        let Some(payload) = next_record(&mut cursor) else {
            return (applied, Some(offset));
        };
        if apply(payload, memory, qos2).is_none() {
            return (applied, Some(offset));
        }
        applied += 1;
    }
    (applied, None)
}

fn next_record<'a>(cursor: &mut Cursor<'a>) -> Option<&'a [u8]> {
    if cursor.take(4)? != MAGIC {
        return None;
    }
    let length = cursor.u32()? as usize;
    let crc = cursor.u32()?;
    let payload = cursor.take(length)?;
    (crc32fast::hash(payload) == crc).then_some(payload)
}

fn apply(payload: &[u8], memory: &InMemoryRetained, qos2: &mut Qos2Pending) -> Option<()> {
    let mut cursor = Cursor(payload);
    match cursor.u8()? {
        RECORD_RETAIN => {
            let vhost = cursor.string()?;
            let topic = cursor.string()?;
            let qos = cursor.u8()?;
            let exchange = cursor.string()?;
            let routing_key = cursor.string()?;
            let body = Bytes::copy_from_slice(cursor.bytes()?);
            memory.retain(
                &vhost,
                RetainedMessage {
                    topic,
                    message: Arc::new(Message {
                        exchange: exchange.into(),
                        routing_key: routing_key.into(),
                        properties: Properties::default(),
                        encoded_properties: None,
                        body,
                    }),
                    qos,
                },
            );
        }
        RECORD_CLEAR => {
            let vhost = cursor.string()?;
            let topic = cursor.string()?;
            memory.clear(&vhost, &topic);
        }
        kind @ (RECORD_QOS2_RECEIVED
        | RECORD_QOS2_RELEASED
        | RECORD_FORGET_SESSION
        | RECORD_OUTBOUND_QOS2_RELEASED
        | RECORD_OUTBOUND_QOS2_COMPLETED) => {
            let vhost = cursor.string()?;
            let client_id = cursor.string()?;
            let id = cursor.take(2)?;
            qos2_apply(
                qos2,
                kind,
                &vhost,
                &client_id,
                u16::from_le_bytes([id[0], id[1]]),
            );
        }
        kind @ (RECORD_SESSION_PUT | RECORD_SESSION_REMOVE) => {
            let vhost = cursor.string()?;
            let client_id = cursor.string()?;
            let name = cursor.string()?;
            let value = if kind == RECORD_SESSION_PUT {
                Some(cursor.bytes()?)
            } else {
                None
            };
            session_record_apply(qos2, &vhost, &client_id, &name, value);
        }
        // The empty record the writer uses to wake itself for a compaction.
        _ if payload.is_empty() => {}
        _ => return None,
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn retained(topic: &str, body: &[u8]) -> RetainedMessage {
        RetainedMessage {
            topic: topic.to_string(),
            message: Arc::new(Message {
                exchange: "amq.topic".into(),
                routing_key: topic.replace('/', ".").into(),
                properties: Properties::default(),
                encoded_properties: None,
                body: Bytes::copy_from_slice(body),
            }),
            qos: 1,
        }
    }

    /// A fresh directory for one test, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let path =
                std::env::temp_dir().join(format!("warren-retained-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&path);
            TempDir(path)
        }

        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn wait_durable(store: &FileRetained) {
        let target = store.last_change();
        let mut durable = store.durable().expect("a file store is durable");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while *durable.borrow_and_update() < target {
            assert!(
                std::time::Instant::now() < deadline,
                "writer never caught up"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn retained_messages_and_clears_survive_reopening() {
        let dir = TempDir::new("reopen");
        {
            let store = FileRetained::open(dir.path()).expect("open");
            store.retain("/", retained("a/b", b"one"));
            store.retain("/", retained("a/b", b"two"));
            store.retain("/", retained("a/c", b"gone"));
            store.retain("other", retained("a/b", b"elsewhere"));
            store.clear("/", "a/c");
            wait_durable(&store);
        }
        let store = FileRetained::open(dir.path()).expect("reopen");
        assert_eq!(
            &store.get("/", "a/b").expect("kept").message.body[..],
            b"two"
        );
        assert!(store.get("/", "a/c").is_none());
        assert_eq!(store.count("/"), 1);
        assert_eq!(
            &store.get("other", "a/b").expect("kept").message.body[..],
            b"elsewhere"
        );
    }

    #[test]
    fn a_torn_tail_keeps_the_records_before_it() {
        let dir = TempDir::new("torn");
        {
            let store = FileRetained::open(dir.path()).expect("open");
            store.retain("/", retained("t/1", b"first"));
            store.retain("/", retained("t/2", b"second"));
            store.close();
        }
        let path = dir.path().join(RETAINED_LOG);
        let length = fs::metadata(&path).expect("log").len();
        OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|file| file.set_len(length - 3))
            .expect("truncate");
        let store = FileRetained::open(dir.path()).expect("reopen");
        assert_eq!(store.count("/"), 1);
        assert!(store.get("/", "t/1").is_some());
    }

    #[test]
    fn the_log_is_compacted_when_it_holds_mostly_replaced_records() {
        let dir = TempDir::new("compact");
        let store = FileRetained::open(dir.path()).expect("open");
        for n in 0..(COMPACT_SLACK + 100) {
            store.retain("/", retained("same/topic", format!("{n}").as_bytes()));
        }
        wait_durable(&store);
        store.retain("/", retained("same/topic", b"last"));
        wait_durable(&store);
        store.close();
        let size = fs::metadata(dir.path().join(RETAINED_LOG))
            .expect("log")
            .len();
        assert!(size < 10_000, "log not compacted: {size} bytes");
        drop(store);
        let store = FileRetained::open(dir.path()).expect("reopen");
        assert_eq!(
            &store.get("/", "same/topic").expect("kept").message.body[..],
            b"last"
        );
    }

    #[test]
    fn unreleased_qos2_packet_ids_survive_reopening_and_compaction() {
        let dir = TempDir::new("qos2");
        {
            let store = FileRetained::open(dir.path()).expect("open");
            store.qos2_received("/", "meter", 7);
            store.qos2_received("/", "meter", 8);
            store.qos2_released("/", "meter", 7);
            store.qos2_received("/", "gone", 1);
            store.forget_session("/", "gone");
            wait_durable(&store);
        }
        // Reopening replays the log and rewrites it compacted; a second reopen reads that.
        for _ in 0..2 {
            let store = FileRetained::open(dir.path()).expect("reopen");
            assert_eq!(store.qos2_pending("/", "meter"), vec![8]);
            assert!(store.qos2_pending("/", "gone").is_empty());
        }
    }

    #[test]
    fn outbound_qos2_packet_ids_survive_reopening_in_pubrec_order_until_completed() {
        let dir = TempDir::new("outbound-qos2");
        {
            let store = FileRetained::open(dir.path()).expect("open");
            store.outbound_qos2_released("/", "meter", 9);
            store.outbound_qos2_released("/", "meter", 3);
            store.outbound_qos2_released("/", "meter", 5);
            store.outbound_qos2_completed("/", "meter", 3);
            // Inbound and outbound identifiers of one session are separate sets.
            store.qos2_received("/", "meter", 9);
            store.outbound_qos2_released("other", "meter", 1);
            store.outbound_qos2_released("/", "gone", 1);
            store.qos2_received("/", "gone", 2);
            store.forget_session("/", "gone");
            wait_durable(&store);
        }
        for _ in 0..2 {
            let store = FileRetained::open(dir.path()).expect("reopen");
            assert_eq!(store.outbound_qos2_pending("/", "meter"), vec![9, 5]);
            assert_eq!(store.qos2_pending("/", "meter"), vec![9]);
            assert_eq!(store.outbound_qos2_pending("other", "meter"), vec![1]);
            assert!(store.outbound_qos2_pending("/", "gone").is_empty());
            assert!(store.qos2_pending("/", "gone").is_empty());
        }
        let store = FileRetained::open(dir.path()).expect("reopen");
        store.outbound_qos2_completed("/", "meter", 9);
        store.outbound_qos2_completed("/", "meter", 5);
        store.qos2_released("/", "meter", 9);
        wait_durable(&store);
        drop(store);
        let store = FileRetained::open(dir.path()).expect("reopen");
        assert!(store.outbound_qos2_pending("/", "meter").is_empty());
        assert!(store.qos2_pending("/", "meter").is_empty());
    }

    #[test]
    fn a_log_written_before_outbound_records_existed_still_loads() {
        // Record kinds 1 to 5 only, framed by hand as an older Warren wrote them.
        let dir = TempDir::new("old-format");
        fs::create_dir_all(dir.path()).expect("dir");
        let mut log = Vec::new();
        frame(&mut log, &encode_retain("/", &retained("a/b", b"kept")));
        frame(&mut log, &encode_clear("/", "a/c"));
        frame(
            &mut log,
            &encode_qos2(RECORD_QOS2_RECEIVED, "/", "meter", 4),
        );
        frame(
            &mut log,
            &encode_qos2(RECORD_QOS2_RECEIVED, "/", "meter", 6),
        );
        frame(
            &mut log,
            &encode_qos2(RECORD_QOS2_RELEASED, "/", "meter", 4),
        );
        frame(
            &mut log,
            &encode_qos2(RECORD_FORGET_SESSION, "/", "gone", 0),
        );
        fs::write(dir.path().join(RETAINED_LOG), &log).expect("write");
        let store = FileRetained::open(dir.path()).expect("open");
        assert_eq!(
            &store.get("/", "a/b").expect("kept").message.body[..],
            b"kept"
        );
        assert_eq!(store.qos2_pending("/", "meter"), vec![6]);
        assert!(store.outbound_qos2_pending("/", "meter").is_empty());
    }

    #[test]
    fn session_records_survive_reopening_until_removed_or_forgotten() {
        let dir = TempDir::new("session-records");
        {
            let store = FileRetained::open(dir.path()).expect("open");
            store.session_put("/", "meter", "shared:$share/g/t", b"\x01");
            store.session_put("/", "meter", "will", b"first");
            store.session_put("/", "meter", "will", b"second");
            store.session_put("/", "other", "will", b"gone");
            store.session_remove("/", "other", "will");
            store.session_put("/", "dropped", "shared:$share/g/t", b"\x00");
            store.qos2_received("/", "dropped", 3);
            store.forget_session("/", "dropped");
            wait_durable(&store);
        }
        for _ in 0..2 {
            let store = FileRetained::open(dir.path()).expect("reopen");
            let mut records = store.session_records();
            records.sort_by(|a, b| a.name.cmp(&b.name));
            let got: Vec<(&str, &str, &[u8])> = records
                .iter()
                .map(|r| (r.client_id.as_str(), r.name.as_str(), r.value.as_slice()))
                .collect();
            assert_eq!(
                got,
                vec![
                    ("meter", "shared:$share/g/t", &b"\x01"[..]),
                    ("meter", "will", &b"second"[..]),
                ]
            );
        }
    }

    proptest! {
        #[test]
        fn replay_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let memory = InMemoryRetained::new();
            let _ = replay(&bytes, &memory, &mut Qos2Pending::new());
        }
    }
}
