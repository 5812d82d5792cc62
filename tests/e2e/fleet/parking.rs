//! A group's parked key on an 8-partition topic divided by three consumers (`--park-keys`): the
//! poison entry parks its key; the owner of the key's partition is SIGKILLed and another takes
//! the partition over, and still none of the key's held entries takes effect; a discard then
//! applies them in their order, each once (the inbox, under the new owner's lease).

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_parked_key_stays_held_when_its_partitions_owner_dies_then_goes_out_in_order() {
    let relay = TokenRelay::start_with("fleet-park", relay_env).await;
    let (db, redis) = (&relay.db, &relay.redis);
    insert_with_poison_in_k2(db, 10).await;
    let spawn_parking =
        |name: &str| ExampleConsumer::spawn(db, redis, "t0", EFFECTS_GROUP, name, PARK_ARGS);
    let mut fleet: Vec<ExampleConsumer> = (0..3).map(|i| spawn_parking(&format!("c{i}"))).collect();
    let admin = relay.admin();
    wait_group_parked(&admin, EFFECTS_GROUP, "k2", 6).await;
    for k in (0..10).filter(|k| *k != 2) {
        assert_eq!(
            applied_in_order(db, &format!("k{k}")).await.len(),
            10,
            "k{k}"
        );
    }
    assert_eq!(applied_in_order(db, "k2").await, [1, 2, 3]);

    // The owner of k2's partition dies; another consumer takes the partition over.
    let p = outbox_core::partition::for_key("k2", PARTITIONS) as usize;
    let owner = owners(redis).await[p]
        .clone()
        .expect("k2's partition owned");
    let at = fleet
        .iter()
        .position(|c| c.name == owner)
        .expect("the owner is one of the fleet");
    let mut dead = fleet.remove(at);
    dead.kill9();
    let live: Vec<String> = fleet.iter().map(|c| c.name.clone()).collect();
    wait_balanced(redis, &live, Duration::from_secs(30)).await;
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't0', jsonb_build_object('n', 11), k FROM unnest(ARRAY['k0', 'k2']) AS k",
    )
    .await;
    wait_applied(db, "k0", 11).await;
    wait_group_parked(&admin, EFFECTS_GROUP, "k2", 7).await;
    assert_eq!(
        applied_in_order(db, "k2").await,
        [1, 2, 3],
        "nothing of k2 took effect"
    );

    let path = format!("/api/v1/topics/t0/groups/{EFFECTS_GROUP}/parked/k2/discard");
    let res = admin.post(&path, None);
    assert_eq!(res.status, 200, "{}", res.body);
    wait_applied(db, "k2", 10).await;
    assert_eq!(
        applied_in_order(db, "k2").await,
        [1, 2, 3, 5, 6, 7, 8, 9, 10, 11]
    );
    assert_effects_exactly_once(db, "t0").await;
}
