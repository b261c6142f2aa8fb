//! Properties: arbitrary input never panics; arbitrary frames round-trip in every version.

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

use super::*;

// ---- properties ----

fn arb_version() -> impl Strategy<Value = Version> {
    prop_oneof![
        Just(Version::V1_0),
        Just(Version::V1_1),
        Just(Version::V1_2)
    ]
}

fn arb_command() -> impl Strategy<Value = Command> {
    (0..Command::ALL.len()).prop_map(|index| Command::ALL[index])
}

/// Header text that `version` can carry through a round trip for `command`. Verbatim frames
/// (1.0, CONNECT, CONNECTED) cannot carry CR or LF, nor a colon in a name.
fn arb_text(version: Version, command: Command, name: bool) -> BoxedStrategy<String> {
    let verbatim = !version.escapes_headers() || command.headers_are_verbatim();
    let pattern = match (verbatim, name) {
        (false, _) => "[a-z:\\\\\r\n é\u{1F600}-]{0,12}",
        (true, true) => "[a-z\\\\ é\u{1F600}-]{0,12}",
        (true, false) => "[a-z:\\\\ é\u{1F600}-]{0,12}",
    };
    proptest::string::string_regex(pattern)
        .expect("valid regex")
        .prop_filter("content-length is rewritten by the encoder", |text| {
            text != "content-length"
        })
        .boxed()
}

fn arb_frame() -> impl Strategy<Value = (Version, Frame)> {
    (arb_version(), arb_command()).prop_flat_map(|(version, command)| {
        let header = (
            arb_text(version, command, true),
            arb_text(version, command, false),
        );
        (
            proptest::collection::vec(header, 0..6),
            proptest::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(move |(headers, body)| {
                (
                    version,
                    Frame {
                        command,
                        headers,
                        body: Bytes::from(body),
                    },
                )
            })
    })
}

/// Pieces of STOMP syntax, to make random input that gets past the first line.
const FRAGMENTS: [&[u8]; 13] = [
    b"SEND\n",
    b"\n",
    b"\r\n",
    b"\r",
    b"\0",
    b":",
    b"\\",
    b"\\c",
    b"content-length:",
    b"3",
    b"abc",
    b"\xff",
    b"MESSAGE\n",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
        version in arb_version(),
    ) {
        let mut decoder = Decoder::new(Limits {
            max_frame_size: 64,
            max_header_count: 4,
            max_header_length: 32,
            max_headers_size: 96,
        });
        decoder.set_version(version);
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = decoder.decode(&mut buf) {}
    }

    #[test]
    fn frame_like_bytes_never_panic(
        parts in proptest::collection::vec(0..FRAGMENTS.len(), 0..40),
        version in arb_version(),
        chunk in 1usize..8,
    ) {
        let bytes: Vec<u8> = parts.iter().flat_map(|&index| FRAGMENTS[index]).copied().collect();
        let mut decoder = decoder(version);
        let mut buf = BytesMut::new();
        'feed: for piece in bytes.chunks(chunk) {
            buf.extend_from_slice(piece);
            loop {
                match decoder.decode(&mut buf) {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(_) => break 'feed,
                }
            }
        }
    }

    #[test]
    fn frames_round_trip(
        (version, frame) in arb_frame(),
        split in any::<prop::sample::Index>(),
    ) {
        let bytes = encoded(&frame, version);
        let mut expected = frame.clone();
        if !frame.body.is_empty() {
            expected.headers.push(("content-length".into(), frame.body.len().to_string()));
        }
        // Whole, and in two pieces.
        prop_assert_eq!(decode_one(version, &bytes), expected.clone());
        let split = split.index(bytes.len() + 1);
        let mut decoder = decoder(version);
        let mut buf = BytesMut::from(&bytes[..split]);
        let first = decoder.decode(&mut buf).expect("prefix decodes");
        let decoded = match first {
            Some(decoded) => decoded,
            None => {
                buf.extend_from_slice(&bytes[split..]);
                decoder.decode(&mut buf).expect("decodes").expect("complete")
            }
        };
        prop_assert_eq!(decoded, Decoded::Frame(expected));
    }

    #[test]
    fn encode_message_round_trips(
        version in arb_version(),
        destination in "[a-z/:\\\\\n]{0,16}",
        body in proptest::collection::vec(any::<u8>(), 0..64),
        ack in proptest::option::of("[0-9]{1,4}"),
    ) {
        let mut out = BytesMut::new();
        encode_message(&mut out, version, &destination, "m-1", "sub", ack.as_deref(), &[], &body);
        let frame = decode_one(version, &out);
        prop_assert_eq!(frame.command, Command::Message);
        if version.escapes_headers() {
            prop_assert_eq!(frame.header("destination"), Some(destination.as_str()));
        }
        prop_assert_eq!(frame.header("ack"), ack.as_deref());
        prop_assert_eq!(&frame.body[..], &body[..]);
    }
}
