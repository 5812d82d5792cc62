//! Parked keys in a consumer group (`park_keys`, the example's `--park-keys`; contract
//! section 13): a poison entry in the middle of one key parks that key in the group, its later
//! entries are held while the other keys take effect, through a SIGKILL and a restart of the
//! consumer; a redrive that fails again keeps it parked; a discard lets the held entries take
//! effect in their order, each once (the inbox); the admin API lists and releases the key. And
//! the library in-process with a batch handler, released through `outbox_core::parked`.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_entry_parks_its_key_in_the_group_until_an_operator_acts() {
    let groups = format!("t0:{GROUP}");
    let relay = TokenRelay::start("park-group", &[("OUTBOX__GROUPS", groups.as_str())]).await;
    let (db, redis) = (&relay.db, &relay.redis);
    insert_with_poison_in_k2(db, 5).await;
    let mut consumer = ExampleConsumer::spawn(db, redis, "t0", GROUP, "c0", PARK_ARGS);
    let admin = relay.admin();
    // Every other key applied, k2 up to its poison entry; the rest of k2 held.
    let parked = wait_group_parked(&admin, GROUP, "k2", 6).await;
    let poison = db
        .text("SELECT id::text FROM outbox WHERE (payload->>'poison')::boolean")
        .await;
    assert_eq!(parked["keys"][0]["dead_id"], poison);
    for k in ["k0", "k1", "k3", "k4"] {
        assert_eq!(
            applied_in_order(db, k).await,
            (1..=10).collect::<Vec<_>>(),
            "{k}"
        );
    }
    assert_eq!(applied_in_order(db, "k2").await, [1, 2, 3]);
    // The relay's group keeper counts the declared group's parked key.
    let parked_keys = format!("outbox_parked_keys{{topic=\"t0\",group=\"{GROUP}\"}}");
    let http = relay.anonymous();
    http.wait_metric(&parked_keys, |v| v == 1.0, Duration::from_secs(30))
        .await;

    // SIGKILLed and restarted: the key stays parked; the other keys go on.
    consumer.kill9();
    let _ = consumer;
    let _consumer = ExampleConsumer::spawn(db, redis, "t0", GROUP, "c1", PARK_ARGS);
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't0', jsonb_build_object('n', n), k FROM generate_series(11, 12) AS n,
                unnest(ARRAY['k0', 'k2']) AS k ORDER BY n, k",
    )
    .await;
    wait_applied(db, "k0", 12).await;
    wait_group_parked(&admin, GROUP, "k2", 8).await;
    assert_eq!(
        applied_in_order(db, "k2").await,
        [1, 2, 3],
        "nothing of k2 took effect"
    );

    // The read-only token may look, not act; a key not parked is 404.
    let viewer = relay.viewer();
    assert_eq!(
        viewer
            .post(
                &format!("/api/v1/topics/t0/groups/{GROUP}/parked/k2/discard"),
                None
            )
            .status,
        403
    );
    assert_eq!(
        admin
            .post(
                &format!("/api/v1/topics/t0/groups/{GROUP}/parked/k0/discard"),
                None
            )
            .status,
        404
    );

    // A redrive: the poison entry fails again, dead again, the key parked again.
    let res = admin.post(
        &format!("/api/v1/topics/t0/groups/{GROUP}/parked/k2/redrive"),
        None,
    );
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.json["released"], 9);
    wait_until(Duration::from_secs(60), || async {
        match redis.xlen("t0:dead").await {
            2 => Ok(()),
            n => Err(format!("{n} dead entries")),
        }
    })
    .await;
    wait_group_parked(&admin, GROUP, "k2", 8).await;
    assert_eq!(applied_in_order(db, "k2").await, [1, 2, 3]);

    // A discard: the held entries take effect, in order, each once.
    let res = admin.post(
        &format!("/api/v1/topics/t0/groups/{GROUP}/parked/k2/discard"),
        None,
    );
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.json["released"], 8);
    wait_applied(db, "k2", 11).await;
    assert_eq!(
        applied_in_order(db, "k2").await,
        [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12]
    );
    assert_effects_exactly_once(db, "t0").await;
    eventually(Duration::from_secs(30), "k2 flows again", || async {
        admin
            .get(&format!("/api/v1/topics/t0/groups/{GROUP}/parked"))
            .json["keys"]
            .as_array()
            .is_some_and(|k| k.is_empty())
    })
    .await;
    http.wait_metric(&parked_keys, |v| v == 0.0, Duration::from_secs(30))
        .await;
    let audit = admin.get("/api/v1/audit");
    assert!(
        audit.body.contains("redrive_parked") && audit.body.contains("discard_parked"),
        "{}",
        audit.body
    );
}

/// The library in-process with a batch handler: a dead-lettered entry parks its key, the
/// key's later entries are held (not handed to the handler) while the other key flows, and a
/// release (here through `outbox_core::parked`, what the relay's admin calls) hands them over
/// in order.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_handler_parks_a_key_and_gets_its_held_entries_after_the_release() {
    use outbox_core::parked::{self, Release};
    let redis = TestRedis::shared();
    for n in 0..6 {
        for key in ["k0", "k1"] {
            let payload = serde_json::json!({ "n": n, "poison": key == "k1" && n == 2 });
            xadd_event(&redis, "park.batch", Some(key), &payload).await;
        }
    }
    let applied: Arc<Mutex<Vec<(String, i64)>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let config = library_config(&redis, "park.batch", "parking")
        .batch_size(1)
        .max_deliveries(2)
        .park_keys(true);
    let consumer = Consumer::new(config).expect("config");
    let run = consumer.run(
        Batches(|entries: Vec<Entry>| {
            let (applied, stop) = (applied.clone(), stop.clone());
            async move {
                let mut applied = applied.lock().map_err(|_| HandlerError::retry("lock"))?;
                for e in entries {
                    if e.payload["poison"] == serde_json::json!(true) {
                        return Err(HandlerError::dead_letter("poison"));
                    }
                    let n = e.payload["n"].as_i64().unwrap_or(-1);
                    applied.push((e.key.clone().unwrap_or_default(), n));
                }
                if applied.len() == 11 {
                    stop.notify_one();
                }
                Ok::<(), HandlerError>(())
            }
        }),
        notified(&stop),
    );
    let applied_of = |key: &str| -> Vec<i64> {
        let applied = applied.lock().expect("lock");
        applied
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, n)| *n)
            .collect()
    };
    let hash = parked::parked_key(&redis.prefix, "park.batch", GROUP);
    let list = parked::held_key(&redis.prefix, "park.batch", GROUP, "k1");
    let check = async {
        let mut c = redis.conn().await;
        eventually(Duration::from_secs(30), "k1 parked with 3 held", || {
            let (k0, k1) = (applied_of("k0"), applied_of("k1"));
            let mut c = c.clone();
            let list = list.clone();
            async move {
                let held: usize = redis::cmd("LLEN")
                    .arg(&list)
                    .query_async(&mut c)
                    .await
                    .ok()?;
                (k0.len() == 6 && held == 3).then_some(k1)
            }
        })
        .await;
        assert_eq!(
            applied_of("k1"),
            [0, 1],
            "nothing of k1 after its dead entry"
        );
        let keys = parked::parked_keys(&mut c, &hash).await.expect("parked");
        assert_eq!(keys.len(), 1);
        assert_eq!(keys[0].0, "k1");
        let released = parked::release(
            &mut c,
            &redis.prefix,
            "park.batch",
            GROUP,
            "k1",
            Release::Discard,
            None,
        )
        .await
        .expect("release");
        assert_eq!(released, Some(3));
    };
    let (stats, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(60), run), check);
    stats.expect("the held entries handled after the release");
    assert_eq!(applied_of("k1"), [0, 1, 3, 4, 5], "in order, once");
    let c = redis.conn().await;
    eventually(Duration::from_secs(10), "k1 forgotten", || {
        let mut c = c.clone();
        let hash = hash.clone();
        async move {
            parked::parked_keys(&mut c, &hash)
                .await
                .ok()
                .filter(|k| k.is_empty())
        }
    })
    .await;
}
