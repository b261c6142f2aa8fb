//! Helpers for the MQTT 5 tests: a rumqttc v5 client whose event loop runs in its own task
//! and hands incoming packets over a channel, and raw MQTT 5 packets for bad input. What
//! does not depend on the protocol version (the packet channel, the fixed header, the
//! wait) comes from `mqtt_common`, which every test that uses this module declares too.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use rumqttc::v5::mqttbytes::v5::{
    ConnAck, DisconnectReasonCode, Packet, Publish, SubAck, UnsubAck,
};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, ConnectionError, Event, MqttOptions, StateError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::mqtt_common::Incoming;
pub use crate::mqtt_common::{packet, WAIT};

/// A connected rumqttc v5 client.
pub struct Mqtt5Client {
    /// The client handle for publish, subscribe, ack.
    pub client: AsyncClient,
    /// The CONNACK the broker sent.
    pub connack: ConnAck,
    incoming: Incoming<Packet>,
    /// Resolves with the error that ended the event loop.
    pub ended: tokio::task::JoinHandle<ConnectionError>,
}

/// MQTT 5 options for `client_id` at `addr` with the guest credentials.
pub fn options5(addr: SocketAddr, client_id: &str) -> MqttOptions {
    let mut options = MqttOptions::new(client_id, addr.ip().to_string(), addr.port());
    options.set_keep_alive(Duration::from_secs(5));
    options.set_credentials("guest", "guest");
    options
}

/// Connects with `options`: the CONNACK, or the error the attempt ended with.
pub async fn try_connect5(options: MqttOptions) -> Result<Mqtt5Client, ConnectionError> {
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
                Err(error) => return error,
            }
        }
    });
    Ok(Mqtt5Client {
        client,
        connack,
        incoming: Incoming(incoming),
        ended,
    })
}

/// Connects and expects success.
pub async fn connect5(options: MqttOptions) -> Mqtt5Client {
    try_connect5(options).await.expect("MQTT 5 connects")
}

impl Mqtt5Client {
    /// The next packet from the broker, other than PINGRESP and acknowledgements of our
    /// own publishes.
    pub async fn next(&mut self) -> Packet {
        let packet = self
            .incoming
            .next_where("a packet", |packet| {
                !matches!(
                    packet,
                    Packet::PingResp(_)
                        | Packet::PubAck(_)
                        | Packet::PubComp(_)
                        | Packet::PubRec(_)
                        | Packet::PubRel(_)
                )
            })
            .await;
        match packet {
            Some(packet) => packet,
            None => {
                let error = (&mut self.ended).await;
                panic!("the connection ended: {error:?}");
            }
        }
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

    /// The next PUBLISH within `wait`, if one comes.
    pub async fn publish_within(&mut self, wait: Duration) -> Option<Publish> {
        match self
            .incoming
            .within(wait, |packet| matches!(packet, Packet::Publish(_)))
            .await
        {
            Some(Packet::Publish(publish)) => Some(publish),
            _ => None,
        }
    }

    /// Subscribes and returns the SUBACK.
    pub async fn subscribe(&mut self, filter: &str, qos: QoS) -> SubAck {
        self.client.subscribe(filter, qos).await.expect("subscribe");
        match self.next().await {
            Packet::SubAck(suback) => suback,
            other => panic!("expected SUBACK, got {other:?}"),
        }
    }

    /// Unsubscribes and returns the UNSUBACK.
    pub async fn unsubscribe(&mut self, filter: &str) -> UnsubAck {
        self.client.unsubscribe(filter).await.expect("unsubscribe");
        match self.next().await {
            Packet::UnsubAck(unsuback) => unsuback,
            other => panic!("expected UNSUBACK, got {other:?}"),
        }
    }

    /// Publishes without properties.
    pub async fn publish(&mut self, topic: &str, qos: QoS, payload: &[u8]) {
        self.client
            .publish(topic, qos, false, payload.to_vec())
            .await
            .expect("publish");
    }

    /// Sends DISCONNECT and waits until the event loop ends.
    pub async fn disconnect(self) {
        let _ = self.client.disconnect().await;
        let _ = tokio::time::timeout(WAIT, self.ended).await;
    }

    /// Drops the connection without DISCONNECT.
    pub fn abort(self) {
        self.ended.abort();
    }
}

/// The reason code the broker's DISCONNECT gave, from the error that ended the client.
pub async fn server_disconnect_reason(client: Mqtt5Client) -> DisconnectReasonCode {
    match tokio::time::timeout(Duration::from_secs(10), client.ended)
        .await
        .expect("the connection ends")
        .expect("event loop task")
    {
        ConnectionError::MqttState(StateError::ServerDisconnect { reason_code, .. }) => reason_code,
        other => panic!("expected a DISCONNECT from the broker, got {other:?}"),
    }
}

/// A raw MQTT 5 connection for hand-built packets.
pub struct Raw5 {
    /// The socket.
    pub stream: TcpStream,
}

/// An MQTT 5 CONNECT (clean start, keep-alive 60, guest/guest) with `properties` (the
/// encoded property list without its length byte, at most 127 bytes).
pub fn connect5_packet(client_id: &str, properties: &[u8]) -> Vec<u8> {
    let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 5, 0b1100_0010, 0, 60];
    body.push(properties.len() as u8);
    body.extend_from_slice(properties);
    for field in [client_id.as_bytes(), b"guest", b"guest"] {
        body.extend_from_slice(&(field.len() as u16).to_be_bytes());
        body.extend_from_slice(field);
    }
    packet(0x10, &body)
}

/// A QoS 0 MQTT 5 PUBLISH of `payload` to `topic` with `properties` (encoded, without
/// the length byte).
pub fn publish5_packet(topic: &str, properties: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut body = (topic.len() as u16).to_be_bytes().to_vec();
    body.extend_from_slice(topic.as_bytes());
    body.push(properties.len() as u8);
    body.extend_from_slice(properties);
    body.extend_from_slice(payload);
    packet(0x30, &body)
}

impl Raw5 {
    /// Opens a socket to `addr`.
    pub async fn open(addr: SocketAddr) -> Raw5 {
        Raw5 {
            stream: TcpStream::connect(addr).await.expect("TCP connects"),
        }
    }

    /// Opens a socket and completes an MQTT 5 CONNECT, expecting success.
    pub async fn connected(addr: SocketAddr, client_id: &str) -> Raw5 {
        let mut raw = Raw5::open(addr).await;
        raw.send(&connect5_packet(client_id, &[])).await;
        let (first, body) = raw.read_packet().await;
        assert_eq!(first, 0x20, "CONNACK");
        assert_eq!(body[1], 0, "CONNACK success");
        raw
    }

    /// Writes bytes.
    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.expect("write");
    }

    /// Reads one packet: its first byte and its body.
    pub async fn read_packet(&mut self) -> (u8, Vec<u8>) {
        tokio::time::timeout(WAIT, async {
            let first = self.stream.read_u8().await.expect("first byte");
            let mut length = 0usize;
            for shift in (0..28).step_by(7) {
                let byte = self.stream.read_u8().await.expect("length byte");
                length |= usize::from(byte & 0x7F) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            let mut body = vec![0; length];
            self.stream.read_exact(&mut body).await.expect("body");
            (first, body)
        })
        .await
        .expect("a packet in time")
    }

    /// Reads the broker's DISCONNECT and returns its reason code, then checks the broker
    /// closes the socket.
    pub async fn disconnect_reason(&mut self) -> u8 {
        let (first, body) = self.read_packet().await;
        assert_eq!(
            first, 0xE0,
            "expected DISCONNECT, got {first:#04x} {body:02x?}"
        );
        let code = body.first().copied().unwrap_or(0);
        let mut rest = [0u8; 16];
        let closed = tokio::time::timeout(WAIT, self.stream.read(&mut rest)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "socket closed after DISCONNECT"
        );
        code
    }
}
