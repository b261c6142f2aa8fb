//! AMQP 0-9-1 reply codes, their names and scope, and the mapping from core error kinds.
//! The one table for this protocol: every close the listener sends is built here.

use warren_core::{CoreError, ErrorKind};

/// A reply code with its name and whether it closes the channel or the whole connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyCode {
    /// The numeric code.
    pub code: u16,
    /// The spec's name, used as the prefix of reply texts (`NOT_FOUND - ...`).
    pub name: &'static str,
    /// Whether the error closes the connection (a "hard" error) rather than the channel.
    pub connection_scope: bool,
}

macro_rules! codes {
    ($($ident:ident = $code:expr, $name:expr, $conn:expr;)*) => {
        $(
            #[doc = concat!("`", $name, "` (", stringify!($code), ")")]
            pub const $ident: ReplyCode = ReplyCode { code: $code, name: $name, connection_scope: $conn };
        )*
    };
}

codes! {
    REPLY_SUCCESS = 200, "OK", false;
    CONTENT_TOO_LARGE = 311, "CONTENT_TOO_LARGE", false;
    NO_ROUTE = 312, "NO_ROUTE", false;
    NO_CONSUMERS = 313, "NO_CONSUMERS", false;
    CONNECTION_FORCED = 320, "CONNECTION_FORCED", true;
    INVALID_PATH = 402, "INVALID_PATH", true;
    ACCESS_REFUSED = 403, "ACCESS_REFUSED", false;
    NOT_FOUND = 404, "NOT_FOUND", false;
    RESOURCE_LOCKED = 405, "RESOURCE_LOCKED", false;
    PRECONDITION_FAILED = 406, "PRECONDITION_FAILED", false;
    FRAME_ERROR = 501, "FRAME_ERROR", true;
    SYNTAX_ERROR = 502, "SYNTAX_ERROR", true;
    COMMAND_INVALID = 503, "COMMAND_INVALID", true;
    CHANNEL_ERROR = 504, "CHANNEL_ERROR", true;
    UNEXPECTED_FRAME = 505, "UNEXPECTED_FRAME", true;
    RESOURCE_ERROR = 506, "RESOURCE_ERROR", true;
    NOT_ALLOWED = 530, "NOT_ALLOWED", true;
    NOT_IMPLEMENTED = 540, "NOT_IMPLEMENTED", true;
    INTERNAL_ERROR = 541, "INTERNAL_ERROR", true;
}

/// The reply code a core error kind becomes on this protocol.
pub fn code_for(kind: ErrorKind) -> ReplyCode {
    match kind {
        ErrorKind::NotFound => NOT_FOUND,
        ErrorKind::AccessRefused => ACCESS_REFUSED,
        ErrorKind::PreconditionFailed => PRECONDITION_FAILED,
        ErrorKind::ResourceLocked => RESOURCE_LOCKED,
        ErrorKind::NotAllowed => NOT_ALLOWED,
        ErrorKind::ResourceError | ErrorKind::Unavailable => RESOURCE_ERROR,
        ErrorKind::NotImplemented => NOT_IMPLEMENTED,
        ErrorKind::CommandInvalid => COMMAND_INVALID,
        ErrorKind::InternalError => INTERNAL_ERROR,
    }
}

/// An error to send as channel.close or connection.close, with the method that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpError {
    /// The reply code (its scope decides channel or connection close).
    pub reply: ReplyCode,
    /// The text after the code's name.
    pub text: String,
    /// Class of the method that failed (0 if none).
    pub class_id: u16,
    /// Method id of the method that failed (0 if none).
    pub method_id: u16,
}

impl AmqpError {
    /// An error with `reply` and `text`, not tied to a method.
    pub fn new(reply: ReplyCode, text: impl Into<String>) -> Self {
        AmqpError {
            reply,
            text: text.into(),
            class_id: 0,
            method_id: 0,
        }
    }

    /// Ties the error to the method that caused it.
    pub fn on(mut self, class_id: u16, method_id: u16) -> Self {
        self.class_id = class_id;
        self.method_id = method_id;
        self
    }

    /// The reply text as RabbitMQ writes it: `NAME - text`, cut to the 255 bytes a short
    /// string can carry (a long queue name must not make the close itself unencodable).
    pub fn reply_text(&self) -> String {
        let text = format!("{} - {}", self.reply.name, self.text);
        crate::codec::truncate_shortstr(&text).to_string()
    }
}

impl From<CoreError> for AmqpError {
    fn from(error: CoreError) -> Self {
        AmqpError::new(code_for(error.kind), error.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_and_connection_scopes_follow_the_spec() {
        for code in [
            ACCESS_REFUSED,
            NOT_FOUND,
            RESOURCE_LOCKED,
            PRECONDITION_FAILED,
            NO_ROUTE,
        ] {
            assert!(!code.connection_scope, "{}", code.name);
        }
        for code in [
            FRAME_ERROR,
            SYNTAX_ERROR,
            COMMAND_INVALID,
            CHANNEL_ERROR,
            UNEXPECTED_FRAME,
        ] {
            assert!(code.connection_scope, "{}", code.name);
        }
        assert_eq!(code_for(ErrorKind::NotAllowed), NOT_ALLOWED);
    }

    #[test]
    fn long_reply_texts_are_cut_to_a_short_string() {
        let name = "q".repeat(300);
        let error: AmqpError =
            CoreError::not_found(format!("no queue '{name}' in vhost '/'")).into();
        assert_eq!(error.reply_text().len(), 255);
    }

    #[test]
    fn reply_text_is_prefixed_with_the_code_name() {
        let error: AmqpError = CoreError::not_found("no queue 'q' in vhost '/'").into();
        assert_eq!(error.reply_text(), "NOT_FOUND - no queue 'q' in vhost '/'");
    }
}
