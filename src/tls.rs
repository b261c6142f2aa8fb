//! TLS server configurations from PEM files (rustls, TLS 1.2 and 1.3 only). A file that
//! cannot be read or holds no usable certificate or key stops start-up with a message naming
//! the configuration key, the file and the problem.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use warren_config::{PeerVerification, SslOptions};

/// Where a certificate and its key come from: the files and the keys that named them.
struct Identity<'a> {
    certfile: (&'static str, &'a Path),
    keyfile: (&'static str, &'a Path),
}

/// A server configuration with the certificate chain in `certfile` and the key in `keyfile`
/// (the management API's `management.ssl.*`), checking client certificates as
/// `verification` says (`management.ssl.cacertfile`, `.verify`, `.fail_if_no_peer_cert`).
pub fn server_config(
    certfile: &Path,
    keyfile: &Path,
    verification: &PeerVerification,
) -> Result<Arc<ServerConfig>, String> {
    let identity = Identity {
        certfile: ("management.ssl.certfile", certfile),
        keyfile: ("management.ssl.keyfile", keyfile),
    };
    let verifier = client_verifier("management.ssl", verification)?;
    build(&identity, verifier)
}

/// The Prometheus endpoint's configuration over HTTPS (`prometheus.ssl.*`).
pub fn prometheus_config(
    certfile: &Path,
    keyfile: &Path,
    verification: &PeerVerification,
) -> Result<Arc<ServerConfig>, String> {
    let identity = Identity {
        certfile: ("prometheus.ssl.certfile", certfile),
        keyfile: ("prometheus.ssl.keyfile", keyfile),
    };
    let verifier = client_verifier("prometheus.ssl", verification)?;
    build(&identity, verifier)
}

/// The configuration of a listener that uses `ssl_options` (`listener_key` names it in
/// errors: `listeners.ssl.default`, `mqtt.listeners.ssl.default`, ...): with
/// `verify = verify_peer`, clients are asked for a certificate checked against
/// `cacertfile`; with `fail_if_no_peer_cert = true`, a client without one is refused.
pub fn listener_config(
    listener_key: &str,
    options: &SslOptions,
) -> Result<Arc<ServerConfig>, String> {
    let (Some(certfile), Some(keyfile)) = (&options.certfile, &options.keyfile) else {
        return Err(format!(
            "{listener_key} needs ssl_options.certfile and ssl_options.keyfile"
        ));
    };
    let identity = Identity {
        certfile: ("ssl_options.certfile", certfile),
        keyfile: ("ssl_options.keyfile", keyfile),
    };
    let verification = PeerVerification {
        cacertfile: options.cacertfile.clone(),
        verify_peer: options.verify_peer,
        fail_if_no_peer_cert: options.fail_if_no_peer_cert,
    };
    let verifier = client_verifier("ssl_options", &verification)?;
    build(&identity, verifier)
}

/// The client-certificate verifier `verification` asks for (`None`: clients are not asked
/// for a certificate); `prefix` names its keys in errors (`ssl_options`,
/// `management.ssl`, ...).
fn client_verifier(
    prefix: &str,
    verification: &PeerVerification,
) -> Result<Option<Arc<dyn ClientCertVerifier>>, String> {
    if !verification.verify_peer {
        return Ok(None);
    }
    let Some(cacertfile) = &verification.cacertfile else {
        return Err(format!(
            "{prefix}.verify = verify_peer needs {prefix}.cacertfile"
        ));
    };
    let roots = root_store(&format!("{prefix}.cacertfile"), cacertfile)?;
    let builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::new(provider()));
    let builder = if verification.fail_if_no_peer_cert {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    let verifier = builder
        .build()
        .map_err(|e| format!("client verification with {}: {e}", cacertfile.display()))?;
    Ok(Some(verifier))
}

fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// The CA certificates in `path` (named by the configuration key `key` in errors).
fn root_store(key: &str, path: &Path) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(key, path)? {
        roots
            .add(certificate)
            .map_err(|e| format!("{key}: bad CA certificate in {}: {e}", path.display()))?;
    }
    Ok(roots)
}

fn read_certificates(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| {
            format!(
                "{key}: cannot read certificate file {}: {e}",
                path.display()
            )
        })?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{key}: bad certificate in {}: {e}", path.display()))?;
    if certificates.is_empty() {
        return Err(format!("{key}: no certificate found in {}", path.display()));
    }
    Ok(certificates)
}

fn build(
    identity: &Identity<'_>,
    client_verifier: Option<Arc<dyn ClientCertVerifier>>,
) -> Result<Arc<ServerConfig>, String> {
    let (certfile_key, certfile) = identity.certfile;
    let (keyfile_key, keyfile) = identity.keyfile;
    let certificates = read_certificates(certfile_key, certfile)?;
    let key = PrivateKeyDer::from_pem_file(keyfile).map_err(|e| {
        format!(
            "{keyfile_key}: cannot read a private key from {}: {e}",
            keyfile.display()
        )
    })?;
    let builder = ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS configuration: {e}"))?;
    let builder = match client_verifier {
        Some(verifier) => builder.with_client_cert_verifier(verifier),
        None => builder.with_no_client_auth(),
    };
    let config = builder.with_single_cert(certificates, key).map_err(|e| {
        format!(
            "certificate {} and key {} do not make a usable pair: {e}",
            certfile.display(),
            keyfile.display()
        )
    })?;
    Ok(Arc::new(config))
}

/// TLS for the inter-node links (`cluster.ssl_options.*`): the node's certificate for both
/// ends, and the cluster's CA to check every peer with, dialled or dialling. All three files
/// are needed; a missing one stops start-up naming the key.
pub fn cluster_link_tls(
    ssl: &warren_config::ClusterSsl,
) -> Result<warren_cluster::transport::LinkTls, String> {
    let missing = |key: &str| format!("inter-node TLS needs cluster.ssl_options.{key}");
    let certfile = ssl.certfile.as_deref().ok_or_else(|| missing("certfile"))?;
    let keyfile = ssl.keyfile.as_deref().ok_or_else(|| missing("keyfile"))?;
    let cacertfile = ssl
        .cacertfile
        .as_deref()
        .ok_or_else(|| missing("cacertfile"))?;
    let identity = Identity {
        certfile: ("cluster.ssl_options.certfile", certfile),
        keyfile: ("cluster.ssl_options.keyfile", keyfile),
    };
    let verification = PeerVerification {
        cacertfile: Some(cacertfile.to_path_buf()),
        verify_peer: true,
        fail_if_no_peer_cert: true,
    };
    let server = build(
        &identity,
        client_verifier("cluster.ssl_options", &verification)?,
    )?;
    let roots = root_store("cluster.ssl_options.cacertfile", cacertfile)?;
    let certificates = read_certificates("cluster.ssl_options.certfile", certfile)?;
    let key = PrivateKeyDer::from_pem_file(keyfile).map_err(|e| {
        format!(
            "cluster.ssl_options.keyfile: cannot read a private key from {}: {e}",
            keyfile.display()
        )
    })?;
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(|e| format!("TLS configuration: {e}"))?
        .with_root_certificates(roots)
        .with_client_auth_cert(certificates, key)
        .map_err(|e| {
            format!(
                "certificate {} and key {} do not make a usable pair: {e}",
                certfile.display(),
                keyfile.display()
            )
        })?;
    Ok(warren_cluster::transport::LinkTls {
        server,
        client: Arc::new(client),
    })
}
