//! Concurrent claim transactions (a replica's workers, or several replicas) share a backlog:
//! while one holds its batch, the next claims the following events instead of coming back
//! empty, and never a later event of a key whose earlier event the first one holds.

mod common;

use std::collections::HashSet;

use common::*;
use diesel_async::SimpleAsyncConnection;
use outbox_relay::relay::cycle::claim_chains;

#[tokio::test(flavor = "multi_thread")]
async fn a_second_claimer_gets_its_own_batch_while_the_first_holds_one() {
    let db = TestDb::new().await;
    // 1,000 keys: the oldest 2,000 rows (the window) hold more than two batches of heads.
    insert_events(&db, 6_000, 3, 1_000).await;
    let mut first = db.conn().await;
    let mut second = db.conn().await;
    first.batch_execute("BEGIN").await.expect("begin");
    second.batch_execute("BEGIN").await.expect("begin");

    let a = claim_chains(&mut first, 500).await.expect("first claim");
    let b = claim_chains(&mut second, 500).await.expect("second claim");
    assert_eq!(a.heads, 500);
    assert_eq!(b.heads, 500, "the second claimer came back short");

    let ids = |chains: &Vec<Vec<outbox_relay::db::outbox::ClaimedRow>>| -> HashSet<uuid::Uuid> {
        chains.iter().flatten().map(|r| r.id).collect()
    };
    assert!(ids(&a.chains).is_disjoint(&ids(&b.chains)));
    let keys_a: HashSet<String> = a
        .chains
        .iter()
        .flatten()
        .filter_map(|r| r.partition_key.clone())
        .collect();
    for row in b.chains.iter().flatten() {
        if let Some(key) = &row.partition_key {
            assert!(!keys_a.contains(key), "key {key} claimed by both");
        }
    }
    first.batch_execute("ROLLBACK").await.expect("rollback");
    second.batch_execute("ROLLBACK").await.expect("rollback");
}
