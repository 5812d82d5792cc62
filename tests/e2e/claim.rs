//! Concurrent claim transactions (a replica's workers, or several replicas) share a backlog:
//! while one holds its batch, the next claims the following events instead of coming back
//! empty, and never a later event of a key whose earlier event the first one holds.

use std::collections::HashSet;

use crate::support::*;
use diesel_async::SimpleAsyncConnection;
use std::time::Duration;

use outbox_relay::db::outbox::{take_claim_slot, BatchLimits, Slot};
use outbox_relay::relay::batch::claim_chains;

/// Limits of `n` rows and no byte bound that matters.
fn rows(n: i64) -> BatchLimits {
    BatchLimits {
        rows: n,
        bytes: 1 << 30,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_claimer_gets_its_own_batch_while_the_first_holds_one() {
    let db = TestDb::new().await;
    // 1,000 keys: the oldest 2,000 rows (the window) hold more than two batches of heads.
    insert_events(&db, Events::varied().n(1..=6_000).topics(3).keys(1_000)).await;
    let mut first = db.conn().await;
    let mut second = db.conn().await;
    first.batch_execute("BEGIN").await.expect("begin");
    second.batch_execute("BEGIN").await.expect("begin");

    let a = claim_chains(&mut first, rows(500))
        .await
        .expect("first claim");
    let b = claim_chains(&mut second, rows(500))
        .await
        .expect("second claim");
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

#[tokio::test(flavor = "multi_thread")]
async fn claim_slots_cap_concurrent_claim_transactions_across_connections() {
    let db = TestDb::new().await;
    let mut conns = Vec::new();
    for _ in 0..3 {
        let mut c = db.conn().await;
        c.batch_execute("BEGIN").await.expect("begin");
        conns.push(c);
    }
    let patience = Duration::from_secs(2);
    assert_eq!(
        take_claim_slot(&mut conns[0], 2, patience)
            .await
            .expect("slot"),
        Slot::Taken
    );
    assert_eq!(
        take_claim_slot(&mut conns[1], 2, patience)
            .await
            .expect("slot"),
        Slot::Taken
    );
    assert_eq!(
        take_claim_slot(&mut conns[2], 2, patience)
            .await
            .expect("slot"),
        Slot::Busy,
        "a third transaction got one of two slots"
    );
    // Holders in their transactions for longer than the patience look hung.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        take_claim_slot(&mut conns[2], 2, Duration::from_millis(200))
            .await
            .expect("slot"),
        Slot::HolderStuck
    );
    // A slot lasts as long as its transaction.
    conns[0].batch_execute("COMMIT").await.expect("commit");
    assert_eq!(
        take_claim_slot(&mut conns[2], 2, patience)
            .await
            .expect("slot"),
        Slot::Taken
    );
    for c in &mut conns[1..] {
        c.batch_execute("ROLLBACK").await.expect("rollback");
    }
}

/// The settings a claim transaction runs with (`outbox::tune_relay_transaction`): set by the
/// slot statement whether it finds a slot or not, and by the tune alone without slots; gone
/// after the transaction, so the pooled connection is back to the server's defaults.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_transaction_is_tuned_by_its_first_statement_and_only_for_itself() {
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Settings {
        #[diesel(sql_type = diesel::sql_types::Text)]
        sync: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        seqscan: String,
        #[diesel(sql_type = diesel::sql_types::Text)]
        plans: String,
    }
    async fn settings(c: &mut diesel_async::AsyncPgConnection) -> (String, String, String) {
        let s: Settings = diesel::sql_query(
            "SELECT current_setting('synchronous_commit') AS sync,
                    current_setting('enable_seqscan') AS seqscan,
                    current_setting('plan_cache_mode') AS plans",
        )
        .get_result(c)
        .await
        .expect("settings");
        (s.sync, s.seqscan, s.plans)
    }
    let tuned = (
        "off".to_string(),
        "off".to_string(),
        "force_custom_plan".to_string(),
    );
    let db = TestDb::new().await;
    let mut holder = db.conn().await;
    let mut c = db.conn().await;
    let defaults = settings(&mut c).await;
    assert_ne!(defaults, tuned);
    holder.batch_execute("BEGIN").await.expect("begin");
    let patience = Duration::from_secs(2);
    assert_eq!(
        take_claim_slot(&mut holder, 1, patience)
            .await
            .expect("slot"),
        Slot::Taken
    );
    assert_eq!(settings(&mut holder).await, tuned, "with a slot taken");

    c.batch_execute("BEGIN").await.expect("begin");
    assert_eq!(
        take_claim_slot(&mut c, 1, patience).await.expect("slot"),
        Slot::Busy
    );
    assert_eq!(settings(&mut c).await, tuned, "with every slot busy");
    c.batch_execute("COMMIT").await.expect("commit");
    assert_eq!(settings(&mut c).await, defaults, "after the transaction");

    c.batch_execute("BEGIN").await.expect("begin");
    outbox_relay::db::outbox::tune_relay_transaction(&mut c)
        .await
        .expect("tune");
    assert_eq!(settings(&mut c).await, tuned, "without slots");
    c.batch_execute("ROLLBACK").await.expect("rollback");
    holder.batch_execute("ROLLBACK").await.expect("rollback");
    assert_eq!(settings(&mut c).await, defaults);
}

/// `seq` is taken at insert, not at commit. A head is picked in one snapshot and its run in a
/// newer one; a transaction that commits in between may hold events of the key on both sides
/// of the head. Its later event must not be claimed behind the head while its earlier one waits.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_never_takes_an_event_whose_own_transaction_has_an_earlier_one_pending() {
    use outbox_relay::db::outbox::{claim_heads, claim_runs, HeadScan};
    let db = TestDb::new().await;
    let mut early = db.conn().await;
    early
        .batch_execute(
            "BEGIN; INSERT INTO outbox (topic, payload, partition_key) VALUES ('t0', '{\"n\": 1}', 'k')",
        )
        .await
        .expect("first insert of the slow transaction");
    db.exec("INSERT INTO outbox (topic, payload, partition_key) VALUES ('t0', '{\"n\": 2}', 'k')")
        .await;
    early
        .batch_execute(
            "INSERT INTO outbox (topic, payload, partition_key) VALUES ('t0', '{\"n\": 3}', 'k')",
        )
        .await
        .expect("second insert of the slow transaction");

    let mut claimer = db.conn().await;
    claimer.batch_execute("BEGIN").await.expect("begin");
    let heads = claim_heads(&mut claimer, rows(10), HeadScan::Oldest(40))
        .await
        .expect("heads");
    assert_eq!(heads.len(), 1, "only the committed event is visible");
    assert!(
        heads[0].payload.contains("\"n\": 2"),
        "{}",
        heads[0].payload
    );
    early.batch_execute("COMMIT").await.expect("commit");
    let runs = claim_runs(
        &claimer,
        &[("t0".into(), "k".into(), heads[0].seq)],
        10,
        rows(10),
    )
    .await
    .expect("runs");
    let taken: Vec<&str> = runs.iter().map(|r| r.payload.as_str()).collect();
    assert!(
        runs.is_empty(),
        "n=3 taken behind the head while n=1 of its own transaction is pending: {taken:?}"
    );
    claimer.batch_execute("ROLLBACK").await.expect("rollback");
}

/// Big events: a claim stops at `relay.batch_bytes` (one event past it at most), keeps each
/// key's run a prefix in order, and when its heads were cut, says it is full so the
/// replica's other workers claim the rest at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_claim_of_big_events_stops_at_its_byte_budget_and_keeps_key_order() {
    let db = TestDb::new().await;
    // 40 events of ~100 KB: keys k0..k3 with 10 events each, in seq order per key.
    db.exec(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 'big', jsonb_build_object('n', i, 'pad', repeat('x', 100000)), 'k' || (i % 4)
         FROM generate_series(0, 39) AS i",
    )
    .await;
    let limits = BatchLimits {
        rows: 1000,
        bytes: 450_000,
    };
    let mut claimed_n: Vec<i64> = Vec::new();
    let mut claims = 0;
    loop {
        let mut c = db.conn().await;
        c.batch_execute("BEGIN").await.expect("begin");
        let claim = claim_chains(&mut c, limits).await.expect("claim");
        let rows: Vec<&outbox_relay::db::outbox::ClaimedRow> =
            claim.chains.iter().flatten().collect();
        if rows.is_empty() {
            c.batch_execute("ROLLBACK").await.expect("rollback");
            break;
        }
        claims += 1;
        let bytes: usize = rows.iter().map(|r| r.payload.len() + r.headers.len()).sum();
        let biggest = rows
            .iter()
            .map(|r| r.payload.len() + r.headers.len())
            .max()
            .unwrap_or(0);
        assert!(
            bytes < 450_000 + 2 * biggest,
            "claim {claims} took {bytes} bytes in {} events",
            rows.len()
        );
        let seqs: Vec<i64> = rows.iter().map(|r| r.seq).collect();
        let list = seqs
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
            .join(",");
        c.batch_execute(&format!(
            "UPDATE outbox SET published_at = now() WHERE seq IN ({list})"
        ))
        .await
        .expect("mark");
        c.batch_execute("COMMIT").await.expect("commit");
        for r in rows {
            let v: serde_json::Value = serde_json::from_str(&r.payload).expect("json");
            claimed_n.push(v["n"].as_i64().expect("n"));
        }
    }
    assert!(
        claims >= 8,
        "40 events of 100 KB in claims of 450 KB: {claims} claims"
    );
    assert_eq!(claimed_n.len(), 40, "every event claimed once");
    for key in 0..4 {
        let order: Vec<i64> = claimed_n.iter().copied().filter(|n| n % 4 == key).collect();
        let mut sorted = order.clone();
        sorted.sort_unstable();
        assert_eq!(order, sorted, "key k{key} out of order");
    }
    // Heads cut by bytes are a backlog to share: the claim says it is full.
    db.exec(
        "INSERT INTO outbox (topic, payload)
         SELECT 'big', jsonb_build_object('pad', repeat('x', 100000)) FROM generate_series(1, 10)",
    )
    .await;
    let mut c = db.conn().await;
    c.batch_execute("BEGIN").await.expect("begin");
    let claim = claim_chains(&mut c, limits).await.expect("claim");
    assert_eq!(
        claim.heads, 5,
        "4 heads under 450 KB, and the one that crosses it"
    );
    assert!(claim.full);
    c.batch_execute("ROLLBACK").await.expect("rollback");
}
