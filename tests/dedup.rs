//! The publish script against a real Redis: an event published again within the dedup window,
//! from this window's set or the previous one's, is reported a duplicate and not appended.

mod common;

use std::time::Duration;

use chrono::Utc;
use outbox_relay::publish::{keys, Outcome, Publisher, PublisherConfig, StreamEvent};
use redis::AsyncCommands;
use uuid::Uuid;

use common::*;

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
    let config = PublisherConfig {
        stream_prefix: redis.prefix.clone(),
        dedup_window: Duration::from_secs(3600),
        max_payload_bytes: 1024 * 1024,
        maxlen: None,
        timeout: Duration::from_secs(5),
    };
    let conn = Publisher::connect(&redis.url, config.timeout).expect("redis url");
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
        .publish("d", &chains, None)
        .await
        .expect("publish");
    assert_eq!(outcomes(&first), vec![Outcome::Published; 4]);
    let sent: Vec<Uuid> = chains.iter().flatten().map(|e| e.id).collect();
    let order: Vec<Uuid> = first.iter().map(|(id, _)| *id).collect();
    assert_eq!(order, sent, "outcomes come back in input order");

    let again = publisher
        .publish("d", &chains, None)
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
    let third = publisher.publish("d", &mixed, None).await.expect("publish");
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
