//! consumer_timeout through amqprs: a delivery left unacknowledged past the timeout closes its
//! channel with RabbitMQ's 406 and the message goes back to the queue; acking in time keeps
//! the channel open.

mod amqprs_common;

use std::time::Duration;

use amqprs::channel::{BasicAckArguments, BasicConsumeArguments};
use amqprs_common::{connect, next_delivery, stats};
use warren_interop_tests::{wait_for, TestBroker};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_delivery_past_the_timeout_closes_the_channel_and_requeues() {
    let broker = TestBroker::start_with(&[("consumer_timeout", "300")]).await;
    let conn = connect(&broker).await;
    let setup = conn.channel().await;
    setup.declare("slow").await;
    setup.publish("slow", b"work").await;

    let mut consumer = conn.channel().await;
    let (_, mut rx) = consumer
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("slow", "lazy"))
        .await
        .expect("consume");
    let delivery = next_delivery(&mut rx).await;
    assert_eq!(delivery.body, b"work");
    let (code, text) = consumer.expect_close().await;
    assert_eq!(code, 406);
    assert_eq!(
        text,
        "PRECONDITION_FAILED - delivery acknowledgement on channel 2 timed out. Timeout value used: 300 ms. This timeout value can be configured, see consumers doc guide to learn more"
    );
    assert!(
        wait_for(Duration::from_secs(10), || stats(&broker, "slow").ready
            == 1)
        .await,
        "the message is requeued"
    );

    // Acking in time keeps a channel open.
    let prompt = conn.channel().await;
    let (_, mut rx) = prompt
        .channel
        .basic_consume_rx(BasicConsumeArguments::new("slow", "prompt"))
        .await
        .expect("consume");
    let delivery = next_delivery(&mut rx).await;
    assert!(delivery.redelivered);
    prompt
        .channel
        .basic_ack(BasicAckArguments::new(delivery.delivery_tag, false))
        .await
        .expect("ack");
    prompt.declare("still-open").await;
    broker.shutdown().await;
}
