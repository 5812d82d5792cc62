//! Test traffic and the checks on what reached Redis: bulk inserts, producers in rounds,
//! exactly-once and per-key order.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::time::Duration;

use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};

use super::{TestDb, TestRedis};

/// Test events for [`insert_events`]: one per payload number `n`, inserted in `n` order with
/// one statement, so per-key order is checkable (each key's `n` grows with its insertion).
/// Unset fields take [`Events::default`]'s; [`Events::varied`] is the shape most tests use.
#[derive(Clone, Debug)]
pub struct Events {
    /// The payload `n` of each event, one event per number.
    pub n: RangeInclusive<i64>,
    /// Topics `t0..`: event `n` goes to `t{n % topics}`.
    pub topics: usize,
    /// Keys `k0..`: event `n` has key `k{n % keys}`.
    pub keys: usize,
    /// Events whose `n` is a multiple of 4 have no key.
    pub some_unkeyed: bool,
    /// Payload fields beyond `n` (`i`, a text with an accent, quotes and markup) and a `trace`
    /// header: what a relay must carry intact.
    pub rich: bool,
}

impl Default for Events {
    /// One event, `n` = 1, topic t0, key k0, payload `{"n": 1}`, no headers.
    fn default() -> Events {
        Events {
            n: 1..=1,
            topics: 1,
            keys: 1,
            some_unkeyed: false,
            rich: false,
        }
    }
}

impl Events {
    /// Every 4th event unkeyed, rich payloads and headers (set `n`, `topics` and `keys`).
    pub fn varied() -> Events {
        Events {
            some_unkeyed: true,
            rich: true,
            ..Events::default()
        }
    }
}

/// Setters, so a test reads `Events::default().n(..)` in one line.
impl Events {
    /// Sets `n`.
    pub fn n(mut self, n: RangeInclusive<i64>) -> Events {
        self.n = n;
        self
    }
    /// Sets `topics`.
    pub fn topics(mut self, topics: usize) -> Events {
        self.topics = topics;
        self
    }
    /// Sets `keys`.
    pub fn keys(mut self, keys: usize) -> Events {
        self.keys = keys;
        self
    }
    /// Sets `some_unkeyed`.
    pub fn some_unkeyed(mut self, some_unkeyed: bool) -> Events {
        self.some_unkeyed = some_unkeyed;
        self
    }
    /// Sets `rich`.
    pub fn rich(mut self, rich: bool) -> Events {
        self.rich = rich;
        self
    }
}

/// Inserts `events` with one SQL statement.
pub async fn insert_events(db: &TestDb, events: Events) {
    let Events {
        n,
        topics,
        keys,
        some_unkeyed,
        rich,
    } = events;
    let (from, to) = n.into_inner();
    let payload = match rich {
        true => "jsonb_build_object('i', i, 'n', i, 'text', 'héllo \"quoted\" <b>')",
        false => "jsonb_build_object('n', i)",
    };
    let key = match some_unkeyed {
        true => format!("CASE WHEN i % 4 = 0 THEN NULL ELSE 'k' || (i % {keys}) END"),
        false => format!("'k' || (i % {keys})"),
    };
    let (headers_column, headers) = match rich {
        true => (", headers", ", jsonb_build_object('trace', 'tr-' || i)"),
        false => ("", ""),
    };
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key{headers_column})
         SELECT 't' || (i % {topics}), {payload}, {key}{headers}
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

/// A producer's traffic for [`produce_rounds`]: `rounds` transactions of `per_round` events
/// each, a pause after each; payload `n` counts up from `first_n` across rounds, so per-key
/// order is checkable. Unset fields take [`Rounds::default`]'s.
#[derive(Clone, Debug)]
pub struct Rounds {
    /// The payload `n` of the first event.
    pub first_n: i64,
    /// Transactions.
    pub rounds: usize,
    /// Events per transaction.
    pub per_round: i64,
    /// Topics `t0..`: event `n` goes to `t{n % topics}`.
    pub topics: usize,
    /// Keys `k0..`: event `n` has key `k{n % keys}`.
    pub keys: usize,
    /// After each transaction.
    pub pause: Duration,
}

impl Default for Rounds {
    /// One transaction of one event, `n` = 0, topic t0, key k0.
    fn default() -> Rounds {
        Rounds {
            first_n: 0,
            rounds: 1,
            per_round: 1,
            topics: 1,
            keys: 1,
            pause: Duration::ZERO,
        }
    }
}

/// Setters, so a test reads `Rounds::default().first_n(..)` in one line.
impl Rounds {
    /// Sets `first_n`.
    pub fn first_n(mut self, first_n: i64) -> Rounds {
        self.first_n = first_n;
        self
    }
    /// Sets `rounds`.
    pub fn rounds(mut self, rounds: usize) -> Rounds {
        self.rounds = rounds;
        self
    }
    /// Sets `per_round`.
    pub fn per_round(mut self, per_round: i64) -> Rounds {
        self.per_round = per_round;
        self
    }
    /// Sets `topics`.
    pub fn topics(mut self, topics: usize) -> Rounds {
        self.topics = topics;
        self
    }
    /// Sets `keys`.
    pub fn keys(mut self, keys: usize) -> Rounds {
        self.keys = keys;
        self
    }
    /// Sets `pause`.
    pub fn pause(mut self, pause: Duration) -> Rounds {
        self.pause = pause;
        self
    }
}

/// Inserts `rounds`' transactions on a connection of its own to `db_url`.
pub async fn produce_rounds(db_url: &str, rounds: Rounds) {
    let Rounds {
        first_n,
        rounds,
        per_round,
        topics,
        keys,
        pause,
    } = rounds;
    let mut conn = AsyncPgConnection::establish(db_url)
        .await
        .expect("producer connect");
    for r in 0..rounds {
        let from = first_n + r as i64 * per_round;
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
