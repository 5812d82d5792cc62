//! Redis Cluster (`redis.cluster = true`): a local cluster of three masters, topics whose
//! streams live on every one of them, real relay processes given the seed list.

use std::time::Duration;

use crate::support::*;

/// Topics t0..t{TOPICS-1} of the test traffic.
const TOPICS: usize = 6;

/// A key prefix under which the streams of t0..t{topics-1} live on every master of `cluster`
/// (tried until one does); with each topic's master.
fn spread(cluster: &OwnCluster, topics: usize) -> (TestRedis, Vec<usize>) {
    for _ in 0..100 {
        let redis = cluster.test_redis();
        let owners: Vec<usize> = (0..topics)
            .map(|t| cluster.owner_of(&redis.stream(&format!("t{t}"))))
            .collect();
        if (0..3).all(|node| owners.contains(&node)) {
            return (redis, owners);
        }
    }
    panic!("no prefix spreads {topics} topics over three masters");
}

#[tokio::test(flavor = "multi_thread")]
async fn three_relays_deliver_exactly_once_in_key_order_across_three_masters() {
    let cluster = OwnCluster::start(3);
    let db = TestDb::new().await;
    let (redis, _) = spread(&cluster, TOPICS);
    insert_events(&db, Events::varied().n(1..=6_000).topics(TOPICS).keys(40)).await;
    let env = base_env(&db, &redis);
    let relays: Vec<RelayProc> = (1..=3)
        .map(|i| RelayProc::spawn(&format!("c{i}"), &env))
        .collect();
    db.wait_until_published(Duration::from_secs(90)).await;
    assert_eq!(assert_exactly_once(&redis, TOPICS).await, 6_000);
    assert_eq!(db.scalar(NO_ATTEMPTS).await, 0);

    // The Streams page looks at each topic's stream on its own master.
    relays[0].wait_ready(Duration::from_secs(10)).await;
    let http = relays[0].http();
    // Without a token the login page hands out a session at once.
    let login = http.get("/login?next=%2Fstreams");
    let page = http
        .cookie(&login.session_cookie().expect("a session cookie"))
        .get("/streams");
    assert_eq!(page.status, 200, "{}", page.body);
    for t in 0..TOPICS {
        let key = redis.stream(&format!("t{t}"));
        let row = page
            .body
            .split("<tr>")
            .find(|row| row.contains(&format!("<code>{key}</code>")))
            .unwrap_or_else(|| panic!("no row for {key} in {}", page.body));
        assert!(row.contains(">stream<"), "{key} is a stream: {row}");
        assert!(
            row.contains("1\u{202f}000"),
            "{key} holds 1000 entries: {row}"
        );
    }
}

/// `SELECT count(*)` of the pending events of `topics`.
fn pending_of(topics: &[String]) -> String {
    let list = topics
        .iter()
        .map(|t| format!("'{t}'"))
        .collect::<Vec<_>>()
        .join(",");
    format!("SELECT count(*) FROM outbox WHERE published_at IS NULL AND topic IN ({list})")
}

/// Waits until at least `n` events (`and`: more conditions) are published.
async fn wait_published_at_least(db: &TestDb, and: &str, n: i64) {
    let sql = format!("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL {and}");
    // Polled often: the test acts while the rest is still in flight.
    eventually_every(
        Duration::from_secs(60),
        Duration::from_millis(10),
        &format!("{sql} to reach {n}"),
        || async { db.scalar(&sql).await >= n },
    )
    .await;
}

const NO_ATTEMPTS: &str = "SELECT count(*) FROM outbox WHERE attempts > 0 OR dead_at IS NOT NULL";

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_master_stops_only_its_topics_and_nothing_is_lost_or_doubled() {
    let mut cluster = OwnCluster::start(3);
    let db = TestDb::new().await;
    let (redis, owners) = spread(&cluster, TOPICS);
    let victim = owners[0];
    let (down, up): (Vec<String>, Vec<String>) = (0..TOPICS)
        .map(|t| format!("t{t}"))
        .partition(|t| owners[t[1..].parse::<usize>().expect("t<n>")] == victim);
    insert_events(
        &db,
        Events::default()
            .n(1..=6_000)
            .topics(TOPICS)
            .keys(40)
            .some_unkeyed(true),
    )
    .await;
    let env = base_env(&db, &redis);
    let relays: Vec<RelayProc> = (1..=2)
        .map(|i| RelayProc::spawn(&format!("k{i}"), &env))
        .collect();
    // Mid-drain: some published, then the master of `down` dies.
    wait_published_at_least(&db, "", 300).await;
    cluster.kill(victim);
    // Traffic for every topic while it is down.
    insert_events(
        &db,
        Events::default()
            .n(6_001..=9_000)
            .topics(TOPICS)
            .keys(40)
            .some_unkeyed(true),
    )
    .await;

    // The other masters' topics drain completely while it is down; its own wait.
    db.wait_for(&pending_of(&up), 0, Duration::from_secs(60))
        .await;
    assert!(
        db.scalar(&pending_of(&down)).await > 0,
        "the dead master's topics ({down:?}) wait"
    );
    assert_eq!(
        db.scalar(NO_ATTEMPTS).await,
        0,
        "an outage burns no attempt"
    );
    let flagged = |relay: &RelayProc| {
        let metrics = relay.http().metrics();
        down.iter()
            .any(|t| metrics.contains(&format!("outbox_topic_down{{topic=\"{t}\"}} 1")))
            && relay.log().contains("topic unreachable in redis")
    };
    assert!(
        relays.iter().any(flagged),
        "a relay reports the topics that wait ({down:?}) in its metrics and its log"
    );

    cluster.restart(victim);
    db.wait_until_published(Duration::from_secs(60)).await;
    assert_eq!(assert_exactly_once(&redis, TOPICS).await, 9_000);
    assert_eq!(db.scalar(NO_ATTEMPTS).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slot_migrated_while_events_flow_loses_and_doubles_nothing() {
    let cluster = std::sync::Arc::new(OwnCluster::start(3));
    let db = TestDb::new().await;
    let (redis, owners) = spread(&cluster, TOPICS);
    let stream = redis.stream("t0");
    let slot = cluster.keyslot(&stream);
    let to = (owners[0] + 1) % 3;
    insert_events(
        &db,
        Events::default()
            .n(1..=3_000)
            .topics(TOPICS)
            .keys(40)
            .some_unkeyed(true),
    )
    .await;
    let env = base_env(&db, &redis);
    let relays: Vec<RelayProc> = (1..=2)
        .map(|i| RelayProc::spawn(&format!("m{i}"), &env))
        .collect();
    wait_published_at_least(&db, "AND topic = 't0'", 100).await;

    // The slot of t0's stream and dedup sets moves to another master, a stage every 300 ms,
    // while producers keep writing to every topic.
    let mover = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || {
            cluster.migrate_slot(slot, to, Duration::from_millis(300))
        })
    };
    let mut n = 3_000;
    while !mover.is_finished() {
        insert_events(
            &db,
            Events::default()
                .n(n + 1..=n + 60)
                .topics(TOPICS)
                .keys(40)
                .some_unkeyed(true),
        )
        .await;
        n += 60;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    mover.await.expect("slot migrated");
    insert_events(
        &db,
        Events::default()
            .n(n + 1..=n + 600)
            .topics(TOPICS)
            .keys(40)
            .some_unkeyed(true),
    )
    .await;
    n += 600;

    db.wait_until_published(Duration::from_secs(60)).await;
    assert_eq!(
        db.scalar(NO_ATTEMPTS).await,
        0,
        "a migration burns no attempt"
    );
    assert_eq!(cluster.owner_of(&stream), to, "t0's stream moved");
    assert_eq!(assert_exactly_once(&redis, TOPICS).await, n as usize);
    assert!(
        relays
            .iter()
            .any(|r| r.log().contains("topic unreachable in redis")),
        "the migration met t0's publishes (refused during it: TRYAGAIN or ASK)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn rediss_seeds_deliver_with_the_ca_file_and_an_unknown_ca_is_never_talked_to() {
    let ca = TestCa::new("cluster-ca");
    let cluster = OwnCluster::start_tls(3, &ca);
    let db = TestDb::new().await;
    let (redis, _) = spread(&cluster, TOPICS);
    insert_events(&db, Events::varied().n(1..=600).topics(TOPICS).keys(10)).await;
    let with_ca = |ca: &TestCa| {
        let mut env = base_env(&db, &redis);
        env.push((
            "OUTBOX__REDIS__CA_FILE".into(),
            ca.cert.display().to_string(),
        ));
        env
    };

    let other = TestCa::new("not-the-cluster-ca");
    let refused = RelayProc::spawn("tls-unknown-ca", &with_ca(&other));
    eventually(Duration::from_secs(20), "a certificate error", || async {
        let log = refused.log();
        log.contains("UnknownIssuer").then_some(()).ok_or(log)
    })
    .await;
    assert_eq!(db.pending().await, 600, "nothing sent to an untrusted node");
    drop(refused);

    let _relay = RelayProc::spawn("tls-cluster", &with_ca(&ca));
    db.wait_until_published(Duration::from_secs(60)).await;
    let streamed: i64 = (0..TOPICS)
        .map(|t| cluster.xlen(&redis.stream(&format!("t{t}"))))
        .sum();
    assert_eq!(streamed, 600);
    assert_eq!(db.scalar(NO_ATTEMPTS).await, 0);
}

/// Example consumers with `--cluster`, on a stream whose dead stream lives on another master
/// (so a dead letter cannot be one script): SIGKILLed and restarted while events flow, they
/// apply every event once and dead-letter each poison event once; `tail` reads the stream
/// through the seed list.
#[tokio::test(flavor = "multi_thread")]
async fn cluster_consumers_apply_every_event_once_and_dead_letter_across_masters() {
    let cluster = OwnCluster::start(3);
    let db = TestDb::new().await;
    let redis = (0..100)
        .map(|_| cluster.test_redis())
        .find(|r| cluster.owner_of(&r.stream("t0")) != cluster.owner_of(&r.stream("t0:dead")))
        .expect("a prefix whose t0 and t0:dead streams are on two masters");
    let _relay = RelayProc::spawn("cluster-consumers", &base_env(&db, &redis));
    let chaos = Chaos {
        consumers: 2,
        poison: 2,
        rounds: 20,
        keys: 10,
        min_kills: 4,
    };
    sigkill_while_producing(&db, &redis, chaos).await;
    let group = EFFECTS_GROUP;
    let dead = redis.entries("t0:dead").await;
    for letter in &dead {
        assert!(letter["payload"].contains("poison"), "{letter:?}");
        assert_eq!(letter["group"], group);
        assert_eq!(letter["deliveries"], "10");
    }

    let out = crate::tail::tail_output(&redis, &["t0", "--from", "0", "--count", "5"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = crate::tail::lines(&out);
    let first: Vec<String> = redis.entries_ids("t0").await.into_iter().take(5).collect();
    let tailed: Vec<String> = printed
        .iter()
        .map(|line| line["stream_id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        tailed, first,
        "tail prints the stream's first entries in order"
    );
}

/// Consumers that park keys (`park_keys`) on a Redis Cluster, the group's parking state on
/// another master than the stream: a poison entry parks its key, its later entries are held
/// while the other keys take effect, and a discard through the admin API lets them take effect
/// in order, each once.
#[tokio::test(flavor = "multi_thread")]
async fn cluster_consumers_park_a_key_and_release_it_across_masters() {
    let cluster = OwnCluster::start(3);
    let db = TestDb::new().await;
    let group = EFFECTS_GROUP;
    let redis = (0..100)
        .map(|_| cluster.test_redis())
        .find(|r| {
            let parked = outbox_core::parked::parked_key(&r.prefix, "t0", group);
            cluster.owner_of(&r.stream("t0")) != cluster.owner_of(&parked)
        })
        .expect("a prefix whose stream and parking state are on two masters");
    let mut env = base_env(&db, &redis);
    env.push(("OUTBOX__GROUPS".into(), format!("t0:{group}")));
    let relay = RelayProc::spawn("cluster-parking", &env);
    relay.wait_ready(Duration::from_secs(30)).await;
    insert_with_poison_in_k2(&db, 4).await;
    let _consumer = ExampleConsumer::spawn(&db, &redis, "t0", group, "c0", PARK_ARGS);
    let admin = relay.http();
    wait_group_parked(&admin, group, "k2", 6).await;
    for k in ["k0", "k1", "k3"] {
        wait_applied(&db, k, 10).await;
    }
    assert_eq!(applied_in_order(&db, "k2").await, [1, 2, 3]);
    let res = admin.post(
        &format!("/api/v1/topics/t0/groups/{group}/parked/k2/discard"),
        None,
    );
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.json["released"], 6);
    wait_applied(&db, "k2", 9).await;
    assert_eq!(
        applied_in_order(&db, "k2").await,
        [1, 2, 3, 5, 6, 7, 8, 9, 10],
        "the held entries in order, each once; the poison one never"
    );
}
