//! A hung replica (SIGSTOP, so its connections stay open and its row locks stay held) loses
//! its claim after `relay.lease`: Postgres ends its transaction and another replica publishes
//! the events, once each; one that hangs holding every claim slot stalls the others only
//! briefly. Also: `relay.poll_only` delivers without LISTEN.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_replicas_claim_is_taken_over_after_the_lease() {
    hung_replicas_claim_is_taken_over(base_env).await;
}

/// A relay started with `env` (lease 3 s) is frozen holding row locks while draining 40,000
/// events; another publishes everything, once each, without an attempt counted.
pub(crate) async fn hung_replicas_claim_is_taken_over(
    env: impl FnOnce(&TestDb, &TestRedis) -> Vec<(String, String)>,
) {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't' || (i % 3), jsonb_build_object('n', i), 'k' || (i % 100)
         FROM generate_series(1, 40000) AS i ORDER BY i",
    )
    .await;
    let mut env = env(&db, &redis);
    env.push(("OUTBOX__RELAY__LEASE".into(), "3s".into()));
    env.push(("OUTBOX__REDIS__TIMEOUT".into(), "1s".into()));
    env.push(("OUTBOX__RELAY__BATCH_SIZE".into(), "500".into()));
    let hung = RelayProc::spawn("hung", &env);
    db.wait_for(
        "SELECT (count(*) FILTER (WHERE published_at IS NOT NULL) > 3000)::int FROM outbox",
        1,
        Duration::from_secs(30),
    )
    .await;
    let pid = hung.child.id().to_string();
    // Frozen inside a claim: some pending rows are locked, and only the lease frees them.
    freeze_while(
        &db,
        &pid,
        "SELECT ((SELECT count(*) FROM outbox WHERE published_at IS NULL) > (
                  SELECT count(*) FROM (SELECT 1 FROM outbox WHERE published_at IS NULL
                                        FOR UPDATE SKIP LOCKED) AS free))::int",
    )
    .await;
    let frozen_at = Instant::now();
    let _rescuer = RelayProc::spawn("rescuer", &env);
    db.wait_until_published(Duration::from_secs(60)).await;
    let took = frozen_at.elapsed();
    Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .expect("SIGCONT");
    assert_eq!(assert_exactly_once(&redis, 3).await, 40_000);
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
            .await,
        0
    );
    eprintln!("backlog finished {took:?} after the freeze");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_replica_holding_every_claim_slot_stalls_the_others_only_briefly() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    // Many keys: the hung replica's batch holds a few hundred of them, and the other replica
    // must find plenty of events it may publish (a held key's later events wait for it).
    insert_events(&db, Events::varied().n(1..=60_000).topics(3).keys(2_000)).await;
    let mut env = base_env(&db, &redis);
    // Postgres would end the hung transaction only after 60 s; the test allows 20.
    env.push(("OUTBOX__RELAY__LEASE".into(), "60s".into()));
    env.push(("OUTBOX__RELAY__CLUSTER_CLAIMS".into(), "1".into()));
    env.push(("OUTBOX__RELAY__WORKERS".into(), "1".into()));
    // Small batches: the drain lasts seconds, with the replica inside a claim most of the time.
    env.push(("OUTBOX__RELAY__BATCH_SIZE".into(), "20".into()));
    let hung = RelayProc::spawn("slot-holder", &env);
    let pid = hung.child.id().to_string();
    let slot_held = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
         AND classid = {} AND objsubid = 2",
        outbox_relay::db::outbox::CLAIM_SLOT_CLASS
    );
    db.wait_for(
        "SELECT (count(*) FILTER (WHERE published_at IS NOT NULL) > 2000)::int FROM outbox",
        1,
        Duration::from_secs(30),
    )
    .await;
    // Freeze it inside a claim transaction, holding the only slot.
    freeze_while(&db, &pid, &slot_held).await;
    let published = "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL";
    let at_freeze = db.scalar(published).await;
    let _other = RelayProc::spawn("slot-waiter", &env);
    eventually(
        Duration::from_secs(20),
        "the other replica to publish without waiting for the hung one's slot",
        || async { db.scalar(published).await >= at_freeze + 5_000 },
    )
    .await;
    Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .expect("SIGCONT");
}

/// SIGSTOPs process `pid` at a moment when `held` (SQL giving 1 or 0) says 1: a relay caught
/// inside a claim transaction, with its locks.
async fn freeze_while(db: &TestDb, pid: &str, held: &str) {
    // Each try is a race with the replica's cycle; a loaded machine (the whole suite at once)
    // loses more of them.
    for _ in 0..1000 {
        Command::new("kill")
            .args(["-STOP", pid])
            .status()
            .expect("SIGSTOP");
        if db.scalar(held).await == 1 {
            return;
        }
        Command::new("kill")
            .args(["-CONT", pid])
            .status()
            .expect("SIGCONT");
        tokio::time::sleep(Duration::from_millis(7)).await;
    }
    panic!("never caught the replica inside a claim: {held}");
}

#[tokio::test(flavor = "multi_thread")]
async fn poll_only_delivers_without_listen() {
    let Bundle { db, redis, relay } =
        setup("poller", &[("OUTBOX__RELAY__POLL_ONLY", "true")]).await;
    relay.wait_ready(Duration::from_secs(20)).await;
    insert_events(&db, Events::varied().n(1..=500).topics(2).keys(10)).await;
    db.wait_until_published(Duration::from_secs(20)).await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query ILIKE 'LISTEN%'").await,
        0,
        "no LISTEN connection in poll-only mode"
    );
    assert_eq!(redis.xlen("t0").await + redis.xlen("t1").await, 500);
}

#[tokio::test(flavor = "multi_thread")]
async fn notify_switched_off_per_database_still_delivers_by_polling() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    db.exec(&format!(
        "ALTER DATABASE {} SET outbox.notify = 'off'",
        db.name
    ))
    .await;
    let mut listener = db.listener().await;
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__RELAY__POLL_INTERVAL".into(), "100ms".into()));
    let _relay = RelayProc::spawn("no-notify", &env);
    insert_events(&db, Events::varied().n(1..=300).topics(1).keys(10)).await;
    db.wait_until_published(Duration::from_secs(20)).await;
    assert_eq!(redis.xlen("t0").await, 300);
    let mut notifications = std::pin::pin!(listener.notifications_stream());
    let sent = db.notifications_before_marker(&mut notifications).await;
    assert!(
        sent.is_empty(),
        "no NOTIFY is sent when outbox.notify = off: {sent:?}"
    );
}
