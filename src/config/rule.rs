//! One check of the settings, [`Rule`], and the helpers the sections' rules share. A leaf: it
//! imports nothing of `config`, so each section's file names it while `rules`, which runs
//! every section's rules, names the sections.

use std::time::Duration;

/// One rule: the settings it reads (the first is named unless the user set only another) and
/// the check, which returns what is wrong. `S` is the whole of the settings: a rule may relate
/// settings of two sections.
pub(super) struct Rule<S> {
    /// The TOML paths the check reads.
    pub(super) settings: &'static [&'static str],
    /// What is wrong, if anything.
    pub(super) check: fn(&S) -> Result<(), String>,
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
    fn the_helpers_say_what_would_work() {
        assert_eq!(within(3, 1, 5), Ok(()));
        assert_eq!(within(7, 1, 5), Err("must be 1..=5, not 7".into()));
        assert_eq!(at_least_one(0), Err("must be at least 1".into()));
        assert_eq!(
            positive(Duration::ZERO),
            Err("must be longer than 0s".into())
        );
        assert_eq!(human(Duration::from_secs(90)), "1m 30s");
    }
}
