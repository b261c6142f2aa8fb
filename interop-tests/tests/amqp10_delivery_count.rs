//! AMQP 1.0 delivery counts with fe2o3-amqp: `modified` with delivery-failed counts a failed
//! delivery (the header's delivery-count goes up and `x-delivery-limit` applies), `released`
//! does not.

mod amqp10_common;

use std::time::Duration;

use amqp10_common::*;
use fe2o3_amqp::types::messaging::{Body, Modified};
use fe2o3_amqp::types::primitives::Value;
use fe2o3_amqp::{Receiver, Sender};
use warren_core::value::{Table, Value as CoreValue};
use warren_interop_tests::{wait_for, TestBroker};

fn failed() -> Modified {
    Modified {
        delivery_failed: Some(true),
        undeliverable_here: None,
        message_annotations: None,
    }
}

#[tokio::test]
async fn modified_with_delivery_failed_counts_up_and_the_limit_dead_letters() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "dlq");
    let mut arguments = Table::new();
    arguments.insert("x-delivery-limit", CoreValue::I64(1));
    arguments.insert("x-dead-letter-exchange", CoreValue::string(""));
    arguments.insert("x-dead-letter-routing-key", CoreValue::string("dlq"));
    declare_queue_with(&broker, "work", arguments);
    let (mut connection, mut session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut session, "sender", "/queues/work")
        .await
        .unwrap();
    sender.send("poison").await.unwrap();
    let mut receiver = Receiver::attach(&mut session, "receiver", "/queues/work")
        .await
        .unwrap();
    let header = |delivery: &fe2o3_amqp::link::delivery::Delivery<Body<Value>>| {
        let header = delivery.message().header.clone().expect("a header");
        (header.delivery_count, header.first_acquirer)
    };
    let first = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(header(&first), (0, true));
    receiver.modify(&first, failed()).await.unwrap();
    let second = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(header(&second), (1, false));
    receiver.release(&second).await.unwrap();
    let third = receiver.recv::<Body<Value>>().await.unwrap();
    assert_eq!(header(&third), (1, false), "released does not count");
    receiver.modify(&third, failed()).await.unwrap();
    // The second failed delivery exceeds the limit of 1: dead-lettered.
    assert!(wait_for(Duration::from_secs(10), || ready(&broker, "dlq") == 1).await);
    assert_eq!((ready(&broker, "work"), unacked(&broker, "work")), (0, 0));
    receiver.close().await.unwrap();
    sender.close().await.unwrap();
    session.end().await.unwrap();
    connection.close().await.unwrap();
    broker.shutdown().await;
}
