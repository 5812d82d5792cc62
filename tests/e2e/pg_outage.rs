//! A Postgres outage (our own server, crashed and restarted): the relay stays up, reports
//! not-ready, burns no attempts, and resumes by itself (the listener reconnects).

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn postgres_restart_is_survived_without_burning_attempts() {
    let (pg, db) = OwnPostgres::start_migrated().await;
    let redis = TestRedis::shared();
    let relay = RelayProc::spawn("pg-outage", &base_env(&db, &redis));
    relay.wait_ready(Duration::from_secs(20)).await;
    insert_events(&db, Events::varied().n(1..=100).topics(1).keys(5)).await;
    db.wait_until_published(Duration::from_secs(20)).await;

    pg.stop();
    relay
        .http()
        .wait_status("/readyz", 503, Duration::from_secs(20))
        .await;
    // The claim loop keeps failing meanwhile: wait for one more failed cycle.
    let failed = relay.outage_cycles();
    relay
        .wait_outage_cycles_over(failed, Duration::from_secs(30))
        .await;
    assert_eq!(
        relay.http().status("/healthz"),
        200,
        "the process survives the outage"
    );

    pg.restart();
    relay.wait_ready(Duration::from_secs(30)).await;
    insert_events(&db, Events::varied().n(1..=100).topics(1).keys(5)).await;
    db.wait_until_published(Duration::from_secs(30)).await;
    assert_eq!(redis.xlen("t0").await, 200);
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0")
            .await,
        0
    );
}
