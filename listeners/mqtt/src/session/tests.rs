//! Session tests without sockets: packets in, packets out of the outbox, core state checked.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use warren_core::access::Permissions;
use warren_core::broker::Limits;
use warren_core::retained::{InMemoryRetained, RetainedStore};
use warren_core::Broker;

use super::registry::ClientRegistry;
use super::{Control, End, MqttContext, Session, SessionConfig};
use crate::codec::{
    decode, ConnAck, Connect, ConnectReturnCode, LastWill, Packet, ProtocolLevel, PubRec, Publish,
    QoS, SubAck, Subscribe, SubscribeReturnCode, MAX_REMAINING_LENGTH,
};
use crate::outbox::Outbox;

fn context() -> MqttContext {
    let broker = Broker::new(Limits::default());
    let vhost = broker.add_vhost("/");
    broker.add_user("guest", "guest", vec![]);
    vhost.set_permissions("guest", Permissions::full());
    MqttContext {
        broker,
        registry: ClientRegistry::new(),
        retained: InMemoryRetained::new(),
        config: Arc::new(SessionConfig::default()),
    }
}

fn session(context: &MqttContext) -> (Session, Arc<Outbox>) {
    let outbox = Outbox::new(10);
    (
        Session::new(context.clone(), Arc::clone(&outbox), true),
        outbox,
    )
}

fn connect_packet(client_id: &str, clean_session: bool, will: Option<LastWill>) -> Packet {
    Packet::Connect(Connect {
        protocol: ProtocolLevel::V3_1_1,
        keep_alive: 30,
        client_id: client_id.into(),
        clean_session,
        last_will: will,
        username: Some("guest".into()),
        password: Some(Bytes::from_static(b"guest")),
        properties: None,
    })
}

/// Every packet the session wrote since the last call.
fn sent(outbox: &Outbox) -> Vec<Packet> {
    let mut packets = Vec::new();
    while let Some(drained) = outbox.drain() {
        // As the driver does: settle what the outbox asks for.
        super::acknowledge_all(drained.to_ack);
        let mut buffer = BytesMut::from(&drained.bytes[..]);
        while let Some(packet) = decode(&mut buffer, MAX_REMAINING_LENGTH).expect("valid output") {
            packets.push(packet);
        }
    }
    packets
}

fn accepted(session_present: bool) -> Packet {
    Packet::ConnAck(ConnAck {
        session_present,
        code: ConnectReturnCode::Accepted,
        properties: None,
        reason_code: None,
    })
}

fn publish(topic: &str, qos: QoS, packet_id: Option<u16>, payload: &'static [u8]) -> Packet {
    Packet::Publish(Publish {
        dup: false,
        qos,
        retain: false,
        topic: topic.into(),
        packet_id,
        payload: Bytes::from_static(payload),
        properties: None,
    })
}

fn subscribe(filter: &str, qos: QoS) -> Packet {
    Packet::Subscribe(Subscribe {
        packet_id: 1,
        filters: vec![(filter.into(), qos)],
        options: Vec::new(),
        properties: None,
    })
}

#[test]
fn connect_is_accepted_and_reports_the_keep_alive() {
    let context = context();
    let (mut session, outbox) = session(&context);
    assert!(matches!(
        session.handle_packet(connect_packet("a", true, None)),
        Control::Continue
    ));
    assert_eq!(sent(&outbox), vec![accepted(false)]);
    assert_eq!(
        session.keep_alive(),
        Some(std::time::Duration::from_secs(30))
    );
    assert_eq!(
        session.max_packet_size(),
        SessionConfig::default().max_packet_size
    );
    session.terminate(End::Disconnect);
    assert_eq!(context.registry.connected(), 0);
}

#[test]
fn packets_before_connect_and_a_second_connect_close_the_connection() {
    let context = context();
    let (mut session, outbox) = session(&context);
    assert!(matches!(
        session.handle_packet(Packet::PingReq),
        Control::Close(End::Abnormal(_))
    ));
    assert!(sent(&outbox).is_empty());

    let (mut session, _outbox) = super::tests::session(&context);
    let _ = session.handle_packet(connect_packet("b", true, None));
    assert!(matches!(
        session.handle_packet(connect_packet("b", true, None)),
        Control::Close(End::Abnormal(_))
    ));
}

#[test]
fn an_empty_client_id_needs_a_clean_session() {
    let context = context();
    let (mut session, outbox) = session(&context);
    assert!(matches!(
        session.handle_packet(connect_packet("", false, None)),
        Control::Close(_)
    ));
    assert_eq!(
        sent(&outbox),
        vec![Packet::ConnAck(ConnAck {
            session_present: false,
            code: ConnectReturnCode::IdentifierRejected,
            properties: None,
            reason_code: None
        })]
    );
    let (mut session, outbox) = super::tests::session(&context);
    let _ = session.handle_packet(connect_packet("", true, None));
    assert_eq!(sent(&outbox), vec![accepted(false)]);
    assert!(session.client_id().unwrap().starts_with("warren-"));
}

#[test]
fn a_subscription_is_a_bound_queue_and_receives_its_own_publishes() {
    let context = context();
    let (mut session, outbox) = session(&context);
    let _ = session.handle_packet(connect_packet("c", true, None));
    let _ = session.handle_packet(subscribe("s/+", QoS::AtLeastOnce));
    let _ = session.handle_packet(publish("s/1", QoS::AtLeastOnce, Some(9), b"hi"));
    let packets = sent(&outbox);
    assert_eq!(
        packets[1],
        Packet::SubAck(SubAck {
            packet_id: 1,
            return_codes: vec![SubscribeReturnCode::Success(QoS::AtLeastOnce)],
            properties: None,
        })
    );
    let delivered = packets
        .iter()
        .find_map(|p| match p {
            Packet::Publish(p) => Some(p.clone()),
            _ => None,
        })
        .expect("delivered");
    assert_eq!(
        (delivered.topic.as_str(), delivered.qos),
        ("s/1", QoS::AtLeastOnce)
    );
    assert!(packets.contains(&Packet::PubAck(crate::codec::PubAck {
        packet_id: 9,
        properties: None,
        reason_code: 0
    })));
    let vhost = context.broker.vhost("/").unwrap();
    let queue = vhost.queue("mqtt-subscription-cqos1").expect("declared");
    assert_eq!(
        queue.config().exclusive_owner,
        Some(session.connection_id())
    );
    assert_eq!(outbox.in_flight_count(), 1);
    session.terminate(End::Disconnect);
    assert!(vhost.queue("mqtt-subscription-cqos1").is_none());
}

#[test]
fn a_resent_qos2_publish_is_not_routed_twice() {
    let context = context();
    let (mut session, outbox) = session(&context);
    let _ = session.handle_packet(connect_packet("d", true, None));
    let _ = session.handle_packet(subscribe("t", QoS::AtMostOnce));
    let _ = sent(&outbox);
    for _ in 0..2 {
        let _ = session.handle_packet(publish("t", QoS::ExactlyOnce, Some(3), b"x"));
    }
    let packets = sent(&outbox);
    let deliveries = packets
        .iter()
        .filter(|p| matches!(p, Packet::Publish(_)))
        .count();
    assert_eq!(deliveries, 1);
    let pubrecs = packets
        .iter()
        .filter(|p| {
            **p == Packet::PubRec(PubRec {
                packet_id: 3,
                properties: None,
                reason_code: 0,
            })
        })
        .count();
    assert_eq!(pubrecs, 2);
}

#[test]
fn the_will_goes_out_on_an_abnormal_end_only() {
    let context = context();
    let (mut watcher, watcher_outbox) = session(&context);
    let _ = watcher.handle_packet(connect_packet("watcher", true, None));
    let _ = watcher.handle_packet(subscribe("will/#", QoS::AtMostOnce));
    let will = |text: &'static [u8]| LastWill {
        topic: "will/x".into(),
        message: Bytes::from_static(text),
        qos: QoS::AtMostOnce,
        retain: false,
        properties: None,
    };
    let (mut polite, _) = session(&context);
    let _ = polite.handle_packet(connect_packet("polite", true, Some(will(b"polite"))));
    assert!(matches!(
        polite.handle_packet(Packet::Disconnect(crate::codec::Reason::default())),
        Control::Close(End::Disconnect)
    ));
    polite.terminate(End::Disconnect);
    let (mut lost, _) = session(&context);
    let _ = lost.handle_packet(connect_packet("lost", true, Some(will(b"lost"))));
    lost.terminate(End::Abnormal("socket error".into()));

    let payloads: Vec<Bytes> = sent(&watcher_outbox)
        .into_iter()
        .filter_map(|p| match p {
            Packet::Publish(p) => Some(p.payload),
            _ => None,
        })
        .collect();
    assert_eq!(payloads, vec![Bytes::from_static(b"lost")]);
}

#[test]
fn a_released_qos2_delivery_gets_pubrel_again_after_reconnect() {
    use crate::codec::{PubComp, PubRel};
    let context = context();
    let (mut first, outbox) = session(&context);
    let _ = first.handle_packet(connect_packet("q2", false, None));
    let _ = first.handle_packet(subscribe("t", QoS::ExactlyOnce));
    let _ = first.handle_packet(publish("t", QoS::ExactlyOnce, Some(5), b"y"));
    let delivered = sent(&outbox)
        .into_iter()
        .find_map(|p| match p {
            Packet::Publish(p) if p.qos == QoS::ExactlyOnce => p.packet_id,
            _ => None,
        })
        .expect("a QoS 2 delivery");
    let _ = first.handle_packet(Packet::PubRec(PubRec {
        packet_id: delivered,
        properties: None,
        reason_code: 0,
    }));
    assert!(sent(&outbox).contains(&Packet::PubRel(PubRel {
        packet_id: delivered,
        properties: None,
        reason_code: 0
    })));
    first.terminate(End::Abnormal("gone before PUBCOMP".into()));

    let (mut second, outbox) = session(&context);
    let _ = second.handle_packet(connect_packet("q2", false, None));
    let packets = sent(&outbox);
    assert_eq!(packets[0], accepted(true));
    assert!(packets.contains(&Packet::PubRel(PubRel {
        packet_id: delivered,
        properties: None,
        reason_code: 0
    })));
    assert_eq!(outbox.in_flight_count(), 1);
    let _ = second.handle_packet(Packet::PubComp(PubComp {
        packet_id: delivered,
        properties: None,
        reason_code: 0,
    }));
    assert_eq!(outbox.in_flight_count(), 0);
    // The message was settled at PUBREC: nothing is redelivered.
    assert!(!sent(&outbox)
        .iter()
        .any(|p| matches!(p, Packet::Publish(_))));
}

#[test]
fn subscriptions_are_rebuilt_from_bindings_when_no_session_was_stored() {
    use crate::codec::{UnsubAck, Unsubscribe};
    let context = context();
    let (mut first, _outbox) = session(&context);
    let _ = first.handle_packet(connect_packet("restarted", false, None));
    let _ = first.handle_packet(subscribe("a/+/c", QoS::AtLeastOnce));
    first.terminate(End::Disconnect);
    // As after a restart: the queue and its binding survived, the stored state did not.
    let key = ("/".to_string(), "restarted".to_string());
    assert!(context.registry.take_session(&key).is_some());

    let (mut second, outbox) = session(&context);
    let _ = second.handle_packet(connect_packet("restarted", false, None));
    assert_eq!(sent(&outbox), vec![accepted(true)]);
    let _ = second.handle_packet(Packet::Unsubscribe(Unsubscribe {
        packet_id: 2,
        topics: vec!["a/+/c".into()],
        properties: None,
    }));
    assert_eq!(
        sent(&outbox),
        vec![Packet::UnsubAck(UnsubAck {
            packet_id: 2,
            properties: None,
            reason_codes: Vec::new()
        })]
    );
    let exchange = context
        .broker
        .vhost("/")
        .unwrap()
        .exchange("amq.topic")
        .unwrap();
    assert!(
        exchange.bindings().is_empty(),
        "the rebuilt subscription was unbound"
    );
}

#[test]
fn dollar_topics_are_not_matched_by_leading_wildcards() {
    let context = context();
    let (mut everything, everything_outbox) = session(&context);
    let _ = everything.handle_packet(connect_packet("everything", true, None));
    let _ = everything.handle_packet(subscribe("#", QoS::AtLeastOnce));
    let (mut system, system_outbox) = session(&context);
    let _ = system.handle_packet(connect_packet("system", true, None));
    let _ = system.handle_packet(subscribe("$SYS/+", QoS::AtLeastOnce));
    let _ = sent(&everything_outbox);
    let _ = sent(&system_outbox);

    let _ = system.handle_packet(publish("$SYS/load", QoS::AtLeastOnce, Some(1), b"1"));
    let _ = system.handle_packet(publish("plain", QoS::AtLeastOnce, Some(2), b"2"));
    let topics = |packets: Vec<Packet>| -> Vec<String> {
        packets
            .into_iter()
            .filter_map(|p| match p {
                Packet::Publish(p) => Some(p.topic),
                _ => None,
            })
            .collect()
    };
    assert_eq!(topics(sent(&system_outbox)), vec!["$SYS/load".to_string()]);
    assert_eq!(topics(sent(&everything_outbox)), vec!["plain".to_string()]);
    // The skipped message was settled, not left unacknowledged in the window.
    assert_eq!(everything_outbox.in_flight_count(), 1);
    let queue = context
        .broker
        .vhost("/")
        .unwrap()
        .queue("mqtt-subscription-everythingqos1")
        .unwrap();
    assert_eq!(queue.message_count(), 0);
    assert_eq!(queue.stats().acknowledged, 1);
}

mod properties {
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;
    use crate::codec::prop_tests::{packet, protocol};

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever a connected client sends, the session neither panics nor writes
        /// anything a client could not decode, and ending it leaves nothing behind.
        #[test]
        fn any_packet_sequence_is_handled_and_cleaned_up(
            clean_session in any::<bool>(),
            packets in vec(packet(protocol()), 0..16),
        ) {
            let context = context();
            let (mut session, outbox) = session(&context);
            let _ = session.handle_packet(connect_packet("fuzz", clean_session, None));
            let mut end = End::Abnormal("test over".into());
            for packet in packets {
                if let Control::Close(reason) = session.handle_packet(packet) {
                    end = reason;
                    break;
                }
            }
            let _ = sent(&outbox);
            session.terminate(end);
            prop_assert_eq!(context.registry.connected(), 0);
            let vhost = context.broker.vhost("/").unwrap();
            for queue in vhost.queues() {
                prop_assert!(!clean_session, "clean session left {}", queue.name());
                prop_assert_eq!(queue.consumer_count(), 0);
            }
        }
    }
}

/// A retained store whose "disk" the test moves: it keeps outbound QoS 2 identifiers as the
/// log would, and reports a change durable only when the test says so.
struct ManualDisk {
    memory: Arc<InMemoryRetained>,
    outbound: parking_lot::Mutex<Vec<u16>>,
    sequence: std::sync::atomic::AtomicU64,
    durable: tokio::sync::watch::Sender<u64>,
}

impl ManualDisk {
    fn new() -> Arc<ManualDisk> {
        Arc::new(ManualDisk {
            memory: InMemoryRetained::new(),
            outbound: parking_lot::Mutex::new(Vec::new()),
            sequence: std::sync::atomic::AtomicU64::new(0),
            durable: tokio::sync::watch::channel(0).0,
        })
    }

    fn change(&self) {
        self.sequence
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Everything logged so far reaches the disk.
    fn sync(&self) {
        self.durable.send_replace(self.last_change());
    }
}

impl warren_core::retained::RetainedStore for ManualDisk {
    fn retain(&self, vhost: &str, retained: warren_core::retained::RetainedMessage) {
        self.memory.retain(vhost, retained);
        self.change();
    }

    fn clear(&self, vhost: &str, topic: &str) {
        self.memory.clear(vhost, topic);
        self.change();
    }

    fn matching(
        &self,
        vhost: &str,
        matches: &dyn Fn(&str) -> bool,
        out: &mut Vec<warren_core::retained::RetainedMessage>,
    ) {
        self.memory.matching(vhost, matches, out);
    }

    fn get(&self, vhost: &str, topic: &str) -> Option<warren_core::retained::RetainedMessage> {
        self.memory.get(vhost, topic)
    }

    fn count(&self, vhost: &str) -> usize {
        self.memory.count(vhost)
    }

    fn last_change(&self) -> u64 {
        self.sequence.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn durable(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.durable.subscribe())
    }

    fn forget_session(&self, _vhost: &str, _client_id: &str) {
        self.outbound.lock().clear();
        self.change();
    }

    fn outbound_qos2_released(&self, _vhost: &str, _client_id: &str, packet_id: u16) {
        self.outbound.lock().push(packet_id);
        self.change();
    }

    fn outbound_qos2_completed(&self, _vhost: &str, _client_id: &str, packet_id: u16) {
        self.outbound.lock().retain(|id| *id != packet_id);
        self.change();
    }

    fn outbound_qos2_pending(&self, _vhost: &str, _client_id: &str) -> Vec<u16> {
        self.outbound.lock().clone()
    }
}

/// A persistent QoS 2 subscriber `client_id` on a store whose writes reach the disk only on
/// `ManualDisk::sync`, with one message on `t` delivered to it by another client; returns the
/// store, the context, the subscriber's session and outbox, the delivery's packet id and the
/// subscription queue.
#[allow(clippy::type_complexity)]
fn qos2_delivery_on_manual_disk(
    client_id: &str,
) -> (
    Arc<ManualDisk>,
    MqttContext,
    Session,
    Arc<Outbox>,
    u16,
    Arc<warren_core::queue::Queue>,
) {
    let disk = ManualDisk::new();
    let mut context = context();
    context.retained = Arc::clone(&disk) as Arc<dyn warren_core::retained::RetainedStore>;
    let (mut subscriber, outbox) = session(&context);
    let _ = subscriber.handle_packet(connect_packet(client_id, false, None));
    let _ = subscriber.handle_packet(subscribe("t", QoS::ExactlyOnce));
    // Published by another client, so nothing of the subscriber's own waits for the disk.
    let (mut publisher, _) = session(&context);
    let _ = publisher.handle_packet(connect_packet("pub", true, None));
    let _ = publisher.handle_packet(publish("t", QoS::ExactlyOnce, Some(1), b"x"));
    let delivered = sent(&outbox)
        .into_iter()
        .find_map(|p| match p {
            Packet::Publish(p) if p.qos == QoS::ExactlyOnce => p.packet_id,
            _ => None,
        })
        .expect("a QoS 2 delivery");
    let queue = context
        .broker
        .vhost("/")
        .and_then(|vhost| vhost.queue(&super::queue_name(client_id, QoS::ExactlyOnce)))
        .expect("the QoS 2 subscription queue");
    (disk, context, subscriber, outbox, delivered, queue)
}

#[test]
fn a_persistent_session_settles_and_sends_pubrel_once_the_record_is_on_disk() {
    use crate::codec::{PubComp, PubRel};
    let (disk, mut context, mut first, outbox, delivered, queue) =
        qos2_delivery_on_manual_disk("q2d");

    let _ = first.handle_packet(Packet::PubRec(PubRec {
        packet_id: delivered,
        properties: None,
        reason_code: 0,
    }));
    assert_eq!(disk.outbound_qos2_pending("/", "q2d"), vec![delivered]);
    assert!(
        sent(&outbox).is_empty(),
        "PUBREL before the record is on disk"
    );
    assert_eq!(queue.stats().unacknowledged, 1, "settled before the record");
    assert!(first.awaits_durability());

    disk.sync();
    first.release_held_acks();
    assert_eq!(
        sent(&outbox),
        vec![Packet::PubRel(PubRel {
            packet_id: delivered,
            properties: None,
            reason_code: 0
        })]
    );
    assert_eq!(queue.stats().unacknowledged, 0);
    first.terminate(End::Abnormal("gone before PUBCOMP".into()));

    // A restart: a new registry (nothing in memory), the same log and queues.
    context.registry = ClientRegistry::new();
    let (mut second, outbox) = session(&context);
    let _ = second.handle_packet(connect_packet("q2d", false, None));
    assert_eq!(
        sent(&outbox),
        vec![
            accepted(true),
            Packet::PubRel(PubRel {
                packet_id: delivered,
                properties: None,
                reason_code: 0
            })
        ]
    );
    let _ = second.handle_packet(Packet::PubComp(PubComp {
        packet_id: delivered,
        properties: None,
        reason_code: 0,
    }));
    assert!(disk.outbound_qos2_pending("/", "q2d").is_empty());
    assert_eq!(outbox.in_flight_count(), 0);
}

#[test]
fn pubrec_held_for_the_disk_is_settled_when_the_connection_ends() {
    let (disk, _context, mut session_a, _outbox, delivered, queue) =
        qos2_delivery_on_manual_disk("q2e");
    let _ = session_a.handle_packet(Packet::PubRec(PubRec {
        packet_id: delivered,
        properties: None,
        reason_code: 0,
    }));
    session_a.terminate(End::Abnormal("gone".into()));
    // The client has the message: it is not requeued, only its PUBREL is owed.
    let stats = queue.stats();
    assert_eq!((stats.ready, stats.unacknowledged), (0, 0));
    assert_eq!(disk.outbound_qos2_pending("/", "q2e"), vec![delivered]);
}
