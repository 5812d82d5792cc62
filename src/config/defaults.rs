//! The built-in defaults, the bottom layer (docs/configuration.md lists them), chosen so that a
//! relay started with only `DATABASE_URL` is safe. Defaults that follow `relay.lease` are
//! adjusted when the layers are merged (`layers`).

use std::time::Duration;

use super::schema::{
    AdminSettings, DatabaseSettings, RedisSettings, RelaySettings, RetentionSettings, RetrySettings,
};
use crate::db::SessionMode;

/// The shortest default `relay.stall_after`: longer than the claim loop's longest outage pause.
pub(super) const MIN_STALL_AFTER: Duration = Duration::from_secs(10);

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings {
            url: None,
            pool_size: 8,
            prepared_statements: true,
            pooler: SessionMode::Direct,
        }
    }
}

impl Default for RedisSettings {
    fn default() -> Self {
        RedisSettings {
            url: "redis://127.0.0.1:6379".into(),
            cluster: false,
            sentinel_master: None,
            sentinel_password: None,
            stream_prefix: "outbox:".into(),
            dedup_window: Duration::from_secs(15 * 60),
            max_payload_bytes: 1024 * 1024,
            maxlen: None,
            trim_acked: false,
            timeout: Duration::from_secs(5),
            wait_replicas: 0,
            wait_timeout: Duration::from_secs(1),
            wait_fsync: false,
            max_memory_ratio: 0.9,
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
        }
    }
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            addr: "127.0.0.1:8080".into(),
            token: None,
            read_only_token: None,
            failed_logins_per_minute: 10,
            max_response_bytes: 4 * 1024 * 1024,
        }
    }
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_attempts: 10,
            base: Duration::from_secs(1),
            max: Duration::from_secs(600),
        }
    }
}

impl Default for RetentionSettings {
    fn default() -> Self {
        RetentionSettings {
            published_for: Duration::from_secs(7 * 24 * 3600),
            interval: Duration::from_secs(60),
            batch_size: 1000,
        }
    }
}

impl Default for RelaySettings {
    fn default() -> Self {
        RelaySettings {
            lease: Duration::from_secs(30),
            batch_size: 1000,
            batch_bytes: 4 * 1024 * 1024,
            workers: 2,
            overlap_mark: true,
            quiet_above: 1500,
            cluster_claims: 2,
            poll_interval: Duration::from_secs(1),
            poll_only: false,
            heartbeat_interval: Duration::from_secs(5),
            stall_after: Duration::from_secs(60),
        }
    }
}
