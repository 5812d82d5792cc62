//! `outbox-relay tail`: one JSON object per entry with payload and headers as JSON values,
//! `--from`, `--count`, and `--group` acknowledging what it printed.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use redis::AsyncCommands;

use crate::support::*;

pub(crate) fn tail(redis: &TestRedis, args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.arg("tail")
        .args(args)
        .env("REDIS_URL", &redis.url)
        .env("OUTBOX__REDIS__STREAM_PREFIX", &redis.prefix)
        .env("RUST_LOG", "info");
    if redis.cluster {
        cmd.env("OUTBOX__REDIS__CLUSTER", "true");
    }
    cmd
}

/// Runs `tail` to its end (it must end within a minute).
pub(crate) async fn tail_output(redis: &TestRedis, args: &[&str]) -> Output {
    let child = tail(redis, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tail");
    tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("tail ends")
    .expect("join")
    .expect("output")
}

pub(crate) fn lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

/// A relay publishes `n` events of topic t0 (keys k0..k2, every 4th unkeyed).
async fn published(db: &TestDb, redis: &TestRedis, from: usize, n: usize) {
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key, headers)
         SELECT 't0', jsonb_build_object('n', i, 'nested', jsonb_build_object('ok', true)),
                CASE WHEN i % 4 = 0 THEN NULL ELSE 'k' || (i % 3) END,
                jsonb_build_object('trace', 'tr-' || i)
         FROM generate_series({from}, {}) AS i",
        from + n - 1
    ))
    .await;
    let _relay = RelayProc::spawn("tail", &base_env(db, redis));
    db.wait_until_published(Duration::from_secs(30)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tail_from_the_start_prints_each_entry_as_json_values_and_stops_at_count() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    published(&db, &redis, 1, 8).await;
    let out = tail_output(&redis, &["t0", "--from", "0", "--count", "5"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = lines(&out);
    assert_eq!(got.len(), 5);
    let entries = redis.entries("t0").await;
    let ids = redis.entries_ids("t0").await;
    let json = |text: &str| serde_json::from_str::<serde_json::Value>(text).expect("json");
    for (n, line) in got.iter().enumerate() {
        let entry = &entries[n];
        assert_eq!(line["stream_id"], ids[n].as_str(), "stream order");
        assert_eq!(line["id"], entry["id"].as_str());
        assert_eq!(line["topic"], "t0");
        assert_eq!(
            line["payload"],
            json(&entry["payload"]),
            "payload is a JSON value"
        );
        assert_eq!(
            line["headers"],
            json(&entry["headers"]),
            "headers are a JSON value"
        );
        assert_eq!(line["payload"]["nested"]["ok"], true);
        assert_eq!(line["created_at"], entry["created_at"].as_str());
        let n = line["payload"]["n"].as_i64().expect("n");
        match n % 4 {
            0 => assert!(line["key"].is_null(), "an unkeyed event has key null"),
            _ => assert_eq!(line["key"], format!("k{}", n % 3)),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn tail_without_from_prints_only_new_entries() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    published(&db, &redis, 1, 5).await;
    let mut child: Child = tail(&redis, &["t0", "--count", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tail");
    // Wait for its "tailing" line: from then on, what is added is new to it.
    let stderr = child.stderr.take().expect("stderr");
    tokio::task::spawn_blocking(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("tailing"))
    })
    .await
    .expect("join");
    published(&db, &redis, 6, 3).await;
    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await
    .expect("tail ends")
    .expect("join")
    .expect("output");
    assert!(out.status.success());
    let ns: Vec<i64> = lines(&out)
        .iter()
        .map(|l| l["payload"]["n"].as_i64().expect("n"))
        .collect();
    assert_eq!(ns, [6, 7, 8]);
}

#[tokio::test(flavor = "multi_thread")]
async fn tail_with_a_group_acknowledges_what_it_printed() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    published(&db, &redis, 1, 6).await;
    let out = tail_output(
        &redis,
        &["t0", "--group", "audit", "--from", "0", "--count", "4"],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(lines(&out).len(), 4);
    let mut c = redis.conn().await;
    let groups: redis::streams::StreamInfoGroupsReply =
        c.xinfo_groups(redis.stream("t0")).await.expect("groups");
    let audit = &groups.groups[0];
    assert_eq!(audit.name, "audit");
    assert_eq!(audit.pending, 0, "every printed entry acknowledged");
    assert_eq!(audit.last_delivered_id, redis.entries_ids("t0").await[3]);
    // The group goes on where it stopped.
    let out = tail_output(&redis, &["t0", "--group", "audit", "--count", "2"]).await;
    let next: Vec<String> = lines(&out)
        .iter()
        .map(|l| l["stream_id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(next, redis.entries_ids("t0").await[4..6]);
}

#[tokio::test(flavor = "multi_thread")]
async fn tail_refuses_a_bad_from_with_status_2() {
    let redis = TestRedis::shared();
    let out = tail_output(&redis, &["t0", "--from", "5-0"]).await;
    assert_eq!(out.status.code(), Some(2));
}
