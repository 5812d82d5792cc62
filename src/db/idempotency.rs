//! All SQL of `outbox_idempotency`: the keys of the admin API's idempotent enqueue (see
//! `admin::actions`), each with a hash of the request it came with and the event it created.
//!
//! A transaction-scoped advisory lock per key makes a concurrent duplicate fail fast instead
//! of waiting on the first one's unique-index entry.

use diesel::sql_types::{BigInt, Bool, Bytea, Jsonb, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::DbError;

/// Advisory lock class of idempotency keys ("outbox-i").
const KEY_LOCK: i64 = 0x6f75_7462_6f78_2d69;

/// How long a key is remembered; older keys are forgotten (lazily by [`forget_if_expired`],
/// in bulk by [`expire`] from the retention cleaner).
pub const KEY_TTL_HOURS: i64 = 24;

#[derive(QueryableByName)]
struct Hash {
    #[diesel(sql_type = Bytea)]
    hash: Vec<u8>,
}

#[derive(QueryableByName)]
struct Known {
    #[diesel(sql_type = diesel::sql_types::Uuid)]
    event_id: Uuid,
    #[diesel(sql_type = Bool)]
    same: bool,
}

#[derive(QueryableByName)]
struct Locked {
    #[diesel(sql_type = Bool)]
    locked: bool,
}

/// What a key remembers, compared with the request in hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remembered {
    /// The event the key created.
    pub event_id: Uuid,
    /// The request in hand has the same body.
    pub same_request: bool,
}

/// Takes the key's lock until the transaction ends; false when another transaction holds it.
pub async fn try_lock_key(conn: &mut AsyncPgConnection, key: &str) -> Result<bool, DbError> {
    let lock: Locked =
        diesel::sql_query("SELECT pg_try_advisory_xact_lock(hashtextextended($1, $2)) AS locked")
            .bind::<Text, _>(key)
            .bind::<BigInt, _>(KEY_LOCK)
            .get_result(conn)
            .await?;
    Ok(lock.locked)
}

/// The hash of a request's body. jsonb's text form is canonical (key order, spacing), so equal
/// bodies hash alike.
pub async fn request_hash(
    conn: &mut AsyncPgConnection,
    topic: &str,
    payload: &serde_json::Value,
    partition_key: Option<&str>,
    headers: Option<&serde_json::Value>,
) -> Result<Vec<u8>, DbError> {
    let h: Hash = diesel::sql_query(
        "SELECT sha256(convert_to(jsonb_build_array($1::text, $2::jsonb, $3::text, $4::jsonb)::text, 'UTF8')) AS hash",
    )
    .bind::<Text, _>(topic)
    .bind::<Jsonb, _>(payload)
    .bind::<Nullable<Text>, _>(partition_key)
    .bind::<Nullable<Jsonb>, _>(headers)
    .get_result(conn)
    .await?;
    Ok(h.hash)
}

/// Forgets `key` if it is older than [`KEY_TTL_HOURS`].
pub async fn forget_if_expired(conn: &mut AsyncPgConnection, key: &str) -> Result<(), DbError> {
    diesel::sql_query(format!(
        "DELETE FROM outbox_idempotency
         WHERE key = $1 AND created_at < now() - interval '{KEY_TTL_HOURS} hours'"
    ))
    .bind::<Text, _>(key)
    .execute(conn)
    .await?;
    Ok(())
}

/// What `key` remembers, if anything, compared with a request of hash `hash`.
pub async fn lookup(
    conn: &mut AsyncPgConnection,
    key: &str,
    hash: &[u8],
) -> Result<Option<Remembered>, DbError> {
    let known: Vec<Known> = diesel::sql_query(
        "SELECT event_id, request_hash = $2 AS same FROM outbox_idempotency WHERE key = $1",
    )
    .bind::<Text, _>(key)
    .bind::<Bytea, _>(hash)
    .load(conn)
    .await?;
    Ok(known.into_iter().next().map(|k| Remembered {
        event_id: k.event_id,
        same_request: k.same,
    }))
}

/// Remembers that `key`, with a request of hash `hash`, created `event_id`.
pub async fn remember(
    conn: &mut AsyncPgConnection,
    key: &str,
    hash: &[u8],
    event_id: Uuid,
) -> Result<(), DbError> {
    diesel::sql_query(
        "INSERT INTO outbox_idempotency (key, request_hash, event_id) VALUES ($1, $2, $3)",
    )
    .bind::<Text, _>(key)
    .bind::<Bytea, _>(hash)
    .bind::<diesel::sql_types::Uuid, _>(event_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// Forgets up to `limit` keys older than [`KEY_TTL_HOURS`]; returns how many.
pub async fn expire(conn: &mut AsyncPgConnection, limit: i64) -> Result<usize, DbError> {
    Ok(diesel::sql_query(format!(
        "DELETE FROM outbox_idempotency WHERE key IN (
             SELECT key FROM outbox_idempotency
             WHERE created_at < now() - interval '{KEY_TTL_HOURS} hours'
             ORDER BY created_at LIMIT $1)"
    ))
    .bind::<BigInt, _>(limit)
    .execute(conn)
    .await?)
}
