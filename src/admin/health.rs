//! `/healthz` (the process is up), `/readyz` (Postgres and Redis answer now, the last claim
//! cycle succeeded, and the process is not stopping) and `/metrics` (Prometheus text format). Open to all, no token.

use std::time::Duration;

use actix_web::{web, HttpResponse};
use diesel_async::RunQueryDsl;

use super::AdminState;

/// 200 while the process runs.
pub async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(serde_json::json!({"status": "ok"}))
}

async fn postgres_ok(state: &AdminState) -> bool {
    let check = async {
        let mut conn = state.pool.get().await.ok()?;
        diesel::sql_query("SELECT 1").execute(&mut conn).await.ok()
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), check).await,
        Ok(Some(_))
    )
}

/// 200 only while Postgres and Redis are reachable, else 503 with what is missing.
pub async fn readyz(state: web::Data<AdminState>) -> HttpResponse {
    let (postgres, redis) = futures::join!(postgres_ok(&state), state.publisher.ping());
    let stopping = state.health.stopping();
    let relay = state.health.relay_ok();
    let body = serde_json::json!({
        "postgres": postgres,
        "redis": redis,
        "relay": relay,
        "stopping": stopping,
    });
    if postgres && redis && relay && !stopping {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}

/// Prometheus text exposition.
pub async fn metrics(state: web::Data<AdminState>) -> HttpResponse {
    let body = state
        .metrics
        .as_ref()
        .map(|m| m.render())
        .unwrap_or_default();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(body)
}
