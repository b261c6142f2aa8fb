//! Connection-level behaviour seen through lapin: the handshake, authentication and vhost
//! access refusals, tuning, and channel_max.

mod lapin_common;

use lapin_common::amqp_error;

use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties, ErrorKind};
use std::time::Duration;
use warren_core::access::Permissions;
use warren_interop_tests::TestBroker;

async fn connect(url: &str) -> lapin::Result<Connection> {
    Connection::connect(url, ConnectionProperties::default()).await
}

/// Publishes a message through the default exchange and gets it back, proving the connection
/// (and the broker) still work.
async fn round_trip(connection: &Connection, queue: &str) {
    let channel = connection.create_channel().await.expect("channel opens");
    round_trip_on(&channel, queue).await;
    channel.close(200, "bye".into()).await.expect("closes");
}

async fn round_trip_on(channel: &lapin::Channel, queue: &str) {
    channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("queue declared");
    channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            b"still alive",
            BasicProperties::default(),
        )
        .await
        .expect("published");
    let mut got = None;
    for _ in 0..200 {
        got = channel
            .basic_get(queue.into(), BasicGetOptions { no_ack: true })
            .await
            .expect("basic.get");
        if got.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let message = got.expect("the message arrives");
    assert_eq!(message.delivery.data, b"still alive");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_opens_a_channel_and_closes_cleanly() {
    let broker = TestBroker::start().await;
    let connection = connect(&broker.url()).await.expect("connects");
    assert!(connection.status().connected());
    assert_eq!(connection.status().username(), "guest");
    assert_eq!(connection.status().vhost().as_str(), "/");
    let channel = connection.create_channel().await.expect("channel opens");
    assert!(channel.status().connected());
    channel
        .close(200, "done".into())
        .await
        .expect("channel closes");
    round_trip(&connection, "conn-q").await;
    connection.close(200, "bye".into()).await.expect("closes");
    // close() returned, so close-ok came back; the connection is no longer usable.
    assert!(!connection.status().connected());
    assert!(connection.create_channel().await.is_err());
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_refused_with_403() {
    let broker = TestBroker::start().await;
    let error = connect(&broker.url_for("guest", "wrong", "%2f"))
        .await
        .expect_err("login refused");
    let (code, text) = amqp_error(&error);
    assert_eq!(code, 403, "{text}");
    assert_eq!(
        text,
        "ACCESS_REFUSED - Login was refused using authentication mechanism PLAIN. For details see the broker logfile."
    );
    let error = connect(&broker.url_for("nobody", "guest", "%2f"))
        .await
        .expect_err("unknown user refused");
    assert_eq!(amqp_error(&error).0, 403);
    // The broker is unharmed.
    let connection = connect(&broker.url()).await.expect("guest still connects");
    round_trip(&connection, "after-refusal").await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_vhost_is_refused_with_530() {
    let broker = TestBroker::start().await;
    let error = connect(&broker.url_for("guest", "guest", "nope"))
        .await
        .expect_err("vhost refused");
    assert_eq!(
        amqp_error(&error),
        (530, "NOT_ALLOWED - vhost nope not found".to_string())
    );
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_without_permissions_on_the_vhost_is_refused_with_530() {
    let broker = TestBroker::start().await;
    let core = broker.broker();
    core.add_user("alice", "secret", vec![]);
    core.add_vhost("other");
    core.set_permissions("alice", "other", Permissions::full())
        .expect("vhost exists");
    let error = connect(&broker.url_for("alice", "secret", "%2f"))
        .await
        .expect_err("no permissions on /");
    assert_eq!(
        amqp_error(&error),
        (
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'alice'".to_string()
        )
    );
    // Where she does have permissions, she gets in.
    let connection = connect(&broker.url_for("alice", "secret", "other"))
        .await
        .expect("alice connects to 'other'");
    assert_eq!(connection.status().vhost().as_str(), "other");
    round_trip(&connection, "alice-q").await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tune_values_are_negotiated() {
    let broker = TestBroker::start().await;
    // No client preference: the server's proposal wins (RabbitMQ's defaults).
    let connection = connect(&broker.url()).await.expect("connects");
    let config = connection.configuration();
    assert_eq!(config.channel_max(), 2047);
    assert_eq!(config.frame_max(), 131_072);
    assert_eq!(config.heartbeat(), 60);
    round_trip(&connection, "tune-default").await;
    // The client asks for less: the lower value wins on each.
    let url = format!(
        "{}?heartbeat=10&frame_max=8192&channel_max=16",
        broker.url()
    );
    let connection = connect(&url).await.expect("connects with limits");
    let config = connection.configuration();
    assert_eq!(config.channel_max(), 16);
    assert_eq!(config.frame_max(), 8192);
    assert_eq!(config.heartbeat(), 10);
    // A body larger than frame_max is split into several body frames and reassembled.
    let channel = connection.create_channel().await.expect("channel");
    channel
        .queue_declare(
            "big".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declared");
    let body: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    channel
        .basic_publish(
            "".into(),
            "big".into(),
            BasicPublishOptions::default(),
            &body,
            BasicProperties::default(),
        )
        .await
        .expect("published");
    let mut got = None;
    for _ in 0..200 {
        got = channel
            .basic_get("big".into(), BasicGetOptions { no_ack: true })
            .await
            .expect("get");
        if got.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(got.expect("message arrives").delivery.data, body);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configured_limits_are_proposed_in_tune() {
    let broker = TestBroker::start_with(&[
        ("channel_max", "2"),
        ("heartbeat", "7"),
        ("frame_max", "65536"),
    ])
    .await;
    let connection = connect(&broker.url()).await.expect("connects");
    let config = connection.configuration();
    assert_eq!(config.channel_max(), 2);
    assert_eq!(config.heartbeat(), 7);
    assert_eq!(config.frame_max(), 65536);
    let first = connection.create_channel().await.expect("channel 1");
    let second = connection.create_channel().await.expect("channel 2");
    assert_eq!((first.id(), second.id()), (1, 2));
    // lapin refuses a third channel itself, without asking the broker (the broker's own 530
    // for a channel beyond channel_max is covered in raw_protocol.rs).
    let error = connection
        .create_channel()
        .await
        .expect_err("no third channel");
    assert!(
        matches!(error.kind(), ErrorKind::ChannelsLimitReached),
        "{error:?}"
    );
    // Both channels work.
    round_trip_on(&first, "limits-1").await;
    round_trip_on(&second, "limits-2").await;
    broker.shutdown().await;
}
