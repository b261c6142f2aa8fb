//! The per-second lines and the summary of the MQTT and STOMP load modes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::args::Config;
use crate::stats::Shared;
use crate::{broker_cpu, fmt_rate};

/// Counters of one load run.
#[derive(Default)]
pub struct Counters {
    /// Messages the producers wrote.
    pub sent: AtomicU64,
    /// Messages the consumers received.
    pub delivered: AtomicU64,
}

/// Prints one line a second and a summary, then stops the load.
pub async fn report(
    config: &Config,
    shared: &Shared,
    counters: &Counters,
    scenario: &str,
    mut tasks: tokio::task::JoinSet<Result<(), String>>,
) -> Result<(), String> {
    let start = Instant::now();
    let cpu_start = config.broker_pid.and_then(broker_cpu);
    let delivered_start = counters.delivered.load(Ordering::Relaxed);
    let sent_start = counters.sent.load(Ordering::Relaxed);
    let mut last = (start, delivered_start);
    let duration = Duration::from_secs_f64(if config.time > 0.0 { config.time } else { 10.0 });
    let mut failure = None;
    while start.elapsed() < duration && !shared.is_stopping() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            Some(result) = tasks.join_next() => {
                if let Ok(Err(error)) | Err(error) = result.map_err(|e| e.to_string()) {
                    failure = Some(error);
                    break;
                }
                continue;
            }
        }
        let now = Instant::now();
        let delivered = counters.delivered.load(Ordering::Relaxed);
        println!(
            "time: {:.1}s, delivered: {} msg/s",
            start.elapsed().as_secs_f64(),
            fmt_rate((delivered - last.1) as f64 / (now - last.0).as_secs_f64())
        );
        last = (now, delivered);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let delivered = counters.delivered.load(Ordering::Relaxed) - delivered_start;
    let sent = counters.sent.load(Ordering::Relaxed);
    let mut line = format!(
        "summary: {scenario}, delivered {} msg/s over {elapsed:.1}s ({delivered} messages)",
        fmt_rate(delivered as f64 / elapsed)
    );
    if sent > 0 {
        // Sent over the same window as delivered: a consumer keeping up delivers as many.
        line.push_str(&format!(
            ", sent {} msg/s over the same time, {sent} sent in all",
            fmt_rate((sent - sent_start) as f64 / elapsed)
        ));
    }
    if let (Some(before), Some(after)) = (cpu_start, config.broker_pid.and_then(broker_cpu)) {
        let cpu_us = (after.ticks - before.ticks) as f64 * 10_000.0;
        line.push_str(&format!(
            ", broker CPU {:.2} us/msg, broker RSS {} MiB",
            cpu_us / delivered.max(1) as f64,
            after.rss_kib / 1024
        ));
    }
    println!("{line}");
    shared.stop();
    tasks.abort_all();
    match failure {
        Some(error) => Err(error),
        None => Ok(()),
    }
}
