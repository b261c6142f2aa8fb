//! Single active consumer with consumer priorities through lapin (RabbitMQ 4.x): the waiting
//! consumer with the highest `x-priority` becomes active, once the active one has settled
//! what it holds, and again when the active one cancels.

use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicCancelOptions, BasicConsumeOptions};
use lapin::types::AMQPValue;
use lapin::{BasicProperties, Channel, Connection};
use tokio::sync::mpsc;
use warren_interop_tests::TestBroker;

mod lapin_common;

use lapin_common::{args, connect, declare, publish, stats};

/// Starts a consumer with `x-priority` = `priority` on its own channel; every delivery goes to
/// `events` with the consumer's tag.
async fn consume(
    connection: &Connection,
    tag: &'static str,
    priority: i32,
    events: &mpsc::UnboundedSender<(&'static str, Delivery)>,
) -> Channel {
    let channel = connection.create_channel().await.expect("channel");
    let consumer = channel
        .basic_consume(
            "sac".into(),
            tag.into(),
            BasicConsumeOptions::default(),
            args(&[("x-priority", AMQPValue::LongInt(priority))]),
        )
        .await
        .expect("consume");
    let events = events.clone();
    consumer.set_delegate(move |delivery: lapin::message::DeliveryResult| {
        let events = events.clone();
        async move {
            if let Ok(Some(delivery)) = delivery {
                let _ = events.send((tag, delivery));
            }
        }
    });
    channel
}

async fn next(
    events: &mut mpsc::UnboundedReceiver<(&'static str, Delivery)>,
) -> (String, Delivery) {
    let (tag, delivery) = tokio::time::timeout(Duration::from_secs(10), events.recv())
        .await
        .expect("a delivery within 10 s")
        .expect("events open");
    (tag.to_string(), delivery)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_highest_priority_waiting_consumer_becomes_active() {
    let broker = TestBroker::start().await;
    let (connection, channel) = connect(&broker).await;
    declare(
        &channel,
        "sac",
        args(&[("x-single-active-consumer", AMQPValue::Boolean(true))]),
    )
    .await;
    let (sender, mut events) = mpsc::unbounded_channel();
    let _first = consume(&connection, "first", 0, &sender).await;
    publish(&channel, "sac", b"1", BasicProperties::default()).await;
    let (tag, held) = next(&mut events).await;
    assert_eq!((tag.as_str(), held.data.as_slice()), ("first", &b"1"[..]));

    // Two consumers wait; the active one still holds message 1, so message 2 waits too.
    let _low = consume(&connection, "low", 1, &sender).await;
    let high = consume(&connection, "high", 10, &sender).await;
    publish(&channel, "sac", b"2", BasicProperties::default()).await;
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(10), || stats(&broker, "sac").ready
            == 1)
        .await,
        "message 2 waits for the hand-over"
    );
    assert!(events.try_recv().is_err(), "nobody got message 2 yet");

    held.ack(BasicAckOptions::default()).await.expect("ack");
    let (tag, delivery) = next(&mut events).await;
    assert_eq!(
        (tag.as_str(), delivery.data.as_slice()),
        ("high", &b"2"[..])
    );
    delivery.ack(BasicAckOptions::default()).await.expect("ack");

    // The active consumer cancels: the next by priority (not by attach order) takes over.
    high.basic_cancel("high".into(), BasicCancelOptions::default())
        .await
        .expect("cancel");
    publish(&channel, "sac", b"3", BasicProperties::default()).await;
    let (tag, delivery) = next(&mut events).await;
    assert_eq!((tag.as_str(), delivery.data.as_slice()), ("low", &b"3"[..]));
    broker.shutdown().await;
}
