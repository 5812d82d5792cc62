//! Per-key order in the library: one consumer keeps each key's order through failures and a
//! restart, and over several topics keeps each (topic, key)'s order and dead-letters to each
//! topic's own dead stream.

use super::*;

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
