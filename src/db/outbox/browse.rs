//! Read-only SQL of `outbox` for the admin's event pages and API: event lists by keyset, one
//! event, a key's timeline. The counts behind `/api/v1/stats` are in `stats`.
//!
//! Lists walk `seq` downwards (newest first) from a cursor, never with OFFSET, on the
//! indexes of migration 4, so a page costs the same on the first and the millionth row.

use chrono::{DateTime, Utc};
use diesel::pg::Pg;
use diesel::sql_types::{BigInt, Integer, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::DbError;

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
    /// The adopted table the producer wrote it to; `None`: written to `outbox` itself.
    #[diesel(sql_type = Nullable<Text>)]
    pub source_table: Option<String>,
}

/// The columns of an [`EventRow`].
pub(super) const EVENT_COLUMNS: &str =
    "id, seq, topic, partition_key, payload::text AS payload, headers::text AS headers, created_at, \
     available_at, published_at, attempts, last_error, dead_at, discarded_at, source_table";

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
    fn condition(self) -> &'static str {
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
