//! Events of nearly a megabyte: every one arrives, in key order, and the relay's memory is
//! bounded by `relay.batch_bytes`, not by `relay.batch_size` times the payload size (a
//! thousand of them would be a gigabyte, and a pod killed on the same batch at every restart).

use std::time::Duration;

use crate::support::*;

/// Peak resident memory of a process, MB (`VmHWM`).
fn peak_rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmHWM");
    kb / 1024.0
}

#[tokio::test(flavor = "multi_thread")]
async fn a_backlog_of_megabyte_events_drains_in_bounded_memory() {
    let db = TestDb::new().await;
    // A redis-server of its own: 150 MB of entries are not for the shared one.
    let server = OwnRedis::start();
    let redis = TestRedis::on(&server.url());
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 'big', jsonb_build_object('n', i, 'pad', repeat('x', 1000000)), 'k' || (i % 3)
         FROM generate_series(0, 149) AS i",
    )
    .await;
    // The default `relay.batch_bytes` (4 MiB).
    let relay = RelayProc::spawn("big", &base_env(&db, &redis));
    db.wait_until_published(Duration::from_secs(120)).await;
    let rss = peak_rss_mb(relay.child.id());
    let entries = redis.entries("big").await;
    assert_eq!(entries.len(), 150);
    assert_per_key_order(&entries);
    // 150 MB went through; batches of 4 MiB (and their copies on the way to Redis) fit in
    // well under 100 MB. Without the byte budget a claim takes all 150 events at once.
    assert!(rss < 100.0, "peak RSS {rss:.0} MB");
}
