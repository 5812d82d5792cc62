//! Consumer groups as configuration: created before the first publish to their topic, sampled
//! into `/metrics`, and `redis.trim_acked` trimming only what every declared group
//! acknowledged.

use std::time::Duration;

use redis::streams::{StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;

use crate::support::*;

/// The groups of a stream, by name: (pending, last delivered id).
async fn groups_of(redis: &TestRedis, topic: &str) -> Vec<(String, u64, String)> {
    let mut c = redis.conn().await;
    let reply: redis::streams::StreamInfoGroupsReply = c
        .xinfo_groups(redis.stream(topic))
        .await
        .expect("xinfo groups");
    reply
        .groups
        .into_iter()
        .map(|g| (g.name, g.pending as u64, g.last_delivered_id))
        .collect()
}

/// Reads up to `count` new entries as `consumer` of `group`; acknowledges the first `ack`.
pub(crate) async fn read(
    redis: &TestRedis,
    topic: &str,
    group: &str,
    count: usize,
    ack: usize,
) -> usize {
    let mut c = redis.conn().await;
    let opts = StreamReadOptions::default()
        .group(group, "reader")
        .count(count);
    let reply: StreamReadReply = c
        .xread_options(&[redis.stream(topic)], &[">"], &opts)
        .await
        .expect("xreadgroup");
    let ids: Vec<String> = reply
        .keys
        .into_iter()
        .flat_map(|k| k.ids)
        .map(|e| e.id)
        .collect();
    if ack > 0 {
        let _: u64 = c
            .xack(redis.stream(topic), group, &ids[..ack.min(ids.len())])
            .await
            .expect("xack");
    }
    ids.len()
}

/// Waits until the stream of `topic` is `len` entries long.
async fn wait_xlen(redis: &TestRedis, topic: &str, len: usize, timeout: Duration) {
    let what = format!("stream {topic} to be {len} entries long");
    eventually(timeout, &what, || async {
        match redis.xlen(topic).await {
            got if got == len => Ok(()),
            got => Err(format!("{got} entries")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn declared_groups_exist_before_the_first_publish_and_show_in_metrics() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    // Events wait in the outbox before the relay starts: a group that starts at `$` sees them
    // only if it exists before the relay publishes them.
    insert_events(&db, Events::varied().n(1..=200).topics(1).keys(10)).await;
    let mut env = base_env(&db, &redis);
    env.push((
        "OUTBOX__GROUPS".into(),
        r#"[{topic = "t0", name = "billing"}, {topic = "t0", name = "audit", start = "$"}]"#.into(),
    ));
    let relay = RelayProc::spawn("groups", &env);
    db.wait_until_published(Duration::from_secs(30)).await;

    let groups = groups_of(&redis, "t0").await;
    let names: Vec<&str> = groups.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(names, ["audit", "billing"], "both declared groups exist");
    assert_eq!(
        read(&redis, "t0", "audit", 500, 0).await,
        200,
        "a `$` group declared before the first publish gets every event"
    );
    assert_eq!(read(&redis, "t0", "billing", 50, 20).await, 50);

    let http = relay.http();
    let billing = r#"{topic="t0",group="billing"}"#;
    http.wait_metric(
        &format!("outbox_group_pending{billing}"),
        |v| v == 30.0,
        Duration::from_secs(15),
    )
    .await;
    http.wait_metric(
        &format!("outbox_group_lag{billing}"),
        |v| v == 150.0,
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(
        http.metric(r#"outbox_group_pending{topic="t0",group="audit"}"#),
        Some(200.0)
    );
    let age = http
        .metric(&format!("outbox_group_oldest_pending_age_seconds{billing}"))
        .expect("oldest pending age");
    assert!(age > 0.0, "the oldest pending entry has an age: {age}");
    // Nobody handles the 30 entries billing read: the oldest's idle time (since its delivery)
    // grows, what a stuck or dead consumer shows, whatever the entry's age.
    let idle = format!("outbox_group_oldest_pending_idle_seconds{billing}");
    let first = http
        .wait_metric(&idle, |v| v > 0.0, Duration::from_secs(15))
        .await;
    http.wait_metric(&idle, |v| v >= first + 1.0, Duration::from_secs(15))
        .await;
    // Acknowledged, nothing is pending: no idle time.
    let key = redis.stream("t0");
    let mut c = redis.conn().await;
    let pending: Vec<(String, String, u64, u64)> = redis::cmd("XPENDING")
        .arg(&key)
        .arg("billing")
        .arg("-")
        .arg("+")
        .arg(100)
        .query_async(&mut c)
        .await
        .expect("xpending");
    assert_eq!(pending.len(), 30);
    let mut ack = redis::cmd("XACK");
    ack.arg(&key).arg("billing");
    for (id, ..) in &pending {
        ack.arg(id);
    }
    let acked: u64 = ack.query_async(&mut c).await.expect("xack");
    assert_eq!(acked, 30);
    http.wait_metric(&idle, |v| v == 0.0, Duration::from_secs(15))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn trim_acked_never_drops_an_entry_a_declared_group_has_not_acknowledged() {
    let Bundle { db, redis, relay } = setup(
        "trim",
        &[
            ("OUTBOX__GROUPS", "t0:fast,t0:slow"),
            ("OUTBOX__REDIS__TRIM_ACKED", "true"),
            ("OUTBOX__RETENTION__INTERVAL", "300ms"),
        ],
    )
    .await;
    insert_events(&db, Events::varied().n(1..=100).topics(1).keys(10)).await;
    db.wait_until_published(Duration::from_secs(30)).await;
    let first_ids: Vec<String> = redis
        .entries("t0")
        .await
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(first_ids.len(), 100);

    // `fast` reads and acknowledges everything; `slow` reads 50 and acknowledges 40.
    assert_eq!(read(&redis, "t0", "fast", 1000, 1000).await, 100);
    assert_eq!(read(&redis, "t0", "slow", 50, 40).await, 50);
    // Kept: from slow's oldest unacknowledged entry (the 41st) on.
    wait_xlen(&redis, "t0", 60, Duration::from_secs(15)).await;
    let kept = redis.entries("t0").await;
    assert_eq!(
        kept[0]["id"], first_ids[40],
        "the oldest unacknowledged entry stays"
    );

    // Once slow acknowledges what it read, the entries it has not read yet still stay.
    let mut c = redis.conn().await;
    let pending: redis::streams::StreamPendingCountReply = c
        .xpending_count(redis.stream("t0"), "slow", "-", "+", 100)
        .await
        .expect("xpending");
    let ids: Vec<String> = pending.ids.into_iter().map(|p| p.id).collect();
    let _: u64 = c
        .xack(redis.stream("t0"), "slow", &ids)
        .await
        .expect("xack");
    wait_xlen(&redis, "t0", 50, Duration::from_secs(15)).await;
    assert_eq!(redis.entries("t0").await[0]["id"], first_ids[50]);
    assert_eq!(
        read(&redis, "t0", "slow", 1000, 1000).await,
        50,
        "slow still reads every entry it had not read"
    );

    let trimmed = relay
        .http()
        .metric(r#"outbox_stream_trimmed_total{topic="t0"}"#)
        .expect("trimmed counter");
    assert!(trimmed >= 50.0, "trimmed {trimmed}");
}
