//! What an operator does in the browser: read the overview, retry a dead event, pause and
//! resume a topic, discard a consumer group's parked key from the Streams page; and what must
//! never happen: a payload running as script, a read-only login or a forged form changing
//! anything.

use std::time::Duration;

use super::browser::Browser;
use crate::support::*;

const WAIT: Duration = Duration::from_secs(15);

/// Inserts a dead event of key `k1` (as the relay would leave it) and returns its id.
async fn dead_event(ui: &TokenRelay, topic: &str, payload_sql: &str, error: &str) -> String {
    ui.db
        .dead_event(topic, Some("k1"), payload_sql, error)
        .await
}

/// No topic paused, the one dead event still dead: a refused post changed nothing.
async fn assert_unchanged(ui: &TokenRelay) {
    let paused = "SELECT count(*) FROM outbox_topics WHERE paused";
    assert_eq!(ui.db.scalar(paused).await, 0);
    let dead = "SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL";
    assert_eq!(ui.db.scalar(dead).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_counters_match_the_database() {
    let ui = TokenRelay::start("ui", &[]).await;
    ui.db
        .exec("INSERT INTO outbox_topics (topic, paused) VALUES ('held', true)")
        .await;
    ui.db
        .exec("INSERT INTO outbox (topic, payload) SELECT 'held', '{}' FROM generate_series(1, 7)")
        .await;
    ui.db
        .exec(
            "INSERT INTO outbox (topic, payload) SELECT 'flows', '{}' FROM generate_series(1, 12)",
        )
        .await;
    dead_event(&ui, "broken", "'{}'", "WRONGTYPE Operation against a key").await;
    dead_event(&ui, "broken", "'{}'", "WRONGTYPE Operation against a key").await;
    ui.db
        .wait_for(
            "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL",
            12,
            WAIT,
        )
        .await;
    let b = Browser::start().await;
    b.login(&ui.base(), ADMIN_TOKEN).await;
    b.wait_text("Topics", WAIT).await;
    assert_eq!(b.text("#pending").await, ui.db.pending().await.to_string());
    assert_eq!(b.text("#pending").await, "7");
    assert_eq!(b.text("#published").await, "12");
    assert_eq!(b.text("#dead").await, "2");
    assert_eq!(b.text("#in-flight").await, "0");
    assert_eq!(b.text("tr[data-topic=held] .pill").await, "paused");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_a_dead_event_after_the_confirmation_and_see_it_in_its_stream() {
    let ui = TokenRelay::start("ui", &[]).await;
    let id = dead_event(&ui, "retry.me", "'{\"n\": 1}'", "WRONGTYPE earlier").await;
    let b = Browser::start().await;
    b.login(&ui.base(), ADMIN_TOKEN).await;
    b.goto(&format!("{}/events/{id}", ui.base())).await;
    b.click("#retry").await;
    // The dry run first: it names the count, and nothing has changed yet.
    assert_eq!(b.text("#confirm-count").await, "1");
    assert_eq!(
        ui.db
            .scalar("SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL")
            .await,
        1
    );
    b.click("#confirm").await;
    b.wait_text("Retried 1 dead letter", WAIT).await;
    ui.db
        .wait_for(
            "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL",
            1,
            WAIT,
        )
        .await;
    let entries = ui.redis.entries("retry.me").await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["id"], id);
    let who = ui
        .db
        .scalar("SELECT count(*) FROM outbox_audit WHERE who = 'ui:admin' AND action = 'retry'")
        .await;
    assert_eq!(who, 1, "the audit log names the UI session");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_a_topic_from_the_overview() {
    let ui = TokenRelay::start("ui", &[]).await;
    ui.db
        .exec(
            "INSERT INTO outbox (topic, payload) SELECT 'orders', '{}' FROM generate_series(1, 3)",
        )
        .await;
    ui.db
        .wait_for(
            "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL",
            3,
            WAIT,
        )
        .await;
    let b = Browser::start().await;
    b.login(&ui.base(), ADMIN_TOKEN).await;
    b.click("tr[data-topic=orders] button.pause").await;
    b.find("tr[data-topic=orders] button.resume").await;
    assert_eq!(
        ui.db
            .scalar("SELECT count(*) FROM outbox_topics WHERE topic = 'orders' AND paused")
            .await,
        1
    );
    ui.db
        .exec(
            "INSERT INTO outbox (topic, payload) SELECT 'orders', '{}' FROM generate_series(1, 5)",
        )
        .await;
    ui.db.wait_for_a_claim_cycle(WAIT).await;
    assert_eq!(ui.db.pending().await, 5, "a paused topic is held");
    assert_eq!(ui.redis.xlen("orders").await, 3);
    b.click("tr[data-topic=orders] button.resume").await;
    b.find("tr[data-topic=orders] button.pause").await;
    ui.db.wait_until_published(WAIT).await;
    assert_eq!(ui.redis.xlen("orders").await, 8);
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_payload_shows_as_text_and_never_runs() {
    let ui = TokenRelay::start("ui", &[]).await;
    let script = "<script>window.__pwned=1</script>";
    let id = dead_event(
        &ui,
        "xss",
        &format!("to_jsonb('{script}'::text)"),
        "<img src=x onerror=\"window.__pwned=2\">",
    )
    .await;
    let b = Browser::start().await;
    b.login(&ui.base(), ADMIN_TOKEN).await;
    for page in [
        format!("/events/{id}"),
        "/events".into(),
        "/dead".into(),
        "/".into(),
    ] {
        b.goto(&format!("{}{page}", ui.base())).await;
        b.find("main").await;
        let pwned = b
            .client
            .execute("return typeof window.__pwned", vec![])
            .await
            .expect("script");
        assert_eq!(pwned, "undefined", "a payload ran as script on {page}");
    }
    b.goto(&format!("{}/events/{id}", ui.base())).await;
    assert!(
        b.text("#payload").await.contains(script),
        "the payload shows as text"
    );
    assert!(b.text("#last-error").await.contains("onerror"));
    assert_eq!(b.count("main script, main img").await, 0);
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_login_sees_no_action_buttons_and_a_forged_post_gets_403() {
    let ui = TokenRelay::start("ui", &[]).await;
    ui.db
        .exec("INSERT INTO outbox (topic, payload) VALUES ('orders', '{}')")
        .await;
    let id = dead_event(&ui, "orders", "'{}'", "boom").await;
    let b = Browser::start().await;
    b.login(&ui.base(), READ_ONLY_TOKEN).await;
    b.wait_text("Topics", WAIT).await;
    assert_eq!(b.text(".badge").await, "viewer");
    b.find("tr[data-topic=orders]").await;
    assert_eq!(
        b.count("main form, main button").await,
        0,
        "no action on the overview"
    );
    b.goto(&format!("{}/events/{id}", ui.base())).await;
    b.find("#event-id").await;
    assert_eq!(b.count("#retry, #discard").await, 0);
    b.goto(&format!("{}/dead", ui.base())).await;
    b.find("#groups").await;
    assert_eq!(b.count("a[href^='/dead/confirm']").await, 0);
    b.close().await;
    // Forged posts with the viewer's own valid cookie and CSRF token: refused.
    let (session, csrf) = ui.login(READ_ONLY_TOKEN);
    let res = session.post_form("/topics/orders/pause", &form(&[("csrf", &csrf)]));
    assert_eq!(res.status, 403);
    let body = form(&[("csrf", &csrf), ("action", "retry"), ("id", &id)]);
    assert_eq!(session.post_form("/dead/apply", &body).status, 403);
    assert_unchanged(&ui).await;
    assert_eq!(ui.db.scalar("SELECT count(*) FROM outbox_audit").await, 0);
}

#[tokio::test]
async fn state_changing_posts_without_the_csrf_token_are_refused() {
    let ui = TokenRelay::start("ui", &[]).await;
    let id = dead_event(&ui, "orders", "'{}'", "boom").await;
    let (session, csrf) = ui.login(ADMIN_TOKEN);
    for (path, body) in [
        ("/topics/orders/pause", String::new()),
        ("/topics/orders/pause", form(&[("csrf", "forged")])),
        ("/dead/apply", form(&[("action", "retry"), ("id", &id)])),
        ("/dead/apply", form(&[("action", "discard")])),
    ] {
        let res = session.post_form(path, &body);
        assert_eq!(res.status, 403, "{path} {body}");
    }
    assert_unchanged(&ui).await;
    // The same posts with the token work.
    let res = session.post_form("/topics/orders/pause", &form(&[("csrf", &csrf)]));
    assert_eq!(res.status, 303);
    assert_eq!(
        ui.db
            .scalar("SELECT count(*) FROM outbox_topics WHERE paused")
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_only_the_dead_letters_that_died_within_a_time_range() {
    let ui = TokenRelay::start("ui", &[]).await;
    for _ in 0..3 {
        dead_event(&ui, "ranged", "'{}'", "WRONGTYPE then").await;
    }
    // Two died on the night of the 1st, one on the 2nd (UTC).
    ui.db
        .exec(
            "UPDATE outbox SET dead_at = t.at FROM (
                 SELECT id, ('2026-12-01 22:00+00'::timestamptz + (row_number() OVER (ORDER BY seq)
                     * interval '1 hour')) AS at FROM outbox) t
             WHERE outbox.id = t.id",
        )
        .await;
    let b = Browser::start().await;
    b.login(&ui.base(), ADMIN_TOKEN).await;
    b.goto(&format!(
        "{}/dead?from=2026-12-01T22:30&to=2026-12-02T00:30",
        ui.base()
    ))
    .await;
    assert_eq!(b.text("#dead-total").await, "2");
    assert_eq!(
        b.count("table.events tbody a[href^='/events/']").await,
        2,
        "the list shows what the filter matches"
    );
    assert_eq!(
        b.count("form.filters input[type=datetime-local][name=from]")
            .await,
        1
    );
    b.click("a[href^='/dead/confirm?action=retry']").await;
    assert_eq!(b.text("#confirm-count").await, "2");
    b.click("#confirm").await;
    b.wait_text("Retried 2 dead letter", WAIT).await;
    let late = "SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL
                AND dead_at >= '2026-12-02 01:00+00'";
    assert_eq!(
        ui.db.scalar(late).await,
        1,
        "the one outside the range stays dead"
    );
    assert_eq!(
        ui.db
            .scalar("SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL")
            .await,
        1
    );
    b.close().await;
    // A time the server cannot read is a clear 400, not an empty list.
    let (session, _) = ui.login(ADMIN_TOKEN);
    let res = session.get("/dead?from=yesterday");
    assert_eq!(res.status, 400);
    assert!(res.body.contains("not a time"), "{}", res.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_a_consumer_groups_parked_key_from_the_streams_page() {
    use outbox_core::parked::{self, Held, Parked};
    let ui = TokenRelay::start("ui", &[]).await;
    ui.db
        .exec("INSERT INTO outbox (topic, payload) VALUES ('orders', '{}')")
        .await;
    ui.db.wait_until_published(WAIT).await;
    // A group whose consumers parked key k1 two minutes ago, holding two entries.
    let stream = ui.redis.stream("orders");
    let mut c = ui.redis.conn().await;
    redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg("billing")
        .arg("0")
        .query_async::<()>(&mut c)
        .await
        .expect("group");
    let hash = parked::parked_key(&ui.redis.prefix, "orders", "billing");
    let list = parked::held_key(&ui.redis.prefix, "orders", "billing", "k1");
    let dead_id = uuid::Uuid::new_v4().to_string();
    let state = Parked {
        dead_id: dead_id.clone(),
        dead_entry: "1-0".into(),
        stream: stream.clone(),
        since_ms: chrono::Utc::now().timestamp_millis() - 120_000,
        released: false,
    };
    assert!(parked::park(&mut c, &hash, "k1", &state)
        .await
        .expect("park"));
    for id in ["5-0", "6-0"] {
        let held = Held {
            stream: stream.clone(),
            id: id.into(),
            fields: vec![("id".into(), uuid::Uuid::new_v4().to_string())],
        };
        assert!(parked::hold(&mut c, &hash, &list, "k1", &held)
            .await
            .expect("hold"));
    }

    let b = Browser::start().await;
    b.login(&ui.base(), ADMIN_TOKEN).await;
    b.goto(&format!("{}/streams", ui.base())).await;
    b.wait_text(&dead_id, WAIT).await;
    let row = b.text("#group-parked tbody tr").await;
    assert!(
        row.contains("billing") && row.contains("k1") && row.contains('2'),
        "{row}"
    );
    b.click("#group-parked button.small:not(.primary)").await;
    b.wait_text("No parked key.", WAIT).await;
    let now: Option<String> = redis::cmd("HGET")
        .arg(&hash)
        .arg("k1")
        .query_async(&mut c)
        .await
        .expect("hget");
    let now: Parked =
        serde_json::from_str(&now.expect("still there until drained")).expect("state");
    assert!(now.released, "released for the group's consumers to drain");
    let audit = ui.admin().get("/api/v1/audit");
    assert!(audit.body.contains("discard_parked"), "{}", audit.body);
    b.close().await;
}
