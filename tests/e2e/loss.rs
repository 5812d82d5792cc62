//! Redis losing entries the relay appended, noticed before the topic's next publish and
//! repaired from the rows retention keeps: a restart from an older RDB snapshot, and a
//! failover to a replica that lagged behind while the relay did not wait for it. Each lost
//! event is published again once, in its order, before the topic's newer events.

use std::time::Duration;

use crate::support::*;

/// Every event of `lost` (a range of `n`) comes before every event of `newer` in each topic.
async fn assert_lost_before_newer(redis: &TestRedis, lost: (i64, i64), newer: (i64, i64)) {
    for topic in ["t0", "t1"] {
        let order = payload_order(redis, topic).await;
        let last_lost = order
            .iter()
            .rposition(|n| (lost.0..=lost.1).contains(n))
            .expect("lost events published again");
        let first_newer = order
            .iter()
            .position(|n| (newer.0..=newer.1).contains(n))
            .expect("newer events");
        assert!(
            last_lost < first_newer,
            "{topic}: lost events first, then newer ones: {order:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_restart_from_an_older_snapshot_is_noticed_and_repaired() {
    let mut server = OwnRedis::start();
    let Bundle { db, redis, relay } =
        setup_on(TestRedis::on(&server.url()), "snapshot", base_env).await;
    insert_events(&db, Events::default().n(1..=200).topics(2).keys(10)).await;
    db.wait_until_published(Duration::from_secs(30)).await;
    let _: () = server.query(&redis::cmd("SAVE"));
    insert_events(&db, Events::default().n(1001..=1300).topics(2).keys(10)).await;
    db.wait_until_published(Duration::from_secs(30)).await;

    // Redis dies and comes back from the snapshot: the 300 later entries are gone, and
    // Postgres says they were published.
    server.signal("-KILL");
    server.stop();
    server.restart();
    assert_eq!(redis.xlen("t0").await + redis.xlen("t1").await, 200);

    insert_events(&db, Events::default().n(2001..=2100).topics(2).keys(10)).await;
    db.wait_until_published(Duration::from_secs(30)).await;
    assert_eq!(
        assert_exactly_once(&redis, 2).await,
        600,
        "every event once, each key in order"
    );
    assert_lost_before_newer(&redis, (1001, 1300), (2001, 2100)).await;
    let lost: f64 = ["t0", "t1"]
        .iter()
        .filter_map(|t| {
            relay
                .http()
                .metric(&format!("outbox_redis_lost_entries_total{{topic=\"{t}\"}}"))
        })
        .sum();
    assert_eq!(lost, 300.0, "outbox_redis_lost_entries_total counts them");
    let log = relay.log();
    assert_eq!(
        log.matches("redis lost entries the relay had appended")
            .count(),
        2,
        "one line per stream: {log}"
    );
    assert!(
        log.contains("ends_at") && log.contains("appended_up_to") && log.contains(&redis.prefix),
        "the line names the stream and its ids: {log}"
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
            .await,
        0,
        "a repair spends no attempt"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failover_to_a_lagging_replica_without_waiting_is_repaired() {
    let mut master = OwnRedis::start();
    let link = Proxy::start(master.port).await;
    let replica = OwnRedis::replica_through(&master, link.port);
    let proxy = Proxy::start(master.port).await;
    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup_on(TestRedis::on(&proxy.url()), "nowait", base_env).await;
    insert_events(&db, Events::default().n(1..=200).topics(2).keys(10)).await;
    db.wait_until_published(Duration::from_secs(30)).await;

    // The replica lags (its link cut); the relay does not wait for it, so it marks the 300
    // published.
    link.hold();
    insert_events(&db, Events::default().n(1001..=1300).topics(2).keys(10)).await;
    db.wait_until_published(Duration::from_secs(30)).await;

    master.signal("-KILL");
    master.stop();
    let _: () = replica.query(redis::cmd("REPLICAOF").arg("NO").arg("ONE"));
    proxy.switch(replica.port);

    insert_events(&db, Events::default().n(2001..=2100).topics(2).keys(10)).await;
    db.wait_until_published(Duration::from_secs(60)).await;
    let direct = TestRedis {
        url: replica.url(),
        prefix: redis.prefix.clone(),
        cluster: false,
    };
    assert_eq!(assert_exactly_once(&direct, 2).await, 600);
    assert_lost_before_newer(&direct, (1001, 1300), (2001, 2100)).await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_audit WHERE action = 'redis-loss'")
            .await,
        2,
        "each stream's loss is in the audit log"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn what_retention_already_deleted_is_reported_not_repaired() {
    let mut server = OwnRedis::start();
    let Bundle { db, redis, relay } =
        setup_on(TestRedis::on(&server.url()), "deleted", |db, redis| {
            let mut env = base_env(db, redis);
            // Rows are deleted as they are published: nothing is left to publish again.
            env.push(("OUTBOX__RETENTION__PUBLISHED_FOR".into(), "0s".into()));
            env
        })
        .await;
    insert_events(&db, Events::default().n(1..=100).topics(1).keys(10)).await;
    db.wait_for("SELECT count(*) FROM outbox", 0, Duration::from_secs(30))
        .await;
    server.stop();
    server.restart();
    insert_events(&db, Events::default().n(1001..=1010).topics(1).keys(10)).await;
    db.wait_for("SELECT count(*) FROM outbox", 0, Duration::from_secs(30))
        .await;
    assert_eq!(redis.xlen("t0").await, 10, "only what came after");
    let log = relay.log();
    assert!(
        log.contains("redis lost entries the relay had appended")
            && log.contains("cannot be published again"),
        "the loss and what cannot be repaired are reported: {log}"
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_audit WHERE action = 'redis-loss'")
            .await,
        1
    );
}
