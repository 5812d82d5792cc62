//! What a panic, a stall or an outage does to the probes and the process, driven through the
//! fault-injection hooks (`relay::faults`, feature `test-hooks`; `make test` turns it on):
//! a panic in a claim cycle restarts the claimer and relaying goes on, as does one in a
//! dispatcher's publish (that dispatcher alone restarts); an actor killed by a
//! panic its supervisor cannot catch ends the process with status 70; a stalled claim loop
//! fails `/healthz`; `/readyz` answers at once during a Postgres outage; and every metric of
//! the contract is in the first scrape.

use std::time::{Duration, Instant};

use crate::support::*;

fn with_fault(db: &TestDb, redis: &TestRedis, fault: &str) -> Vec<(String, String)> {
    let mut env = base_env(db, redis);
    env.push(("OUTBOX_TEST_FAULT".into(), fault.into()));
    env
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "test-hooks"), ignore = "needs --features test-hooks")]
async fn a_panic_in_a_claim_cycle_restarts_the_claimer_and_relaying_goes_on() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut relay = RelayProc::spawn("cycle-panic", &with_fault(&db, &redis, "cycle-panic@5"));
    relay
        .http()
        .wait_status("/readyz", 200, Duration::from_secs(20))
        .await;
    // The poll timer runs a cycle every 200 ms: the fifth one panics within a few seconds.
    relay
        .http()
        .wait_metric(
            "outbox_actor_panics_total{actor=\"claimer\"}",
            |n| n == 1.0,
            Duration::from_secs(20),
        )
        .await;
    insert_events(&db, Events::varied().n(1..=500).topics(2).keys(7)).await;
    db.wait_until_published(Duration::from_secs(20)).await;
    assert_eq!(assert_exactly_once(&redis, 2).await, 500);
    assert_eq!(
        relay.wait_exit(Duration::ZERO),
        None,
        "the process lives on"
    );
    assert_eq!(relay.http().status("/healthz"), 200);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "test-hooks"), ignore = "needs --features test-hooks")]
async fn a_panic_in_a_dispatchers_publish_restarts_that_dispatcher_and_its_topic_goes_on() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    // The third publish of any topic panics inside its dispatcher.
    let mut relay = RelayProc::spawn(
        "dispatch-panic",
        &with_fault(&db, &redis, "dispatch-panic@3"),
    );
    relay
        .http()
        .wait_status("/readyz", 200, Duration::from_secs(20))
        .await;
    for round in 0..6 {
        insert_events(
            &db,
            Events::default()
                .n(round * 20 + 1..=round * 20 + 20)
                .topics(2)
                .keys(7),
        )
        .await;
        db.wait_until_published(Duration::from_secs(20)).await;
    }
    relay
        .http()
        .wait_metric(
            "outbox_actor_panics_total{actor=\"dispatcher\"}",
            |n| n == 1.0,
            Duration::from_secs(5),
        )
        .await;
    assert_eq!(assert_exactly_once(&redis, 2).await, 120);
    assert_eq!(
        relay.wait_exit(Duration::ZERO),
        None,
        "a dispatcher's panic is not the process's"
    );
    assert_eq!(relay.http().status("/healthz"), 200);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "test-hooks"), ignore = "needs --features test-hooks")]
async fn an_actor_killed_by_a_panic_ends_the_process_with_status_70() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    insert_events(&db, Events::varied().n(1..=50).topics(1).keys(3)).await;
    let mut relay = RelayProc::spawn("actor-lost", &with_fault(&db, &redis, "claimer-panic@3"));
    let code = relay.wait_exit(Duration::from_secs(30));
    assert_eq!(
        code,
        Some(70),
        "a replica whose claimer died must not look alive"
    );
    let log = relay.log();
    assert!(
        log.contains("actor died") && log.contains("claimer"),
        "the log says which actor died:\n{log}"
    );
    // Whatever the dead claimer held was rolled back: a new replica relays all of it.
    let relay = RelayProc::spawn("after-actor-lost", &base_env(&db, &redis));
    db.wait_until_published(Duration::from_secs(20)).await;
    assert_eq!(assert_exactly_once(&redis, 1).await, 50);
    drop(relay);
}

#[tokio::test(flavor = "multi_thread")]
#[cfg_attr(not(feature = "test-hooks"), ignore = "needs --features test-hooks")]
async fn a_stalled_claim_loop_fails_healthz_while_events_are_pending() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = with_fault(&db, &redis, "cycle-stall@1+");
    env.push(("OUTBOX__RELAY__LEASE".into(), "3s".into()));
    env.push(("OUTBOX__RELAY__STALL_AFTER".into(), "4s".into()));
    let relay = RelayProc::spawn("stall", &env);
    // Every cycle hangs before it claims anything; with nothing pending, that is no stall.
    relay
        .http()
        .wait_status("/healthz", 200, Duration::from_secs(20))
        .await;
    eventually(
        Duration::from_secs(20),
        "the first cycle to stall",
        || async { relay.log().contains("injected fault: stalling") },
    )
    .await;
    // A stall is a span of time: the loop has now been silent for longer than stall_after.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        relay.http().status("/healthz"),
        200,
        "an idle relay is not stalled"
    );
    insert_events(&db, Events::varied().n(1..=10).topics(1).keys(3)).await;
    relay
        .http()
        .wait_status("/healthz", 503, Duration::from_secs(30))
        .await;
    let body = relay.http().get("/healthz").body;
    assert!(body.contains("\"stalled\""), "{body}");
    assert!(db.pending().await > 0, "the stall left work undone");
}

#[tokio::test(flavor = "multi_thread")]
async fn readyz_answers_at_once_during_a_postgres_outage() {
    let (pg, db) = OwnPostgres::start_migrated().await;
    let redis = TestRedis::shared();
    let relay = RelayProc::spawn("ready-fast", &base_env(&db, &redis));
    relay
        .http()
        .wait_status("/readyz", 200, Duration::from_secs(20))
        .await;
    pg.stop();
    relay
        .http()
        .wait_status("/readyz", 503, Duration::from_secs(20))
        .await;
    for _ in 0..5 {
        let asked = Instant::now();
        assert_eq!(relay.http().status("/readyz"), 503);
        let took = asked.elapsed();
        // A probe that waited on the outage would take the ping's whole timeout (1 s).
        assert!(took < Duration::from_millis(500), "/readyz took {took:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pg.restart();
    relay
        .http()
        .wait_status("/readyz", 200, Duration::from_secs(30))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_contract_metric_is_in_the_first_scrape() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    // A topic known only by its settings, and one whose events wait behind a pause.
    db.exec(
        "INSERT INTO outbox_topics (topic, paused) VALUES ('orders.created', false), ('held', true);
         INSERT INTO outbox (topic, payload) VALUES ('held', '{}')",
    )
    .await;
    let relay = RelayProc::spawn("first-scrape", &base_env(&db, &redis));
    assert_first_scrape_has(
        &relay,
        &[
            "outbox_events_published_total{topic=\"orders.created\"} 0",
            "outbox_events_published_total{topic=\"held\"} 0",
            "# TYPE outbox_events_pending gauge",
            "# TYPE outbox_events_dead gauge",
            "# TYPE outbox_oldest_pending_age_seconds gauge",
            "outbox_publish_duration_seconds_count 0",
            "outbox_events_failed_total 0",
            "outbox_events_dead_lettered_total 0",
            "outbox_actor_panics_total{actor=\"claimer\"} 0",
            "outbox_publish_duration_seconds_bucket{le=\"+Inf\"} 0",
        ],
    )
    .await;
}

/// Waits for `/healthz` to answer 200, then asserts the very first scrape holds each line.
async fn assert_first_scrape_has(relay: &RelayProc, lines: &[&str]) {
    relay
        .http()
        .wait_status("/healthz", 200, Duration::from_secs(20))
        .await;
    let scrape = relay.http().metrics();
    for line in lines {
        assert!(
            scrape.contains(line),
            "first scrape lacks {line}:\n{scrape}"
        );
    }
}

/// A topic another process published (its registry row written by that relay, not by hand)
/// is in this process's first scrape, before it publishes anything itself; so are the
/// sampled gauges, before their first sample.
#[tokio::test(flavor = "multi_thread")]
async fn a_topic_published_before_this_process_started_is_in_its_first_scrape() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let env = base_env(&db, &redis);
    let (_dir, config) = config_file("[[topics]]\nname = \"parks\"\npark_on_dead = true\n");
    insert_events(&db, Events::varied().n(1..=20).topics(2)).await;
    let earlier = RelayProc::spawn_with_config("earlier", &env, &config);
    db.wait_until_published(Duration::from_secs(20)).await;
    drop(earlier);
    let published: i64 = db.scalar("SELECT count(*) FROM outbox_topics").await;
    assert!(published >= 2, "the earlier relay registered its topics");
    for round in 0..3 {
        let relay = RelayProc::spawn_with_config(&format!("later-{round}"), &env, &config);
        assert_first_scrape_has(
            &relay,
            &[
                "outbox_events_published_total{topic=\"t0\"} 0",
                "outbox_events_published_total{topic=\"t1\"} 0",
                "# TYPE outbox_postgres_standbys gauge",
                "# TYPE outbox_postgres_standby_lag_bytes gauge",
                "# TYPE outbox_redis_memory_ratio gauge",
                "outbox_redis_memory_held 0",
                "outbox_parked_events{topic=\"parks\"} 0",
            ],
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_metric_has_a_help_line_beside_the_build_and_process_metrics() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = base_env(&db, &redis);
    env.push((
        "OUTBOX__GROUPS".into(),
        r#"[{topic = "t0", name = "billing"}]"#.into(),
    ));
    let relay = RelayProc::spawn("help-lines", &env);
    insert_events(&db, Events::varied().n(1..=30).topics(2).keys(3)).await;
    db.wait_until_published(Duration::from_secs(20)).await;
    let http = relay.http();
    // The group sampler has run: its gauges are in the scrape too.
    http.wait_metric(
        "outbox_group_lag{topic=\"t0\",group=\"billing\"}",
        |lag| lag > 0.0,
        Duration::from_secs(20),
    )
    .await;
    let scrape = http.metrics();
    let typed: Vec<&str> = scrape
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(typed.len() > 30, "{scrape}");
    let lacking: Vec<&&str> = typed
        .iter()
        .filter(|name| !scrape.contains(&format!("# HELP {name} ")))
        .collect();
    assert!(lacking.is_empty(), "no HELP line for {lacking:?}");
    assert!(
        scrape.contains(&format!(
            "outbox_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{scrape}"
    );
    for process in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        let value = http
            .metric(process)
            .unwrap_or_else(|| panic!("{process} is not in the scrape:\n{scrape}"));
        assert!(value > 0.0, "{process} = {value}");
    }
    assert!(http.metric("process_cpu_seconds_total").is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn topics_beyond_max_metric_topics_are_counted_under_one_label() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__ADMIN__MAX_METRIC_TOPICS".into(), "2".into()));
    // Two topics known before the start keep their names.
    db.exec("INSERT INTO outbox_topics (topic, paused) VALUES ('a', false), ('b', false)")
        .await;
    let relay = RelayProc::spawn("metric-topics", &env);
    relay.wait_ready(Duration::from_secs(20)).await;
    db.exec(
        "INSERT INTO outbox (topic, payload)
         SELECT t, '{}' FROM unnest(ARRAY['a', 'b', 'c', 'd', 'e']) AS t, generate_series(1, 3)",
    )
    .await;
    db.wait_until_published(Duration::from_secs(20)).await;
    let http = relay.http();
    let published = |topic: &str| format!("outbox_events_published_total{{topic=\"{topic}\"}}");
    http.wait_metric(&published("_other"), |n| n == 9.0, Duration::from_secs(10))
        .await;
    assert_eq!(http.metric(&published("a")), Some(3.0));
    assert_eq!(http.metric(&published("b")), Some(3.0));
    let scrape = http.metrics();
    for topic in ["c", "d", "e"] {
        assert!(
            !scrape.contains(&format!("topic=\"{topic}\"")),
            "{topic} has no label of its own:\n{scrape}"
        );
    }
}
