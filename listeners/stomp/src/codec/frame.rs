//! The vocabulary shared by the decoder and the encoder: commands, protocol versions, frames
//! and the errors a peer's bytes can provoke.

use std::fmt;

use bytes::Bytes;

/// A STOMP command: the first line of every frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Command {
    /// Client: open a session (every version).
    Connect,
    /// Client: open a session; the 1.1+ synonym of CONNECT that cannot be mistaken for HTTP.
    Stomp,
    /// Server: the session is open.
    Connected,
    /// Client: publish a message.
    Send,
    /// Client: start consuming from a destination.
    Subscribe,
    /// Client: stop consuming.
    Unsubscribe,
    /// Client: acknowledge a message.
    Ack,
    /// Client: reject a message (1.1+).
    Nack,
    /// Client: start a transaction.
    Begin,
    /// Client: commit a transaction.
    Commit,
    /// Client: roll back a transaction.
    Abort,
    /// Client: close the session gracefully.
    Disconnect,
    /// Server: a message delivered to a subscription.
    Message,
    /// Server: confirms a frame that asked for a receipt.
    Receipt,
    /// Server: something went wrong; the connection closes after it.
    Error,
}

impl Command {
    /// Every command, in the order of the enum.
    pub const ALL: [Command; 15] = [
        Command::Connect,
        Command::Stomp,
        Command::Connected,
        Command::Send,
        Command::Subscribe,
        Command::Unsubscribe,
        Command::Ack,
        Command::Nack,
        Command::Begin,
        Command::Commit,
        Command::Abort,
        Command::Disconnect,
        Command::Message,
        Command::Receipt,
        Command::Error,
    ];

    /// The command named by a frame's first line (without its EOL). Commands are
    /// case-sensitive, as in the spec and in RabbitMQ: `send` is not `SEND`.
    pub fn from_bytes(name: &[u8]) -> Option<Command> {
        Some(match name {
            b"CONNECT" => Command::Connect,
            b"STOMP" => Command::Stomp,
            b"CONNECTED" => Command::Connected,
            b"SEND" => Command::Send,
            b"SUBSCRIBE" => Command::Subscribe,
            b"UNSUBSCRIBE" => Command::Unsubscribe,
            b"ACK" => Command::Ack,
            b"NACK" => Command::Nack,
            b"BEGIN" => Command::Begin,
            b"COMMIT" => Command::Commit,
            b"ABORT" => Command::Abort,
            b"DISCONNECT" => Command::Disconnect,
            b"MESSAGE" => Command::Message,
            b"RECEIPT" => Command::Receipt,
            b"ERROR" => Command::Error,
            _ => return None,
        })
    }

    /// The command as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Connect => "CONNECT",
            Command::Stomp => "STOMP",
            Command::Connected => "CONNECTED",
            Command::Send => "SEND",
            Command::Subscribe => "SUBSCRIBE",
            Command::Unsubscribe => "UNSUBSCRIBE",
            Command::Ack => "ACK",
            Command::Nack => "NACK",
            Command::Begin => "BEGIN",
            Command::Commit => "COMMIT",
            Command::Abort => "ABORT",
            Command::Disconnect => "DISCONNECT",
            Command::Message => "MESSAGE",
            Command::Receipt => "RECEIPT",
            Command::Error => "ERROR",
        }
    }

    /// Whether this frame's headers are exempt from escaping. The spec carves out CONNECT and
    /// CONNECTED (and STOMP, CONNECT's synonym) because they are exchanged before a version is
    /// agreed, and a 1.0 peer would not understand escapes.
    pub fn headers_are_verbatim(self) -> bool {
        matches!(self, Command::Connect | Command::Stomp | Command::Connected)
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A STOMP protocol version. Ordered, so that "the highest common version" is a `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// STOMP 1.0: no header escaping, no heart-beats, no NACK.
    V1_0,
    /// STOMP 1.1: escapes `\n`, `\c`, `\\`; heart-beats; NACK.
    V1_1,
    /// STOMP 1.2: adds the `\r` escape and CR LF line endings; ACK/NACK by `id`.
    V1_2,
}

impl Version {
    /// Every version Warren speaks, lowest first.
    pub const ALL: [Version; 3] = [Version::V1_0, Version::V1_1, Version::V1_2];

    /// The version as written in `accept-version` and `version` headers.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1_0 => "1.0",
            Version::V1_1 => "1.1",
            Version::V1_2 => "1.2",
        }
    }

    /// Parses `"1.0"`, `"1.1"` or `"1.2"`.
    pub fn from_str_opt(text: &str) -> Option<Version> {
        match text {
            "1.0" => Some(Version::V1_0),
            "1.1" => Some(Version::V1_1),
            "1.2" => Some(Version::V1_2),
            _ => None,
        }
    }

    /// Whether header names and values (outside CONNECT/CONNECTED) carry escape sequences.
    pub fn escapes_headers(self) -> bool {
        self != Version::V1_0
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One STOMP frame: a command, headers in wire order, and a body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// The command on the first line.
    pub command: Command,
    /// Headers in the order they were sent, unescaped. Repeats are kept (a MESSAGE can carry
    /// them through), but only the first occurrence counts: see [`Frame::header`].
    pub headers: Vec<(String, String)>,
    /// The body. When decoded, a zero-copy slice of the read buffer.
    pub body: Bytes,
}

impl Frame {
    /// A frame with no headers and no body.
    pub fn new(command: Command) -> Frame {
        Frame {
            command,
            headers: Vec::new(),
            body: Bytes::new(),
        }
    }

    /// Appends a header; for building frames in a chain.
    pub fn with_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Frame {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body; for building frames in a chain.
    pub fn with_body(mut self, body: impl Into<Bytes>) -> Frame {
        self.body = body.into();
        self
    }

    /// The value of the first header called `name`. STOMP 1.2 ("Repeated Header Entries"):
    /// when a header is repeated, only the first entry is used; RabbitMQ's parser does the
    /// same.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
    }
}

/// Which of the decoder's [`Limits`](super::Limits) a frame broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// [`Limits::max_frame_size`](super::Limits::max_frame_size): the body.
    Body,
    /// [`Limits::max_header_count`](super::Limits::max_header_count).
    HeaderCount,
    /// [`Limits::max_header_length`](super::Limits::max_header_length): one line.
    HeaderLine,
    /// [`Limits::max_headers_size`](super::Limits::max_headers_size): command and headers.
    Headers,
}

/// Bytes a peer should not have sent. Every variant is fatal to the connection: after it the
/// byte stream can no longer be trusted to be at a frame boundary. The session answers with an
/// ERROR frame whose `message` header is this error's text, then closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// A frame, or part of one, is larger than the decoder's limits allow.
    TooLarge {
        /// Which limit.
        limit: Limit,
        /// The size seen so far (for a count, the count).
        size: usize,
        /// The configured maximum.
        max: usize,
    },
    /// The first line is not a STOMP command.
    UnknownCommand(String),
    /// A header line without the `:` that separates name and value.
    HeaderWithoutColon(String),
    /// A `\` in a header followed by anything other than the escapes the version defines.
    /// STOMP 1.1/1.2: "undefined escape sequences [...] MUST be treated as a fatal protocol
    /// error".
    InvalidEscape {
        /// The header line the escape is in, as received.
        line: String,
        /// The byte after the backslash, or `None` when the backslash ended the line.
        escape: Option<u8>,
    },
    /// A CR that is not part of a CR LF line ending, in the command, a header or between
    /// frames.
    UnexpectedCarriageReturn,
    /// A command line or header that is not UTF-8 (STOMP: "encoded in UTF-8").
    InvalidUtf8(String),
    /// A `content-length` header that is not a non-negative decimal integer.
    InvalidContentLength(String),
    /// The byte after a `content-length` body was not the NUL that ends every frame.
    MissingNul {
        /// The declared body length.
        content_length: usize,
        /// The byte found where the NUL belongs.
        found: u8,
    },
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Limit::Body => "body",
            Limit::HeaderCount => "number of headers",
            Limit::HeaderLine => "header line",
            Limit::Headers => "command and headers",
        })
    }
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::TooLarge {
                limit: Limit::HeaderCount,
                size,
                max,
            } => write!(f, "frame has {size} headers, more than the limit of {max}"),
            FrameError::TooLarge { limit, size, max } => write!(
                f,
                "frame {limit} too large: {size} bytes or more, the limit is {max} bytes"
            ),
            FrameError::UnknownCommand(command) => {
                write!(f, "unknown STOMP command '{command}'")
            }
            FrameError::HeaderWithoutColon(line) => {
                write!(f, "header '{line}' has no ':' between name and value")
            }
            FrameError::InvalidEscape {
                line,
                escape: Some(byte),
            } => write!(
                f,
                "invalid escape sequence '\\{}' in header '{line}' (defined: \\r \\n \\c \\\\)",
                byte.escape_ascii()
            ),
            FrameError::InvalidEscape { line, escape: None } => {
                write!(f, "header '{line}' ends with an unfinished escape '\\'")
            }
            FrameError::UnexpectedCarriageReturn => f.write_str(
                "carriage return not followed by a line feed (only LF and CR LF end a line)",
            ),
            FrameError::InvalidUtf8(line) => {
                write!(f, "header or command '{line}' is not valid UTF-8")
            }
            FrameError::InvalidContentLength(value) => write!(
                f,
                "content-length '{value}' is not a non-negative decimal integer"
            ),
            FrameError::MissingNul {
                content_length,
                found,
            } => write!(
                f,
                "frame body of content-length {content_length} is followed by byte 0x{found:02X} \
                 instead of NUL: content-length does not match the body"
            ),
        }
    }
}

impl std::error::Error for FrameError {}

/// How much of a peer's bytes go into an error message: enough to recognise the line, not so
/// much that a hostile peer makes the ERROR frame huge.
pub(crate) const ERROR_EXCERPT: usize = 120;

/// Peer bytes made printable for an error message, cut at [`ERROR_EXCERPT`] characters.
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text.chars().take(ERROR_EXCERPT).collect();
    if text.chars().nth(ERROR_EXCERPT).is_some() {
        out.push_str("...");
    }
    out
}
