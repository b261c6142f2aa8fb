//! Byte-string tests: real client bytes, every packet type, every validation error, the
//! remaining-length boundaries and incomplete input.

use bytes::{Bytes, BytesMut};

use super::*;

fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

/// Decodes every packet in `bytes`, which must hold whole packets only.
fn decode_all(bytes: &[u8]) -> Result<Vec<Packet>, DecodeError> {
    let mut buf = BytesMut::from(bytes);
    let mut packets = Vec::new();
    while let Some(packet) = decode(&mut buf, MAX_REMAINING_LENGTH)? {
        packets.push(packet);
    }
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    Ok(packets)
}

fn decode_one(bytes: &[u8]) -> Packet {
    let mut packets = decode_all(bytes).unwrap();
    assert_eq!(packets.len(), 1);
    packets.remove(0)
}

fn decode_err(bytes: &[u8]) -> DecodeError {
    let mut buf = BytesMut::from(bytes);
    match decode(&mut buf, MAX_REMAINING_LENGTH) {
        Err(error) => error,
        Ok(packet) => panic!("expected an error, got {packet:?}"),
    }
}

fn encoded(packet: &Packet) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode(packet, &mut out).unwrap();
    out.to_vec()
}

/// `mosquitto_pub -i pub1 -u user -P pass --will-topic lwt --will-payload bye --will-qos 1
/// -t t -m hi -q 1 -V mqttv311`, captured from the wire: CONNECT, PUBLISH, DISCONNECT.
const MOSQUITTO_PUB_311: &str = "102600044d51545404ce003c00047075623100036c77740003627965000475\
                                 736572000470617373 320700017400016869 e000";

/// `mosquitto_pub -i pub31 -t a/b -m hello -V mqttv31`: an MQTT 3.1 ("MQIsdp") session.
const MOSQUITTO_PUB_31: &str =
    "101300064d51497364700302003c0005707562333130 0a0003612f6268656c6c6f e000";

/// `mosquitto_sub -i sub1 -t 'a/+' -t 'b/#' -q 1 -V mqttv311`: CONNECT, SUBSCRIBE with two
/// filters, DISCONNECT.
const MOSQUITTO_SUB_311: &str =
    "101000044d5154540402003c0004737562318 20e00010003612f2b010003622f2301 e000";

#[test]
fn mosquitto_pub_connect_with_will_username_password() {
    let packets = decode_all(&hex(MOSQUITTO_PUB_311)).unwrap();
    assert_eq!(
        packets,
        vec![
            Packet::Connect(Connect {
                protocol: ProtocolLevel::V3_1_1,
                keep_alive: 60,
                client_id: "pub1".into(),
                clean_session: true,
                last_will: Some(LastWill {
                    topic: "lwt".into(),
                    message: Bytes::from_static(b"bye"),
                    qos: QoS::AtLeastOnce,
                    retain: false,
                    properties: None,
                }),
                username: Some("user".into()),
                password: Some(Bytes::from_static(b"pass")),
                properties: None,
            }),
            Packet::Publish(Publish {
                dup: false,
                qos: QoS::AtLeastOnce,
                retain: false,
                topic: "t".into(),
                packet_id: Some(1),
                payload: Bytes::from_static(b"hi"),
                properties: None,
            }),
            Packet::Disconnect(Reason::default()),
        ]
    );
    // Our encoder produces the client's bytes exactly.
    let again: Vec<u8> = packets.iter().flat_map(encoded).collect();
    assert_eq!(again, hex(MOSQUITTO_PUB_311));
}

#[test]
fn mosquitto_pub_mqtt_3_1_connect_is_accepted() {
    let packets = decode_all(&hex(MOSQUITTO_PUB_31)).unwrap();
    assert_eq!(
        packets[0],
        Packet::Connect(Connect {
            protocol: ProtocolLevel::V3_1,
            keep_alive: 60,
            client_id: "pub31".into(),
            clean_session: true,
            last_will: None,
            username: None,
            password: None,
            properties: None,
        })
    );
    assert!(matches!(&packets[1], Packet::Publish(p) if p.topic == "a/b"
        && p.payload == "hello" && p.qos == QoS::AtMostOnce && p.packet_id.is_none()));
    assert_eq!(packets[2], Packet::Disconnect(Reason::default()));
    let again: Vec<u8> = packets.iter().flat_map(encoded).collect();
    assert_eq!(again, hex(MOSQUITTO_PUB_31));
}

#[test]
fn mosquitto_sub_subscribe_with_two_filters() {
    let packets = decode_all(&hex(MOSQUITTO_SUB_311)).unwrap();
    assert_eq!(
        packets[1],
        Packet::Subscribe(Subscribe {
            packet_id: 1,
            filters: vec![
                ("a/+".into(), QoS::AtLeastOnce),
                ("b/#".into(), QoS::AtLeastOnce)
            ],
            options: Vec::new(),
            properties: None,
        })
    );
    let again: Vec<u8> = packets.iter().flat_map(encoded).collect();
    assert_eq!(again, hex(MOSQUITTO_SUB_311));
}

#[test]
fn publish_payload_shares_the_read_buffer() {
    let bytes = hex("3207 0001 74 0001 6869");
    let mut buf = BytesMut::from(&bytes[..]);
    let start = buf.as_ptr() as usize;
    let Some(Packet::Publish(publish)) = decode(&mut buf, 1024).unwrap() else {
        panic!("expected PUBLISH")
    };
    assert_eq!(publish.payload.as_ptr() as usize, start + 7);
}

#[test]
fn every_server_packet_encodes_to_known_bytes() {
    let cases: Vec<(Packet, &str)> = vec![
        (
            Packet::ConnAck(ConnAck {
                session_present: false,
                code: ConnectReturnCode::Accepted,
                properties: None,
                reason_code: None,
            }),
            "20020000",
        ),
        (
            Packet::ConnAck(ConnAck {
                session_present: true,
                code: ConnectReturnCode::Accepted,
                properties: None,
                reason_code: None,
            }),
            "20020100",
        ),
        (
            Packet::ConnAck(ConnAck {
                session_present: false,
                code: ConnectReturnCode::UnacceptableProtocolVersion,
                properties: None,
                reason_code: None,
            }),
            "20020001",
        ),
        (
            Packet::ConnAck(ConnAck {
                session_present: false,
                code: ConnectReturnCode::NotAuthorized,
                properties: None,
                reason_code: None,
            }),
            "20020005",
        ),
        (
            Packet::PubAck(PubAck {
                packet_id: 1,
                properties: None,
                reason_code: 0,
            }),
            "40020001",
        ),
        (
            Packet::PubRec(PubRec {
                packet_id: 0x1234,
                properties: None,
                reason_code: 0,
            }),
            "50021234",
        ),
        (
            Packet::PubRel(PubRel {
                packet_id: 2,
                properties: None,
                reason_code: 0,
            }),
            "62020002",
        ),
        (
            Packet::PubComp(PubComp {
                packet_id: 0xFFFF,
                properties: None,
                reason_code: 0,
            }),
            "7002ffff",
        ),
        (
            Packet::SubAck(SubAck {
                packet_id: 7,
                return_codes: vec![
                    SubscribeReturnCode::Success(QoS::AtMostOnce),
                    SubscribeReturnCode::Success(QoS::AtLeastOnce),
                    SubscribeReturnCode::Success(QoS::ExactlyOnce),
                    SubscribeReturnCode::Failure,
                ],
                properties: None,
            }),
            "9006000700010280",
        ),
        (
            Packet::Unsubscribe(Unsubscribe {
                packet_id: 3,
                topics: vec!["a/b".into()],
                properties: None,
            }),
            "a207 0003 0003612f62",
        ),
        (
            Packet::UnsubAck(UnsubAck {
                packet_id: 3,
                properties: None,
                reason_codes: Vec::new(),
            }),
            "b0020003",
        ),
        (Packet::PingReq, "c000"),
        (Packet::PingResp, "d000"),
        (Packet::Disconnect(Reason::default()), "e000"),
        (
            Packet::Publish(Publish {
                dup: true,
                qos: QoS::ExactlyOnce,
                retain: true,
                topic: "a".into(),
                packet_id: Some(10),
                payload: Bytes::from_static(b"x"),
                properties: None,
            }),
            "3d06 000161 000a 78",
        ),
    ];
    for (packet, bytes) in cases {
        assert_eq!(encoded(&packet), hex(bytes), "{packet:?}");
        assert_eq!(decode_one(&hex(bytes)), packet);
    }
}

#[test]
fn connect_flags_round_trip() {
    let connect = Connect {
        protocol: ProtocolLevel::V3_1_1,
        keep_alive: 0,
        client_id: String::new(),
        clean_session: false,
        last_will: Some(LastWill {
            topic: "w".into(),
            message: Bytes::new(),
            qos: QoS::ExactlyOnce,
            retain: true,
            properties: None,
        }),
        username: Some("u".into()),
        password: None,
        properties: None,
    };
    let bytes = encoded(&Packet::Connect(connect.clone()));
    // user name 0x80, will retain 0x20, will QoS 2 0x10, will 0x04.
    assert_eq!(bytes[9], 0b1011_0100);
    assert_eq!(decode_one(&bytes), Packet::Connect(connect));
}

#[test]
fn encode_publish_hot_path_matches_encode() {
    let mut fast = BytesMut::new();
    encode_publish(
        &mut fast,
        "a/b",
        QoS::AtLeastOnce,
        Some(9),
        false,
        true,
        b"body",
    )
    .unwrap();
    let slow = encoded(&Packet::Publish(Publish {
        dup: true,
        qos: QoS::AtLeastOnce,
        retain: false,
        topic: "a/b".into(),
        packet_id: Some(9),
        payload: Bytes::from_static(b"body"),
        properties: None,
    }));
    assert_eq!(&fast[..], &slow[..]);
}

#[test]
fn encode_refuses_what_a_sender_must_not_send() {
    let mut out = BytesMut::new();
    let cases: Vec<(Result<(), EncodeError>, &str)> = vec![
        (
            encode_publish(&mut out, "t", QoS::AtLeastOnce, None, false, false, b""),
            "without a packet identifier",
        ),
        (
            encode_publish(&mut out, "t", QoS::AtMostOnce, Some(1), false, false, b""),
            "QoS 0 PUBLISH with a packet identifier",
        ),
        (
            encode_publish(&mut out, "t", QoS::ExactlyOnce, Some(0), false, false, b""),
            "packet identifier 0",
        ),
        (
            encode_publish(&mut out, "t", QoS::AtMostOnce, None, false, true, b""),
            "DUP set on a QoS 0",
        ),
        (
            encode_publish(
                &mut out,
                &"x".repeat(65_536),
                QoS::AtMostOnce,
                None,
                false,
                false,
                b"",
            ),
            "topic name of 65536 bytes",
        ),
        (
            encode(
                &Packet::PubAck(PubAck {
                    packet_id: 0,
                    properties: None,
                    reason_code: 0,
                }),
                &mut out,
            ),
            "packet identifier 0",
        ),
        (
            encode(
                &Packet::Subscribe(Subscribe {
                    packet_id: 1,
                    filters: vec![],
                    options: Vec::new(),
                    properties: None,
                }),
                &mut out,
            ),
            "SUBSCRIBE without topic filters",
        ),
        (
            encode(
                &Packet::Unsubscribe(Unsubscribe {
                    packet_id: 1,
                    topics: vec![],
                    properties: None,
                }),
                &mut out,
            ),
            "UNSUBSCRIBE without topic filters",
        ),
        (
            encode(
                &Packet::SubAck(SubAck {
                    packet_id: 1,
                    return_codes: vec![],
                    properties: None,
                }),
                &mut out,
            ),
            "SUBACK without return codes",
        ),
        (
            encode(
                &Packet::Connect(Connect {
                    protocol: ProtocolLevel::V3_1_1,
                    keep_alive: 0,
                    client_id: "c".into(),
                    clean_session: true,
                    last_will: None,
                    username: None,
                    password: Some(Bytes::from_static(b"p")),
                    properties: None,
                }),
                &mut out,
            ),
            "password but no user name",
        ),
    ];
    for (result, message) in cases {
        let error = result.expect_err(message);
        assert!(error.to_string().contains(message), "{error} / {message}");
    }
    assert!(out.is_empty(), "nothing is written on error");
    assert_eq!(
        super::wire::check_remaining_length(MAX_REMAINING_LENGTH + 1),
        Err(EncodeError::TooLarge {
            size: MAX_REMAINING_LENGTH + 1
        })
    );
}

#[test]
fn mqtt_3_1_connect_may_carry_a_password_without_a_user_name() {
    let connect = Connect {
        protocol: ProtocolLevel::V3_1,
        keep_alive: 10,
        client_id: "c".into(),
        clean_session: true,
        last_will: None,
        username: None,
        password: Some(Bytes::from_static(b"p")),
        properties: None,
    };
    let bytes = encoded(&Packet::Connect(connect.clone()));
    assert_eq!(decode_one(&bytes), Packet::Connect(connect));
}

#[test]
fn mqtt_3_1_connect_with_flags_but_no_credentials_is_accepted() {
    // "MQIsdp" level 3, user name and password flags set, neither field present: old 3.1
    // clients did this, Mosquitto takes them as absent.
    let Packet::Connect(connect) =
        decode_one(&hex("1011 0006 4d5149736470 03 c2 003c 0003 616263"))
    else {
        panic!("expected CONNECT")
    };
    assert_eq!(connect.username, None);
    assert_eq!(connect.password, None);
    // The 3.1.1 rule: the same without the bytes is malformed.
    let error = decode_err(&hex("100f 0004 4d515454 04 c2 003c 0003 616263"));
    assert!(
        error.to_string().contains("ends before its user name"),
        "{error}"
    );
}

#[test]
fn mqtt_3_1_client_ids_longer_than_23_bytes_are_accepted() {
    let client_id = "a-client-identifier-of-40-bytes-for-3.1!";
    let connect = Connect {
        protocol: ProtocolLevel::V3_1,
        keep_alive: 60,
        client_id: client_id.into(),
        clean_session: true,
        last_will: None,
        username: None,
        password: None,
        properties: None,
    };
    assert_eq!(
        decode_one(&encoded(&Packet::Connect(connect.clone()))),
        Packet::Connect(connect)
    );
}

/// A CONNECT body after the fixed header, for the validation table.
fn connect_with(name: &str, level: u8, flags: u8, payload: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&(name.len() as u16).to_be_bytes());
    body.extend_from_slice(name.as_bytes());
    body.push(level);
    body.push(flags);
    body.extend_from_slice(&[0, 60]);
    body.extend_from_slice(&hex(payload));
    let mut packet = vec![0x10, body.len() as u8];
    packet.extend_from_slice(&body);
    packet
}

#[test]
fn every_validation_error_has_its_message() {
    let client = "0001 63"; // client id "c"
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // Fixed header.
        (hex("0000"), "packet type 0 is reserved"),
        (hex("f000"), "packet type 15 is reserved"),
        (
            hex("1100"),
            "CONNECT fixed header flags are 0b0001, must be 0b0000",
        ),
        (
            hex("6002 0001"),
            "PUBREL fixed header flags are 0b0000, must be 0b0010 (MQTT-3.6.1-1)",
        ),
        (
            hex("8000"),
            "SUBSCRIBE fixed header flags are 0b0000, must be 0b0010 (MQTT-3.8.1-1)",
        ),
        (
            hex("a000"),
            "UNSUBSCRIBE fixed header flags are 0b0000, must be 0b0010",
        ),
        (hex("4102 0001"), "PUBACK fixed header flags are 0b0001"),
        (hex("c800"), "PINGREQ fixed header flags are 0b1000"),
        (
            hex("3600"),
            "PUBLISH QoS is 3, which is reserved (MQTT-3.3.1-4)",
        ),
        (
            hex("30ffffffff01"),
            "remaining length continues past 4 bytes",
        ),
        (
            hex("4003 000100"),
            "PUBACK remaining length is 3, expected 2",
        ),
        (hex("c001 00"), "PINGREQ remaining length is 1, expected 0"),
        (hex("2001 00"), "CONNACK remaining length is 1, expected 2"),
        // CONNECT.
        (
            connect_with("MQTT", 4, 0x03, client),
            "CONNECT flags reserved bit is set (MQTT-3.1.2-3)",
        ),
        (
            connect_with("MQTT", 4, 0x0A, client),
            "will QoS is set without the will flag",
        ),
        (
            connect_with("MQTT", 4, 0x22, client),
            "will retain is set without the will flag",
        ),
        (
            connect_with("MQTT", 4, 0x1E, "0001 63 0001 74 0000"),
            "will QoS is 3",
        ),
        (
            connect_with("MQTT", 4, 0x42, "0001 63 0001 70"),
            "password flag is set without the user name flag",
        ),
        (
            connect_with("MQTT", 4, 0x02, "0001 63 00"),
            "CONNECT has 1 unexpected bytes",
        ),
        (
            connect_with("MQTT", 4, 0x02, "0005 63"),
            "CONNECT ends before its client identifier",
        ),
        (
            connect_with("MQTT", 4, 0x06, "0001 63 0001 74"),
            "CONNECT ends before its will message",
        ),
        (
            connect_with("MQTT", 4, 0x02, "0002 c328"),
            "client identifier is not valid UTF-8 (MQTT-1.5.3-1)",
        ),
        (
            connect_with("MQTT", 4, 0x02, "0002 6300"),
            "client identifier contains the null character",
        ),
        (
            connect_with("MQTT", 4, 0x82, "0001 63 0001 ff"),
            "user name is not valid UTF-8",
        ),
        (
            connect_with("MQTT", 4, 0x06, "0001 63 0001 00 0000"),
            "will topic contains the null",
        ),
        (hex("1003 0004 4d"), "CONNECT ends before its protocol name"),
        // CONNACK.
        (
            hex("2002 0200"),
            "CONNACK acknowledge flags have reserved bits set",
        ),
        (hex("2002 0006"), "CONNACK return code is reserved"),
        // PUBLISH.
        (
            hex("3202 0000"),
            "PUBLISH topic name \"\": topic is empty (MQTT-4.7.3-1)",
        ),
        (hex("3005 0003 612f2b"), "topic name contains a wildcard"),
        (hex("3004 0002 2361"), "topic name contains a wildcard"),
        (
            hex("3205 0001 74 0000"),
            "PUBLISH packet identifier is 0 (MQTT-2.3.1-1)",
        ),
        (
            hex("3204 0001 74 00"),
            "PUBLISH ends before its packet identifier",
        ),
        (hex("3003 0005 74"), "PUBLISH ends before its topic name"),
        (hex("3003 0001 ff"), "topic name is not valid UTF-8"),
        (
            hex("3003 0001 00"),
            "topic name contains the null character",
        ),
        // Acknowledgments.
        (hex("4002 0000"), "PUBACK packet identifier is 0"),
        (hex("5002 0000"), "PUBREC packet identifier is 0"),
        (hex("6202 0000"), "PUBREL packet identifier is 0"),
        (hex("7002 0000"), "PUBCOMP packet identifier is 0"),
        (hex("b002 0000"), "UNSUBACK packet identifier is 0"),
        // SUBSCRIBE.
        (
            hex("8202 0001"),
            "SUBSCRIBE has no topic filters, a protocol violation (MQTT-3.8.3-3)",
        ),
        (
            hex("8206 0001 0001 61 04"),
            "requested QoS byte 0x04 has reserved bits set (MQTT-3.8.3-4)",
        ),
        (
            hex("8206 0001 0001 61 81"),
            "requested QoS byte 0x81 has reserved bits set",
        ),
        (hex("8206 0001 0001 61 03"), "SUBSCRIBE requested QoS is 3"),
        (
            hex("8205 0001 0001 61"),
            "SUBSCRIBE ends before its requested QoS",
        ),
        (
            hex("8206 0000 0001 61 00"),
            "SUBSCRIBE packet identifier is 0",
        ),
        (
            hex("8206 0001 0001 ff 00"),
            "topic filter is not valid UTF-8",
        ),
        // SUBACK.
        (hex("9002 0001"), "SUBACK has no return codes"),
        (hex("9003 0001 03"), "SUBACK return code 0x03 is reserved"),
        // UNSUBSCRIBE.
        (
            hex("a202 0001"),
            "UNSUBSCRIBE has no topic filters, a protocol violation (MQTT-3.10.3-2)",
        ),
        (
            hex("a205 0001 0002 61"),
            "UNSUBSCRIBE ends before its topic filter",
        ),
    ];
    for (bytes, message) in cases {
        let mut buf = BytesMut::from(&bytes[..]);
        let Err(error) = decode(&mut buf, MAX_REMAINING_LENGTH) else {
            panic!("bytes {bytes:02x?} decoded, expected {message:?}");
        };
        assert!(
            error.to_string().contains(message),
            "bytes {bytes:02x?}: got {error:?}, expected {message:?}"
        );
        assert_eq!(error.connack_code(), None);
    }
}

#[test]
fn utf8_errors_name_the_field() {
    let error = decode_err(&connect_with("MQTT", 4, 0x02, "0002 6300"));
    assert_eq!(
        error,
        DecodeError::InvalidUtf8 {
            field: "client identifier",
            problem: StringProblem::ContainsNul
        }
    );
}

#[test]
fn unsupported_protocols_are_answered_with_connack_1() {
    for (name, level) in [("MQTT", 3), ("MQIsdp", 4), ("MQTT", 6), ("HTTP", 4)] {
        let error = decode_err(&connect_with(name, level, 0x02, "0001 63"));
        assert_eq!(
            error,
            DecodeError::UnsupportedProtocol {
                level,
                name: name.into()
            }
        );
        assert_eq!(
            error.connack_code(),
            Some(ConnectReturnCode::UnacceptableProtocolVersion)
        );
    }
    // MQTT 5 is spoken now: level 5 with an empty property list decodes.
    let Packet::Connect(mqtt5) = decode_one(&connect_with("MQTT", 5, 0x02, "00 0001 63")) else {
        panic!("expected CONNECT")
    };
    assert_eq!(mqtt5.protocol, ProtocolLevel::V5);
}

#[test]
fn mqtt_3_1_does_not_check_the_reserved_flag() {
    let Packet::Connect(connect) = decode_one(&connect_with("MQIsdp", 3, 0x03, "0001 63")) else {
        panic!("expected CONNECT")
    };
    assert!(connect.clean_session);
}

#[test]
fn too_large_is_reported_from_the_fixed_header_alone() {
    // A PUBLISH announcing 200 bytes, of which none has arrived.
    let mut buf = BytesMut::from(&hex("30c801")[..]);
    assert_eq!(
        decode(&mut buf, 199),
        Err(DecodeError::TooLarge {
            size: 200,
            max: 199
        })
    );
    let mut buf = BytesMut::from(&hex("30c801")[..]);
    assert_eq!(decode(&mut buf, 200), Ok(None));
    // The protocol maximum, 268435455, announced by FF FF FF 7F.
    let mut buf = BytesMut::from(&hex("30ffffff7f")[..]);
    assert_eq!(
        decode(&mut buf, 1 << 20),
        Err(DecodeError::TooLarge {
            size: MAX_REMAINING_LENGTH,
            max: 1 << 20
        })
    );
    let mut buf = BytesMut::from(&hex("30ffffff7f")[..]);
    assert_eq!(decode(&mut buf, MAX_REMAINING_LENGTH), Ok(None));
    assert_eq!(
        DecodeError::TooLarge {
            size: 200,
            max: 199
        }
        .to_string(),
        "packet too large: remaining length of 200 bytes exceeds the maximum of 199 bytes"
    );
}

#[test]
fn remaining_length_boundaries() {
    // (remaining length, its encoding) at each boundary of section 2.2.3.
    let boundaries: [(usize, &str); 6] = [
        (127, "7f"),
        (128, "8001"),
        (16_383, "ff7f"),
        (16_384, "808001"),
        (2_097_151, "ffff7f"),
        (2_097_152, "80808001"),
    ];
    for (len, encoding) in boundaries {
        // A QoS 0 PUBLISH to "t": 3 bytes of topic, the rest payload.
        let payload = vec![0xAB; len - 3];
        let mut out = BytesMut::new();
        encode_publish(&mut out, "t", QoS::AtMostOnce, None, false, false, &payload).unwrap();
        let header = hex(encoding);
        assert_eq!(&out[1..1 + header.len()], &header[..], "length {len}");
        assert_eq!(out.len(), 1 + header.len() + len);
        let Some(Packet::Publish(publish)) = decode(&mut out, MAX_REMAINING_LENGTH).unwrap() else {
            panic!("expected PUBLISH")
        };
        assert_eq!(publish.payload.len(), len - 3);
        assert!(out.is_empty());
    }
    let mut out = BytesMut::new();
    super::wire::write_remaining_length(&mut out, MAX_REMAINING_LENGTH);
    assert_eq!(&out[..], &hex("ffffff7f")[..]);
    // Four bytes with the continuation bit on the last is invalid even before a fifth.
    assert!(matches!(
        decode_err(&hex("30ffffffff")),
        DecodeError::Malformed(_)
    ));
    assert!(matches!(
        decode_err(&hex("3080808080 01")),
        DecodeError::Malformed(_)
    ));
    // Non-minimal encodings are tolerated: 0x80 0x00 is zero.
    assert_eq!(decode_one(&hex("c08000")), Packet::PingReq);
}

#[test]
fn incomplete_input_at_every_split_point_waits_without_consuming() {
    for stream in [MOSQUITTO_PUB_311, MOSQUITTO_PUB_31, MOSQUITTO_SUB_311] {
        let bytes = hex(stream);
        let expected = decode_all(&bytes).unwrap();
        // Cut at every point: whole packets before the cut decode, the rest waits.
        for cut in 0..bytes.len() {
            let mut buf = BytesMut::from(&bytes[..cut]);
            let mut got = Vec::new();
            loop {
                let before = buf.clone();
                match decode(&mut buf, MAX_REMAINING_LENGTH).unwrap() {
                    Some(packet) => got.push(packet),
                    None => {
                        assert_eq!(buf, before, "Ok(None) must not consume");
                        break;
                    }
                }
            }
            assert_eq!(got[..], expected[..got.len()]);
            assert!(got.len() < expected.len());
        }
        // Byte-by-byte streaming yields the same packets.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for &byte in &bytes {
            buf.extend_from_slice(&[byte]);
            while let Some(packet) = decode(&mut buf, MAX_REMAINING_LENGTH).unwrap() {
                got.push(packet);
            }
        }
        assert_eq!(got, expected);
    }
}

#[test]
fn empty_buffer_is_incomplete() {
    assert_eq!(decode(&mut BytesMut::new(), 0), Ok(None));
}
