//! The JSON API under `/api/v1`: [`routes`] lists every route; each resource has its own
//! file with its request and response types; [`error`] turns failures into
//! `{"error": "..."}` with a 4xx (bad input) or 503 (Postgres away).
//!
//! Every route sits behind [`caller::authenticate`](super::caller::authenticate): bearer
//! token, 401/403. Extractor failures (bad JSON, bad uuid, bad query) answer 400 through the
//! configs of [`configure_extractors`], never actix's plain-text defaults.

pub mod audit;
pub mod body;
pub mod dead;
pub mod error;
pub mod events;
pub mod openapi;
pub mod parked;
pub mod replicas;
pub mod stats;
pub mod topics;

use actix_web::error::{JsonPayloadError, PathError, QueryPayloadError};
use actix_web::middleware::from_fn;
use actix_web::{web, HttpRequest};
use serde::Deserialize;
use utoipa::IntoParams;

use super::caller::authenticate;
use error::ApiError;
use openapi::TopicName;

/// Largest JSON body accepted (an enqueued event with its headers; Redis entries default to
/// at most 1 MiB too).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Every route of the API, under `/api/v1`.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/api/v1")
            .wrap(from_fn(authenticate))
            .configure(configure_extractors)
            .service(resource("/stats", "GET").route(web::get().to(stats::get)))
            .service(
                resource("/events", "GET, POST")
                    .route(web::get().to(events::list))
                    .route(web::post().to(events::enqueue)),
            )
            .service(resource("/events/{id}", "GET").route(web::get().to(events::get)))
            .service(resource("/events/{id}/retry", "POST").route(web::post().to(events::retry)))
            .service(
                resource("/events/{id}/discard", "POST").route(web::post().to(events::discard)),
            )
            .service(
                resource("/events/{id}/timeline", "GET").route(web::get().to(events::timeline)),
            )
            .service(resource("/dead/groups", "GET").route(web::get().to(dead::groups)))
            .service(resource("/dead/retry", "POST").route(web::post().to(dead::retry)))
            .service(resource("/dead/discard", "POST").route(web::post().to(dead::discard)))
            .service(resource("/topics", "GET").route(web::get().to(topics::list)))
            .service(
                resource("/topics/{topic}", "GET, PUT")
                    .route(web::get().to(topics::get))
                    .route(web::put().to(topics::put)),
            )
            .service(resource("/topics/{topic}/pause", "POST").route(web::post().to(topics::pause)))
            .service(
                resource("/topics/{topic}/resume", "POST").route(web::post().to(topics::resume)),
            )
            .service(resource("/topics/{topic}/parked", "GET").route(web::get().to(parked::list)))
            .service(
                resource("/topics/{topic}/groups/{group}/parked", "GET")
                    .route(web::get().to(parked::group_list)),
            )
            .service(
                resource(
                    "/topics/{topic}/groups/{group}/parked/{key}/discard",
                    "POST",
                )
                .route(web::post().to(parked::discard)),
            )
            .service(
                resource(
                    "/topics/{topic}/groups/{group}/parked/{key}/redrive",
                    "POST",
                )
                .route(web::post().to(parked::redrive)),
            )
            .service(
                resource("/topics/{topic}/replay", "POST").route(web::post().to(topics::replay)),
            )
            .service(resource("/replicas", "GET").route(web::get().to(replicas::list)))
            .service(resource("/audit", "GET").route(web::get().to(audit::list)))
            .service(resource("/openapi.json", "GET").route(web::get().to(openapi::document)))
            .default_service(web::to(not_found)),
    );
}

/// Extractor error handlers: `{"error"}` with 400 (413 for an oversized body).
pub fn configure_extractors(cfg: &mut web::ServiceConfig) {
    cfg.app_data(
        web::JsonConfig::default()
            .limit(MAX_BODY_BYTES)
            .error_handler(|e: JsonPayloadError, _req: &HttpRequest| {
                match e {
                    JsonPayloadError::Overflow { .. }
                    | JsonPayloadError::OverflowKnownLength { .. } => {
                        ApiError::TooLarge(MAX_BODY_BYTES)
                    }
                    JsonPayloadError::ContentType => ApiError::BadRequest(
                        "the body must be JSON (Content-Type: application/json)".into(),
                    ),
                    other => ApiError::BadRequest(format!("bad JSON body: {other}")),
                }
                .into()
            }),
    )
    .app_data(web::QueryConfig::default().error_handler(
        |e: QueryPayloadError, _req: &HttpRequest| {
            ApiError::BadRequest(format!("bad query string: {e}")).into()
        },
    ))
    .app_data(
        web::PathConfig::default().error_handler(|e: PathError, _req: &HttpRequest| {
            ApiError::BadRequest(format!("bad path: {e}")).into()
        }),
    );
}

/// A route whose other methods answer 405 with `Allow: <allow>` (the methods its routes
/// have), not 404: the path exists.
fn resource(path: &str, allow: &'static str) -> actix_web::Resource {
    web::resource(path).default_service(web::to(move || async move {
        Err::<actix_web::HttpResponse, ApiError>(ApiError::MethodNotAllowed(allow))
    }))
}

async fn not_found() -> Result<actix_web::HttpResponse, ApiError> {
    Err(ApiError::NotFound("no such route".into()))
}

/// The `{topic}` of a topic's routes.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TopicPath {
    /// The topic: 1 to 255 characters, no whitespace or control characters (`/` as `%2F`).
    #[param(value_type = TopicName)]
    pub topic: String,
}

/// `limit` and `after` of a keyset-paginated list.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Page {
    /// Items per page, 1 to 1000 (default 50).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// The `next` cursor of the previous page; absent for the first page.
    #[param(pattern = "^[1-9][0-9]{0,17}$")]
    pub after: Option<String>,
}

impl Page {
    /// The validated limit.
    pub fn limit(&self) -> Result<i64, ApiError> {
        match self.limit {
            None => Ok(50),
            Some(n) if (1..=1000).contains(&n) => Ok(n),
            Some(n) => Err(ApiError::BadRequest(format!(
                "limit must be between 1 and 1000, got {n}"
            ))),
        }
    }

    /// The validated cursor: an opaque token, today the position of the last item seen.
    pub fn cursor(&self) -> Result<Option<i64>, ApiError> {
        self.after
            .as_deref()
            .map(|c| {
                c.parse::<i64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| ApiError::BadRequest(format!("bad cursor {c:?}")))
            })
            .transpose()
    }
}

/// The cursor of the page after `rows` when the page came back full (`limit + 1` rows
/// were asked for, so a full page proves there is more). Trims the extra row.
pub fn next_cursor<T>(
    rows: &mut Vec<T>,
    limit: i64,
    position: impl Fn(&T) -> i64,
) -> Option<String> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if rows.len() > limit {
        rows.truncate(limit);
        rows.last().map(|r| position(r).to_string())
    } else {
        None
    }
}

/// A topic from the path, checked against the table's rule (the actions' check, so reads
/// refuse what they refuse).
pub fn valid_topic(topic: &str) -> Result<(), ApiError> {
    Ok(crate::admin::actions::check_topic(topic)?)
}
