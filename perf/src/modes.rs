//! The other modes: --rpc (one message in flight), --idle-connections and --churn.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Semaphore;
use warren_amqp091::codec::{write_frame, Method, FRAME_BODY};
use warren_core::value::Table;

use crate::args::Config;
use crate::client::{read_more, unexpected, AmqpError, Conn, DeliveryParser, Stop, CH};
use crate::stats::{Latencies, Shared};
use crate::topology::Topology;
use crate::{broker_cpu, fmt_rate, rss_kib};

/// --rpc: one connection publishes a message to the queue, waits until it is delivered back,
/// and publishes the next. Reports round trips per second and their latency.
pub async fn rpc(config: Arc<Config>, shared: Arc<Shared>) -> Result<(), String> {
    let mut rpc_config = (*config).clone();
    rpc_config.queues = 1;
    rpc_config.exchange = None;
    rpc_config.exchange_type = None;
    rpc_config.routing_key = None;
    let topology = Topology::new(&rpc_config);
    let mut conn = Conn::open(&config.uri, "warren-perf rpc", 64 * 1024)
        .await
        .map_err(|e| e.to_string())?;
    topology
        .declare(&mut conn, &rpc_config)
        .await
        .map_err(|e| format!("declaring the queue: {e}"))?;
    let consume = Method::BasicConsume {
        queue: topology.queues[0].clone(),
        consumer_tag: "warren-perf-rpc".into(),
        no_local: false,
        no_ack: true,
        exclusive: false,
        no_wait: false,
        arguments: Table::new(),
    };
    match conn.call(CH, &consume).await {
        Ok(Method::BasicConsumeOk { .. }) => {}
        Ok(other) => return Err(unexpected("basic.consume-ok", &other).to_string()),
        Err(error) => return Err(error.to_string()),
    }
    let template = topology.templates(&rpc_config, 0, config.size).remove(0);
    let body = vec![0u8; config.size];
    let cpu_before = config.broker_pid.and_then(broker_cpu);

    let result = rpc_loop(&config, &shared, &mut conn, &template, &body).await;
    let cpu_after = config.broker_pid.and_then(broker_cpu);
    let (count, elapsed, latencies) = match result {
        Ok(done) => done,
        Err(error) => return Err(error.to_string()),
    };
    match tokio::time::timeout(Duration::from_secs(10), topology.delete(&mut conn)).await {
        Ok(Ok(())) => conn.close().await,
        Ok(Err(error)) => eprintln!("note: cleaning up the queue failed: {error}"),
        Err(_) => eprintln!("note: the broker did not answer queue.delete within 10 s"),
    }
    println!(
        "summary: {count} round trips in {:.1}s, {} round trips/s, latency {}",
        elapsed.as_secs_f64(),
        fmt_rate(count as f64 / elapsed.as_secs_f64().max(1e-9)),
        latencies.total.summary(&[50.0, 95.0, 99.0])
    );
    if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
        crate::throughput::print_cpu(before, after, elapsed, count, true);
    }
    Ok(())
}

async fn rpc_loop(
    config: &Config,
    shared: &Shared,
    conn: &mut Conn,
    template: &[u8],
    body: &[u8],
) -> Result<(u64, Duration, Latencies), AmqpError> {
    let mut latencies = Latencies::default();
    let mut parser = DeliveryParser::new(false);
    let mut scratch = Vec::new();
    let start = Instant::now();
    let deadline = (config.time > 0.0).then(|| start + Duration::from_secs_f64(config.time));
    let mut next_report = start + Duration::from_secs(1);
    let (mut count, mut previous_count, mut previous_t) = (0u64, 0u64, start);
    let chunk = (conn.frame_max as usize).saturating_sub(8).max(1);
    loop {
        let sent_at = Instant::now();
        if deadline.is_some_and(|d| sent_at >= d) || shared.is_stopping() {
            return Ok((count, sent_at.duration_since(start), latencies));
        }
        if sent_at >= next_report {
            let dt = sent_at.duration_since(previous_t).as_secs_f64();
            println!(
                "time: {:.1}s, round trips: {}/s, latency {}",
                sent_at.duration_since(start).as_secs_f64(),
                fmt_rate((count - previous_count) as f64 / dt),
                latencies.interval.summary(&[50.0, 95.0, 99.0])
            );
            latencies.interval.clear();
            previous_count = count;
            previous_t = sent_at;
            next_report += Duration::from_secs(1);
        }
        conn.wbuf.extend_from_slice(template);
        for piece in body.chunks(chunk) {
            write_frame(&mut conn.wbuf, FRAME_BODY, CH, piece);
        }
        conn.flush().await?;
        let mut completed = 0;
        loop {
            let (used, why) = parser.parse(&conn.rbuf, &mut completed, &mut scratch, 1)?;
            crate::client::consume(&mut conn.rbuf, used);
            match why {
                Stop::Limit => break,
                Stop::Drained => {
                    let read = read_more(&mut conn.rd, &mut conn.rbuf, 64 * 1024, "a delivery");
                    tokio::select! {
                        result = read => result?,
                        // Ctrl-C while waiting (e.g. a broker that lost the message).
                        _ = wait_stop(shared) => {
                            return Ok((count, start.elapsed(), latencies));
                        }
                    }
                }
                Stop::Method(channel, method) => {
                    if let Some(error) = conn.check_close(channel, &method).await {
                        return Err(error);
                    }
                }
            }
        }
        latencies.record(sent_at.elapsed().as_nanos() as u64);
        count += 1;
    }
}

async fn wait_stop(shared: &Shared) {
    let mut stop = shared.stop_tx.subscribe();
    if shared.is_stopping() {
        return;
    }
    let _ = stop.wait_for(|s| *s).await;
}

/// --idle-connections N: open N connections with one channel each (at most
/// --handshake-batch, default 100, handshakes at a time: the usual listen backlog is
/// 128, and more SYNs than that cost a 1 s retransmit), hold them for --time seconds,
/// close them.
pub async fn idle(config: Arc<Config>, shared: Arc<Shared>, n: usize) -> Result<(), String> {
    let gate = Arc::new(Semaphore::new(config.handshake_batch));
    let opened = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let alive = Arc::new(AtomicU64::new(0));
    let first_error: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let rss_before = rss_kib(std::process::id()).unwrap_or(0);
    let broker_rss_before = config.broker_pid.and_then(rss_kib);
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let (gate, opened, failed, alive) =
            (gate.clone(), opened.clone(), failed.clone(), alive.clone());
        let (first_error, config, shared) = (first_error.clone(), config.clone(), shared.clone());
        tasks.push(tokio::spawn(async move {
            let permit = gate.acquire().await;
            let conn = Conn::open(&config.uri, &format!("warren-perf idle {i}"), 1024).await;
            drop(permit);
            let mut conn = match conn {
                Ok(conn) => conn,
                Err(error) => {
                    failed.fetch_add(1, Ordering::Relaxed);
                    let mut first = first_error.lock().unwrap_or_else(|e| e.into_inner());
                    first.get_or_insert_with(|| error.to_string());
                    return;
                }
            };
            // Hold: no buffers beyond a few bytes; heartbeats are off.
            conn.rbuf = BytesMut::new();
            conn.wbuf = BytesMut::new();
            opened.fetch_add(1, Ordering::Relaxed);
            alive.fetch_add(1, Ordering::Relaxed);
            let mut stop = shared.stop_tx.subscribe();
            let mut scratch = [0u8; 64];
            let dropped = loop {
                if shared.is_stopping() {
                    break false;
                }
                tokio::select! {
                    read = conn.rd.read(&mut scratch) => match read {
                        Ok(0) | Err(_) => break true,
                        Ok(_) => {} // nothing is expected; a close shows up as EOF later
                    },
                    _ = stop.changed() => break false,
                }
            };
            if dropped {
                // Only connections the broker dropped count as lost.
                alive.fetch_sub(1, Ordering::Relaxed);
                let _ = conn.wr.shutdown().await;
            } else {
                let _permit = gate.acquire().await;
                conn.close().await;
            }
        }));
    }
    // Opening.
    let mut next = start + Duration::from_secs(1);
    let open_time = loop {
        let done = opened.load(Ordering::Relaxed) + failed.load(Ordering::Relaxed);
        if done >= n as u64 {
            break start.elapsed();
        }
        if shared.is_stopping() {
            break start.elapsed();
        }
        if Instant::now() >= next {
            println!(
                "time: {:.1}s, opening: {} open, {} failed of {n}",
                start.elapsed().as_secs_f64(),
                opened.load(Ordering::Relaxed),
                failed.load(Ordering::Relaxed)
            );
            next += Duration::from_secs(1);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let ok = opened.load(Ordering::Relaxed);
    let bad = failed.load(Ordering::Relaxed);
    let rss_after = rss_kib(std::process::id()).unwrap_or(0);
    let mut line = format!(
        "opened {ok} of {n} connections (one channel each) in {:.2}s, {} conn/s, failed {bad}",
        open_time.as_secs_f64(),
        fmt_rate(ok as f64 / open_time.as_secs_f64().max(1e-9))
    );
    if let Some(error) = first_error
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
    {
        line.push_str(&format!(" (first error: {error})"));
    }
    println!("{line}");
    if ok > 0 {
        println!(
            "warren-perf rss grew {} KiB, {:.1} KiB per connection",
            rss_after.saturating_sub(rss_before),
            rss_after.saturating_sub(rss_before) as f64 / ok as f64
        );
    }
    if let (Some(before), Some(after)) = (broker_rss_before, config.broker_pid.and_then(rss_kib)) {
        println!(
            "broker rss: {} MiB before, {} MiB with the connections open, {:.1} KiB per connection",
            before / 1024,
            after / 1024,
            after.saturating_sub(before) as f64 / ok.max(1) as f64
        );
    }
    if ok == 0 {
        shared.stop();
        for task in tasks {
            let _ = task.await;
        }
        return Err("no connection could be opened".into());
    }
    // Holding.
    let hold_start = Instant::now();
    let deadline = hold_start + Duration::from_secs_f64(config.time);
    let mut next = hold_start + Duration::from_secs(1);
    let mut stop = shared.stop_tx.subscribe();
    while config.time <= 0.0 || Instant::now() < deadline {
        if shared.is_stopping() {
            break;
        }
        let until = if config.time > 0.0 {
            next.min(deadline)
        } else {
            next
        };
        tokio::select! {
            _ = tokio::time::sleep_until(until.into()) => {}
            _ = stop.changed() => break,
        }
        if Instant::now() >= next {
            println!(
                "time: {:.1}s, open connections: {}",
                hold_start.elapsed().as_secs_f64(),
                alive.load(Ordering::Relaxed)
            );
            next += Duration::from_secs(1);
        }
    }
    let still_open = alive.load(Ordering::Relaxed);
    shared.stop();
    let closing = Instant::now();
    for task in tasks {
        let _ = task.await;
    }
    println!(
        "summary: {ok} of {n} connections opened in {:.2}s ({bad} failed), {still_open} still \
         open after {:.1}s, closed in {:.2}s",
        open_time.as_secs_f64(),
        hold_start.elapsed().as_secs_f64(),
        closing.elapsed().as_secs_f64()
    );
    Ok(())
}

/// --churn: open a connection and a channel, close the connection, repeat, with -x loops.
pub async fn churn(config: Arc<Config>, shared: Arc<Shared>) -> Result<(), String> {
    let done = Arc::new(AtomicU64::new(0));
    let loops = config.producers.max(1);
    let cpu_before = config.broker_pid.and_then(broker_cpu);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for l in 0..loops {
        let (config, shared, done) = (config.clone(), shared.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let name = format!("warren-perf churn {l}");
            while !shared.is_stopping() {
                match Conn::open(&config.uri, &name, 1024).await {
                    Ok(conn) => {
                        conn.close().await;
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        if !shared.is_stopping() {
                            shared.fail(error.to_string());
                        }
                        break;
                    }
                }
            }
        }));
    }
    let deadline = (config.time > 0.0).then(|| start + Duration::from_secs_f64(config.time));
    let mut tick = tokio::time::interval_at(
        (start + Duration::from_secs(1)).into(),
        Duration::from_secs(1),
    );
    let mut stop = shared.stop_tx.subscribe();
    let (mut previous, mut previous_t) = (0u64, start);
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
        let count = done.load(Ordering::Relaxed);
        let dt = now.duration_since(previous_t).as_secs_f64();
        if !last || dt >= 0.05 {
            println!(
                "time: {:.1}s, connections: {}/s (open + channel.open + close)",
                now.duration_since(start).as_secs_f64(),
                fmt_rate((count - previous) as f64 / dt)
            );
        }
        previous = count;
        previous_t = now;
        if last {
            break;
        }
    }
    let elapsed = start.elapsed();
    let cpu_after = config.broker_pid.and_then(broker_cpu);
    let total = done.load(Ordering::Relaxed);
    shared.stop();
    for task in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
    }
    if let Some(error) = shared.take_error() {
        return Err(error);
    }
    println!(
        "summary: {total} connections opened and closed in {:.1}s by {loops} loop(s): {} conn/s",
        elapsed.as_secs_f64(),
        fmt_rate(total as f64 / elapsed.as_secs_f64().max(1e-9))
    );
    if let (Some(before), Some(after)) = (cpu_before, cpu_after) {
        let seconds = after.ticks.saturating_sub(before.ticks) as f64 / 100.0;
        println!(
            "broker cpu: {seconds:.2} s, {:.0} us/connection (CLK_TCK assumed 100)",
            seconds * 1e6 / total.max(1) as f64
        );
    }
    Ok(())
}
