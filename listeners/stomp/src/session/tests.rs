//! Session tests without sockets: frames in, the outbox's bytes decoded back into frames.

use std::sync::Arc;

use bytes::BytesMut;
use warren_core::access::Permissions;
use warren_core::broker::Limits as BrokerLimits;
use warren_core::Broker;

use super::*;
use crate::codec::{Command, Decoded, Decoder, Frame};

fn broker() -> Arc<Broker> {
    let broker = Broker::new(BrokerLimits::default());
    let vhost = broker.add_vhost("/");
    broker.add_user("guest", "guest", vec![]);
    vhost.set_permissions("guest", Permissions::full());
    broker
}

struct Harness {
    session: Session,
    outbox: Arc<Outbox>,
    decoder: Decoder,
    pending: BytesMut,
}

impl Harness {
    fn new(broker: &Arc<Broker>) -> Harness {
        Self::with_config(broker, SessionConfig::default())
    }

    fn with_config(broker: &Arc<Broker>, config: SessionConfig) -> Harness {
        let outbox = Outbox::new();
        let session = Session::new(Arc::clone(broker), config, Arc::clone(&outbox), true);
        Harness {
            session,
            outbox,
            decoder: Decoder::default(),
            pending: BytesMut::new(),
        }
    }

    fn frame(&mut self, command: Command, headers: &[(&str, &str)], body: &str) -> Control {
        let frame = headers
            .iter()
            .fold(Frame::new(command), |f, (k, v)| f.with_header(*k, *v))
            .with_body(body.to_string());
        self.session.handle_frame(frame)
    }

    /// Every frame the session wrote since the last call.
    fn replies(&mut self) -> Vec<Frame> {
        if let Some(drained) = self.outbox.drain() {
            self.pending.extend_from_slice(&drained.bytes);
        }
        self.decoder.set_version(self.session.version());
        let mut out = Vec::new();
        while let Some(decoded) = self
            .decoder
            .decode(&mut self.pending)
            .expect("valid output")
        {
            if let Decoded::Frame(frame) = decoded {
                out.push(frame);
            }
        }
        out
    }

    fn connect(&mut self) {
        self.frame(
            Command::Connect,
            &[("accept-version", "1.2"), ("host", "/")],
            "",
        );
        let replies = self.replies();
        assert_eq!(replies[0].command, Command::Connected, "{replies:?}");
    }
}

#[test]
fn connect_negotiates_version_and_heartbeats() {
    let broker = broker();
    let mut h = Harness::new(&broker);
    h.frame(
        Command::Stomp,
        &[
            ("accept-version", "1.0,1.1"),
            ("heart-beat", "500,3000"),
            ("login", "guest"),
            ("passcode", "guest"),
        ],
        "",
    );
    let connected = &h.replies()[0];
    assert_eq!(connected.command, Command::Connected);
    assert_eq!(connected.header("version"), Some("1.1"));
    assert_eq!(connected.header("heart-beat"), Some("3000,1000"));
    assert_eq!(h.session.heartbeat(), (3000, 1000));
}

#[test]
fn bad_login_and_frames_before_connect_get_an_error_and_close() {
    let broker = broker();
    let mut h = Harness::new(&broker);
    let control = h.frame(
        Command::Connect,
        &[("login", "guest"), ("passcode", "wrong")],
        "",
    );
    assert_eq!(control, Control::Close);
    let error = &h.replies()[0];
    assert_eq!(error.command, Command::Error);
    assert_eq!(error.header("message"), Some("Bad CONNECT"));
    assert_eq!(&error.body[..], b"Access refused for user 'guest'");

    let mut h = Harness::new(&broker);
    let control = h.frame(Command::Send, &[("destination", "/queue/q")], "x");
    assert_eq!(control, Control::Close);
    assert_eq!(h.replies()[0].header("message"), Some("Illegal command"));
}

#[test]
fn implicit_connect_logs_in_with_the_defaults() {
    let broker = broker();
    let config = SessionConfig {
        implicit_connect: true,
        ..SessionConfig::default()
    };
    let mut h = Harness::with_config(&broker, config);
    let control = h.frame(
        Command::Send,
        &[("destination", "/queue/implicit"), ("receipt", "r")],
        "x",
    );
    assert_eq!(control, Control::Continue);
    let replies = h.replies();
    assert_eq!(replies.len(), 1, "no CONNECTED for an implicit connect");
    assert_eq!(replies[0].command, Command::Receipt);
    let vhost = broker.vhost("/").unwrap();
    assert_eq!(vhost.queue("implicit").unwrap().message_count(), 1);
}

#[test]
fn a_certificate_that_names_nobody_leaves_the_default_login() {
    // As RabbitMQ's ssl_login_name: no name in the certificate, no certificate login.
    let broker = broker();
    let config = SessionConfig {
        ssl_cert_login: Some(LoginFrom::CommonName),
        default_user: None,
        ..SessionConfig::default()
    };
    let mut h = Harness::with_config(&broker, config);
    h.session.set_tls(true);
    h.session.set_certificate(b"not a certificate");
    assert_eq!(
        h.frame(Command::Connect, &[("accept-version", "1.2")], ""),
        Control::Close
    );
    let replies = h.replies();
    assert_eq!(replies[0].command, Command::Error);
    assert_eq!(
        replies[0].header("message"),
        Some("Bad CONNECT"),
        "{replies:?}"
    );
}

#[test]
fn send_then_subscribe_delivers_with_headers_and_client_ack_settles() {
    let broker = broker();
    let mut h = Harness::new(&broker);
    h.connect();
    h.frame(
        Command::Send,
        &[
            ("destination", "/queue/work"),
            ("content-type", "text/plain"),
            ("x-custom", "a:b"),
        ],
        "hello",
    );
    h.frame(
        Command::Subscribe,
        &[
            ("destination", "/queue/work"),
            ("id", "s1"),
            ("ack", "client-individual"),
        ],
        "",
    );
    let message = h.replies().pop().unwrap();
    assert_eq!(message.command, Command::Message);
    assert_eq!(message.header("destination"), Some("/queue/work"));
    assert_eq!(message.header("subscription"), Some("s1"));
    assert_eq!(message.header("content-type"), Some("text/plain"));
    assert_eq!(message.header("x-custom"), Some("a:b"));
    assert_eq!(&message.body[..], b"hello");
    let ack = message.header("ack").unwrap().to_string();
    assert_eq!(message.header("message-id"), Some(ack.as_str()));
    let queue = broker.vhost("/").unwrap().queue("work").unwrap();
    assert_eq!(queue.stats().unacknowledged, 1);
    h.frame(Command::Ack, &[("id", &ack), ("receipt", "a1")], "");
    assert_eq!(h.replies()[0].header("receipt-id"), Some("a1"));
    assert_eq!(queue.stats().unacknowledged, 0);
    // The same tag again is unknown: ERROR, close.
    let control = h.frame(Command::Ack, &[("id", &ack), ("receipt", "a2")], "");
    assert_eq!(control, Control::Close);
    let error = h.replies().pop().unwrap();
    assert_eq!(error.header("message"), Some("Message not found"));
    assert_eq!(error.header("receipt-id"), Some("a2"));
}

#[test]
fn unknown_destination_is_an_error_and_releases_unacked_messages() {
    let broker = broker();
    let mut h = Harness::new(&broker);
    h.connect();
    h.frame(Command::Send, &[("destination", "/queue/held")], "m");
    h.frame(
        Command::Subscribe,
        &[
            ("destination", "/queue/held"),
            ("id", "s"),
            ("ack", "client"),
        ],
        "",
    );
    let queue = broker.vhost("/").unwrap().queue("held").unwrap();
    assert_eq!(queue.stats().unacknowledged, 1);
    let control = h.frame(Command::Send, &[("destination", "/nowhere/x")], "");
    assert_eq!(control, Control::Close);
    let error = h.replies().pop().unwrap();
    assert_eq!(error.header("message"), Some("Unknown destination"));
    let stats = queue.stats();
    assert_eq!(
        (stats.ready, stats.unacknowledged, stats.consumers),
        (1, 0, 0)
    );
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    fn command() -> impl Strategy<Value = Command> {
        proptest::sample::select(Command::ALL.to_vec())
    }

    fn header() -> impl Strategy<Value = (String, String)> {
        let names = proptest::sample::select(vec![
            "destination",
            "id",
            "ack",
            "receipt",
            "transaction",
            "message-id",
            "prefetch-count",
            "durable",
            "persistent",
            "reply-to",
            "priority",
            "expiration",
            "x-max-length",
            "x-queue-name",
            "requeue",
            "accept-version",
            "heart-beat",
        ]);
        let values = proptest::sample::select(vec![
            "/queue/a",
            "/topic/t.*",
            "/exchange/amq.direct/k",
            "/exchange/missing",
            "/amq/queue/a",
            "/temp-queue/r",
            "/reply-queue/x",
            "/bogus",
            "",
            "s1",
            "client",
            "client-individual",
            "auto",
            "true",
            "-1",
            "3",
            "T_s1@@session@@1",
            "1.2",
            "1.0,1.1",
            "100,100",
            "x,y",
        ]);
        (names, values).prop_map(|(n, v)| (n.to_string(), v.to_string()))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// Whatever a client sends, the session answers without panicking, and once it sent
        /// an ERROR it is closed and has released everything it held.
        #[test]
        fn arbitrary_frame_sequences_never_panic_and_errors_close(
            frames in proptest::collection::vec(
                (command(), proptest::collection::vec(header(), 0..6)),
                1..12,
            )
        ) {
            let broker = broker();
            let mut h = Harness::new(&broker);
            h.connect();
            for (command, headers) in frames {
                let frame = Frame { command, headers, body: bytes::Bytes::from_static(b"b") };
                let control = h.session.handle_frame(frame);
                let replies = h.replies();
                if control == Control::Close {
                    prop_assert!(h.session.is_closed());
                    break;
                }
                prop_assert!(replies.iter().all(|f| f.command != Command::Error
                    || f.header("message") == Some("Server cancelled subscription")));
            }
            h.session.terminate();
            for queue in broker.vhost("/").unwrap().queues() {
                let stats = queue.stats();
                prop_assert_eq!(stats.unacknowledged, 0);
                prop_assert_eq!(stats.consumers, 0);
            }
        }
    }
}

#[test]
fn stream_subscription_headers_become_consumer_arguments_as_rabbitmq_reads_them() {
    use warren_core::value::Value;
    let arguments = |headers: &[(&str, &str)]| {
        let frame = headers
            .iter()
            .fold(Frame::new(Command::Subscribe), |f, (k, v)| {
                f.with_header(*k, *v)
            });
        super::subscribe::stream_arguments(&frame)
    };
    let offset = |text: &str| {
        arguments(&[("x-stream-offset", text)])
            .get("x-stream-offset")
            .cloned()
    };
    assert_eq!(offset("first"), Some(Value::string("first")));
    assert_eq!(offset("next"), Some(Value::string("next")));
    assert_eq!(offset("offset=5"), Some(Value::I64(5)));
    assert_eq!(
        offset("timestamp=1700000000"),
        Some(Value::Timestamp(1_700_000_000))
    );
    assert_eq!(offset("7D"), None, "not a form the STOMP plugin takes");
    let filtered = arguments(&[
        ("x-stream-filter", "red,blue"),
        ("x-stream-match-unfiltered", "true"),
    ]);
    assert_eq!(
        filtered.get("x-stream-filter"),
        Some(&Value::Array(vec![
            Value::string("red"),
            Value::string("blue")
        ]))
    );
    assert_eq!(
        filtered.get("x-stream-match-unfiltered"),
        Some(&Value::Bool(true))
    );
    assert!(arguments(&[]).is_empty());
}
