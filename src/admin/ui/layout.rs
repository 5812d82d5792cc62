//! The page shell every UI page shares (header, navigation, role, logout), the security
//! headers of every HTML answer, and small formatting helpers for numbers, ages and times.
//!
//! maud escapes every interpolated value; nothing here uses `PreEscaped` on data.

use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder};
use chrono::{DateTime, Utc};
use maud::{html, Markup, DOCTYPE};

use super::session::Session;

/// The pages of the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// `/`
    Overview,
    /// `/events`
    Events,
    /// `/dead`
    Dead,
    /// `/streams`
    Streams,
    /// `/replicas`
    Replicas,
    /// `/replay`
    Replay,
    /// `/audit`
    Audit,
}

const NAV: &[(Nav, &str, &str)] = &[
    (Nav::Overview, "/", "Overview"),
    (Nav::Events, "/events", "Events"),
    (Nav::Dead, "/dead", "Dead letters"),
    (Nav::Streams, "/streams", "Streams"),
    (Nav::Replicas, "/replicas", "Replicas"),
    (Nav::Replay, "/replay", "Replay"),
    (Nav::Audit, "/audit", "Audit"),
];

/// Headers of every HTML answer: no framing, no sniffing, no referrer to other sites, scripts only from
/// this server (htmx), so even a rendering bug could not run an injected script.
pub fn secure_headers(res: &mut HttpResponseBuilder) {
    res.insert_header((
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    ))
    .insert_header(("X-Content-Type-Options", "nosniff"))
    .insert_header(("Referrer-Policy", "same-origin"))
    .insert_header(("X-Frame-Options", "DENY"))
    .insert_header(("Cache-Control", "no-store"));
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            // htmx would add an inline <style>, which the CSP refuses; our CSS has its rules.
            meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"allowEval":false}"#;
            title { (title) " · outbox-relay" }
            link rel="stylesheet" href=(super::assets::CSS_PATH);
            script src=(super::assets::HTMX_PATH) defer {}
        }
    }
}

/// The full page, or only `content` when htmx asks for a fragment (live refresh).
pub fn page(
    req: &HttpRequest,
    session: &Session,
    nav: Nav,
    title: &str,
    content: Markup,
) -> HttpResponse {
    let body = if req.headers().contains_key("hx-request") {
        content
    } else {
        html! {
            (DOCTYPE)
            html lang="en" {
                (head(title))
                body {
                    header.top {
                        a.brand href="/" { "outbox-relay" }
                        nav {
                            @for (item, href, label) in NAV {
                                a href=(href) class=[(*item == nav).then_some("active")] { (label) }
                            }
                        }
                        div.who {
                            span class={ "badge " (session.role_label()) } title="your role" { (session.role_label()) }
                            @if !session.open {
                                form method="post" action="/logout" {
                                    input type="hidden" name="csrf" value=(session.csrf);
                                    button.link type="submit" { "Log out" }
                                }
                            }
                        }
                    }
                    main {
                        h1 { (title) }
                        (content)
                    }
                    footer { "outbox-relay " (crate::VERSION) }
                }
            }
        }
    };
    html_response(StatusCode::OK, body)
}

/// An HTML answer with the security headers.
pub fn html_response(status: StatusCode, body: Markup) -> HttpResponse {
    let mut res = HttpResponse::build(status);
    secure_headers(&mut res);
    res.content_type("text/html; charset=utf-8")
        .body(body.into_string())
}

/// A bare page (no navigation): login and errors.
pub fn bare(title: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body.bare {
                main.narrow {
                    p.brand { "outbox-relay" }
                    (content)
                }
            }
        }
    }
}

/// The page of an error.
pub fn error_page(status: StatusCode, message: &str) -> Markup {
    bare(
        status.canonical_reason().unwrap_or("Error"),
        html! {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
            p.error { (message) }
            p { a href="/" { "Back to the overview" } }
        },
    )
}

/// The hidden CSRF field of a POST form.
pub fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// A POST button (a one-button form), shown only to roles that may act.
pub fn action_button(session: &Session, action: &str, label: &str, class: &str) -> Markup {
    html! {
        @if session.role.can_act() {
            form.inline method="post" action=(action) {
                (csrf_field(session))
                button type="submit" class=(class) { (label) }
            }
        }
    }
}

/// `s` encoded for a URL query value or path segment (topics may hold `&`, `?`, `#`, `/`).
pub fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// `12 345` style counts: thin spaces read well in both locales on-call people use.
pub fn count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push('\u{202f}');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A duration in seconds as a short human age: `42s`, `3m 5s`, `2h 10m`, `4d 3h`.
pub fn age(seconds: f64) -> String {
    let s = seconds.max(0.0) as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// A timestamp in UTC with its age, e.g. `2026-12-02 16:40:01 (3m 5s ago)`.
pub fn time(t: &DateTime<Utc>) -> Markup {
    let ago = (Utc::now() - *t).num_milliseconds() as f64 / 1000.0;
    html! {
        time datetime=(t.to_rfc3339()) title=(t.to_rfc3339()) {
            (t.format("%Y-%m-%d %H:%M:%S")) " "
            span.muted { "(" (age(ago)) " ago)" }
        }
    }
}

/// A compact age for tables, e.g. `3m 5s ago`; the full time is in the tooltip.
pub fn ago(t: &DateTime<Utc>) -> Markup {
    let ago = (Utc::now() - *t).num_milliseconds() as f64 / 1000.0;
    html! {
        time datetime=(t.to_rfc3339()) title=(t.format("%Y-%m-%d %H:%M:%S UTC").to_string()) {
            (age(ago)) " ago"
        }
    }
}

/// An optional timestamp, `–` when absent.
pub fn opt_time(t: Option<&DateTime<Utc>>) -> Markup {
    match t {
        Some(t) => time(t),
        None => html! { span.muted { "–" } },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_ages_read_well() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1234567), "1\u{202f}234\u{202f}567");
        assert_eq!(count(-1000), "-1\u{202f}000");
        assert_eq!(age(42.4), "42s");
        assert_eq!(age(185.0), "3m 5s");
        assert_eq!(age(7800.0), "2h 10m");
        assert_eq!(age(-3.0), "0s");
    }
}
