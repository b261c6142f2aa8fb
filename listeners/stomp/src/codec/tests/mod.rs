//! The codec's tests: literal frames as clients send them, limits, errors and split input
//! (`decode`), frames out and CONNECT negotiation (`encode`), and properties over arbitrary
//! input (`properties`).

use bytes::BytesMut;

use super::*;

mod decode;
mod encode;
mod properties;

fn decoder(version: Version) -> Decoder {
    let mut decoder = Decoder::default();
    decoder.set_version(version);
    decoder
}

/// Decodes everything in `bytes`; panics (test failure) on an error or leftover bytes.
fn decode_all(version: Version, bytes: &[u8]) -> Vec<Decoded> {
    let mut decoder = decoder(version);
    let mut buf = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(decoded) = decoder.decode(&mut buf).expect("decodes") {
        out.push(decoded);
    }
    assert!(buf.is_empty(), "left over: {buf:?}");
    out
}

fn decode_one(version: Version, bytes: &[u8]) -> Frame {
    let mut frames = decode_all(version, bytes)
        .into_iter()
        .filter_map(|decoded| match decoded {
            Decoded::Frame(frame) => Some(frame),
            Decoded::Heartbeat => None,
        });
    let frame = frames.next().expect("a frame");
    assert!(frames.next().is_none());
    frame
}

fn decode_err(version: Version, limits: Limits, bytes: &[u8]) -> FrameError {
    let mut decoder = Decoder::new(limits);
    decoder.set_version(version);
    let mut buf = BytesMut::from(bytes);
    loop {
        match decoder.decode(&mut buf) {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("no error, waiting for more"),
            Err(error) => return error,
        }
    }
}

fn headers(frame: &Frame) -> Vec<(&str, &str)> {
    frame
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect()
}

fn encoded(frame: &Frame, version: Version) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode(frame, version, &mut out);
    out.to_vec()
}
