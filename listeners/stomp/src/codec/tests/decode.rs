//! Decoding: literal frames, heart-beats, escapes, headers, content-length, limits, split
//! input.

use bytes::{Bytes, BytesMut};

use super::*;

// ---- literal frames, one per command ----

#[test]
fn stomp_1_0_connect_without_accept_version() {
    let frame = decode_one(Version::V1_0, b"CONNECT\nlogin:guest\npasscode:guest\n\n\0");
    assert_eq!(frame.command, Command::Connect);
    assert_eq!(headers(&frame), [("login", "guest"), ("passcode", "guest")]);
    assert!(frame.body.is_empty());
    assert_eq!(
        negotiate_version(frame.header("accept-version"), &Version::ALL),
        Ok(Version::V1_0)
    );
}

#[test]
fn stomp_1_2_connect_with_host_login_passcode_heart_beat_and_crlf() {
    let frame = decode_one(
        Version::V1_0,
        b"CONNECT\r\naccept-version:1.0,1.1,1.2\r\nhost:/\r\nlogin:guest\r\npasscode:gu\\est\r\n\
          heart-beat:10000,5000\r\n\r\n\0\r\n",
    );
    assert_eq!(frame.command, Command::Connect);
    assert_eq!(frame.header("host"), Some("/"));
    assert_eq!(frame.header("login"), Some("guest"));
    // CONNECT headers are never unescaped: the backslash is part of the passcode.
    assert_eq!(frame.header("passcode"), Some("gu\\est"));
    assert_eq!(
        negotiate_version(frame.header("accept-version"), &Version::ALL),
        Ok(Version::V1_2)
    );
    assert_eq!(
        negotiate_heartbeat(frame.header("heart-beat"), 4000, 20000),
        Ok((5000, 20000))
    );
}

#[test]
fn stomp_command_is_connect_with_verbatim_headers() {
    let frame = decode_one(
        Version::V1_2,
        b"STOMP\naccept-version:1.2\nhost:a\\cb\n\n\0",
    );
    assert_eq!(frame.command, Command::Stomp);
    assert_eq!(frame.header("host"), Some("a\\cb"));
}

#[test]
fn connected_round_trips_verbatim() {
    let frame = Frame::new(Command::Connected)
        .with_header("version", "1.2")
        .with_header("heart-beat", "0,0")
        .with_header("server", "Warren/0.1.0 a\\b");
    let bytes = encoded(&frame, Version::V1_2);
    assert_eq!(
        bytes,
        b"CONNECTED\nversion:1.2\nheart-beat:0,0\nserver:Warren/0.1.0 a\\b\n\n\0"
    );
    assert_eq!(decode_one(Version::V1_2, &bytes), frame);
}

#[test]
fn send_with_content_length_carries_a_nul_in_the_body() {
    let frame = decode_one(
        Version::V1_2,
        b"SEND\ndestination:/queue/a\ncontent-type:application/octet-stream\ncontent-length:5\n\nab\0cd\0",
    );
    assert_eq!(frame.command, Command::Send);
    assert_eq!(frame.header("destination"), Some("/queue/a"));
    assert_eq!(frame.body, Bytes::from_static(b"ab\0cd"));
}

#[test]
fn send_without_content_length_ends_at_the_first_nul() {
    let decoded = decode_all(
        Version::V1_1,
        b"SEND\ndestination:/topic/x\n\nhello\0\nSEND\ndestination:/topic/y\n\n\0",
    );
    assert_eq!(decoded.len(), 3);
    let Decoded::Frame(first) = &decoded[0] else {
        panic!("{decoded:?}")
    };
    assert_eq!(first.body, Bytes::from_static(b"hello"));
    assert_eq!(decoded[1], Decoded::Heartbeat);
    let Decoded::Frame(second) = &decoded[2] else {
        panic!("{decoded:?}")
    };
    assert_eq!(second.header("destination"), Some("/topic/y"));
    assert!(second.body.is_empty());
}

#[test]
fn content_length_with_spaces_is_accepted_as_rabbitmq_does() {
    let frame = decode_one(Version::V1_2, b"SEND\ncontent-length: 2 \n\nab\0");
    assert_eq!(frame.body, Bytes::from_static(b"ab"));
}

#[test]
fn subscribe_with_id_and_ack() {
    let frame = decode_one(
        Version::V1_2,
        b"SUBSCRIBE\nid:0\ndestination:/queue/foo\nack:client-individual\n\n\0",
    );
    assert_eq!(frame.command, Command::Subscribe);
    assert_eq!(frame.header("id"), Some("0"));
    assert_eq!(frame.header("ack"), Some("client-individual"));
}

#[test]
fn unsubscribe_begin_commit_abort() {
    for (bytes, command, header) in [
        (&b"UNSUBSCRIBE\nid:0\n\n\0"[..], Command::Unsubscribe, "id"),
        (
            b"BEGIN\ntransaction:tx1\n\n\0",
            Command::Begin,
            "transaction",
        ),
        (
            b"COMMIT\ntransaction:tx1\n\n\0",
            Command::Commit,
            "transaction",
        ),
        (
            b"ABORT\ntransaction:tx1\n\n\0",
            Command::Abort,
            "transaction",
        ),
    ] {
        let frame = decode_one(Version::V1_2, bytes);
        assert_eq!(frame.command, command);
        assert!(frame.header(header).is_some());
    }
}

#[test]
fn ack_and_nack_by_id_in_1_2() {
    let ack = decode_one(Version::V1_2, b"ACK\nid:12345\ntransaction:tx1\n\n\0");
    assert_eq!(ack.command, Command::Ack);
    assert_eq!(ack.header("id"), Some("12345"));
    let nack = decode_one(Version::V1_2, b"NACK\nid:12345\n\n\0");
    assert_eq!(nack.command, Command::Nack);
    assert_eq!(nack.header("id"), Some("12345"));
}

#[test]
fn ack_and_nack_by_message_id_in_1_1() {
    let ack = decode_one(
        Version::V1_1,
        b"ACK\nsubscription:0\nmessage-id:T_0@@session-1@@1\n\n\0",
    );
    assert_eq!(ack.command, Command::Ack);
    assert_eq!(ack.header("message-id"), Some("T_0@@session-1@@1"));
    let nack = decode_one(Version::V1_1, b"NACK\nsubscription:0\nmessage-id:m1\n\n\0");
    assert_eq!(nack.command, Command::Nack);
}

#[test]
fn disconnect_with_and_without_receipt() {
    let plain = decode_one(Version::V1_2, b"DISCONNECT\n\n\0");
    assert_eq!(plain.command, Command::Disconnect);
    assert!(plain.headers.is_empty());
    let with_receipt = decode_one(Version::V1_2, b"DISCONNECT\nreceipt:77\n\n\0");
    assert_eq!(with_receipt.header("receipt"), Some("77"));
}

#[test]
fn server_frames_decode() {
    let message = decode_one(
        Version::V1_2,
        b"MESSAGE\ndestination:/queue/a\nmessage-id:1\nsubscription:0\nack:1\ncontent-length:2\n\nhi\0",
    );
    assert_eq!(message.command, Command::Message);
    let receipt = decode_one(Version::V1_2, b"RECEIPT\nreceipt-id:77\n\n\0");
    assert_eq!(receipt.command, Command::Receipt);
    let error = decode_one(Version::V1_2, b"ERROR\nmessage:bad\\cthing\n\n\0");
    assert_eq!(error.header("message"), Some("bad:thing"));
}

#[test]
fn every_command_round_trips_through_its_name() {
    for command in Command::ALL {
        assert_eq!(
            Command::from_bytes(command.as_str().as_bytes()),
            Some(command)
        );
        let frame = Frame::new(command).with_header("a", "b");
        assert_eq!(
            decode_one(Version::V1_2, &encoded(&frame, Version::V1_2)),
            frame
        );
    }
    assert_eq!(Command::from_bytes(b"send"), None);
}

// ---- heart-beats and noise between frames ----

#[test]
fn eols_between_frames_are_heartbeats_lf_and_crlf() {
    let decoded = decode_all(Version::V1_2, b"\n\r\n\nDISCONNECT\n\n\0\r\n\n");
    assert_eq!(
        decoded,
        [
            Decoded::Heartbeat,
            Decoded::Heartbeat,
            Decoded::Heartbeat,
            Decoded::Frame(Frame::new(Command::Disconnect)),
            Decoded::Heartbeat,
            Decoded::Heartbeat,
        ]
    );
}

#[test]
fn nuls_between_frames_are_skipped_as_rabbitmq_does() {
    let decoded = decode_all(Version::V1_2, b"\0\0DISCONNECT\n\n\0\0");
    assert_eq!(decoded, [Decoded::Frame(Frame::new(Command::Disconnect))]);
}

#[test]
fn a_lone_cr_waits_and_a_bare_cr_between_frames_is_an_error() {
    let mut decoder = Decoder::default();
    let mut buf = BytesMut::from(&b"\r"[..]);
    assert_eq!(decoder.decode(&mut buf), Ok(None));
    buf.extend_from_slice(b"\n");
    assert_eq!(decoder.decode(&mut buf), Ok(Some(Decoded::Heartbeat)));
    assert_eq!(
        decode_err(Version::V1_2, Limits::default(), b"\rX"),
        FrameError::UnexpectedCarriageReturn
    );
}

#[test]
fn bare_cr_inside_a_header_is_an_error() {
    assert_eq!(
        decode_err(Version::V1_1, Limits::default(), b"SEND\nfoo:a\rb\n\n\0"),
        FrameError::UnexpectedCarriageReturn
    );
}

// ---- escaping ----

#[test]
fn escapes_are_resolved_in_1_1_and_1_2() {
    for version in [Version::V1_1, Version::V1_2] {
        let frame = decode_one(
            version,
            b"SEND\nna\\cme:a\\nb\\cc\\\\d\\re\nplain:x:y\n\n\0",
        );
        assert_eq!(
            headers(&frame),
            [("na:me", "a\nb:c\\d\re"), ("plain", "x:y")]
        );
    }
}

#[test]
fn stomp_1_0_has_no_escapes() {
    let frame = decode_one(Version::V1_0, b"SEND\nfoo:a\\nb\\q\n\n\0");
    assert_eq!(frame.header("foo"), Some("a\\nb\\q"));
}

#[test]
fn undefined_escape_is_fatal() {
    let error = decode_err(Version::V1_2, Limits::default(), b"SEND\nfoo:a\\tb\n\n\0");
    assert!(matches!(
        error,
        FrameError::InvalidEscape {
            escape: Some(b't'),
            ..
        }
    ));
    assert!(error.to_string().contains("'\\t'"), "{error}");
    let trailing = decode_err(Version::V1_1, Limits::default(), b"SEND\nfoo:ab\\\n\n\0");
    assert!(matches!(
        trailing,
        FrameError::InvalidEscape { escape: None, .. }
    ));
}

#[test]
fn escaping_on_encode_depends_on_version_and_command() {
    let frame = Frame::new(Command::Send).with_header("k:1", "v:\\\n\r");
    assert_eq!(
        encoded(&frame, Version::V1_2),
        b"SEND\nk\\c1:v\\c\\\\\\n\\r\n\n\0"
    );
    assert_eq!(
        encoded(&frame, Version::V1_1),
        b"SEND\nk\\c1:v\\c\\\\\\n\\r\n\n\0"
    );
    // 1.0: only what would break the line structure is escaped.
    assert_eq!(
        encoded(&frame, Version::V1_0),
        b"SEND\nk\\c1:v:\\\\n\\r\n\n\0"
    );
    let connected = Frame::new(Command::Connected).with_header("server", "a:b\\c");
    assert_eq!(
        encoded(&connected, Version::V1_2),
        b"CONNECTED\nserver:a:b\\c\n\n\0"
    );
}

#[test]
fn escaped_headers_round_trip_in_1_1_and_1_2() {
    let frame = Frame::new(Command::Message)
        .with_header("destination", "/queue/a:b")
        .with_header("weird\\name", "line1\nline2\r\\end:");
    for version in [Version::V1_1, Version::V1_2] {
        assert_eq!(decode_one(version, &encoded(&frame, version)), frame);
    }
}

#[test]
fn invalid_utf8_in_a_header_is_an_error() {
    let error = decode_err(
        Version::V1_2,
        Limits::default(),
        b"SEND\nfoo:\xff\xfe\n\n\0",
    );
    assert!(matches!(error, FrameError::InvalidUtf8(_)));
}

// ---- headers ----

#[test]
fn repeated_headers_first_wins() {
    let frame = decode_one(Version::V1_2, b"MESSAGE\nfoo:World\nfoo:Hello\n\n\0");
    assert_eq!(frame.header("foo"), Some("World"));
    assert_eq!(headers(&frame), [("foo", "World"), ("foo", "Hello")]);
}

#[test]
fn repeated_content_length_first_wins() {
    let frame = decode_one(
        Version::V1_2,
        b"SEND\ncontent-length:1\ncontent-length:3\n\na\0",
    );
    assert_eq!(frame.body, Bytes::from_static(b"a"));
}

#[test]
fn header_without_colon_is_malformed_in_every_version() {
    for version in Version::ALL {
        let error = decode_err(version, Limits::default(), b"SEND\ndestination\n\n\0");
        assert_eq!(error, FrameError::HeaderWithoutColon("destination".into()));
    }
}

#[test]
fn empty_header_name_and_value_are_accepted() {
    let frame = decode_one(Version::V1_2, b"SEND\n:\nx:\n\n\0");
    assert_eq!(headers(&frame), [("", ""), ("x", "")]);
}

#[test]
fn unknown_command_is_named() {
    let error = decode_err(Version::V1_2, Limits::default(), b"PUBLISH\n\n\0");
    assert_eq!(error, FrameError::UnknownCommand("PUBLISH".into()));
    assert_eq!(error.to_string(), "unknown STOMP command 'PUBLISH'");
    // Reported as soon as the command line is complete, before the frame is.
    let mut decoder = Decoder::default();
    let mut buf = BytesMut::from(&b"GET / HTTP/1.1\r\nHost: x"[..]);
    assert!(matches!(
        decoder.decode(&mut buf),
        Err(FrameError::UnknownCommand(_))
    ));
}

// ---- content-length ----

#[test]
fn content_length_mismatch_is_an_error() {
    let error = decode_err(
        Version::V1_2,
        Limits::default(),
        b"SEND\ncontent-length:2\n\nabc\0",
    );
    assert_eq!(
        error,
        FrameError::MissingNul {
            content_length: 2,
            found: b'c'
        }
    );
}

#[test]
fn invalid_content_length_is_an_error() {
    for value in ["abc", "-1", "", "1.5", "+1"] {
        let bytes = format!("SEND\ncontent-length:{value}\n\n\0");
        let error = decode_err(Version::V1_2, Limits::default(), bytes.as_bytes());
        assert!(
            matches!(error, FrameError::InvalidContentLength(_)),
            "{value}: {error}"
        );
    }
}

#[test]
fn huge_content_length_fails_the_body_limit_at_once() {
    let error = decode_err(
        Version::V1_2,
        Limits::default(),
        b"SEND\ncontent-length:99999999999999999999999\n\n",
    );
    assert!(matches!(
        error,
        FrameError::TooLarge {
            limit: Limit::Body,
            ..
        }
    ));
}

// ---- limits ----

fn small_limits() -> Limits {
    Limits {
        max_frame_size: 10,
        max_header_count: 3,
        max_header_length: 20,
        max_headers_size: 60,
    }
}

fn assert_too_large(bytes: &[u8], expected: Limit) {
    let error = decode_err(Version::V1_2, small_limits(), bytes);
    let FrameError::TooLarge { limit, .. } = error else {
        panic!("{error:?}")
    };
    assert_eq!(limit, expected, "{error}");
    assert!(!error.to_string().is_empty());
}

#[test]
fn limits_at_the_edge_are_accepted() {
    let mut decoder = Decoder::new(small_limits());
    let mut buf = BytesMut::from(
        &b"SEND\na:1\nb:2\nheader-is-20-bytes:x\n\n0123456789\0SEND\ncontent-length:10\n\n0123456789\0"[..],
    );
    for _ in 0..2 {
        let Ok(Some(Decoded::Frame(frame))) = decoder.decode(&mut buf) else {
            panic!("frame expected");
        };
        assert_eq!(frame.body.len(), 10);
    }
}

#[test]
fn body_limit_without_content_length_fails_before_the_nul_arrives() {
    assert_too_large(b"SEND\n\n01234567890", Limit::Body);
}

#[test]
fn body_limit_with_content_length() {
    assert_too_large(b"SEND\ncontent-length:11\n\n", Limit::Body);
}

#[test]
fn header_count_limit() {
    assert_too_large(b"SEND\na:1\nb:2\nc:3\nd:4\n\n\0", Limit::HeaderCount);
}

#[test]
fn header_line_limit_complete_and_partial() {
    assert_too_large(b"SEND\nheader-is-21-bytes:xy\n\n\0", Limit::HeaderLine);
    assert_too_large(b"SEND\nheader-still-incomplete", Limit::HeaderLine);
    assert_too_large(b"SENDSENDSENDSENDSENDSEND", Limit::HeaderLine);
}

#[test]
fn headers_size_limit_complete_and_partial() {
    assert_too_large(
        b"SEND\naaaaaaaaaaaaaaaa:1\nbbbbbbbbbbbbbbbb:2\ncccccccccccccccc:3\n\n\0",
        Limit::Headers,
    );
    assert_too_large(
        b"SEND\naaaaaaaaaaaaaaaa:1\nbbbbbbbbbbbbbbbb:2\ncccccccccccccccccc",
        Limit::Headers,
    );
}

// ---- incomplete input ----

const SAMPLE_STREAM: &[u8] = b"CONNECT\r\naccept-version:1.2\r\nhost:/\r\n\r\n\0\n\
    SEND\ndestination:/queue/a\ncontent-length:3\n\na\0b\0\r\n\
    SEND\ndestination:/queue/a\\cb\n\nbody\0";

fn sample_decoded() -> Vec<Decoded> {
    decode_all(Version::V1_2, SAMPLE_STREAM)
}

#[test]
fn every_split_point_waits_then_decodes_the_same() {
    let expected = sample_decoded();
    assert_eq!(expected.len(), 5);
    for split in 0..=SAMPLE_STREAM.len() {
        let mut decoder = decoder(Version::V1_2);
        let mut buf = BytesMut::from(&SAMPLE_STREAM[..split]);
        let mut got = Vec::new();
        while let Some(decoded) = decoder.decode(&mut buf).expect("prefix decodes") {
            got.push(decoded);
        }
        buf.extend_from_slice(&SAMPLE_STREAM[split..]);
        while let Some(decoded) = decoder.decode(&mut buf).expect("rest decodes") {
            got.push(decoded);
        }
        assert_eq!(got, expected, "split at {split}");
        assert!(buf.is_empty());
    }
}

#[test]
fn byte_at_a_time_decodes_the_same() {
    let mut decoder = decoder(Version::V1_2);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for &byte in SAMPLE_STREAM {
        buf.extend_from_slice(&[byte]);
        while let Some(decoded) = decoder.decode(&mut buf).expect("decodes") {
            got.push(decoded);
        }
    }
    assert_eq!(got, sample_decoded());
}

#[test]
fn incomplete_frame_consumes_nothing() {
    let mut decoder = Decoder::default();
    let mut buf = BytesMut::from(&b"SEND\ndestination:/queue/a\n\nabc"[..]);
    assert_eq!(decoder.decode(&mut buf), Ok(None));
    assert_eq!(&buf[..], b"SEND\ndestination:/queue/a\n\nabc");
}

#[test]
fn body_is_a_slice_of_the_read_buffer() {
    let mut decoder = Decoder::default();
    let mut buf = BytesMut::from(&b"SEND\n\nsome body\0"[..]);
    let start = buf.as_ptr() as usize;
    let Ok(Some(Decoded::Frame(frame))) = decoder.decode(&mut buf) else {
        panic!()
    };
    assert_eq!(frame.body.as_ptr() as usize, start + 6);
}

#[test]
fn long_lines_and_bodies_arriving_a_byte_at_a_time_are_scanned_once() {
    // 100 KiB header line and 1 MiB body, one byte per read: quadratic re-scanning would
    // take minutes here, the remembered scan positions keep it linear.
    let mut stream = b"SEND\nx:".to_vec();
    stream.extend(std::iter::repeat_n(b'v', 100 * 1024 - 2));
    stream.extend_from_slice(b"\n\n");
    stream.extend(std::iter::repeat_n(b'b', 1024 * 1024));
    stream.push(0);
    let mut decoder = decoder(Version::V1_2);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    for &byte in &stream {
        buf.extend_from_slice(&[byte]);
        if let Some(decoded) = decoder.decode(&mut buf).expect("decodes") {
            frames.push(decoded);
        }
    }
    let [Decoded::Frame(frame)] = &frames[..] else {
        panic!("one frame expected, got {}", frames.len())
    };
    assert_eq!(frame.header("x").map(str::len), Some(100 * 1024 - 2));
    assert_eq!(frame.body.len(), 1024 * 1024);
}

#[test]
fn set_version_applies_to_the_next_frame() {
    // A pipelining client sends SEND right behind CONNECT; the session switches to 1.2 after
    // handling CONNECT, before decoding again.
    let mut decoder = Decoder::default();
    let mut buf =
        BytesMut::from(&b"CONNECT\naccept-version:1.2\nlogin:a\\b\n\n\0SEND\nk:a\\cb\n\n\0"[..]);
    let Ok(Some(Decoded::Frame(connect))) = decoder.decode(&mut buf) else {
        panic!()
    };
    assert_eq!(connect.header("login"), Some("a\\b"));
    decoder.set_version(Version::V1_2);
    let Ok(Some(Decoded::Frame(send))) = decoder.decode(&mut buf) else {
        panic!()
    };
    assert_eq!(send.header("k"), Some("a:b"));
}

#[test]
fn version_change_mid_frame_does_not_change_that_frame() {
    let mut decoder = Decoder::default();
    let mut buf = BytesMut::from(&b"SEND\nk:a\\cb\n"[..]);
    assert_eq!(decoder.decode(&mut buf), Ok(None));
    decoder.set_version(Version::V1_2);
    buf.extend_from_slice(b"j:c\\cd\n\n\0");
    let Ok(Some(Decoded::Frame(send))) = decoder.decode(&mut buf) else {
        panic!()
    };
    assert_eq!(headers(&send), [("k", "a\\cb"), ("j", "c\\cd")]);
}

#[test]
fn errors_render_as_readable_messages() {
    let cases: [(&[u8], &str); 4] = [
        (
            b"SEND\ncontent-length:2\n\nabc\0",
            "followed by byte 0x63 instead of NUL",
        ),
        (b"SEND\nfoo\n\n\0", "header 'foo' has no ':'"),
        (b"SEND\ncontent-length:x\n\n\0", "content-length 'x' is not"),
        (
            b"SEND\nk:\\x\n\n\0",
            "invalid escape sequence '\\x' in header 'k:\\x'",
        ),
    ];
    for (bytes, expected) in cases {
        let message = decode_err(Version::V1_2, Limits::default(), bytes).to_string();
        assert!(message.contains(expected), "{message}");
    }
    let too_large = FrameError::TooLarge {
        limit: Limit::Body,
        size: 11,
        max: 10,
    };
    assert_eq!(
        too_large.to_string(),
        "frame body too large: 11 bytes or more, the limit is 10 bytes"
    );
}
