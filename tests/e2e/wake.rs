//! Producers' NOTIFY is quieted while a relay claims continuously (`outbox_wake`), and comes
//! back when the rate falls; while quiet, the relay polls on its own, so nothing waits for the
//! long poll interval.

use std::cell::Cell;
use std::time::Duration;

use crate::support::*;
use diesel_async::SimpleAsyncConnection;
use futures::StreamExt;

const QUIET_NOW: &str = "SELECT count(*) FROM outbox_wake WHERE busy_until > clock_timestamp()";

#[tokio::test(flavor = "multi_thread")]
async fn the_trigger_skips_notify_while_a_relay_is_busy_even_for_an_insert_only_role() {
    let db = TestDb::new().await;
    let role = format!("{}_producer", db.name);
    db.exec(&format!(
        "CREATE ROLE {role} NOLOGIN; GRANT USAGE ON SCHEMA public TO {role};
         GRANT INSERT ON outbox TO {role}"
    ))
    .await;
    let mut listener = db.listener().await;
    let mut notifications = std::pin::pin!(listener.notifications_stream());
    let mut producer = db.conn().await;
    let insert = format!(
        "SET ROLE {role}; INSERT INTO outbox (topic, payload) VALUES ('t0', '{{}}'); RESET ROLE"
    );

    db.exec("UPDATE outbox_wake SET busy_until = clock_timestamp() + interval '1 hour'")
        .await;
    producer
        .batch_execute(&insert)
        .await
        .expect("an insert-only role can produce while the trigger reads outbox_wake");
    let sent = db.notifications_before_marker(&mut notifications).await;
    assert!(
        sent.is_empty(),
        "no NOTIFY while busy_until is ahead: {sent:?}"
    );
    producer
        .batch_execute(
            "DO $$ BEGIN
               IF current_setting('outbox.quiet_until_' || left(md5(current_schema()), 12))::float8
                  > date_part('epoch', clock_timestamp()) + 1 THEN
                 RAISE EXCEPTION 'the session trusts the announcement for more than a second';
               END IF;
             END $$",
        )
        .await
        .expect("the session remembers the announcement, for at most a second");

    db.exec("UPDATE outbox_wake SET busy_until = clock_timestamp() - interval '1 second'")
        .await;
    // A session that has not read the announcement notifies at once.
    let mut fresh = db.conn().await;
    fresh.batch_execute(&insert).await.expect("insert");
    let got = tokio::time::timeout(Duration::from_secs(5), notifications.next()).await;
    assert!(
        matches!(got, Ok(Some(Ok(_)))),
        "NOTIFY is back once busy_until has passed"
    );
    // The session that read it trusts it for at most a second (the relay only ever moves it
    // later): here it was moved back, so that session notifies again within the second.
    let started = std::time::Instant::now();
    let mut inserted = 2;
    let renewed = loop {
        producer.batch_execute(&insert).await.expect("insert");
        inserted += 1;
        match tokio::time::timeout(Duration::from_millis(100), notifications.next()).await {
            Ok(Some(Ok(_))) => break true,
            Ok(other) => panic!("the listener ended: {other:?}"),
            Err(_) if started.elapsed() > Duration::from_secs(5) => break false,
            Err(_) => {}
        }
    };
    assert!(
        renewed,
        "the busy session notifies again once its second is over"
    );
    assert_eq!(db.scalar("SELECT count(*) FROM outbox").await, inserted);
    drop(producer);
    db.exec(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
        .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_draining_relay_quiets_producers_then_notify_wakes_it_again() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    insert_events(&db, Events::varied().n(1..=40_000).topics(4).keys(100)).await;
    let mut env = base_env(&db, &redis);
    // Only NOTIFY (or the relay's own fast poll) can deliver anything within a minute.
    env.push(("OUTBOX__RELAY__POLL_INTERVAL".into(), "60s".into()));
    let relay = RelayProc::spawn("quiet", &env);
    let (saw_quiet, saw_gauge) = (Cell::new(false), Cell::new(false));
    // Polled often: the quiet spell lasts only while the drain does.
    eventually_every(
        Duration::from_secs(60),
        Duration::from_millis(20),
        "the drain to finish",
        || async {
            if db.pending().await == 0 {
                return true;
            }
            if db.scalar(QUIET_NOW).await == 1 {
                saw_quiet.set(true);
                if relay.http().metrics().contains("outbox_producers_quiet 1") {
                    saw_gauge.set(true);
                }
            }
            false
        },
    )
    .await;
    let (saw_quiet, saw_gauge) = (saw_quiet.get(), saw_gauge.get());
    assert!(
        saw_quiet,
        "a relay draining 40k events never quieted producers"
    );
    assert!(saw_gauge, "outbox_producers_quiet never showed 1");
    assert_eq!(assert_exactly_once(&redis, 4).await, 40_000);

    // The drain is over: the announcement lapses and is not renewed.
    db.wait_for(QUIET_NOW, 0, Duration::from_secs(5)).await;
    // And the relay has stopped polling fast: it counts on NOTIFY again.
    relay
        .http()
        .wait_metric(
            "outbox_producers_quiet",
            |v| v == 0.0,
            Duration::from_secs(5),
        )
        .await;
    let mut listener = db.listener().await;
    let mut notifications = std::pin::pin!(listener.notifications_stream());
    db.exec("INSERT INTO outbox (topic, payload) VALUES ('t0', '{\"late\": true}')")
        .await;
    let got = tokio::time::timeout(Duration::from_secs(5), notifications.next()).await;
    assert!(matches!(got, Ok(Some(Ok(_)))), "producers notify again");
    db.wait_until_published(Duration::from_secs(10)).await;
    assert!(relay.http().metrics().contains("outbox_producers_quiet 0"));
}

#[tokio::test(flavor = "multi_thread")]
async fn while_quiet_the_relay_polls_on_its_own() {
    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup(
        "quiet-poll",
        &[
            ("OUTBOX__RELAY__POLL_INTERVAL", "60s"),
            // Any trickle counts as busy: the first event's NOTIFY starts it, then it is quiet.
            ("OUTBOX__RELAY__QUIET_ABOVE", "1"),
        ],
    )
    .await;
    let mut saw_quiet = false;
    for n in 0..30 {
        db.exec(&format!(
            "INSERT INTO outbox (topic, payload) VALUES ('t0', '{{\"n\": {n}}}')"
        ))
        .await;
        saw_quiet |= db.scalar(QUIET_NOW).await == 1;
        // A trickle: about ten events a second.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        saw_quiet,
        "a trickle above quiet_above never quieted producers"
    );
    // Far below the 60 s poll interval: found by the relay's fast poll, not by a NOTIFY.
    db.wait_until_published(Duration::from_secs(5)).await;
    assert_eq!(
        db.scalar(
            "SELECT count(*) FROM outbox WHERE published_at - created_at > interval '5 seconds'"
        )
        .await,
        0
    );
    assert_eq!(redis.xlen("t0").await, 30);
}
