//! The numbers behind the backlog gauges, and when the next delayed event comes due.

use diesel::sql_types::{BigInt, Nullable};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::PARKED_SQL;
use crate::db::DbError;

/// The numbers behind the gauges.
#[derive(Debug, Clone, QueryableByName)]
pub struct Backlog {
    /// Pending, not dead.
    #[diesel(sql_type = BigInt)]
    pub pending: i64,
    /// Dead-lettered and not discarded by an operator.
    #[diesel(sql_type = BigInt)]
    pub dead: i64,
    /// Seconds the oldest due event of an unpaused topic has waited (0 when none); see
    /// [`oldest_due_age_sql`].
    #[diesel(sql_type = diesel::sql_types::Double)]
    pub oldest_pending_age_seconds: f64,
}

/// `oldest_pending_age_seconds`: how long the first pending event that the relay should be
/// publishing now has waited since it became due. An event whose `available_at` is ahead
/// (delayed by its producer, or waiting for its retry), the events of a paused topic and those
/// of a parked key ([`super::parked`]) are not late, so they do not count: an alert on this number means something is stuck. Walks
/// the pending index in `seq` order (no scan of published rows).
pub(super) fn oldest_due_age_sql() -> String {
    format!(
        "COALESCE((SELECT extract(epoch FROM now() - greatest(o.created_at, o.available_at))::float8
               FROM outbox o
               WHERE o.published_at IS NULL AND o.dead_at IS NULL AND o.available_at <= now()
                 AND NOT EXISTS (SELECT 1 FROM outbox_topics t
                                 WHERE t.topic = o.topic AND t.paused)
                 AND NOT {PARKED_SQL}
               ORDER BY o.seq LIMIT 1), 0) AS oldest_pending_age_seconds"
    )
}

/// Counts the backlog from the partial indexes (no scan of published rows).
pub async fn backlog(conn: &mut AsyncPgConnection) -> Result<Backlog, DbError> {
    Ok(diesel::sql_query(format!(
        "SELECT
           (SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_at IS NULL) AS pending,
           (SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL AND discarded_at IS NULL) AS dead,
           {}",
        oldest_due_age_sql()
    ))
    .get_result(conn)
    .await?)
}

/// The earliest `available_at` of pending events not yet due, for waking the claimer on time.
pub async fn next_due_in_ms(conn: &mut AsyncPgConnection) -> Result<Option<i64>, DbError> {
    #[derive(QueryableByName)]
    struct Due {
        #[diesel(sql_type = Nullable<BigInt>)]
        ms: Option<i64>,
    }
    let due: Due = diesel::sql_query(
        "SELECT (extract(epoch FROM min(available_at) - now()) * 1000)::bigint AS ms
         FROM outbox WHERE published_at IS NULL AND dead_at IS NULL AND available_at > now()",
    )
    .get_result(conn)
    .await?;
    Ok(due.ms)
}
