//! Firehose tracing: with trace_on, a queue bound to `amq.rabbitmq.trace` receives a
//! `publish.<exchange>` copy of every published message and a `deliver.<queue>` copy of every
//! delivery, with RabbitMQ's trace headers; with trace_off it receives nothing.

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use warren_interop_tests::TestBroker;
use warren_management::ctl;

async fn get(channel: &Channel, queue: &str) -> Option<lapin::message::BasicGetMessage> {
    let message = channel
        .basic_get(queue.into(), BasicGetOptions::default())
        .await
        .expect("basic.get")?;
    message
        .delivery
        .acker
        .ack(BasicAckOptions::default())
        .await
        .expect("ack");
    Some(message)
}

fn header<'a>(message: &'a lapin::message::BasicGetMessage, name: &str) -> &'a AMQPValue {
    message
        .delivery
        .properties
        .headers()
        .as_ref()
        .expect("trace headers")
        .inner()
        .get(&ShortString::from(name))
        .unwrap_or_else(|| panic!("header {name}"))
}

async fn warrenctl(broker: &TestBroker, verb: &str) {
    let port = broker
        .management_addr()
        .rsplit_once(':')
        .unwrap()
        .1
        .to_string();
    let args: Vec<String> = ["--host", "127.0.0.1", "--port", &port, verb]
        .iter()
        .map(|s| s.to_string())
        .collect();
    ctl::run(&args, None).await.expect(verb);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_on_copies_publishes_and_deliveries_to_the_trace_exchange() {
    let broker = TestBroker::start().await;
    let connection = Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .expect("connect");
    let channel = connection.create_channel().await.expect("channel");
    for queue in ["orders", "firehose"] {
        channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("declare");
    }
    channel
        .queue_bind(
            "firehose".into(),
            "amq.rabbitmq.trace".into(),
            "#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind to the trace exchange");

    warrenctl(&broker, "trace_on").await;
    channel
        .basic_publish(
            "".into(),
            "orders".into(),
            BasicPublishOptions::default(),
            b"order 42",
            BasicProperties::default().with_content_type("text/plain".into()),
        )
        .await
        .expect("publish");
    let delivered = get(&channel, "orders").await.expect("the order");
    assert_eq!(delivered.delivery.data, b"order 42");

    let published = get(&channel, "firehose").await.expect("publish copy");
    assert_eq!(published.delivery.routing_key.as_str(), "publish.");
    assert_eq!(published.delivery.exchange.as_str(), "amq.rabbitmq.trace");
    assert_eq!(published.delivery.data, b"order 42");
    assert_eq!(
        header(&published, "exchange_name"),
        &AMQPValue::LongString("".into())
    );
    assert_eq!(
        header(&published, "routing_keys"),
        &AMQPValue::FieldArray(vec![AMQPValue::LongString("orders".into())].into())
    );
    assert_eq!(
        header(&published, "routed_queues"),
        &AMQPValue::FieldArray(vec![AMQPValue::LongString("orders".into())].into())
    );
    let AMQPValue::FieldTable(properties) = header(&published, "properties") else {
        panic!("properties is a table");
    };
    assert_eq!(
        properties.inner().get(&ShortString::from("content_type")),
        Some(&AMQPValue::LongString("text/plain".into()))
    );

    let deliver = get(&channel, "firehose").await.expect("deliver copy");
    assert_eq!(deliver.delivery.routing_key.as_str(), "deliver.orders");
    assert_eq!(deliver.delivery.data, b"order 42");
    assert_eq!(header(&deliver, "redelivered"), &AMQPValue::LongInt(0));
    // Getting the trace copies is not traced itself.
    assert!(get(&channel, "firehose").await.is_none());

    warrenctl(&broker, "trace_off").await;
    channel
        .basic_publish(
            "".into(),
            "orders".into(),
            BasicPublishOptions::default(),
            b"untraced",
            BasicProperties::default(),
        )
        .await
        .expect("publish");
    assert!(get(&channel, "orders").await.is_some());
    assert!(
        get(&channel, "firehose").await.is_none(),
        "nothing traced when off"
    );
    broker.shutdown().await;
}
