//! Helpers shared by the interop tests: an in-process broker on 127.0.0.1 with ephemeral
//! ports (AMQP and STOMP), the URLs clients connect with, and a small STOMP test client
//! ([`stomp`]). Each test starts its own broker, so tests never share state or ports.

pub mod stomp;

use std::net::SocketAddr;
use std::time::Duration;

use warren::Server;
use warren_config::Settings;

/// A broker started for one test.
pub struct TestBroker {
    server: Server,
}

impl TestBroker {
    /// Starts a broker with the embedded defaults on 127.0.0.1, port 0.
    pub async fn start() -> TestBroker {
        Self::start_with(&[]).await
    }

    /// Starts a broker with extra `KEY=VALUE` settings applied after the test defaults.
    pub async fn start_with(settings: &[(&str, &str)]) -> TestBroker {
        let mut config = Settings::default();
        config
            .set("listeners.tcp.default", "127.0.0.1:0")
            .expect("valid listener");
        config
            .set("stomp.listeners.tcp.default", "127.0.0.1:0")
            .expect("valid STOMP listener");
        config
            .set("mqtt.listeners.tcp.default", "127.0.0.1:0")
            .expect("valid MQTT listener");
        for (key, value) in settings {
            config
                .set(key, value)
                .unwrap_or_else(|e| panic!("test setting {key}={value}: {e}"));
        }
        let server = Server::start(config).await.expect("broker starts");
        TestBroker { server }
    }

    /// The AMQP listener's address.
    pub fn addr(&self) -> SocketAddr {
        self.server.amqp_addr()
    }

    /// The STOMP listener's address.
    pub fn stomp_addr(&self) -> SocketAddr {
        self.server
            .stomp_addr()
            .expect("the test broker listens for STOMP")
    }

    /// The MQTT listener's address.
    pub fn mqtt_addr(&self) -> SocketAddr {
        self.server
            .mqtt_addr()
            .expect("the MQTT listener is enabled in tests")
    }

    /// `amqp://guest:guest@127.0.0.1:PORT/%2f`.
    pub fn url(&self) -> String {
        self.url_for("guest", "guest", "%2f")
    }

    /// An AMQP URL for a user and an (already URL-encoded) vhost.
    pub fn url_for(&self, user: &str, password: &str, vhost: &str) -> String {
        format!("amqp://{user}:{password}@{}/{vhost}", self.addr())
    }

    /// The running server, for adding users or inspecting the core.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The broker model.
    pub fn broker(&self) -> &std::sync::Arc<warren_core::Broker> {
        self.server.broker()
    }

    /// Shuts the broker down (connections get 320 CONNECTION_FORCED).
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

/// Polls `condition` every 10 ms until it holds or `limit` passes; returns whether it held.
/// For conditions on broker state that settle asynchronously; never a bare sleep.
pub async fn wait_for(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
