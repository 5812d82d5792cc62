//! Redis behind Sentinel: the relay (waiting for a replica), an inbox consumer and `tail` reach
//! the master the Sentinel names and follow a failover by themselves while events flow:
//! nothing lost or doubled, each key in order, no attempt spent.

use std::process::Stdio;
use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn relay_consumer_and_tail_follow_a_sentinel_failover_while_events_flow() {
    let db = TestDb::new().await;
    let mut master = OwnRedis::start();
    let replicas = [OwnRedis::replica_of(&master), OwnRedis::replica_of(&master)];
    let sentinel = OwnSentinel::watching(&master);
    sentinel.wait_replicas(2);
    // Every client gets the Sentinel's address, never a server's.
    let redis = TestRedis::on(&sentinel.url());
    let mut env = base_env(&db, &redis);
    env.extend([
        (
            "OUTBOX__REDIS__SENTINEL_MASTER".to_string(),
            MASTER.to_string(),
        ),
        ("OUTBOX__REDIS__WAIT_REPLICAS".into(), "1".into()),
        ("OUTBOX__REDIS__WAIT_TIMEOUT".into(), "300ms".into()),
        ("OUTBOX__GROUPS".into(), format!("t0:{EFFECTS_GROUP}")),
    ]);
    let relay = RelayProc::spawn("sentinel", &env);
    relay.wait_ready(Duration::from_secs(20)).await;
    let consumer = ExampleConsumer::spawn(
        &db,
        &redis,
        "t0",
        EFFECTS_GROUP,
        "c1",
        &["--sentinel-master", MASTER, "--claim-idle", "3s"],
    );

    let url = db.url.clone();
    let producer = tokio::spawn(async move {
        produce_rounds(
            &url,
            Rounds::default()
                .rounds(60)
                .per_round(25)
                .topics(2)
                .keys(20)
                .pause(Duration::from_millis(50)),
        )
        .await
    });
    // The master dies with events flowing: some published to it, more to come.
    eventually(
        Duration::from_secs(30),
        "events published before the failover",
        || async {
            db.scalar("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
                .await
                > 0
        },
    )
    .await;
    let old = master.port;
    master.signal("-KILL");
    master.stop();
    let new = sentinel.wait_failover(old);
    assert!(replicas.iter().any(|r| r.port == new));
    producer.await.expect("producer");

    db.wait_until_published(Duration::from_secs(60)).await;
    let direct = TestRedis {
        url: format!("redis://127.0.0.1:{new}"),
        prefix: redis.prefix.clone(),
        cluster: false,
    };
    assert_eq!(
        assert_exactly_once(&direct, 2).await,
        1500,
        "the new master holds every event once, each key in order"
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0 OR dead_at IS NOT NULL")
            .await,
        0,
        "no master for a while is an outage: no attempt spent"
    );
    relay.wait_ready(Duration::from_secs(20)).await;
    wait_settled(&db, &direct, "t0", 750, 0).await;
    assert_effects_exactly_once(&db, "t0").await;
    assert!(
        consumer.log().contains("c1"),
        "the consumer ran: {}",
        consumer.log()
    );

    // tail through the Sentinel.
    let out = crate::tail::tail(&redis, &["t1", "--from", "0", "--count", "5"])
        .env("OUTBOX__REDIS__SENTINEL_MASTER", MASTER)
        .stdout(Stdio::piped())
        .output()
        .expect("tail");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(crate::tail::lines(&out).len(), 5);
}

#[tokio::test(flavor = "multi_thread")]
async fn sentinels_with_a_password_of_their_own_and_a_master_with_another() {
    let db = TestDb::new().await;
    let master = OwnRedis::start_with(&server_binary(), &["--requirepass", "master-pw"]);
    let sentinel = OwnSentinel::watching_with(&master, Some("master-pw"), Some("sentinel-pw"));
    let redis = TestRedis::on(&format!("redis://:master-pw@127.0.0.1:{}", sentinel.port));
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__REDIS__SENTINEL_MASTER".into(), MASTER.into()));
    env.push((
        "OUTBOX__REDIS__SENTINEL_PASSWORD".into(),
        "sentinel-pw".into(),
    ));
    let relay = RelayProc::spawn("sentinel-auth", &env);
    relay.wait_ready(Duration::from_secs(20)).await;
    insert_events(&db, Events::varied().n(1..=50).topics(1).keys(5)).await;
    db.wait_until_published(Duration::from_secs(30)).await;
    let direct = TestRedis {
        url: format!("redis://:master-pw@127.0.0.1:{}", master.port),
        prefix: redis.prefix.clone(),
        cluster: false,
    };
    assert_eq!(assert_exactly_once(&direct, 1).await, 50);

    // A wrong Sentinel password: never ready, and the log says why.
    let mut wrong = env.clone();
    wrong.retain(|(k, _)| k != "OUTBOX__REDIS__SENTINEL_PASSWORD");
    wrong.push(("OUTBOX__REDIS__SENTINEL_PASSWORD".into(), "nope".into()));
    let refused = RelayProc::spawn("sentinel-wrong", &wrong);
    refused
        .http()
        .wait_status("/healthz", 200, Duration::from_secs(20))
        .await;
    // A background check has run (its verdict is fresh): it had its chance to reach Redis.
    let readyz = eventually(
        Duration::from_secs(20),
        "a fresh readiness check",
        || async {
            let res = refused.http().get("/readyz");
            (res.json["fresh"] == true).then_some(res)
        },
    )
    .await;
    assert_eq!(readyz.status, 503, "{}", readyz.body);
    assert_eq!(readyz.json["redis"], false, "{}", readyz.body);
}
