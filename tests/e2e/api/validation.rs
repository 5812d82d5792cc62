//! Bad input is a 4xx with `{"error"}`, never a 500; a Postgres outage is a 503.

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn bad_input_is_a_4xx_json_error_never_a_500() {
    let api = TokenRelay::start("api-bad", &[]).await;
    let id = "00000000-0000-0000-0000-000000000000";
    let big = format!(r#"{{"topic":"t","payload":"{}"}}"#, "x".repeat(1_100_000));
    let cases: Vec<(&str, String, Option<String>, u16)> = vec![
        ("POST", "/api/v1/events".into(), Some(r#"{"topic":"t","payload":"#.into()), 400),
        ("POST", "/api/v1/events".into(), Some(r#"{"payload":{}}"#.into()), 400),
        ("POST", "/api/v1/events".into(), Some(r#"{"topic":"a b","payload":{}}"#.into()), 400),
        ("POST", "/api/v1/events".into(), Some(format!(r#"{{"topic":"{}","payload":{{}}}}"#, "x".repeat(256))), 400),
        ("POST", "/api/v1/events".into(), Some(r#"{"topic":"t","payload":{},"headers":[1]}"#.into()), 400),
        ("POST", "/api/v1/events".into(), Some(r#"{"topic":"t","payload":{},"extra":1}"#.into()), 400),
        ("POST", "/api/v1/events".into(), Some(big), 413),
        ("GET", "/api/v1/events/not-a-uuid".into(), None, 400),
        ("POST", "/api/v1/events/not-a-uuid/retry".into(), None, 400),
        ("GET", format!("/api/v1/events/{id}"), None, 404),
        ("GET", "/api/v1/events?limit=0".into(), None, 400),
        ("GET", "/api/v1/events?limit=1001".into(), None, 400),
        ("GET", "/api/v1/events?limit=ten".into(), None, 400),
        ("GET", "/api/v1/events?after=-5".into(), None, 400),
        ("GET", "/api/v1/events?after=abc".into(), None, 400),
        ("GET", "/api/v1/events?status=lost".into(), None, 400),
        ("GET", "/api/v1/events?stauts=dead".into(), None, 400),
        ("GET", "/api/v1/audit?after=x".into(), None, 400),
        ("GET", "/api/v1/dead/groups?dead_after=yesterday".into(), None, 400),
        ("POST", "/api/v1/dead/retry".into(), Some(r#"{"filter":{"colour":"red"}}"#.into()), 400),
        ("POST", "/api/v1/dead/retry".into(), Some(r#"{"filter":{"dead_after":"2026-01-02T00:00:00Z","dead_before":"2026-01-01T00:00:00Z"}}"#.into()), 400),
        ("PUT", "/api/v1/topics/t".into(), Some(r#"{"paused":false,"maxlen":0}"#.into()), 400),
        ("PUT", "/api/v1/topics/t".into(), Some(r#"{"paused":"yes"}"#.into()), 400),
        ("POST", "/api/v1/topics/%20/pause".into(), None, 400),
        ("GET", "/api/v1/no/such/route".into(), None, 404),
        // A body must be an object: serde would read a struct from an array.
        ("POST", "/api/v1/dead/retry".into(), Some("[]".into()), 400),
        ("POST", "/api/v1/events".into(), Some(r#"["t",{}]"#.into()), 400),
        ("PUT", "/api/v1/topics/t".into(), Some("[true,null]".into()), 400),
        ("PUT", "/api/v1/topics/t".into(), Some(r#"{"paused":false,"maxlen":2.5}"#.into()), 400),
        // A replay's times as the document gives them: no blanks, no empty `until`.
        ("POST", "/api/v1/topics/t/replay".into(), Some(r#"{"since":"15m","until":""}"#.into()), 400),
        ("POST", "/api/v1/topics/t/replay".into(), Some(r#"{"since":" 15m"}"#.into()), 400),
        // Filters holding a NUL (Postgres refuses it in any text) are bad input, not an outage.
        ("GET", "/api/v1/events?key=a%00b".into(), None, 400),
        ("GET", "/api/v1/events?topic=a%00b".into(), None, 400),
        ("GET", "/api/v1/dead/groups?error=a%00b".into(), None, 400),
        ("GET", "/api/v1/dead/groups?fingerprint=%00".into(), None, 400),
        ("POST", "/api/v1/dead/discard".into(), Some(r#"{"filter":{"key":"\u0000"}}"#.into()), 400),
    ];
    for (method, path, body, want) in cases {
        let r = api.admin().call(method, &path, body.as_deref());
        assert_eq!(r.status, want, "{method} {path}: {:?}", r.json);
        assert!(
            r.json["error"].is_string(),
            "{method} {path}: {{\"error\"}} body"
        );
    }
    let r = api
        .admin()
        .with("Idempotency-Key", "")
        .post("/api/v1/events", Some(r#"{"topic":"t","payload":{}}"#));
    assert_eq!(r.status, 400);
    // Postgres cannot store NUL in text or jsonb: the field is named, with or without an
    // idempotency key (whose hash is computed in Postgres too); never a 503.
    let nul_cases = [
        (r#"{"topic":"t","payload":{"a":"x\u0000y"}}"#, "payload"),
        (r#"{"topic":"t","payload":{"x\u0000":1}}"#, "payload"),
        (
            r#"{"topic":"t","payload":{},"headers":{"h":["\u0000"]}}"#,
            "headers",
        ),
        (
            r#"{"topic":"t","payload":{},"partition_key":"k\u0000"}"#,
            "partition_key",
        ),
        (r#"{"topic":"t\u0000","payload":{}}"#, "topic"),
    ];
    for (body, field) in nul_cases {
        for keyed in [false, true] {
            let client = match keyed {
                true => api.admin().with("Idempotency-Key", "nul-1"),
                false => api.admin(),
            };
            let r = client.post("/api/v1/events", Some(body));
            assert_eq!(r.status, 400, "{body}: {:?}", r.json);
            let error = r.json["error"].as_str().unwrap_or_default();
            assert!(error.contains(field), "{body}: {error}");
        }
    }
    // A method a route does not have: 405 naming the ones it has, not 404.
    for (method, path, allow) in [
        ("TRACE", "/api/v1/stats", "GET"),
        ("DELETE", "/api/v1/events", "GET, POST"),
        (
            "GET",
            "/api/v1/events/00000000-0000-0000-0000-000000000000/retry",
            "POST",
        ),
        ("PATCH", "/api/v1/topics/t", "GET, PUT"),
    ] {
        let r = api.admin().call(method, path, None);
        assert_eq!(r.status, 405, "{method} {path}: {:?}", r.json);
        assert_eq!(r.header("allow"), Some(allow), "{method} {path}");
        assert!(r.json["error"].is_string(), "{method} {path}");
    }
    // Not JSON at all (no Content-Type) is refused too.
    let r = api.admin().post("/api/v1/events", None);
    assert_eq!(r.status, 400);
    assert_eq!(
        api.db.scalar("SELECT count(*) FROM outbox").await,
        0,
        "nothing stored"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_outage_answers_503() {
    let db = TestDb::at(&format!(
        "postgres://postgres@127.0.0.1:{}/gone",
        free_port()
    ));
    let redis = TestRedis::shared();
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__ADMIN__TOKEN".into(), ADMIN_TOKEN.into()));
    let relay = RelayProc::spawn("api-outage", &env);
    relay
        .http()
        .wait_status("/healthz", 200, std::time::Duration::from_secs(20))
        .await;
    let admin = relay.http().bearer(ADMIN_TOKEN);
    for path in ["/api/v1/stats", "/api/v1/events", "/api/v1/replicas"] {
        let r = admin.get(path);
        assert_eq!(r.status, 503, "{path}");
        assert!(r.json["error"].is_string());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn numbers_no_f64_holds_are_shown_as_stored() {
    // An application writes its outbox rows with SQL: jsonb keeps numbers serde's f64 does
    // not (1e400, or f64::MAX spelled out in 309 digits), and the API and the UI show them.
    let api = TokenRelay::start("api-numbers", &[]).await;
    api.db
        .exec(
            "INSERT INTO outbox (topic, payload, headers) VALUES \
             ('big', '{\"huge\": 1e400, \"max\": 1.7976931348623157e308}', '{\"h\": 1e-400}')",
        )
        .await;
    let list = api.admin().get("/api/v1/events?topic=big");
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(list.body.contains("\"huge\": 1"), "{}", list.body);
    // (The tests' client parses JSON into f64 too, so the id is read off the text.)
    let at = list.body.find("\"id\":\"").expect("an id") + 6;
    let id = list.body[at..at + 36].to_string();
    let one = api.admin().get(&format!("/api/v1/events/{id}"));
    assert_eq!(one.status, 200, "{}", one.body);
    assert!(
        one.body.contains(&format!("1{}", "0".repeat(400))),
        "stored digits kept"
    );
    let timeline = api.admin().get(&format!("/api/v1/events/{id}/timeline"));
    assert_eq!(timeline.status, 200, "{}", timeline.body);
    // The 4xx/5xx-free path a browser takes too.
    let (http, _) = api.login(ADMIN_TOKEN);
    let page = http.get(&format!("/events/{id}"));
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains(&format!("0.{}1", "0".repeat(399))),
        "headers as stored"
    );
    assert!(
        page.body.contains(&format!("1{}", "0".repeat(400))),
        "payload as stored"
    );
}
