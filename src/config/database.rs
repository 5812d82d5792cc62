//! `[database]`: where the outbox table lives, how many connections the relay holds, and what
//! sits between the relay and Postgres. The URL is checked here as `db` will read it
//! ([`crate::pgurl`], libpq's TLS parameters included), so a bad one stops the start.

use serde::{Deserialize, Serialize};

use super::lenient;
use super::rule::Rule;
use super::{ConfigError, Settings};

/// Postgres settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// `postgres://user@host:port/db`; required by `run` and `migrate`.
    #[serde(deserialize_with = "lenient::opt_string")]
    pub url: Option<String>,
    /// Postgres connections per replica, LISTEN aside: two form the admin server's pool, the
    /// rest the relay's (claim cycles and maintenance).
    pub pool_size: u32,
    /// Keep the claim cycle's statements prepared on each connection, a session of its own.
    /// Off: keep nothing in a session between transactions (`db::pooler`), as behind a pooler
    /// in transaction mode (PgBouncer, any version; with `relay.poll_only`).
    pub prepared_statements: bool,
    /// What sits between the relay and Postgres: `"none"`, or `"transaction"` for a pooler in
    /// transaction mode (PgBouncer `pool_mode = transaction`), which means what
    /// `prepared_statements = false` with `relay.poll_only = true` means.
    pub pooler: Pooler,
    /// Standbys that must have flushed the WAL up to a batch's claim before its events are
    /// published (`pg_stat_replication`); 0 publishes at once.
    pub wait_standbys: u32,
    /// How long a batch waits for them; a batch that waited in vain goes back to pending,
    /// without an attempt.
    #[serde(with = "humantime_serde")]
    pub wait_standbys_timeout: std::time::Duration,
    /// A role `migrate` grants the rows of the relay's tables (and nothing else), so that
    /// `run` can connect as it while only the migrating role may change the schema.
    pub runtime_role: Option<String>,
}

/// What sits between the relay and Postgres (`database.pooler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Pooler {
    /// Nothing: each connection is a server session of its own (`"none"`).
    #[default]
    #[serde(rename = "none")]
    Direct,
    /// A pooler in transaction mode (PgBouncer `pool_mode = transaction`): each transaction
    /// may run on another server connection (`"transaction"`).
    #[serde(rename = "transaction")]
    Transaction,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings {
            url: None,
            pool_size: 8,
            prepared_statements: true,
            pooler: Pooler::Direct,
            wait_standbys: 0,
            wait_standbys_timeout: std::time::Duration::from_secs(1),
            runtime_role: None,
        }
    }
}

impl Settings {
    /// The database URL, required by the commands that touch Postgres.
    pub fn database_url(&self) -> Result<&str, ConfigError> {
        self.database.url.as_deref().ok_or_else(|| {
            ConfigError::new(
                "database.url",
                "is required (set DATABASE_URL or --database-url)",
            )
        })
    }

    /// Whether the relay's connections may keep nothing between transactions: behind a
    /// transaction pooler (`database.pooler = "transaction"`), or with
    /// `database.prepared_statements = false`.
    pub fn transaction_pooled(&self) -> bool {
        self.database.pooler == Pooler::Transaction || !self.database.prepared_statements
    }
}

/// The checks of `[database]`.
pub(super) const RULES: &[Rule<Settings>] = &[
    Rule {
        settings: &["database.url"],
        check: |s| s.database.url.as_deref().map_or(Ok(()), postgres_url),
    },
    Rule {
        settings: &["database.pool_size", "relay.workers"],
        check: |s| {
            let least = s.relay.workers.max(1) + 2;
            if s.database.pool_size < least {
                return Err(format!(
                    "database.pool_size ({}) must be at least relay.workers + 2 = {least}: the admin server has 2 connections and each claim worker needs one",
                    s.database.pool_size
                ));
            }
            Ok(())
        },
    },
];

fn postgres_url(raw: &str) -> Result<(), String> {
    // Not `url::Url`: it refuses the comma-separated hosts of a multi-host URL.
    let scheme = raw.split_once("://").map_or("", |(scheme, _)| scheme);
    if !matches!(scheme, "postgres" | "postgresql") {
        return Err(format!(
            "scheme must be postgres:// or postgresql://, not {scheme}://"
        ));
    }
    crate::pgurl::Target::parse(raw)
        .map(|_| ())
        .map_err(|e| e.0)
}
