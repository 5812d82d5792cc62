//! The CloudEvents envelope (`redis.envelope`, a topic's `envelope`): its entries are `id` +
//! `cloudevent`, which the CloudEvents Python SDK reads as is, attribute by attribute as the
//! contract says; `tail`, the consumer library (typed payloads, the attributes on `Entry`, a
//! partitioned topic) and the inbox example (SIGKILLed, each event once) read these topics
//! like any other; a traced event's `traceparent` names its publish span and the consumer's
//! span is that span's child.

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outbox_consumer::{Consumer, ConsumerConfig, Entry, HandlerError};

use crate::support::*;
use crate::tail::{lines, tail_output};

/// The settings of the first test: CloudEvents by default, one topic in the default entry,
/// one partitioned.
const CONFIG: &str = r#"
[redis]
envelope = "cloudevents"
cloudevents_source = "/shop/orders"

[[topics]]
name = "audit"
envelope = "fields"

[[topics]]
name = "ce.parts"
partitions = 4
"#;

const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// What the outbox holds of each event, by id: topic, key, payload, headers, `created_at` in
/// microseconds since the epoch.
async fn outbox_events(db: &TestDb) -> HashMap<String, serde_json::Value> {
    let text = db
        .text(
            "SELECT json_object_agg(id::text, json_build_object(
                 'topic', topic, 'key', partition_key, 'payload', payload, 'headers', headers,
                 'time_us', (extract(epoch FROM created_at) * 1000000)::bigint))::text
             FROM outbox",
        )
        .await;
    serde_json::from_str(&text).expect("the outbox as JSON")
}

/// The events read by the SDK from `fields` (each a `cloudevent` field's text).
fn read_by_the_sdk(fields: &[String]) -> Vec<serde_json::Value> {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/outside/read_cloudevents.py");
    let mut child = Command::new(api_tool("python"))
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python starts");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for field in fields {
            writeln!(stdin, "{field}").expect("write a field");
        }
    }
    let out = child.wait_with_output().expect("python ends");
    assert!(
        out.status.success(),
        "the SDK refused an entry: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(read.len(), fields.len(), "one event per field");
    read
}

/// The `cloudevent` fields of `topic`'s stream `stream`, checking that each entry has exactly
/// `id` and `cloudevent`.
async fn cloudevent_fields(redis: &TestRedis, stream: &str) -> Vec<(String, String)> {
    redis
        .entries(stream)
        .await
        .into_iter()
        .map(|entry| {
            let mut names: Vec<&str> = entry.keys().map(String::as_str).collect();
            names.sort_unstable();
            assert_eq!(names, ["cloudevent", "id"], "{entry:?}");
            (entry["id"].clone(), entry["cloudevent"].clone())
        })
        .collect()
}

#[derive(serde::Deserialize, Debug, PartialEq)]
struct Order {
    n: i64,
    note: String,
}

#[tokio::test(flavor = "multi_thread")]
async fn cloudevents_entries_are_read_by_the_sdk_tail_and_the_consumer_library() {
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let (_dir, config) = config_file(CONFIG);
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key, headers)
         SELECT 'ce.orders', jsonb_build_object('n', i, 'note', 'a \"quoted\" é ' || i),
                CASE WHEN i % 5 = 0 THEN NULL ELSE 'k' || (i % 3) END,
                CASE WHEN i % 2 = 0 THEN jsonb_build_object('type', 'com.shop.order.created', 'x', i)
                     ELSE '{{}}'::jsonb END
         FROM generate_series(1, 30) AS i;
         INSERT INTO outbox (topic, payload, partition_key, headers) VALUES
         ('ce.orders', '{{\"n\": 31, \"note\": \"traced\"}}', 'k1',
          '{{\"traceparent\": \"{TRACEPARENT}\", \"tracestate\": \"congo=t61rcWkgMzE\"}}');
         INSERT INTO outbox (topic, payload, partition_key)
         SELECT 'audit', jsonb_build_object('n', i), 'a' FROM generate_series(1, 5) AS i;
         INSERT INTO outbox (topic, payload, partition_key)
         SELECT 'ce.parts', jsonb_build_object('n', i, 'note', 'p'), 'p' || (i % 8)
         FROM generate_series(1, 40) AS i;"
    ))
    .await;
    let _relay = RelayProc::spawn_with_config("ce", &base_env(&db, &redis), &config);
    db.wait_until_published(Duration::from_secs(30)).await;
    let outbox = outbox_events(&db).await;

    // The entries: `id` and `cloudevent`, read by the SDK attribute by attribute.
    let fields = cloudevent_fields(&redis, "ce.orders").await;
    assert_eq!(fields.len(), 31);
    let bodies: Vec<String> = fields.iter().map(|(_, body)| body.clone()).collect();
    let mut last_n: HashMap<String, i64> = HashMap::new();
    for ((id, _), read) in fields.iter().zip(read_by_the_sdk(&bodies)) {
        let event = &outbox[id];
        let attributes = &read["attributes"];
        assert_eq!(attributes["specversion"], "1.0");
        assert_eq!(&attributes["id"], id, "the entry's id is the event's");
        assert_eq!(attributes["source"], "/shop/orders");
        let ty = event["headers"]["type"].as_str().unwrap_or("ce.orders");
        assert_eq!(attributes["type"], ty, "the type header, else the topic");
        assert_eq!(attributes["datacontenttype"], "application/json");
        assert_eq!(read["data"], event["payload"]);
        assert_eq!(attributes["partitionkey"], event["key"], "{read}");
        assert_eq!(read["time_us"], event["time_us"], "time is created_at");
        let n = event["payload"]["n"].as_i64().expect("n");
        if n == 31 {
            assert_eq!(attributes["traceparent"], TRACEPARENT);
            assert_eq!(attributes["tracestate"], "congo=t61rcWkgMzE");
        } else {
            assert!(attributes.get("traceparent").is_none(), "{read}");
            assert!(
                attributes.get("x").is_none(),
                "other headers are not attributes"
            );
        }
        if let Some(key) = event["key"].as_str() {
            if let Some(prev) = last_n.insert(key.to_string(), n) {
                assert!(n > prev, "key {key}: {n} after {prev}");
            }
        }
    }
    // A topic listed with `envelope = "fields"` keeps the default entry.
    let audit = redis.entries("audit").await;
    assert_eq!(audit.len(), 5);
    assert!(audit.iter().all(|e| e["topic"] == "audit"
        && e.contains_key("payload")
        && !e.contains_key("cloudevent")));
    // A partitioned topic: each key in its partition's stream, as CloudEvents.
    let mut parts = 0;
    for p in 0..4 {
        for (id, body) in cloudevent_fields(&redis, &format!("ce.parts:{p}")).await {
            let key = outbox[&id]["key"].as_str().expect("keyed").to_string();
            assert_eq!(outbox_core::partition::for_key(&key, 4), p, "{key}");
            assert!(
                body.contains(&format!("\"partitionkey\":\"{key}\"")),
                "{body}"
            );
            parts += 1;
        }
    }
    assert_eq!(parts, 40);

    // `tail` prints them as any entry, with the attributes beside.
    let out = tail_output(&redis, &["ce.orders", "--from", "0", "--count", "31"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = lines(&out);
    assert_eq!(printed.len(), 31);
    for line in &printed {
        let event = &outbox[line["id"].as_str().expect("id")];
        assert_eq!(line["topic"], "ce.orders");
        assert_eq!(line["payload"], event["payload"]);
        assert_eq!(line["key"], event["key"]);
        assert_eq!(line["cloudevent"]["source"], "/shop/orders", "{line}");
    }
    let out = tail_output(&redis, &["ce.parts", "--from", "0", "--count", "40"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(lines(&out).iter().all(|l| l["topic"] == "ce.parts"));

    // The consumer library: typed payloads, the attributes on `Entry`, on both topics.
    for (topic, n) in [("ce.orders", 31), ("ce.parts", 40)] {
        let seen = consume(&redis, topic, n).await;
        let mut last: HashMap<String, i64> = HashMap::new();
        for entry in &seen {
            let event = &outbox[&entry.id.to_string()];
            assert_eq!(entry.topic, topic);
            assert_eq!(entry.key.as_deref(), event["key"].as_str());
            let order: Order = entry.payload_as().expect("a typed payload");
            assert_eq!(
                serde_json::json!({"n": order.n, "note": order.note}),
                event["payload"]
            );
            let attributes = entry
                .cloudevent
                .as_ref()
                .expect("the CloudEvents attributes");
            assert_eq!(attributes.source, "/shop/orders");
            assert_eq!(attributes.partitionkey.as_deref(), entry.key.as_deref());
            assert_eq!(
                entry.created_at.timestamp_micros(),
                event["time_us"].as_i64().expect("time")
            );
            match event["headers"]["type"].as_str() {
                Some(ty) => {
                    assert_eq!(attributes.ty, ty);
                    assert_eq!(entry.headers["type"], ty, "the type header read back");
                }
                None => assert_eq!(attributes.ty, topic),
            }
            if topic == "ce.orders" && order.n == 31 {
                assert_eq!(entry.headers["traceparent"], TRACEPARENT);
            }
            if let Some(key) = &entry.key {
                if let Some(prev) = last.insert(key.clone(), order.n) {
                    assert!(
                        order.n > prev,
                        "{topic} key {key}: {} after {prev}",
                        order.n
                    );
                }
            }
        }
    }
}

/// The entries of `topic` a library consumer handles until it has `n` distinct ones, in the
/// order handled.
async fn consume(redis: &TestRedis, topic: &str, n: usize) -> Vec<Entry> {
    let seen: Arc<Mutex<Vec<Entry>>> = Arc::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let config = ConsumerConfig::new(&redis.url, topic, "ce-readers")
        .stream_prefix(&redis.prefix)
        .consumer("reader")
        .block(Duration::from_millis(200));
    let consumer = Consumer::new(config).expect("config");
    let run = consumer.run(
        |entry: Entry| {
            let (seen, stop) = (seen.clone(), stop.clone());
            async move {
                let mut seen = seen.lock().map_err(|_| HandlerError::retry("lock"))?;
                seen.push(entry);
                if seen.len() == n {
                    stop.notify_one();
                }
                Ok::<(), HandlerError>(())
            }
        },
        {
            let stop = stop.clone();
            async move { stop.notified().await }
        },
    );
    let stats = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| panic!("{topic}: {n} entries handled within a minute"));
    assert_eq!(stats.dead_lettered, 0, "no entry refused");
    let seen = seen.lock().expect("lock").clone();
    let ids: HashSet<uuid::Uuid> = seen.iter().map(|e| e.id).collect();
    assert_eq!(ids.len(), n, "each entry once");
    seen
}

#[tokio::test(flavor = "multi_thread")]
async fn the_inbox_example_applies_each_cloudevent_once_through_sigkills() {
    let Bundle {
        db,
        redis,
        relay: _relay,
    } = setup("ce-inbox", &[("OUTBOX__REDIS__ENVELOPE", "cloudevents")]).await;
    let chaos = Chaos {
        consumers: 2,
        poison: 2,
        rounds: 12,
        keys: 10,
        min_kills: 5,
    };
    sigkill_while_producing(&db, &redis, chaos).await;
    let fields = cloudevent_fields(&redis, "t0").await;
    assert_eq!(
        fields.len(),
        12 * 50 + 2,
        "every event once, as a CloudEvent"
    );
    // The poison events' dead entries keep the CloudEvent.
    let dead = redis.entries("t0:dead").await;
    assert_eq!(dead.len(), 2);
    assert!(
        dead.iter().all(|e| e.contains_key("cloudevent")),
        "{dead:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_traced_cloudevent_names_its_publish_span_and_the_consumer_continues_it() {
    let receiver = OtlpReceiver::start().await;
    let db = TestDb::new().await;
    let redis = TestRedis::shared();
    let otel = receiver.env();
    let mut env = receiver.relay_env(&db, &redis);
    env.push(("OUTBOX__REDIS__ENVELOPE".into(), "cloudevents".into()));
    let _relay = RelayProc::spawn("ce-traces", &env);
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key, headers) VALUES
         ('t0', '{{\"n\": 1}}', 'k', '{{\"traceparent\": \"{TRACEPARENT}\", \"type\": \"shop.t\"}}')"
    ))
    .await;
    db.wait_until_published(Duration::from_secs(30)).await;
    let fields = cloudevent_fields(&redis, "t0").await;
    let event: serde_json::Value = serde_json::from_str(&fields[0].1).expect("json");
    let publish = receiver.span(|s| s.kind == PRODUCER_KIND).await;
    let written = event["traceparent"].as_str().expect("a traceparent");
    assert_eq!(
        written,
        format!("00-0af7651916cd43dd8448eb211c80319c-{}-01", publish.span_id),
        "the CloudEvent names the publish span"
    );
    assert_eq!(event["type"], "shop.t", "the rest as before");
    let otel_env: Vec<(&str, &str)> = otel.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let _consumer =
        ExampleConsumer::spawn_with_env(&db, &redis, "t0", "traced", "c0", &[], &otel_env);
    let process = receiver.span(|s| s.kind == CONSUMER_KIND).await;
    assert_eq!(process.parent_span_id, publish.span_id);
    assert_eq!(process.trace_id, "0af7651916cd43dd8448eb211c80319c");
}
