//! The Streams page: each topic's Redis stream, or each of its partitions (length, first and
//! last entry), and its consumer groups (lag, pending, oldest pending message, and on a
//! partition the consumer holding it), from read-only XINFO/XPENDING/GET; and the keys the
//! groups park (`park_keys`), each with a Redrive and a Discard button.

use crate::admin::counts;
use actix_web::{web, HttpRequest, HttpResponse};
use maud::{html, Markup};
use outbox_core::parked::Release;
use serde::Deserialize;

use super::layout::{self, Nav};
use super::session::Session;
use super::{see_other, UiError};
use crate::admin::AdminState;
use crate::publish::inspect::{GroupInfo, StreamInfo};
use crate::publish::parked::GroupParked;

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
    let mut groups: Vec<(&str, &str)> = streams
        .iter()
        .flat_map(|s| s.groups.iter().map(|g| (s.topic.as_str(), g.name.as_str())))
        .collect();
    groups.sort_unstable();
    groups.dedup();
    let mut parked: Vec<(&str, &str, GroupParked)> = Vec::new();
    for (topic, group) in groups {
        let keys = state
            .publisher
            .group_parked(topic, group)
            .await
            .map_err(|e| UiError::Redis(e.to_string()))?;
        parked.extend(
            keys.into_iter()
                .filter(|k| !k.state.released)
                .map(|k| (topic, group, k)),
        );
    }
    let content = html! {
        p.muted { "TYPE, XINFO STREAM, XINFO GROUPS and XPENDING on "
            code { (state.publisher.config().stream_prefix) "<topic>" } ". Refreshes every 5 s." }
        div #live hx-get="/streams" hx-trigger="every 5s" hx-select="#live" hx-swap="outerHTML" {
            (tables(&streams))
            (parked_keys(&session, &parked))
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

/// The keys the groups park, with their release buttons (for a session that may act).
fn parked_keys(session: &Session, parked: &[(&str, &str, GroupParked)]) -> Markup {
    let now_ms = chrono::Utc::now().timestamp_millis();
    html! {
        h2 { "Parked keys" }
        p.muted { "Keys a consumer group holds behind a dead-lettered entry (consumers with "
            code { "park_keys" } "). Redrive handles the dead entry again first; Discard leaves it dead. Either way the held entries then take effect in order." }
        div.scroll {
            table #group-parked {
                thead { tr {
                    th { "Topic" } th { "Group" } th { "Key" } th { "Dead entry" } th.num { "Held" }
                    th { "Parked for" } th {}
                } }
                tbody {
                    @for (topic, group, k) in parked {
                        @let base = format!("/streams/parked/{}/{}/{}", layout::enc(topic), layout::enc(group), layout::enc(&k.key));
                        tr {
                            td { (topic) }
                            td { strong { (group) } }
                            td { code { (k.key) } }
                            td { a href={ "/events/" (k.state.dead_id) } { code { (k.state.dead_id) } } }
                            td.num { strong { (layout::count(i64::try_from(k.held).unwrap_or(i64::MAX))) } }
                            td { (layout::age((now_ms - k.state.since_ms).max(0) as f64 / 1000.0)) }
                            td {
                                (layout::action_button(session, &format!("{base}/redrive"), "Redrive", "small primary"))
                                " "
                                (layout::action_button(session, &format!("{base}/discard"), "Discard", "small"))
                            }
                        }
                    }
                    @if parked.is_empty() { tr { td.empty colspan="7" { "No parked key." } } }
                }
            }
        }
    }
}

/// The form of the release buttons.
#[derive(Debug, Deserialize)]
pub struct ReleaseForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /streams/parked/{topic}/{group}/{key}/{redrive|discard}`.
pub async fn release(
    session: Session,
    state: web::Data<AdminState>,
    path: web::Path<(String, String, String, String)>,
    form: web::Form<ReleaseForm>,
) -> Result<HttpResponse, UiError> {
    let actor = session.act(&form.csrf)?;
    let (topic, group, key, action) = path.into_inner();
    let how = match action.as_str() {
        "redrive" => Release::Redrive,
        "discard" => Release::Discard,
        _ => return Err(UiError::NotFound(format!("no action {action:?}"))),
    };
    state
        .actions()
        .release_parked(&state.publisher, &actor.who, &topic, &group, &key, how)
        .await?;
    Ok(see_other("/streams"))
}
