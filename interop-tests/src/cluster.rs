//! A multi-node harness: real `warren` processes on 127.0.0.1, 127.0.0.2, 127.0.0.3, ...,
//! each with its own `data_dir` and every listener on its own address (ephemeral ports, and
//! one cluster port shared by all addresses), killed with SIGKILL and restarted, with
//! [`Proxy`]s placed on chosen links to cut them (drop silently, reset, one direction).
//!
//! Node `i` (0-based) is `warren@127.0.0.{i+1}`. A link routed through a proxy is given to
//! the dialing node as its seed address for that peer; the transport keeps seed addresses
//! over membership records, so every connection between the two goes through the proxy.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::process::WarrenProcess;
use crate::TempDir;

/// What a [`Proxy`] does with the bytes it carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ProxyMode {
    /// Forward both ways.
    Pass = 0,
    /// Swallow every byte both ways, keeping the connections open (a silent network).
    Drop = 1,
    /// Reset every connection, now and on arrival.
    Reset = 2,
    /// Forward from the dialer to the listener only; swallow the answers.
    ForwardOnly = 3,
}

/// A TCP proxy in the test process, between a dialing node and a peer's listener.
pub struct Proxy {
    addr: SocketAddr,
    mode: Arc<AtomicU8>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// A proxy listening on `host:0` that forwards to `upstream`.
    pub async fn start(host: &str, upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind((host, 0)).await.expect("proxy binds");
        let addr = listener.local_addr().expect("proxy address");
        let mode = Arc::new(AtomicU8::new(ProxyMode::Pass as u8));
        let shared = Arc::clone(&mode);
        let task = tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    return;
                };
                let mode = Arc::clone(&shared);
                tokio::spawn(async move {
                    if mode.load(Ordering::Acquire) == ProxyMode::Reset as u8 {
                        // A zero linger makes the close a reset (it does not block).
                        #[allow(deprecated)]
                        let _ = inbound.set_linger(Some(Duration::ZERO));
                        return;
                    }
                    let Ok(outbound) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = inbound.set_nodelay(true);
                    let _ = outbound.set_nodelay(true);
                    let (inbound_read, inbound_write) = inbound.into_split();
                    let (outbound_read, outbound_write) = outbound.into_split();
                    let forward = pump(inbound_read, outbound_write, Arc::clone(&mode), true);
                    let backward = pump(outbound_read, inbound_write, mode, false);
                    tokio::join!(forward, backward);
                });
            }
        });
        Proxy { addr, mode, task }
    }

    /// Where dialers connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Changes what the proxy does, for existing and new connections.
    pub fn set(&self, mode: ProxyMode) {
        self.mode.store(mode as u8, Ordering::Release);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Copies one direction, obeying the mode at every read.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: Arc<AtomicU8>,
    forward: bool,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            // Wake up now and then to notice a switch to Reset.
            _ = tokio::time::sleep(Duration::from_millis(50)) => {
                if mode.load(Ordering::Acquire) == ProxyMode::Reset as u8 {
                    return;
                }
                continue;
            }
        };
        let Ok(read) = read else { return };
        if read == 0 {
            return;
        }
        let current = mode.load(Ordering::Acquire);
        let carry = current == ProxyMode::Pass as u8
            || (current == ProxyMode::ForwardOnly as u8 && forward);
        if current == ProxyMode::Reset as u8 {
            return;
        }
        if carry && to.write_all(&buffer[..read]).await.is_err() {
            return;
        }
    }
}

/// The address node `index` (0-based) lives on.
pub fn node_host(index: usize) -> String {
    format!("127.0.0.{}", index + 1)
}

/// The name of node `index`.
pub fn node_name(index: usize) -> String {
    format!("warren@{}", node_host(index))
}

/// A port free on every node address, for the cluster listeners.
fn free_port(nodes: usize) -> u16 {
    for _ in 0..50 {
        let first = StdListener::bind("127.0.0.1:0").expect("binds");
        let port = first.local_addr().expect("address").port();
        let all_free = (1..nodes).all(|i| StdListener::bind((node_host(i).as_str(), port)).is_ok());
        if all_free {
            return port;
        }
    }
    panic!("no port free on every node address");
}

/// A cluster of real `warren` processes.
pub struct TestCluster {
    /// Each node's data directory (kept across restarts).
    dirs: Vec<TempDir>,
    /// The shared secret lives here.
    secret_dir: TempDir,
    /// The cluster port every node listens on (at its own address).
    port: u16,
    /// Seed addresses overridden per (dialer, peer): proxies.
    routes: HashMap<(usize, usize), SocketAddr>,
    /// Extra settings per node.
    extra: Vec<Vec<String>>,
    /// Nodes whose seed list names only themselves (a standalone node).
    alone: Vec<bool>,
    /// The running processes.
    nodes: Vec<Option<WarrenProcess>>,
}

impl TestCluster {
    /// Prepares `count` nodes (none started): directories, a shared secret (mode 0600) and a
    /// cluster port.
    pub fn new(count: usize) -> TestCluster {
        let secret_dir = TempDir::new("cluster-secret");
        let secret = secret_dir.path().join("cluster.secret");
        std::fs::write(&secret, b"0123456789abcdef0123456789abcdef").expect("writes the secret");
        set_mode(&secret, 0o600);
        TestCluster {
            dirs: (0..count)
                .map(|i| TempDir::new(&format!("cluster-node{}", i + 1)))
                .collect(),
            secret_dir,
            port: free_port(count),
            routes: HashMap::new(),
            extra: vec![Vec::new(); count],
            alone: vec![false; count],
            nodes: (0..count).map(|_| None).collect(),
        }
    }

    /// The shared secret file.
    pub fn secret_path(&self) -> std::path::PathBuf {
        self.secret_dir.path().join("cluster.secret")
    }

    /// Node `index`'s cluster listener address.
    pub fn cluster_addr(&self, index: usize) -> SocketAddr {
        format!("{}:{}", node_host(index), self.port)
            .parse()
            .expect("address")
    }

    /// Node `dialer` reaches `peer` through `route` (a proxy on the peer's own address,
    /// see [`Proxy::start`]) from its next start on.
    pub fn route(&mut self, dialer: usize, peer: usize, route: SocketAddr) {
        assert_eq!(
            route.ip().to_string(),
            node_host(peer),
            "a route listens on the peer's address"
        );
        self.routes.insert((dialer, peer), route);
    }

    /// Node `index` gets a seed list of itself only (from its next start): it forms a
    /// cluster of its own, a standalone node with clustering on.
    pub fn alone(&mut self, index: usize) {
        self.alone[index] = true;
    }

    /// Node `index`'s data directory.
    pub fn data_dir(&self, index: usize) -> &std::path::Path {
        self.dirs[index].path()
    }

    /// Waits until node `index` restarted itself (`join_cluster`) and listens again.
    pub fn wait_restarted(&mut self, index: usize, limit: Duration) {
        self.nodes[index]
            .as_mut()
            .expect("node is running")
            .wait_restarted(limit);
    }

    /// Drops the settings [`TestCluster::set`] added for node `index` (from its next start).
    pub fn clear_settings(&mut self, index: usize) {
        self.extra[index].clear();
    }

    /// Adds a setting for node `index` (before it starts).
    pub fn set(&mut self, index: usize, setting: &str) {
        self.extra[index].push(setting.to_string());
    }

    /// The settings node `index` starts with.
    pub fn settings(&self, index: usize) -> Vec<String> {
        let host = node_host(index);
        let mut settings = vec![
            format!("node_name={}", node_name(index)),
            format!("listeners.tcp.default={host}:0"),
            format!("mqtt.listeners.tcp.default={host}:0"),
            format!("stomp.listeners.tcp.default={host}:0"),
            format!("stream.listeners.tcp.default={host}:0"),
            format!("management.tcp.ip={host}"),
            format!("prometheus.tcp.ip={host}"),
            format!("cluster.listeners.tcp.default={host}:{}", self.port),
            format!("cluster.secret_file={}", self.secret_path().display()),
            "cluster.change_timeout=2000".to_string(),
        ];
        for peer in 0..self.dirs.len() {
            if self.alone[index] && peer != index {
                continue;
            }
            // A routed link's proxy listens on the peer's own address (another port), so
            // the seed still names the peer.
            let port = self
                .routes
                .get(&(index, peer))
                .map_or(self.port, SocketAddr::port);
            settings.push(format!(
                "cluster_formation.classic_config.nodes.{}={}:{port}",
                peer + 1,
                node_name(peer)
            ));
        }
        settings.extend(self.extra[index].iter().cloned());
        settings
    }

    /// Starts node `index` (again, on its data directory).
    pub fn start(&mut self, index: usize) {
        let settings = self.settings(index);
        let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
        let process = WarrenProcess::start(self.dirs[index].path(), &refs);
        self.nodes[index] = Some(process);
    }

    /// Starts every node at once (each process in its own thread).
    pub fn start_all(&mut self) {
        let all: Vec<usize> = (0..self.dirs.len()).collect();
        self.start_some(&all);
    }

    /// Deletes node `index`'s data directory (the node must be stopped): it restarts blank.
    pub fn wipe(&mut self, index: usize) {
        assert!(self.nodes[index].is_none(), "stop node {index} first");
        let dir = self.dirs[index].path();
        std::fs::remove_dir_all(dir).expect("removes the data directory");
        std::fs::create_dir_all(dir).expect("recreates the data directory");
    }

    /// Starts the nodes `indexes` at once (each process in its own thread).
    pub fn start_some(&mut self, indexes: &[usize]) {
        let all: Vec<(usize, Vec<String>, std::path::PathBuf)> = indexes
            .iter()
            .copied()
            .map(|i| (i, self.settings(i), self.dirs[i].path().to_path_buf()))
            .collect();
        let started: Vec<(usize, WarrenProcess)> = std::thread::scope(|scope| {
            let handles: Vec<_> = all
                .iter()
                .map(|(i, settings, dir)| {
                    scope.spawn(move || {
                        let refs: Vec<&str> = settings.iter().map(String::as_str).collect();
                        (*i, WarrenProcess::start(dir, &refs))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("node starts"))
                .collect()
        });
        for (i, process) in started {
            self.nodes[i] = Some(process);
        }
    }

    /// SIGKILLs node `index`.
    pub fn kill(&mut self, index: usize) {
        if let Some(process) = self.nodes[index].take() {
            process.kill();
        }
    }

    /// The running process of node `index`.
    pub fn node(&self, index: usize) -> &WarrenProcess {
        self.nodes[index].as_ref().expect("node is running")
    }

    /// Node `index`'s management API address.
    pub fn http_addr(&self, index: usize) -> String {
        self.node(index).listener_addr("http").to_string()
    }

    /// Node `index`'s AMQP URL for `user`.
    pub fn amqp_url(&self, index: usize, user: &str, password: &str, vhost: &str) -> String {
        format!(
            "amqp://{user}:{password}@{}/{vhost}",
            self.node(index).addr()
        )
    }

    /// One management API request to node `index` as guest; returns status and JSON body
    /// (`null` when empty or not JSON).
    pub async fn api(
        &self,
        index: usize,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, Json) {
        let response = warren_management::http::send(
            &self.http_addr(index),
            method,
            path,
            Some(("guest", "guest")),
            body.map(str::as_bytes),
        )
        .await
        .unwrap_or_else(|e| panic!("{method} {path} on node {index}: {e}"));
        let json = serde_json::from_slice(&response.body).unwrap_or(Json::Null);
        (response.status, json)
    }

    /// Waits until every running node reports `members` members, all running, and a leader.
    pub async fn wait_formed(&self, members: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut last = Json::Null;
        loop {
            let mut formed = true;
            for index in 0..self.nodes.len() {
                if self.nodes[index].is_none() {
                    continue;
                }
                let (status, body) = self.api(index, "GET", "/api/cluster-status", None).await;
                let running = body["members"]
                    .as_array()
                    .map_or(0, |m| m.iter().filter(|m| m["running"] == true).count());
                if status != 200 || running != members || body["leader"].is_null() {
                    formed = false;
                    last = body;
                    break;
                }
            }
            if formed {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the cluster did not form with {members} members within {limit:?}; last status: {last}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Sets a file's permission bits.
pub fn set_mode(path: &std::path::Path, mode: u32) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .expect("sets the mode");
    }
    #[cfg(not(unix))]
    let _ = (path, mode);
}
