//! Settling a claimed batch in its own transaction: rows that reached their stream are marked
//! published (or deleted), rows held back are postponed, rows that failed through their own
//! fault get their retry or their dead letter.

use diesel::sql_types::{Array, BigInt, Bool, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::DbError;
use outbox_core::prepared::prepared;

/// Sets `published_at` on events that reached their stream, by the `ctid`s this
/// transaction locked them at.
pub async fn mark_published(
    conn: &mut AsyncPgConnection,
    ctids: &[&str],
) -> Result<usize, DbError> {
    by_ctids(
        conn,
        "UPDATE outbox SET published_at = now()
         WHERE ctid = ANY($1::text[]::tid[]) AND published_at IS NULL",
        ctids,
    )
    .await
}

/// Deletes events that reached their stream (retention `published_for = 0s`), by the
/// `ctid`s this transaction locked them at.
pub async fn delete_published(
    conn: &mut AsyncPgConnection,
    ctids: &[&str],
) -> Result<usize, DbError> {
    by_ctids(
        conn,
        "DELETE FROM outbox WHERE ctid = ANY($1::text[]::tid[]) AND published_at IS NULL",
        ctids,
    )
    .await
}

/// Makes events wait `delay_ms` without counting an attempt (the Redis node of their topic is
/// unreachable), by the `ctid`s this transaction locked them at. Later events of their keys
/// wait behind them, as behind a retry.
pub async fn postpone(
    conn: &mut AsyncPgConnection,
    ctids: &[&str],
    delay_ms: i64,
) -> Result<usize, DbError> {
    if ctids.is_empty() {
        return Ok(0);
    }
    let sql = "UPDATE outbox SET available_at = now() + $2 * interval '1 millisecond'
               WHERE ctid = ANY($1::text[]::tid[]) AND published_at IS NULL";
    Ok(prepared(
        diesel::sql_query(sql)
            .bind::<Array<Text>, _>(ctids)
            .bind::<BigInt, _>(delay_ms),
    )
    .execute(conn)
    .await?)
}

async fn by_ctids(
    conn: &mut AsyncPgConnection,
    sql: &'static str,
    ctids: &[&str],
) -> Result<usize, DbError> {
    if ctids.is_empty() {
        return Ok(0);
    }
    Ok(
        prepared(diesel::sql_query(sql).bind::<Array<Text>, _>(ctids))
            .execute(conn)
            .await?,
    )
}

/// What to write for one event whose publish failed through its own fault.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// The event.
    pub id: Uuid,
    /// The error, for a person.
    pub error: String,
    /// Delay until the next attempt; ignored when `dead`.
    pub delay_ms: i64,
    /// Dead-letter it now.
    pub dead: bool,
}

/// Records failures: attempts + 1, `last_error`, and either a later `available_at` or `dead_at`.
pub async fn schedule_retry(
    conn: &mut AsyncPgConnection,
    failures: &[Failure],
) -> Result<usize, DbError> {
    if failures.is_empty() {
        return Ok(0);
    }
    let ids: Vec<Uuid> = failures.iter().map(|f| f.id).collect();
    let errors: Vec<&str> = failures.iter().map(|f| f.error.as_str()).collect();
    let delays: Vec<i64> = failures.iter().map(|f| f.delay_ms).collect();
    let dead: Vec<bool> = failures.iter().map(|f| f.dead).collect();
    Ok(diesel::sql_query(
        "UPDATE outbox o SET
             attempts = o.attempts + 1,
             last_error = f.error,
             available_at = CASE WHEN f.dead THEN o.available_at
                                 ELSE now() + f.delay_ms * interval '1 millisecond' END,
             dead_at = CASE WHEN f.dead THEN now() END
         FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::bool[]) AS f(id, error, delay_ms, dead)
         WHERE o.id = f.id",
    )
    .bind::<Array<diesel::sql_types::Uuid>, _>(ids)
    .bind::<Array<Text>, _>(errors)
    .bind::<Array<BigInt>, _>(delays)
    .bind::<Array<Bool>, _>(dead)
    .execute(conn)
    .await?)
}
