//! Settings that change what a client sees: the default vhost and user, connection_max.

use lapin::{Connection, ConnectionProperties};
use warren_interop_tests::TestBroker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_vhost_and_user_come_from_settings() {
    let broker = TestBroker::start_with(&[
        ("default_vhost", "prod"),
        ("default_user", "admin"),
        ("default_pass", "secret"),
    ])
    .await;
    let connection = Connection::connect(
        &broker.url_for("admin", "secret", "prod"),
        ConnectionProperties::default(),
    )
    .await
    .expect("the configured user opens the configured vhost");
    connection.create_channel().await.expect("channel");
    let guest = Connection::connect(&broker.url(), ConnectionProperties::default()).await;
    assert!(
        guest.is_err(),
        "guest does not exist when another default user is configured"
    );
    assert!(broker.broker().vhost("/").is_none());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_connection_max_are_refused() {
    let broker = TestBroker::start_with(&[("connection_max", "1")]).await;
    let first = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("the first connection is accepted");
    let second = Connection::connect(&broker.url(), ConnectionProperties::default()).await;
    assert!(second.is_err(), "the second connection is refused");
    first
        .create_channel()
        .await
        .expect("the first connection is unharmed");
    drop(first);
    broker.shutdown().await;
}
