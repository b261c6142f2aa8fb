//! The encoder: frames into bytes, escaping headers as the version requires.
//!
//! Every frame with a body gets a correct `content-length`, whatever the caller put in the
//! headers, so a body containing NUL never ends a frame early and a wrong length can never
//! desynchronise the peer. That is RabbitMQ's rule too (it drops any given content-length and
//! writes the body's).

use bytes::{BufMut, BytesMut};

use super::frame::{Command, Frame, Version};

/// A heart-beat: one EOL. Also what RabbitMQ writes after every frame (`stomp.trailing_lf`,
/// on by default), for clients that read frames line by line.
pub const HEARTBEAT: &[u8] = b"\n";

const CONTENT_LENGTH: &str = "content-length";

/// Which characters are written as escapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escaping {
    /// STOMP 1.1 and 1.2, outside CONNECT/CONNECTED: `\` LF CR and `:` everywhere.
    Full,
    /// STOMP 1.0 and CONNECT/CONNECTED: no escaping is defined, so a backslash goes out as
    /// it is. LF and CR (and `:` in a name) still cannot go out raw, as they would end the
    /// header and let a header value inject others; they are written as 1.1 escapes, as
    /// RabbitMQ does in every version. A 1.0 peer sees e.g. `\n` literally, which beats a
    /// broken stream.
    Verbatim,
}

impl Escaping {
    fn for_frame(command: Command, version: Version) -> Escaping {
        if version.escapes_headers() && !command.headers_are_verbatim() {
            Escaping::Full
        } else {
            Escaping::Verbatim
        }
    }

    fn escape(self, byte: u8, in_name: bool) -> Option<&'static [u8]> {
        match (byte, self) {
            (b'\n', _) => Some(b"\\n"),
            (b'\r', _) => Some(b"\\r"),
            (b':', Escaping::Full) => Some(b"\\c"),
            (b':', Escaping::Verbatim) if in_name => Some(b"\\c"),
            (b'\\', Escaping::Full) => Some(b"\\\\"),
            _ => None,
        }
    }
}

/// Writes `frame` to `out` for a peer speaking `version`.
///
/// Header order is kept. A `content-length` header, wherever the caller put it, is written
/// with the body's real length (once; repeats are dropped); without one, it is added after the
/// other headers when the body is not empty.
pub fn encode(frame: &Frame, version: Version, out: &mut BytesMut) {
    let escaping = Escaping::for_frame(frame.command, version);
    let headers_len: usize = frame
        .headers
        .iter()
        .map(|(name, value)| name.len() + value.len() + 2)
        .sum();
    out.reserve(frame.command.as_str().len() + headers_len + frame.body.len() + 32);
    out.put_slice(frame.command.as_str().as_bytes());
    out.put_u8(b'\n');
    let mut wrote_length = false;
    for (name, value) in &frame.headers {
        if name == CONTENT_LENGTH {
            if !wrote_length {
                write_content_length(out, frame.body.len());
                wrote_length = true;
            }
            continue;
        }
        write_header(out, escaping, name, value);
    }
    if !wrote_length && !frame.body.is_empty() {
        write_content_length(out, frame.body.len());
    }
    out.put_u8(b'\n');
    out.put_slice(&frame.body);
    out.put_u8(0);
}

/// Writes a MESSAGE frame without building a [`Frame`]: the delivery hot path.
///
/// `destination`, `message-id` and `subscription` come first, then `ack` (the 1.2 header a
/// client-ack subscriber acknowledges with) when given, then `extra_headers` (the message's
/// own headers), then `content-length` when the body is not empty. Because the first
/// occurrence of a header wins, an extra header cannot override the ones the broker sets; a
/// `content-length` among the extras is dropped in favour of the real one.
#[allow(clippy::too_many_arguments)]
pub fn encode_message(
    out: &mut BytesMut,
    version: Version,
    destination: &str,
    message_id: &str,
    subscription: &str,
    ack: Option<&str>,
    extra_headers: &[(&str, &str)],
    body: &[u8],
) {
    let escaping = Escaping::for_frame(Command::Message, version);
    let extras_len: usize = extra_headers
        .iter()
        .map(|(name, value)| name.len() + value.len() + 2)
        .sum();
    out.reserve(
        destination.len()
            + message_id.len()
            + subscription.len()
            + ack.map_or(0, str::len)
            + extras_len
            + body.len()
            + 96,
    );
    out.put_slice(b"MESSAGE\n");
    write_header(out, escaping, "destination", destination);
    write_header(out, escaping, "message-id", message_id);
    write_header(out, escaping, "subscription", subscription);
    if let Some(ack) = ack {
        write_header(out, escaping, "ack", ack);
    }
    for (name, value) in extra_headers {
        if *name != CONTENT_LENGTH {
            write_header(out, escaping, name, value);
        }
    }
    if !body.is_empty() {
        write_content_length(out, body.len());
    }
    out.put_u8(b'\n');
    out.put_slice(body);
    out.put_u8(0);
}

fn write_content_length(out: &mut BytesMut, length: usize) {
    out.put_slice(b"content-length:");
    // usize::MAX has 20 digits.
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = length;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    out.put_slice(&digits[start..]);
    out.put_u8(b'\n');
}

fn write_header(out: &mut BytesMut, escaping: Escaping, name: &str, value: &str) {
    write_escaped(out, escaping, name.as_bytes(), true);
    out.put_u8(b':');
    write_escaped(out, escaping, value.as_bytes(), false);
    out.put_u8(b'\n');
}

/// Copies `text` in runs between the bytes that need escaping; most header text has none and
/// goes out in one copy.
fn write_escaped(out: &mut BytesMut, escaping: Escaping, text: &[u8], in_name: bool) {
    let mut run_start = 0;
    for (index, &byte) in text.iter().enumerate() {
        if let Some(escaped) = escaping.escape(byte, in_name) {
            out.put_slice(&text[run_start..index]);
            out.put_slice(escaped);
            run_start = index + 1;
        }
    }
    out.put_slice(&text[run_start..]);
}
