//! The management API's HTTP stack as a standard client sees it: a large unauthenticated body
//! is refused with 401 before it is read, a body over `management.http.max_body_size` gets
//! 413, connections beyond `management.tcp.max_connections` are closed at once without
//! disturbing AMQP clients, idle connections time out, chunked requests and gzip responses
//! work, `Expect: 100-continue` is honoured, HTTP/1.0 connections close after the response,
//! HTTPS offers HTTP/2 through ALPN, and heavy requests (definitions exports of 10,000
//! queues) run off the runtime workers, so AMQP round trips do not wait for them.

use std::io::Read as _;
use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use warren_interop_tests::TestBroker;

/// How long any one expected answer may take.
const LIMIT: Duration = Duration::from_secs(10);

fn guest_auth() -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("guest:guest")
    )
}

/// Reads from `stream` until a full response head has arrived (or the stream ends), and
/// returns what was read.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    while !raw.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = tokio::time::timeout(LIMIT, stream.read(&mut chunk))
            .await
            .expect("an answer in time")
            .expect("read");
        if read == 0 {
            break;
        }
        raw.extend_from_slice(&chunk[..read]);
    }
    String::from_utf8_lossy(&raw).into_owned()
}

/// Reads `stream` to its end within [`LIMIT`].
async fn read_all(stream: &mut TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut raw))
        .await
        .expect("the server closes in time")
        .expect("read");
    raw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthenticated_64_mib_body_is_refused_with_401_before_it_is_read() {
    let broker = TestBroker::start().await;
    let mut stream = TcpStream::connect(broker.management_addr()).await.unwrap();
    let length = 64 * 1024 * 1024;
    let head = format!(
        "POST /api/definitions HTTP/1.1\r\nhost: warren\r\ncontent-type: application/json\r\n\
         content-length: {length}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // A first slice of the body only: the answer must come without the other 64 MiB.
    stream.write_all(&vec![b' '; 64 * 1024]).await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("www-authenticate: basic"),
        "{head}"
    );

    // With `Expect: 100-continue` the refusal comes instead of the 100, so a client that
    // waits for it never sends the body at all.
    let mut stream = TcpStream::connect(broker.management_addr()).await.unwrap();
    let head = format!(
        "PUT /api/queues/%2F/big HTTP/1.1\r\nhost: warren\r\nexpect: 100-continue\r\n\
         authorization: Basic {}\r\ncontent-length: {length}\r\n\r\n",
        base64::engine::general_purpose::STANDARD.encode("guest:wrong")
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 401"), "{head}");
    assert!(!head.contains("100 Continue"), "{head}");
    assert!(broker.broker().vhost("/").unwrap().queue("big").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_max_body_size_get_413_declared_or_chunked() {
    let broker = TestBroker::start_with(&[("management.http.max_body_size", "1000")]).await;
    let big = format!("{{\"arguments\":{{\"x-note\":\"{}\"}}}}", "a".repeat(2000));
    let response = broker
        .api_as_guest("PUT", "/api/queues/%2F/declared", Some(&big))
        .await;
    assert_eq!(response.status, 413);
    assert_eq!(response.json()["error"], "payload_too_large");

    // A chunked body has no length up front: it is refused as it grows past the limit.
    let mut stream = TcpStream::connect(broker.management_addr()).await.unwrap();
    let mut request = format!(
        "PUT /api/queues/%2F/chunked HTTP/1.1\r\nhost: warren\r\nauthorization: {}\r\n\
         content-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        guest_auth()
    );
    for piece in big.as_bytes().chunks(500) {
        request.push_str(&format!(
            "{:x}\r\n{}\r\n",
            piece.len(),
            String::from_utf8_lossy(piece)
        ));
    }
    request.push_str("0\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    let vhost = broker.broker().vhost("/").unwrap();
    assert!(vhost.queue("declared").is_none() && vhost.queue("chunked").is_none());

    // Under the limit the same requests succeed.
    let small = broker
        .api_as_guest("PUT", "/api/queues/%2F/small", Some(r#"{"durable":false}"#))
        .await;
    assert_eq!(small.status, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_request_is_read_and_a_gzip_response_is_sent_when_asked() {
    let broker = TestBroker::start().await;
    let mut stream = TcpStream::connect(broker.management_addr()).await.unwrap();
    let body = r#"{"durable":true,"arguments":{"x-max-length":5}}"#;
    let (first, second) = body.split_at(10);
    let request = format!(
        "PUT /api/queues/%2F/chunked HTTP/1.1\r\nhost: warren\r\nauthorization: {}\r\n\
         content-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n\
         {:x}\r\n{first}\r\n{:x}\r\n{second}\r\n0\r\n\r\n",
        guest_auth(),
        first.len(),
        second.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 201"), "{head}");
    let queue = broker.broker().vhost("/").unwrap().queue("chunked");
    assert!(queue.is_some(), "the chunked body declared the queue");

    let mut stream = TcpStream::connect(broker.management_addr()).await.unwrap();
    let request = format!(
        "GET /api/queues/%2F/chunked HTTP/1.1\r\nhost: warren\r\nauthorization: {}\r\n\
         accept-encoding: gzip\r\nconnection: close\r\n\r\n",
        guest_auth()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let raw = read_all(&mut stream).await;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-encoding: gzip"), "{head}");
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(&raw[split..])
    } else {
        raw[split..].to_vec()
    };
    let mut json = String::new();
    flate2::read::GzDecoder::new(body.as_slice())
        .read_to_string(&mut json)
        .expect("a gzip body");
    let json: serde_json::Value = serde_json::from_str(&json).expect("JSON inside");
    assert_eq!(json["name"], "chunked");
    assert_eq!(json["arguments"]["x-max-length"], 5);

    // Without Accept-Encoding the same response is plain.
    let plain = broker
        .api_as_guest("GET", "/api/queues/%2F/chunked", None)
        .await;
    assert!(!plain
        .headers
        .iter()
        .any(|(name, _)| name == "content-encoding"));
    assert_eq!(plain.json()["name"], "chunked");
}

/// The payload of a chunked body.
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size");
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..line_end]).unwrap().trim(), 16)
            .expect("hex size");
        raw = &raw[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_is_answered_before_the_body_is_sent() {
    let broker = TestBroker::start().await;
    let mut stream = TcpStream::connect(broker.management_addr()).await.unwrap();
    let body = r#"{"durable":false}"#;
    let head = format!(
        "PUT /api/queues/%2F/continued HTTP/1.1\r\nhost: warren\r\nauthorization: {}\r\n\
         content-type: application/json\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n",
        guest_auth(),
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let interim = read_head(&mut stream).await;
    assert!(interim.starts_with("HTTP/1.1 100 Continue"), "{interim}");
    stream.write_all(body.as_bytes()).await.unwrap();
    let rest = String::from_utf8_lossy(&read_all(&mut stream).await).into_owned();
    let answer = if interim.len() > "HTTP/1.1 100 Continue\r\n\r\n".len() {
        format!("{interim}{rest}")
    } else {
        rest
    };
    assert!(answer.contains("HTTP/1.1 201"), "{answer}");
    assert!(broker
        .broker()
        .vhost("/")
        .unwrap()
        .queue("continued")
        .is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_1_0_connections_close_after_the_response_and_1_1_ones_stay_open() {
    let broker = TestBroker::start().await;
    let mut stream = TcpStream::connect(broker.management_addr()).await.unwrap();
    let request = format!(
        "GET /api/whoami HTTP/1.0\r\nauthorization: {}\r\n\r\n",
        guest_auth()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let raw = String::from_utf8_lossy(&read_all(&mut stream).await).into_owned();
    assert!(
        raw.starts_with("HTTP/1.0 200") || raw.starts_with("HTTP/1.1 200"),
        "{raw}"
    );
    assert!(raw.contains(r#""name":"guest""#), "{raw}");

    // HTTP/1.1 keeps the connection for a second request on it.
    let mut stream = TcpStream::connect(broker.management_addr()).await.unwrap();
    let request = format!(
        "GET /api/whoami HTTP/1.1\r\nhost: warren\r\nauthorization: {}\r\n\r\n",
        guest_auth()
    );
    for _ in 0..2 {
        stream.write_all(request.as_bytes()).await.unwrap();
        let head = read_head(&mut stream).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        // The body follows the head; drain it by its length before the next request.
        let length: usize = head
            .to_ascii_lowercase()
            .lines()
            .find_map(|line| line.strip_prefix("content-length: ").map(str::to_string))
            .expect("content-length")
            .trim()
            .parse()
            .unwrap();
        let already = head.len() - head.find("\r\n\r\n").unwrap() - 4;
        let mut rest = vec![0u8; length - already];
        stream.read_exact(&mut rest).await.unwrap();
    }

    // Two different Content-Length headers are refused.
    let mut stream = TcpStream::connect(broker.management_addr()).await.unwrap();
    let request = format!(
        "PUT /api/queues/%2F/smuggled HTTP/1.1\r\nhost: warren\r\nauthorization: {}\r\n\
         content-length: 2\r\ncontent-length: 40\r\n\r\n{{}}",
        guest_auth()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
}

/// Whether the server has closed `stream` (a non-blocking std socket): end of stream or a
/// reset, rather than "nothing to read yet".
fn closed_by_server(stream: &std::net::TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match (&*stream).read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(error) => error.kind() != std::io::ErrorKind::WouldBlock,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_are_closed_without_disturbing_amqp() {
    let broker = TestBroker::start_with(&[("management.tcp.max_connections", "100")]).await;
    let addr = broker.management_addr();
    // 2,000 idle connections that never send a byte.
    let mut idle = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let stream = std::net::TcpStream::connect(&addr).expect("connect");
        stream.set_nonblocking(true).unwrap();
        idle.push(stream);
    }
    // The accept loop keeps up; those beyond the cap see their connection closed.
    let deadline = tokio::time::Instant::now() + LIMIT;
    let closed = loop {
        let closed = idle.iter().filter(|s| closed_by_server(s)).count();
        if closed >= 1900 || tokio::time::Instant::now() > deadline {
            break closed;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(closed, 1900, "all but max_connections are closed");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let open = idle.iter().filter(|s| !closed_by_server(s)).count();
    assert_eq!(open, 100, "the connections within the cap stay open");

    // AMQP is served as usual meanwhile.
    use amqprs::channel::{BasicGetArguments, BasicPublishArguments, QueueDeclareArguments};
    use amqprs::connection::{Connection, OpenConnectionArguments};
    let amqp = broker.addr();
    let started = std::time::Instant::now();
    let connection = Connection::open(&OpenConnectionArguments::new(
        &amqp.ip().to_string(),
        amqp.port(),
        "guest",
        "guest",
    ))
    .await
    .expect("AMQP connects");
    let channel = connection.open_channel(None).await.expect("channel");
    channel
        .queue_declare(QueueDeclareArguments::new("undisturbed"))
        .await
        .expect("declare");
    channel
        .basic_publish(
            amqprs::BasicProperties::default(),
            b"still here".to_vec(),
            BasicPublishArguments::new("", "undisturbed"),
        )
        .await
        .expect("publish");
    let got = loop {
        if let Some((_, _, body)) = channel
            .basic_get(BasicGetArguments::new("undisturbed").no_ack(true).finish())
            .await
            .expect("get")
        {
            break body;
        }
        assert!(started.elapsed() < LIMIT, "the message arrives");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(got, b"still here");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let _ = connection.close().await;

    // Once the idle clients go, the API answers new ones again.
    drop(idle);
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let answered = warren_management::http::send(
            &addr,
            "GET",
            "/api/whoami",
            Some(("guest", "guest")),
            None,
        )
        .await;
        if answered.is_ok_and(|response| response.status == 200) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the API answers again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_after_the_idle_timeout() {
    let broker = TestBroker::start_with(&[("management.tcp.idle_timeout", "300")]).await;
    let silent = std::net::TcpStream::connect(broker.management_addr()).unwrap();
    silent.set_nonblocking(true).unwrap();
    // A keep-alive connection after one answered request.
    let mut kept = TcpStream::connect(broker.management_addr()).await.unwrap();
    let request = format!(
        "GET /api/whoami HTTP/1.1\r\nhost: warren\r\nauthorization: {}\r\n\r\n",
        guest_auth()
    );
    kept.write_all(request.as_bytes()).await.unwrap();
    assert!(read_head(&mut kept).await.starts_with("HTTP/1.1 200"));
    assert!(!closed_by_server(&silent));
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(closed_by_server(&silent), "a silent connection is closed");
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(LIMIT, kept.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "an idle keep-alive connection is closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_offers_http_2_through_alpn() {
    use http_body_util::{BodyExt, Empty};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let pki = warren_interop_tests::tls::Pki::new("http2");
    let (certfile, keyfile) = (pki.path("server.pem"), pki.path("server-key.pem"));
    let broker = TestBroker::start_with(&[
        ("management.ssl.ip", "127.0.0.1"),
        ("management.ssl.port", "0"),
        ("management.ssl.certfile", &certfile),
        ("management.ssl.keyfile", &keyfile),
    ])
    .await;
    let addr = broker
        .server()
        .management_tls_addr()
        .expect("HTTPS listener");
    let mut config = (*pki.client_config(None)).clone();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let stream = TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
        .connect(
            tokio_rustls::rustls::pki_types::ServerName::try_from("localhost").unwrap(),
            stream,
        )
        .await
        .expect("TLS handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .expect("HTTP/2 handshake");
    tokio::spawn(connection);
    let request = hyper::Request::builder()
        .uri(format!("https://localhost:{}/api/whoami", addr.port()))
        .header("authorization", guest_auth())
        .body(Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = tokio::time::timeout(LIMIT, sender.send_request(request))
        .await
        .expect("in time")
        .expect("HTTP/2 response");
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), hyper::Version::HTTP_2);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["name"], "guest");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_page_sort_and_filter_as_rabbitmq() {
    let broker = TestBroker::start().await;
    for name in ["q0", "q1", "q2", "q3", "other"] {
        let created = broker
            .api_as_guest("PUT", &format!("/api/queues/%2F/{name}"), Some("{}"))
            .await;
        assert_eq!(created.status, 201);
    }
    let page = broker
        .api_as_guest(
            "GET",
            "/api/queues?page=2&page_size=2&name=%5Eq&use_regex=true&sort=name&sort_reverse=true",
            None,
        )
        .await
        .json();
    assert_eq!(page["total_count"], 5);
    assert_eq!(page["filtered_count"], 4);
    assert_eq!(page["page_count"], 2);
    let names: Vec<&str> = page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["q1", "q0"]);
    // Listings paged after their handler page the same way.
    let exchanges = broker
        .api_as_guest("GET", "/api/exchanges/%2F?page=1&page_size=3", None)
        .await
        .json();
    assert_eq!(exchanges["item_count"], 3);
    assert_eq!(exchanges["total_count"], 7);
    let bindings = broker
        .api_as_guest(
            "GET",
            "/api/bindings?page=1&page_size=2&sort=destination",
            None,
        )
        .await
        .json();
    assert_eq!(bindings["total_count"], 5);
    assert_eq!(bindings["items"][0]["destination"], "other");
    let past = broker.api_as_guest("GET", "/api/queues?page=9", None).await;
    assert_eq!(past.status, 400);
    assert_eq!(past.json()["reason"], "page_out_of_range");
    // Without page the listing is the plain array it always was.
    assert_eq!(
        broker
            .api_as_guest("GET", "/api/queues", None)
            .await
            .json()
            .as_array()
            .map(Vec::len),
        Some(5)
    );
}

/// Exports the definitions as guest; how long it took.
async fn export_definitions(addr: String) -> Duration {
    let started = std::time::Instant::now();
    let response = warren_management::http::send(
        &addr,
        "GET",
        "/api/definitions",
        Some(("guest", "guest")),
        None,
    )
    .await
    .expect("export");
    assert_eq!(response.status, 200);
    assert!(response.body.len() > 1_000_000, "{}", response.body.len());
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heavy_requests_run_off_the_workers_that_serve_amqp() {
    // The broker runs on this test's two runtime workers. Four clients export the
    // definitions of 10,000 queues over and over; were the export built on a worker, both
    // would be busy for a whole export at a time and AMQP would wait that long.
    let broker = TestBroker::start().await;
    let vhost = broker.broker().vhost("/").unwrap();
    for i in 0..10_000 {
        vhost
            .declare_queue(
                warren_core::vhost::Actor {
                    user: "guest",
                    connection_id: warren_core::vhost::BROKER_CONNECTION,
                },
                warren_core::vhost::QueueDeclare {
                    name: format!("heavy-{i:05}"),
                    passive: false,
                    durable: true,
                    exclusive: false,
                    auto_delete: false,
                    arguments: Default::default(),
                },
            )
            .expect("declare");
    }
    let addr = broker.management_addr();
    let alone = export_definitions(addr.clone()).await;

    use amqprs::channel::QueueDeclareArguments;
    use amqprs::connection::{Connection, OpenConnectionArguments};
    let amqp = broker.addr();
    let connection = Connection::open(&OpenConnectionArguments::new(
        &amqp.ip().to_string(),
        amqp.port(),
        "guest",
        "guest",
    ))
    .await
    .expect("AMQP connects");
    let channel = connection.open_channel(None).await.expect("channel");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let exporters: Vec<_> = (0..4)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut done = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    export_definitions(addr.clone()).await;
                    done += 1;
                }
                done
            })
        })
        .collect();
    // Let the exports get going, then time AMQP round trips (a passive declare each).
    tokio::time::sleep(alone / 2).await;
    let mut round_trips = Vec::new();
    let window = std::time::Instant::now();
    while window.elapsed() < (alone * 4).max(Duration::from_secs(2)) {
        let started = std::time::Instant::now();
        channel
            .queue_declare(
                QueueDeclareArguments::new("heavy-04242")
                    .passive(true)
                    .finish(),
            )
            .await
            .expect("passive declare");
        round_trips.push(started.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut exports = 0;
    for exporter in exporters {
        exports += exporter.await.expect("exporter");
    }
    round_trips.sort();
    let median = round_trips[round_trips.len() / 2];
    let slowest = round_trips[round_trips.len() - 1];
    eprintln!(
        "one export alone {alone:?}; {exports} exports by 4 clients meanwhile; {} AMQP round \
         trips, median {median:?}, slowest {slowest:?}",
        round_trips.len()
    );
    assert!(exports >= 4, "the exports ran during the window: {exports}");
    assert!(
        median < alone / 4,
        "AMQP waited for the exports: median round trip {median:?}, one export {alone:?}"
    );
    let _ = connection.close().await;
}
