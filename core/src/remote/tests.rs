//! Forwarding between two brokers in one process, over a link that calls the other
//! broker's [`Forwarding::serve`] directly (no sockets).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::*;
use crate::access::Permissions;
use crate::broker::Limits;
use crate::consumer::{ConsumerSpec, Delivery, DeliverySink};
use crate::message::{Message, Properties};
use crate::queue::Settlement;
use crate::value::Table;
use crate::vhost::{Actor, PublishOptions, Publisher, QueueDeclare};

#[derive(Default)]
struct Net {
    nodes: Mutex<HashMap<String, Arc<Forwarding>>>,
    homes: Mutex<HashMap<String, String>>,
    down: Mutex<HashSet<String>>,
    /// Calls made over any link.
    calls: AtomicUsize,
}

struct FakeLink {
    local: String,
    net: Arc<Net>,
}

impl RemoteLink for FakeLink {
    fn local(&self) -> &str {
        &self.local
    }
    fn home_of(&self, _vhost: &str, queue: &str) -> Option<String> {
        self.net.homes.lock().get(queue).cloned()
    }
    fn is_up(&self, node: &str) -> bool {
        !self.net.down.lock().contains(node) && !self.net.down.lock().contains(&self.local)
    }
    fn call(&self, node: &str, body: Vec<u8>, _timeout: Duration) -> CallFuture {
        self.net.calls.fetch_add(1, Ordering::AcqRel);
        let target = match self.is_up(node) {
            true => self.net.nodes.lock().get(node).cloned(),
            false => None,
        };
        let from = self.local.clone();
        Box::pin(async move {
            match target {
                Some(target) => Ok(target.serve(&from, &body).await),
                None => Err("unreachable".into()),
            }
        })
    }
}

const ADMIN: Actor<'static> = Actor {
    user: "admin",
    connection_id: 1,
};

fn node(net: &Arc<Net>, name: &str) -> Arc<Broker> {
    let broker = Broker::new(Limits {
        max_message_size: 1 << 20,
    });
    let vhost = broker.add_vhost("/");
    broker.add_user("admin", "pw", vec!["administrator".into()]);
    vhost.set_permissions("admin", Permissions::full());
    let forwarding = Forwarding::new(
        &broker,
        Arc::new(FakeLink {
            local: name.into(),
            net: Arc::clone(net),
        }),
        tokio::runtime::Handle::current(),
    );
    broker.set_forwarding(Arc::clone(&forwarding));
    net.nodes.lock().insert(name.into(), forwarding);
    broker
}

fn declare(broker: &Broker, name: &str) {
    broker
        .vhost("/")
        .unwrap()
        .declare_queue(
            ADMIN,
            QueueDeclare {
                name: name.into(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: Table::new(),
            },
        )
        .unwrap();
}

fn publish(broker: &Broker, queue: &str, body: &'static str) {
    let message = Arc::new(Message {
        exchange: "".into(),
        routing_key: queue.into(),
        properties: Properties::default(),
        encoded_properties: None,
        body: bytes::Bytes::from_static(body.as_bytes()),
    });
    let outcome = broker
        .vhost("/")
        .unwrap()
        .publish(
            &mut Publisher::new(),
            ADMIN,
            message,
            PublishOptions::default(),
        )
        .unwrap();
    assert_eq!(outcome.queues, 1);
}

struct Sink {
    credit: AtomicUsize,
    received: Mutex<Vec<Delivery>>,
    cancelled: AtomicUsize,
}

impl DeliverySink for Sink {
    fn reserve(&self) -> bool {
        self.credit
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| c.checked_sub(1))
            .is_ok()
    }
    fn deliver(&self, delivery: Delivery) {
        self.received.lock().push(delivery);
    }
    fn cancelled(&self) {
        self.cancelled.fetch_add(1, Ordering::AcqRel);
    }
}

fn spec() -> ConsumerSpec {
    ConsumerSpec {
        tag: Arc::from("ctag"),
        connection_id: 1,
        needs_settlement: true,
        exclusive: false,
        priority: 0,
        arguments: Table::new(),
    }
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// Two nodes, `q` homed on "b": "a" holds a stand-in.
fn two_nodes() -> (Arc<Net>, Arc<Broker>, Arc<Broker>) {
    let net = Arc::new(Net::default());
    let a = node(&net, "a");
    let b = node(&net, "b");
    declare(&b, "q");
    net.homes.lock().insert("q".into(), "b".into());
    declare(&a, "q");
    (net, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_homed_elsewhere_is_a_stand_in_that_reaches_the_home_queue() {
    let (_net, a, b) = two_nodes();
    let stand_in = a.vhost("/").unwrap().queue_instance("q").unwrap();
    assert!(
        a.vhost("/").unwrap().queue("q").is_none(),
        "no local classic queue on a"
    );
    assert_eq!(stand_in.queue_type().name(), "classic");
    publish(&a, "q", "one");
    publish(&a, "q", "two");
    let home = b.vhost("/").unwrap().queue("q").unwrap();
    eventually("both messages at the home node", || {
        home.message_count() == 2
    })
    .await;
    assert_eq!(stand_in.info().ready, 2);
    let browsed: Vec<_> = stand_in.browse(10).iter().map(|m| m.body.clone()).collect();
    assert_eq!(browsed, vec!["one", "two"]);

    // A consumer on a: deliveries come over the link, in order, within its credit.
    let sink = Arc::new(Sink {
        credit: AtomicUsize::new(1),
        received: Mutex::new(Vec::new()),
        cancelled: AtomicUsize::new(0),
    });
    let consumer = stand_in
        .consume(spec(), Arc::clone(&sink) as Arc<dyn DeliverySink>)
        .unwrap();
    eventually("the first delivery", || sink.received.lock().len() == 1).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        sink.received.lock().len(),
        1,
        "the sink's credit holds the second back"
    );
    sink.credit.store(1, Ordering::Release);
    stand_in.dispatch();
    eventually("the second delivery", || sink.received.lock().len() == 2).await;
    let bodies: Vec<_> = sink
        .received
        .lock()
        .iter()
        .map(|d| d.message.body.clone())
        .collect();
    assert_eq!(bodies, vec!["one", "two"]);

    // Acks reach the home queue.
    let ids: Vec<u64> = sink.received.lock().iter().map(|d| d.id).collect();
    assert_eq!(home.stats().unacknowledged, 2);
    stand_in.settle(&ids, Settlement::Ack);
    eventually("acks at the home node", || home.stats().unacknowledged == 0).await;
    assert_eq!(home.message_count(), 0);
    stand_in.cancel(consumer);
    eventually("the consumer gone at the home node", || {
        home.consumer_count() == 0
    })
    .await;

    // get and purge.
    publish(&a, "q", "three");
    eventually("the third message", || home.message_count() == 1).await;
    let (got, remaining) = stand_in.get(true).unwrap();
    assert_eq!((got.message.body.as_ref(), remaining), (&b"three"[..], 0));
    stand_in.settle(&[got.id], Settlement::Requeue);
    eventually("the requeue", || home.message_count() == 1).await;
    assert_eq!(stand_in.purge(), 1);
    assert_eq!(home.message_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_lost_node_held_goes_back_and_its_consumers_are_cancelled() {
    let (net, a, b) = two_nodes();
    let stand_in = a.vhost("/").unwrap().queue_instance("q").unwrap();
    let home = b.vhost("/").unwrap().queue("q").unwrap();
    publish(&a, "q", "held");
    eventually("the message at home", || home.message_count() == 1).await;
    let sink = Arc::new(Sink {
        credit: AtomicUsize::new(10),
        received: Mutex::new(Vec::new()),
        cancelled: AtomicUsize::new(0),
    });
    stand_in
        .consume(spec(), Arc::clone(&sink) as Arc<dyn DeliverySink>)
        .unwrap();
    eventually("the delivery", || sink.received.lock().len() == 1).await;
    assert_eq!(home.message_count(), 0);

    // a is cut off: b returns the message, a cancels its client's consumer.
    net.down.lock().insert("a".into());
    net.nodes.lock()["b"].maintain();
    net.nodes.lock()["a"].maintain();
    assert_eq!(home.message_count(), 1, "returned to the home queue");
    assert_eq!(home.consumer_count(), 0);
    assert_eq!(sink.cancelled.load(Ordering::Acquire), 1);

    // While the home node is unreachable, publishes are refused (nacked), not held.
    net.down.lock().clear();
    net.down.lock().insert("b".into());
    let refused = stand_in.publish(Arc::new(Message {
        exchange: "".into(),
        routing_key: "q".into(),
        properties: Properties::default(),
        encoded_properties: None,
        body: bytes::Bytes::from_static(b"x"),
    }));
    assert_eq!(refused.outcome, crate::queue::EnqueueOutcome::Rejected);
    let error = stand_in
        .consume(spec(), Arc::clone(&sink) as Arc<dyn DeliverySink>)
        .unwrap_err();
    assert_eq!(error.kind, crate::error::ErrorKind::NotFound);
    assert!(
        error.message.contains("home node 'b'")
            && error.message.contains("is down or inaccessible"),
        "{}",
        error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_local_copy_made_at_boot_becomes_a_stand_in_with_its_bindings() {
    let net = Arc::new(Net::default());
    let a = node(&net, "a");
    let b = node(&net, "b");
    declare(&b, "q");
    // a made q itself (its saved definitions) and bound it before it knew q's home.
    declare(&a, "q");
    let vhost = a.vhost("/").unwrap();
    vhost
        .bind(
            ADMIN,
            "amq.direct",
            crate::exchange::DestinationName::Queue("q".into()),
            "k",
            Table::new(),
        )
        .unwrap();
    assert!(vhost.queue("q").is_some());
    net.homes.lock().insert("q".into(), "b".into());
    net.nodes.lock()["a"].maintain();
    assert!(vhost.queue("q").is_none(), "the local copy is gone");
    assert!(vhost.typed_queue("q").is_some());
    let message = Arc::new(Message {
        exchange: "amq.direct".into(),
        routing_key: "k".into(),
        properties: Properties::default(),
        encoded_properties: None,
        body: bytes::Bytes::from_static(b"bound"),
    });
    let outcome = vhost
        .publish(
            &mut Publisher::new(),
            ADMIN,
            message,
            PublishOptions::default(),
        )
        .unwrap();
    assert_eq!(outcome.queues, 1, "the binding now leads to the stand-in");
    let home = b.vhost("/").unwrap().queue("q").unwrap();
    eventually("the message at home", || home.message_count() == 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stand_in_is_redeclared_as_the_classic_queue_it_stands_for() {
    let (_net, a, _b) = two_nodes();
    let vhost = a.vhost("/").unwrap();
    let redeclare = |arguments: Table| {
        vhost.declare_queue(
            ADMIN,
            QueueDeclare {
                name: "q".into(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments,
            },
        )
    };
    redeclare(Table::new()).expect("the same declaration");
    let mut typed = Table::new();
    typed.insert("x-queue-type", crate::value::Value::string("classic"));
    redeclare(typed).expect("with the type written out");
    let mut other = Table::new();
    other.insert("x-queue-type", crate::value::Value::string("quorum"));
    let error = redeclare(other).unwrap_err();
    assert_eq!(error.kind, crate::error::ErrorKind::PreconditionFailed);
    assert!(
        error.message.contains("inequivalent arg 'x-queue-type'"),
        "{}",
        error.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_after_a_publish_through_the_same_node_sees_it() {
    let (_net, a, b) = two_nodes();
    let stand_in = a.vhost("/").unwrap().queue_instance("q").unwrap();
    let home = b.vhost("/").unwrap().queue("q").unwrap();
    // No wait in between: the get leaves after the publish, so the home node has it.
    for round in 0..50 {
        publish(&a, "q", "fresh");
        let got = stand_in.get(true);
        let Some((got, remaining)) = got else {
            panic!("round {round}: the get did not see the publish before it");
        };
        assert_eq!((got.message.body.as_ref(), remaining), (&b"fresh"[..], 0));
        stand_in.settle(&[got.id], Settlement::Ack);
    }
    eventually("every ack at the home node", || {
        home.stats().unacknowledged == 0
    })
    .await;
    assert_eq!(home.message_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_counters_of_every_stand_in_come_from_one_request_per_home_node() {
    let net = Arc::new(Net::default());
    let a = node(&net, "a");
    let b = node(&net, "b");
    for (queue, messages) in [("q1", 1), ("q2", 2), ("q3", 3)] {
        declare(&b, queue);
        net.homes.lock().insert(queue.into(), "b".into());
        declare(&a, queue);
        for _ in 0..messages {
            publish(&b, queue, "m");
        }
    }
    let vhost = a.vhost("/").unwrap();
    let before = net.calls.load(Ordering::Acquire);
    vhost.fetch_remote_info();
    assert_eq!(
        net.calls.load(Ordering::Acquire) - before,
        1,
        "one request for the three stand-ins"
    );
    for (queue, messages) in [("q1", 1), ("q2", 2), ("q3", 3)] {
        let stand_in = vhost.queue_instance(queue).unwrap();
        assert_eq!(stand_in.home_node(), Some("b"));
        assert_eq!(stand_in.info().ready, messages, "{queue}");
    }
    // The stand-ins answered from what the bulk request brought, and a fetch right after
    // the last one asks nothing.
    vhost.fetch_remote_info();
    let totals = vhost.totals();
    assert_eq!(net.calls.load(Ordering::Acquire) - before, 1);
    assert_eq!(totals.queues.published, 6, "{totals:?}");
    // With the home node down, nothing is asked and the last counters stay.
    net.down.lock().insert("b".into());
    tokio::time::sleep(crate::vhost::REMOTE_INFO_REUSE).await;
    vhost.fetch_remote_info();
    assert_eq!(net.calls.load(Ordering::Acquire) - before, 1);
    assert_eq!(vhost.queue_instance("q3").unwrap().info().ready, 3);
}
