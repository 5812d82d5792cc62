//! Retakes `docs/screenshots/*.png`, one per page, on realistic data: several keyed topics,
//! poison events dead-lettered by real WRONGTYPE failures, their topic parking its keys (events
//! held), a paused topic, a consumer group with lag and pending entries, an audit log. Ignored by default: `make screenshots` runs it.

use std::time::Duration;

use super::browser::Browser;
use crate::support::*;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/screenshots");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "writes docs/screenshots; run with `make screenshots`"]
async fn screenshots() {
    let (_dir, config) = config_file(
        "[retry]\nmax_attempts = 2\n\n[[topics]]\nname = \"demo.poison\"\npark_on_dead = true\n",
    );
    let ui = TokenRelay::start("ui", &[("OUTBOX_CONFIG", config.as_str())]).await;
    let mut r = ui.redis.conn().await;
    let _: () = redis::cmd("SET")
        .arg(ui.redis.stream("demo.poison"))
        .arg("not a stream")
        .query_async(&mut r)
        .await
        .expect("poison key");
    ui.db
        .exec(
            "INSERT INTO outbox (topic, payload, partition_key, headers)
             SELECT (ARRAY['order.created','payment.captured','patient.admitted'])[1 + i % 3],
                    jsonb_build_object('order_id', 'ord-' || (i % 9), 'amount_cents', i * 137,
                        'currency', 'EUR', 'lines', jsonb_build_array(jsonb_build_object('sku', 'SKU-' || i, 'qty', 1 + i % 3))),
                    'ord-' || (i % 9),
                    jsonb_build_object('traceparent', '00-' || md5(i::text) || '-01', 'content-type', 'application/json')
             FROM generate_series(1, 60) AS i;
             INSERT INTO outbox (topic, payload, partition_key)
             SELECT 'demo.poison', jsonb_build_object('n', i), 'poison-' || i FROM generate_series(1, 3) AS i;",
        )
        .await;
    ui.db
        .wait_for(
            "SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL",
            3,
            Duration::from_secs(30),
        )
        .await;
    // Two later events of poison-1 wait behind its dead one.
    ui.db
        .exec("INSERT INTO outbox (topic, payload, partition_key) SELECT 'demo.poison', jsonb_build_object('n', i), 'poison-1' FROM generate_series(4, 5) AS i")
        .await;
    // A consumer group that has read five entries and acknowledged none.
    let stream = ui.redis.stream("order.created");
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg("billing")
        .arg("0")
        .query_async(&mut r)
        .await
        .expect("xgroup");
    let _: redis::Value = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg("billing")
        .arg("worker-1")
        .arg("COUNT")
        .arg(5)
        .arg("STREAMS")
        .arg(&stream)
        .arg(">")
        .query_async(&mut r)
        .await
        .expect("xreadgroup");
    // An audit entry naming an event, with a detail of some length.
    let res = ui
        .admin()
        .with("Idempotency-Key", "checkout-4711-2026-12-04T10:00:00Z")
        .post(
            "/api/v1/events",
            Some(r#"{"topic":"order.created","payload":{"order_id":"ord-4711"},"partition_key":"customer-4711/order-2026-12-04"}"#),
        );
    assert_eq!(res.status, 201, "{}", res.body);
    let (session, csrf) = ui.login(ADMIN_TOKEN);
    let res = session.post_form("/topics/patient.admitted/pause", &form(&[("csrf", &csrf)]));
    assert_eq!(res.status, 303);
    ui.db
        .exec("INSERT INTO outbox (topic, payload, partition_key) SELECT 'patient.admitted', jsonb_build_object('patient', 'p-' || i), 'p-' || i FROM generate_series(1, 4) AS i")
        .await;
    // Wait until a heartbeat has reported the throughput (every event published so far).
    ui.db
        .wait_for(
            "SELECT (sum(published_last_minute) >= 60)::int FROM outbox_replicas",
            1,
            Duration::from_secs(30),
        )
        .await;

    let b = Browser::start().await;
    let base = ui.base();
    b.goto(&format!("{base}/login")).await;
    b.find("#token").await;
    b.screenshot(&format!("{DIR}/login.png")).await;
    b.login(&base, ADMIN_TOKEN).await;
    b.wait_text("Topics", Duration::from_secs(10)).await;
    b.screenshot(&format!("{DIR}/overview.png")).await;
    let keyed = ui
        .db
        .scalar("SELECT seq FROM outbox WHERE topic = 'order.created' AND partition_key = 'ord-3' ORDER BY seq OFFSET 1 LIMIT 1")
        .await;
    for (name, path) in [
        ("events", "/events".to_string()),
        ("dead", "/dead".into()),
        ("streams", "/streams".into()),
        ("replicas", "/replicas".into()),
        ("audit", "/audit".into()),
        ("replay", "/replay?topic=order.created&since=1h".into()),
        ("event", format!("/events?seq={keyed}")),
    ] {
        let url = if name == "event" {
            let id = event_id(&ui, keyed).await;
            format!("{base}/events/{id}")
        } else {
            format!("{base}{path}")
        };
        b.goto(&url).await;
        b.find("main h1").await;
        b.screenshot(&format!("{DIR}/{name}.png")).await;
    }
    b.goto(&format!("{base}/dead/confirm?action=retry")).await;
    b.find("#confirm").await;
    b.screenshot(&format!("{DIR}/dead-confirm.png")).await;
    b.client
        .set_window_size(390, 844)
        .await
        .expect("phone size");
    b.goto(&format!("{base}/")).await;
    b.find("#topics").await;
    b.screenshot(&format!("{DIR}/overview-phone.png")).await;
    b.close().await;
}

async fn event_id(ui: &TokenRelay, seq: i64) -> String {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Id {
        #[diesel(sql_type = diesel::sql_types::Text)]
        id: String,
    }
    let mut c = ui.db.conn().await;
    let row: Id = diesel::sql_query("SELECT id::text AS id FROM outbox WHERE seq = $1")
        .bind::<diesel::sql_types::BigInt, _>(seq)
        .get_result(&mut c)
        .await
        .expect("event id");
    row.id
}
