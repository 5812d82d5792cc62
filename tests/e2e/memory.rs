//! Memory back-pressure: above `redis.max_memory_ratio` of Redis's `maxmemory` the relay holds
//! publishing (not ready, `outbox_redis_memory_held` 1, one log line) instead of running into
//! OOM refusals, and resumes by itself once Redis has room.

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_full_redis_holds_publishing_until_it_has_room() {
    let server = OwnRedis::start_with(
        &server_binary(),
        &["--maxmemory", "16mb", "--maxmemory-policy", "noeviction"],
    );
    let Bundle { db, redis, relay } =
        setup_on(TestRedis::on(&server.url()), "memory", |db, redis| {
            let mut env = base_env(db, redis);
            env.push(("OUTBOX__REDIS__MAX_MEMORY_RATIO".into(), "0.5".into()));
            env
        })
        .await;
    insert_events(&db, Events::varied().n(1..=50).topics(1).keys(5)).await;
    db.wait_until_published(Duration::from_secs(30)).await;

    // Something else fills Redis past half its maxmemory (8 MiB of values: 9 to 12 MiB used,
    // as the allocator goes).
    let filler = "x".repeat(1024 * 1024);
    for n in 0..8 {
        let _: () = server.query(redis::cmd("SET").arg(format!("filler{n}")).arg(&filler));
    }
    relay
        .http()
        .wait_metric(
            "outbox_redis_memory_held",
            |v| v == 1.0,
            Duration::from_secs(10),
        )
        .await;
    let ready = relay.http().get("/readyz");
    assert_eq!(ready.status, 503);
    assert!(ready.body.contains("\"memory\":false"), "{}", ready.body);
    assert!(
        relay
            .http()
            .metric("outbox_redis_memory_ratio")
            .is_some_and(|r| r > 0.5),
        "the ratio is exported"
    );
    insert_events(&db, Events::default().n(1001..=1100).topics(1).keys(5)).await;
    relay.wait_for_a_claim_cycle(Duration::from_secs(10)).await;
    assert_eq!(
        db.pending().await,
        100,
        "nothing is published while Redis is full"
    );
    assert_eq!(redis.xlen("t0").await, 50);
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
            .await,
        0,
        "holding spends no attempt"
    );

    for n in 0..8 {
        let _: () = server.query(redis::cmd("DEL").arg(format!("filler{n}")));
    }
    db.wait_until_published(Duration::from_secs(30)).await;
    relay.wait_ready(Duration::from_secs(10)).await;
    assert_eq!(assert_exactly_once(&redis, 1).await, 150);
    assert_eq!(relay.http().metric("outbox_redis_memory_held"), Some(0.0));
    let log = relay.log();
    assert_eq!(
        log.matches("above redis.max_memory_ratio").count(),
        1,
        "one line when it starts holding: {log}"
    );
}
