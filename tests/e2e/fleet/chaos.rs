//! Each key's events in commit order while the fleet is SIGKILLed, frozen past its lease
//! (SIGSTOP, SIGCONT), scaled up and down.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_keeps_each_keys_order_through_kills_freezes_and_scaling() {
    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup_with("fleet-chaos", relay_env).await;
    // Consumers apply effects; the relay never touches their table.
    db.exec(ORDER_CHECK).await;
    let mut fleet: Vec<ExampleConsumer> = (0..3)
        .map(|i| spawn(&db, &redis, &format!("c{i}")))
        .collect();
    let mut logs = Vec::new();
    let (rounds, per_round, keys) = (50usize, 100i64, 40usize);
    let producer = tokio::spawn({
        let url = db.url.clone();
        async move {
            produce_rounds(
                &url,
                Rounds {
                    rounds,
                    per_round,
                    keys,
                    pause: Duration::from_millis(150),
                    ..Rounds::default()
                },
            )
            .await
        }
    });
    let mut next = 3;
    let mut froze = None;
    for step in 0..10 {
        tokio::time::sleep(Duration::from_millis(1200)).await;
        match step % 5 {
            // A crash, restarted under its name (its pending entries are its own at once).
            0 => {
                let mut c = fleet.remove(0);
                c.kill9();
                logs.push(c.log());
                fleet.push(spawn(&db, &redis, &c.name));
            }
            // Frozen past its lease (2 s): the others take its partitions; resumed, it may
            // not read, take or commit anything of them.
            1 => {
                let name = fleet[0].name.clone();
                let held = eventually(
                    Duration::from_secs(30),
                    "the consumer to freeze to own a partition",
                    || async {
                        let owned = owned_by(&owners(&redis).await, &name);
                        (!owned.is_empty()).then_some(owned)
                    },
                )
                .await;
                signal(&fleet[0], "-STOP");
                eventually(
                    Duration::from_secs(30),
                    "the others to take the frozen consumer's partitions",
                    || async {
                        let now = owners(&redis).await;
                        held.iter()
                            .all(|p| now[*p].as_ref().is_some_and(|o| *o != name))
                            .then_some(())
                            .ok_or(format!("{name} held {held:?}; owners now {now:?}"))
                    },
                )
                .await;
                signal(&fleet[0], "-CONT");
                froze = Some(name);
            }
            // Scale up.
            2 => {
                fleet.push(spawn(&db, &redis, &format!("c{next}")));
                next += 1;
            }
            // A crash, replaced under a new name.
            3 => {
                let mut c = fleet.remove(0);
                c.kill9();
                logs.push(c.log());
                fleet.push(spawn(&db, &redis, &format!("c{next}")));
                next += 1;
            }
            // Scale down, cleanly.
            _ => {
                let mut c = fleet.remove(0);
                c.terminate();
                c.wait_exit(Duration::from_secs(10));
                logs.push(c.log());
            }
        }
    }
    producer.await.expect("producer");
    let total = (rounds as i64) * per_round;
    wait_until(Duration::from_secs(120), || async {
        let applied = db
            .scalar("SELECT count(DISTINCT event_id) FROM example_effects")
            .await;
        let pending = pending(&redis).await;
        if applied == total && pending == 0 {
            Ok(())
        } else {
            Err(format!("applied {applied}/{total}, pending {pending}"))
        }
    })
    .await;
    assert_effects_exactly_once(&db, "t0").await;
    assert_eq!(redis.xlen("t0:dead").await, 0, "nothing dead-lettered");
    logs.extend(fleet.iter().map(|c| c.log()));
    for log in &logs {
        assert!(!log.contains("ORDER VIOLATION"), "{log}");
    }
    let names: Vec<String> = fleet.iter().map(|c| c.name.clone()).collect();
    wait_balanced(&redis, &names, Duration::from_secs(30)).await;
    // The frozen consumer found, on waking, that its leases had gone to others.
    let froze = froze.expect("a freeze happened");
    let frozen_log = logs
        .iter()
        .chain(fleet.iter().map(|c| c.log()).collect::<Vec<_>>().iter())
        .filter(|l| l.contains(&format!("consumer={froze}")) || l.contains(&froze))
        .any(|l| l.contains("no longer handled here"));
    assert!(
        frozen_log,
        "the frozen consumer {froze} noticed it lost its partitions"
    );
}
