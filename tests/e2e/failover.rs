//! Postgres failover (contract section 14), so far: a `DATABASE_URL` naming several hosts as
//! libpq reads them. `migrate` and `run` (its pools and its LISTEN connection) use the first
//! host that accepts a connection with the session attributes asked for.

use std::process::Command;
use std::time::Duration;

use crate::support::*;

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
    // Only a NOTIFY wakes the relay within the test's wait: its LISTEN connection went
    // through the host list too.
    let mut env: Vec<(String, String)> = base_env(&db, &redis)
        .into_iter()
        .filter(|(k, _)| k != "DATABASE_URL" && k != "OUTBOX__RELAY__POLL_INTERVAL")
        .collect();
    env.push(("DATABASE_URL".into(), url));
    env.push(("OUTBOX__RELAY__POLL_INTERVAL".into(), "120s".into()));
    let relay = RelayProc::spawn("multi-host", &env);
    relay.wait_ready(Duration::from_secs(30)).await;
    relay.wait_for_a_claim_cycle(Duration::from_secs(30)).await;
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't0', jsonb_build_object('n', i), 'k' || (i % 3) FROM generate_series(1, 20) AS i",
    )
    .await;
    db.wait_until_published(Duration::from_secs(30)).await;
    assert_eq!(redis.xlen("t0").await, 20);
}
