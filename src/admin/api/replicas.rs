//! `GET /api/v1/replicas`: the relay replicas alive now, from their heartbeats.

use actix_web::{web, HttpResponse};
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiResult;
use crate::admin::AdminState;
use crate::db::replicas;

/// Heartbeats missed before a replica no longer counts as alive: one late beat is jitter,
/// three are a replica that is gone or stuck.
const MISSED_BEATS: u32 = 3;

/// How recent a heartbeat must be for its replica to count as alive (the UI uses it too).
pub fn alive_ms(state: &AdminState) -> i64 {
    i64::try_from((state.heartbeat_interval * MISSED_BEATS).as_millis()).unwrap_or(i64::MAX)
}

/// One live replica.
#[derive(Debug, Serialize, ToSchema)]
pub struct ReplicaView {
    /// Its `instance_id` (the pod name on Kubernetes).
    pub instance_id: String,
    /// Its binary's version.
    pub version: String,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// Its last heartbeat.
    pub last_seen_at: DateTime<Utc>,
}

/// Replicas whose last heartbeat is recent (within three heartbeat intervals).
#[utoipa::path(get, path = "/api/v1/replicas", tag = "replicas", operation_id = "listReplicas",
    responses((status = 200, body = [ReplicaView]), (status = 401), (status = 503)))]
pub async fn list(state: web::Data<AdminState>) -> ApiResult<HttpResponse> {
    let alive = alive_ms(&state);
    let rows = state
        .db
        .unit(async |c| replicas::alive(c, alive).await)
        .await?;
    let view: Vec<ReplicaView> = rows
        .into_iter()
        .map(|r| ReplicaView {
            instance_id: r.instance_id,
            version: r.version,
            started_at: r.started_at,
            last_seen_at: r.last_seen_at,
        })
        .collect();
    Ok(HttpResponse::Ok().json(view))
}
