//! Retention: deleting old published rows (and dead letters an operator discarded), in small
//! batches, by one replica at a time.

use diesel::sql_types::{BigInt, Bool};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::db::DbError;

/// Advisory lock class of the retention cleaner ("outbox-r").
const RETENTION_LOCK: i64 = 0x6f75_7462_6f78_2d72;

/// Deletes up to `limit` published rows older than `older_than_ms`, and as many dead letters
/// an operator discarded that long ago, if no other replica is deleting right now. Returns `None` when another replica holds the retention lock.
pub async fn delete_published_before(
    conn: &mut AsyncPgConnection,
    older_than_ms: i64,
    limit: i64,
) -> Result<Option<usize>, DbError> {
    #[derive(QueryableByName)]
    struct Deleted {
        #[diesel(sql_type = Bool)]
        locked: bool,
        #[diesel(sql_type = BigInt)]
        deleted: i64,
    }
    // One statement: the lock is taken first (the CTE is materialized), and only the
    // holder's DELETE touches rows. SKIP LOCKED keeps it clear of anything else's locks.
    // Published rows and discarded dead letters age the same way, each from its own
    // timestamp (and partial index).
    let doomed = |column: &str| {
        format!(
            "SELECT o.id FROM outbox o, lock
             WHERE lock.locked AND o.{column} IS NOT NULL
               AND o.{column} < now() - $2 * interval '1 millisecond'
             ORDER BY o.{column}
             LIMIT $3
             FOR UPDATE OF o SKIP LOCKED"
        )
    };
    let row: Deleted = diesel::sql_query(format!(
        "WITH lock AS MATERIALIZED (SELECT pg_try_advisory_xact_lock($1) AS locked),
         published AS ({}),
         discarded AS ({}),
         gone AS (DELETE FROM outbox
                  WHERE id IN (SELECT id FROM published UNION ALL SELECT id FROM discarded)
                  RETURNING 1)
         SELECT (SELECT locked FROM lock) AS locked, (SELECT count(*) FROM gone) AS deleted",
        doomed("published_at"),
        doomed("discarded_at")
    ))
    .bind::<BigInt, _>(RETENTION_LOCK)
    .bind::<BigInt, _>(older_than_ms)
    .bind::<BigInt, _>(limit)
    .get_result(conn)
    .await?;
    Ok(row.locked.then_some(row.deleted as usize))
}
