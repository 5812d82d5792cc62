//! The Audit page: who changed what through the admin (API or UI), newest first, from
//! `db::audit` (written by the steering functions in the same transaction as the change).

use actix_web::{web, HttpRequest, HttpResponse};
use maud::html;
use serde::Deserialize;

use super::layout::{self, Nav};
use super::session::Session;
use super::UiError;
use crate::admin::AdminState;
use crate::db::audit;

/// Rows per page.
const PAGE: i64 = 50;

/// Query of `GET /audit`.
#[derive(Debug, Deserialize)]
pub struct AuditQuery {
    /// Keyset cursor: entries with an id below it.
    before: Option<i64>,
}

/// `GET /audit`.
pub async fn page(
    req: HttpRequest,
    session: Session,
    state: web::Data<AdminState>,
    q: web::Query<AuditQuery>,
) -> Result<HttpResponse, UiError> {
    let rows = {
        state
            .db
            .unit(async |c| audit::list(c, q.before, PAGE).await)
            .await?
    };
    let older = (rows.len() as i64 == PAGE)
        .then(|| rows.last().map(|r| r.id))
        .flatten();
    let content = html! {
        p.muted { "Every retry, discard, pause, resume and settings change, by API token or UI session." }
        div.scroll {
            table #audit {
                thead { tr { th { "When" } th { "Who" } th { "Action" } th { "Target" } th.hide-sm { "Detail" } } }
                tbody {
                    @for r in &rows {
                        tr {
                            td { (layout::time(&r.at)) }
                            td { code { (r.who) } }
                            td { strong { (r.action) } }
                            td.id {
                                @if uuid::Uuid::parse_str(&r.target).is_ok() {
                                    a.mono href={ "/events/" (r.target) } { (r.target) }
                                } @else { code { (r.target) } }
                            }
                            td.hide-sm.detail { code { (r.detail.to_string()) } }
                        }
                    }
                    @if rows.is_empty() { tr { td.empty colspan="5" { "Nothing was changed yet." } } }
                }
            }
        }
        div.pager {
            @if q.before.is_some() { a.button href="/audit" { "Newest" } }
            @if let Some(id) = older { a.button href={ "/audit?before=" (id) } { "Older →" } }
        }
    };
    Ok(layout::page(
        &req,
        &session,
        Nav::Audit,
        "Audit log",
        content,
    ))
}
