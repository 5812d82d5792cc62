//! How the relay and the consumers reach Redis: one server (`redis://`, or `rediss://` for TLS) through a
//! connection manager, a Redis Cluster from its seed nodes through a cluster connection
//! that sends each command to the master of its key's slot and follows MOVED and ASK, or the
//! master a set of Sentinels names, followed across failovers (`crate::sentinel`). All are
//! lazy, reconnect by themselves after an outage, and are cheap to clone.
//!
//! The relay and the consumers use the same [`RedisConn`], [`seeds`] and [`TlsFiles`], so a
//! seed list and a TLS setting mean one thing to both. Over TLS the server's certificate must
//! chain to the CA file (or the system's CAs) and match the URL's host name: an untrusted
//! server is never sent a command.

use std::path::Path;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ClientTlsConfig, Cmd, Pipeline, RedisFuture, TlsCertificates, Value};

use crate::pem::{self, TlsSettingError};
use crate::sentinel::{SentinelConn, SentinelTarget};

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
    /// The master a set of Sentinels names.
    Sentinel(SentinelConn),
}

/// How the servers of a URL list are arranged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Topology {
    /// One server.
    #[default]
    Single,
    /// A Redis Cluster: the URL lists seed nodes.
    Cluster,
    /// Sentinels: the URL lists them, and they name the master.
    Sentinel {
        /// The name they monitor the master under.
        master: String,
        /// Their own password, if they need one.
        password: Option<String>,
    },
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
            RedisConn::Sentinel(conn) => conn.req_packed_command(cmd),
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
            RedisConn::Sentinel(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            RedisConn::Single(conn) => conn.get_db(),
            RedisConn::Cluster(conn) => conn.get_db(),
            RedisConn::Sentinel(conn) => conn.get_db(),
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

/// Checks a cluster's seed list as the client will read it; `Err` says what is wrong.
pub fn check_seeds(url: &str) -> Result<(), String> {
    let seeds = seeds(url);
    if seeds.is_empty() {
        return Err(
            "names no seed node (a cluster wants host:port or redis://host:port, comma-separated)"
                .into(),
        );
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

/// Why the Redis connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL or TLS settings were refused by the client.
    #[error("redis client: {0}")]
    Client(#[from] redis::RedisError),
    /// A TLS file is unreadable, holds no certificate or key, or the files do not go together.
    #[error(transparent)]
    Tls(#[from] TlsSettingError),
}

/// A lazy connection to `url` as `topology` reads it (a cluster's seed list or the Sentinels:
/// see [`seeds`]), over TLS with `tls`'s files when given: it connects at the first command
/// and reconnects after a failure, so an outage never needs a new connection. Must be called
/// inside a Tokio runtime (a cluster connection starts its task there).
pub fn connect(
    url: &str,
    topology: &Topology,
    timeouts: Timeouts,
    tls: Option<&TlsFiles>,
) -> Result<RedisConn, redis::RedisError> {
    let certs = tls.map(TlsFiles::certificates);
    Ok(match topology {
        Topology::Cluster => RedisConn::Cluster(self::cluster(&seeds(url), timeouts, certs)?),
        Topology::Single => RedisConn::Single(manager(url, timeouts, certs)?),
        Topology::Sentinel { master, password } => {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeouts.connect))
                .set_response_timeout(Some(timeouts.response));
            let target = SentinelTarget {
                master,
                password: password.as_deref(),
            };
            RedisConn::Sentinel(SentinelConn::new(&seeds(url), target, config, certs)?)
        }
    })
}

/// The URLs a setting names: the seeds of a cluster's list or the Sentinels, else the one URL.
pub fn urls(url: &str, topology: &Topology) -> Vec<String> {
    match topology {
        Topology::Single => vec![url.trim().to_string()],
        Topology::Cluster | Topology::Sentinel { .. } => seeds(url),
    }
}

/// The TLS files of a `rediss://` connection (PEM), read and checked once: a private CA to
/// trust, and a client certificate with its key for mutual TLS.
#[derive(Clone)]
pub struct TlsFiles {
    root_cert: Option<Vec<u8>>,
    client: Option<(Vec<u8>, Vec<u8>)>,
}

/// Where the TLS files are, and the names of the settings that gave them (for errors).
#[derive(Debug, Clone, Copy)]
pub struct TlsPaths<'a> {
    /// A private CA's certificates, and its setting's name.
    pub ca: (Option<&'a Path>, &'static str),
    /// The client certificate, and its setting's name.
    pub cert: (Option<&'a Path>, &'static str),
    /// The client certificate's key, and its setting's name.
    pub key: (Option<&'a Path>, &'static str),
}

impl TlsFiles {
    /// Reads and checks the files `paths` names for a connection to `urls`; `None` when it
    /// names none. Files need `rediss://` URLs (every seed's), and the client certificate and
    /// key go together.
    pub fn load(paths: TlsPaths<'_>, urls: &[String]) -> Result<Option<TlsFiles>, TlsSettingError> {
        let (ca, cert, key) = (paths.ca, paths.cert, paths.key);
        if ca.0.is_none() && cert.0.is_none() && key.0.is_none() {
            return Ok(None);
        }
        if !urls
            .iter()
            .all(|url| url.trim_start().starts_with("rediss://"))
        {
            return Err(TlsSettingError(format!(
                "{} and the other TLS files need a rediss:// URL (every seed node's, on a cluster)",
                ca.1
            )));
        }
        let root_cert = match ca.0 {
            Some(path) => {
                pem::roots_from(path, ca.1)?;
                Some(pem::read(path, ca.1)?)
            }
            None => None,
        };
        let client = match (cert.0, key.0) {
            (Some(cert_path), Some(key_path)) => {
                pem::certs_from(cert_path, cert.1)?;
                pem::key_from(key_path, key.1)?;
                Some((pem::read(cert_path, cert.1)?, pem::read(key_path, key.1)?))
            }
            (None, None) => None,
            _ => {
                return Err(TlsSettingError(format!(
                    "{} and {} go together: set both or neither",
                    cert.1, key.1
                )))
            }
        };
        Ok(Some(TlsFiles { root_cert, client }))
    }

    fn certificates(&self) -> TlsCertificates {
        // rustls needs a process-wide crypto provider; the application may have set one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        TlsCertificates {
            client_tls: self.client.as_ref().map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
            root_cert: self.root_cert.clone(),
        }
    }
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
