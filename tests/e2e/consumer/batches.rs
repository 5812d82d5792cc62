//! Batch handlers: whole batches, a failed batch delivered again, and one batch holding the
//! entries of several topics.

use super::*;

/// A batch handler over several topics gets what one read returned: entries of all of them
/// in one call (one transaction for an inbox), merged in stream-id order.
#[tokio::test(flavor = "multi_thread")]
async fn a_batch_over_several_topics_holds_entries_of_each() {
    let redis = TestRedis::shared();
    for n in 0..10 {
        for topic in ["both.x", "both.y"] {
            xadd_event(&redis, topic, None, &serde_json::json!({ "n": n })).await;
        }
    }
    // Each batch's (topic, stream id)s.
    type Batches = Vec<Vec<(String, String)>>;
    let batches: Arc<Mutex<Batches>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let config = library_config(&redis, "both.x", "batches").topics(["both.x", "both.y"]);
    let consumer = Consumer::new(config).expect("config");
    let run = consumer.run(
        Batches(|entries: Vec<Entry>| {
            let (batches, stop) = (batches.clone(), stop.clone());
            async move {
                let mut batches = batches.lock().map_err(|_| HandlerError::retry("lock"))?;
                batches.push(
                    entries
                        .into_iter()
                        .map(|e| (e.topic, e.stream_id))
                        .collect(),
                );
                if batches.iter().map(Vec::len).sum::<usize>() == 20 {
                    stop.notify_one();
                }
                Ok::<(), HandlerError>(())
            }
        }),
        notified(&stop),
    );
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("all 20 entries handled");
    let batches = batches.lock().expect("lock").clone();
    assert_eq!(batches.len(), 1, "one read, one batch: {batches:?}");
    let topics: HashSet<&str> = batches[0].iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(topics, HashSet::from(["both.x", "both.y"]));
    let mut ids: Vec<&str> = batches[0].iter().map(|(_, id)| id.as_str()).collect();
    let unsorted = ids.clone();
    ids.sort_by_key(|id| {
        let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
        (
            ms.parse::<u64>().unwrap_or(0),
            seq.parse::<u64>().unwrap_or(0),
        )
    });
    assert_eq!(ids, unsorted, "entries merged in stream-id order");
    for topic in ["both.x", "both.y"] {
        assert_eq!(group_pending(&redis, topic, GROUP).await.0, 0, "{topic}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_handler_gets_whole_batches_and_a_failed_batch_again() {
    let redis = TestRedis::shared();
    let mut ids = Vec::new();
    for n in 0..10 {
        ids.push(xadd_event(&redis, "batches", Some("k"), &serde_json::json!({ "n": n })).await);
    }
    // Each call's entries as (event id, delivery).
    type Calls = Vec<Vec<(uuid::Uuid, u64)>>;
    let calls: Arc<Mutex<Calls>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = Consumer::new(library_config(&redis, "batches", "solo")).expect("config");
    let run = consumer.run(
        Batches(|entries: Vec<Entry>| {
            let (calls, stop) = (calls.clone(), stop.clone());
            async move {
                let mut calls = calls.lock().expect("lock");
                calls.push(entries.iter().map(|e| (e.id, e.deliveries)).collect());
                if calls.len() == 1 {
                    return Err(HandlerError::retry("the first batch fails"));
                }
                stop.notify_one();
                Ok(())
            }
        }),
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the batch handled on its second delivery");
    let calls = calls.lock().expect("lock").clone();
    let first: Vec<(uuid::Uuid, u64)> = ids.iter().map(|id| (*id, 1)).collect();
    let second: Vec<(uuid::Uuid, u64)> = ids.iter().map(|id| (*id, 2)).collect();
    assert_eq!(
        calls,
        vec![first, second],
        "one batch, in stream order, twice"
    );
    assert_eq!((stats.handled, stats.failed), (10, 10));
    assert_eq!(group_pending(&redis, "batches", GROUP).await.0, 0);
}
