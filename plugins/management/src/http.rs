//! The request and response the handlers see (the server in [`crate::server`] builds them
//! from hyper's after its layers ran), percent-encoding of path segments and query strings,
//! and a small sans-IO client side (encode a request, parse a `Content-Length` response)
//! that tests use to speak raw HTTP/1.1.

use std::fmt::Write as _;

/// A request with its body read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET`, `PUT`, ...
    pub method: String,
    /// The path as sent, still percent-encoded (segments are decoded by [`Request::segments`]).
    pub path: String,
    /// The query string after `?`, still encoded.
    pub query: String,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Request {
    /// The first header called `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The path split on `/` with each segment percent-decoded (so `%2F` is the vhost `/`).
    /// `None` if a segment is not valid UTF-8 after decoding.
    pub fn segments(&self) -> Option<Vec<String>> {
        self.path
            .split('/')
            .filter(|s| !s.is_empty())
            .map(percent_decode)
            .collect()
    }

    /// The decoded value of query parameter `name`.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(key)? == name).then(|| percent_decode(&value.replace('+', " ")))?
        })
    }
}

/// Why a response could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The status line or a header is malformed.
    Malformed(&'static str),
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Decodes `%XX` escapes; `None` for a bad escape or invalid UTF-8.
pub fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = bytes.get(index + 1..index + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Encodes everything but unreserved characters, for one path segment (`/` becomes `%2F`).
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

/// An HTTP response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// A message store sequence number that must be on disk before the response is sent
    /// (a persistent message published to a durable queue is answered once it is safe, as
    /// RabbitMQ answers after its publisher confirm).
    pub wait_for_store: Option<u64>,
}

impl Response {
    /// A JSON response.
    pub fn json(status: u16, body: &serde_json::Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: body.to_string().into_bytes(),
            wait_for_store: None,
        }
    }

    /// A response with no body (204 No Content and friends).
    pub fn empty(status: u16) -> Response {
        Response {
            status,
            content_type: "text/plain",
            headers: Vec::new(),
            body: Vec::new(),
            wait_for_store: None,
        }
    }

    /// A plain-text response.
    pub fn text(status: u16, content_type: &'static str, body: String) -> Response {
        Response {
            status,
            content_type,
            headers: Vec::new(),
            body: body.into_bytes(),
            wait_for_store: None,
        }
    }

    /// Encodes status line, headers and body.
    pub fn encode(&self, keep_alive: bool) -> Vec<u8> {
        let mut head = format!("HTTP/1.1 {} {}\r\n", self.status, reason(self.status));
        if !(self.status == 204 || self.status == 304) {
            let _ = write!(
                head,
                "content-type: {}\r\ncontent-length: {}\r\n",
                self.content_type,
                self.body.len()
            );
        }
        for (name, value) in &self.headers {
            let _ = write!(head, "{name}: {value}\r\n");
        }
        head.push_str(if keep_alive {
            "connection: keep-alive\r\n\r\n"
        } else {
            "connection: close\r\n\r\n"
        });
        let mut out = head.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

/// The reason phrase of a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// A response as the client side reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientResponse {
    /// The status code.
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl ClientResponse {
    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Parses a response with a `Content-Length` body (what this server and RabbitMQ send for
/// the API): `Ok(None)` when more bytes are needed.
pub fn parse_response(buffer: &[u8]) -> Result<Option<ClientResponse>, ParseError> {
    let Some(head_end) = find(buffer, b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buffer[..head_end])
        .map_err(|_| ParseError::Malformed("response head is not UTF-8"))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or(ParseError::Malformed("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .unwrap_or(0);
    let start = head_end + 4;
    if buffer.len() < start + length {
        return Ok(None);
    }
    Ok(Some(ClientResponse {
        status,
        headers,
        body: buffer[start..start + length].to_vec(),
    }))
}

/// Encodes a client request with basic auth and an optional JSON body.
pub fn encode_request(
    method: &str,
    path: &str,
    host: &str,
    credentials: Option<(&str, &str)>,
    body: Option<&[u8]>,
) -> Vec<u8> {
    encode_request_with(method, path, host, credentials, &[], body)
}

/// [`encode_request`] with extra headers (such as `X-Reason`).
pub fn encode_request_with(
    method: &str,
    path: &str,
    host: &str,
    credentials: Option<(&str, &str)>,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Vec<u8> {
    use base64::Engine;
    let mut head = format!("{method} {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n");
    for (name, value) in headers {
        let _ = write!(head, "{name}: {value}\r\n");
    }
    if let Some((user, password)) = credentials {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let _ = write!(head, "authorization: Basic {token}\r\n");
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() || method == "PUT" || method == "POST" {
        let _ = write!(
            head,
            "content-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        );
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    out.extend_from_slice(body);
    out
}

/// Sends one request to `addr` (`HOST:PORT`) and reads the response (one connection per
/// request).
pub async fn send(
    addr: &str,
    method: &str,
    path: &str,
    credentials: Option<(&str, &str)>,
    body: Option<&[u8]>,
) -> std::io::Result<ClientResponse> {
    send_with(addr, method, path, credentials, &[], body).await
}

/// [`send`] with extra headers, over [`crate::client::HttpClient`] (plain HTTP, the default
/// timeout).
pub async fn send_with(
    addr: &str,
    method: &str,
    path: &str,
    credentials: Option<(&str, &str)>,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> std::io::Result<ClientResponse> {
    let invalid = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("'{addr}' is not HOST:PORT"),
        )
    };
    let (host, port) = addr.rsplit_once(':').ok_or_else(invalid)?;
    let port = port.parse().map_err(|_| invalid())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    crate::client::HttpClient::new(host, port)
        .request(method, path, credentials, headers, body)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn segments_decode_the_default_vhost_and_query_parameters_decode() {
        let request = Request {
            method: "PUT".into(),
            path: "/api/queues/%2F/orders".into(),
            query: "x=1&name=a+b%21".into(),
            headers: vec![("host".into(), "h".into())],
            body: b"{}".to_vec(),
        };
        assert_eq!(
            request.segments().unwrap(),
            ["api", "queues", "/", "orders"]
        );
        assert_eq!(request.query_param("x").as_deref(), Some("1"));
        assert_eq!(request.query_param("name").as_deref(), Some("a b!"));
        assert_eq!(request.header("host"), Some("h"));
        let bad = Request {
            path: "/api/%zz".into(),
            ..request
        };
        assert_eq!(bad.segments(), None);
    }

    #[test]
    fn responses_round_trip_through_the_client_parser() {
        let response = Response::json(201, &serde_json::json!({"a": 1}));
        let parsed = parse_response(&response.encode(true)).unwrap().unwrap();
        assert_eq!(parsed.status, 201);
        assert_eq!(parsed.json()["a"], 1);
        let empty = parse_response(&Response::empty(204).encode(false))
            .unwrap()
            .unwrap();
        assert_eq!(empty.status, 204);
        assert!(empty.body.is_empty());
    }

    #[test]
    fn percent_encoding_round_trips_names_with_slashes() {
        assert_eq!(percent_encode("/"), "%2F");
        assert_eq!(percent_decode("%2Fa%20b").as_deref(), Some("/a b"));
        assert_eq!(percent_decode("%zz"), None);
    }

    proptest! {
        #[test]
        fn response_parser_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_response(&bytes);
        }

        #[test]
        fn encoded_client_requests_carry_their_body_last(path in "/[a-z%0-9/]{0,40}", body in proptest::collection::vec(any::<u8>(), 0..100)) {
            let raw = encode_request("PUT", &path, "h", Some(("u", "p")), Some(&body));
            prop_assert!(raw.ends_with(&body));
            let head = String::from_utf8_lossy(&raw[..raw.len() - body.len()]).into_owned();
            let expected_length = format!("content-length: {}\r\n", body.len());
            let expected_line = format!("PUT {path} HTTP/1.1\r\n");
            prop_assert!(head.starts_with(&expected_line));
            prop_assert!(head.contains(&expected_length));
            prop_assert!(head.ends_with("\r\n\r\n"));
        }

        #[test]
        fn percent_encoding_round_trips(text in "\\PC{0,30}") {
            prop_assert_eq!(percent_decode(&percent_encode(&text)), Some(text));
        }
    }
}
