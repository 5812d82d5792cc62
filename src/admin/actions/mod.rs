//! The admin's state-changing operations, one function each, shared by the JSON API and the
//! web UI: pause or resume a topic, replace its settings, retry or discard one dead letter or
//! every dead letter matching a filter, enqueue an event, replay a topic (also the CLI's),
//! release a consumer group's parked key.
//!
//! Each validates its input, writes (the audit row goes in the same transaction, in
//! `crate::db`) and wakes this replica's claimer when the write made events publishable. The
//! handlers only parse the request, call an action and render its [`ActionError`] their way
//! (`ApiError` and `UiError` convert from it), so the two transports cannot drift apart on
//! what an action checks, records or wakes.

mod enqueue;
mod parked;
mod replay;

use actix::Recipient;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::db::outbox::dead::{self, DeadAction, DeadFilter, Steered};
use crate::db::{topics, Db, DbError};
use crate::producer::{NewEvent, ProducerError};
use crate::relay::messages::Wake;
pub use enqueue::Enqueued;
pub use replay::{parse_time, ReplayRange};

/// Why an action was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    /// The topic breaks the table's rule.
    #[error("invalid topic {0:?}: 1 to 255 characters, no whitespace or control characters")]
    InvalidTopic(String),
    /// A field of an event holds a NUL character (Postgres cannot store it).
    #[error("field `{0}` contains a NUL character (\\u0000), which Postgres cannot store")]
    Nul(&'static str),
    /// A stream length that is zero or negative.
    #[error("maxlen must be positive or null")]
    BadMaxlen,
    /// Event headers that are not a JSON object.
    #[error("headers must be a JSON object")]
    HeadersNotObject,
    /// A dead-letter filter whose time range matches nothing.
    #[error("the time range is empty: {after} is not before {before}")]
    EmptyRange {
        /// Dead at or after this time.
        after: DateTime<Utc>,
        /// Dead before this time.
        before: DateTime<Utc>,
    },
    /// No event has this id (never had, or retention deleted it).
    #[error("no event {0}")]
    NoEvent(Uuid),
    /// The event exists but is not dead: pending, published or already discarded.
    #[error("event {0} is not dead (pending, published or already discarded)")]
    NotDead(Uuid),
    /// Another request with this idempotency key is being processed right now.
    #[error("a request with this Idempotency-Key is in flight")]
    KeyInFlight,
    /// The idempotency key was used before with another body.
    #[error("this Idempotency-Key was used with another request body")]
    KeyReused,
    /// A replay's time that is neither RFC 3339 nor a duration.
    #[error("{field} must be an RFC 3339 time (2026-12-04T10:00:00Z) or a duration meaning that long ago (15m), not {value:?}")]
    BadTime {
        /// `since` or `until`.
        field: &'static str,
        /// What was given.
        value: String,
    },
    /// A replay whose `until` is not after its `since`.
    #[error("the replay range is empty: until ({until}) is not after since ({since})")]
    EmptyReplay {
        /// From.
        since: DateTime<Utc>,
        /// To.
        until: DateTime<Utc>,
    },
    /// A consumer group's key that is not parked (or released already).
    #[error("key {0:?} is not parked in this group")]
    NotParked(String),
    /// A redrive whose dead entry is gone from the dead stream.
    #[error("{0}")]
    DeadEntryGone(String),
    /// Redis failed.
    #[error("redis unavailable: {0}")]
    Redis(String),
    /// Postgres failed.
    #[error(transparent)]
    Db(#[from] DbError),
}

impl From<diesel::result::Error> for ActionError {
    fn from(e: diesel::result::Error) -> Self {
        ActionError::Db(DbError::Query(e))
    }
}

impl From<diesel_async::pooled_connection::bb8::RunError> for ActionError {
    fn from(e: diesel_async::pooled_connection::bb8::RunError) -> Self {
        ActionError::Db(DbError::from(e))
    }
}

impl From<ProducerError> for ActionError {
    fn from(e: ProducerError) -> Self {
        match e {
            ProducerError::InvalidTopic(t) => ActionError::InvalidTopic(t),
            ProducerError::Nul(field) => ActionError::Nul(field),
            ProducerError::Database(e) => e.into(),
        }
    }
}

/// Checks a topic against the table's rule; reads of a topic use it too, so that a name the
/// actions refuse is refused everywhere with the same words.
pub fn check_topic(topic: &str) -> Result<(), ActionError> {
    if crate::producer::valid_topic(topic) {
        Ok(())
    } else {
        Err(ActionError::InvalidTopic(topic.to_string()))
    }
}

/// Checks a text a query compares with a column: Postgres refuses a NUL in any text, and
/// that refusal must read as bad input, not as Postgres being away.
pub fn check_text(field: &'static str, text: Option<&str>) -> Result<(), ActionError> {
    match text {
        Some(t) if t.contains('\0') => Err(ActionError::Nul(field)),
        _ => Ok(()),
    }
}

/// Checks a dead-letter filter; the pages and lists that show what an action would take use
/// it too, so they refuse the filters the action refuses.
pub fn check_dead_filter(filter: &DeadFilter) -> Result<(), ActionError> {
    if let Some(topic) = &filter.topic {
        check_topic(topic)?;
    }
    check_text("key", filter.partition_key.as_deref())?;
    check_text("error", filter.error_contains.as_deref())?;
    check_text("fingerprint", filter.fingerprint.as_deref())?;
    match (filter.dead_after, filter.dead_before) {
        (Some(after), Some(before)) if after >= before => {
            Err(ActionError::EmptyRange { after, before })
        }
        _ => Ok(()),
    }
}

/// What the actions work with: the pool they write through and this replica's claimer.
/// Borrowed from the admin's state ([`AdminState::actions`](super::AdminState::actions)).
#[derive(Clone, Copy)]
pub struct Actions<'a> {
    db: &'a Db,
    wake: Option<&'a Recipient<Wake>>,
}

impl<'a> Actions<'a> {
    /// The actions on `db`, waking `wake` (if any) after a write that makes events due.
    pub fn new(db: &'a Db, wake: Option<&'a Recipient<Wake>>) -> Actions<'a> {
        Actions { db, wake }
    }

    /// Wakes this replica's claimer so that events made publishable go out now rather than
    /// at the next poll; the other replicas hear the NOTIFY the action's transaction sent.
    fn wake_claimer(&self) {
        if let Some(wake) = self.wake {
            wake.do_send(Wake);
        }
    }

    /// Pauses or resumes `topic` (also one with no events yet) as `who`. Returns once the
    /// in-flight batches of the topic have committed: after a pause, no replica publishes it.
    pub async fn set_paused(
        &self,
        who: &str,
        topic: &str,
        paused: bool,
    ) -> Result<(), ActionError> {
        check_topic(topic)?;
        self.db
            .unit(async |c| topics::set_paused(c, topic, paused, who).await)
            .await?;
        if !paused {
            self.wake_claimer();
        }
        Ok(())
    }

    /// Replaces both settings of `topic` as `who`: the pause flag and the stream trimming
    /// (`None` falls back to `redis.maxlen`).
    pub async fn set_topic_settings(
        &self,
        who: &str,
        topic: &str,
        paused: bool,
        maxlen: Option<i64>,
    ) -> Result<(), ActionError> {
        check_topic(topic)?;
        if maxlen.is_some_and(|m| m <= 0) {
            return Err(ActionError::BadMaxlen);
        }
        self.db
            .unit(async |c| topics::set_settings(c, topic, paused, maxlen, who).await)
            .await?;
        if !paused {
            self.wake_claimer();
        }
        Ok(())
    }

    /// Retries or discards the dead letter `id` as `who`.
    pub async fn dead_one(
        &self,
        who: &str,
        action: DeadAction,
        id: Uuid,
    ) -> Result<(), ActionError> {
        let steered = self
            .db
            .unit(async |c| dead::act_on_one(c, action, id, who).await)
            .await?;
        match steered {
            Steered::NotFound => Err(ActionError::NoEvent(id)),
            Steered::NotDead => Err(ActionError::NotDead(id)),
            Steered::Done => {
                if action == DeadAction::Retry {
                    self.wake_claimer();
                }
                Ok(())
            }
        }
    }

    /// Retries or discards, as `who`, every dead letter matching `filter`; with `dry_run`
    /// only counts them. Returns how many matched (dry run) or changed.
    pub async fn dead_bulk(
        &self,
        who: &str,
        action: DeadAction,
        filter: &DeadFilter,
        dry_run: bool,
    ) -> Result<i64, ActionError> {
        check_dead_filter(filter)?;
        let count = self
            .db
            .unit(async |c| {
                if dry_run {
                    dead::count(c, filter).await
                } else {
                    dead::act_on_matching(c, action, filter, who).await
                }
            })
            .await?;
        if !dry_run && action == DeadAction::Retry && count > 0 {
            self.wake_claimer();
        }
        Ok(count)
    }

    /// Enqueues `event` as `who` (headers `None` become `{}`), once per idempotency `key`
    /// when one is given. `trace` (the request's W3C trace context) goes into headers that
    /// name none, after the idempotency comparison: a retried request carries a new span.
    pub async fn enqueue(
        &self,
        who: &str,
        mut event: NewEvent,
        key: Option<&str>,
        trace: &[(&'static str, String)],
    ) -> Result<Enqueued, ActionError> {
        check_topic(&event.topic)?;
        let headers = event.headers.get_or_insert_with(|| serde_json::json!({}));
        if !headers.is_object() {
            return Err(ActionError::HeadersNotObject);
        }
        self.db
            .unit(async |c| enqueue::enqueue_once(c, &event, key, who, trace).await)
            .await
    }
}
