//! The MQTT data representations (section 1.5): big-endian 16-bit integers, length-prefixed
//! UTF-8 strings and binary data, and the variable-length remaining length (section 2.2.3).
//!
//! [`Reader`] walks one packet's body, which is already complete in memory when it is made,
//! so running out of bytes there means the packet lied about its contents: malformed, not
//! "wait for more". Binary fields are split off the body without copying.

use std::borrow::Cow;

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::error::{DecodeError, EncodeError, StringProblem};

/// The largest remaining length four bytes of variable-length encoding can carry.
pub const MAX_REMAINING_LENGTH: usize = 268_435_455;

/// The most bytes a remaining length may take.
pub(crate) const MAX_REMAINING_LENGTH_BYTES: usize = 4;

/// The largest string or binary field a 16-bit length prefix can announce.
pub(crate) const MAX_FIELD_LENGTH: usize = u16::MAX as usize;

/// A cursor over one packet's body (everything after the fixed header).
pub(crate) struct Reader {
    rest: Bytes,
    /// The packet's name, for error messages.
    packet: &'static str,
}

impl Reader {
    pub(crate) fn new(body: Bytes, packet: &'static str) -> Self {
        Reader { rest: body, packet }
    }

    fn truncated(&self, field: &'static str) -> DecodeError {
        DecodeError::Malformed(Cow::Owned(format!(
            "{} ends before its {field}",
            self.packet
        )))
    }

    /// Bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        if self.rest.is_empty() {
            return Err(self.truncated(field));
        }
        Ok(self.rest.get_u8())
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        if self.rest.len() < 2 {
            return Err(self.truncated(field));
        }
        Ok(self.rest.get_u16())
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        if self.rest.len() < 4 {
            return Err(self.truncated(field));
        }
        Ok(self.rest.get_u32())
    }

    /// An MQTT 5 variable byte integer (section 1.5.5 of MQTT 5): one to four bytes, seven
    /// bits each. Running out of bytes, or a fourth byte with its continuation bit, is
    /// malformed.
    pub(crate) fn variable_integer(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        match read_remaining_length(&self.rest)? {
            RemainingLength::Complete { value, bytes } => {
                self.rest.advance(bytes);
                Ok(value as u32)
            }
            RemainingLength::Incomplete => Err(self.truncated(field)),
        }
    }

    /// Splits off the next `len` bytes as a reader of their own (an MQTT 5 property list).
    pub(crate) fn sub_reader(
        &mut self,
        len: usize,
        field: &'static str,
    ) -> Result<Reader, DecodeError> {
        if self.rest.len() < len {
            return Err(self.truncated(field));
        }
        Ok(Reader {
            rest: self.rest.split_to(len),
            packet: self.packet,
        })
    }

    /// A packet identifier, which must not be 0 (MQTT-2.3.1-1).
    pub(crate) fn packet_id(&mut self) -> Result<u16, DecodeError> {
        let id = self.u16("packet identifier")?;
        if id == 0 {
            return Err(DecodeError::Malformed(Cow::Owned(format!(
                "{} packet identifier is 0 (MQTT-2.3.1-1)",
                self.packet
            ))));
        }
        Ok(id)
    }

    /// Length-prefixed binary data, shared with the packet's memory.
    pub(crate) fn binary(&mut self, field: &'static str) -> Result<Bytes, DecodeError> {
        let len = usize::from(self.u16(field)?);
        if self.rest.len() < len {
            return Err(self.truncated(field));
        }
        Ok(self.rest.split_to(len))
    }

    /// A UTF-8 encoded string (section 1.5.3): valid UTF-8 without U+0000.
    pub(crate) fn string(&mut self, field: &'static str) -> Result<String, DecodeError> {
        let raw = self.binary(field)?;
        let text = std::str::from_utf8(&raw).map_err(|_| DecodeError::InvalidUtf8 {
            field,
            problem: StringProblem::NotUtf8,
        })?;
        // U+0000 is the only character whose UTF-8 encoding contains a zero byte.
        if raw.contains(&0) {
            return Err(DecodeError::InvalidUtf8 {
                field,
                problem: StringProblem::ContainsNul,
            });
        }
        Ok(text.to_owned())
    }

    /// Everything not yet read, shared with the packet's memory.
    pub(crate) fn rest(self) -> Bytes {
        self.rest
    }

    /// Fails if bytes are left over: the remaining length announced more than the fields.
    pub(crate) fn finish(&self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::Malformed(Cow::Owned(format!(
                "{} has {} unexpected bytes after its last field",
                self.packet,
                self.rest.len()
            ))))
        }
    }
}

/// What reading a remaining length found.
pub(crate) enum RemainingLength {
    /// The value and how many bytes encoded it.
    Complete { value: usize, bytes: usize },
    /// The buffer ends inside the remaining length.
    Incomplete,
}

/// Reads a variable-length remaining length from the start of `bytes` (section 2.2.3).
///
/// At most four bytes may be used; a fourth byte with its continuation bit set is malformed
/// (the encoding would exceed 268435455). Non-minimal encodings (e.g. `0x80 0x00` for 0)
/// are accepted: 3.1.1 does not forbid them and Mosquitto and mqttbytes accept them too.
pub(crate) fn read_remaining_length(bytes: &[u8]) -> Result<RemainingLength, DecodeError> {
    let mut value = 0usize;
    for index in 0..MAX_REMAINING_LENGTH_BYTES {
        let Some(&byte) = bytes.get(index) else {
            return Ok(RemainingLength::Incomplete);
        };
        value |= usize::from(byte & 0x7F) << (7 * index);
        if byte & 0x80 == 0 {
            return Ok(RemainingLength::Complete {
                value,
                bytes: index + 1,
            });
        }
    }
    Err(DecodeError::malformed(
        "remaining length continues past 4 bytes (section 2.2.3)",
    ))
}

/// How many bytes `len` takes as a remaining length.
pub(crate) const fn remaining_length_size(len: usize) -> usize {
    match len {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    }
}

/// Writes a remaining length the caller has checked is at most [`MAX_REMAINING_LENGTH`].
pub(crate) fn write_remaining_length(out: &mut BytesMut, mut len: usize) {
    loop {
        let byte = (len % 128) as u8;
        len /= 128;
        if len == 0 {
            out.put_u8(byte);
            return;
        }
        out.put_u8(byte | 0x80);
    }
}

/// Writes an MQTT 5 variable byte integer (at most [`MAX_REMAINING_LENGTH`]).
pub(crate) fn write_variable_integer(out: &mut BytesMut, value: u32) {
    write_remaining_length(out, value as usize);
}

/// Checks a remaining length fits the protocol's limit.
pub(crate) fn check_remaining_length(len: usize) -> Result<(), EncodeError> {
    if len > MAX_REMAINING_LENGTH {
        Err(EncodeError::TooLarge { size: len })
    } else {
        Ok(())
    }
}

/// The encoded size of a length-prefixed field, or an error if it is too long.
pub(crate) fn field_size(field: &'static str, value: &[u8]) -> Result<usize, EncodeError> {
    if value.len() > MAX_FIELD_LENGTH {
        Err(EncodeError::StringTooLong {
            field,
            len: value.len(),
        })
    } else {
        Ok(2 + value.len())
    }
}

/// Writes a length-prefixed field whose length the caller has checked with
/// [`field_size`].
pub(crate) fn write_field(out: &mut BytesMut, value: &[u8]) {
    out.put_u16(value.len() as u16);
    out.put_slice(value);
}
