//! PEM files named by TLS settings (Postgres' `sslrootcert`, `sslcert`, `sslkey`; Redis'
//! `redis.ca_file`, `redis.client_cert_file`, `redis.client_key_file`), read and parsed once at
//! start so that a bad path or a file without a certificate is a clear error, not a failed
//! handshake later.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

/// A TLS setting that cannot be used; the message names the setting and the file.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TlsSettingError(pub String);

/// The file's bytes.
pub fn read(path: &Path, setting: &str) -> Result<Vec<u8>, TlsSettingError> {
    std::fs::read(path).map_err(|e| TlsSettingError(format!("{setting} {}: {e}", path.display())))
}

/// The certificates of a PEM file (at least one).
pub fn certs_from(
    path: &Path,
    setting: &str,
) -> Result<Vec<CertificateDer<'static>>, TlsSettingError> {
    let pem = read(path, setting)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsSettingError(format!("{setting} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(TlsSettingError(format!(
            "{setting} {}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// The private key of a PEM file.
pub fn key_from(path: &Path, setting: &str) -> Result<PrivateKeyDer<'static>, TlsSettingError> {
    let pem = read(path, setting)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        TlsSettingError(format!(
            "{setting} {}: no PEM private key in it ({e})",
            path.display()
        ))
    })
}

/// A trust store of the certificates in a PEM file.
pub fn roots_from(path: &Path, setting: &str) -> Result<RootCertStore, TlsSettingError> {
    let mut roots = RootCertStore::empty();
    for cert in certs_from(path, setting)? {
        roots
            .add(cert)
            .map_err(|e| TlsSettingError(format!("{setting} {}: {e}", path.display())))?;
    }
    Ok(roots)
}
