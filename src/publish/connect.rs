//! How the relay reaches Redis, from its settings: `redis.url` (with `redis.cluster`, a seed
//! list; with `redis.sentinel_master`, the Sentinels), `redis.timeout`, and the TLS files `redis.ca_file`, `redis.client_cert_file` and
//! `redis.client_key_file` (read and checked by `RedisSettings::tls_files`). The connection
//! itself, lazy and TLS-checked, is [`outbox_core::redis_conn`]'s, the same as the consumers'.

use std::time::Duration;

use redis::aio::ConnectionManager;

use crate::config::RedisSettings;
use outbox_core::redis_conn;
pub use outbox_core::redis_conn::{RedisConn, TlsFiles};

/// The relay's connection for these settings (`redis.url`, `redis.cluster`, `redis.timeout`),
/// over TLS with `tls`'s files when given. Lazy: nothing connects before the first command.
/// Must be called inside a Tokio runtime (a cluster connection starts its task there).
pub fn connect(
    settings: &RedisSettings,
    tls: Option<&TlsFiles>,
) -> Result<RedisConn, redis::RedisError> {
    redis_conn::connect(
        &settings.url,
        &settings.topology(),
        timeouts(settings.timeout),
        tls,
    )
}

/// A lazy connection manager for `url` without TLS files; a command (or a pipeline) may take
/// up to `timeout`.
pub fn manager(url: &str, timeout: Duration) -> Result<ConnectionManager, redis::RedisError> {
    redis_conn::manager(url, timeouts(timeout), None)
}

fn timeouts(response: Duration) -> redis_conn::Timeouts {
    redis_conn::Timeouts {
        connect: Duration::from_secs(1),
        response,
    }
}
