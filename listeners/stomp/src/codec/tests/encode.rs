//! Encoding and negotiation.

use bytes::{Bytes, BytesMut};

use super::*;

// ---- encoding ----

#[test]
fn encode_adds_content_length_to_bodies_and_corrects_a_wrong_one() {
    let frame = Frame::new(Command::Error)
        .with_header("message", "oops")
        .with_body(Bytes::from_static(b"a\0b"));
    assert_eq!(
        encoded(&frame, Version::V1_2),
        b"ERROR\nmessage:oops\ncontent-length:3\n\na\0b\0"
    );
    let lying = Frame::new(Command::Send)
        .with_header("content-length", "99")
        .with_header("x", "y")
        .with_header("content-length", "1")
        .with_body(Bytes::from_static(b"abcd"));
    assert_eq!(
        encoded(&lying, Version::V1_2),
        b"SEND\ncontent-length:4\nx:y\n\nabcd\0"
    );
    // No body, no content-length (as RabbitMQ).
    assert_eq!(
        encoded(&Frame::new(Command::Receipt), Version::V1_2),
        b"RECEIPT\n\n\0"
    );
}

#[test]
fn encode_message_fast_path_matches_encode() {
    let mut fast = BytesMut::new();
    encode_message(
        &mut fast,
        Version::V1_2,
        "/queue/a",
        "T_0@@1",
        "0",
        Some("42"),
        &[
            ("content-type", "text/plain"),
            ("content-length", "7"),
            ("x:y", "a\nb"),
        ],
        b"hi\0there",
    );
    let frame = Frame::new(Command::Message)
        .with_header("destination", "/queue/a")
        .with_header("message-id", "T_0@@1")
        .with_header("subscription", "0")
        .with_header("ack", "42")
        .with_header("content-type", "text/plain")
        .with_header("x:y", "a\nb")
        .with_body(Bytes::from_static(b"hi\0there"));
    assert_eq!(&fast[..], &encoded(&frame, Version::V1_2)[..]);
    let decoded = decode_one(Version::V1_2, &fast);
    assert_eq!(decoded.header("content-length"), Some("8"));
    assert_eq!(decoded.body, frame.body);
    assert_eq!(decoded.header("x:y"), Some("a\nb"));
}

#[test]
fn encode_message_without_ack_or_body() {
    let mut out = BytesMut::new();
    encode_message(
        &mut out,
        Version::V1_1,
        "/topic/t",
        "m",
        "s",
        None,
        &[],
        b"",
    );
    assert_eq!(
        &out[..],
        b"MESSAGE\ndestination:/topic/t\nmessage-id:m\nsubscription:s\n\n\0"
    );
    assert_eq!(HEARTBEAT, b"\n");
}

// ---- negotiation ----

#[test]
fn version_negotiation() {
    let all = &Version::ALL;
    assert_eq!(negotiate_version(None, all), Ok(Version::V1_0));
    assert_eq!(negotiate_version(Some("1.1"), all), Ok(Version::V1_1));
    assert_eq!(
        negotiate_version(Some("1.0, 1.1 ,2.0"), all),
        Ok(Version::V1_1)
    );
    assert_eq!(
        negotiate_version(Some("1.2,1.0"), &[Version::V1_0, Version::V1_1]),
        Ok(Version::V1_0)
    );
    assert_eq!(
        negotiate_version(Some("2.0"), all),
        Err("Supported versions are 1.0,1.1,1.2".to_string())
    );
    assert_eq!(
        negotiate_version(None, &[Version::V1_2, Version::V1_1]),
        Err("Supported versions are 1.1,1.2".to_string())
    );
}

#[test]
fn heartbeat_negotiation() {
    assert_eq!(negotiate_heartbeat(None, 10000, 10000), Ok((0, 0)));
    assert_eq!(negotiate_heartbeat(Some("0,0"), 10000, 10000), Ok((0, 0)));
    // The client sends every 1000 ms at best, wants ours every 20000 ms.
    assert_eq!(
        negotiate_heartbeat(Some("1000,20000"), 5000, 4000),
        Ok((20000, 4000))
    );
    assert_eq!(
        negotiate_heartbeat(Some("1000, 20000"), 0, 4000),
        Ok((0, 4000))
    );
    assert_eq!(
        negotiate_heartbeat(Some("1000,20000"), 5000, 0),
        Ok((20000, 0))
    );
    for bad in ["", "1000", "a,b", "-1,0", "1,2,3", "99999999999,0"] {
        assert!(negotiate_heartbeat(Some(bad), 1, 1).is_err(), "{bad}");
    }
}
