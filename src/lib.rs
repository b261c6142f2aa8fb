//! # warren
//!
//! The Warren server: builds the core from [`Settings`], applies boot-time definitions,
//! binds the configured listeners and runs until asked to shut down. `main.rs` is a thin
//! wrapper around [`Server::start`]; tests start servers in-process the same way.

mod definitions;
pub mod resource_monitor;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use warren_amqp091::{ListenerConfig, ProtocolHandoff, SessionConfig};
use warren_amqp10::Amqp10Config;
use warren_config::Settings;
use warren_core::access::Permissions;
use warren_core::broker::Limits;
use warren_core::Broker;

use crate::resource_monitor::ResourceMonitor;

pub use definitions::apply_definitions;

/// Why the server could not start.
#[derive(Debug)]
pub enum StartError {
    /// A listener address could not be bound.
    Bind {
        /// The protocol of the listener.
        protocol: &'static str,
        /// The address as configured.
        addr: String,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// The definitions file could not be loaded or applied.
    Definitions(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Bind {
                protocol,
                addr,
                error,
            } => {
                write!(f, "cannot listen for {protocol} on {addr}: {error}")
            }
            StartError::Definitions(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for StartError {}

/// Sweeps expired messages out of every queue every 250 ms until shutdown.
async fn expire_messages(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                broker.expire_messages();
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// AMQP 1.0 shares the AMQP ports: the 0-9-1 accept loop hands connections that start with
/// an AMQP 1.0 header to the AMQP 1.0 driver.
fn amqp10_handoff(broker: Arc<Broker>, settings: &Settings) -> ProtocolHandoff {
    let config = Arc::new(Amqp10Config {
        max_frame_size: settings.frame_max,
        channel_max: settings.channel_max,
        idle_timeout: (settings.heartbeat > 0)
            .then(|| std::time::Duration::from_secs(u64::from(settings.heartbeat))),
        anonymous_login: settings
            .anonymous_login_user
            .clone()
            .map(|user| (user, settings.anonymous_login_pass.clone())),
        default_vhost: settings.default_vhost.clone(),
        max_message_size: settings.max_message_size,
        handshake_timeout: settings.handshake_timeout,
        ..Amqp10Config::default()
    });
    let (alarm_tx, alarms) = tokio::sync::watch::channel(None);
    broker.subscribe_alarms(Box::new(move |reason| {
        let _ = alarm_tx.send(reason);
    }));
    ProtocolHandoff(Arc::new(move |stream, peer, header, shutdown| {
        Box::pin(warren_amqp10::run_connection(
            stream,
            peer,
            header,
            Arc::clone(&broker),
            Arc::clone(&config),
            shutdown,
            alarms.clone(),
        ))
    }))
}

/// A running Warren server.
pub struct Server {
    broker: Arc<Broker>,
    resource_monitor: Arc<ResourceMonitor>,
    amqp_addrs: Vec<SocketAddr>,
    shutdown: watch::Sender<bool>,
    listeners: JoinSet<()>,
}

impl Server {
    /// Builds the broker from `settings`, binds every listener and starts serving.
    /// Each bound listener is logged as `listening protocol=amqp addr=HOST:PORT`.
    pub async fn start(settings: Settings) -> Result<Server, StartError> {
        let broker = Broker::new(Limits {
            max_message_size: settings.max_message_size,
        });
        let vhost = broker.add_vhost(&settings.default_vhost);
        broker.add_user(
            &settings.default_user,
            &settings.default_pass,
            vec!["administrator".into()],
        );
        vhost.set_permissions(&settings.default_user, Permissions::full());
        if settings.consistent_hash_exchange {
            broker.register_exchange_type(warren_consistent_hash::ConsistentHashExchange::new());
            tracing::info!("plugin enabled: {}", warren_consistent_hash::TYPE_NAME);
        }
        broker.set_loopback_users(settings.loopback_users.iter().cloned());
        if let Some(path) = &settings.load_definitions {
            apply_definitions(&broker, path, &settings).map_err(StartError::Definitions)?;
        }

        // The first check runs before any listener accepts, so a broker that starts over its
        // limits blocks publishers from their first frame.
        let resource_monitor = ResourceMonitor::new(Arc::clone(&broker), &settings);
        resource_monitor.check();

        let (shutdown, shutdown_rx) = watch::channel(false);
        let listener_config = ListenerConfig {
            session: SessionConfig {
                heartbeat: settings.heartbeat,
                frame_max: settings.frame_max,
                channel_max: settings.channel_max,
                max_message_size: settings.max_message_size,
                product: "Warren".to_string(),
                consumer_timeout: settings.consumer_timeout,
            },
            handshake_timeout: settings.handshake_timeout,
            connection_max: settings.connection_max,
            amqp10: Some(amqp10_handoff(Arc::clone(&broker), &settings)),
            ..ListenerConfig::default()
        };
        let mut listeners = JoinSet::new();
        listeners.spawn(expire_messages(Arc::clone(&broker), shutdown_rx.clone()));
        listeners.spawn(Arc::clone(&resource_monitor).run(shutdown_rx.clone()));
        let mut amqp_addrs = Vec::new();
        for addr in settings.amqp_listeners() {
            let text = addr.to_socket_addr_string();
            let listener = TcpListener::bind(&text)
                .await
                .map_err(|error| StartError::Bind {
                    protocol: "amqp",
                    addr: text.clone(),
                    error,
                })?;
            let bound = listener.local_addr().map_err(|error| StartError::Bind {
                protocol: "amqp",
                addr: text.clone(),
                error,
            })?;
            tracing::info!("listening protocol=amqp addr={bound}");
            amqp_addrs.push(bound);
            listeners.spawn(warren_amqp091::serve(
                listener,
                Arc::clone(&broker),
                listener_config.clone(),
                shutdown_rx.clone(),
            ));
        }
        Ok(Server {
            broker,
            resource_monitor,
            amqp_addrs,
            shutdown,
            listeners,
        })
    }

    /// The address the first AMQP listener is bound to.
    pub fn amqp_addr(&self) -> SocketAddr {
        self.amqp_addrs[0]
    }

    /// Every bound AMQP listener address.
    pub fn amqp_addrs(&self) -> &[SocketAddr] {
        &self.amqp_addrs
    }

    /// The broker model, for embedding and tests.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The memory and disk monitor, to read resources or change limits at runtime.
    pub fn resource_monitor(&self) -> &Arc<ResourceMonitor> {
        &self.resource_monitor
    }

    /// Stops accepting, closes every connection with 320 CONNECTION_FORCED and waits for
    /// the listeners to finish.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        while self.listeners.join_next().await.is_some() {}
    }
}
