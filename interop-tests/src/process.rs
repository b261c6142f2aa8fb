//! The real `warren` executable as a child process, for tests that must kill it (SIGKILL)
//! and start it again on the same `data_dir`.
//!
//! Locating the binary: `CARGO_BIN_EXE_warren` only exists for tests of the package that
//! defines the binary, and this crate is another package. So [`warren_binary`] runs
//! `cargo build -p warren --bin warren` once per test process (a no-op when it is up to date)
//! with the same cargo, into the target directory and profile the test executable was built
//! in (found from its own path, `<target-dir>/<profile>/deps/<test>-<hash>`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long start-up may take (the first call may compile the binary).
pub const START_LIMIT: Duration = Duration::from_secs(60);
/// How long a graceful exit may take.
pub const EXIT_LIMIT: Duration = Duration::from_secs(20);

/// The `warren` executable of the target directory and profile these tests were built in.
pub fn warren_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test executable in <target>/<profile>/deps");
        let target_dir = profile_dir.parent().expect("target dir");
        let profile = profile_dir
            .file_name()
            .and_then(|n| n.to_str())
            .expect("profile directory name");
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "--quiet", "-p", "warren", "--bin", "warren"])
            .arg("--manifest-path")
            .arg(&manifest)
            .arg("--target-dir")
            .arg(target_dir);
        match profile {
            "debug" => {}
            "release" => {
                build.arg("--release");
            }
            other => {
                build.args(["--profile", other]);
            }
        }
        let status = build.status().expect("runs cargo build");
        assert!(status.success(), "cargo build -p warren failed: {status}");
        let binary = profile_dir.join(format!("warren{}", std::env::consts::EXE_SUFFIX));
        assert!(binary.is_file(), "{} was not built", binary.display());
        binary
    })
}

/// What the server logs when it runs itself again to complete `join_cluster` or `reset`.
const RESTART_LINE: &str = "restarting to complete join_cluster or reset";

/// A running `warren` process. Dropping it kills it (SIGKILL) if it still runs.
pub struct WarrenProcess {
    child: Child,
    addr: SocketAddr,
    /// How many restarts [`WarrenProcess::wait_restarted`] has seen.
    restarts: usize,
    log: Arc<Mutex<Vec<String>>>,
}

impl WarrenProcess {
    /// Starts `warren` on 127.0.0.1 port 0 with `data_dir` and extra `KEY=VALUE` settings,
    /// and waits for its `listening protocol=amqp addr=` line.
    pub fn start(data_dir: &Path, settings: &[&str]) -> WarrenProcess {
        let mut command = Command::new(warren_binary());
        command
            .args(crate::test_listener_args())
            .arg("--set")
            .arg(format!("data_dir={}", data_dir.display()));
        for setting in settings {
            command.arg("--set").arg(setting);
        }
        let mut child = command
            .env_remove("WARREN_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawns warren");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                kept.lock().expect("log lock").push(line.clone());
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + START_LIMIT;
        let addr = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.split("listening protocol=amqp addr=").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or_default();
                        break addr
                            .parse()
                            .unwrap_or_else(|e| panic!("bad address in '{line}': {e}"));
                    }
                }
                Err(error) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "warren did not start ({error}); its log: {:#?}",
                        log.lock().expect("log lock")
                    );
                }
            }
        };
        WarrenProcess {
            child,
            addr,
            restarts: 0,
            log,
        }
    }

    /// The AMQP listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// After `join_cluster` or `reset`: waits until the process has run itself again once
    /// more than when last asked (its log says it restarts, then the new run's AMQP
    /// listener), and takes the new run's addresses.
    pub fn wait_restarted(&mut self, limit: Duration) {
        let deadline = Instant::now() + limit;
        self.restarts += 1;
        loop {
            let found = self.current_log().iter().find_map(|line| {
                let rest = line.split("listening protocol=amqp addr=").nth(1)?;
                rest.split_whitespace().next()?.parse().ok()
            });
            let restarted = self.log().iter().any(|line| line.contains(RESTART_LINE));
            if let (true, Some(addr)) = (restarted, found) {
                self.addr = addr;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "warren did not restart within {limit:?}: {:#?}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The lines of the current run: after the last restart (`join_cluster`), if any.
    fn current_log(&self) -> Vec<String> {
        let mut log = self.log();
        if let Some(last) = log.iter().rposition(|line| line.contains(RESTART_LINE)) {
            log.drain(..=last);
        }
        log
    }

    /// The address of the listener of `protocol` (`mqtt`, `stomp`, ...), from its
    /// `listening protocol=PROTOCOL addr=` log line of the current run (waited for up to
    /// the start limit).
    pub fn listener_addr(&self, protocol: &str) -> SocketAddr {
        let marker = format!("listening protocol={protocol} addr=");
        let deadline = Instant::now() + START_LIMIT;
        loop {
            let found = self.current_log().iter().find_map(|line| {
                let rest = line.split(marker.as_str()).nth(1)?;
                rest.split_whitespace().next()?.parse().ok()
            });
            if let Some(addr) = found {
                return addr;
            }
            assert!(
                Instant::now() < deadline,
                "no {protocol} listener in the log: {:#?}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@{}/%2f", self.addr)
    }

    /// The lines the process logged so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("log lock").clone()
    }

    /// SIGKILL, then reap: nothing the broker had not fsynced survives.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait for a graceful exit.
    pub fn terminate(mut self) -> ExitStatus {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("runs kill");
        assert!(status.success(), "kill -TERM failed: {status}");
        let deadline = Instant::now() + EXIT_LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "warren did not exit within {EXIT_LIMIT:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for WarrenProcess {
    fn drop(&mut self) {
        // Only our own child, by its handle; a no-op when it already exited.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
