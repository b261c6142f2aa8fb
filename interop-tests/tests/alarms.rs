//! Resource alarms: a raised alarm blocks publishing connections with connection.blocked
//! (lapin advertises the capability; amqprs does not) and stops reading them, consumers on
//! other connections keep receiving, and clearing it sends connection.unblocked and lets the
//! held publishes through. Alarms are raised through the core directly and by the memory and
//! disk monitors crossing a watermark set at runtime or in the configuration.

mod amqprs_common;

use std::time::Duration;

use amqprs::channel::BasicConsumeArguments;
use amqprs_common::{connect, next_delivery, stats};
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use warren_config::{DiskFreeLimit, MemoryHighWatermark};
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
    blocks_publishers_while_consumers_drain(
        &broker,
        |broker| broker.broker().set_alarm(Alarm::Memory, true),
        |broker| broker.broker().set_alarm(Alarm::Memory, false),
    )
    .await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_watermark_crossed_at_runtime_raises_and_clears_the_alarm() {
    let broker = TestBroker::start().await;
    blocks_publishers_while_consumers_drain(
        &broker,
        |broker| {
            let monitor = broker.server().resource_monitor();
            monitor.set_memory_high_watermark(MemoryHighWatermark::Absolute(1024));
            let reading = monitor.check();
            assert!(reading.memory_used.expect("RSS readable") > reading.memory_limit);
            assert_eq!(broker.broker().alarms(), vec![Alarm::Memory]);
        },
        |broker| {
            let monitor = broker.server().resource_monitor();
            monitor.set_memory_high_watermark(MemoryHighWatermark::Relative(0.6));
            monitor.check();
            assert!(broker.broker().alarms().is_empty());
        },
    )
    .await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_free_limit_crossed_at_runtime_raises_and_clears_the_alarm() {
    let broker = TestBroker::start().await;
    blocks_publishers_while_consumers_drain(
        &broker,
        |broker| {
            let monitor = broker.server().resource_monitor();
            monitor.set_disk_free_limit(DiskFreeLimit::Absolute(u64::MAX));
            monitor.check();
            assert_eq!(broker.broker().alarms(), vec![Alarm::Disk]);
        },
        |broker| {
            let monitor = broker.server().resource_monitor();
            monitor.set_disk_free_limit(DiskFreeLimit::Absolute(1));
            monitor.check();
            assert!(broker.broker().alarms().is_empty());
        },
    )
    .await;
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiny_configured_watermark_blocks_publishers_from_the_start() {
    let broker = TestBroker::start_with(&[("vm_memory_high_watermark.absolute", "1KiB")]).await;
    assert_eq!(broker.broker().alarms(), vec![Alarm::Memory]);
    let conn = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects while the alarm is raised");
    let channel = conn.create_channel().await.expect("channel");
    channel
        .queue_declare("work".into(), Default::default(), Default::default())
        .await
        .expect("declare");
    // As in RabbitMQ, the frame that makes the connection a publisher is processed; the
    // connection is blocked from then on.
    publish(&channel, b"first").await;
    assert!(
        wait_for(Duration::from_secs(10), || conn.status().blocked()).await,
        "the first publish gets connection.blocked"
    );
    let held = {
        let channel = channel.clone();
        tokio::spawn(async move { publish(&channel, b"held").await })
    };
    // A declare on another connection is answered, so the broker is serving meanwhile.
    let other = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects");
    other
        .create_channel()
        .await
        .expect("channel")
        .queue_declare("sync".into(), Default::default(), Default::default())
        .await
        .expect("declare");
    assert_eq!(
        stats(&broker, "work").published,
        1,
        "held publish is not read"
    );

    broker
        .server()
        .resource_monitor()
        .set_memory_high_watermark(MemoryHighWatermark::Relative(0.6));
    // The monitor's own periodic check clears the alarm.
    assert!(
        wait_for(Duration::from_secs(10), || !conn.status().blocked()).await,
        "connection.unblocked follows once memory is under the watermark"
    );
    held.await.expect("held publish completes");
    assert!(
        wait_for(Duration::from_secs(10), || stats(&broker, "work").published
            == 2)
        .await
    );
    broker.shutdown().await;
}

/// Raises an alarm with `raise` while a publisher and a consumer are connected, checks the
/// publisher is blocked and not read while the consumer drains, then clears it with `clear`
/// and checks the held publish arrives.
async fn blocks_publishers_while_consumers_drain(
    broker: &TestBroker,
    raise: impl Fn(&TestBroker),
    clear: impl Fn(&TestBroker),
) {
    let consumer_conn = connect(broker).await;
    let consumer = consumer_conn.channel().await;
    consumer.declare("work").await;

    let publisher_conn = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connects");
    let publisher = publisher_conn.create_channel().await.expect("channel");
    publish(&publisher, b"before").await;
    assert!(
        wait_for(Duration::from_secs(10), || stats(broker, "work").published
            == 1)
        .await,
        "the first message is routed"
    );

    raise(broker);
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
        stats(broker, "work").published,
        1,
        "nothing is read from a blocked publisher"
    );

    clear(broker);
    assert!(
        wait_for(Duration::from_secs(10), || !publisher_conn
            .status()
            .blocked())
        .await,
        "the publisher receives connection.unblocked"
    );
    held.await.expect("held publish completes");
    assert_eq!(next_delivery(&mut rx).await.body, b"held");
    assert_eq!(stats(broker, "work").published, 2);
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
