//! The tokio driver: accepts sockets and runs one task per connection that reads into a
//! buffer, feeds the codec and the [`Session`], and writes whatever accumulated in the
//! [`Outbox`] in one write.
//!
//! One task per connection (not a reader and a writer) and buffers allocated only while
//! there is something to read or write keep an idle connection to a few kilobytes. The
//! keep-alive and CONNECT timeouts are the only clocks, and they live here.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::{timeout, Instant};
use warren_core::accept::{serve_connections, AcceptConfig};
use warren_core::stream::{ClientStream, Reader, TlsServerConfig, Writer};

use crate::codec::decode;
use crate::outbox::Outbox;
use crate::session::{acknowledge_all, Control, End, MqttContext, Session};

/// Settings of an MQTT listener.
#[derive(Clone)]
pub struct ListenerConfig {
    /// How long a client has from connecting to sending CONNECT.
    pub connect_timeout: Duration,
    /// How long a new connection waits for the one it takes over to finish.
    pub takeover_timeout: Duration,
    /// Most connections this listener serves at once; more are refused.
    pub connection_max: Option<usize>,
    /// TLS (MQTTS): every connection completes a TLS handshake first, within the connect
    /// timeout.
    pub tls: Option<Arc<TlsServerConfig>>,
}

impl Default for ListenerConfig {
    fn default() -> Self {
        ListenerConfig {
            connect_timeout: Duration::from_secs(10),
            takeover_timeout: Duration::from_secs(5),
            connection_max: None,
            tls: None,
        }
    }
}

/// How much to read at a time while data flows.
const READ_CHUNK: usize = 16 * 1024;

/// The first read after a connection was idle: most such wake-ups are one small packet
/// (CONNECT, SUBSCRIBE, PINGREQ), and a small buffer does not fragment the heap the way a
/// freshly freed 16 KiB one per connection does. A full first read grows it to `READ_CHUNK`.
const FIRST_READ: usize = 512;

/// Accepts connections until `shutdown` turns true, then closes every connection and
/// returns once they all ended. A failed accept (out of file descriptors) backs off and
/// leaves open connections alone.
pub async fn serve(
    listener: TcpListener,
    context: MqttContext,
    config: ListenerConfig,
    shutdown: watch::Receiver<bool>,
) {
    let config = Arc::new(config);
    let (alarm_tx, alarms) = watch::channel(None);
    context.broker.subscribe_alarms(Box::new(move |reason| {
        let _ = alarm_tx.send(reason);
    }));
    let accept = AcceptConfig {
        protocol: if config.tls.is_some() {
            "mqtts"
        } else {
            "mqtt"
        },
        connection_max: config.connection_max,
        tls: config.tls.clone(),
        handshake_timeout: config.connect_timeout,
    };
    let connection_shutdown = shutdown.clone();
    serve_connections(listener, accept, shutdown, move |stream, peer| {
        run_connection(
            stream,
            peer,
            context.clone(),
            Arc::clone(&config),
            connection_shutdown.clone(),
            alarms.clone(),
        )
    })
    .await;
}

/// Runs one connection (plain or TLS) to its end.
pub async fn run_connection(
    stream: ClientStream,
    peer: SocketAddr,
    context: MqttContext,
    config: Arc<ListenerConfig>,
    mut shutdown: watch::Receiver<bool>,
    mut alarms: watch::Receiver<Option<String>>,
) {
    let outbox = Outbox::new(context.config.prefetch);
    let mut session = Session::new(context, Arc::clone(&outbox), peer.ip().is_loopback());
    if let Some(local) = stream.local_addr() {
        session.set_addresses(peer, local);
    }
    if stream.is_tls() {
        session.set_tls(stream.peer_certificate().as_deref());
    }
    tracing::debug!(connection = session.connection_id(), %peer, "accepted MQTT connection");
    let (mut reader, writer) = stream.split();
    let end = drive(
        &mut reader,
        &writer,
        &mut session,
        &outbox,
        &config,
        &mut shutdown,
        &mut alarms,
    )
    .await;
    // Whatever the session still has to say (a refusing CONNACK) goes out before the close.
    let _ = flush(&writer, &outbox).await;
    session.terminate(end);
    writer.shutdown().await;
    tracing::debug!(connection = session.connection_id(), %peer, "MQTT connection closed");
}

async fn drive(
    reader: &mut Reader,
    writer: &Writer,
    session: &mut Session,
    outbox: &Outbox,
    config: &ListenerConfig,
    shutdown: &mut watch::Receiver<bool>,
    alarms: &mut watch::Receiver<Option<String>>,
) -> End {
    let mut buffer = BytesMut::new();
    let connect_deadline = Instant::now() + config.connect_timeout;
    let mut last_heard = Instant::now();
    let mut alarms_alive = true;
    let mut busy = false;
    // The store's durable sequence number: held PUBACKs/PUBRECs go out as it moves.
    let mut durable = session.subscribe_durable();
    loop {
        // A resource alarm stops reading publishers (as RabbitMQ does: MQTT 3.1.1 has no
        // way to tell them); deliveries to subscribers go on.
        let blocked = session.is_publisher() && alarms.borrow().is_some();
        let deadline = match session.keep_alive() {
            // Silence is ours while blocked: the keep-alive restarts when reading resumes.
            Some(_) if blocked => Instant::now() + Duration::from_secs(24 * 3600),
            // MQTT-3.1.2-24: one and a half keep-alive periods without a packet.
            Some(keep_alive) => last_heard + keep_alive.mul_f32(1.5),
            None if !session.is_connected() => connect_deadline,
            None => Instant::now() + Duration::from_secs(24 * 3600),
        };
        // Biased: an alarm, a takeover or shutdown is seen before more input is read, and
        // input before deliveries (every read ends with a flush anyway), so a subscriber
        // flooded with deliveries still has its PUBACKs and PINGREQs read.
        let read = tokio::select! {
            biased;
            changed = alarms.changed(), if alarms_alive => {
                alarms_alive = changed.is_ok();
                // A client that was not read cannot be blamed for silence: restart the clock.
                last_heard = Instant::now();
                continue;
            }
            _ = outbox.kick.notified() => {
                return End::Abnormal("another connection took over the client identifier".into());
            }
            // An operator closed the connection (management API, warrenctl). MQTT 3.1.1 has
            // no way to tell the client why; like RabbitMQ, the will is published, since
            // the client did not send DISCONNECT.
            _ = outbox.operator_close.notified() => {
                let reason = session.close_requested().unwrap_or_default();
                return End::Abnormal(format!("closed by an operator: {reason}"));
            }
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    return End::Shutdown;
                }
                continue;
            }
            _ = changed_or_pending(&mut durable), if session.awaits_durability() => {
                session.release_held_acks();
                if let Err(error) = flush(writer, outbox).await {
                    return End::Abnormal(format!("socket error: {error}"));
                }
                continue;
            }
            read = read_some(reader, &mut buffer, &mut busy), if !blocked => read,
            _ = outbox.notify.notified() => {
                if let Err(error) = flush(writer, outbox).await {
                    return End::Abnormal(format!("socket error: {error}"));
                }
                continue;
            }
            _ = tokio::time::sleep_until(deadline) => {
                return End::Abnormal(if session.is_connected() {
                    "keep-alive timeout: no packet for 1.5 keep-alive periods".into()
                } else {
                    "no CONNECT within the connect timeout".into()
                });
            }
        };
        match read {
            Ok(0) => return End::Abnormal("client closed the socket without DISCONNECT".into()),
            Err(error) => return End::Abnormal(format!("socket error: {error}")),
            Ok(_) => last_heard = Instant::now(),
        }
        loop {
            match decode(&mut buffer, session.max_packet_size()) {
                Ok(Some(packet)) => match session.handle_packet(packet) {
                    Control::Continue => {}
                    Control::Close(end) => return end,
                    Control::AwaitTakeover(takeover) => {
                        takeover.kick();
                        if timeout(config.takeover_timeout, takeover.ended())
                            .await
                            .is_err()
                        {
                            tracing::warn!(
                                connection = session.connection_id(),
                                "the connection taken over did not finish in time"
                            );
                        }
                        match session.resume_connect() {
                            Control::Continue => {}
                            Control::Close(end) => return end,
                            Control::AwaitTakeover(_) => {
                                return End::Abnormal("takeover raced with another".into())
                            }
                        }
                    }
                },
                Ok(None) => break,
                Err(error) => match session.handle_decode_error(&error) {
                    Control::Close(end) => return end,
                    _ => return End::Abnormal(error.to_string()),
                },
            }
        }
        // Acknowledgements whose messages reached the disk while the batch was handled.
        session.release_held_acks();
        if let Err(error) = flush(writer, outbox).await {
            return End::Abnormal(format!("socket error: {error}"));
        }
    }
}

/// Waits for the store's durable sequence number to move (forever without a store).
async fn changed_or_pending(receiver: &mut Option<watch::Receiver<u64>>) {
    match receiver {
        Some(receiver) => {
            if receiver.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending().await,
    }
}

/// Writes everything the outbox holds, settling what it asks for and kicking queues that
/// waited for room (which may refill it, hence the loop).
async fn flush(writer: &Writer, outbox: &Outbox) -> std::io::Result<()> {
    while let Some(drained) = outbox.drain() {
        acknowledge_all(drained.to_ack);
        for queue in drained.starved {
            queue.dispatch();
        }
        if !drained.bytes.is_empty() {
            writer.write_all(&drained.bytes).await?;
        }
    }
    Ok(())
}

/// Reads what is available into `buffer`. An idle connection holds no read buffer: when
/// everything read was consumed and the last read did not fill the buffer, the buffer is
/// released, and a small one is allocated only once the socket is readable again. While data
/// flows (`busy`: the last read filled the buffer) reads go straight into 16 KiB chunks.
async fn read_some(
    reader: &mut Reader,
    buffer: &mut BytesMut,
    busy: &mut bool,
) -> std::io::Result<usize> {
    let reader = match reader {
        Reader::Plain(reader) => reader,
        // rustls buffers what it decrypted: read through it into the buffer.
        tls => return tls.read_some(buffer).await,
    };
    loop {
        if buffer.is_empty() && !*busy {
            *buffer = BytesMut::new();
            reader.readable().await?;
            buffer.reserve(FIRST_READ);
        } else if buffer.capacity() - buffer.len() < READ_CHUNK / 4 {
            buffer.reserve(READ_CHUNK);
        }
        let room = buffer.capacity() - buffer.len();
        match reader.try_read_buf(buffer) {
            Ok(read) => {
                *busy = read == room;
                return Ok(read);
            }
            // Readiness was stale, or a busy connection caught up: wait for the socket
            // (releasing the buffer first if it holds nothing).
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                *busy = false;
                if !buffer.is_empty() {
                    reader.readable().await?;
                }
            }
            Err(error) => return Err(error),
        }
    }
}
