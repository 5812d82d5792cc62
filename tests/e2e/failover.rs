//! Postgres failover (contract section 14), so far: a `DATABASE_URL` naming several hosts as
//! libpq reads them. `migrate` and `run` (its pools and its LISTEN connection) use the first
//! host that accepts a connection with the session attributes asked for; when the primary
//! dies and its streaming standby is promoted, the relay finds the new primary by itself and
//! goes on, every event once, no attempt spent; with `database.wait_standbys`, what the
//! standby has not flushed is not published, and a failover leaves no phantom event (without
//! it, the test shows the phantoms appear); a role that cannot read the standbys' progress
//! leaves the relay not ready, saying which grant it needs.

use std::process::Command;
use std::time::Duration;

use crate::support::*;

/// Events `from..from + n` of topic `t0`, keyed over three keys.
fn insert(from: i64, n: i64) -> String {
    format!(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't0', jsonb_build_object('n', i), 'k' || (i % 3)
         FROM generate_series({from}, {}) AS i",
        from + n - 1
    )
}

/// Inserts events 1 to `n` on the primary `first`, waits until they are published and
/// until the standby `second` has replayed their marks.
async fn published_and_replayed(first: &TestDb, second: &TestDb, n: i64) {
    first.exec(&insert(1, n)).await;
    first.wait_until_published(Duration::from_secs(30)).await;
    second
        .wait_for(
            "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL",
            n,
            Duration::from_secs(30),
        )
        .await;
}

/// A relay's settings for `db` with `DATABASE_URL` naming both servers, the first one
/// first, asking for `attrs` (`primary` or `read-write`).
fn both_hosts_env(
    db: &TestDb,
    redis: &TestRedis,
    first: &OwnPostgres,
    second: &OwnPostgres,
    attrs: &str,
) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = base_env(db, redis)
        .into_iter()
        .filter(|(k, _)| k != "DATABASE_URL")
        .collect();
    env.push(("DATABASE_URL".into(), both_hosts(first, second, attrs)));
    env
}

/// The URL of `first`'s and `second`'s `postgres` database, in that order.
fn both_hosts(first: &OwnPostgres, second: &OwnPostgres, attrs: &str) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs={attrs}",
        first.port(),
        second.port()
    )
}

/// `db`'s URL with a host nobody listens on first, and `target_session_attrs=primary`.
fn behind_a_dead_host(db: &TestDb) -> String {
    let (host, port) = pg_addr();
    let dead = free_port();
    format!(
        "postgres://postgres@127.0.0.1:{dead},{host}:{port}/{}?target_session_attrs=primary",
        db.name
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_url_whose_first_host_is_down_migrates_and_relays_through_the_next() {
    let db = TestDb::empty().await;
    let redis = TestRedis::shared();
    let url = behind_a_dead_host(&db);
    let out = Command::new(BIN)
        .arg("migrate")
        .env_clear()
        .env("PATH", std::env::var("PATH").expect("PATH"))
        .env("DATABASE_URL", &url)
        .output()
        .expect("migrate runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Only a NOTIFY wakes the relay within the test's wait (it polls every two minutes): its
    // LISTEN connection went through the host list too.
    let mut env: Vec<(String, String)> = base_env(&db, &redis)
        .into_iter()
        .filter(|(k, _)| k != "DATABASE_URL" && k != "OUTBOX__RELAY__POLL_INTERVAL")
        .collect();
    env.push(("DATABASE_URL".into(), url));
    env.push(("OUTBOX__RELAY__POLL_INTERVAL".into(), "120s".into()));
    let relay = RelayProc::spawn("multi-host", &env);
    relay.wait_ready(Duration::from_secs(30)).await;
    // One event at a time until one goes out at once: its NOTIFY woke the relay.
    let inserted = std::sync::atomic::AtomicUsize::new(0);
    eventually(Duration::from_secs(30), "an event published at once", || async {
        let n = inserted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        db.exec(&format!(
            "INSERT INTO outbox (topic, payload, partition_key) VALUES ('t0', '{{\"n\": {n}}}', 'k')"
        ))
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        db.pending().await == 0
    })
    .await;
    let inserted = inserted.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(redis.xlen("t0").await, inserted);

    // The other commands take the host list the same way.
    let command = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").expect("PATH"))
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("the command runs")
    };
    let replay = command(&["replay", "t0", "--since", "1h"]);
    assert_eq!(
        replay.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&replay.stdout).trim(),
        format!("{{\"replayed\":{inserted}}}")
    );
    let repartition = command(&["repartition", "t0", "2"]);
    assert_eq!(
        repartition.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&repartition.stderr)
    );
    assert_eq!(
        db.scalar("SELECT partitions FROM outbox_topics WHERE topic = 't0'")
            .await,
        2
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_relay_follows_a_promoted_standby_by_itself() {
    let (primary, first) = OwnPostgres::start_migrated().await;
    let standby = OwnPostgres::standby_of(&primary);
    let second = TestDb::at(&standby.url());
    let redis = TestRedis::shared();
    let env = both_hosts_env(&first, &redis, &primary, &standby, "primary");
    let relay = RelayProc::spawn("follow", &env);
    relay.wait_ready(Duration::from_secs(30)).await;
    let insert = |from: i64| insert(from, 20);
    // The standby has replayed the marks before the primary dies.
    published_and_replayed(&first, &second, 20).await;
    primary.stop();
    standby.promote();
    second.exec(&insert(21)).await;
    second.wait_until_published(Duration::from_secs(60)).await;
    let ids = redis.entries("t0").await;
    let distinct: std::collections::HashSet<&String> = ids.iter().map(|e| &e["id"]).collect();
    assert_eq!(ids.len(), 40, "every event once");
    assert_eq!(distinct.len(), 40);
    assert_per_key_order(&ids);
    assert_eq!(
        second
            .scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
            .await,
        0,
        "the outage spent no attempt"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn migrate_through_a_url_whose_first_host_is_a_standby_migrates_the_primary() {
    let primary = OwnPostgres::start();
    let standby = OwnPostgres::standby_of(&primary);
    let url = both_hosts(&standby, &primary, "read-write");
    let out = Command::new(BIN)
        .arg("migrate")
        .env_clear()
        .env("PATH", std::env::var("PATH").expect("PATH"))
        .env("DATABASE_URL", &url)
        .output()
        .expect("migrate runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let on_primary = TestDb::at(&primary.url());
    assert_eq!(
        on_primary
            .scalar("SELECT count(*) FROM pg_tables WHERE tablename = 'outbox'")
            .await,
        1
    );
    // And the standby replays it.
    TestDb::at(&standby.url())
        .wait_for(
            "SELECT count(*) FROM pg_tables WHERE tablename = 'outbox'",
            1,
            Duration::from_secs(30),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_standbys_holds_back_what_the_standby_has_not_flushed_without_an_attempt() {
    let (primary, db) = OwnPostgres::start_migrated().await;
    let link = Proxy::start(primary.port()).await;
    let _standby = OwnPostgres::standby_through(&primary, link.port);
    let redis = TestRedis::shared();
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__DATABASE__WAIT_STANDBYS".into(), "1".into()));
    env.push((
        "OUTBOX__DATABASE__WAIT_STANDBYS_TIMEOUT".into(),
        "300ms".into(),
    ));
    let relay = RelayProc::spawn("wait-standbys", &env);
    relay.wait_ready(Duration::from_secs(30)).await;
    let insert = |from: i64| insert(from, 10);
    db.exec(&insert(1)).await;
    db.wait_until_published(Duration::from_secs(30)).await;
    assert_eq!(
        redis.xlen("t0").await,
        10,
        "a streaming standby confirms at once"
    );
    let http = relay.http();
    http.wait_metric(
        "outbox_postgres_standbys",
        |n| n == 1.0,
        Duration::from_secs(30),
    )
    .await;
    let lag = standby_lags(&http.metrics());
    assert_eq!(lag.len(), 1, "one standby's lag: {lag:?}");
    assert!(lag[0].1 >= 0.0, "{lag:?}");
    let page = overview(&http);
    assert!(
        page.contains(&format!("127.0.0.1:{}", primary.port())),
        "the Overview names the primary the relay is on: {page}"
    );
    assert!(
        page.contains(&format!("data-standby=\"{}\"", lag[0].0)) && page.contains(">streaming<"),
        "the Overview lists the streaming standby: {page}"
    );

    // The standby's link held: it flushes nothing newer, so nothing newer is published.
    link.hold();
    db.wait_for(
        "SELECT count(*) FROM pg_stat_replication",
        0,
        Duration::from_secs(30),
    )
    .await;
    db.exec(&insert(11)).await;
    http.wait_counter_rise(
        "outbox_postgres_wait_standbys_timeouts_total",
        Duration::from_secs(30),
    )
    .await;
    http.wait_counter_rise(
        "outbox_postgres_wait_standbys_timeouts_total",
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(redis.xlen("t0").await, 10, "nothing the standby lacks");
    assert_eq!(db.pending().await, 10);
    // Gone from pg_stat_replication: no lag series frozen at its last value, a count of 0.
    http.wait_metric(
        "outbox_postgres_standbys",
        |n| n == 0.0,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(standby_lags(&http.metrics()), vec![]);
    assert!(overview(&http).contains("No standby streams from this primary."));
    // One line while every batch waits in vain, not one per batch.
    let log = relay.log();
    assert_eq!(
        log.matches("(database.wait_standbys)").count(),
        1,
        "the wait's failures are logged once: {log}"
    );
    assert!(!log.contains("claim cycle failed"), "{log}");

    // Back: the batch goes out, no attempt spent.
    link.release();
    db.wait_until_published(Duration::from_secs(60)).await;
    assert_eq!(redis.xlen("t0").await, 20);
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
            .await,
        0
    );
    eventually(
        Duration::from_secs(10),
        "the standbys caught up line",
        || async {
            match relay.log().contains("the standbys caught up") {
                true => Ok(()),
                false => Err("not yet".to_string()),
            }
        },
    )
    .await;
}

/// The `outbox_postgres_standby_lag_bytes` series of a `/metrics` page: (standby, bytes).
fn standby_lags(metrics: &str) -> Vec<(String, f64)> {
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix("outbox_postgres_standby_lag_bytes{standby=\""))
        .map(|rest| {
            let (name, value) = rest.split_once("\"} ").expect("a labelled series");
            (name.to_string(), value.parse().expect("a number"))
        })
        .collect()
}

/// The Overview page, in a session the login page hands out without a token.
fn overview(http: &Http) -> String {
    let login = http.get("/login?next=%2F");
    let page = http
        .cookie(&login.session_cookie().expect("a session cookie"))
        .get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    page.body
}

/// A failover while the standby's link is held: the primary committed `held` events the
/// standby never received. Returns the stream's event ids and the new primary's.
async fn failover_with_a_lagging_standby(
    wait_standbys: bool,
) -> (Vec<String>, std::collections::HashSet<String>) {
    let (primary, first) = OwnPostgres::start_migrated().await;
    let link = Proxy::start(primary.port()).await;
    let standby = OwnPostgres::standby_through(&primary, link.port);
    let second = TestDb::at(&standby.url());
    let redis = TestRedis::shared();
    let mut env = both_hosts_env(&first, &redis, &primary, &standby, "primary");
    if wait_standbys {
        env.push(("OUTBOX__DATABASE__WAIT_STANDBYS".into(), "1".into()));
        env.push((
            "OUTBOX__DATABASE__WAIT_STANDBYS_TIMEOUT".into(),
            "300ms".into(),
        ));
    }
    let relay = RelayProc::spawn("phantoms", &env);
    relay.wait_ready(Duration::from_secs(30)).await;
    let insert = |from: i64| insert(from, 10);
    published_and_replayed(&first, &second, 10).await;
    link.hold();
    first
        .wait_for(
            "SELECT count(*) FROM pg_stat_replication",
            0,
            Duration::from_secs(30),
        )
        .await;
    first.exec(&insert(11)).await;
    let http = relay.http();
    if wait_standbys {
        http.wait_counter_rise(
            "outbox_postgres_wait_standbys_timeouts_total",
            Duration::from_secs(30),
        )
        .await;
    } else {
        first.wait_until_published(Duration::from_secs(30)).await;
    }
    primary.stop();
    standby.promote();
    // The new primary gets a standby of its own: with the setting, nothing goes out without.
    let _next = OwnPostgres::standby_of(&standby);
    second.exec(&insert(21)).await;
    second.wait_until_published(Duration::from_secs(60)).await;
    let entries = redis.entries("t0").await;
    let stream: Vec<String> = entries.iter().map(|e| e["id"].clone()).collect();
    let text = second
        .text("SELECT coalesce(json_agg(id::text ORDER BY seq), '[]')::text FROM outbox")
        .await;
    let rows: Vec<String> = serde_json::from_str(&text).expect("ids");
    if wait_standbys {
        assert_eq!(
            second
                .scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
                .await,
            0,
            "no attempt spent through the failover"
        );
        // Each key's entries in the order of its rows on the new primary.
        let position: std::collections::HashMap<&String, usize> =
            rows.iter().enumerate().map(|(i, id)| (id, i)).collect();
        let mut last: std::collections::HashMap<String, usize> = Default::default();
        for e in &entries {
            let Some(&at) = position.get(&e["id"]) else {
                continue;
            };
            let key = e.get("key").cloned().unwrap_or_default();
            if let Some(before) = last.insert(key.clone(), at) {
                assert!(before < at, "key {key} out of order: {entries:?}");
            }
        }
    }
    (stream, rows.into_iter().collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_wait_standbys_a_failover_leaves_phantom_events_and_with_it_none() {
    // Without the setting: the ten events committed while the link was held were published,
    // and the promoted standby never had them.
    let (stream, rows) = failover_with_a_lagging_standby(false).await;
    let phantoms = stream.iter().filter(|id| !rows.contains(*id)).count();
    assert_eq!(phantoms, 10, "published, and gone with the old primary");

    // With it: every entry's event exists on the new primary, each once.
    let (stream, rows) = failover_with_a_lagging_standby(true).await;
    assert!(
        stream.iter().all(|id| rows.contains(id)),
        "no phantom: {stream:?}"
    );
    let distinct: std::collections::HashSet<&String> = stream.iter().collect();
    assert_eq!(distinct.len(), stream.len(), "each once");
    assert_eq!(distinct.len(), rows.len(), "every event of the new primary");
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_standbys_with_a_role_that_cannot_read_the_standbys_progress_is_not_ready() {
    let (primary, db) = OwnPostgres::start_migrated().await;
    db.exec(
        "CREATE ROLE relay_plain LOGIN;
         GRANT ALL ON ALL TABLES IN SCHEMA public TO relay_plain;
         GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO relay_plain;
         GRANT ALL ON SCHEMA public TO relay_plain",
    )
    .await;
    let redis = TestRedis::shared();
    let mut env: Vec<(String, String)> = base_env(&db, &redis)
        .into_iter()
        .filter(|(k, _)| k != "DATABASE_URL")
        .collect();
    env.push((
        "DATABASE_URL".into(),
        format!(
            "postgres://relay_plain@127.0.0.1:{}/postgres",
            primary.port()
        ),
    ));
    env.push(("OUTBOX__DATABASE__WAIT_STANDBYS".into(), "1".into()));
    let relay = RelayProc::spawn("no-monitor", &env);
    let http = relay.http();
    http.wait_status("/readyz", 503, Duration::from_secs(30))
        .await;
    eventually(
        Duration::from_secs(30),
        "the line naming the grant",
        || async { relay.log().contains("GRANT pg_monitor TO relay_plain") },
    )
    .await;
    // A second later the relay is still not ready, and has said it once.
    relay.wait_for_a_claim_cycle(Duration::from_secs(10)).await;
    assert_eq!(http.status("/readyz"), 503);
    let lines = relay
        .log()
        .lines()
        .filter(|l| l.contains("database.wait_standbys") && l.contains("pg_monitor"))
        .count();
    assert_eq!(lines, 1, "{}", relay.log());
    db.exec("GRANT pg_monitor TO relay_plain").await;
    http.wait_status("/readyz", 200, Duration::from_secs(30))
        .await;
}
