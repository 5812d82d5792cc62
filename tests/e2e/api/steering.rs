//! Steering that users rely on reaching Redis: retry of dead letters (one and in bulk),
//! discard (never retried, deleted by retention), pause and resume; each audited.

use std::time::Duration;

use super::{audit_actions, dead_event, WAIT};
use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn retry_of_a_dead_event_publishes_it_into_its_stream() {
    let api = TokenRelay::start("api-retry", &[]).await;
    let admin = api.admin();
    let id = dead_event(
        &api,
        "order.created",
        Some("o-1"),
        "WRONGTYPE Operation against a key",
    )
    .await;
    assert_eq!(
        api.redis.xlen("order.created").await,
        0,
        "dead letters are not published"
    );
    let r = admin.post(&format!("/api/v1/events/{id}/retry"), None);
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["status"], "pending");
    api.db.wait_published("order.created", 1, WAIT).await;
    let entries = api.redis.entries("order.created").await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["id"], id);
    let event = admin.get(&format!("/api/v1/events/{id}")).json;
    assert_eq!(
        (event["attempts"].as_i64(), event["dead_at"].is_null()),
        (Some(0), true)
    );
    // Published now: not dead, so a second retry is a conflict; an unknown id is 404.
    assert_eq!(
        admin
            .post(&format!("/api/v1/events/{id}/retry"), None)
            .status,
        409
    );
    let unknown = admin.post(
        "/api/v1/events/00000000-0000-0000-0000-000000000001/retry",
        None,
    );
    assert_eq!(unknown.status, 404);
    let audit = admin.get("/api/v1/audit").json;
    let entry = &audit["entries"][0];
    assert_eq!(
        (entry["action"].as_str(), entry["target"].as_str()),
        (Some("retry"), Some(id.as_str()))
    );
    assert_eq!(entry["who"], "token:admin");
    assert_eq!(entry["detail"]["attempts"], 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_holds_a_topic_and_resume_releases_it() {
    pause_holds_and_resume_releases(&TokenRelay::start("api-pause", &[]).await).await;
}

/// Through `api`'s admin API: a paused topic (one with no events yet) is not published while
/// another is; resumed, it is; each step audited.
pub(crate) async fn pause_holds_and_resume_releases(api: &TokenRelay) {
    let admin = api.admin();
    // A topic with no events yet can be paused.
    let paused = admin.post("/api/v1/topics/order.shipped/pause", None);
    assert_eq!(paused.status, 200);
    assert_eq!(paused.json["paused"], true);
    let body = r#"{"topic":"order.shipped","payload":{"n":1}}"#;
    assert_eq!(admin.post("/api/v1/events", Some(body)).status, 201);
    let other = r#"{"topic":"order.other","payload":{"n":2}}"#;
    assert_eq!(admin.post("/api/v1/events", Some(other)).status, 201);
    // Enqueued after order.shipped: the claim cycle that published it saw order.shipped.
    api.db.wait_published("order.other", 1, WAIT).await;
    assert_eq!(
        api.redis.xlen("order.shipped").await,
        0,
        "paused: not published"
    );
    let resumed = admin.post("/api/v1/topics/order.shipped/resume", None);
    assert_eq!(
        (resumed.status, resumed.json["paused"].as_bool()),
        (200, Some(false))
    );
    api.db.wait_published("order.shipped", 1, WAIT).await;
    assert_eq!(api.redis.xlen("order.shipped").await, 1);
    assert_eq!(
        audit_actions(api),
        vec!["pause", "enqueue", "enqueue", "resume"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dead_letters_group_by_error_and_bulk_steering_takes_only_the_filter() {
    let api = TokenRelay::start("api-bulk", &[]).await;
    let admin = api.admin();
    let a = dead_event(&api, "pay", Some("p1"), "timeout after 5012 ms on 10.0.0.7").await;
    let b = dead_event(&api, "pay", Some("p2"), "timeout after 4990 ms on 10.0.0.9").await;
    let c = dead_event(&api, "pay", Some("p3"), "WRONGTYPE Operation against a key").await;
    let groups = admin.get("/api/v1/dead/groups").json;
    assert_eq!(groups[0]["count"], 2);
    assert_eq!(
        groups[0]["fingerprint"],
        "timeout after <n> ms on <n>.<n>.<n>.<n>"
    );
    assert_eq!(groups[1]["count"], 1);

    // The default is a dry run: it counts and changes nothing.
    let filter = r#"{"filter":{"error":"TIMEOUT"}}"#;
    let dry = admin.post("/api/v1/dead/discard", Some(filter));
    assert_eq!(
        (
            dry.status,
            dry.json["count"].as_i64(),
            dry.json["dry_run"].as_bool()
        ),
        (200, Some(2), Some(true))
    );
    assert_eq!(
        api.db
            .scalar("SELECT count(*) FROM outbox WHERE discarded_at IS NOT NULL")
            .await,
        0
    );
    let done = admin.post(
        "/api/v1/dead/discard",
        Some(r#"{"filter":{"error":"TIMEOUT"},"dry_run":false}"#),
    );
    assert_eq!(
        (done.json["count"].as_i64(), done.json["dry_run"].as_bool()),
        (Some(2), Some(false))
    );
    for id in [&a, &b] {
        let e = admin.get(&format!("/api/v1/events/{id}")).json;
        assert_eq!(e["status"], "discarded");
        // Discarded is final: it is never retried.
        assert_eq!(
            admin
                .post(&format!("/api/v1/events/{id}/retry"), None)
                .status,
            409
        );
    }
    let all = admin.post("/api/v1/dead/retry", Some(r#"{"dry_run":false}"#));
    assert_eq!(all.json["count"], 1, "only the one not discarded");
    api.db.wait_published("pay", 1, WAIT).await;
    let entries = api.redis.entries("pay").await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["id"], c);
    let stats = admin.get("/api/v1/stats").json;
    assert_eq!(
        (stats["dead"].as_i64(), stats["discarded"].as_i64()),
        (Some(0), Some(2))
    );
    assert_eq!(audit_actions(&api), vec!["bulk_discard", "bulk_retry"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_deletes_discarded_dead_letters_but_keeps_open_ones() {
    let api = TokenRelay::start(
        "api-discard-retention",
        &[
            ("OUTBOX__RETENTION__PUBLISHED_FOR", "1s"),
            ("OUTBOX__RETENTION__INTERVAL", "300ms"),
        ],
    )
    .await;
    let admin = api.admin();
    let gone = dead_event(&api, "t", None, "boom 1").await;
    let kept = dead_event(&api, "u", None, "boom 2").await;
    let r = admin.post(&format!("/api/v1/events/{gone}/discard"), None);
    assert_eq!(
        (r.status, r.json["status"].as_str()),
        (200, Some("discarded"))
    );
    api.db
        .wait_for("SELECT count(*) FROM outbox", 1, Duration::from_secs(20))
        .await;
    assert_eq!(admin.get(&format!("/api/v1/events/{gone}")).status, 404);
    assert_eq!(
        admin.get(&format!("/api/v1/events/{kept}")).json["status"],
        "dead"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_log_is_keyset_paginated() {
    let api = TokenRelay::start("api-audit", &[]).await;
    let admin = api.admin();
    for n in 0..7 {
        assert_eq!(
            admin
                .post(&format!("/api/v1/topics/t{n}/pause"), None)
                .status,
            200
        );
    }
    let mut targets = Vec::new();
    let mut path = "/api/v1/audit?limit=3".to_string();
    loop {
        let page = admin.get(&path).json;
        for e in page["entries"].as_array().expect("entries") {
            targets.push(e["target"].as_str().expect("target").to_string());
        }
        match page["next"].as_str() {
            Some(c) => path = format!("/api/v1/audit?limit=3&after={c}"),
            None => break,
        }
    }
    let want: Vec<String> = (0..7).rev().map(|n| format!("t{n}")).collect();
    assert_eq!(targets, want, "newest first, each once");
}
