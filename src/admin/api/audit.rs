//! `GET /api/v1/audit`: who changed what, newest first, keyset paginated.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiResult;
use super::{next_cursor, Page};
use crate::admin::AdminState;
use crate::db::audit;

/// One audit entry.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEntry {
    /// Increasing id.
    pub id: i64,
    /// When the action committed.
    pub at: DateTime<Utc>,
    /// The actor: `token:admin`, `token:read-only`, `open`, or a UI session's name.
    pub who: String,
    /// `enqueue`, `retry`, `discard`, `bulk_retry`, `bulk_discard`, `pause`, `resume`,
    /// `topic_settings`.
    pub action: String,
    /// An event id, a topic, or `dead` for bulk actions.
    pub target: String,
    /// The action's parameters (filter, counts, previous state).
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// A page of audit entries.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    /// Newest first.
    pub entries: Vec<AuditEntry>,
    /// The cursor of the next page (`after=`), null on the last page.
    pub next: Option<String>,
}

/// The audit log, newest first.
#[utoipa::path(get, path = "/api/v1/audit", tag = "audit", operation_id = "listAudit", params(Page),
    responses((status = 200, body = AuditPage), (status = 400), (status = 401), (status = 503)))]
pub async fn list(state: web::Data<AdminState>, page: web::Query<Page>) -> ApiResult<HttpResponse> {
    let limit = page.limit()?;
    let cursor = page.cursor()?;
    let mut rows = state
        .db
        .unit(async |c| audit::list(c, cursor, limit + 1).await)
        .await?;
    let next = next_cursor(&mut rows, limit, |r| r.id);
    let entries = rows
        .into_iter()
        .map(|r| AuditEntry {
            id: r.id,
            at: r.at,
            who: r.who,
            action: r.action,
            target: r.target,
            detail: r.detail,
        })
        .collect();
    Ok(HttpResponse::Ok().json(AuditPage { entries, next }))
}
