//! `/api/v1/dead/...`: dead letters in bulk: grouped by error fingerprint, and retried or
//! discarded by filter, with a dry run that only counts.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::body::Object;
use super::error::ApiResult;
use super::openapi::TopicName;
use crate::admin::actions::check_dead_filter;
use crate::admin::caller::Caller;
use crate::admin::AdminState;
use crate::db::outbox::dead::{self, DeadAction, DeadFilter};

/// Which dead letters; every field narrows, an empty filter takes all of them.
#[derive(Debug, Clone, Default, Deserialize, ToSchema, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct Filter {
    /// Only this topic.
    #[param(value_type = Option<TopicName>)]
    #[schema(value_type = Option<TopicName>)]
    pub topic: Option<String>,
    /// Only this partition key.
    #[param(pattern = "^[^\\x00]*$")]
    #[schema(pattern = "^[^\\x00]*$")]
    pub key: Option<String>,
    /// `last_error` contains this text (case-insensitive).
    #[param(pattern = "^[^\\x00]*$")]
    #[schema(pattern = "^[^\\x00]*$")]
    pub error: Option<String>,
    /// `last_error` has this fingerprint (from `GET /api/v1/dead/groups`).
    #[param(pattern = "^[^\\x00]*$")]
    #[schema(pattern = "^[^\\x00]*$")]
    pub fingerprint: Option<String>,
    /// Dead at or after this time (RFC 3339); before `dead_before` when both are given
    /// (else 400).
    pub dead_after: Option<DateTime<Utc>>,
    /// Dead before this time (RFC 3339); after `dead_after` when both are given (else 400).
    pub dead_before: Option<DateTime<Utc>>,
}

impl Filter {
    fn into_db(self) -> ApiResult<DeadFilter> {
        let filter = DeadFilter {
            topic: self.topic,
            partition_key: self.key,
            error_contains: self.error,
            fingerprint: self.fingerprint,
            dead_after: self.dead_after,
            dead_before: self.dead_before,
        };
        check_dead_filter(&filter)?;
        Ok(filter)
    }
}

/// A bulk action on dead letters.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkRequest {
    /// Which dead letters.
    #[serde(default)]
    pub filter: Filter,
    /// Only count what would change (the default: acting needs `"dry_run": false`).
    #[serde(default = "default_dry_run")]
    pub dry_run: bool,
}

fn default_dry_run() -> bool {
    true
}

/// What a bulk action matched (dry run) or changed.
#[derive(Debug, Serialize, ToSchema)]
pub struct BulkResponse {
    /// Dead letters matched (dry run) or changed.
    pub count: i64,
    /// True when nothing was changed.
    pub dry_run: bool,
}

/// Dead letters sharing an error fingerprint.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorGroup {
    /// The error with uuids and numbers replaced by `<uuid>`, `<hex>`, `<n>`.
    pub fingerprint: String,
    /// One real error of the group.
    pub example: String,
    /// Dead letters in the group.
    pub count: i64,
    /// Topics involved.
    pub topics: Vec<String>,
    /// The earliest death.
    pub first_dead_at: DateTime<Utc>,
    /// The latest death.
    pub last_dead_at: DateTime<Utc>,
}

/// Dead letters grouped by error fingerprint, largest group first (at most 1000 groups).
#[utoipa::path(get, path = "/api/v1/dead/groups", tag = "dead", operation_id = "listDeadGroups", params(Filter),
    responses((status = 200, body = [ErrorGroup]), (status = 400), (status = 401), (status = 503)))]
pub async fn groups(
    state: web::Data<AdminState>,
    q: web::Query<Filter>,
) -> ApiResult<HttpResponse> {
    let filter = q.into_inner().into_db()?;
    let groups: Vec<ErrorGroup> = state
        .db
        .unit(async |c| dead::groups(c, &filter).await)
        .await?
        .into_iter()
        .map(|g| ErrorGroup {
            fingerprint: g.fingerprint,
            example: g.example,
            count: g.count,
            topics: g.topics,
            first_dead_at: g.first_dead_at,
            last_dead_at: g.last_dead_at,
        })
        .collect();
    Ok(HttpResponse::Ok().json(groups))
}

async fn bulk(
    state: &AdminState,
    caller: &Caller,
    req: BulkRequest,
    action: DeadAction,
) -> ApiResult<HttpResponse> {
    let filter = req.filter.into_db()?;
    let count = state
        .actions()
        .dead_bulk(&caller.who, action, &filter, req.dry_run)
        .await?;
    Ok(HttpResponse::Ok().json(BulkResponse {
        count,
        dry_run: req.dry_run,
    }))
}

/// Requeues every dead letter matching the filter (or counts them with `dry_run`).
#[utoipa::path(post, path = "/api/v1/dead/retry", tag = "dead", operation_id = "retryDead", request_body = BulkRequest,
    responses((status = 200, body = BulkResponse), (status = 400), (status = 401), (status = 403), (status = 503)))]
pub async fn retry(
    state: web::Data<AdminState>,
    caller: Caller,
    body: Object<BulkRequest>,
) -> ApiResult<HttpResponse> {
    bulk(&state, &caller, body.into_inner(), DeadAction::Retry).await
}

/// Discards every dead letter matching the filter (or counts them with `dry_run`).
#[utoipa::path(post, path = "/api/v1/dead/discard", tag = "dead", operation_id = "discardDead", request_body = BulkRequest,
    responses((status = 200, body = BulkResponse), (status = 400), (status = 401), (status = 403), (status = 503)))]
pub async fn discard(
    state: web::Data<AdminState>,
    caller: Caller,
    body: Object<BulkRequest>,
) -> ApiResult<HttpResponse> {
    bulk(&state, &caller, body.into_inner(), DeadAction::Discard).await
}
