//! A fleet follows `outbox-relay repartition`, which waits for the fleet's unacknowledged
//! entries of the old partitions.

use super::*;

/// `outbox-relay repartition t0 3` while the fleet holds unacknowledged entries of the 2 old
/// partitions: it waits for them, the fleet finishes them, follows the new count and divides
/// the 3 partitions; every event takes effect once, each key in commit order.
#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_follows_a_repartition_that_waits_for_its_unacknowledged_entries() {
    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup_with("fleet-reparts", |db, redis| relay_env_with(db, redis, 2)).await;
    // Consumers apply effects; the relay never touches their table.
    db.exec(ORDER_CHECK).await;
    produce_rounds(
        &db.url,
        Rounds::default()
            .rounds(4)
            .per_round(100)
            .keys(20)
            .pause(Duration::from_millis(10)),
    )
    .await;
    let slow: Vec<&str> = FLEET_ARGS
        .iter()
        .copied()
        .chain(["--effect-delay", "40ms"])
        .collect();
    let fleet: Vec<ExampleConsumer> = (0..2)
        .map(|i| ExampleConsumer::spawn(&db, &redis, "t0", EFFECTS_GROUP, &format!("c{i}"), &slow))
        .collect();
    wait_until(Duration::from_secs(30), || async {
        match db.scalar("SELECT count(*) FROM example_effects").await {
            n if n >= 10 => Ok(()),
            n => Err(format!("{n} applied")),
        }
    })
    .await;

    let log = std::env::temp_dir().join(format!(
        "fleet-repartition-{}.log",
        redis.prefix.trim_end_matches(':')
    ));
    let mut cmd = std::process::Command::new(BIN);
    cmd.args(["repartition", "t0", "3"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(
            relay_env_with(&db, &redis, 2)
                .into_iter()
                .filter(|(k, _)| k != "OUTBOX__TOPICS"),
        );
    let mut repartition = Logged::spawn(cmd, log);
    wait_until(Duration::from_secs(10), || async {
        let said = repartition.log();
        match said.contains("waiting") && said.contains(EFFECTS_GROUP) {
            true => Ok(()),
            false => Err(format!("not waiting for the group: {said}")),
        }
    })
    .await;
    produce_rounds(
        &db.url,
        Rounds::default()
            .first_n(400)
            .rounds(2)
            .per_round(100)
            .keys(20)
            .pause(Duration::from_millis(10)),
    )
    .await;
    let code = repartition.wait_exit(Duration::from_secs(60));
    assert_eq!(code, Some(0), "{}", repartition.log());

    wait_until(Duration::from_secs(90), || async {
        let applied = db
            .scalar("SELECT count(DISTINCT event_id) FROM example_effects")
            .await;
        let pending = pending_of(&redis, 3).await;
        match (applied, pending) {
            (600, 0) => Ok(()),
            _ => Err(format!("applied {applied}/600, pending {pending}")),
        }
    })
    .await;
    assert_effects_exactly_once(&db, "t0").await;
    for c in &fleet {
        assert!(!c.log().contains("ORDER VIOLATION"), "{}", c.log());
    }
    let names: Vec<String> = fleet.iter().map(|c| c.name.clone()).collect();
    wait_until(Duration::from_secs(30), || async {
        balanced(&owners_of(&redis, EFFECTS_GROUP, 3).await, &names)
    })
    .await;
}
