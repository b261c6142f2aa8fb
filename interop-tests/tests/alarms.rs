//! Resource alarms: a raised alarm blocks publishing connections with connection.blocked
//! (lapin advertises the capability; amqprs does not) and stops reading them, consumers on
//! other connections keep receiving, and clearing it sends connection.unblocked and lets the
//! held publishes through. The memory and disk monitors that raise alarms come with the
//! persistence issue; here the alarm is raised through the core, as they will raise it.

mod amqprs_common;

use std::time::Duration;

use amqprs::channel::BasicConsumeArguments;
use amqprs_common::{connect, next_delivery, stats};
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use warren_core::broker::Alarm;
use warren_interop_tests::{wait_for, TestBroker};

async fn publish(channel: &Channel, body: &[u8]) {
    channel
        .basic_publish(
            "".into(),
            "work".into(),
            BasicPublishOptions::default(),
            body,
            BasicProperties::default(),
        )
        .await
        .expect("publish sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarm_blocks_publishers_while_consumers_keep_draining() {
    let broker = TestBroker::start().await;
    let consumer_conn = connect(&broker).await;
    let consumer = consumer_conn.channel().await;
    consumer.declare("work").await;

    let publisher_conn = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects");
    let publisher = publisher_conn.create_channel().await.expect("channel");
    publish(&publisher, b"before").await;
    assert!(
        wait_for(Duration::from_secs(10), || stats(&broker, "work").published
            == 1)
        .await,
        "the first message is routed"
    );

    broker.broker().set_alarm(Alarm::Memory, true);
    assert!(
        wait_for(Duration::from_secs(10), || publisher_conn
            .status()
            .blocked())
        .await,
        "the publisher receives connection.blocked"
    );
    // lapin holds publishes while it is blocked, so send this one from its own task.
    let held = {
        let publisher = publisher.clone();
        tokio::spawn(async move { publish(&publisher, b"held").await })
    };

    // A consumer on another connection is not blocked: it drains what was published.
    let (_, mut rx) = consumer
        .channel
        .basic_consume_rx(
            BasicConsumeArguments::new("work", "c")
                .manual_ack(false)
                .finish(),
        )
        .await
        .expect("consume");
    assert_eq!(next_delivery(&mut rx).await.body, b"before");
    consumer.declare("sync").await;
    assert_eq!(
        stats(&broker, "work").published,
        1,
        "nothing is read from a blocked publisher"
    );

    broker.broker().set_alarm(Alarm::Memory, false);
    assert!(
        wait_for(Duration::from_secs(10), || !publisher_conn
            .status()
            .blocked())
        .await,
        "the publisher receives connection.unblocked"
    );
    held.await.expect("held publish completes");
    assert_eq!(next_delivery(&mut rx).await.body, b"held");
    assert_eq!(stats(&broker, "work").published, 2);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_published_are_not_blocked() {
    let broker = TestBroker::start().await;
    let conn = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects");
    let channel = conn.create_channel().await.expect("channel");
    broker.broker().set_alarm(Alarm::Disk, true);
    // Synchronous methods still work: the connection is read.
    channel
        .queue_declare("q".into(), Default::default(), Default::default())
        .await
        .expect("declare while the alarm is raised");
    assert!(!conn.status().blocked());
    broker.broker().set_alarm(Alarm::Disk, false);
    broker.shutdown().await;
}
