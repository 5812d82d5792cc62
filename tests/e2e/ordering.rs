//! Per-key order with three relay processes claiming concurrently while producers write.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn three_relays_keep_per_key_order_and_write_each_event_once() {
    relays_keep_per_key_order_and_write_each_event_once(3, base_env).await;
}

/// `replicas` relays started with `env` and two producers on the same keys: every event once,
/// in key order, and every replica took part. Returns the database once the relays are gone.
pub(crate) async fn relays_keep_per_key_order_and_write_each_event_once(
    replicas: usize,
    env: impl FnOnce(&TestDb, &TestRedis) -> Vec<(String, String)>,
) -> TestDb {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = env(&db, &redis);
    // Small batches force many interleaved claims across the replicas.
    env.push(("OUTBOX__RELAY__BATCH_SIZE".into(), "50".into()));
    let relays: Vec<RelayProc> = (0..replicas)
        .map(|i| RelayProc::spawn(&format!("order-{i}"), &env))
        .collect();
    // Two producers, disjoint counters, the same keys: 2 x 40 transactions of 100 events.
    let a = produce_rounds(
        &db.url,
        Rounds::default()
            .rounds(40)
            .per_round(100)
            .topics(3)
            .keys(20)
            .pause(Duration::from_millis(20)),
    );
    let b = produce_rounds(
        &db.url,
        Rounds::default()
            .first_n(1_000_000)
            .rounds(40)
            .per_round(100)
            .topics(3)
            .keys(20)
            .pause(Duration::from_millis(20)),
    );
    tokio::join!(a, b);
    db.wait_until_published(Duration::from_secs(90)).await;
    assert_eq!(assert_exactly_once(&redis, 3).await, 8_000);
    // Every replica took part: the work is shared, not serialized behind one leader.
    let alive = db.scalar("SELECT count(*) FROM outbox_replicas").await;
    assert_eq!(alive, replicas as i64);
    drop(relays);
    db
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hot_key_moves_a_whole_run_per_batch() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't0', jsonb_build_object('n', i), 'hot' FROM generate_series(1, 5000) AS i ORDER BY i",
    )
    .await;
    let relay = RelayProc::spawn("hot", &base_env(&db, &redis));
    db.wait_until_published(Duration::from_secs(60)).await;
    let entries = redis.entries("t0").await;
    assert_eq!(entries.len(), 5000);
    assert_per_key_order(&entries);
    // One event per key per round trip would take 5000 transactions; runs take a handful.
    let batches = relay
        .http()
        .metric("outbox_publish_duration_seconds_count")
        .expect("histogram count");
    assert!(
        batches <= 50.0,
        "{batches} batches for one hot key of 5000 events"
    );
}
