//! A Redis outage (our own redis-server, stopped and restarted): no attempt burnt, nothing
//! dead, /readyz 503 during it and 200 after, delivery resumes by itself; what the restarted
//! server lost is noticed and published again, ahead of newer events.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn redis_outage_burns_no_attempts_and_recovers() {
    let mut server = OwnRedis::start();
    let Bundle { db, redis, relay } =
        setup_on(TestRedis::on(&server.url()), "outage", base_env).await;
    insert_events(&db, Events::varied().n(1..=200).topics(2).keys(10)).await;
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
    insert_events(&db, Events::default().n(1001..=1300).topics(2).keys(10)).await;
    // Only a cycle that claimed the new events can fail (an empty claim never reaches Redis):
    // two of them, the second after the claim loop's backoff, have rolled back.
    relay
        .wait_outage_cycles_over(failed + 1.0, Duration::from_secs(20))
        .await;
    assert_eq!(db.pending().await, 300);
    // The topic stays flagged down for as long as it is (the backlog sampler, every 5 s, must
    // not reset the gauge to 0 between two failed publishes).
    holds_for(
        Duration::from_secs(7),
        Duration::from_millis(200),
        "outbox_topic_down 1 while the topic is down",
        || async {
            match relay.http().metric("outbox_topic_down{topic=\"t0\"}") {
                Some(1.0) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0 OR dead_at IS NOT NULL")
            .await,
        0,
        "an outage consumes no attempts and dead-letters nothing"
    );

    server.restart();
    relay.wait_ready(Duration::from_secs(30)).await;
    db.wait_until_published(Duration::from_secs(30)).await;
    // The restarted server kept nothing (no persistence): the relay noticed before its next
    // publish and published the 200 lost events again, each once, before the 300 newer ones.
    assert_eq!(assert_exactly_once(&redis, 2).await, 500);
    for topic in ["t0", "t1"] {
        let order = payload_order(&redis, topic).await;
        let first_new = order.iter().position(|n| *n > 1000).expect("new events");
        assert!(
            order[first_new..].iter().all(|n| *n > 1000) && first_new == 100,
            "{topic}: the lost events first, then the newer ones: {order:?}"
        );
        assert_eq!(
            relay.http().metric(&format!(
                "outbox_redis_lost_entries_total{{topic=\"{topic}\"}}"
            )),
            Some(100.0)
        );
    }
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_audit WHERE action = 'redis-loss'")
            .await,
        2,
        "each stream's loss is in the audit log"
    );
    let log = relay.log();
    assert_eq!(
        log.matches("redis lost entries the relay had appended")
            .count(),
        2,
        "one line per stream: {log}"
    );
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
    insert_events(&db, Events::varied().n(1..=100).topics(1).keys(5)).await;
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
