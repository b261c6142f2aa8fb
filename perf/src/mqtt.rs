//! MQTT 3.1.1 or 5.0 (`--mqtt5`) load: idle connections, QoS 0 fan-in and QoS 1
//! one-to-one, against any MQTT broker (Warren, RabbitMQ's MQTT plugin, Mosquitto). A
//! minimal client on tokio with Warren's own MQTT codec, so the tool is not the bottleneck.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Semaphore;
use tokio_tungstenite::WebSocketStream;
use warren_mqtt::codec::{
    self, encode_publish, encode_publish_v5, Connect, ConnectReturnCode, Packet, ProtocolLevel,
    PubAck, QoS, Subscribe, SubscribeReturnCode,
};

use crate::args::Config;
use crate::report::{report, Counters};
use crate::stats::Shared;
use crate::{fmt_rate, rss_kib};

/// The largest packet the tool accepts from a broker.
const MAX_PACKET: usize = 1 << 20;

/// One MQTT connection.
struct MqttConn {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    rbuf: BytesMut,
    protocol: ProtocolLevel,
    /// The broker's receive maximum from CONNACK (MQTT 5; 65535 when absent or 3.1.1).
    receive_maximum: u16,
}

/// The protocol `--mqtt5` asks for.
fn protocol(config: &Config) -> ProtocolLevel {
    if config.mqtt5 {
        ProtocolLevel::V5
    } else {
        ProtocolLevel::V3_1_1
    }
}

/// Appends one PUBLISH in `protocol` (MQTT 5: with an empty property list).
fn encode_pub(
    out: &mut BytesMut,
    protocol: ProtocolLevel,
    topic: &str,
    qos: QoS,
    packet_id: Option<u16>,
    body: &[u8],
) -> Result<(), String> {
    let result = if protocol.is_v5() {
        encode_publish_v5(out, topic, qos, packet_id, (false, false), body, None)
    } else {
        encode_publish(out, topic, qos, packet_id, false, false, body)
    };
    result.map_err(|e| e.to_string())
}

impl MqttConn {
    /// Connects (from source address `source` when given) and completes CONNECT/CONNACK.
    async fn open(
        config: &Config,
        client_id: &str,
        source: Option<IpAddr>,
    ) -> Result<Self, String> {
        let stream = connect_socket(config, source).await?;
        let (rd, wr) = stream.into_split();
        let mut conn = MqttConn {
            rd,
            wr,
            rbuf: BytesMut::new(),
            protocol: protocol(config),
            receive_maximum: u16::MAX,
        };
        conn.send(&connect_packet(config, client_id)).await?;
        match conn.recv().await? {
            Packet::ConnAck(ack) if ack.code == ConnectReturnCode::Accepted => {
                if let Some(max) = ack.properties.as_deref().and_then(|p| p.receive_maximum) {
                    conn.receive_maximum = max;
                }
                Ok(conn)
            }
            Packet::ConnAck(ack) => Err(format!("CONNACK refused: {:?}", ack.code)),
            other => Err(format!("expected CONNACK, got {:?}", other.packet_type())),
        }
    }

    async fn send(&mut self, packet: &Packet) -> Result<(), String> {
        let mut out = BytesMut::new();
        codec::encode_with(packet, &mut out, self.protocol).map_err(|e| e.to_string())?;
        self.wr.write_all(&out).await.map_err(|e| e.to_string())
    }

    /// Subscribes to one filter and waits for the SUBACK.
    async fn subscribe(&mut self, filter: &str, qos: QoS) -> Result<(), String> {
        self.send(&subscribe_packet(filter, qos)).await?;
        expect_suback(self.recv().await?, filter)
    }

    /// The next packet from the broker.
    async fn recv(&mut self) -> Result<Packet, String> {
        loop {
            if let Some(packet) = self.try_decode()? {
                return Ok(packet);
            }
            self.read_more().await?;
        }
    }

    fn try_decode(&mut self) -> Result<Option<Packet>, String> {
        codec::decode_with(&mut self.rbuf, MAX_PACKET, self.protocol)
            .map_err(|e| format!("bad packet: {e}"))
    }

    async fn read_more(&mut self) -> Result<(), String> {
        self.rbuf.reserve(64 * 1024);
        match self.rd.read_buf(&mut self.rbuf).await {
            Ok(0) => Err("the broker closed the connection".into()),
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// A SUBSCRIBE for one filter.
fn subscribe_packet(filter: &str, qos: QoS) -> Packet {
    Packet::Subscribe(Subscribe {
        packet_id: 1,
        filters: vec![(filter.to_owned(), qos)],
        options: Vec::new(),
        properties: None,
    })
}

/// Whether `packet` is a SUBACK granting the subscription to `filter`.
fn expect_suback(packet: Packet, filter: &str) -> Result<(), String> {
    match packet {
        Packet::SubAck(ack) if ack.return_codes.first() != Some(&SubscribeReturnCode::Failure) => {
            Ok(())
        }
        Packet::SubAck(_) => Err(format!("subscription to {filter} refused")),
        other => Err(format!("expected SUBACK, got {:?}", other.packet_type())),
    }
}

/// The CONNECT every connection of the tool sends.
fn connect_packet(config: &Config, client_id: &str) -> Packet {
    Packet::Connect(Connect {
        protocol: protocol(config),
        keep_alive: 0,
        client_id: client_id.to_owned(),
        clean_session: true,
        last_will: None,
        username: Some(config.uri.user.clone()),
        password: Some(Bytes::from(config.uri.password.clone().into_bytes())),
        properties: None,
    })
}

/// An idle connection held by `--mqtt-idle`: plain TCP, or WebSocket (`--websocket`).
enum Held {
    Tcp(MqttConn),
    Web(Box<WebSocketStream<TcpStream>>),
}

impl Held {
    /// Whether the broker has not closed it (a closed socket reads as EOF).
    fn is_open(&self) -> bool {
        let mut byte = [0u8; 1];
        let read = match self {
            Held::Tcp(conn) => conn.rd.try_read(&mut byte),
            Held::Web(stream) => stream.get_ref().try_read(&mut byte),
        };
        match read {
            Ok(0) => false,
            Err(error) => error.kind() == std::io::ErrorKind::WouldBlock,
            Ok(_) => true,
        }
    }
}

/// Opens one Web-MQTT connection (`--websocket PATH`, subprotocol `mqtt`), completes CONNECT
/// and one QoS 1 subscription to `filter` over it.
async fn open_websocket(
    config: &Config,
    path: &str,
    client_id: &str,
    source: Option<IpAddr>,
    filter: &str,
) -> Result<Held, String> {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::http::HeaderValue;
    use tokio_tungstenite::tungstenite::Message;
    let stream = connect_socket(config, source).await?;
    let url = format!("ws://{}:{}{path}", config.uri.host, config.uri.port);
    let mut request = url.into_client_request().map_err(|e| e.to_string())?;
    request
        .headers_mut()
        .insert("sec-websocket-protocol", HeaderValue::from_static("mqtt"));
    let (mut web, _) = tokio_tungstenite::client_async(request, stream)
        .await
        .map_err(|e| format!("WebSocket handshake: {e}"))?;
    let level = protocol(config);
    let mut buffer = BytesMut::new();
    for packet in [
        connect_packet(config, client_id),
        subscribe_packet(filter, QoS::AtLeastOnce),
    ] {
        let mut out = BytesMut::new();
        codec::encode_with(&packet, &mut out, level).map_err(|e| e.to_string())?;
        web.send(Message::Binary(out.freeze()))
            .await
            .map_err(|e| e.to_string())?;
        let answer = loop {
            if let Some(answer) = codec::decode_with(&mut buffer, MAX_PACKET, level)
                .map_err(|e| format!("bad packet: {e}"))?
            {
                break answer;
            }
            match web.next().await {
                Some(Ok(Message::Binary(data))) => buffer.extend_from_slice(&data),
                Some(Ok(_)) => continue,
                Some(Err(error)) => return Err(error.to_string()),
                None => return Err("the broker closed the connection".into()),
            }
        };
        match answer {
            Packet::ConnAck(ack) if ack.code != ConnectReturnCode::Accepted => {
                return Err(format!("CONNACK refused: {:?}", ack.code))
            }
            Packet::ConnAck(_) => {}
            other => expect_suback(other, filter)?,
        }
    }
    Ok(Held::Web(Box::new(web)))
}

/// A TCP connection to the `--uri`'s broker, from `source` when given, without Nagle.
async fn connect_socket(config: &Config, source: Option<IpAddr>) -> Result<TcpStream, String> {
    let target = tokio::net::lookup_host((config.uri.host.as_str(), config.uri.port))
        .await
        .map_err(|e| format!("resolve {}: {e}", config.uri.host))?
        .next()
        .ok_or_else(|| format!("{} has no address", config.uri.host))?;
    let socket = match target {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(|e| format!("socket: {e}"))?;
    if let Some(source) = source {
        socket
            .bind(SocketAddr::new(source, 0))
            .map_err(|e| format!("bind {source}: {e}"))?;
    }
    let stream = socket
        .connect(target)
        .await
        .map_err(|e| format!("connect {target}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    Ok(stream)
}

/// The source address for connection `i` (127.0.0.1..127.0.0.N in turn).
fn source_addr(config: &Config, i: usize) -> Option<IpAddr> {
    (config.source_addrs > 1).then(|| {
        IpAddr::V4(Ipv4Addr::new(
            127,
            0,
            0,
            1 + (i % config.source_addrs as usize) as u8,
        ))
    })
}

/// Raises this process's open-file soft limit to its hard limit, for many connections.
pub fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        let mut limit: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur < limit.rlim_max
        {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

/// `--mqtt-idle N`: N connections, each with one QoS 1 subscription, held for `--time`.
pub async fn idle(config: Arc<Config>, shared: Arc<Shared>, n: usize) -> Result<(), String> {
    raise_fd_limit();
    let gate = Arc::new(Semaphore::new(config.handshake_batch));
    let broker_rss_before = config.broker_pid.and_then(rss_kib);
    let start = Instant::now();
    let mut opening = tokio::task::JoinSet::new();
    for i in 0..n {
        let (gate, config) = (gate.clone(), config.clone());
        opening.spawn(async move {
            let _permit = gate.acquire().await;
            let (client_id, filter) = (format!("perf-idle-{i}"), format!("perf/idle/{i}"));
            let source = source_addr(&config, i);
            if let Some(path) = &config.websocket {
                return open_websocket(&config, path, &client_id, source, &filter).await;
            }
            let mut conn = MqttConn::open(&config, &client_id, source).await?;
            conn.subscribe(&filter, QoS::AtLeastOnce).await?;
            // Hold with no buffers.
            conn.rbuf = BytesMut::new();
            Ok::<Held, String>(Held::Tcp(conn))
        });
    }
    let mut held = Vec::with_capacity(n);
    let mut failed = 0usize;
    let mut first_error = None;
    let mut next = start + Duration::from_secs(1);
    while let Some(result) = opening.join_next().await {
        match result {
            Ok(Ok(conn)) => held.push(conn),
            Ok(Err(error)) => {
                failed += 1;
                first_error.get_or_insert(error);
            }
            Err(error) => {
                failed += 1;
                first_error.get_or_insert(error.to_string());
            }
        }
        if Instant::now() >= next {
            println!(
                "time: {:.1}s, opening: {} subscribed, {failed} failed of {n}",
                start.elapsed().as_secs_f64(),
                held.len()
            );
            next += Duration::from_secs(1);
        }
        if shared.is_stopping() {
            break;
        }
    }
    let open_time = start.elapsed();
    let ok = held.len();
    println!(
        "opened {ok} of {n} MQTT connections (one QoS 1 subscription each) in {:.2}s, {} conn/s, \
         failed {failed}{}",
        open_time.as_secs_f64(),
        fmt_rate(ok as f64 / open_time.as_secs_f64().max(1e-9)),
        first_error
            .map(|e| format!(" (first error: {e})"))
            .unwrap_or_default()
    );
    if ok == 0 {
        return Err("no connection could be opened".into());
    }
    // Let the broker settle, then sample its memory while holding.
    let hold = Duration::from_secs_f64(config.time.max(1.0));
    let hold_start = Instant::now();
    let mut stop = shared.stop_tx.subscribe();
    let mut peak_rss = 0;
    while hold_start.elapsed() < hold && !shared.is_stopping() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = stop.changed() => break,
        }
        if let Some(rss) = config.broker_pid.and_then(rss_kib) {
            peak_rss = peak_rss.max(rss);
        }
    }
    // Connections the broker closed meanwhile show as readable with EOF.
    let still_open = held.iter().filter(|conn| conn.is_open()).count();
    if let (Some(before), Some(after)) = (broker_rss_before, config.broker_pid.and_then(rss_kib)) {
        println!(
            "broker rss: {} KiB before, {} KiB holding (peak {} KiB), {:.2} KiB per connection",
            before,
            after,
            peak_rss,
            after.saturating_sub(before) as f64 / ok as f64
        );
    }
    println!(
        "summary: {ok} of {n} connections subscribed in {:.2}s ({failed} failed), {still_open} \
         still open after {:.1}s",
        open_time.as_secs_f64(),
        hold_start.elapsed().as_secs_f64()
    );
    drop(held);
    Ok(())
}

/// `--mqtt-fan-in`: `-x` QoS 0 publishers on their own topics, one subscriber on
/// `devices/+/telemetry`.
pub async fn fan_in(config: Arc<Config>, shared: Arc<Shared>) -> Result<(), String> {
    raise_fd_limit();
    let counters = Arc::new(Counters::default());
    let mut subscriber = MqttConn::open(&config, "perf-fan-in-subscriber", None).await?;
    subscriber
        .subscribe("devices/+/telemetry", QoS::AtMostOnce)
        .await?;
    let mut tasks = tokio::task::JoinSet::new();
    {
        let (counters, shared) = (counters.clone(), shared.clone());
        tasks.spawn(async move {
            let mut stop = shared.stop_tx.subscribe();
            loop {
                while let Some(packet) = subscriber.try_decode()? {
                    if let Packet::Publish(_) = packet {
                        counters.delivered.fetch_add(1, Ordering::Relaxed);
                    }
                }
                tokio::select! {
                    read = subscriber.read_more() => read?,
                    _ = stop.changed() => return Ok(()),
                }
            }
        });
    }
    let body = vec![b'x'; config.size];
    for i in 0..config.producers {
        let mut publisher = MqttConn::open(
            &config,
            &format!("perf-fan-in-{i}"),
            source_addr(&config, i),
        )
        .await?;
        let (counters, shared, body) = (counters.clone(), shared.clone(), body.clone());
        let batch = config.batch.clamp(1, 100);
        // `-r` is the total rate here, shared evenly by the publishers.
        let per_publisher =
            (config.rate > 0).then(|| config.rate as f64 / config.producers.max(1) as f64);
        tasks.spawn(async move {
            let topic = format!("devices/{i}/telemetry");
            let mut out = BytesMut::new();
            let started = std::time::Instant::now();
            let mut published = 0u64;
            while !shared.is_stopping() {
                out.clear();
                let mut count = batch as u64;
                if let Some(rate) = per_publisher {
                    // Paced: what the rate allows by now, at most a batch; the 5 ms sleeps
                    // of 200 publishers spread their writes over time.
                    let due = (started.elapsed().as_secs_f64() * rate) as u64;
                    count = due.saturating_sub(published).min(batch as u64);
                    if count == 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                        continue;
                    }
                }
                published += count;
                for _ in 0..count {
                    encode_pub(
                        &mut out,
                        publisher.protocol,
                        &topic,
                        QoS::AtMostOnce,
                        None,
                        &body,
                    )?;
                }
                publisher
                    .wr
                    .write_all(&out)
                    .await
                    .map_err(|e| e.to_string())?;
                counters.sent.fetch_add(count, Ordering::Relaxed);
            }
            Ok(())
        });
    }
    report(&config, &shared, &counters, "QoS 0 fan-in", tasks).await
}

/// `--mqtt-qos1`: one QoS 1 publisher with an in-flight window, one QoS 1 subscriber that
/// acknowledges every delivery.
pub async fn qos1(config: Arc<Config>, shared: Arc<Shared>) -> Result<(), String> {
    let counters = Arc::new(Counters::default());
    let mut subscriber = MqttConn::open(&config, "perf-qos1-subscriber", None).await?;
    subscriber.subscribe("perf/qos1", QoS::AtLeastOnce).await?;
    let mut tasks = tokio::task::JoinSet::new();
    {
        let (counters, shared) = (counters.clone(), shared.clone());
        tasks.spawn(async move {
            let mut stop = shared.stop_tx.subscribe();
            let mut acks = BytesMut::new();
            loop {
                while let Some(packet) = subscriber.try_decode()? {
                    if let Packet::Publish(publish) = packet {
                        counters.delivered.fetch_add(1, Ordering::Relaxed);
                        if let Some(packet_id) = publish.packet_id {
                            codec::encode_with(
                                &Packet::PubAck(PubAck::new(packet_id)),
                                &mut acks,
                                subscriber.protocol,
                            )
                            .map_err(|e| e.to_string())?;
                        }
                    }
                }
                if !acks.is_empty() {
                    subscriber
                        .wr
                        .write_all(&acks)
                        .await
                        .map_err(|e| e.to_string())?;
                    acks.clear();
                }
                tokio::select! {
                    read = subscriber.read_more() => read?,
                    _ = stop.changed() => return Ok(()),
                }
            }
        });
    }
    let mut publisher = MqttConn::open(&config, "perf-qos1-publisher", None).await?;
    // An MQTT 5 broker disconnects a client with more QoS 1 publishes unacknowledged than
    // its receive maximum (0x93).
    let window = config
        .confirm
        .unwrap_or(100)
        .clamp(1, usize::from(publisher.receive_maximum));
    println!(
        "QoS 1 in-flight window {window} (broker receive maximum {})",
        publisher.receive_maximum
    );
    let (pub_counters, pub_shared) = (counters.clone(), shared.clone());
    let body = vec![b'x'; config.size];
    tasks.spawn(async move {
        let mut in_flight = 0usize;
        let mut next_id: u16 = 1;
        let mut out = BytesMut::new();
        while !pub_shared.is_stopping() {
            out.clear();
            while in_flight < window {
                encode_pub(
                    &mut out,
                    publisher.protocol,
                    "perf/qos1",
                    QoS::AtLeastOnce,
                    Some(next_id),
                    &body,
                )?;
                next_id = if next_id == u16::MAX { 1 } else { next_id + 1 };
                in_flight += 1;
                pub_counters.sent.fetch_add(1, Ordering::Relaxed);
            }
            if !out.is_empty() {
                publisher
                    .wr
                    .write_all(&out)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            // Wait for at least one PUBACK, then take every one already read.
            match publisher.recv().await? {
                Packet::PubAck(_) => in_flight -= 1,
                other => return Err(format!("expected PUBACK, got {:?}", other.packet_type())),
            }
            while let Some(packet) = publisher.try_decode()? {
                if let Packet::PubAck(_) = packet {
                    in_flight -= 1;
                }
            }
        }
        Ok(())
    });
    report(&config, &shared, &counters, "QoS 1 one-to-one", tasks).await
}
