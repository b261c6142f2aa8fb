//! Cross-protocol delivery between STOMP and AMQP 0-9-1 (lapin), both ways, with every
//! mapped property and custom headers preserved (docs/protocol-mapping.md).

use std::time::Duration;

use lapin::options::{BasicGetOptions, BasicPublishOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use warren_interop_tests::stomp::StompClient;
use warren_interop_tests::TestBroker;

async fn amqp_channel(broker: &TestBroker) -> (Connection, lapin::Channel) {
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("AMQP connects");
    let channel = connection.create_channel().await.expect("channel");
    (connection, channel)
}

fn text(value: &Option<ShortString>) -> Option<&str> {
    value.as_ref().map(ShortString::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_send_reaches_an_amqp_consumer_with_its_properties_and_headers() {
    let broker = TestBroker::start().await;
    let (_connection, channel) = amqp_channel(&broker).await;
    channel
        .queue_declare(
            "from-stomp".into(),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("declared");
    let mut stomp = StompClient::connect(broker.stomp_addr(), "1.2").await;
    stomp
        .send(
            "/amq/queue/from-stomp",
            "{\"n\":1}",
            &[
                ("content-type", "application/json"),
                ("content-encoding", "identity"),
                ("persistent", "true"),
                ("priority", "3"),
                ("correlation-id", "corr-7"),
                ("reply-to", "/queue/answers"),
                ("expiration", "60000"),
                ("amqp-message-id", "msg-1"),
                ("timestamp", "1700000000"),
                ("type", "order.created"),
                ("user-id", "guest"),
                ("app-id", "shop"),
                ("x-tenant", "acme: east"),
            ],
        )
        .await;
    let message = channel
        .basic_get("from-stomp".into(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
        .expect("the message is there");
    assert_eq!(message.delivery.data, b"{\"n\":1}");
    assert_eq!(message.delivery.exchange.as_str(), "");
    assert_eq!(message.delivery.routing_key.as_str(), "from-stomp");
    let p = &message.delivery.properties;
    assert_eq!(text(p.content_type()), Some("application/json"));
    assert_eq!(text(p.content_encoding()), Some("identity"));
    assert_eq!(*p.delivery_mode(), Some(2));
    assert_eq!(*p.priority(), Some(3));
    assert_eq!(text(p.correlation_id()), Some("corr-7"));
    assert_eq!(text(p.reply_to()), Some("/queue/answers"));
    assert_eq!(text(p.expiration()), Some("60000"));
    assert_eq!(text(p.message_id()), Some("msg-1"));
    assert_eq!(*p.timestamp(), Some(1_700_000_000));
    assert_eq!(text(p.kind()), Some("order.created"));
    assert_eq!(text(p.user_id()), Some("guest"));
    assert_eq!(text(p.app_id()), Some("shop"));
    let headers = p.headers().as_ref().expect("custom headers");
    match headers.inner().get("x-tenant") {
        Some(AMQPValue::LongString(value)) => assert_eq!(value.to_string(), "acme: east"),
        other => panic!("x-tenant: {other:?}"),
    }
    assert!(
        headers.inner().get("receipt").is_none() && headers.inner().get("destination").is_none(),
        "frame-control headers are not message headers: {headers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn amqp_publish_reaches_a_stomp_subscriber_with_its_properties_and_headers() {
    let broker = TestBroker::start().await;
    let mut stomp = StompClient::connect(broker.stomp_addr(), "1.1").await;
    stomp.subscribe("/queue/to-stomp", "s", "auto", &[]).await;
    stomp.subscribe("/topic/events.*", "t", "auto", &[]).await;
    let (_connection, channel) = amqp_channel(&broker).await;
    let mut headers = FieldTable::default();
    headers.insert(
        ShortString::from("x-region"),
        AMQPValue::LongString(LongString::from("eu:west")),
    );
    headers.insert(ShortString::from("x-count"), AMQPValue::LongInt(-42));
    headers.insert(ShortString::from("x-flag"), AMQPValue::Boolean(true));
    let properties = BasicProperties::default()
        .with_content_type("text/plain".into())
        .with_delivery_mode(2)
        .with_priority(9)
        .with_correlation_id("c-1".into())
        .with_reply_to("amq.gen-reply".into())
        .with_message_id("id-1".into())
        .with_timestamp(1_600_000_000)
        .with_type("greeting".into())
        .with_app_id("amqp-app".into())
        .with_headers(headers);
    channel
        .basic_publish(
            "".into(),
            "to-stomp".into(),
            BasicPublishOptions::default(),
            b"hello from amqp",
            properties.clone(),
        )
        .await
        .expect("published")
        .await
        .expect("confirmed");
    let message = stomp.expect_message().await;
    assert_eq!(message.text(), "hello from amqp");
    assert_eq!(message.header("destination"), Some("/queue/to-stomp"));
    assert_eq!(message.header("content-type"), Some("text/plain"));
    assert_eq!(message.header("persistent"), Some("true"));
    assert_eq!(message.header("priority"), Some("9"));
    assert_eq!(message.header("correlation-id"), Some("c-1"));
    // A bare AMQP reply queue becomes a destination a STOMP client can SEND to.
    assert_eq!(
        message.header("reply-to"),
        Some("/reply-queue/amq.gen-reply")
    );
    assert_eq!(message.header("amqp-message-id"), Some("id-1"));
    assert_eq!(message.header("timestamp"), Some("1600000000"));
    assert_eq!(message.header("type"), Some("greeting"));
    assert_eq!(message.header("app-id"), Some("amqp-app"));
    assert_eq!(message.header("x-region"), Some("eu:west"));
    assert_eq!(message.header("x-count"), Some("-42"));
    assert_eq!(message.header("x-flag"), Some("true"));

    channel
        .basic_publish(
            "amq.topic".into(),
            "events.login".into(),
            BasicPublishOptions::default(),
            b"topic",
            BasicProperties::default(),
        )
        .await
        .expect("published");
    let message = stomp.expect_message().await;
    assert_eq!(message.text(), "topic");
    assert_eq!(message.header("destination"), Some("/topic/events.login"));
    assert_eq!(message.header("subscription"), Some("t"));
    assert!(stomp.no_frame_within(Duration::from_millis(200)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stomp_client_answers_an_amqp_request_through_its_reply_queue() {
    let broker = TestBroker::start().await;
    let mut responder = StompClient::connect(broker.stomp_addr(), "1.2").await;
    responder
        .subscribe("/queue/service", "s", "auto", &[])
        .await;
    let (_connection, channel) = amqp_channel(&broker).await;
    let reply_queue = channel
        .queue_declare(
            "".into(),
            QueueDeclareOptions {
                exclusive: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .expect("reply queue");
    channel
        .basic_publish(
            "".into(),
            "service".into(),
            BasicPublishOptions::default(),
            b"question",
            BasicProperties::default()
                .with_reply_to(reply_queue.name().clone())
                .with_correlation_id("q1".into()),
        )
        .await
        .expect("published");
    let request = responder.expect_message().await;
    let reply_to = request.header("reply-to").expect("reply-to").to_string();
    responder
        .send(&reply_to, "answer", &[("correlation-id", "q1")])
        .await;
    let reply = channel
        .basic_get(reply_queue.name().clone(), BasicGetOptions { no_ack: true })
        .await
        .expect("basic.get")
        .expect("the reply is there");
    assert_eq!(reply.delivery.data, b"answer");
    assert_eq!(text(reply.delivery.properties.correlation_id()), Some("q1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_queue_cancels_its_stomp_subscription_with_an_error_frame() {
    let broker = TestBroker::start().await;
    let mut stomp = StompClient::connect(broker.stomp_addr(), "1.2").await;
    stomp.subscribe("/queue/doomed", "watch", "auto", &[]).await;
    let (_connection, channel) = amqp_channel(&broker).await;
    channel
        .queue_delete(
            "doomed".into(),
            lapin::options::QueueDeleteOptions::default(),
        )
        .await
        .expect("deleted");
    let error = stomp.expect_frame().await;
    assert_eq!(error.command, "ERROR");
    assert_eq!(
        error.header("message"),
        Some("Server cancelled subscription")
    );
    assert_eq!(error.header("subscription"), Some("watch"));
    // As in RabbitMQ, the connection stays usable, and the id can be subscribed again.
    stomp.send("/queue/doomed", "reborn", &[]).await;
    stomp.subscribe("/queue/doomed", "watch", "auto", &[]).await;
    assert_eq!(stomp.expect_message().await.text(), "reborn");
}
