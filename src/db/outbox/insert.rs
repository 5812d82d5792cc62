//! The producers' statement: new events inserted into `outbox`, with the ids Postgres gave
//! them. The producer API (`producer`) checks the events and adds the trace context first;
//! the admin API's enqueue goes through it too.

use chrono::{DateTime, Utc};
use diesel::Insertable;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use crate::db::schema::outbox;

/// One row as a producer writes it; every other column takes its default.
#[derive(Debug, Clone, Copy, Insertable)]
#[diesel(table_name = outbox)]
pub struct NewRow<'a> {
    /// Routing name.
    pub topic: &'a str,
    /// The body.
    pub payload: &'a serde_json::Value,
    /// Ordering key.
    pub partition_key: Option<&'a str>,
    /// Passed through to the stream entry; `None`: the column's default (`{}`).
    pub headers: Option<&'a serde_json::Value>,
    /// Not published before this time; `None`: the column's default (now).
    #[diesel(treat_none_as_default_value = true)]
    pub available_at: Option<DateTime<Utc>>,
}

/// Inserts `rows` in one statement (five binds a row: the caller keeps a statement within
/// Postgres' 65,535); their ids, in input order.
pub async fn insert_returning_ids(
    conn: &mut AsyncPgConnection,
    rows: &[NewRow<'_>],
) -> Result<Vec<Uuid>, diesel::result::Error> {
    diesel::insert_into(outbox::table)
        .values(rows)
        .returning(outbox::id)
        .get_results(conn)
        .await
}
