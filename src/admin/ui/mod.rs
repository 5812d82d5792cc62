//! The web UI at `/`: server-rendered pages (maud) with htmx polling for live numbers.
//!
//! One file per page; [`routes`] lists every UI route. State-changing routes are POST forms
//! that check the session's role and CSRF token ([`session::Session::act`]), call the same
//! [`actions`](crate::admin::actions) as the JSON API, then redirect (POST-redirect-GET), so
//! a reload never repeats an action.

pub mod assets;
pub mod audit;
pub mod dead;
pub mod events;
pub mod layout;
pub mod login;
pub mod overview;
pub mod pretty;
pub mod replay;
pub mod replicas;
pub mod session;
pub mod streams;

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse, ResponseError};

use crate::admin::actions::ActionError;
use crate::db::DbError;

/// Every route of the UI.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.route("/", web::get().to(overview::page))
        .route("/events", web::get().to(events::list))
        .route("/events/{id}", web::get().to(events::detail))
        .route("/dead", web::get().to(dead::page))
        .route("/dead/confirm", web::get().to(dead::confirm))
        .route("/dead/apply", web::post().to(dead::apply))
        .route("/audit", web::get().to(audit::page))
        .route("/topics/{topic}/{action}", web::post().to(overview::steer))
        .route("/replay", web::get().to(replay::page))
        .route("/replay/apply", web::post().to(replay::apply))
        .route("/streams", web::get().to(streams::page))
        .route(
            "/streams/parked/{topic}/{group}/{key}/{action}",
            web::post().to(streams::release),
        )
        .route("/replicas", web::get().to(replicas::page))
        .route("/login", web::get().to(login::page))
        .route("/login", web::post().to(login::submit))
        .route("/logout", web::post().to(login::logout))
        .route("/assets/{name}", web::get().to(assets::serve));
}

/// Why a UI request did not get its page.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// No valid session: page requests go to the login page and come back to `next`.
    #[error("login required")]
    LoginRequired {
        /// Where to return after the login (a local path).
        next: String,
        /// The request came from htmx polling: redirect the whole page, not the fragment.
        htmx: bool,
    },
    /// The session may not do this (read-only login, missing CSRF token).
    #[error("{0}")]
    Forbidden(String),
    /// No such thing.
    #[error("{0}")]
    NotFound(String),
    /// Malformed input.
    #[error("{0}")]
    BadRequest(String),
    /// Postgres failed: an outage, so 503.
    #[error("{0}")]
    Db(#[from] DbError),
    /// Redis failed (Streams page).
    #[error("redis: {0}")]
    Redis(String),
}

impl From<ActionError> for UiError {
    fn from(e: ActionError) -> Self {
        match e {
            // The page names what was typed, not the table's rule.
            ActionError::InvalidTopic(topic) => {
                UiError::BadRequest(format!("invalid topic {topic:?}"))
            }
            // Named as the form names its fields.
            ActionError::EmptyRange { after, before } => UiError::BadRequest(format!(
                "the range is empty: from ({after}) is not before to ({before})"
            )),
            ActionError::NoEvent(_) | ActionError::NotParked(_) => UiError::NotFound(e.to_string()),
            ActionError::Db(e) => UiError::Db(e),
            ActionError::Redis(e) => UiError::Redis(e),
            ActionError::BadTime { .. }
            | ActionError::EmptyReplay { .. }
            | ActionError::BadMaxlen
            | ActionError::Nul(_)
            | ActionError::HeadersNotObject
            | ActionError::NotDead(_)
            | ActionError::DeadEntryGone(_)
            | ActionError::KeyInFlight
            | ActionError::KeyReused => UiError::BadRequest(e.to_string()),
        }
    }
}

impl UiError {
    /// The redirect to the login page for this request.
    pub fn login_required(req: &HttpRequest) -> UiError {
        let next = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".into());
        UiError::LoginRequired {
            next,
            htmx: req.headers().contains_key("hx-request"),
        }
    }
}

impl ResponseError for UiError {
    fn status_code(&self) -> StatusCode {
        match self {
            UiError::LoginRequired { .. } => StatusCode::SEE_OTHER,
            UiError::Forbidden(_) => StatusCode::FORBIDDEN,
            UiError::NotFound(_) => StatusCode::NOT_FOUND,
            UiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            UiError::Db(_) | UiError::Redis(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let UiError::LoginRequired { next, htmx } = self {
            let to = login::login_url(next);
            if *htmx {
                // htmx would swap the login page into a fragment; ask it to navigate instead.
                return HttpResponse::Ok()
                    .insert_header(("HX-Redirect", to))
                    .finish();
            }
            return HttpResponse::SeeOther()
                .insert_header((header::LOCATION, to))
                .finish();
        }
        let mut res = HttpResponse::build(self.status_code());
        layout::secure_headers(&mut res);
        res.content_type("text/html; charset=utf-8")
            .body(layout::error_page(self.status_code(), &self.to_string()).into_string())
    }
}

/// A redirect after a POST (303, so the browser follows with GET).
pub fn see_other(to: &str) -> HttpResponse {
    HttpResponse::SeeOther()
        .insert_header((header::LOCATION, to.to_string()))
        .finish()
}
