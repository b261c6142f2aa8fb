//! Property tests: every valid packet survives encode → decode, streams decode the same
//! however they are cut, no input makes the decoder panic, and the topic helpers agree
//! with the AMQP topic exchange they are translated for.

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

use super::*;

/// Any string a UTF-8 field may carry: no U+0000, a mix of ASCII, wildcards and multi-byte
/// characters.
pub(crate) fn string_field() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 /$.+#_-]{0,12}",
        "[^\u{0}]{0,8}",
        "[é€😀a/]{0,6}",
    ]
}

/// A valid topic name: non-empty, no wildcards.
pub(crate) fn topic_name() -> impl Strategy<Value = String> {
    prop_oneof!["[a-zA-Z0-9/$._-]{1,16}", "[a/é€😀]{1,8}"]
}

pub(crate) fn binary() -> impl Strategy<Value = Bytes> {
    vec(any::<u8>(), 0..40).prop_map(Bytes::from)
}

pub(crate) fn qos() -> impl Strategy<Value = QoS> {
    prop_oneof![
        Just(QoS::AtMostOnce),
        Just(QoS::AtLeastOnce),
        Just(QoS::ExactlyOnce)
    ]
}

pub(crate) fn protocol() -> impl Strategy<Value = ProtocolLevel> {
    prop_oneof![Just(ProtocolLevel::V3_1), Just(ProtocolLevel::V3_1_1)]
}

pub(crate) fn connect(
    protocol: impl Strategy<Value = ProtocolLevel>,
) -> impl Strategy<Value = Connect> {
    let will =
        (topic_name(), binary(), qos(), any::<bool>()).prop_map(|(topic, message, qos, retain)| {
            LastWill {
                topic,
                message,
                qos,
                retain,
                properties: None,
            }
        });
    (
        protocol,
        any::<u16>(),
        string_field(),
        any::<bool>(),
        option::of(will),
        option::of(string_field()),
        option::of(binary()),
    )
        .prop_map(
            |(protocol, keep_alive, client_id, clean_session, last_will, username, password)| {
                // 3.1.1 forbids a password without a user name (MQTT-3.1.2-22).
                let password = if protocol == ProtocolLevel::V3_1_1 && username.is_none() {
                    None
                } else {
                    password
                };
                Connect {
                    protocol,
                    keep_alive,
                    client_id,
                    clean_session,
                    last_will,
                    username,
                    password,
                    properties: None,
                }
            },
        )
}

pub(crate) fn publish() -> impl Strategy<Value = Publish> {
    (
        qos(),
        any::<bool>(),
        any::<bool>(),
        topic_name(),
        1..=u16::MAX,
        binary(),
    )
        .prop_map(|(qos, dup, retain, topic, id, payload)| {
            let has_id = qos != QoS::AtMostOnce;
            Publish {
                dup: dup && has_id,
                qos,
                retain,
                topic,
                packet_id: has_id.then_some(id),
                payload,
                properties: None,
            }
        })
}

fn return_code() -> impl Strategy<Value = SubscribeReturnCode> {
    prop_oneof![
        qos().prop_map(SubscribeReturnCode::Success),
        Just(SubscribeReturnCode::Failure)
    ]
}

fn connect_return_code() -> impl Strategy<Value = ConnectReturnCode> {
    (0u8..=5).prop_map(|code| ConnectReturnCode::from_u8(code).expect("0..=5 are defined"))
}

/// Any packet a valid peer could send, in either direction.
pub(crate) fn packet(
    protocol: impl Strategy<Value = ProtocolLevel> + 'static,
) -> impl Strategy<Value = Packet> {
    let id = 1..=u16::MAX;
    prop_oneof![
        connect(protocol).prop_map(Packet::Connect),
        (any::<bool>(), connect_return_code()).prop_map(|(session_present, code)| {
            Packet::ConnAck(ConnAck::new(session_present, code))
        }),
        publish().prop_map(Packet::Publish),
        id.clone()
            .prop_map(|packet_id| Packet::PubAck(PubAck::new(packet_id))),
        id.clone()
            .prop_map(|packet_id| Packet::PubRec(PubRec::new(packet_id))),
        id.clone()
            .prop_map(|packet_id| Packet::PubRel(PubRel::new(packet_id))),
        id.clone()
            .prop_map(|packet_id| Packet::PubComp(PubComp::new(packet_id))),
        (id.clone(), vec((string_field(), qos()), 1..5)).prop_map(|(packet_id, filters)| {
            Packet::Subscribe(Subscribe {
                packet_id,
                filters,
                options: Vec::new(),
                properties: None,
            })
        }),
        (id.clone(), vec(return_code(), 1..5)).prop_map(|(packet_id, return_codes)| {
            Packet::SubAck(SubAck {
                packet_id,
                return_codes,
                properties: None,
            })
        }),
        (id.clone(), vec(string_field(), 1..5)).prop_map(
            |(packet_id, topics)| Packet::Unsubscribe(Unsubscribe {
                packet_id,
                topics,
                properties: None,
            })
        ),
        id.prop_map(|packet_id| Packet::UnsubAck(UnsubAck::new(packet_id))),
        Just(Packet::PingReq),
        Just(Packet::PingResp),
        Just(Packet::Disconnect(Reason::default())),
    ]
}

/// Decodes until the buffer runs dry or an error; the loop is bounded because every
/// successful decode consumes at least two bytes.
fn drain(buf: &mut BytesMut, max: usize) -> (Vec<Packet>, Option<DecodeError>) {
    let mut packets = Vec::new();
    loop {
        match decode(buf, max) {
            Ok(Some(packet)) => packets.push(packet),
            Ok(None) => return (packets, None),
            Err(error) => return (packets, Some(error)),
        }
    }
}

/// AMQP topic-exchange matching of a binding key against a routing key, written from the
/// AMQP 0-9-1 definition (words split by '.', '*' one word, '#' zero or more words), as a
/// reference for the MQTT matcher.
fn amqp_topic_matches(binding: &[&str], routing: &[&str]) -> bool {
    match (binding.split_first(), routing.split_first()) {
        (None, None) => true,
        (Some((&"#", rest)), _) => {
            amqp_topic_matches(rest, routing)
                || (!routing.is_empty() && amqp_topic_matches(binding, &routing[1..]))
        }
        (Some((&"*", rest)), Some((_, routing_rest))) => amqp_topic_matches(rest, routing_rest),
        (Some((word, rest)), Some((topic_word, routing_rest))) => {
            word == topic_word && amqp_topic_matches(rest, routing_rest)
        }
        _ => false,
    }
}

/// A valid filter built level by level, with wildcards in legal places only.
fn topic_filter() -> impl Strategy<Value = String> {
    let level = prop_oneof![3 => "[ab.]{0,2}", 1 => Just("+".to_string())];
    (vec(level, 1..5), any::<bool>())
        .prop_map(|(mut levels, multi)| {
            if multi {
                levels.push("#".into());
            }
            levels.join("/")
        })
        .prop_filter("topic filters are not empty", |filter| !filter.is_empty())
}

/// A topic from the same small alphabet as [`topic_filter`], so that matches happen.
fn small_topic() -> impl Strategy<Value = String> {
    vec("[ab.$]{0,2}", 1..6)
        .prop_map(|levels| levels.join("/"))
        .prop_filter("topic names are not empty", |topic| !topic.is_empty())
}

proptest! {
    #[test]
    fn every_valid_packet_round_trips(packet in packet(protocol())) {
        let mut buf = BytesMut::new();
        encode(&packet, &mut buf).unwrap();
        let decoded = decode(&mut buf, MAX_REMAINING_LENGTH).unwrap();
        prop_assert_eq!(decoded, Some(packet));
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn a_stream_decodes_the_same_however_it_is_cut(
        packets in vec(packet(protocol()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = BytesMut::new();
        for packet in &packets {
            encode(packet, &mut bytes).unwrap();
        }
        let cut = cut.index(bytes.len() + 1);
        let mut buf = BytesMut::from(&bytes[..cut]);
        let (mut got, error) = drain(&mut buf, MAX_REMAINING_LENGTH);
        prop_assert!(error.is_none());
        buf.extend_from_slice(&bytes[cut..]);
        let (rest, error) = drain(&mut buf, MAX_REMAINING_LENGTH);
        prop_assert!(error.is_none());
        got.extend(rest);
        prop_assert_eq!(got, packets);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in vec(any::<u8>(), 0..512),
        max in prop_oneof![Just(0usize), Just(16), Just(MAX_REMAINING_LENGTH)],
    ) {
        let mut buf = BytesMut::from(&bytes[..]);
        let (_, error) = drain(&mut buf, max);
        if let Some(error) = error {
            // Every error has a message.
            prop_assert!(!error.to_string().is_empty());
        }
    }

    #[test]
    fn arbitrary_bytes_after_a_valid_fixed_header_never_panic(
        first in prop_oneof![Just(0x10u8), Just(0x20), 0x30u8..0x36, Just(0x62), Just(0x82), Just(0x90), Just(0xA2)],
        body in vec(any::<u8>(), 0..200),
    ) {
        let len = body.len();
        let mut bytes = vec![first];
        if len > 127 {
            bytes.extend([(len % 128) as u8 | 0x80, (len / 128) as u8]);
        } else {
            bytes.push(len as u8);
        }
        bytes.extend_from_slice(&body);
        let mut buf = BytesMut::from(&bytes[..]);
        let _ = drain(&mut buf, MAX_REMAINING_LENGTH);
    }

    #[test]
    fn mutated_packets_never_panic(
        packet in packet(protocol()),
        mutations in vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        truncate in any::<prop::sample::Index>(),
    ) {
        let mut bytes = BytesMut::new();
        encode(&packet, &mut bytes).unwrap();
        for (index, value) in mutations {
            let at = index.index(bytes.len());
            bytes[at] = value;
        }
        let keep = truncate.index(bytes.len() + 1);
        let mut buf = BytesMut::from(&bytes[..keep]);
        let _ = drain(&mut buf, MAX_REMAINING_LENGTH);
    }

    #[test]
    fn a_valid_topic_name_matches_itself_as_a_filter(topic in topic_name()) {
        prop_assert_eq!(validate_topic_name(&topic), Ok(()));
        prop_assert_eq!(validate_topic_filter(&topic), Ok(()));
        prop_assert!(filter_matches(&topic, &topic));
        prop_assert_eq!(filter_matches("#", &topic), !topic.starts_with('$'));
    }

    #[test]
    fn generated_filters_are_valid(filter in topic_filter()) {
        prop_assert_eq!(validate_topic_filter(&filter), Ok(()));
    }

    #[test]
    fn mqtt_matching_agrees_with_the_amqp_topic_exchange(
        filter in topic_filter(),
        topic in small_topic(),
    ) {
        // Through RabbitMQ's translation, the topic exchange must route exactly what MQTT
        // matching selects; the '$' rule is MQTT's own, so those topics are checked apart.
        let binding = mqtt_filter_to_binding_key(&filter);
        let routing = mqtt_topic_to_routing_key(&topic);
        let binding: Vec<&str> = binding.split('.').collect();
        let routing: Vec<&str> = routing.split('.').collect();
        let amqp = amqp_topic_matches(&binding, &routing);
        let dollar_excluded = topic.starts_with('$')
            && (filter.starts_with('+') || filter.starts_with('#'));
        prop_assert_eq!(filter_matches(&filter, &topic), amqp && !dollar_excluded);
    }

    #[test]
    fn translation_round_trips_with_dots(topic in "[a-z/.+#é]{0,12}") {
        let key = mqtt_filter_to_binding_key(&topic);
        prop_assert!(!key.contains('+'));
        prop_assert_eq!(key.matches('.').count(), topic.matches('/').count());
        prop_assert_eq!(routing_key_to_mqtt_topic(&key), topic.as_str());
    }
}
