//! SIGKILL of relay processes in a loop while producers write: nothing lost, nothing doubled,
//! per-key order kept.

use std::time::{Duration, Instant};

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_loop_loses_nothing_doubles_nothing_keeps_order() {
    sigkill_loop(base_env).await;
}

/// Three relays started with `env`, one SIGKILLed and replaced every 300 ms while a producer
/// writes 12,000 events: each arrives once, in key order, with no attempt counted.
pub(crate) async fn sigkill_loop(env: impl FnOnce(&TestDb, &TestRedis) -> Vec<(String, String)>) {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let mut env = env(&db, &redis);
    env.push(("OUTBOX__RELAY__BATCH_SIZE".into(), "200".into()));
    let mut relays: Vec<RelayProc> = (0..3)
        .map(|i| RelayProc::spawn(&format!("crash-{i}-0"), &env))
        .collect();
    let producer = tokio::spawn({
        let url = db.url.clone();
        async move {
            produce_rounds(
                &url,
                Rounds::default()
                    .rounds(60)
                    .per_round(200)
                    .topics(3)
                    .keys(30)
                    .pause(Duration::from_millis(50)),
            )
            .await
        }
    });
    let started = Instant::now();
    let mut kills = 0;
    while !producer.is_finished() || kills < 10 {
        // A kill every 300 ms, while the producer writes and after.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let victim = kills % relays.len();
        relays[victim].kill9();
        kills += 1;
        relays[victim] = RelayProc::spawn(&format!("crash-{victim}-{kills}"), &env);
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "producer never finished"
        );
    }
    producer.await.expect("producer");
    db.wait_until_published(Duration::from_secs(90)).await;
    assert_eq!(assert_exactly_once(&redis, 3).await, 12_000);
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0 OR dead_at IS NOT NULL")
            .await,
        0,
        "crashes are not the events' fault"
    );
}
