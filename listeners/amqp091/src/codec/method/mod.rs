//! AMQP 0-9-1 methods: one [`Method`] variant per method of the connection, channel,
//! exchange, queue, basic, confirm and tx classes, with RabbitMQ's extensions (exchange
//! bind/unbind, basic.nack, confirm, connection.blocked/unblocked/update-secret).
//!
//! Field names are the spec's in snake_case. Reserved and deprecated fields (ticket,
//! reserved-1, out-of-band, known-hosts, insist, capabilities, cluster-id) are read and
//! ignored on decode and written as zero or empty on encode; they are not exposed.
//!
//! `decode.rs` reads a method frame payload, `encode.rs` writes one; this file holds the type
//! and what can be said about a method without its fields (ids, name, content, replies).

mod decode;
mod encode;
#[cfg(test)]
pub(crate) mod tests;

use std::fmt;

use warren_core::value::Table;

pub use decode::{BasicPublishRef, MethodDecodeError};

/// The connection class.
pub const CLASS_CONNECTION: u16 = 10;
/// The channel class.
pub const CLASS_CHANNEL: u16 = 20;
/// The exchange class.
pub const CLASS_EXCHANGE: u16 = 40;
/// The queue class.
pub const CLASS_QUEUE: u16 = 50;
/// The basic class: publishing, consuming and the content header's properties.
pub const CLASS_BASIC: u16 = 60;
/// The confirm class (RabbitMQ extension: publisher confirms).
pub const CLASS_CONFIRM: u16 = 85;
/// The tx class.
pub const CLASS_TX: u16 = 90;

/// One AMQP 0-9-1 method with its fields.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // Variants and fields are named after the spec; see it for semantics.
pub enum Method {
    // connection (10)
    ConnectionStart {
        version_major: u8,
        version_minor: u8,
        server_properties: Table,
        mechanisms: Vec<u8>,
        locales: Vec<u8>,
    },
    ConnectionStartOk {
        client_properties: Table,
        mechanism: String,
        response: Vec<u8>,
        locale: String,
    },
    ConnectionSecure {
        challenge: Vec<u8>,
    },
    ConnectionSecureOk {
        response: Vec<u8>,
    },
    ConnectionTune {
        channel_max: u16,
        frame_max: u32,
        heartbeat: u16,
    },
    ConnectionTuneOk {
        channel_max: u16,
        frame_max: u32,
        heartbeat: u16,
    },
    ConnectionOpen {
        virtual_host: String,
    },
    ConnectionOpenOk,
    ConnectionClose {
        reply_code: u16,
        reply_text: String,
        class_id: u16,
        method_id: u16,
    },
    ConnectionCloseOk,
    ConnectionBlocked {
        reason: String,
    },
    ConnectionUnblocked,
    ConnectionUpdateSecret {
        new_secret: Vec<u8>,
        reason: String,
    },
    ConnectionUpdateSecretOk,

    // channel (20)
    ChannelOpen,
    ChannelOpenOk,
    ChannelFlow {
        active: bool,
    },
    ChannelFlowOk {
        active: bool,
    },
    ChannelClose {
        reply_code: u16,
        reply_text: String,
        class_id: u16,
        method_id: u16,
    },
    ChannelCloseOk,

    // exchange (40)
    ExchangeDeclare {
        exchange: String,
        /// The spec's `type` field.
        exchange_type: String,
        passive: bool,
        durable: bool,
        auto_delete: bool,
        internal: bool,
        no_wait: bool,
        arguments: Table,
    },
    ExchangeDeclareOk,
    ExchangeDelete {
        exchange: String,
        if_unused: bool,
        no_wait: bool,
    },
    ExchangeDeleteOk,
    ExchangeBind {
        destination: String,
        source: String,
        routing_key: String,
        no_wait: bool,
        arguments: Table,
    },
    ExchangeBindOk,
    ExchangeUnbind {
        destination: String,
        source: String,
        routing_key: String,
        no_wait: bool,
        arguments: Table,
    },
    ExchangeUnbindOk,

    // queue (50)
    QueueDeclare {
        queue: String,
        passive: bool,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        no_wait: bool,
        arguments: Table,
    },
    QueueDeclareOk {
        queue: String,
        message_count: u32,
        consumer_count: u32,
    },
    QueueBind {
        queue: String,
        exchange: String,
        routing_key: String,
        no_wait: bool,
        arguments: Table,
    },
    QueueBindOk,
    QueuePurge {
        queue: String,
        no_wait: bool,
    },
    QueuePurgeOk {
        message_count: u32,
    },
    QueueDelete {
        queue: String,
        if_unused: bool,
        if_empty: bool,
        no_wait: bool,
    },
    QueueDeleteOk {
        message_count: u32,
    },
    QueueUnbind {
        queue: String,
        exchange: String,
        routing_key: String,
        arguments: Table,
    },
    QueueUnbindOk,

    // basic (60)
    BasicQos {
        prefetch_size: u32,
        prefetch_count: u16,
        global: bool,
    },
    BasicQosOk,
    BasicConsume {
        queue: String,
        consumer_tag: String,
        no_local: bool,
        no_ack: bool,
        exclusive: bool,
        no_wait: bool,
        arguments: Table,
    },
    BasicConsumeOk {
        consumer_tag: String,
    },
    BasicCancel {
        consumer_tag: String,
        no_wait: bool,
    },
    BasicCancelOk {
        consumer_tag: String,
    },
    BasicPublish {
        exchange: String,
        routing_key: String,
        mandatory: bool,
        immediate: bool,
    },
    BasicReturn {
        reply_code: u16,
        reply_text: String,
        exchange: String,
        routing_key: String,
    },
    BasicDeliver {
        consumer_tag: String,
        delivery_tag: u64,
        redelivered: bool,
        exchange: String,
        routing_key: String,
    },
    BasicGet {
        queue: String,
        no_ack: bool,
    },
    BasicGetOk {
        delivery_tag: u64,
        redelivered: bool,
        exchange: String,
        routing_key: String,
        message_count: u32,
    },
    BasicGetEmpty,
    BasicAck {
        delivery_tag: u64,
        multiple: bool,
    },
    BasicReject {
        delivery_tag: u64,
        requeue: bool,
    },
    BasicRecoverAsync {
        requeue: bool,
    },
    BasicRecover {
        requeue: bool,
    },
    BasicRecoverOk,
    BasicNack {
        delivery_tag: u64,
        multiple: bool,
        requeue: bool,
    },

    // confirm (85)
    ConfirmSelect {
        /// The spec's `nowait`.
        no_wait: bool,
    },
    ConfirmSelectOk,

    // tx (90)
    TxSelect,
    TxSelectOk,
    TxCommit,
    TxCommitOk,
    TxRollback,
    TxRollbackOk,
}

impl Method {
    /// The class id and method id, e.g. `(50, 10)` for queue.declare.
    pub fn ids(&self) -> (u16, u16) {
        use Method::*;
        match self {
            ConnectionStart { .. } => (10, 10),
            ConnectionStartOk { .. } => (10, 11),
            ConnectionSecure { .. } => (10, 20),
            ConnectionSecureOk { .. } => (10, 21),
            ConnectionTune { .. } => (10, 30),
            ConnectionTuneOk { .. } => (10, 31),
            ConnectionOpen { .. } => (10, 40),
            ConnectionOpenOk => (10, 41),
            ConnectionClose { .. } => (10, 50),
            ConnectionCloseOk => (10, 51),
            ConnectionBlocked { .. } => (10, 60),
            ConnectionUnblocked => (10, 61),
            ConnectionUpdateSecret { .. } => (10, 70),
            ConnectionUpdateSecretOk => (10, 71),
            ChannelOpen => (20, 10),
            ChannelOpenOk => (20, 11),
            ChannelFlow { .. } => (20, 20),
            ChannelFlowOk { .. } => (20, 21),
            ChannelClose { .. } => (20, 40),
            ChannelCloseOk => (20, 41),
            ExchangeDeclare { .. } => (40, 10),
            ExchangeDeclareOk => (40, 11),
            ExchangeDelete { .. } => (40, 20),
            ExchangeDeleteOk => (40, 21),
            ExchangeBind { .. } => (40, 30),
            ExchangeBindOk => (40, 31),
            ExchangeUnbind { .. } => (40, 40),
            ExchangeUnbindOk => (40, 51),
            QueueDeclare { .. } => (50, 10),
            QueueDeclareOk { .. } => (50, 11),
            QueueBind { .. } => (50, 20),
            QueueBindOk => (50, 21),
            QueuePurge { .. } => (50, 30),
            QueuePurgeOk { .. } => (50, 31),
            QueueDelete { .. } => (50, 40),
            QueueDeleteOk { .. } => (50, 41),
            QueueUnbind { .. } => (50, 50),
            QueueUnbindOk => (50, 51),
            BasicQos { .. } => (60, 10),
            BasicQosOk => (60, 11),
            BasicConsume { .. } => (60, 20),
            BasicConsumeOk { .. } => (60, 21),
            BasicCancel { .. } => (60, 30),
            BasicCancelOk { .. } => (60, 31),
            BasicPublish { .. } => (60, 40),
            BasicReturn { .. } => (60, 50),
            BasicDeliver { .. } => (60, 60),
            BasicGet { .. } => (60, 70),
            BasicGetOk { .. } => (60, 71),
            BasicGetEmpty => (60, 72),
            BasicAck { .. } => (60, 80),
            BasicReject { .. } => (60, 90),
            BasicRecoverAsync { .. } => (60, 100),
            BasicRecover { .. } => (60, 110),
            BasicRecoverOk => (60, 111),
            BasicNack { .. } => (60, 120),
            ConfirmSelect { .. } => (85, 10),
            ConfirmSelectOk => (85, 11),
            TxSelect => (90, 10),
            TxSelectOk => (90, 11),
            TxCommit => (90, 20),
            TxCommitOk => (90, 21),
            TxRollback => (90, 30),
            TxRollbackOk => (90, 31),
        }
    }

    /// The class id, e.g. 50 for the queue class.
    pub fn class_id(&self) -> u16 {
        self.ids().0
    }

    /// The method id within its class, e.g. 10 for queue.declare.
    pub fn method_id(&self) -> u16 {
        self.ids().1
    }

    /// The method's name as RabbitMQ prints it in errors and logs, e.g. "queue.declare".
    pub fn name(&self) -> &'static str {
        let (class_id, method_id) = self.ids();
        // Every variant's ids are in the table: ids() and method_name() list the same methods.
        method_name(class_id, method_id).unwrap_or("unknown")
    }

    /// Whether content (a header frame and body frames) follows this method.
    pub fn has_content(&self) -> bool {
        matches!(
            self,
            Method::BasicPublish { .. }
                | Method::BasicReturn { .. }
                | Method::BasicDeliver { .. }
                | Method::BasicGetOk { .. }
        )
    }

    /// Whether this method asks the peer for a reply that the sender waits for: the
    /// spec's synchronous requests (connection.open, queue.declare, basic.get, tx.commit, ...),
    /// minus those whose `no_wait` is set. A channel receiving a second synchronous request
    /// before answering the first may queue it; a reply method (`*-ok`) is never a request.
    pub fn is_synchronous_request(&self) -> bool {
        use Method::*;
        match self {
            ConnectionStart { .. }
            | ConnectionSecure { .. }
            | ConnectionTune { .. }
            | ConnectionOpen { .. }
            | ConnectionClose { .. }
            | ConnectionUpdateSecret { .. }
            | ChannelOpen
            | ChannelFlow { .. }
            | ChannelClose { .. }
            | QueueUnbind { .. }
            | BasicQos { .. }
            | BasicGet { .. }
            | BasicRecover { .. }
            | TxSelect
            | TxCommit
            | TxRollback => true,
            ExchangeDeclare { no_wait, .. }
            | ExchangeDelete { no_wait, .. }
            | ExchangeBind { no_wait, .. }
            | ExchangeUnbind { no_wait, .. }
            | QueueDeclare { no_wait, .. }
            | QueueBind { no_wait, .. }
            | QueuePurge { no_wait, .. }
            | QueueDelete { no_wait, .. }
            | BasicConsume { no_wait, .. }
            | BasicCancel { no_wait, .. }
            | ConfirmSelect { no_wait } => !no_wait,
            _ => false,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The name of a method, as RabbitMQ prints it ("queue.declare"), or `None` for ids that
/// name no method. Useful to report an error about a method that could not be decoded.
pub fn method_name(class_id: u16, method_id: u16) -> Option<&'static str> {
    Some(match (class_id, method_id) {
        (10, 10) => "connection.start",
        (10, 11) => "connection.start_ok",
        (10, 20) => "connection.secure",
        (10, 21) => "connection.secure_ok",
        (10, 30) => "connection.tune",
        (10, 31) => "connection.tune_ok",
        (10, 40) => "connection.open",
        (10, 41) => "connection.open_ok",
        (10, 50) => "connection.close",
        (10, 51) => "connection.close_ok",
        (10, 60) => "connection.blocked",
        (10, 61) => "connection.unblocked",
        (10, 70) => "connection.update_secret",
        (10, 71) => "connection.update_secret_ok",
        (20, 10) => "channel.open",
        (20, 11) => "channel.open_ok",
        (20, 20) => "channel.flow",
        (20, 21) => "channel.flow_ok",
        (20, 40) => "channel.close",
        (20, 41) => "channel.close_ok",
        (40, 10) => "exchange.declare",
        (40, 11) => "exchange.declare_ok",
        (40, 20) => "exchange.delete",
        (40, 21) => "exchange.delete_ok",
        (40, 30) => "exchange.bind",
        (40, 31) => "exchange.bind_ok",
        (40, 40) => "exchange.unbind",
        (40, 51) => "exchange.unbind_ok",
        (50, 10) => "queue.declare",
        (50, 11) => "queue.declare_ok",
        (50, 20) => "queue.bind",
        (50, 21) => "queue.bind_ok",
        (50, 30) => "queue.purge",
        (50, 31) => "queue.purge_ok",
        (50, 40) => "queue.delete",
        (50, 41) => "queue.delete_ok",
        (50, 50) => "queue.unbind",
        (50, 51) => "queue.unbind_ok",
        (60, 10) => "basic.qos",
        (60, 11) => "basic.qos_ok",
        (60, 20) => "basic.consume",
        (60, 21) => "basic.consume_ok",
        (60, 30) => "basic.cancel",
        (60, 31) => "basic.cancel_ok",
        (60, 40) => "basic.publish",
        (60, 50) => "basic.return",
        (60, 60) => "basic.deliver",
        (60, 70) => "basic.get",
        (60, 71) => "basic.get_ok",
        (60, 72) => "basic.get_empty",
        (60, 80) => "basic.ack",
        (60, 90) => "basic.reject",
        (60, 100) => "basic.recover_async",
        (60, 110) => "basic.recover",
        (60, 111) => "basic.recover_ok",
        (60, 120) => "basic.nack",
        (85, 10) => "confirm.select",
        (85, 11) => "confirm.select_ok",
        (90, 10) => "tx.select",
        (90, 11) => "tx.select_ok",
        (90, 20) => "tx.commit",
        (90, 21) => "tx.commit_ok",
        (90, 30) => "tx.rollback",
        (90, 31) => "tx.rollback_ok",
        _ => return None,
    })
}
