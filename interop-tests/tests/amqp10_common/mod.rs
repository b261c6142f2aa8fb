//! Helpers shared by the AMQP 1.0 tests (a subdirectory module, so cargo does not build it as
//! a test of its own): topology declared through the core, as definitions would, and
//! fe2o3-amqp connections.

#![allow(dead_code)]

use fe2o3_amqp::connection::ConnectionHandle;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::{Connection, Session};
use warren_core::exchange::DestinationName;
use warren_core::value::Table;
use warren_core::vhost::{Actor, ExchangeDeclare, QueueDeclare, BROKER_CONNECTION};
use warren_interop_tests::TestBroker;

const ACTOR: Actor<'static> = Actor {
    user: "guest",
    connection_id: BROKER_CONNECTION,
};

/// Declares a durable queue in the default vhost with `arguments`.
pub fn declare_queue_with(broker: &TestBroker, name: &str, arguments: Table) {
    let vhost = broker.broker().vhost("/").expect("default vhost");
    vhost
        .declare_queue(
            ACTOR,
            QueueDeclare {
                name: name.to_string(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments,
            },
        )
        .expect("queue declared");
}

/// Declares a durable queue in the default vhost.
pub fn declare_queue(broker: &TestBroker, name: &str) {
    declare_queue_with(broker, name, Table::new());
}

/// Declares an exchange of `kind` in the default vhost.
pub fn declare_exchange(broker: &TestBroker, name: &str, kind: &str) {
    let vhost = broker.broker().vhost("/").expect("default vhost");
    vhost
        .declare_exchange(
            ACTOR,
            ExchangeDeclare {
                name: name.to_string(),
                kind: kind.to_string(),
                passive: false,
                durable: true,
                auto_delete: false,
                internal: false,
                arguments: Table::new(),
            },
        )
        .expect("exchange declared");
}

/// Binds `queue` to `exchange` with `key`.
pub fn bind(broker: &TestBroker, exchange: &str, queue: &str, key: &str) {
    let vhost = broker.broker().vhost("/").expect("default vhost");
    vhost
        .bind(
            ACTOR,
            exchange,
            DestinationName::Queue(queue.to_string()),
            key,
            Table::new(),
        )
        .expect("bound");
}

/// Ready messages in `queue`.
pub fn ready(broker: &TestBroker, queue: &str) -> u64 {
    broker
        .broker()
        .vhost("/")
        .and_then(|vhost| vhost.queue(queue))
        .map(|queue| queue.message_count())
        .unwrap_or(0)
}

/// Unsettled deliveries of `queue`.
pub fn unacked(broker: &TestBroker, queue: &str) -> u64 {
    broker
        .broker()
        .vhost("/")
        .and_then(|vhost| vhost.queue(queue))
        .map(|queue| queue.stats().unacknowledged)
        .unwrap_or(0)
}

/// `amqp://guest:guest@127.0.0.1:PORT`, the URL an AMQP 1.0 client connects with.
pub fn url(broker: &TestBroker) -> String {
    format!("amqp://guest:guest@{}", broker.addr())
}

/// Opens a connection (SASL PLAIN as guest) and one session.
pub async fn connect(broker: &TestBroker) -> (ConnectionHandle<()>, SessionHandle<()>) {
    let mut connection = Connection::open("warren-test", url(broker).as_str())
        .await
        .expect("AMQP 1.0 connection opens");
    let session = Session::begin(&mut connection)
        .await
        .expect("session begins");
    (connection, session)
}
