//! `GET /api/v1/stats`: the backlog at a glance, in total and per topic.

use crate::admin::counts;
use actix_web::{web, HttpResponse};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiResult;
use crate::admin::AdminState;
use crate::db::outbox::stats;
use crate::db::DbError;

/// The answer of `GET /api/v1/stats`.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatsView {
    /// Events not yet published and not dead.
    pub pending: i64,
    /// Pending events a relay transaction holds right now (locked for publishing).
    pub in_flight: i64,
    /// Published events still in the table (retention deletes older ones).
    pub published: i64,
    /// Dead letters (not discarded).
    pub dead: i64,
    /// Dead letters discarded by an operator, awaiting retention.
    pub discarded: i64,
    /// Age of the oldest pending event (0 when none).
    pub oldest_pending_age_seconds: f64,
    /// Every topic with events or settings.
    pub topics: Vec<TopicStats>,
}

/// One topic's counts and state.
#[derive(Debug, Serialize, ToSchema)]
pub struct TopicStats {
    /// The topic.
    pub topic: String,
    /// Pending events.
    pub pending: i64,
    /// Published events still in the table.
    pub published: i64,
    /// Dead letters (not discarded).
    pub dead: i64,
    /// Discarded dead letters.
    pub discarded: i64,
    /// Paused: no replica publishes it.
    pub paused: bool,
    /// Its stream trimming (`MAXLEN ~`), if set.
    pub maxlen: Option<i64>,
}

impl From<stats::TopicCounts> for TopicStats {
    fn from(t: stats::TopicCounts) -> Self {
        TopicStats {
            topic: t.topic,
            pending: t.pending,
            published: t.published,
            dead: t.dead,
            discarded: t.discarded,
            paused: t.paused,
            maxlen: t.maxlen,
        }
    }
}

/// The backlog in total and per topic.
#[utoipa::path(get, path = "/api/v1/stats", tag = "stats", operation_id = "getStats",
    responses((status = 200, body = StatsView), (status = 401), (status = 503)))]
pub async fn get(state: web::Data<AdminState>) -> ApiResult<HttpResponse> {
    let (rows, flight) = state
        .db
        .unit(async |c| {
            let rows = counts::topic_counts(&state.published, c, None).await?;
            Ok::<_, DbError>((rows, stats::flight(c).await?))
        })
        .await?;
    let topics: Vec<TopicStats> = rows.into_iter().map(TopicStats::from).collect();
    let sum = |f: fn(&TopicStats) -> i64| topics.iter().map(f).sum::<i64>();
    Ok(HttpResponse::Ok().json(StatsView {
        pending: sum(|t| t.pending),
        in_flight: flight.in_flight,
        published: sum(|t| t.published),
        dead: sum(|t| t.dead),
        discarded: sum(|t| t.discarded),
        oldest_pending_age_seconds: flight.oldest_pending_age_seconds,
        topics,
    }))
}
