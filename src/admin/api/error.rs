//! The API's error type: every failure becomes a status and `{"error": "..."}`. Bad input is
//! a 4xx, a Postgres outage a 503; a 500 means a bug, and its cause is logged, not shown.

use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};

use crate::admin::actions::ActionError;
use crate::db::DbError;

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Malformed or invalid input.
    #[error("{0}")]
    BadRequest(String),
    /// No token, or a wrong one.
    #[error("missing or wrong bearer token")]
    Unauthorized,
    /// Too many wrong tokens from this address lately; the seconds to wait.
    #[error("too many wrong tokens from this address; try again in {0} s")]
    TooManyAttempts(u64),
    /// The caller may look but not act.
    #[error("this token may only read")]
    Forbidden,
    /// Nothing there.
    #[error("{0}")]
    NotFound(String),
    /// The route exists, without this method; the methods it has (for `Allow`).
    #[error("method not allowed here; allowed: {0}")]
    MethodNotAllowed(&'static str),
    /// The target is not in a state that allows the action.
    #[error("{0}")]
    Conflict(String),
    /// Understood but refused (an idempotency key reused with another body).
    #[error("{0}")]
    Unprocessable(String),
    /// The body is larger than the API accepts.
    #[error("request body larger than {0} bytes")]
    TooLarge(usize),
    /// Postgres cannot be reached (or timed out): try again later.
    #[error("postgres unavailable")]
    Unavailable,
    /// Redis cannot be reached: try again later.
    #[error("{0}")]
    RedisUnavailable(String),
    /// A bug on our side; the details are in the log.
    #[error("internal error")]
    Internal,
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden => StatusCode::FORBIDDEN,
            ApiError::TooManyAttempts(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_) => StatusCode::CONFLICT,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::Unavailable | ApiError::RedisUnavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let mut response = HttpResponse::build(self.status_code());
        if matches!(self, ApiError::Unauthorized) {
            response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
        }
        if let ApiError::MethodNotAllowed(allow) = self {
            response.insert_header((header::ALLOW, *allow));
        }
        if let ApiError::TooManyAttempts(seconds) = self {
            response.insert_header((header::RETRY_AFTER, seconds.to_string()));
        }
        response.json(serde_json::json!({ "error": self.to_string() }))
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        use diesel::result::{DatabaseErrorKind as Kind, Error as Q};
        match &e {
            // Constraint violations mean we let bad input through: a bug, not an outage.
            DbError::Query(Q::DatabaseError(
                Kind::UniqueViolation
                | Kind::CheckViolation
                | Kind::NotNullViolation
                | Kind::ForeignKeyViolation,
                _,
            ))
            | DbError::Query(Q::DeserializationError(_) | Q::SerializationError(_)) => {
                tracing::error!("admin api: {e}");
                ApiError::Internal
            }
            // Everything else (no connection, dropped connection, statement timeout) is
            // Postgres being away or overloaded.
            _ => {
                tracing::warn!("admin api: {e}");
                ApiError::Unavailable
            }
        }
    }
}

impl From<ActionError> for ApiError {
    fn from(e: ActionError) -> Self {
        match e {
            ActionError::InvalidTopic(_)
            | ActionError::Nul(_)
            | ActionError::BadMaxlen
            | ActionError::HeadersNotObject
            | ActionError::BadTime { .. }
            | ActionError::EmptyReplay { .. } => ApiError::BadRequest(e.to_string()),
            ActionError::Redis(_) => ApiError::RedisUnavailable(e.to_string()),
            // Named as the API's filter names its fields.
            ActionError::EmptyRange { .. } => {
                ApiError::BadRequest("dead_after must be before dead_before".into())
            }
            ActionError::NoEvent(_) | ActionError::NotParked(_) => {
                ApiError::NotFound(e.to_string())
            }
            ActionError::DeadEntryGone(_) => ApiError::Conflict(e.to_string()),
            ActionError::NotDead(_) | ActionError::KeyInFlight => ApiError::Conflict(e.to_string()),
            ActionError::KeyReused => ApiError::Unprocessable(e.to_string()),
            ActionError::Db(e) => e.into(),
        }
    }
}

/// A response or an [`ApiError`].
pub type ApiResult<T> = Result<T, ApiError>;

impl From<diesel_async::pooled_connection::bb8::RunError> for ApiError {
    fn from(e: diesel_async::pooled_connection::bb8::RunError) -> Self {
        ApiError::from(DbError::from(e))
    }
}
