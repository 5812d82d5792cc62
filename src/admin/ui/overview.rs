//! The overview page (`/`): backlog counters, the oldest pending age, throughput charts and
//! the per-topic table with pause and resume.

use actix_web::{HttpRequest, HttpResponse};
use maud::html;

use super::layout::{self, Nav};
use super::session::Session;
use super::UiError;

/// `GET /`.
pub async fn page(req: HttpRequest, session: Session) -> Result<HttpResponse, UiError> {
    let content = html! { div #live { p.muted { "Counters arrive with the data layer." } } };
    Ok(layout::page(
        &req,
        &session,
        Nav::Overview,
        "Overview",
        content,
    ))
}
