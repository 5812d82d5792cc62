//! How a consumer reaches Redis: one server (`redis://`, or `rediss://` for TLS) through a
//! connection manager, or a Redis Cluster from its seed nodes through a cluster connection
//! that sends each command to the master of its key's slot and follows MOVED and ASK. Both
//! are lazy, reconnect by themselves after an outage, and are cheap to clone.
//!
//! The relay uses the same [`RedisConn`] and [`seeds`], so a seed list means one thing to both.

use std::path::Path;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, TlsCertificates, Value};

use crate::config::ConsumerConfig;

/// A connection to Redis: one server's connection manager, or a cluster connection. Commands
/// go through [`ConnectionLike`] either way; on a cluster each goes to the master of its first
/// key's slot (a script call: its first key's), and a keyless one such as PING to every
/// master.
#[derive(Clone)]
pub enum RedisConn {
    /// One server.
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

/// The seed nodes of a cluster's URL list: comma-separated, blanks around them ignored; a
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

/// Why the Redis connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL or TLS settings were refused by the client.
    #[error("redis client: {0}")]
    Client(#[from] redis::RedisError),
    /// A TLS file could not be read.
    #[error("cannot read {path}: {error}")]
    File {
        /// The file.
        path: String,
        /// The I/O error.
        error: String,
    },
}

/// The consumer's lazy connection for the config's URL (TLS files applied): it connects at
/// the first command and reconnects after a failure, so an outage never needs a new consumer.
pub(crate) fn connect(config: &ConsumerConfig) -> Result<RedisConn, ConnectError> {
    let timeouts = Timeouts {
        connect: Duration::from_secs(2),
        // A blocking read holds its reply for up to `block`.
        response: config.block + Duration::from_secs(10),
    };
    let tls = tls_certificates(config)?;
    Ok(match config.cluster {
        true => RedisConn::Cluster(cluster(&seeds(&config.redis_url), timeouts, tls)?),
        false => RedisConn::Single(manager(&config.redis_url, timeouts, tls)?),
    })
}

/// How long a connection attempt, and a command's reply, may take.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// One connection attempt.
    pub connect: Duration,
    /// One command or pipeline (after any redirection it followed, on a cluster).
    pub response: Duration,
}

/// A lazy cluster connection from `seeds`: it learns the slots from the first seed that
/// answers and connects to each master as commands need it. A node that refuses connections
/// fails its commands after a few quick retries, so a dead master costs its own streams
/// little time and the others none.
pub fn cluster(
    seeds: &[String],
    timeouts: Timeouts,
    tls: Option<TlsCertificates>,
) -> Result<ClusterConnection, redis::RedisError> {
    let mut builder = ClusterClientBuilder::new(seeds.to_vec())
        .connection_timeout(timeouts.connect)
        .response_timeout(timeouts.response)
        // MOVED, ASK and TRYAGAIN are retries too: enough for a slot that moves twice, few
        // enough that a dead node gives up well within the timeout.
        .retries(4)
        .min_retry_wait(20)
        .max_retry_wait(200);
    if let Some(tls) = tls {
        builder = builder.certs(tls);
    }
    let client = builder.build()?;
    Ok(client.get_pending_async_connection_with_config(redis::cluster::ClusterConfig::new()))
}

/// A lazy connection manager for one server's `url`, over TLS with `tls` when given.
pub fn manager(
    url: &str,
    timeouts: Timeouts,
    tls: Option<TlsCertificates>,
) -> Result<ConnectionManager, redis::RedisError> {
    let client = match tls {
        Some(tls) => redis::Client::build_with_tls(url, tls)?,
        None => redis::Client::open(url)?,
    };
    let config = redis::aio::ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeouts.connect))
        .set_response_timeout(Some(timeouts.response))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(500));
    ConnectionManager::new_lazy_with_config(client, config)
}

/// The TLS files as the client wants them; `None` for plain `redis://` URLs.
fn tls_certificates(config: &ConsumerConfig) -> Result<Option<TlsCertificates>, ConnectError> {
    if !config.redis_url.trim_start().starts_with("rediss://") {
        return Ok(None);
    }
    // rustls needs a process-wide crypto provider; the application may have set one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client_tls = match (&config.tls_client_cert_file, &config.tls_client_key_file) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        _ => None,
    };
    let root_cert = config.tls_ca_file.as_deref().map(read).transpose()?;
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
}

fn read(path: &Path) -> Result<Vec<u8>, ConnectError> {
    std::fs::read(path).map_err(|e| ConnectError::File {
        path: path.display().to_string(),
        error: e.to_string(),
    })
}
