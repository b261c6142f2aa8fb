//! TLS server configurations from PEM files (rustls, TLS 1.2 and 1.3 only). A file that
//! cannot be read or holds no usable certificate or key stops start-up with a message naming
//! the file and the problem.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

/// A server configuration with the certificate chain in `certfile` and the key in `keyfile`.
pub fn server_config(certfile: &Path, keyfile: &Path) -> Result<Arc<ServerConfig>, String> {
    let certificates: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(certfile)
        .map_err(|e| format!("cannot read certificate file {}: {e}", certfile.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("bad certificate in {}: {e}", certfile.display()))?;
    if certificates.is_empty() {
        return Err(format!("no certificate found in {}", certfile.display()));
    }
    let key = PrivateKeyDer::from_pem_file(keyfile)
        .map_err(|e| format!("cannot read a private key from {}: {e}", keyfile.display()))?;
    let config = ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
    .map_err(|e| format!("TLS configuration: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certificates, key)
    .map_err(|e| {
        format!(
            "certificate {} and key {} do not make a usable pair: {e}",
            certfile.display(),
            keyfile.display()
        )
    })?;
    Ok(Arc::new(config))
}
