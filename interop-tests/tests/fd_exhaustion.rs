//! Running out of file descriptors: the broker refuses (leaves in the backlog) new
//! connections while serving the open ones, and accepts again once descriptors free up.
//!
//! Alone in its test binary, because it lowers the process's open-file limit.

mod mqtt_common;

use std::fs::File;
use std::time::Duration;

use mqtt_common::{connect_packet, RawClient};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use warren_interop_tests::{wait_for, TestBroker};

// `rlim_t` is 64 bits on most platforms but not all: the casts are needed somewhere.
#[allow(clippy::unnecessary_cast)]
fn set_soft_limit(soft: u64) -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain struct in, plain struct out.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        let before = limit.rlim_cur as u64;
        limit.rlim_cur = soft as libc::rlim_t;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        before
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_file_descriptors_keeps_open_connections_and_recovers() {
    let broker = TestBroker::start().await;
    let mut open = RawClient::connected(broker.mqtt_addr(), "already-open").await;
    // The store's writer saves the definitions once after start-up, opening a file: let it
    // finish, or the descriptor it frees could let the waiting client in below.
    let definitions = broker
        .data_dir()
        .join(warren::persistence::DEFINITIONS_FILE);
    assert!(
        wait_for(Duration::from_secs(10), || definitions.exists()).await,
        "definitions saved at start-up"
    );

    let in_use = std::fs::read_dir("/proc/self/fd").map_or(64, |d| d.count()) as u64;
    let before = set_soft_limit(in_use + 16);
    // Fill the table, then free exactly one descriptor for the client's socket.
    let mut fillers = Vec::new();
    while let Ok(file) = File::open("/dev/null") {
        fillers.push(file);
    }
    fillers.pop();
    let mut waiting = tokio::net::TcpStream::connect(broker.mqtt_addr())
        .await
        .expect("the kernel completes the handshake into the backlog");
    waiting.write_all(&connect_packet("waiting")).await.unwrap();
    // The broker cannot accept it, but the open connection is served.
    open.send(&[0xC0, 0]).await;
    assert_eq!(
        open.read_exact(2).await,
        vec![0xD0, 0],
        "PINGRESP while out of fds"
    );
    // Whether the waiting client stays unaccepted meanwhile is not asserted: other threads
    // of this test process (the store's writer, the runtime) open and close descriptors now
    // and then, and the broker may win one of them. The broker's own log shows the refusal
    // (`accept failed ... out of file descriptors`).
    let mut connack = [0u8; 4];

    // Descriptors free up: the waiting client is accepted.
    drop(fillers);
    tokio::time::timeout(Duration::from_secs(5), waiting.read_exact(&mut connack))
        .await
        .expect("accepted once descriptors are free")
        .unwrap();
    assert_eq!(connack, [0x20, 2, 0, 0]);
    set_soft_limit(before);
    broker.shutdown().await;
}
