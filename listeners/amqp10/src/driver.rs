//! The tokio driver of an AMQP 1.0 connection: one task per connection that reads into a
//! buffer, feeds the [`Connection`], turns mailbox deliveries into frames, and writes
//! everything produced by one turn in a single write. The idle timeouts are its only clocks.
//!
//! Connections arrive from the AMQP 0-9-1 listener's accept loop, which reads the 8-byte
//! protocol header and hands `AMQP 3 1 0 0` / `AMQP 0 1 0 0` here ([`run_connection`]): plain
//! TCP from the AMQP port, TLS from the AMQPS port (the client's verified certificate, if
//! any, serves SASL EXTERNAL).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::sync::watch;
use tokio::time::Instant;
use warren_core::flow::{observe, PublisherFlow};
use warren_core::stream::ClientStream;
use warren_core::Broker;

use crate::codec::encode_empty_frame;
use crate::session::{Amqp10Config, Connection, Control};

/// Serves one AMQP 1.0 connection whose protocol header was already read. `alarms` carries
/// the broker's resource-alarm state (`Broker::subscribe_alarms`): while one is raised,
/// publishing links get no new credit.
pub async fn run_connection(
    stream: ClientStream,
    peer: SocketAddr,
    header: [u8; 8],
    broker: Arc<Broker>,
    config: Arc<Amqp10Config>,
    mut shutdown: watch::Receiver<bool>,
    mut alarms: watch::Receiver<Option<String>>,
) {
    let broker_durable = broker
        .message_store()
        .map(|store| store.subscribe_durable());
    // Publisher flow control takes the form of link credit: while a queue this connection
    // published to is congested (or the store is behind), publishing links get no new credit.
    let mut flow = PublisherFlow::new(broker.message_store());
    let mut connection = Connection::new(broker, Arc::clone(&config), peer.ip().is_loopback());
    if let Some(local) = stream.local_addr() {
        connection.set_addresses(peer, local);
    }
    if stream.is_tls() {
        connection.set_tls(stream.peer_certificate().as_deref());
    }
    let (mut reader, writer) = stream.split();
    let connection_id = connection.connection_id();
    tracing::debug!(connection = connection_id, %peer, "accepted AMQP 1.0 connection");
    let mailbox = Arc::clone(connection.mailbox());
    let mut durable = broker_durable;
    let mut control = connection.start(header);
    let mut buffer = BytesMut::new();
    let handshake_deadline = Instant::now() + config.handshake_timeout;
    let mut close_deadline: Option<Instant> = None;
    let mut last_read = Instant::now();
    let mut last_write = Instant::now();
    let mut shutting_down = false;
    let mut alarms_alive = true;
    connection.set_blocked(alarms.borrow().is_some());
    let mut operator_closed = false;
    while control == Control::Continue {
        // An operator asked this connection to close (management API, warrenctl); the
        // registration wakes the mailbox.
        if !operator_closed {
            if let Some(reason) = connection.close_requested() {
                operator_closed = true;
                control = connection.close_by_operator(&reason);
                continue;
            }
        }
        if !connection.out.is_empty() {
            if writer.write_all(&connection.out).await.is_err() {
                break;
            }
            connection.out.clear();
            last_write = Instant::now();
        }
        if connection.is_closing() && close_deadline.is_none() {
            close_deadline = Some(Instant::now() + config.close_timeout);
        }
        if connection.is_closed() && close_deadline.is_none() {
            close_deadline = Some(Instant::now() + connection.closing_timeout());
        }
        let read_deadline = if let Some(deadline) = close_deadline {
            deadline
        } else if !connection.is_open() {
            handshake_deadline
        } else {
            match config.idle_timeout {
                Some(timeout) => last_read + timeout,
                None => Instant::now() + Duration::from_secs(24 * 3600),
            }
        };
        let heartbeat_at = connection
            .remote_idle_timeout()
            .filter(|_| connection.is_open())
            .map(|timeout| last_write + timeout / 2);
        let flow_paused = flow.is_paused();
        tokio::select! {
            read = reader.read_some(&mut buffer) => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        reader.acknowledge_now();
                        last_read = Instant::now();
                        // The alarm state as of now applies to the frames just read.
                        connection.set_blocked(alarms.borrow().is_some() || flow.is_paused());
                        let (next, congested) =
                            observe(|| connection.handle_input(&mut buffer));
                        control = next;
                        flow.hold(congested);
                        // Credit handed out from now on follows the queues just published to.
                        connection.set_blocked(alarms.borrow().is_some() || flow.is_paused());
                        connection.process_mailbox();
                    }
                }
            }
            _ = mailbox.notify.notified() => connection.process_mailbox(),
            // Dispositions of durable messages go out once the store has them on disk.
            _ = durable_changed(&mut durable), if connection.awaits_durability() => {
                connection.flush_durable();
            }
            changed = alarms.changed(), if alarms_alive => {
                alarms_alive = changed.is_ok();
                connection.set_blocked(alarms.borrow().is_some() || flow.is_paused());
            }
            _ = flow.changed(), if flow_paused => {
                connection.set_blocked(alarms.borrow().is_some() || flow.is_paused());
            }
            _ = sleep_until(heartbeat_at) => encode_empty_frame(&mut connection.out),
            _ = tokio::time::sleep_until(read_deadline) => {
                if close_deadline.is_some() || !connection.is_open() {
                    break;
                }
                tracing::warn!(connection = connection_id, %peer, "AMQP 1.0 client idle past the idle timeout");
                control = connection.idle_timeout_expired();
            }
            changed = shutdown.changed(), if !shutting_down => {
                shutting_down = true;
                if changed.is_err() || *shutdown.borrow() {
                    control = connection.force_close("broker shutdown");
                }
            }
        }
        // A publisher whose socket always has data would otherwise keep its worker thread.
        tokio::task::yield_now().await;
    }
    if !connection.out.is_empty() {
        let _ = writer.write_all(&connection.out).await;
    }
    connection.terminate();
    writer.shutdown().await;
    tracing::debug!(connection = connection_id, %peer, "AMQP 1.0 connection closed");
}

/// Serves one AMQP 1.0 connection that arrived over WebSocket (`web_amqp.*`, subprotocol
/// `amqp`, the OASIS AMQP WebSocket binding): reads its protocol header from the tunnel, as
/// the AMQP port's accept loop does from TCP, and runs it as [`run_connection`] runs any
/// other. An unsupported header is answered with the one the broker wants, then closed.
pub async fn run_websocket_connection(
    mut stream: ClientStream,
    peer: SocketAddr,
    broker: Arc<Broker>,
    config: Arc<Amqp10Config>,
    shutdown: watch::Receiver<bool>,
    alarms: watch::Receiver<Option<String>>,
) {
    let mut header = [0u8; 8];
    match tokio::time::timeout(config.handshake_timeout, stream.read_exact(&mut header)).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::debug!(%peer, %error, "AMQP 1.0 over WebSocket: no protocol header");
            return;
        }
        Err(_) => {
            tracing::warn!(%peer, "AMQP 1.0 over WebSocket: no protocol header in time");
            return;
        }
    }
    run_connection(stream, peer, header, broker, config, shutdown, alarms).await;
}

/// Waits for the store's durable sequence number to move (forever without a store).
async fn durable_changed(receiver: &mut Option<watch::Receiver<u64>>) {
    match receiver {
        Some(receiver) => {
            if receiver.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
