//! `/api/v1/events`: list (keyset), one event, its key's timeline, enqueue (idempotent),
//! and retry or discard of one dead letter.

use actix_web::http::header::HeaderMap;
use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use super::body::Object;
use super::error::{ApiError, ApiResult};
use super::openapi::TopicName;
use super::{next_cursor, valid_topic, Page};
use crate::admin::actions::{check_text, Enqueued};
use crate::admin::caller::Caller;
use crate::admin::AdminState;
use crate::db::outbox::browse::{self, EventFilter, EventRow, Status};
use crate::db::outbox::dead::DeadAction;
use crate::producer::NewEvent;

/// One event.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventView {
    /// The event id.
    pub id: Uuid,
    /// Routing name.
    pub topic: String,
    /// Ordering key.
    pub partition_key: Option<String>,
    /// The body (any JSON value), exactly as stored.
    #[schema(value_type = Value)]
    pub payload: Box<RawValue>,
    /// Metadata passed through (`{}` when none).
    #[schema(value_type = Object)]
    pub headers: Box<RawValue>,
    /// When the producer wrote it.
    pub created_at: DateTime<Utc>,
    /// Not published before this time.
    pub available_at: DateTime<Utc>,
    /// When it reached its stream.
    pub published_at: Option<DateTime<Utc>>,
    /// Failed attempts so far.
    pub attempts: i32,
    /// The last failure.
    pub last_error: Option<String>,
    /// When it was dead-lettered.
    pub dead_at: Option<DateTime<Utc>>,
    /// When an operator discarded it.
    pub discarded_at: Option<DateTime<Utc>>,
    /// The adopted table (`[[tables]]`) the producer wrote it to, schema-qualified; null when
    /// it was written to `outbox` itself.
    pub source_table: Option<String>,
    /// `pending`, `published`, `dead` or `discarded`.
    pub status: StatusParam,
}

impl From<EventRow> for EventView {
    fn from(r: EventRow) -> Self {
        let status = if r.discarded_at.is_some() {
            StatusParam::Discarded
        } else if r.dead_at.is_some() {
            StatusParam::Dead
        } else if r.published_at.is_some() {
            StatusParam::Published
        } else {
            StatusParam::Pending
        };
        EventView {
            id: r.id,
            topic: r.topic,
            partition_key: r.partition_key,
            payload: raw(r.payload),
            headers: raw(r.headers.unwrap_or_else(|| "{}".into())),
            created_at: r.created_at,
            available_at: r.available_at,
            published_at: r.published_at,
            attempts: r.attempts,
            last_error: r.last_error,
            dead_at: r.dead_at,
            discarded_at: r.discarded_at,
            source_table: r.source_table,
            status,
        }
    }
}

/// JSON text from a `jsonb` column: valid JSON by construction (Postgres printed it), so
/// the fallback, a JSON string of the text, is never expected to be taken.
fn raw(json: String) -> Box<RawValue> {
    RawValue::from_string(json).unwrap_or_else(|e| {
        tracing::error!("admin api: a jsonb column printed invalid JSON: {e}");
        Box::default()
    })
}

/// The state of an event.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StatusParam {
    /// Not yet published, not dead.
    Pending,
    /// In its stream.
    Published,
    /// Dead-lettered.
    Dead,
    /// Dead-lettered and discarded by an operator.
    Discarded,
}

impl From<StatusParam> for Status {
    fn from(s: StatusParam) -> Self {
        match s {
            StatusParam::Pending => Status::Pending,
            StatusParam::Published => Status::Published,
            StatusParam::Dead => Status::Dead,
            StatusParam::Discarded => Status::Discarded,
        }
    }
}

/// The filters of `GET /api/v1/events`.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// Only events in this state.
    pub status: Option<StatusParam>,
    /// Only this topic.
    #[param(value_type = Option<TopicName>)]
    pub topic: Option<String>,
    /// Only this partition key (any topic unless `topic` is given).
    #[param(pattern = "^[^\\x00]*$")]
    pub key: Option<String>,
    /// Items per page, 1 to 1000 (default 50).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// The `next` cursor of the previous page.
    #[param(pattern = "^[1-9][0-9]{0,17}$")]
    pub after: Option<String>,
}

/// A page of events, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventPage {
    /// The events.
    pub events: Vec<EventView>,
    /// The cursor of the next page (`after=`), null on the last page.
    pub next: Option<String>,
}

/// Events, newest first, filtered and keyset paginated. A page holds `limit` events, or fewer
/// when their payloads and headers would pass `admin.max_response_bytes` (at least one
/// event): `next` then continues after the last one.
#[utoipa::path(get, path = "/api/v1/events", tag = "events", operation_id = "listEvents", params(ListQuery),
    responses((status = 200, body = EventPage), (status = 400), (status = 401), (status = 503)))]
pub async fn list(
    state: web::Data<AdminState>,
    q: web::Query<ListQuery>,
) -> ApiResult<HttpResponse> {
    let q = q.into_inner();
    let page = Page {
        limit: q.limit,
        after: q.after,
    };
    let (limit, cursor) = (page.limit()?, page.cursor()?);
    if let Some(topic) = &q.topic {
        valid_topic(topic)?;
    }
    check_text("key", q.key.as_deref())?;
    let filter = EventFilter {
        status: q.status.map(Status::from),
        topic: q.topic,
        partition_key: q.key,
    };
    let budget = state.max_response_bytes;
    let listed = state
        .db
        .unit(async |c| browse::list(c, &filter, cursor, limit + 1, budget).await)
        .await?;
    let mut rows = listed.rows;
    let next = match listed.cut {
        // Cut to stay within `admin.max_response_bytes`: the next page starts after the
        // last row that fit.
        true => rows.last().map(|r| r.seq.to_string()),
        false => next_cursor(&mut rows, limit, |r| r.seq),
    };
    let events = rows.into_iter().map(EventView::from).collect();
    Ok(HttpResponse::Ok().json(EventPage { events, next }))
}

async fn load(state: &AdminState, id: Uuid) -> ApiResult<EventRow> {
    state
        .db
        .unit(async |c| browse::get(c, id).await)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no event {id}")))
}

/// One event.
#[utoipa::path(get, path = "/api/v1/events/{id}", tag = "events", operation_id = "getEvent",
    params(("id" = Uuid, Path, description = "the event id")),
    responses((status = 200, body = EventView), (status = 400), (status = 401), (status = 404), (status = 503)))]
pub async fn get(state: web::Data<AdminState>, id: web::Path<Uuid>) -> ApiResult<HttpResponse> {
    let row = load(&state, id.into_inner()).await?;
    Ok(HttpResponse::Ok().json(EventView::from(row)))
}

/// How many neighbours a timeline shows on each side.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TimelineQuery {
    /// Events on each side, 1 to 1000 (default 50).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// An event among the other events of its topic and key.
#[derive(Debug, Serialize, ToSchema)]
pub struct Timeline {
    /// The event.
    pub event: EventView,
    /// Events of the same topic and key inserted before it, nearest first.
    pub earlier: Vec<EventView>,
    /// Events of the same topic and key inserted after it, nearest first.
    pub later: Vec<EventView>,
    /// Earlier events were left out to keep the answer within `admin.max_response_bytes`
    /// (the two sides share what the event leaves); list them with `GET /api/v1/events?key=`.
    pub earlier_cut: bool,
    /// Later events were left out, as for `earlier_cut`.
    pub later_cut: bool,
}

/// The per-key timeline: what came before and after an event on its key (empty lists for
/// an unkeyed event), within `admin.max_response_bytes` of payloads and headers. Published
/// rows older than retention are gone.
#[utoipa::path(get, path = "/api/v1/events/{id}/timeline", tag = "events", operation_id = "getEventTimeline",
    params(("id" = Uuid, Path, description = "the event id"), TimelineQuery),
    responses((status = 200, body = Timeline), (status = 400), (status = 401), (status = 404), (status = 503)))]
pub async fn timeline(
    state: web::Data<AdminState>,
    id: web::Path<Uuid>,
    q: web::Query<TimelineQuery>,
) -> ApiResult<HttpResponse> {
    let limit = Page {
        limit: q.limit,
        after: None,
    }
    .limit()?;
    let row = load(&state, id.into_inner()).await?;
    let budget = state.max_response_bytes;
    let (earlier, later) = state
        .db
        .unit(async |c| browse::timeline(c, &row, limit, budget).await)
        .await?;
    let views = |rows: Vec<EventRow>| rows.into_iter().map(EventView::from).collect();
    Ok(HttpResponse::Ok().json(Timeline {
        event: row.into(),
        earlier: views(earlier.rows),
        later: views(later.rows),
        earlier_cut: earlier.cut,
        later_cut: later.cut,
    }))
}

/// The body of `POST /api/v1/events`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EnqueueRequest {
    /// Routing name: 1 to 255 characters, no whitespace or control characters.
    #[schema(value_type = TopicName)]
    pub topic: String,
    /// The body: any JSON value without a NUL character (`\u0000`) in a string or a key
    /// (Postgres cannot store one; such a body is refused with 400).
    #[schema(value_type = Value)]
    pub payload: serde_json::Value,
    /// Ordering key.
    #[schema(pattern = "^[^\\x00]*$")]
    pub partition_key: Option<String>,
    /// Metadata passed through: a JSON object (default `{}`), without a NUL character, as
    /// `payload`.
    #[schema(value_type = Option<Object>)]
    pub headers: Option<serde_json::Value>,
}

/// The id of an enqueued event.
#[derive(Debug, Serialize, ToSchema)]
pub struct EnqueueResponse {
    /// The event id.
    pub id: Uuid,
}

/// The `Idempotency-Key` header, if sent: 1 to 255 visible ASCII characters.
fn idempotency_key(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .filter(|k| (1..=255).contains(&k.len()) && k.bytes().all(|b| b.is_ascii_graphic()))
        .map(|k| Some(k.to_string()))
        .ok_or_else(|| {
            ApiError::BadRequest("Idempotency-Key must be 1 to 255 visible ASCII characters".into())
        })
}

/// The request's W3C trace context (`traceparent`, with its `tracestate`), when valid: an
/// instrumented HTTP client's span becomes the event's producer span. An invalid one is
/// ignored, as the W3C spec says, not refused.
fn trace_context(headers: &HeaderMap) -> Vec<(&'static str, String)> {
    use outbox_core::trace::{TRACEPARENT, TRACESTATE};
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let Some(traceparent) =
        text(TRACEPARENT).filter(|t| outbox_core::trace::parse(t, None).is_some())
    else {
        return Vec::new();
    };
    let mut trace = vec![(TRACEPARENT, traceparent.trim().to_string())];
    if let Some(state) = text(TRACESTATE).filter(|s| !s.trim().is_empty()) {
        trace.push((TRACESTATE, state.to_string()));
    }
    trace
}

/// Enqueues one event. With an `Idempotency-Key`, the same key and body again answer 200
/// with the first id and store nothing; the key with another body answers 422; while a
/// request with the key is still being processed, another answers 409. A valid W3C
/// `traceparent` request header (and its `tracestate`) is written into the event's headers
/// unless they name a `traceparent` of their own; it is not part of the idempotency
/// comparison.
#[utoipa::path(post, path = "/api/v1/events", tag = "events", operation_id = "enqueueEvent", request_body = EnqueueRequest,
    params(("Idempotency-Key" = Option<String>, Header, description = "makes a retried request safe: 1 to 255 visible ASCII characters", pattern = "^[!-~]{1,255}$"),
        ("traceparent" = Option<String>, Header, description = "W3C trace context of the caller's span: the event's producer span (an invalid value is ignored)"),
        ("tracestate" = Option<String>, Header, description = "W3C vendor trace state, kept with its traceparent")),
    responses((status = 201, body = EnqueueResponse), (status = 200, body = EnqueueResponse),
        (status = 400), (status = 401), (status = 403), (status = 409), (status = 413), (status = 422), (status = 503)))]
pub async fn enqueue(
    state: web::Data<AdminState>,
    caller: Caller,
    req: HttpRequest,
    body: Object<EnqueueRequest>,
) -> ApiResult<HttpResponse> {
    let key = idempotency_key(req.headers())?;
    let body = body.into_inner();
    let mut event = NewEvent::new(body.topic, body.payload);
    event.partition_key = body.partition_key;
    event.headers = body.headers;
    let trace = trace_context(req.headers());
    match state
        .actions()
        .enqueue(&caller.who, event, key.as_deref(), &trace)
        .await?
    {
        Enqueued::Created(id) => Ok(HttpResponse::Created().json(EnqueueResponse { id })),
        Enqueued::Replayed(id) => Ok(HttpResponse::Ok().json(EnqueueResponse { id })),
    }
}

/// What a single-event action did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Steering {
    /// The event.
    pub id: Uuid,
    /// Its state now.
    pub status: StatusParam,
}

async fn steer(
    state: &AdminState,
    caller: &Caller,
    id: Uuid,
    action: DeadAction,
) -> ApiResult<HttpResponse> {
    state.actions().dead_one(&caller.who, action, id).await?;
    let status = match action {
        DeadAction::Retry => StatusParam::Pending,
        DeadAction::Discard => StatusParam::Discarded,
    };
    Ok(HttpResponse::Ok().json(Steering { id, status }))
}

/// Requeues a dead event: attempts 0, `dead_at` null, publishable now (`last_error` is
/// kept until the publish or a new failure replaces it).
#[utoipa::path(post, path = "/api/v1/events/{id}/retry", tag = "events", operation_id = "retryEvent",
    params(("id" = Uuid, Path, description = "the event id")),
    responses((status = 200, body = Steering), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409), (status = 503)))]
pub async fn retry(
    state: web::Data<AdminState>,
    caller: Caller,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    steer(&state, &caller, id.into_inner(), DeadAction::Retry).await
}

/// Discards a dead event: it is kept for the record, never retried, and deleted by
/// retention `retention.published_for` after the discard.
#[utoipa::path(post, path = "/api/v1/events/{id}/discard", tag = "events", operation_id = "discardEvent",
    params(("id" = Uuid, Path, description = "the event id")),
    responses((status = 200, body = Steering), (status = 400), (status = 401), (status = 403), (status = 404), (status = 409), (status = 503)))]
pub async fn discard(
    state: web::Data<AdminState>,
    caller: Caller,
    id: web::Path<Uuid>,
) -> ApiResult<HttpResponse> {
    steer(&state, &caller, id.into_inner(), DeadAction::Discard).await
}
