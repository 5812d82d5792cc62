//! All SQL of `outbox_idempotency`, and the admin's enqueue that uses it: an event and its
//! idempotency key are written in one transaction, so a key never points at a missing
//! event and an event sent twice with one key is stored once.
//!
//! A transaction-scoped advisory lock per key makes a concurrent duplicate fail fast
//! ([`EnqueueError::KeyInFlight`]) instead of waiting on the first one's unique-index entry.

use diesel::sql_types::{BigInt, Bool, Bytea, Jsonb, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use uuid::Uuid;

use super::{audit, DbError};
use crate::producer::{self, NewEvent, ProducerError};

/// Advisory lock class of idempotency keys ("outbox-i").
const KEY_LOCK: i64 = 0x6f75_7462_6f78_2d69;

/// How long a key is remembered; older keys are forgotten (lazily here, in bulk by
/// [`expire`] from the retention cleaner).
pub const KEY_TTL_HOURS: i64 = 24;

/// Why an enqueue was refused.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    /// The topic breaks the table's rule.
    #[error("invalid topic {0:?}: 1 to 255 characters, no whitespace or control characters")]
    InvalidTopic(String),
    /// Another request with this key is being processed right now.
    #[error("a request with this Idempotency-Key is in flight")]
    KeyInFlight,
    /// The key was used before with another body.
    #[error("this Idempotency-Key was used with another request body")]
    KeyReused,
    /// Postgres failed.
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<ProducerError> for EnqueueError {
    fn from(e: ProducerError) -> Self {
        match e {
            ProducerError::InvalidTopic(t) => EnqueueError::InvalidTopic(t),
            ProducerError::Database(e) => EnqueueError::Db(DbError::Query(e)),
        }
    }
}

impl From<diesel::result::Error> for EnqueueError {
    fn from(e: diesel::result::Error) -> Self {
        EnqueueError::Db(DbError::Query(e))
    }
}

/// The result of an accepted enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new event.
    Created(Uuid),
    /// The key was seen with the same body: the event it created then.
    Replayed(Uuid),
}

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

/// Enqueues `event` as `who`, once per `key` when one is given.
pub async fn enqueue_once(
    conn: &mut AsyncPgConnection,
    event: &NewEvent,
    key: Option<&str>,
    who: &str,
) -> Result<Enqueued, EnqueueError> {
    conn.transaction::<_, EnqueueError, _>(async |c| {
        let mut hash = None;
        if let Some(key) = key {
            let lock: Locked = diesel::sql_query(
                "SELECT pg_try_advisory_xact_lock(hashtextextended($1, $2)) AS locked",
            )
            .bind::<Text, _>(key)
            .bind::<BigInt, _>(KEY_LOCK)
            .get_result(c)
            .await?;
            if !lock.locked {
                return Err(EnqueueError::KeyInFlight);
            }
            // jsonb's text form is canonical (key order, spacing), so equal bodies hash alike.
            let h: Hash = diesel::sql_query(
                "SELECT sha256(convert_to(jsonb_build_array($1::text, $2::jsonb, $3::text, $4::jsonb)::text, 'UTF8')) AS hash",
            )
            .bind::<Text, _>(&event.topic)
            .bind::<Jsonb, _>(&event.payload)
            .bind::<Nullable<Text>, _>(&event.partition_key)
            .bind::<Nullable<Jsonb>, _>(&event.headers)
            .get_result(c)
            .await?;
            diesel::sql_query(format!(
                "DELETE FROM outbox_idempotency
                 WHERE key = $1 AND created_at < now() - interval '{KEY_TTL_HOURS} hours'"
            ))
            .bind::<Text, _>(key)
            .execute(c)
            .await?;
            let known: Vec<Known> = diesel::sql_query(
                "SELECT event_id, request_hash = $2 AS same FROM outbox_idempotency WHERE key = $1",
            )
            .bind::<Text, _>(key)
            .bind::<Bytea, _>(&h.hash)
            .load(c)
            .await?;
            if let Some(known) = known.into_iter().next() {
                return if known.same {
                    Ok(Enqueued::Replayed(known.event_id))
                } else {
                    Err(EnqueueError::KeyReused)
                };
            }
            hash = Some(h.hash);
        }
        let id = producer::enqueue(c, event).await?;
        if let (Some(key), Some(hash)) = (key, hash) {
            diesel::sql_query(
                "INSERT INTO outbox_idempotency (key, request_hash, event_id) VALUES ($1, $2, $3)",
            )
            .bind::<Text, _>(key)
            .bind::<Bytea, _>(hash)
            .bind::<diesel::sql_types::Uuid, _>(id)
            .execute(c)
            .await?;
        }
        let detail = serde_json::json!({
            "topic": event.topic,
            "partition_key": event.partition_key,
            "idempotency_key": key,
        });
        audit::record(c, who, "enqueue", &id.to_string(), &detail).await?;
        Ok(Enqueued::Created(id))
    })
    .await
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
