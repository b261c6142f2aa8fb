//! The MQTT keep-alive in tokio's paused time: a client drives a whole connection (driver,
//! session, outbox, core) over an in-memory pipe, and time moves only when every task waits,
//! straight to the next timer, so the disconnect is checked at the virtual millisecond
//! MQTT-3.1.2-24 puts it (one and a half keep-alive periods without a packet), without
//! sleeping. A pipe rather than a loopback socket: with a socket, tokio's auto-advance moves
//! the clock while the kernel still holds bytes for the other end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::time::Instant;
use warren_core::access::Permissions;
use warren_core::broker::Limits;
use warren_core::retained::InMemoryRetained;
use warren_core::stream::ClientStream;
use warren_core::websocket::MemoryTunnel;
use warren_core::Broker;
use warren_mqtt::driver::run_stream;
use warren_mqtt::{ClientRegistry, ListenerConfig, MqttContext, SessionConfig};

/// An MQTT 3.1.1 CONNECT with a clean session, no credentials (the default user) and the
/// given keep-alive in seconds.
fn connect_packet(client_id: &str, keep_alive: u16) -> Vec<u8> {
    let mut variable = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0x02];
    variable.extend_from_slice(&keep_alive.to_be_bytes());
    variable.extend_from_slice(&(client_id.len() as u16).to_be_bytes());
    variable.extend_from_slice(client_id.as_bytes());
    let mut packet = vec![0x10, variable.len() as u8];
    packet.extend_from_slice(&variable);
    packet
}

const CONNACK_ACCEPTED: [u8; 4] = [0x20, 0x02, 0x00, 0x00];
const PINGREQ: [u8; 2] = [0xC0, 0x00];
const PINGRESP: [u8; 2] = [0xD0, 0x00];

/// A connection served by the driver, its client end and the driver's task.
fn connect() -> (DuplexStream, tokio::task::JoinHandle<()>) {
    let broker = Broker::new(Limits::default());
    broker.add_user("guest", "guest", vec![]);
    broker
        .add_vhost("/")
        .set_permissions("guest", Permissions::full());
    let context = Arc::new(MqttContext {
        broker,
        registry: ClientRegistry::new(),
        retained: InMemoryRetained::new(),
        config: Arc::new(SessionConfig::default()),
    });
    let (server, client) = MemoryTunnel::pair(64 * 1024);
    let stream = ClientStream::Tunnel(Box::new(server));
    let peer = SocketAddr::from(([127, 0, 0, 1], 40_000));
    let driver = tokio::spawn(run_stream(
        stream,
        peer,
        context,
        Arc::new(ListenerConfig::default()),
    ));
    (client, driver)
}

/// Reads exactly `N` bytes.
async fn read<const N: usize>(client: &mut DuplexStream) -> [u8; N] {
    let mut bytes = [0u8; N];
    client
        .read_exact(&mut bytes)
        .await
        .expect("the broker answers");
    bytes
}

/// A client silent after CONNECT with a 1 s keep-alive is disconnected 1.5 s later, not
/// before, and its connection's task ends.
#[tokio::test(start_paused = true)]
async fn a_silent_client_is_disconnected_after_one_and_a_half_keep_alives() {
    let (mut client, driver) = connect();
    client
        .write_all(&connect_packet("silent", 1))
        .await
        .expect("pipe");
    assert_eq!(read::<4>(&mut client).await, CONNACK_ACCEPTED);
    let connected = Instant::now();
    let mut rest = Vec::new();
    client
        .read_to_end(&mut rest)
        .await
        .expect("the broker closes its end");
    assert!(
        rest.is_empty(),
        "nothing sent to a silent MQTT 3.1.1 client: {rest:?}"
    );
    assert_eq!(
        connected.elapsed(),
        Duration::from_millis(1500),
        "disconnected after 1.5 keep-alive periods"
    );
    driver.await.expect("the driver ends without panicking");
}

/// A client that pings within its keep-alive stays connected however long it is idle, and
/// each PINGREQ is answered.
#[tokio::test(start_paused = true)]
async fn a_client_that_pings_within_its_keep_alive_stays_connected() {
    let (mut client, driver) = connect();
    client
        .write_all(&connect_packet("pinging", 1))
        .await
        .expect("pipe");
    assert_eq!(read::<4>(&mut client).await, CONNACK_ACCEPTED);
    let connected = Instant::now();
    for _ in 0..100 {
        // Just under the 1.5 s the broker allows.
        tokio::time::sleep(Duration::from_millis(1400)).await;
        client.write_all(&PINGREQ).await.expect("still connected");
        assert_eq!(read::<2>(&mut client).await, PINGRESP);
    }
    assert_eq!(connected.elapsed(), Duration::from_secs(140));
    assert!(!driver.is_finished(), "still connected after 140 s");
}
