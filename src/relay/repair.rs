//! Repairing a stream that lost entries the relay appended (a restart from an older snapshot,
//! a failover without waiting, a flush), noticed by the publish script before it appends.
//!
//! The rows of the stream's events published since shortly before its surviving end
//! (everything kept, when the stream is gone) are compared with the event ids the stream
//! still holds; those missing go back to pending, with their dedup records forgotten, so the
//! claim loop publishes them again, each once, ahead of the topic's newer events and each key
//! in order. The margin before the surviving end covers a claim's length and clock skew
//! between the relay and Redis (`published_at` is the claim transaction's start). What
//! retention has deleted cannot be published again: it is reported with its range.
//!
//! It is a stage of the claim cycle ([`stage`]): a topic whose publish found its stream
//! behind is repaired after the publish stage, and its batch fails as an outage, so it rolls
//! back (or is postponed) and the lost events, pending again with lower `seq`, go first.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use uuid::Uuid;

use super::batch::TopicResult;
use super::messages::TopicOutage;
use crate::db::outbox::republish;
use crate::db::{Db, DbError};
use crate::publish::{partition_of, Behind, PublishError, Publisher};

/// Slack for clock skew between the relay's hosts, Postgres and Redis.
const SKEW: Duration = Duration::from_secs(1);

/// What a repair needs beyond the loss.
#[derive(Debug, Clone, Copy)]
pub struct RepairSettings {
    /// `retention.published_for`: how long published rows are kept.
    pub kept_for: Duration,
    /// `relay.lease`: the longest a claim (and so its publish) lasts.
    pub lease: Duration,
}

/// What a repair found and did.
#[derive(Debug, Clone, PartialEq)]
pub struct Repaired {
    /// Events the stream should hold and does not.
    pub lost: Vec<Uuid>,
    /// Of those, rows put back to pending (others were already pending again).
    pub requeued: usize,
    /// What could not be checked or repaired (rows deleted by retention), for a person.
    pub unrepairable: Option<String>,
}

/// Why a repair did not complete; the next publish notices the loss again and retries.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// Postgres failed.
    #[error(transparent)]
    Postgres(#[from] DbError),
    /// Redis failed.
    #[error(transparent)]
    Redis(#[from] PublishError),
}

fn at_ms(ms: u64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(i64::try_from(ms).unwrap_or(i64::MAX))
        .single()
        .unwrap_or_else(Utc::now)
}

/// The repair stage of a cycle: each topic whose publish found its stream behind is
/// repaired, and its result becomes an outage saying what was queued again.
pub async fn stage(
    publisher: &Publisher,
    db: &Db,
    settings: RepairSettings,
    results: Vec<TopicResult>,
) -> Vec<TopicResult> {
    let mut repaired = Vec::with_capacity(results.len());
    for result in results {
        repaired.push(match result {
            Err(TopicOutage {
                error: PublishError::Behind(behind),
                retry_in,
            }) => Err(TopicOutage {
                error: repair_reported(publisher, db, &behind, settings).await,
                retry_in,
            }),
            other => other,
        });
    }
    repaired
}

/// Repairs `behind`'s stream and reports the loss; the outage its batch fails with.
async fn repair_reported(
    publisher: &Publisher,
    db: &Db,
    behind: &Behind,
    settings: RepairSettings,
) -> PublishError {
    match repair(publisher, db, behind, settings).await {
        Ok(repaired) => {
            if !repaired.lost.is_empty() || repaired.unrepairable.is_some() {
                crate::telemetry::redis_lost(&crate::telemetry::RedisLoss {
                    topic: &behind.topic,
                    stream: &behind.stream,
                    appended_up_to: behind.mark.to_string(),
                    ends_at: behind
                        .last
                        .map_or_else(|| "nothing (no stream)".to_string(), |l| l.to_string()),
                    lost: repaired.lost.len(),
                    requeued: repaired.requeued,
                    unrepairable: repaired.unrepairable.as_deref(),
                });
            } else {
                tracing::info!(stream = %behind.stream, "{behind}: every event marked published is still there (the entries lost were never confirmed)");
            }
            PublishError::Outage(format!(
                "{behind}; {} events queued to be published again",
                repaired.requeued
            ))
        }
        Err(e) => PublishError::Outage(format!("{behind}; repair failed, retried: {e}")),
    }
}

/// Finds what `behind`'s stream lost and queues it to be published again.
pub async fn repair(
    publisher: &Publisher,
    db: &Db,
    behind: &Behind,
    settings: RepairSettings,
) -> Result<Repaired, RepairError> {
    let margin = settings.lease + SKEW;
    let since = behind
        .last
        .map(|last| at_ms(last.ms) - chrono::Duration::from_std(margin).unwrap_or_default());
    let topic = behind.topic.clone();
    let rows = db
        .unit(async |c| republish::published_since(c, &topic, since).await)
        .await?;
    let present = match since {
        Some(since) => {
            let from = since - chrono::Duration::from_std(margin).unwrap_or_default();
            let from_ms = u64::try_from(from.timestamp_millis()).unwrap_or(0);
            publisher.ids_from(&behind.stream, from_ms).await?
        }
        None => Default::default(),
    };
    let lost: Vec<republish::PublishedRow> = rows
        .into_iter()
        .filter(|row| {
            partition_of(row.partition_key.as_deref(), row.id, behind.partitions)
                == behind.partition
        })
        .filter(|row| !present.contains(&row.id))
        .collect();
    let ids: Vec<Uuid> = lost.iter().map(|row| row.id).collect();
    publisher.forget(&behind.stream, &ids).await?;
    let detail = serde_json::json!({
        "stream": behind.stream,
        "mark": behind.mark.to_string(),
        "last": behind.last.map(|l| l.to_string()),
        "lost": lost.len(),
        "checked_since": since,
    });
    let unrepairable = unrepairable(since, settings.kept_for);
    // Entries lost that were never confirmed (so never marked published) are no loss.
    let noticed = (!lost.is_empty() || unrepairable.is_some()).then_some(&detail);
    let (stream, last) = (behind.stream.clone(), behind.last);
    let requeued = db
        .unit(async |c| republish::requeue_lost(c, &topic, &stream, last, &lost, noticed).await)
        .await?;
    publisher.marks().reset(&behind.stream, behind.last);
    Ok(Repaired {
        requeued,
        unrepairable,
        lost: ids,
    })
}

/// The part of the loss past retention, if any: rows published before the oldest kept one
/// cannot be compared nor published again.
fn unrepairable(since: Option<DateTime<Utc>>, kept_for: Duration) -> Option<String> {
    if kept_for.is_zero() {
        return Some(
            "retention.published_for = 0s deletes rows as they are published: the lost entries cannot be published again".into(),
        );
    }
    let kept_since = Utc::now() - chrono::Duration::from_std(kept_for).unwrap_or_default();
    match since {
        Some(since) if since >= kept_since => None,
        Some(since) => Some(format!(
            "entries published between {since} and {kept_since} are past retention: not checked, not published again"
        )),
        None => Some(format!(
            "the stream is gone: entries published before {kept_since} are past retention, not published again"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_retention_deleted_is_reported_with_its_range() {
        let day = Duration::from_secs(86_400);
        let recent = Some(Utc::now() - chrono::Duration::minutes(5));
        assert_eq!(unrepairable(recent, day), None);
        let old = Some(Utc::now() - chrono::Duration::days(2));
        assert!(unrepairable(old, day).is_some_and(|m| m.contains("past retention")));
        assert!(unrepairable(None, day).is_some_and(|m| m.contains("stream is gone")));
        assert!(unrepairable(recent, Duration::ZERO).is_some_and(|m| m.contains("0s")));
    }
}
