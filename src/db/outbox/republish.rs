//! Publishing published rows again: the rows a stream lost (`relay::repair`) go back to
//! pending, and the claim loop publishes them again, ahead of the topic's newer events (a
//! lower `seq` is claimed first, and a key's later events wait behind it).

use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, BigInt, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::{audit, stream_marks, topics, DbError};
use outbox_core::entry_id::EntryId;

/// A published row, as a repair needs it.
#[derive(Debug, Clone, QueryableByName)]
pub struct PublishedRow {
    /// The event id.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: Uuid,
    /// Its partition key (which partition's stream it went to).
    #[diesel(sql_type = Nullable<Text>)]
    pub partition_key: Option<String>,
    /// Insertion order.
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
}

/// The topic's rows marked published at or after `since` (all kept ones without it), in
/// insertion order.
pub async fn published_since(
    conn: &mut AsyncPgConnection,
    topic: &str,
    since: Option<DateTime<Utc>>,
) -> Result<Vec<PublishedRow>, DbError> {
    Ok(diesel::sql_query(
        "SELECT id, partition_key, seq FROM outbox
         WHERE topic = $1 AND published_at IS NOT NULL
           AND ($2::timestamptz IS NULL OR published_at >= $2)
         ORDER BY seq",
    )
    .bind::<Text, _>(topic)
    .bind::<Nullable<Timestamptz>, _>(since)
    .load(conn)
    .await?)
}

/// Puts published rows back to pending (no attempt counted); returns how many.
pub async fn unpublish(conn: &mut AsyncPgConnection, ids: &[Uuid]) -> Result<usize, DbError> {
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(diesel::sql_query(
        "UPDATE outbox SET published_at = NULL, available_at = now()
         WHERE id = ANY($1) AND published_at IS NOT NULL",
    )
    .bind::<Array<diesel::sql_types::Uuid>, _>(ids)
    .execute(conn)
    .await?)
}

/// In one transaction: puts the events a stream lost back to pending (`lost`, in `seq`
/// order), holds the topic's newer events behind the last of them, sets the stream's mark to
/// where it now ends, and records the loss in the audit log with `audit_detail` (the UI's
/// banner reads it).
pub async fn requeue_lost(
    conn: &mut AsyncPgConnection,
    topic: &str,
    stream: &str,
    ends_at: Option<EntryId>,
    lost: &[PublishedRow],
    audit_detail: Option<&serde_json::Value>,
) -> Result<usize, DbError> {
    let ids: Vec<Uuid> = lost.iter().map(|r| r.id).collect();
    let ids = ids.as_slice();
    let barrier = lost.iter().map(|r| r.seq).max();
    conn.transaction::<_, DbError, _>(async |c| {
        let requeued = unpublish(c, ids).await?;
        if let Some(last) = barrier {
            topics::hold_after(c, topic, last).await?;
        }
        stream_marks::reset(c, stream, ends_at).await?;
        if let Some(detail) = audit_detail {
            audit::record(c, LOSS_WHO, LOSS_ACTION, topic, detail).await?;
        }
        Ok(requeued)
    })
    .await
}

/// The audit log's `who` of a loss the relay noticed.
pub const LOSS_WHO: &str = "relay";
/// The audit log's `action` of a loss the relay noticed.
pub const LOSS_ACTION: &str = "redis-loss";

/// Up to `limit` of the topic's published rows whose `published_at` is in `[since, until)`
/// and whose `seq` is after `after_seq`, in insertion order (a replay's next chunk).
pub async fn published_between(
    conn: &mut AsyncPgConnection,
    topic: &str,
    since: DateTime<Utc>,
    until: Option<DateTime<Utc>>,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<PublishedRow>, DbError> {
    Ok(diesel::sql_query(
        "SELECT id, partition_key, seq FROM outbox
         WHERE topic = $1 AND published_at IS NOT NULL AND published_at >= $2
           AND ($3::timestamptz IS NULL OR published_at < $3) AND seq > $4
         ORDER BY seq LIMIT $5",
    )
    .bind::<Text, _>(topic)
    .bind::<Timestamptz, _>(since)
    .bind::<Nullable<Timestamptz>, _>(until)
    .bind::<BigInt, _>(after_seq)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?)
}

/// How many of the topic's published rows a replay of `[since, until)` would publish again.
pub async fn count_between(
    conn: &mut AsyncPgConnection,
    topic: &str,
    since: DateTime<Utc>,
    until: Option<DateTime<Utc>>,
) -> Result<i64, DbError> {
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let row: Count = diesel::sql_query(
        "SELECT count(*) AS n FROM outbox
         WHERE topic = $1 AND published_at IS NOT NULL AND published_at >= $2
           AND ($3::timestamptz IS NULL OR published_at < $3)",
    )
    .bind::<Text, _>(topic)
    .bind::<Timestamptz, _>(since)
    .bind::<Nullable<Timestamptz>, _>(until)
    .get_result(conn)
    .await?;
    Ok(row.n)
}
