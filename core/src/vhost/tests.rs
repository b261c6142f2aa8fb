use super::queues::server_generated_queue_name;
use super::*;
use crate::message::Message;

use crate::message::Properties;
use bytes::Bytes;

const ADMIN: Actor<'static> = Actor {
    user: "admin",
    connection_id: 1,
};

fn vhost() -> Arc<VHost> {
    let vhost = VHost::new("/");
    vhost.set_permissions("admin", Permissions::full());
    vhost
}

fn declare_queue(vhost: &VHost, name: &str) {
    vhost
        .declare_queue(
            ADMIN,
            QueueDeclare {
                name: name.into(),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                arguments: Table::new(),
            },
        )
        .unwrap();
}

fn declare_exchange(vhost: &VHost, name: &str, kind: &str, arguments: Table) {
    vhost
        .declare_exchange(
            ADMIN,
            ExchangeDeclare {
                name: name.into(),
                kind: kind.into(),
                passive: false,
                durable: false,
                auto_delete: false,
                internal: false,
                arguments,
            },
        )
        .unwrap();
}

fn routed(vhost: &VHost, exchange: &str, key: &str) -> Vec<String> {
    let message = Message {
        exchange: exchange.into(),
        routing_key: key.into(),
        properties: Properties::default(),
        encoded_properties: None,
        body: Bytes::new(),
    };
    let mut out = Vec::new();
    vhost.route(exchange, &message, &mut out).unwrap();
    let mut names: Vec<String> = out.iter().map(|q| q.name().to_string()).collect();
    names.sort();
    names
}

fn queue_binding(vhost: &VHost, exchange: &str, queue: &str, key: &str) {
    vhost
        .bind(
            ADMIN,
            exchange,
            DestinationName::Queue(queue.into()),
            key,
            Table::new(),
        )
        .unwrap();
}

#[test]
fn exchange_to_exchange_paths_deliver_once_and_cycles_terminate() {
    let vhost = vhost();
    declare_exchange(&vhost, "x1", "fanout", Table::new());
    declare_exchange(&vhost, "x2", "fanout", Table::new());
    declare_queue(&vhost, "q");
    queue_binding(&vhost, "x1", "q", "");
    queue_binding(&vhost, "x2", "q", "");
    for (source, destination) in [("x1", "x2"), ("x2", "x1")] {
        vhost
            .bind(
                ADMIN,
                source,
                DestinationName::Exchange(destination.into()),
                "",
                Table::new(),
            )
            .unwrap();
    }
    assert_eq!(routed(&vhost, "x1", "any"), vec!["q"]);
}

#[test]
fn a_fan_out_to_many_queues_through_several_paths_reaches_each_queue_once() {
    // More queues than are kept unique by scanning, each reachable along three paths.
    let vhost = vhost();
    declare_exchange(&vhost, "wide", "fanout", Table::new());
    declare_exchange(&vhost, "inner", "topic", Table::new());
    vhost
        .bind(
            ADMIN,
            "wide",
            DestinationName::Exchange("inner".into()),
            "",
            Table::new(),
        )
        .unwrap();
    let names: Vec<String> = (0..100).map(|i| format!("q{i:03}")).collect();
    for name in &names {
        declare_queue(&vhost, name);
        queue_binding(&vhost, "wide", name, "");
        queue_binding(&vhost, "inner", name, "#");
        queue_binding(&vhost, "inner", name, "k.*");
    }
    assert_eq!(routed(&vhost, "wide", "k.x"), names);
}

#[test]
fn alternate_exchange_takes_unroutable_messages() {
    let vhost = vhost();
    declare_exchange(&vhost, "ae", "fanout", Table::new());
    let mut arguments = Table::new();
    arguments.insert("alternate-exchange", Value::string("ae"));
    declare_exchange(&vhost, "main", "direct", arguments);
    declare_queue(&vhost, "routed");
    declare_queue(&vhost, "unroutable");
    queue_binding(&vhost, "main", "routed", "k");
    queue_binding(&vhost, "ae", "unroutable", "");
    assert_eq!(routed(&vhost, "main", "k"), vec!["routed"]);
    assert_eq!(routed(&vhost, "main", "other"), vec!["unroutable"]);
}

#[test]
fn topic_and_default_exchange_routing() {
    let vhost = vhost();
    declare_queue(&vhost, "a");
    declare_queue(&vhost, "b");
    queue_binding(&vhost, "amq.topic", "a", "stock.*.nyse");
    queue_binding(&vhost, "amq.topic", "b", "stock.#");
    assert_eq!(
        routed(&vhost, "amq.topic", "stock.ibm.nyse"),
        vec!["a", "b"]
    );
    assert_eq!(routed(&vhost, "amq.topic", "stock"), vec!["b"]);
    assert_eq!(routed(&vhost, "", "a"), vec!["a"]);
    assert!(routed(&vhost, "", "missing").is_empty());
}

#[test]
fn redeclaration_must_be_equivalent() {
    let vhost = vhost();
    declare_exchange(&vhost, "x", "direct", Table::new());
    let err = vhost
        .declare_exchange(
            ADMIN,
            ExchangeDeclare {
                name: "x".into(),
                kind: "fanout".into(),
                passive: false,
                durable: false,
                auto_delete: false,
                internal: false,
                arguments: Table::new(),
            },
        )
        .unwrap_err();
    assert_eq!(
        err.message,
        "inequivalent arg 'type' for exchange 'x' in vhost '/': received 'fanout' but current is 'direct'"
    );
    declare_queue(&vhost, "q");
    let mut arguments = Table::new();
    arguments.insert("x-max-length", Value::I32(10));
    let err = vhost
        .declare_queue(
            ADMIN,
            QueueDeclare {
                name: "q".into(),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                arguments,
            },
        )
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PreconditionFailed);
    assert_eq!(
        err.message,
        "inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received the value '10' of type 'signedint' but current is none"
    );
}

#[test]
fn permissions_are_checked_with_rabbitmq_texts() {
    let vhost = vhost();
    vhost.set_permissions("bob", Permissions::new("^bob-", "^bob-", "^bob-").unwrap());
    let bob = Actor {
        user: "bob",
        connection_id: 2,
    };
    let err = vhost
        .declare_queue(
            bob,
            QueueDeclare {
                name: "q".into(),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                arguments: Table::new(),
            },
        )
        .unwrap_err();
    assert_eq!(
        err.message,
        "configure access to queue 'q' in vhost '/' refused for user 'bob'"
    );
    declare_queue(&vhost, "bob-q");
    let err = vhost
        .bind(
            bob,
            "amq.direct",
            DestinationName::Queue("bob-q".into()),
            "k",
            Table::new(),
        )
        .unwrap_err();
    assert_eq!(
        err.message,
        "read access to exchange 'amq.direct' in vhost '/' refused for user 'bob'"
    );
    assert!(vhost.check_publish("bob", "").is_err());
    assert!(vhost.check_publish("bob", "bob-x").is_ok());
}

#[test]
fn deleting_a_queue_removes_its_bindings_and_auto_delete_exchanges() {
    let vhost = vhost();
    vhost
        .declare_exchange(
            ADMIN,
            ExchangeDeclare {
                name: "ad".into(),
                kind: "fanout".into(),
                passive: false,
                durable: false,
                auto_delete: true,
                internal: false,
                arguments: Table::new(),
            },
        )
        .unwrap();
    declare_queue(&vhost, "q");
    queue_binding(&vhost, "ad", "q", "");
    assert_eq!(vhost.delete_queue(ADMIN, "q", false, false).unwrap(), 0);
    assert!(vhost.exchange("ad").is_none());
    assert!(vhost.queue("q").is_none());
    // Deleting what is gone succeeds, as in RabbitMQ.
    assert_eq!(vhost.delete_queue(ADMIN, "q", false, false).unwrap(), 0);
    vhost.delete_exchange(ADMIN, "ad", false).unwrap();
}

#[test]
fn default_queue_type_applies_to_durable_non_exclusive_queues_only() {
    let vhost = vhost();
    vhost.set_default_queue_type(Some("quorum".into()));
    let declare =
        |name: &str, durable: bool, exclusive: bool, arguments: Table, actor: Actor<'_>| {
            vhost.declare_queue(
                actor,
                QueueDeclare {
                    name: name.into(),
                    passive: false,
                    durable,
                    exclusive,
                    auto_delete: false,
                    arguments,
                },
            )
        };
    let err = declare("orders", true, false, Table::new(), ADMIN).unwrap_err();
    assert_eq!(err.kind, ErrorKind::PreconditionFailed);
    assert!(err.message.contains("'quorum'"), "{}", err.message);
    assert!(declare("transient", false, false, Table::new(), ADMIN).is_ok());
    assert!(declare("mine", true, true, Table::new(), ADMIN).is_ok());
    let mut classic = Table::new();
    classic.insert("x-queue-type", Value::string("classic"));
    assert!(declare("explicit", true, false, classic, ADMIN).is_ok());
    let broker = Actor {
        user: "admin",
        connection_id: BROKER_CONNECTION,
    };
    assert!(declare("from-definitions", true, false, Table::new(), broker).is_ok());
    // Redeclaring an existing queue is an equivalence check, not a new declaration.
    assert!(declare("from-definitions", true, false, Table::new(), ADMIN).is_ok());
}

#[test]
fn reserved_names_and_the_default_exchange_are_protected() {
    let vhost = vhost();
    let err = vhost
        .delete_exchange(ADMIN, "amq.direct", false)
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::AccessRefused);
    let err = vhost
        .bind(
            ADMIN,
            "",
            DestinationName::Queue("q".into()),
            "k",
            Table::new(),
        )
        .unwrap_err();
    assert_eq!(
        err.message,
        "operation not permitted on the default exchange"
    );
    let name = server_generated_queue_name();
    assert!(name.starts_with("amq.gen-") && name.len() == 30, "{name}");
}

#[test]
fn topic_permissions_restrict_publish_and_bind_keys_on_topic_exchanges_only() {
    use crate::topic_access::{TopicPermission, TopicVariables};
    let vhost = vhost();
    declare_queue(&vhost, "q");
    let none = TopicVariables::NONE;
    // No topic permission: unrestricted.
    assert!(vhost
        .check_topic("admin", Access::Write, "amq.topic", "x.y", &none)
        .is_ok());
    let permission =
        TopicPermission::new("admin", "/", "amq.topic", "^allowed\\.", "^{username}\\.").unwrap();
    assert!(vhost.set_topic_permission("admin", permission));
    assert!(vhost
        .check_topic("admin", Access::Write, "amq.topic", "allowed.a", &none)
        .is_ok());
    let refused = vhost
        .check_topic("admin", Access::Write, "amq.topic", "other.a", &none)
        .unwrap_err();
    assert_eq!(refused.kind, ErrorKind::AccessRefused);
    assert_eq!(
        refused.message,
        "write access to topic 'other.a' in exchange 'amq.topic' in vhost '/' refused for user 'admin'"
    );
    // Another user, another exchange: unrestricted.
    assert!(vhost
        .check_topic("bob", Access::Write, "amq.topic", "other.a", &none)
        .is_ok());
    assert!(vhost
        .check_topic("admin", Access::Write, "amq.direct", "other.a", &none)
        .is_ok());
    // Binding checks the binding key against `read`.
    let bind = |key: &str| {
        vhost.bind(
            ADMIN,
            "amq.topic",
            DestinationName::Queue("q".into()),
            key,
            Table::new(),
        )
    };
    assert!(bind("admin.#").is_ok());
    let refused = bind("bob.#").unwrap_err();
    assert_eq!(
        refused.message,
        "read access to topic 'bob.#' in exchange 'amq.topic' in vhost '/' refused for user 'admin'"
    );
    assert_eq!(
        routed(&vhost, "amq.topic", "admin.x"),
        vec!["q".to_string()]
    );
    assert!(vhost.clear_topic_permissions("admin", None));
    assert!(bind("bob.#").is_ok());
}

#[test]
fn totals_keep_the_counters_of_deleted_queues() {
    let vhost = vhost();
    declare_queue(&vhost, "gone");
    declare_queue(&vhost, "kept");
    for key in ["gone", "gone", "kept"] {
        let message = Arc::new(Message {
            exchange: "".into(),
            routing_key: key.into(),
            properties: Properties::default(),
            encoded_properties: None,
            body: Bytes::new(),
        });
        let mut out = Vec::new();
        vhost.route("", &message, &mut out).unwrap();
        vhost.enqueue_routed(message, &out);
    }
    let before = vhost.totals();
    assert_eq!(before.queues.published, 3);
    assert_eq!(before.messages.received, 3);
    vhost.delete_queue(ADMIN, "gone", false, false).unwrap();
    assert_eq!(
        vhost.totals(),
        before,
        "deleting a queue loses none of its counts"
    );
}

#[test]
fn exchange_stats_count_publishes_in_and_queue_deliveries_out() {
    use crate::exchange::ExchangeStats;
    let vhost = vhost();
    for queue in ["q1", "q2", "q3"] {
        declare_queue(&vhost, queue);
    }
    declare_exchange(&vhost, "fan", "fanout", Table::new());
    declare_exchange(&vhost, "inner", "fanout", Table::new());
    queue_binding(&vhost, "fan", "q1", "");
    queue_binding(&vhost, "fan", "q2", "");
    vhost
        .bind(
            ADMIN,
            "fan",
            DestinationName::Exchange("inner".into()),
            "",
            Table::new(),
        )
        .unwrap();
    queue_binding(&vhost, "inner", "q3", "");
    let stats = |name: &str| vhost.exchange(name).unwrap().stats();
    // Through an exchange-to-exchange binding the publishing exchange counts every queue
    // reached; the inner exchange counts nothing, as in RabbitMQ.
    routed(&vhost, "fan", "");
    routed(&vhost, "fan", "");
    assert_eq!(
        stats("fan"),
        ExchangeStats {
            published_in: 2,
            published_out: 6
        }
    );
    assert_eq!(stats("inner"), ExchangeStats::default());
    // The default exchange counts like any other; an unroutable publish counts in only.
    routed(&vhost, "", "q1");
    routed(&vhost, "", "missing");
    assert_eq!(
        stats(""),
        ExchangeStats {
            published_in: 2,
            published_out: 1
        }
    );
}

/// A stand-in quorum queue backend for tests without Raft: a classic queue behind the
/// interface, recording that it was made and deleted.
#[derive(Default)]
struct FakeBackend {
    deleted: parking_lot::Mutex<Vec<String>>,
}

struct FakeQueue {
    inner: Arc<crate::queue::Queue>,
    backend: Arc<FakeBackend>,
    arguments: Table,
}

impl crate::queue_type::QueueInstance for FakeQueue {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn queue_type(&self) -> &'static dyn crate::queue_type::QueueType {
        &crate::queue_type::QUORUM
    }
    fn enqueue(&self, message: Arc<Message>, store_id: u64) -> crate::queue::EnqueueOutcome {
        crate::queue_type::QueueInstance::enqueue(&*self.inner, message, store_id)
    }
    fn consume(&self, spec: ConsumerSpec, sink: Arc<dyn DeliverySink>) -> CoreResult<u64> {
        crate::queue_type::QueueInstance::consume(&*self.inner, spec, sink)
    }
    fn cancel(&self, consumer_id: u64) -> ConsumerRemoval {
        crate::queue_type::QueueInstance::cancel(&*self.inner, consumer_id)
    }
    fn settle(&self, ids: &[u64], settlement: crate::queue::Settlement) {
        crate::queue_type::QueueInstance::settle(&*self.inner, ids, settlement)
    }
    fn dispatch(&self) {}
    fn get(&self, needs_settlement: bool) -> Option<(crate::consumer::Delivery, u64)> {
        crate::queue_type::QueueInstance::get(&*self.inner, needs_settlement)
    }
    fn browse(&self, limit: usize) -> Vec<Arc<Message>> {
        self.inner.browse(limit)
    }
    fn purge(&self) -> u64 {
        self.inner.purge()
    }
    fn info(&self) -> crate::queue::QueueStats {
        self.inner.stats()
    }
    fn arguments(&self) -> Table {
        self.arguments.clone()
    }
    fn delete(&self) -> u64 {
        self.backend.deleted.lock().push(self.name().to_string());
        self.inner.purge()
    }
}

struct FakeBackendHandle(Arc<FakeBackend>);

impl crate::queue_type::QueueBackend for FakeBackendHandle {
    fn declare(
        &self,
        _queue_type: &'static dyn crate::queue_type::QueueType,
        declaration: crate::queue_type::Declaration,
    ) -> CoreResult<Arc<dyn crate::queue_type::QueueInstance>> {
        let inner = crate::queue::Queue::new(crate::queue::QueueConfig {
            name: declaration.name.clone(),
            vhost: declaration.vhost_name.clone(),
            durable: true,
            exclusive_owner: None,
            auto_delete: false,
            arguments: Table::new(),
        });
        Ok(Arc::new(FakeQueue {
            inner,
            backend: Arc::clone(&self.0),
            arguments: declaration.arguments,
        }))
    }
}

fn quorum_declare(name: &str, durable: bool, exclusive: bool, auto_delete: bool) -> QueueDeclare {
    let mut arguments = Table::new();
    arguments.insert("x-queue-type", Value::string("quorum"));
    QueueDeclare {
        name: name.into(),
        passive: false,
        durable,
        exclusive,
        auto_delete,
        arguments,
    }
}

#[test]
fn quorum_queues_need_a_backend_and_are_refused_as_rabbitmq_refuses_them() {
    let bare = vhost();
    let err = bare
        .declare_queue(ADMIN, quorum_declare("q", true, false, false))
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::PreconditionFailed);
    assert!(err.message.contains("'quorum'"), "{}", err.message);

    let durability = Arc::new(crate::durability::Durability::default());
    let backend = Arc::new(FakeBackend::default());
    assert!(durability.set_queue_backend(Arc::new(FakeBackendHandle(Arc::clone(&backend)))));
    let vhost = VHost::in_broker("/", ExchangeTypes::default(), durability);
    vhost.set_permissions("admin", Permissions::full());
    for (request, text) in [
        (
            quorum_declare("qa", true, false, true),
            "invalid property 'auto-delete' for queue 'qa' in vhost '/'",
        ),
        (
            quorum_declare("qx", true, true, false),
            "invalid property 'exclusive-owner' for queue 'qx' in vhost '/'",
        ),
        (
            quorum_declare("qt", false, false, false),
            "invalid property 'non-durable' for queue 'qt' in vhost '/'",
        ),
    ] {
        let err = vhost.declare_queue(ADMIN, request).unwrap_err();
        assert_eq!(
            (err.kind, err.message.as_str()),
            (ErrorKind::PreconditionFailed, text)
        );
    }
    assert!(vhost.typed_queues().is_empty());

    vhost
        .declare_queue(ADMIN, quorum_declare("jobs", true, false, false))
        .unwrap();
    // Redeclared the same is fine; as classic it is inequivalent.
    vhost
        .declare_queue(ADMIN, quorum_declare("jobs", true, false, false))
        .unwrap();
    let mut classic = quorum_declare("jobs", true, false, false);
    classic
        .arguments
        .insert("x-queue-type", Value::string("classic"));
    let err = vhost.declare_queue(ADMIN, classic).unwrap_err();
    assert!(
        err.message.contains("inequivalent arg 'x-queue-type'"),
        "{}",
        err.message
    );

    // The default exchange and a binding (through the stand-in) both reach it.
    let publish = |exchange: &str, key: &str| {
        vhost
            .publish(
                &mut crate::vhost::Publisher::new(),
                ADMIN,
                Arc::new(Message {
                    exchange: exchange.into(),
                    routing_key: key.into(),
                    properties: Properties::default(),
                    encoded_properties: None,
                    body: Bytes::from_static(b"m"),
                }),
                crate::vhost::PublishOptions::default(),
            )
            .unwrap()
    };
    assert_eq!(publish("", "jobs").queues, 1);
    vhost
        .bind(
            ADMIN,
            "amq.topic",
            DestinationName::Queue("jobs".into()),
            "jobs.#",
            Table::new(),
        )
        .unwrap();
    assert_eq!(publish("amq.topic", "jobs.new").queues, 1);
    let jobs = vhost.typed_queue("jobs").unwrap();
    assert_eq!(jobs.info().ready, 2);
    assert!(vhost.queue("jobs").is_none(), "not in the classic map");

    assert_eq!(vhost.delete_queue(ADMIN, "jobs", false, false).unwrap(), 2);
    assert_eq!(*backend.deleted.lock(), vec!["jobs".to_string()]);
    assert!(vhost.typed_queue("jobs").is_none());
    assert_eq!(
        publish("amq.topic", "jobs.new").queues,
        0,
        "the binding went with it"
    );
}
