//! A `DATABASE_URL` as libpq reads it: the connection parameters tokio-postgres understands,
//! and the TLS parameters it does not (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`; rustls,
//! no OpenSSL), parsed and checked once (files read, the TLS configuration built):
//!
//! | sslmode | encrypts | trusts |
//! |---|---|---|
//! | `disable` | no | - |
//! | `prefer` (default) | if the server offers it | any certificate |
//! | `require` | yes | any certificate; with `sslrootcert`, as `verify-ca` |
//! | `verify-ca` | yes | a certificate signed by `sslrootcert` (else the system's CAs), any host name |
//! | `verify-full` | yes | as `verify-ca`, for the host name the URL connects to |
//!
//! Several hosts (`postgres://u@h1:5432,h2:5432/db?target_session_attrs=read-write`) are
//! tried in order, as libpq does; `target_session_attrs=primary` is taken as `read-write`
//! (what tokio-postgres checks: a primary accepts writes, a standby refuses them). With
//! `verify-full`, each host's certificate is checked for that host's own name.
//!
//! A leaf both sides use: `config` checks `database.url` with it, so a bad URL or TLS file
//! stops the start, and `db::tls` connects with what it parsed.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};

use outbox_core::pem::{certs_from, key_from, roots_from, TlsSettingError};

/// `sslmode`, as libpq spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, unverified.
    Prefer,
    /// TLS always, unverified (or as `VerifyCa` with a root certificate).
    Require,
    /// TLS, the chain verified.
    VerifyCa,
    /// TLS, the chain and the host name verified.
    VerifyFull,
}

/// What a `DATABASE_URL` asks for: the URL tokio-postgres understands, and the TLS settings
/// it does not.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URL without the TLS parameters tokio-postgres does not know.
    config: tokio_postgres::Config,
    mode: TlsMode,
    root_cert: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
}

impl Target {
    /// Parses the URL and checks its TLS parameters, loading each file once so that a bad
    /// path or a file that holds no certificate is reported at start, not at first connect.
    pub fn parse(raw: &str) -> Result<Target, TlsSettingError> {
        // Not `url::Url`: it refuses the comma-separated hosts libpq and tokio-postgres take.
        let (base, query) = raw.split_once('?').unwrap_or((raw, ""));
        let mut mode = TlsMode::Prefer;
        let (mut root_cert, mut client_cert, mut client_key) = (None, None, None);
        let mut kept: Vec<(String, String)> = Vec::new();
        for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
            match key.as_ref() {
                "sslmode" => {
                    mode = match value.as_ref() {
                        "disable" => TlsMode::Disable,
                        "allow" | "prefer" => TlsMode::Prefer,
                        "require" => TlsMode::Require,
                        "verify-ca" => TlsMode::VerifyCa,
                        "verify-full" => TlsMode::VerifyFull,
                        other => {
                            return Err(TlsSettingError(format!(
                                "sslmode={other}: expected disable, prefer, require, verify-ca or verify-full"
                            )))
                        }
                    }
                }
                "sslrootcert" => root_cert = Some(PathBuf::from(value.as_ref())),
                "sslcert" => client_cert = Some(PathBuf::from(value.as_ref())),
                "sslkey" => client_key = Some(PathBuf::from(value.as_ref())),
                "target_session_attrs" if value == "primary" => {
                    kept.push((key.into_owned(), "read-write".into()))
                }
                _ => kept.push((key.into_owned(), value.into_owned())),
            }
        }
        let mut url = base.to_string();
        if !kept.is_empty() {
            let query: String = url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(kept)
                .finish();
            url = format!("{url}?{query}");
        }
        let config =
            tokio_postgres::Config::from_str(&url).map_err(|e| TlsSettingError(e.to_string()))?;
        if mode == TlsMode::Require && root_cert.is_some() {
            mode = TlsMode::VerifyCa;
        }
        if client_cert.is_some() != client_key.is_some() {
            return Err(TlsSettingError(
                "sslcert and sslkey go together: set both or neither".into(),
            ));
        }
        let target = Target {
            config,
            mode,
            root_cert,
            client_cert,
            client_key,
        };
        if target.mode != TlsMode::Disable {
            target.client_config()?;
        }
        Ok(target)
    }

    /// The TLS mode in force.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// The connection parameters, the TLS ones taken out.
    pub fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The TLS configuration the URL asks for (`parse` built it once already, so this fails
    /// only if a file changed since).
    pub fn client_config(&self) -> Result<ClientConfig, TlsSettingError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSettingError(e.to_string()))?;
        let verifier: Arc<dyn ServerCertVerifier> = match self.mode {
            TlsMode::Disable | TlsMode::Prefer | TlsMode::Require => Arc::new(Relaxed {
                provider,
                chain: None,
            }),
            TlsMode::VerifyCa | TlsMode::VerifyFull => {
                let roots = match &self.root_cert {
                    Some(path) => roots_from(path, "sslrootcert")?,
                    None => system_roots("sslrootcert")?,
                };
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| TlsSettingError(format!("sslrootcert: {e}")))?;
                if self.mode == TlsMode::VerifyCa {
                    Arc::new(Relaxed {
                        provider,
                        chain: Some(webpki),
                    })
                } else {
                    webpki
                }
            }
        };
        let builder = builder
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let certs = certs_from(cert, "sslcert")?;
                let key = key_from(key, "sslkey")?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| TlsSettingError(format!("sslcert/sslkey: {e}")))
            }
            _ => Ok(builder.with_no_client_auth()),
        }
    }
}

/// The system's CA certificates, for when `setting` (the file that would name others) is not
/// set; none found is an error naming it.
pub(crate) fn system_roots(setting: &str) -> Result<RootCertStore, TlsSettingError> {
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(TlsSettingError(format!(
            "{setting} is not set and the system has no CA certificates"
        )));
    }
    Ok(roots)
}

/// `prefer` and `require` (no `chain`): encryption without authentication, as libpq does.
/// `verify-ca` (a `chain`): the certificate must lead to a trusted root; its host name may be
/// anything. Handshake signatures are checked either way.
#[derive(Debug)]
struct Relaxed {
    provider: Arc<rustls::crypto::CryptoProvider>,
    chain: Option<Arc<WebPkiServerVerifier>>,
}

impl ServerCertVerifier for Relaxed {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algorithms = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_are_taken_out_of_the_url() {
        let t = Target::parse("postgres://u@h:5/db?sslmode=disable&application_name=x")
            .expect("parses");
        assert_eq!(t.mode(), TlsMode::Disable);
        assert_eq!(t.config.get_application_name(), Some("x"));
        assert_eq!(t.config.get_dbname(), Some("db"));
    }

    #[test]
    fn several_hosts_are_kept_in_order_and_primary_means_read_write() {
        let t = Target::parse(
            "postgres://u@h1:5433,h2:5434/db?target_session_attrs=primary&sslmode=disable",
        )
        .expect("parses");
        assert_eq!(t.config.get_ports(), &[5433, 5434]);
        assert_eq!(t.config.get_hosts().len(), 2);
        assert_eq!(
            t.config.get_target_session_attrs(),
            tokio_postgres::config::TargetSessionAttrs::ReadWrite
        );
        assert_eq!(t.mode(), TlsMode::Disable);
    }

    #[test]
    fn the_default_is_prefer_and_bad_modes_are_named() {
        assert_eq!(
            Target::parse("postgres://h/db").expect("ok").mode(),
            TlsMode::Prefer
        );
        let err = Target::parse("postgres://h/db?sslmode=verify").expect_err("bad mode");
        assert!(err.0.contains("sslmode=verify"), "{}", err.0);
    }

    #[test]
    fn a_missing_file_is_named() {
        let err = Target::parse("postgres://h/db?sslmode=verify-full&sslrootcert=/nope/ca.pem")
            .expect_err("missing file");
        assert!(err.0.starts_with("sslrootcert /nope/ca.pem"), "{}", err.0);
        let err = Target::parse("postgres://h/db?sslcert=/a.pem").expect_err("cert without key");
        assert!(err.0.contains("sslkey"), "{}", err.0);
    }
}
