//! Publisher flow control (docs/storage.md, "Flow control"): a publisher flooding a queue
//! that nobody drains is no longer read once the queue holds `queue_max_in_memory_bytes` in
//! memory. The queue stays bounded, the publisher stays connected, a publisher to another
//! queue is not slowed, and once a consumer drains the queue every message arrives in order.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod amqp10_common;
mod amqprs_common;

use amqprs::channel::BasicConsumeArguments;
use amqprs_common::next_delivery;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use warren_core::queue::Queue;
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::{wait_for, TestBroker};

/// 30 MB in 1 KB messages: far more than the queue's 1 MiB limit plus what the loopback
/// socket buffers on both sides can hold.
const TOTAL: usize = 30_000;
const BODY: usize = 1024;
/// The queue's limit and the bound the test holds it to: the limit plus one read batch and
/// slack.
const LIMIT: &str = "1MiB";
const BOUND: u64 = 3 * 1024 * 1024;
const LIMIT_TIME: Duration = Duration::from_secs(120);

fn body(i: usize) -> Vec<u8> {
    let mut body = format!("{i:08}").into_bytes();
    body.resize(BODY, b'.');
    body
}

fn queue(broker: &TestBroker, name: &str) -> Arc<Queue> {
    broker
        .broker()
        .vhost("/")
        .expect("vhost /")
        .queue(name)
        .unwrap_or_else(|| panic!("queue '{name}' exists"))
}

/// Waits until `queue` is congested, then checks over a second that the publisher is no
/// longer read (the queue's published count stands still, below what was sent) and that the
/// queue's in-memory bytes stay bounded.
async fn assert_publisher_paused(queue: &Queue, sent: &AtomicUsize) {
    assert!(
        wait_for(Duration::from_secs(30), || queue.flow().is_congested()).await,
        "the flooded queue raises its flow signal"
    );
    // Absence of progress can only be observed over a window. The connection may still be
    // working through what it read before the signal (slowly, on a loaded machine), so wait
    // for the count to settle, then check it stays put: a publisher that is not paused never
    // settles and fails here.
    let mut settled = false;
    for _ in 0..40 {
        let before = queue.stats().published;
        tokio::time::sleep(Duration::from_millis(500)).await;
        if queue.stats().published == before {
            settled = true;
            break;
        }
    }
    assert!(
        settled,
        "the paused publisher is not read (still publishing after 20 s)"
    );
    let before = queue.stats().published;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = queue.stats().published;
    assert_eq!(before, after, "the paused publisher is not read");
    assert!(
        (after as usize) < TOTAL,
        "the queue took {after} of {TOTAL} messages"
    );
    assert!(
        sent.load(Ordering::Relaxed) < TOTAL,
        "the client could not hand over everything"
    );
    let bytes = queue.in_memory_bytes();
    assert!(
        bytes <= BOUND,
        "the queue holds {bytes} bytes in memory, limit {LIMIT}"
    );
    assert!(queue.flow().is_congested());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amqp_publisher_flooding_a_queue_is_paused_not_disconnected_and_loses_nothing() {
    tokio::time::timeout(LIMIT_TIME, async {
        let broker = TestBroker::start_with(&[("queue_max_in_memory_bytes", LIMIT)]).await;
        let publisher = Connection::connect(&broker.url(), ConnectionProperties::default())
            .await
            .expect("connects");
        let channel = publisher.create_channel().await.expect("channel");
        for name in ["flood", "other"] {
            channel
                .queue_declare(name.into(), Default::default(), Default::default())
                .await
                .expect("declare");
        }
        let flood = queue(&broker, "flood");
        let sent = Arc::new(AtomicUsize::new(0));
        let flooding = {
            let sent = Arc::clone(&sent);
            tokio::spawn(async move {
                for i in 0..TOTAL {
                    channel
                        .basic_publish(
                            "".into(),
                            "flood".into(),
                            BasicPublishOptions::default(),
                            &body(i),
                            BasicProperties::default(),
                        )
                        .await
                        .expect("publish sent");
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        assert_publisher_paused(&flood, &sent).await;
        assert!(publisher.status().connected(), "paused, not disconnected");

        // Another connection publishing to another queue is not slowed.
        let other = Connection::connect(&broker.url(), ConnectionProperties::default())
            .await
            .expect("connects");
        let other_channel = other.create_channel().await.expect("channel");
        other_channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .expect("confirms");
        for i in 0..100 {
            other_channel
                .basic_publish(
                    "".into(),
                    "other".into(),
                    BasicPublishOptions::default(),
                    &body(i),
                    BasicProperties::default(),
                )
                .await
                .expect("sent")
                .await
                .expect("confirmed");
        }
        assert_eq!(queue(&broker, "other").stats().published, 100);

        // A consumer (amqprs) drains the flood: everything arrives, in order, and the
        // publisher finishes.
        let consumer = amqprs_common::connect(&broker).await;
        let consumer_channel = consumer.channel().await;
        let (_, mut deliveries) = consumer_channel
            .channel
            .basic_consume_rx(
                BasicConsumeArguments::new("flood", "drain")
                    .manual_ack(false)
                    .finish(),
            )
            .await
            .expect("basic.consume");
        for i in 0..TOTAL {
            let delivery = next_delivery(&mut deliveries).await;
            assert_eq!(delivery.body, body(i), "message {i} in order");
        }
        flooding.await.expect("the publisher finished");
        assert!(!flood.flow().is_congested());
        assert!(publisher.status().connected());
        broker.shutdown().await;
    })
    .await
    .expect("bounded in time");
}

fn mqtt_options(broker: &TestBroker, client_id: &str) -> MqttOptions {
    let addr = broker.mqtt_addr();
    let mut options = MqttOptions::new(client_id, addr.ip().to_string(), addr.port());
    // The test holds both sides still for seconds: keep-alives must not end them.
    options.set_keep_alive(Duration::from_secs(120));
    options.set_credentials("guest", "guest");
    options
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_qos0_fan_in_to_a_stalled_subscriber_pauses_the_publishers_and_loses_nothing() {
    tokio::time::timeout(LIMIT_TIME, async {
        let broker = TestBroker::start_with(&[("queue_max_in_memory_bytes", LIMIT)]).await;
        // The subscriber subscribes, then its event loop is not polled: it reads nothing.
        let (subscriber, mut subscriber_loop) = AsyncClient::new(mqtt_options(&broker, "slow"), 10);
        subscriber
            .subscribe("fan/in", QoS::AtMostOnce)
            .await
            .expect("subscribe queued");
        loop {
            if let Event::Incoming(Packet::SubAck(_)) =
                subscriber_loop.poll().await.expect("subscriber connected")
            {
                break;
            }
        }
        let flood = queue(&broker, "mqtt-subscription-slowqos0");

        // Two publishers, QoS 0, each sending its half as fast as it can.
        const PUBLISHERS: usize = 2;
        let sent = Arc::new(AtomicUsize::new(0));
        let mut publishers = Vec::new();
        for p in 0..PUBLISHERS {
            let (client, mut event_loop) =
                AsyncClient::new(mqtt_options(&broker, &format!("fast{p}")), 100);
            let sent = Arc::clone(&sent);
            let publishing = tokio::spawn(async move {
                for i in (p..TOTAL).step_by(PUBLISHERS) {
                    client
                        .publish("fan/in", QoS::AtMostOnce, false, body(i))
                        .await
                        .expect("publish queued");
                }
                client
            });
            let driving = tokio::spawn(async move {
                loop {
                    match event_loop.poll().await {
                        Ok(Event::Outgoing(rumqttc::Outgoing::Publish(_))) => {
                            sent.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok(_) => {}
                        Err(error) => return error,
                    }
                }
            });
            publishers.push((publishing, driving));
        }
        assert_publisher_paused(&flood, &sent).await;
        for (_, driving) in &publishers {
            assert!(!driving.is_finished(), "paused, not disconnected");
        }

        // The subscriber starts reading: every message arrives, each publisher's in order.
        let mut next = [0usize; PUBLISHERS];
        let mut received = 0;
        while received < TOTAL {
            match subscriber_loop.poll().await.expect("subscriber connected") {
                Event::Incoming(Packet::Publish(publish)) => {
                    let i: usize = std::str::from_utf8(&publish.payload[..8])
                        .expect("text")
                        .parse()
                        .expect("a sequence number");
                    let p = i % PUBLISHERS;
                    assert_eq!(i, p + next[p] * PUBLISHERS, "publisher {p} in order");
                    assert_eq!(publish.payload.len(), BODY);
                    next[p] += 1;
                    received += 1;
                }
                _ => continue,
            }
        }
        for (publishing, driving) in publishers {
            let client = publishing.await.expect("every publish handed over");
            assert!(!driving.is_finished(), "still connected");
            client.disconnect().await.expect("disconnect queued");
        }
        assert!(!flood.flow().is_congested());
        broker.shutdown().await;
    })
    .await
    .expect("bounded in time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stomp_sender_flooding_a_queue_is_paused_and_loses_nothing() {
    tokio::time::timeout(LIMIT_TIME, async {
        let broker = TestBroker::start_with(&[("queue_max_in_memory_bytes", LIMIT)]).await;
        let mut sender = StompClient::connect(broker.stomp_addr(), "1.2").await;
        // The first SEND (with a receipt) declares the queue.
        sender
            .send(
                "/queue/flood",
                &String::from_utf8(body(0)).expect("text"),
                &[],
            )
            .await;
        let flood = queue(&broker, "flood");
        let sent = Arc::new(AtomicUsize::new(1));
        let flooding = {
            let sent = Arc::clone(&sent);
            tokio::spawn(async move {
                for i in 1..TOTAL {
                    sender
                        .write_frame("SEND", &[("destination", "/queue/flood")], &body(i))
                        .await;
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                sender
            })
        };
        assert_publisher_paused(&flood, &sent).await;
        assert!(!flooding.is_finished());

        let mut receiver = StompClient::connect(broker.stomp_addr(), "1.2").await;
        receiver
            .subscribe("/queue/flood", "drain", "auto", &[])
            .await;
        for i in 0..TOTAL {
            let message = receiver.expect_message().await;
            assert_eq!(message.body, body(i), "message {i} in order");
        }
        let sender = flooding.await.expect("the sender finished");
        sender.disconnect().await;
        assert!(!flood.flow().is_congested());
        broker.shutdown().await;
    })
    .await
    .expect("bounded in time");
}

// A current-thread runtime: fe2o3-amqp 0.14 can drop a fast disposition on a multi-thread
// runtime (see durable_settlement.rs).
#[tokio::test]
async fn an_amqp10_sender_flooding_a_queue_gets_no_credit_until_it_drains_and_loses_nothing() {
    use fe2o3_amqp::types::messaging::{Data, Message, Outcome};
    use fe2o3_amqp::types::primitives::Binary;
    use fe2o3_amqp::{Receiver, Sender};

    tokio::time::timeout(LIMIT_TIME, async {
        let broker = TestBroker::start_with(&[("queue_max_in_memory_bytes", LIMIT)]).await;
        amqp10_common::declare_queue(&broker, "flood");
        let flood = queue(&broker, "flood");
        let (mut connection, mut session) = amqp10_common::connect(&broker).await;
        let mut sender = Sender::attach(&mut session, "flooder", "/queues/flood")
            .await
            .expect("sender attaches");
        let sent = Arc::new(AtomicUsize::new(0));
        let flooding = {
            let sent = Arc::clone(&sent);
            tokio::spawn(async move {
                for i in 0..TOTAL {
                    let message = Message::builder().data(Binary::from(body(i))).build();
                    let outcome = sender.send(message).await.expect("disposition");
                    assert!(
                        matches!(outcome, Outcome::Accepted(_)),
                        "message {i} accepted"
                    );
                    sent.fetch_add(1, Ordering::Relaxed);
                }
                sender
            })
        };
        assert_publisher_paused(&flood, &sent).await;
        assert!(!flooding.is_finished(), "the sender waits for credit");

        let (mut drain_connection, mut drain_session) = amqp10_common::connect(&broker).await;
        let mut receiver = Receiver::attach(&mut drain_session, "drain", "/queues/flood")
            .await
            .expect("receiver attaches");
        for i in 0..TOTAL {
            let delivery = receiver.recv::<Data>().await.expect("delivery");
            assert_eq!(
                delivery.body().0.as_ref(),
                &body(i)[..],
                "message {i} in order"
            );
            receiver.accept(&delivery).await.expect("accept");
        }
        let sender = flooding.await.expect("the sender finished");
        assert_eq!(sent.load(Ordering::Relaxed), TOTAL);
        sender.close().await.expect("sender closes");
        receiver.close().await.expect("receiver closes");
        session.end().await.expect("session ends");
        drain_session.end().await.expect("session ends");
        connection.close().await.expect("connection closes");
        drain_connection.close().await.expect("connection closes");
        assert!(!flood.flow().is_congested());
        broker.shutdown().await;
    })
    .await
    .expect("bounded in time");
}
