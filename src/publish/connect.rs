//! How the relay reaches Redis, from its settings: `redis.url` (with `redis.cluster`, a seed
//! list; with `redis.sentinel_master`, the Sentinels), `redis.timeout`, and the TLS files `redis.ca_file`, `redis.client_cert_file` and
//! `redis.client_key_file`. The connection itself, lazy and TLS-checked, is
//! [`outbox_core::redis_conn`]'s, the same as the consumers'.

use std::time::Duration;

use redis::aio::ConnectionManager;

use crate::config::RedisSettings;
use outbox_core::pem::TlsSettingError;
use outbox_core::redis_conn::{self, TlsPaths};
pub use outbox_core::redis_conn::{check_seeds, seeds, RedisConn, TlsFiles};

/// Reads and checks the TLS files the settings name; `None` when they name none.
pub fn tls_files(settings: &RedisSettings) -> Result<Option<TlsFiles>, TlsSettingError> {
    let paths = TlsPaths {
        ca: (settings.ca_file.as_deref(), "redis.ca_file"),
        cert: (
            settings.client_cert_file.as_deref(),
            "redis.client_cert_file",
        ),
        key: (settings.client_key_file.as_deref(), "redis.client_key_file"),
    };
    TlsFiles::load(
        paths,
        &redis_conn::urls(&settings.url, &settings.topology()),
    )
}

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
