//! Stream protocol load (RabbitMQ's port 5552 protocol): one producer publishing batches with
//! confirms, at most `-c` unconfirmed messages (default 10,000), and one consumer reading the
//! stream from `first` with chunk credit. A minimal client on tokio with Warren's own stream
//! codec (`warren_stream::codec`), against any stream broker (Warren, RabbitMQ's stream
//! plugin).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_stream::codec::{
    code, encode, key, split_frame, OffsetSpecification, PublishedMessage, Request,
};

use crate::args::Config;
use crate::report::{report, Counters};
use crate::stats::Shared;

/// Messages per Publish frame.
const BATCH: usize = 100;
/// Chunks a consumer may hold.
const CREDIT: u16 = 10;

/// One authenticated, open stream protocol connection.
struct StreamConn {
    stream: TcpStream,
    buffer: BytesMut,
}

impl StreamConn {
    async fn open(config: &Config) -> Result<StreamConn, String> {
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
        let mut conn = StreamConn {
            stream,
            buffer: BytesMut::with_capacity(1 << 20),
        };
        conn.request(Request::PeerProperties {
            correlation_id: 1,
            properties: vec![],
        })
        .await?;
        conn.request(Request::SaslHandshake { correlation_id: 2 })
            .await?;
        let credentials = format!("\0{}\0{}", config.uri.user, config.uri.password);
        conn.send(&Request::SaslAuthenticate {
            correlation_id: 3,
            mechanism: "PLAIN".into(),
            data: Bytes::from(credentials),
        })
        .await?;
        let (_, answer) = conn.next_frame_of(0x8013).await?;
        if response_code(&answer) != code::OK {
            return Err(format!(
                "authentication failed (code {})",
                response_code(&answer)
            ));
        }
        let (_, mut tune) = conn.next_frame_of(key::TUNE).await?;
        let (frame_max, _) = (tune.get_u32(), tune.get_u32());
        conn.send(&Request::Tune {
            frame_max,
            heartbeat: 0,
        })
        .await?;
        let vhost = config.uri.vhost.clone();
        let answer = conn
            .request(Request::Open {
                correlation_id: 4,
                vhost,
            })
            .await?;
        if answer != code::OK {
            return Err(format!("open refused (code {answer})"));
        }
        Ok(conn)
    }

    async fn send(&mut self, request: &Request) -> Result<(), String> {
        let mut out = BytesMut::new();
        encode::request(&mut out, request);
        self.stream.write_all(&out).await.map_err(|e| e.to_string())
    }

    /// Sends a request and returns its response code.
    async fn request(&mut self, request: Request) -> Result<u16, String> {
        let mut out = BytesMut::new();
        encode::request(&mut out, &request);
        let response_key = u16::from_be_bytes([out[4], out[5]]) | key::RESPONSE;
        self.stream
            .write_all(&out)
            .await
            .map_err(|e| e.to_string())?;
        let (_, body) = self.next_frame_of(response_key).await?;
        Ok(response_code(&body))
    }

    /// The next frame, as `(key, body after key and version)`.
    async fn next_frame(&mut self) -> Result<(u16, Bytes), String> {
        loop {
            if let Some(mut frame) =
                split_frame(&mut self.buffer, 0).map_err(|e| format!("bad frame: {e:?}"))?
            {
                let frame_key = frame.get_u16();
                frame.advance(2);
                return Ok((frame_key, frame));
            }
            self.buffer.reserve(256 * 1024);
            match self.stream.read_buf(&mut self.buffer).await {
                Ok(0) => return Err("the broker closed the connection".into()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    async fn next_frame_of(&mut self, wanted: u16) -> Result<(u16, Bytes), String> {
        loop {
            let (frame_key, body) = self.next_frame().await?;
            if frame_key == wanted {
                return Ok((frame_key, body));
            }
        }
    }
}

fn response_code(body: &[u8]) -> u16 {
    body.get(4..6)
        .map_or(0, |c| u16::from_be_bytes([c[0], c[1]]))
}

/// `--stream-queue`: creates stream NAME (-u), publishes -s byte messages in batches of 100
/// with at most -c unconfirmed, and consumes from `first`.
pub async fn queue(config: Arc<Config>, shared: Arc<Shared>) -> Result<(), String> {
    let stream = config.queue.clone();
    let counters = Arc::new(Counters::default());
    let mut producer = StreamConn::open(&config).await?;
    let _ = producer
        .request(Request::Delete {
            correlation_id: 5,
            stream: stream.clone(),
        })
        .await?;
    let created = producer
        .request(Request::Create {
            correlation_id: 6,
            stream: stream.clone(),
            arguments: vec![],
        })
        .await?;
    if created != code::OK {
        return Err(format!("cannot create stream {stream} (code {created})"));
    }
    let declared = producer
        .request(Request::DeclarePublisher {
            correlation_id: 7,
            publisher_id: 0,
            // An empty reference (no deduplication): RabbitMQ 3.10's parser refuses a null
            // string here as an unknown command.
            reference: Some(String::new()),
            stream: stream.clone(),
        })
        .await?;
    if declared != code::OK {
        return Err(format!("cannot declare a publisher (code {declared})"));
    }
    let mut consumer = StreamConn::open(&config).await?;
    let subscribed = consumer
        .request(Request::Subscribe {
            correlation_id: 8,
            subscription_id: 0,
            stream: stream.clone(),
            offset: OffsetSpecification::First,
            credit: CREDIT,
            properties: vec![],
        })
        .await?;
    if subscribed != code::OK {
        return Err(format!("cannot subscribe (code {subscribed})"));
    }
    let mut tasks = tokio::task::JoinSet::new();
    {
        let (counters, shared) = (counters.clone(), shared.clone());
        tasks.spawn(async move {
            let mut stop = shared.stop_tx.subscribe();
            let mut credit = BytesMut::new();
            encode::request(
                &mut credit,
                &Request::Credit {
                    subscription_id: 0,
                    credit: 1,
                },
            );
            loop {
                let (frame_key, mut body) = tokio::select! {
                    frame = consumer.next_frame() => frame?,
                    _ = stop.changed() => return Ok(()),
                };
                if frame_key == key::DELIVER && body.len() > 9 {
                    body.advance(1);
                    let records = u32::from_be_bytes([body[4], body[5], body[6], body[7]]);
                    counters
                        .delivered
                        .fetch_add(u64::from(records), Ordering::Relaxed);
                    consumer
                        .stream
                        .write_all(&credit)
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
        });
    }
    {
        let (counters, shared) = (counters.clone(), shared.clone());
        let window = config.confirm.unwrap_or(10_000).max(BATCH) as u64;
        let body = Bytes::from(vec![b'x'; config.size]);
        tasks.spawn(async move {
            let (mut next_id, mut confirmed) = (0u64, 0u64);
            let mut out = BytesMut::new();
            while !shared.is_stopping() {
                out.clear();
                while next_id - confirmed + BATCH as u64 <= window {
                    let messages = (0..BATCH as u64)
                        .map(|i| PublishedMessage {
                            publishing_id: next_id + i,
                            filter_value: None,
                            message: body.clone(),
                        })
                        .collect();
                    encode::request(
                        &mut out,
                        &Request::Publish {
                            version: 1,
                            publisher_id: 0,
                            messages,
                        },
                    );
                    next_id += BATCH as u64;
                }
                if !out.is_empty() {
                    producer
                        .stream
                        .write_all(&out)
                        .await
                        .map_err(|e| e.to_string())?;
                    counters.sent.store(next_id, Ordering::Relaxed);
                }
                let (frame_key, mut body) = producer.next_frame().await?;
                match frame_key {
                    key::PUBLISH_CONFIRM => {
                        body.advance(1);
                        confirmed += u64::from(body.get_u32());
                    }
                    key::PUBLISH_ERROR => return Err("the broker refused a publish".into()),
                    _ => {}
                }
            }
            Ok(())
        });
    }
    let scenario = format!(
        "stream {stream}: batches of {BATCH}, confirms, consumer from first with credit {CREDIT}"
    );
    report(&config, &shared, &counters, &scenario, tasks).await
}
