//! Differential tests against `amq-protocol` (a dev-dependency only): what we encode, it
//! decodes to the same values, and what it encodes, we decode to the same values.
//!
//! amq-protocol keeps field tables in a `BTreeMap`, so tables are compared sorted by key, and
//! generated tables have unique keys.

use amq_protocol::frame::{gen_frame, parse_frame, AMQPContentHeader, AMQPFrame, WriteContext};
use amq_protocol::protocol::{basic, connection, exchange, queue, AMQPClass};
use amq_protocol::types::{AMQPValue, FieldTable, LongString, ShortString};
use bytes::BytesMut;
use proptest::prelude::*;
use warren_core::message::Properties;
use warren_core::value::{Table, Value};

use super::method::tests::arb_method;
use super::primitives::tests::arb_table;
use super::properties::tests::arb_properties;
use super::*;

// ---- amq-protocol -> ours ------------------------------------------------------------------

fn value_from_oracle(value: &AMQPValue) -> Value {
    match value {
        AMQPValue::Boolean(v) => Value::Bool(*v),
        AMQPValue::ShortShortInt(v) => Value::I8(*v),
        AMQPValue::ShortShortUInt(v) => Value::U8(*v),
        AMQPValue::ShortInt(v) => Value::I16(*v),
        AMQPValue::ShortUInt(v) => Value::U16(*v),
        AMQPValue::LongInt(v) => Value::I32(*v),
        AMQPValue::LongUInt(v) => Value::U32(*v),
        AMQPValue::LongLongInt(v) => Value::I64(*v),
        AMQPValue::Float(v) => Value::F32(*v),
        AMQPValue::Double(v) => Value::F64(*v),
        AMQPValue::DecimalValue(d) => Value::Decimal {
            scale: d.scale,
            value: d.value,
        },
        AMQPValue::ShortString(s) => Value::LongString(s.as_str().as_bytes().to_vec()),
        AMQPValue::LongString(s) => Value::LongString(s.as_bytes().to_vec()),
        AMQPValue::FieldArray(a) => {
            Value::Array(a.as_slice().iter().map(value_from_oracle).collect())
        }
        AMQPValue::Timestamp(v) => Value::Timestamp(*v),
        AMQPValue::FieldTable(t) => Value::Table(table_from_oracle(t)),
        AMQPValue::ByteArray(b) => Value::ByteArray(b.as_slice().to_vec()),
        AMQPValue::Void => Value::Void,
    }
}

fn table_from_oracle(table: &FieldTable) -> Table {
    table
        .inner()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), value_from_oracle(v)))
        .collect()
}

fn properties_from_oracle(p: &basic::AMQPProperties) -> Properties {
    let s = |v: &Option<ShortString>| v.as_ref().map(|s| s.as_str().to_owned());
    Properties {
        content_type: s(p.content_type()),
        content_encoding: s(p.content_encoding()),
        headers: p.headers().as_ref().map(table_from_oracle),
        delivery_mode: *p.delivery_mode(),
        priority: *p.priority(),
        correlation_id: s(p.correlation_id()),
        reply_to: s(p.reply_to()),
        expiration: s(p.expiration()),
        message_id: s(p.message_id()),
        timestamp: *p.timestamp(),
        message_type: s(p.kind()),
        user_id: s(p.user_id()),
        app_id: s(p.app_id()),
        cluster_id: s(p.cluster_id()),
    }
}

/// The methods the oracle comparison covers, converted; `None` for the rest.
fn method_from_oracle(class: &AMQPClass) -> Option<Method> {
    let s = |v: &ShortString| v.as_str().to_owned();
    Some(match class {
        AMQPClass::Connection(connection::AMQPMethod::Start(m)) => Method::ConnectionStart {
            version_major: m.version_major,
            version_minor: m.version_minor,
            server_properties: table_from_oracle(&m.server_properties),
            mechanisms: m.mechanisms.as_bytes().to_vec(),
            locales: m.locales.as_bytes().to_vec(),
        },
        AMQPClass::Connection(connection::AMQPMethod::StartOk(m)) => Method::ConnectionStartOk {
            client_properties: table_from_oracle(&m.client_properties),
            mechanism: s(&m.mechanism),
            response: m.response.as_bytes().to_vec(),
            locale: s(&m.locale),
        },
        AMQPClass::Connection(connection::AMQPMethod::Tune(m)) => Method::ConnectionTune {
            channel_max: m.channel_max,
            frame_max: m.frame_max,
            heartbeat: m.heartbeat,
        },
        AMQPClass::Connection(connection::AMQPMethod::Close(m)) => Method::ConnectionClose {
            reply_code: m.reply_code,
            reply_text: s(&m.reply_text),
            class_id: m.class_id,
            method_id: m.method_id,
        },
        AMQPClass::Exchange(exchange::AMQPMethod::Declare(m)) => Method::ExchangeDeclare {
            exchange: s(&m.exchange),
            exchange_type: s(&m.kind),
            passive: m.passive,
            durable: m.durable,
            auto_delete: m.auto_delete,
            internal: m.internal,
            no_wait: m.nowait,
            arguments: table_from_oracle(&m.arguments),
        },
        AMQPClass::Queue(queue::AMQPMethod::Declare(m)) => Method::QueueDeclare {
            queue: s(&m.queue),
            passive: m.passive,
            durable: m.durable,
            exclusive: m.exclusive,
            auto_delete: m.auto_delete,
            no_wait: m.nowait,
            arguments: table_from_oracle(&m.arguments),
        },
        AMQPClass::Queue(queue::AMQPMethod::Bind(m)) => Method::QueueBind {
            queue: s(&m.queue),
            exchange: s(&m.exchange),
            routing_key: s(&m.routing_key),
            no_wait: m.nowait,
            arguments: table_from_oracle(&m.arguments),
        },
        AMQPClass::Basic(basic::AMQPMethod::Publish(m)) => Method::BasicPublish {
            exchange: s(&m.exchange),
            routing_key: s(&m.routing_key),
            mandatory: m.mandatory,
            immediate: m.immediate,
        },
        AMQPClass::Basic(basic::AMQPMethod::Deliver(m)) => Method::BasicDeliver {
            consumer_tag: s(&m.consumer_tag),
            delivery_tag: m.delivery_tag,
            redelivered: m.redelivered,
            exchange: s(&m.exchange),
            routing_key: s(&m.routing_key),
        },
        AMQPClass::Basic(basic::AMQPMethod::Consume(m)) => Method::BasicConsume {
            queue: s(&m.queue),
            consumer_tag: s(&m.consumer_tag),
            no_local: m.no_local,
            no_ack: m.no_ack,
            exclusive: m.exclusive,
            no_wait: m.nowait,
            arguments: table_from_oracle(&m.arguments),
        },
        AMQPClass::Basic(basic::AMQPMethod::GetOk(m)) => Method::BasicGetOk {
            delivery_tag: m.delivery_tag,
            redelivered: m.redelivered,
            exchange: s(&m.exchange),
            routing_key: s(&m.routing_key),
            message_count: m.message_count,
        },
        AMQPClass::Basic(basic::AMQPMethod::Nack(m)) => Method::BasicNack {
            delivery_tag: m.delivery_tag,
            multiple: m.multiple,
            requeue: m.requeue,
        },
        AMQPClass::Basic(basic::AMQPMethod::Ack(m)) => Method::BasicAck {
            delivery_tag: m.delivery_tag,
            multiple: m.multiple,
        },
        _ => return None,
    })
}

// ---- ours -> amq-protocol ------------------------------------------------------------------

fn value_to_oracle(value: &Value) -> AMQPValue {
    match value {
        Value::Bool(v) => AMQPValue::Boolean(*v),
        Value::I8(v) => AMQPValue::ShortShortInt(*v),
        Value::U8(v) => AMQPValue::ShortShortUInt(*v),
        Value::I16(v) => AMQPValue::ShortInt(*v),
        Value::U16(v) => AMQPValue::ShortUInt(*v),
        Value::I32(v) => AMQPValue::LongInt(*v),
        Value::U32(v) => AMQPValue::LongUInt(*v),
        Value::I64(v) => AMQPValue::LongLongInt(*v),
        Value::F32(v) => AMQPValue::Float(*v),
        Value::F64(v) => AMQPValue::Double(*v),
        Value::Decimal { scale, value } => {
            AMQPValue::DecimalValue(amq_protocol::types::DecimalValue {
                scale: *scale,
                value: *value,
            })
        }
        Value::LongString(bytes) => AMQPValue::LongString(LongString::from(bytes.clone())),
        Value::Array(values) => AMQPValue::FieldArray(
            values
                .iter()
                .map(value_to_oracle)
                .collect::<Vec<_>>()
                .into(),
        ),
        Value::Timestamp(v) => AMQPValue::Timestamp(*v),
        Value::Table(t) => AMQPValue::FieldTable(table_to_oracle(t)),
        Value::Void => AMQPValue::Void,
        Value::ByteArray(bytes) => AMQPValue::ByteArray(bytes.clone().into()),
    }
}

fn table_to_oracle(table: &Table) -> FieldTable {
    let mut out = FieldTable::default();
    for (k, v) in table.iter() {
        out.insert(k.into(), value_to_oracle(v));
    }
    out
}

fn properties_to_oracle(p: &Properties) -> basic::AMQPProperties {
    let mut out = basic::AMQPProperties::default();
    let s = |v: &String| ShortString::from(v.clone());
    if let Some(v) = &p.content_type {
        out = out.with_content_type(s(v));
    }
    if let Some(v) = &p.content_encoding {
        out = out.with_content_encoding(s(v));
    }
    if let Some(v) = &p.headers {
        out = out.with_headers(table_to_oracle(v));
    }
    if let Some(v) = p.delivery_mode {
        out = out.with_delivery_mode(v);
    }
    if let Some(v) = p.priority {
        out = out.with_priority(v);
    }
    if let Some(v) = &p.correlation_id {
        out = out.with_correlation_id(s(v));
    }
    if let Some(v) = &p.reply_to {
        out = out.with_reply_to(s(v));
    }
    if let Some(v) = &p.expiration {
        out = out.with_expiration(s(v));
    }
    if let Some(v) = &p.message_id {
        out = out.with_message_id(s(v));
    }
    if let Some(v) = p.timestamp {
        out = out.with_timestamp(v);
    }
    if let Some(v) = &p.message_type {
        out = out.with_type(s(v));
    }
    if let Some(v) = &p.user_id {
        out = out.with_user_id(s(v));
    }
    if let Some(v) = &p.app_id {
        out = out.with_app_id(s(v));
    }
    if let Some(v) = &p.cluster_id {
        out = out.with_cluster_id(s(v));
    }
    out
}

// ---- helpers -------------------------------------------------------------------------------

/// Sorts tables by key (recursively) and drops duplicate keys, as amq-protocol's `BTreeMap` does.
fn normalise_table(table: &Table) -> Table {
    // Later duplicates win, as with repeated BTreeMap inserts.
    let entries: std::collections::BTreeMap<String, Value> = table
        .0
        .iter()
        .map(|(k, v)| (k.clone(), normalise_value(v)))
        .collect();
    Table(entries.into_iter().collect())
}

fn normalise_value(value: &Value) -> Value {
    match value {
        Value::Table(t) => Value::Table(normalise_table(t)),
        Value::Array(values) => Value::Array(values.iter().map(normalise_value).collect()),
        other => other.clone(),
    }
}

fn normalise_method(method: Method) -> Method {
    match method {
        Method::ConnectionStart {
            version_major,
            version_minor,
            server_properties,
            mechanisms,
            locales,
        } => Method::ConnectionStart {
            version_major,
            version_minor,
            server_properties: normalise_table(&server_properties),
            mechanisms,
            locales,
        },
        Method::ConnectionStartOk {
            client_properties,
            mechanism,
            response,
            locale,
        } => Method::ConnectionStartOk {
            client_properties: normalise_table(&client_properties),
            mechanism,
            response,
            locale,
        },
        Method::ExchangeDeclare {
            exchange,
            exchange_type,
            passive,
            durable,
            auto_delete,
            internal,
            no_wait,
            arguments,
        } => Method::ExchangeDeclare {
            exchange,
            exchange_type,
            passive,
            durable,
            auto_delete,
            internal,
            no_wait,
            arguments: normalise_table(&arguments),
        },
        Method::QueueDeclare {
            queue,
            passive,
            durable,
            exclusive,
            auto_delete,
            no_wait,
            arguments,
        } => Method::QueueDeclare {
            queue,
            passive,
            durable,
            exclusive,
            auto_delete,
            no_wait,
            arguments: normalise_table(&arguments),
        },
        Method::QueueBind {
            queue,
            exchange,
            routing_key,
            no_wait,
            arguments,
        } => Method::QueueBind {
            queue,
            exchange,
            routing_key,
            no_wait,
            arguments: normalise_table(&arguments),
        },
        Method::BasicConsume {
            queue,
            consumer_tag,
            no_local,
            no_ack,
            exclusive,
            no_wait,
            arguments,
        } => Method::BasicConsume {
            queue,
            consumer_tag,
            no_local,
            no_ack,
            exclusive,
            no_wait,
            arguments: normalise_table(&arguments),
        },
        other => other,
    }
}

fn oracle_parse(bytes: &[u8]) -> AMQPFrame {
    let (rest, frame) = parse_frame(bytes).expect("amq-protocol parses our frame");
    assert!(rest.is_empty(), "amq-protocol left {} bytes", rest.len());
    frame
}

fn oracle_encode(frame: &AMQPFrame) -> BytesMut {
    let context = gen_frame(frame)(WriteContext::from(Vec::new())).expect("amq-protocol encodes");
    BytesMut::from(&context.write[..])
}

fn our_frame(bytes: &mut BytesMut) -> Frame {
    let frame = decode_frame(bytes, 0)
        .expect("valid frame")
        .expect("complete frame");
    assert!(bytes.is_empty());
    frame
}

/// Both directions for one method: ours -> oracle and oracle -> ours.
fn check_method_both_ways(method: &Method) {
    let mut ours = BytesMut::new();
    write_method_frame(&mut ours, 7, method).unwrap();
    let AMQPFrame::Method(channel, class) = oracle_parse(&ours) else {
        panic!("not a method frame");
    };
    assert_eq!(channel, 7);
    let converted = method_from_oracle(&class).expect("method covered by the oracle comparison");
    assert_eq!(converted, normalise_method(method.clone()));

    let mut theirs = oracle_encode(&AMQPFrame::Method(7, class.clone()));
    let frame = our_frame(&mut theirs);
    assert_eq!((frame.frame_type, frame.channel), (FRAME_METHOD, 7));
    assert_eq!(
        normalise_method(Method::decode(&frame.payload).unwrap()),
        converted
    );
}

fn sample_table() -> Table {
    Table(vec![
        ("x-max-length".into(), Value::I64(1000)),
        ("x-queue-type".into(), Value::string("quorum")),
        ("x-single-active-consumer".into(), Value::Bool(true)),
        (
            "nested".into(),
            Value::Table(Table(vec![(
                "a".into(),
                Value::Array(vec![Value::I32(-1), Value::Void]),
            )])),
        ),
        ("bytes".into(), Value::ByteArray(vec![1, 2, 3])),
        ("when".into(), Value::Timestamp(1_700_000_000)),
        (
            "price".into(),
            Value::Decimal {
                scale: 2,
                value: 1999,
            },
        ),
        ("ratio".into(), Value::F64(0.5)),
        ("small".into(), Value::U8(200)),
        ("short".into(), Value::I16(-300)),
        ("ushort".into(), Value::U16(60_000)),
        ("uint".into(), Value::U32(4_000_000_000)),
        ("float".into(), Value::F32(1.25)),
        ("signed-byte".into(), Value::I8(-5)),
    ])
}

#[test]
fn basic_publish_matches_amq_protocol() {
    check_method_both_ways(&Method::BasicPublish {
        exchange: "amq.topic".into(),
        routing_key: "a.b.c".into(),
        mandatory: true,
        immediate: false,
    });
}

#[test]
fn basic_deliver_matches_amq_protocol() {
    check_method_both_ways(&Method::BasicDeliver {
        consumer_tag: "amq.ctag-abc".into(),
        delivery_tag: u64::MAX - 1,
        redelivered: true,
        exchange: "".into(),
        routing_key: "orders".into(),
    });
}

#[test]
fn queue_declare_with_arguments_matches_amq_protocol() {
    check_method_both_ways(&Method::QueueDeclare {
        queue: "orders".into(),
        passive: false,
        durable: true,
        exclusive: false,
        auto_delete: true,
        no_wait: false,
        arguments: sample_table(),
    });
}

#[test]
fn connection_start_matches_amq_protocol() {
    check_method_both_ways(&Method::ConnectionStart {
        version_major: 0,
        version_minor: 9,
        server_properties: Table(vec![
            ("product".into(), Value::string("Warren")),
            (
                "capabilities".into(),
                Value::Table(Table(vec![
                    ("publisher_confirms".into(), Value::Bool(true)),
                    ("basic.nack".into(), Value::Bool(true)),
                ])),
            ),
        ]),
        mechanisms: b"PLAIN AMQPLAIN".to_vec(),
        locales: b"en_US".to_vec(),
    });
}

#[test]
fn a_handful_of_other_methods_match_amq_protocol() {
    for method in [
        Method::ConnectionTune {
            channel_max: 2047,
            frame_max: 131_072,
            heartbeat: 60,
        },
        Method::ConnectionClose {
            reply_code: 320,
            reply_text: "CONNECTION_FORCED".into(),
            class_id: 0,
            method_id: 0,
        },
        Method::ExchangeDeclare {
            exchange: "logs".into(),
            exchange_type: "fanout".into(),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: true,
            no_wait: true,
            arguments: Table::new(),
        },
        Method::QueueBind {
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            no_wait: true,
            arguments: sample_table(),
        },
        Method::BasicConsume {
            queue: "q".into(),
            consumer_tag: String::new(),
            no_local: false,
            no_ack: true,
            exclusive: true,
            no_wait: false,
            arguments: Table(vec![("x-priority".into(), Value::I32(10))]),
        },
        Method::BasicGetOk {
            delivery_tag: 3,
            redelivered: false,
            exchange: "x".into(),
            routing_key: "k".into(),
            message_count: 12,
        },
        Method::BasicNack {
            delivery_tag: 9,
            multiple: true,
            requeue: false,
        },
        Method::BasicAck {
            delivery_tag: 10,
            multiple: false,
        },
    ] {
        check_method_both_ways(&method);
    }
}

#[test]
fn content_header_with_properties_matches_amq_protocol() {
    let properties = Properties {
        content_type: Some("application/json".into()),
        headers: Some(sample_table()),
        delivery_mode: Some(2),
        priority: Some(5),
        correlation_id: Some("c-1".into()),
        reply_to: Some("replies".into()),
        expiration: Some("60000".into()),
        message_id: Some("m-1".into()),
        timestamp: Some(1_700_000_000),
        message_type: Some("order.created".into()),
        user_id: Some("guest".into()),
        app_id: Some("shop".into()),
        ..Properties::default()
    };
    check_content_header_both_ways(&properties, 1234);
}

fn check_content_header_both_ways(properties: &Properties, body_size: u64) {
    let mut raw = BytesMut::new();
    encode_properties(properties, &mut raw).unwrap();
    let mut ours = BytesMut::new();
    write_content_header(&mut ours, 2, CLASS_BASIC, body_size, &raw);
    let AMQPFrame::Header(channel, header) = oracle_parse(&ours) else {
        panic!("not a header frame");
    };
    assert_eq!(
        (channel, header.class_id, header.body_size),
        (2, 60, body_size)
    );
    let mut expected = properties.clone();
    expected.headers = expected.headers.as_ref().map(normalise_table);
    assert_eq!(properties_from_oracle(&header.properties), expected);

    let oracle_header = AMQPContentHeader {
        class_id: 60,
        body_size,
        properties: properties_to_oracle(properties),
    };
    let mut theirs = oracle_encode(&AMQPFrame::Header(2, oracle_header));
    let frame = our_frame(&mut theirs);
    assert_eq!(frame.frame_type, FRAME_HEADER);
    let decoded = ContentHeader::decode(frame.payload).unwrap();
    assert_eq!((decoded.class_id, decoded.body_size), (60, body_size));
    let mut decoded_properties = decoded.properties;
    decoded_properties.headers = decoded_properties.headers.as_ref().map(normalise_table);
    assert_eq!(decoded_properties, expected);
}

#[test]
fn body_frames_parse_with_amq_protocol() {
    let mut out = BytesMut::new();
    write_deliver(
        &mut out,
        1,
        "ctag",
        1,
        false,
        "",
        "q",
        &EMPTY_PROPERTIES,
        &[7; 5000],
        4096,
    );
    let mut rest: &[u8] = &out;
    let mut frames = Vec::new();
    while !rest.is_empty() {
        let (tail, frame) = parse_frame(rest).expect("amq-protocol parses our frames");
        frames.push(frame);
        rest = tail;
    }
    assert_eq!(frames.len(), 4);
    let body: Vec<u8> = frames
        .iter()
        .filter_map(|f| match f {
            AMQPFrame::Body(1, bytes) => Some(bytes.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(body, vec![7; 5000]);
}

#[test]
fn heartbeat_matches_amq_protocol() {
    assert_eq!(&oracle_encode(&AMQPFrame::Heartbeat)[..], &HEARTBEAT_FRAME);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Every method the oracle comparison covers, with arbitrary fields.
    #[test]
    fn covered_methods_agree_with_amq_protocol(method in arb_method()) {
        let mut ours = BytesMut::new();
        write_method_frame(&mut ours, 1, &method).unwrap();
        let AMQPFrame::Method(_, class) = oracle_parse(&ours) else {
            panic!("not a method frame");
        };
        if let Some(converted) = method_from_oracle(&class) {
            prop_assert_eq!(&converted, &normalise_method(method.clone()));
            check_method_both_ways(&method);
        }
    }

    #[test]
    fn tables_agree_with_amq_protocol(table in arb_table()) {
        let method = Method::QueueDeclare {
            queue: "q".into(),
            passive: false,
            durable: false,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: normalise_table(&table),
        };
        check_method_both_ways(&method);
    }

    #[test]
    fn properties_agree_with_amq_protocol(properties in arb_properties(), body_size in any::<u64>()) {
        let mut properties = properties;
        properties.headers = properties.headers.as_ref().map(normalise_table);
        check_content_header_both_ways(&properties, body_size);
    }
}
