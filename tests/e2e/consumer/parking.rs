//! Parked keys in a consumer group (`park_keys`, the example's `--park-keys`; contract
//! section 13): a poison entry in the middle of one key parks that key in the group, its later
//! entries are held while the other keys take effect, through a SIGKILL and a restart of the
//! consumer; a redrive that fails again keeps it parked; a discard lets the held entries take
//! effect in their order, each once (the inbox); the admin API lists and releases the key.

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
