//! All SQL of `outbox_replicas`: heartbeats of the running relays.

use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Jsonb, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde::Serialize;

use super::DbError;

/// One live replica.
#[derive(Debug, Clone, QueryableByName, Serialize)]
pub struct Replica {
    /// Its `instance_id`.
    #[diesel(sql_type = Text)]
    pub instance_id: String,
    /// Its binary's version.
    #[diesel(sql_type = Text)]
    pub version: String,
    /// When it started.
    #[diesel(sql_type = Timestamptz)]
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    #[diesel(sql_type = Timestamptz)]
    pub last_seen_at: DateTime<Utc>,
    /// Events it published in the 60 s before its last heartbeat.
    #[diesel(sql_type = BigInt)]
    pub published_last_minute: i64,
    /// Its per-minute counts of the last hour (see `relay::throughput::Minutes`).
    #[diesel(sql_type = Jsonb)]
    pub throughput: serde_json::Value,
}

/// Writes this replica's heartbeat.
pub async fn beat(
    conn: &mut AsyncPgConnection,
    instance_id: &str,
    version: &str,
    started_at: DateTime<Utc>,
) -> Result<(), DbError> {
    diesel::sql_query(
        "INSERT INTO outbox_replicas (instance_id, version, started_at, last_seen_at)
         VALUES ($1, $2, $3, now())
         ON CONFLICT (instance_id) DO UPDATE
         SET version = EXCLUDED.version, started_at = EXCLUDED.started_at, last_seen_at = now()",
    )
    .bind::<Text, _>(instance_id)
    .bind::<Text, _>(version)
    .bind::<Timestamptz, _>(started_at)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records this replica's throughput (after its heartbeat in the same tick).
pub async fn report_throughput(
    conn: &mut AsyncPgConnection,
    instance_id: &str,
    published_last_minute: i64,
    throughput: &serde_json::Value,
) -> Result<(), DbError> {
    diesel::sql_query(
        "UPDATE outbox_replicas SET published_last_minute = $2, throughput = $3
         WHERE instance_id = $1",
    )
    .bind::<Text, _>(instance_id)
    .bind::<BigInt, _>(published_last_minute)
    .bind::<Jsonb, _>(throughput)
    .execute(conn)
    .await?;
    Ok(())
}

/// Removes this replica's row (at graceful shutdown).
pub async fn forget(conn: &mut AsyncPgConnection, instance_id: &str) -> Result<(), DbError> {
    diesel::sql_query("DELETE FROM outbox_replicas WHERE instance_id = $1")
        .bind::<Text, _>(instance_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Removes rows of replicas silent for longer than `stale_ms` (crashed, never said goodbye).
pub async fn prune(conn: &mut AsyncPgConnection, stale_ms: i64) -> Result<(), DbError> {
    diesel::sql_query(
        "DELETE FROM outbox_replicas WHERE last_seen_at < now() - $1 * interval '1 millisecond'",
    )
    .bind::<BigInt, _>(stale_ms)
    .execute(conn)
    .await?;
    Ok(())
}

/// Replicas whose last heartbeat is newer than `alive_ms`.
pub async fn alive(conn: &mut AsyncPgConnection, alive_ms: i64) -> Result<Vec<Replica>, DbError> {
    Ok(diesel::sql_query(
        "SELECT instance_id, version, started_at, last_seen_at, published_last_minute, throughput
         FROM outbox_replicas
         WHERE last_seen_at >= now() - $1 * interval '1 millisecond'
         ORDER BY instance_id",
    )
    .bind::<BigInt, _>(alive_ms)
    .load(conn)
    .await?)
}
