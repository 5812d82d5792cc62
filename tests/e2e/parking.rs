//! Parked keys in the relay (contract section 13): on a topic with `park_on_dead`, an event
//! that dies (too big for `redis.max_payload_bytes`, `retry.max_attempts = 1`) holds back the
//! later events of its key (pending, no attempt spent) while other keys publish; a topic
//! without the setting lets them flow. The API, the gauge and the oldest-pending age say so;
//! a discard, or a retry that publishes, releases the key and its events go out in order.
//! With partitions and two relays too.

use std::collections::HashMap;
use std::time::Duration;

use crate::support::*;

/// Five keys of ten events each on `topic`; key k2's 4th event is too big to publish.
fn events_sql(topic: &str) -> String {
    format!(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT '{topic}', jsonb_build_object('n', n,
                    'pad', CASE WHEN k = 2 AND n = 4 THEN repeat('x', 5000) ELSE '' END),
                'k' || k
         FROM generate_series(1, 10) AS n, generate_series(0, 4) AS k ORDER BY n, k"
    )
}

/// The settings: small entries, no second attempt, `orders` parks.
fn config(partitions: u32, max_payload_bytes: usize) -> String {
    format!(
        r#"
[redis]
max_payload_bytes = {max_payload_bytes}

[retry]
max_attempts = 1

[[topics]]
name = "orders"
partitions = {partitions}
park_on_dead = true
"#
    )
}

/// Each key's `n`s in the order its entries are in `streams`.
async fn per_key(redis: &TestRedis, streams: &[String]) -> HashMap<String, Vec<i64>> {
    let mut keys: HashMap<String, Vec<i64>> = HashMap::new();
    for stream in streams {
        for entry in redis.entries(stream).await {
            let payload: serde_json::Value =
                serde_json::from_str(&entry["payload"]).expect("payload");
            keys.entry(entry["key"].clone())
                .or_default()
                .push(payload["n"].as_i64().expect("n"));
        }
    }
    keys
}

/// The dead event's id.
async fn dead_id(db: &TestDb, topic: &str) -> String {
    db.text(&format!(
        "SELECT id::text FROM outbox WHERE topic = '{topic}' AND dead_at IS NOT NULL"
    ))
    .await
}

/// `GET /api/v1/topics/orders/parked`, as JSON.
fn parked(admin: &Http) -> serde_json::Value {
    let res = admin.get("/api/v1/topics/orders/parked");
    assert_eq!(res.status, 200, "{}", res.body);
    serde_json::from_str(&res.body).expect("json")
}

/// Waits until the topic's key k2 is parked with its six later events held, every other
/// key's ten events (and k2's first three) being published; checks the API, the gauge and the
/// oldest-pending age, then that a claim cycle later nothing of k2 went out.
async fn wait_parked(db: &TestDb, relay: &RelayProc, topic: &str) -> String {
    db.wait_for(
        &format!(
            "SELECT count(*) FROM outbox WHERE topic = '{topic}' AND published_at IS NOT NULL"
        ),
        43,
        Duration::from_secs(60),
    )
    .await;
    db.wait_for(
        &format!("SELECT count(*) FROM outbox WHERE topic = '{topic}' AND dead_at IS NOT NULL"),
        1,
        Duration::from_secs(30),
    )
    .await;
    let dead = dead_id(db, topic).await;
    let admin = relay.http().bearer(ADMIN_TOKEN);
    relay.wait_for_a_claim_cycle(Duration::from_secs(10)).await;
    assert_eq!(
        parked(&admin),
        serde_json::json!({"keys": [{"key": "k2", "dead_id": dead, "held": 6}]})
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT count(*) FROM outbox WHERE topic = '{topic}' AND partition_key = 'k2'
             AND published_at IS NULL AND dead_at IS NULL AND attempts = 0"
        ))
        .await,
        6,
        "held, with no attempt spent"
    );
    admin
        .wait_metric(
            &format!("outbox_parked_events{{topic=\"{topic}\"}}"),
            |v| v == 6.0,
            Duration::from_secs(30),
        )
        .await;
    // A parked event is not late: the oldest-pending age stays clear of it.
    admin
        .wait_metric(
            "outbox_oldest_pending_age_seconds",
            |v| v == 0.0,
            Duration::from_secs(30),
        )
        .await;
    dead
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dead_event_parks_its_key_until_discarded_while_other_keys_and_topics_flow() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let (_dir, path) = config_file(&config(1, 2000));
    db.exec(&format!(
        "{}; {}",
        events_sql("orders"),
        events_sql("plain")
    ))
    .await;
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__ADMIN__TOKEN".into(), ADMIN_TOKEN.into()));
    let relay = RelayProc::spawn_with_config("park", &env, &path);
    let dead = wait_parked(&db, &relay, "orders").await;
    let streams = ["orders".to_string()];
    let got = per_key(&redis, &streams).await;
    assert_eq!(
        got["k2"],
        vec![1, 2, 3],
        "nothing of k2 after its dead event"
    );
    for k in ["k0", "k1", "k3", "k4"] {
        assert_eq!(got[k], (1..=10).collect::<Vec<_>>(), "{k} flows");
    }
    // A topic that does not park lets the key's later events flow past the dead one.
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE topic = 'plain' AND published_at IS NOT NULL",
        49,
        Duration::from_secs(30),
    )
    .await;
    let plain = per_key(&redis, &["plain".to_string()]).await;
    assert_eq!(plain["k2"], vec![1, 2, 3, 5, 6, 7, 8, 9, 10]);

    // The Dead letters page lists the parked key with its held count.
    let (ui, _) = relay.login(ADMIN_TOKEN);
    let page = ui.get("/dead");
    assert_eq!(page.status, 200);
    let table = page
        .body
        .split("id=\"parked\"")
        .nth(1)
        .expect("a parked-keys table");
    for cell in [
        "<td>orders</td>",
        "<code>k2</code>",
        &dead,
        "<strong>6</strong>",
    ] {
        assert!(table.contains(cell), "{cell} in {table}");
    }

    // A discard releases the key: its held events go out, in order.
    let admin = relay.http().bearer(ADMIN_TOKEN);
    let res = admin.post(&format!("/api/v1/events/{dead}/discard"), None);
    assert_eq!(res.status, 200, "{}", res.body);
    db.wait_for(
        "SELECT count(*) FROM outbox WHERE topic = 'orders' AND published_at IS NOT NULL",
        49,
        Duration::from_secs(30),
    )
    .await;
    let got = per_key(&redis, &streams).await;
    assert_eq!(got["k2"], vec![1, 2, 3, 5, 6, 7, 8, 9, 10]);
    assert_eq!(parked(&admin), serde_json::json!({"keys": []}));
    admin
        .wait_metric(
            "outbox_parked_events{topic=\"orders\"}",
            |v| v == 0.0,
            Duration::from_secs(30),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retry_that_publishes_releases_the_key_on_partitions_with_two_relays() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let (_small, small) = config_file(&config(4, 2000));
    db.exec(&events_sql("orders")).await;
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__ADMIN__TOKEN".into(), ADMIN_TOKEN.into()));
    let first = RelayProc::spawn_with_config("park-a", &env, &small);
    let second = RelayProc::spawn_with_config("park-b", &env, &small);
    let dead = wait_parked(&db, &first, "orders").await;
    let streams: Vec<String> = (0..4).map(|p| format!("orders:{p}")).collect();
    assert_eq!(per_key(&redis, &streams).await["k2"], vec![1, 2, 3]);
    drop((first, second));

    // Entries big enough now: the retried event publishes, then the held ones in order.
    let (_big, big) = config_file(&config(4, 1024 * 1024));
    let relay = RelayProc::spawn_with_config("park-c", &env, &big);
    relay.wait_ready(Duration::from_secs(30)).await;
    let admin = relay.http().bearer(ADMIN_TOKEN);
    let res = admin.post(&format!("/api/v1/events/{dead}/retry"), None);
    assert_eq!(res.status, 200, "{}", res.body);
    db.wait_until_published(Duration::from_secs(30)).await;
    let got = per_key(&redis, &streams).await;
    assert_eq!(got["k2"], (1..=10).collect::<Vec<_>>(), "in order, once");
    let k2 = outbox_core::partition::for_key("k2", 4);
    assert_eq!(
        per_key(&redis, &[format!("orders:{k2}")]).await["k2"].len(),
        10,
        "all in k2's partition"
    );
    assert_eq!(parked(&admin), serde_json::json!({"keys": []}));
}
