//! The streaming decoder: bytes in, [`Decoded`] heart-beats and frames out.
//!
//! A frame is `command EOL *(header EOL) EOL body NUL`, where EOL is LF or CR LF. The decoder
//! works line by line on the bytes already buffered: each complete line is checked against
//! the limits and parsed once, and how far it got is kept in the decoder, so a frame that
//! arrives a few bytes at a time is scanned once in total, not once per read. Nothing is
//! taken off the buffer until a whole frame (or a heart-beat) is there; the body is then split
//! off without copying.
//!
//! Lenient where RabbitMQ's `rabbit_stomp_frame` parser is, strict where it is:
//!
//! - CR LF ends a line in every version, not only 1.2 (RabbitMQ: "CR LF is equivalent to LF
//!   in all element terminators"); a CR anywhere else in the command or a header is an error.
//! - NULs and EOLs between frames are noise; each EOL is reported as a heart-beat.
//! - A header line without `:` is fatal, in 1.0 too; header values may contain raw colons
//!   (only the first one separates name and value); an empty header name is accepted.
//! - In 1.1 and 1.2, `\r`, `\n`, `\c` and `\\` are the escapes (RabbitMQ accepts `\r` in 1.1
//!   as well, so do we); any other escape is fatal.
//! - The first occurrence of a repeated header wins.
//!
//! Where we follow the spec instead of RabbitMQ: CONNECT, STOMP and CONNECTED headers, and
//! every header in 1.0, are taken verbatim (RabbitMQ unescapes them too, so a 1.0 passcode
//! with a backslash would fail there); `content-length` frames the body of every command, not
//! only SEND; and headers must be UTF-8.

use bytes::{Buf, BytesMut};
use memchr::memchr;

use super::frame::{excerpt, Command, Frame, FrameError, Limit, Version};

/// How large a peer's frames may be. Checked while bytes arrive, so an oversized frame fails
/// as soon as it is known to be too large, before it is buffered whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest body, in bytes. Default 4 MiB, RabbitMQ's `stomp.max_frame_size` default
    /// (which RabbitMQ applies to the whole frame; the header limits below cover the rest).
    pub max_frame_size: usize,
    /// The most header lines in one frame, repeats included. Default 1000.
    pub max_header_count: usize,
    /// The longest single line (the command or one header), without its EOL. Default 100 KiB.
    pub max_header_length: usize,
    /// The most bytes from the start of the command to the blank line that ends the headers.
    /// Default 1 MiB.
    pub max_headers_size: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_frame_size: 4 * 1024 * 1024,
            max_header_count: 1000,
            max_header_length: 100 * 1024,
            max_headers_size: 1024 * 1024,
        }
    }
}

/// What one call to [`Decoder::decode`] took off the buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// An EOL between frames: the peer's heart-beat (or the optional EOL after a frame). Any
    /// bytes from the peer prove it alive; this is how a session learns it without a frame.
    Heartbeat,
    /// A complete frame.
    Frame(Frame),
}

/// Where the decoder is in the frame at the front of the buffer.
#[derive(Debug)]
enum State {
    /// Reading the command and header lines. Everything before `scanned` is complete lines,
    /// already checked and parsed into `command` and `headers`; the line after it has no LF
    /// before `searched`, so a long line arriving in pieces is searched once, not per piece.
    Head {
        scanned: usize,
        searched: usize,
        command: Option<FrameStart>,
        headers: Vec<(String, String)>,
    },
    /// The headers are complete (`head_len` bytes including the blank line); waiting for the
    /// body and its NUL.
    Body {
        command: Command,
        headers: Vec<(String, String)>,
        head_len: usize,
        framing: BodyFraming,
    },
}

impl State {
    fn start() -> State {
        State::Head {
            scanned: 0,
            searched: 0,
            command: None,
            headers: Vec::new(),
        }
    }
}

/// What the command line settled for the rest of the frame.
#[derive(Debug, Clone, Copy)]
struct FrameStart {
    command: Command,
    /// Whether header escapes are resolved: fixed when the command is read, so a
    /// [`Decoder::set_version`] only ever affects whole frames.
    unescape: bool,
}

#[derive(Debug, Clone, Copy)]
enum BodyFraming {
    /// `content-length` said how many bytes; a NUL must follow them.
    Length(usize),
    /// No `content-length`: the body ends at the first NUL. Bytes before `scanned` hold none.
    UntilNul { scanned: usize },
}

/// A streaming STOMP frame decoder for one connection.
///
/// Feed it the connection's read buffer: append what the socket gives, call
/// [`decode`](Decoder::decode) until it returns `Ok(None)`, repeat. The decoder remembers how
/// far it has scanned the frame at the front of that buffer, so always pass the same buffer
/// and do not take bytes off it in between. After an error the connection must be closed.
#[derive(Debug)]
pub struct Decoder {
    version: Version,
    limits: Limits,
    state: State,
}

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder::new(Limits::default())
    }
}

impl Decoder {
    /// A decoder for a new connection: STOMP 1.0 rules until [`set_version`]
    /// (Decoder::set_version) is called after CONNECT. The first frame is CONNECT or STOMP,
    /// whose headers are never escaped, so starting at 1.0 decodes it correctly whatever
    /// version the client asks for.
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            version: Version::V1_0,
            limits,
            state: State::start(),
        }
    }

    /// The version whose rules are applied.
    pub fn version(&self) -> Version {
        self.version
    }

    /// Switches to the version negotiated at CONNECT. Applies from the next frame whose command
    /// line has not been read yet; call it after handling CONNECT, before decoding again.
    pub fn set_version(&mut self, version: Version) {
        self.version = version;
    }

    /// Replaces the limits (a session raises them after login). Applies to the rest of the
    /// frame being read, too.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Takes the next heart-beat or frame off the front of `buf`.
    ///
    /// Returns `Ok(None)` when `buf` holds no complete one yet: nothing is consumed and, for
    /// the command and headers, the lines complete so far are remembered, not re-scanned. A
    /// frame's body is split off `buf` without copying.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, FrameError> {
        let result = self.decode_inner(buf);
        if result.is_err() {
            // The stream is out of sync; make sure no stale offset survives into a later call.
            self.state = State::start();
        }
        result
    }

    fn decode_inner(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, FrameError> {
        if self.state_is_past(buf.len()) {
            // Bytes were taken off the buffer behind our back: start over rather than index
            // past its end.
            self.state = State::start();
        }
        if matches!(
            self.state,
            State::Head {
                scanned: 0,
                command: None,
                ..
            }
        ) {
            // Between frames: NULs are skipped, an EOL is a heart-beat.
            let nuls = buf.iter().take_while(|&&byte| byte == 0).count();
            buf.advance(nuls);
            match (buf.first(), buf.get(1)) {
                (None, _) | (Some(b'\r'), None) => return Ok(None),
                (Some(b'\n'), _) => {
                    buf.advance(1);
                    return Ok(Some(Decoded::Heartbeat));
                }
                (Some(b'\r'), Some(b'\n')) => {
                    buf.advance(2);
                    return Ok(Some(Decoded::Heartbeat));
                }
                (Some(b'\r'), Some(_)) => return Err(FrameError::UnexpectedCarriageReturn),
                _ => {}
            }
        }
        if let State::Head { .. } = self.state {
            if !self.read_head(buf)? {
                return Ok(None);
            }
        }
        self.read_body(buf)
    }

    fn state_is_past(&self, len: usize) -> bool {
        match &self.state {
            State::Head {
                scanned, searched, ..
            } => *scanned > len || *searched > len,
            State::Body {
                head_len, framing, ..
            } => {
                *head_len > len
                    || matches!(framing, BodyFraming::UntilNul { scanned } if *scanned > len)
            }
        }
    }

    /// Reads complete command and header lines; true once the blank line ending the headers
    /// has been read and the state moved to [`State::Body`].
    fn read_head(&mut self, buf: &BytesMut) -> Result<bool, FrameError> {
        let limits = self.limits;
        let version = self.version;
        let State::Head {
            scanned,
            searched,
            command,
            headers,
        } = &mut self.state
        else {
            return Ok(true);
        };
        loop {
            let rest = buf.get(*scanned..).unwrap_or_default();
            let search_from = searched.saturating_sub(*scanned);
            let unsearched = rest.get(search_from..).unwrap_or_default();
            let Some(offset) = memchr(b'\n', unsearched).map(|offset| search_from + offset) else {
                // An incomplete line: fail now if it can only end up too long.
                check(Limit::HeaderLine, rest.len(), limits.max_header_length)?;
                check(Limit::Headers, buf.len(), limits.max_headers_size)?;
                *searched = buf.len();
                return Ok(false);
            };
            let line = strip_cr(&rest[..offset]);
            let line_end = *scanned + offset + 1;
            check(Limit::HeaderLine, line.len(), limits.max_header_length)?;
            check(Limit::Headers, line_end, limits.max_headers_size)?;
            if memchr(b'\r', line).is_some() {
                return Err(FrameError::UnexpectedCarriageReturn);
            }
            *scanned = line_end;
            *searched = line_end;
            match *command {
                None => {
                    let parsed = Command::from_bytes(line)
                        .ok_or_else(|| FrameError::UnknownCommand(excerpt(line)))?;
                    *command = Some(FrameStart {
                        command: parsed,
                        unescape: version.escapes_headers() && !parsed.headers_are_verbatim(),
                    });
                }
                Some(start) if line.is_empty() => {
                    let framing = match content_length(headers)? {
                        Some(length) => {
                            check(Limit::Body, length, limits.max_frame_size)?;
                            BodyFraming::Length(length)
                        }
                        None => BodyFraming::UntilNul { scanned: line_end },
                    };
                    self.state = State::Body {
                        command: start.command,
                        headers: std::mem::take(headers),
                        head_len: line_end,
                        framing,
                    };
                    return Ok(true);
                }
                Some(start) => {
                    check(
                        Limit::HeaderCount,
                        headers.len() + 1,
                        limits.max_header_count,
                    )?;
                    headers.push(parse_header(line, start.unescape)?);
                }
            }
        }
    }

    /// With the headers read, waits for the body and its NUL and takes the frame off `buf`.
    fn read_body(&mut self, buf: &mut BytesMut) -> Result<Option<Decoded>, FrameError> {
        let max = self.limits.max_frame_size;
        let State::Body {
            head_len, framing, ..
        } = &mut self.state
        else {
            return Ok(None);
        };
        let head_len = *head_len;
        let body_len = match framing {
            BodyFraming::Length(length) => {
                let nul_at = head_len.saturating_add(*length);
                let Some(&found) = buf.get(nul_at) else {
                    return Ok(None);
                };
                if found != 0 {
                    return Err(FrameError::MissingNul {
                        content_length: *length,
                        found,
                    });
                }
                *length
            }
            BodyFraming::UntilNul { scanned } => {
                let rest = buf.get(*scanned..).unwrap_or_default();
                match memchr(0, rest) {
                    Some(offset) => {
                        let body_len = *scanned + offset - head_len;
                        check(Limit::Body, body_len, max)?;
                        body_len
                    }
                    None => {
                        *scanned = buf.len();
                        check(Limit::Body, buf.len() - head_len, max)?;
                        return Ok(None);
                    }
                }
            }
        };
        let State::Body {
            command, headers, ..
        } = std::mem::replace(&mut self.state, State::start())
        else {
            return Ok(None);
        };
        buf.advance(head_len);
        let body = buf.split_to(body_len).freeze();
        buf.advance(1);
        Ok(Some(Decoded::Frame(Frame {
            command,
            headers,
            body,
        })))
    }
}

fn check(limit: Limit, size: usize, max: usize) -> Result<(), FrameError> {
    if size > max {
        return Err(FrameError::TooLarge { limit, size, max });
    }
    Ok(())
}

/// The line without the CR of a CR LF ending.
fn strip_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// The first `content-length` header as a byte count. Spaces around the digits are allowed,
/// as RabbitMQ strips them; a value too large for memory saturates, to fail the size limit.
fn content_length(headers: &[(String, String)]) -> Result<Option<usize>, FrameError> {
    let Some((_, value)) = headers.iter().find(|(name, _)| name == "content-length") else {
        return Ok(None);
    };
    let digits = value.trim_matches(' ');
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(FrameError::InvalidContentLength(excerpt(value.as_bytes())));
    }
    Ok(Some(digits.bytes().fold(0usize, |length, digit| {
        length
            .saturating_mul(10)
            .saturating_add(usize::from(digit - b'0'))
    })))
}

/// Splits a header line at its first colon and decodes name and value.
fn parse_header(line: &[u8], unescape: bool) -> Result<(String, String), FrameError> {
    let Some(colon) = memchr(b':', line) else {
        return Err(FrameError::HeaderWithoutColon(excerpt(line)));
    };
    let name = header_text(&line[..colon], line, unescape)?;
    let value = header_text(&line[colon + 1..], line, unescape)?;
    Ok((name, value))
}

/// One side of a header as a string, with escapes resolved when the version has them.
/// Escapes map ASCII to ASCII, so UTF-8 validity can be checked before resolving them.
fn header_text(raw: &[u8], line: &[u8], unescape: bool) -> Result<String, FrameError> {
    let text = std::str::from_utf8(raw).map_err(|_| FrameError::InvalidUtf8(excerpt(line)))?;
    if !unescape || memchr(b'\\', raw).is_none() {
        return Ok(text.to_owned());
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(backslash) = rest.find('\\') {
        out.push_str(&rest[..backslash]);
        let escape = rest.as_bytes().get(backslash + 1).copied();
        out.push(match escape {
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b'c') => ':',
            Some(b'\\') => '\\',
            _ => {
                return Err(FrameError::InvalidEscape {
                    line: excerpt(line),
                    escape,
                })
            }
        });
        // The escape byte is ASCII, so backslash + 2 is a character boundary.
        rest = &rest[backslash + 2..];
    }
    out.push_str(rest);
    Ok(out)
}
