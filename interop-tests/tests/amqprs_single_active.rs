//! Single active consumer through amqprs: only the first consumer receives; when it cancels,
//! the next one takes over and gets what is left, in order.

mod amqprs_common;

use amqprs::channel::{BasicCancelArguments, BasicConsumeArguments, QueueDeclareArguments};
use amqprs::{FieldTable, FieldValue};
use amqprs_common::{connect, drain_buffered, next_delivery};
use warren_interop_tests::TestBroker;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_active_consumer_hands_over_on_cancel() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;
    let setup = conn.channel().await;
    let mut arguments = FieldTable::new();
    arguments.insert(
        "x-single-active-consumer".try_into().unwrap(),
        FieldValue::t(true),
    );
    setup
        .channel
        .queue_declare(
            QueueDeclareArguments::new("sac")
                .arguments(arguments)
                .finish(),
        )
        .await
        .expect("declare");
    let first = conn.channel().await;
    let second = conn.channel().await;
    let (_, mut rx_first) = first
        .channel
        .basic_consume_rx(
            BasicConsumeArguments::new("sac", "first")
                .manual_ack(false)
                .finish(),
        )
        .await
        .expect("consume");
    let (_, mut rx_second) = second
        .channel
        .basic_consume_rx(
            BasicConsumeArguments::new("sac", "second")
                .manual_ack(false)
                .finish(),
        )
        .await
        .expect("consume");
    for body in ["1", "2", "3"] {
        setup.publish("sac", body.as_bytes()).await;
    }
    for body in ["1", "2", "3"] {
        assert_eq!(next_delivery(&mut rx_first).await.body, body.as_bytes());
    }
    // A synchronous round trip on the second consumer's channel: nothing arrived there.
    second.declare("sync").await;
    assert!(
        drain_buffered(&mut rx_second).is_empty(),
        "the inactive consumer got nothing"
    );

    first
        .channel
        .basic_cancel(BasicCancelArguments::new("first"))
        .await
        .expect("cancel");
    setup.publish("sac", b"4").await;
    assert_eq!(next_delivery(&mut rx_second).await.body, b"4");
    broker.shutdown().await;
}
