//! UI sessions without a session table: a signed cookie naming the role, an expiry and a
//! random nonce, plus the per-session CSRF token derived from that nonce.
//!
//! The signing key comes from the configured tokens ([`Tokens::session_key`]), so any replica
//! behind one Service accepts a cookie another replica issued. The cookie is HttpOnly and
//! SameSite=Strict; every state-changing form also carries the CSRF token in a hidden field,
//! checked by [`Session::act`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use actix_web::cookie::{self, Cookie, SameSite};
use actix_web::dev::Payload;
use actix_web::{web, FromRequest, HttpRequest};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{KeyInit, Mac};

use super::UiError;
use crate::admin::auth::{Role, Tokens};
use crate::admin::AdminState;

/// Name of the session cookie.
pub const COOKIE: &str = "outbox_session";
/// How long a login lasts.
pub const LIFETIME: Duration = Duration::from_secs(12 * 3600);

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

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

fn mac(key: &[u8; 32], parts: &[&[u8]]) -> Vec<u8> {
    // A 32-byte key is always accepted by HMAC; the fallback only keeps this path panic-free.
    let Ok(mut m) = <HmacSha256 as KeyInit>::new_from_slice(key) else {
        return Vec::new();
    };
    for p in parts {
        m.update(p);
        m.update(b"\0");
    }
    m.finalize().into_bytes().to_vec()
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

/// The CSRF token of a session nonce: a MAC, so it need not be stored anywhere.
fn csrf_for(key: &[u8; 32], nonce: &str) -> String {
    URL_SAFE_NO_PAD.encode(mac(key, &[b"csrf", nonce.as_bytes()]))
}

/// A new session cookie for `role`.
pub fn issue(tokens: &Tokens, role: Role, secure: bool) -> Cookie<'static> {
    let key = tokens.session_key();
    let nonce: [u8; 16] = rand::random();
    let expires = now_secs() + LIFETIME.as_secs();
    let payload = format!(
        "{}.{}.{}",
        role_name(role),
        expires,
        URL_SAFE_NO_PAD.encode(nonce)
    );
    let sig = URL_SAFE_NO_PAD.encode(mac(&key, &[b"session", payload.as_bytes()]));
    Cookie::build(COOKIE, format!("{payload}.{sig}"))
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .max_age(cookie::time::Duration::seconds(LIFETIME.as_secs() as i64))
        .finish()
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

/// The session a cookie value proves, if its signature holds and it has not expired.
pub fn verify(tokens: &Tokens, value: &str) -> Option<Session> {
    let key = tokens.session_key();
    let (payload, sig) = value.rsplit_once('.')?;
    let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
    let mut m = <HmacSha256 as KeyInit>::new_from_slice(&key).ok()?;
    m.update(b"session");
    m.update(b"\0");
    m.update(payload.as_bytes());
    m.update(b"\0");
    // Constant-time comparison of the signature.
    m.verify_slice(&sig).ok()?;
    let mut parts = payload.splitn(3, '.');
    let role = match parts.next()? {
        "admin" => Role::Admin,
        "viewer" => Role::ReadOnly,
        _ => return None,
    };
    let expires: u64 = parts.next()?.parse().ok()?;
    let nonce = parts.next()?;
    if expires < now_secs() {
        return None;
    }
    Some(Session {
        role,
        csrf: csrf_for(&key, nonce),
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
        let s = verify(&t, c.value()).expect("valid");
        assert_eq!(s.role, Role::ReadOnly);
        // Another replica with the same tokens accepts it; other tokens do not.
        assert!(verify(&tokens("s3cret", Some("look")), c.value()).is_some());
        assert!(verify(&tokens("other", Some("look")), c.value()).is_none());
        assert!(verify(&tokens("s3cret", None), c.value()).is_none());
        // Promoting the role in the payload breaks the signature.
        let forged = c.value().replacen("viewer", "admin", 1);
        assert!(verify(&t, &forged).is_none());
        assert!(verify(&t, "garbage").is_none());
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
