//! Parked keys in a consumer group (`park_keys`, the example's `--park-keys`; contract
//! section 13): a poison entry in the middle of one key parks that key in the group, its later
//! entries are held while the other keys take effect, through a SIGKILL and a restart of the
//! consumer; a redrive that fails again keeps it parked; a discard lets the held entries take
//! effect in their order, each once (the inbox); the admin API lists and releases the key.

use super::*;

/// Each applied `n` of key `key`, in the order the effects were applied.
async fn applied(db: &TestDb, key: &str) -> Vec<i64> {
    let text = db
        .text(&format!(
            "SELECT coalesce(json_agg((o.payload->>'n')::bigint ORDER BY e.applied_at), '[]')::text
             FROM example_effects e JOIN outbox o ON o.id = e.event_id
             WHERE o.partition_key = '{key}'"
        ))
        .await;
    serde_json::from_str(&text).expect("a JSON list")
}

/// The group's parked keys as the admin API lists them.
fn group_parked(admin: &Http) -> serde_json::Value {
    let res = admin.get(&format!("/api/v1/topics/t0/groups/{GROUP}/parked"));
    assert_eq!(res.status, 200, "{}", res.body);
    res.json
}

/// Waits until the API lists exactly `k2`, holding `held` entries.
async fn wait_parked(admin: &Http, held: i64) -> serde_json::Value {
    eventually(Duration::from_secs(60), "k2 parked", || async {
        let keys = group_parked(admin);
        let ok = keys["keys"].as_array().is_some_and(|k| k.len() == 1)
            && keys["keys"][0]["key"] == "k2"
            && keys["keys"][0]["held"] == held;
        ok.then_some(keys)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_entry_parks_its_key_in_the_group_until_an_operator_acts() {
    let groups = format!("t0:{GROUP}");
    let relay = TokenRelay::start("park-group", &[("OUTBOX__GROUPS", groups.as_str())]).await;
    let (db, redis) = (&relay.db, &relay.redis);
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't0', jsonb_build_object('n', n, 'poison', k = 2 AND n = 4), 'k' || k
         FROM generate_series(1, 10) AS n, generate_series(0, 4) AS k ORDER BY n, k",
    )
    .await;
    let args = [
        "--park-keys",
        "--max-deliveries",
        "2",
        "--retry-base",
        "50ms",
        "--claim-idle",
        "2s",
    ];
    let mut consumer = ExampleConsumer::spawn(db, redis, "t0", GROUP, "c0", &args);
    let admin = relay.admin();
    // Every other key applied, k2 up to its poison entry; the rest of k2 held.
    let parked = wait_parked(&admin, 6).await;
    let poison = db
        .text("SELECT id::text FROM outbox WHERE (payload->>'poison')::boolean")
        .await;
    assert_eq!(parked["keys"][0]["dead_id"], poison);
    for k in ["k0", "k1", "k3", "k4"] {
        assert_eq!(applied(db, k).await, (1..=10).collect::<Vec<_>>(), "{k}");
    }
    assert_eq!(applied(db, "k2").await, [1, 2, 3]);
    // The relay's group keeper counts the declared group's parked key.
    let parked_keys = format!("outbox_parked_keys{{topic=\"t0\",group=\"{GROUP}\"}}");
    let http = relay.anonymous();
    http.wait_metric(&parked_keys, |v| v == 1.0, Duration::from_secs(30))
        .await;

    // SIGKILLed and restarted: the key stays parked; the other keys go on.
    consumer.kill9();
    let _ = consumer;
    let _consumer = ExampleConsumer::spawn(db, redis, "t0", GROUP, "c1", &args);
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't0', jsonb_build_object('n', n), k FROM generate_series(11, 12) AS n,
                unnest(ARRAY['k0', 'k2']) AS k ORDER BY n, k",
    )
    .await;
    wait_until(Duration::from_secs(60), || async {
        match applied(db, "k0").await.len() {
            12 => Ok(()),
            n => Err(format!("k0: {n} of 12")),
        }
    })
    .await;
    wait_parked(&admin, 8).await;
    assert_eq!(
        applied(db, "k2").await,
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
    wait_parked(&admin, 8).await;
    assert_eq!(applied(db, "k2").await, [1, 2, 3]);

    // A discard: the held entries take effect, in order, each once.
    let res = admin.post(
        &format!("/api/v1/topics/t0/groups/{GROUP}/parked/k2/discard"),
        None,
    );
    assert_eq!(res.status, 200, "{}", res.body);
    assert_eq!(res.json["released"], 8);
    wait_until(Duration::from_secs(60), || async {
        match applied(db, "k2").await.len() {
            11 => Ok(()),
            n => Err(format!("k2: {n} of 11")),
        }
    })
    .await;
    assert_eq!(
        applied(db, "k2").await,
        [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12]
    );
    assert_effects_exactly_once(db, "t0").await;
    eventually(Duration::from_secs(30), "k2 flows again", || async {
        group_parked(&admin)["keys"]
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
