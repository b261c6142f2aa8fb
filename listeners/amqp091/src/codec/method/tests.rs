use bytes::BytesMut;
use proptest::prelude::*;
use warren_core::value::{Table, Value};

use super::*;
use crate::codec::primitives::tests::arb_table;

/// Builds wire bytes by hand, independently of the codec's own writers.
#[derive(Default)]
struct Bytes(Vec<u8>);

impl Bytes {
    fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    fn shortstr(mut self, s: &str) -> Self {
        self.0.push(s.len() as u8);
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn longstr(mut self, s: &[u8]) -> Self {
        self.0.extend_from_slice(&(s.len() as u32).to_be_bytes());
        self.0.extend_from_slice(s);
        self
    }
    /// A table entry with a long-string value.
    fn entry_s(self, key: &str, value: &str) -> Self {
        self.shortstr(key).u8(b'S').longstr(value.as_bytes())
    }
    fn entry_t(self, key: &str, value: bool) -> Self {
        self.shortstr(key).u8(b't').u8(value as u8)
    }
    fn table(self, body: Bytes) -> Self {
        self.longstr(&body.0)
    }
}

fn encode(method: &Method) -> Vec<u8> {
    let mut out = BytesMut::new();
    method.encode(&mut out).expect("encodable");
    out.to_vec()
}

/// connection.start-ok laid out as pika 1.3 sends it: client properties with a nested
/// capabilities table, PLAIN with "\0guest\0guest", locale en_US.
fn pika_start_ok() -> Vec<u8> {
    let capabilities = Bytes::default()
        .entry_t("authentication_failure_close", true)
        .entry_t("basic.nack", true)
        .entry_t("connection.blocked", true)
        .entry_t("consumer_cancel_notify", true)
        .entry_t("publisher_confirms", true);
    let client_properties = Bytes::default()
        .entry_s("product", "Pika Python Client Library")
        .entry_s("platform", "Python 3.12.3")
        .shortstr("capabilities")
        .u8(b'F')
        .table(capabilities)
        .entry_s("information", "See http://pika.rtfd.org")
        .entry_s("version", "1.3.2");
    Bytes::default()
        .u16(10)
        .u16(11)
        .table(client_properties)
        .shortstr("PLAIN")
        .longstr(b"\0guest\0guest")
        .shortstr("en_US")
        .0
}

#[test]
fn decodes_pikas_connection_start_ok() {
    let bytes = pika_start_ok();
    let method = Method::decode(&bytes).unwrap();
    let Method::ConnectionStartOk {
        client_properties,
        mechanism,
        response,
        locale,
    } = &method
    else {
        panic!("unexpected {method:?}");
    };
    assert_eq!(mechanism, "PLAIN");
    assert_eq!(response, b"\0guest\0guest");
    assert_eq!(locale, "en_US");
    assert_eq!(
        client_properties.get("product").and_then(Value::as_str),
        Some("Pika Python Client Library")
    );
    let Some(Value::Table(capabilities)) = client_properties.get("capabilities") else {
        panic!("no capabilities table");
    };
    assert_eq!(capabilities.get("basic.nack"), Some(&Value::Bool(true)));
    assert_eq!(capabilities.len(), 5);
    // Tables keep wire order, so re-encoding reproduces the bytes exactly.
    assert_eq!(encode(&method), bytes);
    assert_eq!(method.name(), "connection.start_ok");
    assert!(!method.is_synchronous_request());
}

#[test]
fn decodes_basic_publish() {
    // ticket 0, exchange "", routing key "hello", mandatory.
    let bytes = [0, 60, 0, 40, 0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o', 0b01];
    let method = Method::decode(&bytes).unwrap();
    assert_eq!(
        method,
        Method::BasicPublish {
            exchange: "".into(),
            routing_key: "hello".into(),
            mandatory: true,
            immediate: false
        }
    );
    assert!(method.has_content());
    assert_eq!(
        (method.class_id(), method.method_id(), method.name()),
        (60, 40, "basic.publish")
    );
    assert_eq!(encode(&method), bytes);
}

#[test]
fn publish_can_be_read_without_allocating() {
    let bytes = [
        0, 60, 0, 40, 0, 0, 1, b'x', 5, b'h', b'e', b'l', b'l', b'o', 0b10,
    ];
    assert_eq!(
        BasicPublishRef::peek(&bytes),
        Some(BasicPublishRef {
            exchange: "x",
            routing_key: "hello",
            mandatory: false,
            immediate: true
        })
    );
    // Malformed or another method: None, and Method::decode tells why.
    assert_eq!(BasicPublishRef::peek(&bytes[..bytes.len() - 1]), None);
    assert_eq!(
        BasicPublishRef::peek(&[0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 1, 0]),
        None
    );
    let mut trailing = bytes.to_vec();
    trailing.push(0);
    assert_eq!(BasicPublishRef::peek(&trailing), None);
}

#[test]
fn decodes_queue_declare_with_arguments() {
    let arguments = Bytes::default()
        .shortstr("x-queue-type")
        .u8(b'S')
        .longstr(b"quorum");
    let bytes = Bytes::default()
        .u16(50)
        .u16(10)
        .u16(0)
        .shortstr("orders")
        .u8(0b0000_0010) // durable
        .table(arguments)
        .0;
    let method = Method::decode(&bytes).unwrap();
    assert_eq!(
        method,
        Method::QueueDeclare {
            queue: "orders".into(),
            passive: false,
            durable: true,
            exclusive: false,
            auto_delete: false,
            no_wait: false,
            arguments: Table(vec![("x-queue-type".into(), Value::string("quorum"))]),
        }
    );
    assert!(method.is_synchronous_request());
    assert_eq!(encode(&method), bytes);
}

#[test]
fn no_wait_makes_a_request_asynchronous() {
    let method = Method::QueueBind {
        queue: "q".into(),
        exchange: "x".into(),
        routing_key: "k".into(),
        no_wait: true,
        arguments: Table::new(),
    };
    assert!(!method.is_synchronous_request());
    assert!(Method::TxCommit.is_synchronous_request());
    assert!(!Method::BasicAck {
        delivery_tag: 1,
        multiple: false
    }
    .is_synchronous_request());
    assert!(!Method::QueueDeclareOk {
        queue: "q".into(),
        message_count: 0,
        consumer_count: 0
    }
    .is_synchronous_request());
}

#[test]
fn unknown_class_or_method() {
    assert_eq!(
        Method::decode(&[0, 99, 0, 10]),
        Err(MethodDecodeError::UnknownMethod {
            class_id: 99,
            method_id: 10
        })
    );
    assert_eq!(
        Method::decode(&[0, 60, 0, 41, 1, 2, 3]),
        Err(MethodDecodeError::UnknownMethod {
            class_id: 60,
            method_id: 41
        })
    );
    assert_eq!(
        MethodDecodeError::UnknownMethod {
            class_id: 99,
            method_id: 10
        }
        .to_string(),
        "unknown method: class 99, method 10"
    );
}

#[test]
fn payload_shorter_than_the_ids() {
    let error = Method::decode(&[0, 60, 0]).unwrap_err();
    assert!(matches!(
        error,
        MethodDecodeError::Syntax {
            class_id: 0,
            method_id: 0,
            ..
        }
    ));
}

#[test]
fn every_truncation_of_a_method_is_a_syntax_error() {
    let bytes = pika_start_ok();
    for cut in 4..bytes.len() {
        match Method::decode(&bytes[..cut]) {
            Err(MethodDecodeError::Syntax {
                class_id: 10,
                method_id: 11,
                message,
            }) => {
                assert!(message.starts_with("connection.start_ok: "), "{message}");
            }
            other => panic!("cut at {cut}: {other:?}"),
        }
    }
    let error = Method::decode(&[0, 50, 0, 10, 0, 0, 1, b'q', 0, 0, 0, 0]).unwrap_err();
    assert_eq!(error.to_string(), "queue.declare: truncated field table");
    let error = Method::decode(&[0, 60, 0, 80, 0, 0, 0]).unwrap_err();
    assert_eq!(error.to_string(), "basic.ack: truncated long-long integer");
    // The bits octet of basic.publish missing.
    let error = Method::decode(&[0, 60, 0, 40, 0, 0, 0, 0]).unwrap_err();
    assert_eq!(error.to_string(), "basic.publish: truncated octet");
}

#[test]
fn trailing_octets_are_a_syntax_error() {
    let error = Method::decode(&[0, 60, 0, 80, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0xAA, 0xBB]).unwrap_err();
    assert_eq!(
        error,
        MethodDecodeError::Syntax {
            class_id: 60,
            method_id: 80,
            message: "basic.ack: 2 unexpected octets after the last field".into()
        }
    );
    assert!(Method::decode(&[0, 90, 0, 10, 0]).is_err());
}

#[test]
fn invalid_utf8_shortstr_is_a_syntax_error() {
    let error = Method::decode(&[0, 50, 0, 10, 0, 0, 1, 0xFF, 0, 0, 0, 0, 0]).unwrap_err();
    assert_eq!(
        error.to_string(),
        "queue.declare: short string is not valid UTF-8"
    );
}

#[test]
fn bad_table_type_letter_is_a_syntax_error() {
    let arguments = Bytes::default().shortstr("x-max-length").u8(b'Q').u32(5);
    let bytes = Bytes::default()
        .u16(50)
        .u16(10)
        .u16(0)
        .shortstr("q")
        .u8(0)
        .table(arguments)
        .0;
    let error = Method::decode(&bytes).unwrap_err();
    assert_eq!(
        error.to_string(),
        "queue.declare: unknown field type 'Q' in field table"
    );
}

#[test]
fn reserved_fields_are_written_as_zero_and_skipped_when_read() {
    // connection.open: vhost, capabilities "", insist bit 0.
    let open = Method::ConnectionOpen {
        virtual_host: "/".into(),
    };
    assert_eq!(encode(&open), [0, 10, 0, 40, 1, b'/', 0, 0]);
    // A client sending the deprecated values is still understood.
    assert_eq!(
        Method::decode(&[0, 10, 0, 40, 1, b'/', 3, b'a', b'b', b'c', 1]).unwrap(),
        open
    );
    assert_eq!(encode(&Method::ChannelOpenOk), [0, 20, 0, 11, 0, 0, 0, 0]);
    assert_eq!(encode(&Method::BasicGetEmpty), [0, 60, 0, 72, 0]);
}

#[test]
fn names_match_rabbitmq() {
    assert_eq!(Method::ExchangeUnbindOk.ids(), (40, 51));
    assert_eq!(Method::ExchangeUnbindOk.name(), "exchange.unbind_ok");
    assert_eq!(
        Method::BasicRecoverAsync { requeue: true }.name(),
        "basic.recover_async"
    );
    assert_eq!(
        Method::ConfirmSelect { no_wait: false }.to_string(),
        "confirm.select"
    );
    assert_eq!(method_name(1, 1), None);
}

/// The pieces every method's fields are drawn from.
type Pieces = (
    (String, String, String, String),
    (u64, u32, u32, u16, u8),
    [bool; 5],
    (Table, Vec<u8>, Vec<u8>),
);

/// The number of methods (the variants `method_from` can build).
pub(crate) const METHOD_COUNT: usize = 64;

/// Builds the `index`th method with fields taken from `pieces`.
pub(crate) fn method_from(index: usize, pieces: Pieces) -> Method {
    let ((s1, s2, s3, s4), (n64, n32, m32, n16, n8), [b1, b2, b3, b4, b5], (table, l1, l2)) =
        pieces;
    use Method::*;
    match index {
        0 => ConnectionStart {
            version_major: n8,
            version_minor: n16 as u8,
            server_properties: table,
            mechanisms: l1,
            locales: l2,
        },
        1 => ConnectionStartOk {
            client_properties: table,
            mechanism: s1,
            response: l1,
            locale: s2,
        },
        2 => ConnectionSecure { challenge: l1 },
        3 => ConnectionSecureOk { response: l1 },
        4 => ConnectionTune {
            channel_max: n16,
            frame_max: n32,
            heartbeat: m32 as u16,
        },
        5 => ConnectionTuneOk {
            channel_max: n16,
            frame_max: n32,
            heartbeat: m32 as u16,
        },
        6 => ConnectionOpen { virtual_host: s1 },
        7 => ConnectionOpenOk,
        8 => ConnectionClose {
            reply_code: n16,
            reply_text: s1,
            class_id: n32 as u16,
            method_id: m32 as u16,
        },
        9 => ConnectionCloseOk,
        10 => ConnectionBlocked { reason: s1 },
        11 => ConnectionUnblocked,
        12 => ConnectionUpdateSecret {
            new_secret: l1,
            reason: s1,
        },
        13 => ConnectionUpdateSecretOk,
        14 => ChannelOpen,
        15 => ChannelOpenOk,
        16 => ChannelFlow { active: b1 },
        17 => ChannelFlowOk { active: b1 },
        18 => ChannelClose {
            reply_code: n16,
            reply_text: s1,
            class_id: n32 as u16,
            method_id: m32 as u16,
        },
        19 => ChannelCloseOk,
        20 => ExchangeDeclare {
            exchange: s1,
            exchange_type: s2,
            passive: b1,
            durable: b2,
            auto_delete: b3,
            internal: b4,
            no_wait: b5,
            arguments: table,
        },
        21 => ExchangeDeclareOk,
        22 => ExchangeDelete {
            exchange: s1,
            if_unused: b1,
            no_wait: b2,
        },
        23 => ExchangeDeleteOk,
        24 => ExchangeBind {
            destination: s1,
            source: s2,
            routing_key: s3,
            no_wait: b1,
            arguments: table,
        },
        25 => ExchangeBindOk,
        26 => ExchangeUnbind {
            destination: s1,
            source: s2,
            routing_key: s3,
            no_wait: b1,
            arguments: table,
        },
        27 => ExchangeUnbindOk,
        28 => QueueDeclare {
            queue: s1,
            passive: b1,
            durable: b2,
            exclusive: b3,
            auto_delete: b4,
            no_wait: b5,
            arguments: table,
        },
        29 => QueueDeclareOk {
            queue: s1,
            message_count: n32,
            consumer_count: m32,
        },
        30 => QueueBind {
            queue: s1,
            exchange: s2,
            routing_key: s3,
            no_wait: b1,
            arguments: table,
        },
        31 => QueueBindOk,
        32 => QueuePurge {
            queue: s1,
            no_wait: b1,
        },
        33 => QueuePurgeOk { message_count: n32 },
        34 => QueueDelete {
            queue: s1,
            if_unused: b1,
            if_empty: b2,
            no_wait: b3,
        },
        35 => QueueDeleteOk { message_count: n32 },
        36 => QueueUnbind {
            queue: s1,
            exchange: s2,
            routing_key: s3,
            arguments: table,
        },
        37 => QueueUnbindOk,
        38 => BasicQos {
            prefetch_size: n32,
            prefetch_count: n16,
            global: b1,
        },
        39 => BasicQosOk,
        40 => BasicConsume {
            queue: s1,
            consumer_tag: s2,
            no_local: b1,
            no_ack: b2,
            exclusive: b3,
            no_wait: b4,
            arguments: table,
        },
        41 => BasicConsumeOk { consumer_tag: s1 },
        42 => BasicCancel {
            consumer_tag: s1,
            no_wait: b1,
        },
        43 => BasicCancelOk { consumer_tag: s1 },
        44 => BasicPublish {
            exchange: s1,
            routing_key: s2,
            mandatory: b1,
            immediate: b2,
        },
        45 => BasicReturn {
            reply_code: n16,
            reply_text: s1,
            exchange: s2,
            routing_key: s3,
        },
        46 => BasicDeliver {
            consumer_tag: s1,
            delivery_tag: n64,
            redelivered: b1,
            exchange: s2,
            routing_key: s4,
        },
        47 => BasicGet {
            queue: s1,
            no_ack: b1,
        },
        48 => BasicGetOk {
            delivery_tag: n64,
            redelivered: b1,
            exchange: s1,
            routing_key: s2,
            message_count: n32,
        },
        49 => BasicGetEmpty,
        50 => BasicAck {
            delivery_tag: n64,
            multiple: b1,
        },
        51 => BasicReject {
            delivery_tag: n64,
            requeue: b1,
        },
        52 => BasicRecoverAsync { requeue: b1 },
        53 => BasicRecover { requeue: b1 },
        54 => BasicRecoverOk,
        55 => BasicNack {
            delivery_tag: n64,
            multiple: b1,
            requeue: b2,
        },
        56 => ConfirmSelect { no_wait: b1 },
        57 => ConfirmSelectOk,
        58 => TxSelect,
        59 => TxSelectOk,
        60 => TxCommit,
        61 => TxCommitOk,
        62 => TxRollback,
        _ => TxRollbackOk,
    }
}

fn arb_shortstr() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9._-]{0,30}",
        "\\PC{0,60}".prop_map(|s: String| crate::codec::truncate_shortstr(&s).to_owned())
    ]
}

pub(crate) fn arb_method() -> impl Strategy<Value = Method> {
    let pieces = (
        (
            arb_shortstr(),
            arb_shortstr(),
            arb_shortstr(),
            arb_shortstr(),
        ),
        (
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u16>(),
            any::<u8>(),
        ),
        any::<[bool; 5]>(),
        (
            arb_table(),
            proptest::collection::vec(any::<u8>(), 0..40),
            proptest::collection::vec(any::<u8>(), 0..40),
        ),
    );
    (0..METHOD_COUNT, pieces).prop_map(|(index, pieces)| method_from(index, pieces))
}

#[test]
fn every_method_has_distinct_ids_and_a_name() {
    let mut seen = std::collections::HashSet::new();
    for index in 0..METHOD_COUNT {
        let method = method_from(index, Default::default());
        assert!(
            seen.insert(method.ids()),
            "duplicate ids {:?}",
            method.ids()
        );
        assert_eq!(
            method_name(method.class_id(), method.method_id()),
            Some(method.name())
        );
        assert_eq!(Method::decode(&encode(&method)).unwrap(), method);
    }
    assert_eq!(seen.len(), 64);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn methods_round_trip(method in arb_method()) {
        let bytes = encode(&method);
        prop_assert_eq!(Method::decode(&bytes).unwrap(), method);
    }

    #[test]
    fn arbitrary_bytes_never_panic_method_decode(bytes in proptest::collection::vec(any::<u8>(), 0..120)) {
        let _ = Method::decode(&bytes);
        let _ = BasicPublishRef::peek(&bytes);
    }

    /// The borrowed publish view agrees with the full decoder on every input.
    #[test]
    fn publish_peek_agrees_with_decode(fields in proptest::collection::vec(any::<u8>(), 0..40), method in arb_method()) {
        let mut bytes = vec![0, 60, 0, 40];
        bytes.extend_from_slice(&fields);
        for bytes in [bytes, encode(&method)] {
            let full = match Method::decode(&bytes) {
                Ok(Method::BasicPublish { exchange, routing_key, mandatory, immediate }) => {
                    Some((exchange, routing_key, mandatory, immediate))
                }
                _ => None,
            };
            let peeked = BasicPublishRef::peek(&bytes)
                .map(|p| (p.exchange.to_owned(), p.routing_key.to_owned(), p.mandatory, p.immediate));
            prop_assert_eq!(peeked, full);
        }
    }

    /// Arbitrary fields behind every known pair of ids, so decoding gets past the id check.
    #[test]
    fn arbitrary_fields_never_panic_method_decode(
        index in 0..METHOD_COUNT,
        fields in proptest::collection::vec(any::<u8>(), 0..120),
    ) {
        let (class_id, method_id) = method_from(index, Default::default()).ids();
        let mut bytes = Bytes::default().u16(class_id).u16(method_id).0;
        bytes.extend_from_slice(&fields);
        let _ = Method::decode(&bytes);
    }

    /// Every strict prefix of a valid method fails cleanly (never panics, never succeeds
    /// with fields missing unless the method has no fields left to read).
    #[test]
    fn truncated_methods_fail(method in arb_method(), cut in any::<prop::sample::Index>()) {
        let bytes = encode(&method);
        let cut = cut.index(bytes.len());
        if let Ok(decoded) = Method::decode(&bytes[..cut]) {
            prop_assert!(cut >= 4, "decoded from {} octets", cut);
            prop_assert_eq!(decoded, method);
        }
    }
}
