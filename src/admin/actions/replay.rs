//! Replaying a topic: its published events still kept whose `published_at` lies in a range
//! go out again, as new entries, in their original order (`outbox-relay replay`, `POST
//! /api/v1/topics/{topic}/replay`, the UI's Replay page).
//!
//! Chunk by chunk, in `seq` order: their dedup records are forgotten first (else the next
//! publish would take them for duplicates and append nothing), then the rows go back to
//! pending, without an attempt; the claim loop publishes them, each key in order, after
//! whatever of that key was already pending before them. One audit row records the replay.

use chrono::{DateTime, Utc};

use super::{check_topic, ActionError, Actions};
use crate::db::outbox::republish;
use crate::db::{audit, topics, DbError};
use crate::publish::{keys, partition_of, Publisher};

/// Rows put back to pending per transaction.
const CHUNK: i64 = 5_000;

/// A replay's time range, `[since, until)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayRange {
    /// Published at or after this.
    pub since: DateTime<Utc>,
    /// Published before this (none: up to now).
    pub until: Option<DateTime<Utc>>,
}

/// A time as a replay takes it: RFC 3339 (`2026-12-04T10:00:00Z`), or a duration meaning that
/// long before `now` (`15m`, `2h 30m`).
pub fn parse_time(
    field: &'static str,
    text: &str,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, ActionError> {
    let text = text.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc));
    }
    let bad = || ActionError::BadTime {
        field,
        value: text.to_string(),
    };
    let ago = humantime::parse_duration(text).map_err(|_| bad())?;
    let ago = chrono::Duration::from_std(ago).map_err(|_| bad())?;
    now.checked_sub_signed(ago).ok_or_else(bad)
}

impl ReplayRange {
    /// `since` and `until` as typed; `until` must come after `since`.
    pub fn parse(since: &str, until: Option<&str>) -> Result<ReplayRange, ActionError> {
        let now = Utc::now();
        let since = parse_time("since", since, now)?;
        let until = until
            .filter(|u| !u.trim().is_empty())
            .map(|u| parse_time("until", u, now))
            .transpose()?;
        if let Some(until) = until {
            if until <= since {
                return Err(ActionError::EmptyReplay { since, until });
            }
        }
        Ok(ReplayRange { since, until })
    }
}

impl Actions<'_> {
    /// How many events a replay of `range` would publish again.
    pub async fn replay_count(&self, topic: &str, range: ReplayRange) -> Result<i64, ActionError> {
        check_topic(topic)?;
        Ok(self
            .db
            .unit(async |c| republish::count_between(c, topic, range.since, range.until).await)
            .await?)
    }

    /// Publishes again the topic's published events of `range`; returns how many.
    pub async fn replay(
        &self,
        publisher: &Publisher,
        who: &str,
        topic: &str,
        range: ReplayRange,
    ) -> Result<u64, ActionError> {
        check_topic(topic)?;
        let (partitions, _) = self
            .db
            .unit(async |c| topics::partitions_and_pause(c, topic).await)
            .await?;
        let prefix = &publisher.config().stream_prefix;
        let mut after = 0;
        let mut replayed = 0u64;
        loop {
            let rows = self
                .db
                .unit(async |c| {
                    republish::published_between(c, topic, range.since, range.until, after, CHUNK)
                        .await
                })
                .await?;
            let Some(last) = rows.last() else { break };
            after = last.seq;
            let mut by_stream: std::collections::BTreeMap<u32, Vec<uuid::Uuid>> =
                Default::default();
            for row in &rows {
                let p = partition_of(row.partition_key.as_deref(), row.id, partitions);
                by_stream.entry(p).or_default().push(row.id);
            }
            for (p, ids) in &by_stream {
                let stream = if partitions <= 1 {
                    keys::stream_key(prefix, topic)
                } else {
                    keys::partition_key(prefix, topic, *p, partitions)
                };
                publisher
                    .forget(&stream, ids)
                    .await
                    .map_err(|e| ActionError::Redis(e.to_string()))?;
            }
            let ids: Vec<uuid::Uuid> = rows.iter().map(|r| r.id).collect();
            let n = self
                .db
                .unit(async |c| republish::unpublish(c, &ids).await)
                .await?;
            replayed += n as u64;
            self.wake_claimer();
        }
        let detail = serde_json::json!({
            "since": range.since,
            "until": range.until,
            "replayed": replayed,
        });
        self.db
            .unit(async |c| {
                audit::record(c, who, "replay", topic, &detail).await?;
                Ok::<_, DbError>(())
            })
            .await?;
        Ok(replayed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_rfc_3339_or_a_duration_ago_and_nothing_else() {
        let now = DateTime::parse_from_rfc3339("2026-12-04T12:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let at = |s| parse_time("since", s, now);
        assert_eq!(
            at("2026-12-04T10:00:00Z").expect("rfc 3339").to_rfc3339(),
            "2026-12-04T10:00:00+00:00"
        );
        assert_eq!(
            at("15m").expect("duration"),
            now - chrono::Duration::minutes(15)
        );
        assert_eq!(
            at("2h 30m").expect("duration"),
            now - chrono::Duration::minutes(150)
        );
        for bad in ["yesterday", "", "2026-12-04", "-5m", "10"] {
            assert!(
                matches!(at(bad), Err(ActionError::BadTime { field: "since", .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn until_must_follow_since() {
        assert!(ReplayRange::parse("1h", Some("2h")).is_err());
        assert!(ReplayRange::parse("2h", Some("1h")).is_ok());
        assert_eq!(
            ReplayRange::parse("2h", Some(""))
                .expect("open range")
                .until,
            None
        );
    }
}
