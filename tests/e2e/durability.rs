//! Waiting for replicas (`redis.wait_replicas`, `redis.wait_fsync`): nothing is marked
//! published before its writes are where the settings ask, so a failover to a replica that
//! lagged behind loses no event; a Redis that cannot confirm as asked leaves the relay
//! not-ready and sends nothing.

use std::time::Duration;

use crate::support::*;

fn waiting(db: &TestDb, redis: &TestRedis, replicas: &str, fsync: bool) -> Vec<(String, String)> {
    let mut env = base_env(db, redis);
    env.push(("OUTBOX__REDIS__WAIT_REPLICAS".into(), replicas.into()));
    env.push(("OUTBOX__REDIS__WAIT_FSYNC".into(), fsync.to_string()));
    env.push(("OUTBOX__REDIS__WAIT_TIMEOUT".into(), "300ms".into()));
    env
}

async fn no_attempt_spent(db: &TestDb) {
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0 OR dead_at IS NOT NULL")
            .await,
        0,
        "an unconfirmed batch spends no attempt"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failover_to_a_lagging_replica_loses_nothing_when_the_relay_waits_for_it() {
    let master = OwnRedis::start();
    let link = Proxy::start(master.port).await;
    let replica = OwnRedis::replica_through(&master, link.port);
    let proxy = Proxy::start(master.port).await;
    let Bundle { db, redis, relay } = setup_on(TestRedis::on(&proxy.url()), "wait", |db, redis| {
        waiting(db, redis, "1", false)
    })
    .await;
    insert_events(&db, Events::varied().n(1..=200).topics(2).keys(10)).await;
    db.wait_until_published(Duration::from_secs(30)).await;

    // The replica falls behind: its link is cut, the master takes the writes alone.
    link.hold();
    insert_events(&db, Events::default().n(1001..=1300).topics(2).keys(10)).await;
    relay
        .http()
        .wait_metric(
            "outbox_topic_outages_total{topic=\"t0\"}",
            |n| n >= 2.0,
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(
        db.pending().await,
        300,
        "nothing is marked published before the replica has it"
    );
    no_attempt_spent(&db).await;

    // Failover to the lagging replica: the master dies, the replica is promoted, and the
    // relay's connections land on it (a new replica behind it, so waiting can succeed).
    let mut master = master;
    master.signal("-KILL");
    master.stop();
    let _: () = replica.query(redis::cmd("REPLICAOF").arg("NO").arg("ONE"));
    let _standby = OwnRedis::replica_of(&replica);
    proxy.switch(replica.port);

    db.wait_until_published(Duration::from_secs(60)).await;
    no_attempt_spent(&db).await;
    let direct = TestRedis {
        url: replica.url(),
        prefix: redis.prefix.clone(),
        cluster: false,
    };
    assert_eq!(
        assert_exactly_once(&direct, 2).await,
        500,
        "the promoted replica holds every event once, each key in order"
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_audit WHERE action = 'redis-loss'")
            .await,
        0,
        "nothing marked published was lost: nothing to repair"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_that_does_not_acknowledge_holds_events_back_until_it_does() {
    let master = OwnRedis::start();
    let Bundle { db, redis, relay } =
        setup_on(TestRedis::on(&master.url()), "noreplica", |db, redis| {
            waiting(db, redis, "1", false)
        })
        .await;
    insert_events(&db, Events::varied().n(1..=100).topics(1).keys(5)).await;
    relay
        .http()
        .wait_metric(
            "outbox_topic_outages_total{topic=\"t0\"}",
            |n| n >= 2.0,
            Duration::from_secs(20),
        )
        .await;
    assert_eq!(db.pending().await, 100, "no replica, nothing confirmed");
    no_attempt_spent(&db).await;
    assert!(
        relay.log().contains("0 of 1 replicas acknowledged"),
        "the log says why: {}",
        relay.log()
    );

    let _replica = OwnRedis::replica_of(&master);
    db.wait_until_published(Duration::from_secs(30)).await;
    assert_eq!(
        assert_exactly_once(&redis, 1).await,
        100,
        "published again as one entry per event"
    );
    no_attempt_spent(&db).await;
}

/// A relay asked to wait for the append-only file on a server that cannot: not ready, one
/// log line naming the setting, and nothing sent.
async fn refused_fsync(server: &OwnRedis) {
    let db = TestDb::new().await;
    let redis = TestRedis::on(&server.url());
    let relay = RelayProc::spawn("nofsync", &waiting(&db, &redis, "0", true));
    relay
        .http()
        .wait_status("/healthz", 200, Duration::from_secs(20))
        .await;
    insert_events(&db, Events::varied().n(1..=50).topics(1).keys(5)).await;
    // It found out that the server cannot confirm, and a claim cycle has run since the
    // insert: the events had their chance to go.
    eventually(
        Duration::from_secs(20),
        "the refusal in the log",
        || async { relay.log().contains("redis.wait_fsync cannot be honoured") },
    )
    .await;
    relay.wait_for_a_claim_cycle(Duration::from_secs(20)).await;
    let ready = relay.http().get("/readyz");
    assert_eq!(ready.status, 503);
    assert!(
        ready.body.contains("\"durability\":false"),
        "{}",
        ready.body
    );
    assert_eq!(db.pending().await, 50, "nothing marked published");
    assert_eq!(redis.xlen("t0").await, 0, "nothing sent");
    no_attempt_spent(&db).await;
    let log = relay.log();
    assert_eq!(
        log.matches("redis.wait_fsync cannot be honoured").count(),
        1,
        "one line naming the setting: {log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_fsync_is_refused_by_a_redis_without_waitaof() {
    // The Debian redis-server is 7.0, before WAITAOF.
    refused_fsync(&OwnRedis::start()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_fsync_is_refused_without_an_append_only_file_and_honoured_with_one() {
    refused_fsync(&OwnRedis::start_with(&valkey_server(), &[])).await;

    let server = OwnRedis::start_with(&valkey_server(), &["--appendonly", "yes"]);
    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup_on(TestRedis::on(&server.url()), "fsync", |db, redis| {
        waiting(db, redis, "0", true)
    })
    .await;
    insert_events(&db, Events::varied().n(1..=100).topics(1).keys(5)).await;
    db.wait_until_published(Duration::from_secs(30)).await;
    assert_eq!(assert_exactly_once(&redis, 1).await, 100);
}
