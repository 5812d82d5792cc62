//! `[retention]`: how long published rows are kept, and how the cleaner deletes them.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::rule::{positive, within, Rule};
use super::Settings;

/// Retention of published rows.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionSettings {
    /// Published rows older than this are deleted; `0s` deletes them at publish time.
    #[serde(with = "humantime_serde")]
    pub published_for: Duration,
    /// How often the cleaner runs.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Rows deleted per statement: small enough never to stall publishing.
    pub batch_size: u32,
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

impl Settings {
    /// Published rows are deleted in the publish transaction itself (`published_for = 0s`).
    pub fn delete_on_publish(&self) -> bool {
        self.retention.published_for.is_zero()
    }
}

/// The checks of `[retention]`.
pub(super) const RULES: &[Rule<Settings>] = &[
    Rule {
        settings: &["retention.interval"],
        check: |s| positive(s.retention.interval),
    },
    Rule {
        settings: &["retention.batch_size"],
        check: |s| within(s.retention.batch_size, 1, 100_000),
    },
];
