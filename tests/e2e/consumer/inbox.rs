//! The inbox: its table on a database of its own and its retention, and a Postgres outage
//! that burns no delivery.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_table_on_a_database_of_its_own_and_its_retention() {
    use outbox_consumer::inbox;
    // The consumer's own database: not migrated by the relay.
    let db = TestDb::empty().await;
    let mut conn = db.conn().await;
    inbox::ensure_table(&mut conn).await.expect("create");
    inbox::ensure_table(&mut conn)
        .await
        .expect("again: a no-op");
    db.exec(
        "INSERT INTO outbox_inbox (consumer_group, event_id, topic, processed_at)
         SELECT g, gen_random_uuid(), 't', now() - make_interval(days => d)
         FROM unnest(ARRAY['a', 'b']) AS g, generate_series(0, 9) AS d",
    )
    .await;
    // Older than 5 days, group a only, in batches of 2.
    let mut deleted = 0;
    loop {
        let n = inbox::delete_older_than(&mut conn, "a", Duration::from_secs(5 * 86_400 + 60), 2)
            .await
            .expect("delete");
        deleted += n;
        if n < 2 {
            break;
        }
    }
    assert_eq!(deleted, 4, "days 6 to 9 of group a");
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'a'")
            .await,
        6
    );
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox_inbox WHERE consumer_group = 'b'")
            .await,
        10,
        "another group's rows are its own consumers' business"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_outage_of_the_inbox_burns_no_delivery() {
    // The consumer's database is a server of its own (not the outbox's): stopped, restarted.
    let pg = OwnPostgres::start();
    let effects = TestDb::at(&pg.url());
    let redis = TestRedis::shared();
    for n in 0..5 {
        xadd_event(&redis, "t0", Some("k"), &serde_json::json!({ "n": n })).await;
    }
    let consumer = ExampleConsumer::spawn(
        &effects,
        &redis,
        "t0",
        GROUP,
        "steady",
        &["--max-deliveries", "2", "--retry-base", "50ms"],
    );
    wait_settled(&effects, &redis, "t0", 5, 0).await;
    pg.stop();
    for n in 5..10 {
        xadd_event(&redis, "t0", Some("k"), &serde_json::json!({ "n": n })).await;
    }
    // The consumer meets the outage (its log says so) before the database comes back.
    wait_until(Duration::from_secs(60), || async {
        match consumer.log().contains("handler failed on an outage") {
            true => Ok(()),
            false => Err(consumer.log()),
        }
    })
    .await;
    pg.restart();
    wait_settled(&effects, &redis, "t0", 10, 0).await;
    assert_eq!(
        effects.scalar("SELECT count(*) FROM example_effects").await,
        10,
        "each event applied once"
    );
    assert!(
        !consumer.log().contains("dead-lettered"),
        "{}",
        consumer.log()
    );
}
