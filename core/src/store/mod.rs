//! The message store: persistent messages of durable queues, on disk (design in
//! docs/storage.md).
//!
//! Data flow: a publisher's task appends a framed record to the pending buffer (under one
//! short mutex) and gets a sequence number back; one writer thread takes everything pending
//! from every connection, writes it to the current segment file with one `write`, calls
//! `fdatasync` once, and publishes the highest sequence number that is now on disk. Listeners
//! send a publisher confirm for a persistent message once that durable sequence number has
//! reached the message's. Queues record removals (ack, reject, expiry, purge, deletion) and
//! deliveries the same way, without waiting. Segments whose messages are all gone are deleted
//! by the writer. At boot, [`MessageStore::open`] replays the segments ([`recovery`]).
//!
//! When more bytes are waiting for the writer than `max_unwritten_bytes`, the store raises its
//! flow signal ([`MessageStore::subscribe_flow`]); listeners stop reading publishing
//! connections until it clears, so a publisher faster than the disk is slowed down instead of
//! growing memory.

pub(crate) mod record;
mod recovery;
mod writer;

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use crate::message::Message;

pub use record::QueueName;
pub use recovery::{Damage, Recovered, RecoveredMessage, RecoveryReport};
use writer::Writer;

/// File extension of segment files.
pub const SEGMENT_EXTENSION: &str = "wseg";

/// How the store is set up.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// The directory holding the segment files.
    pub dir: PathBuf,
    /// A segment is closed and a new one started once it reaches this size.
    pub segment_size: u64,
    /// Above this many bytes waiting to be written, publishers are paused.
    pub max_unwritten_bytes: usize,
    /// Ready messages a durable queue keeps in memory; persistent messages beyond this are
    /// kept on disk only (an index entry in memory) and read back when delivered.
    pub queue_max_in_memory: usize,
}

impl StoreConfig {
    /// Defaults for a store in `dir`: 64 MiB segments, 64 MiB of unwritten bytes at most.
    pub fn new(dir: impl Into<PathBuf>) -> StoreConfig {
        StoreConfig {
            dir: dir.into(),
            segment_size: 64 * 1024 * 1024,
            max_unwritten_bytes: 64 * 1024 * 1024,
            queue_max_in_memory: 100_000,
        }
    }
}

/// Writes the durable definitions; called by the writer thread before it fsyncs a batch
/// whenever the topology changed, so a confirm never precedes the queue it depends on.
pub type DefinitionsWriter = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the writer does with a message's reference count.
#[derive(Debug, Clone, Copy)]
enum Event {
    /// Published to `refs` durable queues.
    Published { id: u64, refs: u32, at: usize },
    /// Left one queue.
    Removed { id: u64 },
    /// A delivered mark was written for it.
    Marked { id: u64 },
}

#[derive(Default)]
struct Pending {
    buffer: Vec<u8>,
    events: Vec<Event>,
    /// The sequence number of the last submission.
    last_seq: u64,
    next_id: u64,
    /// Bytes the writer took and has not finished writing.
    in_flight: usize,
    flow_blocked: bool,
    stopping: bool,
    /// Sequence numbers taken with [`MessageStore::hold`] and not released: the durable
    /// sequence number stays below the lowest of them.
    holds: std::collections::BTreeSet<u64>,
    /// Holds released as failed ([`MessageStore::fail`]): their publishers get a nack.
    failed: std::collections::BTreeSet<u64>,
    /// A failure of the key fails the value too ([`MessageStore::link_holds`]).
    failure_links: std::collections::HashMap<u64, u64>,
    /// The highest sequence number the writer made durable.
    written_seq: u64,
    /// The writer holds a batch it has not finished (even one of events only).
    writing: bool,
}

impl Pending {
    /// The durable sequence number to publish: what is written, capped below the lowest hold.
    fn durable_seq(&self) -> u64 {
        match self.holds.first() {
            Some(&held) => self.written_seq.min(held - 1),
            None => self.written_seq,
        }
    }
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    durable: watch::Sender<u64>,
    flow: watch::Sender<bool>,
    /// Bumped by every change of durable topology; the writer persists definitions when it
    /// moved.
    topology_generation: Arc<AtomicU64>,
    /// The topology generation whose definitions the writer has on disk (or had nothing to
    /// write for): a hold is not durable at once while the topology is ahead of it.
    written_generation: AtomicU64,
    definitions: Mutex<Option<DefinitionsWriter>>,
    max_unwritten: usize,
    locations: Mutex<Locations>,
    queue_max_in_memory: usize,
    /// How many holds ever failed: [`MessageStore::take_failed`] looks no further while 0.
    failures: AtomicUsize,
}

/// Where each message's publish record is, for reading bodies back (paged-out backlogs).
#[derive(Default)]
struct Locations {
    /// Every store id up to this one is in a segment file.
    written_through: u64,
    /// Paged-out messages whose record is not written yet, kept until it is.
    held: BTreeMap<u64, Arc<Message>>,
    /// Segments holding publish records, by their first store id.
    segments: BTreeMap<u64, SegmentFile>,
}

/// A segment open for reading, with the offset of each of its publish records (its store ids
/// are contiguous from the key it is filed under).
struct SegmentFile {
    file: Arc<File>,
    offsets: Vec<u64>,
}

/// The message store. One per broker; shared by every durable queue.
pub struct MessageStore {
    shared: Arc<Shared>,
    writer: Mutex<Option<JoinHandle<()>>>,
    dir: PathBuf,
}

impl MessageStore {
    /// Opens (creating if needed) the store in `config.dir`, replays what is there and starts
    /// the writer thread. The recovered messages are returned for the broker to put back in
    /// their queues; messages of queues that no longer exist must be released with
    /// [`MessageStore::remove`].
    pub fn open(config: StoreConfig) -> io::Result<(Arc<MessageStore>, Recovered)> {
        fs::create_dir_all(&config.dir)?;
        let mut recovered = recovery::recover(&config.dir, config.queue_max_in_memory)?;
        let mut segments = std::mem::take(&mut recovered.segments);
        let mut locations = Locations {
            written_through: recovered.next_store_id.saturating_sub(1),
            ..Locations::default()
        };
        for segment in &mut segments {
            if let Some(first) = segment.first_id {
                locations.segments.insert(
                    first,
                    SegmentFile {
                        file: Arc::new(File::open(&segment.path)?),
                        offsets: std::mem::take(&mut segment.offsets),
                    },
                );
            }
        }
        let (durable, _) = watch::channel(0);
        let (flow, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending {
                next_id: recovered.next_store_id,
                ..Pending::default()
            }),
            wake: Condvar::new(),
            durable,
            flow,
            topology_generation: Arc::new(AtomicU64::new(0)),
            written_generation: AtomicU64::new(0),
            definitions: Mutex::new(None),
            max_unwritten: config.max_unwritten_bytes.max(1),
            locations: Mutex::new(locations),
            queue_max_in_memory: config.queue_max_in_memory,
            failures: AtomicUsize::new(0),
        });
        let mut writer = Writer::new(&config, segments, recovered.next_segment)?;
        let thread_shared = Arc::clone(&shared);
        let handle = std::thread::Builder::new()
            .name("warren-store-writer".into())
            .spawn(move || writer.run(&thread_shared))?;
        tracing::info!(
            dir = %config.dir.display(),
            segments = recovered.report.segments,
            records = recovered.report.records,
            queues = recovered.queues.len(),
            messages = recovered.queues.values().map(Vec::len).sum::<usize>(),
            "message store recovered"
        );
        Ok((
            Arc::new(MessageStore {
                shared,
                writer: Mutex::new(Some(handle)),
                dir: config.dir,
            }),
            recovered,
        ))
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The counter the broker bumps on every durable topology change.
    pub fn topology_generation(&self) -> &Arc<AtomicU64> {
        &self.shared.topology_generation
    }

    /// Installs the function that writes durable definitions (see [`DefinitionsWriter`]).
    pub fn set_definitions_writer(&self, writer: DefinitionsWriter) {
        *self.shared.definitions.lock() = Some(writer);
        // Write once now: changes made before the writer was installed were not written.
        self.shared
            .topology_generation
            .fetch_add(1, Ordering::Release);
        self.wake();
    }

    /// Wakes the writer: the topology changed.
    pub fn wake(&self) {
        let _pending = self.shared.pending.lock();
        self.shared.wake.notify_one();
    }

    fn submit(&self, append: impl FnOnce(&mut Pending)) -> u64 {
        let mut pending = self.shared.pending.lock();
        let was_empty = pending.buffer.is_empty() && pending.events.is_empty();
        append(&mut pending);
        pending.last_seq += 1;
        let seq = pending.last_seq;
        if !pending.flow_blocked
            && pending.buffer.len() + pending.in_flight > self.shared.max_unwritten
        {
            pending.flow_blocked = true;
            self.shared.flow.send_replace(true);
        }
        if was_empty {
            self.shared.wake.notify_one();
        }
        seq
    }

    /// Appends a persistent message routed to the durable `queues`. Returns its store id and
    /// the sequence number to wait for (see [`MessageStore::subscribe_durable`]).
    pub fn publish(&self, message: &Message, queues: &[&QueueName]) -> (u64, u64) {
        let mut id = 0;
        let seq = self.submit(|pending| {
            id = pending.next_id;
            pending.next_id += 1;
            let at = pending.buffer.len();
            record::encode_publish(&mut pending.buffer, id, queues, message);
            pending.events.push(Event::Published {
                id,
                refs: queues.len() as u32,
                at,
            });
        });
        (id, seq)
    }

    /// Takes a sequence number that is not durable until [`MessageStore::release`] is called
    /// with it (and everything before it is written). A replicated queue takes one per publish
    /// and releases it once the publish is committed, so every listener holds its confirm
    /// exactly as it holds one for the disk, with no change to how it waits.
    pub fn hold(&self) -> u64 {
        let mut pending = self.shared.pending.lock();
        pending.last_seq += 1;
        let seq = pending.last_seq;
        pending.holds.insert(seq);
        let definitions_written = self.shared.topology_generation.load(Ordering::Acquire)
            == self.shared.written_generation.load(Ordering::Acquire);
        if pending.buffer.is_empty() && pending.events.is_empty() && !pending.writing {
            if definitions_written {
                // Nothing unwritten is outstanding, so nothing but this hold (which is no
                // write) stands between the durable number and `seq`.
                pending.written_seq = seq;
            } else {
                // The queue it is for may not be on disk yet (declared a moment ago): the
                // writer writes the definitions first, then makes `seq` durable.
                self.shared.wake.notify_one();
            }
        }
        seq
    }

    /// Releases a sequence number taken with [`MessageStore::hold`].
    pub fn release(&self, seq: u64) {
        let mut pending = self.shared.pending.lock();
        if pending.holds.remove(&seq) {
            let durable = pending.durable_seq();
            self.shared.durable.send_if_modified(|current| {
                let moved = durable > *current;
                if moved {
                    *current = durable;
                }
                moved
            });
        }
    }

    /// Releases a hold whose publish failed (a forwarded publish the queue's home node
    /// refused or never answered): the publisher that waits for `seq` must nack it (see
    /// [`MessageStore::take_failed`]).
    pub fn fail(&self, seq: u64) {
        {
            let mut pending = self.shared.pending.lock();
            let mut next = Some(seq);
            while let Some(at) = next {
                pending.failed.insert(at);
                next = pending.failure_links.remove(&at);
            }
            self.shared.failures.fetch_add(1, Ordering::Release);
        }
        self.release(seq);
    }

    /// Makes a failure of hold `from` fail hold `to` as well: a message routed to several
    /// forwarded queues is confirmed through its last hold only.
    pub fn link_holds(&self, from: u64, to: u64) {
        if from == to {
            return;
        }
        let mut pending = self.shared.pending.lock();
        if pending.failed.contains(&from) {
            pending.failed.insert(to);
        } else if pending.holds.contains(&from) {
            pending.failure_links.insert(from, to);
        }
    }

    /// Whether the publish that waited for `seq` failed; a true answer is given once. One
    /// atomic load while nothing ever failed.
    pub fn take_failed(&self, seq: u64) -> bool {
        if self.shared.failures.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut pending = self.shared.pending.lock();
        pending.failure_links.remove(&seq);
        pending.failed.remove(&seq)
    }

    /// Records that messages left `queue` for good (ack, reject, expiry, purge, deletion).
    pub fn remove(&self, queue: &QueueName, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        self.submit(|pending| {
            record::encode_ids(&mut pending.buffer, false, queue, ids);
            pending
                .events
                .extend(ids.iter().map(|&id| Event::Removed { id }));
        });
    }

    /// Records that messages of `queue` were delivered and await settlement, so they come
    /// back flagged redelivered after a crash.
    pub fn mark_delivered(&self, queue: &QueueName, ids: &[u64]) {
        if ids.is_empty() {
            return;
        }
        self.submit(|pending| {
            record::encode_ids(&mut pending.buffer, true, queue, ids);
            pending
                .events
                .extend(ids.iter().map(|&id| Event::Marked { id }));
        });
    }

    /// Ready messages a durable queue keeps in memory before it pages persistent ones out.
    pub fn queue_max_in_memory(&self) -> usize {
        self.shared.queue_max_in_memory
    }

    /// Called by a queue that drops its copy of message `id` (paging out): keeps the message
    /// here until its record is in a segment file, so [`MessageStore::read`] always finds it.
    pub fn hold_until_written(&self, id: u64, message: &Arc<Message>) {
        let mut locations = self.shared.locations.lock();
        if id > locations.written_through {
            locations.held.insert(id, Arc::clone(message));
        }
    }

    /// Reads message `id` back (a paged-out message being delivered).
    pub fn read(&self, id: u64) -> io::Result<Arc<Message>> {
        let (file, offset) = {
            let locations = self.shared.locations.lock();
            if let Some(message) = locations.held.get(&id) {
                return Ok(Arc::clone(message));
            }
            let found = locations
                .segments
                .range(..=id)
                .next_back()
                .and_then(|(first, segment)| {
                    let index = usize::try_from(id - first).ok()?;
                    Some((Arc::clone(&segment.file), *segment.offsets.get(index)?))
                });
            found.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("message {id} is not in the store"),
                )
            })?
        };
        read_message_at(&file, offset, id)
    }

    /// The highest sequence number known to be on disk.
    pub fn durable_seq(&self) -> u64 {
        *self.shared.durable.borrow()
    }

    /// Follows the durable sequence number.
    pub fn subscribe_durable(&self) -> watch::Receiver<u64> {
        self.shared.durable.subscribe()
    }

    /// Follows the flow signal: `true` while publishers should not be read.
    pub fn subscribe_flow(&self) -> watch::Receiver<bool> {
        self.shared.flow.subscribe()
    }

    /// Whether publishers should be paused now.
    pub fn flow_blocked(&self) -> bool {
        *self.shared.flow.borrow()
    }

    /// Writes everything pending, then stops the writer thread. Later submissions are
    /// dropped (the broker is shutting down).
    pub fn close(&self) {
        {
            let mut pending = self.shared.pending.lock();
            pending.stopping = true;
            self.shared.wake.notify_one();
        }
        if let Some(handle) = self.writer.lock().take() {
            // The last reference can be dropped on the writer thread itself (it holds the
            // broker's definitions writer): it ends on its own once `stopping` is seen, and
            // joining itself would fail (EDEADLK).
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }

    /// Segment files now on disk (for tests and operators).
    pub fn segment_count(&self) -> usize {
        recovery::segment_files(&self.dir).map_or(0, |f| f.len())
    }
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        self.close();
    }
}

/// Reads the publish record at `offset` of a segment and returns its message.
fn read_message_at(file: &File, offset: u64, id: u64) -> io::Result<Arc<Message>> {
    use std::os::unix::fs::FileExt;
    let damaged = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the record of message {id} at offset {offset} is damaged"),
        )
    };
    let mut header = [0u8; record::HEADER_LEN];
    file.read_exact_at(&mut header, offset)?;
    let length = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    if length > record::MAX_PAYLOAD {
        return Err(damaged());
    }
    let mut bytes = vec![0u8; record::HEADER_LEN + length as usize];
    bytes[..record::HEADER_LEN].copy_from_slice(&header);
    file.read_exact_at(
        &mut bytes[record::HEADER_LEN..],
        offset + record::HEADER_LEN as u64,
    )?;
    match record::read_record(&bytes) {
        record::Read::Record(
            record::Record::Publish {
                store_id, message, ..
            },
            _,
        ) if store_id == id => Ok(Arc::new(message)),
        _ => Err(damaged()),
    }
}

#[cfg(test)]
mod tests;
