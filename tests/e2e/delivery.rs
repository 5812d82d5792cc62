//! Delivery: every committed event reaches its stream exactly once with intact fields; rolled
//! back events never appear; delete mode removes rows at publish time.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::support::*;
use diesel::sql_types::Text;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, RunQueryDsl};
use outbox_relay::producer::{enqueue, NewEvent, ProducerError};

#[derive(QueryableByName, Debug)]
struct Row {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Text)]
    topic: String,
    #[diesel(sql_type = Text)]
    payload: String,
    #[diesel(sql_type = Text)]
    headers: String,
    #[diesel(sql_type = diesel::sql_types::Nullable<Text>)]
    partition_key: Option<String>,
    #[diesel(sql_type = Text)]
    created_at: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn twelve_thousand_events_arrive_exactly_once_with_intact_fields() {
    arrive_exactly_once_with_intact_fields(base_env).await;
}

/// 12,000 events on three topics reach their streams once each, every field as in its row,
/// through one relay started with `env`; the per-topic counter and the contract's metrics say
/// so. Returns the database, streams and relay for further checks.
pub(crate) async fn arrive_exactly_once_with_intact_fields(
    env: impl FnOnce(&TestDb, &TestRedis) -> Vec<(String, String)>,
) -> (TestDb, TestRedis, RelayProc) {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    insert_events(&db, Events::varied().n(1..=12_000).topics(3).keys(50)).await;
    let relay = RelayProc::spawn("r1", &env(&db, &redis));
    db.wait_until_published(Duration::from_secs(60)).await;

    let mut conn = db.conn().await;
    let rows: Vec<Row> = diesel::sql_query(
        "SELECT id::text AS id, topic, payload::text AS payload, headers::text AS headers,
                partition_key, to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS created_at
         FROM outbox",
    )
    .load(&mut conn)
    .await
    .expect("rows");
    let by_id: HashMap<&str, &Row> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut seen = HashSet::new();
    let mut total = 0;
    for topic in ["t0", "t1", "t2"] {
        for entry in redis.entries(topic).await {
            total += 1;
            let id = entry["id"].clone();
            assert!(seen.insert(id.clone()), "event {id} appears twice");
            let row = by_id.get(id.as_str()).expect("entry matches a row");
            assert_eq!(entry["topic"], row.topic);
            assert_eq!(entry["topic"], topic, "entry in its topic's stream");
            assert_eq!(entry["payload"], row.payload);
            assert_eq!(entry["headers"], row.headers);
            assert_eq!(entry["created_at"], row.created_at);
            assert_eq!(entry.get("key"), row.partition_key.as_ref());
            let expected_fields = if row.partition_key.is_some() { 6 } else { 5 };
            assert_eq!(entry.len(), expected_fields, "fields: {:?}", entry.keys());
        }
    }
    assert_eq!(total, 12_000);
    let metrics = relay.http().metrics();
    assert!(
        metrics.contains("outbox_events_published_total{topic=\"t0\"} 4000"),
        "{metrics}"
    );
    for name in [
        "outbox_events_pending",
        "outbox_events_dead",
        "outbox_oldest_pending_age_seconds",
        "outbox_publish_duration_seconds_bucket",
    ] {
        assert!(metrics.contains(name), "missing {name} in {metrics}");
    }
    drop(conn);
    (db, redis, relay)
}

#[tokio::test(flavor = "multi_thread")]
async fn rolled_back_events_never_appear() {
    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup("r1", &[]).await;
    let mut conn = db.conn().await;
    let result = conn
        .transaction::<(), ProducerError, _>(async |tx| {
            enqueue(
                tx,
                &NewEvent::new("rb", serde_json::json!({"rolled": "back"})),
            )
            .await?;
            Err(ProducerError::InvalidTopic("abort on purpose".into()))
        })
        .await;
    assert!(result.is_err());
    let kept = enqueue(
        &mut conn,
        &NewEvent::new("rb", serde_json::json!({"kept": true})),
    )
    .await
    .expect("enqueue");
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL",
        1,
        Duration::from_secs(20),
    )
    .await;
    // A phantom wrongly claimed would be published by now.
    db.wait_for_a_claim_cycle(Duration::from_secs(20)).await;
    let entries = redis.entries("rb").await;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0]["id"], kept.to_string());
    assert_eq!(db.scalar("SELECT count(*) FROM outbox").await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn delete_mode_removes_rows_at_publish_time() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    insert_events(&db, Events::varied().n(1..=3_000).topics(2).keys(10)).await;
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__RETENTION__PUBLISHED_FOR".into(), "0s".into()));
    let _relay = RelayProc::spawn("r1", &env);
    db.wait_for("SELECT count(*) FROM outbox", 0, Duration::from_secs(60))
        .await;
    assert_eq!(redis.xlen("t0").await + redis.xlen("t1").await, 3_000);
}

/// Behind a pooler in transaction mode that cannot carry prepared statements, the switch turns
/// them off; delivery and per-key order are the same.
#[tokio::test(flavor = "multi_thread")]
async fn without_prepared_statements_every_event_arrives_in_key_order() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    insert_events(&db, Events::varied().n(1..=2_000).topics(2).keys(10)).await;
    let mut env = base_env(&db, &redis);
    env.push((
        "OUTBOX__DATABASE__PREPARED_STATEMENTS".into(),
        "false".into(),
    ));
    let _relay = RelayProc::spawn("r1", &env);
    db.wait_until_published(Duration::from_secs(60)).await;
    let mut last: HashMap<String, i64> = HashMap::new();
    let mut total = 0;
    for topic in ["t0", "t1"] {
        for entry in redis.entries(topic).await {
            total += 1;
            let Some(key) = entry.get("key") else {
                continue;
            };
            // `i` grows with insertion order (insert_events).
            let payload: serde_json::Value =
                serde_json::from_str(&entry["payload"]).expect("payload json");
            let i = payload["i"].as_i64().expect("payload.i");
            let before = last.insert(format!("{topic}/{key}"), i).unwrap_or(0);
            assert!(i > before, "{topic}/{key}: event {i} after {before}");
        }
    }
    assert_eq!(total, 2_000);
}

#[tokio::test(flavor = "multi_thread")]
async fn future_available_at_waits_and_sql_enqueue_works() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    db.exec(
        "SELECT outbox_enqueue('later', '{\"a\":1}', 'k1');
         INSERT INTO outbox (topic, payload, available_at) VALUES ('later', '{\"b\":2}', now() + interval '2 seconds');",
    )
    .await;
    let _relay = RelayProc::spawn("r1", &base_env(&db, &redis));
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL",
        1,
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(redis.xlen("later").await, 1, "the delayed event waits");
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL",
        2,
        Duration::from_secs(20),
    )
    .await;
    let entries = redis.entries("later").await;
    assert_eq!(entries[0]["key"], "k1");
    assert_eq!(entries[1].get("key"), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn maxlen_trims_streams_per_topic_or_globally() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut conn = db.conn().await;
    outbox_relay::db::topics::set_maxlen(&mut conn, "t0", Some(100))
        .await
        .expect("set maxlen");
    insert_events(&db, Events::varied().n(1..=3_000).topics(2).keys(10)).await;
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__REDIS__MAXLEN".into(), "1000".into()));
    env.push(("OUTBOX__RELAY__BATCH_SIZE".into(), "100".into()));
    let _relay = RelayProc::spawn("trim", &env);
    db.wait_until_published(Duration::from_secs(60)).await;
    // MAXLEN ~ trims whole radix-tree nodes (100 entries by default): about, never under.
    let t0 = redis.xlen("t0").await;
    let t1 = redis.xlen("t1").await;
    assert!(
        (100..=300).contains(&t0),
        "t0 trimmed to its own maxlen: {t0}"
    );
    assert!(
        (1000..=1200).contains(&t1),
        "t1 trimmed to redis.maxlen: {t1}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_oldest_pending_age_counts_only_events_that_should_be_going_out() {
    let Bundle {
        db,
        redis: _redis,
        relay,
    } = setup("age", &[]).await;
    db.exec(
        "INSERT INTO outbox_topics (topic, paused) VALUES ('held', true);
         -- An hour-old backlog of a paused topic, and events scheduled an hour ahead.
         INSERT INTO outbox (topic, payload, created_at)
           SELECT 'held', '{}', now() - interval '1 hour' FROM generate_series(1, 3);
         INSERT INTO outbox (topic, payload, created_at, available_at)
           SELECT 'later', '{}', now() - interval '1 hour', now() + interval '1 hour'
           FROM generate_series(1, 3);
         -- A key whose first event waits for its retry, and a due event behind it: late.
         INSERT INTO outbox (topic, payload, partition_key, created_at, available_at, attempts)
           VALUES ('k', '{}', 'stuck', now() - interval '2 hours', now() + interval '1 hour', 1);
         INSERT INTO outbox (topic, payload, partition_key, created_at, available_at)
           VALUES ('k', '{}', 'stuck', now() - interval '1 hour', now() - interval '1 hour');",
    )
    .await;
    let http = relay.http();
    let series = "outbox_oldest_pending_age_seconds";
    http.wait_metric(
        series,
        |age| (3590.0..3700.0).contains(&age),
        Duration::from_secs(20),
    )
    .await;
    // Without the key held behind its failing head, nothing the relay should publish is late:
    // the paused topic and the scheduled events wait on purpose.
    db.exec("DELETE FROM outbox WHERE topic = 'k'").await;
    http.wait_metric(series, |age| age < 10.0, Duration::from_secs(20))
        .await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL")
            .await,
        6,
        "held and scheduled events still wait"
    );
    let stats_age = relay.http().get("/api/v1/stats").json["oldest_pending_age_seconds"]
        .as_f64()
        .expect("age");
    assert!(stats_age < 10.0, "{stats_age}");
}
