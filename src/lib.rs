//! # warren
//!
//! The Warren server: builds the core from [`Settings`], applies boot-time definitions,
//! binds the configured listeners and runs until asked to shut down. `main.rs` is a thin
//! wrapper around [`Server::start`]; tests start servers in-process the same way.

mod definitions;
pub mod persistence;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use warren_amqp091::{ListenerConfig, SessionConfig};
use warren_config::Settings;
use warren_core::access::Permissions;
use warren_core::broker::Limits;
use warren_core::store::{MessageStore, StoreConfig};
use warren_core::Broker;

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
    /// The data directory or the message store could not be opened.
    Storage(String),
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
            StartError::Definitions(message) | StartError::Storage(message) => f.write_str(message),
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

/// A running Warren server.
pub struct Server {
    broker: Arc<Broker>,
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
        let store_config = StoreConfig {
            dir: settings.data_dir.join(persistence::STORE_DIR),
            segment_size: settings.msg_store_file_size_limit as u64,
            max_unwritten_bytes: settings.msg_store_max_unwritten_bytes,
            queue_max_in_memory: settings.queue_max_in_memory_messages,
        };
        let (store, recovered) = MessageStore::open(store_config).map_err(|error| {
            StartError::Storage(format!(
                "cannot open the message store in {}: {error}",
                settings.data_dir.display()
            ))
        })?;
        broker.attach_store(store);
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
        let saved = persistence::definitions_path(&settings.data_dir);
        if saved.exists() {
            apply_definitions(&broker, &saved, &settings).map_err(StartError::Definitions)?;
        }
        if let Some(path) = &settings.load_definitions {
            apply_definitions(&broker, path, &settings).map_err(StartError::Definitions)?;
        }
        persistence::restore_messages(&broker, recovered);
        persistence::install_definitions_writer(&broker, &settings.data_dir);

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
            ..ListenerConfig::default()
        };
        let mut listeners = JoinSet::new();
        listeners.spawn(expire_messages(Arc::clone(&broker), shutdown_rx.clone()));
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

    /// Stops accepting, closes every connection with 320 CONNECTION_FORCED and waits for
    /// the listeners to finish.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        while self.listeners.join_next().await.is_some() {}
        if let Some(store) = self.broker.message_store() {
            // Writes what is pending (the last acks) and stops the writer thread.
            let store = Arc::clone(store);
            let _ = tokio::task::spawn_blocking(move || store.close()).await;
        }
    }
}
