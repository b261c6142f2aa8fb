//! Differential tests against mqttbytes 0.6 (`mqttbytes::v4`), an independent MQTT 3.1.1
//! codec: for valid 3.1.1 packets both must decode each other's bytes to the same values,
//! and both encoders must produce the same bytes. mqttbytes is looser than we are (it does
//! not check reserved flags and bits), so on arbitrary input only one direction holds:
//! whatever we accept, it accepts with the same meaning.

use bytes::BytesMut;
use mqttbytes::v4;
use proptest::collection::vec;
use proptest::prelude::*;

use super::prop_tests::packet;
use super::*;

fn their_qos(qos: QoS) -> mqttbytes::QoS {
    match qos {
        QoS::AtMostOnce => mqttbytes::QoS::AtMostOnce,
        QoS::AtLeastOnce => mqttbytes::QoS::AtLeastOnce,
        QoS::ExactlyOnce => mqttbytes::QoS::ExactlyOnce,
    }
}

/// Our packet in mqttbytes' model, or `None` where the models differ: MQTT 3.1 (which
/// mqttbytes refuses) and passwords that are not UTF-8 (mqttbytes reads them as strings).
/// mqttbytes takes an empty user name or password as absent, so those are normalised.
fn to_theirs(packet: &Packet) -> Option<v4::Packet> {
    Some(match packet {
        Packet::Connect(connect) => {
            if connect.protocol != ProtocolLevel::V3_1_1 {
                return None;
            }
            let username = connect.username.clone().unwrap_or_default();
            let password = match &connect.password {
                Some(bytes) => String::from_utf8(bytes.to_vec()).ok()?,
                None => String::new(),
            };
            v4::Packet::Connect(v4::Connect {
                protocol: mqttbytes::Protocol::V4,
                keep_alive: connect.keep_alive,
                client_id: connect.client_id.clone(),
                clean_session: connect.clean_session,
                last_will: connect.last_will.as_ref().map(|will| v4::LastWill {
                    topic: will.topic.clone(),
                    message: will.message.clone(),
                    qos: their_qos(will.qos),
                    retain: will.retain,
                }),
                login: (!username.is_empty() || !password.is_empty())
                    .then_some(v4::Login { username, password }),
            })
        }
        Packet::ConnAck(connack) => v4::Packet::ConnAck(v4::ConnAck {
            session_present: connack.session_present,
            code: match connack.code {
                ConnectReturnCode::Accepted => v4::ConnectReturnCode::Success,
                ConnectReturnCode::UnacceptableProtocolVersion => {
                    v4::ConnectReturnCode::RefusedProtocolVersion
                }
                ConnectReturnCode::IdentifierRejected => v4::ConnectReturnCode::BadClientId,
                ConnectReturnCode::ServerUnavailable => v4::ConnectReturnCode::ServiceUnavailable,
                ConnectReturnCode::BadUserNamePassword => {
                    v4::ConnectReturnCode::BadUserNamePassword
                }
                ConnectReturnCode::NotAuthorized => v4::ConnectReturnCode::NotAuthorized,
            },
        }),
        Packet::Publish(publish) => v4::Packet::Publish(v4::Publish {
            dup: publish.dup,
            qos: their_qos(publish.qos),
            retain: publish.retain,
            topic: publish.topic.clone(),
            pkid: publish.packet_id.unwrap_or(0),
            payload: publish.payload.clone(),
        }),
        Packet::PubAck(ack) => v4::Packet::PubAck(v4::PubAck {
            pkid: ack.packet_id,
        }),
        Packet::PubRec(ack) => v4::Packet::PubRec(v4::PubRec {
            pkid: ack.packet_id,
        }),
        Packet::PubRel(ack) => v4::Packet::PubRel(v4::PubRel {
            pkid: ack.packet_id,
        }),
        Packet::PubComp(ack) => v4::Packet::PubComp(v4::PubComp {
            pkid: ack.packet_id,
        }),
        Packet::Subscribe(subscribe) => v4::Packet::Subscribe(v4::Subscribe {
            pkid: subscribe.packet_id,
            filters: subscribe
                .filters
                .iter()
                .map(|(path, qos)| v4::SubscribeFilter {
                    path: path.clone(),
                    qos: their_qos(*qos),
                })
                .collect(),
        }),
        Packet::SubAck(suback) => v4::Packet::SubAck(v4::SubAck {
            pkid: suback.packet_id,
            return_codes: suback
                .return_codes
                .iter()
                .map(|code| match code {
                    SubscribeReturnCode::Success(qos) => {
                        v4::SubscribeReasonCode::Success(their_qos(*qos))
                    }
                    SubscribeReturnCode::Failure | SubscribeReturnCode::Refused(_) => {
                        v4::SubscribeReasonCode::Failure
                    }
                })
                .collect(),
        }),
        Packet::Unsubscribe(unsubscribe) => v4::Packet::Unsubscribe(v4::Unsubscribe {
            pkid: unsubscribe.packet_id,
            topics: unsubscribe.topics.clone(),
        }),
        Packet::UnsubAck(ack) => v4::Packet::UnsubAck(v4::UnsubAck {
            pkid: ack.packet_id,
        }),
        Packet::PingReq => v4::Packet::PingReq,
        Packet::PingResp => v4::Packet::PingResp,
        Packet::Disconnect(_) => v4::Packet::Disconnect,
        // MQTT 5 only.
        Packet::Auth(_) => return None,
    })
}

/// Writes a packet with mqttbytes' encoder.
fn their_encoding(packet: &v4::Packet) -> BytesMut {
    let mut out = BytesMut::new();
    let result = match packet {
        v4::Packet::Connect(p) => p.write(&mut out),
        v4::Packet::ConnAck(p) => p.write(&mut out),
        v4::Packet::Publish(p) => p.write(&mut out),
        v4::Packet::PubAck(p) => p.write(&mut out),
        v4::Packet::PubRec(p) => p.write(&mut out),
        v4::Packet::PubRel(p) => p.write(&mut out),
        v4::Packet::PubComp(p) => p.write(&mut out),
        v4::Packet::Subscribe(p) => p.write(&mut out),
        v4::Packet::SubAck(p) => p.write(&mut out),
        v4::Packet::Unsubscribe(p) => p.write(&mut out),
        v4::Packet::UnsubAck(p) => p.write(&mut out),
        v4::Packet::PingReq => v4::PingReq.write(&mut out),
        v4::Packet::PingResp => v4::PingResp.write(&mut out),
        v4::Packet::Disconnect => v4::Disconnect.write(&mut out),
    };
    result.expect("mqttbytes encodes every valid packet");
    out
}

/// Whether mqttbytes' model of this packet can say everything ours does: user names and
/// passwords it would drop as empty make its bytes differ from ours.
fn exactly_representable(packet: &Packet) -> bool {
    match packet {
        Packet::Connect(connect) => {
            connect.username.as_deref() != Some("")
                && connect.password.as_ref().is_none_or(|p| !p.is_empty())
        }
        _ => true,
    }
}

fn v3_1_1() -> impl Strategy<Value = ProtocolLevel> {
    Just(ProtocolLevel::V3_1_1)
}

proptest! {
    #[test]
    fn mqttbytes_decodes_our_encoding_to_the_same_packet(packet in packet(v3_1_1())) {
        let Some(theirs) = to_theirs(&packet) else { return Ok(()) };
        let mut ours = BytesMut::new();
        encode(&packet, &mut ours).unwrap();
        let decoded = v4::read(&mut ours, MAX_REMAINING_LENGTH).unwrap();
        prop_assert_eq!(decoded, theirs);
        prop_assert!(ours.is_empty());
    }

    #[test]
    fn both_encoders_write_the_same_bytes(packet in packet(v3_1_1())) {
        prop_assume!(exactly_representable(&packet));
        let Some(theirs) = to_theirs(&packet) else { return Ok(()) };
        let mut ours = BytesMut::new();
        encode(&packet, &mut ours).unwrap();
        prop_assert_eq!(&ours[..], &their_encoding(&theirs)[..]);
    }

    #[test]
    fn we_decode_mqttbytes_encoding_to_the_same_packet(packet in packet(v3_1_1())) {
        prop_assume!(exactly_representable(&packet));
        let Some(theirs) = to_theirs(&packet) else { return Ok(()) };
        let mut bytes = their_encoding(&theirs);
        prop_assert_eq!(decode(&mut bytes, MAX_REMAINING_LENGTH).unwrap(), Some(packet));
        prop_assert!(bytes.is_empty());
    }

    #[test]
    fn whatever_we_accept_mqttbytes_reads_the_same(
        packet in packet(v3_1_1()),
        mutations in vec((any::<prop::sample::Index>(), any::<u8>()), 1..3),
    ) {
        let mut bytes = BytesMut::new();
        encode(&packet, &mut bytes).unwrap();
        for (index, value) in mutations {
            let at = index.index(bytes.len());
            bytes[at] = value;
        }
        let mut ours = bytes.clone();
        if let Ok(Some(accepted)) = decode(&mut ours, MAX_REMAINING_LENGTH) {
            if let Some(expected) = to_theirs(&accepted) {
                let mut theirs = bytes.clone();
                let read = v4::read(&mut theirs, MAX_REMAINING_LENGTH);
                prop_assert_eq!(read.ok(), Some(expected));
                prop_assert_eq!(theirs.len(), ours.len());
            }
        }
    }
}

#[test]
fn mqttbytes_refuses_mqtt_3_1_which_we_accept() {
    // The reason this codec exists: RabbitMQ and Mosquitto accept "MQIsdp" level 3.
    let connect = Packet::Connect(Connect {
        protocol: ProtocolLevel::V3_1,
        keep_alive: 60,
        client_id: "c".into(),
        clean_session: true,
        last_will: None,
        username: None,
        password: None,
        properties: None,
    });
    let mut bytes = BytesMut::new();
    encode(&connect, &mut bytes).unwrap();
    assert!(v4::read(&mut bytes.clone(), 1024).is_err());
    assert_eq!(decode(&mut bytes, 1024), Ok(Some(connect)));
}
