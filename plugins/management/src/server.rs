//! The HTTP driver of the management API and the Prometheus endpoint: hyper 1 (HTTP/1.1,
//! and HTTP/2 over TLS through ALPN or in the clear with prior knowledge) under a tower stack,
//! outermost first:
//!
//! 1. `CompressionLayer` (tower-http): gzip when the client's `Accept-Encoding` asks for it;
//! 2. [`AuthenticateLayer`] (the management API only): checks the basic-auth header and
//!    answers 401 before a byte of the body is read, so an unauthenticated client cannot make
//!    the broker hold a large body;
//! 3. [`Endpoint`]: refuses a body over `max_body_size` with 413 (from `Content-Length` before
//!    reading, or as a chunked body grows past it), reads the rest (hyper sends
//!    `100 Continue` only then), and runs the handler: a heavy one (a listing, definitions,
//!    metrics: see [`HttpEndpoint::is_heavy`]) on tokio's blocking pool, so a definitions
//!    export or a listing of 100k queues never stalls the workers serving AMQP; a cheap one
//!    inline.
//!
//! Connections come from the core's accept loop ([`warren_core::accept::serve_connections`]:
//! the `max_connections` cap and the TLS handshake), and a connection with no request in
//! flight that has sent or received nothing for `idle_timeout` is closed; a client also has
//! that long to send a request's headers.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Body;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::rustls::ServerConfig;
use tower::{Service, ServiceBuilder};
use tower_http::compression::CompressionLayer;
use warren_config::HttpLimits;
use warren_core::accept::{serve_connections, AcceptConfig};
use warren_core::access::User;
use warren_core::stream::ClientStream;

use crate::http::{Request, Response};

/// What the layers before the handler learned about a request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The client's address.
    pub peer: SocketAddr,
    /// The user the [`AuthenticateLayer`] authenticated; `None` where no login is needed
    /// (the web UI's files, Prometheus).
    pub user: Option<Arc<User>>,
}

/// Answers one request whose body has been read. Handlers read or change the core's
/// in-memory state; they run on the blocking pool.
pub type Handler = Arc<dyn Fn(Request, &RequestContext) -> Response + Send + Sync>;

/// Decides from a request's head alone whether it may go on: `Ok(Some(user))` when it
/// authenticated, `Ok(None)` when the path needs no login, `Err(response)` (401) otherwise.
pub type Authenticator = Arc<
    dyn Fn(&hyper::http::request::Parts, SocketAddr) -> Result<Option<Arc<User>>, Response>
        + Send
        + Sync,
>;

/// How long a closing connection may take to finish the requests it has in flight.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How long a client has to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most HTTP/2 streams one connection may have open.
const MAX_CONCURRENT_STREAMS: u32 = 100;

/// One HTTP listener: what it answers with and its limits.
#[derive(Clone)]
pub struct HttpEndpoint {
    /// The handler behind the layers.
    pub handler: Handler,
    /// Which requests may take long (listings, definitions): those run on the blocking
    /// pool; the rest (declare one queue, read one object) run inline, where the hop to
    /// another thread would cost more than the work.
    pub is_heavy: fn(&Request) -> bool,
    /// The login check (`None`: every request goes straight to the handler).
    pub authenticator: Option<Authenticator>,
    /// Body size, connection cap, idle timeout.
    pub limits: HttpLimits,
    /// The name in log lines (`http`, `https`, `http/prometheus`, ...).
    pub protocol: &'static str,
    /// The message store's durable sequence number, for responses that wait for it
    /// ([`Response::wait_for_store`](crate::http::Response::wait_for_store)).
    pub store: Option<watch::Receiver<u64>>,
}

/// Serves `endpoint` on `listener` until `shutdown` turns true; with `tls`, over HTTPS
/// (the configuration's ALPN list is set to `h2, http/1.1`).
pub async fn serve(
    listener: TcpListener,
    endpoint: HttpEndpoint,
    tls: Option<Arc<ServerConfig>>,
    shutdown: watch::Receiver<bool>,
) {
    let tls = tls.map(|config| {
        let mut config = (*config).clone();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    });
    let config = AcceptConfig {
        protocol: endpoint.protocol,
        connection_max: endpoint.limits.max_connections,
        tls,
        handshake_timeout: TLS_HANDSHAKE_TIMEOUT,
        websocket: None,
    };
    let endpoint = Arc::new(endpoint);
    let connection_shutdown = shutdown.clone();
    serve_connections(listener, config, shutdown, move |stream, peer| {
        let endpoint = Arc::clone(&endpoint);
        let shutdown = connection_shutdown.clone();
        async move {
            match stream {
                ClientStream::Plain(stream) => {
                    serve_connection(stream, peer, &endpoint, shutdown).await
                }
                ClientStream::Tls(stream) => {
                    serve_connection(stream, peer, &endpoint, shutdown).await
                }
                // This listener sets no WebSocket handshake, so no connection is a tunnel.
                ClientStream::Tunnel(_) => {}
            }
        }
    })
    .await;
}

/// When a connection last sent or received a byte, and how many requests it has in flight.
struct Activity {
    origin: Instant,
    last_millis: AtomicU64,
    in_flight: AtomicUsize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            origin: Instant::now(),
            last_millis: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let now = self.origin.elapsed().as_millis() as u64;
        self.last_millis.store(now, Ordering::Relaxed);
    }

    fn is_idle_for(&self, timeout: Duration) -> bool {
        let now = self.origin.elapsed().as_millis() as u64;
        self.in_flight.load(Ordering::Acquire) == 0
            && now.saturating_sub(self.last_millis.load(Ordering::Relaxed))
                >= timeout.as_millis() as u64
    }
}

/// Counts a request in flight until its response has been produced.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>) -> InFlight {
        activity.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(activity))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
        self.0.touch();
    }
}

async fn serve_connection<S>(
    stream: S,
    peer: SocketAddr,
    endpoint: &HttpEndpoint,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Watched {
        inner: stream,
        activity: Arc::clone(&activity),
    });
    let idle_timeout = endpoint.limits.idle_timeout;
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(idle_timeout)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS);
    let stack = ServiceBuilder::new()
        .layer(CompressionLayer::new())
        .layer(AuthenticateLayer {
            authenticator: endpoint.authenticator.clone(),
            peer,
        })
        .service(Endpoint {
            handler: Arc::clone(&endpoint.handler),
            is_heavy: endpoint.is_heavy,
            peer,
            max_body_size: endpoint.limits.max_body_size,
            store: endpoint.store.clone(),
        });
    let service_activity = Arc::clone(&activity);
    let service = hyper::service::service_fn(move |request| {
        let in_flight = InFlight::start(&service_activity);
        let mut stack = stack.clone();
        async move {
            let response = stack.call(request).await;
            drop(in_flight);
            response
        }
    });
    let connection = builder.serve_connection(io, service);
    tokio::pin!(connection);
    let check_every = (idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
    let mut ticks = tokio::time::interval(check_every);
    let mut closing_since: Option<Instant> = None;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%peer, %error, "HTTP connection ended with an error");
                }
                return;
            }
            _ = ticks.tick() => match closing_since {
                None if activity.is_idle_for(idle_timeout) => {
                    connection.as_mut().graceful_shutdown();
                    closing_since = Some(Instant::now());
                }
                Some(since) if since.elapsed() >= CLOSE_GRACE => return,
                _ => {}
            },
            _ = shutdown.changed(), if closing_since.is_none() => {
                connection.as_mut().graceful_shutdown();
                closing_since = Some(Instant::now());
            }
        }
    }
}

/// A socket that records when it last moved a byte, for the idle timeout.
struct Watched<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(written)) if written > 0) {
            self.activity.touch();
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

type BoxedFuture<T> = Pin<Box<dyn Future<Output = Result<T, Infallible>> + Send>>;

/// The user an [`AuthenticateLayer`] let through, in the request's extensions.
#[derive(Clone)]
struct Authenticated(Option<Arc<User>>);

/// A tower layer that checks a request's credentials from its head, before its body is
/// read: a refused request is answered at once and its body never read.
#[derive(Clone)]
pub struct AuthenticateLayer {
    authenticator: Option<Authenticator>,
    peer: SocketAddr,
}

impl<S> tower::Layer<S> for AuthenticateLayer {
    type Service = Authenticate<S>;

    fn layer(&self, inner: S) -> Authenticate<S> {
        Authenticate {
            inner,
            authenticator: self.authenticator.clone(),
            peer: self.peer,
        }
    }
}

/// The service [`AuthenticateLayer`] makes.
#[derive(Clone)]
pub struct Authenticate<S> {
    inner: S,
    authenticator: Option<Authenticator>,
    peer: SocketAddr,
}

impl<S, B> Service<hyper::Request<B>> for Authenticate<S>
where
    S: Service<hyper::Request<B>, Response = hyper::Response<Full<Bytes>>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = hyper::Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = BoxedFuture<Self::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
        let Some(authenticator) = &self.authenticator else {
            return Box::pin(self.inner.call(request));
        };
        let (mut parts, body) = request.into_parts();
        match authenticator(&parts, self.peer) {
            Ok(user) => {
                parts.extensions.insert(Authenticated(user));
                Box::pin(self.inner.call(hyper::Request::from_parts(parts, body)))
            }
            Err(refusal) => {
                let refusal = without_browser_challenge(refusal, &parts.headers);
                Box::pin(std::future::ready(Ok(to_hyper(refusal))))
            }
        }
    }
}

/// The innermost service: reads the body within the limit and runs the handler.
#[derive(Clone)]
struct Endpoint {
    handler: Handler,
    is_heavy: fn(&Request) -> bool,
    peer: SocketAddr,
    max_body_size: usize,
    store: Option<watch::Receiver<u64>>,
}

impl<B> Service<hyper::Request<B>> for Endpoint
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Response = hyper::Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = BoxedFuture<Self::Response>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: hyper::Request<B>) -> Self::Future {
        let endpoint = self.clone();
        Box::pin(async move {
            let mut store = endpoint.store.clone();
            let response = endpoint.answer(request).await;
            if let (Some(seq), Some(store)) = (response.wait_for_store, store.as_mut()) {
                // A persistent message is answered once it is on disk; this errs only when
                // the store is gone (shutting down): answer anyway.
                let _ = store.wait_for(|durable| *durable >= seq).await;
            }
            Ok(to_hyper(response))
        })
    }
}

impl Endpoint {
    async fn answer<B>(self, request: hyper::Request<B>) -> Response
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: std::error::Error + Send + Sync + 'static,
    {
        let (parts, body) = request.into_parts();
        let declared = parts
            .headers
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.parse::<u64>().ok());
        if declared.is_some_and(|length| length > self.max_body_size as u64) {
            return too_large(self.max_body_size);
        }
        let body = match Limited::new(body, self.max_body_size).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => {
                return too_large(self.max_body_size);
            }
            Err(error) => {
                return crate::api::bad_request(format!(
                    "could not read the request body: {error}"
                ));
            }
        };
        let context = RequestContext {
            peer: self.peer,
            user: parts
                .extensions
                .get::<Authenticated>()
                .and_then(|authenticated| authenticated.0.clone()),
        };
        let request = Request {
            method: parts.method.as_str().to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            headers: parts
                .headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_string(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: body.to_vec(),
        };
        let handler = self.handler;
        if !(self.is_heavy)(&request) {
            return without_browser_challenge(handler(request, &context), &parts.headers);
        }
        match tokio::task::spawn_blocking(move || handler(request, &context)).await {
            Ok(response) => without_browser_challenge(response, &parts.headers),
            Err(error) => {
                tracing::error!(%error, "an HTTP handler failed");
                crate::api::error(500, "internal_server_error", "the handler failed")
            }
        }
    }
}

/// A 401 without its `WWW-Authenticate` challenge when the request came from a script
/// (`X-Requested-With`, as the web UI sends): a browser answers a challenge with its own
/// login dialog, which would hide the UI's form and its message.
fn without_browser_challenge(mut response: Response, headers: &hyper::HeaderMap) -> Response {
    if headers.contains_key("x-requested-with") {
        response
            .headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case("www-authenticate"));
    }
    response
}

/// 413 with RabbitMQ's error body shape.
fn too_large(limit: usize) -> Response {
    crate::api::error(
        413,
        "payload_too_large",
        format!("the request body is larger than management.http.max_body_size ({limit} bytes)"),
    )
}

/// Our response as hyper's.
fn to_hyper(response: Response) -> hyper::Response<Full<Bytes>> {
    let mut builder = hyper::Response::builder().status(response.status);
    if !(response.status == 204 || response.status == 304) {
        builder = builder.header(hyper::header::CONTENT_TYPE, response.content_type);
    }
    for (name, value) in &response.headers {
        builder = builder.header(*name, value.as_str());
    }
    builder
        .body(Full::new(Bytes::from(response.body)))
        .unwrap_or_else(|error| {
            tracing::error!(%error, "a handler produced an invalid response head");
            let mut fallback = hyper::Response::new(Full::new(Bytes::new()));
            *fallback.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
            fallback
        })
}
