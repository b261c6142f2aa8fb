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

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

use crate::message::Message;

pub use record::QueueName;
use recovery::{segment_of, SegmentState};
pub use recovery::{Damage, Recovered, RecoveredMessage, RecoveryReport};

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

/// The broker's link to its message store, shared with every vhost: empty until the server
/// attaches a store (an in-memory broker never does).
#[derive(Default)]
pub struct Durability {
    store: std::sync::OnceLock<Arc<MessageStore>>,
    /// How much each queue keeps in memory before paging (persistent messages of durable
    /// queues) or holding its publishers back (everything else): see [`crate::flow`].
    queue_memory: Arc<crate::flow::QueueMemoryLimits>,
    /// The cluster's replicator, when the node runs clustered (`replication.rs`).
    replicator: std::sync::OnceLock<Arc<dyn crate::replication::TopologyReplicator>>,
    /// The clock queues read for expiry; set once, before queues exist (tests pass tokio's
    /// paused clock or a manual one), the process's monotonic clock otherwise.
    clock: std::sync::OnceLock<crate::clock::Clock>,
    /// Makes the queues of replicated types (quorum queues), installed by the server.
    queue_backend: std::sync::OnceLock<Arc<dyn crate::queue_type::QueueBackend>>,
    /// How streams encode the messages published to them through the core, installed by
    /// the server (the AMQP 1.0 message mapping).
    stream_format: std::sync::OnceLock<Arc<dyn crate::stream_log::MessageFormat>>,
    /// Forwarding to classic queues on other nodes, installed by a clustered server.
    forwarding: std::sync::OnceLock<Arc<crate::remote::Forwarding>>,
    /// This node's name in its cluster, set before the metadata log is replayed.
    local_node: std::sync::OnceLock<String>,
    /// Closes this node's MQTT connection holding a client identifier another node's
    /// connection takes over, installed by the MQTT listener.
    client_takeover: std::sync::OnceLock<Arc<dyn crate::remote::ClientTakeover>>,
}

impl Durability {
    /// The clock every queue of the broker reads.
    pub fn clock(&self) -> crate::clock::Clock {
        self.clock.get().cloned().unwrap_or_default()
    }

    /// Makes queues created from now on read `clock`; false if a clock was set already.
    pub fn use_clock(&self, clock: crate::clock::Clock) -> bool {
        self.clock.set(clock).is_ok()
    }

    /// The per-queue memory limits shared by every queue of the broker.
    pub fn queue_memory_limits(&self) -> &Arc<crate::flow::QueueMemoryLimits> {
        &self.queue_memory
    }

    /// The store, once attached.
    pub fn store(&self) -> Option<&Arc<MessageStore>> {
        self.store.get()
    }

    /// Attaches the store; false if one was attached already.
    pub fn attach(&self, store: Arc<MessageStore>) -> bool {
        self.store.set(store).is_ok()
    }

    /// Installs what makes quorum queues on this node; false if one was installed already.
    pub fn set_queue_backend(&self, backend: Arc<dyn crate::queue_type::QueueBackend>) -> bool {
        self.queue_backend.set(backend).is_ok()
    }

    /// Installs forwarding to classic queues homed on other nodes; false if installed
    /// already.
    pub fn set_forwarding(&self, forwarding: Arc<crate::remote::Forwarding>) -> bool {
        self.forwarding.set(forwarding).is_ok()
    }

    /// Installs the MQTT listener's takeover of client identifiers; false if one was.
    pub fn set_client_takeover(&self, takeover: Arc<dyn crate::remote::ClientTakeover>) -> bool {
        self.client_takeover.set(takeover).is_ok()
    }

    /// The MQTT listener's takeover of client identifiers, once installed.
    pub fn client_takeover(&self) -> Option<&Arc<dyn crate::remote::ClientTakeover>> {
        self.client_takeover.get()
    }

    /// Forwarding to other nodes' classic queues, on a cluster.
    pub fn forwarding(&self) -> Option<&Arc<crate::remote::Forwarding>> {
        self.forwarding.get()
    }

    /// What makes quorum queues on this node, once installed.
    pub fn queue_backend(&self) -> Option<&Arc<dyn crate::queue_type::QueueBackend>> {
        self.queue_backend.get()
    }

    /// Installs how streams encode messages published through the core; false if one was
    /// installed already.
    pub fn set_stream_format(&self, format: Arc<dyn crate::stream_log::MessageFormat>) -> bool {
        self.stream_format.set(format).is_ok()
    }

    /// How streams encode messages published through the core, once installed.
    pub fn stream_format(&self) -> Option<&Arc<dyn crate::stream_log::MessageFormat>> {
        self.stream_format.get()
    }

    /// Installs the cluster's replicator; false if one was installed already.
    pub fn set_replicator(
        &self,
        replicator: Arc<dyn crate::replication::TopologyReplicator>,
    ) -> bool {
        self.replicator.set(replicator).is_ok()
    }

    /// Names this node in its cluster; false if it was named already.
    pub fn set_local_node(&self, name: &str) -> bool {
        self.local_node.set(name.to_string()).is_ok()
    }

    /// This node's cluster name, once named (clustered nodes only).
    pub fn local_node(&self) -> Option<&str> {
        self.local_node.get().map(String::as_str)
    }

    /// Whether a replicator is installed (the node runs clustered).
    pub fn is_replicated(&self) -> bool {
        self.replicator.get().is_some()
    }

    /// Commits a topology change through the cluster before the caller applies it; hold the
    /// permit until the local apply is over. Without a replicator (single node), or inside a
    /// change that is already being applied, nothing is built or sent.
    pub fn replicate(
        &self,
        change: impl FnOnce() -> crate::replication::TopologyChange,
    ) -> crate::error::CoreResult<crate::replication::ReplicationPermit> {
        match self.replicator.get() {
            Some(replicator) if !crate::replication::applying() => replicator.replicate(change()),
            _ => Ok(crate::replication::ReplicationPermit::none()),
        }
    }

    /// Durable topology changed (call after the change is visible): the writer persists the
    /// definitions before it next confirms anything.
    pub fn topology_changed(&self) {
        if let Some(store) = self.store.get() {
            store.topology_generation().fetch_add(1, Ordering::Release);
            store.wake();
        }
    }
}

/// The gap left after a definitions write, as a multiple of its duration (see
/// [`Writer::definitions_due`]), and its ceiling.
const DEFINITIONS_GAP_FACTOR: u32 = 4;
const MAX_DEFINITIONS_GAP: Duration = Duration::from_secs(1);

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

/// The writer thread's own state: the open segment and every segment's bookkeeping.
struct Writer {
    dir: PathBuf,
    segment_size: u64,
    /// Every segment on disk, oldest first; the last one is open for appends.
    segments: Vec<SegmentState>,
    /// (first store id, segment number), ascending, for segments that hold messages.
    index: Vec<(u64, u64)>,
    file: Option<File>,
    size: u64,
    next_segment: u64,
    written_generation: u64,
    /// When the definitions were last written, and how long to leave them before the next
    /// rewrite when only the topology moved (see [`Writer::definitions_due`]).
    definitions_written_at: Option<Instant>,
    definitions_gap: Duration,
    /// The open segment, opened for reading (paged-out messages are read through it).
    reader: Option<Arc<File>>,
    /// The first store id filed under the open segment in [`Locations`], once it has one.
    reader_segment: Option<u64>,
}

impl Writer {
    fn new(config: &StoreConfig, segments: Vec<SegmentState>, next: u64) -> io::Result<Writer> {
        let index = segments
            .iter()
            .filter_map(|s| s.first_id.map(|id| (id, s.number)))
            .collect();
        let mut writer = Writer {
            dir: config.dir.clone(),
            segment_size: config.segment_size.max(1024),
            segments,
            index,
            file: None,
            size: 0,
            next_segment: next,
            written_generation: 0,
            definitions_written_at: None,
            definitions_gap: Duration::ZERO,
            reader: None,
            reader_segment: None,
        };
        writer.start_segment()?;
        Ok(writer)
    }

    /// Opens a fresh segment file (never appends to one left by an earlier run: its tail
    /// may have been cut).
    fn start_segment(&mut self) -> io::Result<()> {
        let number = self.next_segment;
        self.next_segment += 1;
        let path = self.dir.join(format!("{number:012}.{SEGMENT_EXTENSION}"));
        self.file = Some(
            OpenOptions::new()
                .create(true)
                .truncate(true)
                .write(true)
                .open(&path)?,
        );
        // The new directory entry must survive a crash too.
        File::open(&self.dir)?.sync_all()?;
        self.reader = Some(Arc::new(File::open(&path)?));
        self.reader_segment = None;
        self.size = 0;
        self.segments.push(SegmentState {
            number,
            path,
            first_id: None,
            live: 0,
            targets: BTreeSet::new(),
            offsets: Vec::new(),
        });
        Ok(())
    }

    /// With no message waiting, how much longer a topology-only change should wait before
    /// the definitions are rewritten (`None`: now). The file is rewritten whole, so a stream
    /// of declarations against thousands of queues would otherwise rewrite it back to back;
    /// leaving a gap of a few times the last write's duration keeps that under a fifth of one
    /// core and gathers the changes into one write. A message to confirm never waits for it.
    fn definitions_due(&self) -> Option<Duration> {
        let written_at = self.definitions_written_at?;
        let ready_at = written_at + self.definitions_gap;
        ready_at
            .checked_duration_since(Instant::now())
            .filter(|left| !left.is_zero())
    }

    fn run(&mut self, shared: &Shared) {
        let mut spare = Vec::new();
        let mut events_spare = Vec::new();
        loop {
            let (mut buffer, mut events, seq, stopping) = {
                let mut pending = shared.pending.lock();
                loop {
                    let idle = pending.buffer.is_empty() && pending.events.is_empty();
                    let topology_moved = shared.topology_generation.load(Ordering::Acquire)
                        != self.written_generation;
                    // Holds taken while the definitions were behind wait for this writer
                    // (see `MessageStore::hold`): like a message, they do not wait the gap.
                    let holds_wait = pending.written_seq < pending.last_seq;
                    if !idle || pending.stopping || holds_wait {
                        break;
                    }
                    if topology_moved {
                        match self.definitions_due() {
                            None => break,
                            Some(left) => {
                                shared.wake.wait_for(&mut pending, left);
                                continue;
                            }
                        }
                    }
                    shared.wake.wait(&mut pending);
                }
                let buffer = std::mem::replace(&mut pending.buffer, std::mem::take(&mut spare));
                let events =
                    std::mem::replace(&mut pending.events, std::mem::take(&mut events_spare));
                pending.in_flight = buffer.len();
                pending.writing = true;
                (buffer, events, pending.last_seq, pending.stopping)
            };
            let generation = shared.topology_generation.load(Ordering::Acquire);
            if generation != self.written_generation {
                if let Some(write_definitions) = shared.definitions.lock().as_ref() {
                    // Like messages: nothing is confirmed before the queues it sits in are
                    // on disk, so a failed write is retried (given up only at shutdown).
                    let started = Instant::now();
                    let mut attempts = 0u32;
                    while let Err(error) = write_definitions() {
                        attempts += 1;
                        if attempts.rem_euclid(100) == 1 {
                            tracing::error!(%error, attempts, "cannot write durable definitions; retrying");
                        }
                        if stopping && attempts >= 10 {
                            break;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(100));
                    }
                    let now = Instant::now();
                    self.definitions_gap = (now.duration_since(started) * DEFINITIONS_GAP_FACTOR)
                        .min(MAX_DEFINITIONS_GAP);
                    self.definitions_written_at = Some(now);
                }
                self.written_generation = generation;
                shared
                    .written_generation
                    .store(generation, Ordering::Release);
            }
            let (written, base) = self.append_until_written(&buffer, stopping);
            if written {
                self.note_locations(shared, &events, base);
                let durable = {
                    let mut pending = shared.pending.lock();
                    pending.written_seq = pending.written_seq.max(seq);
                    pending.durable_seq()
                };
                shared.durable.send_if_modified(|current| {
                    let moved = durable > *current;
                    if moved {
                        *current = durable;
                    }
                    moved
                });
            }
            for event in events.drain(..) {
                self.account(event);
            }
            if self.size >= self.segment_size {
                if let Err(error) = self.start_segment() {
                    tracing::error!(%error, "message store: cannot start a new segment");
                }
            }
            self.collect_garbage(shared);
            buffer.clear();
            {
                let mut pending = shared.pending.lock();
                pending.in_flight = 0;
                pending.writing = false;
                let definitions_written =
                    shared.topology_generation.load(Ordering::Acquire) == self.written_generation;
                if written
                    && definitions_written
                    && pending.buffer.is_empty()
                    && pending.events.is_empty()
                {
                    // Nothing was submitted meanwhile: every sequence number taken since the
                    // batch (holds only) is written too, and only its hold keeps it back
                    // (unless the topology moved meanwhile: the next round writes it first).
                    pending.written_seq = pending.last_seq;
                    let durable = pending.durable_seq();
                    shared.durable.send_if_modified(|current| {
                        let moved = durable > *current;
                        if moved {
                            *current = durable;
                        }
                        moved
                    });
                }
                if pending.flow_blocked && pending.buffer.len() <= shared.max_unwritten / 2 {
                    pending.flow_blocked = false;
                    shared.flow.send_replace(false);
                }
                let done = stopping && pending.buffer.is_empty() && pending.events.is_empty();
                // Keep one allocation around instead of growing a new buffer every batch.
                if buffer.capacity() <= 4 * 1024 * 1024 {
                    spare = buffer;
                }
                events_spare = events;
                if done {
                    return;
                }
            }
        }
    }

    /// Files the offsets of the publish records just written and releases held messages.
    fn note_locations(&mut self, shared: &Shared, events: &[Event], base: u64) {
        let mut locations = shared.locations.lock();
        let mut highest = locations.written_through;
        for event in events {
            let Event::Published { id, at, .. } = *event else {
                continue;
            };
            highest = highest.max(id);
            let offset = base + at as u64;
            let needs_new =
                locations
                    .segments
                    .range(..=id)
                    .next_back()
                    .is_none_or(|(first, segment)| {
                        first + segment.offsets.len() as u64 != id
                            || self.reader_segment != Some(*first)
                    });
            if needs_new {
                let Some(file) = self.reader.clone() else {
                    continue;
                };
                self.reader_segment = Some(id);
                locations.segments.insert(
                    id,
                    SegmentFile {
                        file,
                        offsets: Vec::new(),
                    },
                );
            }
            if let Some((_, segment)) = locations.segments.range_mut(..=id).next_back() {
                segment.offsets.push(offset);
            }
        }
        locations.written_through = highest;
        if !locations.held.is_empty() {
            let keep = locations.held.split_off(&(highest + 1));
            locations.held = keep;
        }
    }

    /// Writes a batch, retrying (in a fresh segment) until the disk takes it: confirms wait
    /// and, as unwritten bytes pile up, publishers are paused, but nothing is confirmed that
    /// is not on disk. Gives up only while shutting down. Returns whether the batch was
    /// written and the offset it starts at.
    fn append_until_written(&mut self, buffer: &[u8], stopping: bool) -> (bool, u64) {
        if buffer.is_empty() {
            return (true, self.size);
        }
        let mut attempts = 0u32;
        loop {
            let base = self.size;
            let error = match self.append(buffer) {
                Ok(()) => return (true, base),
                Err(error) => error,
            };
            attempts += 1;
            if attempts.rem_euclid(100) == 1 {
                tracing::error!(%error, attempts, "message store: write failed (disk full?); persistent publishes wait until it succeeds");
            }
            if stopping && attempts >= 10 {
                return (false, base);
            }
            // The failed write may have left part of the batch behind: go on in a new segment
            // (recovery skips the damaged tail of the old one).
            if let Err(error) = self.start_segment() {
                tracing::error!(%error, "message store: cannot start a new segment");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| io::Error::other("no open segment"))?;
        let result = file.write_all(bytes).and_then(|()| file.sync_data());
        match result {
            Ok(()) => self.size += bytes.len() as u64,
            // Part of the batch may be in the file: keep offsets true to the file.
            Err(_) => self.size = file.metadata().map_or(self.size, |m| m.len()),
        }
        result
    }

    fn segment_mut(&mut self, number: u64) -> Option<&mut SegmentState> {
        let position = self
            .segments
            .binary_search_by_key(&number, |s| s.number)
            .ok()?;
        self.segments.get_mut(position)
    }

    fn account(&mut self, event: Event) {
        let current = self.segments.last().map_or(0, |s| s.number);
        match event {
            Event::Published { id, refs, .. } => {
                if let Some(segment) = self.segments.last_mut() {
                    if segment.first_id.is_none() {
                        segment.first_id = Some(id);
                        self.index.push((id, segment.number));
                    }
                    segment.live += u64::from(refs);
                }
            }
            Event::Removed { id } => {
                if let Some(target) = segment_of(&self.index, id) {
                    if let Some(segment) = self.segment_mut(target) {
                        segment.live = segment.live.saturating_sub(1);
                    }
                    if target != current {
                        if let Some(segment) = self.segments.last_mut() {
                            segment.targets.insert(target);
                        }
                    }
                }
            }
            Event::Marked { id } => {
                if let Some(target) = segment_of(&self.index, id) {
                    if target != current {
                        if let Some(segment) = self.segments.last_mut() {
                            segment.targets.insert(target);
                        }
                    }
                }
            }
        }
    }

    /// Deletes every closed segment with no live message whose records no longer matter:
    /// every segment its removals refer to is gone already.
    fn collect_garbage(&mut self, shared: &Shared) {
        loop {
            let last = self.segments.len().saturating_sub(1);
            let existing: BTreeSet<u64> = self.segments.iter().map(|s| s.number).collect();
            let Some(position) = self.segments[..last]
                .iter()
                .position(|s| s.live == 0 && s.targets.iter().all(|t| !existing.contains(t)))
            else {
                break;
            };
            self.delete_segment(position, shared);
        }
        self.compact_pinned(shared);
    }

    /// Deletes the segment at `position` of `self.segments`.
    fn delete_segment(&mut self, position: usize, shared: &Shared) {
        // The index keeps the deleted segment's range, so a late id of it can never be taken
        // for an id of the segment before.
        let segment = self.segments.remove(position);
        if let Some(first) = segment.first_id {
            shared.locations.lock().segments.remove(&first);
        }
        match fs::remove_file(&segment.path) {
            Ok(()) => {
                tracing::debug!(file = %segment.path.display(), "message store: segment deleted")
            }
            Err(error) => {
                tracing::warn!(file = %segment.path.display(), %error, "message store: cannot delete segment")
            }
        }
    }

    /// A long-unacknowledged message keeps its segment, and every later segment whose remove
    /// records refer to a segment still there, on disk: a chain. Once `PINNED_SEGMENTS_BEFORE_COMPACTION`
    /// segments without a live message are kept only for their records, the oldest is
    /// compacted: the remove and delivered records that still matter (those about messages in
    /// segments that exist) are appended again to the open segment, then it is deleted. The
    /// next pass can then delete the segments that referred to it.
    fn compact_pinned(&mut self, shared: &Shared) {
        let last = self.segments.len().saturating_sub(1);
        let pinned: Vec<usize> = (0..last).filter(|&i| self.segments[i].live == 0).collect();
        if pinned.len() < PINNED_SEGMENTS_BEFORE_COMPACTION {
            return;
        }
        // Only segments held by a few stragglers: while a backlog drains, segments are
        // pinned by segments with many live messages that will go soon anyway, and carrying
        // their records forward would only write them again.
        let live_of = |number: &u64| {
            self.segments
                .binary_search_by_key(number, |s| s.number)
                .map_or(0, |i| self.segments[i].live)
        };
        let Some(position) = pinned.into_iter().find(|&i| {
            self.segments[i]
                .targets
                .iter()
                .all(|t| live_of(t) <= STRAGGLERS)
        }) else {
            return;
        };
        let number = self.segments[position].number;
        let bytes = match fs::read(&self.segments[position].path) {
            Ok(bytes) => bytes,
            Err(error) => {
                tracing::warn!(%error, "message store: cannot read a segment to compact it");
                return;
            }
        };
        let existing: BTreeSet<u64> = self.segments.iter().map(|s| s.number).collect();
        let mut carried = Vec::new();
        let mut targets = BTreeSet::new();
        let mut offset = 0;
        while offset < bytes.len() {
            let (found, used) = match record::read_record(&bytes[offset..]) {
                record::Read::Record(found, used) => (found, used),
                // Recovery skips damage the same way: what it would not read is not carried.
                _ => match recovery::next_good_record(&bytes, offset + 1) {
                    Some(next) => {
                        offset = next;
                        continue;
                    }
                    None => break,
                },
            };
            offset += used;
            let (delivered, queue, ids) = match found {
                record::Record::Remove { queue, ids } => (false, queue, ids),
                record::Record::Delivered { queue, ids } => (true, queue, ids),
                record::Record::Publish { .. } => continue,
            };
            let still_relevant: Vec<u64> = ids
                .into_iter()
                .filter(|id| {
                    segment_of(&self.index, *id).is_some_and(|target| {
                        target != number && existing.contains(&target) && {
                            targets.insert(target);
                            true
                        }
                    })
                })
                .collect();
            if !still_relevant.is_empty() {
                record::encode_ids(&mut carried, delivered, &queue, &still_relevant);
            }
        }
        if !carried.is_empty() {
            let (written, _) = self.append_until_written(&carried, false);
            if !written {
                return;
            }
            if let Some(current) = self.segments.last_mut() {
                current.targets.extend(targets);
            }
        }
        tracing::debug!(
            segment = number,
            carried = carried.len(),
            "message store: segment compacted"
        );
        self.delete_segment(position, shared);
    }
}

/// Closed segments without a live message, kept only because of their records, before the
/// oldest is compacted (see `Writer::compact_pinned`).
const PINNED_SEGMENTS_BEFORE_COMPACTION: usize = 4;

/// Live messages in a segment few enough to call them stragglers (see `compact_pinned`).
const STRAGGLERS: u64 = 64;

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
