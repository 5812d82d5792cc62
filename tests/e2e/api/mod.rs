//! The admin JSON API (`/api/v1`) end to end, on a real relay process with tokens set
//! ([`TokenRelay`]): auth, input validation, keyset pagination, idempotent enqueue,
//! dead-letter steering that really reaches Redis, pause and resume, audit, stats, and the
//! OpenAPI document.

use std::time::Duration;

use crate::support::TokenRelay;

mod contract;
mod outside;
pub(crate) mod steering;
mod validation;

/// How long an API test waits for the relay to publish.
const WAIT: Duration = Duration::from_secs(20);

/// The audit actions, oldest first.
fn audit_actions(api: &TokenRelay) -> Vec<String> {
    let page = api.admin().get("/api/v1/audit?limit=1000");
    let mut actions: Vec<String> = page.json["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["action"].as_str().unwrap_or_default().to_string())
        .collect();
    actions.reverse();
    actions
}

/// Inserts a dead event with an empty payload (as the relay would leave it); returns its id.
async fn dead_event(api: &TokenRelay, topic: &str, key: Option<&str>, error: &str) -> String {
    api.db.dead_event(topic, key, "'{}'", error).await
}
