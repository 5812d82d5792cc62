//! Fleets of every kind of handler (per entry and per batch, without and with the inbox) divide
//! the partitions and hand them over, on one Redis and on a cluster; a consumer starved past
//! the lease it trusts handles a key's older entries before newer ones.

use super::*;

/// Handled `(key, n)` pairs in the order their handlers ran, shared by a group's consumers.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, i64)>>>;

/// Each event once, and each key's events in order of `n`.
fn assert_once_in_key_order(seen: &[(String, i64)], total: usize, what: &str) {
    let distinct: std::collections::HashSet<&(String, i64)> = seen.iter().collect();
    assert_eq!(distinct.len(), total, "{what}: every event handled");
    assert_eq!(seen.len(), total, "{what}: none twice");
    let mut last: HashMap<&str, i64> = HashMap::new();
    for (key, n) in seen {
        if let Some(prev) = last.insert(key.as_str(), *n) {
            assert!(*n > prev, "{what}: key {key}: {n} handled after {prev}");
        }
    }
}

fn record(
    seen: &Seen,
    entry: &outbox_consumer::Entry,
) -> Result<(), outbox_consumer::HandlerError> {
    let n = entry.payload["n"].as_i64().unwrap_or(-1);
    let key = entry.key.clone().unwrap_or_default();
    seen.lock()
        .map_err(|_| outbox_consumer::HandlerError::retry("lock"))?
        .push((key, n));
    Ok(())
}

/// Four groups of two consumers each, one group per kind of handler (per entry and per
/// batch, without and with the inbox), divide the 8 partitions; one of each pair stops
/// halfway and the other takes its partitions over. Each group handles every event once,
/// each key in order.
pub(super) async fn fleets_of_every_handler_kind_divide_and_hand_over(
    db: &TestDb,
    redis: &TestRedis,
) {
    use diesel_async::pooled_connection::AsyncDieselConnectionManager;
    use outbox_consumer::inbox::Inbox;
    use outbox_consumer::{Batches, Consumer, ConsumerConfig, Entry};
    use std::sync::Arc;

    let _relay = RelayProc::spawn("fleet-kinds", &relay_env(db, redis));
    let total = 1200usize;
    // One event per key first: the relay records the partition count as it publishes.
    produce_rounds(
        &db.url,
        Rounds::default()
            .rounds(1)
            .per_round(30)
            .keys(30)
            .pause(Duration::from_millis(10)),
    )
    .await;
    let config = |group: &str, name: &str| {
        ConsumerConfig::new(&redis.url, "t0", group)
            .cluster(redis.cluster)
            .stream_prefix(&redis.prefix)
            .consumer(name)
            .claim_idle(Duration::from_secs(2))
            .block(Duration::from_millis(200))
    };
    let pool = bb8::Pool::builder()
        .max_size(8)
        .build(AsyncDieselConnectionManager::<
            diesel_async::AsyncPgConnection,
        >::new(&db.url))
        .await
        .expect("pool");
    const GROUPS: [&str; 4] = ["entries", "batches", "inbox-entries", "inbox-batches"];
    let seen: Vec<Seen> = GROUPS.iter().map(|_| Seen::default()).collect();
    let per_entry = |seen: &Seen| {
        let seen = seen.clone();
        move |entry: Entry| {
            let seen = seen.clone();
            async move { record(&seen, &entry) }
        }
    };
    let per_batch = |seen: &Seen| {
        let seen = seen.clone();
        Batches(move |batch: Vec<Entry>| {
            let seen = seen.clone();
            async move { batch.iter().try_for_each(|entry| record(&seen, entry)) }
        })
    };
    let inbox_entries = |seen: &Seen| {
        let seen = seen.clone();
        Inbox::new(pool.clone(), move |_conn, entry: &Entry| {
            let seen = seen.clone();
            Box::pin(async move { record(&seen, entry) })
        })
    };
    let inbox_batches = |seen: &Seen| {
        let seen = seen.clone();
        Batches(Inbox::for_batches(
            pool.clone(),
            move |_conn, batch: &[Entry]| {
                let seen = seen.clone();
                Box::pin(async move { batch.iter().try_for_each(|entry| record(&seen, entry)) })
            },
        ))
    };
    let stop_early = Arc::new(tokio::sync::Notify::new());
    let stop_all = Arc::new(tokio::sync::Notify::new());
    let notified = |n: &Arc<tokio::sync::Notify>| {
        let n = n.clone();
        async move { n.notified().await }
    };
    let consumers: Vec<[Consumer; 2]> = GROUPS
        .iter()
        .map(|g| [0, 1].map(|i| Consumer::new(config(g, &format!("{g}-{i}"))).expect("config")))
        .collect();
    let runs = async {
        tokio::join!(
            consumers[0][0].run(per_entry(&seen[0]), notified(&stop_early)),
            consumers[0][1].run(per_entry(&seen[0]), notified(&stop_all)),
            consumers[1][0].run(per_batch(&seen[1]), notified(&stop_early)),
            consumers[1][1].run(per_batch(&seen[1]), notified(&stop_all)),
            consumers[2][0].run(inbox_entries(&seen[2]), notified(&stop_early)),
            consumers[2][1].run(inbox_entries(&seen[2]), notified(&stop_all)),
            consumers[3][0].run(inbox_batches(&seen[3]), notified(&stop_early)),
            consumers[3][1].run(inbox_batches(&seen[3]), notified(&stop_all)),
        )
    };
    let handled = |at_least: usize| {
        let seen = &seen;
        move || async move {
            let counts: Vec<usize> = seen.iter().map(|s| s.lock().expect("lock").len()).collect();
            match counts.iter().all(|n| *n >= at_least) {
                true => Ok(()),
                false => Err(format!("handled {counts:?}, waiting for {at_least} each")),
            }
        }
    };
    let steer = async {
        // Every group divided before the bulk comes, so each consumer gets a share.
        for group in GROUPS {
            let live: Vec<String> = (0..2).map(|i| format!("{group}-{i}")).collect();
            wait_until(Duration::from_secs(30), || async {
                balanced(&owners_of(redis, group, PARTITIONS).await, &live)
            })
            .await;
        }
        produce_rounds(
            &db.url,
            Rounds::default()
                .first_n(30)
                .rounds(39)
                .per_round(30)
                .keys(30)
                .pause(Duration::from_millis(10)),
        )
        .await;
        wait_until(Duration::from_secs(60), handled(total / 3)).await;
        stop_early.notify_waiters();
        wait_until(Duration::from_secs(60), handled(total)).await;
        stop_all.notify_waiters();
    };
    let (stats, ()) = tokio::join!(runs, steer);
    for (group, seen) in GROUPS.iter().zip(&seen) {
        let seen = seen.lock().expect("lock").clone();
        assert_once_in_key_order(&seen, total, group);
    }
    let pairs = [
        (stats.0, stats.1),
        (stats.2, stats.3),
        (stats.4, stats.5),
        (stats.6, stats.7),
    ];
    for (group, (a, b)) in GROUPS.iter().zip(pairs) {
        assert!(
            a.handled > 0 && b.handled > 0,
            "{group}: both consumers handled some: {a:?} {b:?}"
        );
    }
    let inboxed = db
        .scalar("SELECT count(*) FROM outbox_inbox WHERE consumer_group LIKE 'inbox-%'")
        .await;
    assert_eq!(
        inboxed,
        2 * total as i64,
        "each inbox recorded each event once"
    );
    let fences = db
        .scalar("SELECT count(DISTINCT (consumer_group, partition)) FROM outbox_inbox_fences")
        .await;
    let used: std::collections::HashSet<u32> = (0..30)
        .map(|k| outbox_core::partition::for_key(&format!("k{k}"), PARTITIONS))
        .collect();
    assert_eq!(
        fences,
        2 * used.len() as i64,
        "each inbox fenced each partition its keys are in"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn on_one_redis_fleets_of_every_handler_kind_keep_key_order() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    fleets_of_every_handler_kind_divide_and_hand_over(&db, &redis).await;
}

/// The same on a Redis Cluster, whose 8 partition streams spread over 3 masters.
#[tokio::test(flavor = "multi_thread")]
async fn on_a_cluster_fleets_of_every_handler_kind_keep_key_order() {
    let cluster = OwnCluster::start(3);
    let db = TestDb::new().await;
    let redis = cluster.test_redis();
    let masters: std::collections::HashSet<usize> = (0..PARTITIONS)
        .map(|p| cluster.owner_of(&redis.stream(&format!("t0:{p}"))))
        .collect();
    assert!(masters.len() > 1, "the partitions spread over the masters");
    fleets_of_every_handler_kind_divide_and_hand_over(&db, &redis).await;
}

/// A consumer starved of CPU (here a handler blocks its runtime's only thread, heartbeat
/// included) past the time it trusts its lease, but not past the lease in Redis: the entries
/// of the key it stopped handling when the lease lapsed locally stay in its pending list, and
/// once the heartbeat renews the lease they are handled before any newer entry of that key.
#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_starved_past_its_lease_handles_a_keys_older_entries_before_newer_ones() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup_with("fleet-starved", relay_env).await;
    // Ten events of one key, published before the consumer starts.
    produce_rounds(&db.url, Rounds::default().rounds(1).per_round(10).keys(1)).await;
    let partition = outbox_core::partition::for_key("k0", PARTITIONS);
    wait_until(Duration::from_secs(30), || async {
        match redis.xlen(&format!("t0:{partition}")).await {
            10 => Ok(()),
            n => Err(format!("{n} entries published")),
        }
    })
    .await;
    // Lease 6 s: trusted for 4 s after a renewal sent at most 1 s before the block; the
    // 4.5 s block outlasts that trust and ends before the lease runs out in Redis.
    let config = outbox_consumer::ConsumerConfig::new(&redis.url, "t0", "starved")
        .cluster(redis.cluster)
        .stream_prefix(&redis.prefix)
        .consumer("starved-0")
        .claim_idle(Duration::from_secs(6))
        .block(Duration::from_millis(200));
    let consumer = outbox_consumer::Consumer::new(config).expect("config");
    let seen = Seen::default();
    let blocked = Arc::new(AtomicBool::new(false));
    let (unblocked_tx, unblocked_rx) = tokio::sync::oneshot::channel::<()>();
    let unblocked_tx = std::sync::Mutex::new(Some(unblocked_tx));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handler = {
        let (seen, blocked) = (seen.clone(), blocked.clone());
        move |entry: outbox_consumer::Entry| {
            let (seen, blocked) = (seen.clone(), blocked.clone());
            let unblocked = match blocked.swap(true, Ordering::SeqCst) {
                false => unblocked_tx.lock().ok().and_then(|mut tx| tx.take()),
                true => None,
            };
            async move {
                record(&seen, &entry)?;
                if let Some(unblocked) = unblocked {
                    std::thread::sleep(Duration::from_millis(4500));
                    let _ = unblocked.send(());
                }
                Ok::<(), outbox_consumer::HandlerError>(())
            }
        }
    };
    let runner = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(consumer.run(handler, async {
            let _ = stop_rx.await;
        }))
    });
    tokio::time::timeout(Duration::from_secs(60), unblocked_rx)
        .await
        .expect("the consumer handled its first entry")
        .expect("unblocked");
    // Newer events of the key while the consumer finds its lease lapsed and renews it.
    produce_rounds(
        &db.url,
        Rounds::default()
            .first_n(10)
            .rounds(1)
            .per_round(10)
            .keys(1),
    )
    .await;
    wait_until(Duration::from_secs(30), || async {
        let handled = seen.lock().expect("lock").len();
        match handled {
            20 => Ok(()),
            n => Err(format!(
                "{n} of 20 handled: {:?}",
                seen.lock().map(|s| s.clone())
            )),
        }
    })
    .await;
    let _ = stop_tx.send(());
    let stats = runner.join().expect("consumer thread");
    let seen = seen.lock().expect("lock").clone();
    assert_once_in_key_order(&seen, 20, "starved");
    assert_eq!(stats.handled, 20, "{stats:?}");
}
