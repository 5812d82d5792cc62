//! The Replay page (`/replay`): publish again a topic's published events of a time range.
//! The form first counts what the range holds and asks; the confirmation posts to
//! `/replay/apply`, which runs the admin's replay action (audit-logged) and shows the count.

use actix_web::{web, HttpRequest, HttpResponse};
use maud::html;
use serde::Deserialize;

use super::layout::{self, Nav};
use super::session::Session;
use super::{see_other, UiError};
use crate::admin::actions::ReplayRange;
use crate::admin::AdminState;

/// Query of `/replay`: the topic, the range as typed, and the result of a replay just done.
#[derive(Debug, Default, Deserialize)]
pub struct ReplayQuery {
    #[serde(default)]
    topic: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    /// Events replayed by the action that redirected here.
    done: Option<u64>,
}

/// Form of `/replay/apply`.
#[derive(Debug, Deserialize)]
pub struct ReplayForm {
    #[serde(default)]
    csrf: String,
    topic: String,
    since: String,
    #[serde(default)]
    until: String,
}

fn until(text: &str) -> Option<&str> {
    Some(text).filter(|t| !t.trim().is_empty())
}

/// `GET /replay`: the form; with a range, how many events it holds and the confirmation.
pub async fn page(
    req: HttpRequest,
    session: Session,
    state: web::Data<AdminState>,
    q: web::Query<ReplayQuery>,
) -> Result<HttpResponse, UiError> {
    let asked = !q.topic.is_empty() && !q.since.trim().is_empty();
    let count = if asked {
        let range = ReplayRange::parse(&q.since, until(&q.until))?;
        Some(state.actions().replay_count(&q.topic, range).await?)
    } else {
        None
    };
    let content = html! {
        @if let Some(n) = q.done {
            p.flash #replayed role="status" { (n) " event(s) of " b { (q.topic) } " will be published again." }
        }
        form.panel.filters method="get" action="/replay" {
            label { "Topic" input type="text" name="topic" value=(q.topic) required; }
            label { "Published since" input type="text" name="since" value=(q.since) placeholder="15m or 2026-12-04T10:00:00Z" required; }
            label { "until" input type="text" name="until" value=(q.until) placeholder="now"; }
            button type="submit" { "Count" }
        }
        p.muted { "A time is RFC 3339 or a duration meaning that long ago. The events go out again as new entries, in their original order, each key after what was already waiting on it." }
        @if let Some(n) = count {
            div.panel.confirm {
                p #dry-run { "Publish again " strong #confirm-count { (n) } " published event(s) of " b { (q.topic) } "?" }
                @if !session.role.can_act() {
                    p.error { "Your login is read-only." }
                } @else if n == 0 {
                    p { "Nothing to do." }
                } @else {
                    form.actions method="post" action="/replay/apply" {
                        (layout::csrf_field(&session))
                        input type="hidden" name="topic" value=(q.topic);
                        input type="hidden" name="since" value=(q.since);
                        input type="hidden" name="until" value=(q.until);
                        button #confirm type="submit" class="primary" { "Replay " (n) }
                        a.button href="/" { "Cancel" }
                    }
                }
            }
        }
    };
    Ok(layout::page(&req, &session, Nav::Replay, "Replay", content))
}

/// `POST /replay/apply`: replays, then shows how many.
pub async fn apply(
    session: Session,
    state: web::Data<AdminState>,
    form: web::Form<ReplayForm>,
) -> Result<HttpResponse, UiError> {
    let actor = session.act(&form.csrf)?;
    let range = ReplayRange::parse(&form.since, until(&form.until))?;
    let n = state
        .actions()
        .replay(&state.publisher, &actor.who, &form.topic, range)
        .await?;
    Ok(see_other(&format!(
        "/replay?topic={}&done={n}",
        layout::enc(&form.topic)
    )))
}
