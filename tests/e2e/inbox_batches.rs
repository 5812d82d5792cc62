//! The library's batch inbox (`Batches(Inbox::for_batches(..))`): one transaction per batch,
//! and still every effect once: an event recorded in the inbox before is skipped, an event id
//! that appears twice in the stream is applied once, and a batch whose effect fails is
//! retried whole, then dead-lettered.

use std::time::Duration;

use diesel::sql_types::{Array, Integer, Uuid as SqlUuid};
use diesel_async::pooled_connection::AsyncDieselConnectionManager;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use outbox_consumer::inbox::Inbox;
use outbox_consumer::{Batches, Consumer, ConsumerConfig, Entry, HandlerError};
use redis::AsyncCommands;
use uuid::Uuid;

use crate::support::*;

const GROUP: &str = "batches";

/// Appends an event with the relay's fields and the given id.
async fn xadd(redis: &TestRedis, id: Uuid, key: &str, n: i32) {
    let fields = [
        ("id", id.to_string()),
        ("topic", "t0".to_string()),
        ("key", key.to_string()),
        ("payload", serde_json::json!({ "n": n }).to_string()),
        ("headers", "{}".to_string()),
        ("created_at", "2026-12-03T10:00:00.000001Z".to_string()),
    ];
    let mut c = redis.conn().await;
    let _: String = c
        .xadd(redis.stream("t0"), "*", &fields)
        .await
        .expect("xadd");
}

/// Runs a batch-inbox consumer whose effect inserts `(event_id, n)` rows (and fails a batch
/// holding `n = 13`), until the group has read and settled every entry.
async fn consume(db: &TestDb, redis: &TestRedis) {
    let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(&db.url);
    let pool = bb8::Pool::builder()
        .max_size(2)
        .build(manager)
        .await
        .expect("pool");
    let config = ConsumerConfig::new(&redis.url, "t0", GROUP)
        .stream_prefix(&redis.prefix)
        .max_deliveries(2)
        .batch_size(4)
        .retry(Duration::from_millis(20), Duration::from_millis(50))
        .block(Duration::from_millis(50));
    let consumer = Consumer::new(config).expect("consumer");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(async move {
        consumer
            .run(
                Batches(Inbox::for_batches(pool, |conn, entries: &[Entry]| {
                    let ids: Vec<Uuid> = entries.iter().map(|e| e.id).collect();
                    let ns: Vec<i32> = entries
                        .iter()
                        .map(|e| e.payload["n"].as_i64().unwrap_or(-1) as i32)
                        .collect();
                    Box::pin(async move {
                        if ns.contains(&13) {
                            return Err(HandlerError::retry("thirteen"));
                        }
                        diesel::sql_query(
                            "INSERT INTO batch_effects SELECT * FROM unnest($1::uuid[], $2::int[])",
                        )
                        .bind::<Array<SqlUuid>, _>(ids)
                        .bind::<Array<Integer>, _>(ns)
                        .execute(conn)
                        .await
                        .map(|_| ())
                        .map_err(HandlerError::from)
                    })
                })),
                async {
                    let _ = stopped.await;
                },
            )
            .await
    });
    eventually(Duration::from_secs(30), "the group to settle", || async {
        let mut c = redis.conn().await;
        let groups: redis::streams::StreamInfoGroupsReply = c
            .xinfo_groups(redis.stream("t0"))
            .await
            .map_err(|e| format!("xinfo groups: {e}"))?;
        let settled = groups
            .groups
            .iter()
            .any(|g| g.name == GROUP && g.pending == 0 && g.lag == Some(0));
        settled.then_some(()).ok_or(format!("{:?}", groups.groups))
    })
    .await;
    let _ = stop.send(());
    run.await.expect("consumer task");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_inbox_applies_each_event_once_and_dead_letters_a_failing_batch() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    db.exec("CREATE TABLE batch_effects (event_id uuid NOT NULL, n int NOT NULL)")
        .await;
    let ids: Vec<Uuid> = (0..30).map(|_| Uuid::new_v4()).collect();
    for (n, id) in ids.iter().enumerate() {
        xadd(&redis, *id, &format!("k{}", n % 3), n as i32).await;
    }
    // Event 5 appears a second time (a publish after the dedup window); event 7 was applied
    // by an earlier run.
    xadd(&redis, ids[5], "k2", 5).await;
    let mut conn = db.conn().await;
    conn.batch_execute(&format!(
        "INSERT INTO outbox_inbox (consumer_group, event_id, topic) VALUES ('{GROUP}', '{}', 't0')",
        ids[7]
    ))
    .await
    .expect("inbox row");

    consume(&db, &redis).await;

    let doubled = db
        .scalar("SELECT count(*) FROM (SELECT event_id FROM batch_effects GROUP BY 1 HAVING count(*) > 1) d")
        .await;
    assert_eq!(doubled, 0, "an event applied twice");
    assert_eq!(
        db.scalar("SELECT count(*) FROM batch_effects WHERE n = 7")
            .await,
        0,
        "an event already in the inbox is skipped"
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM batch_effects WHERE n = 5")
            .await,
        1
    );
    // The batch holding 13 (four entries) failed twice and went to the dead stream whole;
    // every other event was applied.
    let dead: Vec<i64> = redis
        .entries("t0:dead")
        .await
        .iter()
        .map(|e| serde_json::from_str::<serde_json::Value>(&e["payload"]).expect("a JSON payload"))
        .filter_map(|p| p["n"].as_i64())
        .collect();
    assert!(
        dead.contains(&13),
        "the failing batch is dead-lettered: {dead:?}"
    );
    assert!(dead.len() <= 4, "only the failing batch is dead: {dead:?}");
    let applied = db.scalar("SELECT count(*) FROM batch_effects").await;
    assert_eq!(
        applied as usize + dead.len(),
        29,
        "every event but the one already applied is applied or dead, once"
    );
    let applied_ids = db
        .scalar(&format!(
            "SELECT count(*) FROM batch_effects WHERE event_id = ANY(ARRAY[{}]::uuid[])",
            ids.iter()
                .map(|i| format!("'{i}'"))
                .collect::<Vec<_>>()
                .join(",")
        ))
        .await;
    assert_eq!(applied_ids, applied);
}
