//! Steering SQL of dead letters (`outbox` rows with `dead_at` set): retry and discard, one
//! by id or many by filter, and grouping by error fingerprint.
//!
//! Every function that changes rows takes the actor's name and writes its audit row in the
//! same transaction, so the API and the UI call the very same functions. The relay never
//! locks a dead row, so none of these waits on a claim.

use chrono::{DateTime, Utc};
use diesel::pg::Pg;
use diesel::query_builder::BoxedSqlQuery;
use diesel::sql_types::{BigInt, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::browse::{EventRow, EVENT_COLUMNS};
use crate::db::{audit, DbError};

/// What happened to a single-event action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Steered {
    /// Done.
    Done,
    /// No such event.
    NotFound,
    /// The event is not dead (pending or published), or was discarded: nothing to do.
    NotDead,
}

/// What to do with dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadAction {
    /// Requeue: attempts 0, `dead_at` null, available now. `last_error` is kept so the
    /// operator still sees why it had died until a new failure or the publish replaces it.
    Retry,
    /// Give up: the row stays (dead, with `discarded_at`), is never retried, and retention
    /// deletes it like a published row.
    Discard,
}

impl DeadAction {
    fn name(self) -> &'static str {
        match self {
            DeadAction::Retry => "retry",
            DeadAction::Discard => "discard",
        }
    }

    fn set(self) -> &'static str {
        match self {
            DeadAction::Retry => "attempts = 0, dead_at = NULL, available_at = now()",
            DeadAction::Discard => "discarded_at = now()",
        }
    }
}

/// Which dead letters a bulk action takes; every field narrows, none means all dead letters.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DeadFilter {
    /// Only this topic.
    pub topic: Option<String>,
    /// Only this partition key.
    pub partition_key: Option<String>,
    /// `last_error` contains this text (case-insensitive).
    pub error_contains: Option<String>,
    /// `last_error` has this fingerprint (see [`groups`]).
    pub fingerprint: Option<String>,
    /// Dead at or after this time.
    pub dead_after: Option<DateTime<Utc>>,
    /// Dead before this time.
    pub dead_before: Option<DateTime<Utc>>,
}

/// The condition of [`DeadFilter`]; binds $1..$6 in [`bind_filter`]'s order. Absent
/// filters are null parameters that a custom plan folds away; dead rows are few and come
/// from the partial index outbox_dead_seq_idx.
const FILTER_SQL: &str = "dead_at IS NOT NULL AND discarded_at IS NULL
    AND ($1::text IS NULL OR topic = $1)
    AND ($2::text IS NULL OR partition_key = $2)
    AND ($3::text IS NULL OR strpos(lower(last_error), lower($3)) > 0)
    AND ($4::text IS NULL OR outbox_error_fingerprint(last_error) = $4)
    AND ($5::timestamptz IS NULL OR dead_at >= $5)
    AND ($6::timestamptz IS NULL OR dead_at < $6)";

fn bind_filter<'a>(
    sql: String,
    f: &DeadFilter,
) -> BoxedSqlQuery<'a, Pg, diesel::query_builder::SqlQuery> {
    diesel::sql_query(sql)
        .into_boxed::<Pg>()
        .bind::<Nullable<Text>, _>(f.topic.clone())
        .bind::<Nullable<Text>, _>(f.partition_key.clone())
        .bind::<Nullable<Text>, _>(f.error_contains.clone())
        .bind::<Nullable<Text>, _>(f.fingerprint.clone())
        .bind::<Nullable<Timestamptz>, _>(f.dead_after)
        .bind::<Nullable<Timestamptz>, _>(f.dead_before)
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// How many dead letters match (the dry run of a bulk action).
pub async fn count(conn: &mut AsyncPgConnection, filter: &DeadFilter) -> Result<i64, DbError> {
    let c: Count = bind_filter(
        format!("SELECT count(*) AS n FROM outbox WHERE {FILTER_SQL}"),
        filter,
    )
    .get_result(conn)
    .await?;
    Ok(c.n)
}

/// The newest `limit` dead letters matching `filter`, newest first: what a bulk action on
/// the same filter would take.
pub async fn latest(
    conn: &mut AsyncPgConnection,
    filter: &DeadFilter,
    limit: i64,
) -> Result<Vec<EventRow>, DbError> {
    Ok(bind_filter(
        format!("SELECT {EVENT_COLUMNS} FROM outbox WHERE {FILTER_SQL} ORDER BY seq DESC LIMIT $7"),
        filter,
    )
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?)
}

/// Applies `action` to every dead letter matching `filter`; returns how many changed.
/// One audit row records the filter and the count.
pub async fn act_on_matching(
    conn: &mut AsyncPgConnection,
    action: DeadAction,
    filter: &DeadFilter,
    who: &str,
) -> Result<i64, DbError> {
    let filter = filter.clone();
    conn.transaction::<_, DbError, _>(async |c| {
        let n: Count = bind_filter(
            format!(
                "WITH changed AS (UPDATE outbox SET {} WHERE {FILTER_SQL} RETURNING 1)
                 SELECT count(*) AS n FROM changed",
                action.set()
            ),
            &filter,
        )
        .get_result(c)
        .await?;
        let detail = serde_json::json!({ "filter": filter, "count": n.n });
        audit::record(c, who, &format!("bulk_{}", action.name()), "dead", &detail).await?;
        if action == DeadAction::Retry && n.n > 0 {
            notify(c).await?;
        }
        Ok(n.n)
    })
    .await
}

/// Applies `action` to one dead letter.
pub async fn act_on_one(
    conn: &mut AsyncPgConnection,
    action: DeadAction,
    id: Uuid,
    who: &str,
) -> Result<Steered, DbError> {
    #[derive(QueryableByName)]
    struct Before {
        #[diesel(sql_type = Text)]
        topic: String,
        #[diesel(sql_type = Nullable<Text>)]
        last_error: Option<String>,
        #[diesel(sql_type = BigInt)]
        attempts: i64,
    }
    conn.transaction::<_, DbError, _>(async |c| {
        let changed: Vec<Before> = diesel::sql_query(format!(
            "UPDATE outbox o SET {}
             FROM (SELECT id, attempts FROM outbox WHERE id = $1) AS old
             WHERE o.id = old.id AND o.dead_at IS NOT NULL AND o.discarded_at IS NULL
             RETURNING o.topic, o.last_error, old.attempts::bigint AS attempts",
            action.set()
        ))
        .bind::<diesel::sql_types::Uuid, _>(id)
        .load(c)
        .await?;
        let Some(before) = changed.into_iter().next() else {
            let exists: Count = diesel::sql_query("SELECT count(*) AS n FROM outbox WHERE id = $1")
                .bind::<diesel::sql_types::Uuid, _>(id)
                .get_result(c)
                .await?;
            return Ok(if exists.n == 0 {
                Steered::NotFound
            } else {
                Steered::NotDead
            });
        };
        let detail = serde_json::json!({
            "topic": before.topic,
            "attempts": before.attempts,
            "last_error": before.last_error,
        });
        audit::record(c, who, action.name(), &id.to_string(), &detail).await?;
        if action == DeadAction::Retry {
            notify(c).await?;
        }
        Ok(Steered::Done)
    })
    .await
}

/// Wakes the claimers of every replica (delivered at commit): requeued events are due now.
async fn notify(conn: &mut AsyncPgConnection) -> Result<(), DbError> {
    diesel::sql_query("SELECT pg_notify('outbox_events', '')")
        .execute(conn)
        .await?;
    Ok(())
}

/// Dead letters sharing one error fingerprint.
#[derive(Debug, Clone, QueryableByName)]
pub struct ErrorGroup {
    /// `last_error` with uuids, hex and decimal numbers replaced by placeholders.
    #[diesel(sql_type = Text)]
    pub fingerprint: String,
    /// One real error of the group.
    #[diesel(sql_type = Text)]
    pub example: String,
    /// Dead letters in the group.
    #[diesel(sql_type = BigInt)]
    pub count: i64,
    /// Topics involved.
    #[diesel(sql_type = diesel::sql_types::Array<Text>)]
    pub topics: Vec<String>,
    /// The first death.
    #[diesel(sql_type = Timestamptz)]
    pub first_dead_at: DateTime<Utc>,
    /// The latest death.
    #[diesel(sql_type = Timestamptz)]
    pub last_dead_at: DateTime<Utc>,
}

/// Dead letters matching `filter`, grouped by error fingerprint, largest group first.
pub async fn groups(
    conn: &mut AsyncPgConnection,
    filter: &DeadFilter,
) -> Result<Vec<ErrorGroup>, DbError> {
    Ok(bind_filter(
        format!(
            "SELECT outbox_error_fingerprint(last_error) AS fingerprint,
                    coalesce(max(last_error), '') AS example, count(*) AS count,
                    array_agg(DISTINCT topic ORDER BY topic) AS topics,
                    min(dead_at) AS first_dead_at, max(dead_at) AS last_dead_at
             FROM outbox WHERE {FILTER_SQL}
             GROUP BY 1 ORDER BY count DESC, fingerprint
             LIMIT 1000"
        ),
        filter,
    )
    .load(conn)
    .await?)
}
