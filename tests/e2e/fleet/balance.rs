//! Dividing the partitions: a fleet balances them (at most one owner each, counts within one
//! of each other) after joins, clean leaves and crashes, and the relay shows who holds what on
//! `/metrics` and the Streams page.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_fleet_divides_the_partitions_and_rebalances_after_joins_and_leaves() {
    let Bundle { db, redis, relay } = setup_with("fleet-balance", relay_env).await;
    // Partitions exist once the relay has published the topic.
    produce_rounds(&db.url, Rounds::default().rounds(1).per_round(40).keys(40)).await;
    let mut fleet: Vec<ExampleConsumer> = (0..3)
        .map(|i| spawn(&db, &redis, &format!("c{i}")))
        .collect();
    let names =
        |fleet: &[ExampleConsumer]| fleet.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    wait_balanced(&redis, &names(&fleet), Duration::from_secs(30)).await;

    // The relay shows who holds what: on /metrics, and per partition on the Streams page.
    let http = relay.http();
    let series = |p: u32| {
        format!(r#"outbox_partition_owned{{topic="t0",partition="{p}",group="{EFFECTS_GROUP}"}}"#)
    };
    for p in 0..PARTITIONS {
        http.wait_metric(&series(p), |v| v == 1.0, Duration::from_secs(20))
            .await;
    }
    let members = format!(r#"outbox_group_members{{topic="t0",group="{EFFECTS_GROUP}"}}"#);
    http.wait_metric(&members, |v| v == 3.0, Duration::from_secs(20))
        .await;
    let login = http.get("/login?next=%2Fstreams");
    let page = http
        .cookie(&login.session_cookie().expect("a session cookie"))
        .get("/streams");
    assert_eq!(page.status, 200, "{}", page.body);
    let owners_now = owners(&redis).await;
    for (p, owner) in owners_now.iter().enumerate() {
        let owner = owner.as_deref().expect("owned");
        let row = page
            .body
            .split("<tr>")
            .find(|row| row.contains(&format!("partition {p}<")) && row.contains(EFFECTS_GROUP))
            .unwrap_or_else(|| panic!("no group row for partition {p} in {}", page.body));
        assert!(
            row.contains(&format!("<code>{owner}</code>")),
            "partition {p}: {row}"
        );
        assert!(row.contains("epoch "), "{row}");
    }

    // A join: 2 each.
    fleet.push(spawn(&db, &redis, "c3"));
    let join = wait_balanced(&redis, &names(&fleet), Duration::from_secs(30)).await;
    // A clean leave (SIGTERM) gives its partitions back at once.
    let leaving = fleet.remove(0);
    leaving.terminate();
    let leave = wait_balanced(&redis, &names(&fleet), Duration::from_secs(30)).await;
    // A crash: its partitions wait for its lease (2 s) to run out.
    let mut crashed = fleet.remove(0);
    crashed.kill9();
    let crash = wait_balanced(&redis, &names(&fleet), Duration::from_secs(30)).await;
    http.wait_metric(&members, |v| v == 2.0, Duration::from_secs(20))
        .await;
    // With every consumer gone, the partitions have no owner once the leases run out.
    for mut c in fleet.drain(1..) {
        c.kill9();
    }
    let mut last = fleet.remove(0);
    last.terminate();
    last.wait_exit(Duration::from_secs(10));
    for p in 0..PARTITIONS {
        http.wait_metric(&series(p), |v| v == 0.0, Duration::from_secs(20))
            .await;
    }
    http.wait_metric(&members, |v| v == 0.0, Duration::from_secs(20))
        .await;
    eprintln!("balanced again after a join {join:?}, a leave {leave:?}, a crash {crash:?}");
    let epochs_owned: Vec<i64> = {
        let mut c = redis.conn().await;
        let mut e = Vec::new();
        for p in 0..PARTITIONS {
            let key = outbox_core::keys::partition_epoch(
                &redis.stream(&format!("t0:{p}")),
                EFFECTS_GROUP,
            );
            e.push(
                c.get::<_, Option<i64>>(key)
                    .await
                    .expect("epoch")
                    .unwrap_or(0),
            );
        }
        e
    };
    assert!(
        epochs_owned.iter().all(|e| *e >= 1),
        "each owner took an epoch: {epochs_owned:?}"
    );
    assert!(last.log().contains("took partition"), "{}", last.log());
}
