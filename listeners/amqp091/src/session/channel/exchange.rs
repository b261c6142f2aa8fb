//! exchange.declare, exchange.delete, exchange.bind and exchange.unbind.

use std::sync::Arc;

use warren_core::exchange::DestinationName;
use warren_core::vhost::{Actor, ExchangeDeclare, VHost};

use super::not_a_client_method;
use crate::codec::Method;
use crate::reply::AmqpError;
use crate::session::Session;

impl Session {
    /// Handles one method of the exchange class.
    pub(super) fn exchange_method(
        &mut self,
        ch: u16,
        vhost: &Arc<VHost>,
        actor: Actor<'_>,
        method: Method,
    ) -> Result<(), AmqpError> {
        match method {
            Method::ExchangeDeclare {
                exchange,
                exchange_type,
                passive,
                durable,
                auto_delete,
                internal,
                no_wait,
                arguments,
            } => {
                vhost.declare_exchange(
                    actor,
                    ExchangeDeclare {
                        name: exchange,
                        kind: exchange_type,
                        passive,
                        durable,
                        auto_delete,
                        internal,
                        arguments,
                    },
                )?;
                self.reply(ch, no_wait, Method::ExchangeDeclareOk);
            }
            Method::ExchangeDelete {
                exchange,
                if_unused,
                no_wait,
            } => {
                vhost.delete_exchange(actor, &exchange, if_unused)?;
                self.reply(ch, no_wait, Method::ExchangeDeleteOk);
            }
            Method::ExchangeBind {
                destination,
                source,
                routing_key,
                no_wait,
                arguments,
            } => {
                vhost.bind(
                    actor,
                    &source,
                    DestinationName::Exchange(destination),
                    &routing_key,
                    arguments,
                )?;
                self.reply(ch, no_wait, Method::ExchangeBindOk);
            }
            Method::ExchangeUnbind {
                destination,
                source,
                routing_key,
                no_wait,
                arguments,
            } => {
                vhost.unbind(
                    actor,
                    &source,
                    DestinationName::Exchange(destination),
                    &routing_key,
                    arguments,
                )?;
                self.reply(ch, no_wait, Method::ExchangeUnbindOk);
            }
            method => return Err(not_a_client_method(&method)),
        }
        Ok(())
    }
}
