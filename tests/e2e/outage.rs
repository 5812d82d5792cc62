//! A Redis outage (our own redis-server, stopped and restarted): no attempt burnt, nothing
//! dead, /readyz 503 during it and 200 after, delivery resumes by itself.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn redis_outage_burns_no_attempts_and_recovers() {
    let db = TestDb::new().await;
    let mut server = OwnRedis::start();
    let redis = TestRedis::on(&server.url());
    let relay = RelayProc::spawn("outage", &base_env(&db, &redis));
    relay.wait_ready(Duration::from_secs(20)).await;
    insert_events(&db, 200, 2, 10).await;
    db.wait_until_published(Duration::from_secs(30)).await;

    server.stop();
    relay
        .http()
        .wait_status("/readyz", 503, Duration::from_secs(20))
        .await;
    assert_eq!(
        relay.http().status("/healthz"),
        200,
        "alive while not ready"
    );
    let failed = relay.outage_cycles();
    insert_events(&db, 300, 2, 10).await;
    // Only a cycle that claimed the new events can fail (an empty claim never reaches Redis):
    // two of them, the second after the claim loop's backoff, have rolled back.
    relay
        .wait_outage_cycles_over(failed + 1.0, Duration::from_secs(20))
        .await;
    assert_eq!(db.pending().await, 300);
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0 OR dead_at IS NOT NULL")
            .await,
        0,
        "an outage consumes no attempts and dead-letters nothing"
    );

    server.restart();
    relay.wait_ready(Duration::from_secs(30)).await;
    db.wait_until_published(Duration::from_secs(30)).await;
    // The restarted server kept nothing: its streams hold exactly the 300 written after.
    assert_eq!(redis.xlen("t0").await + redis.xlen("t1").await, 300);
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0 OR dead_at IS NOT NULL")
            .await,
        0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn starts_while_redis_is_down_and_catches_up() {
    let db = TestDb::new().await;
    let mut server = OwnRedis::start();
    let redis = TestRedis::on(&server.url());
    server.stop();
    insert_events(&db, 100, 1, 5).await;
    let relay = RelayProc::spawn("late", &base_env(&db, &redis));
    relay
        .http()
        .wait_status("/healthz", 200, Duration::from_secs(20))
        .await;
    relay
        .http()
        .wait_status("/readyz", 503, Duration::from_secs(20))
        .await;
    server.restart();
    db.wait_until_published(Duration::from_secs(30)).await;
    relay.wait_ready(Duration::from_secs(20)).await;
    assert_eq!(redis.xlen("t0").await, 100);
}
