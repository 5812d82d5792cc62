//! All SQL of `outbox_audit`: who changed what through the admin (API or UI).
//!
//! Every steering function in `src/db/` calls [`record`] inside its own transaction, so an
//! action and its audit row commit together or not at all.

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Jsonb, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use super::DbError;

/// One audit entry.
#[derive(Debug, Clone, QueryableByName)]
pub struct AuditRow {
    /// Increasing id: the keyset cursor.
    #[diesel(sql_type = BigInt)]
    pub id: i64,
    /// When the action committed.
    #[diesel(sql_type = Timestamptz)]
    pub at: DateTime<Utc>,
    /// Who acted (`token:admin`, `open`, a UI session's name...).
    #[diesel(sql_type = Text)]
    pub who: String,
    /// What was done (`retry`, `discard`, `pause`, ...).
    #[diesel(sql_type = Text)]
    pub action: String,
    /// On what: an event id, a topic, or `dead` for bulk actions.
    #[diesel(sql_type = Text)]
    pub target: String,
    /// The parameters of the action (filter, counts, old and new values).
    #[diesel(sql_type = Jsonb)]
    pub detail: serde_json::Value,
}

/// Writes one audit row; call it inside the transaction of the action it records.
pub async fn record(
    conn: &mut AsyncPgConnection,
    who: &str,
    action: &str,
    target: &str,
    detail: &serde_json::Value,
) -> Result<(), DbError> {
    diesel::sql_query(
        "INSERT INTO outbox_audit (who, action, target, detail) VALUES ($1, $2, $3, $4)",
    )
    .bind::<Text, _>(who)
    .bind::<Text, _>(action)
    .bind::<Text, _>(target)
    .bind::<Jsonb, _>(detail)
    .execute(conn)
    .await?;
    Ok(())
}

/// Up to `limit` entries older than the cursor `before` (an id), newest first.
pub async fn list(
    conn: &mut AsyncPgConnection,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditRow>, DbError> {
    Ok(diesel::sql_query(
        "SELECT id, at, who, action, target, detail FROM outbox_audit
         WHERE $1::bigint IS NULL OR id < $1
         ORDER BY id DESC LIMIT $2",
    )
    .bind::<Nullable<BigInt>, _>(before)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?)
}

/// Entries of `action` newer than `hours`, newest first (at most 20): what a banner shows.
pub async fn recent(
    conn: &mut AsyncPgConnection,
    action: &str,
    hours: i64,
) -> Result<Vec<AuditRow>, DbError> {
    Ok(diesel::sql_query(
        "SELECT id, at, who, action, target, detail FROM outbox_audit
         WHERE action = $1 AND at > now() - $2 * interval '1 hour'
         ORDER BY id DESC LIMIT 20",
    )
    .bind::<Text, _>(action)
    .bind::<BigInt, _>(hours)
    .load(conn)
    .await?)
}
