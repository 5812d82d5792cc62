//! Poison events: retried with backoff, dead after max attempts, while other topics and keys
//! flow; later events of a poisoned key wait for it, then flow once it is dead.

use std::time::Duration;

use crate::support::*;
use redis::AsyncCommands;

#[tokio::test(flavor = "multi_thread")]
async fn wrongtype_events_die_after_max_attempts_while_others_flow() {
    wrongtype_case(true).await;
}

/// The same with `relay.overlap_mark = false`: publish first, then mark.
#[tokio::test(flavor = "multi_thread")]
async fn wrongtype_events_die_the_same_when_publishing_first() {
    wrongtype_case(false).await;
}

/// Poison shares batches with good events, and two workers claim beside each other. With the
/// overlapped mark every such batch undoes its mark: the good events must still land once
/// each, be counted as published, and not be reported as crash-recovery duplicates.
async fn wrongtype_case(overlap: bool) {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut c = redis.conn().await;
    let _: () = c
        .set(redis.stream("bad"), "not a stream")
        .await
        .expect("plant poison");
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__RETRY__MAX_ATTEMPTS".into(), "3".into()));
    env.push(("OUTBOX__RELAY__OVERLAP_MARK".into(), overlap.to_string()));
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key) VALUES
           ('bad', '{\"n\":1}', 'kb'), ('bad', '{\"n\":2}', 'kb'), ('bad', '{\"n\":3}', NULL)",
    )
    .await;
    insert_events(&db, Events::varied().n(1..=2_000).topics(2).keys(10)).await;
    let relay = RelayProc::spawn("poison", &env);
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE topic <> 'bad' AND published_at IS NULL",
        0,
        Duration::from_secs(30),
    )
    .await;
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE topic = 'bad' AND dead_at IS NOT NULL",
        3,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE topic = 'bad' AND attempts = 3 AND last_error LIKE 'WRONGTYPE%'")
            .await,
        3
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE topic <> 'bad' AND attempts > 0")
            .await,
        0
    );
    assert_eq!(
        assert_exactly_once(&redis, 2).await,
        2_000,
        "each good event once"
    );
    // Every good event counted once as published, none as a crash's duplicate: a batch whose
    // overlapped mark met the poison keeps its row locks, so no other worker takes its
    // appends for a crash's. (The counters are at 0 from the first scrape: absent is a bug.)
    let http = relay.http();
    let series = |name: &str| {
        http.metric(name)
            .unwrap_or_else(|| panic!("{name} is not in the scrape:\n{}", http.metrics()))
    };
    assert_eq!(
        series("outbox_events_duplicate_total"),
        0.0,
        "appends of batches that met the poison counted as crash-recovery duplicates"
    );
    assert_eq!(
        series("outbox_events_published_total{topic=\"t0\"}")
            + series("outbox_events_published_total{topic=\"t1\"}"),
        2_000.0,
        "published_total is the events published"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_keys_later_events_wait_for_its_failing_event_then_flow_in_order() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__RETRY__MAX_ATTEMPTS".into(), "4".into()));
    env.push(("OUTBOX__RETRY__BASE".into(), "300ms".into()));
    env.push(("OUTBOX__REDIS__MAX_PAYLOAD_BYTES".into(), "2000".into()));
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key) VALUES
           ('t0', jsonb_build_object('n', 1, 'pad', repeat('x', 3000)), 'k');
         INSERT INTO outbox (topic, payload, partition_key) VALUES
           ('t0', '{\"n\":2}', 'k'), ('t0', '{\"n\":3}', 'k'), ('t0', '{\"n\":10}', 'other');",
    )
    .await;
    let _relay = RelayProc::spawn("poison-key", &env);
    // While the oversized head is being retried, its key's later events stay unpublished.
    let observed_waiting = std::cell::Cell::new(false);
    eventually(
        Duration::from_secs(20),
        "the oversized head to be dead-lettered",
        || async {
            // One statement, one snapshot: the head may die (and its key flow) between two.
            let both = db
                .scalar(
                    "SELECT count(*) FILTER (WHERE payload->>'n' = '1' AND attempts >= 1 AND dead_at IS NULL) * 1000
                          + count(*) FILTER (WHERE partition_key = 'k' AND published_at IS NOT NULL)
                     FROM outbox",
                )
                .await;
            let (retrying, published) = (both / 1000, both % 1000);
            if retrying == 1 {
                assert_eq!(
                    published, 0,
                    "later events of the key must wait for the failing one"
                );
                observed_waiting.set(true);
            }
            db.scalar("SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL")
                .await
                == 1
        },
    )
    .await;
    assert!(observed_waiting.get(), "never saw the head being retried");
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL",
        3,
        Duration::from_secs(20),
    )
    .await;
    let entries = redis.entries("t0").await;
    let ns: Vec<String> = entries.iter().map(|e| e["payload"].clone()).collect();
    assert_eq!(entries.len(), 3, "{ns:?}");
    assert_per_key_order(&entries);
    assert!(db
        .scalar("SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL AND attempts = 4 AND last_error LIKE '%max_payload_bytes%'")
        .await == 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn events_behind_a_window_of_blocked_followers_still_flow() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = base_env(&db, &redis);
    // Heads are looked for among the oldest 4 x batch_size = 40 pending rows first.
    env.push(("OUTBOX__RELAY__BATCH_SIZE".into(), "10".into()));
    env.push(("OUTBOX__RETRY__BASE".into(), "1s".into()));
    env.push(("OUTBOX__REDIS__MAX_PAYLOAD_BYTES".into(), "2000".into()));
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key) VALUES
           ('t0', jsonb_build_object('n', 0, 'pad', repeat('x', 3000)), 'stuck');
         INSERT INTO outbox (topic, payload, partition_key)
           SELECT 't0', jsonb_build_object('n', i), 'stuck' FROM generate_series(1, 100) i ORDER BY i;
         INSERT INTO outbox (topic, payload)
           SELECT 't1', jsonb_build_object('n', i) FROM generate_series(1, 50) i;",
    )
    .await;
    let _relay = RelayProc::spawn("window", &env);
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE topic = 't1' AND published_at IS NOT NULL",
        50,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE topic = 't0' AND (published_at IS NOT NULL OR dead_at IS NOT NULL)").await,
        0,
        "the stuck key is still waiting for its failing head"
    );
    assert_eq!(redis.xlen("t0").await, 0);
}
