//! The listeners' configurations from [`Settings`] and the starters of the listeners that
//! take more than a bind and a spawn (MQTT, WebSocket STOMP and AMQP 1.0).

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinSet;
use warren_amqp091::ProtocolHandoff;
use warren_amqp10::Amqp10Config;
use warren_config::{CertLoginFrom, Settings};
use warren_core::certificate::LoginFrom;
use warren_core::retained_file::FileRetained;
use warren_core::Broker;

use crate::{bind, tls, StartError};

/// The core's name for `ssl_cert_login_from`.
pub(crate) fn login_from(from: CertLoginFrom) -> LoginFrom {
    match from {
        CertLoginFrom::CommonName => LoginFrom::CommonName,
        CertLoginFrom::DistinguishedName => LoginFrom::DistinguishedName,
    }
}

/// The stream protocol listener's configuration from the `stream.` settings.
pub(crate) fn stream_listener_config(settings: &Settings) -> warren_stream::ListenerConfig {
    let stream = &settings.stream;
    warren_stream::ListenerConfig {
        session: warren_stream::SessionConfig {
            frame_max: stream.frame_max,
            heartbeat: stream.heartbeat,
            initial_frame_max: stream.initial_frame_max,
            advertised_host: stream.advertised_host.clone(),
            advertised_port: stream.advertised_port,
            // As RabbitMQ's stream plugin: the broker's `auth_mechanisms`, of those it knows.
            auth_mechanisms: settings
                .auth_mechanisms()
                .into_iter()
                .filter(|mechanism| mechanism == "PLAIN" || mechanism == "EXTERNAL")
                .collect(),
            cert_login_from: login_from(settings.ssl_cert_login_from),
        },
        login_timeout: settings
            .handshake_timeout
            .max(std::time::Duration::from_secs(10)),
        connection_max: settings.connection_max,
        tls: None,
    }
}

/// The STOMP listener's configuration from the `stomp.` settings.
/// `count` is the `stomp.max_connections` count every STOMP listener shares.
pub(crate) fn stomp_listener_config(
    settings: &Settings,
    count: &SharedCount,
) -> warren_stomp::ListenerConfig {
    let stomp = &settings.stomp;
    warren_stomp::ListenerConfig {
        session: warren_stomp::SessionConfig {
            default_user: stomp.default_user.clone(),
            default_pass: stomp.default_pass.clone(),
            default_vhost: stomp.default_vhost.clone(),
            implicit_connect: stomp.implicit_connect,
            limits: warren_stomp::codec::Limits {
                max_frame_size: stomp.max_frame_size,
                max_header_count: stomp.max_headers,
                max_header_length: stomp.max_header_length,
                ..warren_stomp::codec::Limits::default()
            },
            unauthenticated_max_frame_size: stomp.max_frame_size_unauthenticated,
            default_nack_requeue: stomp.default_nack_requeue,
            max_message_size: settings.max_message_size,
            ssl_cert_login: stomp
                .ssl_cert_login
                .then(|| login_from(settings.ssl_cert_login_from)),
            ..warren_stomp::SessionConfig::default()
        },
        login_timeout: stomp.login_timeout,
        connection_max: settings.connection_max,
        tls: None,
        websocket: None,
        max_connections: count.clone(),
    }
}

/// A connection cap and the count of connections shared by the listeners it covers.
pub(crate) type SharedCount = Option<(usize, Arc<std::sync::atomic::AtomicUsize>)>;

/// Binds every MQTT listener (`mqtt.listeners.tcp.*`, and `mqtt.listeners.ssl.default` over
/// TLS) and spawns their accept loops, which share one client registry and one retained
/// message store. Returns the plain addresses and the MQTTS one. Web-MQTT (`web_mqtt.*`,
/// MQTT over WebSocket) shares the registry too, so a client identifier is unique across
/// both; its addresses are pushed to `web_addrs`.
pub(crate) async fn start_mqtt(
    settings: &Settings,
    broker: &Arc<Broker>,
    shutdown: &watch::Receiver<bool>,
    listeners: &mut JoinSet<()>,
    web_addrs: &mut Vec<SocketAddr>,
) -> Result<(Vec<SocketAddr>, Option<SocketAddr>), StartError> {
    let mqtt = &settings.mqtt;
    let retained = FileRetained::open(&settings.data_dir).map_err(|error| {
        StartError::Storage(format!(
            "cannot open the retained message log in {}: {error}",
            settings.data_dir.display()
        ))
    })?;
    let context = warren_mqtt::MqttContext {
        broker: Arc::clone(broker),
        registry: warren_mqtt::ClientRegistry::new(),
        // In memory for reads, logged to data_dir/retained.log (docs/storage.md).
        retained,
        config: Arc::new(warren_mqtt::SessionConfig {
            vhost: mqtt.vhost.clone(),
            default_user: mqtt.default_user.clone(),
            default_pass: mqtt.default_pass.clone(),
            allow_anonymous: mqtt.allow_anonymous,
            exchange: mqtt.exchange.clone(),
            prefetch: mqtt.prefetch,
            max_packet_size: mqtt.max_packet_size,
            max_message_size: settings.max_message_size,
            ssl_cert_login: mqtt
                .ssl_cert_login
                .then(|| login_from(settings.ssl_cert_login_from)),
            max_keep_alive: mqtt.max_keep_alive,
            durable_quorum_queues: mqtt.durable_queue_type == "quorum",
        }),
    };
    let config = warren_mqtt::ListenerConfig {
        connect_timeout: settings.handshake_timeout,
        connection_max: settings.connection_max,
        // One count for every MQTT listener, TCP, TLS and WebSocket alike.
        max_connections: mqtt
            .max_connections
            .map(|max| (max, Arc::new(std::sync::atomic::AtomicUsize::new(0)))),
        ..warren_mqtt::ListenerConfig::default()
    };
    // A client connecting on another node of the cluster with an identifier a connection
    // of this node holds closes that connection (docs/clustering.md).
    broker.set_client_takeover(Arc::new(warren_mqtt::RegistryTakeover {
        registry: Arc::clone(&context.registry),
        retained: Arc::clone(&context.retained),
        timeout: config.takeover_timeout,
    }));
    // Persistent MQTT 5 sessions' shared subscription memberships and delayed wills, kept
    // in the retained store's log, come back before any client connects.
    warren_mqtt::session::recovery::recover(&Arc::new(context.clone()));
    let mut addrs = Vec::new();
    for addr in mqtt.listeners() {
        let (listener, bound) = bind("mqtt", addr).await?;
        addrs.push(bound);
        listeners.spawn(warren_mqtt::serve(
            listener,
            context.clone(),
            config.clone(),
            shutdown.clone(),
        ));
    }
    let mut tls_addr = None;
    if let Some(addr) = &mqtt.tls_listener {
        let tls = tls::listener_config("mqtt.listeners.ssl.default", &settings.ssl_options)
            .map_err(StartError::Tls)?;
        let (listener, bound) = bind("mqtts", addr).await?;
        tls_addr = Some(bound);
        listeners.spawn(warren_mqtt::serve(
            listener,
            context.clone(),
            warren_mqtt::ListenerConfig {
                tls: Some(tls),
                ..config.clone()
            },
            shutdown.clone(),
        ));
    }
    let web = &settings.web_mqtt;
    let websocket = warren_core::websocket::WebSocketConfig {
        path: web.path.clone(),
        subprotocols: vec!["mqtt", "mqttv3.1"],
        text_frames: false,
    };
    if web.enabled {
        let (listener, bound) = bind("web-mqtt", &web.listener).await?;
        web_addrs.push(bound);
        listeners.spawn(warren_mqtt::serve(
            listener,
            context.clone(),
            warren_mqtt::ListenerConfig {
                websocket: Some(websocket.clone()),
                ..config.clone()
            },
            shutdown.clone(),
        ));
    }
    if let Some(addr) = web.tls_listener() {
        let tls = tls::listener_config("web_mqtt.ssl.port", &settings.ssl_options)
            .map_err(StartError::Tls)?;
        let (listener, bound) = bind("web-mqtts", &addr).await?;
        web_addrs.push(bound);
        listeners.spawn(warren_mqtt::serve(
            listener,
            context,
            warren_mqtt::ListenerConfig {
                tls: Some(tls),
                websocket: Some(websocket),
                ..config
            },
            shutdown.clone(),
        ));
    }
    Ok((addrs, tls_addr))
}

/// Binds the Web-STOMP listeners (`web_stomp.*`: STOMP over WebSocket, plain and TLS) and
/// spawns their accept loops; returns their addresses.
pub(crate) async fn start_web_stomp(
    settings: &Settings,
    broker: &Arc<Broker>,
    shutdown: &watch::Receiver<bool>,
    listeners: &mut JoinSet<()>,
    count: &SharedCount,
) -> Result<Vec<SocketAddr>, StartError> {
    let web = &settings.web_stomp;
    let websocket = warren_core::websocket::WebSocketConfig {
        path: web.path.clone(),
        subprotocols: vec!["v12.stomp", "v11.stomp", "v10.stomp", "stomp"],
        text_frames: true,
    };
    let mut addrs = Vec::new();
    if web.enabled {
        let (listener, bound) = bind("web-stomp", &web.listener).await?;
        addrs.push(bound);
        listeners.spawn(warren_stomp::serve(
            listener,
            Arc::clone(broker),
            warren_stomp::ListenerConfig {
                websocket: Some(websocket.clone()),
                ..stomp_listener_config(settings, count)
            },
            shutdown.clone(),
        ));
    }
    if let Some(addr) = web.tls_listener() {
        let tls = tls::listener_config("web_stomp.ssl.port", &settings.ssl_options)
            .map_err(StartError::Tls)?;
        let (listener, bound) = bind("web-stomps", &addr).await?;
        addrs.push(bound);
        listeners.spawn(warren_stomp::serve(
            listener,
            Arc::clone(broker),
            warren_stomp::ListenerConfig {
                tls: Some(tls),
                websocket: Some(websocket),
                ..stomp_listener_config(settings, count)
            },
            shutdown.clone(),
        ));
    }
    Ok(addrs)
}

/// The AMQP 1.0 session settings, shared by the AMQP ports and AMQP 1.0 over WebSocket.
fn amqp10_config(settings: &Settings) -> Arc<Amqp10Config> {
    Arc::new(Amqp10Config {
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
        external_login: settings
            .auth_mechanisms()
            .iter()
            .any(|mechanism| mechanism == "EXTERNAL")
            .then(|| login_from(settings.ssl_cert_login_from)),
        ..Amqp10Config::default()
    })
}

/// AMQP 1.0 shares the AMQP ports, plain and TLS: the 0-9-1 accept loop hands connections
/// that start with an AMQP 1.0 header to the AMQP 1.0 driver.
pub(crate) fn amqp10_handoff(broker: Arc<Broker>, settings: &Settings) -> ProtocolHandoff {
    let config = amqp10_config(settings);
    let alarms = broker.alarm_watch();
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

/// Binds the AMQP 1.0 over WebSocket listeners (`web_amqp.*`, plain and TLS; subprotocol
/// `amqp`, binary messages) and spawns their accept loops; returns their addresses. Each
/// connection is the same AMQP 1.0 driver and session as on the AMQP port, over the
/// WebSocket tunnel.
pub(crate) async fn start_web_amqp(
    settings: &Settings,
    broker: &Arc<Broker>,
    shutdown: &watch::Receiver<bool>,
    listeners: &mut JoinSet<()>,
) -> Result<Vec<SocketAddr>, StartError> {
    let web = &settings.web_amqp;
    let websocket = warren_core::websocket::WebSocketConfig {
        path: web.path.clone(),
        subprotocols: vec!["amqp"],
        text_frames: false,
    };
    let config = amqp10_config(settings);
    let mut addrs = Vec::new();
    let mut bound_listeners = Vec::new();
    if web.enabled {
        let (listener, bound) = bind("web-amqp", &web.listener).await?;
        addrs.push(bound);
        bound_listeners.push((listener, None, "web-amqp"));
    }
    if let Some(addr) = web.tls_listener() {
        let tls = tls::listener_config("web_amqp.ssl.port", &settings.ssl_options)
            .map_err(StartError::Tls)?;
        let (listener, bound) = bind("web-amqps", &addr).await?;
        addrs.push(bound);
        bound_listeners.push((listener, Some(tls), "web-amqps"));
    }
    for (listener, tls, protocol) in bound_listeners {
        let accept = warren_core::accept::AcceptConfig::new(
            ("web-amqp", "web-amqps"),
            tls,
            settings.connection_max,
            settings.handshake_timeout,
        )
        .with_websocket(protocol, websocket.clone());
        let (broker, config) = (Arc::clone(broker), Arc::clone(&config));
        let alarms = broker.alarm_watch();
        let connections_shutdown = shutdown.clone();
        listeners.spawn(warren_core::accept::serve_connections(
            listener,
            accept,
            shutdown.clone(),
            move |stream, peer| {
                warren_amqp10::run_websocket_connection(
                    stream,
                    peer,
                    Arc::clone(&broker),
                    Arc::clone(&config),
                    connections_shutdown.clone(),
                    alarms.clone(),
                )
            },
        ));
    }
    Ok(addrs)
}
