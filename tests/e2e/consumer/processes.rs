//! `consumer/examples/inbox_consumer` processes fed by a real relay: SIGKILLed and restarted, they
//! apply every event once; a poison event goes to the dead stream after exactly
//! `--max-deliveries`.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn sigkilled_inbox_consumers_apply_every_event_exactly_once() {
    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup("consumer-relay", &[]).await;
    let chaos = Chaos {
        consumers: 3,
        poison: 3,
        rounds: 40,
        keys: 20,
        min_kills: 12,
    };
    sigkill_while_producing(&db, &redis, chaos).await;
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'effects'")
            .await,
        2000
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_event_is_dead_lettered_after_exactly_max_deliveries() {
    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup("consumer-relay", &[]).await;
    db.exec(
        r#"INSERT INTO outbox (topic, payload, partition_key, headers) VALUES
           ('t0', '{"n": 1}', 'kp', '{}'),
           ('t0', '{"n": 2, "poison": true}', 'kp', '{"trace": "tr-2"}'),
           ('t0', '{"n": 3}', 'kp', '{}'),
           ('t0', '{"n": 4}', NULL, '{}')"#,
    )
    .await;
    db.wait_until_published(Duration::from_secs(30)).await;
    let consumer = ExampleConsumer::spawn(
        &db,
        &redis,
        "t0",
        GROUP,
        "only",
        &["--max-deliveries", "4", "--retry-base", "50ms"],
    );
    // The event after the poison one, same key, flows once the poison one is dead.
    wait_settled(&db, &redis, "t0", 3, 1).await;
    assert_effects_exactly_once(&db, "t0").await;

    let original = redis
        .entries("t0")
        .await
        .into_iter()
        .find(|e| e["payload"].contains("poison"))
        .expect("the poison entry in its stream");
    let dead = redis.entries("t0:dead").await;
    assert_eq!(dead.len(), 1);
    let dead = &dead[0];
    for field in ["id", "topic", "key", "payload", "headers", "created_at"] {
        assert_eq!(dead[field], original[field], "field {field}");
    }
    assert!(dead["error"].contains("poison"), "error: {}", dead["error"]);
    assert_eq!(dead["group"], GROUP);
    assert_eq!(dead["deliveries"], "4");
    let failures = consumer
        .log()
        .lines()
        .filter(|l| l.contains("handler failed") && l.contains(&original["id"]))
        .count();
    assert_eq!(failures, 4, "{}", consumer.log());
    let mut consumer = consumer;
    consumer.terminate();
    assert_eq!(
        consumer.wait_exit(Duration::from_secs(15)),
        Some(0),
        "SIGTERM: a clean exit"
    );
}
