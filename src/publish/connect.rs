//! How the relay connects to Redis: the URL (`redis://`, or `rediss://` for TLS), the TLS files
//! (`redis.ca_file`, `redis.client_cert_file`, `redis.client_key_file`, PEM), and a lazy
//! connection that never blocks start-up and fails a command fast while Redis is away: a
//! connection manager for one server, or with `redis.cluster` a cluster connection that
//! routes each command to the master of its key's slot and follows MOVED and ASK.
//! Over TLS the server's certificate must chain to the CA file (or the system's CAs) and match
//! the URL's host name: an untrusted server is never sent a command.

use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
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
        let plain = if settings.cluster {
            seeds(&settings.url)
                .iter()
                .any(|seed| !seed.starts_with("rediss://"))
        } else {
            !settings.url.starts_with("rediss://")
        };
        if plain {
            return Err(TlsSettingError(
                "TLS files need a rediss:// redis.url (every seed node's, with redis.cluster)"
                    .into(),
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

    fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.root_cert.clone(),
        }
    }
}

use outbox_consumer::redis_conn;
pub use outbox_consumer::redis_conn::{seeds, RedisConn};

/// Checks a cluster's seed list as the client will read it; `Err` says what is wrong.
pub fn check_seeds(url: &str) -> Result<(), String> {
    let seeds = seeds(url);
    if seeds.is_empty() {
        return Err("names no seed node (redis.cluster = true wants host:port or redis://host:port, comma-separated)".into());
    }
    for seed in &seeds {
        let parsed = url::Url::parse(seed).map_err(|e| format!("seed {seed}: {e}"))?;
        if !matches!(parsed.scheme(), "redis" | "rediss") {
            return Err(format!(
                "seed {seed}: a cluster node is reached with redis:// or rediss://"
            ));
        }
        if !matches!(parsed.path(), "" | "/" | "/0") {
            return Err(format!("seed {seed}: Redis Cluster has only database 0"));
        }
    }
    ClusterClientBuilder::new(seeds)
        .build()
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The relay's connection for these settings (`redis.url`, `redis.cluster`, `redis.timeout`),
/// over TLS with `tls`'s files when given. Lazy: nothing connects before the first command.
/// Must be called inside a Tokio runtime (a cluster connection starts its task there).
pub fn connect(
    settings: &RedisSettings,
    tls: Option<&RedisTls>,
) -> Result<RedisConn, redis::RedisError> {
    if settings.cluster {
        cluster(&seeds(&settings.url), settings.timeout, tls).map(RedisConn::Cluster)
    } else {
        manager(&settings.url, settings.timeout, tls).map(RedisConn::Single)
    }
}

/// A lazy cluster connection from `seeds`; a command (after any MOVED or ASK it followed)
/// may take up to `timeout`.
pub fn cluster(
    seeds: &[String],
    timeout: Duration,
    tls: Option<&RedisTls>,
) -> Result<ClusterConnection, redis::RedisError> {
    redis_conn::cluster(seeds, timeouts(timeout), tls.map(RedisTls::certificates))
}

/// A lazy connection manager for `url`, over TLS with `tls`'s files when given; a command
/// (or a pipeline) may take up to `timeout`.
pub fn manager(
    url: &str,
    timeout: Duration,
    tls: Option<&RedisTls>,
) -> Result<ConnectionManager, redis::RedisError> {
    redis_conn::manager(url, timeouts(timeout), tls.map(RedisTls::certificates))
}

fn timeouts(response: Duration) -> redis_conn::Timeouts {
    redis_conn::Timeouts {
        connect: Duration::from_secs(1),
        response,
    }
}
