//! The default mode: producers and consumers on their own connections, a line of rates every
//! second, and a summary.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::{mpsc, watch, Semaphore};
use warren_amqp091::codec::{decode_frame, Method, FRAME_BODY, FRAME_END, FRAME_METHOD};
use warren_core::value::Table;

use crate::args::Config;
use crate::client::{read_more, unexpected, AmqpError, Conn, DeliveryParser, Stop, CH};
use crate::stats::{now_ns, ConfirmTracker, Shared};
use crate::topology::Topology;
use crate::{broker_cpu, fmt_rate, BrokerCpu};

/// How much a consumer reads per socket read, at most.
const READ_CHUNK: usize = 128 * 1024;

pub async fn run(config: Arc<Config>, shared: Arc<Shared>) -> Result<(), String> {
    let topology = Arc::new(Topology::new(&config));
    let mut setup = Conn::open(&config.uri, "warren-perf setup", 16 * 1024)
        .await
        .map_err(|e| e.to_string())?;
    topology
        .declare(&mut setup, &config)
        .await
        .map_err(|e| format!("declaring the topology: {e}"))?;

    let body_size = if config.latency && config.size < 8 {
        eprintln!("note: --latency needs 8 body octets for the timestamp; using -s 8");
        8
    } else {
        config.size
    };

    // Consumers first, so that nothing published is missed; each reports when its
    // basic.consume-ok arrived.
    let (ready_tx, mut ready_rx) = mpsc::channel::<Result<(), String>>(64);
    let (go_tx, go_rx) = watch::channel(false);
    let mut tasks = Vec::new();
    for c in 0..config.consumers {
        let queue = topology.queue_for(c).to_string();
        let (config, shared, ready) = (config.clone(), shared.clone(), ready_tx.clone());
        tasks.push(tokio::spawn(async move {
            let result = consumer(c, &config, &queue, &shared, ready.clone()).await;
            report_task_error(&shared, &format!("consumer {c}"), result, &ready).await;
        }));
    }
    for p in 0..config.producers {
        let templates = topology.templates(&config, p, body_size);
        let (config, shared, ready) = (config.clone(), shared.clone(), ready_tx.clone());
        let go = go_rx.clone();
        tasks.push(tokio::spawn(async move {
            let result =
                producer(p, &config, templates, body_size, &shared, ready.clone(), go).await;
            report_task_error(&shared, &format!("producer {p}"), result, &ready).await;
        }));
    }
    drop(ready_tx);
    for _ in 0..config.consumers + config.producers {
        match ready_rx.recv().await {
            Some(Ok(())) => {}
            Some(Err(error)) => {
                shared.stop();
                let _ = topology.delete(&mut setup).await;
                setup.close().await;
                return Err(error);
            }
            None => break,
        }
    }

    let cpu_before = config.broker_pid.and_then(broker_cpu);
    let own_before = broker_cpu(std::process::id());
    let start = Instant::now();
    let _ = go_tx.send(true);
    let totals = report(&config, &shared, start).await;
    let cpu_after = config.broker_pid.and_then(broker_cpu);
    let own_after = broker_cpu(std::process::id());
    shared.stop();

    // Let every task close its connection (bounded: a task stuck in a write, or on a broker
    // that stopped answering, is dropped).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut stuck = 0;
    for task in tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(deadline, task).await.is_err() {
            abort.abort();
            stuck += 1;
        }
    }
    if stuck > 0 {
        eprintln!("note: {stuck} connection(s) did not close within 10 s; dropped");
    }
    if config.keep {
        setup.close().await;
    } else {
        match tokio::time::timeout(Duration::from_secs(10), topology.delete(&mut setup)).await {
            Ok(Ok(())) => setup.close().await,
            Ok(Err(error)) => eprintln!("note: cleaning up the queues failed: {error}"),
            Err(_) => eprintln!("note: the broker did not answer queue.delete within 10 s"),
        }
    }

    print_summary(&config, &shared, &totals);
    let messages = if config.consumers > 0 {
        totals.end.received
    } else {
        totals.end.sent
    };
    if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
        print_cpu(
            before,
            after,
            totals.elapsed,
            messages,
            config.consumers > 0,
        );
    }
    if let (Some(before), Some(after)) = (own_before, own_after) {
        let seconds = after.ticks.saturating_sub(before.ticks) as f64 / 100.0;
        println!(
            "warren-perf cpu: {seconds:.2} s ({:.0}% of a core), {:.2} us per message \
             sent or received",
            seconds / totals.elapsed.as_secs_f64().max(1e-9) * 100.0,
            seconds * 1e6 / (totals.end.sent + totals.end.received).max(1) as f64
        );
    }
    match shared.take_error() {
        Some(error) => Err(error),
        None => Ok(()),
    }
}

async fn report_task_error(
    shared: &Shared,
    who: &str,
    result: Result<(), AmqpError>,
    ready: &mpsc::Sender<Result<(), String>>,
) {
    if let Err(error) = result {
        let message = format!("{who}: {error}");
        // Before the start, tell the main task directly; afterwards only errors that did
        // not come from stopping count.
        let _ = ready.try_send(Err(message.clone()));
        if !shared.is_stopping() {
            shared.fail(message);
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Counters {
    sent: u64,
    received: u64,
    confirmed: u64,
    nacked: u64,
    returned: u64,
}

impl Counters {
    fn read(shared: &Shared) -> Counters {
        Counters {
            sent: shared.sent.load(Ordering::Relaxed),
            received: shared.received.load(Ordering::Relaxed),
            confirmed: shared.confirmed.load(Ordering::Relaxed),
            nacked: shared.nacked.load(Ordering::Relaxed),
            returned: shared.returned.load(Ordering::Relaxed),
        }
    }
}

struct Totals {
    /// Counters and time at the end of the first second (the warm-up), if the run got there.
    warm: Option<(Counters, Duration)>,
    end: Counters,
    elapsed: Duration,
}

/// Prints a line every second until the time is up, Ctrl-C, or an error.
async fn report(config: &Config, shared: &Shared, start: Instant) -> Totals {
    let mut stop = shared.stop_tx.subscribe();
    let deadline = (config.time > 0.0).then(|| start + Duration::from_secs_f64(config.time));
    let mut tick = tokio::time::interval_at(
        (start + Duration::from_secs(1)).into(),
        Duration::from_secs(1),
    );
    let mut previous = (Counters::default(), start);
    let mut warm = None;
    loop {
        let at_deadline = async {
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline.into()).await,
                None => std::future::pending().await,
            }
        };
        let last = tokio::select! {
            _ = tick.tick() => false,
            _ = at_deadline => true,
            _ = stop.changed() => true,
        };
        let now = Instant::now();
        let counters = Counters::read(shared);
        let dt = now.duration_since(previous.1).as_secs_f64();
        if dt >= 0.05 || !last {
            let mut line = format!(
                "time: {:.1}s, sent: {} msg/s, received: {} msg/s",
                now.duration_since(start).as_secs_f64(),
                fmt_rate((counters.sent - previous.0.sent) as f64 / dt),
                fmt_rate((counters.received - previous.0.received) as f64 / dt),
            );
            if config.confirm.is_some() {
                line.push_str(&format!(
                    ", confirmed: {} msg/s",
                    fmt_rate((counters.confirmed - previous.0.confirmed) as f64 / dt)
                ));
                if counters.nacked > previous.0.nacked {
                    line.push_str(&format!(
                        ", nacked: {} msg/s",
                        fmt_rate((counters.nacked - previous.0.nacked) as f64 / dt)
                    ));
                }
            }
            if counters.returned > previous.0.returned {
                line.push_str(&format!(
                    ", returned: {} msg/s",
                    fmt_rate((counters.returned - previous.0.returned) as f64 / dt)
                ));
            }
            if config.latency {
                let mut latency = shared.latency.lock().unwrap_or_else(|e| e.into_inner());
                if latency.interval.count() > 0 {
                    line.push_str(", latency ");
                    line.push_str(&latency.interval.summary(&[50.0, 75.0, 95.0, 99.0]));
                }
                latency.interval.clear();
                if warm.is_none() {
                    // The whole-run latencies exclude the warm-up second too.
                    latency.total.clear();
                }
            }
            println!("{line}");
        }
        if warm.is_none() && !last {
            warm = Some((counters, now.duration_since(start)));
        }
        previous = (counters, now);
        if last {
            return Totals {
                warm,
                end: counters,
                elapsed: now.duration_since(start),
            };
        }
    }
}

fn print_summary(config: &Config, shared: &Shared, totals: &Totals) {
    let (from, from_t, note) = match totals.warm {
        Some((counters, t)) if totals.elapsed.as_secs_f64() - t.as_secs_f64() >= 0.5 => {
            (counters, t, " (excluding the first second, warm-up)")
        }
        _ => (Counters::default(), Duration::ZERO, ""),
    };
    let dt = (totals.elapsed - from_t).as_secs_f64().max(1e-9);
    let end = totals.end;
    let mut line = format!(
        "summary{note}: sent {} msg/s, received {} msg/s",
        fmt_rate((end.sent - from.sent) as f64 / dt),
        fmt_rate((end.received - from.received) as f64 / dt),
    );
    if config.confirm.is_some() {
        line.push_str(&format!(
            ", confirmed {} msg/s, nacked {}",
            fmt_rate((end.confirmed - from.confirmed) as f64 / dt),
            end.nacked
        ));
    }
    if end.returned > 0 {
        line.push_str(&format!(", returned {}", end.returned));
    }
    line.push_str(&format!(
        "; totals over {:.1}s: sent {}, received {}",
        totals.elapsed.as_secs_f64(),
        end.sent,
        end.received
    ));
    if config.latency {
        let latency = shared.latency.lock().unwrap_or_else(|e| e.into_inner());
        if latency.total.count() > 0 {
            line.push_str(", latency ");
            line.push_str(&latency.total.summary(&[50.0, 75.0, 95.0, 99.0]));
        }
    }
    println!("{line}");
}

pub fn print_cpu(
    before: BrokerCpu,
    after: BrokerCpu,
    elapsed: Duration,
    messages: u64,
    received: bool,
) {
    let seconds = (after.ticks.saturating_sub(before.ticks)) as f64 / 100.0;
    let per_message = if messages > 0 {
        format!(
            "{:.2} us/msg {}",
            seconds * 1e6 / messages as f64,
            if received { "received" } else { "sent" }
        )
    } else {
        "no messages".to_string()
    };
    println!(
        "broker cpu: {seconds:.2} s over {:.1} s ({:.0}% of a core), {per_message}; \
         broker rss {} MiB (CLK_TCK assumed 100)",
        elapsed.as_secs_f64(),
        seconds / elapsed.as_secs_f64().max(1e-9) * 100.0,
        after.rss_kib / 1024,
    );
}

/// One producer: its own connection, pre-encoded publish templates, many messages per write,
/// optional rate limit and confirm window. A second task reads confirms.
async fn producer(
    id: usize,
    config: &Config,
    templates: Vec<Vec<u8>>,
    body_size: usize,
    shared: &Arc<Shared>,
    ready: mpsc::Sender<Result<(), String>>,
    mut go: watch::Receiver<bool>,
) -> Result<(), AmqpError> {
    let mut conn = Conn::open(
        &config.uri,
        &format!("warren-perf producer {id}"),
        16 * 1024,
    )
    .await?;
    let window = config.confirm.map(|w| Arc::new(Semaphore::new(w)));
    if window.is_some() {
        match conn
            .call(CH, &Method::ConfirmSelect { no_wait: false })
            .await?
        {
            Method::ConfirmSelectOk => {}
            other => return Err(unexpected("confirm.select-ok", &other)),
        }
    }
    let _ = ready.send(Ok(())).await;
    drop(ready);
    let _ = go.wait_for(|go| *go).await;
    let Conn {
        rd,
        mut wr,
        rbuf,
        mut wbuf,
        frame_max,
    } = conn;
    let reader = tokio::spawn(producer_reader(
        rd,
        rbuf,
        frame_max,
        window.clone(),
        shared.clone(),
    ));

    let chunk = (frame_max as usize).saturating_sub(8).max(1);
    let mut body = vec![0u8; body_size];
    let message_size = templates[0].len() + body_size + body_size.div_ceil(chunk) * 8;
    wbuf.reserve(config.batch * message_size);
    let mut stop = shared.stop_tx.subscribe();
    let start = Instant::now();
    let mut sent: u64 = 0;
    let mut next_template = 0;
    let mut clean = true;
    loop {
        if shared.is_stopping() {
            break;
        }
        let mut n = config.batch as u64;
        if config.producer_messages > 0 {
            if sent >= config.producer_messages {
                break;
            }
            n = n.min(config.producer_messages - sent);
        }
        if config.rate > 0 {
            let due = (start.elapsed().as_secs_f64() * config.rate as f64) as u64 + 1;
            if due <= sent {
                let at = start + Duration::from_secs_f64(sent as f64 / config.rate as f64);
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => continue,
                    _ = stop.changed() => break,
                }
            }
            n = n.min(due - sent);
        }
        if let Some(window) = &window {
            let permit = tokio::select! {
                permit = window.acquire() => permit,
                _ = stop.changed() => break,
            };
            match permit {
                Ok(permit) => permit.forget(),
                Err(_) => break, // closed: the confirm reader failed
            }
            let mut extra = (window.available_permits() as u64).min(n - 1);
            if extra > 0 {
                match window.try_acquire_many(extra as u32) {
                    Ok(permit) => permit.forget(),
                    Err(_) => extra = 0,
                }
            }
            n = 1 + extra;
        }
        if config.latency {
            body[..8].copy_from_slice(&now_ns().to_be_bytes());
        }
        for _ in 0..n {
            wbuf.extend_from_slice(&templates[next_template]);
            next_template += 1;
            if next_template == templates.len() {
                next_template = 0;
            }
            for piece in body.chunks(chunk) {
                wbuf.put_u8(FRAME_BODY);
                wbuf.put_u16(CH);
                wbuf.put_u32(piece.len() as u32);
                wbuf.put_slice(piece);
                wbuf.put_u8(FRAME_END);
            }
        }
        let write = wr.write_all(&wbuf);
        tokio::pin!(write);
        tokio::select! {
            biased;
            result = &mut write => result?,
            _ = stop.changed() => {
                // Stopped while the broker is not reading: give the write a second to
                // finish so that the count stays exact, else cut the stream (mid-frame,
                // so there is no clean close) and do not count the batch.
                match tokio::time::timeout(Duration::from_secs(1), &mut write).await {
                    Ok(result) => result?,
                    Err(_) => {
                        clean = false;
                        break;
                    }
                }
            }
        }
        wbuf.clear();
        sent += n;
        shared.sent.fetch_add(n, Ordering::Relaxed);
    }
    if clean {
        wbuf.clear();
        let mut close = crate::client::encode_close();
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            wr.write_all(&close).await?;
            close.clear();
            Ok::<_, std::io::Error>(())
        })
        .await;
        if matches!(closed, Ok(Ok(()))) {
            // The reader returns at connection.close-ok.
            if let Ok(Ok(Err(error))) = tokio::time::timeout(Duration::from_secs(5), reader).await {
                if !shared.is_stopping() {
                    return Err(error);
                }
            }
            return Ok(());
        }
    }
    reader.abort();
    Ok(())
}

/// Reads what the broker sends a producer: confirms, returns, flow control, errors.
async fn producer_reader(
    mut rd: OwnedReadHalf,
    mut rbuf: BytesMut,
    frame_max: u32,
    window: Option<Arc<Semaphore>>,
    shared: Arc<Shared>,
) -> Result<(), AmqpError> {
    let result = async {
        let mut tracker = ConfirmTracker::default();
        loop {
            while let Some(frame) = decode_frame(&mut rbuf, frame_max)
                .map_err(|e| AmqpError::Protocol(e.to_string()))?
            {
                if frame.frame_type != FRAME_METHOD {
                    continue; // content of a basic.return
                }
                let method = Method::decode(&frame.payload)
                    .map_err(|e| AmqpError::Protocol(format!("{e:?}")))?;
                match method {
                    Method::BasicAck {
                        delivery_tag,
                        multiple,
                    } => {
                        let n = tracker.confirm(delivery_tag, multiple);
                        shared.confirmed.fetch_add(n, Ordering::Relaxed);
                        if let Some(window) = &window {
                            window.add_permits(n as usize);
                        }
                    }
                    Method::BasicNack {
                        delivery_tag,
                        multiple,
                        ..
                    } => {
                        let n = tracker.confirm(delivery_tag, multiple);
                        shared.nacked.fetch_add(n, Ordering::Relaxed);
                        if let Some(window) = &window {
                            window.add_permits(n as usize);
                        }
                    }
                    Method::BasicReturn { .. } => {
                        shared.returned.fetch_add(1, Ordering::Relaxed);
                    }
                    Method::ConnectionCloseOk => return Ok(()),
                    Method::ConnectionBlocked { reason } => {
                        eprintln!("note: the broker blocked publishing: {reason}");
                    }
                    Method::ConnectionUnblocked => {
                        eprintln!("note: the broker unblocked publishing");
                    }
                    Method::ConnectionClose {
                        reply_code,
                        reply_text,
                        ..
                    } => {
                        return Err(AmqpError::ConnectionClosed {
                            code: reply_code,
                            text: reply_text,
                            method: String::new(),
                        })
                    }
                    Method::ChannelClose {
                        reply_code,
                        reply_text,
                        ..
                    } => {
                        return Err(AmqpError::ChannelClosed {
                            code: reply_code,
                            text: reply_text,
                            method: String::new(),
                        })
                    }
                    _ => {}
                }
            }
            read_more(&mut rd, &mut rbuf, 64 * 1024, "confirms").await?;
        }
    }
    .await;
    if let Err(error) = &result {
        if !shared.is_stopping() {
            shared.fail(format!("producer: {error}"));
        }
        if let Some(window) = &window {
            window.close();
        }
    }
    result
}

/// One consumer: basic.consume on its own connection, then parse deliveries straight out of
/// big reads. With manual acks, one basic.ack(multiple) for the last delivery tag every
/// `multi_ack_every` deliveries and at the end of each read.
async fn consumer(
    id: usize,
    config: &Config,
    queue: &str,
    shared: &Arc<Shared>,
    ready: mpsc::Sender<Result<(), String>>,
) -> Result<(), AmqpError> {
    let mut conn = Conn::open(
        config.consumer_uri.as_ref().unwrap_or(&config.uri),
        &format!("warren-perf consumer {id}"),
        2 * READ_CHUNK,
    )
    .await?;
    if config.qos > 0 {
        let qos = Method::BasicQos {
            prefetch_size: 0,
            prefetch_count: config.qos,
            global: false,
        };
        match conn.call(CH, &qos).await? {
            Method::BasicQosOk => {}
            other => return Err(unexpected("basic.qos-ok", &other)),
        }
    }
    let consume = Method::BasicConsume {
        queue: queue.to_string(),
        consumer_tag: format!("warren-perf-{id}"),
        no_local: false,
        no_ack: config.autoack,
        exclusive: false,
        no_wait: false,
        arguments: Table::new(),
    };
    match conn.call(CH, &consume).await? {
        Method::BasicConsumeOk { .. } => {}
        other => return Err(unexpected("basic.consume-ok", &other)),
    }
    let _ = ready.send(Ok(())).await;
    drop(ready);

    let ack_every = if config.autoack {
        u64::MAX
    } else {
        config
            .multi_ack_every
            .map(|n| n as u64)
            .unwrap_or(if config.qos > 0 {
                (config.qos as u64 / 2).max(1)
            } else {
                1000
            })
    };
    let mut parser = DeliveryParser::new(config.latency);
    let mut timestamps = Vec::with_capacity(16 * 1024);
    let mut acked_tag = 0u64;
    let mut unacked = 0u64;
    let mut stop = shared.stop_tx.subscribe();
    loop {
        let now = if config.latency { now_ns() } else { 0 };
        let mut total = 0u64;
        let mut cancelled = false;
        loop {
            let mut completed = 0;
            let limit = ack_every.saturating_sub(unacked).max(1);
            let (used, why) = parser.parse(&conn.rbuf, &mut completed, &mut timestamps, limit)?;
            crate::client::consume(&mut conn.rbuf, used);
            total += completed;
            unacked += completed;
            match why {
                Stop::Drained => break,
                Stop::Limit => {
                    if !config.autoack {
                        push_ack(&mut conn, parser.last_tag, &mut acked_tag)?;
                        unacked = 0;
                    }
                }
                Stop::Method(channel, method) => {
                    if let Some(error) = conn.check_close(channel, &method).await {
                        return Err(error);
                    }
                    if let Method::BasicCancel { .. } = method {
                        cancelled = true;
                    }
                }
            }
        }
        if total > 0 {
            shared.received.fetch_add(total, Ordering::Relaxed);
            shared.record_latencies(now, &timestamps);
            timestamps.clear();
        }
        if !config.autoack && parser.last_tag > acked_tag {
            push_ack(&mut conn, parser.last_tag, &mut acked_tag)?;
            unacked = 0;
        }
        conn.flush().await?;
        if cancelled {
            return Ok(()); // the broker cancelled us (queue deleted)
        }
        if shared.is_stopping() {
            break;
        }
        tokio::select! {
            result = read_more(&mut conn.rd, &mut conn.rbuf, READ_CHUNK, "deliveries") => result?,
            _ = stop.changed() => break,
        }
    }
    conn.close().await;
    Ok(())
}

fn push_ack(conn: &mut Conn, tag: u64, acked_tag: &mut u64) -> Result<(), AmqpError> {
    if tag > *acked_tag {
        conn.send(
            CH,
            &Method::BasicAck {
                delivery_tag: tag,
                multiple: true,
            },
        )?;
        *acked_tag = tag;
    }
    Ok(())
}
