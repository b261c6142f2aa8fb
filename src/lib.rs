//! # warren
//!
//! The Warren server: builds the core from [`Settings`], applies boot-time definitions,
//! binds the configured listeners and runs until asked to shut down. `main.rs` is a thin
//! wrapper around [`Server::start`]; tests start servers in-process the same way.

pub mod cluster;
mod definitions;
pub mod join;
pub mod limits;
mod listeners;
mod operator;
pub mod persistence;
mod quorum_view;
pub mod resource_monitor;
mod stream_replication;
pub mod tls;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use warren_amqp091::{ListenerConfig, SessionConfig};
use warren_cluster::metadata::MetadataStore;
use warren_config::{ListenAddr, Settings};
use warren_core::access::Permissions;
use warren_core::broker::Limits;
use warren_core::store::{MessageStore, StoreConfig};
use warren_core::Broker;
use warren_management::ListenerInfo;

use crate::listeners::{
    amqp10_handoff, login_from, start_mqtt, start_web_amqp, start_web_stomp, stomp_listener_config,
    stream_listener_config, SharedCount,
};
use crate::operator::{start_operator_endpoints, OperatorAddrs};
use crate::resource_monitor::ResourceMonitor;

pub use definitions::{apply_definitions, import_definitions};

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
    /// A TLS certificate or key could not be loaded.
    Tls(String),
    /// Clustering could not start (the secret file, the metadata log).
    Cluster(String),
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
            StartError::Definitions(message)
            | StartError::Storage(message)
            | StartError::Tls(message)
            | StartError::Cluster(message) => f.write_str(message),
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

/// Binds a listener address and logs `listening protocol=PROTOCOL addr=HOST:PORT`.
pub(crate) async fn bind(
    protocol: &'static str,
    addr: &ListenAddr,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let text = addr.to_socket_addr_string();
    let bind_error = |error| StartError::Bind {
        protocol,
        addr: text.clone(),
        error,
    };
    let listener = TcpListener::bind(&text).await.map_err(bind_error)?;
    let bound = listener.local_addr().map_err(bind_error)?;
    tracing::info!("listening protocol={protocol} addr={bound}");
    Ok((listener, bound))
}

/// This machine's host name, for the node name (`warren@HOST`).
pub(crate) fn host_name() -> String {
    let mut buffer = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it.
    let result = unsafe { libc::gethostname(buffer.as_mut_ptr().cast(), buffer.len()) };
    if result != 0 {
        return "localhost".to_string();
    }
    let end = buffer.iter().position(|b| *b == 0).unwrap_or(buffer.len());
    String::from_utf8_lossy(&buffer[..end]).into_owned()
}

/// A running Warren server.
pub struct Server {
    broker: Arc<Broker>,
    resource_monitor: Arc<ResourceMonitor>,
    amqp_addrs: Vec<SocketAddr>,
    stomp_addr: Option<SocketAddr>,
    stomps_addr: Option<SocketAddr>,
    stream_addr: Option<SocketAddr>,
    stream_tls_addr: Option<SocketAddr>,
    mqtt_addrs: Vec<SocketAddr>,
    mqtts_addr: Option<SocketAddr>,
    web_mqtt_addrs: Vec<SocketAddr>,
    web_stomp_addrs: Vec<SocketAddr>,
    web_amqp_addrs: Vec<SocketAddr>,
    amqps_addr: Option<SocketAddr>,
    operator_addrs: OperatorAddrs,
    cluster: Option<cluster::ClusterNode>,
    shutdown: watch::Sender<bool>,
    listeners: JoinSet<()>,
    /// Told when `join_cluster` or `reset` wants the process restarted.
    restart: Arc<tokio::sync::Notify>,
}

/// The quorum queues' shared write-ahead log and group state, inside `data_dir`.
pub const QUORUM_DIR: &str = "quorum";

impl Server {
    /// Builds the broker from `settings`, binds every listener and starts serving.
    /// Each bound listener is logged as `listening protocol=amqp addr=HOST:PORT`.
    pub async fn start(mut settings: Settings) -> Result<Server, StartError> {
        // A pending join_cluster resets the node before anything opens its data.
        let pending_join = join::reset_for_pending_join(&mut settings)?;
        let restart = Arc::new(tokio::sync::Notify::new());
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
        broker.attach_store(Arc::clone(&store));
        // Streams keep what AMQP 0-9-1, STOMP and MQTT publish to them as AMQP 1.0 messages,
        // as stream protocol clients write them.
        broker.set_stream_format(Arc::new(warren_amqp10::StreamFormat));
        // Quorum queues: one Raft group per queue, every group logging into this node's
        // shared WAL (data_dir/quorum; docs/quorum-queues.md).
        let (wal, wal_report) = warren_raft::Wal::open(
            settings.data_dir.join(QUORUM_DIR),
            warren_raft::WalOptions::default(),
        )
        .map_err(|error| {
            StartError::Storage(format!(
                "cannot open the quorum queue log in {}: {error}",
                settings.data_dir.join(QUORUM_DIR).display()
            ))
        })?;
        tracing::debug!(?wal_report, "quorum queue log recovered");
        // On a cluster the groups start once clustering has (below): their members are
        // on other nodes too.
        let quorum = Arc::new(match settings.cluster.enabled() {
            true => warren_raft::QuorumBackend::clustered(
                wal.clone(),
                Some(store),
                tokio::runtime::Handle::current(),
                &cluster::node_name(&settings),
            ),
            false => warren_raft::QuorumBackend::new(
                wal.clone(),
                Some(store),
                tokio::runtime::Handle::current(),
            ),
        });
        broker.set_queue_backend(
            Arc::clone(&quorum) as Arc<dyn warren_core::queue_type::QueueBackend>
        );
        // Queues declared from now on page or hold their publishers back beyond these.
        broker.queue_memory_limits().set(
            settings.queue_max_in_memory_messages,
            settings.queue_max_in_memory_bytes as u64,
        );
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
            definitions::apply_saved_definitions(&broker, &saved, &settings)
                .map_err(StartError::Definitions)?;
        }
        if let Some(path) = &settings.load_definitions {
            apply_definitions(&broker, path, &settings).map_err(StartError::Definitions)?;
        }
        persistence::restore_messages(&broker, recovered);
        persistence::install_definitions_writer(&broker, &settings.data_dir);

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
                auth_mechanisms: settings.auth_mechanisms(),
                cert_login_from: login_from(settings.ssl_cert_login_from),
                server_properties: settings.server_properties.clone(),
            },
            handshake_timeout: settings.handshake_timeout,
            connection_max: settings.connection_max,
            amqp10: Some(amqp10_handoff(Arc::clone(&broker), &settings)),
            ..ListenerConfig::default()
        };
        let mut listeners = JoinSet::new();
        // Clustered: from here on topology changes go through the metadata log.
        let management_slot = Arc::new(std::sync::OnceLock::new());
        let cluster = match settings.cluster.enabled() {
            true => Some(
                cluster::start(
                    &settings,
                    &broker,
                    &quorum,
                    Arc::clone(&management_slot),
                    cluster::Joining {
                        pending: pending_join,
                        restart: Arc::clone(&restart),
                    },
                    &shutdown_rx,
                    &mut listeners,
                )
                .await?,
            ),
            false => None,
        };
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
        // One count for every STOMP listener, TCP, TLS and WebSocket alike.
        let stomp_count: SharedCount = settings
            .stomp
            .max_connections
            .map(|max| (max, Arc::new(std::sync::atomic::AtomicUsize::new(0))));
        let stomp_addr = match &settings.stomp.listener {
            Some(addr) => {
                let (listener, bound) = bind("stomp", addr).await?;
                listeners.spawn(warren_stomp::serve(
                    listener,
                    Arc::clone(&broker),
                    stomp_listener_config(&settings, &stomp_count),
                    shutdown_rx.clone(),
                ));
                Some(bound)
            }
            None => None,
        };
        let stomps_addr = match &settings.stomp.tls_listener {
            Some(addr) => {
                let tls =
                    tls::listener_config("stomp.listeners.ssl.default", &settings.ssl_options)
                        .map_err(StartError::Tls)?;
                let (listener, bound) = bind("stomps", addr).await?;
                listeners.spawn(warren_stomp::serve(
                    listener,
                    Arc::clone(&broker),
                    warren_stomp::ListenerConfig {
                        tls: Some(tls),
                        ..stomp_listener_config(&settings, &stomp_count)
                    },
                    shutdown_rx.clone(),
                ));
                Some(bound)
            }
            None => None,
        };
        let stream_addr = match &settings.stream.listener {
            Some(addr) => {
                let (listener, bound) = bind("stream", addr).await?;
                listeners.spawn(warren_stream::serve(
                    listener,
                    Arc::clone(&broker),
                    stream_listener_config(&settings),
                    shutdown_rx.clone(),
                ));
                Some(bound)
            }
            None => None,
        };
        let stream_tls_addr = match &settings.stream.tls_listener {
            Some(addr) => {
                let tls =
                    tls::listener_config("stream.listeners.ssl.default", &settings.ssl_options)
                        .map_err(StartError::Tls)?;
                let (listener, bound) = bind("stream/ssl", addr).await?;
                listeners.spawn(warren_stream::serve(
                    listener,
                    Arc::clone(&broker),
                    warren_stream::ListenerConfig {
                        tls: Some(tls),
                        ..stream_listener_config(&settings)
                    },
                    shutdown_rx.clone(),
                ));
                Some(bound)
            }
            None => None,
        };
        let mut web_mqtt_addrs = Vec::new();
        let (mqtt_addrs, mqtts_addr) = start_mqtt(
            &settings,
            &broker,
            &shutdown_rx,
            &mut listeners,
            &mut web_mqtt_addrs,
        )
        .await?;
        let web_stomp_addrs = start_web_stomp(
            &settings,
            &broker,
            &shutdown_rx,
            &mut listeners,
            &stomp_count,
        )
        .await?;
        let web_amqp_addrs =
            start_web_amqp(&settings, &broker, &shutdown_rx, &mut listeners).await?;
        let mut amqps_addr = None;
        if let Some(addr) = &settings.amqps_listener {
            let tls = tls::listener_config("listeners.ssl.default", &settings.ssl_options)
                .map_err(StartError::Tls)?;
            let (listener, bound) = bind("amqps", addr).await?;
            amqps_addr = Some(bound);
            listeners.spawn(warren_amqp091::serve(
                listener,
                Arc::clone(&broker),
                ListenerConfig {
                    tls: Some(tls),
                    ..listener_config.clone()
                },
                shutdown_rx.clone(),
            ));
        }
        // The protocol listeners as /api/overview lists them, with RabbitMQ's names.
        let protocol_listeners: Vec<ListenerInfo> = [
            ("amqp", amqp_addrs.clone()),
            ("amqp/ssl", amqps_addr.into_iter().collect()),
            ("mqtt", mqtt_addrs.clone()),
            ("mqtt/ssl", mqtts_addr.into_iter().collect()),
            ("stomp", stomp_addr.into_iter().collect()),
            ("stomp/ssl", stomps_addr.into_iter().collect()),
            ("http/web-mqtt", web_mqtt_addrs.clone()),
            ("http/web-stomp", web_stomp_addrs.clone()),
            ("http/web-amqp", web_amqp_addrs.clone()),
            ("stream", stream_addr.into_iter().collect()),
            ("stream/ssl", stream_tls_addr.into_iter().collect()),
        ]
        .into_iter()
        .flat_map(|(protocol, addrs)| {
            addrs.into_iter().map(move |addr| ListenerInfo {
                protocol: protocol.into(),
                addr,
            })
        })
        .collect();
        let operator_addrs = start_operator_endpoints(
            &broker,
            &quorum,
            cluster.as_ref(),
            management_slot,
            &resource_monitor,
            &settings,
            protocol_listeners,
            &mut listeners,
            &shutdown_rx,
        )
        .await?;
        Ok(Server {
            broker,
            resource_monitor,
            amqp_addrs,
            stomp_addr,
            stomps_addr,
            stream_addr,
            stream_tls_addr,
            mqtt_addrs,
            mqtts_addr,
            web_mqtt_addrs,
            web_stomp_addrs,
            web_amqp_addrs,
            amqps_addr,
            operator_addrs,
            cluster,
            shutdown,
            listeners,
            restart,
        })
    }

    /// Resolves when the node asks to be restarted: `join_cluster` or `reset` wrote its
    /// marker, and the next start empties the node's data (and joins) (the binary shuts
    /// down and runs itself again).
    pub async fn restart_requested(&self) {
        self.restart.notified().await;
    }

    /// The address the first AMQP listener is bound to.
    pub fn amqp_addr(&self) -> SocketAddr {
        self.amqp_addrs[0]
    }

    /// The address the STOMP listener is bound to, unless it is disabled
    /// (`stomp.listeners.tcp.default = none`).
    pub fn stomp_addr(&self) -> Option<SocketAddr> {
        self.stomp_addr
    }

    /// The stream protocol listener's address, unless it is disabled
    /// (`stream.listeners.tcp.default = none`).
    pub fn stream_addr(&self) -> Option<SocketAddr> {
        self.stream_addr
    }

    /// The stream-protocol-over-TLS listener's address (`None` unless
    /// `stream.listeners.ssl.default` is set).
    pub fn stream_tls_addr(&self) -> Option<SocketAddr> {
        self.stream_tls_addr
    }

    /// Every bound AMQP listener address.
    pub fn amqp_addrs(&self) -> &[SocketAddr] {
        &self.amqp_addrs
    }

    /// The address the first MQTT listener is bound to, if MQTT is enabled.
    pub fn mqtt_addr(&self) -> Option<SocketAddr> {
        self.mqtt_addrs.first().copied()
    }

    /// Every bound MQTT listener address.
    pub fn mqtt_addrs(&self) -> &[SocketAddr] {
        &self.mqtt_addrs
    }

    /// The STOMP-over-TLS listener's address (`None` unless `stomp.listeners.ssl.default`
    /// is set).
    pub fn stomps_addr(&self) -> Option<SocketAddr> {
        self.stomps_addr
    }

    /// The Web-MQTT listener's address (plain, else TLS), if `web_mqtt` is enabled.
    pub fn web_mqtt_addr(&self) -> Option<SocketAddr> {
        self.web_mqtt_addrs.first().copied()
    }

    /// The Web-STOMP listener's address (plain, else TLS), if `web_stomp` is enabled.
    pub fn web_stomp_addr(&self) -> Option<SocketAddr> {
        self.web_stomp_addrs.first().copied()
    }

    /// The AMQP 1.0 over WebSocket listener's address (plain, else TLS), if `web_amqp` is
    /// enabled.
    pub fn web_amqp_addr(&self) -> Option<SocketAddr> {
        self.web_amqp_addrs.first().copied()
    }

    /// The MQTTS listener's address (`None` unless `mqtt.listeners.ssl.default` is set).
    pub fn mqtts_addr(&self) -> Option<SocketAddr> {
        self.mqtts_addr
    }

    /// The AMQPS listener's address (`None` unless `listeners.ssl.default` is set).
    pub fn amqps_addr(&self) -> Option<SocketAddr> {
        self.amqps_addr
    }

    /// The management HTTP API's address (`None` when `plugins.management = false`).
    pub fn management_addr(&self) -> Option<SocketAddr> {
        self.operator_addrs.management
    }

    /// The HTTPS management API's address (`None` unless `management.ssl.port` is set).
    pub fn management_tls_addr(&self) -> Option<SocketAddr> {
        self.operator_addrs.management_tls
    }

    /// The Prometheus endpoint's address (`None` when `plugins.prometheus = false`).
    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        self.operator_addrs.prometheus
    }

    /// The Prometheus endpoint's HTTPS address (`None` unless `prometheus.ssl.port` is set).
    pub fn prometheus_tls_addr(&self) -> Option<SocketAddr> {
        self.operator_addrs.prometheus_tls
    }

    /// The cluster listener's address, when the node runs clustered.
    pub fn cluster_addr(&self) -> Option<SocketAddr> {
        self.cluster.as_ref().map(|node| node.addr)
    }

    /// The metadata store, when the node runs clustered.
    pub fn metadata(&self) -> Option<&Arc<MetadataStore>> {
        self.cluster.as_ref().map(|node| &node.metadata)
    }

    /// The broker model, for embedding and tests.
    pub fn broker(&self) -> &Arc<Broker> {
        &self.broker
    }

    /// The memory and disk monitor, to read resources or change limits at runtime.
    pub fn resource_monitor(&self) -> &Arc<ResourceMonitor> {
        &self.resource_monitor
    }

    /// Stops accepting, closes every AMQP connection with 320 CONNECTION_FORCED and every
    /// MQTT connection (without publishing wills), and waits for the listeners to finish.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(cluster) = &self.cluster {
            cluster.metadata.shutdown().await;
        }
        while self.listeners.join_next().await.is_some() {}
        if let Some(store) = self.broker.message_store() {
            // Writes what is pending (the last acks) and stops the writer thread.
            let store = Arc::clone(store);
            let _ = tokio::task::spawn_blocking(move || store.close()).await;
        }
    }
}
