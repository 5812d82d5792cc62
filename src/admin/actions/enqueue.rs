//! The enqueue action's transaction: an event and its idempotency key are written in one
//! transaction, so a key never points at a missing event and an event sent twice with one key
//! is stored once. A concurrent duplicate fails fast ([`ActionError::KeyInFlight`]).

use diesel_async::{AsyncConnection, AsyncPgConnection};
use uuid::Uuid;

use super::ActionError;
use crate::db::{audit, idempotency};
use crate::producer::{self, NewEvent};

/// The result of an accepted enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueued {
    /// A new event.
    Created(Uuid),
    /// The key was seen with the same body: the event it created then.
    Replayed(Uuid),
}

/// Enqueues `event` as `who`, once per `key` when one is given; the `trace` headers are added
/// to those the event lacks, after the idempotency hash (which covers the request's body only).
pub(super) async fn enqueue_once(
    conn: &mut AsyncPgConnection,
    event: &NewEvent,
    key: Option<&str>,
    who: &str,
    trace: &[(&'static str, String)],
) -> Result<Enqueued, ActionError> {
    // Before anything reaches Postgres: the idempotency hash is computed there too.
    producer::check_nul(event)?;
    conn.transaction::<_, ActionError, _>(async |c| {
        let mut hash = None;
        if let Some(key) = key {
            if !idempotency::try_lock_key(c, key).await? {
                return Err(ActionError::KeyInFlight);
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
                    Err(ActionError::KeyReused)
                };
            }
            hash = Some(h);
        }
        let id = producer::enqueue(c, &with_trace(event, trace)).await?;
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

/// `event` with each of `trace`'s headers that its headers (an object) do not name. A
/// `tracestate` only goes with its own `traceparent`.
fn with_trace(event: &NewEvent, trace: &[(&'static str, String)]) -> NewEvent {
    let mut event = event.clone();
    if let Some(serde_json::Value::Object(headers)) = &mut event.headers {
        if !headers.contains_key(outbox_core::trace::TRACEPARENT) {
            for (name, value) in trace {
                headers.insert((*name).to_string(), value.clone().into());
            }
        }
    }
    event
}
