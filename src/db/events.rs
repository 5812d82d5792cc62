//! Read-only SQL of `outbox` for the admin: event lists by keyset, one event, a key's
//! timeline, and the counts behind `/api/v1/stats`.
//!
//! Lists walk `seq` downwards (newest first) from a cursor, never with OFFSET, on the
//! indexes of migration 4, so a page costs the same on the first and the millionth row.

use chrono::{DateTime, Utc};
use diesel::pg::Pg;
use diesel::sql_types::{BigInt, Bool, Double, Integer, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::outbox::OLDEST_DUE_AGE_SQL;
use super::DbError;

/// One event as the admin shows it.
#[derive(Debug, Clone, QueryableByName)]
pub struct EventRow {
    /// The event id.
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    pub id: Uuid,
    /// Insertion order: the keyset cursor of lists.
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
    /// Routing name.
    #[diesel(sql_type = Text)]
    pub topic: String,
    /// Ordering key.
    #[diesel(sql_type = Nullable<Text>)]
    pub partition_key: Option<String>,
    /// The body, as the JSON text Postgres holds: read as text, not parsed, so a number
    /// no `f64` holds (which an application may well have written) is shown as stored.
    #[diesel(sql_type = Text)]
    pub payload: String,
    /// Metadata passed through, as JSON text.
    #[diesel(sql_type = Nullable<Text>)]
    pub headers: Option<String>,
    /// When the producer wrote it.
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    /// Not published before this time.
    #[diesel(sql_type = Timestamptz)]
    pub available_at: DateTime<Utc>,
    /// When it reached its stream.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub published_at: Option<DateTime<Utc>>,
    /// Failed attempts so far.
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    /// The last failure.
    #[diesel(sql_type = Nullable<Text>)]
    pub last_error: Option<String>,
    /// When it was dead-lettered.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub dead_at: Option<DateTime<Utc>>,
    /// When an operator discarded it (never retried, deleted by retention).
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub discarded_at: Option<DateTime<Utc>>,
}

/// The columns of an [`EventRow`].
pub(crate) const EVENT_COLUMNS: &str =
    "id, seq, topic, partition_key, payload::text AS payload, headers::text AS headers, created_at, \
     available_at, published_at, attempts, last_error, dead_at, discarded_at";

/// Which rows a list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Not yet published, not dead.
    Pending,
    /// In its stream.
    Published,
    /// Dead-lettered and not discarded.
    Dead,
    /// Dead-lettered and discarded.
    Discarded,
}

/// A pending row is in the pending-only indexes (migration 1), a settled one (published or
/// dead) in the settled-only indexes (migration 6); a list of both merges the two sides.
const PENDING: &str = "published_at IS NULL AND dead_at IS NULL";
const SETTLED: &str = "(published_at IS NOT NULL OR dead_at IS NOT NULL)";

impl Status {
    /// The SQL condition; each implies the predicate of a partial index ordered by `seq`.
    /// (Discarded rows are dead rows; saying so lets the planner use the settled index.)
    pub(crate) fn condition(self) -> &'static str {
        match self {
            Status::Pending => PENDING,
            Status::Published => "published_at IS NOT NULL",
            Status::Dead => "dead_at IS NOT NULL AND discarded_at IS NULL",
            Status::Discarded => "dead_at IS NOT NULL AND discarded_at IS NOT NULL",
        }
    }
}

/// Which sides of the table a status lives on, as conditions.
fn sides(status: Option<Status>) -> Vec<&'static str> {
    match status {
        Some(status) => vec![status.condition()],
        None => vec![PENDING, SETTLED],
    }
}

/// Selects up to `$limit_param` rows matching `conditions` on each side, in `order` of
/// `seq`, and keeps the first of them all: one index scan per side, never a table scan.
fn merged_sql(sides: &[&str], conditions: &[String], order: &str, limit_param: usize) -> String {
    let branch = |side: &str| {
        let mut all = vec![side.to_string()];
        all.extend(conditions.iter().cloned());
        format!(
            "SELECT {EVENT_COLUMNS} FROM outbox WHERE {} ORDER BY seq {order} LIMIT ${limit_param}",
            all.join(" AND ")
        )
    };
    match sides {
        [one] => branch(one),
        _ => format!(
            "SELECT {EVENT_COLUMNS} FROM ({}) AS e ORDER BY seq {order} LIMIT ${limit_param}",
            sides
                .iter()
                .map(|side| format!("({})", branch(side)))
                .collect::<Vec<_>>()
                .join(" UNION ALL ")
        ),
    }
}

/// The filters of an event list.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only rows of this status (all when `None`).
    pub status: Option<Status>,
    /// Only this topic.
    pub topic: Option<String>,
    /// Only this partition key.
    pub partition_key: Option<String>,
}

/// A page of events: the rows, and whether rows that matched were left out to keep the page
/// within its bytes (then the page's last row is where the next one starts).
#[derive(Debug)]
pub struct Listed {
    /// Newest first.
    pub rows: Vec<EventRow>,
    /// Rows matched past the byte budget.
    pub cut: bool,
}

#[derive(QueryableByName)]
struct Budgeted {
    #[diesel(embed)]
    event: EventRow,
    #[diesel(sql_type = BigInt)]
    matched: i64,
}

/// Up to `limit` events matching `filter` with `seq` below `before`, newest first, as many
/// as fit in `max_bytes` of payload and headers (the first one whatever its size): a page
/// of large events stays within what the admin server may hold and send, whatever `limit`
/// says.
pub async fn list(
    conn: &mut AsyncPgConnection,
    filter: &EventFilter,
    before: Option<i64>,
    limit: i64,
    max_bytes: i64,
) -> Result<Listed, DbError> {
    // Only the filters present become SQL, so the planner sees plain conditions that match
    // an index. A topic is filtered while walking `seq`: an index per topic would slow the
    // relay down, since each publish would add an entry to it.
    let mut conditions: Vec<String> = Vec::new();
    let mut n = 0;
    let mut param = || {
        n += 1;
        n
    };
    if filter.topic.is_some() {
        conditions.push(format!("topic = ${}", param()));
    }
    if filter.partition_key.is_some() {
        conditions.push(format!("partition_key = ${}", param()));
    }
    if before.is_some() {
        conditions.push(format!("seq < ${}", param()));
    }
    let limit_param = param();
    let budget_param = param();
    let sql = within_budget(
        &merged_sql(&sides(filter.status), &conditions, "DESC", limit_param),
        "DESC",
        budget_param,
    );
    let mut query = diesel::sql_query(sql).into_boxed::<Pg>();
    if let Some(topic) = &filter.topic {
        query = query.bind::<Text, _>(topic.clone());
    }
    if let Some(key) = &filter.partition_key {
        query = query.bind::<Text, _>(key.clone());
    }
    if let Some(before) = before {
        query = query.bind::<BigInt, _>(before);
    }
    let rows: Vec<Budgeted> = query
        .bind::<BigInt, _>(limit)
        .bind::<BigInt, _>(max_bytes)
        .load(conn)
        .await?;
    Ok(Listed::from(rows))
}

impl From<Vec<Budgeted>> for Listed {
    fn from(rows: Vec<Budgeted>) -> Listed {
        let matched = rows.as_slice().first().map_or(0, |r| r.matched);
        let cut = (rows.len() as i64) < matched;
        Listed {
            rows: rows.into_iter().map(|r| r.event).collect(),
            cut,
        }
    }
}

/// The rows of `inner` (a query of [`EVENT_COLUMNS`]) that fit in `$budget_param` bytes of
/// payload and headers, counted in `order` of `seq` (the first row whatever its size), each
/// with how many rows `inner` matched: what [`Budgeted`] reads.
fn within_budget(inner: &str, order: &str, budget_param: usize) -> String {
    format!(
        "SELECT * FROM (
             SELECT l.*,
                    sum(octet_length(l.payload) + coalesce(octet_length(l.headers), 0))
                        OVER (ORDER BY l.seq {order}) AS upto_bytes,
                    count(*) OVER () AS matched
             FROM ({inner}) AS l) AS b
         WHERE upto_bytes <= ${budget_param}
            OR upto_bytes = octet_length(payload) + coalesce(octet_length(headers), 0)
         ORDER BY seq {order}"
    )
}

/// One event by id.
pub async fn get(conn: &mut AsyncPgConnection, id: Uuid) -> Result<Option<EventRow>, DbError> {
    let mut rows: Vec<EventRow> =
        diesel::sql_query(format!("SELECT {EVENT_COLUMNS} FROM outbox WHERE id = $1"))
            .bind::<diesel::sql_types::Uuid, _>(id)
            .load(conn)
            .await?;
    Ok(rows.pop())
}

/// Up to `limit` events of the same topic and key right before (`earlier`, newest first) or
/// right after (`!earlier`, oldest first) the event at `seq`, as many as fit in `max_bytes`
/// of payload and headers (the nearest one whatever its size).
pub async fn neighbours(
    conn: &mut AsyncPgConnection,
    topic: &str,
    partition_key: &str,
    seq: i64,
    earlier: bool,
    limit: i64,
    max_bytes: i64,
) -> Result<Listed, DbError> {
    let (cmp, order) = if earlier { ("<", "DESC") } else { (">", "ASC") };
    let conditions = [
        "partition_key = $1".to_string(),
        "topic = $2".to_string(),
        format!("seq {cmp} $3"),
    ];
    let sql = within_budget(&merged_sql(&sides(None), &conditions, order, 4), order, 5);
    let rows: Vec<Budgeted> = diesel::sql_query(sql)
        .bind::<Text, _>(partition_key)
        .bind::<Text, _>(topic)
        .bind::<BigInt, _>(seq)
        .bind::<BigInt, _>(limit)
        .bind::<BigInt, _>(max_bytes)
        .load(conn)
        .await?;
    Ok(Listed::from(rows))
}

/// An event's neighbours on its key: up to `limit` on each side, the two sides sharing what
/// `max_bytes` leaves after the event itself (empty for an unkeyed event).
pub async fn timeline(
    conn: &mut AsyncPgConnection,
    event: &EventRow,
    limit: i64,
    max_bytes: i64,
) -> Result<(Listed, Listed), DbError> {
    let Some(key) = &event.partition_key else {
        let none = || Listed {
            rows: Vec::new(),
            cut: false,
        };
        return Ok((none(), none()));
    };
    let own = event.payload.len() + event.headers.as_ref().map_or(0, String::len);
    let side = (max_bytes - i64::try_from(own).unwrap_or(i64::MAX)).max(0) / 2;
    let earlier = neighbours(conn, &event.topic, key, event.seq, true, limit, side).await?;
    let later = neighbours(conn, &event.topic, key, event.seq, false, limit, side).await?;
    Ok((earlier, later))
}

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
           {OLDEST_DUE_AGE_SQL}"
    ))
    .get_result(conn)
    .await?)
}
