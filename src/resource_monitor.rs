//! The memory and disk monitors that raise and clear the core's resource alarms.
//!
//! Every half second the monitor reads the broker's resident memory and the free space on
//! the data directory's file system, compares them with the configured watermark and limit,
//! and raises or clears [`Alarm::Memory`] / [`Alarm::Disk`] in the core. The core blocks
//! publishing connections on every listener while an alarm is raised.
//!
//! Readings come from Linux's /proc and statvfs. Where a reading is not available the
//! monitor logs that once and leaves that alarm alone, so the broker still runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use warren_config::{DiskFreeLimit, MemoryHighWatermark, Settings};
use warren_core::broker::Alarm;
use warren_core::Broker;

/// How often memory and disk are read.
pub const CHECK_INTERVAL: Duration = Duration::from_millis(500);

/// One reading of the monitored resources, with the limits they were compared against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceReading {
    /// Resident memory of the broker process, in bytes (`None`: unreadable here).
    pub memory_used: Option<u64>,
    /// The memory use above which the memory alarm is raised.
    pub memory_limit: u64,
    /// Free space on the data directory's file system, in bytes (`None`: unreadable here).
    pub disk_free: Option<u64>,
    /// The free space below which the disk alarm is raised.
    pub disk_free_limit: u64,
}

/// Watches memory and disk for one broker. Limits can be changed while it runs.
pub struct ResourceMonitor {
    broker: Arc<Broker>,
    data_dir: PathBuf,
    total_memory: u64,
    limits: Mutex<(MemoryHighWatermark, DiskFreeLimit)>,
    /// Which readings already failed and were logged, so the log says it once.
    unreadable_logged: Mutex<(bool, bool)>,
    /// /proc/self/statm, opened once: reading it afresh at offset 0 gives current figures,
    /// and a broker out of file descriptors can still measure its memory.
    statm: Option<std::fs::File>,
    /// The alarms this monitor raised (memory, disk). It clears only those, so an alarm
    /// raised through the core by someone else stays until they clear it.
    raised: Mutex<(bool, bool)>,
}

impl ResourceMonitor {
    /// A monitor for `broker` with the limits from `settings`. Logs the limits it applies.
    pub fn new(broker: Arc<Broker>, settings: &Settings) -> Arc<ResourceMonitor> {
        let total_memory = settings
            .total_memory_override
            .or_else(total_memory_available)
            .unwrap_or(0);
        let monitor = Arc::new(ResourceMonitor {
            broker,
            data_dir: settings.data_dir.clone(),
            total_memory,
            limits: Mutex::new((settings.memory_high_watermark, settings.disk_free_limit)),
            unreadable_logged: Mutex::new((false, false)),
            raised: Mutex::new((false, false)),
            statm: std::fs::File::open("/proc/self/statm").ok(),
        });
        monitor.log_limits();
        monitor
    }

    /// The memory the relative watermark is taken of, in bytes (0 if it could not be read).
    pub fn total_memory(&self) -> u64 {
        self.total_memory
    }

    /// Changes the memory watermark; takes effect at the next check (or call [`Self::check`]).
    pub fn set_memory_high_watermark(&self, watermark: MemoryHighWatermark) {
        self.limits.lock().0 = watermark;
        self.log_limits();
    }

    /// Changes the free-disk limit; takes effect at the next check (or call [`Self::check`]).
    pub fn set_disk_free_limit(&self, limit: DiskFreeLimit) {
        self.limits.lock().1 = limit;
        self.log_limits();
    }

    /// Reads memory and disk now, raises or clears the alarms accordingly, and returns what
    /// it read.
    pub fn check(&self) -> ResourceReading {
        let (watermark, disk_limit) = *self.limits.lock();
        let reading = ResourceReading {
            memory_used: self.statm.as_ref().and_then(resident_memory),
            memory_limit: memory_limit_bytes(watermark, self.total_memory),
            disk_free: disk_free_bytes(&self.data_dir),
            disk_free_limit: disk_limit_bytes(disk_limit, self.total_memory),
        };
        let mut raised = self.raised.lock();
        match reading.memory_used {
            Some(used) => {
                let over = used > reading.memory_limit;
                if over != raised.0 {
                    raised.0 = over;
                    if over {
                        tracing::warn!(
                            used,
                            allowed = reading.memory_limit,
                            "memory resource limit alarm set: publishers are blocked"
                        );
                    } else {
                        tracing::info!(
                            used,
                            allowed = reading.memory_limit,
                            "memory resource limit alarm cleared"
                        );
                    }
                    self.broker.set_alarm(Alarm::Memory, over);
                }
            }
            None => self.log_unreadable(true),
        }
        match reading.disk_free {
            Some(free) => {
                let short = free < reading.disk_free_limit;
                if short != raised.1 {
                    raised.1 = short;
                    if short {
                        tracing::warn!(
                            free,
                            limit = reading.disk_free_limit,
                            "disk resource limit alarm set: publishers are blocked"
                        );
                    } else {
                        tracing::info!(
                            free,
                            limit = reading.disk_free_limit,
                            "disk resource limit alarm cleared"
                        );
                    }
                    self.broker.set_alarm(Alarm::Disk, short);
                }
            }
            None => self.log_unreadable(false),
        }
        reading
    }

    /// Checks every [`CHECK_INTERVAL`] until `shutdown` changes.
    pub async fn run(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    self.check();
                }
                _ = shutdown.changed() => return,
            }
        }
    }

    fn log_limits(&self) {
        let (watermark, disk_limit) = *self.limits.lock();
        tracing::info!(
            "memory high watermark set to {} MiB ({} bytes, {}) of {} MiB available",
            memory_limit_bytes(watermark, self.total_memory) >> 20,
            memory_limit_bytes(watermark, self.total_memory),
            describe_watermark(watermark),
            self.total_memory >> 20,
        );
        tracing::info!(
            "disk free limit set to {} MB ({} bytes) for {}",
            disk_limit_bytes(disk_limit, self.total_memory) / 1_000_000,
            disk_limit_bytes(disk_limit, self.total_memory),
            self.data_dir.display(),
        );
    }

    fn log_unreadable(&self, memory: bool) {
        let mut logged = self.unreadable_logged.lock();
        let flag = if memory { &mut logged.0 } else { &mut logged.1 };
        if !*flag {
            *flag = true;
            tracing::warn!(
                "cannot read {} on this system: the {} alarm is not monitored",
                if memory {
                    "the process's resident memory"
                } else {
                    "free disk space"
                },
                if memory { "memory" } else { "disk" },
            );
        }
    }
}

fn describe_watermark(watermark: MemoryHighWatermark) -> String {
    match watermark {
        MemoryHighWatermark::Relative(ratio) => format!("relative {ratio}"),
        MemoryHighWatermark::Absolute(_) => "absolute".to_owned(),
    }
}

/// The memory use above which the memory alarm is raised.
fn memory_limit_bytes(watermark: MemoryHighWatermark, total_memory: u64) -> u64 {
    match watermark {
        MemoryHighWatermark::Absolute(bytes) => bytes,
        MemoryHighWatermark::Relative(ratio) => (total_memory as f64 * ratio) as u64,
    }
}

/// The free space below which the disk alarm is raised.
fn disk_limit_bytes(limit: DiskFreeLimit, total_memory: u64) -> u64 {
    match limit {
        DiskFreeLimit::Absolute(bytes) => bytes,
        DiskFreeLimit::Relative(ratio) => (total_memory as f64 * ratio) as u64,
    }
}

/// The memory available to the broker: the machine's, or its cgroup's limit if lower.
fn total_memory_available() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| parse_meminfo_total(&text));
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    match (machine, cgroup) {
        (Some(machine), Some(cgroup)) => Some(machine.min(cgroup)),
        (machine, cgroup) => machine.or(cgroup),
    }
}

/// `MemTotal` from /proc/meminfo, in bytes.
fn parse_meminfo_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line["MemTotal:".len()..].split_whitespace();
    let kib: u64 = fields.next()?.parse().ok()?;
    match fields.next() {
        Some("kB") | None => kib.checked_mul(1024),
        Some(_) => None,
    }
}

/// Resident pages from /proc/self/statm (its second field), in bytes.
fn parse_statm_resident(statm: &str, page_size: u64) -> Option<u64> {
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    pages.checked_mul(page_size)
}

/// The broker process's resident set size, as RabbitMQ's default `rss` strategy measures it,
/// from an open /proc/self/statm.
fn resident_memory(statm: &std::fs::File) -> Option<u64> {
    use std::os::unix::fs::FileExt;
    let mut text = [0u8; 256];
    let read = statm.read_at(&mut text, 0).ok()?;
    let statm = std::str::from_utf8(&text[..read]).ok()?;
    // SAFETY: sysconf has no preconditions; it only reads a system constant.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    parse_statm_resident(statm, u64::try_from(page_size).ok()?)
}

/// Free space available to unprivileged users on the file system holding `dir` (or its
/// nearest existing ancestor, before the directory is created).
fn disk_free_bytes(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let absolute = std::path::absolute(dir).ok()?;
    let existing = absolute.ancestors().find(|p| p.exists())?;
    let path = std::ffi::CString::new(existing.as_os_str().as_bytes()).ok()?;
    // SAFETY: `path` is a valid NUL-terminated string and `stat` a properly sized,
    // zero-initialised out-parameter that statvfs fills on success.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut stat) };
    if rc != 0 {
        return None;
    }
    (stat.f_bavail as u64).checked_mul(stat.f_frsize as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_from_relative_and_absolute_forms() {
        let gib = 1u64 << 30;
        assert_eq!(
            memory_limit_bytes(MemoryHighWatermark::Relative(0.6), 10 * gib),
            6 * gib
        );
        assert_eq!(
            memory_limit_bytes(MemoryHighWatermark::Absolute(123), 10 * gib),
            123
        );
        assert_eq!(
            memory_limit_bytes(MemoryHighWatermark::Relative(0.0), 10 * gib),
            0
        );
        assert_eq!(
            disk_limit_bytes(DiskFreeLimit::Relative(1.5), 2 * gib),
            3 * gib
        );
        assert_eq!(
            disk_limit_bytes(DiskFreeLimit::Absolute(50_000_000), 2 * gib),
            50_000_000
        );
    }

    #[test]
    fn proc_files_parse_and_reject_garbage() {
        let meminfo = "MemTotal:       24597436 kB\nMemFree:        20000000 kB\n";
        assert_eq!(parse_meminfo_total(meminfo), Some(24_597_436 * 1024));
        assert_eq!(parse_meminfo_total("MemFree: 1 kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: lots kB\n"), None);
        assert_eq!(parse_meminfo_total("MemTotal: 1 MB\n"), None);
        assert_eq!(
            parse_statm_resident("12345 678 90 1 0 2 0\n", 4096),
            Some(678 * 4096)
        );
        assert_eq!(parse_statm_resident("12345\n", 4096), None);
        assert_eq!(parse_statm_resident("", 4096), None);
    }

    #[test]
    fn this_machine_reports_memory_and_disk() {
        let statm = std::fs::File::open("/proc/self/statm").expect("readable on Linux");
        let used = resident_memory(&statm).expect("readable on Linux");
        let grown = vec![1u8; 64 << 20];
        assert!(resident_memory(&statm).expect("read again") >= used + (32 << 20));
        drop(grown);
        assert!(used > 0);
        assert!(total_memory_available().expect("readable on Linux") > used);
        let free = disk_free_bytes(Path::new("some/dir/not/created/yet")).expect("readable");
        assert!(free > 0);
    }

    #[test]
    fn alarms_follow_the_limits() {
        let broker = Broker::new(Default::default());
        let settings = Settings {
            memory_high_watermark: MemoryHighWatermark::Absolute(1),
            ..Settings::default()
        };
        let monitor = ResourceMonitor::new(Arc::clone(&broker), &settings);
        let reading = monitor.check();
        assert!(reading.memory_used.expect("readable") > 1);
        assert_eq!(broker.alarms(), vec![Alarm::Memory]);

        monitor.set_memory_high_watermark(MemoryHighWatermark::Absolute(u64::MAX));
        monitor.set_disk_free_limit(DiskFreeLimit::Absolute(u64::MAX));
        monitor.check();
        assert_eq!(broker.alarms(), vec![Alarm::Disk]);

        monitor.set_disk_free_limit(DiskFreeLimit::Absolute(0));
        monitor.check();
        assert!(broker.alarms().is_empty());
    }

    #[test]
    fn alarms_raised_by_others_are_left_alone() {
        let broker = Broker::new(Default::default());
        let monitor = ResourceMonitor::new(Arc::clone(&broker), &Settings::default());
        broker.set_alarm(Alarm::Memory, true);
        monitor.check();
        assert_eq!(
            broker.alarms(),
            vec![Alarm::Memory],
            "not the monitor's to clear"
        );
        broker.set_alarm(Alarm::Memory, false);
        monitor.check();
        assert!(broker.alarms().is_empty());
    }
}
