//! The admin API's enqueue: an event and its idempotency key are written in one transaction,
//! so a key never points at a missing event and an event sent twice with one key is stored
//! once. A concurrent duplicate fails fast ([`EnqueueError::KeyInFlight`]).

use diesel_async::{AsyncConnection, AsyncPgConnection};
use uuid::Uuid;

use crate::db::{audit, idempotency, DbError};
use crate::producer::{self, NewEvent, ProducerError};

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
            if !idempotency::try_lock_key(c, key).await? {
                return Err(EnqueueError::KeyInFlight);
            }
            let h = idempotency::request_hash(
                c,
                &event.topic,
                &event.payload,
                event.partition_key.as_deref(),
                event.headers.as_ref(),
            )
            .await?;
            idempotency::forget_if_expired(c, key).await?;
            if let Some(known) = idempotency::lookup(c, key, &h).await? {
                return if known.same_request {
                    Ok(Enqueued::Replayed(known.event_id))
                } else {
                    Err(EnqueueError::KeyReused)
                };
            }
            hash = Some(h);
        }
        let id = producer::enqueue(c, event).await?;
        if let (Some(key), Some(hash)) = (key, hash) {
            idempotency::remember(c, key, &hash, id).await?;
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
