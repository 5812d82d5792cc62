//! The contract routes: auth, listing with keyset pagination, idempotent enqueue, stats,
//! replicas, topics, the per-key timeline, and the OpenAPI document.

use std::collections::HashSet;
use std::time::Duration;

use super::{dead_event, WAIT};
use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn auth_needs_the_token_and_read_only_cannot_act() {
    let api = TokenRelay::start("api-auth", &[]).await;
    let admin = api.admin();
    let none = api.anonymous().get("/api/v1/stats");
    assert_eq!(none.status, 401);
    assert!(none.json["error"].is_string());
    assert!(none
        .header("www-authenticate")
        .is_some_and(|v| v.to_lowercase().starts_with("bearer")));
    let wrong = api.anonymous().bearer("s3cret-admiN").get("/api/v1/stats");
    assert_eq!(wrong.status, 401);
    assert_eq!(admin.get("/api/v1/stats").status, 200);
    assert_eq!(api.viewer().call("GET", "/api/v1/events", None).status, 200);
    // Every state-changing route refuses the read-only token, before touching anything.
    let body = r#"{"topic":"x","payload":{}}"#;
    for (method, path, body) in [
        ("POST", "/api/v1/events", Some(body)),
        (
            "POST",
            "/api/v1/events/00000000-0000-0000-0000-000000000000/retry",
            None,
        ),
        (
            "POST",
            "/api/v1/events/00000000-0000-0000-0000-000000000000/discard",
            None,
        ),
        ("POST", "/api/v1/dead/retry", Some("{}")),
        ("POST", "/api/v1/dead/discard", Some("{}")),
        ("POST", "/api/v1/topics/x/pause", None),
        ("POST", "/api/v1/topics/x/resume", None),
        (
            "PUT",
            "/api/v1/topics/x",
            Some(r#"{"paused":true,"maxlen":null}"#),
        ),
    ] {
        let r = api.viewer().call(method, path, body);
        assert_eq!(r.status, 403, "{method} {path}");
        assert!(r.json["error"].is_string());
        let r = api.anonymous().call(method, path, body);
        assert_eq!(r.status, 401, "{method} {path} without a token");
    }
    assert_eq!(api.db.scalar("SELECT count(*) FROM outbox").await, 0);
    assert_eq!(api.db.scalar("SELECT count(*) FROM outbox_topics").await, 0);
    // The health routes stay open.
    assert_eq!(api.anonymous().status("/healthz"), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn keyset_pagination_walks_every_row_once() {
    let api = TokenRelay::start("api-pages", &[]).await;
    let admin = api.admin();
    insert_events(&api.db, Events::varied().n(1..=237).topics(3).keys(10)).await;
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &after {
            Some(c) => format!("/api/v1/events?limit=50&after={c}"),
            None => "/api/v1/events?limit=50".to_string(),
        };
        let page = admin.get(&path);
        assert_eq!(page.status, 200, "{:?}", page.json);
        for e in page.json["events"].as_array().expect("events") {
            seen.push(e["id"].as_str().expect("id").to_string());
        }
        pages += 1;
        if pages == 2 {
            // New events arrive while walking: they are newer than the cursor, so they
            // neither repeat nor push rows of later pages out.
            insert_events(&api.db, Events::varied().n(1..=20).topics(3).keys(10)).await;
        }
        match page.json["next"].as_str() {
            Some(c) => after = Some(c.to_string()),
            None => break,
        }
    }
    let unique: HashSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "no event twice");
    assert_eq!(seen.len(), 237, "every event of the walk's start, once");
    assert_eq!(pages, 5);

    // A topic filter walks only that topic; the default limit is 50.
    let t1 = admin.get("/api/v1/events?topic=t1");
    let events = t1.json["events"].as_array().expect("events");
    assert_eq!(events.len(), 50);
    assert!(events.iter().all(|e| e["topic"] == "t1"));
    let key = admin.get("/api/v1/events?key=k3&limit=1000");
    let events = key.json["events"].as_array().expect("events");
    assert!(!events.is_empty() && events.iter().all(|e| e["partition_key"] == "k3"));
    assert!(key.json["next"].is_null());
}

#[tokio::test(flavor = "multi_thread")]
async fn enqueue_is_idempotent_per_key_and_events_reach_their_stream() {
    let api = TokenRelay::start("api-idem", &[]).await;
    let admin = api.admin();
    let keyed = admin.with("Idempotency-Key", "order-42-created");
    let body = r#"{"topic":"order.created","payload":{"order":42,"total":"9.90"},"partition_key":"order-42","headers":{"trace":"t1"}}"#;
    let first = keyed.post("/api/v1/events", Some(body));
    assert_eq!(first.status, 201, "{:?}", first.json);
    let id = first.json["id"].as_str().expect("id").to_string();
    // The same body with its keys in another order is the same request.
    let same = r#"{"payload":{"total":"9.90","order":42},"headers":{"trace":"t1"},"topic":"order.created","partition_key":"order-42"}"#;
    let again = keyed.post("/api/v1/events", Some(same));
    assert_eq!(again.status, 200);
    assert_eq!(again.json["id"], id.as_str());
    let other = r#"{"topic":"order.created","payload":{"order":43}}"#;
    let reused = keyed.post("/api/v1/events", Some(other));
    assert_eq!(reused.status, 422);
    assert!(reused.json["error"].is_string());
    assert_eq!(api.db.scalar("SELECT count(*) FROM outbox").await, 1);
    // Without a key every POST is a new event.
    assert_eq!(admin.post("/api/v1/events", Some(other)).status, 201);
    assert_eq!(admin.post("/api/v1/events", Some(other)).status, 201);
    assert_eq!(api.db.scalar("SELECT count(*) FROM outbox").await, 3);

    api.db.wait_published("order.created", 3, WAIT).await;
    let entries = api.redis.entries("order.created").await;
    let entry = entries
        .iter()
        .find(|e| e["id"] == id)
        .expect("in the stream");
    assert_eq!(entry["key"], "order-42");
    assert_eq!(entry["headers"], r#"{"trace": "t1"}"#);
    let view = admin.get(&format!("/api/v1/events/{id}"));
    assert_eq!(view.status, 200);
    assert_eq!(view.json["status"], "published");
    assert_eq!(view.json["payload"]["order"], 42);
    assert!(view.json["published_at"].is_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_requests_with_one_key_store_one_event() {
    let api = TokenRelay::start("api-race", &[]).await;
    let admin = api.admin();
    let body = r#"{"topic":"payment.captured","payload":{"amount":100}}"#;
    let keyed = admin.with("Idempotency-Key", "pay-1");
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let keyed = keyed.clone();
            std::thread::spawn(move || keyed.post("/api/v1/events", Some(body)))
        })
        .collect();
    let answers: Vec<Resp> = threads
        .into_iter()
        .map(|t| t.join().expect("thread"))
        .collect();
    let created = answers.iter().filter(|r| r.status == 201).count();
    assert_eq!(created, 1, "{answers:?}");
    let ids: HashSet<&str> = answers
        .iter()
        .filter_map(|r| r.json["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 1, "every success names the same event");
    assert!(answers.iter().all(|r| [200, 201, 409].contains(&r.status)));
    assert_eq!(api.db.scalar("SELECT count(*) FROM outbox").await, 1);
    assert_eq!(
        api.db
            .scalar("SELECT count(*) FROM outbox_idempotency")
            .await,
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn stats_topics_replicas_and_the_key_timeline() {
    let api = TokenRelay::start("api-stats", &[]).await;
    let admin = api.admin();
    // Two events of the key reach their stream before the topic is paused: the timeline
    // then spans published rows and pending ones (each side has its own indexes).
    for n in [-2, -1] {
        let body = format!(r#"{{"topic":"held","payload":{{"n":{n}}},"partition_key":"k"}}"#);
        assert_eq!(admin.post("/api/v1/events", Some(&body)).status, 201);
    }
    api.db.wait_published("held", 2, WAIT).await;
    let solo = r#"{"topic":"solo","payload":{}}"#;
    assert_eq!(admin.post("/api/v1/events", Some(solo)).status, 201);
    api.db.wait_published("solo", 1, WAIT).await;
    assert_eq!(admin.post("/api/v1/topics/held/pause", None).status, 200);
    for n in 0..5 {
        let body = format!(r#"{{"topic":"held","payload":{{"n":{n}}},"partition_key":"k"}}"#);
        assert_eq!(admin.post("/api/v1/events", Some(&body)).status, 201);
    }
    dead_event(&api, "broken", None, "WRONGTYPE").await;
    let stats = admin.get("/api/v1/stats").json;
    assert_eq!(stats["pending"], 5);
    assert_eq!(stats["dead"], 1);
    assert_eq!(stats["in_flight"], 0, "a paused topic is claimed by nobody");
    assert!(stats["oldest_pending_age_seconds"].as_f64().expect("age") >= 0.0);
    let held = stats["topics"]
        .as_array()
        .expect("topics")
        .iter()
        .find(|t| t["topic"] == "held")
        .cloned();
    let held = held.expect("held in stats");
    assert_eq!(
        (held["pending"].as_i64(), held["paused"].as_bool()),
        (Some(5), Some(true))
    );
    assert_eq!(held["published"], 2);
    assert_eq!(stats["published"], 3);
    let published_of = |stats: &serde_json::Value, topic: &str| {
        stats["topics"]
            .as_array()
            .expect("topics")
            .iter()
            .find(|t| t["topic"] == topic)
            .map(|t| t["published"].clone())
    };
    // A topic with published rows only is listed too.
    assert_eq!(published_of(&stats, "solo"), Some(serde_json::json!(1)));
    // Published counts are cached (a pass over every kept row) but not for long: pending
    // and dead are read fresh, published within a second or so on a small table.
    assert_eq!(admin.post("/api/v1/events", Some(solo)).status, 201);
    api.db.wait_published("solo", 2, WAIT).await;
    // The cached count's life (1 s at least) is the behaviour under test: wait it out.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let stats = admin.get("/api/v1/stats").json;
    assert_eq!(published_of(&stats, "solo"), Some(serde_json::json!(2)));

    let replicas = admin.get("/api/v1/replicas").json;
    let names: Vec<&str> = replicas
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|r| r["instance_id"].as_str())
        .collect();
    assert_eq!(names, vec!["api-stats"]);
    assert!(replicas[0]["last_seen_at"].is_string() && replicas[0]["started_at"].is_string());

    let page = admin.get("/api/v1/events?topic=held&status=pending").json;
    let middle = page["events"][2]["id"].as_str().expect("id").to_string();
    let timeline = admin.get(&format!("/api/v1/events/{middle}/timeline")).json;
    assert_eq!(timeline["event"]["payload"]["n"], 2);
    let n = |list: &serde_json::Value| -> Vec<i64> {
        list.as_array()
            .expect("list")
            .iter()
            .filter_map(|e| e["payload"]["n"].as_i64())
            .collect()
    };
    assert_eq!(n(&timeline["earlier"]), vec![1, 0, -1, -2]);
    assert_eq!(n(&timeline["later"]), vec![3, 4]);
    let first = admin.get("/api/v1/events?topic=held&status=published").json;
    let first = first["events"][1]["id"].as_str().expect("id").to_string();
    let timeline = admin.get(&format!("/api/v1/events/{first}/timeline")).json;
    assert_eq!(timeline["event"]["payload"]["n"], -2);
    assert_eq!(n(&timeline["later"]), vec![-1, 0, 1, 2, 3, 4]);
    // Newest first across both sides, the status filter choosing one.
    let all = admin.get("/api/v1/events?key=k&limit=4").json;
    assert_eq!(n(&all["events"]), vec![4, 3, 2, 1]);
    let all = admin.get("/api/v1/events?key=k&limit=100").json;
    assert_eq!(n(&all["events"]), vec![4, 3, 2, 1, 0, -1, -2]);
    let published = admin.get("/api/v1/events?key=k&status=published").json;
    assert_eq!(n(&published["events"]), vec![-1, -2]);

    let put = admin.call(
        "PUT",
        "/api/v1/topics/held",
        Some(r#"{"paused":true,"maxlen":500}"#),
    );
    assert_eq!(put.status, 200);
    assert_eq!(put.json["maxlen"], 500);
    let fresh = admin.get("/api/v1/topics/never.seen");
    assert_eq!(
        (fresh.status, fresh.json["paused"].as_bool()),
        (200, Some(false))
    );
    let topics = admin.get("/api/v1/topics").json;
    assert_eq!(topics.as_array().map(Vec::len), Some(3), "{topics}");
}

#[tokio::test(flavor = "multi_thread")]
async fn openapi_document_lists_every_route_and_each_is_served() {
    let api = TokenRelay::start("api-openapi", &[]).await;
    let admin = api.admin();
    let doc = admin.get("/api/v1/openapi.json");
    assert_eq!(doc.status, 200);
    assert!(doc.json["openapi"]
        .as_str()
        .expect("version")
        .starts_with("3."));
    let paths = doc.json["paths"].as_object().expect("paths");
    let expected = [
        ("get", "/api/v1/stats"),
        ("get", "/api/v1/events"),
        ("post", "/api/v1/events"),
        ("get", "/api/v1/events/{id}"),
        ("post", "/api/v1/events/{id}/retry"),
        ("post", "/api/v1/events/{id}/discard"),
        ("get", "/api/v1/events/{id}/timeline"),
        ("get", "/api/v1/dead/groups"),
        ("post", "/api/v1/dead/retry"),
        ("post", "/api/v1/dead/discard"),
        ("get", "/api/v1/topics"),
        ("get", "/api/v1/topics/{topic}"),
        ("put", "/api/v1/topics/{topic}"),
        ("post", "/api/v1/topics/{topic}/pause"),
        ("post", "/api/v1/topics/{topic}/resume"),
        ("get", "/api/v1/topics/{topic}/parked"),
        ("get", "/api/v1/topics/{topic}/groups/{group}/parked"),
        (
            "post",
            "/api/v1/topics/{topic}/groups/{group}/parked/{key}/discard",
        ),
        (
            "post",
            "/api/v1/topics/{topic}/groups/{group}/parked/{key}/redrive",
        ),
        ("post", "/api/v1/topics/{topic}/replay"),
        ("get", "/api/v1/replicas"),
        ("get", "/api/v1/audit"),
        ("get", "/api/v1/openapi.json"),
    ];
    let documented: usize = paths
        .values()
        .map(|p| p.as_object().map_or(0, |o| o.len()))
        .sum();
    assert_eq!(
        documented,
        expected.len(),
        "no undocumented extras, no missing routes"
    );
    for (method, path) in expected {
        assert!(
            paths[path][method].is_object(),
            "{method} {path} documented"
        );
        // And served: the router knows it (whatever the handler then says).
        let concrete = path
            .replace("{id}", "00000000-0000-0000-0000-000000000000")
            .replace("{topic}", "doc.check")
            .replace("{group}", "doc-group")
            .replace("{key}", "doc-key");
        let body = (method != "get").then_some(r#"{"paused":false,"maxlen":null}"#);
        let r = admin.call(&method.to_uppercase(), &concrete, body);
        assert_ne!(r.json["error"], "no such route", "{method} {path}");
        assert!(
            r.status != 0 && r.status < 500,
            "{method} {path}: {}",
            r.status
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_tokens_from_one_address_are_refused_for_the_rest_of_the_minute() {
    let api = TokenRelay::start(
        "throttle",
        &[("OUTBOX__ADMIN__FAILED_LOGINS_PER_MINUTE", "3")],
    )
    .await;
    let admin = api.admin();
    // Requests without any token are not guesses: they never count.
    for _ in 0..5 {
        let res = api.anonymous().get("/api/v1/stats");
        assert_eq!(res.status, 401);
    }
    assert_eq!(admin.get("/api/v1/stats").status, 200);
    for _ in 0..3 {
        let res = api.anonymous().bearer("guess").get("/api/v1/stats");
        assert_eq!(res.status, 401);
    }
    // Refused before the token is compared: even the right token waits.
    let res = admin.get("/api/v1/stats");
    assert_eq!(res.status, 429, "{res:?}");
    let retry_after: u64 = res
        .header("retry-after")
        .and_then(|v| v.trim().parse().ok())
        .expect("a Retry-After header");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    assert!(
        res.json["error"]
            .as_str()
            .is_some_and(|e| e.contains("too many wrong tokens")),
        "{res:?}"
    );
    // The health endpoints stay open.
    assert_eq!(api.anonymous().status("/healthz"), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_page_of_large_events_stops_at_max_response_bytes_and_its_cursor_goes_on() {
    let api = TokenRelay::start(
        "api-bytes",
        &[("OUTBOX__ADMIN__MAX_RESPONSE_BYTES", "65536")],
    )
    .await;
    // Ten events of about 20 KB each, and one of 100 KB, larger than a page may hold.
    api.db
        .exec(
            "INSERT INTO outbox (topic, payload)
               SELECT 'big', jsonb_build_object('i', i, 'pad', repeat('x', 20000))
               FROM generate_series(1, 10) AS i;
             INSERT INTO outbox (topic, payload)
               VALUES ('big', jsonb_build_object('i', 11, 'pad', repeat('y', 100000)));",
        )
        .await;
    let admin = api.admin();
    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            Some(c) => format!("/api/v1/events?topic=big&limit=1000&after={c}"),
            None => "/api/v1/events?topic=big&limit=1000".to_string(),
        };
        let page = admin.get(&path);
        assert_eq!(page.status, 200, "{}", page.body);
        let events = page.json["events"].as_array().expect("events").clone();
        assert!(!events.is_empty(), "a page holds at least one event");
        sizes.push((events.len(), page.body.len()));
        seen.extend(
            events
                .iter()
                .map(|e| e["payload"]["i"].as_i64().expect("i")),
        );
        match page.json["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    // Newest first, each once, nothing skipped at a page's edge.
    assert_eq!(seen, (1..=11).rev().collect::<Vec<_>>(), "{sizes:?}");
    // The 100 KB event alone; then pages of the 20 KB ones that stay near the budget.
    assert_eq!(sizes[0].0, 1, "{sizes:?}");
    for (count, bytes) in &sizes[1..] {
        assert!(*count <= 3, "{sizes:?}");
        assert!(*bytes < 65_536 + 4_000, "{sizes:?}");
    }
}

/// A timeline of large events shares `admin.max_response_bytes` between its sides: the
/// nearest neighbours of each side, in order, and a flag on each side that left some out.
#[tokio::test(flavor = "multi_thread")]
async fn a_timeline_of_large_events_keeps_its_nearest_neighbours_within_max_response_bytes() {
    let api = TokenRelay::start(
        "api-timeline-bytes",
        &[("OUTBOX__ADMIN__MAX_RESPONSE_BYTES", "65536")],
    )
    .await;
    // Eleven events of about 10 KB on one key, three small ones on another.
    api.db
        .exec(
            "INSERT INTO outbox (topic, payload, partition_key)
               SELECT 'big', jsonb_build_object('i', i, 'pad', repeat('x', 10000)), 'k'
               FROM generate_series(1, 11) AS i ORDER BY i;
             INSERT INTO outbox (topic, payload, partition_key)
               SELECT 'big', jsonb_build_object('i', i), 'small'
               FROM generate_series(1, 3) AS i ORDER BY i;",
        )
        .await;
    let admin = api.admin();
    let id_of = |key: &str, i: i64| {
        let list = admin.get(&format!("/api/v1/events?topic=big&key={key}&limit=1000"));
        list.json["events"]
            .as_array()
            .expect("events")
            .iter()
            .find(|e| e["payload"]["i"] == i)
            .and_then(|e| e["id"].as_str())
            .expect("the event")
            .to_string()
    };
    let middle = admin.get(&format!(
        "/api/v1/events/{}/timeline?limit=1000",
        id_of("k", 6)
    ));
    assert_eq!(middle.status, 200, "{}", middle.body);
    assert!(middle.body.len() < 65_536 + 4_000, "{}", middle.body.len());
    let numbers = |side: &str| -> Vec<i64> {
        middle.json[side]
            .as_array()
            .expect("side")
            .iter()
            .map(|e| e["payload"]["i"].as_i64().expect("i"))
            .collect()
    };
    let (earlier, later) = (numbers("earlier"), numbers("later"));
    assert!(
        !earlier.is_empty() && !later.is_empty(),
        "{earlier:?} {later:?}"
    );
    assert_eq!(
        earlier,
        (6 - earlier.len() as i64..6).rev().collect::<Vec<_>>()
    );
    assert_eq!(later, (7..7 + later.len() as i64).collect::<Vec<_>>());
    assert!(
        earlier.len() < 5 && later.len() < 5,
        "{earlier:?} {later:?}"
    );
    assert_eq!(middle.json["earlier_cut"], true);
    assert_eq!(middle.json["later_cut"], true);
    let small = admin.get(&format!(
        "/api/v1/events/{}/timeline?limit=1000",
        id_of("small", 2)
    ));
    assert_eq!(small.json["earlier"].as_array().map(Vec::len), Some(1));
    assert_eq!(small.json["later"].as_array().map(Vec::len), Some(1));
    assert_eq!(small.json["earlier_cut"], false);
    assert_eq!(small.json["later_cut"], false);
}
