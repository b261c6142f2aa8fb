//! warren-perf: a load tool for any AMQP 0-9-1 broker (Warren, RabbitMQ), in the spirit of
//! RabbitMQ's PerfTest, with its own minimal client on tokio and Warren's sans-IO codec so
//! that the tool is not the bottleneck. See README.md and `--help`.

mod amqp10;
mod amqp10_fe2o3;
mod args;
mod client;
mod modes;
mod mqtt;
mod report;
mod stats;
mod stomp;
mod stream;
mod throughput;
mod topology;

use std::process::ExitCode;
use std::sync::Arc;

use args::{parse_args, ArgError, Mode};
use stats::Shared;

fn main() -> ExitCode {
    let config = match parse_args(std::env::args().skip(1)) {
        Ok(config) => config,
        Err(ArgError::Help) => {
            print!("{}", args::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(ArgError::Invalid(message)) => {
            eprintln!("warren-perf: {message}");
            return ExitCode::from(2);
        }
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(threads) = config.threads {
        builder.worker_threads(threads);
    }
    let runtime = match builder.build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("warren-perf: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    stats::epoch();
    let config = Arc::new(config);
    let shared = Arc::new(Shared::new());
    let result = runtime.block_on(async {
        let on_signal = shared.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                on_signal.stop();
            }
        });
        match config.mode {
            Mode::Throughput => throughput::run(config.clone(), shared.clone()).await,
            Mode::Rpc => modes::rpc(config.clone(), shared.clone()).await,
            Mode::Idle(n) => modes::idle(config.clone(), shared.clone(), n).await,
            Mode::Churn => modes::churn(config.clone(), shared.clone()).await,
            Mode::MqttIdle(n) => mqtt::idle(config.clone(), shared.clone(), n).await,
            Mode::MqttFanIn => mqtt::fan_in(config.clone(), shared.clone()).await,
            Mode::MqttQos1 => mqtt::qos1(config.clone(), shared.clone()).await,
            Mode::StompQueue => stomp::queue(config.clone(), shared.clone()).await,
            Mode::Amqp10Queue => amqp10::queue(config.clone(), shared.clone()).await,
            Mode::StreamQueue => stream::queue(config.clone(), shared.clone()).await,
        }
    });
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("warren-perf: error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// A rate, rounded: 412345.6 -> "412346".
pub fn fmt_rate(rate: f64) -> String {
    format!("{:.0}", rate.max(0.0))
}

/// A broker process's CPU time (utime + stime, in clock ticks) and resident memory.
#[derive(Clone, Copy, Debug)]
pub struct BrokerCpu {
    pub ticks: u64,
    pub rss_kib: u64,
}

/// Reads /proc/PID/stat (fields 14 and 15: utime, stime). The tick rate is assumed to be 100
/// per second (`getconf CLK_TCK` on Linux).
pub fn broker_cpu(pid: u32) -> Option<BrokerCpu> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = parse_stat_ticks(&stat)?;
    Some(BrokerCpu {
        ticks,
        rss_kib: rss_kib(pid).unwrap_or(0),
    })
}

/// utime + stime from the text of /proc/PID/stat. The command name (field 2) may contain
/// spaces and parentheses, so fields are counted after the last ')'.
fn parse_stat_ticks(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // after ')' the first field is field 3 (state); utime is 14, stime 15.
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// VmRSS of a process, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_parsing_survives_odd_command_names() {
        let stat = "1234 (we ird) proc)) S 1 1234 1234 0 -1 4194560 100 0 0 0 \
                    250 75 0 0 20 0 8 0 12345 1000000 500";
        assert_eq!(parse_stat_ticks(stat), Some(325));
        assert_eq!(parse_stat_ticks("garbage"), None);
    }

    #[test]
    fn own_process_is_readable() {
        assert!(broker_cpu(std::process::id()).is_some());
        assert!(rss_kib(std::process::id()).unwrap() > 0);
    }

    #[test]
    fn rates_are_rounded() {
        assert_eq!(fmt_rate(412_345.6), "412346");
        assert_eq!(fmt_rate(-1.0), "0");
    }
}
