//! Direct reply-to (`amq.rabbitmq.reply-to`) through amqprs: a request/response round trip
//! without a declared reply queue, and RabbitMQ's refusals.

mod amqprs_common;

use amqprs::channel::{BasicConsumeArguments, BasicGetArguments, BasicPublishArguments};
use amqprs::BasicProperties;
use amqprs_common::{connect, next_delivery};
use warren_interop_tests::TestBroker;

const REPLY_TO: &str = "amq.rabbitmq.reply-to";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_reaches_the_requesting_consumer_through_the_rewritten_reply_to() {
    let broker = TestBroker::start().await;
    let client_conn = connect(&broker).await;
    let server_conn = connect(&broker).await;
    let client = client_conn.channel().await;
    let server = server_conn.channel().await;
    server.declare("rpc").await;

    let (_, mut replies) = client
        .channel
        .basic_consume_rx(
            BasicConsumeArguments::new(REPLY_TO, "")
                .manual_ack(false)
                .finish(),
        )
        .await
        .expect("consume amq.rabbitmq.reply-to");
    client
        .channel
        .basic_publish(
            BasicProperties::default().with_reply_to(REPLY_TO).finish(),
            b"ping".to_vec(),
            BasicPublishArguments::new("", "rpc"),
        )
        .await
        .expect("request published");

    let mut request = None;
    for _ in 0..200 {
        request = server
            .channel
            .basic_get(BasicGetArguments::new("rpc").no_ack(true).finish())
            .await
            .expect("basic.get");
        if request.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let (_, properties, body) = request.expect("the request arrives");
    assert_eq!(body, b"ping");
    let reply_to = properties.reply_to().expect("reply_to is set").clone();
    assert!(
        reply_to.starts_with("amq.rabbitmq.reply-to."),
        "rewritten reply_to: {reply_to}"
    );

    server
        .channel
        .basic_publish(
            BasicProperties::default().finish(),
            b"pong".to_vec(),
            BasicPublishArguments::new("", &reply_to),
        )
        .await
        .expect("reply published");
    let reply = next_delivery(&mut replies).await;
    assert_eq!(reply.body, b"pong");

    // Only the requesting connection may consume the reply queue.
    let mut other = server_conn.channel().await;
    other
        .channel
        .basic_consume(
            amqprs::consumer::DefaultConsumer::new(true),
            BasicConsumeArguments::new(&reply_to, "")
                .manual_ack(false)
                .finish(),
        )
        .await
        .ok();
    let (code, _) = other.expect_close().await;
    assert_eq!(code, 405);
    broker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reply_consumer_must_be_no_ack_and_must_exist_before_publishing() {
    let broker = TestBroker::start().await;
    let conn = connect(&broker).await;

    let mut acking = conn.channel().await;
    acking
        .channel
        .basic_consume(
            amqprs::consumer::DefaultConsumer::new(false),
            BasicConsumeArguments::new(REPLY_TO, ""),
        )
        .await
        .ok();
    assert_eq!(
        acking.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - reply consumer cannot acknowledge".to_string()
        )
    );

    let mut publisher = conn.channel().await;
    publisher
        .channel
        .basic_publish(
            BasicProperties::default().with_reply_to(REPLY_TO).finish(),
            b"orphan".to_vec(),
            BasicPublishArguments::new("", "anything"),
        )
        .await
        .expect("publish is asynchronous");
    assert_eq!(
        publisher.expect_close().await,
        (
            406,
            "PRECONDITION_FAILED - fast reply consumer does not exist".to_string()
        )
    );

    // The connection itself is unharmed.
    let healthy = conn.channel().await;
    healthy.declare("still-works").await;
    broker.shutdown().await;
}
