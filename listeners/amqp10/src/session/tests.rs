//! The connection state machine driven without sockets: bytes in, frames out.

use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use fe2o3_amqp_types::definitions::{
    AmqpError, ConnectionError, ErrorCondition, Handle, ReceiverSettleMode, Role, SenderSettleMode,
};
use fe2o3_amqp_types::messaging::{DeliveryState, Source, Target, TargetArchetype};
use fe2o3_amqp_types::performatives::{
    Attach, Begin, ChannelMax, Flow, MaxFrameSize, Open, Performative, Transfer,
};
use fe2o3_amqp_types::primitives::Binary;
use fe2o3_amqp_types::sasl::SaslInit;
use warren_core::access::Permissions;
use warren_core::broker::Limits;
use warren_core::message::Message;
use warren_core::value::Table;
use warren_core::vhost::{Actor, QueueDeclare, BROKER_CONNECTION};
use warren_core::Broker;

use super::{Amqp10Config, Connection, Control};
use crate::codec::{
    decode_frame, encode_amqp_frame, encode_sasl_frame, FrameBody, PROTOCOL_HEADER_AMQP,
    PROTOCOL_HEADER_SASL,
};

fn broker() -> Arc<Broker> {
    let broker = Broker::new(Limits::default());
    let vhost = broker.add_vhost("/");
    broker.add_user("guest", "guest", vec![]);
    vhost.set_permissions("guest", Permissions::full());
    vhost
        .declare_queue(
            Actor {
                user: "guest",
                connection_id: BROKER_CONNECTION,
            },
            QueueDeclare {
                name: "q".into(),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: Table::new(),
            },
        )
        .unwrap();
    broker
}

struct Harness {
    broker: Arc<Broker>,
    connection: Connection,
}

impl Harness {
    fn new(config: Amqp10Config) -> Harness {
        let broker = broker();
        let connection = Connection::new(Arc::clone(&broker), Arc::new(config), true);
        Harness { broker, connection }
    }

    /// SASL PLAIN as `user`/`password`; returns what the connection decided.
    fn login(&mut self, user: &str, password: &str) -> Control {
        assert_eq!(
            self.connection.start(PROTOCOL_HEADER_SASL),
            Control::Continue
        );
        self.connection.out.clear();
        let mut input = BytesMut::new();
        let mut response = vec![0];
        response.extend_from_slice(user.as_bytes());
        response.push(0);
        response.extend_from_slice(password.as_bytes());
        encode_sasl_frame(
            &mut input,
            &SaslInit {
                mechanism: "PLAIN".into(),
                initial_response: Some(Binary::from(response)),
                hostname: None,
            },
        );
        input.put_slice(&PROTOCOL_HEADER_AMQP);
        self.connection.handle_input(&mut input)
    }

    fn open(&mut self) -> Open {
        assert_eq!(self.login("guest", "guest"), Control::Continue);
        self.connection.out.clear();
        self.feed(
            0,
            Performative::Open(Open {
                container_id: "test".into(),
                hostname: None,
                max_frame_size: MaxFrameSize(1024),
                channel_max: ChannelMax(4),
                idle_time_out: Some(10_000),
                outgoing_locales: None,
                incoming_locales: None,
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }),
            &[],
        );
        match self.frames().remove(0) {
            (_, Performative::Open(open)) => open,
            other => panic!("expected open, got {other:?}"),
        }
    }

    fn feed(&mut self, channel: u16, performative: Performative, payload: &[u8]) -> Control {
        let mut input = BytesMut::new();
        encode_amqp_frame(&mut input, channel, &performative, payload);
        let control = self.connection.handle_input(&mut input);
        self.connection.process_mailbox();
        control
    }

    /// Everything the connection wrote since the last call, decoded.
    fn frames(&mut self) -> Vec<(u16, Performative)> {
        let mut out = std::mem::take(&mut self.connection.out);
        let mut frames = Vec::new();
        while let Some(frame) = decode_frame(&mut out, 1 << 20).unwrap() {
            if let FrameBody::Amqp { performative, .. } = frame.body {
                frames.push((frame.channel, performative));
            }
        }
        frames
    }

    fn begin(&mut self, channel: u16) {
        self.feed(
            channel,
            Performative::Begin(Begin {
                remote_channel: None,
                next_outgoing_id: 0,
                incoming_window: 1000,
                outgoing_window: 1000,
                handle_max: Handle(10),
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }),
            &[],
        );
        assert!(matches!(self.frames()[..], [(_, Performative::Begin(_))]));
    }

    fn attach(&mut self, handle: u32, role: Role, address: &str) -> Vec<(u16, Performative)> {
        let is_sender = role == Role::Sender;
        let attach = Attach {
            name: format!("link-{handle}"),
            handle: Handle(handle),
            role,
            snd_settle_mode: SenderSettleMode::Unsettled,
            rcv_settle_mode: ReceiverSettleMode::First,
            source: Some(Box::new(Source {
                address: Some(address.to_string()),
                ..Source::default()
            })),
            target: Some(Box::new(TargetArchetype::Target(Target {
                address: Some(address.to_string()),
                ..Target::default()
            }))),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: is_sender.then_some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        self.feed(0, Performative::Attach(attach), &[]);
        self.frames()
    }

    fn flow(
        &mut self,
        handle: u32,
        delivery_count: u32,
        credit: u32,
        drain: bool,
    ) -> Vec<(u16, Performative)> {
        self.feed(
            0,
            Performative::Flow(Flow {
                next_incoming_id: Some(0),
                incoming_window: 1000,
                next_outgoing_id: 0,
                outgoing_window: 1000,
                handle: Some(Handle(handle)),
                delivery_count: Some(delivery_count),
                link_credit: Some(credit),
                available: None,
                drain,
                echo: false,
                properties: None,
            }),
            &[],
        );
        self.frames()
    }

    fn enqueue(&self, count: usize) {
        let queue = self.broker.vhost("/").unwrap().queue("q").unwrap();
        for i in 0..count {
            queue.enqueue(Arc::new(Message {
                exchange: "".into(),
                routing_key: "q".into(),
                properties: Default::default(),
                encoded_properties: None,
                body: format!("m{i}").into_bytes().into(),
            }));
        }
    }

    fn ready(&self) -> u64 {
        self.broker
            .vhost("/")
            .unwrap()
            .queue("q")
            .unwrap()
            .message_count()
    }
}

fn close_condition(frames: &[(u16, Performative)]) -> ErrorCondition {
    frames
        .iter()
        .find_map(|(_, p)| match p {
            Performative::Close(close) => close.error.as_ref().map(|e| e.condition.clone()),
            _ => None,
        })
        .expect("a close with an error")
}

#[test]
fn open_negotiates_frame_size_channels_and_idle_timeout() {
    let mut harness = Harness::new(Amqp10Config::default());
    let open = harness.open();
    assert_eq!(open.max_frame_size.0, 131_072);
    assert_eq!(open.channel_max.0, 4);
    assert_eq!(open.idle_time_out, Some(60_000));
    assert_eq!(
        harness.connection.remote_idle_timeout(),
        Some(std::time::Duration::from_secs(10))
    );
    assert!(harness.connection.is_open());
}

#[test]
fn a_wrong_password_ends_the_connection_after_the_sasl_outcome() {
    let mut harness = Harness::new(Amqp10Config::default());
    assert_eq!(harness.login("guest", "nope"), Control::Close);
    // sasl-outcome with code 1 (auth).
    assert!(harness
        .connection
        .out
        .windows(4)
        .any(|w| w == [0x53, 0x44, 0xc0, 0x03]));
}

#[test]
fn anonymous_is_offered_only_when_configured() {
    let mut plain = Harness::new(Amqp10Config::default());
    plain.connection.start(PROTOCOL_HEADER_SASL);
    let offered = |out: &BytesMut| out.windows(9).any(|w| w == b"ANONYMOUS");
    assert!(!offered(&plain.connection.out));
    let mut anonymous = Harness::new(Amqp10Config {
        anonymous_login: Some(("guest".into(), "guest".into())),
        ..Amqp10Config::default()
    });
    anonymous.connection.start(PROTOCOL_HEADER_SASL);
    assert!(offered(&anonymous.connection.out));
}

#[test]
fn a_begin_beyond_channel_max_is_a_framing_error() {
    let mut harness = Harness::new(Amqp10Config::default());
    harness.open();
    harness.feed(
        9,
        Performative::Begin(Begin {
            remote_channel: None,
            next_outgoing_id: 0,
            incoming_window: 10,
            outgoing_window: 10,
            handle_max: Handle(1),
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        }),
        &[],
    );
    assert_eq!(
        close_condition(&harness.frames()),
        ConnectionError::FramingError.into()
    );
    assert!(harness.connection.is_closing());
}

#[test]
fn credit_bounds_deliveries_and_drain_spends_the_rest() {
    let mut harness = Harness::new(Amqp10Config::default());
    harness.open();
    harness.begin(0);
    harness.enqueue(3);
    let attached = harness.attach(0, Role::Receiver, "/queues/q");
    assert!(matches!(attached[..], [(_, Performative::Attach(_))]));
    let frames = harness.flow(0, 0, 2, false);
    let transfers = frames
        .iter()
        .filter(|(_, p)| matches!(p, Performative::Transfer(_)))
        .count();
    assert_eq!(transfers, 2);
    assert_eq!(harness.ready(), 1);

    // drain with 5 credits and 1 message: 1 transfer, then a flow spending the other 4.
    let frames = harness.flow(0, 2, 5, true);
    assert!(matches!(frames[0].1, Performative::Transfer(_)));
    match &frames[1].1 {
        Performative::Flow(flow) => {
            assert!(flow.drain);
            assert_eq!(flow.link_credit, Some(0));
            assert_eq!(flow.delivery_count, Some(7));
        }
        other => panic!("expected the drain flow, got {other:?}"),
    }
    harness.enqueue(1);
    assert_eq!(harness.ready(), 1);
}

#[test]
fn a_multi_frame_transfer_is_one_message_and_is_settled_after_routing() {
    let mut harness = Harness::new(Amqp10Config::default());
    harness.open();
    harness.begin(0);
    let frames = harness.attach(1, Role::Sender, "/queues/q");
    assert!(matches!(frames[0].1, Performative::Attach(_)));
    assert!(matches!(&frames[1].1, Performative::Flow(flow) if flow.link_credit == Some(128)));
    let mut message = BytesMut::new();
    message.put_slice(&[0x00, 0x53, 0x75, 0xb0]);
    message.put_u32(2000);
    message.put_slice(&[7u8; 2000]);
    let transfer = |first: bool, more: bool| Transfer {
        handle: Handle(1),
        delivery_id: first.then_some(0),
        delivery_tag: first.then(|| Binary::from(vec![1])),
        message_format: first.then_some(0),
        settled: Some(false),
        more,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    };
    harness.feed(
        0,
        Performative::Transfer(transfer(true, true)),
        &message[..1000],
    );
    assert!(harness.frames().is_empty());
    assert_eq!(harness.ready(), 0);
    harness.feed(
        0,
        Performative::Transfer(transfer(false, false)),
        &message[1000..],
    );
    assert_eq!(harness.ready(), 1);
    let frames = harness.frames();
    match &frames[..] {
        [(_, Performative::Disposition(disposition))] => {
            assert!(disposition.settled);
            assert!(matches!(
                disposition.state,
                Some(DeliveryState::Accepted(_))
            ));
        }
        other => panic!("expected one disposition, got {other:?}"),
    }
    let queue = harness.broker.vhost("/").unwrap().queue("q").unwrap();
    let (delivery, _) = queue.get(false).unwrap();
    assert_eq!(delivery.message.body.len(), 2000);
}

#[test]
fn frames_for_unknown_handles_end_the_session_only() {
    let mut harness = Harness::new(Amqp10Config::default());
    harness.open();
    harness.begin(0);
    let frames = harness.flow(3, 0, 1, false);
    match &frames[..] {
        [(0, Performative::End(end))] => assert_eq!(
            end.error.as_ref().unwrap().condition,
            fe2o3_amqp_types::definitions::SessionError::UnattachedHandle.into()
        ),
        other => panic!("expected an end, got {other:?}"),
    }
    // The connection is still open and takes new sessions.
    assert!(harness.connection.is_open());
    harness.begin(1);
}

#[test]
fn garbage_after_open_closes_with_decode_error() {
    let mut harness = Harness::new(Amqp10Config::default());
    harness.open();
    let mut input = BytesMut::from(&[0u8, 0, 0, 12, 2, 0, 0, 0, 0x00, 0x53, 0x10, 0x45][..]);
    assert_eq!(
        harness.connection.handle_input(&mut input),
        Control::Continue
    );
    assert_eq!(
        close_condition(&harness.frames()),
        AmqpError::DecodeError.into()
    );
}

/// A transfer of one small message (a data section), settled or not.
fn transfer(handle: u32, delivery_id: u32, settled: bool) -> Transfer {
    Transfer {
        handle: Handle(handle),
        delivery_id: Some(delivery_id),
        delivery_tag: Some(Binary::from(delivery_id.to_be_bytes().to_vec())),
        message_format: Some(0),
        settled: Some(settled),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

const DATA_SECTION: &[u8] = &[0x00, 0x53, 0x75, 0xa0, 0x01, b'x'];

#[test]
fn a_publish_the_topic_permission_refuses_ends_the_session_with_unauthorized_access() {
    use warren_core::topic_access::TopicPermission;
    let mut harness = Harness::new(Amqp10Config::default());
    let vhost = harness.broker.vhost("/").unwrap();
    vhost
        .bind(
            Actor {
                user: "guest",
                connection_id: BROKER_CONNECTION,
            },
            "amq.topic",
            warren_core::exchange::DestinationName::Queue("q".into()),
            "#",
            Table::new(),
        )
        .unwrap();
    vhost.set_topic_permission(
        "guest",
        TopicPermission::new("guest", "/", "amq.topic", "^allowed\\.", "").unwrap(),
    );
    harness.open();
    harness.begin(0);
    harness.attach(1, Role::Sender, "/exchanges/amq.topic/allowed.a");
    harness.feed(
        0,
        Performative::Transfer(transfer(1, 0, true)),
        DATA_SECTION,
    );
    assert!(harness.frames().is_empty(), "a settled, allowed publish");
    assert_eq!(harness.ready(), 1);
    harness.attach(2, Role::Sender, "/exchanges/amq.topic/denied.a");
    harness.feed(
        0,
        Performative::Transfer(transfer(2, 1, false)),
        DATA_SECTION,
    );
    match &harness.frames()[..] {
        [(0, Performative::End(end))] => {
            let error = end.error.as_ref().expect("an error");
            assert_eq!(error.condition, AmqpError::UnauthorizedAccess.into());
            assert_eq!(
                error.description.as_deref(),
                Some(
                    "write access to topic 'denied.a' in exchange 'amq.topic' in vhost '/' \
                     refused for user 'guest'"
                )
            );
        }
        other => panic!("expected the session to end, got {other:?}"),
    }
    assert_eq!(harness.ready(), 1, "the refused message is not routed");
    assert!(harness.connection.is_open());
}

#[test]
fn external_is_offered_only_to_tls_clients_with_a_certificate_when_configured() {
    let offered = |out: &BytesMut| out.windows(8).any(|w| w == b"EXTERNAL");
    let config = || Amqp10Config {
        external_login: Some(warren_core::certificate::LoginFrom::CommonName),
        ..Amqp10Config::default()
    };
    let mut no_certificate = Harness::new(config());
    no_certificate.connection.set_tls(None);
    no_certificate.connection.start(PROTOCOL_HEADER_SASL);
    assert!(!offered(&no_certificate.connection.out));
    let mut not_configured = Harness::new(Amqp10Config::default());
    not_configured.connection.set_tls(Some(b"certificate"));
    not_configured.connection.start(PROTOCOL_HEADER_SASL);
    assert!(!offered(&not_configured.connection.out));
    // A certificate that names nobody: offered (the client has a certificate), refused.
    let mut nameless = Harness::new(config());
    nameless.connection.set_tls(Some(b"not a certificate"));
    nameless.connection.start(PROTOCOL_HEADER_SASL);
    assert!(offered(&nameless.connection.out));
    nameless.connection.out.clear();
    let mut input = BytesMut::new();
    encode_sasl_frame(
        &mut input,
        &SaslInit {
            mechanism: "EXTERNAL".into(),
            initial_response: None,
            hostname: None,
        },
    );
    assert_eq!(nameless.connection.handle_input(&mut input), Control::Close);
}

#[test]
fn frames_after_the_clients_close_are_dropped() {
    let mut harness = Harness::new(Amqp10Config::default());
    harness.open();
    harness.begin(0);
    let close = Performative::Close(fe2o3_amqp_types::performatives::Close { error: None });
    assert_eq!(harness.feed(0, close.clone(), &[]), Control::Continue);
    assert!(matches!(
        harness.frames()[..],
        [(
            0,
            Performative::Close(fe2o3_amqp_types::performatives::Close { error: None })
        )]
    ));
    assert!(harness.connection.is_closed());
    // A session end and a second close the client wrote before it saw ours: dropped.
    let end = Performative::End(fe2o3_amqp_types::performatives::End { error: None });
    assert_eq!(harness.feed(0, end, &[]), Control::Continue);
    assert_eq!(harness.feed(0, close, &[]), Control::Continue);
    assert!(harness.frames().is_empty());
    // The default 60-second idle timeout is above the 30-second limit.
    assert_eq!(
        harness.connection.closing_timeout(),
        std::time::Duration::from_secs(30)
    );
}
