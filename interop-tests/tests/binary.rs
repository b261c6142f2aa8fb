//! The real `warren` executable: start-up on an ephemeral port, serving a client, SIGTERM
//! (clients get 320 CONNECTION_FORCED, the process exits 0), refusing an unknown setting, and
//! `--help`.
//!
//! Locating the binary: `CARGO_BIN_EXE_warren` only exists for tests of the package that
//! defines the binary, and this crate is another package. So the tests run
//! `cargo build -p warren --bin warren` once per test process (a no-op when it is up to
//! date) with the same cargo that runs the tests, into the target directory and profile
//! this test executable was built in (found from its own path,
//! `<target-dir>/<profile>/deps/binary-<hash>`), and use `<target-dir>/<profile>/warren`.
//! This honours `CARGO_TARGET_DIR` and `--release` without reading either.

mod amqprs_common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use amqprs::channel::{BasicGetArguments, QueueDeclareArguments};
use amqprs_common::connect_addr;
use warren_interop_tests::process::warren_binary;
use warren_interop_tests::test_listener_args;

/// Start-up, build and exit limits. Generous: the first call may compile the binary.
const START_LIMIT: Duration = Duration::from_secs(30);
const EXIT_LIMIT: Duration = Duration::from_secs(15);

/// A fresh, empty directory for one test's `data_dir`.
fn temp_dir(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("warren-binary-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creates temp dir");
    dir
}

/// A running `warren` process with its stderr lines arriving on a channel.
struct Running {
    child: Child,
    stderr: mpsc::Receiver<String>,
    data_dir: PathBuf,
}

impl Running {
    fn start(name: &str) -> Running {
        let data_dir = temp_dir(name);
        let mut child = Command::new(warren_binary())
            .args(test_listener_args())
            .arg("--set")
            .arg(format!("data_dir={}", data_dir.display()))
            .env_remove("WARREN_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawns warren");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running {
            child,
            stderr: rx,
            data_dir,
        }
    }

    /// Reads stderr until `listening protocol=amqp addr=HOST:PORT` and returns the address.
    fn listening_addr(&self) -> SocketAddr {
        let deadline = Instant::now() + START_LIMIT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.split("listening protocol=amqp addr=").nth(1) {
                        let addr = rest.split_whitespace().next().unwrap_or_default();
                        return addr
                            .parse()
                            .unwrap_or_else(|e| panic!("bad address in '{line}': {e}"));
                    }
                    seen.push(line);
                }
                Err(error) => panic!("no listening line ({error}); stderr so far: {seen:#?}"),
            }
        }
    }

    /// Reads stderr until a line containing `text` and returns it.
    fn line_containing(&self, text: &str) -> String {
        let deadline = Instant::now() + START_LIMIT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(line) => seen.push(line),
                Err(error) => panic!("no line with '{text}' ({error}); stderr so far: {seen:#?}"),
            }
        }
    }

    fn sigterm(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("runs kill");
        assert!(status.success(), "kill -TERM failed: {status}");
    }

    /// Waits for the process to exit, failing the test after [`EXIT_LIMIT`].
    fn wait_exit(&mut self) -> ExitStatus {
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

impl Drop for Running {
    fn drop(&mut self) {
        // Only our own child, by its handle; a no-op when it already exited.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_a_client_then_sigterm_closes_connections_with_320_and_exits_0() {
    let mut warren = tokio::task::spawn_blocking(|| {
        let warren = Running::start("sigterm");
        let addr = warren.listening_addr();
        (warren, addr)
    })
    .await
    .expect("start task");
    let (ref mut running, addr) = warren;
    assert!(addr.ip().is_loopback());
    assert_ne!(addr.port(), 0);

    let mut conn = connect_addr(addr).await;
    let ch = conn.channel().await;
    ch.channel
        .queue_declare(QueueDeclareArguments::new("bin-q"))
        .await
        .expect("declare")
        .expect("declare-ok");
    ch.publish("bin-q", b"through the real binary").await;
    let (get_ok, _, body) = ch
        .channel
        .basic_get(BasicGetArguments::new("bin-q").no_ack(true).finish())
        .await
        .expect("get")
        .expect("get-ok");
    assert_eq!(body, b"through the real binary");
    assert_eq!(get_ok.message_count(), 0);

    running.sigterm();
    let close = conn.expect_close().await;
    assert_eq!(close.code, 320);
    assert_eq!(
        close.text,
        "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"
    );
    let status = tokio::task::block_in_place(|| running.wait_exit());
    assert!(status.success(), "exit status after SIGTERM: {status}");
    assert_eq!(status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_without_clients_exits_0() {
    let status = tokio::task::spawn_blocking(|| {
        let mut warren = Running::start("idle");
        warren.listening_addr();
        // The management API and the metrics endpoint log their bound ports the same way.
        warren.line_containing("listening protocol=http addr=127.0.0.1:");
        warren.line_containing("listening protocol=prometheus addr=127.0.0.1:");
        warren.sigterm();
        warren.wait_exit()
    })
    .await
    .expect("task");
    assert_eq!(status.code(), Some(0), "{status}");
}

#[test]
fn an_unknown_setting_stops_start_up_naming_the_key() {
    let data_dir = temp_dir("unknown-key");
    let output = Command::new(warren_binary())
        .args(test_listener_args())
        .arg("--set")
        .arg(format!("data_dir={}", data_dir.display()))
        .arg("--set")
        .arg("no_such.setting=1")
        .stdin(Stdio::null())
        .output()
        .expect("runs warren");
    let _ = std::fs::remove_dir_all(&data_dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "exit status {}", output.status);
    assert_ne!(output.status.code(), Some(0));
    assert!(
        stderr.contains("unknown configuration key 'no_such.setting'"),
        "stderr: {stderr}"
    );
    assert!(
        !stderr.contains("listening protocol=amqp"),
        "it must not start listening: {stderr}"
    );
}

#[test]
fn help_prints_usage_and_exits_0() {
    let output = Command::new(warren_binary())
        .arg("--help")
        .stdin(Stdio::null())
        .output()
        .expect("runs warren");
    assert_eq!(output.status.code(), Some(0), "{}", output.status);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.starts_with("Usage: warren"), "stdout: {stdout}");
    assert!(stdout.contains("--set KEY=VALUE"), "stdout: {stdout}");
    assert!(stdout.contains("listeners.tcp.default"), "stdout: {stdout}");
}
