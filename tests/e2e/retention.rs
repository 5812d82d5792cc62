//! Retention deletes old published rows in batches and never touches pending or dead rows;
//! a paused topic is published by no replica until resumed.

use std::time::Duration;

use crate::support::*;

/// A fresh database and key prefix, with topic `held` paused.
async fn with_held_topic_paused() -> (TestDb, TestRedis, diesel_async::AsyncPgConnection) {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut conn = db.conn().await;
    outbox_relay::db::topics::set_paused(&mut conn, "held", true, "test")
        .await
        .expect("pause");
    (db, redis, conn)
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_deletes_only_old_published_rows() {
    retention_deletes_only_old_published_rows_with(base_env).await;
}

/// Two relays started with `env` and retention of 2 s: published rows go, pending rows of a
/// paused topic and dead rows stay; the topic flows once resumed.
pub(crate) async fn retention_deletes_only_old_published_rows_with(
    env: impl FnOnce(&TestDb, &TestRedis) -> Vec<(String, String)>,
) {
    let (db, redis, mut conn) = with_held_topic_paused().await;
    db.exec(
        "INSERT INTO outbox (topic, payload) SELECT 'held', jsonb_build_object('n', i) FROM generate_series(1, 10) i;
         INSERT INTO outbox (topic, payload, attempts, last_error, dead_at)
           SELECT 'gone', '{}', 3, 'WRONGTYPE', now() - interval '30 days' FROM generate_series(1, 5);",
    )
    .await;
    insert_events(&db, Events::varied().n(1..=1_000).topics(1).keys(10)).await;
    let mut env = env(&db, &redis);
    env.push(("OUTBOX__RETENTION__PUBLISHED_FOR".into(), "2s".into()));
    env.push(("OUTBOX__RETENTION__INTERVAL".into(), "300ms".into()));
    env.push(("OUTBOX__RETENTION__BATCH_SIZE".into(), "100".into()));
    let _a = RelayProc::spawn("ret-a", &env);
    let _b = RelayProc::spawn("ret-b", &env);
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE topic = 't0'",
        0,
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(redis.xlen("t0").await, 1_000);
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE topic = 'held' AND published_at IS NULL")
            .await,
        10
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL")
            .await,
        5
    );
    assert_eq!(
        redis.xlen("held").await,
        0,
        "a paused topic is not published"
    );

    outbox_relay::db::topics::set_paused(&mut conn, "held", false, "test")
        .await
        .expect("resume");
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE topic = 'held' AND published_at IS NOT NULL",
        10,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(redis.xlen("held").await, 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_topic_filling_the_oldest_window_does_not_hold_the_others() {
    let (db, redis, _conn) = with_held_topic_paused().await;
    // Heads are looked for among the oldest 4 x batch_size = 40 pending rows first: the
    // paused topic's 200 events fill that window, keyed and unkeyed.
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
           SELECT 'held', jsonb_build_object('n', i), CASE WHEN i % 2 = 0 THEN 'k' || (i % 5) END
           FROM generate_series(1, 200) i ORDER BY i;
         INSERT INTO outbox (topic, payload, partition_key)
           SELECT 'free', jsonb_build_object('n', i), 'k' || (i % 3)
           FROM generate_series(1, 60) i ORDER BY i;",
    )
    .await;
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__RELAY__BATCH_SIZE".into(), "10".into()));
    let _relay = RelayProc::spawn("paused-window", &env);
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE topic = 'free' AND published_at IS NOT NULL",
        60,
        Duration::from_secs(20),
    )
    .await;
    assert_per_key_order(&redis.entries("free").await);
    assert_eq!(redis.xlen("held").await, 0, "the paused topic is held");
}
