//! Shared helpers for the amqprs interop tests: connections and channels whose server-sent
//! events (channel.close, connection.close, basic.cancel, confirms, returns) are forwarded
//! into an mpsc queue the test can await, and deadline-bounded receive helpers.
//!
//! The callbacks implement amqprs's `#[async_trait]` traits by hand (boxed futures), so the
//! test crate needs no `async-trait` dependency of its own.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use amqprs::callbacks::{ChannelCallback, ConnectionCallback};
use amqprs::channel::{
    BasicGetArguments, Channel, ConsumerMessage, QueueDeclareArguments, QueuePurgeArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{Ack, BasicProperties, Cancel, Close, CloseChannel, Nack, Return};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use warren_core::queue::QueueStats;
use warren_interop_tests::TestBroker;

/// How long any single expected event may take before the test fails.
pub const LIMIT: Duration = Duration::from_secs(5);

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Something the server sent on a channel outside a synchronous reply.
#[derive(Debug)]
pub enum ChannelEvent {
    /// channel.close from the server.
    Closed {
        code: u16,
        text: String,
        class_id: u16,
        method_id: u16,
    },
    /// basic.cancel from the server (consumer_cancel_notify).
    Cancelled { consumer_tag: String },
    /// basic.ack in confirm mode.
    Ack { delivery_tag: u64, multiple: bool },
    /// basic.nack in confirm mode.
    Nack { delivery_tag: u64, multiple: bool },
    /// basic.return with the returned message.
    Returned {
        code: u16,
        text: String,
        exchange: String,
        routing_key: String,
        properties: Box<BasicProperties>,
        body: Vec<u8>,
    },
}

/// Forwards channel callbacks into an mpsc queue.
struct ChannelEvents(UnboundedSender<ChannelEvent>);

impl ChannelCallback for ChannelEvents {
    fn close<'life0, 'life1, 'async_trait>(
        &'life0 mut self,
        _channel: &'life1 Channel,
        close: CloseChannel,
    ) -> BoxFuture<'async_trait, Result<(), amqprs::error::Error>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let _ = self.0.send(ChannelEvent::Closed {
            code: close.reply_code(),
            text: close.reply_text().clone(),
            class_id: close.class_id(),
            method_id: close.method_id(),
        });
        Box::pin(async { Ok(()) })
    }

    fn cancel<'life0, 'life1, 'async_trait>(
        &'life0 mut self,
        _channel: &'life1 Channel,
        cancel: Cancel,
    ) -> BoxFuture<'async_trait, Result<(), amqprs::error::Error>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let _ = self.0.send(ChannelEvent::Cancelled {
            consumer_tag: cancel.consumer_tag().clone(),
        });
        Box::pin(async { Ok(()) })
    }

    fn flow<'life0, 'life1, 'async_trait>(
        &'life0 mut self,
        _channel: &'life1 Channel,
        active: bool,
    ) -> BoxFuture<'async_trait, Result<bool, amqprs::error::Error>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move { Ok(active) })
    }

    fn publish_ack<'life0, 'life1, 'async_trait>(
        &'life0 mut self,
        _channel: &'life1 Channel,
        ack: Ack,
    ) -> BoxFuture<'async_trait, ()>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let _ = self.0.send(ChannelEvent::Ack {
            delivery_tag: ack.delivery_tag(),
            multiple: ack.mutiple(),
        });
        Box::pin(async {})
    }

    fn publish_nack<'life0, 'life1, 'async_trait>(
        &'life0 mut self,
        _channel: &'life1 Channel,
        nack: Nack,
    ) -> BoxFuture<'async_trait, ()>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let _ = self.0.send(ChannelEvent::Nack {
            delivery_tag: nack.delivery_tag(),
            multiple: nack.multiple(),
        });
        Box::pin(async {})
    }

    fn publish_return<'life0, 'life1, 'async_trait>(
        &'life0 mut self,
        _channel: &'life1 Channel,
        ret: Return,
        basic_properties: BasicProperties,
        content: Vec<u8>,
    ) -> BoxFuture<'async_trait, ()>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let _ = self.0.send(ChannelEvent::Returned {
            code: ret.reply_code(),
            text: ret.reply_text().clone(),
            exchange: ret.exchange().clone(),
            routing_key: ret.routing_key().clone(),
            properties: Box::new(basic_properties),
            body: content,
        });
        Box::pin(async {})
    }
}

/// connection.close from the server: code and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionClosed {
    pub code: u16,
    pub text: String,
}

struct ConnectionEvents(UnboundedSender<ConnectionClosed>);

impl ConnectionCallback for ConnectionEvents {
    fn close<'life0, 'life1, 'async_trait>(
        &'life0 mut self,
        _connection: &'life1 Connection,
        close: Close,
    ) -> BoxFuture<'async_trait, Result<(), amqprs::error::Error>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        let _ = self.0.send(ConnectionClosed {
            code: close.reply_code(),
            text: close.reply_text().clone(),
        });
        Box::pin(async { Ok(()) })
    }

    fn blocked<'life0, 'life1, 'async_trait>(
        &'life0 mut self,
        _connection: &'life1 Connection,
        _reason: String,
    ) -> BoxFuture<'async_trait, ()>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async {})
    }

    fn unblocked<'life0, 'life1, 'async_trait>(
        &'life0 mut self,
        _connection: &'life1 Connection,
    ) -> BoxFuture<'async_trait, ()>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async {})
    }

    fn secret_updated<'life0, 'life1, 'async_trait>(
        &'life0 mut self,
        _connection: &'life1 Connection,
    ) -> BoxFuture<'async_trait, ()>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async {})
    }
}

/// A connection with its server-sent connection.close events.
pub struct Conn {
    pub connection: Connection,
    pub closes: UnboundedReceiver<ConnectionClosed>,
}

/// A channel with its server-sent events.
pub struct Chan {
    pub channel: Channel,
    pub events: UnboundedReceiver<ChannelEvent>,
}

/// Connects as guest to `addr` and registers a connection callback.
pub async fn connect_addr(addr: std::net::SocketAddr) -> Conn {
    let args = OpenConnectionArguments::new(&addr.ip().to_string(), addr.port(), "guest", "guest");
    let connection = Connection::open(&args).await.expect("connects");
    let (tx, closes) = unbounded_channel();
    connection
        .register_callback(ConnectionEvents(tx))
        .await
        .expect("registers connection callback");
    Conn { connection, closes }
}

/// Connects as guest to the test broker.
pub async fn connect(broker: &TestBroker) -> Conn {
    connect_addr(broker.addr()).await
}

impl Conn {
    /// Opens a channel and registers the event-forwarding callback.
    pub async fn channel(&self) -> Chan {
        let channel = self
            .connection
            .open_channel(None)
            .await
            .expect("channel opens");
        let (tx, events) = unbounded_channel();
        channel
            .register_callback(ChannelEvents(tx))
            .await
            .expect("registers channel callback");
        Chan { channel, events }
    }

    /// Waits for connection.close from the server.
    pub async fn expect_close(&mut self) -> ConnectionClosed {
        tokio::time::timeout(LIMIT, self.closes.recv())
            .await
            .expect("connection.close arrives in time")
            .expect("connection callback alive")
    }
}

impl Chan {
    /// The next server-sent event.
    pub async fn next_event(&mut self) -> ChannelEvent {
        tokio::time::timeout(LIMIT, self.events.recv())
            .await
            .expect("a channel event arrives in time")
            .expect("channel callback alive")
    }

    /// Waits for channel.close and returns its reply code and text.
    pub async fn expect_close(&mut self) -> (u16, String) {
        match self.next_event().await {
            ChannelEvent::Closed { code, text, .. } => (code, text),
            other => panic!("expected channel.close, got {other:?}"),
        }
    }

    /// Declares a non-durable, non-exclusive, non-auto-delete queue.
    pub async fn declare(&self, name: &str) -> String {
        let (name, _, _) = self
            .channel
            .queue_declare(QueueDeclareArguments::new(name))
            .await
            .expect("queue.declare")
            .expect("declare-ok");
        name
    }

    /// A passive declare: (message_count, consumer_count). Also a synchronous round trip
    /// that proves every earlier method on this channel was handled.
    pub async fn counts(&self, name: &str) -> (u32, u32) {
        let (_, messages, consumers) = self
            .channel
            .queue_declare(QueueDeclareArguments::new(name).passive(true).finish())
            .await
            .expect("passive queue.declare")
            .expect("declare-ok");
        (messages, consumers)
    }

    /// Publishes `body` to the default exchange with routing key `queue`.
    pub async fn publish(&self, queue: &str, body: &[u8]) {
        self.channel
            .basic_publish(
                BasicProperties::default(),
                body.to_vec(),
                amqprs::channel::BasicPublishArguments::new("", queue),
            )
            .await
            .expect("basic.publish");
    }

    /// basic.get with no-ack; the body, or None on get-empty.
    pub async fn get_body(&self, queue: &str) -> Option<Vec<u8>> {
        self.channel
            .basic_get(BasicGetArguments::new(queue).no_ack(true).finish())
            .await
            .expect("basic.get")
            .map(|(_, _, body)| body)
    }

    /// Purges the queue, returning the purged count.
    pub async fn purge(&self, queue: &str) -> u32 {
        self.channel
            .queue_purge(QueuePurgeArguments::new(queue))
            .await
            .expect("queue.purge")
            .expect("purge-ok")
    }
}

/// The receiving end of a `basic_consume_rx` consumer.
pub type Receiver = UnboundedReceiver<ConsumerMessage>;

/// A delivery as the tests look at it.
#[derive(Debug)]
pub struct Delivered {
    pub consumer_tag: String,
    pub delivery_tag: u64,
    pub redelivered: bool,
    pub properties: BasicProperties,
    pub body: Vec<u8>,
}

/// The next delivery on a consumer receiver, failing the test after [`LIMIT`].
pub async fn next_delivery(rx: &mut UnboundedReceiver<ConsumerMessage>) -> Delivered {
    let message = tokio::time::timeout(LIMIT, rx.recv())
        .await
        .expect("a delivery arrives in time")
        .expect("consumer still registered");
    let deliver = message.deliver.expect("deliver");
    Delivered {
        consumer_tag: deliver.consumer_tag().clone(),
        delivery_tag: deliver.delivery_tag(),
        redelivered: deliver.redelivered(),
        properties: message.basic_properties.expect("properties"),
        body: message.content.expect("content"),
    }
}

/// Every delivery already buffered on a receiver (after a synchronous round trip on the
/// consumer's channel, all deliveries sent before the reply are buffered).
pub fn drain_buffered(rx: &mut UnboundedReceiver<ConsumerMessage>) -> Vec<Delivered> {
    let mut out = Vec::new();
    while let Ok(message) = rx.try_recv() {
        let deliver = message.deliver.expect("deliver");
        out.push(Delivered {
            consumer_tag: deliver.consumer_tag().clone(),
            delivery_tag: deliver.delivery_tag(),
            redelivered: deliver.redelivered(),
            properties: message.basic_properties.expect("properties"),
            body: message.content.expect("content"),
        });
    }
    out
}

/// The broker's counters for a queue in vhost `/`.
pub fn stats(broker: &TestBroker, queue: &str) -> QueueStats {
    broker
        .broker()
        .vhost("/")
        .expect("vhost /")
        .queue(queue)
        .unwrap_or_else(|| panic!("queue '{queue}' exists"))
        .stats()
}

/// Whether the queue exists in vhost `/`.
pub fn queue_exists(broker: &TestBroker, queue: &str) -> bool {
    broker
        .broker()
        .vhost("/")
        .expect("vhost /")
        .queue(queue)
        .is_some()
}
