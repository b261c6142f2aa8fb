//! AMQP 1.0 load: one sender and one receiver link on a queue, both unsettled, against any
//! AMQP 1.0 broker (Warren, RabbitMQ 4.x, RabbitMQ 3.x's AMQP 1.0 plugin with
//! `--amqp10-address-v1`). A minimal client on tokio with Warren's AMQP 1.0 frame codec and
//! fe2o3-amqp-types performatives; the per-message frames (transfer out, transfer in) are
//! encoded and parsed by hand so that the tool is not the bottleneck.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use fe2o3_amqp_types::definitions::{Handle, ReceiverSettleMode, Role, SenderSettleMode};
use fe2o3_amqp_types::messaging::{Accepted, DeliveryState, Source, Target, TargetArchetype};
use fe2o3_amqp_types::performatives::{
    Attach, Begin, ChannelMax, Disposition, Flow, MaxFrameSize, Open, Performative,
};
use fe2o3_amqp_types::primitives::Binary;
use fe2o3_amqp_types::sasl::{SaslCode, SaslInit, SaslOutcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use warren_amqp10::codec::{
    described_code, encode_amqp_frame, encode_sasl_frame, skip_value, FRAME_HEADER_SIZE,
    PROTOCOL_HEADER_AMQP, PROTOCOL_HEADER_SASL,
};

use crate::args::{Config, Scheme};
use crate::client::Conn;
use crate::report::{report, Counters};
use crate::stats::Shared;
use crate::topology::Topology;

/// The max-frame-size the tool announces, and the largest frame it accepts.
const MAX_FRAME_SIZE: u32 = 1 << 20;
/// The session incoming window the tool announces (in transfers); re-announced with every
/// flow, so that the session window never limits the link credit.
const INCOMING_WINDOW: u32 = 1 << 16;
/// Performative codes.
const TRANSFER: u64 = 0x14;
const SASL_MECHANISMS: u64 = 0x40;
const SASL_OUTCOME: u64 = 0x44;

/// One raw frame: type (0 AMQP, 1 SASL), channel and body after the extended header.
struct RawFrame {
    sasl: bool,
    body: Bytes,
}

/// One AMQP 1.0 connection with one session on channel 0.
struct Amqp10Conn {
    rd: OwnedReadHalf,
    wr: OwnedWriteHalf,
    rbuf: BytesMut,
    /// The broker's max-frame-size.
    remote_max_frame: u32,
    /// The broker session's next-outgoing-id from its begin (the first delivery id it uses).
    remote_next_outgoing_id: u32,
    /// The broker session's incoming window as of its begin.
    remote_incoming_window: u32,
}

impl Amqp10Conn {
    /// Connects, authenticates with SASL PLAIN, opens the vhost (`vhost:NAME` as hostname)
    /// and begins one session on channel 0.
    async fn open(config: &Config, container_id: &str) -> Result<Self, String> {
        let addr = (config.uri.host.as_str(), config.uri.port);
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {}:{}: {e}", config.uri.host, config.uri.port))?;
        if config.nodelay {
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
        }
        let (rd, wr) = stream.into_split();
        let mut conn = Amqp10Conn {
            rd,
            wr,
            rbuf: BytesMut::with_capacity(64 * 1024),
            remote_max_frame: 512,
            remote_next_outgoing_id: 0,
            remote_incoming_window: 0,
        };
        conn.write(&PROTOCOL_HEADER_SASL).await?;
        conn.expect_header(PROTOCOL_HEADER_SASL).await?;
        loop {
            let frame = conn.recv().await?;
            if !frame.sasl {
                return Err("expected a SASL frame from the broker".into());
            }
            match described_code(&frame.body) {
                Some(SASL_MECHANISMS) => {
                    let mut response = vec![0u8];
                    response.extend_from_slice(config.uri.user.as_bytes());
                    response.push(0);
                    response.extend_from_slice(config.uri.password.as_bytes());
                    let mut out = BytesMut::new();
                    encode_sasl_frame(
                        &mut out,
                        &SaslInit {
                            mechanism: "PLAIN".into(),
                            initial_response: Some(Binary::from(response)),
                            hostname: None,
                        },
                    );
                    conn.write(&out).await?;
                }
                Some(SASL_OUTCOME) => {
                    let outcome: SaslOutcome = serde_amqp::from_slice(&frame.body)
                        .map_err(|e| format!("bad sasl-outcome: {e}"))?;
                    if outcome.code != SaslCode::Ok {
                        return Err(format!(
                            "SASL PLAIN as '{}' refused: {:?}",
                            config.uri.user, outcome.code
                        ));
                    }
                    break;
                }
                other => return Err(format!("unexpected SASL frame {other:?}")),
            }
        }
        conn.write(&PROTOCOL_HEADER_AMQP).await?;
        conn.expect_header(PROTOCOL_HEADER_AMQP).await?;
        let mut out = BytesMut::new();
        encode_amqp_frame(
            &mut out,
            0,
            &Performative::Open(Open {
                container_id: container_id.into(),
                hostname: Some(format!("vhost:{}", config.uri.vhost)),
                max_frame_size: MaxFrameSize(MAX_FRAME_SIZE),
                channel_max: ChannelMax(0),
                idle_time_out: None,
                outgoing_locales: None,
                incoming_locales: None,
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }),
            &[],
        );
        encode_amqp_frame(
            &mut out,
            0,
            &Performative::Begin(Begin {
                remote_channel: None,
                next_outgoing_id: 0,
                incoming_window: INCOMING_WINDOW,
                outgoing_window: u32::MAX,
                handle_max: Handle(0),
                offered_capabilities: None,
                desired_capabilities: None,
                properties: None,
            }),
            &[],
        );
        conn.write(&out).await?;
        match conn.recv_performative().await? {
            Performative::Open(open) => conn.remote_max_frame = open.max_frame_size.0,
            other => return Err(format!("expected open, got {other:?}")),
        }
        match conn.recv_performative().await? {
            Performative::Begin(begin) => {
                conn.remote_next_outgoing_id = begin.next_outgoing_id;
                conn.remote_incoming_window = begin.incoming_window;
            }
            other => return Err(format!("expected begin, got {other:?}")),
        }
        Ok(conn)
    }

    /// Attaches link handle 0 and waits for the broker's attach; a refused link (no
    /// terminus in the reply, then a detach) is an error carrying the broker's reason.
    async fn attach(&mut self, role: Role, address: &str, settled: bool) -> Result<(), String> {
        let is_sender = role == Role::Sender;
        let name = if is_sender {
            "warren-perf-sender"
        } else {
            "warren-perf-receiver"
        };
        let attach = Attach {
            name: name.into(),
            handle: Handle(0),
            role,
            snd_settle_mode: if settled {
                SenderSettleMode::Settled
            } else {
                SenderSettleMode::Unsettled
            },
            rcv_settle_mode: ReceiverSettleMode::First,
            source: Some(Box::new(Source {
                address: (!is_sender).then(|| address.to_string()),
                ..Source::default()
            })),
            target: Some(Box::new(TargetArchetype::Target(Target {
                address: is_sender.then(|| address.to_string()),
                ..Target::default()
            }))),
            unsettled: None,
            incomplete_unsettled: false,
            initial_delivery_count: is_sender.then_some(0),
            max_message_size: None,
            offered_capabilities: None,
            desired_capabilities: None,
            properties: None,
        };
        let mut out = BytesMut::new();
        encode_amqp_frame(&mut out, 0, &Performative::Attach(attach), &[]);
        self.write(&out).await?;
        let refused = match self.recv_performative().await? {
            Performative::Attach(reply) => {
                if is_sender {
                    reply.target.is_none()
                } else {
                    reply.source.is_none()
                }
            }
            other => return Err(describe(&other, "attach")),
        };
        if refused {
            let detach = self.recv_performative().await?;
            return Err(describe(&detach, "attach"));
        }
        Ok(())
    }

    async fn expect_header(&mut self, header: [u8; 8]) -> Result<(), String> {
        while self.rbuf.len() < 8 {
            self.read_more().await?;
        }
        let got = self.rbuf.split_to(8);
        if got[..] != header {
            return Err(format!(
                "the broker answered protocol header {:?} to {:?}",
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(&header)
            ));
        }
        Ok(())
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.wr.write_all(bytes).await.map_err(|e| e.to_string())
    }

    async fn read_more(&mut self) -> Result<(), String> {
        self.rbuf.reserve(64 * 1024);
        match self.rd.read_buf(&mut self.rbuf).await {
            Ok(0) => Err("the broker closed the connection".into()),
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Takes whatever is readable right now without waiting. (A zero-length
    /// `tokio::time::timeout` around `read_more` waited for the next 1 ms timer tick
    /// whenever nothing was readable, capping a one-transfer-per-write sender at ~800 msg/s.)
    fn read_available(&mut self) -> Result<(), String> {
        self.rbuf.reserve(64 * 1024);
        match self.rd.try_read_buf(&mut self.rbuf) {
            Ok(0) => Err("the broker closed the connection".into()),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The next whole frame in the buffer, if any (heartbeats skipped).
    fn try_frame(&mut self) -> Result<Option<RawFrame>, String> {
        loop {
            let Some(frame) = split_frame(&mut self.rbuf)? else {
                return Ok(None);
            };
            if !frame.body.is_empty() {
                return Ok(Some(frame));
            }
        }
    }

    async fn recv(&mut self) -> Result<RawFrame, String> {
        loop {
            if let Some(frame) = self.try_frame()? {
                return Ok(frame);
            }
            self.read_more().await?;
        }
    }

    async fn recv_performative(&mut self) -> Result<Performative, String> {
        let frame = self.recv().await?;
        decode_performative(&frame.body)
    }
}

/// Splits one frame off the front of `buffer`.
fn split_frame(buffer: &mut BytesMut) -> Result<Option<RawFrame>, String> {
    if buffer.len() < FRAME_HEADER_SIZE {
        return Ok(None);
    }
    let size = u32::from_be_bytes([buffer[0], buffer[1], buffer[2], buffer[3]]) as usize;
    let body_start = usize::from(buffer[4]) * 4;
    if size < FRAME_HEADER_SIZE || size > MAX_FRAME_SIZE as usize || body_start > size {
        return Err(format!("bad frame header from the broker (size {size})"));
    }
    if buffer.len() < size {
        return Ok(None);
    }
    let sasl = buffer[5] == 1;
    let frame = buffer.split_to(size).freeze();
    Ok(Some(RawFrame {
        sasl,
        body: frame.slice(body_start.max(FRAME_HEADER_SIZE)..),
    }))
}

/// Decodes the performative at the start of a frame body.
fn decode_performative(body: &[u8]) -> Result<Performative, String> {
    let len = skip_value(body, 0).map_err(|e| e.to_string())?;
    serde_amqp::from_slice(&body[..len]).map_err(|e| format!("bad performative: {e}"))
}

/// What the broker sent instead of what was expected, with its error when it has one.
fn describe(performative: &Performative, expected: &str) -> String {
    let error = match performative {
        Performative::Detach(detach) => detach.error.as_ref(),
        Performative::End(end) => end.error.as_ref(),
        Performative::Close(close) => close.error.as_ref(),
        _ => None,
    };
    let name = format!("{performative:?}");
    let name = name.split([' ', '(']).next().unwrap_or("?").to_string();
    match error {
        Some(error) => format!(
            "expected {expected}, got {name}: {:?} {}",
            error.condition,
            error.description.as_deref().unwrap_or("")
        ),
        None => format!("expected {expected}, got {name}"),
    }
}

/// Appends a transfer of one whole message (a single data section holding `body`) on
/// channel 0, link handle 0, with `delivery_id` as id and tag, pre-settled when `settled`.
pub fn encode_transfer(out: &mut BytesMut, delivery_id: u32, body: &[u8], settled: bool) {
    let start = out.len();
    out.put_slice(&[0, 0, 0, 0, 2, 0, 0, 0]);
    // transfer: described list8 of handle, delivery-id, delivery-tag, message-format, settled.
    out.put_slice(&[0x00, 0x53, 0x14, 0xc0, 19, 5]);
    out.put_u8(0x70);
    out.put_u32(0);
    out.put_u8(0x70);
    out.put_u32(delivery_id);
    out.put_slice(&[0xa0, 4]);
    out.put_u32(delivery_id);
    out.put_u8(0x43); // message-format 0
    out.put_u8(if settled { 0x41 } else { 0x42 }); // settled true / false
    out.put_slice(&[0x00, 0x53, 0x75]);
    if body.len() < 256 {
        out.put_slice(&[0xa0, body.len() as u8]);
    } else {
        out.put_u8(0xb0);
        out.put_u32(body.len() as u32);
    }
    out.put_slice(body);
    let size = (out.len() - start) as u32;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
}

/// The fields of an incoming transfer the receiver needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferInfo {
    /// Present on the first frame of a delivery.
    pub delivery_id: Option<u32>,
    /// More frames of the same delivery follow.
    pub more: bool,
}

/// Reads delivery-id (field 1) and more (field 5) of a transfer performative without
/// decoding the rest. `None` when `body` is not a transfer.
pub fn parse_transfer(body: &[u8]) -> Result<Option<TransferInfo>, String> {
    if described_code(body) != Some(TRANSFER) {
        return Ok(None);
    }
    let descriptor = if body[1] == 0x53 {
        3
    } else {
        1 + skip(&body[1..])?
    };
    let list = &body[descriptor..];
    let (count, mut at) = match list.first() {
        Some(0x45) => (0, 1),
        Some(0xc0) => (usize::from(*list.get(2).ok_or("truncated transfer")?), 3),
        Some(0xd0) => {
            let raw = list.get(5..9).ok_or("truncated transfer")?;
            (
                u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize,
                9,
            )
        }
        _ => return Err("transfer is not a list".into()),
    };
    let mut info = TransferInfo {
        delivery_id: None,
        more: false,
    };
    for field in 0..count.min(6) {
        let value = list.get(at..).ok_or("truncated transfer")?;
        let len = skip(value)?;
        match field {
            1 => info.delivery_id = read_uint(&value[..len]),
            5 => info.more = value[0] == 0x41 || (value[0] == 0x56 && value.get(1) == Some(&1)),
            _ => {}
        }
        at += len;
    }
    Ok(Some(info))
}

fn skip(bytes: &[u8]) -> Result<usize, String> {
    skip_value(bytes, 0).map_err(|e| e.to_string())
}

/// A uint in any of its encodings (null is `None`).
fn read_uint(value: &[u8]) -> Option<u32> {
    match value.first()? {
        0x43 => Some(0),
        0x52 => value.get(1).map(|&v| u32::from(v)),
        0x70 => Some(u32::from_be_bytes(value.get(1..5)?.try_into().ok()?)),
        _ => None,
    }
}

/// The link address of the queue: RabbitMQ 4.x v2 `/queues/NAME`, or the 3.x plugin's v1
/// `/amq/queue/NAME` (an existing queue) with `--amqp10-address-v1`.
pub fn queue_address(queue: &str, v1: bool) -> String {
    if v1 {
        format!("/amq/queue/{queue}")
    } else {
        let mut address = String::from("/queues/");
        for byte in queue.bytes() {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                address.push(byte as char);
            } else {
                address.push_str(&format!("%{byte:02X}"));
            }
        }
        address
    }
}

/// `--amqp10-queue`: one sender link (unsettled transfers, at most `-c` unsettled, default
/// 1000, and never beyond its link credit) and one receiver link (credit `-q`, default 200,
/// topped up as deliveries are accepted) on the queue `-u`, each on its own connection.
pub async fn queue(config: Arc<Config>, shared: Arc<Shared>) -> Result<(), String> {
    let topology = Topology::new(&config);
    let mut declare_uri = config.uri.clone();
    declare_uri.scheme = Scheme::Amqp;
    let mut admin = Conn::open(&declare_uri, "warren-perf amqp10 topology", 4096)
        .await
        .map_err(|e| format!("declaring over AMQP 0-9-1: {e}"))?;
    topology
        .declare(&mut admin, &config)
        .await
        .map_err(|e| format!("declaring over AMQP 0-9-1: {e}"))?;
    admin.close().await;

    let address = queue_address(&config.queue, config.amqp10_address_v1);
    let credit = u32::from(if config.qos == 0 { 200 } else { config.qos });
    let window = config.confirm.unwrap_or(1000).max(1) as u64;
    let counters = Arc::new(Counters::default());
    let settled = config.amqp10_settled;
    let mut tasks = tokio::task::JoinSet::new();
    if config.amqp10_fe2o3 {
        let (c, a, n, s) = (
            config.clone(),
            address.clone(),
            counters.clone(),
            shared.clone(),
        );
        tasks.spawn(crate::amqp10_fe2o3::receive(c, a, credit, n, s));
        let (c, a, n, s) = (
            config.clone(),
            address.clone(),
            counters.clone(),
            shared.clone(),
        );
        tasks.spawn(crate::amqp10_fe2o3::send(c, a, n, s));
    } else {
        let mut receiver = Amqp10Conn::open(&config, "warren-perf-receiver").await?;
        receiver.attach(Role::Receiver, &address, settled).await?;
        let mut sender = Amqp10Conn::open(&config, "warren-perf-sender").await?;
        sender.attach(Role::Sender, &address, settled).await?;
        let max_body = sender.remote_max_frame as usize - 64;
        if config.size > max_body {
            return Err(format!(
                "-s {}: the tool sends single-frame messages, at most {max_body} bytes here",
                config.size
            ));
        }
        {
            let (counters, shared) = (counters.clone(), shared.clone());
            tasks
                .spawn(async move { receive(receiver, credit, settled, &counters, &shared).await });
        }
        {
            let (counters, shared, config) = (counters.clone(), shared.clone(), config.clone());
            tasks.spawn(async move { send(sender, window, &config, &counters, &shared).await });
        }
    }
    let v = if config.amqp10_address_v1 { "v1" } else { "v2" };
    let settlement = if settled { "pre-settled" } else { "unsettled" };
    let nodelay = if config.amqp10_fe2o3 {
        ", fe2o3-amqp Connection::open (no TCP_NODELAY)"
    } else if config.nodelay {
        ""
    } else {
        ", no TCP_NODELAY"
    };
    let scenario = format!(
        "AMQP 1.0 queue ({v} address {address}), {settlement}, credit {credit}, window {window}{nodelay}"
    );
    let result = report(&config, &shared, &counters, &scenario, tasks).await;
    if !config.keep {
        if let Ok(mut admin) = Conn::open(&declare_uri, "warren-perf amqp10 cleanup", 4096).await {
            let _ = topology.delete(&mut admin).await;
            admin.close().await;
        }
    }
    result
}

/// The receiver: counts transfers, accepts them (one ranged disposition per read) and tops
/// the link credit up to `credit` once half of it is used.
async fn receive(
    mut conn: Amqp10Conn,
    credit: u32,
    settled: bool,
    counters: &Counters,
    shared: &Shared,
) -> Result<(), String> {
    let mut stop = shared.stop_tx.subscribe();
    let mut out = BytesMut::new();
    // Deliveries received (the link's delivery-count) and transfers (the session's
    // next-incoming-id offset).
    let mut received: u32 = 0;
    let mut transfers: u32 = 0;
    let mut credit_left = credit;
    let flow = |out: &mut BytesMut, received: u32, transfers: u32, conn: &Amqp10Conn| {
        encode_amqp_frame(
            out,
            0,
            &Performative::Flow(Flow {
                next_incoming_id: Some(conn.remote_next_outgoing_id.wrapping_add(transfers)),
                incoming_window: INCOMING_WINDOW,
                next_outgoing_id: 0,
                outgoing_window: u32::MAX,
                handle: Some(Handle(0)),
                delivery_count: Some(received),
                link_credit: Some(credit),
                available: None,
                drain: false,
                echo: false,
                properties: None,
            }),
            &[],
        );
    };
    flow(&mut out, received, transfers, &conn);
    conn.write(&out).await?;
    loop {
        out.clear();
        let mut first: Option<u32> = None;
        let mut last = 0u32;
        let mut batch = 0u64;
        while let Some(frame) = conn.try_frame()? {
            match parse_transfer(&frame.body)? {
                Some(info) => {
                    transfers = transfers.wrapping_add(1);
                    if let Some(id) = info.delivery_id {
                        first.get_or_insert(id);
                        last = id;
                    }
                    if !info.more {
                        received = received.wrapping_add(1);
                        credit_left = credit_left.saturating_sub(1);
                        batch += 1;
                    }
                }
                None => match decode_performative(&frame.body)? {
                    Performative::Flow(_) | Performative::Disposition(_) => {}
                    other => return Err(describe(&other, "transfer")),
                },
            }
        }
        if settled {
            counters.delivered.fetch_add(batch, Ordering::Relaxed);
        } else if let Some(first) = first {
            encode_amqp_frame(
                &mut out,
                0,
                &Performative::Disposition(Disposition {
                    role: Role::Receiver,
                    first,
                    last: (last != first).then_some(last),
                    settled: true,
                    state: Some(DeliveryState::Accepted(Accepted {})),
                    batchable: false,
                }),
                &[],
            );
            counters.delivered.fetch_add(batch, Ordering::Relaxed);
        }
        if credit_left <= credit / 2 {
            flow(&mut out, received, transfers, &conn);
            credit_left = credit;
        }
        if !out.is_empty() {
            conn.write(&out).await?;
        }
        tokio::select! {
            read = conn.read_more() => read?,
            _ = stop.changed() => return Ok(()),
        }
    }
}

/// The sender: writes transfers while it has link credit, session window and room in the
/// unsettled window, then reads dispositions and flows.
async fn send(
    mut conn: Amqp10Conn,
    window: u64,
    config: &Config,
    counters: &Counters,
    shared: &Shared,
) -> Result<(), String> {
    let body = vec![b'x'; config.size];
    let mut out = BytesMut::with_capacity(64 * 1024);
    // The link's delivery-count (transfers sent) and what the broker allows beyond it.
    let mut sent: u32 = 0;
    let mut credit_limit: u32 = 0; // delivery-count at which the credit runs out
    let mut session_limit: u32 = conn.remote_incoming_window;
    // A window of 2^31 or more never limits (and would look negative in wrapping arithmetic).
    let mut session_unlimited = conn.remote_incoming_window >= 1 << 31;
    let mut unsettled: u64 = 0;
    let batch = config.batch as u64;
    while !shared.is_stopping() {
        while let Some(frame) = conn.try_frame()? {
            let performative = decode_performative(&frame.body)?;
            if std::env::var_os("WARREN_PERF_DEBUG").is_some() {
                eprintln!("sender got {performative:?}");
            }
            match performative {
                Performative::Disposition(disposition) => {
                    if let Some(state) = &disposition.state {
                        if !matches!(state, DeliveryState::Accepted(_)) {
                            return Err(format!("the broker answered {state:?} to a transfer"));
                        }
                    }
                    if disposition.settled {
                        let last = disposition.last.unwrap_or(disposition.first);
                        let settled = u64::from(last.wrapping_sub(disposition.first)) + 1;
                        unsettled = unsettled.saturating_sub(settled);
                    }
                }
                Performative::Flow(flow) => {
                    if let Some(next_incoming) = flow.next_incoming_id {
                        session_limit = next_incoming.wrapping_add(flow.incoming_window);
                        session_unlimited = flow.incoming_window >= 1 << 31;
                    }
                    if let Some(credit) = flow.link_credit {
                        // A flow without delivery-count (RabbitMQ 3.x sends its first one so)
                        // counts from the initial delivery-count, 0 here (AMQP 1.0 2.6.7).
                        let count = flow.delivery_count.unwrap_or(0);
                        credit_limit = count.wrapping_add(credit);
                    }
                }
                other => return Err(describe(&other, "disposition or flow")),
            }
        }
        out.clear();
        let mut written = 0u64;
        while unsettled < window
            && written < batch
            && credit_limit.wrapping_sub(sent) as i32 > 0
            && (session_unlimited || session_limit.wrapping_sub(sent) as i32 > 0)
        {
            encode_transfer(&mut out, sent, &body, config.amqp10_settled);
            sent = sent.wrapping_add(1);
            if !config.amqp10_settled {
                unsettled += 1;
            }
            written += 1;
        }
        if written > 0 {
            conn.write(&out).await?;
            counters.sent.fetch_add(written, Ordering::Relaxed);
            if unsettled < window && credit_limit.wrapping_sub(sent) as i32 > 0 {
                // Room left: take only what is already readable, then write more.
                conn.read_available()?;
                continue;
            }
        }
        conn.read_more().await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp_types::performatives::Transfer;
    use proptest::prelude::*;
    use warren_amqp10::codec::{decode_frame, FrameBody};

    #[test]
    fn hand_encoded_transfers_decode_as_transfers() {
        let mut out = BytesMut::new();
        encode_transfer(&mut out, 70_000, b"0123456789abcdef", false);
        encode_transfer(&mut out, 1, &[7u8; 300], true);
        for (id, len, settled) in [(70_000, 16, false), (1, 300, true)] {
            let frame = decode_frame(&mut out, 4096).unwrap().unwrap();
            let FrameBody::Amqp {
                performative: Performative::Transfer(transfer),
                payload,
            } = frame.body
            else {
                panic!("not a transfer")
            };
            assert_eq!(transfer.delivery_id, Some(id));
            assert_eq!(transfer.handle, Handle(0));
            assert_eq!(transfer.settled, Some(settled));
            assert_eq!(
                transfer.delivery_tag.as_ref().map(|t| t.to_vec()),
                Some(id.to_be_bytes().to_vec())
            );
            // One data section holding the body.
            assert_eq!(&payload[..3], &[0x00, 0x53, 0x75]);
            assert_eq!(payload.len(), len + if len < 256 { 5 } else { 8 });
        }
        assert!(out.is_empty());
    }

    fn encoded(transfer: Transfer) -> Vec<u8> {
        serde_amqp::to_vec(&Performative::Transfer(transfer)).unwrap()
    }

    #[test]
    fn transfers_from_any_encoder_are_parsed() {
        let mut transfer = Transfer {
            handle: Handle(3),
            delivery_id: Some(1_000_000),
            delivery_tag: Some(Binary::from(vec![1, 2])),
            message_format: Some(0),
            settled: Some(false),
            more: true,
            rcv_settle_mode: None,
            state: None,
            resume: false,
            aborted: false,
            batchable: false,
        };
        assert_eq!(
            parse_transfer(&encoded(transfer.clone())).unwrap(),
            Some(TransferInfo {
                delivery_id: Some(1_000_000),
                more: true
            })
        );
        transfer.delivery_id = None;
        transfer.more = false;
        assert_eq!(
            parse_transfer(&encoded(transfer)).unwrap(),
            Some(TransferInfo {
                delivery_id: None,
                more: false
            })
        );
        let flow = serde_amqp::to_vec(&Performative::Flow(Flow {
            next_incoming_id: None,
            incoming_window: 1,
            next_outgoing_id: 0,
            outgoing_window: 1,
            handle: None,
            delivery_count: None,
            link_credit: None,
            available: None,
            drain: false,
            echo: false,
            properties: None,
        }))
        .unwrap();
        assert_eq!(parse_transfer(&flow).unwrap(), None);
    }

    #[test]
    fn addresses() {
        assert_eq!(queue_address("perf-test", false), "/queues/perf-test");
        assert_eq!(queue_address("a b/c", false), "/queues/a%20b%2Fc");
        assert_eq!(queue_address("perf-test", true), "/amq/queue/perf-test");
    }

    proptest! {
        #[test]
        fn arbitrary_transfer_bodies_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut bytes = vec![0x00, 0x53, 0x14];
            bytes.extend_from_slice(&body);
            let _ = parse_transfer(&bytes);
        }

        #[test]
        fn delivery_ids_round_trip(id in any::<u32>(), more in any::<bool>()) {
            let transfer = Transfer {
                handle: Handle(0),
                delivery_id: Some(id),
                delivery_tag: None,
                message_format: None,
                settled: None,
                more,
                rcv_settle_mode: None,
                state: None,
                resume: false,
                aborted: false,
                batchable: false,
            };
            prop_assert_eq!(
                parse_transfer(&encoded(transfer)).unwrap(),
                Some(TransferInfo { delivery_id: Some(id), more })
            );
        }
    }
}
