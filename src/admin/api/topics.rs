//! `/api/v1/topics`: per-topic counts and settings; pause, resume, stream trimming, replay.

use crate::admin::counts;
use actix_web::{web, HttpResponse};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::body::{whole_number, Object};
use super::error::{ApiError, ApiResult};
use super::stats::TopicStats;
use super::{valid_topic, TopicPath};
use crate::admin::actions::ReplayRange;
use crate::admin::caller::Caller;
use crate::admin::AdminState;

/// Every topic with events or settings, with its counts.
#[utoipa::path(get, path = "/api/v1/topics", tag = "topics", operation_id = "listTopics",
    responses((status = 200, body = [TopicStats]), (status = 401), (status = 503)))]
pub async fn list(state: web::Data<AdminState>) -> ApiResult<HttpResponse> {
    let rows = state
        .db
        .unit(async |c| counts::topic_counts(&state.published, c, None).await)
        .await?;
    let view: Vec<TopicStats> = rows.into_iter().map(TopicStats::from).collect();
    Ok(HttpResponse::Ok().json(view))
}

async fn one(state: &AdminState, topic: &str) -> ApiResult<TopicStats> {
    let row = state
        .db
        .unit(async |c| counts::topic_counts(&state.published, c, Some(topic)).await)
        .await?
        .into_iter()
        .next();
    // A topic nobody wrote to yet is a valid, active topic with nothing in it.
    Ok(row.map(TopicStats::from).unwrap_or(TopicStats {
        topic: topic.to_string(),
        pending: 0,
        published: 0,
        dead: 0,
        discarded: 0,
        paused: false,
        maxlen: None,
    }))
}

/// One topic's counts and settings (zeros and defaults for a topic never seen).
#[utoipa::path(get, path = "/api/v1/topics/{topic}", tag = "topics", operation_id = "getTopic", params(TopicPath),
    responses((status = 200, body = TopicStats), (status = 400), (status = 401), (status = 503)))]
pub async fn get(
    state: web::Data<AdminState>,
    topic: web::Path<TopicPath>,
) -> ApiResult<HttpResponse> {
    valid_topic(&topic.topic)?;
    Ok(HttpResponse::Ok().json(one(&state, &topic.topic).await?))
}

/// The settings of a topic (`PUT` replaces both).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TopicSettings {
    /// Paused: no replica publishes the topic.
    pub paused: bool,
    /// Trim the stream to about this many entries (`MAXLEN ~`); null uses `redis.maxlen`.
    #[schema(minimum = 1)]
    #[serde(default, deserialize_with = "whole_number")]
    pub maxlen: Option<i64>,
}

/// Replaces a topic's settings; answers the topic as it is now.
#[utoipa::path(put, path = "/api/v1/topics/{topic}", tag = "topics", operation_id = "putTopic", params(TopicPath), request_body = TopicSettings,
    responses((status = 200, body = TopicStats), (status = 400), (status = 401), (status = 403), (status = 503)))]
pub async fn put(
    state: web::Data<AdminState>,
    caller: Caller,
    topic: web::Path<TopicPath>,
    body: Object<TopicSettings>,
) -> ApiResult<HttpResponse> {
    state
        .actions()
        .set_topic_settings(&caller.who, &topic.topic, body.paused, body.maxlen)
        .await?;
    Ok(HttpResponse::Ok().json(one(&state, &topic.topic).await?))
}

/// The pause state of a topic after pause or resume.
#[derive(Debug, Serialize, ToSchema)]
pub struct PauseState {
    /// The topic.
    pub topic: String,
    /// Paused now.
    pub paused: bool,
}

async fn set_paused(
    state: &AdminState,
    caller: &Caller,
    topic: String,
    paused: bool,
) -> ApiResult<HttpResponse> {
    // Answers once in-flight batches of the topic have committed: after a 200 to a pause,
    // no replica publishes the topic.
    state
        .actions()
        .set_paused(&caller.who, &topic, paused)
        .await?;
    Ok(HttpResponse::Ok().json(PauseState { topic, paused }))
}

/// Pauses a topic (also one with no events yet): no replica publishes it until resumed.
#[utoipa::path(post, path = "/api/v1/topics/{topic}/pause", tag = "topics", operation_id = "pauseTopic", params(TopicPath),
    responses((status = 200, body = PauseState), (status = 400), (status = 401), (status = 403), (status = 503)))]
pub async fn pause(
    state: web::Data<AdminState>,
    caller: Caller,
    topic: web::Path<TopicPath>,
) -> ApiResult<HttpResponse> {
    set_paused(&state, &caller, topic.into_inner().topic, true).await
}

/// Resumes a topic; its backlog flows at once.
#[utoipa::path(post, path = "/api/v1/topics/{topic}/resume", tag = "topics", operation_id = "resumeTopic", params(TopicPath),
    responses((status = 200, body = PauseState), (status = 400), (status = 401), (status = 403), (status = 503)))]
pub async fn resume(
    state: web::Data<AdminState>,
    caller: Caller,
    topic: web::Path<TopicPath>,
) -> ApiResult<HttpResponse> {
    set_paused(&state, &caller, topic.into_inner().topic, false).await
}

/// What to replay: the topic's published events whose `published_at` lies in `[since, until)`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// RFC 3339 (`2026-12-04T10:00:00Z`) or a duration meaning that long ago (`15m`).
    #[schema(value_type = ReplayTime, example = "15m")]
    pub since: String,
    /// As `since`, after it (else 400); absent: up to now.
    #[schema(value_type = Option<ReplayTime>)]
    pub until: Option<String>,
}

/// A time of a replay: RFC 3339, or a duration meaning that long ago (a number and a unit
/// of humantime: `90s`, `15m`, `2h`, `3d`; several add up: `1h 30m`).
pub struct ReplayTime;

impl utoipa::PartialSchema for ReplayTime {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            KnownFormat, ObjectBuilder, OneOfBuilder, SchemaFormat, Type,
        };
        OneOfBuilder::new()
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
            )
            .item(
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(REPLAY_AGO_PATTERN)),
            )
            .into()
    }
}

impl ToSchema for ReplayTime {}

/// The durations the document promises a replay takes (humantime takes more spellings).
const REPLAY_AGO_PATTERN: &str = "^[1-9][0-9]{0,3}(s|m|h|d)( [1-9][0-9]{0,3}(s|m|h|d))*$";

/// How many events a replay published again.
#[derive(Debug, Serialize, ToSchema)]
pub struct Replayed {
    /// Events put back to be published again, as new entries in their original order.
    pub replayed: u64,
}

/// Publishes again, as new entries in their original order, the topic's published events
/// still kept in the table whose `published_at` lies in the range; recorded in the audit log.
#[utoipa::path(post, path = "/api/v1/topics/{topic}/replay", tag = "topics", operation_id = "replayTopic", params(TopicPath), request_body = ReplayRequest,
    responses((status = 200, body = Replayed), (status = 400), (status = 401), (status = 403), (status = 503)))]
pub async fn replay(
    state: web::Data<AdminState>,
    caller: Caller,
    topic: web::Path<TopicPath>,
    body: Object<ReplayRequest>,
) -> ApiResult<HttpResponse> {
    // The UI and the CLI forgive blanks around a time and an empty `until`; the API takes
    // only what its document describes.
    for (field, text) in [("since", Some(&body.since)), ("until", body.until.as_ref())] {
        if let Some(text) = text.filter(|t| t.is_empty() || t.trim() != t.as_str()) {
            return Err(ApiError::BadRequest(format!(
                "{field}: {text:?} is not an RFC 3339 time or a duration"
            )));
        }
    }
    let range = ReplayRange::parse(&body.since, body.until.as_deref())?;
    let replayed = state
        .actions()
        .replay(&state.publisher, &caller.who, &topic.topic, range)
        .await?;
    Ok(HttpResponse::Ok().json(Replayed { replayed }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_duration_the_document_promises_is_one_a_replay_takes() {
        let promised = regex::Regex::new(REPLAY_AGO_PATTERN).expect("pattern");
        for ago in [
            "1s",
            "90s",
            "15m",
            "2h",
            "3d",
            "9999d",
            "1h 30m",
            "1d 2h 3m 4s",
        ] {
            assert!(promised.is_match(ago), "{ago}");
            assert!(ReplayRange::parse(ago, None).is_ok(), "{ago}");
        }
        for not in ["0s", "15", "m", "1h30m", "15 m", " 1s"] {
            assert!(!promised.is_match(not), "{not}");
        }
    }
}
