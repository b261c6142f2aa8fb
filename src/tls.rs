//! TLS server configurations from PEM files (rustls, TLS 1.2 and 1.3 only). A file that
//! cannot be read or holds no usable certificate or key stops start-up with a message naming
//! the file and the problem.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use warren_config::SslOptions;

/// A server configuration with the certificate chain in `certfile` and the key in `keyfile`.
pub fn server_config(certfile: &Path, keyfile: &Path) -> Result<Arc<ServerConfig>, String> {
    build(certfile, keyfile, None)
}

/// The AMQPS configuration from `ssl_options`: with `verify = verify_peer`, clients are asked
/// for a certificate checked against `cacertfile`; with `fail_if_no_peer_cert = true`, a
/// client without one is refused.
pub fn amqps_config(options: &SslOptions) -> Result<Arc<ServerConfig>, String> {
    let (Some(certfile), Some(keyfile)) = (&options.certfile, &options.keyfile) else {
        return Err(
            "listeners.ssl.default needs ssl_options.certfile and ssl_options.keyfile".to_string(),
        );
    };
    if !options.verify_peer {
        return build(certfile, keyfile, None);
    }
    let Some(cacertfile) = &options.cacertfile else {
        return Err("ssl_options.verify = verify_peer needs ssl_options.cacertfile".to_string());
    };
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(cacertfile)? {
        roots
            .add(certificate)
            .map_err(|e| format!("bad CA certificate in {}: {e}", cacertfile.display()))?;
    }
    let builder =
        WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::new(provider()));
    let builder = if options.fail_if_no_peer_cert {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    let verifier = builder
        .build()
        .map_err(|e| format!("client verification with {}: {e}", cacertfile.display()))?;
    build(certfile, keyfile, Some(verifier))
}

fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
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

fn build(
    certfile: &Path,
    keyfile: &Path,
    client_verifier: Option<Arc<dyn rustls::server::danger::ClientCertVerifier>>,
) -> Result<Arc<ServerConfig>, String> {
    let certificates = read_certificates(certfile)?;
    let key = PrivateKeyDer::from_pem_file(keyfile)
        .map_err(|e| format!("cannot read a private key from {}: {e}", keyfile.display()))?;
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
