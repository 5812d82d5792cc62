//! Claims after `claim_idle`: a dead consumer's entries are claimed by another, and a live
//! consumer whose handler is slower than `claim_idle` keeps its own.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn entries_of_a_consumer_killed_mid_handling_are_claimed_after_claim_idle() {
    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup("consumer-relay", &[]).await;
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
        // The holder makes the group as it starts.
        match try_group_pending(&redis, "t0", GROUP).await? {
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
                match try_group_pending(&redis, "slow", GROUP).await?.0 {
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
