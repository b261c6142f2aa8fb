//! What CONNECT settles: the protocol version and the heart-beat intervals.

use super::frame::Version;

/// Picks the version for a connection from the client's `accept-version` header.
///
/// No header means a STOMP 1.0 client (spec: "the server MUST assume STOMP 1.0"). Otherwise
/// the header is a comma-separated list, and the highest version both sides support wins;
/// versions we do not know (a future "1.3") are ignored. With nothing in common, the error is
/// the text RabbitMQ puts in its "Version mismatch" ERROR frame, e.g. "Supported versions are
/// 1.0,1.1,1.2".
pub fn negotiate_version(
    accept_version: Option<&str>,
    supported: &[Version],
) -> Result<Version, String> {
    let chosen = match accept_version {
        None => supported.contains(&Version::V1_0).then_some(Version::V1_0),
        Some(list) => list
            .split(',')
            .filter_map(|item| Version::from_str_opt(item.trim()))
            .filter(|version| supported.contains(version))
            .max(),
    };
    chosen.ok_or_else(|| {
        let mut versions = supported.to_vec();
        versions.sort();
        versions.dedup();
        let list: Vec<&str> = versions.iter().map(|version| version.as_str()).collect();
        format!("Supported versions are {}", list.join(","))
    })
}

/// Settles heart-beats from the client's `heart-beat` header (`cx,cy`: the client can send
/// every `cx` ms and wants to receive every `cy` ms) and the server's own `server_cx` (how
/// often it can send) and `server_cy` (how often it wants to receive).
///
/// Returns `(send_ms, expect_ms)`: how often the server sends heart-beats, and how often it
/// should hear from the client. Per the spec, each direction is the larger of what the sender
/// can do and what the receiver wants, and 0 (off) if either side says 0. No header means no
/// heart-beats. Spaces around the numbers are tolerated; anything else malformed is an error,
/// as the client asked for something we cannot understand.
pub fn negotiate_heartbeat(
    client: Option<&str>,
    server_cx: u32,
    server_cy: u32,
) -> Result<(u32, u32), String> {
    let Some(header) = client else {
        return Ok((0, 0));
    };
    let invalid = || {
        format!(
            "heart-beat header '{}' is not two comma-separated non-negative integers",
            header.escape_debug()
        )
    };
    let (client_cx, client_cy) = header.split_once(',').ok_or_else(invalid)?;
    let parse = |text: &str| {
        let digits = text.trim();
        if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(invalid());
        }
        digits.parse::<u32>().map_err(|_| invalid())
    };
    let (client_cx, client_cy) = (parse(client_cx)?, parse(client_cy)?);
    let interval = |sender: u32, receiver: u32| {
        if sender == 0 || receiver == 0 {
            0
        } else {
            sender.max(receiver)
        }
    };
    Ok((
        interval(server_cx, client_cy),
        interval(client_cx, server_cy),
    ))
}
