//! Session tests without sockets: frames in, encoded frames out of the outbox.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use warren_core::access::Permissions;
use warren_core::broker::Limits;
use warren_core::Broker;

use super::{Control, Session, SessionConfig};
use crate::codec::{decode_frame, write_method_frame, Frame, Method, FRAME_METHOD};
use crate::outbox::Outbox;

fn broker() -> Arc<Broker> {
    let broker = Broker::new(Limits::default());
    broker
        .add_vhost("/")
        .set_permissions("guest", Permissions::full());
    broker.add_user("guest", "guest", vec![]);
    broker
}

fn method_frame(channel: u16, method: &Method) -> Frame {
    let mut out = BytesMut::new();
    write_method_frame(&mut out, channel, method).expect("encodable");
    decode_frame(&mut out, 0).expect("valid").expect("complete")
}

/// Every method the session wrote since the last call.
fn sent(outbox: &Outbox) -> Vec<(u16, Method)> {
    let mut methods = Vec::new();
    if let Some(drained) = outbox.take_for_write() {
        outbox.write_done(&[]);
        let mut buffer = BytesMut::from(&drained.bytes[..]);
        while let Ok(Some(frame)) = decode_frame(&mut buffer, 0) {
            if frame.frame_type == FRAME_METHOD {
                methods.push((
                    frame.channel,
                    Method::decode(&frame.payload).expect("broker output decodes"),
                ));
            }
        }
    }
    methods
}

fn open_session() -> (Session, Arc<Outbox>) {
    let outbox = Outbox::new(4096);
    let mut session = Session::new(
        broker(),
        SessionConfig::default(),
        Arc::clone(&outbox),
        true,
    );
    let steps = [
        Method::ConnectionStartOk {
            client_properties: Default::default(),
            mechanism: "PLAIN".into(),
            response: b"\0guest\0guest".to_vec(),
            locale: "en_US".into(),
        },
        Method::ConnectionTuneOk {
            channel_max: 0,
            frame_max: 131072,
            heartbeat: 0,
        },
        Method::ConnectionOpen {
            virtual_host: "/".into(),
        },
    ];
    for step in steps {
        assert_eq!(
            session.handle_frame(method_frame(0, &step)),
            Control::Continue
        );
    }
    session.handle_frame(method_frame(1, &Method::ChannelOpen));
    let replies = sent(&outbox);
    assert!(
        matches!(replies.last(), Some((1, Method::ChannelOpenOk))),
        "{replies:?}"
    );
    (session, outbox)
}

#[test]
fn handshake_then_channel_error_closes_only_the_channel() {
    let (mut session, outbox) = open_session();
    let declare = Method::QueueDeclare {
        queue: "missing".into(),
        passive: true,
        durable: false,
        exclusive: false,
        auto_delete: false,
        no_wait: false,
        arguments: Default::default(),
    };
    assert_eq!(
        session.handle_frame(method_frame(1, &declare)),
        Control::Continue
    );
    let replies = sent(&outbox);
    match &replies[..] {
        [(
            1,
            Method::ChannelClose {
                reply_code: 404,
                reply_text,
                class_id: 50,
                method_id: 10,
            },
        )] => {
            assert_eq!(reply_text, "NOT_FOUND - no queue 'missing' in vhost '/'");
        }
        other => panic!("unexpected replies {other:?}"),
    }
    // Everything but close-ok is ignored on the closing channel; then it can be reopened.
    session.handle_frame(method_frame(
        1,
        &Method::BasicQos {
            prefetch_size: 0,
            prefetch_count: 1,
            global: false,
        },
    ));
    assert!(sent(&outbox).is_empty());
    session.handle_frame(method_frame(1, &Method::ChannelCloseOk));
    session.handle_frame(method_frame(1, &Method::ChannelOpen));
    assert!(matches!(&sent(&outbox)[..], [(1, Method::ChannelOpenOk)]));
}

#[test]
fn wrong_password_is_refused_with_403_before_tune() {
    let outbox = Outbox::new(4096);
    let mut session = Session::new(
        broker(),
        SessionConfig::default(),
        Arc::clone(&outbox),
        true,
    );
    sent(&outbox);
    let start_ok = Method::ConnectionStartOk {
        client_properties: Default::default(),
        mechanism: "PLAIN".into(),
        response: b"\0guest\0wrong".to_vec(),
        locale: "en_US".into(),
    };
    assert_eq!(
        session.handle_frame(method_frame(0, &start_ok)),
        Control::Close
    );
    match &sent(&outbox)[..] {
        [(
            0,
            Method::ConnectionClose {
                reply_code: 403,
                reply_text,
                class_id: 0,
                method_id: 0,
            },
        )] => {
            assert!(
                reply_text.starts_with("ACCESS_REFUSED - Login was refused"),
                "{reply_text}"
            );
        }
        other => panic!("unexpected replies {other:?}"),
    }
}

/// A session offering PLAIN and EXTERNAL, for a client with `certificate` (DER); returns
/// the mechanisms connection.start offered and the session's answer to start-ok with
/// `mechanism`.
fn external_login(certificate: Option<&[u8]>, mechanism: &str) -> (String, Vec<(u16, Method)>) {
    let outbox = Outbox::new(4096);
    let config = SessionConfig {
        auth_mechanisms: vec!["PLAIN".into(), "EXTERNAL".into()],
        ..SessionConfig::default()
    };
    let mut session =
        Session::with_certificate(broker(), config, Arc::clone(&outbox), true, certificate);
    let offered = match &sent(&outbox)[..] {
        [(0, Method::ConnectionStart { mechanisms, .. })] => {
            String::from_utf8(mechanisms.clone()).expect("text")
        }
        other => panic!("expected connection.start, got {other:?}"),
    };
    let start_ok = Method::ConnectionStartOk {
        client_properties: Default::default(),
        mechanism: mechanism.into(),
        response: Vec::new(),
        locale: "en_US".into(),
    };
    session.handle_frame(method_frame(0, &start_ok));
    (offered, sent(&outbox))
}

#[test]
fn external_is_offered_only_with_a_client_certificate() {
    let (offered, replies) = external_login(None, "EXTERNAL");
    assert_eq!(offered, "PLAIN");
    assert!(
        matches!(
            &replies[..],
            [(0, Method::ConnectionClose { reply_code: 503, reply_text, .. })]
                if reply_text == "COMMAND_INVALID - unknown authentication mechanism 'EXTERNAL'"
        ),
        "{replies:?}"
    );
}

#[test]
fn external_with_a_certificate_that_names_nobody_is_refused_with_403() {
    // Not a certificate at all: no name can be read from it.
    let (offered, replies) = external_login(Some(b"not a certificate"), "EXTERNAL");
    assert_eq!(offered, "PLAIN EXTERNAL");
    assert!(
        matches!(
            &replies[..],
            [(0, Method::ConnectionClose { reply_code: 403, reply_text, .. })]
                if reply_text == "ACCESS_REFUSED - Login was refused using authentication \
                                  mechanism EXTERNAL. For details see the broker logfile."
        ),
        "{replies:?}"
    );
}

#[test]
fn publisher_confirms_are_coalesced_per_batch() {
    let (mut session, outbox) = open_session();
    session.handle_frame(method_frame(1, &Method::ConfirmSelect { no_wait: false }));
    let publish = Method::BasicPublish {
        exchange: "".into(),
        routing_key: "nowhere".into(),
        mandatory: false,
        immediate: false,
    };
    for _ in 0..3 {
        session.handle_frame(method_frame(1, &publish));
        let mut header = BytesMut::new();
        header.extend_from_slice(&[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        session.handle_frame(Frame {
            frame_type: 2,
            channel: 1,
            payload: header.freeze(),
        });
    }
    session.end_of_batch();
    let replies = sent(&outbox);
    assert_eq!(
        replies,
        vec![
            (1, Method::ConfirmSelectOk),
            (
                1,
                Method::BasicAck {
                    delivery_tag: 3,
                    multiple: true
                }
            )
        ]
    );
}

proptest! {
    /// Whatever a client sends after the handshake, the session answers without panicking,
    /// and whatever it writes is valid AMQP.
    #[test]
    fn arbitrary_frames_never_panic(frames in proptest::collection::vec(
        (prop_oneof![Just(1u8), Just(2u8), Just(3u8), Just(8u8), any::<u8>()],
         0u16..4,
         proptest::collection::vec(any::<u8>(), 0..64)),
        1..40,
    )) {
        let (mut session, outbox) = open_session();
        for (frame_type, channel, payload) in frames {
            let frame = Frame { frame_type, channel, payload: Bytes::from(payload) };
            if session.handle_frame(frame) == Control::Close {
                break;
            }
            session.end_of_batch();
        }
        let _ = sent(&outbox);
        session.terminate();
    }

    /// Valid methods in random order, with random fields, never panic either.
    #[test]
    fn arbitrary_method_sequences_never_panic(choices in proptest::collection::vec((0u8..14, 0u16..3, any::<u64>(), any::<bool>()), 1..60)) {
        let (mut session, outbox) = open_session();
        for (choice, channel, number, flag) in choices {
            let name = format!("q{}", number % 3);
            let method = match choice {
                0 => Method::ChannelOpen,
                1 => Method::QueueDeclare { queue: name, passive: flag, durable: false, exclusive: flag, auto_delete: false, no_wait: false, arguments: Default::default() },
                2 => Method::BasicPublish { exchange: "".into(), routing_key: name, mandatory: flag, immediate: false },
                3 => Method::BasicConsume { queue: name, consumer_tag: String::new(), no_local: false, no_ack: flag, exclusive: false, no_wait: false, arguments: Default::default() },
                4 => Method::BasicAck { delivery_tag: number % 5, multiple: flag },
                5 => Method::BasicNack { delivery_tag: number % 5, multiple: flag, requeue: true },
                6 => Method::BasicGet { queue: name, no_ack: flag },
                7 => Method::QueueDelete { queue: name, if_unused: flag, if_empty: false, no_wait: false },
                8 => Method::ChannelClose { reply_code: 200, reply_text: String::new(), class_id: 0, method_id: 0 },
                9 => Method::BasicQos { prefetch_size: 0, prefetch_count: (number % 3) as u16, global: flag },
                10 => Method::TxSelect,
                11 => Method::TxCommit,
                12 => Method::ConfirmSelect { no_wait: flag },
                _ => Method::BasicRecover { requeue: true },
            };
            if session.handle_frame(method_frame(channel, &method)) == Control::Close {
                break;
            }
            if choice == 2 {
                let header = Bytes::from_static(&[0, 60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0]);
                session.handle_frame(Frame { frame_type: 2, channel, payload: header });
                session.handle_frame(Frame { frame_type: 3, channel, payload: Bytes::from_static(b"x") });
            }
            session.end_of_batch();
        }
        let _ = sent(&outbox);
        session.terminate();
    }
}

#[test]
fn frames_after_the_clients_close_are_dropped_and_the_socket_lingers() {
    let (mut session, outbox) = open_session();
    let close = Method::ConnectionClose {
        reply_code: 200,
        reply_text: "bye".into(),
        class_id: 0,
        method_id: 0,
    };
    assert_eq!(
        session.handle_frame(method_frame(0, &close)),
        Control::AwaitSocketClose
    );
    assert!(matches!(
        &sent(&outbox)[..],
        [(0, Method::ConnectionCloseOk)]
    ));
    assert_eq!(session.heartbeat(), None, "no heartbeats after close-ok");
    // A publish and a second close the client wrote before it saw close-ok: dropped.
    let publish = Method::BasicPublish {
        exchange: "".into(),
        routing_key: "late".into(),
        mandatory: false,
        immediate: false,
    };
    for (channel, method) in [(1, &publish), (0, &close), (0, &Method::ConnectionCloseOk)] {
        assert_eq!(
            session.handle_frame(method_frame(channel, method)),
            Control::Continue
        );
    }
    assert!(sent(&outbox).is_empty());
}

#[test]
fn closing_timeout_is_the_heartbeat_when_shorter() {
    let (mut session, _outbox) = open_session();
    let limit = std::time::Duration::from_secs(30);
    assert_eq!(session.closing_timeout(limit), limit, "heartbeats off");
    session.heartbeat = 5;
    assert_eq!(session.closing_timeout(limit).as_secs(), 5);
    session.heartbeat = 60;
    assert_eq!(session.closing_timeout(limit), limit);
}
