//! Partitioned topics: each key's events in the stream of its Kafka partition, in order, once;
//! declared groups on every partition; the count in `<prefix>partitions` and in Postgres; a
//! relay configured with another count refused; `repartition` waiting for the declared groups
//! before it switches.

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use redis::AsyncCommands;

use crate::support::*;

/// Checks the `partitions` streams of `topic`, but for the entries of events in `before`
/// (published by an earlier count into streams of the same names): every keyed entry in its
/// key's partition, each key in order; returns the event ids found.
async fn check_partitions(
    redis: &TestRedis,
    topic: &str,
    partitions: u32,
    before: &HashSet<String>,
) -> Vec<String> {
    let mut ids = Vec::new();
    for p in 0..partitions {
        let mut entries = redis.entries(&format!("{topic}:{p}")).await;
        entries.retain(|e| !before.contains(&e["id"]));
        for e in &entries {
            if let Some(key) = e.get("key") {
                assert_eq!(
                    outbox_core::partition::for_key(key, partitions),
                    p,
                    "key {key} in partition {p} of {partitions}"
                );
            }
            ids.push(e["id"].clone());
        }
        assert_per_key_order(&entries);
    }
    ids
}

/// The groups of one stream.
async fn group_names(redis: &TestRedis, stream: &str) -> Vec<String> {
    let mut c = redis.conn().await;
    let reply: redis::streams::StreamInfoGroupsReply = c
        .xinfo_groups(redis.stream(stream))
        .await
        .expect("xinfo groups");
    reply.groups.into_iter().map(|g| g.name).collect()
}

async fn hash_count(redis: &TestRedis, topic: &str) -> Option<String> {
    let mut c = redis.conn().await;
    c.hget(format!("{}partitions", redis.prefix), topic)
        .await
        .expect("hget")
}

fn partitioned_env(db: &TestDb, redis: &TestRedis, partitions: u32) -> Vec<(String, String)> {
    let mut env = base_env(db, redis);
    env.push(("OUTBOX__TOPICS".into(), format!("t0:{partitions}")));
    env.push(("OUTBOX__GROUPS".into(), "t0:billing".into()));
    env
}

#[tokio::test(flavor = "multi_thread")]
async fn each_key_goes_to_its_kafka_partition_in_order_and_another_count_is_refused() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    insert_events(&db, Events::varied().n(1..=600).topics(1).keys(20)).await;
    let mut relay = RelayProc::spawn("parts", &partitioned_env(&db, &redis, 4));
    db.wait_until_published(Duration::from_secs(30)).await;
    let ids = check_partitions(&redis, "t0", 4, &HashSet::new()).await;
    assert_eq!(ids.len(), 600, "every event once");
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 600);
    assert_eq!(redis.xlen("t0").await, 0, "no unpartitioned stream");
    for p in 0..4 {
        assert!(
            !redis.entries(&format!("t0:{p}")).await.is_empty(),
            "20 keys fill all 4 partitions"
        );
        assert_eq!(group_names(&redis, &format!("t0:{p}")).await, ["billing"]);
    }
    assert_eq!(hash_count(&redis, "t0").await.as_deref(), Some("4"));
    assert_eq!(
        db.scalar("SELECT partitions::int8 FROM outbox_topics WHERE topic = 't0'")
            .await,
        4
    );
    // `tail` reads every partition, or the one `--partition` names.
    let all = crate::tail::tail_output(&redis, &["t0", "--from", "0", "--count", "600"]).await;
    assert!(
        all.status.success(),
        "{}",
        String::from_utf8_lossy(&all.stderr)
    );
    let tailed: HashSet<String> = crate::tail::lines(&all)
        .iter()
        .map(|l| l["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(tailed, ids.iter().cloned().collect::<HashSet<_>>());
    let two = redis.entries("t0:2").await;
    let count = two.len().to_string();
    let one = crate::tail::tail_output(
        &redis,
        &["t0", "--partition", "2", "--from", "0", "--count", &count],
    )
    .await;
    let tailed: Vec<String> = crate::tail::lines(&one)
        .iter()
        .map(|l| l["id"].as_str().unwrap_or_default().to_string())
        .collect();
    let want: Vec<String> = two.iter().map(|e| e["id"].clone()).collect();
    assert_eq!(tailed, want, "partition 2 alone, in stream order");
    let wrong = crate::tail::tail_output(&redis, &["t0", "--partition", "4", "--count", "1"]).await;
    assert!(!wrong.status.success());
    assert!(String::from_utf8_lossy(&wrong.stderr).contains("0 to 3"));
    relay.kill9();

    let mut eight = RelayProc::spawn("parts-8", &partitioned_env(&db, &redis, 8));
    let code = eight.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(2), "{}", eight.log());
    let log = eight.log();
    assert!(
        log.contains("4 partitions recorded") && log.contains("outbox-relay repartition t0 8"),
        "{log}"
    );
}

/// Reads and acknowledges, as `group`, everything in the streams of `topic`'s `partitions`.
async fn consume_all(redis: &TestRedis, topic: &str, partitions: u32, group: &str) -> usize {
    let mut n = 0;
    for p in 0..partitions {
        n += crate::groups::read(redis, &format!("{topic}:{p}"), group, 100_000, 100_000).await;
    }
    n
}

#[tokio::test(flavor = "multi_thread")]
async fn repartition_waits_for_the_declared_groups_then_switches_the_streams() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    insert_events(&db, Events::varied().n(1..=200).topics(1).keys(10)).await;
    let _relay = RelayProc::spawn("reparts", &partitioned_env(&db, &redis, 2));
    db.wait_until_published(Duration::from_secs(30)).await;
    let before: HashSet<String> = check_partitions(&redis, "t0", 2, &HashSet::new())
        .await
        .into_iter()
        .collect();
    assert_eq!(before.len(), 200);

    let log = std::env::temp_dir().join(format!(
        "repartition-{}.log",
        redis.prefix.trim_end_matches(':')
    ));
    let mut cmd = Command::new(BIN);
    cmd.args(["repartition", "t0", "3"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(
            partitioned_env(&db, &redis, 2)
                .into_iter()
                .filter(|(k, _)| k != "OUTBOX__TOPICS"),
        );
    let mut repartition = Logged::spawn(cmd, log);
    // The group has read nothing yet: the command waits, the topic paused.
    eventually(
        Duration::from_secs(30),
        "repartition to wait for group billing",
        || async {
            let log = repartition.log();
            log.lines()
                .any(|l| l.starts_with("waiting") && l.contains("billing"))
                .then_some(())
                .ok_or(log)
        },
    )
    .await;
    insert_events(&db, Events::varied().n(1..=100).topics(1).keys(10)).await;
    // A claim cycle that began after the insert has committed: it could have published them.
    db.wait_for_a_claim_cycle(Duration::from_secs(30)).await;
    assert_eq!(
        db.pending().await,
        100,
        "paused: nothing published meanwhile"
    );

    // One old stream read: the command looks again, says what is left, and keeps waiting.
    let first = consume_all(&redis, "t0", 1, "billing").await;
    let (read, rest) = (redis.stream("t0:0"), redis.stream("t0:1"));
    let only_the_rest =
        |l: &str| l.starts_with("waiting") && l.contains(&rest) && !l.contains(&read);
    eventually(
        Duration::from_secs(30),
        "repartition to wait for the second stream only",
        || async {
            let log = repartition.log();
            log.lines().any(only_the_rest).then_some(()).ok_or(log)
        },
    )
    .await;
    assert_eq!(
        repartition.wait_exit(Duration::ZERO),
        None,
        "{}",
        repartition.log()
    );
    let second = crate::groups::read(&redis, "t0:1", "billing", 100_000, 100_000).await;
    assert_eq!(first + second, 200);
    let code = repartition.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{}", repartition.log());
    let said = repartition.log();
    assert!(
        said.contains("now has 3 partitions") && said.contains("resumed"),
        "{said}"
    );

    // The running relay publishes the waiting events by the new count.
    db.wait_until_published(Duration::from_secs(30)).await;
    // Partitions 0 and 1 keep the old entries (every declared group acknowledged them before
    // any new one was added behind them); the new events follow the new count.
    let ids = check_partitions(&redis, "t0", 3, &before).await;
    assert_eq!(ids.len(), 100, "each new event once, in its new partition");
    for p in 0..3 {
        assert_eq!(group_names(&redis, &format!("t0:{p}")).await, ["billing"]);
    }
    assert_eq!(hash_count(&redis, "t0").await.as_deref(), Some("3"));
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_audit WHERE target = 't0' AND who = 'repartition'")
            .await,
        3,
        "pause, repartition, resume audited"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_consumer_library_reads_every_partition_in_key_order_with_one_dead_stream() {
    use outbox_consumer::{Consumer, ConsumerConfig, Entry, HandlerError};
    use std::sync::{Arc, Mutex};

    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    insert_events(&db, Events::varied().n(1..=400).topics(1).keys(12)).await;
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key) VALUES ('t0', '{\"poison\": true, \"n\": 0}', 'k5')",
    )
    .await;
    let _relay = RelayProc::spawn("parts-consume", &partitioned_env(&db, &redis, 4));
    db.wait_until_published(Duration::from_secs(30)).await;

    let config = ConsumerConfig::new(&redis.url, "t0", "billing")
        .stream_prefix(&redis.prefix)
        .consumer("solo")
        .max_deliveries(2)
        .retry(Duration::from_millis(10), Duration::from_millis(50))
        .block(Duration::from_millis(200));
    let consumer = Consumer::new(config).expect("config");
    let seen: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let run = consumer.run(
        |entry: Entry| {
            let (seen, stop) = (seen.clone(), stop.clone());
            async move {
                if entry.payload["poison"] == serde_json::json!(true) {
                    return Err(HandlerError::retry("poison"));
                }
                let n = entry.payload["n"].as_i64().unwrap_or(-1);
                let mut seen = seen.lock().map_err(|_| HandlerError::retry("lock"))?;
                seen.push((entry.key.clone().unwrap_or_default(), n));
                if seen.len() == 400 {
                    stop.notify_one();
                }
                Ok::<(), HandlerError>(())
            }
        },
        {
            let stop = stop.clone();
            async move { stop.notified().await }
        },
    );
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("every event handled");
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 400);
    let mut last: std::collections::HashMap<&str, i64> = Default::default();
    for (key, n) in &seen {
        if key.is_empty() {
            continue;
        }
        if let Some(prev) = last.insert(key.as_str(), *n) {
            assert!(*n > prev, "key {key}: {n} handled after {prev}");
        }
    }
    // The poison event is dead-lettered to the topic's one dead stream, whatever its partition.
    eventually(Duration::from_secs(20), "a dead letter", || async {
        redis.xlen("t0:dead").await >= 1
    })
    .await;
    assert_eq!(redis.xlen("t0:dead").await, 1);
}
