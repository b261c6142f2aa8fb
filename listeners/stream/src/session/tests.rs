//! The session without sockets: a broker with a real message store (streams live on disk),
//! requests in, frames out.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use tokio::sync::Notify;
use warren_core::access::Permissions;
use warren_core::broker::Limits;
use warren_core::store::{MessageStore, StoreConfig};
use warren_core::Broker;

use super::*;
use crate::codec::{split_frame, OffsetSpecification, PublishedMessage};

struct Fixture {
    session: Session,
    wake: Arc<Notify>,
    dir: std::path::PathBuf,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn fixture(label: &str) -> Fixture {
    let dir = std::env::temp_dir().join(format!(
        "warren-stream-session-{label}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let broker = Broker::new(Limits::default());
    let (store, _) = MessageStore::open(StoreConfig::new(dir.join("msg_store"))).unwrap();
    broker.attach_store(store);
    let vhost = broker.add_vhost("/");
    broker.add_user("guest", "guest", vec![]);
    vhost.set_permissions("guest", Permissions::full());
    let wake = Arc::new(Notify::new());
    let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    let local: SocketAddr = "127.0.0.1:5552".parse().unwrap();
    let session = Session::new(
        broker,
        Arc::new(SessionConfig::default()),
        peer,
        local,
        Arc::clone(&wake),
    );
    Fixture { session, wake, dir }
}

/// The frames written so far: `(key, body after key and version)`.
fn frames(session: &mut Session) -> Vec<(u16, Bytes)> {
    let mut out = Vec::new();
    while let Some(mut frame) = split_frame(&mut session.out, 0).unwrap() {
        let key = frame.get_u16();
        let _version = frame.get_u16();
        out.push((key, frame));
    }
    out
}

/// The code of a response frame (correlation id, then code).
fn response_code(body: &Bytes) -> u16 {
    u16::from_be_bytes([body[4], body[5]])
}

fn open(fixture: &mut Fixture) {
    let session = &mut fixture.session;
    session.handle(Request::PeerProperties {
        correlation_id: 1,
        properties: vec![],
    });
    session.handle(Request::SaslHandshake { correlation_id: 2 });
    session.handle(Request::SaslAuthenticate {
        correlation_id: 3,
        mechanism: "PLAIN".into(),
        data: Bytes::from_static(b"\0guest\0guest"),
    });
    session.handle(Request::Tune {
        frame_max: 1_048_576,
        heartbeat: 60,
    });
    assert_eq!(
        session.handle(Request::Open {
            correlation_id: 4,
            vhost: "/".into()
        }),
        Control::Continue
    );
    let keys: Vec<u16> = frames(session).iter().map(|f| f.0).collect();
    assert_eq!(keys, vec![0x8011, 0x8012, 0x8013, key::TUNE, 0x8015]);
    assert!(session.opened().is_some());
}

#[test]
fn a_bad_password_is_refused_and_the_connection_closes() {
    let mut fixture = fixture("auth");
    let session = &mut fixture.session;
    let control = session.handle(Request::SaslAuthenticate {
        correlation_id: 1,
        mechanism: "PLAIN".into(),
        data: Bytes::from_static(b"\0guest\0wrong"),
    });
    assert_eq!(control, Control::Close);
    let frames = frames(session);
    assert_eq!(frames[0].0, 0x8013);
    assert_eq!(response_code(&frames[0].1), code::AUTHENTICATION_FAILURE);
    // Nothing but the handshake is served before Open.
    assert_eq!(
        session.handle(Request::Create {
            correlation_id: 2,
            stream: "s".into(),
            arguments: vec![]
        }),
        Control::Close
    );
}

/// The mechanisms a SaslHandshake lists.
fn mechanisms(session: &mut Session) -> Vec<String> {
    session.handle(Request::SaslHandshake { correlation_id: 9 });
    let (key, mut body) = frames(session).pop().expect("a handshake answer");
    assert_eq!(key, 0x8012);
    body.advance(6);
    let count = body.get_i32();
    (0..count)
        .map(|_| {
            let length = body.get_i16() as usize;
            String::from_utf8(body.split_to(length).to_vec()).unwrap()
        })
        .collect()
}

#[test]
fn external_is_offered_with_a_certificate_and_refused_when_it_names_nobody() {
    let mut fixture = fixture("external");
    let broker = Arc::clone(&fixture.session.broker);
    let config = SessionConfig {
        auth_mechanisms: vec!["PLAIN".into(), "EXTERNAL".into()],
        ..SessionConfig::default()
    };
    let new_session = || {
        Session::new(
            Arc::clone(&broker),
            Arc::new(config.clone()),
            "127.0.0.1:40001".parse().unwrap(),
            "127.0.0.1:5551".parse().unwrap(),
            Arc::clone(&fixture.wake),
        )
    };
    // Without a certificate (plain TCP): PLAIN only, EXTERNAL not supported.
    let mut session = new_session();
    assert_eq!(mechanisms(&mut session), ["PLAIN"]);
    session.handle(Request::SaslAuthenticate {
        correlation_id: 1,
        mechanism: "EXTERNAL".into(),
        data: Bytes::new(),
    });
    assert_eq!(
        response_code(&frames(&mut session)[0].1),
        code::SASL_MECHANISM_NOT_SUPPORTED
    );
    // With one that names nobody: offered, refused, closed.
    let mut session = new_session();
    session.set_certificate(b"not a certificate");
    assert_eq!(mechanisms(&mut session), ["PLAIN", "EXTERNAL"]);
    let control = session.handle(Request::SaslAuthenticate {
        correlation_id: 2,
        mechanism: "EXTERNAL".into(),
        data: Bytes::new(),
    });
    assert_eq!(control, Control::Close);
    assert_eq!(
        response_code(&frames(&mut session)[0].1),
        code::AUTHENTICATION_FAILURE
    );
    // The default configuration offers PLAIN only, certificate or not.
    fixture.session.set_certificate(b"not a certificate");
    assert_eq!(mechanisms(&mut fixture.session), ["PLAIN"]);
}

#[tokio::test]
async fn published_records_are_confirmed_after_the_write_and_delivered_as_chunks() {
    let mut fixture = fixture("publish");
    open(&mut fixture);
    let session = &mut fixture.session;
    session.handle(Request::Create {
        correlation_id: 5,
        stream: "s".into(),
        arguments: vec![],
    });
    session.handle(Request::Create {
        correlation_id: 6,
        stream: "s".into(),
        arguments: vec![],
    });
    session.handle(Request::DeclarePublisher {
        correlation_id: 7,
        publisher_id: 1,
        reference: Some("p".into()),
        stream: "s".into(),
    });
    let codes: Vec<u16> = frames(session)
        .iter()
        .map(|f| response_code(&f.1))
        .collect();
    assert_eq!(codes, vec![code::OK, code::STREAM_ALREADY_EXISTS, code::OK]);
    let messages = (1..=3)
        .map(|id| PublishedMessage {
            publishing_id: id,
            filter_value: None,
            message: Bytes::from(format!("m{id}")),
        })
        .collect();
    session.handle(Request::Publish {
        version: 1,
        publisher_id: 1,
        messages,
    });
    tokio::time::timeout(Duration::from_secs(5), fixture.wake.notified())
        .await
        .expect("confirmed");
    let session = &mut fixture.session;
    session.take_confirms();
    let confirm = frames(session).remove(0);
    assert_eq!(confirm.0, key::PUBLISH_CONFIRM);
    let mut body = confirm.1;
    assert_eq!((body.get_u8(), body.get_u32()), (1, 3));
    assert_eq!((body.get_u64(), body.get_u64(), body.get_u64()), (1, 2, 3));
    // An unknown publisher gets a PublishError.
    session.handle(Request::Publish {
        version: 1,
        publisher_id: 9,
        messages: vec![PublishedMessage {
            publishing_id: 1,
            filter_value: None,
            message: Bytes::new(),
        }],
    });
    assert_eq!(frames(session)[0].0, key::PUBLISH_ERROR);
    session.handle(Request::Subscribe {
        correlation_id: 8,
        subscription_id: 0,
        stream: "s".into(),
        offset: OffsetSpecification::First,
        credit: 1,
        properties: vec![],
    });
    assert!(!session.pump(1 << 20));
    let delivered = frames(session);
    assert_eq!(
        delivered.iter().map(|f| f.0).collect::<Vec<_>>(),
        vec![0x8007, key::DELIVER]
    );
    let mut deliver = delivered[1].1.clone();
    assert_eq!(deliver.get_u8(), 0, "subscription id");
    let chunk = warren_core::stream_log::chunk::ChunkHeader::decode(&deliver).unwrap();
    assert_eq!((chunk.first_offset, chunk.records), (0, 3));
    assert!(matches!(
        session.take_changes().as_slice(),
        [SubscriptionChange::Started(0, _)]
    ));
    session.handle(Request::QueryPublisherSequence {
        correlation_id: 9,
        reference: "p".into(),
        stream: "s".into(),
    });
    let mut answer = frames(session).remove(0).1;
    answer.advance(6);
    assert_eq!(answer.get_u64(), 3);
}

#[test]
fn metadata_advertises_the_address_the_client_connected_to() {
    let mut fixture = fixture("metadata");
    open(&mut fixture);
    let session = &mut fixture.session;
    session.handle(Request::Create {
        correlation_id: 5,
        stream: "s".into(),
        arguments: vec![],
    });
    frames(session);
    session.handle(Request::Metadata {
        correlation_id: 6,
        streams: vec!["s".into(), "missing".into()],
    });
    let mut body = frames(session).remove(0).1;
    assert_eq!(body.get_u32(), 6);
    assert_eq!(body.get_u32(), 1, "one broker");
    assert_eq!(body.get_u16(), 0);
    let host_len = body.get_u16() as usize;
    assert_eq!(&body[..host_len], b"127.0.0.1");
    body.advance(host_len);
    assert_eq!(body.get_u32(), 5552);
    assert_eq!(body.get_u32(), 2, "two streams");
}

#[tokio::test]
async fn a_single_active_consumer_waits_its_turn_and_resumes_where_its_client_says() {
    let mut fixture = fixture("single-active");
    open(&mut fixture);
    let session = &mut fixture.session;
    session.handle(Request::Create {
        correlation_id: 5,
        stream: "s".into(),
        arguments: vec![],
    });
    let sac = |name: &str| {
        vec![
            ("single-active-consumer".to_owned(), "true".to_owned()),
            ("name".to_owned(), name.to_owned()),
        ]
    };
    let subscribe = |session: &mut Session, id: u8, properties| {
        session.handle(Request::Subscribe {
            correlation_id: 10 + u32::from(id),
            subscription_id: id,
            stream: "s".into(),
            offset: OffsetSpecification::First,
            credit: 5,
            properties,
        });
    };
    // Without a name there is no group to join: refused as RabbitMQ refuses it.
    subscribe(
        session,
        9,
        vec![("single-active-consumer".to_owned(), "true".to_owned())],
    );
    subscribe(session, 1, sac("app"));
    subscribe(session, 2, sac("app"));
    session.pump(1 << 20);
    let out = frames(session);
    let codes: Vec<u16> = out[..4].iter().map(|f| response_code(&f.1)).collect();
    assert_eq!(
        codes,
        vec![code::OK, code::PRECONDITION_FAILED, code::OK, code::OK]
    );
    // Only the first is told it is active.
    assert_eq!(out.len(), 5, "one ConsumerUpdate");
    let (update_key, mut update) = out[4].clone();
    assert_eq!(update_key, key::CONSUMER_UPDATE);
    let correlation_id = update.get_u32();
    assert_eq!((update.get_u8(), update.get_u8()), (1, 1));
    // Nothing is delivered before its client answers; then from the offset it gave.
    session.handle(Request::ConsumerUpdateResponse {
        correlation_id,
        code: code::OK,
        offset: Some(OffsetSpecification::Next),
    });
    session.pump(1 << 20);
    assert!(frames(session).is_empty(), "an empty stream from next");
    // The first leaves: the second is told.
    session.handle(Request::Unsubscribe {
        correlation_id: 20,
        subscription_id: 1,
    });
    session.pump(1 << 20);
    let out = frames(session);
    assert_eq!(response_code(&out[0].1), code::OK);
    assert_eq!(out[1].0, key::CONSUMER_UPDATE);
    let mut update = out[1].1.clone();
    update.get_u32();
    assert_eq!((update.get_u8(), update.get_u8()), (2, 1));
}
