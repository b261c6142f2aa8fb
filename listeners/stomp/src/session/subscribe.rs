//! SUBSCRIBE, UNSUBSCRIBE, ACK and NACK: consumers on queues, and settling what they got.

use std::sync::Arc;

use md5::{Digest, Md5};
use warren_core::access::Access;
use warren_core::consumer::ConsumerSpec;
use warren_core::exchange::DestinationName;
use warren_core::queue::Settlement;
use warren_core::value::{Table, Value};
use warren_core::vhost::QueueDeclare;

use super::{generated_name, settle_grouped, Session};
use crate::codec::{Frame, Version};
use crate::destination::Destination;
use crate::error::StompError;
use crate::headers::is_true;
use crate::outbox::{AckMode, SinkHandle, Subscription};

/// A subscription the session holds: what to cancel and what it was for.
pub struct ActiveSubscription {
    /// The delivery side shared with the queue.
    pub subscription: Arc<Subscription>,
    /// The core's consumer id, to cancel with.
    pub consumer_id: u64,
    /// What the client subscribed to.
    pub destination: Destination,
}

/// `x-` headers RabbitMQ passes to queue declaration, with whether each is a string (the
/// others are integers).
const QUEUE_ARGUMENTS: &[(&str, bool)] = &[
    ("x-dead-letter-exchange", true),
    ("x-dead-letter-routing-key", true),
    ("x-expires", false),
    ("x-max-length", false),
    ("x-max-age", true),
    ("x-stream-max-segment-size-bytes", false),
    ("x-max-length-bytes", false),
    ("x-max-priority", false),
    ("x-message-ttl", false),
    ("x-queue-type", true),
    ("x-stream-filter-size-bytes", false),
    ("x-overflow", true),
];

/// Which kind of destination a queue is declared for; each has RabbitMQ's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum QueueKind {
    /// `/queue/`: durable, shared.
    Named,
    /// `/exchange/` subscription: exclusive, auto-delete.
    ExchangeSubscription,
    /// `/topic/` subscription: auto-delete, and durable with `durable:true`.
    TopicSubscription,
}

fn boolean(frame: &Frame, name: &str) -> Option<bool> {
    match frame.header(name) {
        Some("true" | "True") => Some(true),
        Some("false" | "False") => Some(false),
        _ => None,
    }
}

/// The queue.declare a destination's headers ask for (RabbitMQ's `build_params` and
/// `build_arguments`): durable, auto-delete and exclusive defaults per kind, overridden by
/// headers; a non-durable queue is always exclusive and auto-delete.
pub(super) fn queue_declare(
    name: String,
    kind: QueueKind,
    frame: &Frame,
    durable_from_persistent: bool,
) -> Result<QueueDeclare, StompError> {
    let (mut durable, mut auto_delete, mut exclusive) = match kind {
        QueueKind::Named => (true, false, false),
        QueueKind::ExchangeSubscription => (false, true, true),
        QueueKind::TopicSubscription => (false, true, false),
    };
    let durable_header = boolean(frame, "durable").or_else(|| {
        durable_from_persistent
            .then(|| boolean(frame, "persistent"))
            .flatten()
    });
    if let Some(value) = durable_header {
        durable = value;
    }
    if let Some(value) = boolean(frame, "auto-delete") {
        auto_delete = value;
    }
    if let Some(value) = boolean(frame, "exclusive") {
        exclusive = value;
    }
    if !durable {
        auto_delete = true;
        exclusive = true;
    }
    let mut arguments = Table::new();
    for (header, is_string) in QUEUE_ARGUMENTS {
        let Some(text) = frame.header(header) else {
            continue;
        };
        let text = text.trim();
        let value = if *is_string {
            Value::string(text)
        } else {
            Value::I64(
                text.parse()
                    .map_err(|_| StompError::invalid_header(header, "an integer", text))?,
            )
        };
        arguments.insert(*header, value);
    }
    Ok(QueueDeclare {
        name,
        passive: false,
        durable,
        exclusive,
        auto_delete,
        arguments,
    })
}

/// The queue behind a `/topic/` or `/exchange/` subscription: `x-queue-name` when given,
/// else derived from the routing key and the subscription id. A durable subscription's id
/// is stable across connections, so the same client finds the same queue again.
fn subscription_queue_name(frame: &Frame, key: &str, durable: bool) -> String {
    if let Some(name) = frame.header("x-queue-name") {
        return name.to_string();
    }
    let id = match frame.header("id") {
        Some(id) if durable => id.to_string(),
        _ => generated_name(""),
    };
    let mut hash = Md5::new();
    hash.update(key.as_bytes());
    hash.update([0]);
    hash.update(id.as_bytes());
    use base64::Engine;
    format!(
        "stomp-subscription-{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hash.finalize())
    )
}

/// The stream consumer arguments a SUBSCRIBE carries, as RabbitMQ's STOMP plugin reads
/// them: `x-stream-offset` as `first`, `last`, `next`, `offset=N` (a long) or
/// `timestamp=N` (seconds, an AMQP timestamp), anything else ignored; `x-stream-filter` as
/// comma-separated values; `x-stream-match-unfiltered` as a boolean.
pub(super) fn stream_arguments(frame: &Frame) -> Table {
    let mut arguments = Table::new();
    if let Some(text) = frame.header("x-stream-offset") {
        let offset = match text.trim() {
            spec @ ("first" | "last" | "next") => Some(Value::string(spec)),
            other => match (
                other.strip_prefix("offset="),
                other.strip_prefix("timestamp="),
            ) {
                (Some(offset), _) => offset.parse().ok().map(Value::I64),
                (_, Some(seconds)) => seconds.parse().ok().map(Value::Timestamp),
                _ => None,
            },
        };
        if let Some(offset) = offset {
            arguments.insert("x-stream-offset", offset);
        }
    }
    if let Some(text) = frame.header("x-stream-filter") {
        let values = text.split(',').map(Value::string).collect();
        arguments.insert("x-stream-filter", Value::Array(values));
    }
    if let Some(value) = boolean(frame, "x-stream-match-unfiltered") {
        arguments.insert("x-stream-match-unfiltered", Value::Bool(value));
    }
    arguments
}

fn has_durable_header(frame: &Frame) -> bool {
    is_true(frame.header("durable")) || is_true(frame.header("persistent"))
}

impl Session {
    pub(super) fn subscribe(&mut self, frame: &Frame) -> Result<(), StompError> {
        let (vhost, user) = self.open()?;
        let actor = self.actor(&user);
        let destination_text = frame
            .header("destination")
            .ok_or_else(|| StompError::missing_destination("SUBSCRIBE"))?;
        let destination = Destination::parse(destination_text)?;
        let ack = AckMode::parse(frame.header("ack")).ok_or_else(|| {
            StompError::invalid_header(
                "ack",
                "auto, client or client-individual",
                frame.header("ack").unwrap_or_default(),
            )
        })?;
        let durable = has_durable_header(frame);
        let id: Arc<str> = match frame.header("id") {
            Some(id) if id.starts_with("/temp-queue/") => {
                return Err(StompError::reserved_subscription_id("SUBSCRIBE"))
            }
            Some(id) => Arc::from(id),
            None if durable => return Err(StompError::missing_durable_subscription_id()),
            None => Arc::from(destination_text),
        };
        if self.subscriptions.contains_key(&id) {
            return Err(StompError::duplicate_subscription(&id));
        }
        let prefetch = match frame.header("prefetch-count") {
            None => 0,
            Some(text) => text.trim().parse::<u32>().map_err(|_| {
                StompError::invalid_header("prefetch-count", "a non-negative integer", text)
            })?,
        };
        let priority = match frame.header("x-priority") {
            None => 0,
            Some(text) => text
                .trim()
                .parse::<i32>()
                .map_err(|_| StompError::invalid_header("x-priority", "an integer", text))?,
        };
        let queue_name = match &destination {
            Destination::Queue(name) => {
                self.ensure_queue(name, frame)?;
                name.clone()
            }
            Destination::AmqQueue(name) | Destination::ReplyQueue(name) => name.clone(),
            Destination::TempQueue(_) => {
                return Err(StompError::destination_not_allowed(
                    destination_text,
                    "SUBSCRIBE",
                ))
            }
            Destination::Exchange { .. } | Destination::Topic(_) => {
                let kind = if matches!(destination, Destination::Topic(_)) {
                    QueueKind::TopicSubscription
                } else {
                    QueueKind::ExchangeSubscription
                };
                let (exchange, key) = destination.routing();
                let name = subscription_queue_name(frame, key, durable);
                let declare = queue_declare(name, kind, frame, true)?;
                let exclusive = declare.exclusive;
                let declared = vhost.declare_queue(actor, declare)?;
                if exclusive {
                    self.exclusive_queues.push(declared.name.clone());
                }
                if let Err(error) = vhost.bind(
                    actor,
                    exchange,
                    DestinationName::Queue(declared.name.clone()),
                    key,
                    Table::new(),
                ) {
                    // The queue was made for this subscription alone: do not leave it behind.
                    if declared.consumer_count == 0 && declared.message_count == 0 {
                        let _ = vhost.delete_queue(actor, &declared.name, true, true);
                    }
                    return Err(error.into());
                }
                declared.name
            }
        };
        let queue = vhost.queue_instance_for(actor, &queue_name, Access::Read)?;
        let subscription = Subscription::new(
            Arc::clone(&self.outbox),
            Arc::clone(&id),
            Arc::clone(&queue),
            ack,
            prefetch,
        );
        let mut arguments = stream_arguments(frame);
        if priority != 0 {
            arguments.insert("x-priority", Value::I32(priority));
        }
        let spec = ConsumerSpec {
            tag: Arc::clone(&id),
            connection_id: self.connection_id,
            needs_settlement: ack != AckMode::Auto,
            exclusive: false,
            priority,
            arguments,
        };
        let consumer_id = vhost.consume_instance(
            &queue,
            spec,
            Arc::new(SinkHandle(Arc::clone(&subscription))),
        )?;
        self.subscriptions.insert(
            id,
            ActiveSubscription {
                subscription: Arc::clone(&subscription),
                consumer_id,
                destination,
            },
        );
        // Deliveries start once the frame is fully handled, so a RECEIPT for this SUBSCRIBE
        // goes out before the first MESSAGE.
        self.starting.push(subscription);
        Ok(())
    }

    pub(super) fn unsubscribe(&mut self, frame: &Frame) -> Result<(), StompError> {
        let (vhost, user) = self.open()?;
        let id = match (frame.header("id"), frame.header("destination")) {
            (Some(id), _) if id.starts_with("/temp-queue/") => {
                return Err(StompError::reserved_subscription_id("UNSUBSCRIBE"))
            }
            (Some(id), _) | (None, Some(id)) => id,
            (None, None) => return Err(StompError::missing_subscription()),
        };
        let Some(active) = self.subscriptions.remove(id) else {
            return Err(StompError::no_subscription(id));
        };
        let queue = &active.subscription.queue;
        vhost.cancel_instance(queue, active.consumer_id);
        if matches!(active.destination, Destination::Topic(_)) && has_durable_header(frame) {
            // Unsubscribing a durable topic subscription with `durable:true` ends it.
            vhost.delete_queue(self.actor(&user), queue.name(), false, false)?;
        }
        Ok(())
    }

    /// ACK (`settlement` None) or NACK of the message a `message-id` (1.0, 1.1) or `id`
    /// (1.2) names.
    pub(super) fn acknowledge(
        &mut self,
        frame: &Frame,
        settlement: Option<Settlement>,
    ) -> Result<(), StompError> {
        self.open()?;
        let command = frame.command.as_str();
        let header = if self.version == Version::V1_2 {
            "id"
        } else {
            "message-id"
        };
        let value = frame
            .header(header)
            .ok_or_else(|| StompError::missing_ack_header(command, header))?;
        let invalid = || StompError::invalid_ack_header(command, header);
        // `T_<subscription>@@<session>@@<tag>`; the subscription id may itself hold "@@".
        let mut parts = value.rsplitn(3, "@@");
        let tag = parts.next().and_then(|t| t.parse::<u64>().ok());
        let _session = parts.next();
        let subscription = parts.next().and_then(|s| s.strip_prefix("T_"));
        let (Some(tag), Some(subscription)) = (tag, subscription) else {
            return Err(invalid());
        };
        let taken = self
            .outbox
            .take_unacked(subscription, tag)
            .ok_or_else(|| StompError::unknown_delivery_tag(tag))?;
        settle_grouped(taken, settlement.unwrap_or(Settlement::Ack));
        self.kick_starved();
        Ok(())
    }
}
