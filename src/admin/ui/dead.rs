//! The Dead letters page: failures grouped by error fingerprint, the keys dead events park
//! (topics with `park_on_dead`) with their held counts, the latest dead events, and retry or
//! discard of one event, one group, or everything matching a filter.
//!
//! Every action goes through a confirmation page that first counts what it would touch (a
//! dry run with `db::outbox::dead::count`), then posts to `/dead/apply`, which calls the same
//! [`actions`](crate::admin::actions) as the API (audit row, claimer woken).

use actix_web::{web, HttpRequest, HttpResponse};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use maud::{html, Markup};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::layout::{self, Nav};
use super::session::Session;
use super::{events as event_pages, see_other, UiError};
use crate::admin::actions::{check_dead_filter, ActionError};
use crate::admin::AdminState;
use crate::db::outbox::browse;
use crate::db::outbox::dead::{self, DeadAction, DeadFilter};
use crate::db::outbox::parked;
use crate::db::DbError;

/// Dead events listed under the groups.
const LATEST: i64 = 50;

/// What a dead-letter action targets: one event, or the dead letters matching the filters.
/// It is the query of the pages and the form of `/dead/apply` alike.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct Target {
    #[serde(default)]
    topic: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    error: String,
    #[serde(default)]
    fingerprint: String,
    /// Died at or after this time (UTC; `datetime-local`, a date, or RFC 3339).
    #[serde(default)]
    from: String,
    /// Died before this time (same forms).
    #[serde(default)]
    to: String,
    #[serde(default)]
    id: String,
}

/// Confirmation query: the target and the action.
#[derive(Debug, Deserialize)]
pub struct ConfirmQuery {
    action: String,
    #[serde(flatten)]
    target: Target,
}

/// Form of `/dead/apply`.
#[derive(Debug, Deserialize)]
pub struct ApplyForm {
    #[serde(default)]
    csrf: String,
    action: String,
    #[serde(flatten)]
    target: Target,
}

/// Query of `/dead`: the filters, and the result of an action just done.
#[derive(Debug, Deserialize)]
pub struct PageQuery {
    #[serde(flatten)]
    target: Target,
    done: Option<String>,
    // A string: serde's flatten hands every value over as text.
    n: Option<String>,
}

fn opt(s: &str) -> Option<String> {
    Some(s.trim().to_string()).filter(|s| !s.is_empty())
}

/// A time typed into the form, read as UTC: what a `datetime-local` or `date` field sends,
/// or a full RFC 3339 time with its own offset.
fn parse_time(field: &str, text: &str) -> Result<Option<DateTime<Utc>>, UiError> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    for pattern in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, pattern) {
            return Ok(Some(t.and_utc()));
        }
    }
    if let Some(midnight) = NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
    {
        return Ok(Some(midnight.and_utc()));
    }
    Err(UiError::BadRequest(format!(
        "{field}: {text:?} is not a time; use YYYY-MM-DDTHH:MM (UTC)"
    )))
}

impl Target {
    fn filter(&self) -> Result<DeadFilter, UiError> {
        let filter = DeadFilter {
            topic: opt(&self.topic),
            partition_key: opt(&self.key),
            error_contains: opt(&self.error),
            fingerprint: opt(&self.fingerprint),
            dead_after: parse_time("from", &self.from)?,
            dead_before: parse_time("to", &self.to)?,
        };
        check_dead_filter(&filter)?;
        Ok(filter)
    }

    /// Every field as (form name, words for a person, value): the query string, the hidden
    /// fields of the confirmation and its description carry exactly these.
    fn fields(&self) -> [(&'static str, &'static str, &String); 7] {
        [
            ("topic", "topic", &self.topic),
            ("key", "key", &self.key),
            ("error", "error contains", &self.error),
            ("fingerprint", "fingerprint", &self.fingerprint),
            ("from", "died at or after", &self.from),
            ("to", "died before", &self.to),
            ("id", "id", &self.id),
        ]
    }

    fn one(&self) -> Result<Option<Uuid>, UiError> {
        opt(&self.id)
            .map(|id| {
                Uuid::parse_str(&id)
                    .map_err(|_| UiError::BadRequest(format!("{id:?} is not a uuid")))
            })
            .transpose()
    }

    /// This target with one field changed, as a query string.
    fn query(&self, action: Option<&str>) -> String {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        if let Some(a) = action {
            s.append_pair("action", a);
        }
        for (k, _, v) in self.fields() {
            if !v.is_empty() {
                s.append_pair(k, v);
            }
        }
        s.finish()
    }

    /// What it matches, for a person: empty for everything, else ` where topic = ...`.
    fn describe(&self) -> Markup {
        // The id is not part of a filter: a single event is named by the caller.
        let parts: Vec<(&str, &String)> = self
            .fields()
            .into_iter()
            .filter(|(name, _, v)| *name != "id" && !v.is_empty())
            .map(|(_, words, v)| (words, v))
            .collect();
        html! {
            @if !parts.is_empty() {
                " where "
                @for (i, (k, v)) in parts.iter().enumerate() {
                    @if i > 0 { " and " }
                    (k) " = " code { (v) }
                }
            }
        }
    }
}

fn action_of(name: &str) -> Result<DeadAction, UiError> {
    match name {
        "retry" => Ok(DeadAction::Retry),
        "discard" => Ok(DeadAction::Discard),
        other => Err(UiError::BadRequest(format!("unknown action {other:?}"))),
    }
}

/// `GET /dead`.
pub async fn page(
    req: HttpRequest,
    session: Session,
    state: web::Data<AdminState>,
    q: web::Query<PageQuery>,
) -> Result<HttpResponse, UiError> {
    let t = &q.target;
    let filter = t.filter()?;
    let (groups, latest, parked) = {
        state
            .db
            .unit(async |c| {
                let groups = dead::groups(c, &filter).await?;
                let latest = dead::latest(c, &filter, LATEST).await?;
                Ok::<_, DbError>((groups, latest, parked::parked_keys(c, None).await?))
            })
            .await?
    };
    let total: i64 = groups.iter().map(|g| g.count).sum();
    let can = session.role.can_act();
    let content = html! {
        @if let (Some(done), Some(n)) = (&q.done, q.n.as_deref().and_then(|n| n.parse::<i64>().ok())) {
            p.notice.ok role="status" { (if done == "retry" { "Retried " } else { "Discarded " }) (n) " dead letter(s)." }
        }
        form.filters method="get" action="/dead" {
            label { "Topic" input type="text" name="topic" value=(t.topic); }
            label { "Key" input type="text" name="key" value=(t.key); }
            label { "Error contains" input type="text" name="error" value=(t.error); }
            label { "Died from (UTC)" input type="datetime-local" name="from" value=(t.from); }
            label { "to (UTC)" input type="datetime-local" name="to" value=(t.to); }
            input type="hidden" name="fingerprint" value=(t.fingerprint);
            button.primary type="submit" { "Filter" }
            a.button href="/dead" { "Clear" }
        }
        div #live hx-get={ "/dead?" (t.query(None)) } hx-trigger="every 5s" hx-select="#live" hx-swap="outerHTML" {
            div.actions {
                span { strong #dead-total { (layout::count(total)) } " dead letter(s)" (t.describe()) }
                @if can && total > 0 {
                    a.button.primary href={ "/dead/confirm?" (t.query(Some("retry"))) } { "Retry all matching…" }
                    a.button href={ "/dead/confirm?" (t.query(Some("discard"))) } { "Discard all matching…" }
                }
            }
            h2 { "By error" }
            div.scroll { table #groups {
                thead { tr { th.num { "Count" } th { "Error (one example)" } th { "Topics" } th.hide-sm { "Last died" } th {} } }
                tbody {
                    @for g in &groups {
                        @let group = Target { fingerprint: g.fingerprint.clone(), ..t.clone() };
                        tr {
                            td.num { strong { (layout::count(g.count)) } }
                            td.err { (g.example) }
                            td { (g.topics.join(", ")) }
                            td.hide-sm { (layout::ago(&g.last_dead_at)) }
                            td { div.actions {
                                a href={ "/dead?" (group.query(None)) } { "Show" }
                                @if can {
                                    a.button.small href={ "/dead/confirm?" (group.query(Some("retry"))) } { "Retry…" }
                                    a.button.small href={ "/dead/confirm?" (group.query(Some("discard"))) } { "Discard…" }
                                }
                            } }
                        }
                    }
                    @if groups.is_empty() { tr { td.empty colspan="5" { "No dead letters. " } } }
                }
            } }
            @if !parked.is_empty() {
                h2 { "Parked keys" }
                p.muted { "On topics with " code { "park_on_dead" } ", a key's later events wait behind its dead event until it is retried and published, or discarded." }
                div.scroll { table #parked {
                    thead { tr { th { "Topic" } th { "Key" } th { "Dead event" } th.num { "Held" } th {} } }
                    tbody {
                        @for k in &parked {
                            @let one = Target { id: k.dead_id.to_string(), ..Target::default() };
                            tr {
                                td { (k.topic) }
                                td { code { (k.key) } }
                                td { a href={ "/events/" (k.dead_id) } { code { (k.dead_id) } } }
                                td.num { strong { (layout::count(k.held)) } }
                                td { @if can { div.actions {
                                    a.button.small href={ "/dead/confirm?" (one.query(Some("retry"))) } { "Retry…" }
                                    a.button.small href={ "/dead/confirm?" (one.query(Some("discard"))) } { "Discard…" }
                                } } }
                            }
                        }
                    }
                } }
            }
            h2 { "Latest matching dead events" }
            (event_pages::table(&latest, None, "None."))
        }
    };
    Ok(layout::page(
        &req,
        &session,
        Nav::Dead,
        "Dead letters",
        content,
    ))
}

/// `GET /dead/confirm`: the dry run. Counts what the action would touch and asks.
pub async fn confirm(
    req: HttpRequest,
    session: Session,
    state: web::Data<AdminState>,
    q: web::Query<ConfirmQuery>,
) -> Result<HttpResponse, UiError> {
    let action = action_of(&q.action)?;
    let t = &q.target;
    let (count, what) = state.db.unit(async |c| {
        Ok::<_, UiError>(match t.one()? {
            Some(id) => {
                let e = browse::get(c, id)
                    .await?
                    .ok_or_else(|| UiError::NotFound(format!("no event {id}")))?;
                let dead = e.dead_at.is_some() && e.discarded_at.is_none();
                (
                    i64::from(dead),
                    html! { "the event " a href={ "/events/" (id) } { code { (id) } } " (" (e.topic) ")" },
                )
            }
            None => (dead::count(c, &t.filter()?).await?, t.describe()),
        })
    })
    .await?;
    let verb = if action == DeadAction::Retry {
        "Retry"
    } else {
        "Discard"
    };
    let content = html! {
        div.panel.confirm {
            p #dry-run { (verb) " " strong #confirm-count { (count) } " dead letter(s)" (what) "?" }
            @if action == DeadAction::Retry {
                p.muted { "They are requeued (attempts 0) and published now, after the events already waiting on their keys." }
            } @else {
                p.muted { "They are never retried; retention deletes them like published events." }
            }
            @if !session.role.can_act() {
                p.error { "Your login is read-only." }
            } @else if count == 0 {
                p { "Nothing to do." }
            } @else {
                form.actions method="post" action="/dead/apply" {
                    (layout::csrf_field(&session))
                    input type="hidden" name="action" value=(q.action);
                    @for (k, _, v) in t.fields() {
                        input type="hidden" name=(k) value=(v);
                    }
                    button #confirm type="submit" class=(if action == DeadAction::Retry { "primary" } else { "danger" }) {
                        (verb) " " (count)
                    }
                    a.button href={ "/dead?" (Target { id: String::new(), ..t.clone() }.query(None)) } { "Cancel" }
                }
            }
        }
    };
    Ok(layout::page(
        &req,
        &session,
        Nav::Dead,
        &format!("{verb} dead letters"),
        content,
    ))
}

/// `POST /dead/apply`: does it, writes the audit row (in `db::outbox::dead`), wakes the claimer.
pub async fn apply(
    session: Session,
    state: web::Data<AdminState>,
    form: web::Form<ApplyForm>,
) -> Result<HttpResponse, UiError> {
    let actor = session.act(&form.csrf)?;
    let action = action_of(&form.action)?;
    let t = &form.target;
    let actions = state.actions();
    let n = match t.one()? {
        Some(id) => match actions.dead_one(&actor.who, action, id).await {
            Ok(()) => 1,
            // Retried or discarded meanwhile (another tab, another operator): nothing to do.
            Err(ActionError::NotDead(_)) => 0,
            Err(e) => return Err(e.into()),
        },
        None => {
            actions
                .dead_bulk(&actor.who, action, &t.filter()?, false)
                .await?
        }
    };
    let back = Target {
        id: String::new(),
        ..t.clone()
    };
    Ok(see_other(&format!(
        "/dead?{}&done={}&n={n}",
        back.query(None),
        form.action
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_from_the_form_are_read_as_utc() {
        let want: DateTime<Utc> = "2026-12-03T06:40:00Z".parse().expect("time");
        for text in [
            "2026-12-03T06:40",
            "2026-12-03T06:40:00",
            " 2026-12-03 06:40 ",
            "2026-12-03T07:40:00+01:00",
        ] {
            assert_eq!(parse_time("from", text).expect(text), Some(want), "{text}");
        }
        let midnight: DateTime<Utc> = "2026-12-03T00:00:00Z".parse().expect("time");
        assert_eq!(
            parse_time("to", "2026-12-03").expect("date"),
            Some(midnight)
        );
        assert_eq!(parse_time("to", "  ").expect("blank"), None);
        let err = parse_time("to", "yesterday").expect_err("not a time");
        assert!(err.to_string().contains("to: \"yesterday\""), "{err}");
    }

    #[test]
    fn an_empty_range_is_refused_not_silently_matched_by_nothing() {
        let t = Target {
            from: "2026-12-03T08:00".into(),
            to: "2026-12-03T07:00".into(),
            ..Target::default()
        };
        assert!(t.filter().is_err());
    }
}
