//! The consumer side: `examples/inbox_consumer` processes fed by a real relay (SIGKILLed and
//! restarted: every event applied once; a dead consumer's entries claimed; poison to the dead
//! stream), and the `outbox_consumer` library in-process (per-key order through failures and
//! a restart; a malformed entry dead-lettered without blocking its key).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_consumer::{Batches, Consumer, ConsumerConfig, Entry, HandlerError};

use crate::support::*;

const GROUP: &str = EFFECTS_GROUP;

#[tokio::test(flavor = "multi_thread")]
async fn sigkilled_inbox_consumers_apply_every_event_exactly_once() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let _relay = RelayProc::spawn("consumer-relay", &base_env(&db, &redis));
    let chaos = Chaos {
        consumers: 3,
        poison: 3,
        rounds: 40,
        keys: 20,
        min_kills: 12,
    };
    sigkill_while_producing(&db, &redis, chaos).await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'effects'")
            .await,
        2000
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn entries_of_a_consumer_killed_mid_handling_are_claimed_after_claim_idle() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let _relay = RelayProc::spawn("consumer-relay", &base_env(&db, &redis));
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't0', jsonb_build_object('n', i), 'k' || (i % 5) FROM generate_series(1, 20) AS i",
    )
    .await;
    db.wait_until_published(Duration::from_secs(30)).await;
    // Its effects never finish: it holds every entry, in the middle of handling them.
    let mut holder = ExampleConsumer::spawn(
        &db,
        &redis,
        "t0",
        GROUP,
        "holder",
        &["--claim-idle", "1s", "--effect-delay", "1h"],
    );
    wait_until(Duration::from_secs(30), || async {
        match group_pending(&redis, "t0", GROUP).await {
            (20, holders) if holders == vec![("holder".to_string(), 20)] => Ok(()),
            other => Err(format!("pending {other:?}")),
        }
    })
    .await;
    holder.kill9();
    assert_eq!(
        db.scalar("SELECT count(*) FROM example_effects").await,
        0,
        "the holder committed nothing"
    );
    // Every entry was delivered to the holder: only a claim can give them to the rescuer.
    let rescuer =
        ExampleConsumer::spawn(&db, &redis, "t0", GROUP, "rescuer", &["--claim-idle", "1s"]);
    wait_settled(&db, &redis, "t0", 20, 0).await;
    assert_effects_exactly_once(&db, "t0").await;
    assert!(
        rescuer
            .log()
            .contains("claimed entries idle longer than claim_idle"),
        "{}",
        rescuer.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_event_is_dead_lettered_after_exactly_max_deliveries() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let _relay = RelayProc::spawn("consumer-relay", &base_env(&db, &redis));
    db.exec(
        r#"INSERT INTO outbox (topic, payload, partition_key, headers) VALUES
           ('t0', '{"n": 1}', 'kp', '{}'),
           ('t0', '{"n": 2, "poison": true}', 'kp', '{"trace": "tr-2"}'),
           ('t0', '{"n": 3}', 'kp', '{}'),
           ('t0', '{"n": 4}', NULL, '{}')"#,
    )
    .await;
    db.wait_until_published(Duration::from_secs(30)).await;
    let consumer = ExampleConsumer::spawn(
        &db,
        &redis,
        "t0",
        GROUP,
        "only",
        &["--max-deliveries", "4", "--retry-base", "50ms"],
    );
    // The event after the poison one, same key, flows once the poison one is dead.
    wait_settled(&db, &redis, "t0", 3, 1).await;
    assert_effects_exactly_once(&db, "t0").await;

    let original = redis
        .entries("t0")
        .await
        .into_iter()
        .find(|e| e["payload"].contains("poison"))
        .expect("the poison entry in its stream");
    let dead = redis.entries("t0:dead").await;
    assert_eq!(dead.len(), 1);
    let dead = &dead[0];
    for field in ["id", "topic", "key", "payload", "headers", "created_at"] {
        assert_eq!(dead[field], original[field], "field {field}");
    }
    assert!(dead["error"].contains("poison"), "error: {}", dead["error"]);
    assert_eq!(dead["group"], GROUP);
    assert_eq!(dead["deliveries"], "4");
    let failures = consumer
        .log()
        .lines()
        .filter(|l| l.contains("handler failed") && l.contains(&original["id"]))
        .count();
    assert_eq!(failures, 4, "{}", consumer.log());
    let mut consumer = consumer;
    consumer.terminate();
    assert_eq!(
        consumer.wait_exit(Duration::from_secs(15)),
        Some(0),
        "SIGTERM: a clean exit"
    );
}

/// A consumer on the test's prefix: quick retries, short blocks.
/// Completes when `stop` is notified: a consumer's shutdown signal in these tests.
fn notified(stop: &Arc<tokio::sync::Notify>) -> impl std::future::Future<Output = ()> {
    let stop = stop.clone();
    async move { stop.notified().await }
}

fn library_config(redis: &TestRedis, topic: &str, name: &str) -> ConsumerConfig {
    ConsumerConfig::new(&redis.url, topic, GROUP)
        .stream_prefix(&redis.prefix)
        .consumer(name)
        .concurrency(8)
        .batch_size(50)
        .block(Duration::from_millis(200))
        .claim_idle(Duration::from_secs(60))
        .retry(Duration::from_millis(10), Duration::from_millis(100))
}

#[tokio::test(flavor = "multi_thread")]
async fn one_consumer_keeps_each_keys_order_through_failures_and_a_restart() {
    let redis = TestRedis::shared();
    const N: i64 = 600;
    for n in 0..N {
        let key = format!("k{}", n % 8);
        xadd_event(
            &redis,
            "ordered",
            Some(&key),
            &serde_json::json!({ "n": n }),
        )
        .await;
    }
    let applied: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    // `fails(n, delivery)`: whether that delivery of entry `n` fails.
    let handler = |fails: fn(i64, u64) -> bool, stop_at: usize, stop: Arc<tokio::sync::Notify>| {
        let applied = applied.clone();
        move |entry: Entry| {
            let applied = applied.clone();
            let stop = stop.clone();
            async move {
                let n = entry.payload["n"]
                    .as_i64()
                    .ok_or_else(|| HandlerError::dead_letter("payload.n"))?;
                if fails(n, entry.deliveries) {
                    return Err(HandlerError::retry("every 7th entry fails"));
                }
                // Handlers of different keys overlap: yield so they interleave.
                tokio::task::yield_now().await;
                let mut applied = applied.lock().expect("lock");
                applied.push((entry.key.clone().unwrap_or_default(), n));
                if applied.len() >= stop_at {
                    stop.notify_one();
                }
                Ok(())
            }
        }
    };
    let config = || library_config(&redis, "ordered", "same").max_deliveries(1000);

    // First life: every 7th entry always fails, so each key soon waits behind one; it
    // stops with those (and the later entries of their keys) pending.
    let stop = Arc::new(tokio::sync::Notify::new());
    let first = Consumer::new(config()).expect("config");
    let stats = tokio::time::timeout(
        Duration::from_secs(60),
        first.run(handler(|n, _| n % 7 == 0, 15, stop.clone()), {
            let stop = stop.clone();
            async move { stop.notified().await }
        }),
    )
    .await
    .expect("the first life applied 15 entries");
    assert!(stats.failed > 0, "no failure exercised the retry path");
    let (pending, _) = group_pending(&redis, "ordered", GROUP).await;
    assert!(pending > 0, "nothing left pending for the second life");

    // Second life, same name: its pending entries first, then the rest; every 7th entry
    // fails its first delivery.
    let stop = Arc::new(tokio::sync::Notify::new());
    let second = Consumer::new(config()).expect("config");
    second
        .run(
            handler(
                |n, delivery| n % 7 == 0 && delivery == 1,
                N as usize,
                stop.clone(),
            ),
            {
                let stop = stop.clone();
                async move { stop.notified().await }
            },
        )
        .await;

    let applied = applied.lock().expect("lock").clone();
    let mut last: HashMap<&str, i64> = HashMap::new();
    for (key, n) in &applied {
        if let Some(prev) = last.get(key.as_str()) {
            assert!(n > prev, "key {key}: {n} applied after {prev}");
        }
        last.insert(key, *n);
    }
    let distinct: HashSet<i64> = applied.iter().map(|(_, n)| *n).collect();
    assert_eq!(distinct.len(), N as usize, "some entry never applied");
    assert_eq!(applied.len(), N as usize, "some entry applied twice");
    assert_eq!(group_pending(&redis, "ordered", GROUP).await.0, 0);
}

/// Three topics whose streams hold entries of the same ids and the same partition keys: one
/// consumer reads them all, keeps each (topic, key)'s order through failures, retries and
/// dead-letters per entry of its own stream (not the entry of the same id in another), and
/// sends a poison entry to its own topic's dead stream.
#[tokio::test(flavor = "multi_thread")]
async fn one_consumer_reads_several_topics_each_keys_order_and_dead_stream_its_own() {
    let redis = TestRedis::shared();
    const TOPICS: [&str; 3] = ["multi.a", "multi.b", "multi.c"];
    const N: i64 = 120;
    for n in 0..N {
        for topic in TOPICS {
            let key = format!("k{}", n % 4);
            let poison = topic == "multi.c" && n == 50;
            xadd_event_at(
                &redis,
                topic,
                &format!("1-{}", n + 1),
                Some(&key),
                &serde_json::json!({ "n": n, "poison": poison }),
            )
            .await;
        }
    }
    // (topic, key, n) in the order handled.
    let applied: Arc<Mutex<Vec<(String, String, i64)>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let config = library_config(&redis, TOPICS[0], "multi")
        .topics(TOPICS)
        .max_deliveries(3);
    let consumer = Consumer::new(config).expect("config");
    let run = consumer.run(
        |entry: Entry| {
            let (applied, stop) = (applied.clone(), stop.clone());
            async move {
                let n = entry.payload["n"]
                    .as_i64()
                    .ok_or_else(|| HandlerError::dead_letter("payload.n"))?;
                if entry.payload["poison"] == serde_json::json!(true) {
                    return Err(HandlerError::retry("poison"));
                }
                // In topic b only, every 10th entry fails its first delivery: its namesakes
                // in a and c (same stream id) must not be held back or retried with it.
                if entry.topic == "multi.b" && n % 10 == 3 && entry.deliveries == 1 {
                    return Err(HandlerError::retry("first delivery fails"));
                }
                tokio::task::yield_now().await;
                let mut applied = applied.lock().map_err(|_| HandlerError::retry("lock"))?;
                applied.push((
                    entry.topic.clone(),
                    entry.key.clone().unwrap_or_default(),
                    n,
                ));
                if applied.len() == TOPICS.len() * N as usize - 1 {
                    stop.notify_one();
                }
                Ok(())
            }
        },
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(60), run).await;
    let stats = stats.expect("every entry but the poison one applied");

    let applied = applied.lock().expect("lock").clone();
    let distinct: HashSet<(&str, i64)> = applied.iter().map(|(t, _, n)| (t.as_str(), *n)).collect();
    assert_eq!(distinct.len(), applied.len(), "an entry applied twice");
    assert_eq!(applied.len(), TOPICS.len() * N as usize - 1);
    assert!(
        !distinct.contains(&("multi.c", 50)),
        "the poison entry applied"
    );
    let mut last: HashMap<(&str, &str), i64> = HashMap::new();
    for (topic, key, n) in &applied {
        if let Some(prev) = last.insert((topic.as_str(), key.as_str()), *n) {
            assert!(*n > prev, "{topic} key {key}: {n} applied after {prev}");
        }
    }
    assert_eq!(
        stats.failed,
        12 + 2,
        "b's first deliveries and the poison's first two"
    );
    assert_eq!(stats.dead_lettered, 1);
    let dead = redis.entries("multi.c:dead").await;
    assert_eq!(
        dead.len(),
        1,
        "the poison entry in its own topic's dead stream"
    );
    assert_eq!(dead[0]["deliveries"], "3");
    assert_eq!(dead[0]["topic"], "multi.c");
    for topic in ["multi.a", "multi.b"] {
        assert_eq!(redis.xlen(&format!("{topic}:dead")).await, 0, "{topic}");
    }
    for topic in TOPICS {
        assert_eq!(group_pending(&redis, topic, GROUP).await.0, 0, "{topic}");
    }
}

/// A batch handler over several topics gets what one read returned: entries of all of them
/// in one call (one transaction for an inbox), merged in stream-id order.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_over_several_topics_holds_entries_of_each() {
    let redis = TestRedis::shared();
    for n in 0..10 {
        for topic in ["both.x", "both.y"] {
            xadd_event(&redis, topic, None, &serde_json::json!({ "n": n })).await;
        }
    }
    // Each batch's (topic, stream id)s.
    type Batches = Vec<Vec<(String, String)>>;
    let batches: Arc<Mutex<Batches>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let config = library_config(&redis, "both.x", "batches").topics(["both.x", "both.y"]);
    let consumer = Consumer::new(config).expect("config");
    let run = consumer.run(
        Batches(|entries: Vec<Entry>| {
            let (batches, stop) = (batches.clone(), stop.clone());
            async move {
                let mut batches = batches.lock().map_err(|_| HandlerError::retry("lock"))?;
                batches.push(
                    entries
                        .into_iter()
                        .map(|e| (e.topic, e.stream_id))
                        .collect(),
                );
                if batches.iter().map(Vec::len).sum::<usize>() == 20 {
                    stop.notify_one();
                }
                Ok::<(), HandlerError>(())
            }
        }),
        notified(&stop),
    );
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("all 20 entries handled");
    let batches = batches.lock().expect("lock").clone();
    assert_eq!(batches.len(), 1, "one read, one batch: {batches:?}");
    let topics: HashSet<&str> = batches[0].iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(topics, HashSet::from(["both.x", "both.y"]));
    let mut ids: Vec<&str> = batches[0].iter().map(|(_, id)| id.as_str()).collect();
    let unsorted = ids.clone();
    ids.sort_by_key(|id| {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        (
            ms.parse::<u64>().unwrap_or(0),
            seq.parse::<u64>().unwrap_or(0),
        )
    });
    assert_eq!(ids, unsorted, "entries merged in stream-id order");
    for topic in ["both.x", "both.y"] {
        assert_eq!(group_pending(&redis, topic, GROUP).await.0, 0, "{topic}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_entry_is_dead_lettered_and_its_key_flows_on() {
    let redis = TestRedis::shared();
    let first = xadd_event(&redis, "mixed", Some("k"), &serde_json::json!({"n": 1})).await;
    let mut c = redis.conn().await;
    let _: String = redis::AsyncCommands::xadd(
        &mut c,
        redis.stream("mixed"),
        "*",
        &[("id", "not-a-uuid"), ("topic", "mixed"), ("key", "k")],
    )
    .await
    .expect("xadd");
    let last = xadd_event(&redis, "mixed", Some("k"), &serde_json::json!({"n": 3})).await;

    let seen: Arc<Mutex<Vec<uuid::Uuid>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = Consumer::new(library_config(&redis, "mixed", "solo")).expect("config");
    let run = consumer.run(
        |entry: Entry| {
            let (seen, stop) = (seen.clone(), stop.clone());
            async move {
                let mut seen = seen.lock().expect("lock");
                seen.push(entry.id);
                if seen.len() == 2 {
                    stop.notify_one();
                }
                Ok::<(), HandlerError>(())
            }
        },
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("both good entries handled");
    assert_eq!(*seen.lock().expect("lock"), vec![first, last]);
    assert_eq!(stats.dead_lettered, 1);
    let dead = redis.entries("mixed:dead").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["id"], "not-a-uuid");
    assert_eq!(dead[0]["key"], "k");
    assert!(
        dead[0]["error"].starts_with("malformed entry"),
        "{}",
        dead[0]["error"]
    );
    assert_eq!(dead[0]["group"], GROUP);
    assert_eq!(group_pending(&redis, "mixed", GROUP).await.0, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panicking_handler_fails_its_entry_and_the_consumer_goes_on() {
    let redis = TestRedis::shared();
    let id = xadd_event(&redis, "panics", Some("k"), &serde_json::json!({"n": 1})).await;
    let deliveries: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = Consumer::new(library_config(&redis, "panics", "solo")).expect("config");
    let run = consumer.run(
        |entry: Entry| {
            let (deliveries, stop) = (deliveries.clone(), stop.clone());
            async move {
                deliveries.lock().expect("lock").push(entry.deliveries);
                assert!(entry.deliveries > 1, "first delivery panics (on purpose)");
                assert_eq!(entry.id, id);
                stop.notify_one();
                Ok::<(), HandlerError>(())
            }
        },
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("handled on the second delivery");
    assert_eq!(*deliveries.lock().expect("lock"), vec![1, 2]);
    assert_eq!((stats.failed, stats.handled), (1, 1));
    assert_eq!(group_pending(&redis, "panics", GROUP).await.0, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_outlives_a_redis_restart_that_lost_its_group() {
    let mut server = OwnRedis::start();
    let redis = TestRedis::on(&server.url());
    // The consumer reaches the server through a proxy, which counts its attempts.
    let proxy = Proxy::start(server.port).await;
    let through = TestRedis {
        url: proxy.url(),
        prefix: redis.prefix.clone(),
        cluster: false,
    };
    let first = xadd_event(&redis, "outage", None, &serde_json::json!({"n": 1})).await;
    let seen: Arc<Mutex<Vec<uuid::Uuid>>> = Arc::default();
    let seen_changed = Arc::new(tokio::sync::Notify::new());
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = Consumer::new(library_config(&through, "outage", "solo")).expect("config");
    let run = tokio::spawn({
        let (seen, seen_changed, stop) = (seen.clone(), seen_changed.clone(), stop.clone());
        async move {
            consumer
                .run(
                    |entry: Entry| {
                        let (seen, seen_changed) = (seen.clone(), seen_changed.clone());
                        async move {
                            seen.lock().expect("lock").push(entry.id);
                            seen_changed.notify_one();
                            Ok::<(), HandlerError>(())
                        }
                    },
                    async move { stop.notified().await },
                )
                .await
        }
    });
    tokio::time::timeout(Duration::from_secs(30), seen_changed.notified())
        .await
        .expect("the first entry handled");
    // Down for several failed attempts; back without its data (no persistence): the stream
    // and the group are gone.
    server.stop();
    let tried = proxy.connections();
    eventually(
        Duration::from_secs(30),
        "the consumer to try Redis again while it is down",
        || async { proxy.connections() >= tried + 2 },
    )
    .await;
    server.restart();
    let second = xadd_event(&redis, "outage", None, &serde_json::json!({"n": 2})).await;
    tokio::time::timeout(Duration::from_secs(30), async {
        while seen.lock().expect("lock").len() < 2 {
            seen_changed.notified().await;
        }
    })
    .await
    .expect("the entry written after the restart handled");
    stop.notify_one();
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("stops on shutdown")
        .expect("no panic");
    assert_eq!(*seen.lock().expect("lock"), vec![first, second]);
    assert_eq!(stats.handled, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_handler_gets_whole_batches_and_a_failed_batch_again() {
    let redis = TestRedis::shared();
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(xadd_event(&redis, "batches", Some("k"), &serde_json::json!({ "n": n })).await);
    }
    // Each call's entries as (event id, delivery).
    type Calls = Vec<Vec<(uuid::Uuid, u64)>>;
    let calls: Arc<Mutex<Calls>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = Consumer::new(library_config(&redis, "batches", "solo")).expect("config");
    let run = consumer.run(
        Batches(|entries: Vec<Entry>| {
            let (calls, stop) = (calls.clone(), stop.clone());
            async move {
                let mut calls = calls.lock().expect("lock");
                calls.push(entries.iter().map(|e| (e.id, e.deliveries)).collect());
                if calls.len() == 1 {
                    return Err(HandlerError::retry("the first batch fails"));
                }
                stop.notify_one();
                Ok(())
            }
        }),
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the batch handled on its second delivery");
    let calls = calls.lock().expect("lock").clone();
    let first: Vec<(uuid::Uuid, u64)> = ids.iter().map(|id| (*id, 1)).collect();
    let second: Vec<(uuid::Uuid, u64)> = ids.iter().map(|id| (*id, 2)).collect();
    assert_eq!(
        calls,
        vec![first, second],
        "one batch, in stream order, twice"
    );
    assert_eq!((stats.handled, stats.failed), (10, 10));
    assert_eq!(group_pending(&redis, "batches", GROUP).await.0, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_table_on_a_database_of_its_own_and_its_retention() {
    use outbox_consumer::inbox;
    // The consumer's own database: not migrated by the relay.
    let db = TestDb::empty().await;
    let mut conn = db.conn().await;
    inbox::ensure_table(&mut conn).await.expect("create");
    inbox::ensure_table(&mut conn)
        .await
        .expect("again: a no-op");
    db.exec(
        "INSERT INTO outbox_inbox (consumer_group, event_id, topic, processed_at)
         SELECT g, gen_random_uuid(), 't', now() - make_interval(days => d)
         FROM unnest(ARRAY['a', 'b']) AS g, generate_series(0, 9) AS d",
    )
    .await;
    // Older than 5 days, group a only, in batches of 2.
    let mut deleted = 0;
    loop {
        let n = inbox::delete_older_than(&mut conn, "a", Duration::from_secs(5 * 86_400 + 60), 2)
            .await
            .expect("delete");
        deleted += n;
        if n < 2 {
            break;
        }
    }
    assert_eq!(deleted, 4, "days 6 to 9 of group a");
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'a'")
            .await,
        6
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'b'")
            .await,
        10,
        "another group's rows are its own consumers' business"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_slower_than_claim_idle_keeps_its_entries() {
    let redis = TestRedis::shared();
    for n in 0..6 {
        xadd_event(
            &redis,
            "slow",
            Some(&format!("k{n}")),
            &serde_json::json!({ "n": n }),
        )
        .await;
    }
    let handled: Arc<Mutex<Vec<(String, uuid::Uuid)>>> = Arc::default();
    let all_done = Arc::new(tokio::sync::Notify::new());
    let stop = Arc::new(tokio::sync::Notify::new());
    // Two consumers with a 600 ms claim idle; each handler takes 2 s.
    let config = |name: &str| {
        library_config(&redis, "slow", name)
            .claim_idle(Duration::from_millis(600))
            .batch_size(6)
    };
    let mut runs = Vec::new();
    for name in ["first", "second"] {
        let consumer = Consumer::new(config(name)).expect("config");
        let (handled, all_done, stop) = (handled.clone(), all_done.clone(), stop.clone());
        runs.push(tokio::spawn(async move {
            consumer
                .run(
                    move |entry: Entry| {
                        let (handled, all_done) = (handled.clone(), all_done.clone());
                        let name = name.to_string();
                        async move {
                            tokio::time::sleep(Duration::from_secs(2)).await;
                            let mut handled = handled.lock().expect("lock");
                            handled.push((name, entry.id));
                            if handled.len() >= 6 {
                                all_done.notify_one();
                            }
                            Ok::<(), HandlerError>(())
                        }
                    },
                    async move { stop.notified().await },
                )
                .await
        }));
        // The first reads the whole batch before the second starts.
        if name == "first" {
            wait_until(Duration::from_secs(10), || async {
                match group_pending(&redis, "slow", GROUP).await.0 {
                    6 => Ok(()),
                    n => Err(format!("{n} pending")),
                }
            })
            .await;
        }
    }
    tokio::time::timeout(Duration::from_secs(30), all_done.notified())
        .await
        .expect("six entries handled");
    // Let the second consumer finish a claim round (two happen per claim_idle) before
    // counting: an entry taken from the first would be handled again by now.
    wait_until(Duration::from_secs(10), || async {
        match group_pending(&redis, "slow", GROUP).await.0 {
            0 => Ok(()),
            n => Err(format!("{n} pending")),
        }
    })
    .await;
    stop.notify_waiters();
    for run in runs {
        tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .expect("stops")
            .expect("no panic");
    }
    let handled = handled.lock().expect("lock").clone();
    assert_eq!(handled.len(), 6, "an entry handled twice: {handled:?}");
    assert!(
        handled.iter().all(|(name, _)| name == "first"),
        "{handled:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_outage_of_the_inbox_burns_no_delivery() {
    // The consumer's database is a server of its own (not the outbox's): stopped, restarted.
    let pg = OwnPostgres::start();
    let effects = TestDb::at(&pg.url());
    let redis = TestRedis::shared();
    for n in 0..5 {
        xadd_event(&redis, "t0", Some("k"), &serde_json::json!({ "n": n })).await;
    }
    let consumer = ExampleConsumer::spawn(
        &effects,
        &redis,
        "t0",
        GROUP,
        "steady",
        &["--max-deliveries", "2", "--retry-base", "50ms"],
    );
    wait_settled(&effects, &redis, "t0", 5, 0).await;
    pg.stop();
    for n in 5..10 {
        xadd_event(&redis, "t0", Some("k"), &serde_json::json!({ "n": n })).await;
    }
    // The consumer meets the outage (its log says so) before the database comes back.
    wait_until(Duration::from_secs(60), || async {
        match consumer.log().contains("handler failed on an outage") {
            true => Ok(()),
            false => Err(consumer.log()),
        }
    })
    .await;
    pg.restart();
    wait_settled(&effects, &redis, "t0", 10, 0).await;
    assert_eq!(
        effects.scalar("SELECT count(*) FROM example_effects").await,
        10,
        "each event applied once"
    );
    assert!(
        !consumer.log().contains("dead-lettered"),
        "{}",
        consumer.log()
    );
}

/// A Redis client over TLS with `ca` trusted and `client` as its certificate.
async fn tls_conn(url: &str, ca: &TestCa, client: &Issued) -> redis::aio::MultiplexedConnection {
    let read = |p: &std::path::Path| std::fs::read(p).expect("read a test certificate");
    let certs = redis::TlsCertificates {
        client_tls: Some(redis::ClientTlsConfig {
            client_cert: read(&client.cert),
            client_key: read(&client.key),
        }),
        root_cert: Some(read(&ca.cert)),
    };
    redis::Client::build_with_tls(url, certs)
        .expect("tls client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect over tls")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_reads_over_mutual_tls_with_its_ca_and_client_certificate() {
    let ca = TestCa::new("consumer-test-ca");
    let server = OwnRedis::start_tls(&ca.server("redis", "localhost"), Some(&ca.cert));
    let client = ca.client("consumer", "outbox-consumer");
    let url = server.tls_url();
    let config = ConsumerConfig::new(&url, "secure", GROUP)
        .consumer("tls")
        .block(Duration::from_millis(200))
        .tls_files(
            Some(ca.cert.clone()),
            Some(client.cert.clone()),
            Some(client.key.clone()),
        );
    // Also installs the process's rustls crypto provider, which the test's client needs.
    let consumer = Consumer::new(config).expect("config");
    let mut conn = tls_conn(&url, &ca, &client).await;
    let id = uuid::Uuid::new_v4();
    let _: String = redis::AsyncCommands::xadd(
        &mut conn,
        "outbox:secure",
        "*",
        &[
            ("id", id.to_string().as_str()),
            ("topic", "secure"),
            ("payload", "{}"),
            ("headers", "{}"),
            ("created_at", "2026-12-02T13:57:01.123456Z"),
        ],
    )
    .await
    .expect("xadd over tls");
    let seen = Arc::new(Mutex::new(None));
    let stop = Arc::new(tokio::sync::Notify::new());
    let run = consumer.run(
        |entry: Entry| {
            let (seen, stop) = (seen.clone(), stop.clone());
            async move {
                *seen.lock().expect("lock") = Some(entry.id);
                stop.notify_one();
                Ok::<(), HandlerError>(())
            }
        },
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the entry read over TLS");
    assert_eq!(*seen.lock().expect("lock"), Some(id));
    assert_eq!(stats.handled, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_error_says_retry_dead_letter_now_or_outage() {
    let redis = TestRedis::shared();
    for kind in ["retry", "dead", "outage"] {
        xadd_event(
            &redis,
            "kinds",
            Some(kind),
            &serde_json::json!({ "kind": kind }),
        )
        .await;
    }
    // Each call as (kind, delivery number the entry carried).
    let calls: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let config = library_config(&redis, "kinds", "solo").max_deliveries(3);
    let consumer = Consumer::new(config).expect("config");
    let run = consumer.run(
        |entry: Entry| {
            let (calls, stop) = (calls.clone(), stop.clone());
            async move {
                let kind = entry.payload["kind"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let mut calls = calls.lock().map_err(|_| HandlerError::retry("lock"))?;
                calls.push((kind.clone(), entry.deliveries));
                let tries = calls.iter().filter(|(k, _)| *k == kind).count();
                let done = |calls: &[(String, u64)]| {
                    ["retry", "outage"].iter().all(|k| {
                        calls.iter().filter(|(c, _)| c == k).count()
                            == if *k == "retry" { 3 } else { 5 }
                    })
                };
                let result = match (kind.as_str(), tries) {
                    ("retry", 1..=2) => Err(HandlerError::retry("try again")),
                    ("dead", _) => Err(HandlerError::dead_letter("never valid")),
                    // More outages than max_deliveries: none of them may count.
                    ("outage", 1..=4) => Err(HandlerError::outage("database away")),
                    _ => Ok(()),
                };
                if done(&calls) {
                    stop.notify_one();
                }
                result
            }
        },
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("all three settled");
    let calls = calls.lock().expect("lock").clone();
    let of = |kind: &str| -> Vec<u64> {
        calls
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, d)| *d)
            .collect()
    };
    assert_eq!(of("retry"), vec![1, 2, 3], "retries count deliveries");
    assert_eq!(of("dead"), vec![1], "dead-lettered at the first failure");
    assert_eq!(
        of("outage"),
        vec![1, 1, 1, 1, 1],
        "outages spend no delivery"
    );
    assert_eq!(redis.xlen("kinds:dead").await, 1);
    let dead = redis.entries("kinds:dead").await;
    assert_eq!(
        dead[0].get("error").map(String::as_str),
        Some("never valid")
    );
    assert_eq!(dead[0].get("deliveries").map(String::as_str), Some("1"));
    assert_eq!(
        (stats.handled, stats.dead_lettered, stats.failed),
        (2, 1, 2)
    );
    assert_eq!(group_pending(&redis, "kinds", GROUP).await.0, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_typed_payload_that_does_not_parse_is_dead_lettered_at_once() {
    #[derive(serde::Deserialize)]
    struct Order {
        order_id: u64,
    }
    let redis = TestRedis::shared();
    xadd_event(&redis, "typed", None, &serde_json::json!({ "order_id": 7 })).await;
    xadd_event(
        &redis,
        "typed",
        None,
        &serde_json::json!({ "order_id": "x" }),
    )
    .await;
    let orders: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = Consumer::new(library_config(&redis, "typed", "solo")).expect("config");
    let run = consumer.run(
        |entry: Entry| {
            let (orders, stop) = (orders.clone(), stop.clone());
            async move {
                let order: Order = entry.payload_as().map_err(HandlerError::dead_letter)?;
                orders.lock().expect("lock").push(order.order_id);
                stop.notify_one();
                Ok::<(), HandlerError>(())
            }
        },
        notified(&stop),
    );
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("handled");
    wait_until(Duration::from_secs(10), || async {
        match redis.xlen("typed:dead").await {
            1 => Ok(()),
            n => Err(format!("{n} dead letters")),
        }
    })
    .await;
    assert_eq!(*orders.lock().expect("lock"), vec![7]);
}
