//! The Rust producer API: enqueue events on the caller's own connection or transaction, so
//! they commit (or roll back) with the business data.
//!
//! ```no_run
//! use diesel_async::{AsyncConnection, AsyncPgConnection};
//! use outbox_relay::producer::{enqueue, NewEvent};
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let mut conn = AsyncPgConnection::establish("postgres://postgres@127.0.0.1/shop").await?;
//! conn.transaction::<_, outbox_relay::producer::ProducerError, _>(async |tx| {
//!     // ... insert the order itself here, on `tx` ...
//!     let event = NewEvent::new("order.created", serde_json::json!({"order_id": 42}))
//!         .key("order-42");
//!     enqueue(tx, &event).await?;
//!     Ok(())
//! })
//! .await?;
//! # Ok(())
//! # }
//! ```

use chrono::{DateTime, Utc};
use diesel_async::AsyncPgConnection;
use uuid::Uuid;

use crate::db::outbox::{insert_returning_ids, NewRow};

/// Why an enqueue failed.
#[derive(Debug, thiserror::Error)]
pub enum ProducerError {
    /// The topic breaks the table's rule (1 to 255 characters, no whitespace or control).
    #[error("invalid topic {0:?}: 1 to 255 characters, no whitespace or control characters")]
    InvalidTopic(String),
    /// A text holds a NUL character, which Postgres cannot store in `text` or `jsonb`.
    #[error("field `{0}` contains a NUL character (\\u0000), which Postgres cannot store")]
    Nul(&'static str),
    /// The insert failed.
    #[error("enqueue failed: {0}")]
    Database(#[from] diesel::result::Error),
}

/// An event to enqueue.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// Routing name; the stream is `<prefix><topic>`.
    pub topic: String,
    /// The body.
    pub payload: serde_json::Value,
    /// Ordering key; events of one key reach the stream in commit order.
    pub partition_key: Option<String>,
    /// Passed through to the stream entry. [`enqueue`] adds the caller's trace context as
    /// `traceparent` when the object has none.
    pub headers: Option<serde_json::Value>,
    /// Do not publish before this time (default: now).
    pub available_at: Option<DateTime<Utc>>,
}

impl NewEvent {
    /// An unkeyed event with empty headers.
    pub fn new(topic: impl Into<String>, payload: serde_json::Value) -> Self {
        NewEvent {
            topic: topic.into(),
            payload,
            partition_key: None,
            headers: Some(serde_json::json!({})),
            available_at: None,
        }
    }

    /// Sets the partition key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.partition_key = Some(key.into());
        self
    }

    /// Sets the headers.
    pub fn headers(mut self, headers: serde_json::Value) -> Self {
        self.headers = Some(headers);
        self
    }

    /// Delays publication until `at`.
    pub fn available_at(mut self, at: DateTime<Utc>) -> Self {
        self.available_at = Some(at);
        self
    }

    /// The row the insert writes, borrowing this event.
    fn row(&self) -> NewRow<'_> {
        NewRow {
            topic: &self.topic,
            payload: &self.payload,
            partition_key: self.partition_key.as_deref(),
            headers: self.headers.as_ref(),
            available_at: self.available_at,
        }
    }
}

/// The table's topic rule, checked before the round trip (`outbox_core::topic`).
pub use outbox_core::topic::is_valid as valid_topic;

/// Refuses a NUL character anywhere Postgres would refuse it (the partition key, any string
/// or object key of the payload or headers), naming the field: bad input, not an outage.
pub fn check_nul(event: &NewEvent) -> Result<(), ProducerError> {
    if event
        .partition_key
        .as_deref()
        .is_some_and(|k| k.contains('\0'))
    {
        return Err(ProducerError::Nul("partition_key"));
    }
    if has_nul(&event.payload) {
        return Err(ProducerError::Nul("payload"));
    }
    if event.headers.as_ref().is_some_and(has_nul) {
        return Err(ProducerError::Nul("headers"));
    }
    Ok(())
}

/// Whether a JSON value holds a NUL in a string or an object key.
fn has_nul(value: &serde_json::Value) -> bool {
    match value {
        serde_json::Value::String(s) => s.contains('\0'),
        serde_json::Value::Array(items) => items.iter().any(has_nul),
        serde_json::Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// Inserts one event; returns its id.
pub async fn enqueue(
    conn: &mut AsyncPgConnection,
    event: &NewEvent,
) -> Result<Uuid, ProducerError> {
    let ids = enqueue_many(conn, std::slice::from_ref(event)).await?;
    ids.into_iter()
        .next()
        .ok_or(ProducerError::Database(diesel::result::Error::NotFound))
}

/// Inserts many events in as few statements as the bind limit allows; ids in input order.
pub async fn enqueue_many(
    conn: &mut AsyncPgConnection,
    events: &[NewEvent],
) -> Result<Vec<Uuid>, ProducerError> {
    if let Some(bad) = events.iter().find(|e| !valid_topic(&e.topic)) {
        return Err(ProducerError::InvalidTopic(bad.topic.clone()));
    }
    for event in events {
        check_nul(event)?;
    }
    let events = with_trace_context(events);
    // Five binds per row; Postgres takes at most 65,535 per statement.
    let mut ids = Vec::with_capacity(events.len());
    for chunk in events.chunks(10_000) {
        let rows: Vec<NewRow<'_>> = chunk.iter().map(NewEvent::row).collect();
        let mut inserted = insert_returning_ids(conn, &rows).await?;
        ids.append(&mut inserted);
    }
    Ok(ids)
}

/// `events`, each with the caller's trace context (its current span, or else OpenTelemetry's
/// current context) as its `traceparent` header, unless it names one already or its headers
/// are not an object. Unchanged when the caller is in no recorded span.
fn with_trace_context(events: &[NewEvent]) -> std::borrow::Cow<'_, [NewEvent]> {
    use opentelemetry::trace::TraceContextExt;
    use outbox_core::trace::{TRACEPARENT, TRACESTATE};
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let lacks = |e: &NewEvent| match &e.headers {
        None => true,
        Some(serde_json::Value::Object(map)) => !map.contains_key(TRACEPARENT),
        Some(_) => false,
    };
    if !events.iter().any(lacks) {
        return events.into();
    }
    let mut context = tracing::Span::current()
        .context()
        .span()
        .span_context()
        .clone();
    if !context.is_valid() {
        context = opentelemetry::Context::current()
            .span()
            .span_context()
            .clone();
    }
    if !context.is_valid() {
        return events.into();
    }
    let traceparent = serde_json::Value::String(outbox_core::trace::format(&context));
    let tracestate = context.trace_state().header();
    events
        .iter()
        .map(|event| {
            let mut event = event.clone();
            if lacks(&event) {
                let headers = event
                    .headers
                    .get_or_insert_with(|| serde_json::Value::Object(Default::default()));
                if let serde_json::Value::Object(map) = headers {
                    map.insert(TRACEPARENT.to_string(), traceparent.clone());
                    if !tracestate.is_empty() && !map.contains_key(TRACESTATE) {
                        map.insert(TRACESTATE.to_string(), tracestate.clone().into());
                    }
                }
            }
            event
        })
        .collect::<Vec<_>>()
        .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_anywhere_postgres_refuses_it_is_named_before_the_round_trip() {
        let ok = NewEvent::new("t", serde_json::json!({"a": ["b", {"c": 1}]})).key("k");
        assert!(check_nul(&ok).is_ok());
        let nul = |e: NewEvent| check_nul(&e).err().map(|e| e.to_string());
        let named = |field: &str| {
            Some(format!(
                "field `{field}` contains a NUL character (\\u0000), which Postgres cannot store"
            ))
        };
        assert_eq!(nul(ok.clone().key("k\0")), named("partition_key"));
        assert_eq!(
            nul(NewEvent::new("t", serde_json::json!({"a": [{"b": "\0"}]}))),
            named("payload")
        );
        assert_eq!(
            nul(NewEvent::new("t", serde_json::json!({"\0": 1}))),
            named("payload")
        );
        assert_eq!(
            nul(ok.headers(serde_json::json!({"h": "\0"}))),
            named("headers")
        );
    }
}
