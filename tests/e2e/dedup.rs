//! The publish script against a real Redis: an event published again within the dedup window,
//! from this window's set or the previous one's, is reported a duplicate and not appended; a set
//! two windows old is freed in the background, not by an expiry that stalls Redis, also when
//! the topic's traffic has stopped.

use std::time::Duration;

use chrono::Utc;
use outbox_relay::publish::{keys, Outcome, Publisher, PublisherConfig, StreamEvent};
use redis::AsyncCommands;
use uuid::Uuid;

use crate::support::*;

fn event(topic: &str, key: Option<&str>, n: u32) -> StreamEvent {
    StreamEvent {
        id: Uuid::new_v4(),
        topic: topic.into(),
        key: key.map(String::from),
        payload: format!(r#"{{"n":{n}}}"#),
        headers: "{}".into(),
        created_at: Utc::now(),
    }
}

fn publisher(redis: &TestRedis) -> Publisher {
    publisher_at(&redis.url, &redis.prefix)
}

fn publisher_at(url: &str, prefix: &str) -> Publisher {
    let config = PublisherConfig {
        stream_prefix: prefix.to_string(),
        dedup_window: Duration::from_secs(3600),
        max_payload_bytes: 1024 * 1024,
        maxlen: None,
        timeout: Duration::from_secs(5),
        durability: Default::default(),
        traced: false,
        envelopes: Default::default(),
    };
    let conn = Publisher::connect(url, config.timeout).expect("redis url");
    Publisher::new(conn, config)
}

fn outcomes(results: &[(Uuid, Outcome)]) -> Vec<Outcome> {
    results.iter().map(|(_, o)| o.clone()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_published_again_is_all_duplicates_from_this_or_the_previous_window() {
    let redis = TestRedis::shared();
    let publisher = publisher(&redis);
    let chains = vec![
        vec![event("d", Some("k1"), 0), event("d", Some("k1"), 1)],
        vec![event("d", None, 2)],
        vec![event("d", Some("k2"), 3)],
    ];
    let first = publisher
        .publish("d", &chains, None, 1)
        .await
        .expect("publish");
    assert_eq!(outcomes(&first), vec![Outcome::Published; 4]);
    let sent: Vec<Uuid> = chains.iter().flatten().map(|e| e.id).collect();
    let order: Vec<Uuid> = first.iter().map(|(id, _)| *id).collect();
    assert_eq!(order, sent, "outcomes come back in input order");

    let again = publisher
        .publish("d", &chains, None, 1)
        .await
        .expect("publish");
    assert_eq!(outcomes(&again), vec![Outcome::Duplicate; 4]);
    assert_eq!(redis.xlen("d").await, 4);

    // The window turned: what was remembered now sits in the previous window's set.
    let stream = keys::stream_key(&redis.prefix, "d");
    let now = Utc::now().timestamp() as u64;
    let [current, previous, _] = keys::dedup_keys(&stream, Duration::from_secs(3600), now);
    let mut conn = redis.conn().await;
    let () = conn.rename(&current, &previous).await.expect("rename");
    let mut mixed = chains.clone();
    mixed.push(vec![event("d", None, 4)]);
    let third = publisher
        .publish("d", &mixed, None, 1)
        .await
        .expect("publish");
    let mut expected = vec![Outcome::Duplicate; 4];
    expected.push(Outcome::Published);
    assert_eq!(outcomes(&third), expected);

    let entries = redis.entries("d").await;
    let payloads: Vec<&str> = entries.iter().map(|e| e["payload"].as_str()).collect();
    assert_eq!(
        payloads,
        [
            r#"{"n":0}"#,
            r#"{"n":1}"#,
            r#"{"n":2}"#,
            r#"{"n":3}"#,
            r#"{"n":4}"#
        ]
    );
    assert_eq!(entries[0]["key"], "k1");
    assert!(!entries[2].contains_key("key"), "unkeyed entry has no key");
    let remembered: usize = conn.scard(&current).await.expect("scard");
    assert_eq!(
        remembered, 1,
        "only the new event went into this window's set"
    );
}

/// Objects Redis has freed on its background thread since it started (`INFO memory`).
async fn lazyfreed(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(conn)
        .await
        .expect("info");
    info.lines()
        .find_map(|l| l.strip_prefix("lazyfreed_objects:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("lazyfreed_objects in INFO memory")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_set_two_windows_old_is_unlinked_by_the_next_publish_and_freed_in_the_background() {
    // A server of its own: the lazy-free counter is server-wide.
    let server = OwnRedis::start();
    let redis = TestRedis::on(&server.url());
    let publisher = publisher_at(&redis.url, &redis.prefix);
    let window = Duration::from_secs(3600);
    let old = vec![vec![event("r", None, 0)]];
    let first = publisher
        .publish("r", &old, None, 1)
        .await
        .expect("publish");
    assert_eq!(outcomes(&first), vec![Outcome::Published]);

    // Two windows on, what this window remembered sits in the set two buckets back (grown
    // past the size Redis frees inline), and the previous window's set holds another id.
    let stream = keys::stream_key(&redis.prefix, "r");
    let now = Utc::now().timestamp() as u64;
    let [current, previous, _] = keys::dedup_keys(&stream, window, now);
    let retired = keys::retired_dedup_key(&stream, window, now).expect("a bucket two back");
    let mut conn = redis.conn().await;
    let () = conn.rename(&current, &retired).await.expect("rename");
    let filler: Vec<Vec<u8>> = (0..1000)
        .map(|_| Uuid::new_v4().as_bytes().to_vec())
        .collect();
    let _: usize = conn.sadd(&retired, filler).await.expect("sadd");
    let recent = vec![vec![event("r", None, 1)]];
    let _: usize = conn
        .sadd(&previous, recent[0][0].id.as_bytes().as_slice())
        .await
        .expect("sadd");
    let freed_before = lazyfreed(&mut conn).await;

    let mut batch = old.clone();
    batch.extend(recent.clone());
    batch.push(vec![event("r", None, 2)]);
    let results = publisher
        .publish("r", &batch, None, 1)
        .await
        .expect("publish");
    assert_eq!(
        outcomes(&results),
        vec![Outcome::Published, Outcome::Duplicate, Outcome::Published],
        "ids older than two windows are forgotten; the previous window's are not"
    );
    let exists: bool = conn.exists(&retired).await.expect("exists");
    assert!(!exists, "the retired set is gone");
    let still: bool = conn.exists(&previous).await.expect("exists");
    assert!(
        still,
        "the previous window's set is still read, so it stays"
    );
    eventually_every(
        Duration::from_secs(5),
        Duration::from_millis(20),
        "the retired set to be freed on Redis's background thread",
        || {
            let mut conn = conn.clone();
            async move { lazyfreed(&mut conn).await != freed_before }
        },
    )
    .await;
}

/// The dedup sets of `redis`'s streams that exist now.
async fn dedup_sets(redis: &TestRedis) -> Vec<String> {
    let mut conn = redis.conn().await;
    conn.keys(format!("{{{}*}}:dedup:*", redis.prefix))
        .await
        .expect("keys")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_relay_unlinks_a_quiet_topics_old_sets_long_before_their_ttl() {
    let Bundle { db, redis, relay } = setup(
        "sweep",
        &[
            // Buckets of 2 s: the TTL backstop is 2 x 2 s + 60 s, a sweep runs every second.
            ("OUTBOX__REDIS__DEDUP_WINDOW", "2s"),
            ("OUTBOX__RELAY__LEASE", "1s"),
            ("OUTBOX__REDIS__TIMEOUT", "500ms"),
        ],
    )
    .await;
    insert_events(&db, Events::varied().n(1..=200).topics(2).keys(10)).await;
    db.wait_until_published(Duration::from_secs(30)).await;
    let sets = dedup_sets(&redis).await;
    assert!(!sets.is_empty(), "the published ids are remembered");
    let mut conn = redis.conn().await;
    for set in &sets {
        let ttl: i64 = conn.ttl(set).await.expect("ttl");
        assert!(ttl > 20, "{set} expires in {ttl} s, only as a backstop");
    }
    // No more traffic: no publish will unlink them; the dispatchers' sweeps must.
    eventually_every(
        Duration::from_secs(20),
        Duration::from_millis(250),
        "the sweeps to unlink the sets before their TTL",
        || async {
            let left = dedup_sets(&redis).await;
            left.is_empty()
                .then_some(())
                .ok_or(format!("left {left:?}"))
        },
    )
    .await;
    drop(relay);
}
