//! The Replicas page: every relay replica alive now, from its heartbeat row: version, start,
//! last heartbeat, and the events it published in the last minute (reported with the beat).

use actix_web::{web, HttpRequest, HttpResponse};
use maud::html;

use super::layout::{self, Nav};
use super::session::Session;
use super::UiError;
use crate::admin::api::replicas::alive_ms;
use crate::admin::AdminState;
use crate::db::replicas;

/// `GET /replicas`.
pub async fn page(
    req: HttpRequest,
    session: Session,
    state: web::Data<AdminState>,
) -> Result<HttpResponse, UiError> {
    let alive = alive_ms(&state);
    let rows = state
        .db
        .unit(async |c| replicas::alive(c, alive).await)
        .await?;
    let total: i64 = rows.iter().map(|r| r.published_last_minute).sum();
    let content = html! {
        p.muted {
            "Replicas whose heartbeat (every " (humantime::format_duration(state.heartbeat_interval))
            ") arrived within the last three intervals. Refreshes every 5 s."
        }
        div #live hx-get="/replicas" hx-trigger="every 5s" hx-select="#live" hx-swap="outerHTML" {
            div.cards {
                div.card { div.label { "Replicas alive" } div.value { (rows.len()) } }
                div.card { div.label { "Published, last minute" } div.value { (layout::count(total)) } }
            }
            h2 { "Replicas" }
            div.scroll {
                table {
                    thead { tr {
                        th { "Instance" } th { "Version" } th { "Started" } th { "Last seen" }
                        th.num { "Published, last minute" }
                    } }
                    tbody {
                        @for r in &rows {
                            tr {
                                td { strong { (r.instance_id) } }
                                td { code { (r.version) } }
                                td { (layout::time(&r.started_at)) }
                                td { (layout::time(&r.last_seen_at)) }
                                td.num { (layout::count(r.published_last_minute)) }
                            }
                        }
                        @if rows.is_empty() { tr { td.empty colspan="5" { "No replica has sent a heartbeat recently." } } }
                    }
                }
            }
        }
    };
    Ok(layout::page(
        &req,
        &session,
        Nav::Replicas,
        "Replicas",
        content,
    ))
}
