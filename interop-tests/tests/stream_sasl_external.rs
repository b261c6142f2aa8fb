//! SASL EXTERNAL on the stream protocol, as RabbitMQ's stream plugin offers it: over TLS
//! with a verified client certificate, when `auth_mechanisms` lists EXTERNAL, SaslHandshake
//! lists it and a SaslAuthenticate with EXTERNAL logs in as the user the certificate names
//! (`ssl_cert_login_from`, the same mapping as AMQP 0-9-1, AMQP 1.0 and STOMP use), with no
//! password. `rabbitmq-stream-client` only speaks PLAIN, so EXTERNAL is driven by a raw
//! client over tokio-rustls; the crate is used to show a client certificate over TLS with
//! PLAIN works on the same listener.

use std::time::Duration;

use bytes::{Buf, BufMut, BytesMut};
use rabbitmq_stream_client::{Environment, TlsConfiguration};
use rcgen::DnType;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use warren_core::access::Permissions;
use warren_interop_tests::tls::{connect, Pki};
use warren_interop_tests::TestBroker;

const PEER_PROPERTIES: u16 = 0x0011;
const SASL_HANDSHAKE: u16 = 0x0012;
const SASL_AUTHENTICATE: u16 = 0x0013;
const TUNE: u16 = 0x0014;
const OPEN: u16 = 0x0015;
const CREATE: u16 = 0x000d;

const OK: u16 = 0x01;
const SASL_MECHANISM_NOT_SUPPORTED: u16 = 0x07;
const AUTHENTICATION_FAILURE: u16 = 0x08;

/// A stream protocol client that writes requests and reads frames, nothing more.
struct RawStream<S> {
    io: S,
    buffer: BytesMut,
    correlation_id: u32,
}

fn put_string(out: &mut BytesMut, text: &str) {
    out.put_i16(text.len() as i16);
    out.put_slice(text.as_bytes());
}

fn get_string(frame: &mut BytesMut) -> String {
    let length = frame.get_i16();
    String::from_utf8(frame.split_to(length.max(0) as usize).to_vec()).expect("UTF-8")
}

impl<S: AsyncRead + AsyncWrite + Unpin> RawStream<S> {
    fn new(io: S) -> RawStream<S> {
        RawStream {
            io,
            buffer: BytesMut::new(),
            correlation_id: 0,
        }
    }

    /// Sends a request `key` whose body (after key, version and correlation id) `body`
    /// writes; returns its correlation id.
    async fn request(&mut self, key: u16, body: impl FnOnce(&mut BytesMut)) -> u32 {
        self.correlation_id += 1;
        let mut frame = BytesMut::new();
        frame.put_u16(key);
        frame.put_u16(1);
        frame.put_u32(self.correlation_id);
        body(&mut frame);
        self.send(frame).await;
        self.correlation_id
    }

    async fn send(&mut self, frame: BytesMut) {
        let mut out = BytesMut::new();
        out.put_u32(frame.len() as u32);
        out.extend_from_slice(&frame);
        self.io.write_all(&out).await.expect("written");
    }

    /// The next frame: its key, and what follows the key and version.
    async fn frame(&mut self) -> (u16, BytesMut) {
        loop {
            if self.buffer.len() >= 4 {
                let size = u32::from_be_bytes(self.buffer[..4].try_into().unwrap()) as usize;
                if self.buffer.len() >= 4 + size {
                    self.buffer.advance(4);
                    let mut frame = self.buffer.split_to(size);
                    let key = frame.get_u16();
                    let _version = frame.get_u16();
                    return (key, frame);
                }
            }
            let read =
                tokio::time::timeout(Duration::from_secs(10), self.io.read_buf(&mut self.buffer))
                    .await
                    .expect("a frame in time")
                    .expect("read");
            assert!(read > 0, "the broker closed the connection");
        }
    }

    /// The response to request `key` with correlation id `correlation_id`: its code and
    /// the rest of its body.
    async fn response(&mut self, key: u16, correlation_id: u32) -> (u16, BytesMut) {
        let (got, mut frame) = self.frame().await;
        assert_eq!(got, key | 0x8000, "response key");
        assert_eq!(frame.get_u32(), correlation_id, "correlation id");
        (frame.get_u16(), frame)
    }

    async fn peer_properties(&mut self) {
        let id = self
            .request(PEER_PROPERTIES, |f| {
                f.put_i32(1);
                put_string(f, "product");
                put_string(f, "raw test client");
            })
            .await;
        assert_eq!(self.response(PEER_PROPERTIES, id).await.0, OK);
    }

    async fn mechanisms(&mut self) -> Vec<String> {
        let id = self.request(SASL_HANDSHAKE, |_| {}).await;
        let (code, mut body) = self.response(SASL_HANDSHAKE, id).await;
        assert_eq!(code, OK);
        (0..body.get_i32()).map(|_| get_string(&mut body)).collect()
    }

    async fn authenticate(&mut self, mechanism: &str, data: &[u8]) -> u16 {
        let id = self
            .request(SASL_AUTHENTICATE, |f| {
                put_string(f, mechanism);
                f.put_i32(data.len() as i32);
                f.put_slice(data);
            })
            .await;
        self.response(SASL_AUTHENTICATE, id).await.0
    }

    /// After a successful SaslAuthenticate: the server's Tune, answered, then Open.
    async fn tune_and_open(&mut self, vhost: &str) -> u16 {
        let (key, mut tune) = self.frame().await;
        assert_eq!(key, TUNE);
        let (frame_max, heartbeat) = (tune.get_u32(), tune.get_u32());
        let mut answer = BytesMut::new();
        answer.put_u16(TUNE);
        answer.put_u16(1);
        answer.put_u32(frame_max);
        answer.put_u32(heartbeat);
        self.send(answer).await;
        let id = self.request(OPEN, |f| put_string(f, vhost)).await;
        self.response(OPEN, id).await.0
    }

    async fn create(&mut self, stream: &str) -> u16 {
        let id = self
            .request(CREATE, |f| {
                put_string(f, stream);
                f.put_i32(0);
            })
            .await;
        self.response(CREATE, id).await.0
    }
}

/// A broker with a stream-over-TLS listener requiring client certificates from the test
/// CA, users named by the certificate's common name, the given `auth_mechanisms`, and the
/// user `app-1` (full permissions in `/`).
async fn broker(pki: &Pki, mechanisms: &[&str]) -> TestBroker {
    let options = pki.ssl_options(true);
    let keys: Vec<String> = (1..=mechanisms.len())
        .map(|n| format!("auth_mechanisms.{n}"))
        .collect();
    let mut settings: Vec<(&str, &str)> = vec![
        ("stream.listeners.ssl.default", "127.0.0.1:0"),
        ("stream.advertised_host", "localhost"),
        ("ssl_cert_login_from", "common_name"),
    ];
    settings.extend(
        keys.iter()
            .map(String::as_str)
            .zip(mechanisms.iter().copied()),
    );
    settings.extend(options.iter().map(|(k, v)| (*k, v.as_str())));
    let broker = TestBroker::start_with(&settings).await;
    broker.broker().add_user("app-1", "secret", vec![]);
    broker
        .broker()
        .vhost("/")
        .expect("default vhost")
        .set_permissions("app-1", Permissions::full());
    broker
}

/// A raw client over TLS presenting a certificate whose common name is `common_name`,
/// PeerProperties done.
async fn tls_client(
    broker: &TestBroker,
    pki: &Pki,
    common_name: &str,
) -> RawStream<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
    let addr = broker.server().stream_tls_addr().expect("TLS listener");
    let identity = pki.client_named(&[(DnType::CommonName, common_name)], true);
    let stream = connect(addr, pki.client_config(Some(identity)))
        .await
        .expect("TLS handshake");
    let mut client = RawStream::new(stream);
    client.peer_properties().await;
    client
}

/// The users of the open stream protocol connections, with whether each runs over TLS.
fn stream_users(broker: &TestBroker) -> Vec<(String, bool)> {
    broker
        .broker()
        .connections()
        .list()
        .into_iter()
        .filter(|c| c.info.protocol == "RabbitMQ Stream")
        .map(|c| (c.info.user, c.info.tls))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_logs_in_as_the_user_the_certificate_names() {
    let pki = Pki::new("stream-external");
    let broker = broker(&pki, &["PLAIN", "EXTERNAL"]).await;
    let mut client = tls_client(&broker, &pki, "app-1").await;
    assert_eq!(client.mechanisms().await, vec!["PLAIN", "EXTERNAL"]);
    // The response is not looked at: the certificate is the credential.
    assert_eq!(client.authenticate("EXTERNAL", b"").await, OK);
    assert_eq!(client.tune_and_open("/").await, OK);
    assert_eq!(client.create("signed").await, OK);
    assert!(broker
        .broker()
        .vhost("/")
        .unwrap()
        .streams()
        .get("signed")
        .is_some());
    assert!(
        warren_interop_tests::wait_for(Duration::from_secs(5), || stream_users(&broker)
            == vec![("app-1".to_string(), true)])
        .await,
        "connection listed as the certificate's user: {:?}",
        stream_users(&broker)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_with_a_certificate_naming_no_user_is_refused() {
    let pki = Pki::new("stream-external-unknown");
    let broker = broker(&pki, &["PLAIN", "EXTERNAL"]).await;
    let mut client = tls_client(&broker, &pki, "nobody").await;
    assert_eq!(client.mechanisms().await, vec!["PLAIN", "EXTERNAL"]);
    assert_eq!(
        client.authenticate("EXTERNAL", b"").await,
        AUTHENTICATION_FAILURE
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_is_not_offered_unless_configured() {
    // Not in auth_mechanisms (the default, PLAIN AMQPLAIN): not offered, and refused.
    let pki = Pki::new("stream-external-off");
    let broker = broker(&pki, &[]).await;
    let mut client = tls_client(&broker, &pki, "app-1").await;
    assert_eq!(client.mechanisms().await, vec!["PLAIN"]);
    assert_eq!(
        client.authenticate("EXTERNAL", b"").await,
        SASL_MECHANISM_NOT_SUPPORTED
    );
    // PLAIN still works on that connection.
    assert_eq!(client.authenticate("PLAIN", b"\0app-1\0secret").await, OK);
    assert_eq!(client.tune_and_open("/").await, OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_is_not_offered_without_a_certificate() {
    // Configured, but the plain TCP listener has no certificate: not offered, and refused.
    let pki = Pki::new("stream-external-tcp");
    let broker = broker(&pki, &["EXTERNAL", "PLAIN"]).await;
    let stream = tokio::net::TcpStream::connect(broker.stream_addr())
        .await
        .expect("connects");
    let mut client = RawStream::new(stream);
    client.peer_properties().await;
    assert_eq!(client.mechanisms().await, vec!["PLAIN"]);
    assert_eq!(
        client.authenticate("EXTERNAL", b"").await,
        SASL_MECHANISM_NOT_SUPPORTED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_external_configured_refuses_plain() {
    let pki = Pki::new("stream-external-only");
    let broker = broker(&pki, &["EXTERNAL"]).await;
    let mut client = tls_client(&broker, &pki, "app-1").await;
    assert_eq!(client.mechanisms().await, vec!["EXTERNAL"]);
    assert_eq!(
        client.authenticate("PLAIN", b"\0app-1\0secret").await,
        SASL_MECHANISM_NOT_SUPPORTED
    );
    assert_eq!(client.authenticate("EXTERNAL", b"").await, OK);
    assert_eq!(client.tune_and_open("/").await, OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_client_presents_a_client_certificate_over_tls() {
    let _ = tokio_rustls::rustls::crypto::aws_lc_rs::default_provider().install_default();
    let pki = Pki::new("stream-client-cert");
    let broker = broker(&pki, &["PLAIN", "EXTERNAL"]).await;
    let port = broker.server().stream_tls_addr().expect("TLS").port();
    let (certificate, key) = pki.client_files("client", "app-1");
    let tls = TlsConfiguration::builder()
        .add_root_certificates(pki.path("ca.pem"))
        .add_client_certificates_keys(certificate, key)
        .build()
        .expect("TLS configuration");
    // The crate logs in with PLAIN whatever the broker offers.
    let environment = tokio::time::timeout(
        Duration::from_secs(10),
        Environment::builder()
            .host("localhost")
            .port(port)
            .username("app-1")
            .password("secret")
            .tls(tls)
            .build(),
    )
    .await
    .expect("in time")
    .expect("connects with a client certificate");
    environment
        .stream_creator()
        .create("with-certificate")
        .await
        .expect("created");
    assert!(broker
        .broker()
        .vhost("/")
        .unwrap()
        .streams()
        .get("with-certificate")
        .is_some());
}
