//! UI sessions without a session table: a private cookie (the `cookie` crate's private jar,
//! AES-256-GCM: encrypted and authenticated) holding the role, an expiry and the session's
//! CSRF token.
//!
//! The key comes from the configured tokens ([`Tokens::session_key`]), so any replica behind
//! one Service accepts a cookie another replica issued. The cookie is HttpOnly and
//! SameSite=Strict; every state-changing form also carries the CSRF token in a hidden field,
//! checked by [`Session::act`]. Sealed, the cookie can be neither forged nor altered without
//! the key, and the token it carries is known only to the pages this server renders.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix_web::cookie::{self, Cookie, CookieJar, SameSite};
use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

use super::UiError;
use crate::admin::auth::{Role, Tokens};
use crate::admin::AdminState;

/// Name of the session cookie.
pub const COOKIE: &str = "outbox_session";
/// How long a login lasts.
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// A logged-in browser: who it is and the token its forms must carry.
#[derive(Debug, Clone)]
pub struct Session {
    /// What it may do.
    pub role: Role,
    /// The CSRF token of this session (hidden field `csrf` of every POST form).
    pub csrf: String,
    /// True when no admin token is configured (no login, no logout button).
    pub open: bool,
}

/// What a state-changing handler gets once role and CSRF token are checked.
#[derive(Debug, Clone)]
pub struct Actor {
    /// The audit log's `who`.
    pub who: String,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin",
        Role::ReadOnly => "viewer",
    }
}

/// A new session cookie for `role`, sealed with the tokens' key.
pub fn issue(tokens: &Tokens, role: Role, secure: bool) -> Cookie<'static> {
    let csrf = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
    // The expiry is inside the sealed value: Max-Age only asks the browser to forget it, a
    // copied cookie would outlive it.
    let expires = now_secs() + LIFETIME.as_secs();
    let plain = Cookie::build(COOKIE, format!("{}.{expires}.{csrf}", role_name(role)))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .max_age(cookie::time::Duration::seconds(LIFETIME.as_secs() as i64))
        .finish();
    let mut jar = CookieJar::new();
    jar.private_mut(tokens.session_key()).add(plain);
    // The jar holds what was just added; were it ever empty, no session beats a panic.
    jar.get(COOKIE).cloned().unwrap_or_else(clear)
}

/// A cookie that removes the session.
pub fn clear() -> Cookie<'static> {
    let mut c = Cookie::build(COOKIE, "")
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .finish();
    c.make_removal();
    c
}

/// The session a cookie value proves, if it opens with the tokens' key and has not expired.
pub fn verify(tokens: &Tokens, value: &str) -> Option<Session> {
    let sealed = Cookie::new(COOKIE, value.to_string());
    let plain = CookieJar::new()
        .private(tokens.session_key())
        .decrypt(sealed)?;
    let mut parts = plain.value().splitn(3, '.');
    let role = match parts.next()? {
        "admin" => Role::Admin,
        "viewer" => Role::ReadOnly,
        _ => return None,
    };
    let expires: u64 = parts.next()?.parse().ok()?;
    let csrf = parts.next().filter(|c| !c.is_empty())?;
    if expires < now_secs() {
        return None;
    }
    Some(Session {
        role,
        csrf: csrf.to_string(),
        open: tokens.open(),
    })
}

/// True when the request came over https (directly or through a proxy that says so), so
/// the cookie can be marked Secure.
pub fn is_https(req: &HttpRequest) -> bool {
    req.connection_info().scheme() == "https"
}

impl Session {
    /// Checks that this session may change state and that the form carried its CSRF token.
    pub fn act(&self, csrf: &str) -> Result<Actor, UiError> {
        if !self.role.can_act() {
            return Err(UiError::Forbidden("this login is read-only".into()));
        }
        // Constant time, like every other secret comparison here.
        let ok: bool = subtle::ConstantTimeEq::ct_eq(self.csrf.as_bytes(), csrf.as_bytes()).into();
        if !ok {
            return Err(UiError::Forbidden(
                "the form's CSRF token is missing or stale: reload the page and try again".into(),
            ));
        }
        Ok(Actor {
            who: format!("ui:{}", role_name(self.role)),
        })
    }

    /// A short label of the role, for the page header.
    pub fn role_label(&self) -> &'static str {
        role_name(self.role)
    }
}

impl FromRequest for Session {
    type Error = UiError;
    type Future = std::future::Ready<Result<Session, UiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let session = req
            .app_data::<web::Data<AdminState>>()
            .zip(req.cookie(COOKIE))
            .and_then(|(state, c)| verify(&state.tokens, c.value()));
        std::future::ready(session.ok_or_else(|| UiError::login_required(req)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AdminSettings;

    fn tokens(admin: &str, ro: Option<&str>) -> Tokens {
        Tokens::from_settings(&AdminSettings {
            addr: "127.0.0.1:0".into(),
            token: Some(admin.into()),
            read_only_token: ro.map(str::to_string),
            ..AdminSettings::default()
        })
    }

    #[test]
    fn a_cookie_holds_its_role_and_nothing_forged_passes() {
        let t = tokens("s3cret", Some("look"));
        let c = issue(&t, Role::ReadOnly, false);
        assert!(c.http_only().unwrap_or(false));
        assert_eq!(c.same_site(), Some(SameSite::Strict));
        assert_eq!(c.path(), Some("/"));
        assert_eq!(c.max_age(), Some(cookie::time::Duration::seconds(43_200)));
        // Sealed: neither the role nor the CSRF token can be read from it.
        assert!(!c.value().contains("viewer"), "{}", c.value());
        let s = verify(&t, c.value()).expect("valid");
        assert_eq!(s.role, Role::ReadOnly);
        assert!(!c.value().contains(&s.csrf));
        // Another replica with the same tokens accepts it; other tokens do not.
        assert!(verify(&tokens("s3cret", Some("look")), c.value()).is_some());
        assert!(verify(&tokens("other", Some("look")), c.value()).is_none());
        assert!(verify(&tokens("s3cret", None), c.value()).is_none());
        // Any change to the sealed value breaks it.
        let mut bytes = c.value().to_string().into_bytes();
        bytes[20] = if bytes[20] == b'A' { b'B' } else { b'A' };
        let altered = String::from_utf8(bytes).expect("ascii");
        assert!(verify(&t, &altered).is_none());
        assert!(verify(&t, &format!("{}x", c.value())).is_none());
        assert!(verify(&t, "garbage").is_none());
        // A value in the clear, even a well-formed one, is no session.
        assert!(verify(&t, "admin.99999999999.token").is_none());
    }

    /// `value` sealed as the session cookie would be.
    fn seal(t: &Tokens, value: String) -> String {
        let mut jar = CookieJar::new();
        jar.private_mut(t.session_key())
            .add(Cookie::new(COOKIE, value));
        jar.get(COOKIE).expect("added").value().to_string()
    }

    #[test]
    fn an_expired_session_is_refused_whatever_the_browser_kept() {
        let t = tokens("s3cret", None);
        let later = now_secs() + 60;
        assert!(verify(&t, &seal(&t, format!("admin.{later}.tok"))).is_some());
        assert!(verify(&t, &seal(&t, "admin.1.tok".into())).is_none());
        assert!(verify(&t, &seal(&t, format!("admin.{later}."))).is_none());
        assert!(verify(&t, &seal(&t, format!("root.{later}.tok"))).is_none());
    }

    #[test]
    fn acting_needs_the_admin_role_and_the_csrf_token() {
        let t = tokens("s3cret", Some("look"));
        let admin = verify(&t, issue(&t, Role::Admin, false).value()).expect("valid");
        assert!(admin.act(&admin.csrf).is_ok());
        assert!(admin.act("").is_err());
        let other = verify(&t, issue(&t, Role::Admin, false).value()).expect("valid");
        assert!(admin.act(&other.csrf).is_err(), "tokens are per session");
        let viewer = verify(&t, issue(&t, Role::ReadOnly, false).value()).expect("valid");
        assert!(viewer.act(&viewer.csrf).is_err());
    }
}
