//! The login page (paste a token, get a session cookie) and logout.
//!
//! With no `admin.token` configured the UI is open (loopback only): visiting the login page
//! issues an admin session at once, so the CSRF token exists there too.

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use maud::html;
use serde::Deserialize;

use super::layout::{bare, html_response};
use super::session::{self, Session};
use super::{see_other, UiError};
use crate::admin::AdminState;

/// Query of `GET /login`.
#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    /// Where to go after the login.
    next: Option<String>,
}

/// Form of `POST /login`.
#[derive(Debug, Deserialize)]
pub struct LoginForm {
    /// The pasted token.
    #[serde(default)]
    token: String,
    /// Where to go after the login.
    next: Option<String>,
}

/// Form of `POST /logout`.
#[derive(Debug, Deserialize)]
pub struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// Only local paths: `next` must never send the user to another site.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.into(),
        _ => "/".into(),
    }
}

/// The login page URL that returns to `next`.
pub fn login_url(next: &str) -> String {
    if next == "/" {
        "/login".into()
    } else {
        let query = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("next", next)
            .finish();
        format!("/login?{query}")
    }
}

fn form(next: &str, error: Option<&str>) -> maud::Markup {
    bare(
        "Log in",
        html! {
            h1 { "Log in" }
            @if let Some(e) = error { p.error role="alert" { (e) } }
            form.login.panel method="post" action="/login" {
                label for="token" { "Admin token (or the read-only token)" }
                input #token type="password" name="token" autocomplete="current-password"
                    autofocus required;
                input type="hidden" name="next" value=(next);
                button.primary type="submit" { "Log in" }
            }
            p.muted { "The token is the " code { "admin.token" } " setting ("
                code { "OUTBOX__ADMIN__TOKEN" } "). The session lasts 12 hours." }
        },
    )
}

/// `GET /login`.
pub async fn page(
    req: HttpRequest,
    state: web::Data<AdminState>,
    query: web::Query<LoginQuery>,
) -> HttpResponse {
    let next = safe_next(query.next.as_deref());
    if state.tokens.open() {
        let cookie = session::issue(&state.tokens, crate::admin::auth::Role::Admin, false);
        return HttpResponse::SeeOther()
            .cookie(cookie)
            .insert_header(("Location", next))
            .finish();
    }
    let logged_in = req
        .cookie(session::COOKIE)
        .and_then(|c| session::verify(&state.tokens, c.value()))
        .is_some();
    if logged_in {
        return see_other(&next);
    }
    html_response(StatusCode::OK, form(&next, None))
}

/// True when the browser says the form came from another site (login CSRF): by
/// `Sec-Fetch-Site` where the browser sends it, else by a mismatched `Origin`.
fn cross_site(req: &HttpRequest) -> bool {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    if let Some(site) = header("sec-fetch-site") {
        return !matches!(site, "same-origin" | "none");
    }
    let Some(origin) = header("origin").filter(|o| *o != "null") else {
        return false;
    };
    let host = req.connection_info().host().to_string();
    url::Url::parse(origin)
        .ok()
        .map(|o| {
            let port = o.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{}{}", o.host_str().unwrap_or_default(), port) != host
        })
        .unwrap_or(true)
}

/// `POST /login`: a right token gets a session cookie, a wrong one the form again (401).
pub async fn submit(
    req: HttpRequest,
    state: web::Data<AdminState>,
    form_data: web::Form<LoginForm>,
) -> Result<HttpResponse, UiError> {
    if cross_site(&req) {
        return Err(UiError::Forbidden("cross-site login refused".into()));
    }
    let next = safe_next(form_data.next.as_deref());
    let ip = req.peer_addr().map(|a| a.ip());
    if let Some(wait) = ip.and_then(|ip| state.throttle.refused(ip)) {
        tracing::warn!(ip = ?ip, "ui login refused: too many wrong tokens");
        let message = format!(
            "Too many wrong tokens from your address. Try again in {} s.",
            wait.as_secs().max(1)
        );
        let mut response =
            html_response(StatusCode::TOO_MANY_REQUESTS, form(&next, Some(&message)));
        response.headers_mut().insert(
            actix_web::http::header::RETRY_AFTER,
            actix_web::http::header::HeaderValue::from(wait.as_secs().max(1)),
        );
        return Ok(response);
    }
    let token = form_data.token.trim();
    match state
        .tokens
        .role_for(Some(token))
        .filter(|_| !token.is_empty())
    {
        Some(role) => {
            tracing::info!(role = ?role, "ui login");
            Ok(HttpResponse::SeeOther()
                .cookie(session::issue(&state.tokens, role, session::is_https(&req)))
                .insert_header(("Location", next))
                .finish())
        }
        None => {
            if let Some(ip) = ip {
                state.throttle.failed(ip);
            }
            tracing::warn!(ip = ?ip, "ui login refused: wrong token");
            Ok(html_response(
                StatusCode::UNAUTHORIZED,
                form(&next, Some("That token is not accepted.")),
            ))
        }
    }
}

/// `POST /logout`: removes the cookie (CSRF-checked like any state change).
pub async fn logout(
    session: Session,
    form_data: web::Form<LogoutForm>,
) -> Result<HttpResponse, UiError> {
    // A viewer may log out too: only the CSRF token is checked, not the role.
    let ok: bool =
        subtle::ConstantTimeEq::ct_eq(session.csrf.as_bytes(), form_data.csrf.as_bytes()).into();
    if !ok {
        return Err(UiError::Forbidden("missing or stale CSRF token".into()));
    }
    Ok(HttpResponse::SeeOther()
        .cookie(session::clear())
        .insert_header(("Location", "/login"))
        .finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(
            safe_next(Some("/events?status=dead")),
            "/events?status=dead"
        );
        assert_eq!(safe_next(Some("//evil.example")), "/");
        assert_eq!(safe_next(Some("https://evil.example")), "/");
        assert_eq!(safe_next(Some("/\\evil")), "/");
        assert_eq!(safe_next(None), "/");
        assert_eq!(login_url("/dead?x=1&y"), "/login?next=%2Fdead%3Fx%3D1%26y");
    }
}
