//! The settings of every command, loaded in layers and validated before anything starts. One
//! file per TOML section holds its struct (a `///` line per setting), its defaults and its
//! checks: `settings` (the whole, and `instance_id`), `database`, `redis`, `admin`, `retry`,
//! `retention`, `relay`, `log`, `groups` (`[[groups]]` and `OUTBOX__GROUPS`), `topics`
//! (`[[topics]]` and `OUTBOX__TOPICS`). Around them: `layers` (defaults < file < environment <
//! flags), `rule` (one check, a leaf the sections name), `rules` (runs the sections' checks in
//! order), `lenient` (text settings that the environment typed as numbers), `pairs`
//! (`topic:value` lists), `secrets` (`_FILE` variables), `show` (the effective settings,
//! secrets masked). This module holds the error.
//!
//! A leaf: it imports nothing from `db`, `publish`, `telemetry`, `relay` or `admin`; what they
//! need of the settings is converted where they are wired (`app`).

mod admin;
mod database;
pub mod groups;
mod layers;
mod lenient;
mod log;
mod pairs;
mod redis;
mod relay;
mod retention;
mod retry;
mod rule;
mod rules;
mod secrets;
mod settings;
pub mod show;
pub mod tables;
pub mod topics;

pub use admin::AdminSettings;
pub use database::{DatabaseSettings, Pooler};
pub use groups::GroupSpec;
pub use layers::Overrides;
pub use log::{LogFormat, LogSettings};
pub use redis::RedisSettings;
pub use relay::RelaySettings;
pub use retention::RetentionSettings;
pub use retry::RetrySettings;
pub use settings::Settings;
pub use tables::TableSpec;
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
