//! The Streams page: each topic's Redis stream, or each of its partitions (length, first and
//! last entry), and its consumer groups (lag, pending, oldest pending message, and on a
//! partition the consumer holding it), from read-only XINFO/XPENDING/GET.

use crate::admin::counts;
use actix_web::{web, HttpRequest, HttpResponse};
use maud::{html, Markup};

use super::layout::{self, Nav};
use super::session::Session;
use super::UiError;
use crate::admin::AdminState;
use crate::publish::inspect::{GroupInfo, StreamInfo};

/// An entry id with the age its milliseconds part tells.
fn entry(id: Option<&str>) -> Markup {
    match id {
        None => html! { span.muted { "–" } },
        Some(id) => {
            let ms: i64 = id
                .split('-')
                .next()
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            let age = (chrono::Utc::now().timestamp_millis() - ms) as f64 / 1000.0;
            html! { code { (id) } " " span.muted { "(" (layout::age(age)) " ago)" } }
        }
    }
}

fn kind(s: &StreamInfo) -> Markup {
    match s.kind.as_str() {
        "stream" => html! { span.pill.published { "stream" } },
        "none" => html! { span.pill.pending title="no event published yet" { "no stream yet" } },
        other => html! {
            span.pill.dead title="this key is not a stream: every publish into it fails" {
                "holds a " (other)
            }
        },
    }
}

/// Who holds a partition for a group (the consumer library's lease), with its epoch; a
/// partition with entries waiting and no owner is flagged.
fn owner(s: &StreamInfo, g: &GroupInfo) -> Markup {
    match (&g.owner, s.partition) {
        (Some(owner), _) => html! {
            code { (owner) } " " span.muted title="fencing epoch: how many times the partition was taken" { "epoch " (g.epoch.unwrap_or(0)) }
        },
        (None, Some(_)) if g.lag.unwrap_or(0) > 0 || g.pending > 0 => html! {
            span.pill.dead title="entries wait and no consumer holds this partition" { "no owner" }
        },
        (None, Some(_)) => html! { span.muted { "no owner" } },
        (None, None) => {
            html! { span.muted title="one stream: every consumer of the group reads it" { "–" } }
        }
    }
}

fn tables(streams: &[StreamInfo]) -> Markup {
    html! {
        div.scroll {
            table {
                thead { tr {
                    th { "Topic" } th.hide-sm { "Key" } th { "Type" } th.num { "Length" }
                    th { "First entry" } th { "Last entry" } th.num { "Groups" }
                } }
                tbody {
                    @for s in streams {
                        tr {
                            td { a href={ "/events?topic=" (layout::enc(&s.topic)) } { (s.topic) } }
                            td.hide-sm { code { (s.key) } }
                            td { (kind(s)) }
                            td.num { (layout::count(s.length as i64)) }
                            td { (entry(s.first_id.as_deref())) }
                            td { (entry(s.last_id.as_deref())) }
                            td.num { (s.groups.len()) }
                        }
                    }
                    @if streams.is_empty() { tr { td.empty colspan="7" { "No topics yet." } } }
                }
            }
        }
        h2 { "Consumer groups" }
        div.scroll {
            table {
                thead { tr {
                    th { "Stream" } th { "Group" } th { "Owner" } th.num { "Consumers" } th.num { "Lag" }
                    th.num { "Pending" } th { "Oldest pending" } th.hide-sm { "Last delivered" }
                } }
                tbody {
                    @for s in streams {
                        @for g in &s.groups {
                            tr {
                                td { (s.topic) @if let Some(p) = s.partition { span.muted { " partition " (p) } } }
                                td { strong { (g.name) } }
                                td { (owner(s, g)) }
                                td.num { (g.consumers) }
                                td.num { @match g.lag {
                                    Some(l) => (layout::count(l as i64)),
                                    None => span.muted title="Redis cannot tell after deletions" { "?" },
                                } }
                                td.num { (layout::count(g.pending as i64)) }
                                td { @match &g.oldest_pending {
                                    Some((id, age)) => { (layout::age(age.as_secs_f64())) " " span.muted { code { (id) } } },
                                    None => span.muted { "–" },
                                } }
                                td.hide-sm { code { (g.last_delivered_id) } }
                            }
                        }
                    }
                    @if streams.iter().all(|s| s.groups.is_empty()) { tr { td.empty colspan="8" { "No consumer group reads these streams yet." } } }
                }
            }
        }
    }
}

/// `GET /streams`.
pub async fn page(
    req: HttpRequest,
    session: Session,
    state: web::Data<AdminState>,
) -> Result<HttpResponse, UiError> {
    let topics: Vec<String> = {
        state
            .db
            .unit(async |c| counts::topic_counts(&state.published, c, None).await)
            .await?
            .into_iter()
            .map(|t| t.topic)
            .collect()
    };
    let streams = state
        .publisher
        .inspect_streams(&topics)
        .await
        .map_err(|e| UiError::Redis(e.to_string()))?;
    let content = html! {
        p.muted { "Read-only: TYPE, XINFO STREAM, XINFO GROUPS and XPENDING on "
            code { (state.publisher.config().stream_prefix) "<topic>" } ". Refreshes every 5 s." }
        div #live hx-get="/streams" hx-trigger="every 5s" hx-select="#live" hx-swap="outerHTML" {
            (tables(&streams))
        }
    };
    Ok(layout::page(
        &req,
        &session,
        Nav::Streams,
        "Streams",
        content,
    ))
}
