//! The one table of STOMP errors: what goes in an ERROR frame's `message` header and body.
//!
//! STOMP has no error codes, only a short `message` header and a free-text body. Where
//! RabbitMQ's STOMP plugin has the same error, the header and body are its words (for
//! example `message:not_found` with `no queue 'q' in vhost '/'`), so clients and operators
//! that match on them keep working. Every error closes the connection after the ERROR frame,
//! as the STOMP spec requires. The constructors below are the list; only the SEND path's own
//! refusals (`Message too large`, and the user-id check moving into the core's publish) are
//! still written where they are checked.
//!
//! Texts are RabbitMQ 4.x's (rabbit_stomp_processor.erl), trailing newlines included, except
//! where 4.x prints an Erlang term (`<<"tx">>` for a transaction name): there the 3.x
//! rendering (`"tx"`) is kept.

use std::fmt;

use warren_core::{CoreError, ErrorKind};

use crate::codec::FrameError;

/// A STOMP error: the ERROR frame's `message` header and its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StompError {
    /// The short `message` header, e.g. `Invalid destination` or `not_found`.
    pub message: String,
    /// The body: what went wrong and, where it helps, what to do instead.
    pub detail: String,
}

impl StompError {
    /// An error with a `message` header and a body.
    pub fn new(message: impl Into<String>, detail: impl Into<String>) -> StompError {
        StompError {
            message: message.into(),
            detail: detail.into(),
        }
    }

    // Connecting and framing.

    /// A frame other than CONNECT before login (without `stomp.implicit_connect`).
    pub fn not_logged_in() -> StompError {
        StompError::new("Illegal command", "You must log in using CONNECT first")
    }

    /// No version both sides speak; `supported` is the sentence naming ours
    /// (`Supported versions are 1.0,1.1,1.2`).
    pub fn version_mismatch(supported: &str) -> StompError {
        StompError::new("Version mismatch", format!("{supported}\n"))
    }

    /// A refused CONNECT (credentials, vhost, heart-beat header, a second CONNECT).
    pub fn bad_connect(detail: impl Into<String>) -> StompError {
        StompError::new("Bad CONNECT", detail)
    }

    /// A command the broker does not take from a client (an unknown one, or a server
    /// command such as MESSAGE).
    pub fn bad_command(command: &str) -> StompError {
        StompError::new(
            "Bad command",
            format!("Could not interpret command \"{command}\"\n"),
        )
    }

    /// A frame over one of the decoder's limits.
    pub fn frame_too_large(detail: impl Into<String>) -> StompError {
        StompError::new("Frame too large", detail)
    }

    /// The peer's bytes could not be framed.
    pub fn malformed(error: &FrameError) -> StompError {
        StompError::new("Malformed frame", error.to_string())
    }

    /// The broker shuts down or an operator closed the connection.
    pub fn connection_forced(reason: &str) -> StompError {
        StompError::new(
            "connection_forced",
            format!("broker forced connection closure with reason '{reason}'"),
        )
    }

    // Destinations.

    /// SEND or SUBSCRIBE without a `destination` header.
    pub fn missing_destination(command: &str) -> StompError {
        StompError::new(
            "Missing destination",
            format!("'{command}' must include a 'destination' header\n"),
        )
    }

    /// An empty `destination` header.
    pub fn blank_destination() -> StompError {
        StompError::new("Invalid destination", "Destination cannot be blank")
    }

    /// A destination of a known `kind` (`queue`, `topic`, `exchange`, `amqqueue`,
    /// `temp_queue`, `reply_queue`) whose part after the prefix is not a valid name.
    pub fn invalid_destination(kind: &str, after_prefix: &str) -> StompError {
        StompError::new(
            "Invalid destination",
            format!("'{after_prefix}' is not a valid {kind} destination\n"),
        )
    }

    /// A destination with none of the known prefixes; `prefixes` lists them.
    pub fn unknown_destination(destination: &str, prefixes: &str) -> StompError {
        StompError::new(
            "Unknown destination",
            format!(
                "'{destination}' is not a valid destination.\nValid destination types are: {prefixes}.\n"
            ),
        )
    }

    /// A destination that cannot be used with `command` (a `/temp-queue/` SEND or SUBSCRIBE).
    pub fn destination_not_allowed(destination: &str, command: &str) -> StompError {
        StompError::new(
            "Invalid destination",
            format!("'{destination}' is not a valid destination for '{command}'\n"),
        )
    }

    // Headers.

    /// A header has a value the broker cannot use.
    pub fn invalid_header(header: &str, expected: &str, value: &str) -> StompError {
        StompError::new(
            "Invalid header",
            format!("header '{header}' must be {expected}, got '{value}'"),
        )
    }

    /// A header with a value the broker cannot use, explained in `problem`.
    pub fn invalid_header_value(problem: impl Into<String>) -> StompError {
        StompError::new("Invalid header", problem)
    }

    /// A header a client may not set on `command` (`message-id` on SEND).
    pub fn header_not_allowed(header: &str, command: &str) -> StompError {
        StompError::new(
            "Invalid header",
            format!("'{header}' is not allowed on '{command}'.\n"),
        )
    }

    // Subscriptions and acknowledgements.

    /// A SUBSCRIBE or UNSUBSCRIBE `id` in the temporary-queue namespace.
    pub fn reserved_subscription_id(command: &str) -> StompError {
        StompError::new(
            "Invalid id",
            format!("{command} 'id' may not start with /temp-queue/\n"),
        )
    }

    /// A durable subscription without an `id`.
    pub fn missing_durable_subscription_id() -> StompError {
        StompError::new(
            "Missing Header",
            "Header 'id' is required for durable subscriptions",
        )
    }

    /// A second subscription with an `id` in use.
    pub fn duplicate_subscription(id: &str) -> StompError {
        StompError::new(
            "Duplicated subscription identifier",
            format!("A subscription identified by 'T_{id}' already exists."),
        )
    }

    /// UNSUBSCRIBE naming neither `id` nor `destination`.
    pub fn missing_subscription() -> StompError {
        StompError::new(
            "Missing destination or id",
            "UNSUBSCRIBE must include a 'destination' or 'id' header",
        )
    }

    /// UNSUBSCRIBE of a subscription that does not exist.
    pub fn no_subscription(id: &str) -> StompError {
        StompError::new(
            "No subscription found",
            format!(
                "UNSUBSCRIBE must refer to an existing subscription.\nSubscription to id='{id}' not found.\n"
            ),
        )
    }

    /// ACK or NACK without the header naming the message (`id` or `message-id`).
    pub fn missing_ack_header(command: &str, header: &str) -> StompError {
        StompError::new(
            "Missing header",
            format!("{command} must include the '{header}' header\n"),
        )
    }

    /// ACK or NACK whose message header is not one the broker sent.
    pub fn invalid_ack_header(command: &str, header: &str) -> StompError {
        StompError::new(
            "Invalid header",
            format!("{command} must include a valid '{header}' header\n"),
        )
    }

    /// ACK or NACK of a message that is not (or no longer) waiting for one.
    pub fn unknown_delivery_tag(tag: u64) -> StompError {
        StompError::new("Message not found", format!("unknown delivery tag {tag}\n"))
    }

    // Transactions.

    /// BEGIN, COMMIT or ABORT without a `transaction` header.
    pub fn missing_transaction(command: &str) -> StompError {
        StompError::new(
            "Missing transaction",
            format!("'{command}' must include a 'transaction' header\n"),
        )
    }

    /// A `transaction` header naming no open transaction.
    pub fn unknown_transaction(transaction: &str) -> StompError {
        StompError::new(
            "Bad transaction",
            format!("Invalid transaction identifier: \"{transaction}\"\n"),
        )
    }

    /// BEGIN of a transaction already open.
    pub fn transaction_already_open(transaction: &str) -> StompError {
        StompError::new(
            "Bad transaction",
            format!("Transaction '{transaction}' is already open"),
        )
    }

    /// BEGIN beyond the connection's limit of open transactions.
    pub fn transaction_limit(limit: usize) -> StompError {
        StompError::new(
            "Transaction limit exceeded",
            format!("Too many concurrent transactions (limit {limit})"),
        )
    }

    /// A frame beyond the limit of actions in one transaction.
    pub fn transaction_too_large(limit: usize) -> StompError {
        StompError::new(
            "Transaction too large",
            format!("Too many actions in transaction (limit {limit})"),
        )
    }
}

/// The name RabbitMQ gives an AMQP error (its `amqp_exception` atom), which its STOMP plugin
/// puts in the `message` header when a broker operation fails.
pub fn kind_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NotFound => "not_found",
        ErrorKind::AccessRefused => "access_refused",
        ErrorKind::PreconditionFailed => "precondition_failed",
        ErrorKind::ResourceLocked => "resource_locked",
        ErrorKind::NotAllowed => "not_allowed",
        ErrorKind::ResourceError => "resource_error",
        ErrorKind::NotImplemented => "not_implemented",
        ErrorKind::CommandInvalid => "command_invalid",
        ErrorKind::InternalError => "internal_error",
        ErrorKind::Unavailable => "unavailable",
    }
}

impl From<CoreError> for StompError {
    fn from(error: CoreError) -> StompError {
        StompError::new(kind_name(error.kind), error.message)
    }
}

impl fmt::Display for StompError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.message, self.detail)
    }
}

impl std::error::Error for StompError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_errors_keep_their_text_under_rabbitmq_names() {
        let error = StompError::from(CoreError::not_found("no queue 'q' in vhost '/'"));
        assert_eq!(error.message, "not_found");
        assert_eq!(error.detail, "no queue 'q' in vhost '/'");
        let refused = StompError::from(CoreError::access_refused("nope"));
        assert_eq!(refused.message, "access_refused");
    }
}
