//! Streams through the queue-type interface on real files: declaration rules, publishing
//! through the vhost, consumers from an offset with credit, and the arguments consumers give.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;

use super::*;
use crate::access::Permissions;
use crate::broker::{Broker, Limits};
use crate::consumer::{ConsumerSpec, Delivery, DeliverySink};
use crate::error::ErrorKind;
use crate::message::{Message, Properties};
use crate::store::{MessageStore, StoreConfig};
use crate::stream_log::{MessageFormat, OffsetSpec};
use crate::value::Value;
use crate::vhost::{Actor, PublishOptions, Publisher, QueueDeclare, VHost};

const GUEST: Actor<'static> = Actor {
    user: "guest",
    connection_id: 1,
};

struct Dir(PathBuf);

impl Dir {
    fn new(label: &str) -> Dir {
        use std::sync::atomic::AtomicUsize;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "warren-stream-queue-{label}-{}-{}",
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

/// A record is the filter value, a newline and the body: enough to carry what the tests
/// look at without the AMQP 1.0 mapping (which lives in a listener crate).
struct LineFormat;

impl MessageFormat for LineFormat {
    fn encode(&self, message: &Message) -> Bytes {
        let value = message
            .properties
            .headers
            .as_ref()
            .and_then(|h| h.get("x-stream-filter-value"))
            .and_then(Value::as_str)
            .unwrap_or("");
        let mut out = format!("{value}\n").into_bytes();
        out.extend_from_slice(&message.body);
        Bytes::from(out)
    }

    fn decode(&self, record: Bytes) -> Result<Message, String> {
        let newline = record
            .iter()
            .position(|b| *b == b'\n')
            .ok_or("no newline")?;
        let mut properties = Properties::default();
        if newline > 0 {
            let mut headers = Table::new();
            headers.insert(
                "x-stream-filter-value",
                Value::LongString(record[..newline].to_vec()),
            );
            properties.headers = Some(headers);
        }
        Ok(Message {
            exchange: "".into(),
            routing_key: "".into(),
            properties,
            encoded_properties: None,
            body: record.slice(newline + 1..),
        })
    }
}

fn broker(dir: &Dir) -> (Arc<Broker>, Arc<VHost>) {
    let broker = Broker::new(Limits::default());
    let (store, _) = MessageStore::open(StoreConfig::new(dir.0.join("store"))).unwrap();
    broker.attach_store(store);
    broker.set_stream_format(Arc::new(LineFormat));
    let vhost = broker.add_vhost("/");
    vhost.set_permissions("guest", Permissions::full());
    (broker, vhost)
}

fn declare(name: &str, durable: bool, exclusive: bool, auto_delete: bool) -> QueueDeclare {
    let mut arguments = Table::new();
    arguments.insert("x-queue-type", Value::string("stream"));
    QueueDeclare {
        name: name.into(),
        passive: false,
        durable,
        exclusive,
        auto_delete,
        arguments,
    }
}

fn publish(vhost: &VHost, stream: &str, body: &str, filter: Option<&str>) {
    let mut properties = Properties::default();
    if let Some(value) = filter {
        let mut headers = Table::new();
        headers.insert("x-stream-filter-value", Value::string(value));
        properties.headers = Some(headers);
    }
    let outcome = vhost
        .publish(
            &mut Publisher::new(),
            GUEST,
            Arc::new(Message {
                exchange: "".into(),
                routing_key: stream.into(),
                properties,
                encoded_properties: None,
                body: Bytes::copy_from_slice(body.as_bytes()),
            }),
            PublishOptions::default(),
        )
        .unwrap();
    assert_eq!(outcome.queues, 1, "{body} reached the stream");
    assert!(
        outcome.durable_seq().is_some(),
        "a stream publish waits for the disk"
    );
}

/// A consumer with a prefetch window, keeping what it got.
struct Sink {
    prefetch: u32,
    in_flight: AtomicU32,
    got: Mutex<Vec<Delivery>>,
}

impl Sink {
    fn new(prefetch: u32) -> Arc<Sink> {
        Arc::new(Sink {
            prefetch,
            in_flight: AtomicU32::new(0),
            got: Mutex::new(Vec::new()),
        })
    }

    /// (offset header, body) of everything delivered.
    fn received(&self) -> Vec<(i64, String)> {
        self.got
            .lock()
            .iter()
            .map(|d| {
                let headers = d.message.properties.headers.as_ref().unwrap();
                (
                    headers.get("x-stream-offset").unwrap().as_i64().unwrap(),
                    String::from_utf8_lossy(&d.message.body).into_owned(),
                )
            })
            .collect()
    }

    /// Acknowledges everything delivered so far: credit comes back.
    fn ack_all(&self, queue: &Arc<dyn QueueInstance>) {
        let ids: Vec<u64> = self.got.lock().iter().map(|d| d.id).collect();
        self.in_flight.store(0, Ordering::SeqCst);
        queue.settle(&ids, crate::queue::Settlement::Ack);
        queue.dispatch();
    }
}

impl DeliverySink for Sink {
    fn reserve(&self) -> bool {
        self.in_flight
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < self.prefetch).then_some(n + 1)
            })
            .is_ok()
    }

    fn deliver(&self, delivery: Delivery) {
        self.got.lock().push(delivery);
    }

    fn cancelled(&self) {}

    fn prefetch(&self) -> Option<u32> {
        (self.prefetch != 0).then_some(self.prefetch)
    }
}

fn spec(arguments: &[(&str, Value)], needs_settlement: bool) -> ConsumerSpec {
    let mut table = Table::new();
    for (key, value) in arguments {
        table.insert(*key, value.clone());
    }
    ConsumerSpec {
        tag: "c".into(),
        connection_id: 1,
        needs_settlement,
        exclusive: false,
        priority: 0,
        arguments: table,
    }
}

async fn wait_for(sink: &Sink, count: usize) -> Vec<(i64, String)> {
    for _ in 0..500 {
        if sink.got.lock().len() >= count {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sink.received()
}

/// Waits until the stream holds `count` messages (publishes are written asynchronously;
/// a client with confirms waits the same way).
async fn written(queue: &Arc<dyn QueueInstance>, count: u64) {
    for _ in 0..500 {
        if queue.info().ready >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("only {} of {count} messages written", queue.info().ready);
}

#[test]
fn a_stream_declaration_follows_rabbitmqs_rules() {
    let dir = Dir::new("declare");
    let (_broker, vhost) = broker(&dir);
    for (request, text) in [
        (
            declare("s", true, false, true),
            "invalid property 'auto-delete' for queue 's' in vhost '/'",
        ),
        (
            declare("s", true, true, false),
            "invalid property 'exclusive-owner' for queue 's' in vhost '/'",
        ),
        (
            declare("s", false, false, false),
            "invalid property 'non-durable' for queue 's' in vhost '/'",
        ),
    ] {
        let error = vhost.declare_queue(GUEST, request).unwrap_err();
        assert_eq!(
            (error.kind, error.message.as_str()),
            (ErrorKind::PreconditionFailed, text)
        );
    }
    let mut bad_age = declare("s", true, false, false);
    bad_age
        .arguments
        .insert("x-max-age", Value::string("7 days"));
    let error = vhost.declare_queue(GUEST, bad_age).unwrap_err();
    assert!(error.message.contains("x-max-age"), "{}", error.message);

    let mut bounded = declare("s", true, false, false);
    bounded
        .arguments
        .insert("x-max-length-bytes", Value::I32(1_000_000));
    vhost.declare_queue(GUEST, bounded.clone()).unwrap();
    // The same again (any integer width) is equivalent; another bound is not.
    bounded
        .arguments
        .insert("x-max-length-bytes", Value::I64(1_000_000));
    vhost.declare_queue(GUEST, bounded.clone()).unwrap();
    bounded
        .arguments
        .insert("x-max-length-bytes", Value::I64(5));
    let error = vhost.declare_queue(GUEST, bounded).unwrap_err();
    assert!(
        error
            .message
            .contains("inequivalent arg 'x-max-length-bytes'"),
        "{}",
        error.message
    );
    // The stream is one queue of the vhost, reached by name through the interface.
    let queue = vhost.queue_instance("s").unwrap();
    assert_eq!(queue.queue_type().name(), "stream");
    assert!(vhost.streams().get("s").is_some());
    assert_eq!(
        queue.check_get().unwrap_err().message,
        "basic.get not supported by stream queues queue 's' in vhost '/'"
    );
    vhost.delete_queue(GUEST, "s", false, false).unwrap();
    assert!(vhost.queue_instance("s").is_none());
    assert!(vhost.streams().get("s").is_none(), "the log went with it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_reads_from_its_offset_with_credit_and_acks_only_give_credit_back() {
    let dir = Dir::new("consume");
    let (_broker, vhost) = broker(&dir);
    vhost
        .declare_queue(GUEST, declare("events", true, false, false))
        .unwrap();
    for body in ["a", "b", "c", "d", "e"] {
        publish(&vhost, "events", body, None);
    }
    let queue = vhost.queue_instance("events").unwrap();
    written(&queue, 5).await;

    let refused = queue.consume(spec(&[], true), Sink::new(0)).unwrap_err();
    assert_eq!(
        (refused.kind, refused.message.as_str()),
        (
            ErrorKind::PreconditionFailed,
            "consumer prefetch count is not set for stream queue 'events' in vhost '/'"
        )
    );
    let refused = queue.consume(spec(&[], false), Sink::new(10)).unwrap_err();
    assert_eq!(refused.kind, ErrorKind::NotImplemented);
    let refused = queue
        .consume(
            spec(&[("x-stream-offset", Value::string("soon"))], true),
            Sink::new(10),
        )
        .unwrap_err();
    assert!(
        refused.message.starts_with(
            "failed consuming from stream queue 'events' in vhost '/': invalid x-stream-offset"
        ),
        "{}",
        refused.message
    );

    // From offset 2, two at a time.
    let sink = Sink::new(2);
    let id = queue
        .consume(
            spec(&[("x-stream-offset", Value::I64(2))], true),
            Arc::clone(&sink) as _,
        )
        .unwrap();
    assert_eq!(
        wait_for(&sink, 2).await,
        [(2, "c".to_string()), (3, "d".to_string())]
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(sink.got.lock().len(), 2, "held back by its credit");
    sink.ack_all(&queue);
    assert_eq!(wait_for(&sink, 3).await[2], (4, "e".to_string()));
    // Caught up: what is published next arrives.
    publish(&vhost, "events", "f", None);
    assert_eq!(wait_for(&sink, 4).await[3], (5, "f".to_string()));
    // Nothing was taken away from the stream.
    assert_eq!(queue.info().ready, 6);
    assert_eq!(queue.info().consumers, 1);
    queue.cancel(id);
    assert_eq!(queue.info().consumers, 0);

    // From the first, with a timestamp in the past, and from the next (nothing old).
    let first = Sink::new(100);
    queue
        .consume(
            spec(&[("x-stream-offset", Value::string("first"))], true),
            Arc::clone(&first) as _,
        )
        .unwrap();
    assert_eq!(wait_for(&first, 6).await.len(), 6);
    let long_ago = Sink::new(100);
    queue
        .consume(
            spec(&[("x-stream-offset", Value::Timestamp(1))], true),
            Arc::clone(&long_ago) as _,
        )
        .unwrap();
    assert_eq!(wait_for(&long_ago, 6).await[0].0, 0);
    let next = Sink::new(100);
    queue
        .consume(spec(&[], true), Arc::clone(&next) as _)
        .unwrap();
    publish(&vhost, "events", "g", None);
    assert_eq!(wait_for(&next, 1).await, [(6, "g".to_string())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtering_consumer_gets_only_its_values() {
    let dir = Dir::new("filter");
    let (_broker, vhost) = broker(&dir);
    vhost
        .declare_queue(GUEST, declare("orders", true, false, false))
        .unwrap();
    publish(&vhost, "orders", "red-1", Some("red"));
    publish(&vhost, "orders", "blue-1", Some("blue"));
    publish(&vhost, "orders", "plain", None);
    publish(&vhost, "orders", "red-2", Some("red"));
    let queue = vhost.queue_instance("orders").unwrap();
    written(&queue, 4).await;
    let red = Sink::new(10);
    queue
        .consume(
            spec(
                &[
                    ("x-stream-offset", Value::string("first")),
                    ("x-stream-filter", Value::string("red")),
                ],
                true,
            ),
            Arc::clone(&red) as _,
        )
        .unwrap();
    let with_unfiltered = Sink::new(10);
    queue
        .consume(
            spec(
                &[
                    ("x-stream-offset", Value::string("first")),
                    ("x-stream-filter", Value::Array(vec![Value::string("blue")])),
                    ("x-stream-match-unfiltered", Value::Bool(true)),
                ],
                true,
            ),
            Arc::clone(&with_unfiltered) as _,
        )
        .unwrap();
    let bodies = |got: Vec<(i64, String)>| got.into_iter().map(|(_, b)| b).collect::<Vec<_>>();
    assert_eq!(bodies(wait_for(&red, 2).await), ["red-1", "red-2"]);
    assert_eq!(
        bodies(wait_for(&with_unfiltered, 2).await),
        ["blue-1", "plain"]
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(red.got.lock().len(), 2);
    assert_eq!(with_unfiltered.got.lock().len(), 2);
}

#[test]
fn offsets_and_filters_are_read_from_consumer_arguments_as_rabbitmq_reads_them() {
    let table = |value: Value| {
        let mut t = Table::new();
        t.insert("x-stream-offset", value);
        t
    };
    let now = 1_000_000_000;
    assert_eq!(offset_spec(&Table::new(), now), Ok(OffsetSpec::Next));
    assert_eq!(
        offset_spec(&table(Value::string("first")), now),
        Ok(OffsetSpec::First)
    );
    assert_eq!(
        offset_spec(&table(Value::string("last")), now),
        Ok(OffsetSpec::Last)
    );
    assert_eq!(
        offset_spec(&table(Value::string("next")), now),
        Ok(OffsetSpec::Next)
    );
    assert_eq!(
        offset_spec(&table(Value::U8(7)), now),
        Ok(OffsetSpec::Offset(7))
    );
    assert_eq!(
        offset_spec(&table(Value::Timestamp(1_700_000_000)), now),
        Ok(OffsetSpec::Timestamp(1_700_000_000_000))
    );
    assert_eq!(
        offset_spec(&table(Value::string("1h")), now),
        Ok(OffsetSpec::Timestamp(now - 3_600_000))
    );
    assert_eq!(
        offset_spec(&table(Value::string("7D")), now),
        Ok(OffsetSpec::Timestamp(now - 7 * 86_400_000))
    );
    for bad in [Value::string("7W"), Value::I64(-1), Value::Bool(true)] {
        assert!(offset_spec(&table(bad.clone()), now).is_err(), "{bad:?}");
    }

    assert_eq!(consumer_filter(&Table::new()), None);
    let mut arguments = Table::new();
    arguments.insert("x-stream-filter", Value::string("red"));
    let filter = consumer_filter(&arguments).unwrap();
    assert_eq!(filter.chunks.values, ["red"]);
    assert!(!filter.chunks.match_unfiltered);
    assert!(filter.wants(Some("red"), true));
    assert!(!filter.wants(Some("blue"), true));
    assert!(
        !filter.wants(None, true),
        "unfiltered messages need match-unfiltered"
    );
    assert!(
        filter.wants(None, false),
        "a value given apart from the message (stream protocol) is trusted to the chunk's Bloom filter"
    );
}
