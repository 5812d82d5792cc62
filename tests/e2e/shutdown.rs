//! Graceful shutdown: SIGTERM stops claiming, releases what it holds, exits 0 quickly, and
//! another replica carries on with the backlog.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_exits_zero_and_another_replica_takes_over() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    insert_events(&db, Events::varied().n(1..=60_000).topics(3).keys(100)).await;
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__RELAY__LEASE".into(), "30s".into()));
    env.push(("OUTBOX__RELAY__BATCH_SIZE".into(), "200".into()));
    let mut a = RelayProc::spawn("graceful-a", &env);
    let _b = RelayProc::spawn("graceful-b", &env);
    db.wait_for(
        "SELECT count(*) FROM outbox_replicas",
        2,
        Duration::from_secs(20),
    )
    .await;
    db.wait_for(
        "SELECT (count(*) FILTER (WHERE published_at IS NOT NULL) > 2000)::int FROM outbox",
        1,
        Duration::from_secs(30),
    )
    .await;
    a.terminate();
    let code = a.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0), "SIGTERM exits 0 within 10 s");
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_replicas WHERE instance_id = 'graceful-a'")
            .await,
        0,
        "a stopped replica leaves the heartbeat table"
    );
    // B finishes the backlog; nothing A held stays locked until the 30 s lease.
    db.wait_until_published(Duration::from_secs(60)).await;
    let mut seen = std::collections::HashSet::new();
    for t in ["t0", "t1", "t2"] {
        for e in redis.entries(t).await {
            assert!(seen.insert(e["id"].clone()), "written twice");
        }
    }
    assert_eq!(seen.len(), 60_000);
}
