//! All settings: one field per TOML section (each section's struct, defaults and checks live
//! in the file of its name), plus `instance_id`, the one top-level setting. serde reads them
//! with `deny_unknown_fields`, so a misspelt key is an error naming it; docs/configuration.md
//! is the full table.

use serde::{Deserialize, Serialize};

use super::admin::AdminSettings;
use super::database::DatabaseSettings;
use super::groups::{self, GroupSpec};
use super::lenient;
use super::log::LogSettings;
use super::redis::RedisSettings;
use super::relay::RelaySettings;
use super::retention::RetentionSettings;
use super::retry::RetrySettings;
use super::rule::Rule;
use super::tables::TableSpec;
use super::topics::{self, TopicSpec};

/// All settings. Every field maps to a TOML path and to `OUTBOX__SECTION__KEY`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// Postgres: where the outbox table lives.
    pub database: DatabaseSettings,
    /// Redis: where the streams are written.
    pub redis: RedisSettings,
    /// The admin HTTP server (health, metrics, API, UI).
    pub admin: AdminSettings,
    /// How failed events are retried and when they are dead-lettered.
    pub retry: RetrySettings,
    /// How long published rows are kept.
    pub retention: RetentionSettings,
    /// The claim loop.
    pub relay: RelaySettings,
    /// How log lines are written.
    pub log: LogSettings,
    /// This replica's name in heartbeats and logs; defaults to the host name.
    #[serde(deserialize_with = "lenient::opt_string")]
    pub instance_id: Option<String>,
    /// Consumer groups the relay creates before it first publishes to their topic.
    #[serde(deserialize_with = "groups::deserialize")]
    pub groups: Vec<GroupSpec>,
    /// Topics with more than one partition (one stream per partition); a topic not listed has
    /// one.
    #[serde(deserialize_with = "topics::deserialize")]
    pub topics: Vec<TopicSpec>,
    /// Existing outbox tables the relay publishes from besides its own (TOML `[[tables]]`).
    pub tables: Vec<TableSpec>,
}

impl Settings {
    /// This replica's name: the setting, else the host name, else a fixed fallback.
    pub fn instance_id(&self) -> String {
        if let Some(id) = &self.instance_id {
            return id.clone();
        }
        outbox_core::host::name().unwrap_or_else(|| "outbox-relay".into())
    }
}

/// The checks of the top-level settings.
pub(super) const RULES: &[Rule<Settings>] = &[Rule {
    settings: &["instance_id"],
    check: |s| match &s.instance_id {
        Some(id) if id.is_empty() || id.len() > 255 => Err("must be 1 to 255 characters".into()),
        _ => Ok(()),
    },
}];
