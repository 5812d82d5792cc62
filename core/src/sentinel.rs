//! Redis behind Sentinel: the master a set of Sentinels names, followed across failovers.
//!
//! [`SentinelConn`] asks the Sentinels for the master (the client checks that the node it is
//! given says it is a master), keeps one multiplexed connection to it, and forgets that
//! connection when a command fails in a way that says the master may have moved: the link
//! broke, the node refuses writes (`READONLY`, a demoted master), or it lost its master
//! (`MASTERDOWN`). The next command asks the Sentinels again. While they name no reachable
//! master, every command fails as an outage would; nothing needs a restart.

use std::sync::{Arc, Mutex};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, IntoConnectionInfo, Pipeline,
    RedisError, RedisFuture, RedisResult, ServerErrorKind, TlsCertificates, TlsMode, Value,
};

/// A connection to the current master of a Sentinel-monitored group. Cheap to clone.
#[derive(Clone)]
pub struct SentinelConn {
    inner: Arc<Inner>,
}

struct Inner {
    client: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Option<MultiplexedConnection>>,
    config: AsyncConnectionConfig,
    db: i64,
}

/// What a Sentinel connection needs beyond the Sentinels' URLs.
#[derive(Debug, Clone)]
pub struct SentinelTarget<'a> {
    /// The name the Sentinels monitor the master under (`redis.sentinel_master`).
    pub master: &'a str,
    /// The Sentinels' own password (`redis.sentinel_password`), if they need one.
    pub password: Option<&'a str>,
}

impl SentinelConn {
    /// A lazy connection: nothing is asked before the first command. `urls` are the Sentinels
    /// (`redis://` or `rediss://`, all alike); the user, password and database in the first
    /// URL are the master's.
    pub fn new(
        urls: &[String],
        target: SentinelTarget<'_>,
        config: AsyncConnectionConfig,
        tls: Option<TlsCertificates>,
    ) -> RedisResult<SentinelConn> {
        let infos = urls
            .iter()
            .map(|url| url.as_str().into_connection_info())
            .collect::<RedisResult<Vec<_>>>()?;
        let first = infos.first().ok_or_else(|| {
            RedisError::from((ErrorKind::InvalidClientConfig, "no Sentinel address"))
        })?;
        let secure = matches!(first.addr(), ConnectionAddr::TcpTls { .. });
        let settings = first.redis_settings().clone();
        let addrs = infos.iter().map(|info| info.addr().clone());
        let mut builder =
            SentinelClientBuilder::new(addrs, target.master, SentinelServerType::Master)?
                .set_client_to_redis_db(settings.db());
        if let Some(user) = settings.username() {
            builder = builder.set_client_to_redis_username(user);
        }
        if let Some(password) = settings.password() {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(password) = target.password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        if secure {
            builder = builder
                .set_client_to_redis_tls_mode(TlsMode::Secure)
                .set_client_to_sentinel_tls_mode(TlsMode::Secure);
            if let Some(tls) = tls {
                builder = builder
                    .set_client_to_redis_certificates(tls.clone())
                    .set_client_to_sentinel_certificates(tls);
            }
        }
        Ok(SentinelConn {
            inner: Arc::new(Inner {
                client: tokio::sync::Mutex::new(builder.build()?),
                current: Mutex::new(None),
                config,
                db: settings.db(),
            }),
        })
    }

    fn cached(&self) -> Option<MultiplexedConnection> {
        self.inner
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The connection to the master, asking the Sentinels when there is none.
    async fn master(&self) -> RedisResult<MultiplexedConnection> {
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        let mut client = self.inner.client.lock().await;
        // Another command may have found it while this one waited.
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        let master = client.async_get_client().await?;
        let conn = master
            .get_multiplexed_async_connection_with_config(&self.inner.config)
            .await?;
        *self.inner.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// After `error`: forgets the master if the error says it may have moved.
    fn after(&self, error: &RedisError) {
        if moved(error) {
            *self.inner.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }
}

/// Whether an error means the connection may no longer lead to the master.
fn moved(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(
            e.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.master().await?;
            let result = conn.req_packed_command(cmd).await;
            if let Err(e) = &result {
                self.after(e);
            }
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.master().await?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(e) = &result {
                self.after(e);
            }
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_that_may_mean_a_failover_forget_the_master() {
        let readonly = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ReadOnly),
            "You can't write against a read only replica.",
        ));
        assert!(moved(&readonly));
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(moved(&io));
        let wrongtype = RedisError::from((
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "WRONGTYPE",
        ));
        assert!(!moved(&wrongtype));
    }

    #[test]
    fn the_first_url_gives_the_masters_credentials() {
        let conn = SentinelConn::new(
            &[
                "redis://app:s3cret@127.0.0.1:26379/2".to_string(),
                "redis://127.0.0.1:26380".to_string(),
            ],
            SentinelTarget {
                master: "mymaster",
                password: Some("sentinel-pass"),
            },
            AsyncConnectionConfig::new(),
            None,
        )
        .expect("built without connecting");
        assert_eq!(conn.get_db(), 2);
    }
}
