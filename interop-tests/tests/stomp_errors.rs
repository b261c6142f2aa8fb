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
            "Malformed frame",
            "unknown STOMP command 'BOGUS'",
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
            "Missing header",
            "SEND must include a 'destination' header",
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
            "'/queue/a/b' is not a valid queue destination",
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
