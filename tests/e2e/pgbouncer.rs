//! Through PgBouncer in transaction pooling mode (a pgbouncer of the test's own with 3 server
//! connections per database, `support::PgBouncer`), with the documented settings
//! (`relay.poll_only = true`, `database.prepared_statements = false`): the guarantees of the
//! other suites hold, and nothing a relay does stays behind on the pooler's server connections
//! for its other clients. The scenarios are those of `delivery`, `ordering`, `crash`, `lease`,
//! `retention`, `api::steering` and `cli`, run through the pooler.

use crate::support::*;

/// No statement of the relay failed through the pooler: a statement split over two server
/// connections fails (`prepared statement "s12" does not exist`), a heartbeat or a claim with
/// it. A statement cancelled by the lease's `statement_timeout` is the lease at work on a
/// loaded machine, not the pooler's doing.
fn assert_no_postgres_errors(relay: &RelayProc) {
    let log = relay.log();
    for line in log.lines() {
        for error in [
            "postgres query failed",
            "postgres unavailable",
            "postgres connection failed",
        ] {
            assert!(
                !line.contains(error) || line.contains("due to statement timeout"),
                "{error} in the relay's log:\n{log}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_event_arrives_once_with_intact_fields_and_the_servers_stay_clean() {
    let bouncer = PgBouncer::start();
    let (db, _redis, mut relay) =
        crate::delivery::arrive_exactly_once_with_intact_fields(|db, redis| {
            bouncer.relay_env(db, redis)
        })
        .await;
    assert_eq!(relay.http().status("/readyz"), 200);
    assert_no_postgres_errors(&relay);
    relay.kill9();
    bouncer.assert_servers_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_relays_through_the_pooler_keep_per_key_order() {
    // Configured as before `database.pooler` existed: still a pooler's session rules.
    let bouncer = PgBouncer::start();
    let db =
        crate::ordering::relays_keep_per_key_order_and_write_each_event_once(2, |db, redis| {
            bouncer.relay_env_by_two_settings(db, redis)
        })
        .await;
    bouncer.assert_servers_clean(&db).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigkill_loop_through_the_pooler_loses_nothing_doubles_nothing() {
    let bouncer = PgBouncer::start();
    crate::crash::sigkill_loop(|db, redis| bouncer.relay_env(db, redis)).await;
}

/// The lease holds through the pooler, where no session setting reaches the server connection
/// a claim runs on: the claim transaction sets its own `idle_in_transaction_session_timeout`.
#[tokio::test(flavor = "multi_thread")]
async fn a_hung_replicas_claim_is_taken_over_after_the_lease_through_the_pooler() {
    let bouncer = PgBouncer::start();
    crate::lease::hung_replicas_claim_is_taken_over(|db, redis| bouncer.relay_env(db, redis)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn retention_through_the_pooler_deletes_only_old_published_rows() {
    let bouncer = PgBouncer::start();
    crate::retention::retention_deletes_only_old_published_rows_with(|db, redis| {
        bouncer.relay_env(db, redis)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pause_and_resume_through_the_admin_api_behind_the_pooler() {
    let bouncer = PgBouncer::start();
    let api = TokenRelay::start_with("pgb-pause", |db, redis| bouncer.relay_env(db, redis)).await;
    crate::api::steering::pause_holds_and_resume_releases(&api).await;
    assert_no_postgres_errors(&api.relay);
}

/// `migrate` is one transaction under a transaction-scoped lock: concurrent runs through the
/// pooler are safe, and no lock stays behind on a server connection.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_migrate_through_the_pooler_is_safe_and_leaves_nothing_behind() {
    let bouncer = PgBouncer::start();
    let db = crate::cli::concurrent_migrate(|db| bouncer.url(db)).await;
    bouncer.assert_servers_clean(&db).await;
}
