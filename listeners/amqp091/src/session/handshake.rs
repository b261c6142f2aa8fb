//! The connection handshake on channel 0: connection.start, start-ok (SASL PLAIN, AMQPLAIN,
//! EXTERNAL), tune-ok and open.

use std::sync::Arc;

use warren_core::connections::{ChannelView, ConnectionInfo};
use warren_core::value::{Table, Value};
use warren_core::CoreError;

use crate::codec::{decode_table, Method};
use crate::reply::{self, AmqpError};

use super::{Control, Phase, Session, FRAME_MIN_SIZE};

impl Session {
    pub(super) fn connection_start(&self) -> Method {
        let mut capabilities = Table::new();
        for capability in [
            "publisher_confirms",
            "exchange_exchange_bindings",
            "basic.nack",
            "consumer_cancel_notify",
            "connection.blocked",
            "consumer_priorities",
            "authentication_failure_close",
            "per_consumer_qos",
            "direct_reply_to",
        ] {
            capabilities.insert(capability, Value::Bool(true));
        }
        let mut properties = Table::new();
        properties.insert("capabilities", Value::Table(capabilities));
        properties.insert("cluster_name", Value::string("warren"));
        properties.insert(
            "copyright",
            Value::string("Copyright (c) the Warren authors"),
        );
        properties.insert(
            "information",
            Value::string("Licensed under the Apache License 2.0"),
        );
        properties.insert("platform", Value::string("Rust"));
        properties.insert("product", Value::string(self.config.product.clone()));
        properties.insert("version", Value::string(env!("CARGO_PKG_VERSION")));
        // As rabbit_reader: configured properties win over the built-in ones, except
        // capabilities, and the table goes out sorted by key.
        for (key, value) in &self.config.server_properties {
            if key != "capabilities" {
                properties.insert(key.clone(), Value::string(value.clone()));
            }
        }
        properties.0.sort_by(|(a, _), (b, _)| a.cmp(b));
        Method::ConnectionStart {
            version_major: 0,
            version_minor: 9,
            server_properties: properties,
            mechanisms: self.mechanisms.join(" ").into_bytes(),
            locales: b"en_US".to_vec(),
        }
    }

    pub(super) fn start_ok(
        &mut self,
        client_properties: Table,
        mechanism: &str,
        response: &[u8],
    ) -> Result<Control, AmqpError> {
        let capability = |name: &str| {
            client_properties
                .get("capabilities")
                .and_then(|c| match c {
                    Value::Table(t) => t.get(name).and_then(Value::as_bool),
                    _ => None,
                })
                .unwrap_or(false)
        };
        self.outbox
            .set_consumer_cancel_notify(capability("consumer_cancel_notify"));
        self.blocked_capability = capability("connection.blocked");
        self.client_properties = client_properties;
        if !self.mechanisms.iter().any(|offered| offered == mechanism) {
            return Err(AmqpError::new(
                reply::COMMAND_INVALID,
                format!("unknown authentication mechanism '{mechanism}'"),
            ));
        }
        let refused = |mechanism: &str| {
            // authentication_failure_close: RabbitMQ answers with 403 and closes.
            AmqpError::new(
                reply::ACCESS_REFUSED,
                format!(
                    "Login was refused using authentication mechanism {mechanism}. For details see the broker logfile."
                ),
            )
        };
        let (username, login) = if mechanism == "EXTERNAL" {
            // The response is not looked at: the certificate is the credential.
            let Some(username) = self.certificate_user.clone().flatten() else {
                tracing::warn!(
                    "AMQP 0-9-1 EXTERNAL login refused: no name found in the client certificate"
                );
                return Err(refused(mechanism));
            };
            let login = self
                .broker
                .authenticate_trusted(&username, self.from_loopback);
            (username, login)
        } else {
            let (username, password) = match mechanism {
                "PLAIN" => parse_plain(response),
                _ => parse_amqplain(response),
            }
            .ok_or_else(|| {
                AmqpError::new(
                    reply::ACCESS_REFUSED,
                    format!("{mechanism} login refused: malformed response"),
                )
            })?;
            let login = self
                .broker
                .authenticate(&username, &password, self.from_loopback);
            (username, login)
        };
        match login {
            Ok(user) => self.user = Some(user),
            Err(failure) => {
                tracing::warn!(user = %username, reason = %failure, mechanism, "AMQP 0-9-1 login refused");
                return Err(refused(mechanism));
            }
        }
        self.phase = Phase::AwaitTuneOk;
        self.outbox.send_method(
            0,
            &Method::ConnectionTune {
                channel_max: self.config.channel_max,
                frame_max: self.config.frame_max,
                heartbeat: self.config.heartbeat,
            },
        );
        Ok(Control::Continue)
    }

    pub(super) fn tune_ok(
        &mut self,
        channel_max: u16,
        frame_max: u32,
        heartbeat: u16,
    ) -> Result<Control, AmqpError> {
        if frame_max != 0 && frame_max < FRAME_MIN_SIZE {
            return Err(AmqpError::new(
                reply::NOT_ALLOWED,
                format!("frame_max={frame_max} < {FRAME_MIN_SIZE} min size"),
            ));
        }
        // The lower of the two proposals wins; 0 means "no limit" on either side.
        let lower = |client: u32, server: u32| match (client, server) {
            (0, s) => s,
            (c, 0) => c,
            (c, s) => c.min(s),
        };
        self.frame_max = lower(frame_max, self.config.frame_max);
        self.channel_max = lower(u32::from(channel_max), u32::from(self.config.channel_max)) as u16;
        self.heartbeat = heartbeat;
        self.outbox.set_frame_max(self.frame_max);
        self.phase = Phase::AwaitOpen;
        Ok(Control::Continue)
    }

    pub(super) fn open(&mut self, virtual_host: &str) -> Result<Control, AmqpError> {
        let user = self
            .user
            .as_ref()
            .map(|u| u.name.clone())
            .unwrap_or_default();
        let vhost = self.broker.open_vhost(&user, virtual_host)?;
        let outbox = Arc::clone(&self.outbox);
        // The vhost's and the user's max-connections: 530 NOT_ALLOWED, as RabbitMQ.
        let registration = self
            .broker
            .register_connection(
                ConnectionInfo {
                    id: self.connection_id,
                    protocol: "AMQP 0-9-1".to_string(),
                    user,
                    vhost: virtual_host.to_string(),
                    peer: self.addresses.0,
                    local: self.addresses.1,
                    connection_name: ConnectionInfo::connection_name_from(&self.client_properties),
                    client_properties: self.client_properties.clone(),
                    tls: false,
                    frame_max: self.frame_max,
                    channel_max: self.channel_max,
                    heartbeat: self.heartbeat,
                    connected_at: std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_millis() as u64),
                },
                Box::new(move || outbox.reader_wake.notify_one()),
            )
            .map_err(CoreError::from)?;
        registration.set_channel_view(Arc::clone(&self.outbox) as Arc<dyn ChannelView>);
        self.vhost = Some(vhost);
        self.registration = Some(registration);
        self.phase = Phase::Open;
        self.outbox.send_method(0, &Method::ConnectionOpenOk);
        Ok(Control::Continue)
    }
}

/// SASL PLAIN, parsed by the core's one strict parser (shared with AMQP 1.0).
fn parse_plain(response: &[u8]) -> Option<(String, String)> {
    warren_core::sasl::parse_plain(response).map(|plain| (plain.user, plain.password))
}

/// AMQPLAIN: a field table without its length prefix, with LOGIN and PASSWORD.
fn parse_amqplain(response: &[u8]) -> Option<(String, String)> {
    let length = u32::try_from(response.len()).ok()?;
    let mut framed = Vec::with_capacity(response.len() + 4);
    framed.extend_from_slice(&length.to_be_bytes());
    framed.extend_from_slice(response);
    let table = decode_table(&framed).ok()?;
    let login = table.get("LOGIN")?.as_str()?.to_string();
    let password = table.get("PASSWORD")?.as_str()?.to_string();
    Some((login, password))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn plain_response_parses_with_and_without_authzid() {
        assert_eq!(
            parse_plain(b"\0guest\0secret"),
            Some(("guest".into(), "secret".into()))
        );
        assert_eq!(
            parse_plain(b"admin\0guest\0secret"),
            Some(("guest".into(), "secret".into()))
        );
        assert_eq!(parse_plain(b"guest"), None);
        assert_eq!(parse_plain(b"\0a\0b\0c"), None);
    }
}
