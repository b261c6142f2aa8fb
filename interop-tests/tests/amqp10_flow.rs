//! AMQP 1.0 flow control and settlement against the real server: outcomes map onto core
//! settlement, link credit is the consumer's credit, drain, pre-settled links, multi-frame
//! messages and idle-timeout heartbeats.

mod amqp10_common;

use std::time::Duration;

use amqp10_common::*;
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::types::definitions::SenderSettleMode;
use fe2o3_amqp::types::messaging::{Body, Data, Message, Modified, Outcome};
use fe2o3_amqp::types::primitives::{Binary, Value};
use fe2o3_amqp::{Connection, Receiver, Sender, Session};
use warren_core::value::{Table, Value as CoreValue};
use warren_interop_tests::{wait_for, TestBroker};

fn text(body: &Body<Value>) -> String {
    match body {
        Body::Value(value) => match &value.0 {
            Value::String(text) => text.clone(),
            other => panic!("unexpected value {other:?}"),
        },
        other => panic!("unexpected body {other:?}"),
    }
}

fn dead_lettering_arguments() -> Table {
    let mut arguments = Table::new();
    arguments.insert("x-dead-letter-exchange", CoreValue::string(""));
    arguments.insert("x-dead-letter-routing-key", CoreValue::string("dead"));
    arguments
}

#[tokio::test]
async fn every_outcome_maps_onto_core_settlement() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "dead");
    declare_queue_with(&broker, "work", dead_lettering_arguments());
    let (mut connection, mut session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut session, "s", "/queues/work")
        .await
        .unwrap();
    for name in [
        "accept",
        "release",
        "reject",
        "modify-failed",
        "modify-undeliverable",
    ] {
        sender.send(name).await.unwrap();
    }
    let mut receiver = Receiver::builder()
        .name("r")
        .source("/queues/work")
        .credit_mode(CreditMode::Manual)
        .attach(&mut session)
        .await
        .unwrap();
    receiver.set_credit(1).await.unwrap();

    // accepted: acknowledged, gone.
    let delivery = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(text(delivery.body()), "accept");
    receiver.accept(&delivery).await.unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || ready(&broker, "work") == 4
            && unacked(&broker, "work") == 0)
        .await
    );

    // released: requeued at the head and delivered again, marked as not first acquirer.
    receiver.set_credit(1).await.unwrap();
    let delivery = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(text(delivery.body()), "release");
    assert!(delivery.message().header.as_ref().unwrap().first_acquirer);
    receiver.release(&delivery).await.unwrap();
    receiver.set_credit(1).await.unwrap();
    let again = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(text(again.body()), "release");
    let header = again.message().header.clone().unwrap();
    assert!(!header.first_acquirer);
    // A release is not a failed delivery: the delivery-count stays 0, as in RabbitMQ 4.x.
    assert_eq!(header.delivery_count, 0);
    receiver.accept(&again).await.unwrap();

    // rejected: dead-lettered.
    receiver.set_credit(1).await.unwrap();
    let delivery = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(text(delivery.body()), "reject");
    receiver.reject(&delivery, None).await.unwrap();
    assert!(wait_for(Duration::from_secs(5), || ready(&broker, "dead") == 1).await);

    // modified with delivery-failed: requeued.
    receiver.set_credit(1).await.unwrap();
    let delivery = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(text(delivery.body()), "modify-failed");
    let modified = Modified {
        delivery_failed: Some(true),
        undeliverable_here: None,
        message_annotations: None,
    };
    receiver.modify(&delivery, modified).await.unwrap();
    receiver.set_credit(1).await.unwrap();
    let again = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(text(again.body()), "modify-failed");
    receiver.accept(&again).await.unwrap();

    // modified with undeliverable-here: dead-lettered.
    receiver.set_credit(1).await.unwrap();
    let delivery = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(text(delivery.body()), "modify-undeliverable");
    let modified = Modified {
        delivery_failed: Some(true),
        undeliverable_here: Some(true),
        message_annotations: None,
    };
    receiver.modify(&delivery, modified).await.unwrap();
    assert!(wait_for(Duration::from_secs(5), || ready(&broker, "dead") == 2).await);
    assert!(
        wait_for(Duration::from_secs(5), || ready(&broker, "work") == 0
            && unacked(&broker, "work") == 0)
        .await
    );
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn link_credit_limits_deliveries_and_drain_spends_it() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "credit");
    let (mut connection, mut session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut session, "s", "/queues/credit")
        .await
        .unwrap();
    for i in 0..7 {
        sender.send(format!("m{i}")).await.unwrap();
    }
    let mut receiver = Receiver::builder()
        .name("r")
        .source("/queues/credit")
        .credit_mode(CreditMode::Manual)
        .attach(&mut session)
        .await
        .unwrap();
    // Attached without credit: nothing leaves the queue.
    assert_eq!(ready(&broker, "credit"), 7);
    receiver.set_credit(2).await.unwrap();
    for i in 0..2 {
        let delivery = receiver.recv::<Body<Value>>().await.unwrap();
        assert_eq!(text(delivery.body()), format!("m{i}"));
        receiver.accept(&delivery).await.unwrap();
    }
    // The broker answered the flow synchronously: exactly the credit left the queue.
    assert!(wait_for(Duration::from_secs(5), || unacked(&broker, "credit") == 0).await);
    assert_eq!(ready(&broker, "credit"), 5);

    // drain with 3 credits and 5 ready: 3 delivered, 2 stay.
    receiver.set_credit(3).await.unwrap();
    receiver.drain().await.unwrap();
    for i in 2..5 {
        let delivery = receiver.recv::<Body<Value>>().await.unwrap();
        assert_eq!(text(delivery.body()), format!("m{i}"));
        receiver.accept(&delivery).await.unwrap();
    }
    assert!(wait_for(Duration::from_secs(5), || unacked(&broker, "credit") == 0).await);
    assert_eq!(ready(&broker, "credit"), 2);

    // Drain with more credit than messages: the 2 left come, the rest of the credit is
    // spent, and a message published afterwards stays in the queue.
    receiver.set_credit(10).await.unwrap();
    receiver.drain().await.unwrap();
    for i in 5..7 {
        let delivery = receiver.recv::<Body<Value>>().await.unwrap();
        assert_eq!(text(delivery.body()), format!("m{i}"));
        receiver.accept(&delivery).await.unwrap();
    }
    // The drain's answering flow follows the transfers; an echo round trip (a session
    // flow from a second link's attach) orders this check after it.
    let _probe = Sender::attach(&mut session, "probe", "/queues/credit")
        .await
        .unwrap();
    sender.send("after drain").await.unwrap();
    assert!(wait_for(Duration::from_secs(5), || unacked(&broker, "credit") == 0).await);
    assert_eq!(ready(&broker, "credit"), 1);
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn pre_settled_links_in_both_directions() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "settled");
    let (mut connection, mut session) = connect(&broker).await;
    let mut sender = Sender::builder()
        .name("s")
        .target("/queues/settled")
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut session)
        .await
        .unwrap();
    for i in 0..20 {
        sender.send(format!("m{i}")).await.unwrap();
    }
    assert!(wait_for(Duration::from_secs(5), || ready(&broker, "settled") == 20).await);
    let mut receiver = Receiver::builder()
        .name("r")
        .source("/queues/settled")
        .sender_settle_mode(SenderSettleMode::Settled)
        .attach(&mut session)
        .await
        .unwrap();
    for i in 0..20 {
        let delivery = receiver.recv::<Body<Value>>().await.unwrap();
        assert_eq!(text(delivery.body()), format!("m{i}"));
    }
    // Settled on sending: the queue holds nothing unacknowledged.
    assert_eq!(unacked(&broker, "settled"), 0);
    assert_eq!(ready(&broker, "settled"), 0);
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn multi_frame_messages_travel_both_ways() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "big");
    let mut connection = Connection::builder()
        .container_id("big-frames")
        .max_frame_size(4096)
        .open(url(&broker).as_str())
        .await
        .unwrap();
    let mut session = Session::begin(&mut connection).await.unwrap();
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut sender = Sender::attach(&mut session, "s", "/queues/big")
        .await
        .unwrap();
    let message = Message::builder().data(Binary::from(body.clone())).build();
    assert!(matches!(
        sender.send(message).await.unwrap(),
        Outcome::Accepted(_)
    ));
    let stored = broker.broker().vhost("/").unwrap().queue("big").unwrap();
    assert_eq!(stored.message_count(), 1);
    let mut receiver = Receiver::attach(&mut session, "r", "/queues/big")
        .await
        .unwrap();
    let delivery = receiver.recv::<Data>().await.unwrap();
    assert_eq!(delivery.body().0.as_ref(), &body[..]);
    receiver.accept(&delivery).await.unwrap();
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn several_sessions_and_links_share_a_connection() {
    let broker = TestBroker::start().await;
    for i in 0..3 {
        declare_queue(&broker, &format!("q{i}"));
    }
    let mut connection = Connection::open("multi", url(&broker).as_str())
        .await
        .unwrap();
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(Session::begin(&mut connection).await.unwrap());
    }
    let mut receivers = Vec::new();
    for (i, session) in sessions.iter_mut().enumerate() {
        let mut sender = Sender::attach(session, format!("s{i}"), format!("/queues/q{i}"))
            .await
            .unwrap();
        for n in 0..10 {
            sender.send(format!("{i}-{n}")).await.unwrap();
        }
        sender.close().await.unwrap();
        receivers.push(
            Receiver::attach(session, format!("r{i}"), format!("/queues/q{i}"))
                .await
                .unwrap(),
        );
    }
    for (i, receiver) in receivers.iter_mut().enumerate() {
        for n in 0..10 {
            let delivery = receiver.recv::<Body<Value>>().await.unwrap();
            assert_eq!(text(delivery.body()), format!("{i}-{n}"));
            receiver.accept(&delivery).await.unwrap();
        }
    }
    for i in 0..3 {
        let queue = format!("q{i}");
        assert!(
            wait_for(Duration::from_secs(5), || unacked(&broker, &queue) == 0
                && ready(&broker, &queue) == 0)
            .await
        );
    }
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn detaching_a_receiver_requeues_its_unsettled_deliveries() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "requeue");
    let (mut connection, mut session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut session, "s", "/queues/requeue")
        .await
        .unwrap();
    for i in 0..3 {
        sender.send(format!("m{i}")).await.unwrap();
    }
    let mut receiver = Receiver::attach(&mut session, "r", "/queues/requeue")
        .await
        .unwrap();
    for _ in 0..3 {
        receiver.recv::<Body<Value>>().await.unwrap();
    }
    assert_eq!(unacked(&broker, "requeue"), 3);
    receiver.close().await.unwrap();
    assert!(
        wait_for(Duration::from_secs(5), || ready(&broker, "requeue") == 3
            && unacked(&broker, "requeue") == 0)
        .await
    );
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn the_broker_keeps_an_idle_connection_alive_with_heartbeats() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "idle");
    // The client asks for a frame at least every 400 ms; it closes a silent peer itself.
    let mut connection = Connection::builder()
        .container_id("idle")
        .idle_time_out(400u32)
        .open(url(&broker).as_str())
        .await
        .unwrap();
    let mut session = Session::begin(&mut connection).await.unwrap();
    // Time passing is the behaviour under test: three idle timeouts with no traffic.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let mut sender = Sender::attach(&mut session, "s", "/queues/idle")
        .await
        .unwrap();
    assert!(matches!(
        sender.send("still here").await.unwrap(),
        Outcome::Accepted(_)
    ));
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn a_resource_alarm_withholds_credit_from_publishers_until_it_clears() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "alarmed");
    let (mut connection, mut session) = connect(&broker).await;
    broker
        .broker()
        .set_alarm(warren_core::broker::Alarm::Memory, true);
    // The driver applies the alarm before it handles the next frames, so a link attached
    // now gets no credit: its first send cannot go out.
    let mut sender = Sender::attach(&mut session, "s", "/queues/alarmed")
        .await
        .unwrap();
    let blocked = tokio::time::timeout(Duration::from_millis(300), sender.send("held")).await;
    assert!(
        blocked.is_err(),
        "a send went out during the alarm: {blocked:?}"
    );
    assert_eq!(ready(&broker, "alarmed"), 0);
    broker
        .broker()
        .set_alarm(warren_core::broker::Alarm::Memory, false);
    let outcome = sender.send("after").await.unwrap();
    assert!(matches!(outcome, Outcome::Accepted(_)));
    assert_eq!(ready(&broker, "alarmed"), 1);
    connection.close().await.unwrap();
    broker.shutdown().await;
}
