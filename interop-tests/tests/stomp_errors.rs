//! STOMP errors from raw frames and refused operations: each gets an ERROR frame with a
//! `message` header and an explaining body, then the connection closes; other connections
//! go on undisturbed.

use std::time::Duration;

use warren_core::access::Permissions;
use warren_interop_tests::stomp::{ReceivedFrame, StompClient};
use warren_interop_tests::TestBroker;

/// Connects at 1.2, writes `bytes` as they are and returns the ERROR the broker answers with
/// (after checking the connection closes).
async fn error_for_raw(broker: &TestBroker, bytes: &[u8]) -> ReceivedFrame {
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client.write_raw(bytes).await;
    client.expect_error().await
}

#[tokio::test]
async fn malformed_frames_are_errors_that_close_only_their_connection() {
    let broker = TestBroker::start().await;
    // A bystander with a subscription, to show nothing else is affected.
    let mut bystander = StompClient::connect(broker.stomp_addr(), "1.2").await;
    bystander.subscribe("/queue/calm", "s", "auto", &[]).await;

    let cases: [(&[u8], &str, &str); 5] = [
        (
            b"BOGUS\n\n\0",
            "Bad command",
            "Could not interpret command \"BOGUS\"\n",
        ),
        (
            b"SEND\ndestination /queue/x\n\n\0",
            "Malformed frame",
            "header 'destination /queue/x' has no ':' between name and value",
        ),
        (
            b"SEND\ndestination:/queue/\\t\n\n\0",
            "Malformed frame",
            "invalid escape sequence",
        ),
        (
            b"SEND\ndestination:/queue/x\ncontent-length:abc\n\n\0",
            "Malformed frame",
            "content-length 'abc'",
        ),
        (
            b"SEND\ndestination:/queue/x\ncontent-length:1\n\nab\0",
            "Malformed frame",
            "instead of NUL",
        ),
    ];
    for (bytes, message, detail) in cases {
        let error = error_for_raw(&broker, bytes).await;
        assert_eq!(error.header("message"), Some(message));
        assert!(
            error.text().contains(detail),
            "{:?}: {}",
            String::from_utf8_lossy(bytes),
            error.text()
        );
    }

    let mut producer = StompClient::connect(broker.stomp_addr(), "1.2").await;
    producer.send("/queue/calm", "still fine", &[]).await;
    assert_eq!(bystander.expect_message().await.text(), "still fine");
}

#[tokio::test]
async fn frames_and_headers_over_the_limits_are_refused() {
    let broker = TestBroker::start_with(&[
        ("stomp.max_frame_size", "1024"),
        ("stomp.max_headers", "4"),
        ("stomp.max_header_length", "200"),
    ])
    .await;
    let mut big = b"SEND\ndestination:/queue/big\n\n".to_vec();
    big.extend(std::iter::repeat_n(b'x', 2000));
    big.push(0);
    let error = error_for_raw(&broker, &big).await;
    assert_eq!(error.header("message"), Some("Frame too large"));
    assert!(error.text().contains("limit is 1024"), "{}", error.text());

    let many = b"SEND\ndestination:/queue/x\na:1\nb:2\nc:3\nd:4\n\n\0";
    let error = error_for_raw(&broker, many).await;
    assert_eq!(error.header("message"), Some("Frame too large"));
    assert!(
        error.text().contains("more than the limit of 4"),
        "{}",
        error.text()
    );

    let mut long = b"SEND\ndestination:/queue/x\nx-long:".to_vec();
    long.extend(std::iter::repeat_n(b'y', 300));
    long.extend_from_slice(b"\n\n\0");
    let error = error_for_raw(&broker, &long).await;
    assert_eq!(error.header("message"), Some("Frame too large"));
    assert!(error.text().contains("header line"), "{}", error.text());
}

#[tokio::test]
async fn before_login_frames_are_held_to_the_smaller_limit() {
    let broker = TestBroker::start_with(&[("stomp.max_frame_size_unauthenticated", "100")]).await;
    let mut client = StompClient::open(broker.stomp_addr()).await;
    let mut connect = b"CONNECT\naccept-version:1.2\n\n".to_vec();
    connect.extend(std::iter::repeat_n(b'z', 500));
    connect.push(0);
    client.write_raw(&connect).await;
    let error = client.expect_error().await;
    assert_eq!(error.header("message"), Some("Frame too large"));
}

#[tokio::test]
async fn bad_destinations_and_missing_headers_are_explained() {
    let broker = TestBroker::start().await;
    // (command, headers, ERROR message header, part of the ERROR body)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str, &'a str);
    let cases: [Case; 6] = [
        (
            "SEND",
            &[],
            "Missing destination",
            "'SEND' must include a 'destination' header\n",
        ),
        (
            "SEND",
            &[("destination", "/bogus/x")],
            "Unknown destination",
            "'/bogus/x' is not a valid destination.",
        ),
        (
            "SEND",
            &[("destination", "/queue/a/b")],
            "Invalid destination",
            "'/a/b' is not a valid queue destination\n",
        ),
        (
            "SUBSCRIBE",
            &[("destination", "/temp-queue/t"), ("id", "s")],
            "Invalid destination",
            "is not a valid destination for 'SUBSCRIBE'",
        ),
        (
            "SUBSCRIBE",
            &[("destination", "/queue/q"), ("ack", "sometimes")],
            "Invalid header",
            "header 'ack' must be auto, client or client-individual",
        ),
        (
            "UNSUBSCRIBE",
            &[("id", "never")],
            "No subscription found",
            "Subscription to id='never' not found.",
        ),
    ];
    for (command, headers, message, detail) in cases {
        let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
        let mut all = vec![("receipt", "r")];
        all.extend_from_slice(headers);
        client.write_frame(command, &all, b"body").await;
        let error = client.expect_error().await;
        assert_eq!(
            error.header("message"),
            Some(message),
            "{command} {headers:?}"
        );
        assert_eq!(error.header("receipt-id"), Some("r"));
        assert_eq!(error.header("content-type"), Some("text/plain"));
        assert!(error.text().contains(detail), "{}", error.text());
    }
}

#[tokio::test]
async fn permissions_are_enforced_with_rabbitmq_texts() {
    let broker = TestBroker::start().await;
    let core = broker.broker();
    core.add_user("limited", "secret", vec![]);
    core.set_permissions(
        "limited",
        "/",
        Permissions::new("^mine$", "^(mine|amq\\.default)?$", "^mine$").unwrap(),
    )
    .unwrap();
    let login = [
        ("accept-version", "1.2"),
        ("host", "/"),
        ("login", "limited"),
        ("passcode", "secret"),
    ];
    let (mut client, _) = StompClient::connect_with(broker.stomp_addr(), &login).await;
    client.send("/queue/mine", "ok", &[]).await;
    client
        .write_frame("SEND", &[("destination", "/queue/theirs")], b"x")
        .await;
    let error = client.expect_error().await;
    assert_eq!(error.header("message"), Some("access_refused"));
    assert_eq!(
        error.text(),
        "configure access to queue 'theirs' in vhost '/' refused for user 'limited'"
    );

    let (mut client, _) = StompClient::connect_with(broker.stomp_addr(), &login).await;
    client
        .write_frame("SEND", &[("destination", "/topic/t")], b"x")
        .await;
    let error = client.expect_error().await;
    assert_eq!(error.header("message"), Some("access_refused"));
    assert_eq!(
        error.text(),
        "write access to exchange 'amq.topic' in vhost '/' refused for user 'limited'"
    );

    // user-id must be the logged-in user.
    let mut guest = StompClient::connect(broker.stomp_addr(), "1.2").await;
    guest
        .write_frame(
            "SEND",
            &[("destination", "/queue/q"), ("user-id", "someone-else")],
            b"x",
        )
        .await;
    let error = guest.expect_error().await;
    assert_eq!(error.header("message"), Some("access_refused"));
}

#[tokio::test]
async fn server_commands_from_a_client_and_unknown_acks_are_errors() {
    let broker = TestBroker::start().await;
    let error = error_for_raw(&broker, b"MESSAGE\ndestination:/queue/x\n\n\0").await;
    assert_eq!(error.header("message"), Some("Bad command"));
    let error = error_for_raw(&broker, b"ACK\nid:T_s@@session@@42\n\n\0").await;
    assert_eq!(error.header("message"), Some("Message not found"));
    let error = error_for_raw(&broker, b"ACK\nid:garbage\n\n\0").await;
    assert_eq!(error.header("message"), Some("Invalid header"));
    let error = error_for_raw(&broker, b"ACK\n\n\0").await;
    assert_eq!(error.header("message"), Some("Missing header"));
    // The queue's unacked message went back when the erroring connection closed.
    let mut client = StompClient::connect(broker.stomp_addr(), "1.2").await;
    client.send("/queue/back", "m", &[]).await;
    client.subscribe("/queue/back", "s", "client", &[]).await;
    client.expect_message().await;
    client.write_raw(b"NOPE\n\n\0").await;
    client.expect_error().await;
    let queue = broker.broker().vhost("/").unwrap().queue("back").unwrap();
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(2), || queue.stats().ready == 1).await
    );
}

/// Reads raw bytes up to and including the next NUL (the end of a frame).
async fn read_raw_frame(stream: &mut tokio::net::TcpStream) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut frame = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut byte))
            .await
            .expect("the broker answers in time")
            .expect("read");
        assert_eq!(
            read,
            1,
            "stream ended after {:?}",
            String::from_utf8_lossy(&frame)
        );
        frame.push(byte[0]);
        if byte[0] == 0 {
            return frame;
        }
    }
}

/// The ERROR frame Warren sends for `message` and `body`, byte for byte.
fn error_frame(message: &str, body: &str) -> Vec<u8> {
    format!(
        "ERROR\nmessage:{message}\ncontent-type:text/plain\nversion:1.0,1.1,1.2\ncontent-length:{}\n\n{body}\0",
        body.len()
    )
    .into_bytes()
}

#[tokio::test]
async fn error_frames_carry_rabbitmqs_texts_byte_for_byte() {
    use tokio::io::AsyncWriteExt;
    let broker = TestBroker::start().await;
    // (what the client sends after logging in, the ERROR's message header, its body): the
    // texts RabbitMQ's STOMP test suite checks (parsing.py, errors.py, connect_disconnect.py).
    let cases: [(&[u8], &str, &str); 8] = [
        (
            b"WRONGCOMMAND\ndestination:a\nexchange:amq.fanout\n\n\0",
            "Bad command",
            "Could not interpret command \"WRONGCOMMAND\"\n",
        ),
        (
            b"SEND\ndestination:/queue/bah/baz\n\nx\0",
            "Invalid destination",
            "'/bah/baz' is not a valid queue destination\n",
        ),
        (
            b"SEND\ndestination:/topic\n\nx\0",
            "Invalid destination",
            "'' is not a valid topic destination\n",
        ),
        (
            b"SEND\ndestination:/exchange//foo\n\nx\0",
            "Invalid destination",
            "'//foo' is not a valid exchange destination\n",
        ),
        (
            b"SEND\ndestination:\n\nx\0",
            "Invalid destination",
            "Destination cannot be blank",
        ),
        (
            b"SEND\n\nx\0",
            "Missing destination",
            "'SEND' must include a 'destination' header\n",
        ),
        (
            b"SUBSCRIBE\nid:s\n\n\0",
            "Missing destination",
            "'SUBSCRIBE' must include a 'destination' header\n",
        ),
        (
            b"SEND\ndestination:/something/interesting\n\nx\0",
            "Unknown destination",
            "'/something/interesting' is not a valid destination.\nValid destination types are: /temp-queue, /exchange, /topic, /queue, /amq/queue, /reply-queue/.\n",
        ),
    ];
    for (request, message, body) in cases {
        let mut stream = tokio::net::TcpStream::connect(broker.stomp_addr())
            .await
            .expect("connects");
        stream
            .write_all(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0")
            .await
            .expect("CONNECT");
        let connected = read_raw_frame(&mut stream).await;
        assert!(connected.starts_with(b"CONNECTED\n"), "{connected:?}");
        stream.write_all(request).await.expect("request");
        let error = read_raw_frame(&mut stream).await;
        assert_eq!(
            String::from_utf8_lossy(&error),
            String::from_utf8_lossy(&error_frame(message, body)),
            "{}",
            String::from_utf8_lossy(request)
        );
    }

    // An unsupported version, before login.
    let mut stream = tokio::net::TcpStream::connect(broker.stomp_addr())
        .await
        .expect("connects");
    stream
        .write_all(b"CONNECT\naccept-version:100.1\nhost:/\nlogin:guest\npasscode:guest\n\n\0")
        .await
        .expect("CONNECT");
    assert_eq!(
        String::from_utf8_lossy(&read_raw_frame(&mut stream).await),
        String::from_utf8_lossy(&error_frame(
            "Version mismatch",
            "Supported versions are 1.0,1.1,1.2\n"
        ))
    );
    broker.shutdown().await;
}
