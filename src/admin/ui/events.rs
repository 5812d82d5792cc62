//! The Events pages: a filtered, keyset-paginated list (status, topic, key, id) and one
//! event's detail: pretty-printed payload and headers, attempts, last error, timestamps, and
//! its key's timeline (the events of the same topic and key before and after it).
//!
//! Payloads are data: maud escapes them, and the page's CSP runs no inline script anyway.

use actix_web::{web, HttpRequest, HttpResponse};
use maud::{html, Markup};
use serde::Deserialize;
use uuid::Uuid;

use super::layout::{self, Nav};
use super::session::Session;
use super::{see_other, UiError};
use crate::admin::AdminState;
use crate::db::outbox::browse::{self, EventFilter, EventRow, Status};

/// Rows per page.
const PAGE: i64 = 50;
/// Events shown on each side of the timeline.
const TIMELINE: i64 = 10;

/// Query of `GET /events`.
#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    #[serde(default)]
    status: String,
    #[serde(default)]
    topic: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    id: String,
    /// Keyset cursor: rows with `seq` below it.
    before: Option<i64>,
}

fn status_of(e: &EventRow) -> (&'static str, &'static str) {
    if e.discarded_at.is_some() {
        ("discarded", "dead")
    } else if e.dead_at.is_some() {
        ("dead", "dead")
    } else if e.published_at.is_some() {
        ("published", "published")
    } else {
        ("pending", "pending")
    }
}

/// The status pill of an event.
pub fn pill(e: &EventRow) -> Markup {
    let (label, class) = status_of(e);
    html! { span class={ "pill " (class) } { (label) } }
}

fn parse_status(s: &str) -> Result<Option<Status>, UiError> {
    Ok(match s {
        "" | "all" => None,
        "pending" => Some(Status::Pending),
        "published" => Some(Status::Published),
        "dead" => Some(Status::Dead),
        "discarded" => Some(Status::Discarded),
        other => return Err(UiError::BadRequest(format!("unknown status {other:?}"))),
    })
}

/// A table of events (lists, dead letters, timelines); `current` is highlighted.
pub fn table(rows: &[EventRow], current: Option<Uuid>, empty: &str) -> Markup {
    html! {
        div.scroll {
            table.events {
                thead { tr {
                    th { "Event" } th { "Topic" } th { "Key" } th { "Status" } th.num { "Attempts" }
                    th { "Created" } th.hide-sm { "Last error" }
                } }
                tbody {
                    @for e in rows {
                        tr class=[(Some(e.id) == current).then_some("current")] {
                            td.id { a.mono href={ "/events/" (e.id) } title=(e.id) { (e.id.to_string()[..8]) "…" } }
                            td { (e.topic) @if let Some(t) = &e.source_table { br; small.muted.source { "from " (t) } } }
                            td { @if let Some(k) = &e.partition_key { code { (k) } } @else { span.muted { "–" } } }
                            td { (pill(e)) }
                            td.num { (e.attempts) }
                            td { (layout::ago(&e.created_at)) }
                            td.err.hide-sm { (e.last_error.as_deref().unwrap_or("")) }
                        }
                    }
                    @if rows.is_empty() { tr { td.empty colspan="7" { (empty) } } }
                }
            }
        }
    }
}

/// `GET /events`.
pub async fn list(
    req: HttpRequest,
    session: Session,
    state: web::Data<AdminState>,
    q: web::Query<ListQuery>,
) -> Result<HttpResponse, UiError> {
    let id = q.id.trim();
    if !id.is_empty() {
        return match Uuid::parse_str(id) {
            Ok(id) => Ok(see_other(&format!("/events/{id}"))),
            Err(_) => Err(UiError::BadRequest(format!(
                "{id:?} is not an event id (a uuid)"
            ))),
        };
    }
    let filter = EventFilter {
        status: parse_status(&q.status)?,
        topic: Some(q.topic.trim().to_string()).filter(|t| !t.is_empty()),
        partition_key: Some(q.key.trim().to_string()).filter(|k| !k.is_empty()),
    };
    let budget = state.max_response_bytes;
    let listed = state
        .db
        .unit(async |c| browse::list(c, &filter, q.before, PAGE, budget).await)
        .await?;
    let rows = listed.rows;
    let older = (listed.cut || rows.len() as i64 == PAGE)
        .then(|| rows.last().map(|r| r.seq))
        .flatten();
    let query = |before: Option<i64>| {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        s.append_pair("status", &q.status)
            .append_pair("topic", &q.topic)
            .append_pair("key", &q.key);
        if let Some(b) = before {
            s.append_pair("before", &b.to_string());
        }
        format!("/events?{}", s.finish())
    };
    let statuses = ["all", "pending", "published", "dead", "discarded"];
    let content = html! {
        form.filters method="get" action="/events" {
            label { "Status" select name="status" {
                @for s in statuses {
                    option value=(s) selected[q.status == s || (q.status.is_empty() && s == "all")] { (s) }
                }
            } }
            label { "Topic" input type="text" name="topic" value=(q.topic) placeholder="order.created"; }
            label { "Key" input type="text" name="key" value=(q.key) placeholder="partition key"; }
            label { "Event id" input type="search" name="id" placeholder="uuid" size="38"; }
            button.primary type="submit" { "Filter" }
            a.button href="/events" { "Clear" }
        }
        // Only the first page refreshes itself: a page further back stays where it is.
        @if q.before.is_none() {
            div #live hx-get=(query(None)) hx-trigger="every 5s" hx-select="#live" hx-swap="outerHTML" {
                (table(&rows, None, "No events match."))
            }
        } @else {
            (table(&rows, None, "No events match."))
        }
        div.pager {
            @if q.before.is_some() { a.button href=(query(None)) { "Newest" } }
            @if let Some(seq) = older { a.button href=(query(Some(seq))) { "Older →" } }
        }
    };
    Ok(layout::page(&req, &session, Nav::Events, "Events", content))
}

/// Indented JSON in a `<pre>` (escaped by maud like any text), digits as stored.
fn json(text: &str) -> Markup {
    html! { pre.json { (super::pretty::indent(text)) } }
}

/// `GET /events/{id}`.
pub async fn detail(
    req: HttpRequest,
    session: Session,
    state: web::Data<AdminState>,
    id: web::Path<String>,
) -> Result<HttpResponse, UiError> {
    let id = Uuid::parse_str(&id).map_err(|_| {
        UiError::BadRequest(format!("{:?} is not an event id (a uuid)", id.as_str()))
    })?;
    let budget = state.max_response_bytes;
    let (e, earlier, later) = state
        .db
        .unit(async |c| {
            let e = browse::get(c, id).await?.ok_or_else(|| {
                UiError::NotFound(format!("no event {id} (retention may have deleted it)"))
            })?;
            let (earlier, later) = browse::timeline(c, &e, TIMELINE, budget).await?;
            Ok::<_, UiError>((e, earlier, later))
        })
        .await?;
    let cut = earlier.cut || later.cut;
    // The timeline reads top to bottom in stream order: earlier, this one, later.
    let timeline: Vec<EventRow> = earlier
        .rows
        .into_iter()
        .rev()
        .chain([e.clone()])
        .chain(later.rows)
        .collect();
    let is_dead = e.dead_at.is_some() && e.discarded_at.is_none();
    let content = html! {
        div.actions {
            (pill(&e))
            @if is_dead && session.role.can_act() {
                a.button.primary #retry href={ "/dead/confirm?action=retry&id=" (e.id) } { "Retry…" }
                a.button #discard href={ "/dead/confirm?action=discard&id=" (e.id) } { "Discard…" }
            }
        }
        h2 { "Facts" }
        div.panel {
            dl.facts {
                dt { "Id" } dd { code #event-id { (e.id) } }
                dt { "Topic" } dd { a href={ "/events?topic=" (layout::enc(&e.topic)) } { (e.topic) } }
                dt { "Partition key" } dd { @if let Some(k) = &e.partition_key { code { (k) } } @else { span.muted { "none (unordered)" } } }
                dt { "Written to" } dd #source-table { code { (e.source_table.as_deref().unwrap_or("outbox")) } }
                dt { "Attempts" } dd { (e.attempts) }
                dt { "Last error" } dd.error #last-error { (e.last_error.as_deref().unwrap_or("–")) }
                dt { "Created" } dd { (layout::time(&e.created_at)) }
                dt { "Available" } dd { (layout::time(&e.available_at)) }
                dt { "Published" } dd { (layout::opt_time(e.published_at.as_ref())) }
                dt { "Dead" } dd { (layout::opt_time(e.dead_at.as_ref())) }
                @if e.discarded_at.is_some() { dt { "Discarded" } dd { (layout::opt_time(e.discarded_at.as_ref())) } }
            }
        }
        div.grid2 {
            div { h2 { "Payload" } div #payload { (json(&e.payload)) } }
            div { h2 { "Headers" } (json(e.headers.as_deref().unwrap_or("null"))) }
        }
        h2 { "Timeline of its key" }
        @if e.partition_key.is_some() {
            p.muted { "Up to " (TIMELINE) " events of the same topic and key before and after this one, in stream order." }
            @if cut {
                p.muted #timeline-cut {
                    "Some neighbours are left out: their payloads would pass admin.max_response_bytes. "
                    a href={ "/events?topic=" (layout::enc(&e.topic)) "&key=" (layout::enc(e.partition_key.as_deref().unwrap_or_default())) } { "List the key's events" }
                    "."
                }
            }
            (table(&timeline, Some(e.id), ""))
        } @else {
            p.muted { "This event has no partition key: it is ordered with nothing." }
        }
    };
    Ok(layout::page(&req, &session, Nav::Events, "Event", content))
}
