//! How the settings are checked after serde read them: each section's file lists its rules
//! (`RULES`, each a [`Rule`] of the leaf `rule`), each naming the settings it reads and saying,
//! for a person, what would work instead. This module runs them, section after section. A
//! relation between two settings is reported under the one the user set, so nobody is told to
//! fix a setting they never touched.

use super::rule::Rule;
use super::{admin, database, groups, redis, relay, retention, retry, settings, tables, topics};
use super::{ConfigError, Settings};

/// Every section's rules, in the order they are checked: the first broken one is the error.
const SECTIONS: &[&[Rule<Settings>]] = &[
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_holds_on_the_defaults() {
        assert!(check(&Settings::default(), &|_| false).is_ok());
    }
}
