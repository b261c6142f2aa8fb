//! One consumer of a [`StreamQueue`]: a task with its own reader that delivers the stream's
//! messages from its offset while its sink has credit, and waits for new chunks once it has
//! caught up.
//!
//! The task is woken by two things: the log's committed end moving (new chunks), and the
//! queue's `dispatch` (the listener freed credit the sink had refused, or the consumer was
//! cancelled). The sink is only called from this task, never under a lock of the queue.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Notify;

use super::offset::ConsumerFilter;
use super::queue::{StreamQueue, FILTER_VALUE_HEADER};
use crate::consumer::{ConsumerSpec, DeliverySink};
use crate::message::Message;
use crate::stream_log::StreamReader;
use crate::value::Value;

/// How many deliveries a consumer makes before it lets other tasks run.
const DELIVERIES_PER_TURN: usize = 256;

/// A consumer as the queue holds it.
pub(super) struct StreamConsumer {
    pub id: u64,
    pub sink: Arc<dyn DeliverySink>,
    /// False for a pre-settled (credited) consumer: its deliveries are sent settled.
    needs_settlement: bool,
    /// What the channel or link asked for (for `/api/consumers`).
    pub spec: ConsumerSpec,
    wake: Notify,
    stopped: AtomicBool,
}

impl StreamConsumer {
    pub fn new(id: u64, sink: Arc<dyn DeliverySink>, spec: ConsumerSpec) -> StreamConsumer {
        StreamConsumer {
            id,
            sink,
            needs_settlement: spec.needs_settlement,
            spec,
            wake: Notify::new(),
            stopped: AtomicBool::new(false),
        }
    }

    /// Makes the task look again (credit may be back). A wake-up while the task is busy is
    /// kept for its next wait, so none is lost.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Ends the task at its next step.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

/// A record read from the log and not yet delivered.
struct PendingRecord {
    offset: u64,
    record: Bytes,
    chunk_holds_unfiltered: bool,
}

/// Where a consumer is in the log: its reader, the records of the chunk being delivered,
/// the first offset it wants, and its filter.
pub(super) struct Cursor {
    reader: StreamReader,
    start: u64,
    filter: Option<ConsumerFilter>,
    pending: VecDeque<PendingRecord>,
}

impl Cursor {
    pub fn new(reader: StreamReader, start: u64, filter: Option<ConsumerFilter>) -> Cursor {
        Cursor {
            reader,
            start,
            filter,
            pending: VecDeque::new(),
        }
    }

    /// The next message the consumer wants, with its offset; `None` once it has caught up.
    /// Messages a filter excludes are skipped here, so they take no credit.
    fn next_message(&mut self, queue: &StreamQueue) -> io::Result<Option<(u64, Arc<Message>)>> {
        loop {
            let Some(pending) = self.pending.pop_front() else {
                let Some(chunk) = self.reader.next_chunk()? else {
                    return Ok(None);
                };
                let chunk_holds_unfiltered = chunk.may_hold_unfiltered();
                for (index, record) in chunk.records().enumerate() {
                    let offset = chunk.header.first_offset + index as u64;
                    if offset >= self.start {
                        self.pending.push_back(PendingRecord {
                            offset,
                            record: chunk.data.slice_ref(record),
                            chunk_holds_unfiltered,
                        });
                    }
                }
                continue;
            };
            let message = queue.decode(pending.offset, pending.record);
            if let Some(filter) = &self.filter {
                let value = message
                    .properties
                    .headers
                    .as_ref()
                    .and_then(|headers| headers.get(FILTER_VALUE_HEADER))
                    .and_then(Value::as_str);
                if !filter.wants(value, pending.chunk_holds_unfiltered) {
                    continue;
                }
            }
            return Ok(Some((pending.offset, message)));
        }
    }
}

/// The consumer's task: delivers while the sink has credit, waits for credit or new
/// chunks, and ends when the consumer is cancelled or the stream deleted.
pub(super) async fn run(
    queue: Arc<StreamQueue>,
    consumer: Arc<StreamConsumer>,
    mut cursor: Cursor,
) {
    let mut committed = queue.log().subscribe();
    let mut next: Option<(u64, Arc<Message>)> = None;
    let mut delivered = 0;
    loop {
        if consumer.is_stopped() {
            return;
        }
        if queue.log().is_deleted() {
            queue.forget(consumer.id);
            consumer.sink.cancelled();
            return;
        }
        if next.is_none() {
            match cursor.next_message(&queue) {
                Ok(Some(found)) => next = Some(found),
                Ok(None) => {
                    consumer.sink.idle();
                    tokio::select! {
                        _ = committed.changed() => {}
                        _ = consumer.wake.notified() => {}
                    }
                    continue;
                }
                Err(error) => {
                    tracing::error!(stream = %queue.log().name(), %error, "a stream consumer cannot read the stream and is cancelled");
                    queue.forget(consumer.id);
                    consumer.sink.cancelled();
                    return;
                }
            }
        }
        if !consumer.sink.reserve() {
            // The sink registered itself as starved; the listener calls `dispatch` once it
            // has room again.
            consumer.wake.notified().await;
            continue;
        }
        let Some((offset, message)) = next.take() else {
            continue;
        };
        let Some(delivery) = queue.delivery(offset, message, consumer.needs_settlement) else {
            return;
        };
        consumer.sink.deliver(delivery);
        delivered += 1;
        if delivered % DELIVERIES_PER_TURN == 0 {
            tokio::task::yield_now().await;
        }
    }
}
