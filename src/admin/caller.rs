//! Who is calling the admin, decided once per request for every protected route.
//!
//! [`authenticate`] is a middleware: it finds the [`Caller`] (a bearer token today; a UI
//! session middleware placed before it may insert a [`Caller`] into the request's
//! extensions, which is then used as is), answers 401 without one, 403 when a read-only
//! caller tries anything but GET or HEAD, and leaves the [`Caller`] in the request for the
//! handlers, which take it as an extractor to name the actor of their audit rows.

use std::future::{ready, Ready};

use actix_web::body::MessageBody;
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method};
use actix_web::middleware::Next;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};

use super::api::error::ApiError;
use super::auth::Role;
use super::AdminState;

/// The authenticated caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// What the caller may do.
    pub role: Role,
    /// The actor name written to the audit log: `token:admin`, `token:read-only`, or `open`
    /// when no token is configured.
    pub who: String,
}

impl Caller {
    /// The caller a bearer token (the `Authorization` header's value) makes, if any.
    pub fn from_bearer(state: &AdminState, authorization: Option<&str>) -> Option<Caller> {
        if state.tokens.open() {
            return Some(Caller {
                role: Role::Admin,
                who: "open".into(),
            });
        }
        // The scheme is case-insensitive (RFC 9110); the token is compared as sent.
        let token = authorization
            .and_then(|v| v.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim());
        let role = state.tokens.role_for(token)?;
        let who = match role {
            Role::Admin => "token:admin",
            Role::ReadOnly => "token:read-only",
        };
        Some(Caller {
            role,
            who: who.into(),
        })
    }

    /// The caller of `req`: one already attached (by a session middleware or by
    /// [`authenticate`]), else from its bearer token.
    pub fn of(req: &HttpRequest) -> Option<Caller> {
        if let Some(caller) = req.extensions().get::<Caller>() {
            return Some(caller.clone());
        }
        let state = req.app_data::<web::Data<AdminState>>()?;
        let authorization = req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        Caller::from_bearer(state, authorization)
    }
}

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = Ready<Result<Caller, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut actix_web::dev::Payload) -> Self::Future {
        ready(Caller::of(req).ok_or(ApiError::Unauthorized))
    }
}

/// The caller of a request's bearer token, throttled per client address: an address that
/// presented too many wrong tokens is refused before its token is compared.
fn bearer_caller(req: &HttpRequest) -> Result<Caller, ApiError> {
    let state = req
        .app_data::<web::Data<AdminState>>()
        .ok_or(ApiError::Internal)?;
    let ip = req.peer_addr().map(|a| a.ip());
    if let Some(wait) = ip.and_then(|ip| state.throttle.refused(ip)) {
        return Err(ApiError::TooManyAttempts(wait.as_secs().max(1)));
    }
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match Caller::from_bearer(state, authorization) {
        Some(caller) => Ok(caller),
        None => {
            // A request with no token at all is not a guess (a browser without a session).
            if let (Some(ip), Some(_)) = (ip, authorization) {
                state.throttle.failed(ip);
                tracing::warn!(%ip, "admin api: wrong bearer token");
            }
            Err(ApiError::Unauthorized)
        }
    }
}

/// The middleware of every protected scope: 401 without a caller, 403 for a read-only
/// caller on a state-changing method; otherwise the request goes on with its [`Caller`].
pub async fn authenticate(
    req: ServiceRequest,
    next: Next<impl MessageBody>,
) -> Result<ServiceResponse<impl MessageBody>, actix_web::Error> {
    let caller = match req.extensions().get::<Caller>().cloned() {
        Some(caller) => caller,
        None => bearer_caller(req.request())?,
    };
    let reads = matches!(*req.method(), Method::GET | Method::HEAD);
    if !reads && !caller.role.can_act() {
        return Err(ApiError::Forbidden.into());
    }
    req.extensions_mut().insert(caller);
    next.call(req).await
}
