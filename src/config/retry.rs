//! `[retry]`: how an event whose publish failed through its own fault is retried, and when it
//! is dead-lettered.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::rule::{at_least_one, human, positive, Rule};
use super::Settings;

/// Retry policy for events whose publish failed through their own fault.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySettings {
    /// Failed attempts after which an event is dead-lettered.
    pub max_attempts: u32,
    /// Delay after the first failure; doubles with each further failure.
    #[serde(with = "humantime_serde")]
    pub base: Duration,
    /// Upper bound of the delay.
    #[serde(with = "humantime_serde")]
    pub max: Duration,
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

/// The checks of `[retry]`.
pub(super) const RULES: &[Rule<Settings>] = &[
    Rule {
        settings: &["retry.max_attempts"],
        check: |s| at_least_one(u64::from(s.retry.max_attempts)),
    },
    Rule {
        settings: &["retry.base"],
        check: |s| positive(s.retry.base),
    },
    Rule {
        settings: &["retry.max", "retry.base"],
        check: |s| {
            if s.retry.max < s.retry.base {
                return Err(format!(
                    "retry.max ({}) must be at least retry.base ({})",
                    human(s.retry.max),
                    human(s.retry.base)
                ));
            }
            Ok(())
        },
    },
];
