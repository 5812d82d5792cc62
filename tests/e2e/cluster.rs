//! Redis Cluster (`redis.cluster = true`): a local cluster of three masters, topics whose
//! streams live on every one of them, real relay processes given the seed list.

use std::time::Duration;

use crate::support::*;

/// Topics t0..t{TOPICS-1} of the test traffic.
const TOPICS: usize = 6;

/// A key prefix under which the streams of t0..t{topics-1} live on every master of `cluster`
/// (tried until one does); with each topic's master.
fn spread(cluster: &OwnCluster, topics: usize) -> (TestRedis, Vec<usize>) {
    for _ in 0..100 {
        let redis = cluster.test_redis();
        let owners: Vec<usize> = (0..topics)
            .map(|t| cluster.owner_of(&redis.stream(&format!("t{t}"))))
            .collect();
        if (0..3).all(|node| owners.contains(&node)) {
            return (redis, owners);
        }
    }
    panic!("no prefix spreads {topics} topics over three masters");
}

#[tokio::test(flavor = "multi_thread")]
async fn three_relays_deliver_exactly_once_in_key_order_across_three_masters() {
    let cluster = OwnCluster::start(3);
    let db = TestDb::new().await;
    let (redis, _) = spread(&cluster, TOPICS);
    insert_events(&db, 6_000, TOPICS, 40).await;
    let env = base_env(&db, &redis);
    let _relays: Vec<RelayProc> = (1..=3)
        .map(|i| RelayProc::spawn(&format!("c{i}"), &env))
        .collect();
    db.wait_until_published(Duration::from_secs(90)).await;
    assert_eq!(assert_exactly_once(&redis, TOPICS).await, 6_000);
    assert_eq!(
        db.scalar("SELECT count(*) FROM outbox WHERE attempts > 0 OR dead_at IS NOT NULL")
            .await,
        0
    );
}
