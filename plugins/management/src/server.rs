//! The tokio driver for the HTTP endpoints: accept, read requests, answer with a handler,
//! keep connections alive until the client closes or the broker shuts down.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::http::{parse_request, ParseError, Request, Response};

/// Answers one request with the client's address. Handlers only touch the core's in-memory
/// state (no I/O), so they run on the connection's task.
pub type Handler = Arc<dyn Fn(Request, std::net::SocketAddr) -> Response + Send + Sync>;

/// An idle keep-alive connection is closed after this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a client has to complete the TLS handshake.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves HTTP on `listener` with `handler` until `shutdown` turns true; with `tls`, every
/// connection first completes a TLS handshake (HTTPS). `store` follows the message store's
/// durable sequence number, for responses that wait for it
/// ([`Response::wait_for_store`](crate::http::Response::wait_for_store)).
pub async fn serve(
    listener: TcpListener,
    handler: Handler,
    tls: Option<TlsAcceptor>,
    store: Option<watch::Receiver<u64>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let _ = stream.set_nodelay(true);
                    let handler = Arc::clone(&handler);
                    let shutdown = shutdown.clone();
                    let store = store.clone();
                    match tls.clone() {
                        None => {
                            connections.spawn(serve_connection(stream, peer, handler, store, shutdown));
                        }
                        Some(acceptor) => {
                            connections.spawn(async move {
                                let handshake = tokio::time::timeout(
                                    TLS_HANDSHAKE_TIMEOUT,
                                    acceptor.accept(stream),
                                );
                                match handshake.await {
                                    Ok(Ok(stream)) => {
                                        serve_connection(stream, peer, handler, store, shutdown)
                                            .await
                                    }
                                    Ok(Err(error)) => {
                                        tracing::warn!(%peer, %error, "HTTPS handshake failed");
                                    }
                                    Err(_) => tracing::warn!(%peer, "HTTPS handshake timed out"),
                                }
                            });
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, "HTTP accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            _ = shutdown.changed() => break,
        }
    }
    drop(listener);
    connections.shutdown().await;
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    peer: std::net::SocketAddr,
    handler: Handler,
    mut store: Option<watch::Receiver<u64>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut buffer = Vec::new();
    loop {
        let parsed = match parse_request(&buffer) {
            Ok(parsed) => parsed,
            Err(error) => {
                let status = if error == ParseError::TooLarge {
                    413
                } else {
                    400
                };
                let body =
                    serde_json::json!({"error": "bad_request", "reason": format!("{error:?}")});
                let _ = stream
                    .write_all(&Response::json(status, &body).encode(false))
                    .await;
                return;
            }
        };
        if let Some((request, used)) = parsed {
            buffer.drain(..used);
            let keep_alive = request.keep_alive();
            let response = handler(request, peer);
            if let (Some(seq), Some(store)) = (response.wait_for_store, store.as_mut()) {
                // Errors only when the store is gone (shutting down): answer anyway.
                let _ = store.wait_for(|durable| *durable >= seq).await;
            }
            if stream
                .write_all(&response.encode(keep_alive))
                .await
                .is_err()
                || !keep_alive
            {
                let _ = stream.shutdown().await;
                return;
            }
            continue;
        }
        let mut chunk = [0u8; 16 * 1024];
        let read = tokio::select! {
            read = stream.read(&mut chunk) => read,
            _ = tokio::time::sleep(IDLE_TIMEOUT) => return,
            _ = shutdown.changed() => return,
        };
        match read {
            Ok(0) | Err(_) => return,
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
        }
    }
}
