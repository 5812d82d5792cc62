//! The overview page (`/`): backlog counters, the oldest pending age (the SLO), throughput
//! charts of the last hour, the Postgres primary with its standbys' lag, and the per-topic
//! table with pause and resume.
//!
//! The charts sum the per-minute counts every live replica reports with its heartbeat
//! (`relay::throughput`), so any replica behind a Service draws the whole cluster's hour.

use crate::admin::counts;
use actix_web::{web, HttpRequest, HttpResponse};
use maud::{html, Markup};
use serde::Deserialize;

use super::layout::{self, Nav};
use super::session::Session;
use super::{see_other, UiError};
use crate::admin::api::replicas::alive_ms;
use crate::admin::AdminState;
use crate::db::outbox::republish;
use crate::db::outbox::stats;
use crate::db::standbys::{self, Server, Standby};
use crate::db::{audit, replicas, DbError};
use crate::relay::throughput::{Minutes, MINUTES};

/// The rate of the last complete minute, per second: the entry before the last, as the last
/// one counts the minute still running (dividing its count by 60 read a third of a steady
/// rate twenty seconds into the minute).
fn last_full_minute_rate(counts: &[u64]) -> f64 {
    let full = counts.len().checked_sub(2).and_then(|i| counts.get(i));
    full.copied().unwrap_or(0) as f64 / 60.0
}

/// An inline SVG bar chart of per-minute counts, oldest left.
fn chart(title: &str, counts: &[u64], class: &str) -> Markup {
    let max = counts.iter().copied().max().unwrap_or(0).max(1);
    let rate = last_full_minute_rate(counts);
    let total: u64 = counts.iter().sum();
    let (w, h) = (600.0, 90.0);
    let bar = w / counts.len().max(1) as f64;
    html! {
        div.panel.chart {
            div.head {
                span { (title) }
                span { b.rate title="the last complete minute" { (format!("{rate:.1}")) "/s" } " last minute · "
                    (layout::count(total as i64)) " in the hour · peak "
                    (format!("{:.1}", max as f64 / 60.0)) "/s" }
            }
            svg viewBox={ "0 0 " (w) " " (h) } preserveAspectRatio="none" role="img" aria-label=(title) {
                @for (i, n) in counts.iter().enumerate() {
                    @let bh = (*n as f64 / max as f64) * (h - 2.0);
                    rect class=(class) x=(format!("{:.1}", i as f64 * bar + 0.5))
                        y=(format!("{:.1}", h - bh)) width=(format!("{:.1}", (bar - 1.0).max(0.5)))
                        height=(format!("{:.1}", bh)) {
                        title { (MINUTES - i - 1) " min ago: " (n) " (" (format!("{:.2}", *n as f64 / 60.0)) "/s)" }
                    }
                }
                line.axis x1="0" y1=(h - 0.5) x2=(w) y2=(h - 0.5) {}
            }
            div.head { span { "60 min ago" } span { "now" } }
        }
    }
}

fn card(id: &str, label: &str, value: String, class: &str) -> Markup {
    html! { div class={ "card " (class) } { div.label { (label) } div.value #(id) { (value) } } }
}

/// How far back the overview shows Redis losses.
const LOSSES_SHOWN_HOURS: i64 = 24;

/// Streams Redis lost entries of in the last day (each a `redis-loss` audit row): they were
/// published again, but an operator must find out why Redis lost acknowledged writes.
fn loss_banner(losses: &[audit::AuditRow]) -> Markup {
    let text = |row: &audit::AuditRow, key: &str| -> String {
        match &row.detail[key] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Null => "nothing".into(),
            other => other.to_string(),
        }
    };
    html! {
        @if !losses.is_empty() {
            div.banner.bad #losses role="alert" {
                b { "Redis lost entries the relay had published" }
                " (last " (LOSSES_SHOWN_HOURS) " hours). The lost events were published again; see the "
                a href="/audit" { "audit log" } " and the runbook."
                ul {
                    @for row in losses {
                        li {
                            (row.at.format("%Y-%m-%d %H:%M:%S UTC")) ": topic " b { (row.target) } ", "
                            (text(row, "lost")) " entries of stream " code { (text(row, "stream")) }
                            " (it ends at " code { (text(row, "last")) } ", the relay had appended up to "
                            code { (text(row, "mark")) } ")"
                        }
                    }
                }
            }
        }
    }
}

/// A byte count the way WAL distances read (`0 B`, `12.5 MB`).
fn bytes(n: i64) -> String {
    let mut value = n as f64;
    for unit in ["B", "kB", "MB", "GB"] {
        if value.abs() < 1000.0 || unit == "GB" {
            return if unit == "B" {
                format!("{n} B")
            } else {
                format!("{value:.1} {unit}")
            };
        }
        value /= 1000.0;
    }
    format!("{n} B")
}

/// The primary the relay is on and each standby streaming from it, with its lag: where a
/// failover would go, and how much of what the relay published it would have.
fn postgres_panel(server: &Server, standbys: &[Standby]) -> Markup {
    html! {
        h2 { "Postgres" }
        p #postgres-primary {
            @if server.in_recovery {
                span.pill.paused { "standby" } " The relay's connection is on a standby at "
            } @else {
                "Primary: "
            }
            b { (server.address) } " (PostgreSQL " (server.version) ")"
        }
        div.scroll {
            table #standbys {
                thead { tr {
                    th { "Standby" } th { "Address" } th { "State" } th { "Replication" }
                    th.num { "Not flushed" } th.num { "Replay lag" }
                } }
                tbody {
                    @for s in standbys {
                        tr data-standby=(s.name) {
                            td { (s.name) } td { (s.address) } td { (s.state) } td { (s.sync_state) }
                            td.num.lag {
                                @match s.lag_bytes {
                                    Some(lag) => (bytes(lag)),
                                    None => span title="the relay's role needs pg_monitor to read the standbys' progress" { "unknown" },
                                }
                            }
                            td.num { @match s.replay_lag_seconds { Some(l) => (layout::age(l)), None => "-" } }
                        }
                    }
                    @if standbys.is_empty() { tr { td.empty colspan="6" { "No standby streams from this primary." } } }
                }
            }
        }
    }
}

/// The cluster's last hour: the sum of every live replica's report.
async fn cluster_minutes(state: &AdminState) -> Result<Minutes, UiError> {
    let alive = alive_ms(state);
    let rows = state
        .db
        .unit(async |c| replicas::alive(c, alive).await)
        .await?;
    let now_minute = chrono::Utc::now().timestamp().max(0) as u64 / 60;
    let mut sum = Minutes {
        minute: now_minute,
        published: vec![0; MINUTES],
        failed: vec![0; MINUTES],
    };
    for r in rows {
        if let Ok(m) = serde_json::from_value::<Minutes>(r.throughput) {
            sum.add(&m);
        }
    }
    Ok(sum)
}

/// `GET /`.
pub async fn page(
    req: HttpRequest,
    session: Session,
    state: web::Data<AdminState>,
) -> Result<HttpResponse, UiError> {
    let (topics, flight, losses, postgres) = {
        state
            .db
            .unit(async |c| {
                let topics = counts::topic_counts(&state.published, c, None).await?;
                let losses = audit::recent(c, republish::LOSS_ACTION, LOSSES_SHOWN_HOURS).await?;
                let flight = stats::flight(c).await?;
                // Best effort, and last (a failed statement may end the unit's transaction):
                // the page shows the backlog even if this cannot be read.
                let postgres = match standbys::server(c).await {
                    Ok(server) => Ok((server, standbys::replication(c).await)),
                    Err(e) => Err(e),
                };
                Ok::<_, DbError>((topics, flight, losses, postgres))
            })
            .await?
    };
    let minutes = cluster_minutes(&state).await?;
    let sum = |f: fn(&stats::TopicCounts) -> i64| topics.iter().map(f).sum::<i64>();
    let (pending, dead) = (sum(|t| t.pending), sum(|t| t.dead));
    let oldest = flight.oldest_pending_age_seconds;
    let content = html! {
        div #live hx-get="/" hx-trigger="every 5s" hx-select="#live" hx-swap="outerHTML" {
            (loss_banner(&losses))
            div.cards {
                (card("oldest", "Oldest pending", layout::age(oldest),
                    if oldest >= 300.0 { "slo bad" } else if oldest >= 30.0 { "slo warn" } else { "slo" }))
                (card("pending", "Pending", layout::count(pending), ""))
                (card("in-flight", "In flight", layout::count(flight.in_flight), ""))
                (card("published", "Published (kept)", layout::count(sum(|t| t.published)), ""))
                (card("dead", "Dead", layout::count(dead), if dead > 0 { "bad" } else { "" }))
            }
            div.charts {
                (chart("Published per second", &minutes.published, "bar-pub"))
                (chart("Failures per second", &minutes.failed, "bar-fail"))
            }
            @match &postgres {
                Ok((server, Ok(standbys))) => (postgres_panel(server, standbys)),
                Ok((_, Err(e))) | Err(e) => {
                    h2 { "Postgres" }
                    p #postgres-primary { "The primary and its standbys cannot be read: " (e.to_string()) }
                }
            }
            h2 { "Topics" }
            div.scroll {
                table #topics {
                    thead { tr {
                        th { "Topic" } th { "State" } th.num { "Pending" } th.num { "Published" }
                        th.num { "Dead" } th { "" }
                    } }
                    tbody {
                        @for t in &topics {
                            tr data-topic=(t.topic) {
                                td { a href={ "/events?topic=" (layout::enc(&t.topic)) } { (t.topic) } }
                                td { @if t.paused { span.pill.paused { "paused" } } @else { span.pill.active { "active" } } }
                                td.num { (layout::count(t.pending)) }
                                td.num { (layout::count(t.published)) }
                                td.num { @if t.dead > 0 { a href={ "/dead?topic=" (layout::enc(&t.topic)) } { (layout::count(t.dead)) } } @else { "0" } }
                                td {
                                    a.button.small href={ "/replay?topic=" (layout::enc(&t.topic)) "&since=1h" } { "Replay…" }
                                    " "
                                    @if t.paused {
                                        (layout::action_button(&session, &format!("/topics/{}/resume", layout::enc(&t.topic)), "Resume", "small primary resume"))
                                    } @else {
                                        (layout::action_button(&session, &format!("/topics/{}/pause", layout::enc(&t.topic)), "Pause", "small pause"))
                                    }
                                }
                            }
                        }
                        @if topics.is_empty() { tr { td.empty colspan="6" { "No events yet." } } }
                    }
                }
            }
        }
    };
    Ok(layout::page(
        &req,
        &session,
        Nav::Overview,
        "Overview",
        content,
    ))
}

/// The form of the pause and resume buttons.
#[derive(Debug, Deserialize)]
pub struct ActForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /topics/{topic}/pause` and `.../resume`.
pub async fn steer(
    session: Session,
    state: web::Data<AdminState>,
    path: web::Path<(String, String)>,
    form: web::Form<ActForm>,
) -> Result<HttpResponse, UiError> {
    let actor = session.act(&form.csrf)?;
    let (topic, action) = path.into_inner();
    let paused = match action.as_str() {
        "pause" => true,
        "resume" => false,
        _ => return Err(UiError::NotFound(format!("no action {action:?}"))),
    };
    state
        .actions()
        .set_paused(&actor.who, &topic, paused)
        .await?;
    Ok(see_other("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A steady 20/s, twenty seconds into the current minute.
    fn steady_twenty_per_second() -> Vec<u64> {
        let mut counts = vec![1200; MINUTES];
        counts[MINUTES - 1] = 400;
        counts
    }

    #[test]
    fn the_rate_is_the_last_complete_minutes() {
        assert_eq!(last_full_minute_rate(&steady_twenty_per_second()), 20.0);
        assert_eq!(last_full_minute_rate(&[]), 0.0);
        assert_eq!(last_full_minute_rate(&[400]), 0.0, "no complete minute yet");
        assert_eq!(last_full_minute_rate(&[90, 30]), 1.5);
    }

    #[test]
    fn the_chart_shows_a_steady_rate_as_it_is() {
        let html = chart(
            "Published per second",
            &steady_twenty_per_second(),
            "bar-pub",
        )
        .into_string();
        assert!(
            html.contains(
                r#"<b class="rate" title="the last complete minute">20.0/s</b> last minute"#
            ),
            "{html}"
        );
    }
}
