//! AMQP 1.0 against the real server with the fe2o3-amqp client: links attach to pre-declared
//! queues and exchanges by RabbitMQ 4.x v2 and v1 addresses, and messages flow both ways.

mod amqp10_common;

use std::time::Duration;

use amqp10_common::*;
use fe2o3_amqp::types::messaging::{Body, Message, Outcome, Properties};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};
use warren_interop_tests::{wait_for, TestBroker};

fn text(delivery_body: &Body<Value>) -> String {
    match delivery_body {
        Body::Value(value) => match &value.0 {
            Value::String(text) => text.clone(),
            other => panic!("unexpected value {other:?}"),
        },
        Body::Data(data) => String::from_utf8(data[0].0.to_vec()).unwrap(),
        other => panic!("unexpected body {other:?}"),
    }
}

#[tokio::test]
async fn send_and_receive_on_a_queue_by_v2_address() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "q1");
    let (mut connection, mut session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut session, "sender-1", "/queues/q1")
        .await
        .unwrap();
    for i in 0..3 {
        let outcome = sender.send(format!("hello {i}")).await.unwrap();
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
    }
    assert_eq!(ready(&broker, "q1"), 3);

    let mut receiver = Receiver::attach(&mut session, "receiver-1", "/queues/q1")
        .await
        .unwrap();
    for i in 0..3 {
        let delivery = receiver.recv::<Body<Value>>().await.unwrap();
        assert_eq!(text(delivery.body()), format!("hello {i}"));
        receiver.accept(&delivery).await.unwrap();
    }
    assert!(
        wait_for(Duration::from_secs(5), || unacked(&broker, "q1") == 0
            && ready(&broker, "q1") == 0)
        .await
    );
    receiver.close().await.unwrap();
    sender.close().await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn a_sender_and_a_receiver_may_share_a_link_name() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "shared");
    let (mut connection, mut session) = connect(&broker).await;
    // fe2o3-amqp refuses a duplicate name within one of its sessions; link names are
    // connection-wide in AMQP 1.0, so a second session still tests the broker's keying.
    let mut other_session = fe2o3_amqp::Session::begin(&mut connection).await.unwrap();
    let mut sender = Sender::attach(&mut session, "same-name", "/queues/shared")
        .await
        .unwrap();
    let mut receiver = Receiver::attach(&mut other_session, "same-name", "/queues/shared")
        .await
        .unwrap();
    sender.send("ping").await.unwrap();
    let delivery = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(text(delivery.body()), "ping");
    receiver.accept(&delivery).await.unwrap();
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn exchange_targets_route_by_fixed_key_and_by_subject() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "by-key");
    declare_queue(&broker, "by-subject");
    declare_exchange(&broker, "orders ex", "direct");
    bind(&broker, "orders ex", "by-key", "new/eu");
    bind(&broker, "orders ex", "by-subject", "cancelled");
    let (mut connection, mut session) = connect(&broker).await;

    // Names are percent-encoded in v2 addresses.
    let mut fixed = Sender::attach(&mut session, "fixed", "/exchanges/orders%20ex/new%2Feu")
        .await
        .unwrap();
    assert!(matches!(
        fixed.send("a").await.unwrap(),
        Outcome::Accepted(_)
    ));

    let mut by_subject = Sender::attach(&mut session, "subject", "/exchanges/orders%20ex")
        .await
        .unwrap();
    let message = Message::builder()
        .properties(Properties::builder().subject("cancelled").build())
        .value("b")
        .build();
    assert!(matches!(
        by_subject.send(message).await.unwrap(),
        Outcome::Accepted(_)
    ));
    // Unroutable: released, as RabbitMQ 4.x answers.
    let message = Message::builder()
        .properties(Properties::builder().subject("nobody").build())
        .value("c")
        .build();
    assert!(matches!(
        by_subject.send(message).await.unwrap(),
        Outcome::Released(_)
    ));
    assert_eq!(ready(&broker, "by-key"), 1);
    assert_eq!(ready(&broker, "by-subject"), 1);
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn the_null_target_routes_each_message_by_its_to_address() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "to-queue");
    declare_queue(&broker, "to-exchange");
    bind(&broker, "amq.direct", "to-exchange", "k");
    let (mut connection, mut session) = connect(&broker).await;
    let mut sender = Sender::builder()
        .name("anonymous-terminus")
        .target(fe2o3_amqp::types::messaging::Target::builder().build())
        .attach(&mut session)
        .await
        .unwrap();
    for to in ["/queues/to-queue", "/exchanges/amq.direct/k"] {
        let message = Message::builder()
            .properties(Properties::builder().to(to).build())
            .value("x")
            .build();
        let outcome = sender.send(message).await.unwrap();
        assert!(matches!(outcome, Outcome::Accepted(_)), "{to}: {outcome:?}");
    }
    // As in RabbitMQ 4.x: a `to` naming a missing queue is released (routed nowhere), one
    // naming a missing exchange is rejected with amqp:not-found, and a malformed one with
    // amqp:precondition-failed.
    let send_to = |to: &str| {
        Message::builder()
            .properties(Properties::builder().to(to).build())
            .value("x")
            .build()
    };
    let outcome = sender.send(send_to("/queues/missing")).await.unwrap();
    assert!(matches!(outcome, Outcome::Released(_)), "{outcome:?}");
    match sender.send(send_to("/exchanges/absent/k")).await.unwrap() {
        Outcome::Rejected(rejected) => {
            let error = rejected.error.unwrap();
            assert_eq!(
                error.condition,
                fe2o3_amqp::types::definitions::AmqpError::NotFound.into()
            );
            assert_eq!(
                error.description.as_deref(),
                Some("no exchange 'absent' in vhost '/'")
            );
        }
        other => panic!("expected rejected, got {other:?}"),
    }
    match sender.send(send_to("/queues/")).await.unwrap() {
        Outcome::Rejected(rejected) => {
            let error = rejected.error.unwrap();
            assert_eq!(
                error.condition,
                fe2o3_amqp::types::definitions::AmqpError::PreconditionFailed.into()
            );
            assert_eq!(
                error.description.as_deref(),
                Some("bad 'to' address string: /queues/")
            );
        }
        other => panic!("expected rejected, got {other:?}"),
    }
    // A message without `to` on a null-target link.
    match sender
        .send(Message::builder().value("no to").build())
        .await
        .unwrap()
    {
        Outcome::Rejected(rejected) => assert_eq!(
            rejected.error.unwrap().description.as_deref(),
            Some("anonymous terminus requires 'to' address to be set")
        ),
        other => panic!("expected rejected, got {other:?}"),
    }
    assert_eq!(ready(&broker, "to-queue"), 1);
    assert_eq!(ready(&broker, "to-exchange"), 1);
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn version_1_addresses_are_accepted() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "v1");
    declare_queue(&broker, "v1-topic");
    bind(&broker, "amq.direct", "v1", "rk");
    bind(&broker, "amq.topic", "v1-topic", "a.*");
    let (mut connection, mut session) = connect(&broker).await;
    for (index, address) in [
        "/queue/v1",
        "/amq/queue/v1",
        "/exchange/amq.direct/rk",
        "/topic/a.b",
    ]
    .into_iter()
    .enumerate()
    {
        let mut sender = Sender::attach(&mut session, format!("v1-{index}"), address)
            .await
            .unwrap();
        let outcome = sender.send("m").await.unwrap();
        assert!(
            matches!(outcome, Outcome::Accepted(_)),
            "{address}: {outcome:?}"
        );
        sender.close().await.unwrap();
    }
    assert_eq!(ready(&broker, "v1"), 3);
    assert_eq!(ready(&broker, "v1-topic"), 1);
    let mut receiver = Receiver::attach(&mut session, "v1-receiver", "/amq/queue/v1-topic")
        .await
        .unwrap();
    let delivery = receiver.recv::<Body<Value>>().await.unwrap();
    receiver.accept(&delivery).await.unwrap();
    connection.close().await.unwrap();
    broker.shutdown().await;
}
