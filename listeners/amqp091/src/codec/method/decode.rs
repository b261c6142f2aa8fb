//! Reading a method frame payload: class id, method id, then the method's fields in spec
//! order, with nothing left over.

use std::fmt;

use super::{method_name, Method};
use crate::codec::primitives::{Reader, SyntaxError};

/// Why a method frame payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MethodDecodeError {
    /// The class/method ids name no method we know. RabbitMQ closes the connection; a broker
    /// may answer 540 NOT_IMPLEMENTED (or 503 COMMAND_INVALID for a class it has not got).
    UnknownMethod { class_id: u16, method_id: u16 },
    /// The fields do not follow the method's grammar: truncated, trailing octets, invalid
    /// UTF-8, a malformed table. Answered with 502 SYNTAX_ERROR. (RabbitMQ itself reports
    /// undecodable method fields as 501 FRAME_ERROR "cannot decode ..."; which code to send is
    /// the session's choice.) `message` starts with the method's name, e.g.
    /// "queue.declare: truncated field table".
    Syntax {
        class_id: u16,
        method_id: u16,
        message: String,
    },
}

impl fmt::Display for MethodDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MethodDecodeError::UnknownMethod {
                class_id,
                method_id,
            } => {
                write!(f, "unknown method: class {class_id}, method {method_id}")
            }
            MethodDecodeError::Syntax { message, .. } => f.write_str(message),
        }
    }
}

impl std::error::Error for MethodDecodeError {}

/// basic.publish with its names borrowed from the frame: the allocation-free view of the
/// most frequent method a broker receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BasicPublishRef<'a> {
    /// The exchange to publish to; empty for the default exchange.
    pub exchange: &'a str,
    /// The routing key.
    pub routing_key: &'a str,
    /// Return the message if no queue is bound to receive it.
    pub mandatory: bool,
    /// Deprecated; RabbitMQ refuses it with 540 NOT_IMPLEMENTED.
    pub immediate: bool,
}

impl<'a> BasicPublishRef<'a> {
    /// Reads `payload` as basic.publish without allocating. `None` when it is another method
    /// or malformed: the caller then uses [`Method::decode`], which also names the error.
    #[inline]
    pub fn peek(payload: &'a [u8]) -> Option<BasicPublishRef<'a>> {
        let rest = payload.strip_prefix(&[0, 60, 0, 40])?;
        let mut reader = Reader::new(rest);
        reader.short().ok()?; // reserved-1: ticket
        let exchange = reader.shortstr().ok()?;
        let routing_key = reader.shortstr().ok()?;
        let mandatory = reader.bit().ok()?;
        let immediate = reader.bit().ok()?;
        reader.is_empty().then_some(BasicPublishRef {
            exchange,
            routing_key,
            mandatory,
            immediate,
        })
    }
}

impl Method {
    /// Decodes a method frame's payload.
    pub fn decode(payload: &[u8]) -> Result<Method, MethodDecodeError> {
        let mut reader = Reader::new(payload);
        let (Ok(class_id), Ok(method_id)) = (reader.short(), reader.short()) else {
            return Err(MethodDecodeError::Syntax {
                class_id: 0,
                method_id: 0,
                message: format!(
                    "method frame of {} octets is shorter than its 4-octet ids",
                    payload.len()
                ),
            });
        };
        let Some(name) = method_name(class_id, method_id) else {
            return Err(MethodDecodeError::UnknownMethod {
                class_id,
                method_id,
            });
        };
        let syntax = |error: SyntaxError| MethodDecodeError::Syntax {
            class_id,
            method_id,
            message: format!("{name}: {error}"),
        };
        let method = decode_fields(class_id, method_id, &mut reader).map_err(syntax)?;
        if !reader.is_empty() {
            return Err(MethodDecodeError::Syntax {
                class_id,
                method_id,
                message: format!(
                    "{name}: {} unexpected octets after the last field",
                    reader.remaining().len()
                ),
            });
        }
        Ok(method)
    }
}

/// Reads the fields of a method whose ids `method_name` knows. Reserved fields are read
/// (so their octets are accounted for) and dropped.
fn decode_fields(class_id: u16, method_id: u16, r: &mut Reader<'_>) -> Result<Method, SyntaxError> {
    use Method::*;
    Ok(match (class_id, method_id) {
        (10, 10) => ConnectionStart {
            version_major: r.octet()?,
            version_minor: r.octet()?,
            server_properties: r.table()?,
            mechanisms: r.longstr_owned()?,
            locales: r.longstr_owned()?,
        },
        (10, 11) => ConnectionStartOk {
            client_properties: r.table()?,
            mechanism: r.shortstr_owned()?,
            response: r.longstr_owned()?,
            locale: r.shortstr_owned()?,
        },
        (10, 20) => ConnectionSecure {
            challenge: r.longstr_owned()?,
        },
        (10, 21) => ConnectionSecureOk {
            response: r.longstr_owned()?,
        },
        (10, 30) => ConnectionTune {
            channel_max: r.short()?,
            frame_max: r.long()?,
            heartbeat: r.short()?,
        },
        (10, 31) => ConnectionTuneOk {
            channel_max: r.short()?,
            frame_max: r.long()?,
            heartbeat: r.short()?,
        },
        (10, 40) => {
            let virtual_host = r.shortstr_owned()?;
            r.shortstr()?; // reserved-1: capabilities
            r.bit()?; // reserved-2: insist
            ConnectionOpen { virtual_host }
        }
        (10, 41) => {
            r.shortstr()?; // reserved-1: known-hosts
            ConnectionOpenOk
        }
        (10, 50) => ConnectionClose {
            reply_code: r.short()?,
            reply_text: r.shortstr_owned()?,
            class_id: r.short()?,
            method_id: r.short()?,
        },
        (10, 51) => ConnectionCloseOk,
        (10, 60) => ConnectionBlocked {
            reason: r.shortstr_owned()?,
        },
        (10, 61) => ConnectionUnblocked,
        (10, 70) => ConnectionUpdateSecret {
            new_secret: r.longstr_owned()?,
            reason: r.shortstr_owned()?,
        },
        (10, 71) => ConnectionUpdateSecretOk,

        (20, 10) => {
            r.shortstr()?; // reserved-1: out-of-band
            ChannelOpen
        }
        (20, 11) => {
            r.longstr()?; // reserved-1: channel-id
            ChannelOpenOk
        }
        (20, 20) => ChannelFlow { active: r.bit()? },
        (20, 21) => ChannelFlowOk { active: r.bit()? },
        (20, 40) => ChannelClose {
            reply_code: r.short()?,
            reply_text: r.shortstr_owned()?,
            class_id: r.short()?,
            method_id: r.short()?,
        },
        (20, 41) => ChannelCloseOk,

        (40, 10) => {
            r.short()?; // reserved-1: ticket
            ExchangeDeclare {
                exchange: r.shortstr_owned()?,
                exchange_type: r.shortstr_owned()?,
                passive: r.bit()?,
                durable: r.bit()?,
                auto_delete: r.bit()?,
                internal: r.bit()?,
                no_wait: r.bit()?,
                arguments: r.table()?,
            }
        }
        (40, 11) => ExchangeDeclareOk,
        (40, 20) => {
            r.short()?; // reserved-1: ticket
            ExchangeDelete {
                exchange: r.shortstr_owned()?,
                if_unused: r.bit()?,
                no_wait: r.bit()?,
            }
        }
        (40, 21) => ExchangeDeleteOk,
        (40, 30) => {
            r.short()?; // reserved-1: ticket
            ExchangeBind {
                destination: r.shortstr_owned()?,
                source: r.shortstr_owned()?,
                routing_key: r.shortstr_owned()?,
                no_wait: r.bit()?,
                arguments: r.table()?,
            }
        }
        (40, 31) => ExchangeBindOk,
        (40, 40) => {
            r.short()?; // reserved-1: ticket
            ExchangeUnbind {
                destination: r.shortstr_owned()?,
                source: r.shortstr_owned()?,
                routing_key: r.shortstr_owned()?,
                no_wait: r.bit()?,
                arguments: r.table()?,
            }
        }
        (40, 51) => ExchangeUnbindOk,

        (50, 10) => {
            r.short()?; // reserved-1: ticket
            QueueDeclare {
                queue: r.shortstr_owned()?,
                passive: r.bit()?,
                durable: r.bit()?,
                exclusive: r.bit()?,
                auto_delete: r.bit()?,
                no_wait: r.bit()?,
                arguments: r.table()?,
            }
        }
        (50, 11) => QueueDeclareOk {
            queue: r.shortstr_owned()?,
            message_count: r.long()?,
            consumer_count: r.long()?,
        },
        (50, 20) => {
            r.short()?; // reserved-1: ticket
            QueueBind {
                queue: r.shortstr_owned()?,
                exchange: r.shortstr_owned()?,
                routing_key: r.shortstr_owned()?,
                no_wait: r.bit()?,
                arguments: r.table()?,
            }
        }
        (50, 21) => QueueBindOk,
        (50, 30) => {
            r.short()?; // reserved-1: ticket
            QueuePurge {
                queue: r.shortstr_owned()?,
                no_wait: r.bit()?,
            }
        }
        (50, 31) => QueuePurgeOk {
            message_count: r.long()?,
        },
        (50, 40) => {
            r.short()?; // reserved-1: ticket
            QueueDelete {
                queue: r.shortstr_owned()?,
                if_unused: r.bit()?,
                if_empty: r.bit()?,
                no_wait: r.bit()?,
            }
        }
        (50, 41) => QueueDeleteOk {
            message_count: r.long()?,
        },
        (50, 50) => {
            r.short()?; // reserved-1: ticket
            QueueUnbind {
                queue: r.shortstr_owned()?,
                exchange: r.shortstr_owned()?,
                routing_key: r.shortstr_owned()?,
                arguments: r.table()?,
            }
        }
        (50, 51) => QueueUnbindOk,

        (60, 10) => BasicQos {
            prefetch_size: r.long()?,
            prefetch_count: r.short()?,
            global: r.bit()?,
        },
        (60, 11) => BasicQosOk,
        (60, 20) => {
            r.short()?; // reserved-1: ticket
            BasicConsume {
                queue: r.shortstr_owned()?,
                consumer_tag: r.shortstr_owned()?,
                no_local: r.bit()?,
                no_ack: r.bit()?,
                exclusive: r.bit()?,
                no_wait: r.bit()?,
                arguments: r.table()?,
            }
        }
        (60, 21) => BasicConsumeOk {
            consumer_tag: r.shortstr_owned()?,
        },
        (60, 30) => BasicCancel {
            consumer_tag: r.shortstr_owned()?,
            no_wait: r.bit()?,
        },
        (60, 31) => BasicCancelOk {
            consumer_tag: r.shortstr_owned()?,
        },
        (60, 40) => {
            r.short()?; // reserved-1: ticket
            BasicPublish {
                exchange: r.shortstr_owned()?,
                routing_key: r.shortstr_owned()?,
                mandatory: r.bit()?,
                immediate: r.bit()?,
            }
        }
        (60, 50) => BasicReturn {
            reply_code: r.short()?,
            reply_text: r.shortstr_owned()?,
            exchange: r.shortstr_owned()?,
            routing_key: r.shortstr_owned()?,
        },
        (60, 60) => BasicDeliver {
            consumer_tag: r.shortstr_owned()?,
            delivery_tag: r.longlong()?,
            redelivered: r.bit()?,
            exchange: r.shortstr_owned()?,
            routing_key: r.shortstr_owned()?,
        },
        (60, 70) => {
            r.short()?; // reserved-1: ticket
            BasicGet {
                queue: r.shortstr_owned()?,
                no_ack: r.bit()?,
            }
        }
        (60, 71) => BasicGetOk {
            delivery_tag: r.longlong()?,
            redelivered: r.bit()?,
            exchange: r.shortstr_owned()?,
            routing_key: r.shortstr_owned()?,
            message_count: r.long()?,
        },
        (60, 72) => {
            r.shortstr()?; // reserved-1: cluster-id
            BasicGetEmpty
        }
        (60, 80) => BasicAck {
            delivery_tag: r.longlong()?,
            multiple: r.bit()?,
        },
        (60, 90) => BasicReject {
            delivery_tag: r.longlong()?,
            requeue: r.bit()?,
        },
        (60, 100) => BasicRecoverAsync { requeue: r.bit()? },
        (60, 110) => BasicRecover { requeue: r.bit()? },
        (60, 111) => BasicRecoverOk,
        (60, 120) => BasicNack {
            delivery_tag: r.longlong()?,
            multiple: r.bit()?,
            requeue: r.bit()?,
        },

        (85, 10) => ConfirmSelect { no_wait: r.bit()? },
        (85, 11) => ConfirmSelectOk,

        (90, 10) => TxSelect,
        (90, 11) => TxSelectOk,
        (90, 20) => TxCommit,
        (90, 21) => TxCommitOk,
        (90, 30) => TxRollback,
        (90, 31) => TxRollbackOk,

        // method_name() and this match list the same ids; reaching here means they diverged.
        _ => return Err(SyntaxError::new("method known by name but not decodable")),
    })
}
