//! AMQP 1.0 <-> AMQP 0-9-1 through the same broker: a message published over one protocol
//! and consumed over the other keeps its body and properties (docs/protocol-mapping.md).

mod amqp10_common;

use amqp10_common::*;
use fe2o3_amqp::types::messaging::{
    ApplicationProperties, Body, Data, Header, Message, MessageId, Outcome, Properties,
};
use fe2o3_amqp::types::primitives::{Binary, SimpleValue, Symbol, Timestamp, Value};
use fe2o3_amqp::{Receiver, Sender};
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{BasicProperties, ConnectionProperties};
use warren_interop_tests::TestBroker;

#[tokio::test]
async fn published_over_amqp_1_0_consumed_over_0_9_1() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "to-091");
    let (mut connection, mut session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut session, "s", "/exchanges/amq.direct/k")
        .await
        .unwrap();
    crate::amqp10_common::bind(&broker, "amq.direct", "to-091", "k");
    let message = Message::builder()
        .header(Header {
            durable: true,
            priority: 7.into(),
            ttl: Some(60_000),
            first_acquirer: false,
            delivery_count: 0,
        })
        .properties(
            Properties::builder()
                .message_id(String::from("msg-1"))
                .user_id(Binary::from(b"guest".to_vec()))
                .correlation_id(String::from("corr-1"))
                .reply_to("/queues/replies")
                .content_type(Symbol::from("application/json"))
                .content_encoding(Symbol::from("gzip"))
                .creation_time(Timestamp::from_milliseconds(1_700_000_000_000))
                .subject("greeting")
                .build(),
        )
        .application_properties(
            ApplicationProperties::builder()
                .insert("color", "blue")
                .insert("count", 42i64)
                .insert("flag", true)
                .build(),
        )
        .data(Binary::from(b"{\"hello\":1}".to_vec()))
        .build();
    assert!(matches!(
        sender.send(message).await.unwrap(),
        Outcome::Accepted(_)
    ));
    connection.close().await.unwrap();

    let amqp091 = lapin::Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = amqp091.create_channel().await.unwrap();
    let got = channel
        .basic_get("to-091".into(), BasicGetOptions::default())
        .await
        .unwrap()
        .expect("a message");
    assert_eq!(got.delivery.data, b"{\"hello\":1}");
    assert_eq!(got.delivery.exchange.as_str(), "amq.direct");
    assert_eq!(got.delivery.routing_key.as_str(), "k");
    let properties = &got.delivery.properties;
    assert_eq!(properties.delivery_mode(), &Some(2));
    assert_eq!(properties.priority(), &Some(7));
    assert_eq!(
        properties.expiration().as_ref().map(|s| s.as_str()),
        Some("60000")
    );
    assert_eq!(
        properties.message_id().as_ref().map(|s| s.as_str()),
        Some("msg-1")
    );
    assert_eq!(
        properties.user_id().as_ref().map(|s| s.as_str()),
        Some("guest")
    );
    assert_eq!(
        properties.correlation_id().as_ref().map(|s| s.as_str()),
        Some("corr-1")
    );
    // RabbitMQ 4.x (mc_amqpl): the v2 queue address becomes the queue name.
    assert_eq!(
        properties.reply_to().as_ref().map(|s| s.as_str()),
        Some("replies")
    );
    assert_eq!(
        properties.content_type().as_ref().map(|s| s.as_str()),
        Some("application/json")
    );
    assert_eq!(
        properties.content_encoding().as_ref().map(|s| s.as_str()),
        Some("gzip")
    );
    assert_eq!(properties.timestamp(), &Some(1_700_000_000));
    let headers = properties.headers().as_ref().expect("headers");
    let header = |name: &str| headers.inner().get(&ShortString::from(name)).cloned();
    assert_eq!(header("color"), Some(AMQPValue::LongString("blue".into())));
    assert_eq!(header("count"), Some(AMQPValue::LongLongInt(42)));
    assert_eq!(header("flag"), Some(AMQPValue::Boolean(true)));
    assert_eq!(
        header("x-amqp-1.0-subject"),
        Some(AMQPValue::LongString("greeting".into()))
    );
    channel
        .basic_ack(got.delivery.delivery_tag, BasicAckOptions::default())
        .await
        .unwrap();
    amqp091.close(200, "bye".into()).await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn published_over_0_9_1_consumed_over_amqp_1_0() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "to-10");
    let amqp091 = lapin::Connection::connect(&broker.url(), ConnectionProperties::default())
        .await
        .unwrap();
    let channel = amqp091.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let mut headers = FieldTable::default();
    headers.insert("color".into(), AMQPValue::LongString("green".into()));
    headers.insert("count".into(), AMQPValue::LongInt(7));
    let properties = BasicProperties::default()
        .with_content_type("text/plain".into())
        .with_content_encoding("identity".into())
        .with_delivery_mode(2)
        .with_priority(3)
        .with_correlation_id("corr-2".into())
        .with_reply_to("replies".into())
        .with_expiration("30000".into())
        .with_message_id("msg-2".into())
        .with_timestamp(1_650_000_000)
        .with_user_id("guest".into())
        .with_type("greeting".into())
        .with_app_id("app".into())
        .with_headers(headers);
    channel
        .basic_publish(
            "".into(),
            "to-10".into(),
            BasicPublishOptions::default(),
            b"plain text body",
            properties,
        )
        .await
        .unwrap()
        .await
        .unwrap();
    amqp091.close(200, "bye".into()).await.unwrap();

    let (mut connection, mut session) = connect(&broker).await;
    let mut receiver = Receiver::attach(&mut session, "r", "/queues/to-10")
        .await
        .unwrap();
    let delivery = receiver.recv::<Body<Value>>().await.unwrap();
    let message = delivery.message();
    match &message.body {
        Body::Data(data) => assert_eq!(data[0].0.as_ref(), b"plain text body"),
        other => panic!("expected a data body, got {other:?}"),
    }
    let header = message.header.as_ref().unwrap();
    assert!(header.durable);
    assert_eq!(u8::from(header.priority), 3);
    assert_eq!(header.ttl, Some(30_000));
    let properties = message.properties.as_ref().unwrap();
    assert_eq!(
        properties.message_id,
        Some(MessageId::String("msg-2".into()))
    );
    assert_eq!(
        properties.correlation_id,
        Some(MessageId::String("corr-2".into()))
    );
    // RabbitMQ 4.x (mc_amqpl): the queue name becomes its v2 address.
    assert_eq!(properties.reply_to.as_deref(), Some("/queues/replies"));
    assert_eq!(properties.content_type, Some(Symbol::from("text/plain")));
    assert_eq!(properties.content_encoding, Some(Symbol::from("identity")));
    assert_eq!(
        properties.user_id.as_ref().map(|id| id.to_vec()),
        Some(b"guest".to_vec())
    );
    assert_eq!(
        properties.creation_time.as_ref().map(|t| t.milliseconds()),
        Some(1_650_000_000_000)
    );
    let app = &message.application_properties.as_ref().unwrap().0;
    assert_eq!(app.get("color"), Some(&SimpleValue::String("green".into())));
    assert_eq!(app.get("count"), Some(&SimpleValue::Int(7)));
    let annotations = &message.message_annotations.as_ref().unwrap().0;
    let annotation = |key: &str| {
        annotations
            .iter()
            .find(|(k, _)| matches!(k, fe2o3_amqp::types::messaging::annotations::OwnedKey::Symbol(s) if s.as_str() == key))
            .map(|(_, v)| v.clone())
    };
    assert_eq!(annotation("x-exchange"), Some(Value::String(String::new())));
    assert_eq!(
        annotation("x-routing-key"),
        Some(Value::String("to-10".into()))
    );
    assert_eq!(
        annotation("x-basic-type"),
        Some(Value::String("greeting".into()))
    );
    assert_eq!(
        annotation("x-basic-app-id"),
        Some(Value::String("app".into()))
    );
    receiver.accept(&delivery).await.unwrap();
    connection.close().await.unwrap();
    broker.shutdown().await;
}

#[tokio::test]
async fn amqp_value_bodies_round_trip_between_amqp_1_0_clients_through_the_core() {
    let broker = TestBroker::start().await;
    declare_queue(&broker, "values");
    let (mut connection, mut session) = connect(&broker).await;
    let mut sender = Sender::attach(&mut session, "s", "/queues/values")
        .await
        .unwrap();
    sender
        .send(Message::builder().value(12345i64).build())
        .await
        .unwrap();
    sender
        .send(
            Message::builder()
                .data(Data(Binary::from(vec![1, 2, 3])))
                .build(),
        )
        .await
        .unwrap();
    let mut receiver = Receiver::attach(&mut session, "r", "/queues/values")
        .await
        .unwrap();
    let first = receiver.recv::<Body<Value>>().await.unwrap();
    match first.body() {
        Body::Value(value) => assert_eq!(value.0, Value::Long(12345)),
        other => panic!("expected an amqp-value body, got {other:?}"),
    }
    receiver.accept(&first).await.unwrap();
    let second = receiver.recv::<Body<Value>>().await.unwrap();
    match second.body() {
        Body::Data(data) => assert_eq!(data[0].0.as_ref(), &[1, 2, 3]),
        other => panic!("expected a data body, got {other:?}"),
    }
    receiver.accept(&second).await.unwrap();
    connection.close().await.unwrap();
    broker.shutdown().await;
}
