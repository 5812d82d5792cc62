//! How the settings are checked after serde read them: each section's file lists its rules
//! (`RULES`), each naming the settings it reads and saying, for a person, what would work
//! instead. This module runs them, section after section, and holds the helpers they share. A
//! relation between two settings is reported under the one the user set, so nobody is told to
//! fix a setting they never touched.

use std::time::Duration;

use super::{admin, database, groups, redis, relay, retention, retry, settings, tables, topics};
use super::{ConfigError, Settings};

/// One rule: the settings it reads (the first is named unless the user set only another) and
/// the check, which returns what is wrong.
pub(super) struct Rule {
    /// The TOML paths the check reads.
    pub(super) settings: &'static [&'static str],
    /// What is wrong, if anything.
    pub(super) check: fn(&Settings) -> Result<(), String>,
}

/// Every section's rules, in the order they are checked: the first broken one is the error.
const SECTIONS: &[&[Rule]] = &[
    groups::RULES,
    topics::RULES,
    tables::RULES,
    database::RULES,
    redis::RULES,
    admin::RULES,
    retry::RULES,
    relay::RULES,
    retention::RULES,
    settings::RULES,
];

/// Checks every rule in order; the first broken one is the error.
pub(super) fn check(settings: &Settings, given: &dyn Fn(&str) -> bool) -> Result<(), ConfigError> {
    for rule in SECTIONS.iter().flat_map(|rules| rules.iter()) {
        if let Err(message) = (rule.check)(settings) {
            let named = rule
                .settings
                .iter()
                .find(|name| given(name))
                .unwrap_or(&rule.settings[0]);
            return Err(ConfigError::new(named, message));
        }
    }
    Ok(())
}

/// `value` lies in `low..=high`.
pub(super) fn within<T: PartialOrd + std::fmt::Display>(
    value: T,
    low: T,
    high: T,
) -> Result<(), String> {
    if value < low || value > high {
        return Err(format!("must be {low}..={high}, not {value}"));
    }
    Ok(())
}

/// `value` is not 0.
pub(super) fn at_least_one(value: u64) -> Result<(), String> {
    if value == 0 {
        return Err("must be at least 1".into());
    }
    Ok(())
}

/// `value` is longer than 0s.
pub(super) fn positive(value: Duration) -> Result<(), String> {
    if value.is_zero() {
        return Err("must be longer than 0s".into());
    }
    Ok(())
}

/// A duration as a person writes it (`1m 30s`).
pub(super) fn human(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_holds_on_the_defaults() {
        assert!(check(&Settings::default(), &|_| false).is_ok());
    }
}
