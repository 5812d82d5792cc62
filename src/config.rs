//! The settings of every command, loaded in layers and validated before anything starts:
//! `schema` (the types, one per TOML section), `defaults` (the bottom layer), `layers`
//! (file, environment and flags over it), `rules` (what serde cannot check), `lenient` (text
//! settings that the environment typed as numbers), `groups` (`[[groups]]` and
//! `OUTBOX__GROUPS`). This module holds the error and what the commands ask of the result.

use std::net::SocketAddr;

use crate::db::{Session, SessionMode};

mod defaults;
pub mod groups;
mod layers;
mod lenient;
mod pairs;
mod rules;
mod schema;
mod secrets;
pub mod show;
pub mod topics;

pub use groups::GroupSpec;
pub use layers::Overrides;
pub use schema::{
    AdminSettings, DatabaseSettings, LogFormat, LogSettings, RedisSettings, RelaySettings,
    RetentionSettings, RetrySettings, Settings,
};
pub use topics::TopicSpec;

/// A bad setting: the program prints it as one line and exits with status 2.
#[derive(Debug, thiserror::Error)]
#[error("invalid setting `{setting}`: {message}")]
pub struct ConfigError {
    /// The TOML path of the setting, e.g. `retry.base`.
    pub setting: String,
    /// What is wrong with it, for a person.
    pub message: String,
}

impl ConfigError {
    pub(super) fn new(setting: &str, message: impl Into<String>) -> Self {
        ConfigError {
            setting: setting.to_string(),
            message: message.into(),
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

    /// The parsed admin listen address.
    pub fn admin_addr(&self) -> Result<SocketAddr, ConfigError> {
        let addr = &self.admin.addr;
        if let Ok(ip) = addr.parse() {
            return Ok(ip);
        }
        // A host name (`localhost:8080`): its first address, as a listener binds one.
        std::net::ToSocketAddrs::to_socket_addrs(addr.as_str())
            .ok()
            .and_then(|mut addrs| addrs.next())
            .ok_or_else(|| {
                ConfigError::new(
                    "admin.addr",
                    format!(
                        "{addr:?} is not host:port (127.0.0.1:8080, [::1]:8080, localhost:8080)"
                    ),
                )
            })
    }

    /// This replica's name: the setting, else the host name, else a fixed fallback.
    pub fn instance_id(&self) -> String {
        if let Some(id) = &self.instance_id {
            return id.clone();
        }
        outbox_core::host::name().unwrap_or_else(|| "outbox-relay".into())
    }

    /// The session mode of the relay's connections, and the lease each transaction sets:
    /// behind a transaction pooler (`database.pooler = "transaction"`, or
    /// `database.prepared_statements = false`) nothing is kept between transactions.
    pub fn session(&self) -> Session {
        let pooled = self.database.pooler == SessionMode::TransactionPooled
            || !self.database.prepared_statements;
        Session {
            mode: match pooled {
                true => SessionMode::TransactionPooled,
                false => SessionMode::Direct,
            },
            lease: self.relay.lease,
        }
    }

    /// Whether the relay polls instead of LISTENing: `relay.poll_only`, or a transaction
    /// pooler, through which LISTEN cannot work.
    pub fn poll_only(&self) -> bool {
        self.relay.poll_only || self.database.pooler == SessionMode::TransactionPooled
    }

    /// The configured partition count of each listed topic.
    pub fn configured_partitions(&self) -> std::collections::HashMap<String, u32> {
        self.topics
            .iter()
            .map(|t| (t.name.clone(), t.partitions))
            .collect()
    }

    /// Published rows are deleted in the publish transaction itself (`published_for = 0s`).
    pub fn delete_on_publish(&self) -> bool {
        self.retention.published_for.is_zero()
    }
}
