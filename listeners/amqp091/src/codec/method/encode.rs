//! Writing a method: class id, method id, then its fields in spec order, reserved fields as
//! zero or empty.

use bytes::BytesMut;

use super::Method;
use crate::codec::primitives::{EncodeError, Writer};

impl Method {
    /// Appends the method's class id, method id and fields to `out` (a method frame's
    /// payload). A short string over 255 bytes or an oversized table is an error, and then
    /// `out` is left as it was. Broker-generated texts that may be long (reply texts) should
    /// go through `truncate_shortstr` first.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let start = out.len();
        let result = self.encode_fields(&mut Writer::new(out));
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn encode_fields(&self, w: &mut Writer<'_>) -> Result<(), EncodeError> {
        use Method::*;
        let (class_id, method_id) = self.ids();
        w.short(class_id);
        w.short(method_id);
        match self {
            ConnectionStart {
                version_major,
                version_minor,
                server_properties,
                mechanisms,
                locales,
            } => {
                w.octet(*version_major);
                w.octet(*version_minor);
                w.table(server_properties)?;
                w.longstr(mechanisms)?;
                w.longstr(locales)?;
            }
            ConnectionStartOk {
                client_properties,
                mechanism,
                response,
                locale,
            } => {
                w.table(client_properties)?;
                w.shortstr(mechanism)?;
                w.longstr(response)?;
                w.shortstr(locale)?;
            }
            ConnectionSecure { challenge } => w.longstr(challenge)?,
            ConnectionSecureOk { response } => w.longstr(response)?,
            ConnectionTune {
                channel_max,
                frame_max,
                heartbeat,
            }
            | ConnectionTuneOk {
                channel_max,
                frame_max,
                heartbeat,
            } => {
                w.short(*channel_max);
                w.long(*frame_max);
                w.short(*heartbeat);
            }
            ConnectionOpen { virtual_host } => {
                w.shortstr(virtual_host)?;
                w.shortstr("")?; // reserved-1: capabilities
                w.bit(false); // reserved-2: insist
            }
            ConnectionOpenOk => w.shortstr("")?, // reserved-1: known-hosts
            ConnectionClose {
                reply_code,
                reply_text,
                class_id,
                method_id,
            }
            | ChannelClose {
                reply_code,
                reply_text,
                class_id,
                method_id,
            } => {
                w.short(*reply_code);
                w.shortstr(reply_text)?;
                w.short(*class_id);
                w.short(*method_id);
            }
            ConnectionBlocked { reason } => w.shortstr(reason)?,
            ConnectionUpdateSecret { new_secret, reason } => {
                w.longstr(new_secret)?;
                w.shortstr(reason)?;
            }
            ConnectionCloseOk | ConnectionUnblocked | ConnectionUpdateSecretOk => {}

            ChannelOpen => w.shortstr("")?, // reserved-1: out-of-band
            ChannelOpenOk => w.longstr(b"")?, // reserved-1: channel-id
            ChannelFlow { active } | ChannelFlowOk { active } => w.bit(*active),
            ChannelCloseOk => {}

            ExchangeDeclare {
                exchange,
                exchange_type,
                passive,
                durable,
                auto_delete,
                internal,
                no_wait,
                arguments,
            } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(exchange)?;
                w.shortstr(exchange_type)?;
                w.bit(*passive);
                w.bit(*durable);
                w.bit(*auto_delete);
                w.bit(*internal);
                w.bit(*no_wait);
                w.table(arguments)?;
            }
            ExchangeDelete {
                exchange,
                if_unused,
                no_wait,
            } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(exchange)?;
                w.bit(*if_unused);
                w.bit(*no_wait);
            }
            ExchangeBind {
                destination,
                source,
                routing_key,
                no_wait,
                arguments,
            }
            | ExchangeUnbind {
                destination,
                source,
                routing_key,
                no_wait,
                arguments,
            } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(destination)?;
                w.shortstr(source)?;
                w.shortstr(routing_key)?;
                w.bit(*no_wait);
                w.table(arguments)?;
            }
            ExchangeDeclareOk | ExchangeDeleteOk | ExchangeBindOk | ExchangeUnbindOk => {}

            QueueDeclare {
                queue,
                passive,
                durable,
                exclusive,
                auto_delete,
                no_wait,
                arguments,
            } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(queue)?;
                w.bit(*passive);
                w.bit(*durable);
                w.bit(*exclusive);
                w.bit(*auto_delete);
                w.bit(*no_wait);
                w.table(arguments)?;
            }
            QueueDeclareOk {
                queue,
                message_count,
                consumer_count,
            } => {
                w.shortstr(queue)?;
                w.long(*message_count);
                w.long(*consumer_count);
            }
            QueueBind {
                queue,
                exchange,
                routing_key,
                no_wait,
                arguments,
            } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(queue)?;
                w.shortstr(exchange)?;
                w.shortstr(routing_key)?;
                w.bit(*no_wait);
                w.table(arguments)?;
            }
            QueuePurge { queue, no_wait } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(queue)?;
                w.bit(*no_wait);
            }
            QueuePurgeOk { message_count } | QueueDeleteOk { message_count } => {
                w.long(*message_count)
            }
            QueueDelete {
                queue,
                if_unused,
                if_empty,
                no_wait,
            } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(queue)?;
                w.bit(*if_unused);
                w.bit(*if_empty);
                w.bit(*no_wait);
            }
            QueueUnbind {
                queue,
                exchange,
                routing_key,
                arguments,
            } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(queue)?;
                w.shortstr(exchange)?;
                w.shortstr(routing_key)?;
                w.table(arguments)?;
            }
            QueueBindOk | QueueUnbindOk => {}

            BasicQos {
                prefetch_size,
                prefetch_count,
                global,
            } => {
                w.long(*prefetch_size);
                w.short(*prefetch_count);
                w.bit(*global);
            }
            BasicConsume {
                queue,
                consumer_tag,
                no_local,
                no_ack,
                exclusive,
                no_wait,
                arguments,
            } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(queue)?;
                w.shortstr(consumer_tag)?;
                w.bit(*no_local);
                w.bit(*no_ack);
                w.bit(*exclusive);
                w.bit(*no_wait);
                w.table(arguments)?;
            }
            BasicConsumeOk { consumer_tag } | BasicCancelOk { consumer_tag } => {
                w.shortstr(consumer_tag)?
            }
            BasicCancel {
                consumer_tag,
                no_wait,
            } => {
                w.shortstr(consumer_tag)?;
                w.bit(*no_wait);
            }
            BasicPublish {
                exchange,
                routing_key,
                mandatory,
                immediate,
            } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(exchange)?;
                w.shortstr(routing_key)?;
                w.bit(*mandatory);
                w.bit(*immediate);
            }
            BasicReturn {
                reply_code,
                reply_text,
                exchange,
                routing_key,
            } => {
                w.short(*reply_code);
                w.shortstr(reply_text)?;
                w.shortstr(exchange)?;
                w.shortstr(routing_key)?;
            }
            BasicDeliver {
                consumer_tag,
                delivery_tag,
                redelivered,
                exchange,
                routing_key,
            } => {
                w.shortstr(consumer_tag)?;
                w.longlong(*delivery_tag);
                w.bit(*redelivered);
                w.shortstr(exchange)?;
                w.shortstr(routing_key)?;
            }
            BasicGet { queue, no_ack } => {
                w.short(0); // reserved-1: ticket
                w.shortstr(queue)?;
                w.bit(*no_ack);
            }
            BasicGetOk {
                delivery_tag,
                redelivered,
                exchange,
                routing_key,
                message_count,
            } => {
                w.longlong(*delivery_tag);
                w.bit(*redelivered);
                w.shortstr(exchange)?;
                w.shortstr(routing_key)?;
                w.long(*message_count);
            }
            BasicGetEmpty => w.shortstr("")?, // reserved-1: cluster-id
            BasicAck {
                delivery_tag,
                multiple,
            } => {
                w.longlong(*delivery_tag);
                w.bit(*multiple);
            }
            BasicReject {
                delivery_tag,
                requeue,
            } => {
                w.longlong(*delivery_tag);
                w.bit(*requeue);
            }
            BasicRecoverAsync { requeue } | BasicRecover { requeue } => w.bit(*requeue),
            BasicNack {
                delivery_tag,
                multiple,
                requeue,
            } => {
                w.longlong(*delivery_tag);
                w.bit(*multiple);
                w.bit(*requeue);
            }
            BasicQosOk | BasicRecoverOk => {}

            ConfirmSelect { no_wait } => w.bit(*no_wait),
            ConfirmSelectOk => {}

            TxSelect | TxSelectOk | TxCommit | TxCommitOk | TxRollback | TxRollbackOk => {}
        }
        Ok(())
    }
}
