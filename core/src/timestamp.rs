//! The text of an event's time in a stream entry: the `created_at` field of the relay's own
//! envelope and the `time` attribute of a CloudEvent. A leaf of its own so that the entry's
//! parsing ([`crate::entry`]) and the CloudEvents envelope ([`crate::cloudevent`]), which
//! parses through the entry, both write it without importing each other.

use chrono::{DateTime, SecondsFormat, Utc};

/// The `created_at` field's text: RFC 3339 in UTC with microseconds and `Z`
/// (`2026-12-02T13:57:01.123456Z`), the precision of Postgres' timestamptz.
pub fn created_at_text(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn microseconds_in_utc_with_z() {
        let at = Utc.timestamp_opt(1_764_683_821, 123_456_789).unwrap();
        assert_eq!(created_at_text(&at), "2025-12-02T13:57:01.123456Z");
    }
}
