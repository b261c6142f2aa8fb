//! [`StreamQueue`]: a stream's log as a queue of the queue-type interface.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;

use super::consumer::{self, Cursor, StreamConsumer};
use super::offset::{consumer_filter, offset_spec};
use super::STREAM;
use crate::consumer::{ConsumerSpec, Delivery, DeliverySink};
use crate::durability::Durability;
use crate::error::{resource, CoreError, CoreResult, ErrorKind};
use crate::message::Message;
use crate::queue::{ConsumerRemoval, EnqueueOutcome, QueueStats, Settlement};
use crate::queue_type::{Published, QueueInstance, QueueType};
use crate::stream_log::{
    parse_max_age, MessageFormat, OffsetSpec, PolicyLimits, Publish, Record, StreamLog,
    StreamSettings,
};
use crate::value::{Table, Value};
use crate::vhost::VHost;

/// The header a publisher sets to give a message its filter value.
pub(super) const FILTER_VALUE_HEADER: &str = "x-stream-filter-value";

static NEXT_CONSUMER_ID: AtomicU64 = AtomicU64::new(1);

/// A stream reached through the queue-type interface: what AMQP 0-9-1, STOMP and the other
/// protocols publish is appended to its log (confirmed once on disk), and each consumer
/// reads the log from its own offset.
pub struct StreamQueue {
    me: Weak<StreamQueue>,
    log: Arc<StreamLog>,
    vhost_name: String,
    /// The vhost, which deletes the stream's log when the queue is deleted.
    vhost: Weak<VHost>,
    /// The broker's store (publishers wait for a sequence number of it held until their
    /// record is on disk: the same wait as for persistent messages of classic queues) and
    /// the stream message format, read when used: streams recovered at boot are made
    /// before the server installs the format.
    durability: Arc<Durability>,
    consumers: Mutex<HashMap<u64, Arc<StreamConsumer>>>,
    published: AtomicU64,
    delivered: AtomicU64,
    acknowledged: AtomicU64,
}

impl StreamQueue {
    /// The queue for `log`, a stream of `vhost`.
    pub fn new(log: Arc<StreamLog>, vhost: &VHost) -> Arc<StreamQueue> {
        Arc::new_cyclic(|me| StreamQueue {
            me: me.clone(),
            log,
            vhost_name: vhost.name().to_owned(),
            vhost: vhost.me(),
            durability: Arc::clone(vhost.durability()),
            consumers: Mutex::new(HashMap::new()),
            published: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            acknowledged: AtomicU64::new(0),
        })
    }

    /// The stream's log.
    pub fn log(&self) -> &Arc<StreamLog> {
        &self.log
    }

    fn describe(&self) -> String {
        resource("queue", self.log.name(), &self.vhost_name)
    }

    fn format(&self) -> CoreResult<&Arc<dyn MessageFormat>> {
        self.durability.stream_format().ok_or_else(|| {
            CoreError::new(
                ErrorKind::InternalError,
                format!(
                    "{} cannot be used over this protocol: no stream message format is installed",
                    self.describe()
                ),
            )
        })
    }

    /// The message a record holds, with its offset in the `x-stream-offset` header (a
    /// long, as RabbitMQ sets it). A record that is no message of the format (a stream
    /// client may write any bytes) is delivered as its bytes, with no properties.
    pub(super) fn decode(&self, offset: u64, record: Bytes) -> Arc<Message> {
        let format = self.durability.stream_format();
        let mut message = match format.map(|f| f.decode(record.clone())) {
            Some(Ok(message)) => message,
            _ => Message {
                exchange: "".into(),
                routing_key: "".into(),
                properties: Default::default(),
                encoded_properties: None,
                body: record,
            },
        };
        message.encoded_properties = None;
        message
            .properties
            .headers
            .get_or_insert_with(Table::new)
            .insert("x-stream-offset", Value::I64(offset as i64));
        Arc::new(message)
    }

    pub(super) fn delivery(
        &self,
        offset: u64,
        message: Arc<Message>,
        needs_settlement: bool,
    ) -> Option<Delivery> {
        let queue: Arc<dyn QueueInstance> = self.me.upgrade()?;
        self.delivered.fetch_add(1, Ordering::Relaxed);
        Some(Delivery {
            queue,
            id: offset,
            message,
            redelivered: false,
            delivery_count: 0,
            needs_settlement,
        })
    }

    /// Forgets a consumer whose reader stopped by itself (the log could not be read).
    pub(super) fn forget(&self, consumer_id: u64) {
        self.consumers.lock().remove(&consumer_id);
    }
}

impl QueueInstance for StreamQueue {
    fn name(&self) -> &str {
        self.log.name()
    }

    fn queue_type(&self) -> &'static dyn QueueType {
        &STREAM
    }

    fn enqueue(&self, message: Arc<Message>, _store_id: u64) -> EnqueueOutcome {
        self.publish(message).outcome
    }

    fn publish(&self, message: Arc<Message>) -> Published {
        let format = match self.format() {
            Ok(format) => format,
            Err(error) => {
                tracing::error!(stream = %self.log.name(), "{}", error.message);
                return Published {
                    outcome: EnqueueOutcome::Rejected,
                    durable_seq: None,
                };
            }
        };
        let filter = message
            .properties
            .headers
            .as_ref()
            .and_then(|headers| headers.get(FILTER_VALUE_HEADER))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let record = Record {
            body: format.encode(&message),
            publishing_id: 0,
            filter,
        };
        let hold = self
            .durability
            .store()
            .map(|store| (Arc::clone(store), store.hold()));
        let durable_seq = hold.as_ref().map(|(_, seq)| *seq);
        let name = self.log.name().to_owned();
        self.published.fetch_add(1, Ordering::Relaxed);
        self.log.publish(Publish {
            producer: None,
            records: vec![record],
            on_written: Box::new(move |written| {
                let failed = written.is_err();
                if let Err(problem) = written {
                    tracing::warn!(stream = %name, %problem, "a message published to the stream was not written");
                }
                if let Some((store, seq)) = hold {
                    // A refused publish (a replica's, or a leader that stopped leading before a
                    // majority had it) is nacked: the publisher sends it again to the leader.
                    if failed {
                        store.fail(seq);
                    } else {
                        store.release(seq);
                    }
                }
            }),
        });
        Published {
            outcome: EnqueueOutcome::Enqueued,
            durable_seq,
        }
    }

    fn consume(&self, spec: ConsumerSpec, sink: Arc<dyn DeliverySink>) -> CoreResult<u64> {
        // RabbitMQ's checks, in its order and with its texts. An auto-ack consumer has no
        // prefetch the sink can report, so it is refused for auto-ack whatever its qos. A
        // credited consumer (AMQP 1.0) has neither check: link credit bounds its flow.
        let credited = sink.credited();
        if !credited && !spec.needs_settlement {
            return Err(CoreError::new(
                ErrorKind::NotImplemented,
                format!(
                    "automatic acknowledgement not supported by stream {}",
                    self.describe()
                ),
            ));
        }
        if !credited && sink.prefetch().unwrap_or(0) == 0 {
            return Err(CoreError::precondition_failed(format!(
                "consumer prefetch count is not set for stream {}",
                self.describe()
            )));
        }
        let now_ms = crate::stream_log::now_ms();
        let spec_offset = offset_spec(&spec.arguments, now_ms).map_err(|reason| {
            CoreError::precondition_failed(format!(
                "failed consuming from stream {}: {reason}",
                self.describe()
            ))
        })?;
        self.format()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            CoreError::new(
                ErrorKind::InternalError,
                "stream consumers need the broker's runtime",
            )
        })?;
        let filter = consumer_filter(&spec.arguments);
        let end = self.log.stats().next_offset;
        let reader = self
            .log
            .reader(spec_offset)
            .map_err(|error| {
                CoreError::new(
                    ErrorKind::InternalError,
                    format!("cannot read stream {}: {error}", self.describe()),
                )
            })?
            .with_filter(filter.as_ref().map(|f| f.chunks.clone()));
        // A numeric offset inside a chunk starts at that record, not at the chunk's first.
        let start = match spec_offset {
            OffsetSpec::Offset(offset) => offset.max(reader.start_offset()).min(end),
            _ => reader.start_offset(),
        };
        let Some(queue) = self.me.upgrade() else {
            return Err(CoreError::not_found(format!("no {}", self.describe())));
        };
        let id = NEXT_CONSUMER_ID.fetch_add(1, Ordering::Relaxed);
        let consumer = Arc::new(StreamConsumer::new(id, sink, spec));
        self.consumers.lock().insert(id, Arc::clone(&consumer));
        runtime.spawn(consumer::run(
            queue,
            consumer,
            Cursor::new(reader, start, filter),
        ));
        Ok(id)
    }

    fn local_consumers(&self) -> Vec<(ConsumerSpec, bool)> {
        let mut consumers: Vec<_> = self.consumers.lock().values().cloned().collect();
        consumers.sort_by_key(|consumer| consumer.id);
        consumers
            .into_iter()
            .map(|consumer| (consumer.spec.clone(), true))
            .collect()
    }

    fn cancel(&self, consumer_id: u64) -> ConsumerRemoval {
        match self.consumers.lock().remove(&consumer_id) {
            Some(consumer) => {
                consumer.stop();
                ConsumerRemoval::Removed
            }
            None => ConsumerRemoval::NotAttached,
        }
    }

    fn settle(&self, ids: &[u64], settlement: Settlement) {
        // Reads are non-destructive: every settlement (ack, nack and reject with or without
        // requeue) only gives the consumer its credit back, which the listener's sink
        // counts, as RabbitMQ treats them on streams.
        if settlement == Settlement::Ack {
            self.acknowledged
                .fetch_add(ids.len() as u64, Ordering::Relaxed);
        }
    }

    fn dispatch(&self) {
        for consumer in self.consumers.lock().values() {
            consumer.wake();
        }
    }

    fn get(&self, _needs_settlement: bool) -> Option<(Delivery, u64)> {
        None
    }

    fn check_get(&self) -> CoreResult<()> {
        Err(CoreError::new(
            ErrorKind::NotImplemented,
            format!(
                "basic.get not supported by stream queues {}",
                self.describe()
            ),
        ))
    }

    fn browse(&self, limit: usize) -> Vec<Arc<Message>> {
        let mut out = Vec::new();
        let Ok(mut reader) = self.log.reader(OffsetSpec::First) else {
            return out;
        };
        while out.len() < limit {
            let Ok(Some(chunk)) = reader.next_chunk() else {
                break;
            };
            for (index, record) in chunk.records().enumerate() {
                if out.len() == limit {
                    break;
                }
                let offset = chunk.header.first_offset + index as u64;
                out.push(self.decode(offset, chunk.data.slice_ref(record)));
            }
        }
        out
    }

    fn purge(&self) -> u64 {
        0
    }

    fn check_purge(&self) -> CoreResult<()> {
        Err(CoreError::new(
            ErrorKind::NotImplemented,
            format!(
                "queue.purge not supported by stream queues {}",
                self.describe()
            ),
        ))
    }

    fn info(&self) -> QueueStats {
        let stats = self.log.stats();
        QueueStats {
            ready: stats.next_offset.saturating_sub(stats.first_offset),
            consumers: self.consumers.lock().len() as u64,
            published: self.published.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            acknowledged: self.acknowledged.load(Ordering::Relaxed),
            ..QueueStats::default()
        }
    }

    fn arguments(&self) -> Table {
        // The stream keeps its arguments as text (`stream.meta`): numbers come back as
        // numbers, so a redeclaration with the same values is equivalent.
        let mut table = Table::new();
        table.insert("x-queue-type", Value::string("stream"));
        for (key, value) in &self.log.settings().arguments {
            let value = match value.parse::<i64>() {
                Ok(number) => Value::I64(number),
                Err(_) => Value::string(value.clone()),
            };
            table.insert(key.clone(), value);
        }
        table
    }

    fn apply_policies(&self, policy: Option<&Table>, operator: Option<&Table>) {
        let limits = policy_limits(self.log.settings(), policy, operator);
        self.log.set_policy(&limits);
    }

    fn delete(&self) -> u64 {
        let consumers: Vec<_> = self.consumers.lock().drain().map(|(_, c)| c).collect();
        for consumer in consumers {
            consumer.stop();
            consumer.sink.cancelled();
        }
        // After the consumers stopped, so none reads a log being removed.
        if let Some(vhost) = self.vhost.upgrade() {
            vhost.streams().delete(self.log.name());
        }
        0
    }
}

/// The retention a policy and an operator policy set on a stream whose arguments are
/// `settings`: the policy's `max-age`, `max-length-bytes` and
/// `stream-max-segment-size-bytes` win over the arguments; an operator policy's
/// `max-length-bytes` caps whichever applies (the smaller wins), as for other queues.
/// Values that do not parse are left out (the policy's validation refuses most).
pub(super) fn policy_limits(
    settings: &StreamSettings,
    policy: Option<&Table>,
    operator: Option<&Table>,
) -> PolicyLimits {
    let positive = |table: Option<&Table>, key: &str| {
        table
            .and_then(|t| t.get(key))
            .and_then(Value::as_i64)
            .and_then(|n| u64::try_from(n).ok())
            .filter(|n| *n > 0)
    };
    let max_age = policy
        .and_then(|t| t.get("max-age"))
        .and_then(Value::as_str)
        .and_then(|text| match parse_max_age(text) {
            Ok(age) => Some(age),
            Err(problem) => {
                tracing::warn!(%problem, "a policy's max-age is ignored for streams");
                None
            }
        });
    let mut max_length_bytes = positive(policy, "max-length-bytes");
    if let Some(cap) = positive(operator, "max-length-bytes") {
        let current = max_length_bytes.or(settings.max_length_bytes);
        max_length_bytes = Some(current.map_or(cap, |n| n.min(cap)));
    }
    PolicyLimits {
        max_segment_size: positive(policy, "stream-max-segment-size-bytes"),
        max_length_bytes,
        max_age,
    }
}
