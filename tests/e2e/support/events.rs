//! Test traffic and the checks on what reached Redis: bulk inserts, producers in rounds,
//! exactly-once and per-key order.

use std::collections::HashMap;
use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};

use super::{TestDb, TestRedis};

/// Inserts `n` events with SQL: topics t0..t{topics-1}, keys k0..k{keys-1} (every 4th unkeyed);
/// payload `n` counts in insertion order, so `assert_exactly_once` can check per-key order.
pub async fn insert_events(db: &TestDb, n: usize, topics: usize, keys: usize) {
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key, headers)
         SELECT 't' || (i % {topics}), jsonb_build_object('i', i, 'n', i, 'text', 'héllo \"quoted\" <b>'),
                CASE WHEN i % 4 = 0 THEN NULL ELSE 'k' || (i % {keys}) END,
                jsonb_build_object('trace', 'tr-' || i)
         FROM generate_series(1, {n}) AS i"
    ))
    .await;
}

/// Inserts events with payload `n` from `from` to `to` (one statement, in `n` order) on
/// `topics` topics t0.. and `keys` keys k0..: ranges that do not overlap keep per-key order
/// checkable across several calls.
pub async fn insert_range(db: &TestDb, from: i64, to: i64, topics: usize, keys: usize) {
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't' || (i % {topics}), jsonb_build_object('n', i), 'k' || (i % {keys})
         FROM generate_series({from}, {to}) AS i ORDER BY i"
    ))
    .await;
}

/// The payload `n` of each entry of `topic`, in stream order.
pub async fn payload_order(redis: &TestRedis, topic: &str) -> Vec<i64> {
    redis
        .entries(topic)
        .await
        .iter()
        .map(|e| {
            let payload: serde_json::Value = serde_json::from_str(&e["payload"]).expect("json");
            payload["n"].as_i64().expect("n")
        })
        .collect()
}

/// Checks that within each key the stream holds events in insertion order, using the payload
/// field `n` (increasing per key in insertion order). Each producer counts in its own
/// million (`n / 1_000_000`): only one producer's transactions are ordered among themselves.
pub fn assert_per_key_order(entries: &[HashMap<String, String>]) {
    let mut last: HashMap<(String, i64), i64> = HashMap::new();
    for e in entries {
        let Some(key) = e.get("key") else { continue };
        let payload: serde_json::Value = serde_json::from_str(&e["payload"]).expect("payload json");
        let n = payload["n"].as_i64().expect("payload.n");
        let sequence = (key.clone(), n / 1_000_000);
        if let Some(prev) = last.get(&sequence) {
            assert!(n > *prev, "key {key}: {n} after {prev}");
        }
        last.insert(sequence, n);
    }
}

/// Inserts `rounds` transactions of `per_round` events on `topics` topics and `keys` keys;
/// payload `n` is a global insertion counter, so per-key order is checkable.
pub async fn produce_rounds(
    db_url: &str,
    start: i64,
    rounds: usize,
    per_round: i64,
    topics: usize,
    keys: usize,
    pause: Duration,
) {
    let mut conn = AsyncPgConnection::establish(db_url)
        .await
        .expect("producer connect");
    for r in 0..rounds {
        let from = start + r as i64 * per_round;
        let to = from + per_round - 1;
        conn.batch_execute(&format!(
            "INSERT INTO outbox (topic, payload, partition_key)
             SELECT 't' || (i % {topics}), jsonb_build_object('n', i), 'k' || (i % {keys})
             FROM generate_series({from}, {to}) AS i ORDER BY i"
        ))
        .await
        .expect("produce");
        tokio::time::sleep(pause).await;
    }
}

/// All entries of topics t0..t{n-1}, checking each event id appears once; returns the count.
pub async fn assert_exactly_once(redis: &TestRedis, topics: usize) -> usize {
    let mut seen = std::collections::HashSet::new();
    for t in 0..topics {
        let entries = redis.entries(&format!("t{t}")).await;
        // Duplicates first: a second copy would otherwise be reported as a reordering.
        for e in &entries {
            assert!(
                seen.insert(e["id"].clone()),
                "event {} (payload {}) written twice",
                e["id"],
                e["payload"]
            );
        }
        assert_per_key_order(&entries);
    }
    seen.len()
}
