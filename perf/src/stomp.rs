//! STOMP 1.2 load: one producer and one consumer on a `/queue/` destination, the consumer
//! with `client-individual` acks and a prefetch, against any STOMP broker (Warren, RabbitMQ's
//! STOMP plugin). A minimal client on tokio with Warren's own STOMP codec.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use warren_stomp::codec::{encode, Command, Decoded, Decoder, Frame, Limits, Version};

use crate::args::Config;
use crate::report::{report, Counters};
use crate::stats::Shared;

/// One STOMP 1.2 connection.
struct StompConn {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    rbuf: BytesMut,
    decoder: Decoder,
}

impl StompConn {
    /// Connects and completes CONNECT/CONNECTED.
    async fn open(config: &Config) -> Result<Self, String> {
        let target = match config.uri.host.parse() {
            Ok(ip) => SocketAddr::new(ip, config.uri.port),
            Err(_) => tokio::net::lookup_host((config.uri.host.as_str(), config.uri.port))
                .await
                .map_err(|e| format!("resolve {}: {e}", config.uri.host))?
                .next()
                .ok_or_else(|| format!("{} has no address", config.uri.host))?,
        };
        let stream = TcpStream::connect(target)
            .await
            .map_err(|e| format!("connect {target}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let (rd, wr) = stream.into_split();
        let mut conn = StompConn {
            rd,
            wr,
            rbuf: BytesMut::new(),
            decoder: Decoder::new(Limits::default()),
        };
        conn.send(
            &Frame::new(Command::Connect)
                .with_header("accept-version", "1.2")
                .with_header("host", config.uri.vhost.clone())
                .with_header("login", config.uri.user.clone())
                .with_header("passcode", config.uri.password.clone())
                .with_header("heart-beat", "0,0"),
        )
        .await?;
        let connected = conn.recv().await?;
        if connected.command != Command::Connected {
            return Err(describe_unexpected("CONNECTED", &connected));
        }
        conn.decoder.set_version(Version::V1_2);
        Ok(conn)
    }

    async fn send(&mut self, frame: &Frame) -> Result<(), String> {
        let mut out = BytesMut::new();
        encode(frame, Version::V1_2, &mut out);
        self.wr.write_all(&out).await.map_err(|e| e.to_string())
    }

    /// The next frame (heart-beats skipped).
    async fn recv(&mut self) -> Result<Frame, String> {
        loop {
            if let Some(frame) = self.try_decode()? {
                return Ok(frame);
            }
            self.read_more().await?;
        }
    }

    fn try_decode(&mut self) -> Result<Option<Frame>, String> {
        loop {
            match self.decoder.decode(&mut self.rbuf) {
                Ok(Some(Decoded::Frame(frame))) => return Ok(Some(frame)),
                Ok(Some(Decoded::Heartbeat)) => continue,
                Ok(None) => return Ok(None),
                Err(error) => return Err(format!("bad frame from the broker: {error}")),
            }
        }
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

fn describe_unexpected(expected: &str, frame: &Frame) -> String {
    match frame.command {
        Command::Error => format!(
            "expected {expected}, got ERROR: {} {}",
            frame.header("message").unwrap_or(""),
            String::from_utf8_lossy(&frame.body)
        ),
        other => format!("expected {expected}, got {}", other.as_str()),
    }
}

/// `--stomp-queue`: one producer sending to `/queue/NAME` (a receipt every tenth of the `-c`
/// window, default 1000, bounds what is in flight) and one consumer with
/// `client-individual` acks and `-q` prefetch (default 200).
pub async fn queue(config: Arc<Config>, shared: Arc<Shared>) -> Result<(), String> {
    let destination = format!("/queue/{}", config.queue);
    let counters = Arc::new(Counters::default());
    let mut consumer = StompConn::open(&config).await?;
    let prefetch = if config.qos == 0 { 200 } else { config.qos };
    consumer
        .send(
            &Frame::new(Command::Subscribe)
                .with_header("destination", destination.clone())
                .with_header("id", "0")
                .with_header("ack", "client-individual")
                .with_header("prefetch-count", prefetch.to_string())
                .with_header("receipt", "subscribed"),
        )
        .await?;
    let receipt = consumer.recv().await?;
    if receipt.command != Command::Receipt {
        return Err(describe_unexpected("RECEIPT", &receipt));
    }
    let mut tasks = tokio::task::JoinSet::new();
    {
        let (counters, shared) = (counters.clone(), shared.clone());
        tasks.spawn(async move {
            let mut stop = shared.stop_tx.subscribe();
            let mut acks = BytesMut::new();
            loop {
                while let Some(frame) = consumer.try_decode()? {
                    if frame.command != Command::Message {
                        return Err(describe_unexpected("MESSAGE", &frame));
                    }
                    let ack_id = frame.header("ack").ok_or("MESSAGE without an ack header")?;
                    encode(
                        &Frame::new(Command::Ack).with_header("id", ack_id),
                        Version::V1_2,
                        &mut acks,
                    );
                    counters.delivered.fetch_add(1, Ordering::Relaxed);
                }
                if !acks.is_empty() {
                    consumer
                        .wr
                        .write_all(&acks)
                        .await
                        .map_err(|e| e.to_string())?;
                    acks.clear();
                }
                tokio::select! {
                    read = consumer.read_more() => read?,
                    _ = stop.changed() => return Ok(()),
                }
            }
        });
    }
    let mut producer = StompConn::open(&config).await?;
    let window = config.confirm.unwrap_or(1000).max(10);
    let receipt_every = window / 10;
    {
        let (counters, shared) = (counters.clone(), shared.clone());
        let body = vec![b'x'; config.size];
        tasks.spawn(async move {
            let mut out = BytesMut::new();
            let mut outstanding = 0usize;
            let mut count = 0u64;
            while !shared.is_stopping() {
                out.clear();
                while outstanding < 10 {
                    for i in 0..receipt_every {
                        let mut frame = Frame::new(Command::Send)
                            .with_header("destination", destination.clone())
                            .with_body(body.clone());
                        if i + 1 == receipt_every {
                            frame = frame.with_header("receipt", count.to_string());
                        }
                        encode(&frame, Version::V1_2, &mut out);
                        count += 1;
                    }
                    outstanding += 1;
                }
                producer
                    .wr
                    .write_all(&out)
                    .await
                    .map_err(|e| e.to_string())?;
                counters.sent.store(count, Ordering::Relaxed);
                let frame = producer.recv().await?;
                if frame.command != Command::Receipt {
                    return Err(describe_unexpected("RECEIPT", &frame));
                }
                outstanding -= 1;
                while let Some(frame) = producer.try_decode()? {
                    if frame.command != Command::Receipt {
                        return Err(describe_unexpected("RECEIPT", &frame));
                    }
                    outstanding -= 1;
                }
            }
            Ok(())
        });
    }

    let scenario = format!("STOMP queue, client-individual acks, prefetch {prefetch}");
    report(&config, &shared, &counters, &scenario, tasks).await
}
