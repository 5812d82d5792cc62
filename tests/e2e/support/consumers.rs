//! Consumers for the consumer-side tests: `consumer/examples/inbox_consumer` processes (spawned,
//! SIGKILLed, their logs read), the group's state in Redis, and stream entries written the
//! way the relay writes them.

use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use redis::AsyncCommands;
use uuid::Uuid;

use super::process::Logged;
use super::{eventually, produce_rounds, Rounds, TestDb, TestRedis, BIN};

/// The group the consumer tests' example consumers join.
pub const EFFECTS_GROUP: &str = "effects";

/// [`eventually`] for a check that says what it saw: polls `check` until it returns `Ok`, or
/// panics after `timeout` with its last `Err`.
pub async fn wait_until<F, Fut>(timeout: Duration, check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    eventually(timeout, "the check to pass", check).await
}

/// Each event of `topic` in the outbox that is not poison has exactly one row in
/// `example_effects`, and no poison event has one.
pub async fn assert_effects_exactly_once(db: &TestDb, topic: &str) {
    let doubled = db
        .scalar(
            "SELECT count(*) FROM (SELECT event_id FROM example_effects
             GROUP BY event_id HAVING count(*) > 1) d",
        )
        .await;
    assert_eq!(doubled, 0, "events applied more than once");
    let missing = db
        .scalar(&format!(
            "SELECT count(*) FROM outbox o WHERE o.topic = '{topic}'
             AND NOT coalesce((o.payload->>'poison')::boolean, false)
             AND NOT EXISTS (SELECT 1 FROM example_effects e WHERE e.event_id = o.id)"
        ))
        .await;
    assert_eq!(missing, 0, "events never applied");
    let poisoned = db
        .scalar(
            "SELECT count(*) FROM example_effects e JOIN outbox o ON o.id = e.event_id
             WHERE (o.payload->>'poison')::boolean",
        )
        .await;
    assert_eq!(poisoned, 0, "a poison event's effect committed");
}

/// Waits until `applied` distinct events are in `example_effects`, `dead` entries are in the
/// dead stream and group [`EFFECTS_GROUP`] has nothing pending.
pub async fn wait_settled(db: &TestDb, redis: &TestRedis, topic: &str, applied: i64, dead: usize) {
    // The consumers create the table as they start.
    db.wait_for(
        "SELECT count(*) FROM pg_tables WHERE tablename = 'example_effects'",
        1,
        Duration::from_secs(30),
    )
    .await;
    wait_until(Duration::from_secs(120), || async {
        let got = db
            .scalar("SELECT count(DISTINCT event_id) FROM example_effects")
            .await;
        let dead_now = redis.xlen(&format!("{topic}:dead")).await;
        // The consumers make the group as they start.
        let pending = match try_group_pending(redis, topic, EFFECTS_GROUP).await {
            Ok((pending, _)) => pending,
            Err(e) => return Err(format!("applied {got}/{applied}: {e}")),
        };
        if got == applied && dead_now == dead && pending == 0 {
            Ok(())
        } else {
            let mut errors: Vec<String> = redis
                .entries(&format!("{topic}:dead"))
                .await
                .into_iter()
                .map(|e| format!("{} {}: {}", e["id"], e["deliveries"], e["error"]))
                .collect();
            errors.truncate(5);
            Err(format!(
                "applied {got}/{applied}, dead {dead_now}/{dead} {errors:?}, pending {pending}"
            ))
        }
    })
    .await;
}

/// What [`sigkill_while_producing`] does.
pub struct Chaos {
    /// Example consumers of [`EFFECTS_GROUP`] on topic t0 at once.
    pub consumers: usize,
    /// Poison events inserted first.
    pub poison: usize,
    /// Rounds of 50 events.
    pub rounds: usize,
    /// Partition keys of those events.
    pub keys: usize,
    /// SIGKILLs at least, also after the producer is done.
    pub min_kills: usize,
}

/// The chaos run's consumers' arguments.
pub const CHAOS_ARGS: &[&str] = &[
    "--claim-idle",
    "2s",
    // A kill while an entry is in hand costs it a delivery: a margin so that only the poison
    // events reach the limit.
    "--max-deliveries",
    "10",
    "--batch-size",
    "50",
    "--retry-base",
    "50ms",
    // Few database connections each: the killed ones' linger a moment on a shared server.
    "--concurrency",
    "4",
];

/// Runs the consumers while events of t0 are produced, SIGKILLing one at random every
/// 100-600 ms and restarting it, half the time under its old name (its pending entries are its
/// own again at once), half under a new one (they wait for `--claim-idle` and another
/// consumer). Returns once every event is applied exactly once, each poison event is in the
/// dead stream (after 10 deliveries) and nothing is pending.
pub async fn sigkill_while_producing(db: &TestDb, redis: &TestRedis, chaos: Chaos) {
    use rand::Rng;
    let spawn =
        |name: &str| ExampleConsumer::spawn(db, redis, "t0", EFFECTS_GROUP, name, CHAOS_ARGS);
    let mut consumers: Vec<ExampleConsumer> = (0..chaos.consumers)
        .map(|i| spawn(&format!("c{i}")))
        .collect();
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't0', jsonb_build_object('poison', true, 'n', -i), 'k' || i
         FROM generate_series(1, {}) AS i",
        chaos.poison
    ))
    .await;
    let producer = tokio::spawn({
        let url = db.url.clone();
        let (rounds, keys) = (chaos.rounds, chaos.keys);
        async move {
            produce_rounds(
                &url,
                Rounds {
                    rounds,
                    per_round: 50,
                    keys,
                    pause: Duration::from_millis(50),
                    ..Rounds::default()
                },
            )
            .await
        }
    });
    let mut kills = 0;
    let mut rng = rand::rng();
    while !producer.is_finished() || kills < chaos.min_kills {
        let pause = rng.random_range(100..600);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let victim = rng.random_range(0..consumers.len());
        consumers[victim].kill9();
        kills += 1;
        let name = if rng.random_bool(0.5) {
            consumers[victim].name.clone()
        } else {
            format!("c{victim}-{kills}")
        };
        consumers[victim] = spawn(&name);
    }
    producer.await.expect("producer");
    db.wait_until_published(Duration::from_secs(60)).await;
    let events = (chaos.rounds * 50) as i64;
    wait_settled(db, redis, "t0", events, chaos.poison).await;
    assert_effects_exactly_once(db, "t0").await;
}

/// `target/<profile>/examples/inbox_consumer`, the consumer library's example, built beside the
/// relay binary by `cargo test --workspace` (or `cargo build -p outbox-consumer --examples
/// --all-features`).
pub fn example_bin() -> PathBuf {
    let dir = std::path::Path::new(BIN)
        .parent()
        .expect("the binary's directory");
    let bin = dir.join("examples").join("inbox_consumer");
    // `cargo test --workspace` builds the consumer's examples, but not `cargo test --test
    // e2e`: a stale binary would test old code.
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} is missing: run `cargo build -p outbox-consumer --examples --all-features` (`cargo test --workspace` builds it too)",
                bin.display()
            )
        });
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources = vec![
        root.join("consumer/examples/inbox_consumer.rs"),
        root.join("consumer/Cargo.toml"),
    ];
    // Every file of the two crates' sources, their module folders included.
    let mut dirs = vec![root.join("consumer/src"), root.join("core/src")];
    while let Some(dir) = dirs.pop() {
        let entries =
            std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("list {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else {
                sources.push(path);
            }
        }
    }
    // A source whose time cannot be read could be the newer one: it fails the check too.
    for source in sources {
        let changed = std::fs::metadata(&source)
            .and_then(|m| m.modified())
            .unwrap_or_else(|e| panic!("the time of {}: {e}", source.display()));
        assert!(
            changed <= built,
            "{} is older than {}: run `cargo build -p outbox-consumer --examples --all-features` first",
            bin.display(),
            source.display()
        );
    }
    bin
}

/// A running `inbox_consumer` example.
pub struct ExampleConsumer {
    pub name: String,
    process: Logged,
}

impl std::ops::Deref for ExampleConsumer {
    type Target = Logged;
    fn deref(&self) -> &Logged {
        &self.process
    }
}

impl std::ops::DerefMut for ExampleConsumer {
    fn deref_mut(&mut self) -> &mut Logged {
        &mut self.process
    }
}

impl ExampleConsumer {
    /// Starts consumer `name` of `group` on `topic`, with the test's database and key prefix,
    /// and `args` after the required ones; its log in the temp dir.
    pub fn spawn(
        db: &TestDb,
        redis: &TestRedis,
        topic: &str,
        group: &str,
        name: &str,
        args: &[&str],
    ) -> ExampleConsumer {
        Self::spawn_with_env(db, redis, topic, group, name, args, &[])
    }

    /// [`ExampleConsumer::spawn`] with more environment variables.
    pub fn spawn_with_env(
        db: &TestDb,
        redis: &TestRedis,
        topic: &str,
        group: &str,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> ExampleConsumer {
        let log = std::env::temp_dir().join(format!(
            "inbox-consumer-{name}-{}.log",
            Uuid::new_v4().simple()
        ));
        let mut cmd = Command::new(example_bin());
        cmd.args(["--topic", topic, "--group", group, "--consumer", name])
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("DATABASE_URL", &db.url)
            .env("REDIS_URL", &redis.url)
            .env("OUTBOX__REDIS__STREAM_PREFIX", &redis.prefix)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied());
        if redis.cluster {
            cmd.env("OUTBOX__REDIS__CLUSTER", "true");
        }
        ExampleConsumer {
            name: name.to_string(),
            process: Logged::spawn(cmd, log),
        }
    }
}

/// The group's pending entries on `topic`'s stream: the total, and per consumer. Panics when
/// Redis does not answer or the group does not exist (a group never made has nothing pending,
/// but a test that expects it has a bug to see).
pub async fn group_pending(
    redis: &TestRedis,
    topic: &str,
    group: &str,
) -> (usize, Vec<(String, usize)>) {
    try_group_pending(redis, topic, group)
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// [`group_pending`], or what went wrong (for a poll that may run before the group exists).
pub async fn try_group_pending(
    redis: &TestRedis,
    topic: &str,
    group: &str,
) -> Result<(usize, Vec<(String, usize)>), String> {
    let mut c = redis.reader().await;
    let stream = redis.stream(topic);
    let reply: redis::streams::StreamPendingReply = c
        .xpending(&stream, group)
        .await
        .map_err(|e| format!("XPENDING {stream} {group}: {e}"))?;
    Ok(match reply {
        redis::streams::StreamPendingReply::Data(data) => (
            data.count,
            data.consumers
                .into_iter()
                .map(|c| (c.name, c.pending))
                .collect(),
        ),
        _ => (0, Vec::new()),
    })
}

/// Appends an entry to `topic`'s stream with the relay's fields; returns the event id.
pub async fn xadd_event(
    redis: &TestRedis,
    topic: &str,
    key: Option<&str>,
    payload: &serde_json::Value,
) -> Uuid {
    xadd_event_at(redis, topic, "*", key, payload).await
}

/// [`xadd_event`] with the stream id given (`"*"`: Redis picks it), so that tests can make
/// two streams hold entries of the same ids.
pub async fn xadd_event_at(
    redis: &TestRedis,
    topic: &str,
    stream_id: &str,
    key: Option<&str>,
    payload: &serde_json::Value,
) -> Uuid {
    let id = Uuid::new_v4();
    let mut fields: Vec<(&str, String)> = vec![
        ("id", id.to_string()),
        ("topic", topic.to_string()),
        ("payload", payload.to_string()),
        ("headers", "{}".to_string()),
        ("created_at", "2026-12-02T13:57:01.123456Z".to_string()),
    ];
    if let Some(key) = key {
        fields.push(("key", key.to_string()));
    }
    let mut c = redis.conn().await;
    let _: String = c
        .xadd(redis.stream(topic), stream_id, &fields)
        .await
        .expect("xadd");
    id
}

/// Each applied `n` (the payload's) of partition key `key`, in the order the example
/// consumers applied the effects.
pub async fn applied_in_order(db: &TestDb, key: &str) -> Vec<i64> {
    let text = db
        .text(&format!(
            "SELECT coalesce(json_agg((o.payload->>'n')::bigint ORDER BY e.applied_at), '[]')::text
             FROM example_effects e JOIN outbox o ON o.id = e.event_id
             WHERE o.partition_key = '{key}'"
        ))
        .await;
    serde_json::from_str(&text).expect("a JSON list")
}

/// Waits until the admin API lists exactly one parked key of `group` on t0, `key`, holding
/// `held` entries; returns the list.
pub async fn wait_group_parked(
    admin: &super::Http,
    group: &str,
    key: &str,
    held: i64,
) -> serde_json::Value {
    let path = format!("/api/v1/topics/t0/groups/{group}/parked");
    super::eventually(Duration::from_secs(60), "the key parked", || async {
        let res = admin.get(&path);
        let keys = &res.json["keys"];
        (keys.as_array().is_some_and(|k| k.len() == 1)
            && keys[0]["key"] == key
            && keys[0]["held"] == held)
            .then(|| res.json.clone())
    })
    .await
}

/// Waits until `n` effects of partition key `key` are applied.
pub async fn wait_applied(db: &TestDb, key: &str, n: usize) {
    wait_until(Duration::from_secs(60), || async {
        match applied_in_order(db, key).await.len() {
            got if got == n => Ok(()),
            got => Err(format!("{key}: {got} of {n} applied")),
        }
    })
    .await;
}

/// Example consumers that park keys: two deliveries, quick retries, a short claim.
pub const PARK_ARGS: &[&str] = &[
    "--park-keys",
    "--max-deliveries",
    "2",
    "--retry-base",
    "50ms",
    "--claim-idle",
    "2s",
    "--concurrency",
    "4",
];

/// Ten events (`n` 1 to 10) of each key `k0` to `k<keys - 1>` on t0, interleaved; the 4th of
/// `k2` is poison.
pub async fn insert_with_poison_in_k2(db: &TestDb, keys: u32) {
    db.exec(&format!(
        "INSERT INTO outbox (topic, payload, partition_key)
         SELECT 't0', jsonb_build_object('n', n, 'poison', k = 2 AND n = 4), 'k' || k
         FROM generate_series(1, 10) AS n, generate_series(0, {}) AS k ORDER BY n, k",
        keys - 1
    ))
    .await;
}
