//! Helpers shared by the MQTT tests: a rumqttc client whose event loop runs in its own task
//! and hands incoming packets over a channel, and a raw-socket client for packets a real
//! client library would never send. The MQTT 5 helpers (`mqtt5_common`) build on the
//! protocol-neutral parts here: [`Incoming`], [`packet`] and [`WAIT`].

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use rumqttc::{
    AsyncClient, ConnAck, ConnectReturnCode, ConnectionError, Event, MqttOptions, Packet, Publish,
    SubAck,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// How long a test waits for a packet that should come.
pub const WAIT: Duration = Duration::from_secs(5);

/// The packets a client's event-loop task hands over, for the 3.1.1 and the MQTT 5 client
/// alike (`P` is the client's packet type).
pub struct Incoming<P>(pub mpsc::UnboundedReceiver<P>);

impl<P> Incoming<P> {
    /// The next packet `keep` accepts, skipping the others; `None` once the connection
    /// ended. Panics when none comes within [`WAIT`] (`what` names it).
    pub async fn next_where(&mut self, what: &str, keep: impl Fn(&P) -> bool) -> Option<P> {
        loop {
            let packet = tokio::time::timeout(WAIT, self.0.recv())
                .await
                .unwrap_or_else(|_| panic!("{what} in time"))?;
            if keep(&packet) {
                return Some(packet);
            }
        }
    }

    /// The next packet `keep` accepts within `wait`, if one comes.
    pub async fn within(&mut self, wait: Duration, keep: impl Fn(&P) -> bool) -> Option<P> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            match tokio::time::timeout_at(deadline, self.0.recv()).await {
                Ok(Some(packet)) if keep(&packet) => return Some(packet),
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => return None,
            }
        }
    }
}

/// A connected rumqttc client.
pub struct MqttClient {
    /// The client handle for publish, subscribe, ack.
    pub client: AsyncClient,
    /// The CONNACK the broker sent.
    pub connack: ConnAck,
    incoming: Incoming<Packet>,
    /// Resolves with the error that ended the event loop.
    pub ended: tokio::task::JoinHandle<ConnectionError>,
}

/// Options for `client_id` at `addr` with the guest credentials and a 5 s keep-alive.
pub fn options(addr: SocketAddr, client_id: &str) -> MqttOptions {
    let mut options = MqttOptions::new(client_id, addr.ip().to_string(), addr.port());
    options.set_keep_alive(Duration::from_secs(5));
    options.set_credentials("guest", "guest");
    options.set_max_packet_size(1 << 20, 1 << 20);
    options
}

/// Connects with `options`: the CONNACK, or the error the connection attempt ended with.
pub async fn try_connect(options: MqttOptions) -> Result<MqttClient, ConnectionError> {
    let (client, mut event_loop) = AsyncClient::new(options, 100);
    let connack = loop {
        match tokio::time::timeout(WAIT, event_loop.poll())
            .await
            .expect("CONNACK in time")?
        {
            Event::Incoming(Packet::ConnAck(connack)) => break connack,
            _ => continue,
        }
    };
    let (sender, incoming) = mpsc::unbounded_channel();
    let ended = tokio::spawn(async move {
        loop {
            match event_loop.poll().await {
                Ok(Event::Incoming(packet)) => {
                    let _ = sender.send(packet);
                }
                Ok(Event::Outgoing(_)) => {}
                // No reconnects: a test sees the first error and the loop ends.
                Err(error) => return error,
            }
        }
    });
    Ok(MqttClient {
        client,
        connack,
        incoming: Incoming(incoming),
        ended,
    })
}

/// Connects and expects success.
pub async fn connect(options: MqttOptions) -> MqttClient {
    let client = try_connect(options).await.expect("MQTT connects");
    assert_eq!(client.connack.code, ConnectReturnCode::Success);
    client
}

/// The return code of a refused connection attempt.
pub async fn refused(options: MqttOptions) -> ConnectReturnCode {
    match try_connect(options).await {
        Err(ConnectionError::ConnectionRefused(code)) => code,
        Err(other) => panic!("expected a CONNACK refusal, got {other:?}"),
        Ok(_) => panic!("expected a CONNACK refusal, got a connection"),
    }
}

impl MqttClient {
    /// The next packet from the broker, other than PINGRESP and acknowledgements of our
    /// own publishes.
    pub async fn next(&mut self) -> Packet {
        self.incoming
            .next_where("a packet", |packet| {
                !matches!(
                    packet,
                    Packet::PingResp
                        | Packet::PubAck(_)
                        | Packet::PubComp(_)
                        | Packet::PubRec(_)
                        | Packet::PubRel(_)
                )
            })
            .await
            .expect("the connection is open")
    }

    /// The next acknowledgement of our own publishes (PUBACK, PUBREC or PUBCOMP).
    pub async fn next_ack(&mut self) -> Packet {
        self.incoming
            .next_where("an acknowledgement", |packet| {
                matches!(
                    packet,
                    Packet::PubAck(_) | Packet::PubRec(_) | Packet::PubComp(_)
                )
            })
            .await
            .expect("the connection is open")
    }

    /// The next PUBLISH.
    pub async fn next_publish(&mut self) -> Publish {
        match self.next().await {
            Packet::Publish(publish) => publish,
            other => panic!("expected PUBLISH, got {other:?}"),
        }
    }

    /// Subscribes and returns the SUBACK.
    pub async fn subscribe(&mut self, filter: &str, qos: rumqttc::QoS) -> SubAck {
        self.client.subscribe(filter, qos).await.expect("subscribe");
        match self.next().await {
            Packet::SubAck(suback) => suback,
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }

    /// Publishes (without waiting for an acknowledgement: see [`MqttClient::next_ack`]).
    pub async fn publish(&mut self, topic: &str, qos: rumqttc::QoS, payload: &[u8]) {
        self.client
            .publish(topic, qos, false, payload.to_vec())
            .await
            .expect("publish");
    }

    /// Whether no PUBLISH arrives within `wait` (the broker answers a PINGREQ first, so
    /// anything already sent would have arrived).
    pub async fn no_publish_within(&mut self, wait: Duration) -> bool {
        matches!(
            tokio::time::timeout(wait, self.incoming.0.recv()).await,
            Err(_) | Ok(Some(Packet::PingResp)) | Ok(None)
        )
    }

    /// Sends DISCONNECT and waits until the event loop ends.
    pub async fn disconnect(self) {
        let _ = self.client.disconnect().await;
        let _ = tokio::time::timeout(WAIT, self.ended).await;
    }

    /// Drops the connection without DISCONNECT (the will is published).
    pub fn abort(self) {
        self.ended.abort();
    }
}

/// A raw MQTT connection for hand-built packets.
pub struct RawClient {
    /// The socket.
    pub stream: TcpStream,
}

/// A CONNECT packet (MQTT 3.1.1, clean session, keep-alive 60, guest/guest).
pub fn connect_packet(client_id: &str) -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&[0, 4, b'M', b'Q', b'T', b'T', 4, 0b1100_0010, 0, 60]);
    for field in [client_id.as_bytes(), b"guest", b"guest"] {
        body.extend_from_slice(&(field.len() as u16).to_be_bytes());
        body.extend_from_slice(field);
    }
    packet(0x10, &body)
}

/// A packet with a fixed header of `first` and `body`.
pub fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    let mut length = body.len();
    loop {
        let mut byte = (length % 128) as u8;
        length /= 128;
        if length > 0 {
            byte |= 0x80;
        }
        out.push(byte);
        if length == 0 {
            break;
        }
    }
    out.extend_from_slice(body);
    out
}

/// A SUBSCRIBE for one filter at QoS 0.
pub fn subscribe_packet(packet_id: u16, filter: &str) -> Vec<u8> {
    let mut body = packet_id.to_be_bytes().to_vec();
    body.extend_from_slice(&(filter.len() as u16).to_be_bytes());
    body.extend_from_slice(filter.as_bytes());
    body.push(0);
    packet(0x82, &body)
}

impl RawClient {
    /// Opens a socket to `addr`.
    pub async fn open(addr: SocketAddr) -> RawClient {
        RawClient {
            stream: TcpStream::connect(addr).await.expect("TCP connects"),
        }
    }

    /// Opens a socket and completes CONNECT, expecting CONNACK accepted.
    pub async fn connected(addr: SocketAddr, client_id: &str) -> RawClient {
        let mut raw = RawClient::open(addr).await;
        raw.send(&connect_packet(client_id)).await;
        assert_eq!(
            raw.read_exact(4).await,
            vec![0x20, 2, 0, 0],
            "CONNACK accepted"
        );
        raw
    }

    /// Writes bytes.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Reads exactly `n` bytes.
    pub async fn read_exact(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0; n];
        tokio::time::timeout(WAIT, self.stream.read_exact(&mut buf))
            .await
            .expect("bytes in time")
            .expect("read");
        buf
    }

    /// Whether the broker closes the connection (EOF or reset) without sending anything.
    pub async fn is_closed_by_broker(&mut self) -> bool {
        let mut buf = [0u8; 64];
        match tokio::time::timeout(WAIT, self.stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => true,
            Ok(Ok(n)) => panic!("expected the connection closed, got bytes {:?}", &buf[..n]),
            Err(_) => false,
        }
    }
}
