//! `/healthz` (the process relays: no actor lost, the claim loop not stalled), `/readyz`
//! (Postgres and Redis answered the last background check, the last claim cycle succeeded, and
//! the process is not stopping) and `/metrics` (Prometheus text format). Open to all, no token.
//! Both probes answer from `Health` without waiting on any server.

use actix_web::{web, HttpResponse};

use super::AdminState;
use crate::relay::health::Unhealthy;

/// 200 while the process relays; 503 when it should be restarted.
pub async fn healthz(state: web::Data<AdminState>) -> HttpResponse {
    match state.health.liveness(state.stall_after) {
        Ok(()) => HttpResponse::Ok().json(serde_json::json!({"status": "ok"})),
        Err(Unhealthy::Stalled {
            silent_for,
            pending,
        }) => HttpResponse::ServiceUnavailable().json(serde_json::json!({
            "status": "stalled",
            "seconds_since_last_cycle": silent_for.as_secs(),
            "pending": pending,
        })),
        Err(Unhealthy::ActorLost(actor)) => HttpResponse::ServiceUnavailable()
            .json(serde_json::json!({"status": "actor lost", "actor": actor.as_str()})),
    }
}

/// 200 only while Postgres and Redis are reachable, else 503 with what is missing.
pub async fn readyz(state: web::Data<AdminState>) -> HttpResponse {
    let readiness = state.health.readiness();
    if readiness.ready() {
        HttpResponse::Ok().json(readiness)
    } else {
        HttpResponse::ServiceUnavailable().json(readiness)
    }
}

/// Prometheus text exposition.
pub async fn metrics(state: web::Data<AdminState>) -> HttpResponse {
    let body = state
        .metrics
        .as_ref()
        .map(crate::telemetry::scrape)
        .unwrap_or_default();
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(body)
}
