//! Streams over AMQP 1.0 with fe2o3-amqp, as RabbitMQ 4.x serves them: receivers attach to
//! `/queues/<stream>` with the source filters `rabbitmq:stream-offset-spec`,
//! `rabbitmq:stream-filter` and `rabbitmq:stream-match-unfiltered` (echoed in the attach
//! reply, which fe2o3 checks), every delivery carries its offset in the `x-stream-offset`
//! message annotation, link credit alone drives the flow, and a sender's
//! `x-stream-filter-value` message annotation is the message's filter value.
//!
//! The fe2o3 tests run on a current-thread runtime: fe2o3-amqp 0.14's `Sender::send` hands
//! the transfer to its session task before it records the delivery as unsettled, so on a
//! multi-threaded runtime a disposition that comes back fast enough (a stream confirms as
//! soon as its chunk is written) can be processed first and is dropped, and the send never
//! completes (seen in about 1 run in 10 under load). On one thread nothing runs between the
//! two steps. 0.18 fixes the order but cannot stay attached after a refused link (its
//! session stops), so the client stays at 0.14.

mod amqp10_common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use amqp10_common::{connect, declare_queue_with};
use fe2o3_amqp::link::receiver::CreditMode;
use fe2o3_amqp::session::SessionHandle;
use fe2o3_amqp::types::messaging::annotations::OwnedKey;
use fe2o3_amqp::types::messaging::{Body, Message, MessageAnnotations, Outcome, Source};
use fe2o3_amqp::types::primitives::{Symbol, Timestamp, Value};
use fe2o3_amqp::{Receiver, Sender};
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;
use warren_core::value::{Table, Value as CoreValue};
use warren_interop_tests::TestBroker;

const LIMIT: Duration = Duration::from_secs(10);

fn declare_stream(broker: &TestBroker, name: &str) {
    let mut arguments = Table::new();
    arguments.insert("x-queue-type", CoreValue::string("stream"));
    declare_queue_with(broker, name, arguments);
}

/// A source filter entry as RabbitMQ's clients send it: keyed and described by its name.
fn filter(name: &str, value: Value) -> (Symbol, Described<Value>) {
    (
        Symbol::from(name),
        Described {
            descriptor: Descriptor::Name(Symbol::from(name)),
            value,
        },
    )
}

fn offset_spec(value: Value) -> (Symbol, Described<Value>) {
    filter("rabbitmq:stream-offset-spec", value)
}

/// Attaches a receiver to `stream` with `filters` and `credit`.
async fn receiver(
    session: &mut SessionHandle<()>,
    name: &str,
    stream: &str,
    filters: Vec<(Symbol, Described<Value>)>,
    credit: CreditMode,
) -> Result<Receiver, fe2o3_amqp::link::ReceiverAttachError> {
    let mut source = Source::builder().address(format!("/queues/{stream}"));
    for (key, value) in filters {
        source = source.add_to_filter(key, value);
    }
    Receiver::builder()
        .name(name)
        .source(source.build())
        .credit_mode(credit)
        .attach(session)
        .await
}

/// Sends `body` as an amqp-value string, with the filter value annotation if given, and
/// waits for `accepted` (the stream has written it).
async fn send(sender: &mut Sender, body: &str, filter_value: Option<&str>) {
    let mut builder = Message::builder();
    if let Some(value) = filter_value {
        builder = builder.message_annotations(
            MessageAnnotations::builder()
                .insert("x-stream-filter-value", value)
                .build(),
        );
    }
    let outcome = sender
        .send(builder.value(body.to_string()).build())
        .await
        .expect("sent");
    assert!(
        matches!(outcome, Outcome::Accepted(_)),
        "{body}: {outcome:?}"
    );
}

/// The next delivery's body and `x-stream-offset` annotation, settled with accepted.
async fn next(receiver: &mut Receiver) -> (String, i64) {
    let delivery = tokio::time::timeout(LIMIT, receiver.recv::<Body<Value>>())
        .await
        .expect("a delivery in time")
        .expect("a delivery");
    let message = delivery.message();
    let body = match &message.body {
        Body::Value(value) => match &value.0 {
            Value::String(text) => text.clone(),
            other => panic!("a string body, got {other:?}"),
        },
        Body::Data(data) => String::from_utf8_lossy(&data[0].0).into_owned(),
        other => panic!("an amqp-value or data body, got {other:?}"),
    };
    let offset = message
        .message_annotations
        .as_ref()
        .and_then(|annotations| {
            annotations
                .0
                .iter()
                .find(|(k, _)| matches!(k, OwnedKey::Symbol(s) if s.as_str() == "x-stream-offset"))
                .map(|(_, v)| v.clone())
        });
    let offset = match offset {
        Some(Value::Long(offset)) => offset,
        other => panic!("x-stream-offset is a long annotation, got {other:?}"),
    };
    receiver.accept(&delivery).await.expect("accepted");
    (body, offset)
}

async fn take(receiver: &mut Receiver, n: usize) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(next(receiver).await);
    }
    out
}

/// Nothing more arrives within a short wait.
async fn nothing_more(receiver: &mut Receiver) {
    let more =
        tokio::time::timeout(Duration::from_millis(400), receiver.recv::<Body<Value>>()).await;
    assert!(more.is_err(), "no further delivery, got {more:?}");
}

fn owned(items: &[(&str, i64)]) -> Vec<(String, i64)> {
    items.iter().map(|(b, o)| (b.to_string(), *o)).collect()
}

#[tokio::test]
async fn receivers_start_where_their_offset_spec_says() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let broker = TestBroker::start().await;
        declare_stream(&broker, "events");
        let (mut connection, mut session) = connect(&broker).await;
        let mut sender = Sender::attach(&mut session, "sender", "/queues/events")
            .await
            .expect("sender attaches to the stream");
        for body in ["m0", "m1", "m2", "m3", "m4"] {
            send(&mut sender, body, None).await;
        }
        let auto = || CreditMode::Auto(50);

        let mut first = receiver(
            &mut session,
            "first",
            "events",
            vec![offset_spec(Value::Symbol(Symbol::from("first")))],
            auto(),
        )
        .await
        .expect("attach with first");
        assert_eq!(
            take(&mut first, 5).await,
            owned(&[("m0", 0), ("m1", 1), ("m2", 2), ("m3", 3), ("m4", 4)])
        );
        nothing_more(&mut first).await;

        let mut numeric = receiver(
            &mut session,
            "numeric",
            "events",
            vec![offset_spec(Value::Ulong(3))],
            auto(),
        )
        .await
        .expect("attach with an offset");
        assert_eq!(take(&mut numeric, 2).await, owned(&[("m3", 3), ("m4", 4)]));

        // Each message was its own chunk (each send waited for its outcome).
        let mut last = receiver(
            &mut session,
            "last",
            "events",
            vec![offset_spec(Value::String("last".into()))],
            auto(),
        )
        .await
        .expect("attach with last");
        assert_eq!(take(&mut last, 1).await, owned(&[("m4", 4)]));

        let hour_ago = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
            - 3_600_000;
        let mut timestamp = receiver(
            &mut session,
            "timestamp",
            "events",
            vec![offset_spec(Value::Timestamp(Timestamp::from_milliseconds(
                hour_ago,
            )))],
            auto(),
        )
        .await
        .expect("attach with a timestamp");
        assert_eq!(take(&mut timestamp, 1).await, owned(&[("m0", 0)]));

        let mut interval = receiver(
            &mut session,
            "interval",
            "events",
            vec![offset_spec(Value::String("1h".into()))],
            auto(),
        )
        .await
        .expect("attach with an interval");
        assert_eq!(take(&mut interval, 1).await, owned(&[("m0", 0)]));

        // No offset spec: `next`, only what is published from now on.
        let mut next_only = receiver(&mut session, "next", "events", vec![], auto())
            .await
            .expect("attach without filters");
        nothing_more(&mut next_only).await;
        send(&mut sender, "m5", None).await;
        assert_eq!(take(&mut next_only, 1).await, owned(&[("m5", 5)]));
        // The receivers that caught up get it too: reads are non-destructive.
        assert_eq!(take(&mut first, 1).await, owned(&[("m5", 5)]));

        let refused = receiver(
            &mut session,
            "bad",
            "events",
            vec![offset_spec(Value::String("soon".into()))],
            auto(),
        )
        .await;
        assert!(refused.is_err(), "an invalid offset spec is refused");

        for r in [first, numeric, last, timestamp, interval, next_only] {
            r.close().await.expect("receiver closes");
        }
        sender.close().await.unwrap();
        session.end().await.unwrap();
        connection.close().await.unwrap();
        broker.shutdown().await;
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn filters_select_by_the_senders_filter_value_annotation() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let broker = TestBroker::start().await;
        declare_stream(&broker, "orders");
        let (mut connection, mut session) = connect(&broker).await;
        let mut sender = Sender::attach(&mut session, "sender", "/queues/orders")
            .await
            .unwrap();
        send(&mut sender, "eu-1", Some("eu")).await;
        send(&mut sender, "us-1", Some("us")).await;
        send(&mut sender, "plain", None).await;
        send(&mut sender, "eu-2", Some("eu")).await;
        let from_first = || offset_spec(Value::Symbol(Symbol::from("first")));

        let mut eu = receiver(
            &mut session,
            "eu",
            "orders",
            vec![
                from_first(),
                filter("rabbitmq:stream-filter", Value::String("eu".into())),
            ],
            CreditMode::Auto(50),
        )
        .await
        .expect("attach with a filter");
        assert_eq!(take(&mut eu, 2).await, owned(&[("eu-1", 0), ("eu-2", 3)]));
        nothing_more(&mut eu).await;

        let mut us_and_plain = receiver(
            &mut session,
            "us",
            "orders",
            vec![
                from_first(),
                filter(
                    "rabbitmq:stream-filter",
                    Value::List(vec![Value::String("us".into())]),
                ),
                filter("rabbitmq:stream-match-unfiltered", Value::Bool(true)),
            ],
            CreditMode::Auto(50),
        )
        .await
        .expect("attach with a filter list and match-unfiltered");
        assert_eq!(
            take(&mut us_and_plain, 2).await,
            owned(&[("us-1", 1), ("plain", 2)])
        );
        nothing_more(&mut us_and_plain).await;

        eu.close().await.unwrap();
        us_and_plain.close().await.unwrap();
        sender.close().await.unwrap();
        session.end().await.unwrap();
        connection.close().await.unwrap();
        broker.shutdown().await;
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn link_credit_alone_drives_a_stream_receiver() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let broker = TestBroker::start().await;
        declare_stream(&broker, "ticks");
        let (mut connection, mut session) = connect(&broker).await;
        let mut sender = Sender::attach(&mut session, "sender", "/queues/ticks")
            .await
            .unwrap();
        for body in ["t0", "t1", "t2", "t3", "t4"] {
            send(&mut sender, body, None).await;
        }
        let mut manual = receiver(
            &mut session,
            "manual",
            "ticks",
            vec![offset_spec(Value::Symbol(Symbol::from("first")))],
            CreditMode::Manual,
        )
        .await
        .expect("attach");
        // No credit, no delivery.
        nothing_more(&mut manual).await;
        manual.set_credit(2).await.unwrap();
        assert_eq!(take(&mut manual, 2).await, owned(&[("t0", 0), ("t1", 1)]));
        nothing_more(&mut manual).await;
        manual.set_credit(3).await.unwrap();
        assert_eq!(
            take(&mut manual, 3).await,
            owned(&[("t2", 2), ("t3", 3), ("t4", 4)])
        );
        manual.close().await.unwrap();

        // A pre-settled receiver is taken too (credit bounds it): deliveries come settled.
        let mut settled = Receiver::builder()
            .name("settled")
            .source(
                Source::builder()
                    .address("/queues/ticks")
                    .add_to_filter(
                        offset_spec(Value::Ulong(4)).0,
                        offset_spec(Value::Ulong(4)).1,
                    )
                    .build(),
            )
            .sender_settle_mode(fe2o3_amqp::types::definitions::SenderSettleMode::Settled)
            .credit_mode(CreditMode::Auto(10))
            .attach(&mut session)
            .await
            .expect("a pre-settled receiver attaches");
        let delivery = tokio::time::timeout(LIMIT, settled.recv::<Body<Value>>())
            .await
            .expect("in time")
            .expect("delivery");
        assert!(
            matches!(&delivery.message().body, Body::Value(v) if v.0 == Value::String("t4".into()))
        );
        settled.close().await.unwrap();

        sender.close().await.unwrap();
        session.end().await.unwrap();
        connection.close().await.unwrap();
        broker.shutdown().await;
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn messages_cross_between_the_stream_protocol_and_amqp_1_0_with_their_properties() {
    use fe2o3_amqp::types::messaging::{ApplicationProperties, MessageId, Properties};
    use fe2o3_amqp::types::primitives::{Binary, SimpleValue};
    use futures_lite::StreamExt;
    use rabbitmq_stream_client::types::{
        Message as StreamMessage, OffsetSpecification, SimpleValue as StreamValue,
    };
    use rabbitmq_stream_client::{Environment, FilterConfiguration};

    tokio::time::timeout(Duration::from_secs(60), async {
        let broker = TestBroker::start().await;
        let addr = broker.stream_addr();
        let environment = Environment::builder()
            .host(&addr.ip().to_string())
            .port(addr.port())
            .build()
            .await
            .expect("stream client connects");
        environment
            .stream_creator()
            .create("mixed")
            .await
            .expect("created");

        // Published on 5552...
        let producer = environment
            .producer()
            .build("mixed")
            .await
            .expect("producer");
        let message = StreamMessage::builder()
            .body(b"from-stream".to_vec())
            .properties()
            .message_id("s-1".to_string())
            .content_type("text/plain")
            .message_builder()
            .application_properties()
            .insert("region", "eu")
            .message_builder()
            .build();
        assert!(producer
            .send_with_confirm(message)
            .await
            .expect("sent")
            .confirmed());
        producer.close().await.expect("closed");

        // ...read over AMQP 1.0, as the stream client wrote it.
        let (mut connection, mut session) = connect(&broker).await;
        let mut receiver = receiver(
            &mut session,
            "reader",
            "mixed",
            vec![offset_spec(Value::Symbol(Symbol::from("first")))],
            CreditMode::Auto(10),
        )
        .await
        .expect("attach");
        let delivery = tokio::time::timeout(LIMIT, receiver.recv::<Body<Value>>())
            .await
            .expect("in time")
            .expect("delivery");
        let message = delivery.message();
        assert!(
            matches!(&message.body, Body::Data(data) if data[0].0.as_ref() == b"from-stream"),
            "{:?}",
            message.body
        );
        let properties = message.properties.as_ref().expect("properties");
        assert_eq!(properties.message_id, Some(MessageId::String("s-1".into())));
        assert_eq!(
            properties.content_type.as_ref().map(|s| s.as_str()),
            Some("text/plain")
        );
        let region = message
            .application_properties
            .as_ref()
            .and_then(|p| p.0.get("region").cloned());
        assert_eq!(region, Some(SimpleValue::String("eu".into())));
        receiver.accept(&delivery).await.unwrap();

        // Published over AMQP 1.0 with a filter value, read on 5552 by a filtering consumer.
        let mut sender = Sender::attach(&mut session, "sender", "/queues/mixed")
            .await
            .unwrap();
        let message = Message::builder()
            .properties(
                Properties::builder()
                    .message_id(String::from("a-1"))
                    .build(),
            )
            .application_properties(
                ApplicationProperties::builder()
                    .insert("region", "us")
                    .build(),
            )
            .message_annotations(
                MessageAnnotations::builder()
                    .insert("x-stream-filter-value", "us")
                    .build(),
            )
            .data(Binary::from(b"from-1.0".to_vec()))
            .build();
        assert!(matches!(
            sender.send(message).await.unwrap(),
            Outcome::Accepted(_)
        ));
        let mut filtered = environment
            .consumer()
            .offset(OffsetSpecification::First)
            .filter_input(Some(FilterConfiguration::new(vec!["us".into()], false)))
            .build("mixed")
            .await
            .expect("filtering stream consumer");
        let delivery = tokio::time::timeout(LIMIT, filtered.next())
            .await
            .expect("in time")
            .expect("open")
            .expect("delivery");
        assert_eq!(delivery.offset(), 1, "the unfiltered chunk is skipped");
        let message = delivery.message();
        assert_eq!(message.data(), Some(&b"from-1.0"[..]));
        let region = message
            .application_properties()
            .and_then(|p| p.get("region").cloned());
        assert!(
            matches!(&region, Some(StreamValue::String(text)) if text == "us"),
            "{region:?}"
        );
        filtered.handle().close().await.expect("closed");
        // The AMQP 1.0 receiver, still attached, gets it with its offset annotation.
        assert_eq!(next(&mut receiver).await, ("from-1.0".to_string(), 1));
        receiver.close().await.unwrap();
        sender.close().await.unwrap();
        session.end().await.unwrap();
        connection.close().await.unwrap();
    })
    .await
    .expect("bounded");
}

/// Hand-driven frames for drain: fe2o3 does not surface the broker's answering flow.
mod drain {
    use fe2o3_amqp::types::definitions::{Handle, ReceiverSettleMode, Role, SenderSettleMode};
    use fe2o3_amqp::types::performatives::{Attach, Begin, Flow, Performative};

    use super::amqp10_common::RawClient;
    use super::*;

    fn flow(received: u32, delivery_count: u32, credit: u32) -> Performative {
        Performative::Flow(Flow {
            next_incoming_id: Some(received),
            incoming_window: 1000,
            next_outgoing_id: 0,
            outgoing_window: 1000,
            handle: Some(Handle(0)),
            delivery_count: Some(delivery_count),
            link_credit: Some(credit),
            available: None,
            drain: true,
            echo: false,
            properties: None,
        })
    }

    /// Reads until the broker's flow for the link: the transfers before it, and its
    /// (delivery-count, link-credit, drain).
    async fn transfers_then_flow(raw: &mut RawClient) -> (u32, (u32, u32, bool)) {
        let mut transfers = 0;
        loop {
            let next = tokio::time::timeout(LIMIT, raw.next())
                .await
                .expect("a frame in time");
            match next {
                Some(Performative::Transfer(_)) => transfers += 1,
                Some(Performative::Flow(flow)) if flow.handle.is_some() => {
                    return (
                        transfers,
                        (
                            flow.delivery_count.unwrap_or(0),
                            flow.link_credit.unwrap_or(0),
                            flow.drain,
                        ),
                    )
                }
                Some(_) => {}
                None => panic!("the broker closed the socket"),
            }
        }
    }

    #[tokio::test]
    async fn a_drain_is_answered_after_the_stream_handed_over_what_it_had() {
        tokio::time::timeout(Duration::from_secs(60), async {
            let broker = TestBroker::start().await;
            declare_stream(&broker, "ticks");
            let (mut connection, mut session) = connect(&broker).await;
            let mut sender = Sender::attach(&mut session, "sender", "/queues/ticks")
                .await
                .unwrap();
            for body in ["t0", "t1", "t2", "t3", "t4"] {
                send(&mut sender, body, None).await;
            }
            let mut raw = RawClient::connect(&broker).await;
            raw.open(None).await;
            raw.send(
                0,
                Performative::Begin(Begin {
                    remote_channel: None,
                    next_outgoing_id: 0,
                    incoming_window: 1000,
                    outgoing_window: 1000,
                    handle_max: Handle(10),
                    offered_capabilities: None,
                    desired_capabilities: None,
                    properties: None,
                }),
            )
            .await;
            let (key, value) = offset_spec(Value::Symbol(Symbol::from("first")));
            let source = Source::builder()
                .address("/queues/ticks")
                .add_to_filter(key, value)
                .build();
            raw.send(
                0,
                Performative::Attach(Attach {
                    name: "drainer".into(),
                    handle: Handle(0),
                    role: Role::Receiver,
                    snd_settle_mode: SenderSettleMode::Settled,
                    rcv_settle_mode: ReceiverSettleMode::First,
                    source: Some(Box::new(source)),
                    target: None,
                    unsettled: None,
                    incomplete_unsettled: false,
                    initial_delivery_count: None,
                    max_message_size: None,
                    offered_capabilities: None,
                    desired_capabilities: None,
                    properties: None,
                }),
            )
            .await;
            // Three of five: the transfers, then the drain's answer with the credit spent.
            raw.send(0, flow(0, 0, 3)).await;
            assert_eq!(transfers_then_flow(&mut raw).await, (3, (3, 0, true)));
            // Five more credits for the two left: both come, the rest is spent by the drain.
            raw.send(0, flow(3, 3, 5)).await;
            assert_eq!(transfers_then_flow(&mut raw).await, (2, (8, 0, true)));
            // Caught up: nothing to send, the drain is answered at once.
            raw.send(0, flow(5, 8, 2)).await;
            assert_eq!(transfers_then_flow(&mut raw).await, (0, (10, 0, true)));
            sender.close().await.unwrap();
            session.end().await.unwrap();
            connection.close().await.unwrap();
            broker.shutdown().await;
        })
        .await
        .expect("bounded");
    }
}
