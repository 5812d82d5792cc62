//! Read-only SQL of `outbox` for the admin's counts (`/api/v1/stats`, the overview page): per
//! topic from the unsettled rows' partial indexes, published rows apart (a scan the admin
//! caches), and the events locked by a claim right now.

use diesel::sql_types::{BigInt, Bool, Double, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::oldest_due_age_sql;
use crate::db::DbError;

/// The counts of one topic, and its settings.
#[derive(Debug, Clone, QueryableByName)]
pub struct TopicCounts {
    /// The topic.
    #[diesel(sql_type = Text)]
    pub topic: String,
    /// Pending events.
    #[diesel(sql_type = BigInt)]
    pub pending: i64,
    /// Published events still in the table (retention deletes older ones).
    #[diesel(sql_type = BigInt)]
    pub published: i64,
    /// Dead letters not discarded.
    #[diesel(sql_type = BigInt)]
    pub dead: i64,
    /// Discarded dead letters not yet deleted by retention.
    #[diesel(sql_type = BigInt)]
    pub discarded: i64,
    /// Paused by an operator.
    #[diesel(sql_type = Bool)]
    pub paused: bool,
    /// The topic's stream trimming, if set.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub maxlen: Option<i64>,
}

/// Counts per topic from the unsettled rows only (pending and dead, through their partial
/// indexes), with the settings of every topic that has rows or settings (`only` narrows it
/// to one). `published` is left 0: counting published rows is a scan of everything kept,
/// see [`published_counts`].
pub async fn unsettled_counts(
    conn: &mut AsyncPgConnection,
    only: Option<&str>,
) -> Result<Vec<TopicCounts>, DbError> {
    Ok(diesel::sql_query(
        "WITH rows AS (
             SELECT topic, false AS dead, false AS discarded FROM outbox
             WHERE published_at IS NULL AND dead_at IS NULL AND ($1::text IS NULL OR topic = $1)
             UNION ALL
             SELECT topic, true, discarded_at IS NOT NULL FROM outbox
             WHERE dead_at IS NOT NULL AND ($1::text IS NULL OR topic = $1)),
         per AS (
             SELECT topic,
                    count(*) FILTER (WHERE NOT dead) AS pending,
                    count(*) FILTER (WHERE dead AND NOT discarded) AS dead,
                    count(*) FILTER (WHERE discarded) AS discarded
             FROM rows GROUP BY topic),
         settings AS (SELECT * FROM outbox_topics WHERE $1::text IS NULL OR topic = $1)
         SELECT coalesce(per.topic, s.topic) AS topic,
                coalesce(per.pending, 0) AS pending, 0::bigint AS published,
                coalesce(per.dead, 0) AS dead, coalesce(per.discarded, 0) AS discarded,
                coalesce(s.paused, false) AS paused, s.maxlen
         FROM per FULL JOIN settings s ON s.topic = per.topic
         ORDER BY 1",
    )
    .bind::<Nullable<Text>, _>(only)
    .load(conn)
    .await?)
}

/// Published rows still kept, per topic. This reads every published row (retention keeps
/// them for `retention.published_for`), so the admin caches it (`admin::counts`); nothing on
/// the relay's path calls it.
pub async fn published_counts(conn: &mut AsyncPgConnection) -> Result<Vec<(String, i64)>, DbError> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        topic: String,
        #[diesel(sql_type = BigInt)]
        published: i64,
    }
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT topic, count(*) AS published FROM outbox
         WHERE published_at IS NOT NULL GROUP BY topic",
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.topic, r.published)).collect())
}

/// Pending events locked or being changed by an open transaction right now (a relay's
/// claim), and the age of the oldest pending event.
#[derive(Debug, Clone, QueryableByName)]
pub struct Flight {
    /// Pending rows whose `xmax` is a transaction still in progress.
    #[diesel(sql_type = BigInt)]
    pub in_flight: i64,
    /// Seconds the oldest due event of an unpaused topic has waited (0 when none).
    #[diesel(sql_type = Double)]
    pub oldest_pending_age_seconds: f64,
}

/// Reads [`Flight`]. A row lock (`FOR UPDATE`) writes the locker's transaction id into the
/// row's `xmax`, where it stays after the transaction ends; a row counts while that id is
/// the `backend_xid` of a session that is open now. This locks nothing, so it never slows
/// the relays down. It sees the sessions of the relay's own database role (all of them for
/// a superuser or `pg_read_all_stats`), which are the relays' claim transactions.
pub async fn flight(conn: &mut AsyncPgConnection) -> Result<Flight, DbError> {
    Ok(diesel::sql_query(format!(
        "SELECT
           (SELECT count(*) FROM outbox
            WHERE published_at IS NULL AND dead_at IS NULL AND xmax <> '0'::xid
              AND xmax = ANY (ARRAY(SELECT backend_xid FROM pg_stat_activity
                                    WHERE backend_xid IS NOT NULL))) AS in_flight,
           {}",
        oldest_due_age_sql()
    ))
    .get_result(conn)
    .await?)
}
