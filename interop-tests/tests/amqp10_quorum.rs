//! AMQP 1.0 (fe2o3-amqp) against a quorum queue: `/queues/q` reaches it through the
//! queue-type interface; `accepted` comes after the commit; `modified` with delivery-failed
//! counts toward the delivery limit, `released` does not, and the limit dead-letters.

mod amqp10_common;

use std::time::Duration;

use amqp10_common::{connect, declare_queue, declare_queue_with, ready};
use fe2o3_amqp::types::messaging::{Body, Modified, Outcome};
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

fn quorum_stats(broker: &TestBroker, name: &str) -> (u64, u64) {
    let info = broker
        .broker()
        .vhost("/")
        .and_then(|v| v.typed_queue(name))
        .map(|q| q.info())
        .unwrap_or_default();
    (info.ready, info.unacknowledged)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_queue_over_amqp_1_0_counts_modified_and_dead_letters_at_the_limit() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let broker = TestBroker::start().await;
        declare_queue(&broker, "dlq");
        let mut arguments = Table::new();
        arguments.insert("x-queue-type", CoreValue::string("quorum"));
        arguments.insert("x-delivery-limit", CoreValue::I64(1));
        arguments.insert("x-dead-letter-exchange", CoreValue::string(""));
        arguments.insert("x-dead-letter-routing-key", CoreValue::string("dlq"));
        declare_queue_with(&broker, "work", arguments);
        let (mut connection, mut session) = connect(&broker).await;
        let mut sender = Sender::attach(&mut session, "sender", "/queues/work")
            .await
            .unwrap();
        let outcome = sender.send("poison").await.unwrap();
        assert!(matches!(outcome, Outcome::Accepted(_)), "{outcome:?}");
        assert_eq!(
            quorum_stats(&broker, "work"),
            (1, 0),
            "accepted after the commit"
        );
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
        assert!(wait_for(Duration::from_secs(10), || ready(&broker, "dlq") == 1).await);
        assert!(
            wait_for(Duration::from_secs(5), || quorum_stats(&broker, "work")
                == (0, 0))
            .await
        );
        receiver.close().await.unwrap();
        sender.close().await.unwrap();
        session.end().await.unwrap();
        connection.close().await.unwrap();
    })
    .await
    .expect("bounded");
}
