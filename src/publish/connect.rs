//! How the relay connects to Redis: the URL (`redis://`, or `rediss://` for TLS), the TLS files
//! (`redis.ca_file`, `redis.client_cert_file`, `redis.client_key_file`, PEM), and a lazy
//! connection manager that never blocks start-up and fails a command fast while Redis is away.
//! Over TLS the server's certificate must chain to the CA file (or the system's CAs) and match
//! the URL's host name: an untrusted server is never sent a command.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{ClientTlsConfig, TlsCertificates};

use crate::config::RedisSettings;
use crate::pem::{self, TlsSettingError};

/// The TLS files, read once.
#[derive(Clone)]
pub struct RedisTls {
    root_cert: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

impl RedisTls {
    /// Reads and checks the files the settings name; `None` when they name none.
    pub fn load(settings: &RedisSettings) -> Result<Option<RedisTls>, TlsSettingError> {
        let (ca, cert, key) = (
            &settings.ca_file,
            &settings.client_cert_file,
            &settings.client_key_file,
        );
        if ca.is_none() && cert.is_none() && key.is_none() {
            return Ok(None);
        }
        if !settings.url.starts_with("rediss://") {
            return Err(TlsSettingError(
                "TLS files need a rediss:// redis.url".into(),
            ));
        }
        let root_cert = match ca {
            Some(path) => {
                pem::roots_from(path, "redis.ca_file")?;
                Some(pem::read(path, "redis.ca_file")?)
            }
            None => None,
        };
        let client = match (cert, key) {
            (Some(cert), Some(key)) => {
                pem::certs_from(cert, "redis.client_cert_file")?;
                pem::key_from(key, "redis.client_key_file")?;
                Some((
                    pem::read(cert, "redis.client_cert_file")?,
                    pem::read(key, "redis.client_key_file")?,
                ))
            }
            (None, None) => None,
            _ => return Err(TlsSettingError(
                "redis.client_cert_file and redis.client_key_file go together: set both or neither"
                    .into(),
            )),
        };
        Ok(Some(RedisTls { root_cert, client }))
    }
}

/// A lazy connection manager for `url`, over TLS with `tls`'s files when given; a command
/// (or a pipeline) may take up to `timeout`.
pub fn manager(
    url: &str,
    timeout: Duration,
    tls: Option<&RedisTls>,
) -> Result<ConnectionManager, redis::RedisError> {
    let client = match tls {
        None => redis::Client::open(url)?,
        Some(tls) => redis::Client::build_with_tls(
            url,
            TlsCertificates {
                client_tls: tls.client.as_ref().map(|(cert, key)| ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone(),
                }),
                root_cert: tls.root_cert.clone(),
            },
        )?,
    };
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client, config)
}
