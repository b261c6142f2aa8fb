//! The HTTP client warrenctl (and the tests) speak the management API with: hyper 1's
//! HTTP/1.1 client over plain TCP or TLS (tokio-rustls), one connection per request, with one
//! deadline over connecting, the TLS handshake, sending and reading the whole response.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::http::ClientResponse;

/// How long a request may take by default, connecting included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// Where and how to reach a management API.
#[derive(Clone)]
pub struct HttpClient {
    host: String,
    port: u16,
    tls: Option<Arc<rustls::ClientConfig>>,
    timeout: Duration,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// TLS settings of a client: which CAs to trust and an optional client certificate.
#[derive(Debug, Clone, Default)]
pub struct ClientTls<'a> {
    /// PEM CA certificates the server's certificate must chain to; `None`: the web PKI roots.
    pub cacertfile: Option<&'a Path>,
    /// A PEM client certificate chain and its key, for servers that ask for one.
    pub client_certificate: Option<(&'a Path, &'a Path)>,
}

impl HttpClient {
    /// A plain-HTTP client for `host:port`.
    pub fn new(host: &str, port: u16) -> HttpClient {
        HttpClient {
            host: host.to_string(),
            port,
            tls: None,
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// The same client with a deadline per request.
    pub fn with_timeout(mut self, timeout: Duration) -> HttpClient {
        self.timeout = timeout;
        self
    }

    /// The same client over HTTPS with `tls`; the error says which file could not be used.
    pub fn with_tls(mut self, tls: &ClientTls<'_>) -> Result<HttpClient, String> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        match tls.cacertfile {
            Some(path) => {
                for certificate in read_certificates(path)? {
                    roots
                        .add(certificate)
                        .map_err(|e| format!("bad CA certificate in {}: {e}", path.display()))?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots);
        let mut config = match tls.client_certificate {
            Some((certfile, keyfile)) => {
                let key = PrivateKeyDer::from_pem_file(keyfile).map_err(|e| {
                    format!("cannot read a private key from {}: {e}", keyfile.display())
                })?;
                builder
                    .with_client_auth_cert(read_certificates(certfile)?, key)
                    .map_err(|e| format!("client certificate {}: {e}", certfile.display()))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        self.tls = Some(Arc::new(config));
        Ok(self)
    }

    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// Sends one request with basic auth, extra headers and an optional JSON body, and reads
    /// the whole response, within the client's timeout.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        credentials: Option<(&str, &str)>,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> std::io::Result<ClientResponse> {
        let exchange = self.exchange(method, path, credentials, headers, body);
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no response within {} s", self.timeout.as_secs_f64()),
            )),
        }
    }

    async fn exchange(
        &self,
        method: &str,
        path: &str,
        credentials: Option<(&str, &str)>,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> std::io::Result<ClientResponse> {
        let request = self.build(method, path, credentials, headers, body)?;
        let stream = TcpStream::connect((self.host.as_str(), self.port)).await?;
        let _ = stream.set_nodelay(true);
        match &self.tls {
            None => send_on(stream, request).await,
            Some(config) => {
                let name = ServerName::try_from(self.host.clone()).map_err(|e| {
                    std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
                })?;
                let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
                let stream = connector.connect(name, stream).await?;
                send_on(stream, request).await
            }
        }
    }

    fn build(
        &self,
        method: &str,
        path: &str,
        credentials: Option<(&str, &str)>,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> std::io::Result<hyper::Request<Full<Bytes>>> {
        let invalid = |e: hyper::http::Error| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string())
        };
        let method = hyper::Method::from_bytes(method.as_bytes())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e.to_string()))?;
        let mut builder = hyper::Request::builder()
            .method(method.clone())
            .uri(path)
            .header(hyper::header::HOST, self.addr());
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        if let Some((user, password)) = credentials {
            let token =
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
            builder = builder.header(hyper::header::AUTHORIZATION, format!("Basic {token}"));
        }
        let body = body.unwrap_or_default();
        if !body.is_empty() || method == hyper::Method::PUT || method == hyper::Method::POST {
            builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
        }
        builder
            .body(Full::new(Bytes::copy_from_slice(body)))
            .map_err(invalid)
    }
}

async fn send_on<S>(
    stream: S,
    request: hyper::Request<Full<Bytes>>,
) -> std::io::Result<ClientResponse>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let result = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(std::io::Error::other)?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await.map_err(std::io::Error::other)?;
        Ok(ClientResponse {
            status: parts.status.as_u16(),
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
            body: body.to_bytes().to_vec(),
        })
    }
    .await;
    driver.abort();
    result
}

fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read certificate file {}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad certificate in {}: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!("no certificate found in {}", path.display()));
    }
    Ok(certificates)
}
