use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;

fn round_trip(request: &Request) -> Request {
    let mut out = BytesMut::new();
    encode::request(&mut out, request);
    let frame = split_frame(&mut out, 0).unwrap().expect("a whole frame");
    assert!(out.is_empty());
    decode(frame).unwrap()
}

#[test]
fn a_subscribe_as_the_rust_client_writes_it_decodes() {
    // key 7, version 1, correlation 5, subscription 1, "s", offset type 1 (first, no
    // value), credit 10, one property.
    let mut frame = vec![0, 7, 0, 1, 0, 0, 0, 5, 1, 0, 1, b's', 0, 1, 0, 10];
    frame.extend_from_slice(&[0, 0, 0, 1, 0, 1, b'k', 0, 1, b'v']);
    assert_eq!(
        decode(Bytes::from(frame)).unwrap(),
        Request::Subscribe {
            correlation_id: 5,
            subscription_id: 1,
            stream: "s".into(),
            offset: OffsetSpecification::First,
            credit: 10,
            properties: vec![("k".into(), "v".into())],
        }
    );
}

#[test]
fn frames_are_split_only_when_whole_and_oversized_ones_are_refused() {
    let mut buffer = BytesMut::from(&[0u8, 0, 0, 4, 0, 0x17, 0][..]);
    assert_eq!(split_frame(&mut buffer, 100), Ok(None));
    buffer.extend_from_slice(&[1]);
    let frame = split_frame(&mut buffer, 100).unwrap().unwrap();
    assert_eq!(decode(frame).unwrap(), Request::Heartbeat);
    let mut buffer = BytesMut::from(&[0u8, 1, 0, 0][..]);
    assert!(split_frame(&mut buffer, 1000).is_err());
    let mut buffer = BytesMut::from(&[0u8, 0, 0, 1][..]);
    assert!(
        split_frame(&mut buffer, 0).is_err(),
        "a frame holds at least a key and version"
    );
}

#[test]
fn a_huge_array_count_in_a_small_frame_is_refused_without_allocating() {
    let frame = Bytes::from(vec![0, 0x0f, 0, 1, 0, 0, 0, 1, 0x7f, 0xff, 0xff, 0xff]);
    assert!(matches!(decode(frame), Err(DecodeError::Truncated(_))));
}

fn text() -> impl Strategy<Value = String> {
    "[a-z0-9./-]{0,12}"
}

fn offset() -> impl Strategy<Value = OffsetSpecification> {
    prop_oneof![
        Just(OffsetSpecification::First),
        Just(OffsetSpecification::Last),
        Just(OffsetSpecification::Next),
        any::<u64>().prop_map(OffsetSpecification::Offset),
        any::<i64>().prop_map(OffsetSpecification::Timestamp),
    ]
}

fn pairs() -> impl Strategy<Value = Vec<(String, String)>> {
    proptest::collection::vec((text(), text()), 0..4)
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (
            any::<u32>(),
            any::<u8>(),
            proptest::option::of("[a-z]{1,8}"),
            text()
        )
            .prop_map(|(correlation_id, publisher_id, reference, stream)| {
                Request::DeclarePublisher {
                    correlation_id,
                    publisher_id,
                    reference,
                    stream,
                }
            }),
        (
            1u16..=2,
            any::<u8>(),
            proptest::collection::vec(
                (
                    any::<u64>(),
                    proptest::option::of(text()),
                    proptest::collection::vec(any::<u8>(), 0..20)
                ),
                0..4
            )
        )
            .prop_map(|(version, publisher_id, messages)| Request::Publish {
                version,
                publisher_id,
                messages: messages
                    .into_iter()
                    .map(|(publishing_id, filter_value, message)| PublishedMessage {
                        publishing_id,
                        filter_value: if version >= 2 { filter_value } else { None },
                        message: Bytes::from(message),
                    })
                    .collect(),
            }),
        (
            any::<u32>(),
            any::<u8>(),
            text(),
            offset(),
            any::<u16>(),
            pairs()
        )
            .prop_map(
                |(correlation_id, subscription_id, stream, offset, credit, properties)| {
                    Request::Subscribe {
                        correlation_id,
                        subscription_id,
                        stream,
                        offset,
                        credit,
                        properties,
                    }
                }
            ),
        (text(), text(), any::<u64>()).prop_map(|(reference, stream, offset)| {
            Request::StoreOffset {
                reference,
                stream,
                offset,
            }
        }),
        (any::<u32>(), text(), pairs()).prop_map(|(correlation_id, stream, arguments)| {
            Request::Create {
                correlation_id,
                stream,
                arguments,
            }
        }),
        (any::<u32>(), proptest::collection::vec(text(), 0..4)).prop_map(
            |(correlation_id, streams)| Request::Metadata {
                correlation_id,
                streams
            }
        ),
        (
            any::<u32>(),
            text(),
            proptest::collection::vec(any::<u8>(), 0..20)
        )
            .prop_map(
                |(correlation_id, mechanism, data)| Request::SaslAuthenticate {
                    correlation_id,
                    mechanism,
                    data: Bytes::from(data)
                }
            ),
        (any::<u32>(), any::<u32>()).prop_map(|(frame_max, heartbeat)| Request::Tune {
            frame_max,
            heartbeat
        }),
        (any::<u32>(), any::<u16>(), text()).prop_map(|(correlation_id, code, reason)| {
            Request::Close {
                correlation_id,
                code,
                reason,
            }
        }),
        (
            any::<u32>(),
            proptest::collection::vec((any::<u16>(), any::<u16>(), any::<u16>()), 0..4)
        )
            .prop_map(
                |(correlation_id, commands)| Request::ExchangeCommandVersions {
                    correlation_id,
                    commands
                }
            ),
        (
            any::<u32>(),
            text(),
            proptest::collection::vec(text(), 0..3),
            proptest::collection::vec(text(), 0..3),
            pairs()
        )
            .prop_map(
                |(correlation_id, name, partitions, binding_keys, arguments)| {
                    Request::CreateSuperStream {
                        correlation_id,
                        name,
                        partitions,
                        binding_keys,
                        arguments,
                    }
                }
            ),
        (any::<u32>(), text(), offset(), pairs()).prop_map(
            |(correlation_id, stream, offset, properties)| {
                Request::ResolveOffsetSpec {
                    correlation_id,
                    stream,
                    offset,
                    properties,
                }
            }
        ),
        Just(Request::Heartbeat),
    ]
}

proptest! {
    #[test]
    fn every_request_round_trips(request in request()) {
        prop_assert_eq!(round_trip(&request), request);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut buffer = BytesMut::from(&bytes[..]);
        while let Ok(Some(frame)) = split_frame(&mut buffer, 1 << 16) {
            let _ = decode(frame);
        }
        let _ = decode(Bytes::from(bytes));
    }

    #[test]
    fn a_truncated_request_is_an_error_not_a_panic(request in request(), cut in any::<prop::sample::Index>()) {
        let mut out = BytesMut::new();
        encode::request(&mut out, &request);
        let frame = split_frame(&mut out, 0).unwrap().unwrap();
        let at = cut.index(frame.len().max(1));
        let _ = decode(frame.slice(..at));
    }
}
