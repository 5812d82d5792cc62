//! What a failing entry or handler does: a malformed entry or an unparsable typed payload is
//! dead-lettered and its key flows on; a panic fails only its entry; a handler's error says
//! retry, dead-letter now or outage.

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn a_malformed_entry_is_dead_lettered_and_its_key_flows_on() {
    let redis = TestRedis::shared();
    let first = xadd_event(&redis, "mixed", Some("k"), &serde_json::json!({"n": 1})).await;
    let mut c = redis.conn().await;
    let _: String = redis::AsyncCommands::xadd(
        &mut c,
        redis.stream("mixed"),
        "*",
        &[("id", "not-a-uuid"), ("topic", "mixed"), ("key", "k")],
    )
    .await
    .expect("xadd");
    let last = xadd_event(&redis, "mixed", Some("k"), &serde_json::json!({"n": 3})).await;

    let seen: Arc<Mutex<Vec<uuid::Uuid>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = Consumer::new(library_config(&redis, "mixed", "solo")).expect("config");
    let run = consumer.run(
        |entry: Entry| {
            let (seen, stop) = (seen.clone(), stop.clone());
            async move {
                let mut seen = seen.lock().expect("lock");
                seen.push(entry.id);
                if seen.len() == 2 {
                    stop.notify_one();
                }
                Ok::<(), HandlerError>(())
            }
        },
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("both good entries handled");
    assert_eq!(*seen.lock().expect("lock"), vec![first, last]);
    assert_eq!(stats.dead_lettered, 1);
    let dead = redis.entries("mixed:dead").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0]["id"], "not-a-uuid");
    assert_eq!(dead[0]["key"], "k");
    assert!(
        dead[0]["error"].starts_with("malformed entry"),
        "{}",
        dead[0]["error"]
    );
    assert_eq!(dead[0]["group"], GROUP);
    assert_eq!(group_pending(&redis, "mixed", GROUP).await.0, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panicking_handler_fails_its_entry_and_the_consumer_goes_on() {
    let redis = TestRedis::shared();
    let id = xadd_event(&redis, "panics", Some("k"), &serde_json::json!({"n": 1})).await;
    let deliveries: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = Consumer::new(library_config(&redis, "panics", "solo")).expect("config");
    let run = consumer.run(
        |entry: Entry| {
            let (deliveries, stop) = (deliveries.clone(), stop.clone());
            async move {
                deliveries.lock().expect("lock").push(entry.deliveries);
                assert!(entry.deliveries > 1, "first delivery panics (on purpose)");
                assert_eq!(entry.id, id);
                stop.notify_one();
                Ok::<(), HandlerError>(())
            }
        },
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("handled on the second delivery");
    assert_eq!(*deliveries.lock().expect("lock"), vec![1, 2]);
    assert_eq!((stats.failed, stats.handled), (1, 1));
    assert_eq!(group_pending(&redis, "panics", GROUP).await.0, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handler_error_says_retry_dead_letter_now_or_outage() {
    let redis = TestRedis::shared();
    for kind in ["retry", "dead", "outage"] {
        xadd_event(
            &redis,
            "kinds",
            Some(kind),
            &serde_json::json!({ "kind": kind }),
        )
        .await;
    }
    // Each call as (kind, delivery number the entry carried).
    let calls: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let config = library_config(&redis, "kinds", "solo").max_deliveries(3);
    let consumer = Consumer::new(config).expect("config");
    let run = consumer.run(
        |entry: Entry| {
            let (calls, stop) = (calls.clone(), stop.clone());
            async move {
                let kind = entry.payload["kind"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let mut calls = calls.lock().map_err(|_| HandlerError::retry("lock"))?;
                calls.push((kind.clone(), entry.deliveries));
                let tries = calls.iter().filter(|(k, _)| *k == kind).count();
                let done = |calls: &[(String, u64)]| {
                    ["retry", "outage"].iter().all(|k| {
                        calls.iter().filter(|(c, _)| c == k).count()
                            == if *k == "retry" { 3 } else { 5 }
                    })
                };
                let result = match (kind.as_str(), tries) {
                    ("retry", 1..=2) => Err(HandlerError::retry("try again")),
                    ("dead", _) => Err(HandlerError::dead_letter("never valid")),
                    // More outages than max_deliveries: none of them may count.
                    ("outage", 1..=4) => Err(HandlerError::outage("database away")),
                    _ => Ok(()),
                };
                if done(&calls) {
                    stop.notify_one();
                }
                result
            }
        },
        notified(&stop),
    );
    let stats = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("all three settled");
    let calls = calls.lock().expect("lock").clone();
    let of = |kind: &str| -> Vec<u64> {
        calls
            .iter()
            .filter(|(k, _)| k == kind)
            .map(|(_, d)| *d)
            .collect()
    };
    assert_eq!(of("retry"), vec![1, 2, 3], "retries count deliveries");
    assert_eq!(of("dead"), vec![1], "dead-lettered at the first failure");
    assert_eq!(
        of("outage"),
        vec![1, 1, 1, 1, 1],
        "outages spend no delivery"
    );
    assert_eq!(redis.xlen("kinds:dead").await, 1);
    let dead = redis.entries("kinds:dead").await;
    assert_eq!(
        dead[0].get("error").map(String::as_str),
        Some("never valid")
    );
    assert_eq!(dead[0].get("deliveries").map(String::as_str), Some("1"));
    assert_eq!(
        (stats.handled, stats.dead_lettered, stats.failed),
        (2, 1, 2)
    );
    assert_eq!(group_pending(&redis, "kinds", GROUP).await.0, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_typed_payload_that_does_not_parse_is_dead_lettered_at_once() {
    #[derive(serde::Deserialize)]
    struct Order {
        order_id: u64,
    }
    let redis = TestRedis::shared();
    xadd_event(&redis, "typed", None, &serde_json::json!({ "order_id": 7 })).await;
    xadd_event(
        &redis,
        "typed",
        None,
        &serde_json::json!({ "order_id": "x" }),
    )
    .await;
    let orders: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = Consumer::new(library_config(&redis, "typed", "solo")).expect("config");
    let run = consumer.run(
        |entry: Entry| {
            let (orders, stop) = (orders.clone(), stop.clone());
            async move {
                let order: Order = entry.payload_as().map_err(HandlerError::dead_letter)?;
                orders.lock().expect("lock").push(order.order_id);
                stop.notify_one();
                Ok::<(), HandlerError>(())
            }
        },
        notified(&stop),
    );
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("handled");
    wait_until(Duration::from_secs(10), || async {
        match redis.xlen("typed:dead").await {
            1 => Ok(()),
            n => Err(format!("{n} dead letters")),
        }
    })
    .await;
    assert_eq!(*orders.lock().expect("lock"), vec![7]);
}
