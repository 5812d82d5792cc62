//! How the relay connects to Redis: the URL (`redis://`, or `rediss://` for TLS), the TLS files
//! (`redis.ca_file`, `redis.client_cert_file`, `redis.client_key_file`, PEM), and a lazy
//! connection that never blocks start-up and fails a command fast while Redis is away: a
//! connection manager for one server, or with `redis.cluster` a cluster connection that
//! routes each command to the master of its key's slot and follows MOVED and ASK.
//! Over TLS the server's certificate must chain to the CA file (or the system's CAs) and match
//! the URL's host name: an untrusted server is never sent a command.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ClientTlsConfig, Cmd, Pipeline, RedisFuture, TlsCertificates, Value};

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

/// The seed nodes of a cluster's `redis.url`: comma-separated, blanks around them ignored; a
/// seed written `host:port` means `redis://host:port`.
pub fn seeds(url: &str) -> Vec<String> {
    url.split(',')
        .map(str::trim)
        .filter(|seed| !seed.is_empty())
        .map(|seed| match seed.contains("://") {
            true => seed.to_string(),
            false => format!("redis://{seed}"),
        })
        .collect()
}

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

/// A connection to Redis, cheap to clone: one server's connection manager, or a cluster
/// connection. Commands go through [`ConnectionLike`] either way; on a cluster each goes to
/// the master of its first key's slot (a script call: its stream's), and a keyless one such
/// as PING to every master.
#[derive(Clone)]
pub enum RedisConn {
    /// One server (`redis.cluster = false`).
    Single(ConnectionManager),
    /// A Redis Cluster, from its seed nodes.
    Cluster(ClusterConnection),
}

impl From<ConnectionManager> for RedisConn {
    fn from(conn: ConnectionManager) -> Self {
        RedisConn::Single(conn)
    }
}

impl RedisConn {
    /// Whether this is a cluster connection.
    pub fn is_cluster(&self) -> bool {
        matches!(self, RedisConn::Cluster(_))
    }
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            RedisConn::Single(conn) => conn.req_packed_command(cmd),
            RedisConn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            RedisConn::Single(conn) => conn.req_packed_commands(pipeline, offset, count),
            RedisConn::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(conn) => conn.get_db(),
            RedisConn::Cluster(conn) => conn.get_db(),
        }
    }
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

/// A lazy cluster connection from `seeds`: it learns the slots from the first seed that
/// answers and connects to each master as commands need it. A command (after any MOVED or
/// ASK it followed) may take up to `timeout`; a node that refuses connections fails its
/// commands after one quick retry, so a dead master costs its own topics little time and the
/// others none.
pub fn cluster(
    seeds: &[String],
    timeout: Duration,
    tls: Option<&RedisTls>,
) -> Result<ClusterConnection, redis::RedisError> {
    let mut builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(Duration::from_secs(1))
        .response_timeout(timeout)
        // MOVED, ASK and TRYAGAIN are retries too: enough for a slot that moves twice,
        // few enough that a dead node gives up well within the timeout.
        .retries(RETRIES)
        .min_retry_wait(20)
        .max_retry_wait(200);
    if let Some(tls) = tls {
        builder = builder.certs(tls.certificates());
    }
    let client = builder.build()?;
    Ok(client.get_pending_async_connection_with_config(redis::cluster::ClusterConfig::new()))
}

/// Retries of one cluster command (redirections included).
const RETRIES: u32 = 4;

/// A lazy connection manager for `url`, over TLS with `tls`'s files when given; a command
/// (or a pipeline) may take up to `timeout`.
pub fn manager(
    url: &str,
    timeout: Duration,
    tls: Option<&RedisTls>,
) -> Result<ConnectionManager, redis::RedisError> {
    let client = match tls {
        None => redis::Client::open(url)?,
        Some(tls) => redis::Client::build_with_tls(url, tls.certificates())?,
    };
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client, config)
}
